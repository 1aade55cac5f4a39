"""Adam (Kingma & Ba, ``adam``) and AdamW (Loshchilov & Hutter, ``adamw``) over every peer's row at
once, as torch.optim.Adam and torch.optim.AdamW."""

from __future__ import annotations

from typing import Any

import numpy as np

from decentlearn.optim.adaptive import Adaptive
from decentlearn.optim.base import OptimizerConfig, register

__all__ = ["Adam"]


@register("adam")
@register("adamw")
class Adam(Adaptive):
    """Adam (``name='adam'``, torch.optim.Adam: L2 ``weight_decay`` added to the gradient) and
    AdamW (``name='adamw'``, torch.optim.AdamW: decoupled ``params *= 1 - lr * wd`` first):

        m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
        params -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
    """

    def __init__(self, config: OptimizerConfig, shape, dtype: Any = np.float32,
                 segments=None) -> None:
        super().__init__(config, shape, dtype, segments)
        if config.name not in ("adam", "adamw"):
            raise ValueError(f"Adam needs optimizer 'adam' or 'adamw', got {config.name!r}")
        self._state = {"exp_avg": np.zeros(self.shape, self.dtype),
                       "exp_avg_sq": np.zeros(self.shape, self.dtype)}

    def step(self, params: np.ndarray, grad: np.ndarray, lr: float | None = None,
             frozen: np.ndarray | None = None) -> None:
        lr, mask = self._begin(params, grad, lr, frozen)
        c = self.config
        g = grad
        if c.weight_decay != 0 and c.name == "adam":
            g = np.multiply(params, c.weight_decay, out=self._scratch)
            g += grad
        m, v = self._moments(g, c.momentum, c.beta2)
        denom = np.sqrt(v, out=self._scratch)
        denom /= np.sqrt(self._bias(c.beta2)).astype(self.dtype)
        denom += self.dtype.type(c.eps_value)
        np.divide(m, denom, out=denom)
        denom *= (lr / self._bias(c.momentum)).astype(self.dtype)
        if c.weight_decay != 0 and c.name == "adamw":  # decoupled: params *= 1 - lr wd
            denom += np.multiply(params, self.dtype.type(lr * c.weight_decay), out=self._work())
        self._finish(params, denom, mask)
