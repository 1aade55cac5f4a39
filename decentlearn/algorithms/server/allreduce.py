"""Exact averaging of all peers' models after local steps (ring all-reduce), or a compressed
all-reduce of their changes (Bagua's "centralized, low-precision" corner)."""

from __future__ import annotations

import numpy as np

from decentlearn.algorithms.base import Algorithm, Sampler, none_if_identity, register
from decentlearn.state import replicated

__all__ = ["AllReduce"]


@register("allreduce")
class AllReduce(Algorithm):
    """Local steps, then exact averaging of all peers' models (ring all-reduce).

    With a compressor: the peers all-reduce their changes Δ_i = x_i - x_bar_prev compressed
    (``comm.allreduce_compressed``: compressed scatter-reduce, the chunk averages compressed again
    and all-gathered) and set x <- x_bar_prev + that estimate, so all peers stay identical.
    Bytes per round and peer: 2(n-1)/n · 4·dim (float32) or 2(n-1)/n of a compressed row.
    """

    state = replicated("anchor")
    scratch = ("_buf",)

    def __init__(self, *, variant: str = "atc", **kwargs) -> None:
        super().__init__(**kwargs)
        if variant != "atc":
            raise ValueError(f"allreduce trains before communicating: variant must be 'atc', "
                             f"got {variant!r}")
        self.compressor = none_if_identity(self.compressor)
        self._buf = np.empty_like(self.params)
        #: The last average (1, dim): the reference of compressed changes.
        self.anchor = self.params.mean(axis=0, dtype=np.float64, keepdims=True).astype(np.float32)

    def round(self, sample: Sampler, t: int) -> np.ndarray:
        losses = np.zeros(self.comm.n_peers)
        for _ in range(self.local_steps):
            losses += self.local_step(sample)
        if self.compressor is None:
            out = self.comm.allreduce(self.params, t, out=self._buf)
            self._buf, self.params = self.params, out
        else:
            delta = np.subtract(self.params, self.anchor, out=self._buf)
            mean = self.comm.allreduce_compressed(self.compressor, delta, t, seed=self.seed)
            self.anchor += mean
            self.params[...] = self.anchor
        return losses / self.local_steps
