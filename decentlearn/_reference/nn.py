"""NumPy references (the spec) of the layers' float32 GEMMs in csrc/nn.c (nn_impl.h), with the
signatures of decentlearn.ops.nn. They are computed in float64 and rounded once (the C kernels sum
in float32 in blocks of k, so tests compare with a tolerance).
"""

from __future__ import annotations

import numpy as np


def nn_gemm(a, b, out=None, accumulate=False, n_threads=None) -> np.ndarray:
    """out[p] (+)= a[p] @ b[p]; a (P|1, M, K), b (P|1, K, N)."""
    c = np.matmul(a.astype(np.float64), b.astype(np.float64))
    if out is None:
        return c.astype(np.float32)
    if accumulate:
        c += out
    out[...] = c
    return out


def dense_forward(x, w, bias=None, relu=False, out=None, n_threads=None) -> np.ndarray:
    y = np.matmul(x.astype(np.float64), w.astype(np.float64))
    if bias is not None:
        y += bias[:, None, :]
    if relu:
        y = np.where(y > 0, y, 0.0)
    if out is None:
        return y.astype(np.float32)
    out[...] = y
    return out


def dense_backward(x, w, dy, gw, gb, dx=None, mask=None, n_threads=None) -> None:
    x64, w64, dy64 = x.astype(np.float64), w.astype(np.float64), dy.astype(np.float64)
    gb[...] = dy64.sum(axis=1)
    gw[...] = np.broadcast_to(np.matmul(x64.transpose(0, 2, 1), dy64), gw.shape)
    if dx is not None:
        d = np.matmul(dy64, w64.transpose(0, 2, 1))
        if mask is not None:
            d = np.where(mask > 0, d, 0.0)
        dx[...] = d
