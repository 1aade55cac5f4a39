"""NumPy references of csrc/consensus.c, same signatures: consensus_sums (the kernel adds in fixed
column chunks, so tests compare it with a float64 tolerance) and consensus_distance (every sum
in the kernel's order: the same bits)."""

from __future__ import annotations

import numpy as np


def consensus_sums(X, out=None, n_threads=None) -> np.ndarray:
    x = np.asarray(X, dtype=np.float64)
    res = np.array([float(np.sum(x * x)), float(np.sum(x.sum(axis=0) ** 2))])
    if out is None:
        return res
    out[...] = res
    return out


CHUNK = 256  # columns per chunk of csrc/consensus.c's DL_CONS_EXACT_CHUNK


def _sequential_sum(v: np.ndarray) -> float:
    """v[0] + v[1] + ... in order, float64 (cumsum adds in order; np.sum would pair them)."""
    return float(np.cumsum(v, dtype=np.float64)[-1]) if v.size else 0.0


def consensus_distance(X, out=None, mean=None, n_threads=None) -> np.ndarray:
    x = np.asarray(X)
    n_peers, dim = x.shape
    if mean is not None:
        with np.errstate(invalid="ignore", divide="ignore"):
            mean[...] = np.add.reduce(np.ascontiguousarray(x, dtype=np.float64), axis=0) / n_peers
    total = 0.0
    if n_peers and dim:
        parts = []
        for c0 in range(0, dim, CHUNK):
            # C order: NumPy's reductions over axis 0 then add the rows elementwise in row order
            # (over a contiguous axis they would pair the terms instead)
            block = np.ascontiguousarray(x[:, c0:c0 + CHUNK], dtype=np.float64)
            means = np.add.reduce(block, axis=0) / n_peers
            dev = block - means
            parts.append(_sequential_sum(np.add.reduce(dev * dev, axis=0)))
        total = _sequential_sum(np.array(parts)) / n_peers
    res = np.array([total])
    if out is None:
        return res
    out[...] = res
    return out


def column_mean(X, out=None, n_threads=None) -> np.ndarray:
    x = np.asarray(X, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        res = np.add.reduce(x, axis=0) / x.shape[0]  # axis 0: the rows added in order
    if out is None:
        return res
    out[...] = res
    return out


def weighted_column_sum(X, w, out=None, n_threads=None) -> np.ndarray:
    x = np.asarray(X, dtype=np.float64)
    products = np.asarray(w, dtype=np.float64)[:, None] * x
    res = np.add.reduce(products, axis=0) if x.shape[0] else np.zeros(x.shape[1])
    if out is None:
        return res
    out[...] = res
    return out


def row_sums(x, out=None, n_threads=None) -> np.ndarray:
    """np.sum of each row (NumPy's pairwise float32 summation), into ``out`` when given."""
    return np.sum(x, axis=1, out=out)
