"""Hard threshold (``threshold:V``): each row sends the coordinates with |x| >= V."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from decentlearn import ops
from decentlearn.compress.base import Compressor, register
from decentlearn.compress.sparse_pairs import SPARSE_MAX_DIM, check_sent_finite, read_pairs

@register("threshold")
@dataclass(frozen=True, repr=False)
class Threshold(Compressor):
    """Hard threshold (``threshold:V``): each row sends every coordinate with |x| >= V (V rounded
    to float32, V >= 0). Biased; the message length depends on the data.

    Wire format per row (little-endian, 4 + 8 count bytes): uint32 count (<= dim), count uint32
    indices strictly increasing and < dim, then count float32 values (finite).
    """

    value: float
    unbiased = False
    max_dim = SPARSE_MAX_DIM

    def __post_init__(self) -> None:
        v = self.value
        if isinstance(v, bool) or not isinstance(v, (int, float, np.floating)):
            raise TypeError(f"value must be a number >= 0, got {type(v).__name__}")
        if not (0 <= v < math.inf):
            raise ValueError(f"threshold value must be a finite number >= 0, got {v}")
        object.__setattr__(self, "value", float(v))

    @property
    def spec(self) -> str:
        return f"threshold:{self.value!r}"

    @classmethod
    def from_args(cls, args):
        spec = ":".join(("threshold",) + tuple(args))
        if len(args) != 1:
            raise ValueError(f"{spec!r}: expected 'threshold:V' with a finite V >= 0")
        try:
            v = float(args[0])
        except ValueError:
            raise ValueError(f"{spec!r}: V must be a finite number >= 0, got {args[0]!r}") \
                from None
        if not (0 <= v < math.inf):
            raise ValueError(f"{spec!r}: V must be a finite number >= 0, got {v}")
        return cls(v)

    def _compress(self, x, seed, step, peer0, n_threads):
        counts, idx, val = ops.threshold(x, self.value, n_threads=n_threads)
        check_sent_finite(val, self.spec)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return {"counts": counts, "offsets": offsets, "idx": idx, "val": val}, 4 + 8 * counts

    def _decompress(self, payload, n_threads, out):
        a = payload.arrays
        out[...] = 0
        rows = np.repeat(np.arange(payload.n_rows), a["counts"])
        out[rows, a["idx"]] = a["val"]

    def _row_to_bytes(self, payload, row):
        a = payload.arrays
        lo, hi = a["offsets"][row], a["offsets"][row + 1]
        return (np.uint32(hi - lo).astype("<u4").tobytes() + a["idx"][lo:hi].astype("<u4").tobytes()
                + a["val"][lo:hi].astype("<f4").tobytes())

    def _min_row_nbytes(self, dim):
        return 4

    def _parse_row(self, reader, dim):
        count = reader.u32()
        if count > dim:
            raise ValueError(f"{self.spec} message: count {count} exceeds dim={dim}")
        idx, val = read_pairs(reader, count, dim, self.spec)
        return {"idx": idx, "val": val}

    def _join_rows(self, rows, n_rows, dim):
        counts = np.array([len(r["idx"]) for r in rows], dtype=np.int64)
        idx = np.concatenate([r["idx"] for r in rows]) if rows else np.zeros(0, np.int32)
        val = np.concatenate([r["val"] for r in rows]) if rows else np.zeros(0, np.float32)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return ({"counts": counts, "offsets": offsets, "idx": idx.astype(np.int32),
                 "val": val.astype(np.float32)}, 4 + 8 * counts)
