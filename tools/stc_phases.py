"""Where STC's encode spends the time beyond its top-k: each stage timed alone, in one process.

    python tools/stc_phases.py [--threads N] [--n 25000000] [--repeat 15]

`decentlearn bench stc` compares STC.compress (top-k, then ops.stc_ternary for the signs and the
mean magnitude, then ops.golomb_encode for the positions) with ops.topk alone; issue 24 asks for at
most 1.3x at every thread count. For p = 0.01 and 0.001 of n values in one row this prints the
best time of each stage run alone on the outputs of the one before (the stages taking turns, so a
noisy machine slows them alike), the whole compress, what the stages do not account for (Python,
allocation), and the minor page faults per call of top-k and of compress (fresh output buffers
are faulted in on every call).
"""

from __future__ import annotations

import decentlearn  # noqa: F401  (before numpy: its OpenBLAS and OpenMP wait defaults)
import argparse
import resource
import time

import numpy as np

from decentlearn import ops
from decentlearn.compress import stc as stc_mod


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--n", type=int, default=25_000_000)
    p.add_argument("--repeat", type=int, default=15)
    args = p.parse_args()
    th = ops.resolve_threads(args.threads)
    x = np.random.default_rng(0).standard_normal((1, args.n), dtype=np.float32)
    print(f"STC encode stages, 1 x {args.n:,} float32, {th} threads, best of {args.repeat} (ms)")
    for ratio in (0.01, 0.001):
        c = stc_mod.STC(ratio)
        dim = x.shape[1]
        k = c.k(dim)
        b = ops.golomb_param(k, dim)
        idx, val = ops.topk(x, k, n_threads=th)
        idx = np.ascontiguousarray(idx, dtype=np.int32)
        _, _, neg = ops.stc_ternary(val, n_threads=th)
        stages = {
            "topk": lambda: ops.topk(x, k, n_threads=th),
            "stc_ternary": lambda: ops.stc_ternary(val, n_threads=th),
            "golomb_encode": lambda: ops.golomb_encode(idx, neg, dim, b, n_threads=th),
            "compress": lambda: c.compress(x, n_threads=th),
        }
        best = dict.fromkeys(stages, float("inf"))
        faults = dict.fromkeys(stages, 0)
        for _ in range(args.repeat):
            for name, fn in stages.items():
                f0 = _faults()
                t0 = time.perf_counter()
                fn()
                best[name] = min(best[name], time.perf_counter() - t0)
                faults[name] += _faults() - f0
        rest = best["compress"] - best["topk"] - best["stc_ternary"] - best["golomb_encode"]
        print(f"  p={ratio} (k={k:,}): " + "  ".join(
            f"{n} {1e3 * v:.3f} ({faults[n] / args.repeat:.0f} faults)" for n, v in best.items())
            + f"  unaccounted {1e3 * rest:.3f}; compress / topk "
            f"{best['compress'] / best['topk']:.2f}x", flush=True)


if __name__ == "__main__":
    main()
