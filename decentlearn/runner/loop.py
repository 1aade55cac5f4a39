"""``Runner``: builds one run from its ``RunConfig`` and runs it, on whatever backend it is given.

A backend (``decentlearn.runner.backend.LocalBackend`` in one process, ``decentlearn.mpi``'s
``MPIBackend`` over MPI ranks) is composed, not subclassed: it builds the communicator of the peers
this process hosts and says how the run splits its cores; the rest — data, partition, topology,
model, optimizer, algorithm, the round loop, evaluation, divergence checks, the summary and
checkpoints — is written once here. Everything that crosses processes goes through the
communicator's collectives (``allgather_peers``, ``gather_rows``, ``bcast_json``), which are the
identity in one process.
"""

from __future__ import annotations

import logging
import time

import numpy as np
from threadpoolctl import threadpool_limits

from decentlearn import algorithms, compress, metrics
from decentlearn._core import NonFiniteError
from decentlearn.comm import EventComm, FiniteTimeComm, NonlinearGossipComm
from decentlearn.data import Dataset, load_dataset, make_partition
from decentlearn.errors import CheckpointError
from decentlearn.network import NetworkModel, OfflineHook
from decentlearn.nn import cocofl, make_model
from decentlearn.ops import copy as ops_copy
from decentlearn.ops.threads import resolve_threads
from decentlearn.optim import OptimizerConfig, SGDConfig, make as make_optimizer
from decentlearn.runner import checkpoint as ck
from decentlearn.runner.backend import LocalBackend
from decentlearn.runner.config import (DIVERGENCE_CONSENSUS_FACTOR, DIVERGENCE_LOSS_FACTOR,
                                       STREAM_COCOFL, STREAM_COMPRESS, STREAM_DATA, STREAM_INIT,
                                       STREAM_LOWP, STREAM_NETWORK, STREAM_PARTITION,
                                       STREAM_SAMPLER, STREAM_TOPOLOGY, SUMMARY_GAP_MAX_N,
                                       DivergenceError, Result, RunConfig, mixing_rule,
                                       setup_problems, stream_seed)
from decentlearn.runner.sampler import PeerSampler, eval_sizes, stratified_order
from decentlearn.state import nest, subtree, take_rows
from decentlearn.topology import Topology, check_mixing, make as make_topology

__all__ = ["Callback", "Runner"]

#: The runner's log (decentlearn.outputs.runlog writes it to a run directory's run.log): the
#: setup and the end of a run, and every evaluation, at INFO.
_log = logging.getLogger("decentlearn.runner")


class Callback:
    """Hooks called by the runner. Subclass and override what you need."""

    def on_round_end(self, sim: Runner, t: int) -> None:  # noqa: D401 - a hook
        """After round t (0-based)."""

    def on_eval(self, sim: Runner, row: dict) -> None:
        """After each evaluation, with the row that goes into metrics.csv."""

    def on_round_complete(self, sim: Runner, t: int) -> None:
        """After round t and its evaluation: the runner is at a round boundary, where
        ``sim.save_checkpoint`` may be called (decentlearn.runner.checkpoint)."""


