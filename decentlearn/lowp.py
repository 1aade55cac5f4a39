"""int8 training arithmetic for the peer-batched layers of decentlearn.nn (``precision="int8"``).

A Dense or Conv2d layer in int8 keeps float32 master weights (the optimizer updates the float32
parameter rows as in fp32 training) and runs its three matrix products on int8 codes with exact
int32 accumulation (ops.gemm_s8_batched_f32, dequantization fused):

* forward: y = Q(x) Q(W) + b, activations and weights quantized per peer and tensor with absmax
  scales (max|.| / 127) and round-to-nearest-even;
* backward: dY is quantized per peer with STOCHASTIC rounding (so E[Q(dY)] = dY), then
  dW = Q(x)^T Q(dY) and dX = Q(dY) Q(W)^T. The rounding draws from the counter RNG keyed by
  (seed, step, peer), so a run is reproducible and independent of the thread count, and the
  gradient is an unbiased estimate of the gradient of the quantized forward pass (the
  straight-through estimator through Q(x) and Q(W)).

Conv2d (nn.Conv2d) does the same on its im2col matrices: it quantizes the padded input once per
peer and unfolds the int8 codes (so overlapping patches are not quantized again), multiplies them
with the per-peer (Cout, Cin*k*k) weight codes, and in the backward pass takes
dW = Q_s(dY) Q(patches)^T and dX = col2im(Q(W)^T Q_s(dY)).

Biases, ReLU, pooling and GroupNorm stay float32. Only float32 parameters are supported.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from decentlearn import ops

__all__ = ["PRECISIONS", "check_f32", "check_precision", "dense_backward", "dense_forward",
           "layer_seed", "quantize_peers", "quantize_weights"]

#: Arithmetic of the matrix products of Dense (and Conv2d) layers.
PRECISIONS = ("fp32", "int8")


def check_precision(precision: object) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    return str(precision)


def layer_seed(seed: int, layer: int) -> int:
    """A 64-bit seed for layer ``layer`` of a model seeded with ``seed`` (splitmix64 finalizer), so
    layers draw independent rounding noise at the same (step, peer)."""
    z = (int(seed) * 0x9E3779B97F4A7C15 + int(layer) + 1) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return z ^ (z >> 31)


def check_f32(name: str, x: np.ndarray) -> None:
    if x.dtype != np.float32:
        raise TypeError(f"precision='int8' needs float32 {name}, got {x.dtype}")


def quantize_peers(x2: np.ndarray, rounding: str = "nearest", seed: int = 0, step: int = 0,
                   peer0: int = 0, n_threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """int8 codes (R, L) and scales (R,) of a float32 (R, L) whose rows are each contiguous (row
    stride free: slices of the parameter matrix need no copy): row r is peer peer0 + r,
    scale max|row| / 127, rounding "nearest" or "stochastic" (keyed by (seed, step, peer))."""
    scale = ops.absmax_scale(x2, axis=0, n_threads=n_threads)
    q = ops.quantize_s8(x2, scale, axis=0, rounding=rounding, seed=seed, step=step, peer0=peer0,
                        n_threads=n_threads)
    return q, scale


def quantize_weights(weight: np.ndarray,
                     n_threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-peer, per-tensor codes (P, *shape) and scales (P,) of a (P, ...) weight view whose peer
    rows are each contiguous (views into the parameter matrix are)."""
    rows = np.reshape(weight, (weight.shape[0], -1), copy=False)  # strided rows: a view
    q, scale = quantize_peers(rows, n_threads=n_threads)
    return q.reshape(weight.shape), scale


def dense_forward(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, train: bool,
                  shared: bool, n_threads: int | None = None) -> tuple[np.ndarray, Any]:
    """y (P, B, out) = Q(x) Q(W) + b for x (P, B, in) (stride 0 over P when ``shared``), weight
    (P, in, out), bias (P, out). Returns y and the backward context (None unless ``train``)."""
    check_f32("inputs", x)
    check_f32("parameters", weight)
    n_peers, batch, n_in = x.shape
    if shared:  # quantized once, broadcast to every peer by the GEMM (stride 0)
        xq, sx = quantize_peers(np.ascontiguousarray(x[0]).reshape(1, -1), n_threads=n_threads)
        xq = xq.reshape(batch, n_in)
        sx = np.broadcast_to(sx, (n_peers,))
    else:
        xq, sx = quantize_peers(np.ascontiguousarray(x).reshape(n_peers, -1), n_threads=n_threads)
        xq = xq.reshape(n_peers, batch, n_in)
    wq, sw = quantize_weights(weight, n_threads=n_threads)
    y = ops.gemm_s8_batched_f32(xq, wq, sx, sw, bias=np.ascontiguousarray(bias),
                                n_threads=n_threads)
    return y, ((xq, sx, wq, sw) if train else None)


def dense_backward(dy: np.ndarray, ctx: Any, g_weight: np.ndarray, g_bias: np.ndarray,
                   need_dx: bool, seed: int, step: int,
                   n_threads: int | None = None, peer0: int = 0) -> np.ndarray | None:
    """Writes dW = Q(x)^T Q_s(dY) into g_weight (P, in, out) and db = sum dY into g_bias (P, out);
    returns dX = Q_s(dY) Q(W)^T (P, B, in) when ``need_dx``. Q_s: stochastic rounding keyed by
    (seed, step, peer), row r of the batch being peer ``peer0 + r``."""
    xq, sx, wq, sw = ctx
    n_peers, batch, n_out = dy.shape
    np.sum(dy, axis=1, out=g_bias)
    dyq, sdy = quantize_peers(np.ascontiguousarray(dy, dtype=np.float32).reshape(n_peers, -1),
                              "stochastic", seed, step, peer0, n_threads=n_threads)
    dyq = dyq.reshape(n_peers, batch, n_out)
    ops.gemm_s8_batched_f32(xq, dyq, sx, sdy, out=g_weight, trans_a=True, n_threads=n_threads)
    if not need_dx:
        return None
    return ops.gemm_s8_batched_f32(dyq, wq, sdy, sw, trans_b=True, n_threads=n_threads)
