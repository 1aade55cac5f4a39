"""Random-k sparsification (``randk:R[:unbiased]``): each row keeps k random coordinates."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from decentlearn import ops
from decentlearn.compress.base import parse_ratio, register
from decentlearn.compress.sparse_pairs import FixedK, check_ratio, check_sent_finite

@register("randk")
@dataclass(frozen=True, repr=False)
class RandK(FixedK):
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
        object.__setattr__(self, "ratio", check_ratio(self.ratio))
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
        check_sent_finite(val, self.spec)
        return self._payload(idx, val, x.shape[0])
