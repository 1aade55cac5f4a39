"""Neighborhood Gradient Clustering (Aketi, Kodge and Roy, arXiv:2209.14390): local gradients
replaced by a weighted average of self-, model-variant and data-variant cross-gradients, computed by
default as the authors' code computes them (``aparna-aketi/neighborhood_gradient_clustering``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from decentlearn import compress, ops
from decentlearn.algorithms.base import (Algorithm, Sampler, check_fraction, option, register,
                                         require_one_step, require_uncompressed,
                                         require_unfrozen)
from decentlearn.state import replicated

__all__ = ["NGC"]

#: ``ngc_weights``: uniform weights 1/(deg_i + 1) (the authors' ``pi``) or W_t's w_ij.
WEIGHTS = ("uniform", "mixing")
#: ``ngc_self_gradient``: at the gossiped model x_i^{t+1/2} (the authors' code) or at x_i^t.
SELF_GRADIENT = ("mixed", "start")


def _check_choice(value, name: str, choices: tuple[str, ...]) -> str:
    """``value`` if it is one of ``choices``, else ValueError naming ``name``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(repr(c) for c in choices)}, "
                         f"got {value!r}")
    return value


def _rows_of(rows: np.ndarray, weights: np.ndarray, n: int) -> tuple:
    """CSR arrays of the (n, len(rows)) matrix with weights[k] at (rows[k], k): the sparse sum
    over the edges of each peer (ops.spmm), each row's edges in increasing order as scipy.sparse
    stores the same matrix built from coordinates."""
    order = np.argsort(rows, kind="stable")
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return (indptr, order.astype(np.int32), np.ascontiguousarray(weights[order], np.float32),
            len(rows))


