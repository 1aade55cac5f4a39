"""Stochastic Gradient Push (Assran et al., ICML 2019), built on push-sum (Kempe, Dobra and Gehrke,
FOCS 2003), for directed, column-stochastic mixing."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from decentlearn import ops
from decentlearn.algorithms.base import Algorithm, Sampler, register
from decentlearn.state import row

__all__ = ["PushSum"]


@register("pushsum")
class PushSum(Algorithm):
    """Stochastic Gradient Push (see the module docstring). ``params`` holds the de-biased
    models z = x / w; ``numerators`` and ``weights`` the push-sum state."""

    mixing = ("column", "doubly")
    state = row("numerators", "weights")

    def __init__(self, *, variant: str = "atc", **kwargs) -> None:
        super().__init__(**kwargs)
        if self.compressed:
            raise ValueError("pushsum sends uncompressed numerators: compress must be 'none', "
                             f"got {self.compressor.spec!r}")
        if variant != "atc":
            raise ValueError(f"pushsum takes its local steps before mixing: variant must be "
                             f"'atc', got {variant!r}")
        self.numerators = self.params.copy()
        self.weights = np.ones(self.comm.n_peers)

    def _debias(self) -> None:
        # numerators / weights row by row (NumPy's division), on the run's threads
        ops.scale_rows(self.numerators, self.weights.astype(np.float32), divide=True,
                       out=self.params, n_threads=self.comm.n_threads)

    def mix_weights(self, w: np.ndarray, t: int) -> np.ndarray:
        """P_t w in float64 with the float32 weights the gossip kernel uses for the numerators.
        ``w`` holds the hosted peers' weights; a process hosting a block of peers gathers every
        peer's weight (one float64 per peer) and computes its rows of P_t w."""
        indptr, indices, data = self.comm.mixing.csr(t)
        N, lo = self.comm.n_global, self.comm.peer0
        P = sp.csr_array((data.astype(np.float64), indices, indptr), shape=(N, N))
        if self.comm.n_peers != N:
            P = P[lo:lo + self.comm.n_peers]
        return P @ self.comm.allgather_peers(w)

    def round(self, sample: Sampler, t: int) -> np.ndarray:
        losses = np.zeros(self.comm.n_peers)
        for _ in range(self.local_steps):
            x, y = sample()
            step_losses, grad = self.gradient(self.params, x, y)
            losses += step_losses
            self.apply(self.numerators, grad)
            self._debias()
        self.numerators = self.comm.mix(self.numerators, t)
        self.weights = self.mix_weights(self.weights, t)
        self._debias()
        return losses / self.local_steps
