"""Moshpit averaging (Ryabinin, Gorbunov, Plokhotnyuk and Pekhimenko, 2021) as a time-varying
topology.

Peers sit on the cells of a virtual d-dimensional grid of shape (s_1, ..., s_d). In round t, the
peers that share every coordinate except axis a = t mod d form a group and replace their vectors by
the group's average: W_t is block diagonal, one block J_g / g per group (g = the group's size), so
every W_t is symmetric and doubly stochastic and D-PSGD runs on it unchanged. On a full grid the d
rounds of one period give exactly the global average (the product of the d block-averaging
matrices is J / n): after round a, a peer holds the average over the sub-grid spanned by axes
0..a. With missing cells (fewer peers than cells, placed on a seeded random subset of them) every
round still preserves the mean and the disagreement shrinks by the factor sigma_2 of the period
product each period (exponential convergence; the summary's ``spectral_gap_period`` is 1 - that
factor).
"""

from __future__ import annotations

import math

import numpy as np

from decentlearn.topology.base import Graph, register

__all__ = ["grid_rounds", "parse_grid"]


def parse_grid(text: str, n: int) -> tuple[int, ...]:
    """``"4x4x4"`` -> (4, 4, 4); an integer D -> D axes of side n^(1/D), which must be exact."""
    text = text.strip()
    if "x" in text:
        try:
            shape = tuple(int(part) for part in text.split("x"))
        except ValueError:
            raise ValueError(
                f"GRID must be sizes joined by 'x' such as 4x4x4, got {text!r}"
            ) from None
        if any(s < 1 for s in shape):
            raise ValueError(f"GRID sizes must be >= 1, got {text!r}")
        return shape
    try:
        d = int(text)
    except ValueError:
        raise ValueError(
            f"GRID must be sizes such as 4x4x4 or a number of axes D, got {text!r}"
        ) from None
    if d < 1:
        raise ValueError(f"GRID as a number of axes must be >= 1, got {d}")
    side = round(n ** (1.0 / d))
    if side ** d != n:
        raise ValueError(
            f"GRID={d} axes needs n to be a perfect {d}-th power, got n={n}; "
            f"give the sizes instead (e.g. GRID={'x'.join(['2'] * d)})"
        )
    return (side,) * d


def grid_rounds(
    shape: tuple[int, ...], n: int, *, sparse: bool, seed: int
) -> tuple[np.ndarray, ...]:
    """One (m, 2) edge array per axis: every pair of peers in the same group along that axis.

    Peer i sits on cell ``cells[i]`` of the grid in C order: cell i on a full grid, a seeded random
    subset of the cells when ``sparse``.
    """
    cells_total = math.prod(shape)
    if cells_total < n:
        raise ValueError(f"GRID={'x'.join(map(str, shape))} has {cells_total} cells, fewer than "
                         f"the n={n} peers")
    if cells_total > n and not sparse:
        raise ValueError(
            f"GRID={'x'.join(map(str, shape))} has {cells_total} cells but n={n} peers: a full "
            f"grid needs n={cells_total}; write moshpit:GRID:sparse to leave cells empty"
        )
    if sparse:
        cells = np.sort(np.random.default_rng(seed).permutation(cells_total)[:n])
    else:
        cells = np.arange(n)
    coords = np.array(np.unravel_index(cells, shape)).T  # (n, d)
    rounds = []
    for axis in range(len(shape)):
        # Group key: the cell with this axis' coordinate zeroed.
        key = np.ravel_multi_index(tuple(np.delete(coords, axis, axis=1).T),
                                   tuple(np.delete(np.array(shape), axis))) if len(shape) > 1 \
            else np.zeros(n, dtype=np.int64)
        order = np.argsort(key, kind="stable")
        sorted_key = key[order]
        starts = np.flatnonzero(np.r_[True, sorted_key[1:] != sorted_key[:-1]])
        ends = np.r_[starts[1:], n]
        pairs = []
        for s, e in zip(starts, ends):  # loop over groups (n / s_axis of them), not peers
            members = order[s:e]
            i, j = np.triu_indices(e - s, k=1)
            pairs.append(np.column_stack((members[i], members[j])))
        rounds.append(np.concatenate(pairs).astype(np.int64) if pairs
                      else np.zeros((0, 2), dtype=np.int64))
    return tuple(rounds)


@register("moshpit")
def _moshpit(n: int, grid: str, placement: str = "full", *, seed: int) -> Graph:
    """Moshpit averaging (Ryabinin et al. 2021): peers on a virtual GRID (4x4x4, or a number of
    axes D of equal side); round t averages within the groups along axis t mod d. PLACEMENT: full
    (n equals the cells) or sparse (n <= cells, peers on a seeded random subset of cells)."""
    if placement not in ("full", "sparse"):
        raise ValueError(f"PLACEMENT must be 'full' or 'sparse', got {placement!r}")
    shape = parse_grid(grid, n)
    return Graph(n, grid_rounds(shape, n, sparse=placement == "sparse", seed=seed))
