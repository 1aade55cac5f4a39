"""Gossip kernel benchmark: decentlearn vs a NumPy per-neighbour loop (as BlueFog/decentralizepy
write it), scipy.sparse CSR @ dense, and dense W @ X (BLAS), side by side in one process.

    python benchmarks/bench_gossip.py [--peers 1000] [--dim 25600] [--threads N] [--out FILE.json]

Prints the table of ``decentlearn bench gossip`` and saves the report as JSON (default
benchmarks/results/gossip.json). Speeds are never asserted in tests; this is where they are read.
"""

import argparse
import json
from pathlib import Path

from decentlearn import bench


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peers", type=int, default=1000)
    p.add_argument("--dim", type=int, default=25_600)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--graphs", default="ring,exponential,torus,random-regular:8")
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "gossip.json"))
    args = p.parse_args()
    report = bench.bench_gossip(n_peers=args.peers, dim=args.dim, repeat=args.repeat,
                                n_threads=args.threads, graphs=args.graphs)
    print(bench.format_report(report))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nreport saved to {out}")


if __name__ == "__main__":
    main()
