"""Where a round's time goes: py-spy ``record --native`` over the rounds of bench_round.py's cases,
each sample classified as decentlearn's C kernels, the OpenMP runtime (a thread waiting at a
barrier), NumPy (its extension modules and BLAS) or Python (interpreter frames), as
bench_scale.py --profile does for the 1000-peer run.

    python benchmarks/profile_round.py [--threads 1] [--rounds 60] [--rate 200]
                                       [--out benchmarks/results/round_profile.json]

Cases (D-PSGD ring rounds: sampling, loss_and_grad, SGD step with momentum, gossip): ``mlp``
(256 peers, digits, 64-128-10, batch 32), ``mlp-int8``, ``cnn`` (16 peers, digits) and
``cnn-int8``. Each runs in its own process under py-spy; only samples taken inside the timed
rounds count (not the set-up). With ``--threads 1`` (the default) the split does not depend on
how busy the machine is, since it is a share of one thread's samples; at 2 threads the OpenMP
share is mostly waiting for the other thread, which a loaded machine inflates. Needs py-spy
(``pip install py-spy``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from bench_scale import split_profile  # noqa: E402

CASES = {
    "mlp": dict(peers=256, model="mlp", precision="fp32"),
    "mlp-int8": dict(peers=256, model="mlp", precision="int8"),
    "cnn": dict(peers=16, model="cnn", precision="fp32"),
    "cnn-int8": dict(peers=16, model="cnn", precision="int8"),
}


def _profiled_rounds(alg, sample, rounds: int) -> None:
    """The rounds py-spy's samples are kept from (found by this function's name)."""
    for t in range(3, 3 + rounds):
        alg.round(sample, t)


def child(name: str, threads: int, rounds: int) -> None:
    from threadpoolctl import threadpool_limits

    from decentlearn.sim import RunConfig, Simulator

    config = RunConfig(dataset="digits", topology="ring", partition="iid", batch_size=32,
                       momentum=0.9, eval_every=10**6, rounds=10**6, threads=threads,
                       **CASES[name])
    sim = Simulator(config)
    with threadpool_limits(limits=threads, user_api="blas"):
        for t in range(3):
            sim.algorithm.round(sim.sample, t)
        _profiled_rounds(sim.algorithm, sim.sample, rounds)


def profile(name: str, threads: int, rounds: int, rate: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw.txt"
        cmd = ["py-spy", "record", "--native", "-r", str(rate), "-f", "raw", "-o", str(raw), "--",
               sys.executable, __file__, "--child", name, "--threads", str(threads),
               "--rounds", str(rounds)]
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
        if out.returncode != 0 or not raw.exists():
            return {"error": (out.stderr.strip().splitlines() or ["py-spy failed"])[-1]}
        counts, leaves = split_profile(
            raw.read_text(), lambda frames: any("_profiled_rounds" in f for f in frames))
    total = sum(counts.values()) or 1
    return {"samples": total, "rate_hz": rate, "rounds": rounds, "threads": threads,
            "load_before": os.getloadavg()[0],
            "fractions": {k: v / total for k, v in counts.most_common()},
            "top_leaves": [(c, f, n / total) for (c, f), n in leaves.most_common(12)]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--out", default=str(HERE / "results" / "round_profile.json"))
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child, args.threads, args.rounds)
        return
    if shutil.which("py-spy") is None:
        sys.exit("profile_round.py needs py-spy (pip install py-spy)")
    from decentlearn.experiments.bench import cpu_info

    report = {"cpu": cpu_info()["model_name"], "cases": {}}
    kinds = ("C kernels", "OpenMP runtime", "NumPy", "Python", "other")
    print(f"{'case':>9}  " + "  ".join(f"{k:>14}" for k in kinds) + "  samples")
    for name in args.cases.split(","):
        r = profile(name, args.threads, args.rounds, args.rate)
        report["cases"][name] = r
        if "error" in r:
            print(f"{name:>9}  error: {r['error']}")
            continue
        print(f"{name:>9}  " + "  ".join(f"{100 * r['fractions'].get(k, 0):13.1f}%"
                                         for k in kinds) + f"  {r['samples']}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
