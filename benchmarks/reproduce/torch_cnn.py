"""A PyTorch model under label skew: ``torch:cnn`` on Fashion-MNIST, 2 classes per peer, 16 peers
on a ring, D-PSGD, 200 rounds (batch 16, lr 0.05, seed 0), evaluated every 50 rounds on 2,000 test
samples. Needs the torch extra and Fashion-MNIST.

    nice python benchmarks/reproduce/torch_cnn.py

Writes benchmarks/reproduce/results/torch_cnn.md (the table of docs/torch.md, checked against it
by tests/test_docs_results.py). The same run from the command line:

    decentlearn run --dataset fashion-mnist --model torch:cnn --partition classes:2 --peers 16 \\
        --topology ring --rounds 200 --eval-every 50 --eval-samples 2000 --batch-size 16 \\
        --lr 0.05 --threads 2 --seed 0
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1])]  # this checkout's decentlearn

from decentlearn.sim import RunConfig, simulate  # noqa: E402

OUT = HERE / "results"


def main() -> None:
    config = RunConfig(dataset="fashion-mnist", model="torch:cnn", partition="classes:2",
                       peers=16, topology="ring", rounds=200, eval_every=50, eval_samples=2000,
                       batch_size=16, lr=0.05, threads=2, seed=0)
    history = simulate(config).history
    last = history[-1]
    mean = [f"{row['test_accuracy_mean']:.3f}" for row in history]
    mean[-1] += f" (min {last['test_accuracy_min']:.3f}, max {last['test_accuracy_max']:.3f})"
    avg = [f"{row['test_accuracy_avg_model']:.3f}" for row in history]
    avg[-1] = f"**{avg[-1]}**"
    rows = ["| round | " + " | ".join(str(row["round"]) for row in history) + " |",
            "|---" * (len(history) + 1) + "|",
            "| peers' mean test accuracy | " + " | ".join(mean) + " |",
            "| average model's test accuracy (2,000 test samples) | " + " | ".join(avg) + " |"]
    OUT.mkdir(exist_ok=True)
    (OUT / "torch_cnn.md").write_text("\n".join(rows) + "\n")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
