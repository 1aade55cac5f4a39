"""LARS (You, Gitman & Ginsburg 2017, ``lars``): momentum SGD whose update is scaled per peer and
per layer by a trust ratio, for large-batch training."""

from __future__ import annotations

from typing import Any

import numpy as np

from decentlearn.optim.adaptive import Adaptive
from decentlearn.optim.base import OptimizerConfig, register

__all__ = ["LARS"]


@register("lars")
class LARS(Adaptive):
    """LARS (You, Gitman & Ginsburg 2017), per peer and per layer l:

        trust_l = eta ||x_l|| / (||g_l|| + wd ||x_l|| + eps)   (1 where ||x_l|| or ||g_l|| is 0)
        buf = momentum buf + lr trust_l (g + wd x);  x -= buf

    ``ops.lars_step`` for float32: the layers' sums of squares in one pass, the update in a
    second."""

    default_eps = 1e-9
    momentum_name = "momentum"

    def __init__(self, config: OptimizerConfig, shape, dtype: Any = np.float32,
                 segments=None, n_threads: int | None = None) -> None:
        super().__init__(config, shape, dtype, segments, n_threads)
        if config.name != "lars":
            raise ValueError(f"LARS needs optimizer 'lars', got {config.name!r}")
        self._state = {"momentum": np.zeros(self.shape, self.dtype)}

    def _step(self, kernels, params, grad, lr, frozen) -> None:
        c = self.config
        kernels.lars_step(params, grad, self._state["momentum"], lr, c.momentum, c.weight_decay,
                          c.trust_coefficient, c.eps_value, self.bounds, frozen,
                          n_threads=self.n_threads)
