"""NumPy reference (the spec) of the int8 GEMM and quantization kernels in csrc/gemm_s8.c
(and the fused int8 dense layer of gemm_s8_impl.h), with the signatures of decentlearn.ops.gemm_s8.

``gemm_s8`` is the exact integer product; ``gemm_s8_f32`` is its dequantization computed in
float64 (the C kernel rounds a few times in float32, so tests compare with a relative tolerance);
``quantize_s8`` / ``dequantize_s8`` / ``absmax_scale`` use the same float32 operations as C, so
they are bit-identical (stochastic rounding draws from ``_reference/rng.py``).

Scales: a Python/NumPy scalar is per tensor; a 1-D array is per channel along ``axis`` (its length
is ``x.shape[axis]``; 0 = one scale per row, 1 = one per column of a 2-D x).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from decentlearn._reference import rng as ref_rng

#: int32 accumulation is exact while k * 128 * 128 <= 2^31 - 1.
MAX_K = (2**31 - 1) // (128 * 128)


def gemm_s8(a: np.ndarray, b: np.ndarray, out=None, n_threads=None) -> np.ndarray:
    """int32 (m, n) = a (m, k) int8 @ b (k, n) int8, exactly."""
    if a.shape[-1] > MAX_K:
        raise ValueError(f"k must be <= {MAX_K}")
    return (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)


def gemm_s8_f32(a, packed_b, a_scale, b_scale, bias=None, out=None, n_threads=None) -> np.ndarray:
    """float32 (m, n) = (a @ b) * a_scale * b_scale[col] + bias[col], computed in float64;
    ``packed_b`` is B itself, an int8 (k, n) array (packing is the C microkernel's layout)."""
    c = (a.astype(np.int64) @ packed_b.astype(np.int64)).astype(np.float64)
    s = np.float64(a_scale) * np.asarray(b_scale, dtype=np.float64).reshape(-1)
    y = c * s
    if bias is not None:
        y = y + np.asarray(bias, dtype=np.float64)
    return y.astype(np.float32)


def _scale_view(x2: np.ndarray, scale, axis) -> np.ndarray:
    """The float32 scale broadcast against the 2-D view x2 (axis in x2's terms: None, 0 or 1)."""
    s = np.asarray(scale, dtype=np.float32)
    if axis is None:
        return s.reshape(1, 1)
    return s.reshape(-1, 1) if axis == 0 else s.reshape(1, -1)


def _as2d(x: np.ndarray, axis):
    if x.ndim == 1:
        return x.reshape(1, -1), (None if axis is None else 1)
    return x, (None if axis is None else axis % 2)


def quantize_s8(x, scale, axis=None, rounding="nearest", seed=0, step=0, peer0=0, out=None,
                n_threads=None) -> np.ndarray:
    """int8 = clamp(round(x * (1 / scale)), -127, 127) in float32; nearest = half to even, stochastic =
    floor(v) + (u < v - floor(v)) with u = rng_unit(seed, step, peer0 + row)[column]."""
    x2, ax = _as2d(np.asarray(x, dtype=np.float32), axis)
    if not np.all(np.isfinite(x2)):
        raise ValueError("x must be finite")
    v = x2 * (np.float32(1) / _scale_view(x2, scale, ax))  # the float32 reciprocal, as C
    v = np.minimum(np.maximum(v, np.float32(-127)), np.float32(127))
    if rounding == "nearest":
        q = np.rint(v)
    else:
        u = ref_rng.rng_unit(seed, step, peer0, x2.shape[0], x2.shape[1])
        f = np.floor(v)
        q = f + (u < (v - f)).astype(np.float32)
    return q.astype(np.int8).reshape(np.shape(x))


def dequantize_s8(q, scale, axis=None, out=None, n_threads=None) -> np.ndarray:
    """float32 = q * scale (scale per tensor or per channel along axis)."""
    q2, ax = _as2d(np.asarray(q), axis)
    return (q2.astype(np.float32) * _scale_view(q2, scale, ax)).reshape(np.shape(q))


def absmax_scale(x, axis=None, n_threads=None):
    """max|x| / 127 in float32 over the whole x (axis None) or per channel along axis (reduced
    over the other axis), at least FLT_MIN (2^-126); 1 where every |x| is 0."""
    x = np.asarray(x, dtype=np.float32)
    if not np.all(np.isfinite(x)):
        raise ValueError("x must be finite")
    tiny = np.finfo(np.float32).tiny  # FLT_MIN: the smallest scale whose reciprocal is finite
    if axis is None:
        m = np.abs(x).max() if x.size else np.float32(0)
        return np.float32(max(m / np.float32(127), tiny)) if m > 0 else np.float32(1)
    x2, ax = _as2d(x, axis)
    m = np.abs(x2).max(axis=1 - ax) if x2.shape[1 - ax] else np.zeros(x2.shape[ax], np.float32)
    return np.where(m > 0, np.maximum(m / np.float32(127), tiny), np.float32(1)).astype(np.float32)


def _batch_operands(a, b, trans_a, trans_b):
    a = np.asarray(a).astype(np.int64)
    b = np.asarray(b).astype(np.int64)
    if trans_a:
        a = np.swapaxes(a, -1, -2)
    if trans_b:
        b = np.swapaxes(b, -1, -2)
    return np.broadcast_to(a, (b.shape[0], *a.shape[-2:])), b


def gemm_s8_batched(a, b, out=None, n_threads=None, *, trans_a=False, trans_b=False):
    """int32 (P, m, n): a[p] @ b[p] exactly; a (m, k) is shared by every peer; trans_* read the
    stored (P, k, m) / (P, n, k) operand transposed."""
    a64, b64 = _batch_operands(a, b, trans_a, trans_b)
    return np.matmul(a64, b64).astype(np.int32)


def gemm_s8_batched_f32(a, b, a_scale, b_scale, out=None, n_threads=None, *, bias=None,
                        trans_a=False, trans_b=False):
    """float32 (P, m, n) = float32(a[p] @ b[p]) * float32(a_scale[p] * b_scale[p][col])
    + bias[p][col]: the C kernel's float32 operations (bit-identical without bias; with a bias the
    multiply-add may be fused, so compare with a tolerance of one rounding)."""
    a64, b64 = _batch_operands(a, b, trans_a, trans_b)
    n_peers = b64.shape[0]
    c = np.matmul(a64, b64).astype(np.float32)
    a_s = np.broadcast_to(np.asarray(a_scale, np.float32), (n_peers,))
    b_s = np.asarray(b_scale, np.float32)
    b_s = b_s.reshape(n_peers, -1) if b_s.ndim else np.broadcast_to(b_s, (n_peers, 1))
    y = c * (a_s[:, None] * b_s)[:, None, :]
    if bias is not None:
        y = y + np.asarray(bias, np.float32)[:, None, :]
    return y.astype(np.float32)


@dataclass(frozen=True)
class DenseCodes:
    """The codes of :func:`gemm_s8_dense_forward`, fields as ``decentlearn.ops.DenseCodes`` (the
    functions here read any object with these fields)."""

    xq: np.ndarray
    sx: np.ndarray
    wq: np.ndarray
    sw: np.ndarray


def gemm_s8_dense_forward(x, w, bias=None, relu=False, out=None, n_threads=None, codes=None):
    """(y, DenseCodes): per-peer, per-tensor absmax scales and nearest codes of x and w (an x with 1
    peer or peer stride 0 quantized once), y = float32(xq @ wq) * float32(sx * sw) + bias (+ 0
    without a bias), then np.maximum(y, 0) when relu. The C epilogue may fuse the multiply-add:
    compare y with a tolerance of one rounding when a bias is given; the codes are bit-identical."""
    x = np.asarray(x, dtype=np.float32)
    w = np.asarray(w, dtype=np.float32)
    n_peers = w.shape[0]
    if x.shape[0] == n_peers and n_peers > 1 and x.strides[0] == 0:
        x = x[:1]
    xf = np.ascontiguousarray(x).reshape(x.shape[0], -1)
    wf = np.ascontiguousarray(w).reshape(n_peers, -1)
    sx = absmax_scale(xf, axis=0)
    sw = absmax_scale(wf, axis=0)
    xq = quantize_s8(xf, sx, axis=0).reshape(x.shape)
    wq = quantize_s8(wf, sw, axis=0).reshape(w.shape)
    zero = np.zeros((n_peers, w.shape[2]), np.float32)
    y = gemm_s8_batched_f32(xq, wq, sx, sw, bias=zero if bias is None else bias)
    if relu:
        y = np.maximum(y, np.float32(0))
    if out is not None:
        out[...] = y
        y = out
    if codes is not None:  # written into the caller's arrays, as the kernel does
        for dst, src in ((codes.xq, xq), (codes.sx, sx), (codes.wq, wq), (codes.sw, sw)):
            dst[...] = src
        return y, codes
    return y, DenseCodes(xq, sx, wq, sw)


def gemm_s8_dense_backward(dy, codes, gw, gb, dx=None, mask=None, seed=0, step=0, peer0=0,
                           n_threads=None) -> None:
    """gb = sum over the batch in batch order (float32); dyq = stochastic codes of dy per peer and
    tensor (keyed by (seed, step, peer0 + p)); gw = float32(xq^T dyq) * float32(sx * sdy) + 0;
    dx = (float32(dyq wq^T) * float32(sdy * sw) + 0) * (mask > 0). Bit-identical to the kernel."""
    dy = np.asarray(dy, dtype=np.float32)
    n_peers, batch, n_out = dy.shape
    acc = np.zeros((n_peers, n_out), np.float32)
    if batch:
        acc = dy[:, 0].copy()
        for b in range(1, batch):
            acc += dy[:, b]
    gb[...] = acc
    dyf = np.ascontiguousarray(dy).reshape(n_peers, -1)
    sdy = absmax_scale(dyf, axis=0)
    dyq = quantize_s8(dyf, sdy, axis=0, rounding="stochastic", seed=seed, step=step,
                      peer0=peer0).reshape(dy.shape)
    sx = np.broadcast_to(codes.sx, (n_peers,))
    gw[...] = gemm_s8_batched_f32(codes.xq, dyq, sx, sdy, trans_a=True) + np.float32(0)
    if dx is not None:
        d = gemm_s8_batched_f32(dyq, codes.wq, sdy, codes.sw, trans_b=True) + np.float32(0)
        if mask is not None:
            d = d * (np.asarray(mask) > 0)
        dx[...] = d
