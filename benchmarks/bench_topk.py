"""Top-k benchmark: ops.topk against np.argpartition(np.abs(x), -k) on one long row, plus random-k
and magnitude thresholding (against np.flatnonzero(|x| >= v)) at the same density.

    python benchmarks/bench_topk.py [--n 25000000] [--ratios 0.001,0.01] [--repeat 7] [--threads N]
                                                                      (or: decentlearn bench topk)

Limits (copy bandwidth: C streaming copy and np.copyto; numpy sgemm with its BLAS and threads;
the int8 peak of the active ISA) are measured first in the same process; every row gives its
baselines' times, the speedup and the fraction of the matching limit. Best and median of --repeat
round-robin runs (the machine may be shared: read ratios, not absolute times). Saves JSON to
benchmarks/results/topk.json (--out to change). Speeds are never asserted in tests; this is
where they are read. The measurement is decentlearn.experiments.bench.bench_topk.
"""

import argparse

from decentlearn.experiments import bench


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=25_000_000)
    p.add_argument("--ratios", default="0.001,0.01")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", default=None, help="JSON report (default benchmarks/results/topk.json)")
    args = p.parse_args()
    report = bench.bench_topk(args.n, tuple(float(r) for r in args.ratios.split(",")), args.repeat,
                              args.threads)
    print(bench.format_report(report))
    print(f"\nreport saved to {bench.save_json(report, 'topk', args.out)}")


if __name__ == "__main__":
    main()
