"""D-Cliques (Bellet, Kermarrec and Lavoie, 2022): cliques whose label mix matches the global one,
sparsely connected to each other, so that label skew is compensated by the topology. Built as
the authors' simulator builds it (``elavoie/non-iid-topology-simulator``,
``tools/setup/topology/d_cliques/``).

The builder works on per-peer label histograms only (an ``(n_peers, n_classes)`` array of counts):
it never sees the data. The label distribution of a set of peers pools their samples: a clique C
has ``p_C(l) = sum_{i in C} h_i(l) / sum_{i in C} |h_i|`` and the whole network ``p(l) = sum_i
h_i(l) / sum_i |h_i|`` (``metrics.dist``); the skew of a clique is the L1 distance ``skew(C) =
sum_l |p_C(l) - p(l)|`` (``metrics.skew``, the "total variation" metric of ``greedy_swap.py``).

* :func:`greedy_swap` (the paper's Greedy Swap, ``greedy_swap.py``): a random split into cliques
  of SIZE peers, the last one smaller when SIZE does not divide n (it gets the n - SIZE (m - 1)
  peers left, m = ceil(n / SIZE)); then STEPS times (default 1000, the reference's
  ``--max-steps``): draw two distinct cliques, list every swap of one member of each that lowers
  skew(C1) + skew(C2), and apply one of them drawn uniformly. Stops early once every skew is 0
  (no swap can then lower it).
* :func:`inter_clique_edges` (``interclique.py``): the links between cliques, each between
  members chosen among the least connected (fewest inter-clique links so far):

  - ``ring``: a member of clique c linked to a member of clique c+1 (mod m), a different member
    of each clique for its two neighbours when it has two;
  - ``fully-connected``: one link per pair of cliques, the last least-connected member of each;
  - ``fractal``: groups of N_CLASSES cliques (the number of classes, not SIZE) fully linked, one
    link per pair; each group becomes one unit and units are grouped again, until one is left;
    endpoints drawn among the least-connected members of the whole unit;
  - ``small-world``: clique c linked to c - (2^s + k) and c + (2^s + k) (mod m) for every
    s < ceil(log2 m) and k in {0, 1}, four links per (c, s), endpoints drawn among the
    least-connected members; links that join a clique to itself (2^s + 1 = m) or repeat an
    edge collapse, as in the reference's edge sets;
  - ``exponential`` (decentlearn's own, formerly ``small-world``): one link per pair of cliques at
    distance 1, 2, 4, 8, ... on the ring of cliques, endpoints the least connected (ties: first).

  The random draws are the reference's, in its order: a ``random.Random(seed)`` shuffles the list
  of least-connected members (in clique order) and the last one is taken, so the same cliques give
  the same edges.
* the ``d-cliques[:SIZE[:INTER[:STEPS]]]`` topology: both edge sets together, the cliques kept as
  the graph's groups for ``weights="clique"`` and for Clique Averaging; the weights default to
  Metropolis-Hastings, as the reference's ``weights.py``.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from decentlearn.topology.base import Graph, parse_int, register

__all__ = ["INTER", "STEPS", "clique_skews", "cliques_to_groups", "greedy_swap",
           "inter_clique_edges", "intra_clique_edges", "label_counts", "label_distributions",
           "summary"]

#: The inter-clique layouts.
INTER = ("ring", "fractal", "small-world", "fully-connected", "exponential")

#: Greedy Swap steps when not given: the reference's ``--max-steps`` default.
STEPS = 1000

#: A swap counts as improving when it lowers skew(C1) + skew(C2) by more than this (the reference
#: tests < 0 on floats; this ignores swaps whose gain is rounding noise).
_GAIN_TOL = 1e-12


def label_counts(labels: Any, n: int) -> np.ndarray:
    """Checks ``labels`` (per-peer label histograms, (n, n_classes), nonnegative, no empty row) and
    returns them as float64 counts."""
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
    return h


def label_distributions(labels: Any, n: int) -> np.ndarray:
    """Checks ``labels`` as :func:`label_counts` does and returns each row normalized to sum 1."""
    h = label_counts(labels, n)
    return h / h.sum(axis=1)[:, None]


def cliques_to_groups(cliques: list[np.ndarray], n: int) -> np.ndarray:
    """The clique id of every peer, int64 (n,)."""
    groups = np.empty(n, dtype=np.int64)
    for c, members in enumerate(cliques):  # one assignment per clique
        groups[members] = c
    return groups


def clique_skews(counts: np.ndarray, cliques: list[np.ndarray]) -> np.ndarray:
    """skew(C) = sum_l |p_C(l) - p(l)| of every clique, label distributions pooled over the
    samples (``counts``: (n, n_classes) label counts; ``cliques``: member ids of each clique)."""
    counts = np.asarray(counts, dtype=np.float64)
    glob = counts.sum(axis=0) / counts.sum()
    groups = cliques_to_groups(cliques, counts.shape[0])
    pooled = np.zeros((len(cliques), counts.shape[1]))
    np.add.at(pooled, groups, counts)
    return np.abs(pooled / pooled.sum(axis=1, keepdims=True) - glob).sum(axis=1)


def greedy_swap(counts: np.ndarray, size: int, *, seed: int,
                steps: int = STEPS) -> list[np.ndarray]:
    """The paper's Greedy Swap on pooled label counts: the member ids of each of the
    ceil(n / size) cliques (int64 arrays; all of ``size`` peers but the last, which holds the rest).
    """
    counts = np.asarray(counts, dtype=np.float64)
    n = counts.shape[0]
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n).astype(np.int64)
    cliques = [perm[k:k + size].copy() for k in range(0, n, size)]
    m = len(cliques)
    if m < 2 or steps < 1:
        return cliques
    totals = counts.sum(axis=1)
    glob = counts.sum(axis=0) / totals.sum()
    sums = np.stack([counts[c].sum(axis=0) for c in cliques])  # (m, L) pooled counts
    sizes = sums.sum(axis=1)  # (m,) samples per clique
    skew = np.abs(sums / sizes[:, None] - glob).sum(axis=1)
    if skew.max() <= _GAIN_TOL:
        return cliques
    first = rng.integers(0, m, size=steps)
    second = rng.integers(0, m - 1, size=steps)
    second += second >= first  # a uniform pair of distinct cliques
    picks = rng.random(steps)
    for k in range(steps):
        a, b = int(first[k]), int(second[k])
        ca, cb = cliques[a], cliques[b]
        # Swapping member i of a with member j of b moves delta = h_j - h_i into a, out of b.
        delta = counts[cb][None, :, :] - counts[ca][:, None, :]  # (|a|, |b|, L)
        dsize = totals[cb][None, :] - totals[ca][:, None]  # (|a|, |b|)
        new_a = np.abs((sums[a] + delta) / (sizes[a] + dsize)[:, :, None] - glob).sum(axis=2)
        new_b = np.abs((sums[b] - delta) / (sizes[b] - dsize)[:, :, None] - glob).sum(axis=2)
        gain = skew[a] + skew[b] - (new_a + new_b)
        better = np.flatnonzero(gain > _GAIN_TOL)
        if better.size:
            i, j = divmod(int(better[int(picks[k] * better.size)]), cb.size)
            ca[i], cb[j] = cb[j], ca[i]
            sums[a] += delta[i, j]
            sums[b] -= delta[i, j]
            sizes[a] += dsize[i, j]
            sizes[b] -= dsize[i, j]
            skew[a], skew[b] = new_a[i, j], new_b[i, j]
            if skew.max() <= _GAIN_TOL:
                break
    return cliques


class _Links:
    """Inter-clique links with the reference's endpoint rule: per peer, the number of inter-clique
    links so far; an endpoint is drawn among the least-connected members of a unit (cliques'
    members, concatenated in order)."""

    def __init__(self, n: int, groups: np.ndarray, seed: int) -> None:
        self.load = np.zeros(n, dtype=np.int64)
        self.groups = groups
        self.rand = random.Random(seed)
        self.edges: set[tuple[int, int]] = set()

    def least(self, members: np.ndarray) -> list[int]:
        load = self.load[members]
        return members[load == load.min()].tolist()

    def drawn(self, members: np.ndarray) -> int:
        """The reference's draw: shuffle the least-connected members, take the last."""
        cands = self.least(members)
        self.rand.shuffle(cands)
        return self.take(cands[-1])

    def last(self, members: np.ndarray) -> int:
        """The last least-connected member (the reference's fully-connected rule)."""
        return self.take(self.least(members)[-1])

    def first(self, members: np.ndarray) -> int:
        return self.take(self.least(members)[0])

    def take(self, peer: int) -> int:
        self.load[peer] += 1
        return peer

    def link(self, x: int, y: int) -> None:
        # A link inside one clique adds nothing (every clique is complete).
        if self.groups[x] != self.groups[y]:
            self.edges.add((min(x, y), max(x, y)))

    def array(self) -> np.ndarray:
        return np.array(sorted(self.edges), dtype=np.int64).reshape(-1, 2)


