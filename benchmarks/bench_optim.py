"""The optimizers' steps and the algorithms' whole-matrix updates against their NumPy forms, in one
process, as a fraction of the machine's copy bandwidth.

    python benchmarks/bench_optim.py [--peers 1024] [--dim 9610] [--threads N] [--repeat 7]
                                     [--out FILE.json]

Rows (float32 (peers, dim) matrices, the 1024-peer digits MLP's shape by default): SGD with
momentum (``ops.sgd_step``, the reference the others are measured against), Adam, LAMB and LARS
(``ops.adam_step``, ``ops.lamb_step``, ``ops.lars_step``) each beside its NumPy twin
(decentlearn/_reference/optim.py, one thread: for Adam the very operations the optimizer ran in
NumPy until 27 Nov 2026; LAMB's and LARS's twins sum the layers' squares in the kernels' chunked
order, which costs NumPy more than the einsum they used), ``ops.axpby`` beside NumPy's ``x -= y``
and ``ops.scale_rows`` beside ``x / s[:, None]``. Bytes moved: the arrays each kernel must read
and write once (Adam: p, g, m, v read, p, m, v written). Best and median of ``repeat``
round-robin runs; the limits (copy bandwidth, numpy sgemm, int8 peak) measured first in the same
process.
"""

from __future__ import annotations

import decentlearn  # noqa: F401  (before numpy: its OpenBLAS and OpenMP wait defaults)
import argparse

import numpy as np

from decentlearn import ops
from decentlearn._reference import optim as ref
from decentlearn.experiments import bench


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peers", type=int, default=1024)
    p.add_argument("--dim", type=int, default=9610)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--out", default=None,
                   help="JSON report (default benchmarks/results/optim.json)")
    args = p.parse_args()
    nt = ops.resolve_threads(args.threads)
    P, D = args.peers, args.dim
    rng = np.random.default_rng(0)
    x, g = rng.standard_normal((P, D), np.float32), rng.standard_normal((P, D), np.float32)
    m, v = np.zeros_like(x), np.zeros_like(x)
    work, buf = np.empty_like(x), np.zeros_like(x)
    steps = np.ones(P, np.int64)
    bounds = np.array([0, D // 2, D])  # two layers
    s = rng.random(P).astype(np.float32) + 0.5
    lim = bench.measure_limits(nt, min(x.nbytes, 1 << 28))
    f = x.nbytes  # bytes of one (P, D) float32 array
    # Every step keeps the parameters finite (tiny lr): the same work in every repeat.
    cases = [
        ("SGD momentum (ops.sgd_step)", 5 * f, {
            "kernel": lambda: ops.sgd_step(x, g, buf, 1e-6, 0.9, n_threads=nt)}),
        ("Adam (ops.adam_step)", 7 * f, {
            "kernel": lambda: ops.adam_step(x, g, m, v, steps, 1e-6, 0.9, 0.999, 1e-8,
                                            n_threads=nt),
            "NumPy twin": lambda: ref.adam_step(x, g, m, v, steps, 1e-6, 0.9, 0.999, 1e-8)}),
        ("LAMB (ops.lamb_step)", 9 * f, {
            "kernel": lambda: ops.lamb_step(x, g, m, v, work, steps, 1e-6, 0.9, 0.999, 1e-6,
                                            0.0, bounds, n_threads=nt),
            "NumPy twin": lambda: ref.lamb_step(x, g, m, v, work, steps, 1e-6, 0.9, 0.999, 1e-6,
                                                0.0, bounds)}),
        ("LARS (ops.lars_step)", 7 * f, {
            "kernel": lambda: ops.lars_step(x, g, buf, 1e-6, 0.9, 0.0, 0.001, 1e-9, bounds,
                                            n_threads=nt),
            "NumPy twin": lambda: ref.lars_step(x, g, buf, 1e-6, 0.9, 0.0, 0.001, 1e-9,
                                                bounds)}),
        ("x - y in place (ops.axpby)", 3 * f, {
            "kernel": lambda: ops.axpby(1, work, -1, g, out=work, n_threads=nt),
            "numpy x -= y": lambda: np.subtract(work, g, out=work)}),
        ("x / s per row (ops.scale_rows)", 2 * f, {
            "kernel": lambda: ops.scale_rows(x, s, True, out=work, n_threads=nt),
            "numpy x / s[:, None]": lambda: np.divide(x, s[:, None], out=work)}),
    ]
    rows = []
    for name, moved, fns in cases:
        rows.append(bench.kernel_row(name, bench.best_of(fns, args.repeat), lim, moved=moved,
                                     peers=P, dim=D))
    sgd = rows[0]["best_s"]
    notes = [f"  {r['kernel']}: {r['best_s'] / sgd:.2f}x the SGD step's time" for r in rows[1:4]]
    report = bench._report("optim", f"optimizer steps and whole-matrix updates on {P} x {D:,} "
                           f"float32, {nt} threads", lim, rows, peers=P, dim=D, threads=nt,
                           notes=notes)
    print(bench.format_report(report))
    print(f"\nreport saved to {bench.save_json(report, 'optim', args.out)}")


if __name__ == "__main__":
    main()
