"""``none``: no compression, the float32 values themselves."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from decentlearn import ops
from decentlearn.compress.base import Compressor, register


@register("none")
@dataclass(frozen=True, repr=False)
class Identity(Compressor):
    """No compression: dim float32 values, 4 bytes each. Decoding refuses NaN and infinity, as
    every other decoder does."""

    unbiased = True

    def variance_factor(self, dim: int) -> float:
        return 0.0

    def _compress(self, x, seed, step, peer0, n_threads):  # copies on the run's threads
        return ({"values": ops.copy2d(x, np.empty_like(x), n_threads=n_threads)},
                np.full(x.shape[0], 4 * x.shape[1]))

    def _decompress(self, payload, n_threads, out):
        ops.copy2d(payload.arrays["values"], out, n_threads=n_threads)

    def _row_to_bytes(self, payload, row):
        return payload.arrays["values"][row].astype("<f4").tobytes()

    def _min_row_nbytes(self, dim):
        return 4 * dim

    def _parse_row(self, reader, dim):
        values = reader.array(np.float32, dim)
        if not np.isfinite(values).all():
            raise ValueError(f"{reader.what}: values must be finite (NaN or infinity found)")
        return {"values": values}

    def _join_rows(self, rows, n_rows, dim):
        values = (np.stack([r["values"] for r in rows]) if rows
                  else np.zeros((0, dim), np.float32))
        return {"values": values}, np.full(n_rows, 4 * dim)
