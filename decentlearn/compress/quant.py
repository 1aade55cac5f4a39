"""Quantizers: QSGD (Alistarh et al., NeurIPS 2017), CGX-style bucketed min/max quantization
(Markov et al.), scaled sign (EF-signSGD, Karimireddy et al. 2019) and int8 with stochastic
rounding. Kernels in csrc/quant.c (decentlearn.ops.*_encode / *_decode); the NumPy references in
decentlearn/_reference/quant.py are the spec.

Every message is one row, little-endian, self-delimiting given dim: a fixed float32 header, then
codes of a length fixed by dim. Decoding treats the bytes as untrusted: ``from_bytes`` checks
every length, and ``decompress`` raises ValueError on a non-finite or negative norm/scale, an
out-of-range code, or a message whose values would overflow float32.
"""

from __future__ import annotations

import math

from abc import abstractmethod
from dataclasses import dataclass

import numpy as np

from decentlearn import ops
from decentlearn.compress import Compressor, parse_int, register


def _stack(rows: list[dict], key: str, shape: tuple[int, ...], dtype) -> np.ndarray:
    if not rows:
        return np.zeros((0,) + shape, dtype)
    return np.ascontiguousarray(np.stack([r[key] for r in rows]), dtype=dtype)


def _f32(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a, dtype="<f4").tobytes()


class _Quantizer(Compressor):
    """Shared plumbing: every row's message has the same length, ``row_nbytes(dim)``."""

    @abstractmethod
    def row_nbytes(self, dim: int) -> int:
        """Exact bytes of one row's message for rows of length dim."""

    def _min_row_nbytes(self, dim: int) -> int:
        return self.row_nbytes(dim)

    def _sizes(self, n_rows: int, dim: int) -> np.ndarray:
        return np.full(n_rows, self.row_nbytes(dim), dtype=np.int64)

    def _join_rows(self, rows, n_rows, dim):
        return self._join(rows, dim), self._sizes(n_rows, dim)


