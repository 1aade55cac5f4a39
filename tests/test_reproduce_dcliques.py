"""The D-Cliques acceptance runs (about 30 s with Fashion-MNIST installed; skipped without it):
100 peers, Fashion-MNIST, classes:1, same rounds and learning rate for all, seeds 0, 1 and 2, the
settings of benchmarks/reproduce/dcliques.py. Averaged over the seeds, D-Cliques (size 10, cliques
linked all-to-all by one edge per pair as in the paper's 100-node experiments, Clique Averaging)
ends within 2 points of the complete graph of the same seed, the ring at least 5 points below it,
and D-Cliques uses at most 10% of the complete graph's edges. One seed's gap varies by more than a
point (0.7 to 2.6 here), so a single seed is not the claim."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from decentlearn.data import load_dataset
from decentlearn.sim import simulate

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "reproduce" / "dcliques.py"
SEEDS = (0, 1, 2)


def _module():
    """The script as a module. It puts its folder and the checkout at the front of sys.path (to
    run from a checkout); that is undone here, so later tests (and the processes they start)
    still import the package under test, not the checkout's unbuilt decentlearn/."""
    saved = list(sys.path)
    try:
        sys.path.insert(0, str(SCRIPT.parent))
        spec = importlib.util.spec_from_file_location("reproduce_dcliques", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved
    return module


def test_dcliques_tracks_the_complete_graph_with_few_edges() -> None:
    try:
        load_dataset("fashion-mnist")
    except (FileNotFoundError, ValueError) as exc:
        pytest.skip(f"Fashion-MNIST not available: {exc}")
    label = "d-cliques:10:fully-connected + clique averaging"
    module = _module()
    by_label = {}
    for seed in SEEDS:  # run here (not the script's cache): this checkout's code decides
        for name, config in module.configs(seed=seed).items():
            if name in ("complete", "ring", label):
                by_label.setdefault(name, []).append({"summary": simulate(config).summary})
    stats = module.summarize(by_label)
    assert stats[label]["gap"] >= -0.02, stats
    assert stats["ring"]["gap"] <= -0.05, stats
    assert stats[label]["summary"]["edges_fraction_of_complete"] <= 0.10
    assert stats[label]["seeds"] == len(SEEDS)
