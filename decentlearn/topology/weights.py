"""Weight rules: how a graph's adjacency becomes its mixing matrix W.

Rules for undirected graphs, chosen by ``make(spec, n, weights=...)``, give symmetric doubly
stochastic W:

* ``metropolis``: w_ij = 1 / (1 + max(d_i, d_j)) (Metropolis-Hastings), any graph;
* ``max-degree``: w_ij = 1 / (1 + max_k d_k), any graph;
* ``uniform``: w_ij = 1 / (1 + d_i), regular graphs only;
* ``clique``: the equal-clique weighting of d-cliques (:func:`clique_weights`), graphs made of
  cliques only.

The self weight is what is left of each row. The per-round directed graphs use
:func:`column_weights` (push-sum: every sender splits its value equally, column-stochastic) or
:func:`row_weights` (averaging what arrives, row-stochastic). Every rule returns a canonical CSR
matrix with the diagonal stored (:func:`assemble`).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from decentlearn.topology.base import register_weights

__all__ = ["assemble", "clique_weights", "column_weights", "row_weights"]


def assemble(adj: sp.csr_array, off: np.ndarray, diag: np.ndarray | None = None) -> sp.csr_array:
    """W with off-diagonal values ``off`` on the (canonical) pattern of ``adj`` and diagonal
    ``diag`` (1 - row sum of ``off`` when not given), in canonical CSR form."""
    n = adj.shape[0]
    rows = np.repeat(np.arange(n), np.diff(adj.indptr))
    if diag is None:
        diag = 1.0 - np.bincount(rows, weights=off, minlength=n)
    # Insert each row's diagonal entry in place, keeping columns sorted, without a COO round trip.
    after = adj.indices > rows
    indptr = adj.indptr.astype(np.int64) + np.arange(n + 1)
    slot = indptr[:-1] + np.bincount(rows[~after], minlength=n)
    data = np.empty(adj.nnz + n)
    indices = np.empty(adj.nnz + n, dtype=np.int64)
    moved = np.arange(adj.nnz) + rows + after
    data[moved], indices[moved] = off, adj.indices
    data[slot], indices[slot] = diag, np.arange(n)
    w = sp.csr_array((data, indices, indptr), shape=(n, n))
    w.has_canonical_format = True
    return w


@register_weights("metropolis")
def _metropolis(adj: sp.csr_array, label: str, groups: np.ndarray | None) -> sp.csr_array:
    degree = np.diff(adj.indptr)
    rows = np.repeat(np.arange(adj.shape[0]), degree)
    return assemble(adj, 1.0 / (1.0 + np.maximum(degree[rows], degree[adj.indices])))


@register_weights("max-degree")
def _max_degree(adj: sp.csr_array, label: str, groups: np.ndarray | None) -> sp.csr_array:
    degree = np.diff(adj.indptr)
    return assemble(adj, np.full(adj.nnz, 1.0 / (1.0 + degree.max())))


@register_weights("uniform")
def _uniform(adj: sp.csr_array, label: str, groups: np.ndarray | None) -> sp.csr_array:
    degree = np.diff(adj.indptr)
    if degree.min() != degree.max():
        raise ValueError(
            f"weights='uniform' on {label} gives a mixing matrix that is not doubly stochastic: "
            f"peer degrees differ (from {degree.min()} to {degree.max()}) and w_ij = 1/(d_i + 1) "
            "is doubly stochastic only on regular graphs; use weights='metropolis' or 'max-degree'"
        )
    rows = np.repeat(np.arange(adj.shape[0]), degree)
    return assemble(adj, 1.0 / (1.0 + degree[rows]), 1.0 / (1.0 + degree))


@register_weights("clique")
def _clique(adj: sp.csr_array, label: str, groups: np.ndarray | None) -> sp.csr_array:
    if groups is None:
        raise ValueError(
            f"weights='clique' (equal-clique weighting) needs a topology made of cliques "
            f"(d-cliques), got {label}; use weights='metropolis'"
        )
    return clique_weights(adj, groups)


def clique_weights(adj: sp.csr_array, groups: np.ndarray) -> sp.csr_array:
    """The equal-clique weighting of D-Cliques (Bellet et al. 2022), as a canonical CSR matrix
    (diagonal included). ``adj``: symmetric 0/1 adjacency; ``groups``: clique id of every peer.

    SIZE is the largest clique's size (a smaller last clique keeps the rest in its self weights).
    Every member gives 1/SIZE to each member of its clique (itself included), and an inter-clique
    edge (i, j) gets 1/(SIZE (1 + max(e_i, e_j))) taken out of both self weights (e_i:
    inter-clique edges of peer i). Symmetric, doubly stochastic and nonnegative (the self weight
    stays >= 1/(SIZE (1 + e_i))); with equal cliques and no inter-clique edge one gossip step is
    exactly the clique average."""
    n = adj.shape[0]
    size = int(np.bincount(groups).max())
    coo = adj.tocoo()
    r, c = coo.row, coo.col
    intra = groups[r] == groups[c]
    inter_deg = np.bincount(r[~intra], minlength=n)
    vals = np.where(intra, 1.0 / size,
                    1.0 / (size * (1.0 + np.maximum(inter_deg[r], inter_deg[c]))))
    diag = 1.0 - np.bincount(r, weights=vals, minlength=n)
    w = sp.csr_array((np.concatenate((vals, diag)),
                      (np.concatenate((r, np.arange(n))), np.concatenate((c, np.arange(n))))),
                     shape=(n, n))
    w.sum_duplicates()
    w.sort_indices()
    return w


def column_weights(adj: sp.csr_array) -> sp.csr_array:
    """Push-sum weights on a directed pattern (A[i, j] = 1: i receives from j): every sender j
    splits its value equally among itself and its out-neighbours, W[i, j] = 1 / (1 + outdeg j).
    Column-stochastic."""
    n = adj.shape[0]
    out_degree = np.bincount(adj.indices, minlength=n)
    share = 1.0 / (1.0 + out_degree)
    return assemble(adj, share[adj.indices], share)


def row_weights(adj: sp.csr_array) -> sp.csr_array:
    """Averaging of what arrives (Epidemic Learning): W[i, j] = 1 / (1 + indeg i) for every
    in-neighbour j and for i itself. Row-stochastic."""
    degree = np.diff(adj.indptr)
    rows = np.repeat(np.arange(adj.shape[0]), degree)
    share = 1.0 / (1.0 + degree)
    return assemble(adj, share[rows], share)
