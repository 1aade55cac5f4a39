"""Gossip kernel benchmark: decentlearn's Y = W X against a NumPy per-neighbour loop (as
BlueFog/decentralizepy write it), scipy.sparse CSR @ dense, dense W @ X (BLAS) and np.copyto.

    python benchmarks/bench_gossip.py [--peers 1000] [--dim 25600] [--graphs ring,exponential]
                                      [--repeat 5] [--threads N]      (or: decentlearn bench gossip)

Limits (copy bandwidth: C streaming copy and np.copyto; numpy sgemm with its BLAS and threads;
the int8 peak of the active ISA) are measured first in the same process; every row gives its
baselines' times, the speedup and the fraction of the matching limit. Best and median of --repeat
round-robin runs (the machine may be shared: read ratios, not absolute times). Saves JSON to
benchmarks/results/gossip.json (--out to change). Speeds are never asserted in tests; this is
where they are read. The measurement is decentlearn.experiments.bench.bench_gossip.
"""

import argparse

from decentlearn.experiments import bench


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peers", type=int, default=1000)
    p.add_argument("--dim", type=int, default=25_600)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--graphs", default="ring,exponential,torus,random-regular:8")
    p.add_argument("--out", default=None,
                   help="JSON report (default benchmarks/results/gossip.json)")
    args = p.parse_args()
    report = bench.bench_gossip(args.peers, args.dim, args.repeat, args.threads, args.graphs)
    print(bench.format_report(report))
    print(f"\nreport saved to {bench.save_json(report, 'gossip', args.out)}")


if __name__ == "__main__":
    main()
