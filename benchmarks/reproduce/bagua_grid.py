"""Bagua's relaxations as a grid: centralized (all-reduce) vs decentralized (D-PSGD) exchange,
float32 vs low-precision (int8) messages, communication every step vs every 4 local steps — on
each network preset's simulated clock.

    nice python benchmarks/reproduce/bagua_grid.py [--steps 400] [--seed 0] [--target 0.55]
        [--presets datacenter,wan,mobile]

16 peers, ring (for D-PSGD), Fashion-MNIST ``classes:2``, MLP, lr 0.02, momentum 0.9, batch 32;
every cell runs the same number of SGD steps, once per network preset (``--network PRESET``,
decentlearn.network: the all-reduce cells on the ring all-reduce cost model, the D-PSGD cells one
exchange with each ring neighbour per round). The table gives each cell's accuracy, bytes, and the
simulated seconds to the first evaluation at or above ``--target`` (mean peer accuracy) and to
the end; the last table names the fastest cell to the target on each preset.
"""

import argparse
import itertools

from _common import last_mean, run, save

from decentlearn.sim import RunConfig


def time_to(history: list[dict], target: float) -> float | None:
    return next((row["sim_seconds"] for row in history
                 if row["test_accuracy_mean"] >= target), None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target", type=float, default=0.55)
    ap.add_argument("--presets", default="datacenter,wan,mobile")
    args = ap.parse_args()
    base = RunConfig(dataset="fashion-mnist", peers=16, topology="ring", partition="classes:2",
                     model="mlp", lr=0.02, momentum=0.9, batch_size=32, eval_samples=1000,
                     seed=args.seed)
    presets = args.presets.split(",")
    runs, rows, best = [], [], {}
    for preset in presets:
        for alg, spec, k in itertools.product(("allreduce", "dpsgd"), ("none", "int8"), (1, 4)):
            rounds = args.steps // k
            label = f"{preset}: {alg}, {spec}, k={k}"
            r = run(label, base.replace(algorithm=alg, compress=spec, local_steps=k,
                                        rounds=rounds, eval_every=max(1, rounds // 20),
                                        network=preset))
            runs.append(r)
            hit = time_to(r["history"], args.target)
            end = r["history"][-1]["sim_seconds"]
            rows.append(f"| {preset} | {'centralized' if alg == 'allreduce' else 'decentralized'}"
                        f" ({alg}) | {spec} | {k} | {last_mean(r['history'], k=2):.4f} | "
                        f"{r['total_bytes']:,} | {'—' if hit is None else f'{hit:.4g}'} | "
                        f"{end:.4g} |")
            cell = f"{alg}, {spec}, k={k}"
            if hit is not None and (preset not in best or hit < best[preset][1]):
                best[preset] = (cell, hit)
    table = [f"Fashion-MNIST classes:2, 16 peers, MLP, {args.steps} SGD steps per cell, lr 0.02, "
             f"momentum 0.9, seed {args.seed}; accuracy = mean over peers of the last 2 "
             f"evaluations (1000 test samples); time to target = simulated seconds at the first "
             f"evaluation (every 1/20 of the run) with mean peer accuracy >= {args.target}.", "",
             "| network | exchange | precision | k (steps per exchange) | accuracy | "
             "bytes (all peers) | sim s to target | sim s total |",
             "|---|---|---|---|---|---|---|---|", *rows, "",
             "| network | fastest to target | sim s |", "|---|---|---|"]
    table += [f"| {p} | {best[p][0]} | {best[p][1]:.4g} |" if p in best
              else f"| {p} | none reached {args.target} | — |" for p in presets]
    print("\n".join(table))
    save("bagua_grid", runs, table, "Bagua relaxations grid on network presets, "
         "Fashion-MNIST classes:2")
    plot_by_preset(runs, presets, args.target)


def plot_by_preset(runs: list[dict], presets: list[str], target: float) -> None:
    """results/bagua_grid.png: one panel per network preset, accuracy against simulated seconds
    for its 8 cells (the generic two-panel plot of _common.save has 24 lines in one panel)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from _common import RESULTS

    fig, axes = plt.subplots(1, len(presets), figsize=(5 * len(presets), 4.2), sharey=True,
                             constrained_layout=True)
    for ax, preset in zip(axes, presets):
        for r in runs:
            if not r["label"].startswith(preset + ": "):
                continue
            cell = r["label"][len(preset) + 2:]
            h = r["history"]
            ax.plot([row["sim_seconds"] for row in h], [row["test_accuracy_mean"] for row in h],
                    ls="-" if "allreduce" in cell else "--",
                    marker="o" if "k=1" in cell else "s", ms=3,
                    color="C0" if "none" in cell else "C3", label=cell)
        ax.axhline(target, color="grey", lw=0.7)
        ax.set(xscale="log", xlabel="simulated seconds", title=f"network preset: {preset}")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy (mean over peers)")
    axes[-1].legend(fontsize=7, loc="lower right")
    fig.suptitle("Bagua grid: all-reduce (solid) vs D-PSGD (dashed), float32 (blue) vs int8 "
                 "(red), k = 1 (circles) vs 4 (squares); Fashion-MNIST classes:2, 16 peers",
                 fontsize=9)
    fig.savefig(RESULTS / "bagua_grid.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
