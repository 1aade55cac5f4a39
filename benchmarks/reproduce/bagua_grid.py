"""Bagua's relaxations as a grid: centralized (all-reduce) vs decentralized (D-PSGD) exchange,
float32 vs low-precision (int8) messages, communication every step vs every 4 local steps.

    nice python benchmarks/reproduce/bagua_grid.py [--steps 400] [--seed 0]

16 peers, ring (for D-PSGD), Fashion-MNIST ``classes:2``, MLP, lr 0.02, momentum 0.9, batch 32;
every cell runs the same number of SGD steps. The table gives accuracy and bytes of each cell: the
trade-off study, not a claim.
"""

import argparse
import itertools

from _common import last_mean, run, save

from decentlearn.sim import RunConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    base = RunConfig(dataset="fashion-mnist", peers=16, topology="ring", partition="classes:2",
                     model="mlp", lr=0.02, momentum=0.9, batch_size=32, eval_samples=1000,
                     seed=args.seed)
    runs, rows = [], []
    for alg, spec, k in itertools.product(("allreduce", "dpsgd"), ("none", "int8"), (1, 4)):
        rounds = args.steps // k
        label = f"{alg}, {spec}, k={k}"
        r = run(label, base.replace(algorithm=alg, compress=spec, local_steps=k, rounds=rounds,
                                    eval_every=max(1, rounds // 5)))
        runs.append(r)
        rows.append(f"| {'centralized' if alg == 'allreduce' else 'decentralized'} ({alg}) | "
                     f"{spec} | {k} | {last_mean(r['history'], k=2):.4f} | "
                     f"{r['total_bytes']:,} |")
    table = [f"Fashion-MNIST classes:2, 16 peers, MLP, {args.steps} SGD steps per cell, lr 0.02, "
             f"momentum 0.9, seed {args.seed}; accuracy = mean over peers of the last 2 "
             "evaluations (1000 test samples).", "",
             "| exchange | precision | k (steps per exchange) | accuracy | bytes (all peers) |",
             "|---|---|---|---|---|", *rows]
    print("\n".join(table))
    save("bagua_grid", runs, table, "Bagua relaxations grid, Fashion-MNIST classes:2")


if __name__ == "__main__":
    main()
