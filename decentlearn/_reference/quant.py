"""Reference quantizers (the spec of csrc/quant.c): QSGD, CGX-style buckets, scaled sign, int8.

Same signatures as the ``decentlearn.ops`` wrappers (``n_threads`` is ignored) and bit-identical
results: float32 arithmetic op for op as the C code (no fused multiply-adds), row sums in float64
over chunks of ``CHUNK`` values in ``LANES`` lanes combined in the C kernels' fixed order, random
numbers from ``_reference.rng.rng_fast_unit`` (the compressors' generator). Stochastic rounding is
q = floor(t) + (u < t - floor(t)) for t >= 0 (int8 rounds |t| and keeps the sign) with u the
generator's unit float for (seed, step, peer0 + row, index), so E[q] = t.
"""

from __future__ import annotations

import numpy as np

from decentlearn._reference import bitpack as ref_bp
from decentlearn._reference import rng as ref_rng

CHUNK = 8192  # DL_QUANT_CHUNK
LANES = 8     # DL_QUANT_LANES
FLT_MAX = float(np.finfo(np.float32).max)


def qsgd_bits(levels: int) -> int:
    return 1 + int(levels).bit_length()


def _rows(x: np.ndarray) -> np.ndarray:
    return x.reshape(1, -1) if x.ndim == 1 else x


def _check_finite(x: np.ndarray) -> None:
    if not np.isfinite(x).all():
        raise ValueError("x must be finite (no NaN or infinity)")


