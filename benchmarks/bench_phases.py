"""Where a round's time goes at each thread count: every phase of a D-PSGD ring round timed inside
the round (sampling, the model's ``loss_and_grad``, the optimizer step, gossip, the rest).

    python benchmarks/bench_phases.py [--threads 1,2,4,8,16] [--cases mlp-1024,cnn-64]
                                      [--rounds 50] [--layers] [--out FILE.json]

The cases are bench_threads.py's (digits, batch 32, momentum SGD). For every thread count the
kernels get that many threads (``RunConfig(threads=N)``) and numpy's BLAS the same
(threadpoolctl). Each phase is timed by wrapping the bound method the round calls, so the figures
add up to the round (``other`` is what no wrapper saw: Python between the phases). A phase that
does not shrink with the thread count is what caps the round's speed-up. ``--layers`` also times
each layer's forward and backward pass inside ``loss_and_grad`` (``L3 Conv2d.backward``, ...).
"""

from __future__ import annotations

import argparse
import collections
import json
import time
import warnings
from pathlib import Path

import decentlearn  # noqa: F401  (before numpy: its OpenBLAS and OpenMP wait defaults)
from threadpoolctl import threadpool_limits

from bench_threads import BASE, CASES, _cpu
from decentlearn.sim import RunConfig, Simulator


def phases(case: dict, threads: int, rounds: int, layers: bool = False) -> dict:
    """Milliseconds per round of each phase (and ``round``, the whole), after 5 warm-up rounds."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sim = Simulator(RunConfig(**{**BASE, **case, "threads": threads}))
    alg = sim.algorithm
    seconds = collections.defaultdict(float)

    def timed(fn, key):
        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            out = fn(*args, **kwargs)
            seconds[key] += time.perf_counter() - t0
            return out
        return wrapper

    sample = timed(sim.sample, "sample")
    alg.model.loss_and_grad = timed(alg.model.loss_and_grad, "loss_and_grad")
    alg.apply = timed(alg.apply, "optimizer")
    alg.comm.mix = timed(alg.comm.mix, "gossip")
    if layers:  # the layers are frozen dataclasses: their methods are replaced on the instance
        for i, layer in enumerate(alg.model._layers):
            for name in ("forward", "backward"):
                key = f"L{i} {type(layer).__name__}.{name}"
                object.__setattr__(layer, name, timed(getattr(layer, name), key))
    with threadpool_limits(limits=threads, user_api="blas"):
        for t in range(5):
            alg.round(sample, t)
        seconds.clear()
        t0 = time.perf_counter()
        for t in range(5, 5 + rounds):
            alg.round(sample, t)
        total = time.perf_counter() - t0
    out = {k: 1e3 * v / rounds for k, v in seconds.items()}
    out["other"] = 1e3 * total / rounds - sum(v for k, v in out.items() if not k.startswith("L"))
    out["round"] = 1e3 * total / rounds
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument("--cases", default="mlp-1024,cnn-64", help="comma-separated case names")
    p.add_argument("--rounds", type=int, default=50, help="timed rounds per thread count")
    p.add_argument("--layers", action="store_true", help="also time each layer's passes")
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args()
    counts = [int(x) for x in args.threads.split(",")]
    report = {"cpu": _cpu(), "threads": counts, "cases": {}}
    for name in args.cases.split(","):
        rows = {n: phases(CASES[name], n, args.rounds, args.layers) for n in counts}
        report["cases"][name] = rows
        keys = ["round", "sample", "loss_and_grad", "optimizer", "gossip", "other"]
        print(f"{name} (ms per round; speed-up against {counts[0]} thread(s))")
        print("  threads " + "".join(f"{k:>20}" for k in keys))
        for n, row in rows.items():
            cells = "".join(
                f"{row[k]:>11.3f} ({rows[counts[0]][k] / row[k] if row[k] > 0 else 0:4.1f}x)"
                for k in keys)
            print(f"  {n:>7} {cells}", flush=True)
        layer_keys = [k for k in rows[counts[0]] if k.startswith("L")]
        for key in sorted(layer_keys, key=lambda k: (int(k.split()[0][1:]), k)):
            print(f"  {key:>24}: " + "  ".join(
                f"{n}t {rows[n][key]:.3f} ms ({rows[counts[0]][key] / rows[n][key]:4.1f}x)"
                for n in counts), flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
