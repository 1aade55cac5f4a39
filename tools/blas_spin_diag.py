"""Does numpy's BLAS, spinning after a call, slow the C kernels that run right after it?

    python tools/blas_spin_diag.py [--threads N] [--repeat 15]

`decentlearn bench gemm` times gemm_s8 round-robin with numpy's sgemm (the baseline, in the same
process). OpenBLAS's worker threads keep spinning for a while after each call (its
OPENBLAS_THREAD_TIMEOUT; 2^28 cycles by default); with as many BLAS threads as cores, an OpenMP
team started right after then shares the cores with them. On the lent 16-core Xeon (27 Nov 2026)
the int32 gemm_s8 measured 603 GOP/s in such a round-robin, against 5,292 for the pipeline that
runs the same kernel after two quantization passes. This script times the int8 GEMM (1024^3, A
quantized, B packed once) on each int8 ISA path at N threads: alone (call after call), right
after an sgemm with N BLAS threads, right after an sgemm with 1 BLAS thread, and after an sgemm
with N threads followed by a 0.3 s pause (spinning threads have gone to sleep, the kernel's own
team too: a cold start), each best and median of ``repeat``. numpy is imported before
decentlearn here, so OpenBLAS keeps its own default unless OPENBLAS_THREAD_TIMEOUT is set
(decentlearn's default, 16, applies only when decentlearn is imported first).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from threadpoolctl import threadpool_limits

from decentlearn import ops


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=None, help="threads (default: all allowed)")
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--size", type=int, default=1024, help="m = k = n")
    args = p.parse_args()
    th = ops.resolve_threads(args.threads)
    m = k = n = args.size
    rng = np.random.default_rng(0)
    a = rng.integers(-127, 128, (m, k), dtype=np.int8)
    b = rng.integers(-127, 128, (k, n), dtype=np.int8)
    x = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((k, n), dtype=np.float32)
    y = np.empty((m, n), np.float32)
    c = ops.empty_aligned((m, n), np.int32)
    paths = [q for q in ("avx512vnni", "amx") if q in ops.supported_isas()] or [ops.active_isa()]

    def sgemm(blas_threads: int) -> None:
        with threadpool_limits(limits=blas_threads, user_api="blas"):
            np.matmul(x, w, out=y)

    before = {
        "alone": lambda: None,
        f"after sgemm, {th} BLAS threads": lambda: sgemm(th),
        "after sgemm, 1 BLAS thread": lambda: sgemm(1),
        f"after sgemm ({th}) and 0.3 s": lambda: (sgemm(th), time.sleep(0.3)),
    }
    import decentlearn

    print(f"gemm_s8 {m}x{k}x{n} int32 out, {th} threads, best / median of {args.repeat}; "
          f"BLAS wait: {decentlearn.config()['blas_wait']}")
    for path in paths:
        with ops.using_isa(path):
            pb = ops.pack_b_s8(b, n_threads=th)
            for label, pre in before.items():
                ts = []
                for _ in range(args.repeat):
                    pre()
                    t0 = time.perf_counter()
                    ops.gemm_s8(a, pb, out=c, n_threads=th)
                    ts.append(time.perf_counter() - t0)
                best, med = min(ts), float(np.median(ts))
                print(f"  {path:>10}  {label:32s} {2 * m * n * k / best / 1e9:8.0f} GOP/s best "
                      f"({best * 1e3:.3f} ms), median {med * 1e3:.3f} ms", flush=True)


if __name__ == "__main__":
    main()
