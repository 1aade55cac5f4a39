"""Top-k sparsification (``topk:R``): each row keeps its k largest magnitudes."""

from __future__ import annotations

from dataclasses import dataclass

from decentlearn import ops
from decentlearn.compress.base import parse_ratio, register
from decentlearn.compress.sparse_pairs import FixedK, check_ratio, check_sent_finite

@register("topk")
@dataclass(frozen=True, repr=False)
class TopK(FixedK):
    """Top-k sparsification (``topk:R``): each row keeps its k = max(1, ceil(R dim)) largest
    magnitudes (ties to the lowest indices, see ops.topk). Biased; pair it with ErrorFeedback.

    Wire format per row (little-endian, 8k bytes; k is implied by R and dim): k uint32 indices,
    strictly increasing and < dim, then the k float32 values (finite).
    """

    ratio: float
    unbiased = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "ratio", check_ratio(self.ratio))

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
        check_sent_finite(val, self.spec)
        return self._payload(idx, val, x.shape[0])
