"""D-Cliques (Bellet, Kermarrec and Lavoie, 2022): cliques whose label mix matches the global one,
sparsely connected to each other, so that label skew is compensated by the topology.

The builder works on per-peer label histograms only (an ``(n_peers, n_classes)`` array of counts or
frequencies): it never sees the data. Each peer's histogram is normalized to a distribution p_i;
the global distribution is p = mean_i p_i and a clique C has p_C = mean_{i in C} p_i, the label
mix of the average of its members' gradients (what Clique Averaging computes). Its skew is the L1
distance ``skew(C) = sum_l |p_C(l) - p(l)|``.

* :func:`greedy_swap` (the paper's Greedy Swap): start from a split into cliques of SIZE peers
  (the paper starts from a random one; we deal the peers sorted by majority label round-robin,
  which is already balanced under one-class skew); in each of K iterations (default 10 n) draw
  two cliques, list the swaps of one member of each that lower skew(C1) + skew(C2), and apply
  one of them drawn at random. Stops early once every skew is 0.
* :func:`inter_clique_edges`: one edge per linked pair of cliques, between the members that have
  the fewest inter-clique edges so far: ``ring`` (clique c -- c+1), ``fractal`` (groups of SIZE
  cliques fully linked, then groups of groups, recursively), ``small-world`` (c -- c+1, c+2 and
  c + 2^k on the ring of cliques: the paper's small-world variant with a deterministic choice of the
  long links) and ``fully-connected`` (every pair of cliques).
* the ``d-cliques[:SIZE[:INTER]]`` topology: both edge sets together, the cliques kept as the
  graph's groups for ``weights="clique"`` (:func:`decentlearn.topology.weights.clique_weights`:
  every member gives 1/SIZE to each member of its clique) and for Clique Averaging.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from decentlearn.topology.base import Graph, parse_int, register

__all__ = ["INTER", "check_size", "clique_skews", "greedy_swap", "inter_clique_edges",
           "intra_clique_edges", "label_distributions", "summary"]

#: The inter-clique layouts.
INTER = ("ring", "fractal", "small-world", "fully-connected")

#: Greedy Swap iterations per peer when not given (the paper uses a fixed K; this scales it).
ITERATIONS_PER_PEER = 10


def label_distributions(labels: Any, n: int) -> np.ndarray:
    """Checks ``labels`` (per-peer label histograms, (n, n_classes), nonnegative, no empty row) and
    returns each row normalized to sum 1, float64."""
    if labels is None:
        raise ValueError(
            "labels is None: this topology is built from the partition's per-peer label "
            "histograms; pass labels=(n_peers, n_classes) counts (the simulator does this from "
            "the run's partition)"
        )
    h = np.asarray(labels)
    if h.dtype == np.bool_ or not (np.issubdtype(h.dtype, np.integer)
                                   or np.issubdtype(h.dtype, np.floating)):
        raise TypeError(f"labels must hold label counts (numbers), got dtype {h.dtype}")
    if h.ndim != 2 or h.shape[0] != n or h.shape[1] < 1:
        raise ValueError(f"labels must have shape (n_peers={n}, n_classes), got {h.shape}")
    h = h.astype(np.float64)
    if not np.all(np.isfinite(h)) or h.min() < 0:
        raise ValueError("labels must hold finite, nonnegative label counts")
    sums = h.sum(axis=1)
    if sums.min() <= 0:
        empty = int(np.argmin(sums))
        raise ValueError(
            f"labels row {empty} is all zero: peer {empty} holds no labelled samples, so its "
            "label mix (and its clique's) is undefined"
        )
    return h / sums[:, None]


def clique_skews(dist: np.ndarray, cliques: np.ndarray) -> np.ndarray:
    """skew(C) = sum_l |mean_{i in C} p_i(l) - p(l)| of every clique (rows of ``cliques``)."""
    glob = dist.mean(axis=0)
    return np.abs(dist[cliques].mean(axis=1) - glob).sum(axis=1)


def greedy_swap(dist: np.ndarray, size: int, *, seed: int,
                iterations: int | None = None) -> np.ndarray:
    """The paper's Greedy Swap: (n // size, size) int64 array of peer ids, one row per clique."""
    n = dist.shape[0]
    m = n // size
    rng = np.random.default_rng(seed)
    # Start from dealing the peers, sorted by majority label (ties in random order), round-robin
    # into the cliques: under label skew this is already close, and Greedy Swap refines it.
    order = rng.permutation(n)
    order = order[np.argsort(dist[order].argmax(axis=1), kind="stable")]
    cliques = order.reshape(size, m).T.copy()
    if m < 2:
        return cliques
    glob = dist.mean(axis=0)
    sums = dist[cliques].sum(axis=1)  # (m, L): sum of the members' distributions
    skew = np.abs(sums / size - glob).sum(axis=1)
    iterations = ITERATIONS_PER_PEER * n if iterations is None else iterations
    if skew.max() <= 1e-12:
        return cliques
    pairs = rng.integers(0, m, size=(iterations, 2))
    picks = rng.random(iterations)
    for k in range(iterations):
        a, b = int(pairs[k, 0]), int(pairs[k, 1])
        if a == b:
            continue
        pa, pb = dist[cliques[a]], dist[cliques[b]]  # (size, L)
        # Swapping member i of a with member j of b: sums_a - p_i + p_j, sums_b - p_j + p_i.
        delta = pb[None, :, :] - pa[:, None, :]  # (i, j, L)
        new_a = np.abs((sums[a] + delta) / size - glob).sum(axis=2)
        new_b = np.abs((sums[b] - delta) / size - glob).sum(axis=2)
        gain = skew[a] + skew[b] - (new_a + new_b)
        better = np.flatnonzero(gain > 1e-12)
        if better.size:
            i, j = divmod(int(better[int(picks[k] * better.size)]), size)
            cliques[a, i], cliques[b, j] = cliques[b, j], cliques[a, i]
            sums[a] += delta[i, j]
            sums[b] -= delta[i, j]
            skew[a], skew[b] = new_a[i, j], new_b[i, j]
            if skew.max() <= 1e-12:
                break
    return cliques