def inter_clique_edges(cliques: list[np.ndarray], inter: str, *, n_classes: int,
                       seed: int) -> np.ndarray:
    """(k, 2) int64 inter-clique edges (i < j, sorted) of layout ``inter`` (see the module doc).
    ``n_classes`` is the fractal's group size; ``seed`` drives the endpoint draws."""
    if inter not in INTER:
        raise ValueError(f"INTER must be one of {', '.join(INTER)}, got {inter!r}")
    cliques = [np.asarray(c, dtype=np.int64) for c in cliques]
    n = sum(c.size for c in cliques)
    m = len(cliques)
    links = _Links(n, cliques_to_groups(cliques, n), seed)
    if m < 2:
        return links.array()
    if inter == "ring":
        for c in range(m):
            links.link(int(cliques[c][-1]), int(cliques[(c + 1) % m][0]))
    elif inter == "fully-connected":
        for a in range(m - 1):
            for b in range(a + 1, m):
                links.link(links.last(cliques[a]), links.last(cliques[b]))
    elif inter == "small-world":
        offsets = [1 << s for s in range((m - 1).bit_length())]  # s < ceil(log2 m)
        for start in range(m):
            for offset in offsets:
                for k in (0, 1):
                    for sign in (-1, 1):
                        x = links.drawn(cliques[start])
                        links.link(x, links.drawn(cliques[(start + sign * (offset + k)) % m]))
    elif inter == "fractal":
        units = cliques
        fanout = max(2, n_classes)
        while len(units) > 1:
            grouped = [units[g:g + fanout] for g in range(0, len(units), fanout)]
            for group in grouped:
                for a in range(len(group) - 1):
                    for b in range(a + 1, len(group)):
                        x = links.drawn(group[a])
                        links.link(x, links.drawn(group[b]))
            units = [np.concatenate(group) for group in grouped]
    else:  # exponential
        offsets = sorted({1 << k for k in range((m - 1).bit_length())})
        pairs = sorted({(min(c, (c + d) % m), max(c, (c + d) % m))
                        for c in range(m) for d in offsets if (c + d) % m != c})
        for a, b in pairs:
            links.link(links.first(cliques[a]), links.first(cliques[b]))
    return links.array()


