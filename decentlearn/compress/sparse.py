"""Sparsifying compressors: top-k, random-k and magnitude threshold (one message per row).

All three send (index, value) pairs of a row and decode by scattering them into zeros. Indices
are uint32, strictly increasing and below dim; values float32 and finite; everything little-endian.
Decoders treat the bytes as untrusted and raise ValueError on any violation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from decentlearn import ops
from decentlearn.compress import Compressor, Reader, parse_ratio, register


def sparse_k(ratio: float, dim: int) -> int:
    """k = max(1, ceil(ratio * dim)) for dim > 0 (0 for dim = 0), with ratio read as the decimal
    it prints as, so 0.07 * 100 gives 7, not 8."""
    if dim == 0:
        return 0
    return min(dim, max(1, math.ceil(Fraction(repr(float(ratio))) * dim)))


def _check_ratio(ratio) -> float:
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float, np.floating)):
        raise TypeError(f"ratio must be a number in (0, 1], got {type(ratio).__name__}")
    if not 0 < ratio <= 1:
        raise ValueError(f"ratio must be in (0, 1], got {ratio}")
    return float(ratio)


def _finite_values(val: np.ndarray, spec: str) -> None:
    if not np.isfinite(val).all():
        raise ValueError(f"{spec}: x must be finite where it is sent (NaN or infinity found)")


#: Longest row the sparse kernels (int32 indices) encode; the decoders refuse longer ones.
SPARSE_MAX_DIM = 2**31 - 1


def _read_pairs(reader: Reader, count: int, dim: int, spec: str) -> tuple[np.ndarray, np.ndarray]:
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


def _scatter(n_rows: int, dim: int, idx: np.ndarray, val: np.ndarray) -> np.ndarray:
    out = np.zeros((n_rows, dim), dtype=np.float32)
    if idx.size:
        np.put_along_axis(out, idx.astype(np.intp), val, axis=1)
    return out


class _FixedK(Compressor):
    """Shared body of top-k and random-k: k pairs per row, k implied by ratio and dim."""

    ratio: float
    max_dim = SPARSE_MAX_DIM

    def k(self, dim: int) -> int:
        return sparse_k(self.ratio, dim)

    def _min_row_nbytes(self, dim):
        return 8 * self.k(dim)

    def _payload(self, idx, val, n_rows):
        return {"idx": idx, "val": val}, np.full(n_rows, 8 * idx.shape[1])

    def _decompress(self, payload, n_threads):
        return _scatter(payload.n_rows, payload.dim, payload.arrays["idx"], payload.arrays["val"])

    def _row_to_bytes(self, payload, row):
        return (payload.arrays["idx"][row].astype("<u4").tobytes()
                + payload.arrays["val"][row].astype("<f4").tobytes())

    def _parse_row(self, reader, dim):
        idx, val = _read_pairs(reader, self.k(dim), dim, self.spec)
        return {"idx": idx, "val": val}

    def _join_rows(self, rows, n_rows, dim):
        k = self.k(dim)
        idx = np.stack([r["idx"] for r in rows]) if rows else np.zeros((0, k), np.int32)
        val = np.stack([r["val"] for r in rows]) if rows else np.zeros((0, k), np.float32)
        return self._payload(idx.reshape(n_rows, k), val.reshape(n_rows, k), n_rows)


@register("topk")
@dataclass(frozen=True, repr=False)
class TopK(_FixedK):
    """Top-k sparsification (``topk:R``): each row keeps its k = max(1, ceil(R dim)) largest
    magnitudes (ties to the lowest indices, see ops.topk). Biased; pair it with ErrorFeedback.

    Wire format per row (little-endian, 8k bytes; k is implied by R and dim): k uint32 indices,
    strictly increasing and < dim, then the k float32 values (finite).
    """

    ratio: float
    unbiased = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "ratio", _check_ratio(self.ratio))

    @property
    def spec(self) -> str:
        return f"topk:{self.ratio!r}"

    @classmethod
    def from_args(cls, args):
        spec = ":".join(("topk",) + tuple(args))
        if len(args) != 1:
            raise ValueError(f"{spec!r}: expected 'topk:R' with a ratio R in (0, 1]")
        return cls(parse_ratio(args[0], spec))

    def _compress(self, x, seed, step, peer0, n_threads):
        idx, val = ops.topk(x, self.k(x.shape[1]), n_threads=n_threads)
        _finite_values(val, self.spec)
        return self._payload(idx, val, x.shape[0])


@register("randk")
@dataclass(frozen=True, repr=False)
class RandK(_FixedK):
    """Random-k sparsification (``randk:R`` or ``randk:R:unbiased``): each row keeps k = max(1,
    ceil(R dim)) distinct uniformly random coordinates drawn from the counter generator keyed by
    (seed, step, peer) (see ops.randk). With ``unbiased`` the values are scaled by dim / k, so
    E[decompress(compress(x))] = x.

    Wire format per row (little-endian, 8k bytes; k is implied by R and dim): k uint32 indices,
    strictly increasing and < dim, then the k float32 values as sent (already scaled; finite).
    """

    ratio: float
    unbiased: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "ratio", _check_ratio(self.ratio))
        if not isinstance(self.unbiased, (bool, np.bool_)):
            raise TypeError(f"unbiased must be a bool, got {type(self.unbiased).__name__}")

    @property
    def spec(self) -> str:
        return f"randk:{self.ratio!r}" + (":unbiased" if self.unbiased else "")

    def variance_factor(self, dim: int) -> float | None:
        """dim / k - 1 when scaled (``:unbiased``); None for the biased, unscaled form."""
        return dim / max(self.k(dim), 1) - 1 if self.unbiased else None

    @classmethod
    def from_args(cls, args):
        spec = ":".join(("randk",) + tuple(args))
        if len(args) not in (1, 2) or (len(args) == 2 and args[1] != "unbiased"):
            raise ValueError(f"{spec!r}: expected 'randk:R' or 'randk:R:unbiased', R in (0, 1]")
        return cls(parse_ratio(args[0], spec), len(args) == 2)

    def _compress(self, x, seed, step, peer0, n_threads):
        dim = x.shape[1]
        k = self.k(dim)
        idx, val = ops.randk(x, k, seed=seed, step=step, peer0=peer0, n_threads=n_threads)
        if self.unbiased and k:
            with np.errstate(over="ignore"):  # an overflow is reported as non-finite below
                val *= np.float32(dim / k)
        _finite_values(val, self.spec)
        return self._payload(idx, val, x.shape[0])


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
        _finite_values(val, self.spec)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return {"counts": counts, "offsets": offsets, "idx": idx, "val": val}, 4 + 8 * counts

    def _decompress(self, payload, n_threads):
        a = payload.arrays
        out = np.zeros((payload.n_rows, payload.dim), dtype=np.float32)
        rows = np.repeat(np.arange(payload.n_rows), a["counts"])
        out[rows, a["idx"]] = a["val"]
        return out

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
        idx, val = _read_pairs(reader, count, dim, self.spec)
        return {"idx": idx, "val": val}

    def _join_rows(self, rows, n_rows, dim):
        counts = np.array([len(r["idx"]) for r in rows], dtype=np.int64)
        idx = np.concatenate([r["idx"] for r in rows]) if rows else np.zeros(0, np.int32)
        val = np.concatenate([r["val"] for r in rows]) if rows else np.zeros(0, np.float32)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return ({"counts": counts, "offsets": offsets, "idx": idx.astype(np.int32),
                 "val": val.astype(np.float32)}, 4 + 8 * counts)
