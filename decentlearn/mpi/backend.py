"""The MPI backend: a run's peers split over MPI ranks, composed with the same ``Runner``.

Each rank hosts a contiguous block of peers (``MPIComm``) and builds, like one process would, what
is cheap and deterministic from the seed (the partition's indices, the topology, the model, the
initial parameters), keeping only its own peers' rows of every state array. Minibatches are drawn
by the same ``PeerSampler`` (indices only) and each rank loads the samples of its own peers.
Evaluation: each rank evaluates its peers' models; rank 0 gathers the accuracies and the
parameters and computes the average model, the consensus distance and the byte counts exactly as
in one process. Checkpoints: rank 0 gathers every rank's rows (per-peer and per-edge state, as the
algorithm declares it) and writes the in-process format; a resumed rank keeps its rows.

Differences from one process (docs/mpi.md): the consensus-distance divergence bound is checked at
evaluation rounds (the loss bounds every round); asynchronous gossip (AD-PSGD) replays the event
schedule on every rank (int8 layers refused there). A network model (``--network``) runs: every
rank builds it whole and keeps the whole simulated clock.
"""

from __future__ import annotations

import dataclasses
import os
import time
import warnings

import numpy as np

from decentlearn import algorithms
from decentlearn.errors import CheckpointError, SetupWarning
from decentlearn.comm import CliqueAveraging
from decentlearn.mpi.comm import DEFAULT_TIMEOUT, MPIComm, MPITimeoutError, import_mpi

__all__ = ["HANDLED", "MPIBackend", "check_supported"]


#: RunConfig fields the MPI runner reproduces. Any other field (one added to RunConfig later)
#: must keep its default on MPI: a value the runner would ignore is refused, never run silently.
HANDLED = frozenset((
    "dataset", "data_dir", "peers", "topology", "weights", "partition", "model", "precision",
    "cocofl", "algorithm", "clique_averaging", "mixing", "variant", "compress", "options",
    "rounds", "local_steps", "batch_size", "lr", "momentum", "nesterov", "weight_decay", "seed",
    "threads", "eval_every", "eval_samples", "eval_peer_samples", "network", "asynchronous",
    "optimizer", "beta2", "eps",
    "trust_coefficient", "lr_schedule", "warmup", "lr_scaling", "torch_mode", "device"))


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
    if "mpi" not in algorithms.get(c.algorithm).backends:
        supported = [n for n in algorithms.available() if "mpi" in algorithms.get(n).backends]
        raise ValueError(f"algorithm {c.algorithm!r} is not available on the MPI backend (it "
                         f"needs operations the MPI communicator does not have); use one of "
                         f"{', '.join(supported)} or the in-process backend")
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


#: The communication phases a rank times (comm.seconds); compute is the rest of a round.
_PHASES = ("compress", "communicate", "wait")


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


class MPIBackend:
    """This rank's share of a run: ``Runner(config, backend=MPIBackend())`` on every rank of an
    ``mpiexec`` launch. ``world``: the mpi4py communicator (default ``MPI.COMM_WORLD``);
    ``timeout``: seconds any wait may last; ``transport``: "p2p" or "neighbor"."""

    name = "mpi"

    def __init__(self, world=None, *, timeout: float = DEFAULT_TIMEOUT,
                 transport: str = "p2p") -> None:
        import_mpi()
        self.world, self.timeout, self.transport = world, timeout, transport

    def __repr__(self) -> str:
        return f"MPIBackend(timeout={self.timeout}, transport={self.transport!r})"

    def check(self, config) -> None:
        check_supported(config)

    def threads(self, config) -> int:
        """The configuration's threads, else the machine's cores split between the ranks."""
        if config.threads is not None:
            return config.threads
        from mpi4py import MPI
        size = (self.world or MPI.COMM_WORLD).Get_size()
        return max(1, (os.cpu_count() or 1) // size)

    def device(self, config) -> str | None:
        """This rank's device for a torch model: ``device="cuda"`` becomes
        ``cuda:{rank % count}`` over the visible GPUs (one GPU per rank, round robin); any
        other value is every rank's (decentlearn.torch.device.rank_device)."""
        if config.device != "cuda":
            return config.device
        from mpi4py import MPI

        from decentlearn.torch.device import cuda_device_count, rank_device
        rank = (self.world or MPI.COMM_WORLD).Get_rank()
        return rank_device(config.device, rank, cuda_device_count())

    def _comm_kwargs(self, n_threads) -> dict:
        return dict(n_threads=n_threads, timeout=self.timeout, transport=self.transport)

    def make_comm(self, topology, *, n_threads, network, samples_per_round: float, mixing_kind):
        """This rank's communicator (the runner wraps it in the run's mixing rule)."""
        return MPIComm(topology, self.world, network=network, samples_per_round=samples_per_round,
                       mixing_kind=mixing_kind, **self._comm_kwargs(n_threads))

    def wrap_compressor(self, compressor, comm):
        """The compressor, its seconds added to the rank's ``compress`` phase."""
        return _TimedCompressor(compressor, comm.seconds)

    def clique_averaging(self, groups, comm):
        return CliqueAveraging(groups, comm)  # gradients cross ranks

    def report_problems(self, problems: list[str]) -> None:
        """Each setup problem as a SetupWarning on rank 0 only (once for the job, as in process;
        every rank finds the same ones). summary.json lists them too."""
        from mpi4py import MPI
        if (self.world or MPI.COMM_WORLD).Get_rank() == 0:
            for problem in problems:
                warnings.warn(problem, SetupWarning, stacklevel=3)

    def summary(self, runner) -> dict:
        """Per-rank timings of the rounds (evaluation excluded): compute, compress, communicate,
        wait; compute is what remains of the round time. Collective."""
        comm, spent = runner.comm, dict(runner.spent)
        for k in _PHASES:
            spent.setdefault(k, 0.0)
        spent["compute"] = max(0.0, spent["rounds_total"] - sum(spent[k] for k in _PHASES))
        names = ("compute", *_PHASES, "rounds_total")
        timings = comm.allgather_peers(np.array([[spent[k] for k in names]] * comm.n_peers,
                                                dtype=np.float64))
        return {"mpi": {
            "ranks": comm.n_ranks,
            "peers_per_rank": np.diff(comm.bounds).tolist(),
            "threads_per_rank": comm.n_threads,
            "timeout_seconds": comm.timeout,
            "timings_seconds": [dict(rank=r, **dict(zip(names, map(float, timings[p]))))
                                for r, p in enumerate(comm.bounds[:-1])],
        }}

    def collective_write(self, runner, gather, write, path) -> None:
        """Every rank sends its rows (``gather()``), rank 0 writes (``write(full)``); a failure
        on rank 0 (disk full, ...) raises the same CheckpointError on every rank."""
        error = None
        try:
            full = gather()
            if full is not None:
                write(full)
        except MPITimeoutError:
            raise
        except CheckpointError as e:
            error = str(e)
        except Exception as e:  # noqa: BLE001 - rank 0's failure must reach every rank
            error = f"checkpoint {path} not written: {type(e).__name__}: " + \
                " ".join(str(e).split())[:300]
        verdict = runner.comm.bcast_json(error)  # rank 0's
        if verdict or error:
            raise CheckpointError(verdict or error)
