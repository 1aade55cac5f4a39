"""Natural dithering (Horváth et al., "Natural Compression for Distributed Deep Learning"),
``dither:S[:P]``: |x_i| / ||x||_p rounded without bias to a power of two, in C (decentlearn.ops)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from decentlearn import ops
from decentlearn.compress.base import Compressor, parse_int, register
from decentlearn.compress.wire import Reader

def _parse_p(text: str, spec: str) -> float:
    if text.lower() in ("inf", "infinity"):
        return math.inf
    if text in ("1", "2", "1.0", "2.0"):
        return float(text)
    raise ValueError(f"{spec!r}: p must be 1, 2 or inf, got {text!r}")


@register("dither")
@dataclass(frozen=True, repr=False)
class NaturalDithering(Compressor):
    """Natural dithering ``dither:S`` or ``dither:S:P``: |x_i| / ||x||_p rounded without bias to
    one of the levels 0, 2^(1-S), ..., 1/2, 1 (S in 1..31; p = 1, 2 (default) or inf).

    Wire format, per row: the float32 norm ||x||_p (little-endian; finite, >= 0; norms above
    FLT_MAX are sent as FLT_MAX), then ``dim`` codes of b = 1 + ceil(log2(S + 1)) bits, code =
    (level << 1) | sign, level in 0..S, level l > 0 meaning norm * 2^(l - S); packed little-endian
    bit order (code j in bits [j b, (j + 1) b)) into ceil(dim b / 8) bytes. A message is 4 +
    ceil(dim b / 8) bytes. Decoding rejects a negative or non-finite norm and a level above S.
    Unbiased, with E||C(x)||^2 <= (1 + w) ||x||^2, w = 1/8 + d^(1/r) 2^(1-S) min(1, d^(1/r)
    2^(1-S)), r = min(p, 2) (the paper's bound; tests check it).
    """

    s: int = 8
    p: float = 2.0

    unbiased = True

    def __post_init__(self) -> None:
        ops.check_dither_s(self.s)
        ops.check_dither_p(self.p)

    def variance_factor(self, dim: int) -> float:
        r = min(self.p, 2.0)
        u = max(dim, 1) ** (1 / r) * 2.0 ** (1 - self.s)
        return 1 / 8 + u * min(1.0, u)

    @classmethod
    def from_args(cls, args):
        spec = ":".join(("dither",) + tuple(args))
        if len(args) not in (1, 2):
            raise ValueError(f"{spec!r}: expected 'dither:S' or 'dither:S:P'")
        s = parse_int(args[0], spec, "S", 1, 31)
        p = _parse_p(args[1], spec) if len(args) == 2 else 2.0
        return cls(s, p)

    @property
    def spec(self) -> str:
        if self.p == 2:
            return f"dither:{self.s}"
        return f"dither:{self.s}:{'inf' if math.isinf(self.p) else int(self.p)}"

    @property
    def bits(self) -> int:
        return 1 + int(self.s).bit_length()

    def _packed_bytes(self, dim: int) -> int:
        return (dim * self.bits + 7) // 8

    def _compress(self, x, seed, step, peer0, n_threads):
        norms, codes = ops.dither_encode(x, self.s, self.p, seed=seed, step=step, peer0=peer0,
                                         n_threads=n_threads)
        packed = ops.bitpack(codes, self.bits, n_threads=n_threads)
        return ({"norms": norms, "packed": packed},
                np.full(x.shape[0], 4 + self._packed_bytes(x.shape[1])))

    def _decompress(self, payload, n_threads, out):
        codes = ops.bitunpack(payload.arrays["packed"], self.bits, payload.dim,
                              n_threads=n_threads)
        ops.dither_decode(payload.arrays["norms"], codes, self.s, out=out, n_threads=n_threads)

    def _row_to_bytes(self, payload, row):
        return (payload.arrays["norms"][row:row + 1].astype("<f4").tobytes()
                + payload.arrays["packed"][row].tobytes())

    def _min_row_nbytes(self, dim):
        return 4 + self._packed_bytes(dim)

    def _parse_row(self, reader: Reader, dim):
        norm = reader.f32()
        if not (math.isfinite(norm) and norm >= 0) or math.copysign(1.0, norm) < 0:
            raise ValueError(f"{self.spec} message: norm must be finite and >= 0, got {norm}")
        return {"norm": norm, "packed": reader.array(np.uint8, self._packed_bytes(dim))}

    def _join_rows(self, rows, n_rows, dim):
        norms = np.array([r["norm"] for r in rows], dtype=np.float32)
        packed = (np.stack([r["packed"] for r in rows]) if rows
                  else np.zeros((0, self._packed_bytes(dim)), np.uint8))
        return ({"norms": norms, "packed": np.ascontiguousarray(packed)},
                np.full(n_rows, 4 + self._packed_bytes(dim)))
