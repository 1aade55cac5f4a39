"""Int8 GEMM benchmark: decentlearn's exact int8 GEMM (with the fp32 -> int8 quantization of A,
its packing and the fused dequantization included) vs NumPy float32 matmul, in one process.

    python benchmarks/bench_gemm.py [--repeat 15] [--threads N]

Shapes (m x k x n): 1024^3, 256 x 784 x 256, and an MLP layer 784 -> 128 with batch 512: forward
X W (512 x 784 x 128), backward dX = dY W^T (512 x 128 x 784) and dW = X^T dY (784 x 512 x 128;
operands made C-contiguous before timing). Rows per shape:
- numpy: ``np.matmul(x, w, out=y)`` in float32 (OpenBLAS sgemm), the baseline;
- pipeline: absmax_scale(x) + quantize_s8(x) + gemm_s8_f32(xq, packed W, per-column scales), W
  quantized and packed once beforehand (weights reused across steps);
- pipeline+packB: the same plus quantizing and packing B inside each call (both operands fresh,
  as in the weight gradient);
- kernel: gemm_s8 alone, int32 out, A pre-quantized, B pre-packed; kernel_f32: the fused variant.
GOP/s counts 2 m n k; the fraction is of the measured int8 VNNI peak (934 GOP/s on this machine's
2 cores, DECENTLEARN_VNNI_PEAK_GOPS to change). Best and median of ``repeat`` warm runs. Saves JSON
to benchmarks/results/gemm.json. Speeds are never asserted in tests; this is where they are read.
"""

import argparse
import json
import os
from pathlib import Path

import numpy as np

from decentlearn import bench, config, ops

VNNI_PEAK_GOPS = float(os.environ.get("DECENTLEARN_VNNI_PEAK_GOPS", "934"))
SHAPES = [("1024^3", 1024, 1024, 1024), ("256x784x256", 256, 784, 256),
          ("mlp fwd XW", 512, 784, 128), ("mlp bwd dYW^T", 512, 128, 784),
          ("mlp bwd X^TdY", 784, 512, 128)]


def bench_shape(name: str, m: int, k: int, n: int, rng, threads: int, repeat: int) -> list[dict]:
    """Times every variant on one (m, k, n) shape; prints a line per variant, returns the rows."""
    x = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((k, n), dtype=np.float32)
    y = np.empty((m, n), np.float32)
    w_scale = ops.absmax_scale(w, axis=1)
    pb = ops.pack_b_s8(ops.quantize_s8(w, w_scale, axis=1), n_threads=threads)
    xq = np.empty((m, k), np.int8)
    c = np.empty((m, n), np.int32)
    s0 = ops.absmax_scale(x)
    ops.quantize_s8(x, s0, out=xq)

    def pipeline():
        s = ops.absmax_scale(x, n_threads=threads)
        ops.quantize_s8(x, s, out=xq, n_threads=threads)
        ops.gemm_s8_f32(xq, pb, s, w_scale, out=y, n_threads=threads)

    def pipeline_pack_b():
        ws = ops.absmax_scale(w, axis=1, n_threads=threads)
        pbb = ops.pack_b_s8(ops.quantize_s8(w, ws, axis=1, n_threads=threads), threads)
        s = ops.absmax_scale(x, n_threads=threads)
        ops.quantize_s8(x, s, out=xq, n_threads=threads)
        ops.gemm_s8_f32(xq, pbb, s, ws, out=y, n_threads=threads)

    variants = [
        ("numpy", lambda: np.matmul(x, w, out=y)),
        ("pipeline", pipeline),
        ("pipeline+packB", pipeline_pack_b),
        ("kernel", lambda: ops.gemm_s8(xq, pb, out=c, n_threads=threads)),
        ("kernel_f32", lambda: ops.gemm_s8_f32(xq, pb, s0, w_scale, out=y, n_threads=threads)),
    ]
    rows, np_best, ops_count = [], None, 2.0 * m * n * k
    for vname, fn in variants:
        best, med = bench._time(fn, repeat)
        np_best = best if np_best is None else np_best
        gops = ops_count / best / 1e9
        rows.append({"shape": name, "m": m, "k": k, "n": n, "variant": vname, "best_s": best,
                     "median_s": med, "gops": gops, "ratio_vs_numpy": np_best / best,
                     "fraction_of_vnni_peak": gops / VNNI_PEAK_GOPS})
        print(f"{name:15s} {vname:15s} {1e3 * best:8.3f} {1e3 * med:8.3f} {gops:6.0f} "
              f"{np_best / best:7.2f}x {gops / VNNI_PEAK_GOPS:6.0%}")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "gemm.json"))
    args = p.parse_args()
    threads = ops.resolve_threads(args.threads)
    cfg = config()
    report = {"benchmark": "gemm", "threads": threads, "isa": cfg["isa"],
              "numpy_blas": cfg["numpy_blas"], "numpy": cfg["numpy"],
              "vnni_peak_gops": VNNI_PEAK_GOPS, "rows": []}
    print(f"int8 GEMM vs numpy float32 matmul, {threads} threads, ISA {cfg['isa']}, "
          f"numpy {cfg['numpy']} ({cfg['numpy_blas']}); best of {args.repeat}")
    print(f"{'shape':15s} {'variant':15s} {'best ms':>8s} {'med ms':>8s} {'GOP/s':>6s} "
          f"{'vs numpy':>8s} {'of VNNI':>7s}")
    rng = np.random.default_rng(0)
    for name, m, k, n in SHAPES:
        report["rows"] += bench_shape(name, m, k, n, rng, threads, args.repeat)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nreport saved to {out}")


if __name__ == "__main__":
    main()
