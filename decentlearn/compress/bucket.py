"""Bucketed min/max quantization as in CGX (Markov et al.), ``bucket:BITS:BUCKET``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from decentlearn import ops
from decentlearn.compress.base import parse_int, register
from decentlearn.compress.quantizer import Quantizer
from decentlearn.compress.wire import f32_bytes, stack_rows

@register("bucket")
@dataclass(frozen=True, repr=False)
class Bucket(Quantizer):
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

    def _decompress(self, payload, n_threads, out):
        a = payload.arrays
        ops.bucket_decode(a["lo"], a["scale"], a["packed"], self.bits, self.bucket, payload.dim,
                          out=out, n_threads=n_threads)

    def _row_to_bytes(self, payload, row):
        a = payload.arrays
        pairs = np.stack([a["lo"][row], a["scale"][row]], axis=-1)
        return f32_bytes(pairs) + a["packed"][row].tobytes()

    def _parse_row(self, reader, dim):
        pairs = reader.array(np.float32, 2 * self.n_buckets(dim)).reshape(-1, 2)
        return {"lo": pairs[:, 0], "scale": pairs[:, 1],
                "packed": reader.array(np.uint8, (dim * self.bits + 7) // 8)}

    def _join(self, rows, dim):
        nb = self.n_buckets(dim)
        return {"lo": stack_rows(rows, "lo", (nb,), np.float32),
                "scale": stack_rows(rows, "scale", (nb,), np.float32),
                "packed": stack_rows(rows, "packed", ((dim * self.bits + 7) // 8,), np.uint8)}
