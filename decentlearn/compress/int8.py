"""int8 with a per-row scale and stochastic rounding, ``int8``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from decentlearn import ops
from decentlearn.compress.base import register
from decentlearn.compress.quantizer import Quantizer
from decentlearn.compress.wire import f32_bytes, stack_rows

@register("int8")
@dataclass(frozen=True, repr=False)
class Int8(Quantizer):
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

    def _decompress(self, payload, n_threads, out):
        a = payload.arrays
        ops.int8_decode(a["scale"], a["q"], out=out, n_threads=n_threads)

    def _row_to_bytes(self, payload, row):
        a = payload.arrays
        return f32_bytes(a["scale"][row:row + 1]) + a["q"][row].tobytes()

    def _parse_row(self, reader, dim):
        return {"scale": reader.array(np.float32, 1)[0], "q": reader.array(np.int8, dim)}

    def _join(self, rows, dim):
        return {"scale": np.array([r["scale"] for r in rows], dtype=np.float32),
                "q": stack_rows(rows, "q", (dim,), np.int8)}
