"""The simulator's run on MPI processes: each rank trains its block of peers with the same
algorithm code, and rank 0 evaluates, writes the results and reports every rank's timings.

``MPISimulator(config)`` builds, on every rank, what is cheap and deterministic from the seed
(the partition's indices, the topology, the model, the initial parameters) and keeps only its own
peers' rows of every state array. Minibatches are drawn by the same ``PeerSampler`` (indices only:
its one generator walks every peer's order in a fixed sequence) and each rank gathers the samples
of its own peers only. Evaluation: each rank evaluates its peers' models; rank 0 gathers the
accuracies and the parameters (``MPIComm.gather_rows``) and computes the average model, the
consensus distance and the byte counts exactly as the simulator does.

Checkpoints: ``state_dict()`` is the rank's state under the simulator's names (its rows of the
per-peer arrays); ``save_checkpoint`` gathers the rows to rank 0, which writes the simulator's
file; ``load_checkpoint`` reads a file of either backend and keeps the rank's rows.

Differences from ``Simulator.run`` (docs/mpi.md): the consensus-distance divergence bound is
checked at evaluation rounds (the loss bounds every round); asynchronous gossip (AD-PSGD)
replays the event schedule on every rank (``decentlearn.mpi.asynchronous``; int8 layers
refused there). Finite-time and nonlinear mixing run on
their MPI communicators (``MPIFiniteTimeComm``, ``MPINonlinearGossipComm``), Clique Averaging
with ``MPICliqueAveraging``; a network model (``--network``) runs: every rank builds it whole
and keeps the whole simulated clock. Per-edge state (compngc's error memory, ``edge_state``) is
gathered in edge order into checkpoints.
"""

from __future__ import annotations

import dataclasses
import os
import time

import numpy as np

from decentlearn import (algorithms, baselines, cocofl, compress, finite_gossip, metrics,
                         network)
from decentlearn._core import NonFiniteError
from decentlearn.data import load_dataset, make_partition
from decentlearn.mpi.comm import (DEFAULT_TIMEOUT, MPICliqueAveraging, MPIComm,
                                  MPIFiniteTimeComm, MPINonlinearGossipComm, MPITimeoutError,
                                  import_mpi)
from decentlearn.nn import make_model
from decentlearn.optim import make as make_optimizer
from decentlearn.sim import (_STREAM_COCOFL, _STREAM_COMPRESS, _STREAM_DATA, _STREAM_INIT,
                             _STREAM_LOWP, _STREAM_NETWORK, _STREAM_PARTITION, _STREAM_SAMPLER,
                             _STREAM_TOPOLOGY,
                             DivergenceError, PeerSampler, Result, Simulator, _stream_seed,
                             eval_sizes, setup_problems, stratified_order)

#: Algorithms that run on MPI, bit-identically to the in-process simulator (docs/mpi.md says
#: how each exchanges). The server baselines keep the server's state replicated on every rank.
SUPPORTED = ("dpsgd", "choco", "dsgt", "d2", "dacfl", "allreduce", "epidemic", "fedavg",
             "stc-fl", "fedhisyn", "ngc", "compngc", "skewscout", "pushsum")


#: Why the other registered algorithms are refused (none today).
REFUSED: dict[str, str] = {}

#: Prefixes of the state names whose arrays hold one row per peer (a rank holds its block).
_ROW_PREFIXES = ("algorithm.", "comm.")


#: RunConfig fields the MPI runner reproduces. Any other field (one added to RunConfig later)
#: must keep its default on MPI: a value the runner would ignore is refused, never run silently.
HANDLED = frozenset((
    "dataset", "data_dir", "peers", "topology", "weights", "partition", "model", "precision",
    "cocofl", "algorithm", "clique_averaging", "mixing", "variant", "compress", "gamma",
    "rounds", "local_steps", "batch_size", "lr", "momentum", "nesterov", "weight_decay", "seed",
    "threads", "eval_every", "eval_samples", "eval_peer_samples", "network", "asynchronous",
    "participation", "server_compress", "categories", "speeds", "hops_max", "ngc_alpha",
    "skew_target", "skew_probe_every", "skew_period_max", "optimizer", "beta2", "eps",
    "trust_coefficient", "lr_schedule", "warmup", "lr_scaling", "torch_mode"))


