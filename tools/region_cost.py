"""What one kernel call costs beyond its work, per thread count: ops.axpby over n float32 values
called back to back, and with a gap of Python work between calls (as in a round, where Python
runs between the kernels and idle OpenMP threads spin, then sleep, per GOMP_SPINCOUNT).

    python tools/region_cost.py [--threads 1,16] [--sizes 16384,131072,1048576] [--gap-us 0,20]

Prints microseconds per call (best of 5 blocks of 200 calls) and the openmp wait policy."""

from __future__ import annotations

import argparse
import time

import decentlearn  # noqa: F401  (sets the OpenMP wait default before the extension loads)
import numpy as np

from decentlearn import ops


def busy(us: float) -> None:
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", default="1,16")
    p.add_argument("--sizes", default="16384,131072,1048576")
    p.add_argument("--gap-us", default="0,20")
    a = p.parse_args()
    import os
    print("GOMP_SPINCOUNT", os.environ.get("GOMP_SPINCOUNT"), "OMP_WAIT_POLICY",
          os.environ.get("OMP_WAIT_POLICY"))
    for n in [int(s) for s in a.sizes.split(",")]:
        x = np.ones(n, np.float32)
        y = np.ones(n, np.float32)
        out = np.empty(n, np.float32)
        for gap in [float(g) for g in a.gap_us.split(",")]:
            row = []
            for th in [int(t) for t in a.threads.split(",")]:
                best = float("inf")
                for _ in range(5):
                    t0 = time.perf_counter()
                    for _ in range(200):
                        ops.axpby(0.5, x, 0.5, y, out=out, n_threads=th)
                        if gap:
                            busy(gap)
                    best = min(best, (time.perf_counter() - t0) / 200 * 1e6 - gap)
                row.append(f"{th}t {best:8.1f} us")
            print(f"n={n:>8} gap {gap:4.0f} us: " + "  ".join(row), flush=True)


if __name__ == "__main__":
    main()
