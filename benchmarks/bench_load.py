"""How a run slows down when the machine is busy: the README's Fashion-MNIST CNN example, cut to a
few rounds, timed quiet, beside busy loops and beside other decentlearn runs, in one script.

    python benchmarks/bench_load.py [--rounds 10] [--others 2] [--repeat 1] [--env K=V ...]
                                    [--out FILE.json]

Each case starts ``--others`` background processes (busy Python loops, or the same decentlearn
command with many rounds), waits until they run, times one foreground run as a subprocess (wall
clock, start-up and evaluation included) and stops them. A fair share of the CPUs beside two others
is 3x the quiet time on any machine with fewer cores than processes. ``--env K=V`` sets a variable in
every process (foreground and background), e.g. ``--env OMP_WAIT_POLICY=active`` to compare with an
explicit policy. Needs Fashion-MNIST (``apt-get install dataset-fashion-mnist``); ``--dataset
digits`` uses the embedded data (shorter, so noisier).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from decentlearn.experiments.bench import cpu_info

ARGS = ["--peers", "64", "--topology", "small-world:4:0.1", "--partition", "shards:2",
        "--model", "cnn:gn", "--lr", "0.05"]
BUSY = [sys.executable, "-c", "while True: pass"]


def _run_cmd(dataset: str, rounds: int, out: Path) -> list[str]:
    return [sys.executable, "-m", "decentlearn", "run", "--dataset", dataset, *ARGS,
            "--rounds", str(rounds), "--out", str(out), "--overwrite", "--quiet"]


def _timed(cmd: list[str], env: dict, cwd: Path) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"bench_load: the foreground run failed (exit {done.returncode}):\n"
                         f"{done.stderr[-2000:]}")
    return dt


def measure(case: str, *, dataset: str, rounds: int, others: int, env: dict, tmp: Path) -> float:
    procs = []
    try:
        for i in range(others if case != "quiet" else 0):
            cmd = BUSY if case == "busy" else _run_cmd(dataset, 100000, tmp / f"bg{i}")
            procs.append(subprocess.Popen(cmd, env=env, cwd=tmp, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
        if procs:
            # let the background runs load their data and reach their rounds
            time.sleep(2.0 if case == "busy" else 12.0)
            for p in procs:
                if p.poll() is not None:
                    raise SystemExit(f"bench_load: a background process of case {case!r} exited "
                                     f"early ({p.returncode})")
        # from the temporary folder: `python -m` puts the working directory first on sys.path,
        # and a checkout there would shadow the package under test
        return _timed(_run_cmd(dataset, rounds, tmp / "fg"), env, tmp)
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--others", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--dataset", default="fashion-mnist")
    ap.add_argument("--cases", default="quiet,busy,decentlearn")
    ap.add_argument("--env", action="append", default=[], metavar="K=V")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    env = dict(os.environ)
    for kv in a.env:
        k, _, v = kv.partition("=")
        if v == "":
            env.pop(k, None)
        else:
            env[k] = v
    tmp = Path(tempfile.mkdtemp(prefix="bench_load_"))
    results = {}
    try:
        for case in a.cases.split(","):
            times = [measure(case, dataset=a.dataset, rounds=a.rounds, others=a.others, env=env,
                             tmp=tmp) for _ in range(a.repeat)]
            results[case] = min(times)
            ratio = results[case] / results["quiet"] if "quiet" in results else float("nan")
            print(f"{case:12s} {results[case]:8.2f} s   {ratio:5.2f}x quiet"
                  + (f"   (beside {a.others} {'busy loops' if case == 'busy' else 'runs'})"
                     if case != "quiet" else ""), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    info = cpu_info()
    report = {"cpu": f"{info['model_name']} (family {info['family']} model {info['model']})", "cpus": os.cpu_count(), "rounds": a.rounds, "others": a.others,
              "dataset": a.dataset, "env": a.env, "seconds": results,
              "ratio": {k: v / results["quiet"] for k, v in results.items()} if "quiet" in results
              else {}}
    if a.out:
        a.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