def check_supported(config) -> None:
    """ValueError naming the option when ``config`` cannot run on the MPI backend."""
    c = config
    for f in dataclasses.fields(c):
        if f.name in HANDLED:
            continue
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        if getattr(c, f.name) != default:
            raise ValueError(f"{f.name}={getattr(c, f.name)!r} is not available on the MPI "
                             f"backend yet (it runs {f.name}={default!r} only; docs/mpi.md)")
    if c.algorithm not in SUPPORTED:
        why = REFUSED.get(c.algorithm, "operations the MPI communicator does not have")
        raise ValueError(f"algorithm {c.algorithm!r} is not available on the MPI backend (it "
                         f"needs {why}); use one of {', '.join(SUPPORTED)} or the in-process "
                         "backend")
    if c.torch_mode not in ("batched", "grouped:1"):
        raise ValueError(f"torch_mode={c.torch_mode!r} is not available on the MPI backend: its "
                         "groups (or auto's timed choice) would form over each rank's peers, not "
                         "the whole set, and the modes agree only to float32 rounding; use "
                         "'batched' or 'grouped:1' (one peer per pass, the same on every backend)")
    if c.asynchronous and c.precision != "fp32":
        raise ValueError(f"asynchronous=True with precision={c.precision!r} is not available on "
                         "the MPI backend (the int8 rounding of AD-PSGD's updates is keyed by a "
                         "peer's position in its wave of events, which a rank cannot pass as one "
                         "offset); use precision='fp32' or the in-process backend")


