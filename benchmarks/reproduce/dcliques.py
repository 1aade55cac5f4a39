"""D-Cliques reproduction (Bellet, Kermarrec and Lavoie 2022): under one-class-per-peer label skew,
D-Cliques with Clique Averaging tracks the complete graph with a tenth of its edges, while a ring
falls behind. 100 peers, Fashion-MNIST, ``classes:1``, same rounds and learning rate for all;
D-Cliques of 10 peers with a ring of cliques and with one edge between every pair of cliques (the
paper's 100-node setting: 495 edges, 10% of the complete graph's 4950).

    python benchmarks/reproduce/dcliques.py [--rounds R] [--eval-every E] [--seed S] [--fresh]

Writes benchmarks/reproduce/results/dcliques.{json,md,png}; the acceptance test
(tests/test_reproduce_dcliques.py, slow) checks the three numbers from the same settings.
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
    base = RunConfig(dataset="fashion-mnist", peers=100, partition="classes:1", model="mlp:32",
                     rounds=rounds, eval_every=eval_every, eval_samples=2000, lr=0.1,
                     momentum=0.9, batch_size=32, threads=1, seed=seed)
    return {
        "complete": base.replace(topology="complete"),
        "ring": base.replace(topology="ring"),
        "d-cliques:10:ring + clique averaging": base.replace(topology="d-cliques:10:ring",
                                                              clique_averaging=True),
        "d-cliques:10:fully-connected + clique averaging": base.replace(
            topology="d-cliques:10:fully-connected", clique_averaging=True),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=150)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fresh", action="store_true", help="ignore cached results")
    p.add_argument("--only", help="run only the runs whose label contains this text")
    args = p.parse_args()
    records = run_all("dcliques", configs(args.rounds, args.eval_every, args.seed),
                      fresh=args.fresh, only=args.only)
    text = table(records, [("final accuracy (mean over peers)", "test_accuracy_mean"),
                           ("average model", "test_accuracy_avg_model"),
                           ("edges", "edges"),
                           ("edges / complete", "edges_fraction_of_complete"),
                           ("spectral gap", "spectral_gap"),
                           ("wall seconds", "seconds")])
    (OUT / "dcliques.md").write_text(text + "\n")
    plot(records, OUT / "dcliques.png",
         f"100 peers, Fashion-MNIST, classes:1, seed {args.seed}")
    print(text)


if __name__ == "__main__":
    main()
