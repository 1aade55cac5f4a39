"""Plots of a run's history (matplotlib, Agg backend: files, never windows)."""

from __future__ import annotations

import os

from decentlearn.results import atomic_writer


def plot_curves(history: list[dict], path: str | os.PathLike, title: str = "") -> bool:
    """Saves test accuracy and consensus distance against round to ``path`` (PNG).

    Returns False without writing anything when matplotlib is not installed. The file is written
    atomically (results.atomic_writer): a failure leaves no partial PNG.
    """
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rounds = [r["round"] for r in history]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8), constrained_layout=True)
    ax1.fill_between(rounds, [r["test_accuracy_min"] for r in history],
                     [r["test_accuracy_max"] for r in history], alpha=0.25, label="peers min-max")
    ax1.plot(rounds, [r["test_accuracy_mean"] for r in history], label="peers mean")
    ax1.plot(rounds, [r["test_accuracy_avg_model"] for r in history], "--", label="average model")
    ax1.set(xlabel="round", ylabel="test accuracy", ylim=(0, 1))
    ax1.grid(alpha=0.3)
    ax1.legend(loc="lower right")
    cd = [max(r["consensus_distance"], 1e-12) for r in history]
    ax2.semilogy(rounds, cd, color="C3")
    ax2.set(xlabel="round", ylabel="consensus distance  (1/n) Σ‖xᵢ − x̄‖²")
    ax2.grid(alpha=0.3, which="both")
    try:
        if title:
            fig.suptitle(title, fontsize=10)
        with atomic_writer(path) as f:  # never a truncated PNG
            fig.savefig(f, format="png", dpi=110)
    finally:
        plt.close(fig)
    return True
