"""Scale benchmark of the simulator (issue 14, point 6): 1000 and 10,000 peers on Fashion-MNIST.

    python benchmarks/bench_scale.py [--quick] [--profile] [--out benchmarks/results/scale.json]

Cases, each in its own process (so each has its own peak RSS), D-PSGD with momentum, batch 32,
partition dirichlet:0.1, Fashion-MNIST from /usr/share/datasets or $DECENTLEARN_DATA:
- dpsgd-1000-ring / dpsgd-1000-exponential: 1000 peers, "mlp" (784-128-10), one
  epoch-equivalent: ceil(60,000 / (1000 x 32)) = 2 rounds of one local step (64,000 samples);
- 10k-linear / 10k-mlp32: 10,000 peers, "linear" and "mlp:32", ring, 2 rounds (640,000 samples).
Each reports setup seconds (data, partition, topology, model), run seconds (rounds and
evaluations), evaluation seconds, total, CPU seconds, peak RSS (``ru_maxrss``) next to the
``run --dry-run`` estimate, the machine's load average (1 min) before and after, and, as the
baseline measured in the same process, the run's FLOP time: 6 x samples x parameters at numpy's
own float32 matmul rate (1024^3, numpy's BLAS) measured first.
- dirichlet: ``make_partition("dirichlet:ALPHA")`` of the 60,000 Fashion-MNIST labels over 1000
  peers for ALPHA in 0.01, 0.1, 1: seconds, smallest and largest peer, label skew.
- ``--profile``: py-spy (``record --native``, 100 Hz) over the dpsgd-1000-ring case run for 6
  rounds; samples inside Simulator.run outside evaluate() are split by their innermost frame into
  C kernels (decentlearn's csrc), OpenMP runtime (libgomp: waits at barriers), NumPy (its
  extension modules and BLAS) and Python (interpreter frames); libc frames (memcpy, memset,
  page faults) count for their nearest caller that is one of those.
The machine may be shared: every figure comes with the load average, and the ratios to the FLOP
baseline move less with load than the seconds do. Writes JSON to benchmarks/results/scale.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a checkout: import its decentlearn
    sys.path.insert(0, str(ROOT))

from decentlearn.experiments.bench import cpu_info  # noqa: E402

CASES = {
    "dpsgd-1000-ring": dict(peers=1000, topology="ring", model="mlp"),
    "dpsgd-1000-exponential": dict(peers=1000, topology="exponential", model="mlp"),
    "10k-linear": dict(peers=10_000, topology="ring", model="linear", rounds=2),
    "10k-mlp32": dict(peers=10_000, topology="ring", model="mlp:32", rounds=2),
}
EPOCH = 60_000
BATCH = 32


def _load() -> float:
    return os.getloadavg()[0]


def sgemm_rate(n: int = 1024, repeat: int = 5) -> float:
    """numpy float32 matmul FLOP/s on n x n x n, best of ``repeat``."""
    import numpy as np
    a = np.random.default_rng(0).random((n, n), dtype=np.float32)
    c = np.empty_like(a)
    best = math.inf
    for _ in range(repeat):
        t = time.perf_counter()
        np.matmul(a, a, out=c)
        best = min(best, time.perf_counter() - t)
    return 2 * n ** 3 / best


def config_of(case: dict, rounds: int | None = None):
    from decentlearn.sim import RunConfig
    peers = case["peers"]
    r = rounds or case.get("rounds") or math.ceil(EPOCH / (peers * BATCH))
    return RunConfig(dataset="fashion-mnist", peers=peers, topology=case["topology"],
                     model=case["model"], partition="dirichlet:0.1", rounds=r, batch_size=BATCH,
                     eval_every=r, lr=0.05)


def child(name: str, rounds: int | None) -> None:
    """Runs one case in this process and prints its figures as one JSON line."""
    from decentlearn.runner import memory
    from decentlearn.sim import Simulator
    config = config_of(CASES[name], rounds)
    est = memory.estimate(config)
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    sim = Simulator(config)
    t1 = time.perf_counter()
    result = sim.run()
    t2 = time.perf_counter()
    print(json.dumps({
        "peers": config.peers, "model": config.model, "topology": config.topology,
        "rounds": config.rounds, "samples": config.rounds * config.peers * BATCH,
        "n_params": result.summary["n_params"], "setup_s": t1 - t0, "run_s": t2 - t1,
        "eval_s": sim.eval_seconds, "total_s": t2 - t0, "cpu_s": time.process_time() - cpu0,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "estimate_bytes": est.total, "test_accuracy_mean": result.summary["test_accuracy_mean"],
    }))


def run_case(name: str, rounds: int | None = None) -> dict:
    load0 = _load()
    out = subprocess.run([sys.executable, __file__, "--child", name]
                         + (["--rounds", str(rounds)] if rounds else []),
                         cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    if out.returncode != 0:
        raise RuntimeError(f"{name} failed: {out.stderr.strip().splitlines()[-1:]}")
    fig = json.loads(out.stdout.strip().splitlines()[-1])
    fig.update(load_before=load0, load_after=_load())
    return fig


def bench_dirichlet() -> list[dict]:
    import numpy as np

    from decentlearn.data import label_skew, load_dataset, make_partition
    labels = load_dataset("fashion-mnist").y_train
    rows = []
    for alpha in (0.01, 0.1, 1.0):
        load0 = _load()
        t = time.perf_counter()
        p = make_partition(f"dirichlet:{alpha}", labels, 1000, seed=0)
        sec = time.perf_counter() - t
        rows.append({"alpha": alpha, "seconds": sec, "min_size": int(p.sizes.min()),
                     "max_size": int(p.sizes.max()), "samples": int(p.sizes.sum()),
                     "empty_peers": int(np.count_nonzero(p.sizes == 0)),
                     "label_skew": label_skew(p, labels, 10), "load": load0})
    return rows


def classify(stack: list[str]) -> str:
    """The class of a py-spy --native sample from its frames (outermost first)."""
    def kind(frame: str) -> str | None:
        if "libgomp" in frame:
            return "OpenMP runtime"
        if re.search(r"\((?:[\w/]*csrc/(?:glue/)?)?\w+\.[ch]:\d+\)", frame) or "_core.cpython" in frame:
            return "C kernels"
        if "numpy" in frame or "openblas" in frame or "_multiarray" in frame:
            return "NumPy"
        if "libc.so" in frame or "ld-linux" in frame or "[kernel" in frame:
            return None
        if ".py:" in frame or "libpython" in frame or "python3" in frame:
            return "Python"
        return None
    for frame in reversed(stack):
        k = kind(frame)
        if k is not None:
            return k
    return "other"


def split_profile(raw: str, keep) -> tuple[collections.Counter, collections.Counter]:
    """Samples per class and per (class, innermost frame) of a py-spy ``--format raw`` profile,
    over the samples whose frames (outermost first) ``keep`` accepts."""
    counts: collections.Counter = collections.Counter()
    leaves: collections.Counter = collections.Counter()
    for line in raw.splitlines():
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")
        if not keep(frames):
            continue
        cls = classify(frames)
        counts[cls] += int(n)
        leaves[(cls, re.sub(r"0x[0-9a-f]+ ", "", frames[-1]))] += int(n)
    return counts, leaves


def profile(rounds: int = 6) -> dict:
    """py-spy --native over the 1000-peer ring case (see the module docstring)."""
    if shutil.which("py-spy") is None:
        return {"error": "py-spy not installed"}
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw.txt"
        load0 = _load()
        cmd = ["py-spy", "record", "--native", "-r", "100", "-f", "raw", "-o", str(raw), "--",
               sys.executable, __file__, "--child", "dpsgd-1000-ring", "--rounds", str(rounds)]
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
        if out.returncode != 0 or not raw.exists():
            return {"error": (out.stderr.strip().splitlines() or ["py-spy failed"])[-1]}
        counts, leaves = split_profile(
            raw.read_text(), lambda frames: any("Simulator.run" in f for f in frames)
            and not any("evaluate" in f for f in frames))
    total = sum(counts.values()) or 1
    return {"samples": total, "rate_hz": 100, "rounds": rounds, "load_before": load0,
            "load_after": _load(),
            "fractions": {k: v / total for k, v in counts.most_common()},
            "top_leaves": [(c, f, n / total) for (c, f), n in leaves.most_common(15)]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the two 1000-peer cases only")
    ap.add_argument("--profile", action="store_true", help="also the py-spy C/NumPy/Python split")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "scale.json"))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.rounds)
        return
    from threadpoolctl import threadpool_info

    import decentlearn
    rate = sgemm_rate()
    blas = [{k: i.get(k) for k in ("internal_api", "version", "num_threads", "architecture")}
            for i in threadpool_info() if i.get("user_api") == "blas"]
    report = {"machine": {"cpu": cpu_info()["model_name"], "cores": os.cpu_count(),
                          "load_at_start": os.getloadavg(), "python": platform.python_version(),
                          "decentlearn": decentlearn.__version__, "blas": blas,
                          "numpy_sgemm_flops": rate},
              "cases": {}}
    names = list(CASES)[:2] if args.quick else list(CASES)
    for name in names:
        fig = run_case(name)
        flop_s = 6 * fig["samples"] * fig["n_params"] / rate
        fig["flop_time_s"] = flop_s
        fig["run_over_flop_time"] = fig["run_s"] / flop_s
        report["cases"][name] = fig
        print(f"{name:24s} total {fig['total_s']:6.1f} s, CPU {fig['cpu_s']:.1f} s (setup "
              f"{fig['setup_s']:.1f}, run "
              f"{fig['run_s']:.1f}, of which eval {fig['eval_s']:.1f}; FLOP time {flop_s:.2f} s "
              f"at numpy sgemm {rate / 1e9:.0f} GFLOP/s: {fig['run_over_flop_time']:.1f}x), "
              f"peak RSS {fig['peak_rss_bytes'] / 2**30:.2f} GiB (estimate "
              f"{fig['estimate_bytes'] / 2**30:.2f} GiB), load {fig['load_before']:.1f}"
              f"->{fig['load_after']:.1f}", flush=True)
    report["dirichlet"] = bench_dirichlet()
    for r in report["dirichlet"]:
        print(f"dirichlet:{r['alpha']:<5} 1000 peers x {r['samples']} samples: "
              f"{r['seconds'] * 1e3:.0f} ms, sizes {r['min_size']}..{r['max_size']}, "
              f"skew {r['label_skew']:.3f}, load {r['load']:.1f}", flush=True)
    if args.profile:
        report["profile"] = profile()
        prof = report["profile"]
        if "fractions" in prof:
            print("round time split (py-spy --native, 1000 peers, ring, outside evaluation): "
                  + ", ".join(f"{k} {v:.0%}" for k, v in prof["fractions"].items())
                  + f"; load {prof['load_before']:.1f}->{prof['load_after']:.1f}")
        else:
            print(f"profile: {prof['error']}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
