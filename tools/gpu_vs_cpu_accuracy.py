"""One run on a device against the same run on the CPU host path (same configuration, same seed),
for issue 23's acceptance check: a 16-peer torch ResNet-20 (GroupNorm) D-PSGD run on
Fashion-MNIST for 50 rounds on the GPU reaches the CPU run's accuracy within 1 point.

    PYTHONPATH=. python tools/gpu_vs_cpu_accuracy.py --device cuda --dataset fashion-mnist \\
        --data-dir .gpu_data --model torch:resnet20:gn --peers 16 --rounds 50 --out acc.json

Both runs evaluate every peer and the average model at the last round (the average model on the
whole test set). Prints and writes (JSON) each run's accuracies, seconds, device report and the
differences in percentage points, and the largest parameter difference between the two runs.
The partition defaults to iid: under strong label skew two float32 trajectories that differ by
rounding drift apart (momentum amplifies it), which would measure chaos rather than the device.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dataset", default="fashion-mnist")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--model", default="torch:resnet20:gn")
    ap.add_argument("--peers", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--partition", default="iid")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cpu-mode", default="grouped:1", help="--torch-mode of the CPU run")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    from decentlearn.sim import RunConfig, Simulator
    base = RunConfig(dataset=args.dataset, data_dir=args.data_dir, model=args.model,
                     peers=args.peers, rounds=args.rounds, eval_every=args.rounds,
                     batch_size=args.batch_size, partition=args.partition, lr=args.lr,
                     topology="ring", algorithm="dpsgd", seed=args.seed, threads=args.threads)
    runs = {}
    params = {}
    for name, cfg in (("device", base.replace(device=args.device)),
                      ("cpu", base.replace(torch_mode=args.cpu_mode))):
        t0 = time.perf_counter()
        result = Simulator(cfg).run()
        seconds = time.perf_counter() - t0
        s = result.summary
        runs[name] = {"seconds": seconds, "torch_device": s["torch_device"],
                      "torch_mode": s["torch_mode"],
                      "test_accuracy_avg_model": s["test_accuracy_avg_model"],
                      "test_accuracy_mean": s["test_accuracy_mean"],
                      "final_train_loss": s["final_train_loss"],
                      "consensus_distance": s["consensus_distance"]}
        params[name] = result.params
        print(f"{name:>6}: {s['torch_device']['device']} ({s['torch_device']['path']}), "
              f"{seconds:.1f} s: average model {100 * s['test_accuracy_avg_model']:.2f}%, "
              f"peers' mean {100 * s['test_accuracy_mean']:.2f}%, train loss "
              f"{s['final_train_loss']:.4f}")
    diff = {k: 100 * (runs["device"][k] - runs["cpu"][k])
            for k in ("test_accuracy_avg_model", "test_accuracy_mean")}
    report = {"config": base.to_dict(), "runs": runs, "difference_points_device_minus_cpu": diff,
              "max_abs_param_difference": float(np.abs(params["device"] - params["cpu"]).max()),
              "within_1_point": bool(abs(diff["test_accuracy_avg_model"]) <= 1.0)}
    print(f"device - cpu: average model {diff['test_accuracy_avg_model']:+.2f} points, peers' "
          f"mean {diff['test_accuracy_mean']:+.2f} points; largest parameter difference "
          f"{report['max_abs_param_difference']:.3g}")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
