"""Natural compression (Horváth et al., "Natural Compression for Distributed Deep Learning"),
``natural``: every value rounded without bias to a signed power of two, in C (decentlearn.ops)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from decentlearn import ops
from decentlearn.compress.base import Compressor, register

@register("natural")
@dataclass(frozen=True, repr=False)
class Natural(Compressor):
    """Natural compression: every value rounded without bias to a signed power of two.

    Wire format, per row: ``dim`` bytes, one code per value: bit 7 the sign, bits 0-6 c, where
    c = 0 is 0 and c in 1..127 is 2^(c - 64) (2^-63 ... 2^63). Every byte string of the right
    length decodes (0x80 is 0). Unbiased (E[C(x)] = x) except above 2^63, where values saturate,
    and below 2^-63, where the rounding probability is resolved to 2^-31 (bias below 2^-94).
    E||C(x)||^2 <= 9/8 ||x||^2. 8 bits per value instead of 32.
    """

    unbiased = True

    def variance_factor(self, dim: int) -> float:
        return 1 / 8

    def _compress(self, x, seed, step, peer0, n_threads):
        codes = ops.natural_encode(x, seed=seed, step=step, peer0=peer0, n_threads=n_threads)
        return {"codes": codes}, np.full(x.shape[0], x.shape[1])

    def _decompress(self, payload, n_threads, out):
        ops.natural_decode(payload.arrays["codes"], out=out, n_threads=n_threads)

    def _row_to_bytes(self, payload, row):
        return payload.arrays["codes"][row].tobytes()

    def _min_row_nbytes(self, dim):
        return dim

    def _parse_row(self, reader, dim):
        return {"codes": reader.array(np.uint8, dim)}

    def _join_rows(self, rows, n_rows, dim):
        codes = np.stack([r["codes"] for r in rows]) if rows else np.zeros((0, dim), np.uint8)
        return {"codes": np.ascontiguousarray(codes)}, np.full(n_rows, dim)
