"""Reference gossip (csrc/gossip.c): Y = W X computed densely in float64, rounded once to float32.

W is read on its own here (no ``decentlearn.ops``): a Topology's CSR arrays of round t, a
scipy.sparse matrix, or (indptr, indices, data) arrays.
"""

from __future__ import annotations

import numpy as np


def dense_matrix(W, t: int = 0, n_cols: int | None = None) -> np.ndarray:
    """W (round t) as a dense float64 (n_rows, n_cols) matrix, duplicate entries summed. n_cols:
    for (indptr, indices, data) arrays of a rectangular block of rows (default: square)."""
    if hasattr(W, "csr") and hasattr(W, "n"):
        indptr, indices, data = W.csr(t)
        n_cols = int(W.n)
    elif hasattr(W, "tocsr"):
        if W.shape[0] != W.shape[1]:
            raise ValueError(f"W must be square, got shape {W.shape}")
        S = W.tocsr()
        indptr, indices, n_cols = S.indptr, S.indices, int(S.shape[1])
        data = S.data.astype(np.float32)  # the float32 weights the kernel is given
    elif isinstance(W, tuple) and len(W) == 3:
        indptr, indices, data = (np.asarray(a) for a in W)
        if n_cols is None:
            n_cols = len(indptr) - 1
    else:
        raise TypeError("W must be a Topology, a scipy.sparse matrix or an (indptr, indices, "
                        f"data) tuple, got {type(W).__name__}")
    n_rows = len(indptr) - 1
    dense = np.zeros((n_rows, n_cols))
    rows = np.repeat(np.arange(n_rows), np.diff(indptr))
    np.add.at(dense, (rows, np.asarray(indices)), np.asarray(data).astype(np.float64))
    return dense


def gossip(W, X: np.ndarray, out: np.ndarray | None = None, n_threads: int | None = None,
           t: int = 0, n_cols: int | None = None) -> np.ndarray:
    """Same contract as ``decentlearn.ops.gossip``; ``n_threads`` is accepted and ignored."""
    y = (dense_matrix(W, t, n_cols) @ np.asarray(X, dtype=np.float64)).astype(np.float32)
    if out is None:
        return y
    out[...] = y
    return out


def spmm(W, X: np.ndarray, out: np.ndarray | None = None,
         n_threads: int | None = None) -> np.ndarray:
    """Same contract as ``decentlearn.ops.spmm``: every row's terms added into float32 zeros in
    W's stored order, each product and sum rounded by NumPy's float32 arithmetic."""
    if isinstance(W, tuple) and len(W) == 4:
        indptr, indices, data, _ = W
    else:
        S = W.tocsr()
        indptr, indices, data = S.indptr, S.indices, S.data
    y = np.zeros((len(indptr) - 1, X.shape[1]), np.float32)
    for i in range(len(indptr) - 1):
        for p in range(indptr[i], indptr[i + 1]):
            y[i] += np.float32(data[p]) * X[indices[p]]
    if out is None:
        return y
    out[...] = y
    return out
