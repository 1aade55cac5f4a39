"""int8 training arithmetic for the peer-batched layers of decentlearn.nn (``precision="int8"``).

A Dense or Conv2d layer in int8 keeps float32 master weights (the optimizer updates the float32
parameter rows as in fp32 training) and runs its three matrix products on int8 codes with exact
int32 accumulation. A Dense layer's forward and backward are each one C call over all peers
(ops.gemm_s8_dense_forward / gemm_s8_dense_backward: per peer, quantization, packing, the exact
product and dequantization with bias/ReLU/ReLU-mask in the epilogue, peers split between threads);
Conv2d's three products are one C call each too (ops.conv_forward_s8, conv_weight_grad_s8,
conv_input_grad_s8), reading the codes of its padded input in place:

* forward: y = Q(x) Q(W) + b, activations and weights quantized per peer and tensor with absmax
  scales (max|.| / 127) and round-to-nearest-even; the codes of x and W are kept for the
  backward;
* backward: dY is quantized per peer with STOCHASTIC rounding (so E[Q(dY)] = dY), then
  dW = Q(x)^T Q(dY) and dX = Q(dY) Q(W)^T. The rounding draws from the counter RNG keyed by
  (seed, step, peer), so a run is reproducible and independent of the thread count, and the
  gradient is an unbiased estimate of the gradient of the quantized forward pass (the
  straight-through estimator through Q(x) and Q(W)).

Conv2d (nn.Conv2d) does the same on its im2col matrices without forming them: it quantizes the
padded input once per peer (so overlapping patches are not quantized again), multiplies the
patches' codes with the per-peer (Cout, Cin*k*k) weight codes, and in the backward pass takes
dW = Q_s(dY) Q(patches)^T (float32 sums of exact int32 chunk products, in chunk order) and
dX = col2im(Q(W)^T Q_s(dY)), the columns added into the input gradient as they are formed.

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
                  shared: bool, n_threads: int | None = None,
                  relu: bool = False, scratch: Any = None) -> tuple[np.ndarray, Any]:
    """y (P, B, out) = act(Q(x) Q(W) + b) for x (P, B, in) (stride 0 over P or one peer when
    ``shared``: quantized once), weight (P, in, out), bias (P, out); act the ReLU when ``relu``.
    One fused C pass per peer (ops.gemm_s8_dense_forward): quantization, packing, the exact int8
    product and the dequantizing epilogue. Returns y and the backward context (the int8 codes
    and scales of x and W, None unless ``train``). ``scratch`` (a layer's nn.Scratch, or None):
    the codes go into its reused arrays, valid until the layer's next forward pass."""
    check_f32("inputs", x)
    check_f32("parameters", weight)
    if shared and x.shape[0] != 1:
        x = x[:1]
    if x.shape[2] > 1 and x.strides[2] != x.itemsize:
        x = np.ascontiguousarray(x)
    codes = None
    if scratch is not None:
        px, (n_peers, n_in, n_out) = x.shape[0], weight.shape
        codes = ops.DenseCodes(scratch.empty("xq", (px, x.shape[1], n_in), np.int8),
                               scratch.empty("sx", (px,), np.float32),
                               scratch.empty("wq", (n_peers, n_in, n_out), np.int8),
                               scratch.empty("sw", (n_peers,), np.float32))
    out = (scratch.empty("y", (weight.shape[0], x.shape[1], weight.shape[2]), np.float32)
           if scratch is not None and train else None)
    y, codes = ops.gemm_s8_dense_forward(x, weight, bias, relu, out=out, n_threads=n_threads,
                                         codes=codes)
    return y, (codes if train else None)


def dense_backward(dy: np.ndarray, ctx: Any, g_weight: np.ndarray, g_bias: np.ndarray,
                   need_dx: bool, seed: int, step: int,
                   n_threads: int | None = None, peer0: int = 0,
                   mask: np.ndarray | None = None, scratch: Any = None) -> np.ndarray | None:
    """Writes dW = Q(x)^T Q_s(dY) into g_weight (P, in, out) and db = sum dY (in batch order) into
    g_bias (P, out); returns dX = Q_s(dY) Q(W)^T (P, B, in), zeroed where ``mask <= 0`` (the ReLU
    below, fused), when ``need_dx``. Q_s: stochastic rounding keyed by (seed, step, peer), row r
    of the batch being peer ``peer0 + r``. One fused C pass per peer (ops.gemm_s8_dense_backward)
    from the codes the forward kept; dX goes into ``scratch``'s reused array when given."""
    dy = np.ascontiguousarray(dy, dtype=np.float32)
    n_peers, batch, _ = dy.shape
    shape = (n_peers, batch, ctx.xq.shape[2])
    dx = None
    if need_dx:
        dx = scratch.empty("dx", shape, np.float32) if scratch is not None else np.empty(shape,
                                                                                         np.float32)
    ops.gemm_s8_dense_backward(dy, ctx, g_weight, g_bias, dx, mask if need_dx else None,
                               seed=seed, step=step, peer0=peer0, n_threads=n_threads)
    return dx
