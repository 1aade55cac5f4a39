"""CoCoFL-style partial freezing on decentralized peers (Pfeiffer et al.): half the peers freeze
their first K layers (int8 forward, no gradient, no optimizer state) against all peers training
fully and against dropping the constrained peers' training. Digits, ``mlp:64,32``, ring of 16
peers, D-PSGD, 200 rounds, batch 32, lr 0.05, momentum 0.9, seeds 0, 1, 2.

    nice python benchmarks/reproduce/cocofl.py [--rounds 200] [--seeds 0 1 2]

Writes benchmarks/reproduce/results/cocofl.md (the table of docs/low-precision.md, checked
against it by tests/test_docs_results.py).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1])]  # this checkout's decentlearn

from decentlearn.sim import RunConfig, Simulator  # noqa: E402

OUT = HERE / "results"
SETTINGS = (("(a) all full fp32", None), ("(b) CoCoFL `0.5:1`", "0.5:1"),
            ("(b′) CoCoFL `0.5:2`", "0.5:2"), ("(c) dropping `0.5:drop`", "0.5:drop"))


def run(config: RunConfig):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sim = Simulator(config)
        result = sim.run()
    return result.summary, np.asarray(sim.last_accuracy)


def cost_cells(summary: dict | None) -> list[str]:
    """MACs / round (int8 share), relative to a full peer, activation / optimizer bytes: of a
    constrained peer (of a full peer when ``summary`` has no constrained peers)."""
    if summary is None:
        return ["0", "0", "0 / 0"]
    c = summary["compute"]
    part = c["constrained"] if c["constrained"]["peers"] else None
    if part is None:
        full = c["full_peer"]
        macs, int8, rel = full["macs"], full["macs_int8"], 1.0
        act, opt = full["activation_bytes"], full["optimizer_state_bytes"]
    else:
        macs, int8 = part["compute_macs_per_round"], part["int8_macs_per_round"]
        rel, act, opt = (part["compute_relative_to_full"], part["activation_bytes"],
                         part["optimizer_state_bytes"])
    if macs == 0:
        return ["0", "0", f"{act:,.0f} / {opt:,.0f}"]
    int8_text = f"{int8 / 1000:.0f}k" if int8 else "0"
    return [f"{macs / 1000:.0f}k ({int8_text})", f"{rel:.2f}", f"{act:,.0f} / {opt:,.0f}"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = p.parse_args()
    rows = ["| partition | setting | constrained peers' accuracy | all peers' accuracy | average "
            "model | MACs / round (int8) | vs full | activation / optimizer bytes |",
            "|---|---|---|---|---|---|---|---|"]
    for partition in ("iid", "dirichlet:0.1"):
        base = RunConfig(partition=partition, model="mlp:64,32", peers=16, topology="ring",
                         rounds=args.rounds, eval_every=args.rounds, batch_size=32, lr=0.05,
                         momentum=0.9)
        for label, spec in SETTINGS:
            constrained, everyone, average, costs = [], [], [], None
            for seed in args.seeds:
                # the constrained peers of this seed: those CoCoFL picks (the same for every K)
                picked = run(base.replace(seed=seed, cocofl="0.5:1"))[0]["constrained_peers"]
                summary, acc = run(base.replace(seed=seed, cocofl=spec))
                constrained.append(float(acc[picked].mean()))
                everyone.append(summary["test_accuracy_mean"])
                average.append(summary["test_accuracy_avg_model"])
                costs = None if spec and spec.endswith("drop") else summary
            cells = [f"{np.mean(constrained):.3f} ± {np.std(constrained):.3f}",
                     f"{np.mean(everyone):.3f}", f"{np.mean(average):.3f}", *cost_cells(costs)]
            rows.append(f"| {partition} | {label} | " + " | ".join(cells) + " |")
            print(rows[-1], flush=True)
    OUT.mkdir(exist_ok=True)
    (OUT / "cocofl.md").write_text("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
