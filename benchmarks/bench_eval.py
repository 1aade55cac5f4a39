"""Evaluation time against the thread count, and what its NumPy steps cost before they moved to C.

    python benchmarks/bench_eval.py [--threads 1,2,4,8,16] [--repeat 5] [--out FILE.json]

Cases (bench_threads.py's models on digits): the MLP on 1024 peers, the CNN on 64 peers. For each
thread count (the counts in turn, one simulator each, numpy's BLAS limited to the count) the time
of ``Simulator.evaluate()`` (every peer's model and the average model on their evaluation
samples, the consensus distance), best of ``repeat``. Beside it, in the same process on the same
parameters, the three NumPy steps the evaluation used until 27 Nov 2026, which run on one thread
whatever the count: the consensus distance (astype/mean/einsum over column chunks), the peers'
mean (``X.mean(axis=0, dtype=float64)``) and the accuracies' ``np.argmax`` over the logits; and
the C pass that replaced the first two (``ops.consensus_distance`` with ``mean``).
"""

from __future__ import annotations

import decentlearn  # noqa: F401  (before numpy: its OpenBLAS and OpenMP wait defaults)
import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from bench_threads import BASE, _cpu
from decentlearn import ops
from decentlearn.sim import RunConfig, Simulator

CASES = {"mlp-1024": dict(peers=1024, model="mlp"), "cnn-64": dict(peers=64, model="cnn")}


def numpy_consensus(X: np.ndarray, chunk: int = 1 << 14) -> float:
    """metrics.consensus_distance as it was until 27 Nov 2026 (NumPy, one thread)."""
    total = 0.0
    for c in range(0, X.shape[1], chunk):
        block = X[:, c:c + chunk].astype(np.float64)
        block -= block.mean(axis=0)
        total += float(np.einsum("ij,ij->", block, block))
    return total / X.shape[0]


def _seconds(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", default="1,2")
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args()
    counts = [int(x) for x in args.threads.split(",")]
    report = {"cpu": _cpu(), "threads": counts, "cases": {}}
    for name in args.cases.split(","):
        sims = []
        for n in counts:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sims.append(Simulator(RunConfig(**{**BASE, **CASES[name], "threads": n})))
        X = sims[0].params
        n_eval = len(sims[0]._eval_peer_idx)  # the peers' evaluation samples
        logits = np.random.default_rng(0).standard_normal((X.shape[0], n_eval, 10), np.float32)
        labels = np.zeros(n_eval, np.int64)
        mean = np.empty(X.shape[1])
        best = {n: {} for n in counts}
        for _ in range(args.repeat):
            for i, n in enumerate(counts):
                with threadpool_limits(limits=n, user_api="blas"):
                    b = best[n]
                    t = {"evaluate": _seconds(sims[i].evaluate),
                         "numpy consensus": _seconds(lambda: numpy_consensus(X)),
                         "numpy mean": _seconds(lambda: X.mean(axis=0, dtype=np.float64)),
                         "numpy argmax": _seconds(
                             lambda: np.count_nonzero(np.argmax(logits, -1) == labels, 1)),
                         "C consensus+mean": _seconds(
                             lambda n=n: ops.consensus_distance(X, mean=mean, n_threads=n))}
                    for k, v in t.items():
                        b[k] = min(b.get(k, float("inf")), v)
        rows = [{"threads": n, **{k: 1e3 * v for k, v in best[n].items()}} for n in counts]
        report["cases"][name] = rows
        print(f"{name} (ms, best of {args.repeat}; X {X.shape[0]} x {X.shape[1]}, {n_eval} "
              f"evaluation samples per peer)")
        for r in rows:
            print(f"  {r['threads']:>2}t  " + "  ".join(
                f"{k} {v:.2f}" for k, v in r.items() if k != "threads"), flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
