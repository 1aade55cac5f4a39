"""Gradient tracking, adapt-then-combine (GT-DSGD; Pu and Nedić 2021, Xin et al. 2020)."""

from __future__ import annotations

import numpy as np

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
        mixed += g
        mixed -= self._g_prev
        self.tracker = mixed
        self._g_prev[...] = g
        return losses
