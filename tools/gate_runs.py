"""A fixed set of CLI runs whose results must not change across a refactor.

Runs every algorithm, int8, CoCoFL, the network model, asynchronous gossip, finite-time and
nonlinear mixing, Clique Averaging and the MPI backend through ``decentlearn run`` (the CLI is the
interface that stays stable while the code below it moves), and writes one JSON file mapping each
run's name to its summary and its metrics rows, with the fields that measure wall-clock time
removed (and the echoed ``config``, whose layout may change). Compare two such files with
``--compare A.json B.json``: it prints every field that differs and exits 1 if any does.

    python tools/gate_runs.py --out before.json          # on the old checkout
    python tools/gate_runs.py --out after.json           # on the new one
    python tools/gate_runs.py --compare before.json after.json
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BASE = ["--rounds", "6", "--eval-every", "3", "--quiet", "--threads", "2"]

#: name -> extra CLI flags (after BASE).
RUNS: dict[str, list[str]] = {
    "dpsgd": [],
    "dpsgd-cta-local2": ["--variant", "cta", "--local-steps", "2"],
    "dpsgd-natural": ["--compress", "natural"],
    "dpsgd-ef-sign": ["--compress", "ef:sign"],
    "choco-topk": ["--algorithm", "choco", "--compress", "topk:0.1", "--gamma", "0.5"],
    "choco-qsgd": ["--algorithm", "choco", "--compress", "qsgd:16", "--gamma", "0.2"],
    "allreduce": ["--algorithm", "allreduce"],
    "allreduce-int8": ["--algorithm", "allreduce", "--compress", "int8"],
    "fedavg": ["--algorithm", "fedavg", "--participation", "0.5"],
    "stc-fl": ["--algorithm", "stc-fl", "--compress", "stc:0.05", "--participation", "0.5"],
    "fedhisyn": ["--algorithm", "fedhisyn", "--categories", "3"],
    "ngc": ["--algorithm", "ngc"],
    "compngc": ["--algorithm", "compngc", "--compress", "topk:0.1"],
    "dacfl": ["--algorithm", "dacfl"],
    "skewscout": ["--algorithm", "skewscout", "--model", "cnn-bn", "--skew-probe-every", "2"],
    "dsgt": ["--algorithm", "dsgt"],
    "d2": ["--algorithm", "d2", "--momentum", "0"],
    "pushsum": ["--algorithm", "pushsum", "--topology", "one-peer-exponential"],
    "epidemic": ["--algorithm", "epidemic", "--topology", "epidemic:3"],
    "int8-mlp": ["--precision", "int8"],
    "int8-cnn": ["--precision", "int8", "--model", "cnn", "--peers", "8"],
    "cocofl": ["--cocofl", "0.5:1", "--model", "cnn", "--peers", "8"],
    "adam-cosine": ["--optimizer", "adam", "--lr", "0.002", "--lr-schedule", "cosine"],
    "network-mobile": ["--network", "mobile"],
    "network-faults": ["--network", "tests/mpi_network.toml", "--peers", "7"],
    "async": ["--network", "edge", "--async"],
    "finite-time": ["--mixing", "finite-time", "--topology", "hypercube"],
    "nonlinear": ["--mixing", "nonlinear"],
    "dcliques-ca": ["--topology", "d-cliques:4", "--clique-averaging", "--partition", "classes:1"],
    "moshpit": ["--topology", "moshpit:4"],
    "exponential-timevarying": ["--topology", "one-peer-exponential"],
}

#: name -> extra CLI flags of runs under ``mpiexec -n 2 ... --backend mpi``.
MPI_RUNS: dict[str, list[str]] = {
    "mpi-dpsgd": [],
    "mpi-choco": ["--algorithm", "choco", "--compress", "topk:0.1", "--gamma", "0.5"],
    "mpi-fedavg": ["--algorithm", "fedavg", "--participation", "0.5"],
    "mpi-ngc": ["--algorithm", "ngc"],
    "mpi-skewscout": ["--algorithm", "skewscout", "--model", "cnn-bn", "--skew-probe-every", "2"],
    "mpi-network": ["--network", "tests/mpi_network.toml", "--peers", "7"],
    "mpi-async": ["--network", "edge", "--async"],
    "mpi-dcliques": ["--topology", "d-cliques:4", "--clique-averaging", "--partition",
                     "classes:1"],
    "mpi-finite-time": ["--mixing", "finite-time", "--topology", "hypercube"],
}

#: Fields that measure wall-clock time or echo the configuration.
DROP = {"wall_seconds", "config", "seconds", "fraction_of_run", "mpi"}


def _clean(obj):
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items() if k not in DROP}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    return obj


def _read(run_dir: Path) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return {"summary": _clean(summary), "metrics": _clean(rows)}


def _mpiexec() -> str | None:
    found = shutil.which("mpiexec") or str(Path(sys.executable).parent / "mpiexec")
    return found if Path(found).exists() else None


def run_all(names: list[str] | None, mpi: bool) -> dict:
    out = {}
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               MPLBACKEND="Agg")
    with tempfile.TemporaryDirectory() as tmp:
        todo = [(n, f, False) for n, f in RUNS.items()]
        if mpi and _mpiexec():
            todo += [(n, f, True) for n, f in MPI_RUNS.items()]
        for name, flags, on_mpi in todo:
            if names and name not in names:
                continue
            run_dir = Path(tmp) / name
            cmd = [sys.executable, "-m", "decentlearn", "run", *BASE, *flags, "--out",
                   str(run_dir)]
            if on_mpi:
                cmd = [_mpiexec(), "--oversubscribe", "-n", "2", *cmd, "--backend", "mpi"]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                out[name] = {"error": proc.stderr.strip().splitlines()[-1:]}
                print(f"{name}: exit {proc.returncode}: {proc.stderr.strip()[-300:]}",
                      file=sys.stderr)
                continue
            out[name] = _read(run_dir)
            print(f"{name}: ok", file=sys.stderr)
    return out


def _diff(a, b, path="") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        lines = []
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                lines.append(f"{path}/{k}: only in {'after' if k in b else 'before'}")
            else:
                lines += _diff(a[k], b[k], f"{path}/{k}")
        return lines
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [line for i, (x, y) in enumerate(zip(a, b)) for line in _diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} -> {b!r}"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="write the runs' results to this JSON file")
    p.add_argument("--only", nargs="*", help="run only these names")
    p.add_argument("--no-mpi", action="store_true", help="leave out the MPI runs")
    p.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = p.parse_args(argv)
    if args.compare:
        before, after = (json.loads(Path(f).read_text()) for f in args.compare)
        lines = _diff(before, after)
        print("\n".join(lines) if lines else f"identical: {len(before)} runs")
        return 1 if lines else 0
    result = run_all(args.only, not args.no_mpi)
    text = json.dumps(result, indent=1, sort_keys=True)
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
