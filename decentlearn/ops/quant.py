"""The quantizers of csrc/quant.c (quant_impl.h): QSGD, CGX-style buckets, scaled sign and
int8 with stochastic rounding, each an encoder and an untrusting decoder.

NumPy twin: decentlearn/_reference/quant.py.
"""

from __future__ import annotations

import numpy as np

from decentlearn._core import (
    bucket_decode as _core_bucket_decode,
    bucket_encode as _core_bucket_encode,
    int8_decode as _core_int8_decode,
    int8_encode as _core_int8_encode,
    qsgd_decode as _core_qsgd_decode,
    qsgd_encode as _core_qsgd_encode,
    sign_decode as _core_sign_decode,
    sign_encode as _core_sign_encode,
)
from decentlearn.ops.args import as_rows, check_int, check_seed
from decentlearn.ops.threads import resolve_threads

__all__ = [
    "qsgd_bits", "qsgd_encode", "qsgd_decode", "bucket_encode", "bucket_decode", "sign_encode",
    "sign_decode", "int8_encode", "int8_decode"
]


def qsgd_bits(levels: int) -> int:
    """Bits of one QSGD code: 1 sign bit + ceil(log2(levels + 1)) level bits."""
    levels = check_int("levels", levels, 1, 127)
    return 1 + levels.bit_length()


def _out_tuple(out, shapes_dtypes: list[tuple[tuple[int, ...], type]]) -> tuple:
    if out is None:
        return tuple(np.empty(s, dtype=d) for s, d in shapes_dtypes)
    if not isinstance(out, tuple) or len(out) != len(shapes_dtypes):
        raise TypeError(f"out must be a tuple of {len(shapes_dtypes)} arrays or None")
    return out


