"""LAMB (You et al. 2019, ``lamb``): Adam's update scaled per peer and per layer by a trust ratio,
for large-batch training."""

from __future__ import annotations

from typing import Any

import numpy as np

from decentlearn.optim.adaptive import Adaptive, row_norms
from decentlearn.optim.base import OptimizerConfig, register

__all__ = ["LAMB"]


@register("lamb")
class LAMB(Adaptive):
    """LAMB (You et al. 2019, Algorithm 2 with phi the identity), per peer and per layer l:

        m, v as Adam (raw gradient);  r = m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps)
        u = r + wd x;  x_l -= lr ||x_l|| / ||u_l|| u_l   (ratio 1 where either norm is 0)
    """

    default_eps = 1e-6

    def __init__(self, config: OptimizerConfig, shape, dtype: Any = np.float32,
                 segments=None) -> None:
        super().__init__(config, shape, dtype, segments)
        if config.name != "lamb":
            raise ValueError(f"LAMB needs optimizer 'lamb', got {config.name!r}")
        self._state = {"exp_avg": np.zeros(self.shape, self.dtype),
                       "exp_avg_sq": np.zeros(self.shape, self.dtype)}

    def step(self, params: np.ndarray, grad: np.ndarray, lr: float | None = None,
             frozen: np.ndarray | None = None) -> None:
        lr, mask = self._begin(params, grad, lr, frozen)
        c = self.config
        m, v = self._moments(grad, c.momentum, c.beta2)
        u = np.divide(v, self._bias(c.beta2).astype(self.dtype), out=self._scratch)
        np.sqrt(u, out=u)
        u += self.dtype.type(c.eps_value)
        np.divide(m, u, out=u)
        u /= self._bias(c.momentum).astype(self.dtype)
        if c.weight_decay != 0:
            u += np.multiply(params, self.dtype.type(c.weight_decay), out=self._work())
        for rows, cut in mask:
            u[rows, :cut] = 0
        for a, b in self.segments:
            wn, un = row_norms(params[:, a:b]), row_norms(u[:, a:b])
            ok = (wn > 0) & (un > 0)
            ratio = np.where(ok, wn / np.where(ok, un, 1.0), 1.0)
            u[:, a:b] *= (lr * ratio).astype(self.dtype)[:, None]
        self._finish(params, u, mask)
