"""A/B of the cache rule for large outputs: rounds with the last-level cache size read from /sys
(gossip keeps Y in the caches when 4 matrices of its size fit) against rounds with it set to 0
(Y over 16 MB always bypasses the caches: the rule until 27 Nov 2026), in one process, the two
variants' timed blocks alternated.

    python benchmarks/ab_llc.py [--cases mlp-1024,mlp-256] [--threads 1,16] [--blocks 7]
                                [--rounds 20] [--out FILE.json]

Prints ms per round (best block) per case, thread count and variant, their ratio, and whether the
parameters after the same rounds are bit-identical (they must be: only where stores go differs).
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import decentlearn  # noqa: F401  (before numpy: its OpenBLAS and OpenMP wait defaults)
import numpy as np
from threadpoolctl import threadpool_limits

from bench_threads import BASE, CASES, _cpu
from decentlearn import _core
from decentlearn.sim import RunConfig, Simulator


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default="mlp-1024,mlp-256")
    p.add_argument("--threads", default="1,16")
    p.add_argument("--blocks", type=int, default=7)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--out")
    a = p.parse_args()
    llc = _core.config()["llc_bytes"]  # read from /sys at import
    print(f"CPU {_cpu()}; last-level cache {llc / 2**20:.0f} MiB (from /sys); ISA path "
          f"{_core.config()['isa']}", flush=True)
    variants = {"llc": llc, "llc=0": 0}
    report = {"cpu": _cpu(), "llc_bytes": llc, "cases": {}}
    for name in a.cases.split(","):
        for n in [int(t) for t in a.threads.split(",")]:
            sims, t, best = {}, {}, {}
            for v in variants:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    sims[v] = Simulator(RunConfig(**{**BASE, **CASES[name], "threads": n}))
                t[v], best[v] = 0, float("inf")
            with threadpool_limits(limits=n, user_api="blas"):
                for b in range(a.blocks + 1):
                    for v, size in variants.items():
                        _core.set_llc_bytes(size)
                        alg, sample = sims[v].algorithm, sims[v].sample
                        alg.round(sample, t[v])  # untimed: this team wakes up
                        t[v] += 1
                        t0 = time.perf_counter()
                        for _ in range(a.rounds):
                            alg.round(sample, t[v])
                            t[v] += 1
                        if b:  # block 0 warms up
                            best[v] = min(best[v], (time.perf_counter() - t0) / a.rounds)
            _core.set_llc_bytes(-1)
            same = np.array_equal(sims["llc"].algorithm.params, sims["llc=0"].algorithm.params)
            ms = {v: 1e3 * s for v, s in best.items()}
            report["cases"][f"{name}/{n}t"] = {"ms": ms, "bit_identical": same}
            print(f"{name:>9} {n:>2}t: with the cache size {ms['llc']:.3f} ms, with 0 "
                  f"{ms['llc=0']:.3f} ms per round -> {ms['llc=0'] / ms['llc']:.2f}x"
                  f"{'' if same else '  PARAMETERS DIFFER'}", flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
