"""Per-round graphs: time-varying and directed graphs drawn per round from the seed, as
:class:`~decentlearn.topology.RoundTopology` objects that compute W_t on demand.

* ``random-matching``: each round a uniformly random perfect matching (one peer idles when n is
  odd); matched peers average, W_t = (I + P_t) / 2, symmetric and doubly stochastic.
* ``epidemic:S``: Epidemic Learning (de Vos et al., NeurIPS 2023): each round every peer sends its
  model to S peers drawn uniformly among the others. The receivers average what arrives ("row"
  weights, the paper's rule) or, for push-sum, every sender splits its mass among itself and its
  S targets ("column" weights, 1 / (S + 1)).
* ``directed-ring``: peer i sends to i + 1 only.

The random draws come from the counter-based hash of :mod:`decentlearn.seeds` (stream
``STREAM_MATCH``, keyed by round and peers). ``make(spec, n, mixing=...)`` passes the kinds of
matrix the algorithm accepts: the directed graphs take the first of "column" / "row" among them
("row" when it accepts neither).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from decentlearn import ops
from decentlearn.seeds import STREAM_MATCH, hash_u64, hash_uniform
from decentlearn.topology.base import RoundTopology, parse_int, register
from decentlearn.topology.weights import assemble, column_weights, row_weights

__all__ = ["directed_ring", "epidemic", "random_matching"]


def _pattern(n: int, dst: np.ndarray, src: np.ndarray) -> sp.csr_array:
    keep = dst != src
    adj = sp.csr_array((np.ones(int(keep.sum())), (dst[keep], src[keep])), shape=(n, n))
    adj.sum_duplicates()
    adj.sort_indices()
    adj.data[:] = 1.0
    return adj


def _directed_kind(mixing: tuple[str, ...]) -> str:
    """The weights of a directed graph for an algorithm accepting ``mixing``: "column" or "row"."""
    return next((k for k in mixing if k in ("column", "row")), "row")


def random_matching(n: int, *, seed: int) -> RoundTopology:
    """A uniformly random perfect matching per round, W_t = (I + P_t) / 2."""
    def matrix_of(t: int) -> sp.csr_array:
        order = np.argsort(hash_uniform(seed, STREAM_MATCH, t, np.arange(n)), kind="stable")
        pairs = order[: n - n % 2].reshape(-1, 2)
        dst = np.concatenate((pairs[:, 0], pairs[:, 1]))
        src = np.concatenate((pairs[:, 1], pairs[:, 0]))
        adj = _pattern(n, dst, src)
        half = np.full(adj.nnz, 0.5)
        return assemble(adj, half)

    return RoundTopology("random-matching", n, matrix_of, weights="matching",
                         stochastic="doubly", directed=False)


def epidemic(n: int, s: int, *, seed: int, kind: str) -> RoundTopology:
    """Epidemic Learning: every peer sends to ``s`` random others per round; ``kind`` "row"
    (receivers average) or "column" (push-sum: senders split their mass)."""
    if s < 1 or s > n - 1:
        raise ValueError(f"S must be in [1, n - 1] = [1, {n - 1}], got {s}")
    if kind not in ("row", "column"):
        raise ValueError(f"epidemic weights must be 'row' or 'column', got {kind!r}")

    def matrix_of(t: int) -> sp.csr_array:
        peers = np.arange(n)
        # Row j: the S receivers k != j of sender j with the smallest keys hash_uniform(seed,
        # STREAM_MATCH, t, j, k), found row by row on the threads (no n x n matrix of keys: at
        # 4,096 peers NumPy's took 0.76 s a round).
        targets = ops.hash_smallest(int(hash_u64(seed, STREAM_MATCH, t)[0]), n, s)
        adj = _pattern(n, targets.ravel(), np.repeat(peers, s))
        return column_weights(adj) if kind == "column" else row_weights(adj)

    return RoundTopology(f"epidemic:{s}", n, matrix_of, weights=kind, stochastic=kind,
                         directed=True)


def directed_ring(n: int, *, kind: str) -> RoundTopology:
    """Peer i sends to i + 1 only, with ``kind`` ("column" or "row") weights: 1/2 everywhere."""
    i = np.arange(n)
    adj = _pattern(n, (i + 1) % n, i)
    # In- and out-degree 1: both rules give 1/2 everywhere, a doubly stochastic W.
    w = column_weights(adj) if kind == "column" else row_weights(adj)
    return RoundTopology("directed-ring", n, lambda t: w, weights=kind, stochastic="doubly",
                         period=1, directed=n > 2)


@register("random-matching")
def _random_matching(n: int, *, seed: int) -> RoundTopology:
    """A random perfect matching per round (one peer idles when n is odd); matched peers
    average. Doubly stochastic."""
    return random_matching(n, seed=seed)


@register("epidemic")
def _epidemic(n: int, s: str, *, seed: int, mixing: tuple[str, ...]) -> RoundTopology:
    """Epidemic Learning (de Vos et al. 2023): every peer sends to S peers drawn per round;
    row-stochastic (receivers average), or column-stochastic for push-sum."""
    return epidemic(n, parse_int(s, "S"), seed=seed, kind=_directed_kind(mixing))


@register("directed-ring")
def _directed_ring(n: int, *, mixing: tuple[str, ...]) -> RoundTopology:
    """Peer i sends to i + 1 only (directed for n > 2); doubly stochastic."""
    return directed_ring(n, kind=_directed_kind(mixing))
