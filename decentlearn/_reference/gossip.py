"""Reference gossip: Y = W X computed densely in float64, rounded once to float32."""

from __future__ import annotations

import numpy as np

from decentlearn.ops import as_csr


def gossip(W, X: np.ndarray, out: np.ndarray | None = None, n_threads: int | None = None,
           t: int = 0) -> np.ndarray:
    """Same contract as ``decentlearn.ops.gossip``; ``n_threads`` is accepted and ignored."""
    indptr, indices, data, n_cols = as_csr(W, t)
    n_rows = len(indptr) - 1
    dense = np.zeros((n_rows, n_cols))
    rows = np.repeat(np.arange(n_rows), np.diff(indptr))
    np.add.at(dense, (rows, indices), data.astype(np.float64))
    y = (dense @ np.asarray(X, dtype=np.float64)).astype(np.float32)
    if out is None:
        return y
    out[...] = y
    return out
