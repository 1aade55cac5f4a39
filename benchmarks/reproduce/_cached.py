"""Shared plumbing of the reproduction scripts: run configurations, cache results as JSON, write a
Markdown table and a PNG. Each script is one command: ``python benchmarks/reproduce/NAME.py``."""

from __future__ import annotations

import json
import platform
import re
import time
from pathlib import Path

from decentlearn.sim import RunConfig, simulate

OUT = Path(__file__).resolve().parent / "results"


def run_all(name: str, runs: dict[str, RunConfig], *, fresh: bool = False,
            only: str | None = None) -> dict[str, dict]:
    """Runs every configuration (or reads its cached result, one JSON file per run under
    results/NAME/, so runs can go in parallel processes) and returns label -> record. With
    ``only``, runs just the labels containing that text and returns what is cached."""
    folder = OUT / name
    folder.mkdir(parents=True, exist_ok=True)
    done = {}
    for label, config in runs.items():
        cache = folder / (re.sub(r"[^A-Za-z0-9.]+", "_", label).strip("_") + ".json")
        if not fresh and cache.exists():
            record = json.loads(cache.read_text())
            if record["config"] == config.to_dict():
                done[label] = record
                continue
        if only is not None and only not in label:
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
        cache.write_text(json.dumps(done[label], indent=1, default=float))
    return done


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


def plot(records: dict[str, dict | list[dict]], path: Path, title: str) -> None:
    """Test accuracy (mean over peers) against round, one line per label. A label's value is one
    run record, or a list of records of the same configuration over seeds: then the line is their
    mean and a band spans their minimum to maximum."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(6, 4))
    for label, recs in records.items():
        recs = recs if isinstance(recs, list) else [recs]
        rounds = [row["round"] for row in recs[0]["history"]]
        acc = np.array([[row["test_accuracy_mean"] for row in r["history"]] for r in recs])
        ax.plot(rounds, acc.mean(axis=0), marker="o", label=label)
        if len(recs) > 1:
            ax.fill_between(rounds, acc.min(axis=0), acc.max(axis=0), alpha=0.15)
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy (mean over peers)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    # below the axes: long labels never cover the curves
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.15))
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