class _TimedCompressor:
    """Forwards to a compressor and adds the seconds of compress/decompress to ``seconds``."""

    def __init__(self, inner, seconds: dict) -> None:
        self._inner, self._seconds = inner, seconds

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def compress(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return self._inner.compress(*args, **kwargs)
        finally:
            self._seconds["compress"] += time.perf_counter() - t0

    def decompress(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return self._inner.decompress(*args, **kwargs)
        finally:
            self._seconds["compress"] += time.perf_counter() - t0


class MPISimulator(Simulator):
    """One rank's share of a run (see the module docstring); ``run()`` returns the Result on
    every rank, with the history and summary computed on rank 0 and sent to all."""

    def __init__(self, config, *, world=None, timeout: float = DEFAULT_TIMEOUT,
                 transport: str = "p2p") -> None:
        import_mpi()
        check_supported(config)
        self.config = c = config
        self.dataset = d = load_dataset(c.dataset, c.data_dir,
                                        seed=_stream_seed(c.seed, _STREAM_DATA), n_peers=c.peers)
        self.partition = make_partition(c.partition, d.y_train, c.peers,
                                        seed=_stream_seed(c.seed, _STREAM_PARTITION),
                                        groups=d.groups)
        accepted = network.accepted_mixing(c.algorithm)
        self.topology = network.make_topology(c.topology, c.peers,
                                              seed=_stream_seed(c.seed, _STREAM_TOPOLOGY),
                                              weights=c.weights, mixing=accepted,
                                              labels=self.partition.histogram(d.y_train,
                                                                              d.n_classes))
        network.check_mixing(self.topology, c.algorithm, accepted)
        # The network model is deterministic from the seed: every rank builds it whole and
        # keeps the whole simulated clock (MPIComm), so every rank computes the same times.
        self.network = (network.NetworkModel(c.network, c.peers,
                                             seed=_stream_seed(c.seed, _STREAM_NETWORK))
                        if c.network is not None else None)
        threads = c.threads
        if threads is None:  # ranks share the machine: split its cores between them
            from mpi4py import MPI
            size = (world or MPI.COMM_WORLD).Get_size()
            threads = max(1, (os.cpu_count() or 1) // size)
        if c.clique_averaging and self.topology.groups is None:
            raise ValueError(f"clique_averaging needs a topology made of cliques "
                             f"(d-cliques[:SIZE[:INTER]]), got topology={c.topology!r}")
        kwargs = dict(timeout=timeout, transport=transport, network=self.network,
                      samples_per_round=c.local_steps * c.batch_size)
        # --mixing: the simulator's rules and checks (Simulator.__init__), on ranks.
        if c.mixing == "finite-time":
            if c.algorithm != "dpsgd" or c.compress != "none" or c.network is not None:
                raise ValueError("mixing='finite-time' runs several exchanges per round and "
                                 "supports uncompressed dpsgd only, without a network model; got "
                                 f"algorithm={c.algorithm!r}, compress={c.compress!r}, "
                                 f"network={c.network!r}")
            comm = MPIFiniteTimeComm(self.topology, world, n_threads=threads, **kwargs)
        elif c.mixing.startswith("nonlinear"):
            if c.algorithm != "dpsgd" or c.compress != "none":
                raise ValueError("mixing='nonlinear' is a nonlinear gossip step for uncompressed "
                                 f"dpsgd; got algorithm={c.algorithm!r}, compress={c.compress!r}")
            _, alpha, eta = finite_gossip.parse_mixing(c.mixing)
            comm = MPINonlinearGossipComm(self.topology, world, n_threads=threads, alpha=alpha,
                                          eta=eta, **kwargs)
        else:
            comm = MPIComm(self.topology, world, n_threads=threads,
                           mixing_kind="column" if "column" in accepted else None, **kwargs)
        self.comm = comm
        lo, hi = comm.peer0, comm.peer0 + comm.n_peers
        self.model = make_model(c.model, d.input_shape, d.n_classes, precision=c.precision,
                                seed=_stream_seed(c.seed, _STREAM_LOWP))
        self.model.n_threads = threads
        if c.torch_mode != "batched":
            self.model.mode = c.torch_mode  # grouped:1 only (check_supported)
        self.model.peer0 = comm.peer0  # int8 layers key their rounding noise by peer
        init = self.model.init(_stream_seed(c.seed, _STREAM_INIT)).astype(np.float32)
        self._init_row = init
        params = np.broadcast_to(init, (comm.n_peers, self.model.dim)).copy()  # writable
        layout = getattr(self.model, "layout", None)
        segments = ([(sl.start, sl.stop) for _, sl, _ in layout()] if callable(layout) else None)
        # Every optimizer's update of a row depends on that row only (tests/test_optimizers.py),
        # so a rank's block steps exactly as in the in-process matrix.
        optimizer = make_optimizer(c.optimizer_config(), params.shape, n_threads=threads,
                                   segments=segments)
        schedule = c.lr_schedule_of()
        self.lr_schedule = None if schedule.constant else schedule
        self.frozen = None
        self.last_accuracy = None
        frozen_local = None
        if c.cocofl is not None:
            self.frozen = cocofl.assign(cocofl.parse(c.cocofl), c.peers,
                                        len(self.model.param_layers),
                                        _stream_seed(c.seed, _STREAM_COCOFL))
            frozen_local = self.frozen[lo:hi]
        extra = {"gamma": c.gamma_value} if c.algorithm == "choco" else {}
        extra.update(baselines.config_options(c.algorithm, c))
        compressor = compress.make(c.compress)
        self.problems = setup_problems(c, compressor, self.model.dim)
        if c.asynchronous:  # event-driven AD-PSGD replaces the communicator and the algorithm
            from decentlearn.mpi import asynchronous
            comm.close()
            self.comm, self.algorithm = asynchronous.build(
                self, params, c.optimizer_config(), _stream_seed(c.seed, _STREAM_COMPRESS),
                segments=segments, frozen=frozen_local, world=world, n_threads=threads,
                timeout=timeout, transport=transport)
            comm = self.comm
        else:
            self.algorithm = algorithms.make(c.algorithm, model=self.model, comm=comm,
                                             optimizer=optimizer, params=params,
                                             local_steps=c.local_steps, variant=c.variant,
                                             compressor=_TimedCompressor(compressor,
                                                                         comm.seconds),
                                             seed=_stream_seed(c.seed, _STREAM_COMPRESS),
                                             frozen=frozen_local, **extra)
        if c.clique_averaging:  # the clique members' gradients cross ranks
            self.algorithm.gradient_transform = MPICliqueAveraging(self.topology.groups, comm)
        self.sampler = PeerSampler(self.partition, c.batch_size,
                                   _stream_seed(c.seed, _STREAM_SAMPLER))
        self.offline_hook = (network.OfflineHook(self.network, self.algorithm, init,
                                                 peers=comm.peers)
                             if self.network is not None and self.network.config.churn_leave > 0
                             else None)
        if c.eval_samples is not None and c.eval_samples < len(d.y_test):
            pick = np.random.default_rng(0).choice(len(d.y_test), c.eval_samples, replace=False)
            pick.sort()
            self.x_eval, self.y_eval = d.x_test[pick], d.y_test[pick]
        else:
            self.x_eval, self.y_eval = d.x_test, d.y_test
        self.eval_peer_samples, self.eval_avg_samples = eval_sizes(c, len(self.y_eval),
                                                                   d.n_classes)
        order = stratified_order(self.y_eval, d.n_classes)
        self._eval_peer_idx = np.sort(order[:self.eval_peer_samples])
        self._eval_avg_idx = np.sort(order[:self.eval_avg_samples])
        self.eval_seconds = 0.0
        # Progress of ``run``, as in Simulator (restored from a checkpoint).
        self.next_round = 0
        self.history: list[dict] = []
        self.at_boundary = False
        self._loss_sum, self._loss_rounds = 0.0, 0
        self._loss0: float | None = None
        self._scale0: float | None = None
        self._elapsed = 0.0

    @property
    def rank(self) -> int:
        return self.comm.rank

    def sample(self) -> tuple[np.ndarray, np.ndarray]:
        """This rank's peers' minibatches: the global draw's rows, only those samples loaded."""
        idx = self.sampler.next()[self.comm.peers]
        return self.dataset.x_train[idx], self.dataset.y_train[idx]

    def gather_params(self, root: int = 0) -> np.ndarray | None:
        """The full (peers, dim) parameter matrix on ``root`` (None elsewhere)."""
        return self.comm.gather_rows(self.params, root)

    def evaluate(self, final: bool = False) -> dict:
        """The simulator's evaluation row, computed on rank 0 and sent to every rank."""
        t0 = time.perf_counter()
        comm = self.comm
        pi = self._eval_peer_idx
        acc_local, _ = self.model.evaluate(self.params, self.x_eval[pi], self.y_eval[pi])
        acc = comm.allgather_peers(np.asarray(acc_local, dtype=np.float64))
        self.last_accuracy = acc
        X = comm.gather_rows(self.params)
        sent = comm.gather_rows(comm.bytes_sent)
        row = None
        if comm.rank == 0:
            avg = X.mean(axis=0, keepdims=True, dtype=np.float64).astype(np.float32)
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
                "consensus_distance": metrics.consensus_distance(X),
                "bytes_sent_total": int(sent.sum()),
                "bytes_sent_max_peer": int(sent.max()),
                **comm.network_metrics(),  # sim_seconds and fault rates with --network
            }
        row = comm.bcast_json(row)
        self.eval_seconds += time.perf_counter() - t0
        return row

    def _check_losses(self, t: int, losses: np.ndarray) -> None:
        """The simulator's loss bounds on the losses of all peers (every rank decides alike)."""
        from decentlearn.sim import DIVERGENCE_LOSS_FACTOR
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
        from decentlearn.sim import DIVERGENCE_CONSENSUS_FACTOR
        bound = DIVERGENCE_CONSENSUS_FACTOR * self._scale0
        if not np.isfinite(cd) or cd > bound:
            raise DivergenceError(t, self.config, f"the consensus distance {cd:.3g} exceeds "
                                  f"{DIVERGENCE_CONSENSUS_FACTOR:g} x max(1, ||x_0||^2) = "
                                  f"{bound:.3g}, peers are drifting apart")

    def run(self, callbacks=()) -> Result:
        """Runs the rounds from ``next_round`` (0, or where a checkpoint left off) to
        ``config.rounds``. ``callbacks`` are this rank's: their ``on_round_end`` and ``on_eval``
        are called on rank 0 only, ``on_round_complete`` (between two rounds) on every rank, so
        that a ``CheckpointCallback`` given to every rank saves collectively."""
        c = self.config
        comm = self.comm
        result = Result(config=c)
        start = time.perf_counter() - self._elapsed
        if self._scale0 is None:
            x0 = self._init_row.astype(np.float64)
            self._scale0 = max(1.0, float(x0 @ x0))
        result.history = self.history
        phases = ("compress", "communicate", "wait")
        spent = dict.fromkeys(("compute", *phases, "rounds_total"), 0.0)
        for t in range(self.next_round, c.rounds):
            self.at_boundary = False
            before = dict(comm.seconds)
            r0 = time.perf_counter()
            try:
                with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                    if self.lr_schedule is not None:
                        self.algorithm.optimizer.lr = self.lr_schedule(t)
                    if self.offline_hook is not None:  # churn: offline peers' rows rest
                        self.offline_hook.before_round(t)
                    local = self.algorithm.round(self.sample, t)
                    if self.offline_hook is not None:
                        self.offline_hook.after_round(t)
                comm.round_done(t)  # closes round t on the simulated clock (--network)
            except NonFiniteError:
                local = np.full(comm.n_peers, np.nan)
            spent["rounds_total"] += time.perf_counter() - r0
            for k in phases:
                spent[k] += comm.seconds[k] - before[k]
            losses = comm.allgather_peers(np.asarray(local, dtype=np.float64))
            self._check_losses(t, losses)
            self._loss_sum += float(losses.mean())
            self._loss_rounds += 1
            if comm.rank == 0:
                for cb in callbacks:
                    cb.on_round_end(self, t)
            if (t + 1) % c.eval_every == 0 or t + 1 == c.rounds:
                row = {"round": t + 1, "train_loss": self._loss_sum / self._loss_rounds}
                row.update(self.evaluate(final=t + 1 == c.rounds))
                row["wall_seconds"] = time.perf_counter() - start
                self._loss_sum, self._loss_rounds = 0.0, 0
                result.history.append(row)
                self._check_consensus(t, row["consensus_distance"])
                if comm.rank == 0:
                    for cb in callbacks:
                        cb.on_eval(self, row)
            self.next_round = t + 1
            self._elapsed = time.perf_counter() - start
            self.at_boundary = True
            for cb in callbacks:
                hook = getattr(cb, "on_round_complete", None)
                if hook is not None:
                    hook(self, t)
        if not result.history:
            raise ValueError(f"nothing to run: all {c.rounds} rounds are done (next_round="
                             f"{self.next_round}); raise rounds to continue the run")
        last = result.history[-1]
        result.summary = {k: last[k] for k in metrics.COLUMNS if k not in ("round", "train_loss")}
        result.summary.update(comm.network_summary())  # sim_seconds with --network
        topo = self.topology
        result.summary.update(rounds=c.rounds, final_train_loss=last["train_loss"],
                              spectral_gap=topo.spectral_gap(),
                              n_params=self.model.dim, precision=c.precision,
                              warnings=list(self.problems), config=c.to_dict())
        if hasattr(topo, "edge_count"):
            edges = topo.edge_count()
            result.summary.update(edges=edges, edges_fraction_of_complete=(
                edges / max(1, c.peers * (c.peers - 1) // 2)))
        if topo.period is not None and topo.period > 1 and hasattr(topo, "period_spectral_gap"):
            result.summary["spectral_gap_period"] = topo.period_spectral_gap()
        if topo.info is not None:
            result.summary["topology_info"] = dict(topo.info)
        counts = self.frozen if self.frozen is not None else np.zeros(c.peers, dtype=np.int64)
        result.summary["evaluation"] = self.eval_summary(time.perf_counter() - start)
        result.summary["compute"] = cocofl.cost_summary(self.model, counts, c.batch_size,
                                                        c.local_steps, c.momentum != 0)
        if self.frozen is not None:
            acc = self.last_accuracy
            constrained = self.frozen > 0
            result.summary.update(
                constrained_peers=np.flatnonzero(constrained).tolist(),
                test_accuracy_constrained_mean=float(acc[constrained].mean())
                if constrained.any() else None,
                test_accuracy_unconstrained_mean=float(acc[~constrained].mean())
                if (~constrained).any() else None)
        # Per-rank timings of the rounds (evaluation excluded): compute, compress, communicate,
        # wait; compute is what remains of the round time.
        spent["compute"] = max(0.0, spent["rounds_total"] - sum(spent[k] for k in phases))
        names = tuple(spent)
        timings = comm.allgather_peers(np.array([[spent[k] for k in names]] * comm.n_peers,
                                                dtype=np.float64))
        owner = comm.bounds[:-1]
        result.summary["mpi"] = {
            "ranks": comm.n_ranks,
            "peers_per_rank": np.diff(comm.bounds).tolist(),
            "threads_per_rank": comm.n_threads,
            "timeout_seconds": comm.timeout,
            "timings_seconds": [dict(rank=r, **dict(zip(names, map(float, timings[p]))))
                                for r, p in enumerate(owner)],
        }
        result.params = self.gather_params()
        return result

    # ---- checkpoints (docs/checkpoints.md, docs/mpi.md) -----------------------------------------
    # ``state_dict()`` (inherited) is this rank's state under the in-process simulator's names:
    # the algorithm's and the communicator's arrays hold the rank's rows, the sampler and the
    # run's progress are the same on every rank (wall-clock figures aside: rank 0's are saved).

    def _row_names(self, state: dict, n_rows: int) -> list[str]:
        """The names of ``state``'s per-peer arrays (one row per peer, ``n_rows`` rows): the
        algorithm's and the communicator's; the sampler and ``run.`` entries are global."""
        # Replicated state (a server's model, an all-reduce's anchor) is no row of a peer even
        # where a rank hosts one peer and the array has one row.
        return sorted(k for k, v in state.items() if k.startswith(_ROW_PREFIXES)
                      and not self._replicated(k) and k not in self._edge_names(state)
                      and isinstance(v, np.ndarray) and v.ndim >= 1 and v.shape[0] == n_rows)

    def _edge_names(self, state: dict) -> list[str]:
        """The names of ``state``'s per-edge arrays (one row per edge, global CSR order: the
        algorithm's ``edge_state`` prefixes, e.g. compngc's error memories)."""
        prefixes = tuple("algorithm." + p for p in getattr(self.algorithm, "edge_state", ()))
        return sorted(k for k, v in state.items() if prefixes and k.startswith(prefixes)
                      and isinstance(v, np.ndarray) and v.ndim >= 1)

    def _replicated(self, name: str) -> bool:
        """True for state that is the same on every rank whatever its shape: what the algorithm
        declares (``replicated_attrs``) and the network model's clock and fault counters."""
        shared = {"algorithm." + a for a in self.algorithm._declared("replicated_attrs")}
        return name in shared or name.startswith(tuple(a + "." for a in shared)) or \
            name.startswith(tuple("comm." + p for p in self.comm.replicated_prefixes))

    def gather_state(self) -> dict | None:
        """The run's whole state (every peer's rows, in peer order) on rank 0, None elsewhere:
        the dict ``Simulator.state_dict()`` of the same run would give. Collective."""
        from decentlearn import checkpoint as ck
        comm = self.comm
        local = self.state_dict()
        names = self._row_names(local, comm.n_peers)
        lists = [comm.bcast_json(names, root=r) for r in range(comm.n_ranks)]
        if any(other != names for other in lists):
            raise ck.CheckpointError("the ranks hold different per-peer state names (a rank's "
                                     "state is incomplete); cannot checkpoint")
        rows = {k: comm.gather_rows(local[k]) for k in names}
        edge_names = self._edge_names(local)  # per-edge rows, joined in edge order
        lists = [comm.bcast_json(edge_names, root=r) for r in range(comm.n_ranks)]
        if any(other != edge_names for other in lists):
            raise ck.CheckpointError("the ranks hold different per-edge state names (a rank's "
                                     "state is incomplete); cannot checkpoint")
        rows.update({k: comm.gather_blocks(local[k]) for k in edge_names})
        if comm.rank != 0:
            return None
        full = {**local, **rows}
        file_names = [k for k in ck.per_peer_names(full, self.config.peers)
                      if k.startswith(_ROW_PREFIXES) and not self._replicated(k)
                      and k not in edge_names]
        if file_names != names:
            raise ck.CheckpointError(f"per-peer state {sorted(set(file_names) ^ set(names))[:3]}"
                                     " would be read back with other rows")
        return full

    def local_state(self, full: dict) -> dict:
        """This rank's share of a whole-run state (as ``checkpoint.read`` returns it)."""
        from decentlearn import checkpoint as ck
        lo, hi = self.comm.peer0, self.comm.peer0 + self.comm.n_peers
        mine = ck.take_rows(full, self._row_names(full, self.config.peers), lo, hi)
        edge_names = self._edge_names(full)
        if edge_names:  # the rows of this rank's peers' in-edges
            e0, e1 = self.algorithm.edge_range()
            mine = ck.take_rows(mine, edge_names, e0, e1)
        return mine

    def save_checkpoint(self, path, extra: dict | None = None) -> None:
        """Collective: every rank sends its rows, rank 0 writes ``path`` atomically in the
        in-process simulator's format. A failure on rank 0 (disk full, ...) raises the same
        CheckpointError on every rank."""
        from decentlearn import checkpoint as ck
        if not self.at_boundary and self.next_round > 0:
            raise ck.CheckpointError("a checkpoint can only be taken between two rounds")
        error = None
        try:
            full = self.gather_state()
            if full is not None:
                ck.write(path, full, fingerprint=ck.fingerprint(self.config),
                         n_peers=self.config.peers, dim=self.model.dim, round=self.next_round,
                         extra=extra)
        except MPITimeoutError:
            raise
        except ck.CheckpointError as e:
            error = str(e)
        except Exception as e:  # noqa: BLE001 - rank 0's failure must reach every rank
            error = f"checkpoint {path} not written: {type(e).__name__}: " + \
                " ".join(str(e).split())[:300]
        verdict = self.comm.bcast_json(error)  # rank 0's
        if verdict or error:
            raise ck.CheckpointError(verdict or error)

    def load_checkpoint(self, path) -> dict:
        """Every rank reads the checkpoint at ``path`` (written by this backend or by the
        in-process simulator, with the same configuration) and keeps its rows. Not collective;
        returns the metadata."""
        from decentlearn import checkpoint as ck
        state, meta = ck.read(path, fingerprint=ck.fingerprint(self.config),
                              n_peers=self.config.peers, dim=self.model.dim)
        self.load_state_dict(self.local_state(state))
        return meta
