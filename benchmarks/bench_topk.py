"""Top-k benchmark: ops.topk vs np.argpartition(np.abs(x), -k) on one long row, side by side in
one process; also random-k and threshold throughput.

    python benchmarks/bench_topk.py [--sizes 10000000,25000000] [--ratios 0.001,0.01]
                                    [--repeat 7] [--threads N] [--out FILE.json]

Best of --repeat warm runs (the spread, worst/best, is printed: the machine is shared). GB/s
counts the row's bytes read once; the machine's read-only bandwidth is 33 GB/s (2 cores).
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np

from decentlearn import _core, ops

READ_BW = 33.0  # GB/s, read-only, this machine


def timed(fn, repeat):
    fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts), max(ts) / min(ts)


def blas_name() -> str:
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    except Exception:  # older numpy: no dict mode
        return "unknown"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="10000000,25000000")
    p.add_argument("--ratios", default="0.001,0.01")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "topk.json"))
    args = p.parse_args()
    threads = ops.resolve_threads(args.threads)
    cfg = _core.config()
    print(f"decentlearn isa={cfg['isa']} threads={threads}; numpy {np.__version__} "
          f"(BLAS: {blas_name()}); best of {args.repeat}")
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        x = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
        gb = x.nbytes / 1e9
        for ratio in (float(r) for r in args.ratios.split(",")):
            k = max(1, int(round(ratio * n)))
            t_c, s_c = timed(lambda: ops.topk(x, k, n_threads=threads), args.repeat)
            t_np, s_np = timed(lambda: np.argpartition(np.abs(x), -k), max(2, args.repeat // 2))
            t_r, s_r = timed(lambda: ops.randk(x, k, seed=1, n_threads=threads), args.repeat)
            v = float(np.sort(np.abs(x[::97]))[-max(1, len(x[::97]) * k // n)])
            t_t, s_t = timed(lambda: ops.threshold(x, v, n_threads=threads), args.repeat)
            row = {"n": n, "k": k, "ratio": ratio,
                   "topk_ms": t_c * 1e3, "argpartition_ms": t_np * 1e3, "speedup": t_np / t_c,
                   "topk_GBps": gb / t_c, "topk_frac_read_bw": gb / t_c / READ_BW,
                   "randk_ms": t_r * 1e3, "randk_Gidx_per_s": n / t_r / 1e9,
                   "threshold_ms": t_t * 1e3, "threshold_GBps": gb / t_t,
                   "threshold_frac_read_bw": gb / t_t / READ_BW,
                   "spread_worst_over_best": {"topk": s_c, "argpartition": s_np, "randk": s_r,
                                              "threshold": s_t}}
            rows.append(row)
            print(f"n={n:>9,} k={k:>7,}: topk {t_c * 1e3:7.2f} ms ({gb / t_c:5.1f} GB/s = "
                  f"{gb / t_c / READ_BW:4.0%} of {READ_BW:.0f})  argpartition {t_np * 1e3:7.1f} ms"
                  f"  -> {t_np / t_c:5.1f}x | randk {t_r * 1e3:6.2f} ms | threshold "
                  f"{t_t * 1e3:6.2f} ms ({gb / t_t:5.1f} GB/s) | spread topk {s_c:.2f} "
                  f"argpart {s_np:.2f}")
    report = {"benchmark": "topk", "isa": cfg["isa"], "threads": threads,
              "numpy": np.__version__, "blas": blas_name(), "repeat": args.repeat,
              "read_bandwidth_GBps": READ_BW, "rows": rows}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"report saved to {out}")


if __name__ == "__main__":
    main()