class Runner:
    """Builds and runs one decentralized training run on ``backend`` (default: in process)."""

    def __init__(self, config: RunConfig, *, dataset: Dataset | None = None,
                 backend=None) -> None:
        self.config = c = config
        self.backend = backend = backend if backend is not None else LocalBackend()
        backend.check(c)
        if dataset is None and isinstance(c.dataset, Dataset):  # an ArrayDataset
            dataset = c.dataset
        self.dataset = dataset if dataset is not None else load_dataset(
            c.dataset, c.data_dir, seed=stream_seed(c.seed, STREAM_DATA), n_peers=c.peers)
        d = self.dataset
        self.partition = make_partition(c.partition, d.y_train, c.peers,
                                        seed=stream_seed(c.seed, STREAM_PARTITION),
                                        groups=d.groups)
        cls = algorithms.get(c.algorithm)
        # Data-aware builders (d-cliques) get the per-peer label histograms, and only those.
        accepted = cls.mixing
        self.topology = make_topology(c.topology, c.peers,
                                      seed=stream_seed(c.seed, STREAM_TOPOLOGY),
                                      weights=c.weights, mixing=accepted,
                                      labels=self.partition.histogram(d.y_train, d.n_classes))
        check_mixing(self.topology, accepted, f"algorithm {c.algorithm!r}",
                     hints=algorithms.mixing_hints())
        if c.clique_averaging and self.topology.groups is None:
            raise ValueError(f"clique_averaging needs a topology made of cliques "
                             f"(d-cliques[:SIZE[:INTER]]), got topology={c.topology!r}")
        # Deterministic from the seed: an MPI rank builds it whole too and keeps the whole clock.
        self.network = (NetworkModel(c.network, c.peers,
                                     seed=stream_seed(c.seed, STREAM_NETWORK))
                        if c.network is not None else None)
        threads = backend.threads(c)
        #: The kernels' thread count; numpy's BLAS gets the same during run() (never more).
        self.threads = resolve_threads(threads)
        #: The communicator: the only seam between the algorithms and where the peers run. It
        #: hosts peers [comm.peer0, comm.peer0 + comm.n_peers) (all of them in process).
        self.comm = backend.make_comm(
            self.topology, n_threads=threads, network=self.network,
            samples_per_round=c.local_steps * c.batch_size,
            mixing_kind="column" if "column" in accepted else None)
        kind, alpha, eta = mixing_rule(c)
        if kind == "finite-time":  # the mixing rule, written once over any communicator
            self.comm = FiniteTimeComm(self.comm)
        elif kind == "nonlinear":
            self.comm = NonlinearGossipComm(self.comm, alpha=alpha, eta=eta)
        lo, n = self.comm.peer0, self.comm.n_peers
        self.model = make_model(c.model, d.input_shape, d.n_classes, precision=c.precision,
                                seed=stream_seed(c.seed, STREAM_LOWP))
        self.model.n_threads = threads
        if c.model.startswith("torch:"):
            self.model.mode = c.torch_mode
            self.model.device = backend.device(c)  # this process's: one GPU per MPI rank
        self.model.peer0 = lo  # int8 layers key their rounding noise by peer
        init = self.model.init(stream_seed(c.seed, STREAM_INIT)).astype(np.float32)
        self._init_row = init
        # every row a copy of init (writable, one row too), written by the run's threads in the
        # row blocks the kernels use: on a NUMA machine each block's pages land on its node
        params = ops_copy.take_rows(init[None, :], np.zeros(n, np.int64), n_threads=self.threads)
        layout = getattr(self.model, "layout", None)
        segments = ([(sl.start, sl.stop) for _, sl, _ in layout()] if callable(layout) else None)
        # Every optimizer's update of a row depends on that row only (tests/test_optimizers.py),
        # so a block of rows steps exactly as in the whole matrix.
        optimizer = make_optimizer(c.optimizer_config(), params.shape, n_threads=threads,
                                   segments=segments)
        #: The learning rate of each round (None: constant ``lr``).
        self.lr_schedule = None if c.lr_schedule_of().constant else c.lr_schedule_of()
        #: Layers with parameters frozen by each peer (CoCoFL); None without --cocofl.
        self.frozen: np.ndarray | None = None
        #: Test accuracy and mean test loss of every peer at the last evaluation (peers.csv).
        self.last_accuracy: np.ndarray | None = None
        self.last_loss: np.ndarray | None = None
        if c.cocofl is not None:
            self.frozen = cocofl.assign(cocofl.parse(c.cocofl), c.peers,
                                        len(self.model.param_layers),
                                        stream_seed(c.seed, STREAM_COCOFL))
        frozen = None if self.frozen is None else self.frozen[lo:lo + n]
        compressor = compress.make(c.compress)
        #: Setup problems known before the run (also emitted as SetupWarning in process).
        self.problems = setup_problems(c, compressor, self.model.dim)
        backend.report_problems(self.problems)
        seed = stream_seed(c.seed, STREAM_COMPRESS)
        if c.asynchronous:  # event-driven asynchronous gossip replaces both
            self.comm.close()  # the event clock times it, not a synchronous clock
            self.comm = EventComm(backend.make_comm(self.topology, n_threads=threads,
                                                    network=None, samples_per_round=0.0,
                                                    mixing_kind=None), self.network)
            self.algorithm = cls.async_form(**self._async_args(params, c.optimizer_config(), seed,
                                                          segments, frozen))
        else:
            self.algorithm = cls(model=self.model, comm=self.comm, optimizer=optimizer,
                                 params=params, local_steps=c.local_steps,
                                 compressor=backend.wrap_compressor(compressor, self.comm),
                                 seed=seed, frozen=frozen, variant=c.variant,
                                 sample_counts=self.partition.sizes, **c.options)
        if c.clique_averaging:
            self.algorithm.gradient_transform = backend.clique_averaging(self.topology.groups,
                                                                         self.comm)
        self.sampler = PeerSampler(self.partition, c.batch_size,
                                   stream_seed(c.seed, STREAM_SAMPLER), n_threads=self.threads)
        #: Freezes offline peers' state under churn (None without churn).
        self.offline_hook = (OfflineHook(self.network, self.algorithm, init,
                                         peers=slice(lo, lo + n))
                             if self.network is not None and self.network.config.churn_leave > 0
                             else None)
        if c.eval_samples is not None and c.eval_samples < len(d.y_test):
            pick = np.random.default_rng(0).choice(len(d.y_test), c.eval_samples, replace=False)
            pick.sort()
            self.x_eval, self.y_eval = d.x_test[pick], d.y_test[pick]
        else:
            self.x_eval, self.y_eval = d.x_test, d.y_test
        #: Test samples each peer's model / the average model is evaluated on (eval_sizes()).
        self.eval_peer_samples, self.eval_avg_samples = eval_sizes(c, len(self.y_eval),
                                                                   d.n_classes)
        order = stratified_order(self.y_eval, d.n_classes)
        self._eval_peer_idx = np.sort(order[:self.eval_peer_samples])
        self._eval_avg_idx = np.sort(order[:self.eval_avg_samples])
        #: Seconds spent in evaluate() so far.
        self.eval_seconds = 0.0
        #: Progress of ``run`` (restored by ``load_checkpoint``): the next round, the evaluation
        #: rows so far, and True only between two rounds (where a checkpoint is consistent).
        self.next_round = 0
        self.history: list[dict] = []
        self.at_boundary = False
        self._loss_sum, self._loss_rounds = 0.0, 0
        self._round_losses: np.ndarray | None = None  # the last round's, for _divergence_row
        self._loss0: float | None = None
        self._scale0: float | None = None
        self._elapsed = 0.0
        #: Seconds of this process's rounds, and of the communicator's phases in them when it
        #: measures them (``comm.seconds``: compress, communicate, wait on MPI).
        self.spent: dict[str, float] = {"rounds_total": 0.0}

    def _log_start(self) -> None:
        """The run's setup (and its known problems) in the log, as ``run`` starts."""
        c, d = self.config, self.dataset
        _log.info("set up: %s (%d train, %d test samples, %d classes), %d peers, partition %s, "
                  "topology %s, model %s (%d parameters), algorithm %s, compress %s, seed %d, "
                  "backend %s", d.name, d.n_train, d.n_test, d.n_classes, c.peers, c.partition,
                  c.topology, c.model, self.model.dim, c.algorithm, c.compress, c.seed,
                  self.backend.name)
        for problem in self.problems:
            _log.warning("setup problem: %s", problem)
        _log.info("running rounds %d to %d", self.next_round + 1, c.rounds)

    def _async_args(self, params, config: OptimizerConfig | SGDConfig, seed: int, segments,
                    frozen) -> dict:
        """The keyword arguments of the asynchronous form (AD-PSGD) of the algorithm;
        ``config`` is the peers' optimizer (its state kept per peer between updates)."""
        c = self.config
        if isinstance(config, SGDConfig):
            config = OptimizerConfig(name="sgd", lr=config.lr, momentum=config.momentum,
                                     nesterov=config.nesterov, weight_decay=config.weight_decay)
        return dict(network=self.network, partition=self.partition,
                    x_train=self.dataset.x_train, y_train=self.dataset.y_train,
                    batch_size=c.batch_size, sgd=config, segments=segments, model=self.model,
                    comm=self.comm, optimizer=make_optimizer(config, (1, 1)),  # the round's lr
                    params=params, local_steps=c.local_steps, seed=seed, frozen=frozen)

    @property
    def is_root(self) -> bool:
        """True in the process that writes the results (always in process; rank 0 on MPI)."""
        return self.comm.rank == 0

    @property
    def params(self) -> np.ndarray:
        """This process's peers' parameters (every peer's in one process)."""
        return self.algorithm.params

    def gather_params(self, root: int = 0) -> np.ndarray | None:
        """The full (peers, dim) parameter matrix on ``root`` (None elsewhere)."""
        return self.comm.gather_rows(self.params, root)

    def sample(self) -> tuple[np.ndarray, np.ndarray]:
        """One minibatch per hosted peer: x (P, B, *input_shape), y (P, B). Every process draws
        every peer's indices (one generator) and loads its own peers' samples only."""
        idx = self.sampler.next()
        if self.comm.n_peers != self.comm.n_global:
            idx = idx[self.comm.peers]
        # whole samples copied on the run's threads (ops.take_rows is np.take(..., axis=0))
        x = self.dataset.x_train
        if x.flags.c_contiguous and x.dtype != object:
            x = ops_copy.take_rows(x, idx, n_threads=self.threads)
        else:  # a user's array dataset may be a strided view
            x = np.take(x, idx, axis=0)
        return x, np.take(self.dataset.y_train, idx)

    # ---- evaluation ------------------------------------------------------------------------------

    def evaluate(self, final: bool = False) -> dict:
        """Accuracy of every peer's model and of the average model, consensus, bytes.

        Peers are evaluated together (one batched pass per process) on a fixed stratified
        subsample of ``eval_peer_samples`` test samples, the average model on
        ``eval_avg_samples`` (the whole evaluation set when ``final``); see eval_sizes(). The
        root computes the row from every peer's parameters and sends it to every process."""
        t0 = time.perf_counter()
        comm = self.comm
        pi = self._eval_peer_idx
        acc, loss = self.model.evaluate(self.params, self.x_eval[pi], self.y_eval[pi])
        if comm.n_peers == comm.n_global:
            self.last_accuracy, self.last_loss = acc, loss
            row = self._eval_row(self.params, acc, comm.bytes_sent, comm.upload_bytes, final)
        else:
            self.last_accuracy = comm.allgather_peers(np.asarray(acc, dtype=np.float64))
            self.last_loss = comm.allgather_peers(np.asarray(loss, dtype=np.float64))
            X = comm.gather_rows(self.params)
            sent = comm.gather_rows(comm.bytes_sent)
            up = comm.gather_rows(comm.upload_bytes)
            row = (self._eval_row(X, self.last_accuracy, sent, up, final) if comm.rank == 0
                   else None)
            row = comm.bcast_json(row)
        self.eval_seconds += time.perf_counter() - t0
        return row

    def _eval_row(self, X: np.ndarray, acc: np.ndarray, sent: np.ndarray, up: np.ndarray,
                  final: bool) -> dict:
        """The evaluation row from all peers' parameters ``X``, accuracies and bytes sent (to
        peers ``sent``, to the server ``up``, per peer): the average model is evaluated here.

        Bytes, cumulative since round 0: ``bytes_peer`` (peer to peer), ``bytes_client_to_server``
        and ``bytes_server_to_client``; ``bytes_sent_total`` is their sum and
        ``bytes_sent_max_peer`` the most one peer sent (to peers and to the server)."""
        # the peers' mean and their consensus distance in one parallel pass over X
        mean = np.empty(X.shape[1], dtype=np.float64)
        consensus = metrics.consensus_distance(X, mean=mean)
        avg = mean[None, :].astype(np.float32)
        if final or self.eval_avg_samples >= len(self.y_eval):
            x_avg, y_avg = self.x_eval, self.y_eval
        else:
            x_avg, y_avg = self.x_eval[self._eval_avg_idx], self.y_eval[self._eval_avg_idx]
        acc_avg, loss_avg = self.model.evaluate(avg, x_avg, y_avg)
        row = {
            "test_accuracy_mean": float(acc.mean()),
            "test_accuracy_min": float(acc.min()),
            "test_accuracy_max": float(acc.max()),
            "test_accuracy_avg_model": float(acc_avg[0]),
            "test_loss_avg_model": float(loss_avg[0]),
            "consensus_distance": consensus,
            "bytes_sent_total": 0,
            "bytes_sent_max_peer": int((sent + up).max()),
            "bytes_peer": int(sent.sum()),
            "bytes_client_to_server": int(up.sum()),
            "bytes_server_to_client": int(self.comm.server_bytes_sent),
        }
        row["bytes_sent_total"] = sum(row[k] for k in metrics.BYTE_COLUMNS)
        row.update(self.algorithm.columns())  # its own figures (SkewScout's bytes saved)
        # Network hook: sim_seconds and fault rates with --network (nothing otherwise).
        row.update(self.comm.network_metrics())
        return row

    def eval_summary(self, run_seconds: float) -> dict:
        """What the evaluation cost and covered, for summary.json."""
        return {
            "peer_samples": self.eval_peer_samples,
            "avg_model_samples": self.eval_avg_samples,
            "avg_model_samples_final": len(self.y_eval),
            "test_samples": len(self.dataset.y_test),
            "seconds": self.eval_seconds,
            "fraction_of_run": self.eval_seconds / run_seconds if run_seconds > 0 else None,
        }

    # ---- divergence ------------------------------------------------------------------------------

    def _check_losses(self, t: int, losses: np.ndarray) -> None:
        """DivergenceError after round t if a loss is not finite or the mean loss grew past
        DIVERGENCE_LOSS_FACTOR x its first value."""
        c = self.config
        if not np.isfinite(losses).all():
            raise DivergenceError(t, c)
        loss = float(losses.mean())
        if self._loss0 is None:
            self._loss0 = loss
        elif loss > DIVERGENCE_LOSS_FACTOR * max(self._loss0, 1e-3):
            raise DivergenceError(t, c, f"the mean training loss {loss:.4g} exceeds "
                                  f"{DIVERGENCE_LOSS_FACTOR:g} x its first-round value "
                                  f"{self._loss0:.4g}")

    def _check_consensus(self, t: int, cd: float) -> None:
        """DivergenceError after round t if the consensus distance ``cd`` is not finite or past
        DIVERGENCE_CONSENSUS_FACTOR x max(1, ||x_0||^2)."""
        bound = DIVERGENCE_CONSENSUS_FACTOR * self._scale0
        if not np.isfinite(cd) or cd > bound:
            raise DivergenceError(t, self.config, f"the consensus distance {cd:.3g} exceeds "
                                  f"{DIVERGENCE_CONSENSUS_FACTOR:g} x max(1, ||x_0||^2) = "
                                  f"{bound:.3g}, peers are drifting apart")

    def check_divergence(self, t: int, losses: np.ndarray) -> None:
        """Raises DivergenceError after round t if the loss or the parameters are not finite, or
        the consensus distance or the loss grew past their bounds (see DIVERGENCE_*_FACTOR).
        With the peers split over processes, the consensus bound is checked at evaluations
        (``evaluate`` gathers the rows there), not every round."""
        self._check_losses(t, losses)
        if self.comm.n_peers != self.comm.n_global:
            return
        with np.errstate(over="ignore", invalid="ignore"):
            cd = metrics.consensus_distance_approx(self.params)
            if not np.isfinite(cd):
                raise DivergenceError(t, self.config)
            if cd > DIVERGENCE_CONSENSUS_FACTOR * self._scale0:
                cd = metrics.consensus_distance(self.params)  # confirm: exact, float64, centred
        self._check_consensus(t, cd)

    # ---- the round loop --------------------------------------------------------------------------

    def _train_round(self, t: int) -> np.ndarray:
        """Round t of the algorithm (learning rate, churn, the simulated clock): this process's
        peers' losses. A kernel refusing NaN/inf raises NonFiniteError."""
        # Overflow shows up as a non-finite loss or parameter, reported in one line.
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            if self.lr_schedule is not None:
                self.algorithm.optimizer.lr = self.lr_schedule(t)
            if self.offline_hook is not None:  # network hook: churn
                self.offline_hook.before_round(t)
            losses = self.algorithm.round(self.sample, t)
            if self.offline_hook is not None:
                self.offline_hook.after_round(t)
        self.comm.round_done(t)  # network hook: closes round t on the simulated clock
        return losses

    def _step(self, t: int) -> np.ndarray:
        """Round t, its seconds, and the divergence checks: every peer's loss."""
        comm = self.comm
        phases = getattr(comm, "seconds", None)
        before = dict(phases) if phases is not None else None
        r0 = time.perf_counter()
        self._round_losses = None
        try:
            local = self._train_round(t)
        except NonFiniteError as e:  # a kernel refusing NaN/inf: training diverged
            if comm.n_peers == comm.n_global:
                self._round_losses = np.full(comm.n_peers, np.nan)
                raise DivergenceError(t, self.config) from e
            local = np.full(comm.n_peers, np.nan)  # every process must reach the check
        self.spent["rounds_total"] += time.perf_counter() - r0
        if before is not None:
            for k, v in phases.items():
                self.spent[k] = self.spent.get(k, 0.0) + v - before[k]
        losses = (local if comm.n_peers == comm.n_global
                  else comm.allgather_peers(np.asarray(local, dtype=np.float64)))
        self._round_losses = losses
        self.check_divergence(t, losses)
        return losses

    def _divergence_row(self, t: int, start: float) -> dict:
        """The metrics row of round t, after which training diverged: its training loss (mean
        of the rounds since the last evaluation, this one's included, so inf or nan when it is)
        and, when every peer's parameters are finite, the evaluation of the diverged models (the
        consensus distance past its bound, the accuracies). Collective on a split run."""
        losses = self._round_losses
        loss = (self._loss_sum + float(np.mean(losses))) / (self._loss_rounds + 1)
        row = {"round": t + 1, "train_loss": loss}
        with np.errstate(all="ignore"):
            finite = np.isfinite(self.params).all(axis=1).astype(np.float64)
            comm = self.comm
            if comm.n_peers != comm.n_global:
                finite = comm.allgather_peers(finite)
            if finite.all():
                try:
                    row.update(self.evaluate())
                except (ArithmeticError, ValueError):  # values too large to evaluate: the loss
                    pass  # row alone, and the divergence is what gets reported
        row["wall_seconds"] = time.perf_counter() - start
        return row

    def run(self, callbacks: list[Callback] | tuple = ()) -> Result:
        """Runs the rounds from ``next_round`` (0, or where a checkpoint left off) to
        ``config.rounds``. Callbacks' ``on_round_end`` and ``on_eval`` run where ``is_root``,
        ``on_round_complete`` (between two rounds) everywhere, so that a ``CheckpointCallback``
        given to every MPI rank saves collectively. ``params`` of the result is the whole matrix
        (on the root; None elsewhere)."""
        c = self.config
        result = Result(config=c)
        start = time.perf_counter() - self._elapsed
        if self._scale0 is None:
            x0 = self._init_row.astype(np.float64)
            self._scale0 = max(1.0, float(x0 @ x0))
        result.history = self.history
        root = list(callbacks) if self.is_root else []
        split = self.comm.n_peers != self.comm.n_global
        if self.is_root:
            self._log_start()
        # numpy's BLAS (evaluation included) runs on the run's threads, never oversubscribing
        # the kernels' (threadpoolctl; restored when the run returns or raises).
        with threadpool_limits(limits=self.threads, user_api="blas"):
            self._rounds(c, result, start, root, callbacks, split)
        if not result.history:
            raise ValueError(f"nothing to run: all {c.rounds} rounds are done (next_round="
                             f"{self.next_round}); raise rounds to continue the run")
        result.summary = self._summary(time.perf_counter() - start)
        if self.is_root:
            _log.info("finished %d rounds in %.1f s: test accuracy %.4f, average model %.4f",
                      c.rounds, time.perf_counter() - start,
                      result.summary["test_accuracy_mean"],
                      result.summary["test_accuracy_avg_model"])
        result.params = self.gather_params() if split else self.params
        return result

    def _rounds(self, c, result, start, root, callbacks, split) -> None:
        """The rounds of run(), from next_round to c.rounds."""
        for t in range(self.next_round, c.rounds):
            self.at_boundary = False
            try:
                losses = self._step(t)
            except DivergenceError:  # the diverged round's row: metrics.csv shows how it ended
                if self._round_losses is not None:
                    row = self._divergence_row(t, start)
                    result.history.append(row)
                    for cb in root:
                        cb.on_eval(self, row)
                raise
            self._loss_sum += float(losses.mean())
            self._loss_rounds += 1
            for cb in root:
                cb.on_round_end(self, t)
            if (t + 1) % c.eval_every == 0 or t + 1 == c.rounds:
                row = {"round": t + 1, "train_loss": self._loss_sum / self._loss_rounds}
                row.update(self.evaluate(final=t + 1 == c.rounds))
                row["wall_seconds"] = time.perf_counter() - start
                self._loss_sum, self._loss_rounds = 0.0, 0
                result.history.append(row)
                if self.is_root:
                    _log.info("round %d/%d: test accuracy %.4f (min %.4f, max %.4f), average "
                              "model %.4f, consensus distance %.4g, train loss %.4g, bytes sent "
                              "%d", t + 1, c.rounds, row["test_accuracy_mean"],
                              row["test_accuracy_min"], row["test_accuracy_max"],
                              row["test_accuracy_avg_model"], row["consensus_distance"],
                              row["train_loss"], row["bytes_sent_total"])
                for cb in root:
                    cb.on_eval(self, row)
                if split:  # the consensus bound, checked where the rows were gathered (after
                    # the callbacks: metrics.csv keeps the row that shows the divergence)
                    self._check_consensus(t, row["consensus_distance"])
            self.next_round = t + 1
            self._elapsed = time.perf_counter() - start
            self.at_boundary = True
            for cb in callbacks:
                hook = getattr(cb, "on_round_complete", None)
                if hook is not None:
                    hook(self, t)

    def _summary(self, run_seconds: float) -> dict:
        """summary.json of the run that just ended (its last evaluation row and the setup)."""
        c = self.config
        last = self.history[-1]
        summary = {k: last[k] for k in metrics.COLUMNS if k not in ("round", "train_loss")}
        summary.update(self.comm.network_summary())  # network hook: sim_seconds
        topo = self.topology
        summary.update(rounds=c.rounds, final_train_loss=last["train_loss"],
                       spectral_gap=(topo.spectral_gap()
                                     if isinstance(topo, Topology)
                                     or c.peers <= SUMMARY_GAP_MAX_N else None),
                       n_params=self.model.dim, precision=c.precision,
                       warnings=list(self.problems), config=c.to_dict())
        if hasattr(self.model, "mode_report"):  # a torch model: its mode, and what auto chose
            summary["torch_mode"] = self.model.mode_report()
            summary["torch_device"] = self.model.device_report()  # rank 0's on MPI
        if hasattr(topo, "edge_count"):  # a periodic Topology; not the random per-round graphs
            edges = topo.edge_count()
            summary.update(edges=edges, edges_fraction_of_complete=(
                edges / max(1, c.peers * (c.peers - 1) // 2)))
        if (topo.period is not None and topo.period > 1 and hasattr(topo, "period_spectral_gap")
                and c.peers <= SUMMARY_GAP_MAX_N):
            summary["spectral_gap_period"] = topo.period_spectral_gap()
        if topo.info is not None:
            summary["topology_info"] = dict(topo.info)
        counts = self.frozen if self.frozen is not None else np.zeros(c.peers, dtype=np.int64)
        summary["evaluation"] = self.eval_summary(run_seconds)
        summary["compute"] = cocofl.cost_summary(self.model, counts, c.batch_size,
                                                 c.local_steps, c.momentum != 0)
        if self.frozen is not None:
            acc = self.last_accuracy
            constrained = self.frozen > 0
            summary.update(
                constrained_peers=np.flatnonzero(constrained).tolist(),
                test_accuracy_constrained_mean=float(acc[constrained].mean())
                if constrained.any() else None,
                test_accuracy_unconstrained_mean=float(acc[~constrained].mean())
                if (~constrained).any() else None)
        report = self.algorithm.report()
        if report:
            summary["algorithm_report"] = report
        summary.update(self.backend.summary(self))
        return summary

    # ---- checkpoints (decentlearn.runner.checkpoint, docs/checkpoints.md) ------------------------

    def state_kinds(self) -> dict[str, str]:
        """Every entry of ``state_dict()`` -> "row" (one row per peer), "edge" (one row per edge
        of the static graph) or "replicated" (the same on every process), from the algorithm's
        and the communicator's declarations; the sampler and the run's progress are replicated."""
        kinds = {f"algorithm.{k}": v for k, v in self.algorithm.state_kinds().items()}
        kinds.update({f"comm.{k}": v for k, v in self.comm.state_kinds().items()})
        return kinds

    def state_dict(self) -> dict:
        """This process's state at a round boundary, as a flat dict of arrays, numpy scalars and
        JSON values (algorithm, optimizer, communicator and clock, sampler, the int8 rounding
        counter, progress and the metrics rows so far). Per-peer arrays hold the hosted rows."""
        state = {**nest("algorithm", self.algorithm.state_dict()),
                 **nest("comm", self.comm.state_dict()),
                 **nest("sampler", self.sampler.state_dict())}
        state.update(nest("run", {
            "next_round": self.next_round, "history": self.history, "model_steps": self.model.steps,
            "loss_sum": self._loss_sum, "loss_rounds": self._loss_rounds, "loss0": self._loss0,
            "scale0": self._scale0, "elapsed": self._elapsed, "eval_seconds": self.eval_seconds,
            "last_accuracy": self.last_accuracy}))
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restores ``state_dict()`` of a run with the same configuration (CheckpointError on a
        mismatch: missing or extra names, other shapes or dtypes)."""
        expected = set(self.state_dict())
        if set(state) != expected:
            diff = sorted(set(state) ^ expected)
            raise CheckpointError(f"checkpoint does not match this run: state {diff[:3]} "
                                  "present on one side only")
        self.algorithm.load_state_dict(subtree("algorithm", state))
        self.comm.load_state_dict(subtree("comm", state))
        self.sampler.load_state_dict(subtree("sampler", state))
        run = subtree("run", state)
        try:
            self.next_round = int(run["next_round"])
            self.history = [dict(row) for row in run["history"]]
            self.model.steps = int(run["model_steps"])
            self._loss_sum, self._loss_rounds = float(run["loss_sum"]), int(run["loss_rounds"])
            self._loss0 = None if run["loss0"] is None else float(run["loss0"])
            self._scale0 = None if run["scale0"] is None else float(run["scale0"])
            self._elapsed, self.eval_seconds = float(run["elapsed"]), float(run["eval_seconds"])
        except (TypeError, ValueError) as e:
            raise CheckpointError(f"checkpoint's run state is malformed: {e}") from None
        acc = run["last_accuracy"]
        self.last_accuracy = None if acc is None else np.asarray(acc)
        if self.next_round < 0:
            raise CheckpointError(f"checkpoint's next round must be >= 0, got {self.next_round}")
        self.at_boundary = True

    def gather_state(self) -> dict | None:
        """The run's whole state (every peer's rows, in peer order) on the root, None elsewhere:
        in one process ``state_dict()`` itself. Collective."""
        local = self.state_dict()
        comm = self.comm
        if comm.n_peers == comm.n_global:
            return local
        kinds = self.state_kinds()
        split = {k: v for k, v in local.items()
                 if kinds.get(k) in ("row", "edge") and isinstance(v, np.ndarray)}
        rows = {k: (comm.gather_rows(v) if kinds[k] == "row" else comm.gather_blocks(v))
                for k, v in sorted(split.items())}
        return {**local, **rows} if comm.rank == 0 else None

    def local_state(self, full: dict) -> dict:
        """This process's share of a whole-run state (as ``checkpoint.read`` returns it)."""
        comm = self.comm
        if comm.n_peers == comm.n_global:
            return full
        kinds = self.state_kinds()
        lo, hi = comm.peer0, comm.peer0 + comm.n_peers
        rows = [k for k, v in full.items() if kinds.get(k) == "row" and isinstance(v, np.ndarray)]
        mine = take_rows(full, rows, lo, hi)
        edges = [k for k, v in full.items()
                 if kinds.get(k) == "edge" and isinstance(v, np.ndarray)]
        if edges:  # the rows of this process's peers' in-edges
            e0, e1 = self.algorithm.edge_range()
            mine = take_rows(mine, edges, e0, e1)
        return mine

    def save_checkpoint(self, path, extra: dict | None = None) -> None:
        """Writes the run's state at this round boundary to ``path`` atomically (``extra``: JSON
        metadata kept in the file). Collective: every process sends its rows and the root
        writes; a failure there raises the same CheckpointError everywhere."""
        if not self.at_boundary and self.next_round > 0:
            raise CheckpointError("a checkpoint can only be taken between two rounds")
        meta = dict(fingerprint=ck.fingerprint(self.config), n_peers=self.config.peers,
                    dim=self.model.dim, round=self.next_round, extra=extra)
        if self.comm.n_peers == self.comm.n_global:
            ck.write(path, self.state_dict(), **meta)
            return
        self.backend.collective_write(self, lambda: self.gather_state(),
                                      lambda full: ck.write(path, full, **meta), path)

    def load_checkpoint(self, path) -> dict:
        """Restores the state saved at ``path`` (by either backend) into this freshly built run,
        whose config must match the checkpoint's (only rounds, threads and data_dir may
        differ); each process keeps its rows. Returns the checkpoint's metadata."""
        state, meta = ck.read(path, fingerprint=ck.fingerprint(self.config),
                              n_peers=self.config.peers, dim=self.model.dim)
        self.load_state_dict(self.local_state(state))
        return meta

    @classmethod
    def from_checkpoint(cls, path, config: RunConfig, *, dataset: Dataset | None = None,
                        backend=None) -> Runner:
        """A runner built from ``config`` and restored from the checkpoint at ``path``;
        ``run()`` then continues the run to ``config.rounds``."""
        runner = cls(config, dataset=dataset, backend=backend)
        runner.load_checkpoint(path)
        return runner
