"""DACFL (Chen et al. 2022): local training plus first-order dynamic average consensus that
tracks the average of the peers' models."""

from __future__ import annotations

import numpy as np

from decentlearn import ops
from decentlearn.algorithms.base import (Algorithm, Sampler, register, require_atc,
                                         require_uncompressed)
from decentlearn.state import row

__all__ = ["DACFL"]


@register("dacfl")
class DACFL(Algorithm):
    """DACFL (Chen et al. 2022): each peer trains its model omega_i for ``local_steps`` steps from
    its current estimate x_i, and x tracks the average of the omegas by first-order dynamic average
    consensus:

        omega_i(t+1) = LocalSGD(x_i(t))
        x(t+1) = W_t x(t) + omega(t+1) - omega(t),    x(0) = omega(0)

    For every doubly stochastic W_t, mean_i x_i(t) = mean_i omega_i(t) exactly (in exact
    arithmetic), so the peers' estimates track the average of the trained models. ``params`` holds
    x. Bytes per round: one float32 vector per out-neighbour. Static and time-varying graphs
    (the paper assumes a symmetric doubly stochastic W_t).
    """

    state = row("omega")
    scratch = ("_work",)

    def __init__(self, *, variant: str = "atc", **kwargs) -> None:
        super().__init__(**kwargs)
        require_atc("dacfl", variant)
        require_uncompressed(self)
        #: The trained models omega(t) (the reference signals that x tracks).
        self.omega = self.params.copy()
        self._work = np.empty_like(self.params)

    def round(self, sample: Sampler, t: int) -> np.ndarray:
        work, nt = self._work, self.comm.n_threads
        ops.copy2d(self.params, work, n_threads=nt)  # the whole-matrix steps on the run's threads
        losses = np.zeros(self.comm.n_peers)
        for _ in range(self.local_steps):
            x, y = sample()
            step_losses, grad = self.gradient(work, x, y)
            self.apply(work, grad)
            losses += step_losses
        mixed = self.comm.mix(self.params, t)
        ops.axpby(1, mixed, 1, work, out=mixed, n_threads=nt)  # (W x + omega') - omega, NumPy's
        ops.axpby(1, mixed, -1, self.omega, out=mixed, n_threads=nt)  # order and roundings
        self.params = mixed
        self.omega, self._work = work, self.omega
        return losses / self.local_steps
