"""Launched by tests/test_mpi.py under ``mpiexec -n 4``: runs the MPI side of the checks and
writes what it got (rank 0) for the pytest side to compare with in-process references.

    mpi_check.py all OUTDIR        primitives, every supported algorithm, one CLI run,
                                   checkpoints and --resume (API and CLI; OUTDIR must hold
                                   inprocess_ckpt.npz), a rank that stops answering
    mpi_check.py train PIDDIR ...  writes each rank's pid, then runs ``decentlearn run`` (the
                                   fault tests kill or stop one rank from outside)
"""

import json
import os
import re
import sys
from pathlib import Path

import numpy as np

#: Runs compared with the in-process simulator (tests/test_mpi.py builds the same list).
BASE = dict(peers=7, rounds=4, eval_every=2, model="mlp:16", batch_size=8, seed=3)
RUNS = {
    "dpsgd": {},
    "dpsgd_cta": dict(variant="cta", local_steps=2),
    "dpsgd_qsgd": dict(compress="qsgd:16"),
    "choco_topk": dict(algorithm="choco", compress="topk:0.1", gamma=0.5),
    "choco_ef_randk": dict(algorithm="choco", compress="ef:randk:0.2", gamma=0.3,
                           topology="one-peer-exponential"),
    "dsgt": dict(algorithm="dsgt", topology="exponential"),
    "d2": dict(algorithm="d2", momentum=0.0),
    "dacfl": dict(algorithm="dacfl", local_steps=2),
    "allreduce": dict(algorithm="allreduce"),
    "allreduce_qsgd": dict(algorithm="allreduce", compress="qsgd:16", local_steps=2),
    "cocofl": dict(cocofl="0.5:1"),
    "epidemic": dict(algorithm="epidemic", topology="epidemic:2"),
    # The neighbour-collective transport (Ineighbor_alltoallv), a time-varying graph.
    "dpsgd_neighbor": dict(topology="one-peer-exponential", transport="neighbor"),
    # Optimizers with per-peer state and layer-wise trust ratios, and learning-rate schedules.
    "dpsgd_adam_cosine": dict(optimizer="adam", lr=0.003, lr_schedule="cosine", warmup=2),
    "choco_lamb_step": dict(algorithm="choco", compress="topk:0.1", gamma=0.5, optimizer="lamb",
                            lr=0.01, lr_schedule="step:2:0.5"),
    # Server baselines (replicated server), cross-gradients, point-to-point probes, push-sum.
    "fedavg": dict(algorithm="fedavg", participation=0.5, compress="qsgd:16", local_steps=2),
    "stc_fl": dict(algorithm="stc-fl", participation=0.4, compress="stc:0.1",
                   server_compress="stc:0.2"),
    "fedhisyn": dict(algorithm="fedhisyn", participation=0.8, categories=3, speeds="uniform:1:4",
                     topology="complete"),
    "ngc": dict(algorithm="ngc", topology="exponential", ngc_alpha=0.7),
    "compngc": dict(algorithm="compngc", compress="topk:0.2"),
    "skewscout": dict(algorithm="skewscout", skew_probe_every=1, skew_target=0.3,
                      topology="one-peer-exponential"),
    "pushsum": dict(algorithm="pushsum", topology="epidemic:2", local_steps=2),
    # A network model (--network): simulated time, link drops, stragglers, churn.
    "choco_mobile": dict(algorithm="choco", compress="topk:0.1", gamma=0.5, network="mobile"),
    "pushsum_churn": dict(algorithm="pushsum", topology="epidemic:2",
                          network=str(Path(__file__).resolve().parent / "mpi_network.toml")),
    "allreduce_qsgd_edge": dict(algorithm="allreduce", compress="qsgd:16", network="edge"),
    # The other mixing rules: a nonlinear step on a halo (with link drops), K halo exchanges.
    "dpsgd_nonlinear": dict(mixing="nonlinear:0.7:0.5", network="mobile"),
    "dpsgd_finite_time": dict(mixing="finite-time"),
    # Clique Averaging: cliques of 4 spread over the ranks' blocks of 2.
    "dcliques_averaging": dict(peers=8, topology="d-cliques:4", clique_averaging=True,
                               partition="classes:2"),
    # int8 layers training a subset of the rows (clients, busy peers, edges).
    "fedavg_int8": dict(algorithm="fedavg", participation=0.5, precision="int8"),
    "fedhisyn_int8": dict(algorithm="fedhisyn", participation=0.8, categories=3,
                          speeds="uniform:1:4", topology="complete", precision="int8"),
    "compngc_int8": dict(algorithm="compngc", compress="topk:0.2", precision="int8"),
    # Event-driven AD-PSGD: the schedule replayed on every rank, cross-rank pairs swap rows
    # (edge: link drops and stragglers; momentum: per-peer optimizer state between updates).
    "adpsgd_edge": dict(asynchronous=True, network="edge", local_steps=2),
}

