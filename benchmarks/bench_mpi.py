"""Wall-clock per round of D-PSGD on a ring vs all-reduce on real MPI ranks (loopback), with and
without compression, at 2, 4 and 8 ranks; compared with the simulated time of the network model
(decentlearn.network) calibrated to the same loopback. Also: p2p Isend/Irecv vs a neighbour
collective (distributed-graph communicator) for the ring exchange.

    python benchmarks/bench_mpi.py [--ranks 2 4 8] [--rounds 30] [--out benchmarks/results/mpi.json]

The driver launches ``mpiexec -n R`` per rank count (root and oversubscription allowed: on a
machine with fewer cores than ranks the ranks share cores, and the times say so). Each rank hosts
one peer. The simulated time uses a network TOML with the loopback's measured one-way latency and
bandwidth (ping-pong between ranks 0 and 1) and the measured training speed, so the gap between
measured and simulated time is the model's error on this machine (plus the load of the machine).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's package (run from a clone without installing)
CONFIGS = [("dpsgd", "none"), ("dpsgd", "int8"), ("allreduce", "none"),
           ("allreduce", "int8")]
BASE = dict(dataset="digits", model="mlp", topology="ring", batch_size=32, eval_every=1000,
            partition="iid", seed=0, lr=0.05)


def _worker(args) -> None:
    from mpi4py import MPI

    from decentlearn import topology as topo
    from decentlearn.mpi.comm import MPIComm
    from decentlearn.mpi.backend import MPIBackend
    from decentlearn.runner import Runner
    from decentlearn.sim import RunConfig

    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    out: dict = {"ranks": size}
    warnings.simplefilter("ignore")
    dim = Runner(RunConfig(**BASE, peers=size, rounds=1), backend=MPIBackend()).model.dim

    # Loopback ping-pong between ranks 0 and 1: one-way latency (8 B) and bandwidth (4·dim B).
    def pingpong(nbytes: int, reps: int) -> float:
        buf = np.zeros(nbytes, dtype=np.uint8)
        world.Barrier()
        t0 = time.perf_counter()
        for _ in range(reps):
            if rank == 0:
                world.Send(buf, 1)
                world.Recv(buf, 1)
            elif rank == 1:
                world.Recv(buf, 0)
                world.Send(buf, 0)
        return (time.perf_counter() - t0) / (2 * reps)
    lat = pingpong(8, 200)
    big = pingpong(1 << 22, 10)  # 4 MiB: the transfer, not the latency, dominates
    out["latency_ms"] = lat * 1e3
    out["bandwidth_mbps"] = 8 * (1 << 22) / max(big - lat, 1e-9) / 1e6
    out["dim"] = dim

    # The ring exchange of one row through MPIComm.mix, with each transport: Isend/Irecv
    # ("p2p") and Ineighbor_alltoallv on a distributed-graph communicator ("neighbor").
    graph = topo.make("ring", size)
    comms = {name: MPIComm(graph, n_threads=1, timeout=120, transport=name)
             for name in ("p2p", "neighbor")}
    X = np.random.default_rng(rank).standard_normal((1, dim)).astype(np.float32)
    reps, warm = 200, 20  # warm-up: Open MPI connects lazily on the first message

    def time_mix(comm) -> float:
        Y = X.copy()
        for t in range(warm):
            Y = comm.mix(Y, t)
        comm.barrier()
        t0 = time.perf_counter()
        for t in range(reps):
            Y = comm.mix(Y, t)
        return (time.perf_counter() - t0) / reps
    # Alternate the two, three times each, and keep each one's best (the machine is shared).
    best = {name: float("inf") for name in comms}
    for _ in range(3):
        for name, comm in comms.items():
            best[name] = min(best[name], time_mix(comm))
    comms["neighbor"].close()
    out["exchange_seconds"] = best

    runs = []
    for algorithm, spec in CONFIGS:
        sim = Runner(RunConfig(**BASE, peers=size, rounds=args.rounds, algorithm=algorithm,
                               compress=spec), backend=MPIBackend(timeout=120))
        result = sim.run()
        if rank == 0:
            timings = result.summary["mpi"]["timings_seconds"]
            per_round = max(r["rounds_total"] for r in timings) / args.rounds
            compute = float(np.mean([r["compute"] for r in timings])) / args.rounds
            runs.append({"algorithm": algorithm, "compress": spec,
                         "round_seconds": per_round, "compute_seconds": compute,
                         "bytes_sent_total": result.summary["bytes_sent_total"],
                         "phases": {k: float(np.mean([r[k] for r in timings])) / args.rounds
                                    for k in ("compute", "compress", "communicate", "wait")}})
    out["runs"] = runs
    if rank == 0:
        Path(args.json).write_text(json.dumps(out))


def _simulated(rounds: int, peers: int, run: dict, measured: dict) -> dict:
    """Simulated seconds per round of the same run on the network model: the calibrated
    loopback TOML and the datacenter preset."""
    from decentlearn.sim import RunConfig, simulate
    samples = BASE["batch_size"]  # one local step per round
    sps = samples / max(run["compute_seconds"], 1e-9)
    toml = (f'name = "loopback"\nlatency_ms = {measured["latency_ms"]:.6g}\n'
            f'bandwidth_mbps = {measured["bandwidth_mbps"]:.6g}\ncompute_sps = {sps:.6g}\n'
            'nic = "shared"\n')
    res = {}
    with tempfile.TemporaryDirectory() as d, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = Path(d) / "loopback.toml"
        path.write_text(toml)
        for name, net in (("loopback", str(path)), ("datacenter", "datacenter")):
            r = simulate(RunConfig(**BASE, peers=peers, rounds=rounds, algorithm=run["algorithm"],
                                   compress=run["compress"], network=net))
            res[name] = r.summary["sim_seconds"] / rounds
    return res


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "mpi.json"))
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--json", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        _worker(args)
        return 0
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_mpi_yield_when_idle="1", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    report = {"machine": {"cpu_count": cores, "platform": platform.platform(),
                          "load_average_1min_at_start": load,
                          "note": "ranks > cores are oversubscribed (share cores)"},
              "rounds": args.rounds, "base": BASE, "results": []}
    print(f"# bench_mpi: {cores} cores, load {load}; ranks > {cores} are oversubscribed")
    print(f"{'ranks':>5} {'algorithm':>10} {'compress':>9} {'round ms':>9} {'sim loopback':>12} "
          f"{'ratio':>6} {'sim datacenter':>14}")
    for size in args.ranks:
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "out.json"
            cmd = ["mpiexec", "--oversubscribe", "-n", str(size), sys.executable, "-m", "mpi4py",
                   __file__, "--worker", "--rounds", str(args.rounds), "--json", str(path)]
            subprocess.run(cmd, env=env, check=True, cwd=ROOT)
            got = json.loads(path.read_text())
        for run in got["runs"]:
            sim = _simulated(args.rounds, size, run, got)
            run["sim_round_seconds"] = sim
            run["measured_over_sim_loopback"] = run["round_seconds"] / sim["loopback"]
            print(f"{size:>5} {run['algorithm']:>10} {run['compress']:>9} "
                  f"{1e3 * run['round_seconds']:>9.2f} {1e3 * sim['loopback']:>12.2f} "
                  f"{run['measured_over_sim_loopback']:>6.2f} {1e3 * sim['datacenter']:>14.2f}")
        ex = got["exchange_seconds"]
        print(f"{size:>5} ring mix of one row ({got['dim']} floats): p2p "
              f"{1e6 * ex['p2p']:.0f} us, neighbour collective "
              f"{1e6 * ex['neighbor']:.0f} us (ratio "
              f"{ex['neighbor'] / ex['p2p']:.2f}); loopback "
              f"{got['latency_ms'] * 1e3:.0f} us one way, {got['bandwidth_mbps']:.0f} Mbit/s")
        report["results"].append(got)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"# saved {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
