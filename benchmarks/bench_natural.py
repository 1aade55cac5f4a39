"""Natural compression / dithering benchmark: decentlearn's C kernels against np.copyto of the same
array, GRACE's NumPy bit trick (int32 view + random 23-bit integers, mask the mantissa) and
natural dithering in NumPy.

    python benchmarks/bench_natural.py [--n 25000000] [--s 8] [--repeat 7] [--threads N]
                                                                   (or: decentlearn bench natural)

Limits (copy bandwidth: C streaming copy and np.copyto; numpy sgemm with its BLAS and threads;
the int8 peak of the active ISA) are measured first in the same process; every row gives its
baselines' times, the speedup and the fraction of the matching limit. The encode row also times a
read-only pass over x (ops.read_f32): natural encode's floor, and the best natural/copy ratio
this machine allows. Best and median of --repeat
round-robin runs (the machine may be shared: read ratios, not absolute times). Saves JSON to
benchmarks/results/natural.json (--out to change). Speeds are never asserted in tests; this is
where they are read. The measurement is decentlearn.experiments.bench.bench_natural.
"""

import argparse

from decentlearn.experiments import bench


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=25_000_000)
    p.add_argument("--s", type=int, default=8, help="dithering levels")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", default=None,
                   help="JSON report (default benchmarks/results/natural.json)")
    args = p.parse_args()
    report = bench.bench_natural(args.n, args.repeat, args.threads, args.s)
    print(bench.format_report(report))
    print(f"\nreport saved to {bench.save_json(report, 'natural', args.out)}")


if __name__ == "__main__":
    main()
