"""The exact int8 GEMM of csrc/gemm_s8.c (gemm_s8_impl.h): packing, single and
peer-batched products with fused dequantization, int8 quantization, and the fused int8 dense
layer.

NumPy twin: decentlearn/_reference/gemm_s8.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from decentlearn._core import (
    absmax_scale as _core_absmax_scale,
    dequantize_s8 as _core_dequantize_s8,
    gemm_s8 as _core_gemm_s8,
    gemm_s8_batched as _core_gemm_s8_batched,
    gemm_s8_dense_backward as _core_gemm_s8_dense_backward,
    gemm_s8_dense_forward as _core_gemm_s8_dense_forward,
    gemm_s8_f32 as _core_gemm_s8_f32,
    gemm_s8_layout as _core_gemm_s8_layout,
    gemm_s8_pack_b as _core_gemm_s8_pack_b,
    quantize_s8 as _core_quantize_s8,
)
from decentlearn.ops.args import as_rows, check_seed, empty_aligned, f32_operand
from decentlearn.ops.threads import resolve_threads

__all__ = [
    "GEMM_S8_MAX_K", "PackedB", "pack_b_s8", "gemm_s8", "gemm_s8_f32", "quantize_s8",
    "dequantize_s8", "absmax_scale", "gemm_s8_batched", "gemm_s8_batched_f32", "DenseCodes",
    "gemm_s8_dense_forward", "gemm_s8_dense_backward"
]


#: int32 accumulation of int8 products is exact while k * 128 * 128 <= 2^31 - 1.
GEMM_S8_MAX_K = (2**31 - 1) // (128 * 128)


@dataclass(frozen=True, eq=False)
class PackedB:
    """B (k, n) int8 packed once for the microkernel of one layout, reusable across calls.

    data: the packed panels (uint8 bytes, 64-byte aligned, read-only); colsum: int32 column sums
    of B (padded to whole panels; the VNNI kernel subtracts 128 * colsum). layout: "s16" (generic,
    avx2 and avx512 paths) or "vnni" (avx512vnni and amx: the AMX tile kernel reads the same
    bytes). A PackedB is rejected by a path of another layout: pack again with :func:`pack_b_s8`.
    """

    data: np.ndarray
    colsum: np.ndarray
    k: int
    n: int
    layout: str

    @property
    def shape(self) -> tuple[int, int]:
        return (self.k, self.n)

    def __repr__(self) -> str:
        return f"PackedB(k={self.k}, n={self.n}, layout={self.layout!r}, nbytes={self.data.nbytes})"


def _gemm_check_k(k: int, name: str) -> None:
    if k > GEMM_S8_MAX_K:
        raise ValueError(f"{name}: k={k} exceeds {GEMM_S8_MAX_K}, the largest k for which int32 "
                         "accumulation of int8 products is exact")


def _gemm_int8_matrix(name: str, x) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(x).__name__}")
    if x.dtype != np.int8:
        raise TypeError(f"{name} must have dtype int8, got {x.dtype}")
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-dimensional, got shape {x.shape}")
    return x


def pack_b_s8(b: np.ndarray, n_threads: int | None = None) -> PackedB:
    """Packs B (k, n) int8, C-contiguous, for the active path's microkernel (see PackedB)."""
    b = _gemm_int8_matrix("b", b)
    k, n = b.shape
    _gemm_check_k(k, "pack_b_s8")
    lay = _core_gemm_s8_layout()
    nbytes = -(-n // lay["nr"]) * lay["nr"] * -(-k // lay["kg"]) * lay["kg"] * lay["b_elem"]
    buf = np.empty(nbytes + 64, dtype=np.uint8)
    off = (-buf.ctypes.data) % 64
    data = buf[off:off + nbytes]
    colsum = np.empty(-(-n // lay["nr"]) * lay["nr"], dtype=np.int32)
    _core_gemm_s8_pack_b(b, data, colsum, resolve_threads(n_threads, b.size))
    data.flags.writeable = False
    colsum.flags.writeable = False
    return PackedB(data, colsum, int(k), int(n), lay["name"])


def _gemm_packed(b, n_threads) -> PackedB:
    if isinstance(b, PackedB):
        return b
    if isinstance(b, np.ndarray):
        return pack_b_s8(b, n_threads)
    raise TypeError(f"b must be a numpy.ndarray or a PackedB, got {type(b).__name__}")


def _gemm_a(a) -> tuple[np.ndarray, bool]:
    if not isinstance(a, np.ndarray):
        raise TypeError(f"a must be a numpy.ndarray, got {type(a).__name__}")
    if a.dtype != np.int8:
        raise TypeError(f"a must have dtype int8, got {a.dtype}")
    if a.ndim == 1:
        return a.reshape(1, -1), True
    if a.ndim != 2:
        raise ValueError(f"a must be 1-D (k,) or 2-D (m, k), got shape {a.shape}")
    return a, False


def gemm_s8(a: np.ndarray, b, out: np.ndarray | None = None,
            n_threads: int | None = None) -> np.ndarray:
    """Exact int8 GEMM: int32 (m, n) = a (m, k) int8 @ b, b a (k, n) int8 array (packed on the fly)
    or a :class:`PackedB`. Equal to ``a.astype(np.int64) @ b.astype(np.int64)`` for k <=
    GEMM_S8_MAX_K (131071; larger k -> ValueError). a: C-contiguous (a 1-D a is one row and gives
    a 1-D result). out: optional (m, n) int32, not overlapping a. Any thread count, same result."""
    a2, vec = _gemm_a(a)
    _gemm_check_k(a2.shape[1], "gemm_s8")
    pb = _gemm_packed(b, n_threads)
    if out is None:
        out = empty_aligned((pb.n,) if vec else (a2.shape[0], pb.n), np.int32)
    elif not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy.ndarray, got {type(out).__name__}")
    out2 = out.reshape(1, -1) if (vec and out.ndim == 1) else out
    _core_gemm_s8(a2, pb.data, pb.colsum, pb.layout, pb.k, pb.n, out2, resolve_threads(n_threads))
    return out


def gemm_s8_f32(a: np.ndarray, packed_b, a_scale: float, b_scale, bias: np.ndarray | None = None,
                out: np.ndarray | None = None, n_threads: int | None = None) -> np.ndarray:
    """Int8 GEMM with fused dequantization: float32 (m, n) = (a @ b as exact int32) * a_scale *
    b_scale[col] + bias[col]. b_scale: a float (per tensor) or an (n,) float32 array (per output
    column); bias: (n,) float32 or None. Applied to each int32 tile before it is stored. a_scale
    and b_scale must be finite (ValueError for NaN/inf)."""
    a2, vec = _gemm_a(a)
    _gemm_check_k(a2.shape[1], "gemm_s8_f32")
    pb = _gemm_packed(packed_b, n_threads)
    a_scale = float(a_scale)
    if not np.isfinite(a_scale):
        raise ValueError(f"a_scale must be finite, got {a_scale}")
    if isinstance(b_scale, np.ndarray):
        bs = b_scale
    elif isinstance(b_scale, (float, int, np.floating, np.integer)) \
            and not isinstance(b_scale, bool):
        bs = np.array([b_scale], dtype=np.float32)
    else:
        raise TypeError(f"b_scale must be a float or a float32 array, got {type(b_scale).__name__}")
    if out is None:
        out = empty_aligned((pb.n,) if vec else (a2.shape[0], pb.n), np.float32)
    elif not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy.ndarray, got {type(out).__name__}")
    out2 = out.reshape(1, -1) if (vec and out.ndim == 1) else out
    _core_gemm_s8_f32(a2, pb.data, pb.colsum, pb.layout, pb.k, pb.n, a_scale, bs, bias, out2,
                      resolve_threads(n_threads))
    return out


_GEMM_ROUNDING = {"nearest": 0, "stochastic": 1}


def _gemm_axis(x: np.ndarray, axis) -> int:
    """The C axis (-1 per tensor, 0 per row, 1 per column) of the 2-D view of x."""
    if axis is None:
        return -1
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be None or an int, got {type(axis).__name__}")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis} is out of range for an array of shape {x.shape}")
    return 1 if x.ndim == 1 else int(axis) % 2


def _gemm_scale(scale, c_axis: int) -> np.ndarray:
    if c_axis < 0:
        if isinstance(scale, np.ndarray) and scale.size == 1:
            scale = scale.reshape(())
        if isinstance(scale, (np.ndarray, bool, np.bool_)) or \
                not isinstance(scale, (float, int, np.floating, np.integer)):
            raise TypeError("scale must be a float when axis is None, or a 1-D float32 array with "
                            f"axis set, got {type(scale).__name__}")
        return np.array([scale], dtype=np.float32)
    if not isinstance(scale, np.ndarray):
        raise TypeError("scale must be a float32 array when axis is set, got "
                        f"{type(scale).__name__}")
    return scale


def quantize_s8(x: np.ndarray, scale, axis: int | None = None, rounding: str = "nearest",
                seed: int = 0, step: int = 0, peer0: int = 0, out: np.ndarray | None = None,
                n_threads: int | None = None) -> np.ndarray:
    """int8 codes q = clamp(round(x * (1 / scale)), -127, 127) of float32 x (1-D or 2-D), in float32
    with the reciprocal rounded once.

    scale: a float (per tensor, axis None) or a float32 array of length x.shape[axis] (per channel:
    axis 0 one scale per row, axis 1 one per column), every value finite and >= FLT_MIN (2^-126,
    so that 1 / scale is finite). rounding:
    "nearest" (half to even) or "stochastic" (floor(v) + (u < v - floor(v)), u from the counter RNG
    keyed by (seed, step, peer0 + row, column); unbiased, thread-count independent). NaN/inf in x
    -> ValueError."""
    x2 = as_rows("x", x, np.float32)
    c_axis = _gemm_axis(x, axis)
    sc = _gemm_scale(scale, c_axis)
    if rounding not in _GEMM_ROUNDING:
        raise ValueError(f"rounding must be 'nearest' or 'stochastic', got {rounding!r}")
    seed, step, peer0 = check_seed(seed, step, peer0)
    if out is None:
        out = np.empty(x.shape, dtype=np.int8)
    elif not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy.ndarray, got {type(out).__name__}")
    out2 = out.reshape(x2.shape) if out.shape == x.shape and out.flags.c_contiguous else out
    _core_quantize_s8(x2, sc, c_axis, _GEMM_ROUNDING[rounding], seed, step, peer0, out2,
                      resolve_threads(n_threads, x2.size))
    return out


def dequantize_s8(q: np.ndarray, scale, axis: int | None = None, out: np.ndarray | None = None,
                  n_threads: int | None = None) -> np.ndarray:
    """float32 = q * scale, scale shaped as for :func:`quantize_s8` (every value finite:
    ValueError for NaN/inf)."""
    q2 = as_rows("q", q, np.int8)
    c_axis = _gemm_axis(q, axis)
    sc = _gemm_scale(scale, c_axis)
    if out is None:
        out = np.empty(q.shape, dtype=np.float32)
    elif not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy.ndarray, got {type(out).__name__}")
    out2 = out.reshape(q2.shape) if out.shape == q.shape and out.flags.c_contiguous else out
    _core_dequantize_s8(q2, sc, c_axis, out2, resolve_threads(n_threads, q2.size))
    return out


def absmax_scale(x: np.ndarray, axis: int | None = None, n_threads: int | None = None):
    """max|x| / 127 (float32; at least FLT_MIN = 2^-126, so a channel whose max is tiny or
    subnormal still gets a scale quantize_s8 accepts; 1 where every |x| is 0): a np.float32 for
    the whole x (axis None), or
    an array of length x.shape[axis] with one scale per channel along axis, ready for
    :func:`quantize_s8` with the same axis. NaN/inf -> ValueError."""
    x2 = as_rows("x", x, np.float32)
    c_axis = _gemm_axis(x, axis)
    n = 1 if c_axis < 0 else x2.shape[c_axis]
    out = np.empty(n, dtype=np.float32)
    _core_absmax_scale(x2, c_axis, out, resolve_threads(n_threads, x2.size))
    return out[0] if c_axis < 0 else out


def _gemm_batch_a(a, n_peers: int) -> np.ndarray:
    if not isinstance(a, np.ndarray):
        raise TypeError(f"a must be a numpy.ndarray, got {type(a).__name__}")
    if a.dtype != np.int8:
        raise TypeError(f"a must have dtype int8, got {a.dtype}")
    if a.ndim == 2:  # shared by every peer: a stride-0 view, never a copy
        return np.broadcast_to(a, (n_peers, *a.shape))
    if a.ndim != 3:
        raise ValueError(f"a must be 2-D (m, k) shared or 3-D (P, m, k), got shape {a.shape}")
    return a


def _gemm_batch_b(b) -> np.ndarray:
    if not isinstance(b, np.ndarray):
        raise TypeError(f"b must be a numpy.ndarray, got {type(b).__name__}")
    if b.dtype != np.int8:
        raise TypeError(f"b must have dtype int8, got {b.dtype}")
    if b.ndim != 3:
        raise ValueError(f"b must be 3-D (P, k, n), got shape {b.shape}")
    return b


def _gemm_batch_out(out, shape, dtype) -> np.ndarray:
    if out is None:
        return empty_aligned(shape, dtype)
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy.ndarray, got {type(out).__name__}")
    if out.dtype != dtype:
        raise TypeError(f"out must have dtype {np.dtype(dtype).name}, got {out.dtype}")
    if out.shape != shape:
        raise ValueError(f"out must have shape {shape}, got {out.shape}")
    return out


def gemm_s8_batched(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None,
                    n_threads: int | None = None, *, trans_a: bool = False,
                    trans_b: bool = False) -> np.ndarray:
    """Exact int8 GEMM per peer: int32 (P, m, n) with out[p] = a[p] @ b[p].

    a: (P, m, k) int8, or (m, k) shared by every peer (read once, never copied); b: (P, k, n) int8.
    trans_a / trans_b: a is stored (P, k, m) / b is stored (P, n, k) and read transposed (no copy).
    Every operand and out may be a strided view (peer and row strides >= 0) whose last axis is
    contiguous, e.g. a peer-batched slice of a parameter matrix. B is packed per peer inside the
    call. Bit-identical for every thread count and ISA path."""
    b = _gemm_batch_b(b)
    a = _gemm_batch_a(a, b.shape[0])
    m = a.shape[2] if trans_a else a.shape[1]
    n = b.shape[1] if trans_b else b.shape[2]
    out = _gemm_batch_out(out, (b.shape[0], m, n), np.int32)
    return _core_gemm_s8_batched(a, b, bool(trans_a), bool(trans_b), None, None, None, out,
                                 resolve_threads(n_threads))


def _gemm_peer_scale(name: str, s, n_peers: int, n: int | None) -> np.ndarray:
    arr = np.asarray(s)
    if arr.dtype.kind not in "fiu":
        raise TypeError(f"{name} must be a float or a float32 array, got dtype {arr.dtype}")
    if arr.ndim == 0:
        arr = np.full(n_peers, arr, dtype=np.float32)
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    shapes = [(n_peers,)] + ([(n_peers, n)] if n is not None else [])
    if arr.shape not in shapes:
        raise ValueError(f"{name} must have shape {' or '.join(map(str, shapes))}, got {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite")
    return arr


def gemm_s8_batched_f32(a: np.ndarray, b: np.ndarray, a_scale, b_scale,
                        out: np.ndarray | None = None, n_threads: int | None = None, *,
                        bias: np.ndarray | None = None, trans_a: bool = False,
                        trans_b: bool = False) -> np.ndarray:
    """Batched int8 GEMM with fused dequantization: float32 (P, m, n) with ``out[p] =
    float32(a[p] @ b[p] as exact int32) * (a_scale[p] * b_scale[p][col]) + bias[p][col]``.

    a_scale: (P,) per-peer scales of A (a float: the same for every peer); b_scale: (P,) per peer
    and tensor, or (P, n) per peer and output column; bias: (P, n) float32 or None. Operands as
    for :func:`gemm_s8_batched`; out may be a strided view (e.g. the gradient rows of a layer)."""
    b = _gemm_batch_b(b)
    n_peers = b.shape[0]
    a = _gemm_batch_a(a, n_peers)
    m = a.shape[2] if trans_a else a.shape[1]
    n = b.shape[1] if trans_b else b.shape[2]
    a_s = _gemm_peer_scale("a_scale", a_scale, n_peers, None)
    b_s = _gemm_peer_scale("b_scale", b_scale, n_peers, n)
    if bias is not None:
        if not isinstance(bias, np.ndarray):
            raise TypeError(f"bias must be a numpy.ndarray or None, got {type(bias).__name__}")
        if bias.dtype != np.float32:
            raise TypeError(f"bias must have dtype float32, got {bias.dtype}")
        bias = np.ascontiguousarray(bias)
    out = _gemm_batch_out(out, (n_peers, m, n), np.float32)
    return _core_gemm_s8_batched(a, b, bool(trans_a), bool(trans_b), a_s, b_s, bias, out,
                                 resolve_threads(n_threads))


@dataclass(frozen=True)
class DenseCodes:
    """The int8 codes a fused int8 dense forward keeps for its backward: xq (1 or P, B, I) and sx
    (1 or P,) of the inputs (1: an input shared by every peer), wq (P, I, O) and sw (P,) of the
    weights; per-peer, per-tensor absmax scales, nearest rounding."""

    xq: np.ndarray
    sx: np.ndarray
    wq: np.ndarray
    sw: np.ndarray


def gemm_s8_dense_forward(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None,
                          relu: bool = False, out: np.ndarray | None = None,
                          n_threads: int | None = None,
                          codes: DenseCodes | None = None) -> tuple[np.ndarray, DenseCodes]:
    """int8 dense layer forward in one C pass per peer: quantizes x[p] and w[p] (per tensor, absmax
    scale, nearest even), multiplies the codes exactly and dequantizes in the epilogue:
    ``y[p] = act(float32(xq[p] @ wq[p]) * (sx[p] * sw[p]) + bias[p])``, act the ReLU of
    ``np.maximum(v, 0)`` when ``relu``. x (P or 1, B, I) float32 (1: shared, quantized once), w
    (P, I, O) with each peer's matrix contiguous (rows of the parameter matrix are), bias (P, O) or
    None. Peers are split between threads; the result does not depend on their count. Returns y
    (P, B, O) and the codes for :func:`gemm_s8_dense_backward`, written into ``codes`` when
    given (arrays of the shapes and dtypes the kernel would allocate, C-contiguous, reused across
    calls by the int8 Dense layer: fresh ones are page faults every step). NumPy reference:
    decentlearn._reference.gemm_s8.gemm_s8_dense_forward."""
    x = f32_operand("x", x, 3)
    w = f32_operand("w", w, 3)
    if bias is not None:
        bias = f32_operand("bias", bias, 2)
    n_peers, n_in, n_out = w.shape
    if x.shape[0] == n_peers and n_peers > 1 and x.strides[0] == 0:
        x = x[:1]  # a stride-0 broadcast is one shared input
    px, batch = x.shape[0], x.shape[1]
    if out is None:
        out = np.empty((n_peers, batch, n_out), dtype=np.float32)
    if codes is None:
        codes = DenseCodes(np.empty((px, batch, n_in), np.int8), np.empty(px, np.float32),
                           np.empty((n_peers, n_in, n_out), np.int8),
                           np.empty(n_peers, np.float32))
    elif not isinstance(codes, DenseCodes):
        raise TypeError(f"codes must be a DenseCodes or None, got {type(codes).__name__}")
    _core_gemm_s8_dense_forward(x, w, bias, bool(relu), out, codes.xq, codes.sx, codes.wq,
                                codes.sw, resolve_threads(n_threads))
    return out, codes


def gemm_s8_dense_backward(dy: np.ndarray, codes: DenseCodes, gw: np.ndarray, gb: np.ndarray,
                           dx: np.ndarray | None = None, mask: np.ndarray | None = None,
                           seed: int = 0, step: int = 0, peer0: int = 0,
                           n_threads: int | None = None) -> None:
    """Backward of :func:`gemm_s8_dense_forward` from its codes, in one C pass per peer:
    ``gb[p] = sum_b dy[p]`` (in batch order), dyq = stochastic codes of dy[p] (per tensor, scale
    sdy, counter RNG keyed by (seed, step, peer0 + p) at index b * O + o),
    ``gw[p] = float32(xq[p]^T @ dyq) * (sx[p] * sdy) + 0`` and, when dx is given,
    ``dx[p] = (float32(dyq @ wq[p]^T) * (sdy * sw[p]) + 0) * (mask[p] > 0)`` (mask None: no
    factor). dy (P, B, O), dx and mask (P, B, I), gw (P, I, O) with each peer's matrix contiguous,
    gb (P, O): float32 views with contiguous rows. NumPy reference:
    decentlearn._reference.gemm_s8.gemm_s8_dense_backward."""
    if not isinstance(codes, DenseCodes):
        raise TypeError(f"codes must be the DenseCodes of gemm_s8_dense_forward, got "
                        f"{type(codes).__name__}")
    dy = f32_operand("dy", dy, 3)
    seed, step, peer0 = check_seed(seed, step, peer0)
    _core_gemm_s8_dense_backward(dy, codes.xq, codes.sx, codes.wq, codes.sw, mask, gw, gb, dx,
                                 seed, step, peer0, resolve_threads(n_threads))
