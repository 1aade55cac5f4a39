"""Moshpit averaging reproduction: exact average after d rounds on a full grid, exponential
convergence with missing peers, against gossip on a ring and a torus with as many peers.

    python benchmarks/reproduce/moshpit.py [--seed S]

Consensus only (no training): max_i |x_i - mean| / initial, float64, Gaussian start from --seed.
Writes benchmarks/reproduce/results/moshpit.{md,png}.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]

import numpy as np  # noqa: E402
from _cached import OUT  # noqa: E402

from decentlearn import topology  # noqa: E402


def errors(top: topology.Topology, rounds: int, seed: int) -> list[float]:
    x0 = np.random.default_rng(seed).standard_normal((top.n, 4))
    dev0 = np.abs(x0 - x0.mean(axis=0)).max()
    x, out = x0.copy(), [1.0]
    for t in range(rounds):
        x = top.rounds[t % top.period] @ x
        out.append(float(np.abs(x - x.mean(axis=0)).max() / dev0))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = {
        "moshpit:4x4x4 (64 peers, full)": topology.make("moshpit:4x4x4", 64),
        "moshpit:4x4x4:sparse (58 peers, 10% missing)": topology.make(
            "moshpit:4x4x4:sparse", 58, seed=args.seed),
        "ring (64 peers)": topology.make("ring", 64),
        "torus (64 peers)": topology.make("torus", 64),
    }
    rounds = 30
    OUT.mkdir(exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    lines = ["| graph | error after 3 rounds | after 9 | after 30 | period gap |",
             "|---|---|---|---|---|"]
    for label, top in runs.items():
        e = errors(top, rounds, args.seed)
        ax.semilogy(np.maximum(e, 1e-17), marker=".", label=label)
        lines.append(f"| {label} | {e[3]:.2e} | {e[9]:.2e} | {e[30]:.2e} | "
                     f"{top.period_spectral_gap():.4f} |")
    ax.set_xlabel("round (one exchange within groups / with neighbours)")
    ax.set_ylabel("max |x_i - mean| / initial")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(OUT / "moshpit.png", dpi=120)
    (OUT / "moshpit.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
