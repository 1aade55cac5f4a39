"""Peer clumping: a locally heterogeneous training graph built from per-peer label proxies.

Following the "proxy-based locally heterogeneous topology" seed, peers are clustered before the
training graph is laid out, so that every peer's neighbourhood holds a label mix close to the
global one, while the graph keeps a fixed small degree. Each peer contributes a proxy of its data
only: its label distribution p_i (the normalized row of the label histograms), never samples.

1. Clumping: peers are clustered by proxy into clumps of similar data: clump = majority label
   (argmax p_i), peers in a clump in random order (seeded). O(n log n).
2. Layout: peers are dealt round-robin from the clumps (one from each clump in turn, larger clumps
   spread evenly) into a sequence, and the training graph is the circulant graph of degree K on
   that sequence (peer at position s linked to s +- 1, ..., s +- K/2). Every closed neighbourhood
   of K + 1 consecutive peers then spans min(K + 1, #clumps) different clumps: locally
   heterogeneous. ORDER=homogeneous lays the same graph out on the clumps in sequence instead (a
   locally homogeneous graph of the same size and degree, the seed's baseline).

:func:`local_skew` measures the result: the mean over peers of sum_l |p_N(i)(l) - p(l)|, with
p_N(i) the mean proxy over peer i and its neighbours. Network partitions: if links are cut so that
the graph splits, :class:`decentlearn.topology.Topology` refuses it (consensus is impossible
across components); :func:`component_skews` gives the label skew each component would train on,
which stays small for the clumped order because every arc of the sequence is heterogeneous.

The topology is ``clumped[:K[:ORDER]]`` (K = 4, ORDER = heterogeneous by default).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from decentlearn.topology.base import Graph, parse_int, register
from decentlearn.topology.dcliques import label_distributions

__all__ = ["ORDERS", "circulant_edges", "clump_order", "component_skews", "local_skew"]

#: Layouts: heterogeneous (clumped, the method) or homogeneous (the baseline).
ORDERS = ("heterogeneous", "homogeneous")


def clump_order(dist: np.ndarray, *, seed: int, order: str = "heterogeneous") -> np.ndarray:
    """The sequence of peers (int64 (n,)) the circulant training graph is laid on."""
    if order not in ORDERS:
        raise ValueError(f"ORDER must be one of {', '.join(ORDERS)}, got {order!r}")
    n = dist.shape[0]
    rng = np.random.default_rng(seed)
    shuffled = rng.permutation(n)
    clump = dist[shuffled].argmax(axis=1)
    by_clump = np.argsort(clump, kind="stable")
    seq = shuffled[by_clump]  # peers grouped by clump, random order inside
    if order == "homogeneous":
        return seq.astype(np.int64)
    # Round-robin dealing: a peer at rank r of a clump of size c gets the key (r + 0.5) / c, so
    # every clump is spread evenly along the sequence; ties broken by clump id.
    sizes = np.bincount(clump[by_clump])
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    c_sorted = clump[by_clump]
    rank = np.arange(n) - starts[c_sorted]
    key = (rank + 0.5) / sizes[c_sorted]
    return seq[np.lexsort((c_sorted, key))].astype(np.int64)


def circulant_edges(seq: np.ndarray, degree: int) -> np.ndarray:
    """Edges of the circulant graph of even ``degree`` on the sequence ``seq``."""
    n = seq.size
    pos = np.arange(n)
    hops = np.arange(1, degree // 2 + 1)  # a hop of n/2 gives each edge twice: merged later
    a = np.repeat(pos, hops.size)
    b = (pos[:, None] + hops[None, :]).ravel() % n
    return np.column_stack((seq[a], seq[b])).astype(np.int64)


def local_skew(w: sp.csr_array, dist: np.ndarray) -> float:
    """Mean over peers of the L1 distance between the label mix of the peer's closed
    neighbourhood (itself and the peers it receives from) and the global label mix."""
    adj = sp.csr_array((abs(w) > 0).astype(np.float64))
    adj = sp.csr_array(adj + sp.diags_array(1.0 - adj.diagonal()))  # closed neighbourhoods
    counts = np.asarray(adj.sum(axis=1)).ravel()
    mix = (adj @ dist) / counts[:, None]
    return float(np.abs(mix - dist.mean(axis=0)).sum(axis=1).mean())


def component_skews(edges: np.ndarray, n: int, dist: np.ndarray) -> np.ndarray:
    """After a network partition (``edges`` = the links still up): the L1 skew of each connected
    component's label mix against the global one, sorted by component id."""
    adj = sp.csr_array((np.ones(len(edges)), (edges[:, 0], edges[:, 1])), shape=(n, n))
    count, comp = connected_components(adj, directed=False)
    glob = dist.mean(axis=0)
    sums = np.zeros((count, dist.shape[1]))
    np.add.at(sums, comp, dist)
    mix = sums / np.bincount(comp, minlength=count)[:, None]
    return np.abs(mix - glob).sum(axis=1)


@register("clumped")
def _clumped(n: int, k: str = "4", order: str = "heterogeneous", *, seed: int,
             labels: Any) -> Graph:
    """Peer clumping (proxy-based locally heterogeneous topology): peers clustered by label proxy,
    dealt round-robin from the clumps, laid on a circulant graph of even degree K. ORDER:
    heterogeneous (the method) or homogeneous (same graph on clumps in sequence, baseline)."""
    degree = parse_int(k, "K", minimum=2)
    if degree % 2 or degree >= n:
        raise ValueError(f"K must be even and < n={n}, got K={degree}")
    dist = label_distributions(labels, n)
    seq = clump_order(dist, seed=seed, order=order)
    edges = circulant_edges(seq, degree)
    graph = Graph(n, (edges,))
    skew = local_skew(graph.adjacency(), dist)
    return Graph(n, (edges,), info={"order": order, "degree": degree, "local_skew": skew})
