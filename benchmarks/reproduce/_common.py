"""Shared pieces of the reproduction scripts: run a list of configurations (each in this process,
one after the other), keep their evaluation histories and the algorithms' counters, write a
Markdown table and a PNG of accuracy against rounds and against bytes.

Results go to ``benchmarks/reproduce/results/<study>.{md,png,json}``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's decentlearn

from decentlearn.sim import RunConfig, Simulator  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def run(label: str, config: RunConfig, log=print) -> dict:
    """Runs one configuration; returns its history, summary and the algorithm's counters."""
    start = time.perf_counter()
    sim = Simulator(config)
    result = sim.run()
    stats = sim.algorithm.report()
    server = int(result.summary["bytes_server_to_client"])  # in bytes_sent_total already
    out = {
        "label": label,
        "config": config.to_dict(),
        "history": result.history,
        "final_accuracy_mean": result.summary["test_accuracy_mean"],
        "final_accuracy_avg_model": result.summary["test_accuracy_avg_model"],
        "peer_bytes": int(result.summary["bytes_sent_total"]) - server,
        "server_bytes": server,
        "total_bytes": int(result.summary["bytes_sent_total"]),
        "stats": stats,
        "seconds": time.perf_counter() - start,
    }
    log(f"{label}: acc {out['final_accuracy_mean']:.4f} (avg model "
        f"{out['final_accuracy_avg_model']:.4f}), bytes {out['total_bytes']:,}, "
        f"{out['seconds']:.0f} s {stats}")
    return out


def last_mean(history: list[dict], key: str = "test_accuracy_mean", k: int = 3) -> float:
    """Mean of the last k evaluations (smooths the evaluation noise of one final point)."""
    return float(np.mean([row[key] for row in history[-k:]]))


def save(study: str, runs: list[dict], table: list[str], title: str,
         x_bytes: bool = True) -> Path:
    """Writes results/<study>.json, .md (the given table lines) and .png."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{study}.json").write_text(json.dumps(runs, indent=1, default=float))
    (RESULTS / f"{study}.md").write_text("\n".join(table) + "\n")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    n_plots = 2 if x_bytes else 1
    fig, axes = plt.subplots(1, n_plots, figsize=(5.2 * n_plots + 2.4, 3.8),
                             constrained_layout=True)
    axes = np.atleast_1d(axes)
    for r in runs:
        h = r["history"]
        acc = [row["test_accuracy_mean"] for row in h]
        axes[0].plot([row["round"] for row in h], acc, label=r["label"])
        if x_bytes:
            scale = r["total_bytes"] / max(1, h[-1]["bytes_sent_total"])
            axes[1].plot([row["bytes_sent_total"] * scale / 1e6 for row in h], acc,
                         label=r["label"])
    axes[0].set(xlabel="round", ylabel="test accuracy (mean over peers)")
    if x_bytes:
        axes[1].set(xlabel="MB sent (peers + server)", ylabel="test accuracy", xscale="log")
    for ax in axes:
        ax.grid(alpha=0.3)
    # One legend beside the last panel: inside, it covered curves near the top.
    axes[-1].legend(*axes[0].get_legend_handles_labels(), fontsize=7, loc="upper left",
                    bbox_to_anchor=(1.02, 1))
    fig.suptitle(title, fontsize=9)
    png = RESULTS / f"{study}.png"
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png