#: Algorithm counters (``stats()``) compared with the in-process run's, per run.
STATS = {"fedavg": "clients_per_round", "stc_fl": "server_bytes_sent",
         "fedhisyn": "server_bytes_sent", "ngc": "cross_gradient_bytes",
         "compngc": "cross_gradient_bytes", "skewscout": "probes"}


def primitives(out: Path) -> None:
    from decentlearn import topology as topo
    from decentlearn.mpi import (allreduce, broadcast, init, neighbor_allgather,
                                 neighbor_allreduce)

    n, dim = 6, 37
    X = np.random.default_rng(7).standard_normal((n, dim)).astype(np.float32)
    got = {}
    for name, graph in (("ring", topo.make("ring", n)),
                        ("onepeer", topo.make("one-peer-exponential", n))):
        ctx = init(graph, backend="mpi", timeout=30)
        mine = X[ctx.peers]
        for t in range(3):
            got[f"{name}_mix_{t}"] = neighbor_allreduce(mine, t)
            got[f"{name}_topk_{t}"] = neighbor_allreduce(mine, t, compress="topk:0.3", seed=5)
            got[f"{name}_qsgd_{t}"] = neighbor_allreduce(mine, t, compress="qsgd:4", seed=5)
        recv, send, rows = neighbor_allgather(mine, 1)
        got[f"{name}_gather_edges"] = np.stack([recv, send]).T.astype(np.float32)
        got[f"{name}_gather_rows"] = rows
        got[f"{name}_allreduce"] = allreduce(mine)
        got[f"{name}_broadcast"] = broadcast(mine, root=4)
    comm = ctx.comm
    # shift and upload into a given out: the rows of a fresh result; a wrong out is refused.
    from decentlearn import compress
    ident, clients, source = compress.make("none"), np.arange(n), np.roll(np.arange(n), 1)
    into = np.full_like(mine, np.nan)
    assert comm.shift(mine, 0, source, out=into) is into
    assert np.array_equal(into, comm.shift(mine, 0, source))
    into = np.full((n, dim), np.nan, np.float32)
    assert comm.upload(ident, ident.compress(mine), 0, clients, out=into) is into
    assert np.array_equal(into, comm.upload(ident, ident.compress(mine), 0, clients))
    for call, match in ((lambda: comm.shift(mine, 0, source, out=mine), "out must be an array"),
                        (lambda: comm.shift(mine, 0, source, out=np.empty((n + 1, dim),
                                                                          np.float32)),
                         "out must be an array"),
                        (lambda: comm.upload(ident, ident.compress(mine), 0, clients,
                                             out=np.empty((n + 1, dim), np.float32)),
                         f"out must have shape \\({n}, {dim}\\)")):
        try:
            call()
        except ValueError as e:
            assert re.search(match, str(e)), str(e)
        else:
            raise AssertionError(f"a bad out was accepted ({match})")
    # gather_rows then scatter_rows gives every rank its rows back (checkpoint and resume).
    state = np.random.default_rng(comm.rank).standard_normal((comm.n_peers, 3, 2))
    back = comm.scatter_rows(comm.gather_rows(state))
    assert back.dtype == state.dtype and np.array_equal(back, state)
    full = {k: comm.gather_rows(v) if not k.endswith("_gather_edges") and
            not k.endswith("_gather_rows") else v for k, v in got.items()}
    # The received edges have per-rank counts: every rank sends its lists to all, as JSON.
    lists = [comm.bcast_json({k: got[k].tolist() for k in got if "_gather_" in k}, root=r)
             for r in range(comm.n_ranks)]
    if comm.rank == 0:
        for k in [k for k in full if "_gather_" in k]:
            full[k] = np.concatenate([np.asarray(d[k], dtype=np.float32).reshape(-1, *(
                (2,) if k.endswith("edges") else (dim,))) for d in lists])
        np.savez(out / "primitives.npz", X=X, **full)


