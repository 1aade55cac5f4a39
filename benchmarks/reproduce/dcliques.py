"""D-Cliques reproduction (Bellet, Kermarrec and Lavoie 2022): under one-class-per-peer label skew,
D-Cliques with Clique Averaging tracks the complete graph with a tenth of its edges, while a ring
falls behind. 100 peers, Fashion-MNIST, ``classes:1``, same rounds and learning rate for all;
D-Cliques of 10 peers with a ring of cliques and with one edge between every pair of cliques (the
paper's 100-node setting: 495 edges, 10% of the complete graph's 4950).

    python benchmarks/reproduce/dcliques.py [--rounds R] [--eval-every E] [--seeds 0 1 2] [--fresh]

Every configuration runs once per seed (the seed draws the partition, the cliques' Greedy Swap,
the initial model and the minibatches; one seed's gap to the complete graph varies by a point or
more). Writes benchmarks/reproduce/results/dcliques.{md,png}: per configuration the mean and
standard deviation over the seeds, and the mean of each seed's gap to the complete graph of the
same seed; runs are cached under results/dcliques/. tests/test_reproduce_dcliques.py checks the
claims from the same settings (about 30 s with Fashion-MNIST installed).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]  # _cached, and this checkout's decentlearn

import numpy as np  # noqa: E402
from _cached import OUT, plot, run_all  # noqa: E402

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


def run_seeds(seeds, rounds: int = 150, eval_every: int = 50, fresh: bool = False,
              only: str | None = None) -> dict[str, list[dict]]:
    """label -> one cached run record per seed (in ``seeds`` order)."""
    runs = {f"{label} | seed {seed}": config for seed in seeds
            for label, config in configs(rounds, eval_every, seed).items()}
    records = run_all("dcliques", runs, fresh=fresh, only=only)
    return {label: [records[f"{label} | seed {seed}"] for seed in seeds
                    if f"{label} | seed {seed}" in records]
            for label in configs(rounds, eval_every, 0)}


def summarize(by_label: dict[str, list[dict]]) -> dict[str, dict]:
    """Mean and standard deviation over the seeds, and the mean per-seed gap to "complete"."""
    complete = [r["summary"]["test_accuracy_mean"] for r in by_label["complete"]]
    out = {}
    for label, recs in by_label.items():
        acc = np.array([r["summary"]["test_accuracy_mean"] for r in recs])
        avg = np.array([r["summary"]["test_accuracy_avg_model"] for r in recs])
        out[label] = {"acc_mean": float(acc.mean()), "acc_std": float(acc.std()),
                      "avg_mean": float(avg.mean()), "gap": float((acc - complete).mean()),
                      "seeds": len(recs), "summary": recs[0]["summary"]}
    return out


def markdown(stats: dict[str, dict]) -> str:
    rows = ["| run | final accuracy (mean over peers), mean ± sd over seeds | gap to complete "
            "(points) | average model | edges | edges / complete | spectral gap |",
            "|---|---|---|---|---|---|---|"]
    for label, st in stats.items():
        s = st["summary"]
        rows.append(f"| {label} | {st['acc_mean']:.4f} ± {st['acc_std']:.4f} | "
                    f"{100 * st['gap']:+.2f} | {st['avg_mean']:.4f} | {s['edges']} | "
                    f"{s['edges_fraction_of_complete']:.4f} | {s['spectral_gap']:.4f} |")
    return "\n".join(rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=150)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--fresh", action="store_true", help="ignore cached results")
    p.add_argument("--only", help="run only the runs whose label contains this text")
    args = p.parse_args()
    by_label = run_seeds(args.seeds, args.rounds, args.eval_every, args.fresh, args.only)
    text = markdown(summarize(by_label))
    (OUT / "dcliques.md").write_text(text + "\n")
    plot(by_label, OUT / "dcliques.png",
         f"100 peers, Fashion-MNIST, classes:1, mean of seeds {args.seeds} (band: min-max)")
    print(text)


if __name__ == "__main__":
    main()
