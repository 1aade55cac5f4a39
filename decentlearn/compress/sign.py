"""Scaled sign as in EF-signSGD (Karimireddy et al. 2019), ``sign``: one bit per value and
the mean magnitude."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from decentlearn import ops
from decentlearn.compress.base import register
from decentlearn.compress.quantizer import Quantizer
from decentlearn.compress.wire import f32_bytes, stack_rows

@register("sign")
@dataclass(frozen=True, repr=False)
class Sign(Quantizer):
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

    def _decompress(self, payload, n_threads, out):
        a = payload.arrays
        ops.sign_decode(a["scale"], a["packed"], payload.dim, out=out, n_threads=n_threads)

    def _row_to_bytes(self, payload, row):
        a = payload.arrays
        return f32_bytes(a["scale"][row:row + 1]) + a["packed"][row].tobytes()

    def _parse_row(self, reader, dim):
        return {"scale": reader.array(np.float32, 1)[0],
                "packed": reader.array(np.uint8, (dim + 7) // 8)}

    def _join(self, rows, dim):
        return {"scale": np.array([r["scale"] for r in rows], dtype=np.float32),
                "packed": stack_rows(rows, "packed", ((dim + 7) // 8,), np.uint8)}
