"""Decentralized algorithms for heterogeneous (non-IID) data.

* ``dsgt``: gradient tracking (GT-DSGD; Pu and Nedić 2021, Xin et al. 2020), adapt-then-combine.
* ``d2``: D² (Tang et al. 2018) on W̄ = (I + W)/2, i.e. Exact Diffusion (Yuan et al. 2019).
* ``dacfl``: DACFL (Chen et al. 2022): local training plus first-order dynamic average consensus
  that tracks the average of the peers' models.
* ``ngc`` / ``compngc``: Neighborhood Gradient Clustering (Aketi, Kodge and Roy): local gradients
  replaced by a weighted average of self-, model-variant and data-variant cross-gradients; CompNGC
  sends the cross-gradients compressed, with error feedback.
* ``skewscout``: D-PSGD whose communication period is adapted by SkewScout's control loop (Hsieh et
  al., "The Non-IID Data Quagmire of Decentralized Machine Learning", ICML 2020).

Every exchange goes through the communicator (``decentlearn.comm``), which counts the bytes.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from decentlearn import compress
from decentlearn.algorithms import Algorithm, Sampler, register
from decentlearn.baselines import options
from decentlearn.optim import SGD


def _check_atc(name: str, variant: str) -> None:
    if variant != "atc":
        raise ValueError(f"{name} has one fixed order of steps and exchanges: variant must be "
                         f"'atc', got {variant!r}")


def _no_compressor(alg: Algorithm) -> None:
    if alg.compressor is not None and alg.compressor.spec != "none":
        raise ValueError(f"{alg.name} exchanges float32 vectors: compress must be 'none', got "
                         f"{alg.compressor.spec!r}")


def _one_step(alg: Algorithm) -> None:
    if alg.local_steps != 1:
        raise ValueError(f"{alg.name} takes one gradient step per exchange: local_steps must be "
                         f"1, got {alg.local_steps}")


def _no_frozen(alg: Algorithm) -> None:
    if alg.frozen is not None:
        raise ValueError(f"{alg.name} does not support frozen layers (cocofl)")


def _lr(alg: Algorithm) -> float:
    return float(alg.optimizer.lr)  # this round's (schedules set it)


@register("dsgt")
class DSGT(Algorithm):
    """Gradient tracking, adapt-then-combine (GT-DSGD):

        x_{t+1} = W_t (x_t - lr · y_t)
        y_{t+1} = W_t y_t + g(x_{t+1}) - g(x_t),    y_0 = g(x_0)

    y tracks the average gradient, so with exact gradients and a constant step every peer
    converges to the exact minimizer of the average objective (D-PSGD keeps an O(lr·heterogeneity)
    bias). The step on x is the optimizer's (momentum applies to y). Bytes per round: two float32
    vectors (x and y) per out-neighbour. One gradient per peer and round. Time-varying graphs: yes
    (mean of y stays the mean gradient for any doubly stochastic W_t).
    """

    state_attrs = ("tracker", "_g_prev")

    def __init__(self, *, variant: str = "atc", **kwargs) -> None:
        super().__init__(**kwargs)
        _check_atc("dsgt", variant)
        _no_compressor(self)
        _one_step(self)
        _no_frozen(self)
        self.tracker: np.ndarray | None = None
        self._g_prev = np.empty_like(self.params)

    def round(self, sample: Sampler, t: int) -> np.ndarray:
        if self.tracker is None:
            x, y = sample()
            _, g = self.gradient(self.params, x, y)
            self.tracker = g.copy()
            self._g_prev[...] = g
        self.apply(self.params, self.tracker)
        self.params = self.comm.mix(self.params, t)
        x, y = sample()
        losses, g = self.gradient(self.params, x, y)
        mixed = self.comm.mix(self.tracker, t)
        mixed += g
        mixed -= self._g_prev
        self.tracker = mixed
        self._g_prev[...] = g
        return losses


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

    state_attrs = ("_x_prev", "_step_prev")

    def __init__(self, *, variant: str = "atc", **kwargs) -> None:
        super().__init__(**kwargs)
        _check_atc("d2", variant)
        _no_compressor(self)
        _one_step(self)
        _no_frozen(self)
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
        step = g * np.float32(_lr(self))
        if self._x_prev is None:
            z = self.params - step
        else:
            z = 2 * self.params - self._x_prev - step + self._step_prev
        self._x_prev = self.params
        self._step_prev = step
        mixed = self.comm.mix(z, t)  # W z; then x_{t+1} = (z + W z) / 2 = W̄ z
        x_next = z + mixed
        x_next *= np.float32(0.5)
        self.params = x_next
        return losses


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

    state_attrs = ("omega",)

    def __init__(self, *, variant: str = "atc", **kwargs) -> None:
        super().__init__(**kwargs)
        _check_atc("dacfl", variant)
        _no_compressor(self)
        #: The trained models omega(t) (the reference signals that x tracks).
        self.omega = self.params.copy()
        self._work = np.empty_like(self.params)

    def round(self, sample: Sampler, t: int) -> np.ndarray:
        work = self._work
        work[...] = self.params
        losses = np.zeros(self.comm.n_peers)
        for _ in range(self.local_steps):
            x, y = sample()
            step_losses, grad = self.gradient(work, x, y)
            self.apply(work, grad)
            losses += step_losses
        mixed = self.comm.mix(self.params, t)
        mixed += work
        mixed -= self.omega
        self.params = mixed
        self.omega, self._work = work, self.omega
        return losses / self.local_steps


@options("ngc_alpha")
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
    state_attrs = ("cross_bytes",)

    def __init__(self, *, ngc_alpha: float = 0.5, variant: str = "cta", **kwargs) -> None:
        super().__init__(**kwargs)
        if isinstance(ngc_alpha, bool) or not isinstance(ngc_alpha, (int, float)) \
                or not 0 <= ngc_alpha <= 1:
            raise ValueError(f"ngc_alpha must be a number in [0, 1], got {ngc_alpha!r}")
        _one_step(self)
        _no_frozen(self)
        self.alpha = float(ngc_alpha)
        self._setup_compressor()
        #: Bytes of cross-gradient messages sent so far (all peers).
        self.cross_bytes = 0
        self._ones = None

    def _setup_compressor(self) -> None:
        _no_compressor(self)
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

    def stats(self) -> dict:
        return {"cross_gradient_bytes": int(self.cross_bytes)}


@options("ngc_alpha")
@register("compngc")
class CompNGC(NGC):
    """NGC with compressed cross-gradients and error feedback per directed edge, so what a biased
    compressor drops is sent in later rounds. The compressor (default ``sign``: 1 bit per value
    and a float32 scale) is applied to each parameter tensor of the model separately (one scale
    per tensor, as the paper's scaled sign; ``model.layout()``), ~32x fewer bytes than float32.
    The model exchange stays float32. Needs a static undirected graph (the error memory is kept
    per edge)."""

    #: Its server rounds / point-to-point replies are not timed by decentlearn.network yet.
    simulated_time = False

    def _setup_compressor(self) -> None:
        if self.compressor is None or self.compressor.spec == "none":
            self.compressor = compress.make("sign")
        if not self.comm.static:
            raise ValueError("compngc keeps an error-feedback memory per edge and needs a static "
                             "graph (a topology with period 1)")
        layout = getattr(self.model, "layout", None)
        dim = self.model.dim
        #: Column slices compressed separately (the model's tensors; the whole row otherwise).
        self.tensor_slices = [sl for _, sl, _ in layout()] if layout else [slice(0, dim)]
        codec = self.compressor
        if not isinstance(codec, compress.Compressor):  # a backend's wrapper (the MPI timer)
            codec = compress.make(codec.spec)
        self._memories = [compress.ErrorFeedback(codec) for _ in self.tensor_slices]
        self._decoder = self.compressor

    #: State entries with one row per edge of the static graph (CSR order), not per peer: a
    #: process hosting a block of peers holds the rows of its peers' in-edges, ``edge_range()``
    #: (the MPI backend gathers them in edge order into a checkpoint and cuts them on resume).
    edge_state = ("memories.",)

    def edge_range(self) -> tuple[int, int]:
        """[e0, e1): the global indices of the edges whose rows this process holds."""
        recv, _, _ = self.comm.edges(0)
        lo, n = getattr(self.comm, "peer0", 0), self.comm.n_peers
        e0, e1 = np.searchsorted(recv, [lo, lo + n])
        return int(e0), int(e1)

    def state_dict(self) -> dict:
        from decentlearn.checkpoint import nest
        out = super().state_dict()
        for k, ef in enumerate(self._memories):  # the per-edge residuals of every tensor
            out.update(nest(f"memories.{k}", ef.state_dict()))
        return out

    def load_state_dict(self, state: dict) -> None:
        from decentlearn.checkpoint import subtree
        super().load_state_dict(state)
        for k, ef in enumerate(self._memories):
            ef.load_state_dict(subtree(f"memories.{k}", state))

    def _exchange_cross(self, cross: np.ndarray, t: int, first: int) -> np.ndarray:
        received = None
        for sl, ef in zip(self.tensor_slices, self._memories):  # a few tensors, not peers
            part = np.ascontiguousarray(cross[:, sl])
            payload = ef.compress(part, seed=self.seed, step=t, peer0=first,
                                  n_threads=self.comm.n_threads)
            self.cross_bytes += self.comm.total(payload.nbytes)
            got = self.comm.reply(self._decoder, payload, t)
            if received is None:  # the out-edges' rows (all edges in one process)
                received = np.empty((got.shape[0], cross.shape[1]), dtype=np.float32)
            received[:, sl] = got
        return received


#: SkewScout doubles the period when the estimated loss is below this fraction of the target.
_GROW_BELOW = 0.8


@options("skew_target", "skew_probe_every", "skew_period_max")
@register("skewscout")
class SkewScout(Algorithm):
    """D-PSGD whose communication period is set by SkewScout's control loop (Hsieh et al. 2020).

    A round is one local SGD step on every peer; the peers gossip (x <- W_t x) once every
    ``period`` rounds. Every ``skew_probe_every`` rounds the control loop estimates the accuracy
    loss between partitions by model traveling: each peer sends its model to the next peer
    (p -> p + 1 mod n, 4·dim bytes, ``comm.shift``), which measures on a minibatch of its own
    training data the accuracy of its own model, a_own, and of the traveled one, a_remote. With
    the estimated loss L = mean(a_own - a_remote):
      L > skew_target         -> period = max(1, period // 2)   (communicate more)
      L < 0.8 · skew_target   -> period = min(skew_period_max, 2 · period)
    (the band between them damps oscillation). The period starts at 1. ``stats()`` reports the
    communications made, the period history and the bytes saved against gossiping every round
    (gossip bytes avoided minus the probes' bytes). Time-varying graphs: yes (W_t of the round
    in which the peers communicate).
    """

    #: Its server rounds / point-to-point replies are not timed by decentlearn.network yet.
    simulated_time = False

    def __init__(self, *, skew_target: float = 0.05, skew_probe_every: int = 20,
                 skew_period_max: int = 16, variant: str = "atc", **kwargs) -> None:
        super().__init__(**kwargs)
        _check_atc("skewscout", variant)
        _no_compressor(self)
        _one_step(self)
        if isinstance(skew_target, bool) or not isinstance(skew_target, (int, float)) \
                or not 0 < skew_target <= 1:
            raise ValueError(f"skew_target must be a number in (0, 1], got {skew_target!r}")
        for name, v in (("skew_probe_every", skew_probe_every),
                        ("skew_period_max", skew_period_max)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        self.target = float(skew_target)
        self.probe_every = skew_probe_every
        self.period_max = skew_period_max
        self.period = 1
        self._since = 0
        self.communications = 0
        self.skipped_bytes = 0
        self.probe_bytes = 0
        #: (round, estimated accuracy loss, period after the decision) of every probe.
        self.history: list[tuple[int, float, int]] = []
        self._travel = np.roll(np.arange(self.comm.n_global), 1)  # p receives from p - 1
        self._mix_bytes = 0  # bytes of the last gossip

    state_attrs = ("period", "_since", "communications", "skipped_bytes", "probe_bytes",
                   "history", "_mix_bytes")

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.history = [tuple(h) for h in self.history]  # JSON keeps them as lists

    def _bytes_now(self) -> int:
        """Bytes sent so far by all peers (summed over processes)."""
        return self.comm.total(int(self.comm.bytes_sent.sum()))

    def _probe(self, sample: Sampler, t: int) -> None:
        before = self._bytes_now()
        remote = self.comm.shift(self.params, t, self._travel)
        self.probe_bytes += self._bytes_now() - before
        x, y = sample()
        own = np.argmax(self.model.forward(self.params, x), axis=-1) == y
        other = np.argmax(self.model.forward(remote, x), axis=-1) == y
        # Accuracies over all peers' samples: exact counts summed over processes.
        size = self.comm.n_global * own[0].size  # every process hosts >= 1 peer
        a_own = np.float64(self.comm.total(int(own.sum()))) / size
        a_other = np.float64(self.comm.total(int(other.sum()))) / size
        loss = float(a_own - a_other)
        if loss > self.target:
            self.period = max(1, self.period // 2)
        elif loss < _GROW_BELOW * self.target:
            self.period = min(self.period_max, 2 * self.period)
        self.history.append((t, loss, self.period))

    def round(self, sample: Sampler, t: int) -> np.ndarray:
        losses = self.local_step(sample)
        self._since += 1
        before = self._bytes_now()
        if self._since >= self.period:
            self.params = self.comm.mix(self.params, t)
            self._since = 0
            self.communications += 1
            self._mix_bytes = self._bytes_now() - before
        else:
            self.skipped_bytes += self._mix_bytes or self._gossip_bytes(t)
        if (t + 1) % self.probe_every == 0:
            self._probe(sample, t)
        return losses

    def _gossip_bytes(self, t: int) -> int:
        """Bytes one gossip of float32 rows would cost in round t (for the bytes-saved count)."""
        _, senders, _ = self.comm.edges(t)
        return int(senders.size) * 4 * self.model.dim

    def stats(self) -> dict:
        return {"communications": self.communications, "period": self.period,
                "probe_bytes": self.probe_bytes,
                "bytes_saved_vs_every_round": self.skipped_bytes - self.probe_bytes,
                "probes": self.history}
