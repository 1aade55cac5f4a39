"""Reference (the spec) of natural compression and natural dithering, bit-identical to csrc/natural*.

Natural compression (Horváth et al., "Natural Compression for Distributed Deep Learning") rounds
each value to a signed power of two, unbiasedly, on the IEEE-754 bits: with u the low 23 bits of the
word the compressors' counter RNG (``rng_fast_u32``) draws for the element, the exponent of
``bits(|x|) + u`` is 2^e's or 2^(e+1)'s, the latter with probability exactly m for
|x| = 2^e (1 + m). One byte per value: bit 7 sign, bits 0-6 c: c = 0 is 0, c in 1..127 is
2^(c - 64). |x| < 2^-63 goes to 2^-63 with probability floor(|x| 2^94) / 2^31 (compared with the
word's low 31 bits), else to 0: unbiased up to an absolute error below 2^-94 (subnormals always
give 0). Results above 2^63 saturate to 2^63 (the only biased case). NaN/Inf raise ValueError; the
sign bit is kept only on nonzero codes; code 0x80 decodes to 0.

Natural dithering with s levels applies the same rounding to r = |x| / ||x||_p (p = 1, 2 or inf;
computed as described in ``dither_norms``) between the levels 0, 2^(1-s), ..., 1/2, 1: code
(level << 1) | sign, level l > 0 meaning 2^(l - s); r < 2^(1-s) goes to 2^(1-s) with probability
floor(r 2^(s+30)) / 2^31.
"""

from __future__ import annotations

import numpy as np

from decentlearn._reference.rng import rng_fast_u32 as rng_u32

#: Elements per tile of the C kernels (the norm's summation order depends on it).
CHUNK = 16384
_F32_MAX = float(np.finfo(np.float32).max)


def _rows(x: np.ndarray) -> np.ndarray:
    return x.reshape(1, -1) if x.ndim == 1 else x


def natural_encode(x, seed=0, step=0, peer0=0, out=None, n_threads=None) -> np.ndarray:
    x2 = _rows(x)
    b = np.ascontiguousarray(x2).view(np.uint32)
    a = b & np.uint32(0x7FFFFFFF)
    if (a >= 0x7F800000).any():
        raise ValueError("natural_encode: x must be finite (no NaN or infinity)")
    r = rng_u32(seed, step, peer0, *x2.shape)
    e = (a + (r & np.uint32(0x7FFFFF))) >> np.uint32(23)
    c = np.clip(e, 63, 190) - np.uint32(63)
    tiny = (a > 0) & (a < 0x20000000)
    k = (np.where(tiny, a, np.uint32(0)).view(np.float32) * np.float32(2.0**94)).astype(np.int32)
    bump = ((r & np.uint32(0x7FFFFFFF)).astype(np.int32) < k).astype(np.uint32)
    c = np.where(tiny, bump, c)
    code = (c | ((b >> np.uint32(24)) & (c + np.uint32(127)) & np.uint32(0x80))).astype(np.uint8)
    code = code.reshape(x.shape)
    if out is None:
        return code
    out[...] = code
    return out


def natural_decode(codes, out=None, n_threads=None) -> np.ndarray:
    v = codes.astype(np.uint32)
    c = v & np.uint32(0x7F)
    bits = ((v >> np.uint32(7)) << np.uint32(31)) | ((c + np.uint32(63)) << np.uint32(23))
    y = np.where(c == 0, np.uint32(0), bits).view(np.float32)
    if out is None:
        return y
    out[...] = y
    return out


def dither_bits(s: int) -> int:
    """Bits per code: 1 + ceil(log2(s + 1))."""
    return 1 + int(s).bit_length()


def dither_norms(x2: np.ndarray, p: float) -> np.ndarray:
    """Per-row ||x||_p as float32, summed exactly as the C kernel: rows split into CHUNK-element
    tiles; in a tile, element j goes to accumulator j % 16 (float64, in index order) and the 16
    accumulators are added by halves; tile sums are added in order; p = 2 takes the float64 sqrt.
    Norms above FLT_MAX are FLT_MAX. ValueError for NaN/Inf."""
    n_rows, dim = x2.shape
    a = np.ascontiguousarray(x2).view(np.uint32) & np.uint32(0x7FFFFFFF)
    if (a >= 0x7F800000).any():
        raise ValueError("dither_encode: x must be finite (no NaN or infinity)")
    if dim == 0:
        return np.zeros(n_rows, np.float32)
    if np.isinf(p):
        return a.max(axis=1).view(np.float32)
    cpr = -(-dim // CHUNK)
    v = np.zeros((n_rows, cpr * CHUNK), np.float64)
    v[:, :dim] = a.view(np.float32)
    if p == 2:
        v *= v
    acc = np.cumsum(v.reshape(n_rows, cpr, CHUNK // 16, 16), axis=2)[:, :, -1, :]
    for h in (8, 4, 2, 1):
        acc = acc[..., :h] + acc[..., h:2 * h]
    tot = np.cumsum(acc[..., 0], axis=1)[:, -1]
    if p == 2:
        tot = np.sqrt(tot)
    return np.minimum(tot, _F32_MAX).astype(np.float32)


def dither_encode(x, s, p=2.0, seed=0, step=0, peer0=0, n_threads=None):
    if not 1 <= s <= 31:
        raise ValueError(f"s must be in [1, 31], got {s}")
    if p not in (1.0, 2.0) and not (np.isinf(p) and p > 0):
        raise ValueError(f"p must be 1, 2 or inf, got {p}")
    x2 = _rows(x)
    norms = dither_norms(x2, p)
    b = np.ascontiguousarray(x2).view(np.uint32)
    n_rows, dim = x2.shape
    rnd = rng_u32(seed, step, peer0, n_rows, dim)
    safe = np.where(norms == 0, np.float32(1), norms)[:, None]
    r = np.minimum((b & np.uint32(0x7FFFFFFF)).view(np.float32) / safe, np.float32(1))
    ar = r.view(np.uint32)
    lo = np.uint32(127 - s)
    e = np.minimum((ar + (rnd & np.uint32(0x7FFFFF))) >> np.uint32(23), np.uint32(127))
    tiny = ar < ((127 - s + 1) << 23)
    lvl = np.minimum(np.maximum(e, lo) - lo, np.uint32(s))
    k = (np.where(tiny, ar, np.uint32(0)).view(np.float32) * np.float32(2.0 ** (s + 30)))
    bump = ((rnd & np.uint32(0x7FFFFFFF)).astype(np.int32) < k.astype(np.int32)).astype(np.uint32)
    lvl = np.where(tiny, bump, lvl)
    lvl = np.where(norms[:, None] == 0, np.uint32(0), lvl)
    code = ((lvl << np.uint32(1)) | ((b >> np.uint32(31)) & (lvl > 0))).astype(np.uint8)
    return norms, code


def dither_decode(norms, codes, s, out=None, n_threads=None) -> np.ndarray:
    norms = np.asarray(norms, np.float32)
    if (norms.view(np.uint32) >= 0x7F800000).any():
        raise ValueError("dither_decode: norms must be finite and >= 0")
    lvl = codes.astype(np.int64) >> 1
    if (lvl > s).any():
        raise ValueError("dither_decode: code levels must be <= s")
    scale = np.where(lvl == 0, 0.0, np.exp2((lvl - s).astype(np.float64))).astype(np.float32)
    mag = scale * norms.reshape(-1, 1)
    y = np.where((codes & 1).astype(bool) & (lvl > 0), -mag, mag).astype(np.float32)
    if out is None:
        return y
    out[...] = y
    return out
