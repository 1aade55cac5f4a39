"""Shared plumbing of the reproduction scripts: run configurations, cache results as JSON, write a
Markdown table and a PNG. Each script is one command: ``python benchmarks/reproduce/NAME.py``."""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path

from decentlearn.sim import RunConfig, simulate

OUT = Path(__file__).resolve().parent / "results"


def run_all(name: str, runs: dict[str, RunConfig], *, fresh: bool = False) -> dict[str, dict]:
    """Runs every configuration (or reads its cached result) and returns label -> record."""
    OUT.mkdir(exist_ok=True)
    cache = OUT / f"{name}.json"
    done = {} if fresh or not cache.exists() else json.loads(cache.read_text())
    for label, config in runs.items():
        if label in done and done[label]["config"] == config.to_dict():
            continue
        start = time.perf_counter()
        result = simulate(config)
        done[label] = {
            "config": config.to_dict(),
            "history": result.history,
            "summary": {k: v for k, v in result.summary.items() if k != "config"},
            "seconds": time.perf_counter() - start,
            "machine": platform.node(),
        }
        cache.write_text(json.dumps(done, indent=1, default=float))
    return {label: done[label] for label in runs}


def table(records: dict[str, dict], columns: list[tuple[str, str]]) -> str:
    """A Markdown table: one row per run, ``columns`` are (header, summary key)."""
    head = "| run | " + " | ".join(h for h, _ in columns) + " |"
    rule = "|" + "---|" * (len(columns) + 1)
    rows = [head, rule]
    for label, rec in records.items():
        cells = []
        for _, key in columns:
            value = rec["summary"].get(key, rec.get(key))
            cells.append(f"{value:.4f}" if isinstance(value, float) else str(value))
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def plot(records: dict[str, dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for label, rec in records.items():
        rounds = [row["round"] for row in rec["history"]]
        acc = [row["test_accuracy_mean"] for row in rec["history"]]
        ax.plot(rounds, acc, marker="o", label=label)
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy (mean over peers)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