def algorithms(out: Path) -> None:
    from decentlearn.mpi.backend import MPIBackend
    from decentlearn.runner import Runner
    from decentlearn.sim import RunConfig

    for name, extra in RUNS.items():
        extra = dict(extra)
        transport = extra.pop("transport", "p2p")
        sim = Runner(RunConfig.from_dict({**BASE, **extra}), backend=MPIBackend(timeout=30, transport=transport))
        result = sim.run()
        stats = sim.algorithm.report()
        extra = {"stats": stats, "server_bytes_sent": int(sim.comm.server_bytes_sent)}
        if sim.comm.rank == 0:
            np.save(out / f"{name}.npy", result.params)
            (out / f"{name}.json").write_text(json.dumps(
                {"summary": {k: v for k, v in result.summary.items() if k != "mpi"},
                 "mpi": result.summary["mpi"], "history": result.history, **extra}))


#: Runs interrupted after round STOP_AT by a checkpoint, then resumed to BASE's rounds.
RESUMED = ("dpsgd", "choco_topk", "stc_fl", "choco_mobile", "compngc_int8", "adpsgd_edge")
STOP_AT = 3


class Interrupted(Exception):
    """Raised on every rank after the checkpoint of round STOP_AT: the run is cut short there."""


class SaveAndStop:
    """Saves a checkpoint after round ``at`` (collectively on MPI), then interrupts the run."""

    def __init__(self, path: Path, at: int) -> None:
        self.path, self.at = path, at

    def on_round_end(self, sim, t):
        pass

    def on_eval(self, sim, row):
        pass

    def on_round_complete(self, sim, t):
        if t + 1 == self.at:
            sim.save_checkpoint(self.path)
            raise Interrupted


def _sim_config(name: str):
    from decentlearn.sim import RunConfig
    return RunConfig.from_dict({**BASE, **{k: v for k, v in RUNS[name].items() if k != "transport"}})


def checkpoints(out: Path) -> None:
    """MPI runs interrupted by a checkpoint and resumed by a fresh MPI runner; an in-process
    checkpoint (written by tests/test_mpi.py before the launch) resumed on MPI."""
    from decentlearn.mpi.backend import MPIBackend
    from decentlearn.runner import Runner

    for name in RESUMED:
        config = _sim_config(name)
        path = out / f"ckpt_{name}.npz"
        try:
            Runner(config, backend=MPIBackend(timeout=30)).run([SaveAndStop(path, STOP_AT)])
            raise AssertionError("the run was not interrupted")
        except Interrupted:
            pass
        sim = Runner(config, backend=MPIBackend(timeout=30))
        sim.load_checkpoint(path)
        assert sim.next_round == STOP_AT
        result = sim.run()
        if sim.comm.rank == 0:
            np.save(out / f"resumed_{name}.npy", result.params)
            (out / f"resumed_{name}.json").write_text(json.dumps(result.history))
    sim = Runner(_sim_config("choco_topk"), backend=MPIBackend(timeout=30))
    sim.load_checkpoint(out / "inprocess_ckpt.npz")
    result = sim.run()
    if sim.comm.rank == 0:
        np.save(out / "resumed_from_inprocess.npy", result.params)


