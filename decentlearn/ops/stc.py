"""The Golomb/Rice position coder of Sparse Ternary Compression (csrc/stc.c).

NumPy twin: decentlearn/_reference/stc.py.
"""

from __future__ import annotations

import math

import numpy as np

from decentlearn._core import (
    golomb_decode as _core_golomb_decode,
    golomb_encode as _core_golomb_encode,
    stc_ternary as _core_stc_ternary,
)
from decentlearn.ops.args import as_rows
from decentlearn.ops.threads import resolve_threads

__all__ = ["GOLOMB_MAX_B", "golomb_param", "golomb_max_bytes", "golomb_encode", "golomb_decode",
           "stc_ternary"]


#: Largest Rice parameter of the Golomb position coder (a remainder and its sign fit 32 bits).
GOLOMB_MAX_B = 31


def golomb_param(k: int, dim: int) -> int:
    """Sattler et al.'s Rice parameter for k of dim positions:
    b* = max(0, 1 + floor(log2(log(phi - 1) / log(1 - p)))), p = k / dim, capped at 31; 0 when
    k == 0 or k == dim."""
    if not 0 <= k <= dim:
        raise ValueError(f"k must be in [0, dim] = [0, {dim}], got {k}")
    if k == 0 or k == dim:
        return 0
    ratio = math.log((math.sqrt(5.0) - 1.0) / 2.0) / math.log1p(-k / dim)
    return min(GOLOMB_MAX_B, max(0, 1 + math.floor(math.log2(ratio))))


def golomb_max_bytes(k: int, dim: int, b: int) -> int:
    """Bytes that hold any row's Golomb code of k positions in [0, dim) with parameter b."""
    if not 0 <= k <= dim or not 0 <= b <= GOLOMB_MAX_B:
        raise ValueError(f"need 0 <= k <= dim and 0 <= b <= {GOLOMB_MAX_B}, got k={k}, "
                         f"dim={dim}, b={b}")
    return (((dim - k) >> b) + k * (b + 2) + 7) // 8


def _check_golomb(k, dim, b) -> tuple[int, int, int]:
    for name, v in (("k", k), ("dim", dim), ("b", b)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    if not 0 <= k <= dim <= 2**31 - 1:
        raise ValueError(f"need 0 <= k <= dim <= 2**31 - 1, got k={k}, dim={dim}")
    if not 0 <= b <= GOLOMB_MAX_B:
        raise ValueError(f"b must be in [0, {GOLOMB_MAX_B}], got {b}")
    return int(k), int(dim), int(b)


def golomb_encode(positions: np.ndarray, negative: np.ndarray, dim: int, b: int,
                  n_threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Golomb/Rice code of each row's kept positions and sign bits (see csrc/stc.c).

    positions: (n_rows, k) int32, strictly increasing within a row, in [0, dim); negative:
    (n_rows, k) bool or uint8 (non-zero = negative). Returns ``(data, nbits)``: data (n_rows,
    golomb_max_bytes(k, dim, b)) uint8, row r's code in its first ceil(nbits[r] / 8) bytes and
    zeros after; nbits (n_rows,) int64. A 1-D input is one row and gives data (max_bytes,) and a
    0-d nbits.
    """
    pos2 = as_rows("positions", positions, np.int32)
    if isinstance(negative, np.ndarray) and negative.dtype == np.bool_:
        negative = negative.view(np.uint8)
    neg2 = as_rows("negative", negative, np.uint8)
    k, dim, b = _check_golomb(pos2.shape[1], dim, b)
    data = np.empty((pos2.shape[0], golomb_max_bytes(k, dim, b)), dtype=np.uint8)
    nbits = np.empty(pos2.shape[0], dtype=np.int64)
    # a position costs a few bit operations, about 8 elementwise steps: 25,000 of them (STC at
    # p = 0.001 of 25M values) took 0.13-0.21 ms on one thread of the lent 16-core Xeon
    _core_golomb_encode(pos2, neg2, dim, b, data, nbits,
                        resolve_threads(n_threads, 8 * pos2.size))
    if positions.ndim == 1:
        return data[0], nbits.reshape(())
    return data, nbits


def golomb_decode(data: np.ndarray, nbits, k: int, dim: int, b: int,
                  n_threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of golomb_encode on untrusted bytes: ``(positions (n_rows, k) int32, negative
    (n_rows, k) uint8 0/1)`` from data (n_rows, width) uint8 and nbits (n_rows,) int64. Raises
    ValueError unless each row holds exactly k positions in [0, dim) coded in exactly nbits[r]
    <= 8 * width bits with zero pad bits (bytes after the code are ignored)."""
    data2 = as_rows("data", data, np.uint8)
    nbits2 = np.asarray(nbits)
    if nbits2.dtype != np.int64:
        raise TypeError(f"nbits must have dtype int64, got {nbits2.dtype}")
    nbits2 = np.ascontiguousarray(nbits2.reshape(-1))
    k, dim, b = _check_golomb(k, dim, b)
    positions = np.empty((data2.shape[0], k), dtype=np.int32)
    negative = np.empty((data2.shape[0], k), dtype=np.uint8)
    _core_golomb_decode(data2, nbits2, dim, b, positions, negative,
                        resolve_threads(n_threads, positions.size))
    if data.ndim == 1:
        return positions[0], negative[0]
    return positions, negative


def stc_ternary(val: np.ndarray, n_threads: int | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What STC sends besides the positions, from the kept values ``val`` ((n_rows, k) float32,
    or one row): ``(sums, exact, negative)``.

    ``sums`` (n_rows,) float64 is each row's sum of ``|val|`` and ``negative`` (n_rows, k) uint8 is
    ``val < 0`` (-0.0 is not negative). ``exact`` (n_rows,) bool marks the rows whose sum no
    summation order can round (every ``|val|`` is a multiple of the spacing q of the smallest
    non-zero one's binade and the sum is at most 2**52 q), hence equal to
    ``np.abs(val).sum(axis=1, dtype=np.float64)`` bit for bit; other rows (magnitudes spread over
    a range of about 2**29 / k or more, or not finite) get an approximate sum. One parallel pass
    in fixed chunks: the same bits for every thread count.
    """
    rows = as_rows("val", val, np.float32)
    n, k = rows.shape
    negative = np.empty((n, k), np.uint8)
    sums = np.empty(n, np.float64)
    exact = np.empty(n, np.uint8)
    _core_stc_ternary(rows, negative, sums, exact, resolve_threads(n_threads, rows.size))
    if val.ndim == 1:
        return sums.reshape(()), exact.view(np.bool_).reshape(()), negative[0]
    return sums, exact.view(np.bool_), negative
