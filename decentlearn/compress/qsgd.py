"""QSGD (Alistarh et al., NeurIPS 2017), ``qsgd:S``: unbiased stochastic quantization to S
levels of the row's norm."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from decentlearn import ops
from decentlearn.compress.base import parse_int, register
from decentlearn.compress.quantizer import Quantizer
from decentlearn.compress.wire import f32_bytes, stack_rows

@register("qsgd")
@dataclass(frozen=True, repr=False)
class QSGD(Quantizer):
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

    def _decompress(self, payload, n_threads, out):
        a = payload.arrays
        ops.qsgd_decode(a["norm"], a["packed"], self.levels, payload.dim, out=out,
                        n_threads=n_threads)

    def _row_to_bytes(self, payload, row):
        a = payload.arrays
        return f32_bytes(a["norm"][row:row + 1]) + a["packed"][row].tobytes()

    def _parse_row(self, reader, dim):
        return {"norm": reader.array(np.float32, 1)[0],
                "packed": reader.array(np.uint8, (dim * self.bits + 7) // 8)}

    def _join(self, rows, dim):
        return {"norm": np.array([r["norm"] for r in rows], dtype=np.float32),
                "packed": stack_rows(rows, "packed", ((dim * self.bits + 7) // 8,), np.uint8)}
