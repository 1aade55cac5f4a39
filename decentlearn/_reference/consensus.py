"""NumPy reference of csrc/consensus.c (decentlearn.ops.consensus_sums), same signature. The
kernel adds in fixed column chunks, so tests compare with a float64 tolerance."""

from __future__ import annotations

import numpy as np


def consensus_sums(X, out=None, n_threads=None) -> np.ndarray:
    x = np.asarray(X, dtype=np.float64)
    res = np.array([float(np.sum(x * x)), float(np.sum(x.sum(axis=0) ** 2))])
    if out is None:
        return res
    out[...] = res
    return out
