"""Neighborhood Gradient Clustering (Aketi, Kodge and Roy): local gradients replaced by a weighted
average of self-, model-variant and data-variant cross-gradients."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from decentlearn import compress
from decentlearn.algorithms.base import (Algorithm, Sampler, check_fraction, option, register,
                                         require_one_step, require_uncompressed,
                                         require_unfrozen)
from decentlearn.state import replicated

__all__ = ["NGC"]


@register("ngc")
class NGC(Algorithm):
    """Neighborhood Gradient Clustering (Aketi, Kodge and Roy), combine-then-adapt.

    Round t, peer i with neighbours j (weights w_ij of the symmetric W_t):
      1. peers exchange models (x_j received: 4·dim bytes per neighbour);
      2. self-gradient g_ii = grad f_i(x_i) and model-variant cross-gradients g_ji =
         grad f_i(x_j) (peer i's data on each neighbour's model): 1 + deg_i gradients;
      3. peer i sends g_ji back to j (the cross-gradient exchange: deg_i messages, float32 for
         ngc, compressed with error feedback for compngc); j receives its data-variant
         cross-gradient grad f_i(x_j) (its model on i's data);
      4. g~_i = w_ii g_ii + (1 - alpha) sum_j w_ij grad f_i(x_j) + alpha sum_j w_ij grad f_j(x_i);
      5. x_i <- sum_j w_ij x_j + w_ii x_i - lr · update(g~_i)   (the optimizer's update).
    alpha in [0, 1] (``ngc_alpha``, default 0.5) weighs data-variant against model-variant
    cross-gradients. All cross-gradients of all peers are one batched ``loss_and_grad`` call on the
    gathered (E, dim) neighbour models. Needs an undirected graph (time-varying ones included);
    local_steps must be 1.
    """

    #: Its server rounds / point-to-point replies are not timed by decentlearn.network yet.
    simulated_time = False
    state = replicated("cross_bytes")

    @dataclass(frozen=True)
    class Options:
        ngc_alpha: float = option(0.5, "weight in [0, 1] of the data-variant cross-gradients "
                                  "against the model-variant ones")

        def __post_init__(self) -> None:
            check_fraction(self.ngc_alpha, "ngc_alpha", closed=True)

    def __init__(self, *, ngc_alpha: float = 0.5, variant: str = "cta", **kwargs) -> None:
        super().__init__(**kwargs)
        self.Options(ngc_alpha)
        require_one_step(self)
        require_unfrozen(self)
        self.alpha = float(ngc_alpha)
        self._setup_compressor()
        #: Bytes of cross-gradient messages sent so far (all peers).
        self.cross_bytes = 0
        self._ones = None

    def _setup_compressor(self) -> None:
        require_uncompressed(self)
        self._identity = compress.make("none")

    def _exchange_cross(self, cross: np.ndarray, t: int, first: int) -> np.ndarray:
        """Every peer sends each cross-gradient it computed back to the neighbour whose model it
        used; returns what the neighbours receive (E, dim). Counts ``cross_bytes`` (all peers).
        ``first``: the edge index of row 0 of ``cross`` (the process's first in-edge)."""
        payload = self._identity.compress(cross)
        self.cross_bytes += self.comm.total(payload.nbytes)
        return self.comm.reply(self._identity, payload, t)

    def round(self, sample: Sampler, t: int) -> np.ndarray:
        # The process hosts peers [lo, lo + n) of N (all of them in one process); edges are
        # global in CSR order, so its peers' in-edges are the contiguous range [e0, e1).
        n, N, lo = self.comm.n_peers, self.comm.n_global, self.comm.peer0
        recv, send, w = self.comm.edges(t)
        e = recv.size
        # Undirected: every edge (i, j) has its reverse with the same weight.
        pairs = sp.csr_array((w, (recv, send)), shape=(N, N))
        if e and not np.array_equal(pairs[send, recv], w):
            raise ValueError(f"{self.name} needs an undirected graph with a symmetric W_t")
        e0, e1 = (int(k) for k in np.searchsorted(recv, [lo, lo + n]))
        neighbours = self.comm.neighbor_rows(self.params, t)  # (e1-e0, dim): x_j, edge (i, j)
        x, y = sample()
        losses, g_self = self.gradient(self.params, x, y)
        g_tilde = g_self * self.comm.self_weights(t)[:, None]
        if e:
            r_in = recv[e0:e1] - lo
            if e1 > e0:
                # int8 rounding noise keyed by the global edge index (e0 + row), whichever
                # process computes the cross-gradient.
                peer0, self.model.peer0 = self.model.peer0, e0
                try:
                    _, cross = self.model.loss_and_grad(neighbours, x[r_in], y[r_in])  # f_i(x_j)
                finally:
                    self.model.peer0 = peer0
            else:
                cross = np.zeros((0, self.model.dim), dtype=np.float32)
                self.model.steps += 1  # as a process whose peers have edges
            idx = np.arange(e1 - e0)
            mv = sp.csr_array((w[e0:e1], (r_in, idx)), shape=(n, e1 - e0))
            g_tilde += (1.0 - self.alpha) * (mv @ cross)  # at i: sum_j w_ij grad f_i(x_j)
            received = self._exchange_cross(cross, t, e0)  # at j: grad f_i(x_j)
            out = np.flatnonzero((send >= lo) & (send < lo + n))  # the peers' out-edges
            dv = sp.csr_array((w[out], (send[out] - lo, np.arange(out.size))),
                              shape=(n, out.size))  # at j: sum_i w_ji grad f_i(x_j)
            g_tilde += self.alpha * (dv @ received)
        # Mixing uses the neighbours' models received in step 1: no further traffic.
        self.params = self.comm.combine(self.params, t)
        self.apply(self.params, np.ascontiguousarray(g_tilde, dtype=np.float32))
        return losses

    def report(self) -> dict:
        return {"cross_gradient_bytes": int(self.cross_bytes)}
