"""D² (Tang et al. 2018) on W̄ = (I + W)/2, i.e. Exact Diffusion (Yuan et al. 2019)."""

from __future__ import annotations

import numpy as np

from decentlearn import ops
from decentlearn.algorithms.base import (Algorithm, Sampler, register, require_atc,
                                         require_one_step, require_unfrozen,
                                         require_uncompressed)
from decentlearn.optim import SGD
from decentlearn.state import row

__all__ = ["D2"]


@register("d2")
class D2(Algorithm):
    """D² (Tang et al. 2018) with the mixing matrix W̄ = (I + W)/2 (Exact Diffusion's form, which
    meets D²'s condition lambda_min(W̄) > -1/3 for every doubly stochastic symmetric W):

        x_1 = W̄ (x_0 - lr g(x_0))
        x_{t+1} = W̄ (2 x_t - x_{t-1} - lr g(x_t) + lr g(x_{t-1}))

    Exact convergence on heterogeneous data with a constant step, in exact arithmetic: the
    correction telescopes, so float32 rounding accumulates in the peers' mean like an integrator
    (measured: ~2.5e-7 per round on a quadratic, see tests). Plain steps (momentum must be 0).
    Bytes per round: one float32 vector per out-neighbour; one gradient per peer. Needs a static
    graph (the correction telescopes over a fixed W).
    """

    state = row("_x_prev", "_step_prev")
    example = {"momentum": 0.0}

    def __init__(self, *, variant: str = "atc", **kwargs) -> None:
        super().__init__(**kwargs)
        require_atc("d2", variant)
        require_uncompressed(self)
        require_one_step(self)
        require_unfrozen(self)
        if not self.comm.static:
            raise ValueError("d2 needs a static graph (a topology with period 1)")
        if not isinstance(self.optimizer, SGD) or float(self.optimizer.config.momentum) != 0.0:
            raise ValueError("d2 takes plain gradient steps: optimizer must be sgd with momentum "
                             f"0, got {getattr(self.optimizer, 'name', 'sgd')} with momentum "
                             f"{self.optimizer.config.momentum!r}")
        self._x_prev: np.ndarray | None = None  # x_{t-1}
        self._step_prev: np.ndarray | None = None  # lr · g(x_{t-1})

    def round(self, sample: Sampler, t: int) -> np.ndarray:
        x, y = sample()
        losses, g = self.gradient(self.params, x, y)
        nt, n = self.comm.n_threads, self.params.shape[0]
        # lr g (NumPy's g * lr, one rounding per value) on the run's threads
        step = ops.scale_rows(g, np.full(n, self.optimizer.lr, dtype=np.float32), n_threads=nt)
        if self._x_prev is None:
            z = ops.axpby(1, self.params, -1, step, n_threads=nt)
        else:  # ((2 x - x_prev) - step) + step_prev, NumPy's order
            z = ops.axpby(2, self.params, -1, self._x_prev, n_threads=nt)
            ops.axpby(1, z, -1, step, out=z, n_threads=nt)
            ops.axpby(1, z, 1, self._step_prev, out=z, n_threads=nt)
        self._x_prev = self.params
        self._step_prev = step
        mixed = self.comm.mix(z, t)  # W z; then x_{t+1} = (z + W z) / 2 = W̄ z
        x_next = ops.axpby(1, z, 1, mixed, n_threads=nt)
        ops.scale_rows(x_next, np.full(n, 0.5, dtype=np.float32), out=x_next, n_threads=nt)
        self.params = x_next
        return losses
