"""Reference Sparse Ternary Compression (Sattler et al., 2019): the spec of csrc/stc.c and of
decentlearn.compress.stc, written for clarity.

Golomb/Rice position code, row by row, Rice parameter b (M = 2^b): for each kept position,
gap = pos - prev - 1 (prev = -1 before the first) is written as q = gap >> b one-bits, a zero-bit,
the b low bits of gap (least significant first), then a sign bit (1 = negative). Bits fill bytes
LSB-first; pad bits are zero. The decoder accepts nothing else.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, Decimal, localcontext

import numpy as np

MAX_B = 31


def golomb_param(k: int, dim: int) -> int:
    """b* = max(0, 1 + floor(log2(log(phi - 1) / log(1 - p)))), p = k / dim; 0 if k in {0, dim}."""
    if k == 0 or k == dim:
        return 0
    ratio = math.log((math.sqrt(5.0) - 1.0) / 2.0) / math.log1p(-k / dim)
    return min(MAX_B, max(0, 1 + math.floor(math.log2(ratio))))


def golomb_max_bytes(k: int, dim: int, b: int) -> int:
    return (((dim - k) >> b) + k * (b + 2) + 7) // 8


def expected_bits_per_position(p: float, b: int) -> float:
    """Closed-form mean code length of one position without its sign bit, for gaps that are
    geometric with parameter p: b remainder bits + E[q + 1] = 1 / (1 - (1 - p)^(2^b))."""
    return b + 1.0 / (1.0 - (1.0 - p) ** (2**b))


def _encode_row(pos: np.ndarray, neg: np.ndarray, dim: int, b: int) -> np.ndarray:
    """The row's code as a 0/1 array of bits."""
    pos = pos.astype(np.int64)
    if pos.size and (pos[0] < 0 or pos[-1] >= dim or np.any(np.diff(pos) <= 0)):
        raise ValueError("positions must be strictly increasing within each row and lie in "
                         "[0, dim)")
    gap = np.diff(pos, prepend=-1) - 1
    q = gap >> b
    length = q + b + 2
    start = np.cumsum(length) - length
    bits = np.zeros(int(length.sum()), dtype=np.uint8)
    # unary: q ones from each start (the terminating zero is already there)
    ones_start = np.repeat(start, q)
    ones_off = np.arange(int(q.sum())) - np.repeat(np.cumsum(q) - q, q)
    bits[ones_start + ones_off] = 1
    for j in range(b):
        bits[start + q + 1 + j] = (gap >> j) & 1
    bits[start + q + 1 + b] = neg != 0
    return bits


def golomb_encode(positions: np.ndarray, negative: np.ndarray, dim: int, b: int,
                  n_threads=None) -> tuple[np.ndarray, np.ndarray]:
    rows, k = positions.shape
    width = golomb_max_bytes(k, dim, b)
    data = np.zeros((rows, width), dtype=np.uint8)
    nbits = np.zeros(rows, dtype=np.int64)
    for r in range(rows):
        bits = _encode_row(positions[r], np.asarray(negative[r]).astype(np.uint8), dim, b)
        packed = np.packbits(bits, bitorder="little")
        data[r, :packed.size] = packed
        nbits[r] = bits.size
    return data, nbits


def _decode_row(row: np.ndarray, nbits: int, k: int, dim: int, b: int):
    if nbits < 0 or nbits > 8 * row.size:
        raise ValueError("nbits out of range")
    n = (nbits + 7) // 8
    bits = np.unpackbits(row[:n], bitorder="little").tolist()
    if any(bits[nbits:]):
        raise ValueError("non-zero pad bits")
    pos = np.zeros(k, dtype=np.int32)
    neg = np.zeros(k, dtype=np.uint8)
    at, prev = 0, -1
    for i in range(k):
        q = 0
        while True:
            if at >= nbits:
                raise ValueError("code ends inside a unary quotient")
            bit = bits[at]
            at += 1
            if bit == 0:
                break
            q += 1
            if prev + 1 + (q << b) >= dim:
                raise ValueError("position beyond dim")
        if at + b + 1 > nbits:
            raise ValueError("code ends inside a remainder")
        rem = sum(bits[at + j] << j for j in range(b))
        p = prev + 1 + (q << b) + rem
        if p >= dim:
            raise ValueError("position beyond dim")
        pos[i] = p
        neg[i] = bits[at + b]
        at += b + 1
        prev = p
    if at != nbits:
        raise ValueError("bits left after k positions")
    return pos, neg


