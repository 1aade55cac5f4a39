"""BatchNorm against GroupNorm under label skew (Hsieh et al. 2020, "The Non-IID Data Quagmire").

    nice python benchmarks/reproduce/norm_skew.py [--rounds 150] [--partitions iid,classes:2]

The CNN with a BatchNorm after each convolution (``cnn-bn``; running statistics in the parameter
row, averaged by gossip) and with GroupNorm (``cnn:gn``), trained by D-PSGD on 16 peers on a ring,
Fashion-MNIST, lr 0.02, momentum 0.9, batch 32. Claim: under label skew the GroupNorm CNN beats the
BatchNorm CNN (BatchNorm loses more accuracy from IID to skewed).
"""

import argparse

from _common import last_mean, run, save

from decentlearn.sim import RunConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=150)
    ap.add_argument("--partitions", default="iid,classes:2")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--models", default="cnn-bn,cnn:gn")
    ap.add_argument("--out", default="norm_skew", help="name of the result files")
    args = ap.parse_args()
    base = RunConfig(dataset="fashion-mnist", peers=16, topology="ring", rounds=args.rounds,
                     lr=0.02, momentum=0.9, batch_size=32, eval_every=max(1, args.rounds // 5),
                     eval_samples=1000, seed=args.seed)
    runs, acc = [], {}
    for part in args.partitions.split(","):
        for model in args.models.split(","):
            label = {"cnn-bn": "BatchNorm", "cnn:gn": "GroupNorm"}.get(model, model)
            r = run(f"{label}, {part}", base.replace(model=model, partition=part))
            runs.append(r)
            acc[(label, part)] = last_mean(r["history"], k=2)
    table = [f"Fashion-MNIST, 16 peers, ring, D-PSGD, {args.rounds} rounds, lr 0.02, momentum 0.9, "
             f"batch 32, seed {args.seed}; accuracy = mean over peers of the last 2 evaluations "
             "(1000 test samples).", "", "| partition | BatchNorm CNN | GroupNorm CNN |",
             "|---|---|---|"]
    for part in args.partitions.split(","):
        bn, gn = acc.get(("BatchNorm", part), float("nan")), acc.get(("GroupNorm", part),
                                                                     float("nan"))
        table.append(f"| {part} | {bn:.4f} | {gn:.4f} |")
    print("\n".join(table))
    save(args.out, runs, table, "BatchNorm vs GroupNorm CNN under label skew", x_bytes=False)


if __name__ == "__main__":
    main()
