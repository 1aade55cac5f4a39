"""BatchNorm against GroupNorm under label skew (Hsieh et al. 2020, "The Non-IID Data Quagmire").

    nice python benchmarks/reproduce/norm_skew.py [--rounds 200] [--algorithms allreduce,dpsgd]
        [--partitions iid,classes:2,classes:1]

The CNN with a BatchNorm after each convolution (``cnn-bn``; running statistics in the parameter
row, averaged with the weights) and with GroupNorm (``cnn:gn``), 16 peers, Fashion-MNIST, lr 0.02,
momentum 0.9, batch 32. Two ways of training: ``allreduce`` (exact averaging every step, the
bulk-synchronous setting of the paper's BatchNorm study: with GroupNorm it is indifferent to how
the data is split) and D-PSGD on a ring. Claim: under label skew the GroupNorm CNN beats the
BatchNorm CNN, because each peer normalizes with the statistics of its own few classes while
training, and the averaged running statistics at test time are not those statistics.
"""

import argparse

from _common import last_mean, run, save

from decentlearn.sim import RunConfig

LABELS = {"cnn-bn": "BatchNorm", "cnn:gn": "GroupNorm"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--algorithms", default="allreduce,dpsgd")
    ap.add_argument("--partitions", default="iid,classes:2,classes:1")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--models", default="cnn-bn,cnn:gn")
    ap.add_argument("--threads", type=int, default=1,
                    help="threads per run (results do not depend on it; 1 suits a shared machine)")
    ap.add_argument("--out", default="norm_skew", help="name of the result files")
    args = ap.parse_args()
    base = RunConfig(dataset="fashion-mnist", peers=16, topology="ring", rounds=args.rounds,
                     lr=0.02, momentum=0.9, batch_size=32, eval_every=max(1, args.rounds // 4),
                     eval_samples=1000, seed=args.seed, threads=args.threads)
    algorithms, parts = args.algorithms.split(","), args.partitions.split(",")
    models = args.models.split(",")
    runs, acc, avg = [], {}, {}
    for algorithm in algorithms:
        for part in parts:
            for model in models:
                label = LABELS.get(model, model)
                r = run(f"{label}, {algorithm}, {part}",
                        base.replace(model=model, partition=part, algorithm=algorithm))
                runs.append(r)
                acc[(algorithm, part, label)] = last_mean(r["history"], k=2)
                avg[(algorithm, part, label)] = r["final_accuracy_avg_model"]
    table = [f"Fashion-MNIST, 16 peers (D-PSGD: ring), {args.rounds} rounds, lr 0.02, momentum 0.9, "
             f"batch 32, seed {args.seed}; accuracy = mean over peers of the last 2 evaluations "
             "(1000 test samples); in brackets the average model's final accuracy.", "",
             "| algorithm | partition | " + " | ".join(LABELS.get(m, m) + " CNN" for m in models)
             + " |", "|---|---|" + "---|" * len(models)]
    for algorithm in algorithms:
        for part in parts:
            cells = [f"{acc[(algorithm, part, LABELS.get(m, m))]:.4f} "
                     f"({avg[(algorithm, part, LABELS.get(m, m))]:.4f})" for m in models]
            table.append(f"| {algorithm} | {part} | " + " | ".join(cells) + " |")
    print("\n".join(table))
    save(args.out, runs, table, "BatchNorm vs GroupNorm CNN under label skew", x_bytes=False)


if __name__ == "__main__":
    main()
