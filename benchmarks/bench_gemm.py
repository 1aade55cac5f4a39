"""Int8 GEMM benchmark: decentlearn's exact int8 GEMM (with the fp32 -> int8 quantization of A,
its packing and the fused dequantization included) vs NumPy float32 matmul, in one process.

    python benchmarks/bench_gemm.py [--repeat 15] [--threads N]      (or: decentlearn bench gemm)

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
2 cores, DECENTLEARN_VNNI_PEAK_GOPS to change). Best and median of ``repeat`` warm runs. The
measurement is ``decentlearn.bench.bench_gemm``. Saves JSON to benchmarks/results/gemm.json.
Speeds are never asserted in tests; this is where they are read.
"""

import argparse
import json
from pathlib import Path

from decentlearn import bench


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "gemm.json"))
    args = p.parse_args()
    report = bench.bench_gemm(repeat=args.repeat, n_threads=args.threads)
    print(bench.format_gemm_report(report))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nreport saved to {out}")


if __name__ == "__main__":
    main()
