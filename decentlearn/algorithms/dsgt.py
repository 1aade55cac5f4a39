"""Gradient tracking, adapt-then-combine (GT-DSGD; Pu and Nedić 2021, Xin et al. 2020)."""

from __future__ import annotations

import numpy as np

from decentlearn import ops
from decentlearn.algorithms.base import (Algorithm, Sampler, register, require_atc,
                                         require_one_step, require_unfrozen,
                                         require_uncompressed)
from decentlearn.state import row

__all__ = ["DSGT"]


@register("dsgt")
class DSGT(Algorithm):
    """Gradient tracking, adapt-then-combine (GT-DSGD):

        x_{t+1} = W_t (x_t - lr · y_t)
        y_{t+1} = W_t y_t + g(x_{t+1}) - g(x_t),    y_0 = g(x_0)

    y tracks the average gradient, so with exact gradients and a constant step every peer
    converges to the exact minimizer of the average objective (D-PSGD keeps an O(lr·heterogeneity)
    bias). The step on x is the optimizer's (momentum applies to y). Bytes per round: two float32
    vectors (x and y) per out-neighbour. One gradient per peer and round. Time-varying graphs: yes
    (mean of y stays the mean gradient for any doubly stochastic W_t).
    """

    state = row("tracker", "_g_prev")

    def __init__(self, *, variant: str = "atc", **kwargs) -> None:
        super().__init__(**kwargs)
        require_atc("dsgt", variant)
        require_uncompressed(self)
        require_one_step(self)
        require_unfrozen(self)
        self.tracker: np.ndarray | None = None
        self._g_prev = np.empty_like(self.params)

    def round(self, sample: Sampler, t: int) -> np.ndarray:
        if self.tracker is None:
            x, y = sample()
            _, g = self.gradient(self.params, x, y)
            self.tracker = g.copy()
            self._g_prev[...] = g
        self.apply(self.params, self.tracker)
        self.params = self.comm.mix(self.params, t)
        x, y = sample()
        losses, g = self.gradient(self.params, x, y)
        mixed = self.comm.mix(self.tracker, t)
        nt = self.comm.n_threads
        ops.axpby(1, mixed, 1, g, out=mixed, n_threads=nt)  # (W y + g) - g_prev, as NumPy
        ops.axpby(1, mixed, -1, self._g_prev, out=mixed, n_threads=nt)
        self.tracker = mixed
        ops.copy_f32(g, self._g_prev, n_threads=nt)
        return losses