def checkpoint_cli(out: Path, args: list[str]) -> None:
    """The CLI: --checkpoint-every on a run of 2 rounds, --resume to 4 rounds; then --resume of a
    truncated and of a foreign checkpoint (rank 0's stderr kept in refused_*.txt)."""
    import contextlib
    import io
    import shutil

    from mpi4py import MPI

    from decentlearn.cli import main as cli
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    run = out / "ckcli"
    short = [*args, "--rounds", "2"]
    assert cli(["run", "--backend", "mpi", "--quiet", *short, "--checkpoint-every", "1",
                "--out", str(run)]) == 0
    assert cli(["run", "--backend", "mpi", "--quiet", "--resume", str(run), "--rounds",
                "4"]) == 0
    if rank == 0:
        for bad in ("truncated", "foreign"):
            shutil.copytree(run, out / bad)
        ck = out / "truncated" / "checkpoint.npz"
        ck.write_bytes(ck.read_bytes()[:ck.stat().st_size // 2])
        shutil.copy(out / f"ckpt_{RESUMED[0]}.npz", out / "foreign" / "checkpoint.npz")
    world.Barrier()
    for bad in ("truncated", "foreign"):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = cli(["run", "--backend", "mpi", "--quiet", "--resume", str(out / bad),
                        "--rounds", "6"])
        if rank == 0:
            (out / f"refused_{bad}.txt").write_text(f"{code}\n{err.getvalue()}")


#: The slow test's larger runs: more peers than ranks, a CNN, int8 layers, time-varying graphs.
BIG = dict(peers=16, rounds=6, eval_every=3, batch_size=16, seed=11, partition="dirichlet:0.3")
BIG_RUNS = {
    "big_choco_cnn": dict(algorithm="choco", compress="topk:0.05", gamma=0.2, model="cnn",
                          topology="one-peer-exponential"),
    "big_dpsgd_int8": dict(model="mlp", precision="int8", topology="exponential",
                           local_steps=2, nesterov=True),
    "big_allreduce_stc": dict(algorithm="allreduce", compress="ef:stc:0.1", model="mlp"),
}


def big(out: Path) -> None:
    from decentlearn.mpi.backend import MPIBackend
    from decentlearn.runner import Runner
    from decentlearn.sim import RunConfig

    for name, extra in BIG_RUNS.items():
        sim = Runner(RunConfig.from_dict({**BIG, **extra}), backend=MPIBackend(timeout=60))
        result = sim.run()
        if sim.comm.rank == 0:
            np.save(out / f"{name}.npy", result.params)
            (out / f"{name}.json").write_text(json.dumps(
                {k: v for k, v in result.summary.items() if k != "mpi"}))


#: --mpi-timeout of the run in which rank 2 stops answering.
STOP_TIMEOUT = 3


def stop_rank_2(where: Path) -> None:
    """Makes rank 2 stop itself (SIGSTOP: alive, silent) at its 6th minibatch, after writing
    every rank's pid and the time of the stop."""
    import signal
    import time

    from mpi4py import MPI

    from decentlearn.runner import Runner

    rank = MPI.COMM_WORLD.Get_rank()
    (where / f"rank{rank}.pid").write_text(str(os.getpid()))
    if rank != 2:
        return
    draw, calls = Runner.sample, [0]

    def sample(self):
        calls[0] += 1
        if calls[0] == 6:
            (where / "stopped_at").write_text(repr(time.time()))
            os.kill(os.getpid(), signal.SIGSTOP)
        return draw(self)
    Runner.sample = sample


def main() -> int:
    mode, where = sys.argv[1], Path(sys.argv[2])
    if mode == "all":
        import warnings
        warnings.simplefilter("ignore")  # setup warnings of the deliberately small runs
        primitives(where)
        algorithms(where)
        from decentlearn.cli import main as cli
        code = cli(["run", "--backend", "mpi", "--quiet", "--out", str(where / "cli"),
                    *sys.argv[3:]])
        if code:
            return code
        checkpoints(where)
        checkpoint_cli(where, sys.argv[3:])
        stop_rank_2(where)
        return cli(["run", "--backend", "mpi", "--quiet", *sys.argv[3:], "--out",
                    str(where / "stopped"), "--mpi-timeout", str(STOP_TIMEOUT), "--rounds",
                    "100000"])
    if mode == "big":
        import warnings
        warnings.simplefilter("ignore")
        big(where)
        return 0
    if mode == "train":
        from mpi4py import MPI
        (where / f"rank{MPI.COMM_WORLD.Get_rank()}.pid").write_text(str(os.getpid()))
        from decentlearn.cli import main as cli
        return cli(["run", "--backend", "mpi", "--quiet", *sys.argv[3:]])
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    sys.exit(main())
