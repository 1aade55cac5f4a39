"""LARS (You, Gitman & Ginsburg 2017, ``lars``): momentum SGD whose update is scaled per peer and
per layer by a trust ratio, for large-batch training."""

from __future__ import annotations

from typing import Any

import numpy as np

from decentlearn.optim.adaptive import Adaptive, row_norms
from decentlearn.optim.base import OptimizerConfig, register

__all__ = ["LARS"]


@register("lars")
class LARS(Adaptive):
    """LARS (You, Gitman & Ginsburg 2017), per peer and per layer l:

        trust_l = eta ||x_l|| / (||g_l|| + wd ||x_l|| + eps)   (1 where ||x_l|| or ||g_l|| is 0)
        buf = momentum buf + lr trust_l (g + wd x);  x -= buf
    """

    default_eps = 1e-9
    momentum_name = "momentum"

    def __init__(self, config: OptimizerConfig, shape, dtype: Any = np.float32,
                 segments=None) -> None:
        super().__init__(config, shape, dtype, segments)
        if config.name != "lars":
            raise ValueError(f"LARS needs optimizer 'lars', got {config.name!r}")
        self._state = {"momentum": np.zeros(self.shape, self.dtype)}

    def step(self, params: np.ndarray, grad: np.ndarray, lr: float | None = None,
             frozen: np.ndarray | None = None) -> None:
        lr, mask = self._begin(params, grad, lr, frozen)
        c = self.config
        u = np.multiply(params, c.weight_decay, out=self._scratch)
        u += grad
        for a, b in self.segments:
            wn, gn = row_norms(params[:, a:b]), row_norms(grad[:, a:b])
            ok = (wn > 0) & (gn > 0)
            trust = np.where(ok, c.trust_coefficient * wn
                             / np.where(ok, gn + c.weight_decay * wn + c.eps_value, 1.0), 1.0)
            u[:, a:b] *= (lr * trust).astype(self.dtype)[:, None]
        if c.momentum != 0:
            buf = self._state["momentum"]
            buf *= self.dtype.type(c.momentum)
            buf += u
            for rows, cut in mask:
                buf[rows, :cut] = 0
            u[...] = buf
        self._finish(params, u, mask)
