"""LAMB (You et al. 2019, ``lamb``): Adam's update scaled per peer and per layer by a trust ratio,
for large-batch training."""

from __future__ import annotations

from typing import Any

import numpy as np

from decentlearn.optim.adaptive import Adaptive
from decentlearn.optim.base import OptimizerConfig, register

__all__ = ["LAMB"]


@register("lamb")
class LAMB(Adaptive):
    """LAMB (You et al. 2019, Algorithm 2 with phi the identity), per peer and per layer l:

        m, v as Adam (raw gradient);  r = m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps)
        u = r + wd x;  x_l -= lr ||x_l|| / ||u_l|| u_l   (ratio 1 where either norm is 0)

    ``ops.lamb_step`` for float32: u and the layers' sums of squares in one pass, the update in a
    second."""

    default_eps = 1e-6
    #: Work array: u between the two passes.
    scratch = ("_work",)

    def __init__(self, config: OptimizerConfig, shape, dtype: Any = np.float32,
                 segments=None, n_threads: int | None = None) -> None:
        super().__init__(config, shape, dtype, segments, n_threads)
        if config.name != "lamb":
            raise ValueError(f"LAMB needs optimizer 'lamb', got {config.name!r}")
        self._state = {"exp_avg": np.zeros(self.shape, self.dtype),
                       "exp_avg_sq": np.zeros(self.shape, self.dtype)}
        self._work = np.empty(self.shape, dtype=self.dtype)

    def _step(self, kernels, params, grad, lr, frozen) -> None:
        c = self.config
        kernels.lamb_step(params, grad, self._state["exp_avg"], self._state["exp_avg_sq"],
                          self._work, self.steps, lr, c.momentum, c.beta2, c.eps_value,
                          c.weight_decay, self.bounds, frozen, n_threads=self.n_threads)
