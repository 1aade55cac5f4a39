"""D-Cliques at 1000 peers (Bellet, Kermarrec and Lavoie 2022, the "98% fewer edges than the complete
graph, same accuracy" claim): cliques of 10 built by Greedy Swap under one-class-per-peer label
skew, small-world inter-clique links as the authors' ``interclique.py`` builds them, Clique
Averaging with momentum, against the complete graph and a ring, on Fashion-MNIST.

    nice python benchmarks/reproduce/dcliques_1000.py [--rounds R] [--eval-every E] [--seed S]

Writes benchmarks/reproduce/results/dcliques_1000.{md,png} and one JSON per run under
results/dcliques_1000/ (a cached run is not run again unless --fresh).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]  # _cached, and this checkout's decentlearn

from _cached import OUT, plot, run_all, table  # noqa: E402

from decentlearn.sim import RunConfig  # noqa: E402


def configs(rounds: int = 150, eval_every: int = 50, seed: int = 0) -> dict[str, RunConfig]:
    base = RunConfig(dataset="fashion-mnist", peers=1000, partition="classes:1", model="mlp:32",
                     rounds=rounds, eval_every=eval_every, eval_samples=2000, lr=0.1,
                     momentum=0.9, batch_size=32, threads=1, seed=seed)
    return {
        "complete": base.replace(topology="complete"),
        "ring": base.replace(topology="ring"),
        "d-cliques:10:small-world + clique averaging (1000 swap steps, the default)":
            base.replace(topology="d-cliques:10:small-world", clique_averaging=True),
        "d-cliques:10:small-world:10000 + clique averaging":
            base.replace(topology="d-cliques:10:small-world:10000", clique_averaging=True),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=150)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fresh", action="store_true", help="ignore cached results")
    p.add_argument("--only", help="run only the runs whose label contains this text")
    args = p.parse_args()
    records = run_all("dcliques_1000", configs(args.rounds, args.eval_every, args.seed),
                      fresh=args.fresh, only=args.only)
    for rec in records.values():  # the clique construction's own figures
        info = rec["summary"].get("topology_info") or {}
        rec["clique skew (mean / max)"] = (
            f"{info['clique_skew_mean']:.3f} / {info['clique_skew_max']:.3f}"
            if "clique_skew_mean" in info else "-")
    text = table(records, [("final accuracy (mean over peers)", "test_accuracy_mean"),
                           ("average model", "test_accuracy_avg_model"),
                           ("edges", "edges"),
                           ("edges / complete", "edges_fraction_of_complete"),
                           ("clique skew (mean / max)", "clique skew (mean / max)"),
                           ("wall seconds", "seconds")])
    (OUT / "dcliques_1000.md").write_text(text + "\n")
    plot(records, OUT / "dcliques_1000.png",
         f"1000 peers, Fashion-MNIST, classes:1, seed {args.seed}")
    print(text)


if __name__ == "__main__":
    main()
