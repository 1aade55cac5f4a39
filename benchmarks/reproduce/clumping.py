"""Peer clumping reproduction: a locally heterogeneous graph (clumped) against a locally
homogeneous one of the same size and degree, from the same global data; the pre-processing
overhead at 100 and 1000 peers; label skew of the components after a network partition.

    python benchmarks/reproduce/clumping.py [--rounds R] [--seed S] [--dataset D] [--fresh]

Training: 100 peers, classes:1, degree 4, same rounds and learning rate (default: digits, cheap;
``--dataset fashion-mnist`` for the larger set). Overhead: median build time of ``clumped:4``
against ``ring`` built in the same process (the machine was shared and loaded: compare ratios).
Writes benchmarks/reproduce/results/clumping.{json,md,png}.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]  # _cached, and this checkout's decentlearn

import numpy as np  # noqa: E402
from _cached import OUT, plot, run_all, table  # noqa: E402

from decentlearn import topology  # noqa: E402
from decentlearn.sim import RunConfig  # noqa: E402
from decentlearn.topology import clumping, dcliques  # noqa: E402


def overhead(n: int, repeats: int = 5) -> tuple[float, float]:
    labels = np.zeros((n, 10), dtype=np.int64)
    labels[np.arange(n), np.arange(n) % 10] = 60
    times: dict[str, list[float]] = {"ring": [], "clumped:4": []}
    for _ in range(repeats):
        for spec in times:
            start = time.perf_counter()
            topology.make(spec, n, labels=labels)
            times[spec].append(time.perf_counter() - start)
    return statistics.median(times["clumped:4"]), statistics.median(times["ring"])


def partition_skews(n: int = 100) -> dict[str, float]:
    labels = np.zeros((n, 10), dtype=np.int64)
    labels[np.arange(n), np.random.default_rng(1).permutation(np.arange(n) % 10)] = 60
    dist = dcliques.label_distributions(labels, n)
    out = {}
    for order in clumping.ORDERS:
        seq = clumping.clump_order(dist, seed=0, order=order)
        edges = clumping.circulant_edges(seq, 2)
        cut_a, cut_b = {int(seq[49]), int(seq[50])}, {int(seq[99]), int(seq[0])}
        keep = [set(map(int, e)) not in (cut_a, cut_b) for e in edges]
        out[order] = float(clumping.component_skews(edges[keep], n, dist).max())
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dataset", default="digits")
    p.add_argument("--fresh", action="store_true")
    args = p.parse_args()
    base = RunConfig(dataset=args.dataset, peers=100, partition="classes:1", model="mlp:32",
                     rounds=args.rounds, eval_every=max(1, args.rounds // 4), lr=0.1,
                     momentum=0.9, threads=1, seed=args.seed,
                     eval_samples=2000 if args.dataset != "digits" else None)
    runs = {"clumped:4 (heterogeneous)": base.replace(topology="clumped:4"),
            "clumped:4:homogeneous": base.replace(topology="clumped:4:homogeneous")}
    records = run_all(f"clumping-{args.dataset}", runs, fresh=args.fresh)
    for label, rec in records.items():
        rec["summary"]["local_skew"] = rec["summary"]["topology_info"]["local_skew"]
    text = table(records, [("final accuracy (mean over peers)", "test_accuracy_mean"),
                           ("average model", "test_accuracy_avg_model"),
                           ("local skew", "local_skew"), ("spectral gap", "spectral_gap")])
    lines = [text, "", "| peers | clumped:4 build (ms) | ring build (ms), same process | ratio |",
             "|---|---|---|---|"]
    for n in (100, 1000):
        c, r = overhead(n)
        lines.append(f"| {n} | {c * 1e3:.1f} | {r * 1e3:.1f} | {c / r:.1f} |")
    skews = partition_skews()
    lines += ["", "Ring of 100 peers cut into two arcs of 50: largest component label skew "
              f"(L1): heterogeneous {skews['heterogeneous']:.3f}, "
              f"homogeneous {skews['homogeneous']:.3f}."]
    (OUT / "clumping.md").write_text("\n".join(lines) + "\n")
    plot(records, OUT / "clumping.png",
         f"100 peers, {args.dataset}, classes:1, degree 4, seed {args.seed}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
