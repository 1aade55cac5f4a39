"""The (index, value) pair messages of the sparsifiers (top-k, random-k, threshold) and the rule
k = max(1, ceil(R dim)) that top-k, random-k and STC share.

A row's pairs are uint32 indices, strictly increasing and below dim, then float32 values, finite;
everything little-endian. ``read_pairs`` treats the bytes as untrusted and raises ValueError on any
violation; decoding scatters the pairs into zeros.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from decentlearn import ops
from decentlearn.compress.base import Compressor
from decentlearn.compress.wire import Reader

__all__ = ["SPARSE_MAX_DIM", "FixedK", "check_ratio", "check_sent_finite", "read_pairs",
           "scatter_pairs", "sparse_k"]


def sparse_k(ratio: float, dim: int) -> int:
    """k = max(1, ceil(ratio * dim)) for dim > 0 (0 for dim = 0), with ratio read as the decimal
    it prints as, so 0.07 * 100 gives 7, not 8."""
    if dim == 0:
        return 0
    return min(dim, max(1, math.ceil(Fraction(repr(float(ratio))) * dim)))


def check_ratio(ratio) -> float:
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float, np.floating)):
        raise TypeError(f"ratio must be a number in (0, 1], got {type(ratio).__name__}")
    if not 0 < ratio <= 1:
        raise ValueError(f"ratio must be in (0, 1], got {ratio}")
    return float(ratio)


def check_sent_finite(val: np.ndarray, spec: str) -> None:
    if not np.isfinite(val).all():
        raise ValueError(f"{spec}: x must be finite where it is sent (NaN or infinity found)")


#: Longest row the sparse kernels (int32 indices) encode; the decoders refuse longer ones.
SPARSE_MAX_DIM = 2**31 - 1


def read_pairs(reader: Reader, count: int, dim: int, spec: str) -> tuple[np.ndarray, np.ndarray]:
    """count uint32 indices (strictly increasing, < dim) then count finite float32 values.

    The indices are compared as int64 and narrowed to int32 only once every one is known to be
    < dim <= SPARSE_MAX_DIM, so nothing can wrap."""
    if dim > SPARSE_MAX_DIM:
        raise ValueError(f"{spec} message: dim must be <= {SPARSE_MAX_DIM}, got {dim}")
    idx = reader.array(np.uint32, count).astype(np.int64)
    val = reader.array(np.float32, count)
    if count and (idx[-1] >= dim or idx[0] < 0 or (count > 1 and not (np.diff(idx) > 0).all())):
        raise ValueError(f"{spec} message: indices must be strictly increasing and < dim={dim}")
    if not np.isfinite(val).all():
        raise ValueError(f"{spec} message: values must be finite")
    return idx.astype(np.int32), val


def scatter_pairs(out: np.ndarray, idx: np.ndarray, val: np.ndarray,
                  n_threads: int | None = None) -> np.ndarray:
    """Dense (n_rows, dim) rows from each row's (index, value) pairs, into ``out``
    (ops.scatter)."""
    idx = np.ascontiguousarray(idx, dtype=np.int32)  # (n_rows, k); dim < 2**31
    val = np.ascontiguousarray(val, dtype=np.float32)
    return ops.scatter(idx, val, out.shape[1], out=out, n_threads=n_threads)


class FixedK(Compressor):
    """Shared body of top-k and random-k: k pairs per row, k implied by ratio and dim."""

    ratio: float
    max_dim = SPARSE_MAX_DIM

    def k(self, dim: int) -> int:
        return sparse_k(self.ratio, dim)

    def _min_row_nbytes(self, dim):
        return 8 * self.k(dim)

    def _payload(self, idx, val, n_rows):
        return {"idx": idx, "val": val}, np.full(n_rows, 8 * idx.shape[1])

    def _decompress(self, payload, n_threads, out):
        a = payload.arrays
        scatter_pairs(out, a["idx"], a["val"], n_threads)

    def _row_to_bytes(self, payload, row):
        return (payload.arrays["idx"][row].astype("<u4").tobytes()
                + payload.arrays["val"][row].astype("<f4").tobytes())

    def _parse_row(self, reader, dim):
        idx, val = read_pairs(reader, self.k(dim), dim, self.spec)
        return {"idx": idx, "val": val}

    def _join_rows(self, rows, n_rows, dim):
        k = self.k(dim)
        idx = np.stack([r["idx"] for r in rows]) if rows else np.zeros((0, k), np.int32)
        val = np.stack([r["val"] for r in rows]) if rows else np.zeros((0, k), np.float32)
        return self._payload(idx.reshape(n_rows, k), val.reshape(n_rows, k), n_rows)