@register("qsgd")
@dataclass(frozen=True, repr=False)
class QSGD(_Quantizer):
    """QSGD with S levels, spec ``qsgd:S``, 1 <= S <= 127. Unbiased; per row, E||Q(x) - x||^2 <=
    min(dim / S^2, sqrt(dim) / S) ||x||^2.

    Each value becomes sign * level * ||x||_2 / S, level = floor(|x_j| S / ||x|| + u_j) in [0, S]
    (u_j uniform from the counter RNG). Wire format of one row: float32 norm ||x||_2, then
    ceil(dim * b / 8) bytes of b-bit codes, b = 1 + ceil(log2(S + 1)); code j = level_j << 1 |
    (x_j < 0), packed LSB-first (code j in bits [j b, (j + 1) b)). 4 + ceil(dim * b / 8) bytes.
    """

    levels: int
    unbiased = True

    def variance_factor(self, dim: int) -> float:
        return min(dim / self.levels**2, math.sqrt(dim) / self.levels)

    def __post_init__(self) -> None:
        levels = self.levels
        if isinstance(levels, (bool, np.bool_)) or not isinstance(levels, (int, np.integer)):
            raise TypeError(f"levels must be an int, got {type(self.levels).__name__}")
        if not 1 <= self.levels <= 127:
            raise ValueError(f"levels must be in [1, 127], got {self.levels}")
        object.__setattr__(self, "levels", int(self.levels))

    @classmethod
    def from_args(cls, args):
        spec = ":".join(("qsgd",) + tuple(args))
        if len(args) != 1:
            raise ValueError(f"{spec!r}: expected 'qsgd:S' with S levels in [1, 127]")
        return cls(parse_int(args[0], spec, "S", 1, 127))

    @property
    def spec(self) -> str:
        return f"qsgd:{self.levels}"

    @property
    def bits(self) -> int:
        return ops.qsgd_bits(self.levels)

    def row_nbytes(self, dim: int) -> int:
        return 4 + (dim * self.bits + 7) // 8

    def _compress(self, x, seed, step, peer0, n_threads):
        norm, packed = ops.qsgd_encode(x, self.levels, seed, step, peer0, n_threads=n_threads)
        return {"norm": norm, "packed": packed}, self._sizes(x.shape[0], x.shape[1])

    def _decompress(self, payload, n_threads):
        a = payload.arrays
        return ops.qsgd_decode(a["norm"], a["packed"], self.levels, payload.dim,
                               n_threads=n_threads)

    def _row_to_bytes(self, payload, row):
        a = payload.arrays
        return _f32(a["norm"][row:row + 1]) + a["packed"][row].tobytes()

    def _parse_row(self, reader, dim):
        return {"norm": reader.array(np.float32, 1)[0],
                "packed": reader.array(np.uint8, (dim * self.bits + 7) // 8)}

    def _join(self, rows, dim):
        return {"norm": np.array([r["norm"] for r in rows], dtype=np.float32),
                "packed": _stack(rows, "packed", ((dim * self.bits + 7) // 8,), np.uint8)}


@register("bucket")
@dataclass(frozen=True, repr=False)
class Bucket(_Quantizer):
    """Bucketed min/max quantization as in CGX (Markov et al.), spec ``bucket:BITS:BUCKET``,
    BITS in {4, 8}, 16 <= BUCKET <= 4096. Unbiased; each decoded value is within one scale of x.

    Each row is cut into nb = ceil(dim / BUCKET) buckets (the last may be short); a bucket sends
    lo = min and scale = (max - lo) / (2^BITS - 1), and each value the code q = floor((x - lo) /
    scale + u) in [0, 2^BITS - 1] (0 when scale is 0), decoded as lo + q * scale. Wire format of
    one row: nb pairs (float32 lo, float32 scale), then ceil(dim * BITS / 8) bytes of BITS-bit
    codes packed LSB-first (for 4 bits, value 2i in the low nibble of byte i).
    8 nb + ceil(dim * BITS / 8) bytes.
    """

    bits: int
    bucket: int
    unbiased = True

    def variance_factor(self, dim: int) -> float:
        # Per value the rounding variance is <= scale^2 / 4 with scale = (max - min) / (2^BITS - 1),
        # and a bucket's squared norm is >= (max - min)^2 / 2 (its two extremes).
        size = min(self.bucket, max(dim, 1))
        return size / (2 * (2**self.bits - 1) ** 2)

    def __post_init__(self) -> None:
        for name in ("bits", "bucket"):
            v = getattr(self, name)
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"{name} must be an int, got {type(v).__name__}")
        if self.bits not in (4, 8):
            raise ValueError(f"bits must be 4 or 8, got {self.bits}")
        if not 16 <= self.bucket <= 4096:
            raise ValueError(f"bucket must be in [16, 4096], got {self.bucket}")
        object.__setattr__(self, "bits", int(self.bits))
        object.__setattr__(self, "bucket", int(self.bucket))

    @classmethod
    def from_args(cls, args):
        spec = ":".join(("bucket",) + tuple(args))
        if len(args) != 2:
            raise ValueError(f"{spec!r}: expected 'bucket:BITS:BUCKET' with BITS 4 or 8 and "
                             "BUCKET in [16, 4096]")
        bits = parse_int(args[0], spec, "BITS", 4, 8)
        if bits not in (4, 8):
            raise ValueError(f"{spec!r}: BITS must be 4 or 8, got {bits}")
        return cls(bits, parse_int(args[1], spec, "BUCKET", 16, 4096))

    @property
    def spec(self) -> str:
        return f"bucket:{self.bits}:{self.bucket}"

    def n_buckets(self, dim: int) -> int:
        return -(-dim // self.bucket)

    def row_nbytes(self, dim: int) -> int:
        return 8 * self.n_buckets(dim) + (dim * self.bits + 7) // 8

    def _compress(self, x, seed, step, peer0, n_threads):
        lo, scale, packed = ops.bucket_encode(x, self.bits, self.bucket, seed, step, peer0,
                                              n_threads=n_threads)
        return {"lo": lo, "scale": scale, "packed": packed}, self._sizes(*x.shape)

    def _decompress(self, payload, n_threads):
        a = payload.arrays
        return ops.bucket_decode(a["lo"], a["scale"], a["packed"], self.bits, self.bucket,
                                 payload.dim, n_threads=n_threads)

    def _row_to_bytes(self, payload, row):
        a = payload.arrays
        return _f32(np.stack([a["lo"][row], a["scale"][row]], axis=-1)) + a["packed"][row].tobytes()

    def _parse_row(self, reader, dim):
        pairs = reader.array(np.float32, 2 * self.n_buckets(dim)).reshape(-1, 2)
        return {"lo": pairs[:, 0], "scale": pairs[:, 1],
                "packed": reader.array(np.uint8, (dim * self.bits + 7) // 8)}

    def _join(self, rows, dim):
        nb = self.n_buckets(dim)
        return {"lo": _stack(rows, "lo", (nb,), np.float32),
                "scale": _stack(rows, "scale", (nb,), np.float32),
                "packed": _stack(rows, "packed", ((dim * self.bits + 7) // 8,), np.uint8)}


@register("sign")
@dataclass(frozen=True, repr=False)
class Sign(_Quantizer):
    """Scaled sign as in EF-signSGD (Karimireddy et al. 2019), spec ``sign``. Biased: use it inside
    ErrorFeedback.

    Each value becomes +-scale, scale = ||x||_1 / dim (float64 sum), the sign of x (0 counts as
    positive). Wire format of one row: float32 scale, then ceil(dim / 8) bytes, bit j (LSB-first)
    = 1 when x_j < 0. 4 + ceil(dim / 8) bytes.
    """

    unbiased = False

    def row_nbytes(self, dim: int) -> int:
        return 4 + (dim + 7) // 8

    def _compress(self, x, seed, step, peer0, n_threads):
        scale, packed = ops.sign_encode(x, n_threads=n_threads)
        return {"scale": scale, "packed": packed}, self._sizes(*x.shape)

    def _decompress(self, payload, n_threads):
        a = payload.arrays
        return ops.sign_decode(a["scale"], a["packed"], payload.dim, n_threads=n_threads)

    def _row_to_bytes(self, payload, row):
        a = payload.arrays
        return _f32(a["scale"][row:row + 1]) + a["packed"][row].tobytes()

    def _parse_row(self, reader, dim):
        return {"scale": reader.array(np.float32, 1)[0],
                "packed": reader.array(np.uint8, (dim + 7) // 8)}

    def _join(self, rows, dim):
        return {"scale": np.array([r["scale"] for r in rows], dtype=np.float32),
                "packed": _stack(rows, "packed", ((dim + 7) // 8,), np.uint8)}


@register("int8")
@dataclass(frozen=True, repr=False)
class Int8(_Quantizer):
    """int8 with a per-row scale and stochastic rounding, spec ``int8``. Unbiased.

    scale = max|x| / 127; q_j = sign(x_j) floor(|x_j| / scale + u_j), in [-127, 127] (stochastic
    rounding of the magnitude: the same distribution as floor(x_j / scale + u_j)), decoded as
    q_j * scale. Wire format of one row: float32 scale, then dim int8 codes (-128 is rejected).
    4 + dim bytes.
    """

    unbiased = True

    def variance_factor(self, dim: int) -> float:
        # Rounding variance <= scale^2 / 4 per value, scale = max|x| / 127 and ||x||^2 >= max|x|^2.
        return dim / (4 * 127**2)

    def row_nbytes(self, dim: int) -> int:
        return 4 + dim

    def _compress(self, x, seed, step, peer0, n_threads):
        scale, q = ops.int8_encode(x, seed, step, peer0, n_threads=n_threads)
        return {"scale": scale, "q": q}, self._sizes(*x.shape)

    def _decompress(self, payload, n_threads):
        a = payload.arrays
        return ops.int8_decode(a["scale"], a["q"], n_threads=n_threads)

    def _row_to_bytes(self, payload, row):
        a = payload.arrays
        return _f32(a["scale"][row:row + 1]) + a["q"][row].tobytes()

    def _parse_row(self, reader, dim):
        return {"scale": reader.array(np.float32, 1)[0], "q": reader.array(np.int8, dim)}

    def _join(self, rows, dim):
        return {"scale": np.array([r["scale"] for r in rows], dtype=np.float32),
                "q": _stack(rows, "q", (dim,), np.int8)}
