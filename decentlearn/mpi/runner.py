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

from decentlearn._core import NonFiniteError
from decentlearn.mpi.comm import (DEFAULT_TIMEOUT, MPICliqueAveraging, MPIComm,
                                  MPIFiniteTimeComm, MPINonlinearGossipComm, MPITimeoutError,
                                  import_mpi)
from decentlearn.sim import (_STREAM_COMPRESS, Result, Simulator, _stream_seed)

#: Algorithms that run on MPI, bit-identically to the in-process simulator (docs/mpi.md says
#: how each exchanges). The server baselines keep the server's state replicated on every rank.
SUPPORTED = ("dpsgd", "choco", "dsgt", "d2", "dacfl", "allreduce", "epidemic", "fedavg",
             "stc-fl", "fedhisyn", "ngc", "compngc", "skewscout", "pushsum")


#: Why the other registered algorithms are refused (none today).
REFUSED: dict[str, str] = {}

#: The communication phases a rank times (comm.seconds); compute is the rest of a round.
_PHASES = ("compress", "communicate", "wait")

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
    every rank, with the history and summary computed on rank 0 and sent to all. It is the
    in-process Simulator with its own communicator, thread split, evaluation (gathered on rank
    0), divergence checks (every rank decides alike) and per-rank timings."""

    def __init__(self, config, *, world=None, timeout: float = DEFAULT_TIMEOUT,
                 transport: str = "p2p") -> None:
        import_mpi()
        check_supported(config)
        self._world, self._timeout, self._transport = world, timeout, transport
        super().__init__(config)

    def _threads(self) -> int:
        if self.config.threads is not None:
            return self.config.threads
        from mpi4py import MPI  # ranks share the machine: split its cores between them
        size = (self._world or MPI.COMM_WORLD).Get_size()
        return max(1, (os.cpu_count() or 1) // size)

    def _make_comm(self, mixing: tuple, accepted, threads: int) -> MPIComm:
        c = self.config
        kind, alpha, eta = mixing
        kwargs = dict(n_threads=threads, timeout=self._timeout, transport=self._transport,
                      network=self.network, samples_per_round=c.local_steps * c.batch_size)
        if kind == "finite-time":
            return MPIFiniteTimeComm(self.topology, self._world, **kwargs)
        if kind == "nonlinear":
            return MPINonlinearGossipComm(self.topology, self._world, alpha=alpha, eta=eta,
                                          **kwargs)
        return MPIComm(self.topology, self._world,
                       mixing_kind="column" if "column" in accepted else None, **kwargs)

    def _report_problems(self) -> None:
        pass  # summary.json lists them (rank 0 writes it); one warning per rank would repeat

    def _build_async(self, params, segments, frozen, threads):
        from decentlearn.mpi import asynchronous
        self.comm.close()  # the event communicator replaces it
        c = self.config
        return asynchronous.build(self, params, c.optimizer_config(),
                                  _stream_seed(c.seed, _STREAM_COMPRESS), segments=segments,
                                  frozen=frozen, world=self._world, n_threads=threads,
                                  timeout=self._timeout, transport=self._transport)

    def _wrap_compressor(self, compressor):
        return _TimedCompressor(compressor, self.comm.seconds)

    def _clique_averaging(self):
        return MPICliqueAveraging(self.topology.groups, self.comm)  # gradients cross ranks

    @property
    def rank(self) -> int:
        return self.comm.rank

    @property
    def is_root(self) -> bool:
        return self.comm.rank == 0

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
        self.last_accuracy = comm.allgather_peers(np.asarray(acc_local, dtype=np.float64))
        X = comm.gather_rows(self.params)
        sent = comm.gather_rows(comm.bytes_sent)
        row = self._eval_row(X, self.last_accuracy, sent, final) if comm.rank == 0 else None
        row = comm.bcast_json(row)
        self.eval_seconds += time.perf_counter() - t0
        return row

    def _step(self, t: int) -> np.ndarray:
        """Round t, its phases' seconds, and the loss bounds on every peer's loss (every rank
        decides alike; the consensus bound is checked at evaluations, ``_after_eval``)."""
        comm = self.comm
        before = dict(comm.seconds)
        r0 = time.perf_counter()
        try:
            local = self._train_round(t)
        except NonFiniteError:
            local = np.full(comm.n_peers, np.nan)
        self._spent["rounds_total"] += time.perf_counter() - r0
        for k in _PHASES:
            self._spent[k] += comm.seconds[k] - before[k]
        losses = comm.allgather_peers(np.asarray(local, dtype=np.float64))
        self._check_losses(t, losses)
        return losses

    def _after_eval(self, t: int, row: dict) -> None:
        self._check_consensus(t, row["consensus_distance"])

    def run(self, callbacks=()) -> Result:
        """Runs the rounds from ``next_round`` to ``config.rounds`` (Simulator.run); the
        summary adds every rank's timings, and ``params`` is the whole matrix on rank 0."""
        self._spent = dict.fromkeys(("compute", *_PHASES, "rounds_total"), 0.0)
        result = super().run(callbacks)
        result.params = self.gather_params()
        return result

    def _summary(self, run_seconds: float) -> dict:
        summary = super()._summary(run_seconds)
        # Per-rank timings of the rounds (evaluation excluded): compute, compress, communicate,
        # wait; compute is what remains of the round time.
        comm, spent = self.comm, self._spent
        spent["compute"] = max(0.0, spent["rounds_total"] - sum(spent[k] for k in _PHASES))
        names = tuple(spent)
        timings = comm.allgather_peers(np.array([[spent[k] for k in names]] * comm.n_peers,
                                                dtype=np.float64))
        summary["mpi"] = {
            "ranks": comm.n_ranks,
            "peers_per_rank": np.diff(comm.bounds).tolist(),
            "threads_per_rank": comm.n_threads,
            "timeout_seconds": comm.timeout,
            "timings_seconds": [dict(rank=r, **dict(zip(names, map(float, timings[p]))))
                                for r, p in enumerate(comm.bounds[:-1])],
        }
        return summary

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