def qsgd_encode(x: np.ndarray, levels: int, seed: int = 0, step: int = 0, peer0: int = 0,
                out: tuple | None = None, n_threads: int | None = None):
    """QSGD with ``levels`` = S in [1, 127] (Alistarh et al. 2017), each row of x on its own.

    Returns ``(norm, packed)``: norm (n_rows,) float32 = ||row||_2, and packed (n_rows,
    ceil(dim * qsgd_bits(S) / 8)) uint8, code j = level_j << 1 | (x_j < 0) at qsgd_bits(S) bits,
    little-endian (as ``bitpack``); level_j = floor(t) + (u_j < t - floor t), t = min(|x_j| * S /
    norm, S), u_j the counter RNG's unit float. A 1-D x is one row. NaN/inf -> ValueError.
    """
    x2 = as_rows("x", x, np.float32)
    levels = check_int("levels", levels, 1, 127)
    seed, step, peer0 = check_seed(seed, step, peer0)
    rows, dim = x2.shape
    norm, packed = _out_tuple(out, [((rows,), np.float32),
                                    ((rows, (dim * qsgd_bits(levels) + 7) // 8), np.uint8)])
    _core_qsgd_encode(x2, levels, seed, step, peer0, norm, packed,
                      resolve_threads(n_threads, x2.size))
    return norm, packed


def qsgd_decode(norm: np.ndarray, packed: np.ndarray, levels: int, dim: int,
                out: np.ndarray | None = None, n_threads: int | None = None) -> np.ndarray:
    """(n_rows, dim) float32 from qsgd_encode's output: +-level * (norm / S). Untrusted input:
    ValueError unless every norm is finite and >= 0 and every level <= S."""
    levels = check_int("levels", levels, 1, 127)
    packed2 = as_rows("packed", packed, np.uint8)
    check_int("dim", dim, 0, 2**62)
    if out is None:
        out = np.empty((packed2.shape[0], dim), dtype=np.float32)
    return _core_qsgd_decode(norm, packed2, levels, out, resolve_threads(n_threads, out.size))


def bucket_encode(x: np.ndarray, bits: int, bucket: int, seed: int = 0, step: int = 0,
                  peer0: int = 0, out: tuple | None = None, n_threads: int | None = None):
    """Bucketed min/max quantization (as in CGX): bits in {4, 8}, bucket values per scale.

    Returns ``(lo, scale, packed)``: lo and scale (n_rows, ceil(dim / bucket)) float32 (bucket
    min and (max - min) / (2^bits - 1); the last bucket may be short), packed (n_rows,
    ceil(dim * bits / 8)) uint8 codes q = floor(t) + (u < t - floor t), t = min((x - lo) / scale,
    2^bits - 1) (all 0 when scale is 0). NaN/inf -> ValueError.
    """
    x2 = as_rows("x", x, np.float32)
    if bits not in (4, 8) or isinstance(bits, (bool, np.bool_)):
        raise ValueError(f"bits must be 4 or 8, got {bits!r}")
    bucket = check_int("bucket", bucket, 1, 1 << 24)
    seed, step, peer0 = check_seed(seed, step, peer0)
    rows, dim = x2.shape
    nb = -(-dim // bucket)
    lo, scale, packed = _out_tuple(out, [((rows, nb), np.float32), ((rows, nb), np.float32),
                                         ((rows, (dim * bits + 7) // 8), np.uint8)])
    _core_bucket_encode(x2, int(bits), bucket, seed, step, peer0, lo, scale, packed,
                        resolve_threads(n_threads, x2.size))
    return lo, scale, packed


def bucket_decode(lo: np.ndarray, scale: np.ndarray, packed: np.ndarray, bits: int, bucket: int,
                  dim: int, out: np.ndarray | None = None,
                  n_threads: int | None = None) -> np.ndarray:
    """(n_rows, dim) float32 = lo + q * scale per bucket. Untrusted input: ValueError unless lo is
    finite, scale finite and >= 0, and lo + (2^bits - 1) * scale finite."""
    if bits not in (4, 8) or isinstance(bits, (bool, np.bool_)):
        raise ValueError(f"bits must be 4 or 8, got {bits!r}")
    bucket = check_int("bucket", bucket, 1, 1 << 24)
    check_int("dim", dim, 0, 2**32)
    packed2 = as_rows("packed", packed, np.uint8)
    if out is None:
        out = np.empty((packed2.shape[0], dim), dtype=np.float32)
    return _core_bucket_decode(as_rows("lo", lo, np.float32), as_rows("scale", scale, np.float32),
                               packed2, int(bits), bucket, out,
                               resolve_threads(n_threads, out.size))


def sign_encode(x: np.ndarray, out: tuple | None = None, n_threads: int | None = None):
    """Scaled sign (EF-signSGD): returns ``(scale, packed)``, scale (n_rows,) float32 =
    ||row||_1 / dim (float64 sums), packed (n_rows, ceil(dim / 8)) uint8, bit j = x_j < 0,
    little-endian. NaN/inf -> ValueError."""
    x2 = as_rows("x", x, np.float32)
    rows, dim = x2.shape
    scale, packed = _out_tuple(out, [((rows,), np.float32), ((rows, (dim + 7) // 8), np.uint8)])
    _core_sign_encode(x2, scale, packed, resolve_threads(n_threads, x2.size))
    return scale, packed


def sign_decode(scale: np.ndarray, packed: np.ndarray, dim: int, out: np.ndarray | None = None,
                n_threads: int | None = None) -> np.ndarray:
    """(n_rows, dim) float32 = -scale where the bit is set, +scale elsewhere; ValueError unless
    every scale is finite and >= 0."""
    packed2 = as_rows("packed", packed, np.uint8)
    check_int("dim", dim, 0, 2**62)
    if out is None:
        out = np.empty((packed2.shape[0], dim), dtype=np.float32)
    return _core_sign_decode(scale, packed2, out, resolve_threads(n_threads, out.size))


def int8_encode(x: np.ndarray, seed: int = 0, step: int = 0, peer0: int = 0,
                out: tuple | None = None, n_threads: int | None = None):
    """int8 with stochastic rounding: returns ``(scale, q)``, scale (n_rows,) float32 =
    max|row| / 127, q (n_rows, dim) int8 = sign(x) (floor a + (u < a - floor a)),
    a = min(|x| / scale, 127) (stochastic rounding of the magnitude). NaN/inf -> ValueError."""
    x2 = as_rows("x", x, np.float32)
    seed, step, peer0 = check_seed(seed, step, peer0)
    rows, dim = x2.shape
    scale, q = _out_tuple(out, [((rows,), np.float32), ((rows, dim), np.int8)])
    _core_int8_encode(x2, seed, step, peer0, scale, q, resolve_threads(n_threads, x2.size))
    return scale, q


def int8_decode(scale: np.ndarray, q: np.ndarray, out: np.ndarray | None = None,
                n_threads: int | None = None) -> np.ndarray:
    """(n_rows, dim) float32 = q * scale; ValueError unless every scale is finite and >= 0 and
    every q in [-127, 127]."""
    q2 = as_rows("q", q, np.int8)
    if out is None:
        out = np.empty(q2.shape, dtype=np.float32)
    return _core_int8_decode(scale, q2, out, resolve_threads(n_threads, out.size))
