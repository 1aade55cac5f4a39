"""STC in federated mode against FedAvg at equal total bytes, non-IID partition (Sattler et al.).

    nice python benchmarks/reproduce/stc_fl.py [--seed 0]

16 clients, Fashion-MNIST ``classes:2``, MLP, full participation, SGD lr 0.02 momentum 0.9,
batch 32.
FedAvg: 10 local steps per round (float32 up and down). STC-FL: 1 local step per round, ``stc:0.01``
up and down with error feedback on both sides. Bytes are the clients' uploads plus the server's
downloads. The claim: at equal total bytes, STC-FL is more accurate; accuracy of each run at a byte
budget is read from its curve (the last evaluation within the budget).
"""

import argparse

from _common import run, save

from decentlearn.sim import RunConfig


def accuracy_at(run_result: dict, budget: float) -> float:
    """Accuracy of the last evaluation whose cumulative bytes (peers + server) fit the budget."""
    h = run_result["history"]
    scale = run_result["total_bytes"] / max(1, h[-1]["bytes_sent_total"])
    ok = [row["test_accuracy_mean"] for row in h if row["bytes_sent_total"] * scale <= budget]
    return ok[-1] if ok else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stc-rounds", type=int, default=1500)
    ap.add_argument("--fedavg-rounds", type=int, default=30)
    args = ap.parse_args()
    base = RunConfig(dataset="fashion-mnist", peers=16, partition="classes:2", model="mlp",
                     lr=0.02, momentum=0.9, batch_size=32, eval_samples=1000, seed=args.seed)
    runs = [run("FedAvg (10 local steps)", base.replace(algorithm="fedavg", local_steps=10,
                                                        rounds=args.fedavg_rounds, eval_every=1)),
            run("STC-FL (stc:0.01 up/down)", base.replace(
                algorithm="stc-fl", compress="stc:0.01", rounds=args.stc_rounds,
                eval_every=max(1, args.stc_rounds // 30)))]
    fedavg, stc = runs
    budgets = sorted({stc["total_bytes"], fedavg["history"][0]["bytes_sent_total"]
                      * fedavg["total_bytes"] / fedavg["history"][-1]["bytes_sent_total"]})
    table = [f"Fashion-MNIST classes:2, 16 clients, MLP, full participation, lr 0.02, "
             f"momentum 0.9, seed {args.seed}; accuracy of the server model, 1000 test samples.",
             "", "| run | rounds | total bytes | final accuracy |", "|---|---|---|---|"]
    for r in runs:
        table.append(f"| {r['label']} | {r['config']['rounds']} | {r['total_bytes']:,} | "
                     f"{r['final_accuracy_mean']:.4f} |")
    table += ["", "| byte budget | FedAvg accuracy | STC-FL accuracy |", "|---|---|---|"]
    for b in budgets:
        table.append(f"| {b:,.0f} | {accuracy_at(fedavg, b):.4f} | {accuracy_at(stc, b):.4f} |")
    print("\n".join(table))
    save("stc_fl", runs, table, "STC-FL vs FedAvg, Fashion-MNIST classes:2, 16 clients")


if __name__ == "__main__":
    main()