def intra_clique_edges(cliques: list[np.ndarray]) -> np.ndarray:
    """(sum_C |C| (|C| - 1) / 2, 2) int64: every pair inside every clique."""
    parts = [np.zeros((0, 2), dtype=np.int64)]
    for members in cliques:  # one block per clique
        i, j = np.triu_indices(members.size, k=1)
        parts.append(np.column_stack((members[i], members[j])).astype(np.int64))
    return np.concatenate(parts)


def summary(counts: np.ndarray, cliques: list[np.ndarray], n_edges: int, n_inter: int,
            inter: str, steps: int) -> dict:
    """What the run summary reports: the cliques' sizes and pooled skews, the edge count against
    the complete graph's n (n - 1) / 2."""
    n = counts.shape[0]
    complete = n * (n - 1) // 2
    skews = clique_skews(counts, cliques)
    return {
        "cliques": len(cliques),
        "clique_size": int(cliques[0].size),
        "last_clique_size": int(cliques[-1].size),
        "inter": inter,
        "steps": steps,
        "clique_skew": [round(float(s), 6) for s in skews],
        "clique_skew_max": float(skews.max()),
        "clique_skew_mean": float(skews.mean()),
        "edges": int(n_edges),
        "edges_inter_clique": int(n_inter),
        "edges_complete": complete,
        "edges_fraction_of_complete": n_edges / complete if complete else 1.0,
    }


@register("d-cliques")
def _d_cliques(n: int, size: str = "10", inter: str = "ring", steps: str = str(STEPS), *,
               seed: int, labels: Any) -> Graph:
    """D-Cliques (Bellet et al. 2022): Greedy Swap (STEPS swaps tried) makes cliques of SIZE peers
    (the last one smaller when SIZE does not divide n) whose pooled label mix approaches the
    global one, linked by INTER (ring, fractal, small-world, fully-connected, exponential)."""
    clique_size = parse_int(size, "SIZE", minimum=1)
    if inter not in INTER:
        raise ValueError(f"INTER must be one of {', '.join(INTER)}, got {inter!r}")
    n_steps = parse_int(steps, "STEPS", minimum=0)
    counts = label_counts(labels, n)
    cliques = greedy_swap(counts, clique_size, seed=seed, steps=n_steps)
    inter_edges = inter_clique_edges(cliques, inter, n_classes=counts.shape[1], seed=seed)
    edges = np.concatenate((intra_clique_edges(cliques), inter_edges))
    info = summary(counts, cliques, len(edges), len(inter_edges), inter, n_steps)
    return Graph(n, (edges,), groups=cliques_to_groups(cliques, n), info=info)
