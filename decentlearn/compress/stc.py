"""Sparse Ternary Compression (Sattler et al., "Robust and Communication-Efficient Federated
Learning from Non-IID Data", IEEE TNNLS 2019): top-k by magnitude, every kept value replaced by
+-mu (mu = mean kept magnitude), positions Golomb/Rice coded (csrc/stc.c).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np

from decentlearn import ops
from decentlearn.compress.base import Compressor, parse_ratio, register
from decentlearn.compress.sparse_pairs import SPARSE_MAX_DIM, scatter_pairs, sparse_k
from decentlearn.compress.wire import Reader

_HEADER = struct.Struct("<IfI")


@register("stc")
@dataclass(frozen=True, repr=False)
class STC(Compressor):
    """Sparse Ternary Compression, spec ``stc:R`` (0 < R <= 1). Biased: use with ErrorFeedback
    (the paper accumulates the residual the same way).

    Each row keeps k = max(1, ceil(R * dim)) positions (0 for dim = 0; R read as the decimal it
    prints as, the rule of topk:R: stc:0.07 keeps 7 of 100), those of the k largest
    magnitudes (ops.topk: ties to the lowest index), and sends each as sign * mu, mu = mean of
    the kept magnitudes (summed in float64, sent as float32). The positions are coded with the
    Rice parameter b = ops.golomb_param(k, dim), which both sides derive from (k, dim).

    Wire format of one row, little-endian: uint32 k, float32 mu, uint32 nbits, then
    ceil(nbits / 8) bytes of Golomb/Rice code (for each position: the gap to the previous one in
    unary quotient + b-bit remainder, then a sign bit, 1 = negative; bits LSB-first, zero pad
    bits). A row is 12 + ceil(nbits / 8) bytes. Parsing rejects (ValueError) a k other than this
    compressor's k for dim, a mu that is negative or not finite, an nbits longer than any valid
    code or shorter than k (b + 2) bits, a dim above 2^31 - 1 (the encoder's limit), and a code
    that is not exactly k positions in [0, dim) using exactly nbits bits.
    """

    ratio: float
    unbiased = False

    def __post_init__(self) -> None:
        if isinstance(self.ratio, (bool, np.bool_)) or not isinstance(
                self.ratio, (int, float, np.integer, np.floating)):
            raise TypeError(f"ratio must be a number in (0, 1], got {type(self.ratio).__name__}")
        if not 0 < self.ratio <= 1:
            raise ValueError(f"ratio must be in (0, 1], got {self.ratio}")
        object.__setattr__(self, "ratio", float(self.ratio))

    @classmethod
    def from_args(cls, args: tuple[str, ...]) -> STC:
        spec = ":".join(("stc",) + args)
        if len(args) != 1:
            raise ValueError(f"{spec!r}: expected 'stc:R' with a ratio R in (0, 1]")
        return cls(parse_ratio(args[0], spec))

    @property
    def spec(self) -> str:
        return f"stc:{self.ratio!r}"

    max_dim = SPARSE_MAX_DIM

    def k(self, dim: int) -> int:
        """Kept positions per row of length dim: the same rule as topk:R and randk:R
        (compress.sparse_pairs.sparse_k, R read as the decimal it prints as)."""
        return sparse_k(self.ratio, dim)

    def _min_code_bits(self, dim: int) -> int:
        """Fewest bits of a valid code: each position takes at least its unary terminator, b
        remainder bits and a sign bit."""
        k = self.k(dim)
        return k * (ops.golomb_param(k, dim) + 2)

    def _min_row_nbytes(self, dim):
        return 12 + (self._min_code_bits(dim) + 7) // 8

    def _compress(self, x, seed, step, peer0, n_threads):
        n, dim = x.shape
        k = self.k(dim)
        b = ops.golomb_param(k, dim)
        if n == 0 or k == 0:
            idx = np.zeros((n, k), np.int32)
            val = np.zeros((n, k), np.float32)
        else:
            idx, val = ops.topk(x, k, n_threads=n_threads)
            idx = np.ascontiguousarray(idx, dtype=np.int32)
        mu = np.zeros(n, np.float32)
        # One parallel pass gives the signs and each row's float64 sum of |val|; where that sum
        # could depend on the summation order (ops.stc_ternary), NumPy's own sum is used, so mu
        # is always exactly np.abs(val).sum(axis=1, dtype=np.float64) / k.
        sums, exact, negative = ops.stc_ternary(val, n_threads=n_threads)
        if k:
            if not exact.all():
                sums = np.where(exact, sums, np.abs(val).sum(axis=1, dtype=np.float64))
            mu = (sums / k).astype(np.float32)
        if not np.isfinite(mu).all():
            raise ValueError("x must be finite (no NaN or infinity)")
        data, nbits = ops.golomb_encode(idx, negative, dim, b, n_threads=n_threads)
        arrays = {"positions": idx, "negative": negative, "mu": mu, "data": data, "nbits": nbits}
        return arrays, 12 + (nbits + 7) // 8

    def _decompress(self, payload, n_threads, out):
        a = payload.arrays
        mu = a["mu"][:, None]
        signed = np.where(a["negative"] != 0, -mu, mu).astype(np.float32, copy=False)
        scatter_pairs(out, a["positions"], signed, n_threads)

    def _row_to_bytes(self, payload, row):
        a = payload.arrays
        nbits = int(a["nbits"][row])
        header = _HEADER.pack(a["positions"].shape[1], float(a["mu"][row]), nbits)
        return header + a["data"][row, :(nbits + 7) // 8].tobytes()

    def _parse_row(self, reader: Reader, dim: int) -> dict:
        k, mu, nbits = reader.u32(), reader.f32(), reader.u32()
        want = self.k(dim)
        if k != want:
            raise ValueError(f"{reader.what}: k must be {want} for dim={dim}, got {k}")
        if not (math.isfinite(mu) and mu >= 0):
            raise ValueError(f"{reader.what}: mu must be finite and >= 0, got {mu}")
        max_bytes = ops.golomb_max_bytes(k, dim, ops.golomb_param(k, dim))
        if nbits > 8 * max_bytes:
            raise ValueError(f"{reader.what}: nbits={nbits} exceeds the longest code "
                             f"({8 * max_bytes} bits) of k={k} positions in dim={dim}")
        if nbits < self._min_code_bits(dim):
            raise ValueError(f"{reader.what}: nbits={nbits} is shorter than the shortest code "
                             f"({self._min_code_bits(dim)} bits) of k={k} positions in dim={dim}")
        return {"mu": mu, "nbits": nbits, "code": reader.take((nbits + 7) // 8)}

    def _join_rows(self, rows, n_rows, dim):
        k = self.k(dim)
        b = ops.golomb_param(k, dim)
        # As wide as the longest code received (not the longest possible), so that what is
        # allocated is bounded by the payload's length.
        width = max(((row["nbits"] + 7) // 8 for row in rows), default=0)
        data = np.zeros((n_rows, width), np.uint8)
        nbits = np.zeros(n_rows, np.int64)
        mu = np.zeros(n_rows, np.float32)
        for r, row in enumerate(rows):
            code = np.frombuffer(row["code"], dtype=np.uint8)
            data[r, :code.size] = code
            nbits[r] = row["nbits"]
            mu[r] = row["mu"]
        positions, negative = ops.golomb_decode(data, nbits, k, dim, b)
        arrays = {"positions": positions, "negative": negative, "mu": mu, "data": data,
                  "nbits": nbits}
        return arrays, 12 + (nbits + 7) // 8
