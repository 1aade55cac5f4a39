"""Int8 GEMM benchmark: decentlearn's exact int8 GEMM (with the fp32 -> int8 quantization of A,
its packing and the fused dequantization included) against NumPy float32 matmul.

    python benchmarks/bench_gemm.py [--repeat 15] [--threads N] [--paths avx512vnni,amx]
                                                                      (or: decentlearn bench gemm)

Shapes (m x k x n): 1024^3, 256 x 784 x 256, and an MLP layer 784 -> 128 with batch 512: forward
X W, backward dX = dY W^T and dW = X^T dY. Rows per shape: pipeline (absmax + quantize + pack of
A, fused dequantizing gemm_s8_f32 with W quantized and packed once), pipeline+packB (W too in
every call), kernel (gemm_s8 alone, int32 out), kernel_f32 (the fused kernel alone); GOP/s
counts 2 m n k.

Limits (copy bandwidth: C streaming copy and np.copyto; numpy sgemm with its BLAS and threads;
the int8 peak of the active ISA, all threads over one time window) are measured first in the same
process; every row gives its baselines' times, the speedup and the fraction of the matching
limit. Best and median of --repeat
round-robin runs (the machine may be shared: read ratios, not absolute times). Saves JSON to
benchmarks/results/gemm.json (--out to change). Speeds are never asserted in tests; this is
where they are read. The measurement is decentlearn.experiments.bench.bench_gemm.

Per ISA path (--paths; default the active one, and avx512vnni beside amx on an AMX CPU): the
first shape's pipeline and kernel on each path, round-robin with numpy sgemm in one process, each
as a fraction of that path's own measured peak, and the ratio to the first path.
"""

import argparse

from decentlearn.experiments import bench


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--paths", default=None,
                   help="comma-separated ISA paths to compare on the first shape (default: the "
                        "active one; avx512vnni,amx where amx is active)")
    p.add_argument("--out", default=None, help="JSON report (default benchmarks/results/gemm.json)")
    args = p.parse_args()
    paths = None if args.paths is None else tuple(args.paths.split(","))
    report = bench.bench_gemm(repeat=args.repeat, n_threads=args.threads, paths=paths)
    print(bench.format_report(report))
    print(f"\nreport saved to {bench.save_json(report, 'gemm', args.out)}")


if __name__ == "__main__":
    main()
