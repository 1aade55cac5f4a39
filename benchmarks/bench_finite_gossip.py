"""Consensus error per gossip exchange: linear gossip x <- W x against the finite-time
minimal-polynomial rule (decentlearn.comm.mixing) on a ring, a torus and an exponential graph,
against one-peer exponential gossip (exact after log2 n rounds on 2^k peers), and against the NGO
seed's nonlinear gossip x_i += eta sum_j w_ij sign(x_j - x_i) |x_j - x_i|^alpha
(decentlearn.comm.mixing.nonlinear_gossip, float32) for alpha 0.5 and 0.8.

    python benchmarks/bench_finite_gossip.py [--peers 64] [--out FILE.png]

Float64, dense matrices (this is about step counts, not speed), float32 for the nonlinear rule. Error: max_i |x_i - mean| / the
initial one, from a fixed Gaussian start.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import decentlearn  # noqa: F401  (before numpy: its OpenBLAS and OpenMP wait defaults)
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's decentlearn

from decentlearn import topology  # noqa: E402
from decentlearn.comm import mixing as finite_gossip  # noqa: E402


def error(x: np.ndarray, x0: np.ndarray) -> float:
    return float(np.abs(x - x.mean(axis=0)).max() / np.abs(x0 - x0.mean(axis=0)).max())


def curves(spec: str, n: int, steps: int) -> tuple[list[float], list[float]]:
    top = topology.make(spec, n)
    w = top.mixing_matrix()
    x0 = np.random.default_rng(0).standard_normal((n, 4))
    linear, x = [1.0], x0.copy()
    for _ in range(steps):
        x = w @ x
        linear.append(error(x, x0))
    finite, x = [1.0], x0.copy()
    for lam in finite_gossip.minimal_polynomial_schedule(top):
        x = (w @ x - lam * x) / (1 - lam)
        finite.append(error(x, x0))
    return linear, finite


def nonlinear_curve(spec: str, n: int, steps: int, alpha: float, eta: float = 1.0) -> list[float]:
    """Consensus error per step of nonlinear gossip, from the same start as ``curves``."""
    top = topology.make(spec, n)
    x0 = np.random.default_rng(0).standard_normal((n, 4))
    x, errs = x0.astype(np.float32), [1.0]
    for _ in range(steps):
        x = finite_gossip.nonlinear_gossip(top, x, alpha, eta)
        errs.append(error(x.astype(np.float64), x0))
    return errs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peers", type=int, default=64)
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "finite_gossip.png"))
    args = p.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = args.peers
    fig, axes = plt.subplots(1, 3, figsize=(13, 4), sharey=True)
    print(f"{'graph':<12} {'finite-time steps':>17} {'linear error after as many':>27}")
    for ax, spec in zip(axes, ("ring", "torus", "exponential")):
        linear, finite = curves(spec, n, steps=max(64, n))
        ax.semilogy(np.maximum(linear, 1e-17), label="linear gossip x <- Wx")
        ax.semilogy(np.maximum(finite, 1e-17), marker=".", label="finite-time (minimal polynomial)")
        for alpha in (0.5, 0.8):
            ax.semilogy(np.maximum(nonlinear_curve(spec, n, len(linear) - 1, alpha), 1e-17),
                        lw=1, label=f"nonlinear gossip (NGO), alpha={alpha}, eta=1")
        if spec == "exponential" and n & (n - 1) == 0:
            ope = topology.make("one-peer-exponential", n)
            x0 = np.random.default_rng(0).standard_normal((n, 4))
            x, errs = x0.copy(), [1.0]
            for t in range(ope.period):
                x = ope.rounds[t] @ x
                errs.append(error(x, x0))
            ax.semilogy(np.maximum(errs, 1e-17), marker="s", label="one-peer exponential")
        ax.axhline(1e-6, color="grey", lw=0.5, ls="--")
        ax.set_title(f"{spec}, n={n}")
        ax.set_xlabel("gossip exchanges")
        ax.grid(alpha=0.3)
        k = len(finite) - 1
        print(f"{spec:<12} {k:>17} {linear[k]:>27.3g}")
    axes[0].set_ylabel("max |x_i - mean| / initial")
    axes[0].legend(fontsize=8)
    axes[2].legend(fontsize=8)
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