def _clique_pairs(m: int, inter: str, size: int) -> list[tuple[int, int]]:
    if m < 2:
        return []
    if inter == "ring":
        return sorted({tuple(sorted((c, (c + 1) % m))) for c in range(m)})
    if inter == "fully-connected":
        return [(a, b) for a in range(m) for b in range(a + 1, m)]
    if inter == "small-world":
        offsets = {1, 2} | {1 << k for k in range(2, max(2, (m - 1).bit_length()))}
        return sorted({tuple(sorted((c, (c + d) % m))) for c in range(m) for d in offsets
                       if (c + d) % m != c})
    # fractal: units start as single cliques; groups of `size` units are fully linked (one edge per
    # pair of units, between cliques chosen round-robin inside each unit), then become units.
    pairs: list[tuple[int, int]] = []
    units = [[c] for c in range(m)]
    fanout = max(2, size)
    while len(units) > 1:
        grouped = [units[k:k + fanout] for k in range(0, len(units), fanout)]
        for group in grouped:
            for x in range(len(group)):
                for y in range(x + 1, len(group)):
                    a = group[x][y % len(group[x])]
                    b = group[y][x % len(group[y])]
                    pairs.append((a, b))
        units = [[c for unit in group for c in unit] for group in grouped]
    return pairs


def inter_clique_edges(cliques: np.ndarray, inter: str) -> np.ndarray:
    """(k, 2) int64 inter-clique edges: one per linked pair of cliques, between the members with the
    fewest inter-clique edges so far (ties: first member)."""
    if inter not in INTER:
        raise ValueError(f"INTER must be one of {', '.join(INTER)}, got {inter!r}")
    m, size = cliques.shape
    load = np.zeros(cliques.shape, dtype=np.int64)
    edges = []
    for a, b in _clique_pairs(m, inter, size):
        i, j = int(np.argmin(load[a])), int(np.argmin(load[b]))
        load[a, i] += 1
        load[b, j] += 1
        edges.append((int(cliques[a, i]), int(cliques[b, j])))
    return np.array(edges, dtype=np.int64).reshape(-1, 2)


def intra_clique_edges(cliques: np.ndarray) -> np.ndarray:
    """(m * size (size - 1) / 2, 2) int64: every pair inside every clique."""
    size = cliques.shape[1]
    i, j = np.triu_indices(size, k=1)
    return np.column_stack((cliques[:, i].ravel(), cliques[:, j].ravel())).astype(np.int64)


def summary(dist: np.ndarray, cliques: np.ndarray, n_edges: int, inter: str) -> dict:
    """What the run summary reports: each clique's skew, the edge count against the complete
    graph's n (n - 1) / 2."""
    n = dist.shape[0]
    complete = n * (n - 1) // 2
    skews = clique_skews(dist, cliques)
    return {
        "cliques": int(cliques.shape[0]),
        "clique_size": int(cliques.shape[1]),
        "inter": inter,
        "clique_skew": [round(float(s), 6) for s in skews],
        "clique_skew_max": float(skews.max()),
        "edges": int(n_edges),
        "edges_complete": complete,
        "edges_fraction_of_complete": n_edges / complete if complete else 1.0,
    }


def check_size(size: int, n: int) -> None:
    """Raises ValueError unless cliques of ``size`` peers split ``n`` peers evenly."""
    if size < 1:
        raise ValueError(f"SIZE must be >= 1, got {size}")
    if n % size:
        raise ValueError(
            f"SIZE={size} must divide the number of peers n={n} (cliques have equal sizes); "
            f"divisors near it: {[d for d in range(max(1, size - 5), size + 6) if n % d == 0]}"
        )


@register("d-cliques")
def _d_cliques(n: int, size: str = "10", inter: str = "ring", *, seed: int, labels: Any) -> Graph:
    """D-Cliques (Bellet et al. 2022): Greedy Swap cliques of SIZE peers whose label mix
    approaches the global one, linked by INTER (ring, fractal, small-world, fully-connected)."""
    clique_size = parse_int(size, "SIZE", minimum=1)
    check_size(clique_size, n)
    if inter not in INTER:
        raise ValueError(f"INTER must be one of {', '.join(INTER)}, got {inter!r}")
    dist = label_distributions(labels, n)
    cliques = greedy_swap(dist, clique_size, seed=seed)
    edges = np.concatenate((intra_clique_edges(cliques), inter_clique_edges(cliques, inter)))
    groups = np.empty(n, dtype=np.int64)
    groups[cliques] = np.arange(cliques.shape[0])[:, None]
    info = summary(dist, cliques, len(edges), inter)
    return Graph(n, (edges,), groups=groups, info=info)