def golomb_decode(data: np.ndarray, nbits: np.ndarray, k: int, dim: int, b: int,
                  n_threads=None) -> tuple[np.ndarray, np.ndarray]:
    rows = data.shape[0]
    positions = np.zeros((rows, k), dtype=np.int32)
    negative = np.zeros((rows, k), dtype=np.uint8)
    for r in range(rows):
        positions[r], negative[r] = _decode_row(data[r], int(nbits[r]), k, dim, b)
    return positions, negative


def stc_k(ratio: float, dim: int) -> int:
    """Kept positions per row: max(1, ceil(ratio * dim)), or 0 for an empty row, with ratio read
    as the shortest decimal that prints as it (0.07 * 100 = 7 exactly), the rule of every
    ``:R`` sparsifier."""
    if dim == 0:
        return 0
    with localcontext() as ctx:
        ctx.prec = 80  # exact: 17 significant digits times a dim below 2^63
        exact = Decimal(repr(float(ratio))) * dim
        return min(dim, max(1, int(exact.to_integral_value(rounding=ROUND_CEILING))))


def topk(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(idx int32 ascending, val float32) of the k largest |x| per row; ties to lower indices."""
    order = np.argsort(-np.abs(x), axis=1, kind="stable")[:, :k]
    idx = np.sort(order, axis=1).astype(np.int32)
    return idx, np.take_along_axis(x, idx, axis=1)


def stc_compress(x: np.ndarray, ratio: float):
    """(positions (n, k) int32, negative (n, k) uint8, mu (n,) float32) of each row of x."""
    k = stc_k(ratio, x.shape[1])
    idx, val = topk(x, k)
    if k == 0:
        mu = np.zeros(x.shape[0], np.float32)
    else:
        mu = (np.abs(val).sum(axis=1, dtype=np.float64) / k).astype(np.float32)
    return idx, (val < 0).astype(np.uint8), mu


def stc_decompress(positions, negative, mu, dim: int) -> np.ndarray:
    out = np.zeros((positions.shape[0], dim), np.float32)
    signed = np.where(negative != 0, -mu[:, None], mu[:, None]).astype(np.float32)
    np.put_along_axis(out, positions.astype(np.int64), signed, axis=1)
    return out


def stc_ternary(val: np.ndarray, n_threads: int | None = None):
    """(sums, exact, negative) of ops.stc_ternary for (n, k) float32 ``val``: NumPy's float64 sum
    of |val| per row, whether every summation order gives that sum (each |val| is a multiple of
    q = 2^(max(E, 1) - 150), E the smallest non-zero |val|'s biased exponent, and the exactly
    rounded sum (math.fsum) is finite and at most 2^52 q), and val < 0."""
    import math

    sums = np.abs(val).sum(axis=1, dtype=np.float64)
    exact = np.zeros(val.shape[0], bool)
    for r, row in enumerate(np.abs(val.astype(np.float64))):
        if not np.isfinite(row).all():
            continue
        nz = row[row != 0]
        if nz.size == 0:
            exact[r] = True
            continue
        e = int((nz.astype(np.float32).view(np.uint32) >> 23).min())
        exact[r] = math.fsum(nz) <= 2.0 ** (max(e, 1) - 150 + 52)
    return sums, exact, (val < 0).astype(np.uint8)
