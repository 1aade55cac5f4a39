"""Algorithms for directed and non-doubly-stochastic mixing.

* ``pushsum``: Stochastic Gradient Push (Assran et al., ICML 2019), built on push-sum (Kempe,
  Dobra and Gehrke, FOCS 2003). Every peer keeps a numerator x_i (a row) and a weight w_i (a
  scalar, 1 at the start); its model is z_i = x_i / w_i. A round: H local steps x_i <- x_i -
  lr * update(grad f_i(z_i)) (z_i recomputed after each), then x <- P_t x and w <- P_t w with a
  column-stochastic P_t (each sender splits its mass among itself and its out-neighbours), so
  sum_i x_i and sum_i w_i are conserved and z_i converges to the average on any strongly connected
  sequence of directed graphs. w is mixed in float64 with the very float32 weights the C kernel
  applies to x, so the two stay consistent.
* ``epidemic``: Epidemic Learning (de Vos et al., NeurIPS 2023): D-PSGD whose mixing is
  row-stochastic, every peer averaging its own model with the models that reached it (on an
  ``epidemic:S`` graph, from S random senders each round).

Each algorithm declares the mixing matrices it handles in its ``mixing`` attribute; the simulator
rejects other topologies with a clear error (:func:`decentlearn.topology.check_mixing`).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from decentlearn.algorithms import DPSGD, Algorithm, Sampler, register

__all__ = ["EpidemicLearning", "PushSum"]


@register("pushsum")
class PushSum(Algorithm):
    """Stochastic Gradient Push (see the module docstring). ``params`` holds the de-biased
    models z = x / w; ``numerators`` and ``weights`` the push-sum state."""

    mixing = ("column", "doubly")
    state_attrs = ("numerators", "weights")

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
        np.divide(self.numerators, self.weights[:, None].astype(np.float32), out=self.params)

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


@register("epidemic")
class EpidemicLearning(DPSGD):
    """Epidemic Learning: D-PSGD with row-stochastic mixing (see the module docstring)."""

    mixing = ("row", "doubly")
