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

    One pass of ``ops.adam_step`` for float32."""

    def __init__(self, config: OptimizerConfig, shape, dtype: Any = np.float32,
                 segments=None, n_threads: int | None = None) -> None:
        super().__init__(config, shape, dtype, segments, n_threads)
        if config.name not in ("adam", "adamw"):
            raise ValueError(f"Adam needs optimizer 'adam' or 'adamw', got {config.name!r}")
        self._state = {"exp_avg": np.zeros(self.shape, self.dtype),
                       "exp_avg_sq": np.zeros(self.shape, self.dtype)}

    def _step(self, kernels, params, grad, lr, frozen) -> None:
        c = self.config
        kernels.adam_step(params, grad, self._state["exp_avg"], self._state["exp_avg_sq"],
                          self.steps, lr, c.momentum, c.beta2, c.eps_value, c.weight_decay,
                          c.name == "adamw", frozen, n_threads=self.n_threads)