def row_sums(v: np.ndarray) -> np.ndarray:
    """Per-row float64 sums of the non-negative (n, dim) float64 v in the kernels' order: lane l of
    a chunk adds values l, l + LANES, ... in order; lanes are added 0, 1, ...; chunks in order."""
    n, dim = v.shape
    n_ch = -(-dim // CHUNK)
    if n_ch == 0:
        return np.zeros(n)
    pad = np.zeros((n, n_ch * CHUNK))
    pad[:, :dim] = v
    lanes = np.cumsum(pad.reshape(n, n_ch, CHUNK // LANES, LANES), axis=2)[:, :, -1, :]
    chunks = np.cumsum(lanes, axis=2)[:, :, -1]
    return np.cumsum(chunks, axis=1)[:, -1]


def _inv(s: np.ndarray) -> np.ndarray:
    """float32(min(1 / s, FLT_MAX)) for s > 0 (s float64), 0 where s == 0."""
    with np.errstate(divide="ignore"):
        inv = np.minimum(1.0 / s, FLT_MAX)
    return np.where(s > 0, inv, 0.0).astype(np.float32)


def _decodable(scale: np.ndarray, top: int, levels: int = 1) -> np.ndarray:
    """float32 ``scale`` (a row's norm, or its step when ``levels`` is 1) stepped down, where
    needed, to the largest float32 whose decoded maximum ``top * float32(scale / levels)`` is
    finite in float32 (the rounding of the division may round up near FLT_MAX)."""
    scale = np.array(scale, dtype=np.float32)
    with np.errstate(over="ignore"):
        while True:
            step = (scale.astype(np.float64) / levels).astype(np.float32)
            bad = ~(np.float32(top) * step <= np.float32(FLT_MAX))
            if not bad.any():
                return scale
            scale[bad] = np.nextafter(scale[bad], np.float32(0))


def _round(t: np.ndarray, u: np.ndarray) -> np.ndarray:
    """floor(t) + (u < t - floor(t)) as int32, t float32."""
    i = np.floor(t)
    return i.astype(np.int32) + (u < (t - i)).astype(np.int32)


def qsgd_encode(x, levels, seed=0, step=0, peer0=0, out=None, n_threads=None):
    x = _rows(x)
    _check_finite(x)
    rows, dim = x.shape
    x64 = x.astype(np.float64)
    with np.errstate(over="ignore"):  # a norm past FLT_MAX is clamped below
        norm = np.sqrt(row_sums(x64 * x64)).astype(np.float32)
    norm = np.where(np.isinf(norm), np.float32(FLT_MAX), norm).astype(np.float32)
    norm = _decodable(norm, levels, levels)
    inv = _inv(norm.astype(np.float64) / levels)
    u = ref_rng.rng_fast_unit(seed, step, peer0, rows, dim)
    t = np.minimum(np.abs(x) * inv[:, None], np.float32(levels))
    level = _round(t, u)
    codes = ((level << 1) | (x < 0)).astype(np.uint8)
    return norm, ref_bp.bitpack(codes, qsgd_bits(levels))


def qsgd_decode(norm, packed, levels, dim, out=None, n_threads=None):
    packed = _rows(packed)
    codes = ref_bp.bitunpack(packed, qsgd_bits(levels), dim)
    scale = (norm.astype(np.float64) / levels).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        top = np.float32(levels) * scale
    if not (np.all(norm >= 0) and np.all(np.abs(norm) <= FLT_MAX) and np.all(np.abs(top) <= FLT_MAX)
            and np.all(codes >> 1 <= levels)):
        raise ValueError("qsgd_decode: malformed message")
    v = (codes >> 1).astype(np.float32) * scale[:, None]
    return np.where(codes & 1, -v, v).astype(np.float32)


def _order_keys(x: np.ndarray) -> np.ndarray:
    b = x.view(np.int32)
    return b ^ ((b >> 31) & np.int32(0x7FFFFFFF))


def _from_keys(k: np.ndarray) -> np.ndarray:
    return (k ^ ((k >> 31) & np.int32(0x7FFFFFFF))).astype(np.int32).view(np.float32)


def bucket_encode(x, bits, bucket, seed=0, step=0, peer0=0, out=None, n_threads=None):
    x = _rows(x)
    _check_finite(x)
    rows, dim = x.shape
    nb = -(-dim // bucket)
    qmax = (1 << bits) - 1
    keys = np.full((rows, nb * bucket), np.iinfo(np.int32).max, np.int32)
    keys[:, :dim] = _order_keys(np.ascontiguousarray(x))
    lo = _from_keys(keys.reshape(rows, nb, bucket).min(axis=2))
    keys[:, dim:] = np.iinfo(np.int32).min
    hi = _from_keys(keys.reshape(rows, nb, bucket).max(axis=2))
    scale = ((hi.astype(np.float64) - lo.astype(np.float64)) / qmax).astype(np.float32)
    with np.errstate(over="ignore"):  # a bucket spanning about FLT_MAX: keep lo + qmax s finite
        bad = ~(np.abs(lo + np.float32(qmax) * scale) <= np.float32(FLT_MAX))
        scale[bad] = (np.minimum(FLT_MAX - lo[bad].astype(np.float64), FLT_MAX)
                      / qmax).astype(np.float32)
        while bad.any():
            bad = ~(np.abs(lo + np.float32(qmax) * scale) <= np.float32(FLT_MAX))
            scale[bad] = np.nextafter(scale[bad], np.float32(0))
    inv = _inv(scale.astype(np.float64))
    per = lambda a: np.repeat(a, bucket, axis=1)[:, :dim]
    u = ref_rng.rng_fast_unit(seed, step, peer0, rows, dim)
    with np.errstate(over="ignore"):
        t = np.minimum((x - per(lo)) * per(inv), np.float32(qmax))
    codes = _round(t, u).astype(np.uint8)
    return lo.reshape(rows, nb), scale.reshape(rows, nb), ref_bp.bitpack(codes, bits)


def bucket_decode(lo, scale, packed, bits, bucket, dim, out=None, n_threads=None):
    lo, scale, packed = _rows(lo), _rows(scale), _rows(packed)
    qmax = np.float32((1 << bits) - 1)
    with np.errstate(over="ignore", invalid="ignore"):
        top = lo + qmax * scale
    if not (np.all(np.abs(lo) <= FLT_MAX) and np.all(scale >= 0) and np.all(scale <= FLT_MAX)
            and np.all(np.abs(top) <= FLT_MAX)):
        raise ValueError("bucket_decode: malformed message")
    codes = ref_bp.bitunpack(packed, bits, dim).astype(np.float32)
    per = lambda a: np.repeat(a, bucket, axis=1)[:, :dim]
    return (per(lo) + codes * per(scale)).astype(np.float32)


def sign_encode(x, out=None, n_threads=None):
    x = _rows(x)
    _check_finite(x)
    rows, dim = x.shape
    total = row_sums(np.abs(x.astype(np.float64)))
    scale = (total / dim).astype(np.float32) if dim else np.zeros(rows, np.float32)
    return scale, ref_bp.bitpack((x < 0).astype(np.uint8), 1)


def sign_decode(scale, packed, dim, out=None, n_threads=None):
    if not (np.all(scale >= 0) and np.all(scale <= FLT_MAX)):
        raise ValueError("sign_decode: malformed message")
    bits = ref_bp.bitunpack(_rows(packed), 1, dim)
    s = scale[:, None].astype(np.float32)
    return np.where(bits == 1, -s, s).astype(np.float32)


def int8_encode(x, seed=0, step=0, peer0=0, out=None, n_threads=None):
    x = _rows(x)
    _check_finite(x)
    rows, dim = x.shape
    m = np.abs(x).max(axis=1) if dim else np.zeros(rows, np.float32)
    scale = _decodable((m.astype(np.float64) / 127.0).astype(np.float32), 127)
    inv = _inv(scale.astype(np.float64))
    u = ref_rng.rng_fast_unit(seed, step, peer0, rows, dim)
    a = np.minimum(np.abs(x * inv[:, None]), np.float32(127))
    m = _round(a, u)
    return scale, np.where(x < 0, -m, m).astype(np.int8)


def int8_decode(scale, q, out=None, n_threads=None):
    q = _rows(q)
    with np.errstate(over="ignore", invalid="ignore"):
        top = np.float32(127) * scale
    if not (np.all(scale >= 0) and np.all(np.abs(top) <= FLT_MAX) and np.all(q >= -127)):
        raise ValueError("int8_decode: malformed message")
    return (q.astype(np.float32) * scale[:, None]).astype(np.float32)
