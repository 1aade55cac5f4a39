"""How far does this machine itself scale? Compute and bandwidth limits at each thread count.

    python tools/peak_scaling.py [--threads 1,2,4,8,16] [--repeat 5]

Issue 24 asks rounds to run 8-12x faster on 16 threads than on 1. A round can scale no better than
the machine's own limits: this script measures them at each thread count, in one process, the
counts taking their turns (so a noisy neighbour slows them alike):

- the int8 peak of each int8 ISA path (``measure_int8_peak``: every thread runs the path's
  in-register multiply-add loop at once; no memory traffic, so it counts the cores that really
  compute at the same time: on a machine whose "cores" are hyperthreads of fewer physical cores,
  or are oversubscribed by the host, it stops growing before the thread count does);
- the C streaming copy of 256 MiB float32 (``ops.copy_f32``), read + write bytes per second.

Each figure is printed with its speed-up over 1 thread. Also the CPU topology the kernel reports
(thread siblings of CPU 0, cores per socket).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import decentlearn  # noqa: F401  (first: its BLAS and OpenMP wait defaults)
import numpy as np

from decentlearn import ops
from decentlearn.experiments.bench import measure_int8_peak


def _topology() -> dict:
    out = {}
    for name in ("thread_siblings_list", "core_siblings_list"):
        try:
            out[name] = Path(f"/sys/devices/system/cpu/cpu0/topology/{name}").read_text().strip()
        except OSError:
            out[name] = None
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", default="1,2,4,8,16")
    p.add_argument("--repeat", type=int, default=5, help="turns of every count")
    p.add_argument("--mib", type=int, default=256, help="MiB copied per copy measurement")
    p.add_argument("--out", help="JSON file")
    args = p.parse_args()
    counts = [int(x) for x in args.threads.split(",")]
    paths = [q for q in ("avx512vnni", "amx") if q in ops.supported_isas()]
    src = np.ones(args.mib << 18, np.float32)
    dst = np.empty_like(src)
    ops.copy_f32(src, dst)  # first touch
    best = {(what, n): 0.0 for what in [*paths, "copy"] for n in counts}
    for _ in range(args.repeat):
        for n in counts:
            for q in paths:
                with ops.using_isa(q):
                    best[(q, n)] = max(best[(q, n)], measure_int8_peak(n, repeat=1))
            t0 = time.perf_counter()
            ops.copy_f32(src, dst, n_threads=n)
            gbs = 2 * src.nbytes / (time.perf_counter() - t0) / 1e9
            best[("copy", n)] = max(best[("copy", n)], gbs)
    report = {"topology": _topology(), "counts": counts, "rows": {}}
    print(f"CPU 0's thread siblings: {report['topology']['thread_siblings_list']}; "
          f"core siblings: {report['topology']['core_siblings_list']}")
    for what in [*paths, "copy"]:
        unit = "GB/s" if what == "copy" else "GOP/s"
        rows = [{"threads": n, "value": best[(what, n)],
                 "speedup": best[(what, n)] / best[(what, counts[0])]} for n in counts]
        report["rows"][what] = rows
        label = "copy (read+write)" if what == "copy" else f"{what} int8 peak"
        print(f"{label:>22}: " + "  ".join(
            f"{r['threads']}t {r['value']:.0f} {unit} ({r['speedup']:.2f}x)" for r in rows),
            flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