@register("ngc")
class NGC(Algorithm):
    """Neighborhood Gradient Clustering (Aketi, Kodge and Roy).

    Round t, peer i with deg_i neighbours j, as the authors' code (``trainer.py``, the gossip
    wrapper ``gossip/distributed.py`` and ``optimizers/ngc.py``) computes it by default:

      1. peers exchange models: i receives every x_j^t (Algorithm 1, first communication round;
         4·dim bytes per neighbour);
      2. gossip with averaging rate gamma (the authors' ``--gamma``, applied in the wrapper's
         forward pre-hook): x_i^{t+1/2} = x_i^t + gamma (sum_j w_ij x_j^t - x_i^t), sum over
         j in N(i) and i itself, W_t the topology's mixing matrix (``ngc_gamma``, default 0.1);
      3. self-gradient g_ii = grad f_i(x_i^{t+1/2}) on the gossiped model (the pre-hook runs
         before the forward pass; ``ngc_self_gradient="start"`` takes it at x_i^t), and the
         model-variant cross-gradients g_ji = grad f_i(x_j^t) on the neighbours' models as
         received, before their gossip (the authors' ``NGC_sender``): 1 + deg_i gradients;
      4. second communication round: i sends g_ji back to j (deg_i messages, float32 for ngc,
         compressed with error feedback for compngc); i receives its data-variant
         cross-gradients g_ij = grad f_j(x_i^t) (its model on j's data);
      5. the NGC gradient (the authors' ``NGC_receiver``, the paper's mixing of the three kinds
         of gradients with weight alpha):
            g~_i = pi_ii g_ii + (1 - alpha) sum_j pi_ij g_ji + alpha sum_j pi_ij g_ij,
         pi_ij = 1 / (deg_i + 1) for all j in N(i) and i itself (``ngc_weights="uniform"``, the
         authors' ``pi``; ``"mixing"`` uses W_t's w_ij), alpha = ``ngc_alpha`` (default 1.0, the
         authors' ``--alpha``: self- and data-variant gradients only);
      6. x_i^{t+1} = x_i^{t+1/2} - lr · update(g~_i): the optimizer's update (weight decay,
         momentum, Nesterov exactly as the authors' ``project_gradients`` followed by plain SGD).

    ``ngc_gamma=1, ngc_weights="mixing", ngc_self_gradient="start", ngc_alpha=0.5`` is
    decentlearn's earlier form (combine-then-adapt with every gradient at round t's models):
    x_i^{t+1} = sum_j w_ij x_j^t - lr · update(w_ii grad f_i(x_i^t) + ...).

    All cross-gradients of all peers are one batched ``loss_and_grad`` call on the gathered
    (E, dim) neighbour models, the weighted sums sparse (n × E) products. Needs an undirected
    graph (time-varying ones included); local_steps must be 1.
    """

    #: Its server rounds / point-to-point replies are not timed by decentlearn.network yet.
    simulated_time = False
    state = replicated("cross_bytes")
    #: Work arrays kept from round to round: the gossip's output (the round's x^t becomes the
    #: next round's, as comm.mix does) and g~.
    scratch = ("_spare", "_g_tilde", "_neighbours", "_cross", "_received", "_sums")

    @dataclass(frozen=True)
    class Options:
        ngc_alpha: float = option(1.0, "weight in [0, 1] of the data-variant cross-gradients "
                                  "against the model-variant ones (the authors' --alpha)")
        ngc_gamma: float = option(0.1, "gossip rate in (0, 1]: x_i += gamma (sum_j w_ij x_j - "
                                  "x_i) before the step (the authors' --gamma)")
        ngc_weights: str = option("uniform", "weights of the self- and cross-gradients: uniform "
                                  "(1/(deg_i+1), the authors' code) or mixing (W's w_ij)",
                                  metavar="uniform|mixing")
        ngc_self_gradient: str = option("mixed", "model of the self-gradient: mixed (after the "
                                        "gossip, the authors' code) or start (x_i^t)",
                                        metavar="mixed|start")

        def __post_init__(self) -> None:
            check_fraction(self.ngc_alpha, "ngc_alpha", closed=True)
            check_fraction(self.ngc_gamma, "ngc_gamma")
            _check_choice(self.ngc_weights, "ngc_weights", WEIGHTS)
            _check_choice(self.ngc_self_gradient, "ngc_self_gradient", SELF_GRADIENT)

    def __init__(self, *, ngc_alpha: float = 1.0, ngc_gamma: float = 0.1,
                 ngc_weights: str = "uniform", ngc_self_gradient: str = "mixed",
                 variant: str = "cta", **kwargs) -> None:
        super().__init__(**kwargs)
        NGC.Options(ngc_alpha, ngc_gamma, ngc_weights, ngc_self_gradient)
        require_one_step(self)
        require_unfrozen(self)
        self.alpha = float(ngc_alpha)
        self.gamma = float(ngc_gamma)
        self.weights = ngc_weights
        self.self_gradient = ngc_self_gradient
        self._setup_compressor()
        #: Bytes of cross-gradient messages sent so far (all peers).
        self.cross_bytes = 0
        self._spare = self._g_tilde = self._neighbours = self._cross = self._received = None
        self._sums = None
        #: W_t was found symmetric (once is enough for a static graph).
        self._symmetric = False

    def _setup_compressor(self) -> None:
        require_uncompressed(self)
        self._identity = compress.make("none")

    def _exchange_cross(self, cross: np.ndarray, t: int,
                        first: int) -> list[tuple[slice, np.ndarray, np.ndarray]]:
        """Every peer sends each cross-gradient it computed back to the neighbour whose model it
        used. Returns blocks of columns ``(columns, received, local)``: what the neighbours
        receive of those columns (out-edge rows) and the model-variant cross-gradients the
        senders use themselves (in-edge rows), each (rows, width) C-contiguous; here one block,
        every column (CompNGC: one per tensor, each compressed apart). Counts ``cross_bytes``
        (all peers). ``first``: the edge index of row 0 of ``cross`` (the process's first
        in-edge)."""
        payload = self._identity.compress(cross)
        self.cross_bytes += self.comm.total(payload.nbytes)
        received = self._kept("_received", (self._n_out_edges(t), cross.shape[1]))
        received = self.comm.reply(self._identity, payload, t, out=received)
        return [(slice(0, cross.shape[1]), received, cross)]

    def _n_out_edges(self, t: int) -> int:
        """How many of round t's edges have their sender hosted here (rows ``reply`` returns)."""
        _, send, _ = self.comm.edges(t)
        lo = self.comm.peer0
        return int(np.count_nonzero((send >= lo) & (send < lo + self.comm.n_peers)))

    def _self_term(self, g_self: np.ndarray, t: int, n_edges: int) -> np.ndarray:
        """The self-gradient as it enters g~ (CompNGC may compress it); ``n_edges``: the
        round's number of directed edges (all processes)."""
        return g_self

    def _gossip(self, X: np.ndarray, t: int) -> np.ndarray:
        """Step 2: x + gamma (W_t x - x) from the replicas received in step 1 (no traffic); W_t x
        itself when gamma = 1."""
        mixed = self.comm.combine(X, t, out=self._spare_for(X))
        if self.gamma != 1.0:  # (W x - x) gamma + x in NumPy's roundings, on the run's threads
            nt = self.comm.n_threads
            ops.axpby(1, mixed, -1, X, out=mixed, n_threads=nt)
            ops.axpby(self.gamma, mixed, 1, X, out=mixed, n_threads=nt)
        return mixed

    def round(self, sample: Sampler, t: int) -> np.ndarray:
        # The process hosts peers [lo, lo + n) of N (all of them in one process); edges are
        # global in CSR order, so its peers' in-edges are the contiguous range [e0, e1).
        n, N, lo = self.comm.n_peers, self.comm.n_global, self.comm.peer0
        recv, send, w = self.comm.edges(t)
        e = recv.size
        # Undirected: every edge (i, j) has its reverse with the same weight (checked once for a
        # static graph, every round for a time-varying one).
        if e and not (self._symmetric and self.comm.static):
            pairs = sp.csr_array((w, (recv, send)), shape=(N, N))
            if not np.array_equal(pairs[send, recv], w):
                raise ValueError(f"{self.name} needs an undirected graph with a symmetric W_t")
            self._symmetric = True
        e0, e1 = (int(k) for k in np.searchsorted(recv, [lo, lo + n]))
        out = np.flatnonzero((send >= lo) & (send < lo + n))  # the peers' out-edges
        if self.weights == "uniform":  # pi = 1 / (deg + 1), the aggregating peer's degree
            pi = (1.0 / (np.bincount(recv, minlength=N) + 1.0)).astype(np.float32)
            w_self, w_in, w_out = pi[lo:lo + n], pi[recv[e0:e1]], pi[send[out]]
        else:
            w_self, w_in, w_out = self.comm.self_weights(t), w[e0:e1], w[out]
        # Step 1: x_j^t of every in-edge (i, j).
        neighbours = self.comm.neighbor_rows(
            self.params, t, out=self._kept("_neighbours", (e1 - e0, self.params.shape[1])))
        x, y = sample()
        start = self.params
        if self.self_gradient == "mixed":  # steps 2-3 in the authors' order: gossip first
            self.params = self._gossip(start, t)
            losses, g_self = self.gradient(self.params, x, y)
        else:
            losses, g_self = self.gradient(start, x, y)
        g_tilde = ops.scale_rows(self._self_term(g_self, t, e),  # step 5, pi_ii g_ii
                                 np.ascontiguousarray(w_self, dtype=np.float32),
                                 out=self._kept("_g_tilde", g_self.shape),
                                 n_threads=self.comm.n_threads)
        if e:
            r_in = recv[e0:e1] - lo
            if e1 > e0:
                # int8 rounding noise keyed by the global edge index (e0 + row), whichever
                # process computes the cross-gradient.
                peer0, self.model.peer0 = self.model.peer0, e0
                try:  # step 3: g_ji = grad f_i(x_j^t)
                    _, cross = self.model.loss_and_grad(
                        neighbours, x[r_in], y[r_in],
                        grad=self._kept("_cross", (e1 - e0, self.params.shape[1])))
                finally:
                    self.model.peer0 = peer0
            else:
                cross = np.zeros((0, self.model.dim), dtype=np.float32)
                self.model.steps += 1  # as a process whose peers have edges
            blocks = self._exchange_cross(cross, t, e0)  # step 4
            nt, sums = self.comm.n_threads, self._kept("_sums", g_tilde.shape)
            # the sums over each peer's edges, block by block into sums' columns (each column
            # summed alone: the same bits as over whole rows)
            if self.alpha != 1.0:  # at i: (1 - alpha) sum_j pi_ij g_ji
                rows = _rows_of(r_in, w_in, n)
                for cols, _, local in blocks:
                    ops.spmm(rows, local, out=sums[:, cols], n_threads=nt)
                ops.axpby(1, g_tilde, 1.0 - self.alpha, sums, out=g_tilde, n_threads=nt)
            # at j: alpha sum_i pi_ji g_ji (= grad f_i(x_j))
            rows = _rows_of(send[out] - lo, w_out, n)
            for cols, received, _ in blocks:
                ops.spmm(rows, received, out=sums[:, cols], n_threads=nt)
            ops.axpby(1, g_tilde, self.alpha, sums, out=g_tilde, n_threads=nt)
        if self.self_gradient != "mixed":  # step 2 after the gradients (no further traffic)
            self.params = self._gossip(start, t)
        self.apply(self.params, np.ascontiguousarray(g_tilde, dtype=np.float32))  # step 6
        if self.params is not start:  # x^t is not needed any more: the next gossip's output
            self._spare = start
        return losses

    def report(self) -> dict:
        return {"cross_gradient_bytes": int(self.cross_bytes)}
