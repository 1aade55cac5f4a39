"""Reference top-k, random-k and threshold selection: the spec of csrc/topk.c, in plain NumPy.

Scores are compared as integers: |x| as float32 bits with the sign cleared (for finite values and
infinities this orders exactly like |x|; -0.0 and 0.0 tie), and for random-k the bitwise complement
of the counter generator's number, so the k highest scores are the k smallest random numbers. A
stable sort on the negated score keeps, among equal scores, the lowest indices: that is the
documented tie rule of the C kernels.
"""

from __future__ import annotations

import numpy as np

from decentlearn._reference import rng as ref_rng


def _rows(x: np.ndarray) -> np.ndarray:
    return x.reshape(1, -1) if x.ndim == 1 else x


def _check_k(k: int, dim: int) -> None:
    if not 0 <= k <= dim:
        raise ValueError(f"k must be in [0, dim={dim}], got {k}")


def _select(score: np.ndarray, k: int) -> np.ndarray:
    """Ascending indices of the k highest uint32 scores, ties to the lowest indices."""
    order = np.argsort(-score.astype(np.int64), kind="stable")[:k]
    return np.sort(order).astype(np.int32)


def magnitude_score(row: np.ndarray) -> np.ndarray:
    return row.view(np.uint32) & np.uint32(0x7FFFFFFF)


def topk(x: np.ndarray, k: int, out_idx=None, out_val=None, n_threads=None):
    rows = _rows(x)
    _check_k(k, rows.shape[1])
    if np.isnan(rows).any():
        raise ValueError("topk: x must not contain NaN")
    idx = np.empty((rows.shape[0], k), np.int32)
    for r, row in enumerate(rows):
        idx[r] = _select(magnitude_score(row), k)
    return idx, np.take_along_axis(rows, idx.astype(np.int64), axis=1)


def randk(x: np.ndarray, k: int, seed: int = 0, step: int = 0, peer0: int = 0, n_threads=None):
    rows = _rows(x)
    _check_k(k, rows.shape[1])
    idx = np.empty((rows.shape[0], k), np.int32)
    j = np.arange(rows.shape[1], dtype=np.uint64)
    for r in range(rows.shape[0]):
        u = ref_rng.rng_u32_keyed(ref_rng.rng_key(seed, step, peer0 + r), j)
        idx[r] = _select(~u, k)
    return idx, np.take_along_axis(rows, idx.astype(np.int64), axis=1)


def threshold(x: np.ndarray, v: float, n_threads=None):
    rows = _rows(x)
    if not v >= 0:
        raise ValueError(f"v must be a number >= 0, got {v!r}")
    if np.isnan(rows).any():
        raise ValueError("threshold: x must not contain NaN")
    with np.errstate(over="ignore"):
        keep = np.abs(rows) >= np.float32(v)
    counts = keep.sum(axis=1).astype(np.int64)
    r, c = np.nonzero(keep)
    return counts, c.astype(np.int32), rows[r, c].astype(np.float32)


def scatter(idx: np.ndarray, val: np.ndarray, dim: int, out=None, n_threads=None) -> np.ndarray:
    idx = np.asarray(idx)
    if idx.size and (idx.min() < 0 or idx.max() >= dim):
        raise ValueError("scatter: idx must hold column indices in [0, dim)")
    res = np.zeros((idx.shape[0], dim), np.float32)
    if idx.size:
        np.put_along_axis(res, idx.astype(np.intp), val, axis=1)
    if out is None:
        return res
    out[...] = res
    return out
