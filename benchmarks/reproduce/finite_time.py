"""Finite-time consensus reproduction: steps to the exact average (to 1e-6) of the
minimal-polynomial rule against linear gossip on ring, torus and exponential graphs, and where the
NGO seed's nonlinear gossip (alpha 0.5, eta 1) stands after as many steps and after 10,000.

    python benchmarks/reproduce/finite_time.py [--peers 64]

Writes benchmarks/reproduce/results/finite_time.{md,png} (the plot of
benchmarks/bench_finite_gossip.py plus a table of step counts).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1]), str(HERE.parent)]

from _cached import OUT  # noqa: E402
from bench_finite_gossip import curves, nonlinear_curve  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peers", type=int, default=64)
    args = p.parse_args()
    n = args.peers
    OUT.mkdir(exist_ok=True)
    lines = ["| graph | finite-time steps to 1e-6 | linear gossip steps to 1e-6 | nonlinear "
             "gossip (alpha 0.5, eta 1): error after as many steps / lowest in 10,000 |",
             "|---|---|---|---|"]
    for spec in ("ring", "torus", "exponential"):
        linear, finite = curves(spec, n, steps=10_000)
        k_f = next(k for k, e in enumerate(finite) if e <= 1e-6)
        hit = [k for k, e in enumerate(linear) if e <= 1e-6]
        ngo = nonlinear_curve(spec, n, 10_000, 0.5)
        lines.append(f"| {spec}, n={n} | {k_f} | {hit[0] if hit else '> ' + str(len(linear))} "
                     f"| {ngo[k_f]:.3g} / {min(ngo):.3g} |")
    (OUT / "finite_time.md").write_text("\n".join(lines) + "\n")
    import subprocess

    subprocess.run([sys.executable, str(HERE.parent / "bench_finite_gossip.py"), "--peers",
                    str(n), "--out", str(OUT / "finite_time.png")], check=True,
                   stdout=subprocess.DEVNULL)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
