"""Two builds of decentlearn._core in one process: an older module (a copy of its .so) against the
one on the path, on the gossip and natural-encode benchmarks' arrays, run round-robin with the
baselines so that load from other processes hits both builds alike.

    cp /path/to/old/checkout/decentlearn/_core*.so /tmp/old_core.so
    python benchmarks/ab_kernels.py /tmp/old_core.so gossip|natural [--threads N] [--repeat R]
                                    [--cpu-time]

gossip: exponential graph, 1000 x 25,600 float32, against np.copyto and ops.copy_f32 (share of the
faster copy); natural: natural_encode of 25M values against np.copyto and one read of x
(ops.read_f32, the floor), and the codes of both builds compared (they must be equal). Best time
of --repeat calls after one warm-up each. This is how docs/performance.md's issue 24 figures
compare main's kernels with a branch's.
"""

import argparse
import importlib.util
import time

import decentlearn  # noqa: F401  (before numpy: its OpenBLAS and OpenMP wait defaults)
import numpy as np

from decentlearn import _core as new
from decentlearn import ops, topology


def best_of(fns: dict, repeat: int, clock) -> dict:
    for f in fns.values():
        f()
    best = {k: float("inf") for k in fns}
    for _ in range(repeat):
        for k, f in fns.items():
            t0 = clock()
            f()
            best[k] = min(best[k], clock() - t0)
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("old_so", help="a copy of the older build's _core shared object")
    p.add_argument("kernel", choices=["gossip", "natural"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=9)
    p.add_argument("--cpu-time", action="store_true",
                   help="time with the process's CPU seconds (one thread on a loaded machine)")
    a = p.parse_args()
    spec = importlib.util.spec_from_file_location("_core", a.old_so)
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    t, clock = a.threads, (time.process_time if a.cpu_time else time.perf_counter)
    if a.kernel == "gossip":
        X = np.random.default_rng(0).standard_normal((1000, 25_600), dtype=np.float32)
        Y = np.empty_like(X)
        ip, ix, d = topology.make("exponential", 1000).csr(0)
        ip, ix, d = ip.astype(np.int64), ix.astype(np.int32), d.astype(np.float32)
        b = best_of({"old": lambda: old.gossip(ip, ix, d, 1000, X, Y, t),
                     "new": lambda: new.gossip(ip, ix, d, 1000, X, Y, t),
                     "np.copyto": lambda: np.copyto(Y, X),
                     "copy_f32": lambda: ops.copy_f32(X.ravel(), Y.ravel(), n_threads=t)},
                    a.repeat, clock)
        c = min(b["np.copyto"], b["copy_f32"])
        extra = f"share of the copy bandwidth: old {c / b['old']:.2f}, new {c / b['new']:.2f}"
    else:
        x = np.random.default_rng(0).standard_normal((1, 25_000_000), dtype=np.float32)
        c_old, c_new = np.empty(x.shape, np.uint8), np.empty(x.shape, np.uint8)
        xc = np.empty_like(x)
        b = best_of({"old": lambda: old.natural_encode(x, 1, 5, 0, c_old, t),
                     "new": lambda: new.natural_encode(x, 1, 5, 0, c_new, t),
                     "np.copyto": lambda: np.copyto(xc, x),
                     "read": lambda: ops.read_f32(x.ravel(), n_threads=t)}, a.repeat, clock)
        if not np.array_equal(c_old, c_new):
            raise SystemExit("the two builds' natural codes differ")
        extra = (f"/ np.copyto: old {b['old'] / b['np.copyto']:.2f}, new "
                 f"{b['new'] / b['np.copyto']:.2f}; / read floor: old {b['old'] / b['read']:.2f},"
                 f" new {b['new'] / b['read']:.2f}")
    print(f"{a.kernel}, {t} threads: " + ", ".join(f"{k} {1e3 * v:.2f} ms" for k, v in b.items())
          + "; " + extra)


if __name__ == "__main__":
    main()
