"""Round time against the thread count, and the same numbers at every thread count.

    python benchmarks/bench_threads.py [--threads 1,2,4,8,16] [--repeat 3] [--out FILE.json]

Cases (each a D-PSGD ring round on digits: sampling, loss_and_grad, momentum SGD, gossip): the MLP
on 256 and on 1024 peers, the CNN on 64 peers (the default); and the 1024-peer MLP with Adam,
LAMB or LARS instead of SGD (``--cases mlp-1024-adam,mlp-1024-lamb,mlp-1024-lars``); the
256-peer MLP round of every algorithm (``--cases algorithms``). For every
thread count the kernels get that many threads (``RunConfig(threads=N)``) and numpy's BLAS the
same (threadpoolctl); the time is the best of ``repeat`` blocks of rounds, in one process, and the
speed-up is against 1 thread. The thread counts take their blocks in turn (one simulator per
count, block i of every count before block i + 1 of any), so a noisy neighbour slows them alike
(on the lent 16-core VMs one count measured alone moved 1.5x within a minute). The parameters
after the timed rounds are compared across thread counts: they must be bit-identical. A second
line gives the median block and the speed-up of the medians: where the two lines disagree, the
machine was noisy (on the lent 16-core VM the one-thread block moved most).
Uses only the public facade (``decentlearn.sim``), so it runs on any version of the package.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
import warnings
from pathlib import Path

import decentlearn  # noqa: F401  (before numpy: its OpenBLAS and OpenMP wait defaults)
import numpy as np
from threadpoolctl import threadpool_limits

from decentlearn.sim import RunConfig, Simulator

CASES = {
    "mlp-256": dict(peers=256, model="mlp"),
    "mlp-1024": dict(peers=1024, model="mlp"),
    "cnn-64": dict(peers=64, model="cnn"),
    "mlp-1024-adam": dict(peers=1024, model="mlp", optimizer="adam", lr=0.002),
    "mlp-1024-lamb": dict(peers=1024, model="mlp", optimizer="lamb", lr=0.002),
    "mlp-1024-lars": dict(peers=1024, model="mlp", optimizer="lars", lr=0.5),
}
#: The 256-peer MLP round of every algorithm (``--cases algorithms``), with the gate's options.
ALGORITHM_OPTIONS = {
    "allreduce": {}, "choco": dict(compress="topk:0.1", gamma=0.5),
    "compngc": dict(compress="topk:0.1"), "d2": dict(momentum=0.0), "dacfl": {}, "dpsgd": {},
    "dsgt": {}, "epidemic": dict(topology="epidemic:3"), "fedavg": dict(participation=0.5),
    "fedhisyn": dict(categories=3), "ngc": {}, "pushsum": dict(topology="one-peer-exponential"),
    "skewscout": {}, "stc-fl": dict(compress="stc:0.05", participation=0.5),
}
CASES.update({f"mlp-256-{name}": dict(peers=256, model="mlp", algorithm=name, **options)
              for name, options in ALGORITHM_OPTIONS.items()})
DEFAULT = ("mlp-256", "mlp-1024", "cnn-64")
BASE = dict(dataset="digits", topology="ring", partition="iid", batch_size=32, lr=0.05,
            momentum=0.9, seed=0, rounds=1000)


def _cpu() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def measure(case: dict, counts: list[int], rounds: int,
            repeat: int) -> list[tuple[float, float, np.ndarray]]:
    """Per thread count of ``counts``: (best and median seconds per round over the timed blocks,
    parameters after warm-up and all timed rounds); the counts run their timed blocks in turn."""
    sims = []
    for n in counts:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sims.append(Simulator(RunConfig(**{**BASE, **case, "threads": n})))
    times: list[list[float]] = [[] for _ in counts]
    t = [0] * len(counts)

    def block(i: int, n_rounds: int) -> float:
        alg = sims[i].algorithm
        with threadpool_limits(limits=counts[i], user_api="blas"):
            alg.round(sims[i].sample, t[i])  # an untimed round: this count's team wakes up
            t[i] += 1
            t0 = time.perf_counter()
            for _ in range(n_rounds):
                alg.round(sims[i].sample, t[i])
                t[i] += 1
            return (time.perf_counter() - t0) / max(n_rounds, 1)

    for i in range(len(counts)):
        block(i, 1)  # warm-up: first touch, caches
    for _ in range(repeat):
        for i in range(len(counts)):
            times[i].append(block(i, rounds))
    return [(min(times[i]), statistics.median(times[i]), sims[i].algorithm.params.copy())
            for i in range(len(counts))]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument("--cases", default=",".join(DEFAULT),
                   help=f"comma-separated case names, of {', '.join(CASES)}")
    p.add_argument("--rounds", type=int, default=5, help="rounds per timed block")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args()
    counts = [int(x) for x in args.threads.split(",")]
    report = {"cpu": _cpu(), "threads": counts, "cases": {}}
    names = args.cases.split(",")
    if names == ["algorithms"]:
        names = [f"mlp-256-{name}" for name in ALGORITHM_OPTIONS]
    for name in names:
        rows, ref = [], None
        for n, (seconds, median, params) in zip(counts, measure(CASES[name], counts, args.rounds,
                                                                 args.repeat)):
            same = True if ref is None else bool(np.array_equal(params, ref))
            ref = params if ref is None else ref
            rows.append({"threads": n, "ms_per_round": 1e3 * seconds,
                         "ms_per_round_median": 1e3 * median, "bit_identical": same})
        base, base_median = rows[0]["ms_per_round"], rows[0]["ms_per_round_median"]
        for row in rows:
            row["speedup"] = base / row["ms_per_round"]
            row["speedup_median"] = base_median / row["ms_per_round_median"]
        report["cases"][name] = rows
        print(f"{name:>9}: " + "  ".join(
            f"{r['threads']}t {r['ms_per_round']:.2f} ms ({r['speedup']:.2f}x"
            f"{'' if r['bit_identical'] else ', DIFFERENT'})" for r in rows), flush=True)
        print(f"{'median':>9}: " + "  ".join(
            f"{r['threads']}t {r['ms_per_round_median']:.2f} ms ({r['speedup_median']:.2f}x)"
            for r in rows), flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
