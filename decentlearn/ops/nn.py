"""The peer-batched float32 GEMMs of the layers (csrc/nn.c, nn_impl.h).

NumPy twin: decentlearn/_reference/nn.py.
"""

from __future__ import annotations

import numpy as np

from decentlearn._core import (
    nn_dense_backward as _core_nn_dense_backward,
    nn_dense_forward as _core_nn_dense_forward,
    nn_gemm as _core_nn_gemm,
)
from decentlearn.ops.args import f32_operand
from decentlearn.ops.threads import resolve_threads

__all__ = ["nn_gemm", "dense_forward", "dense_backward"]


def nn_gemm(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None, accumulate: bool = False,
            n_threads: int | None = None) -> np.ndarray:
    """float32 ``out[p] (+)= a[p] @ b[p]`` for P peers. ``a`` (P or 1, M, K) and ``b`` (P or 1, K,
    N) may be any views with non-negative strides (transposes, stride-0 broadcasts, rows of the
    parameter matrix); a leading 1 is shared by every peer. ``out`` (P, M, N) needs contiguous rows
    and must not overlap the inputs; ``accumulate`` adds to it instead of overwriting."""
    a = f32_operand("a", a, 3)
    b = f32_operand("b", b, 3)
    n_peers = max(a.shape[0], b.shape[0])
    if out is None:
        if accumulate:
            raise ValueError("accumulate=True needs out")
        out = np.empty((n_peers, a.shape[1], b.shape[2]), dtype=np.float32)
    out = f32_operand("out", out, 3)
    return _core_nn_gemm(a, b, out, bool(accumulate), resolve_threads(n_threads))


def dense_forward(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, relu: bool = False,
                  out: np.ndarray | None = None, n_threads: int | None = None) -> np.ndarray:
    """``y[p] = x[p] @ w[p] + bias[p]`` (then ReLU when ``relu``) for a peer-batched dense layer:
    x (P or 1, B, I), w (P, I, O) with each peer's matrix contiguous, bias (P, O) or None; returns y
    (P, B, O) float32."""
    x = f32_operand("x", x, 3)
    w = f32_operand("w", w, 3)
    if out is None:
        out = np.empty((w.shape[0], x.shape[1], w.shape[2]), dtype=np.float32)
    return _core_nn_dense_forward(x, w, bias, bool(relu), out, resolve_threads(n_threads))


def dense_backward(x: np.ndarray, w: np.ndarray, dy: np.ndarray, gw: np.ndarray, gb: np.ndarray,
                   dx: np.ndarray | None = None, mask: np.ndarray | None = None,
                   n_threads: int | None = None) -> None:
    """Backward pass of :func:`dense_forward` (without its ReLU): writes ``gb[p] = dy[p].sum(0)``,
    ``gw[p] = x[p]^T dy[p]`` and, when ``dx`` is given, ``dx[p] = dy[p] @ w[p]^T``, zeroed where
    ``mask[p] <= 0`` (the ReLU of the layer below, fused; None: no mask)."""
    _core_nn_dense_backward(x, w, dy, mask, gw, gb, dx, resolve_threads(n_threads))
