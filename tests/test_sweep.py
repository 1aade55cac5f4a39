"""decentlearn sweep: grids from a [run] table with lists, one run directory per point, resuming
after Ctrl-C without redoing finished runs, mean ± std over seeds."""

import csv
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import decentlearn

from decentlearn.experiments import sweep
from decentlearn.cli import main

ROOT = Path(__file__).resolve().parents[1]
GRID = """[run]
peers = 4
rounds = 4
eval_every = 2
batch_size = 8
topology = ["ring", "complete"]
partition = ["iid", "dirichlet:0.1"]
seed = [0, 1, 2]
"""


def write(tmp_path, text, name="grid.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def full_sweep(tmp_path_factory):
    """The 2 topologies x 2 partitions x 3 seeds sweep, uninterrupted, in process."""
    root = tmp_path_factory.mktemp("sweep")
    config = write(root, GRID)
    assert main(["sweep", str(config), "--out", str(root / "out"), "--quiet"]) == 0
    return root / "out"


def test_grid_points_and_names():
    grid = sweep.Grid.from_options({"peers": 4, "seed": [0, 1], "topology": ["ring", "torus"],
                                    "partition": "dirichlet:0.1"})
    assert list(grid.axes) == ["topology", "seed"]  # file order, seed last
    names = [p.name for p in grid.points()]
    assert names == ["topology-ring__seed-0", "topology-ring__seed-1",
                     "topology-torus__seed-0", "topology-torus__seed-1"]
    assert grid.points()[3].config().partition == "dirichlet:0.1" and len(grid) == 4
    # values with the same file-name rendering still get distinct directories
    axes = {"topology": ["edges:a b", "edges:a_b"]}
    odd = sweep.Grid({}, axes).points()
    assert len({p.name for p in odd}) == 2
    assert all(p.name.startswith("topology-edges_a_b__") for p in odd)
    assert [p.name for p in sweep.Grid({}, dict(axes)).points()] == [p.name for p in odd]


def test_full_sweep_table_is_mean_std_over_seeds(full_sweep, capsys):
    runs = sorted(p.name for p in full_sweep.iterdir() if p.is_dir())
    assert len(runs) == 12
    rows = read_csv(full_sweep / "summary.csv")
    assert [(r["topology"], r["partition"]) for r in rows] == [
        ("ring", "iid"), ("ring", "dirichlet:0.1"), ("complete", "iid"),
        ("complete", "dirichlet:0.1")]
    for row in rows:
        assert row["runs"] == "3/3"
        name = f"topology-{row['topology']}__partition-{row['partition'].replace(':', '_')}"
        accs = [json.loads((full_sweep / f"{name}__seed-{s}" / "summary.json").read_text())
                ["test_accuracy_mean"] for s in range(3)]
        mean = sum(accs) / 3
        std = math.sqrt(sum((a - mean) ** 2 for a in accs) / 2)  # sample std (ddof=1)
        assert float(row["test_accuracy_mean_mean"]) == pytest.approx(mean, abs=1e-12)
        assert float(row["test_accuracy_mean_std"]) == pytest.approx(std, abs=1e-12)
    doc = json.loads((full_sweep / "summary.json").read_text())
    assert doc["points"] == 12 and doc["axes"]["seed"] == [0, 1, 2]
    assert (full_sweep / "summary.png").read_bytes()[:4] == b"\x89PNG"


def test_rerun_skips_everything(full_sweep, tmp_path, capsys):
    before = {p: p.stat().st_mtime_ns for p in full_sweep.glob("*/summary.json")}
    config = write(tmp_path, GRID)
    assert main(["sweep", str(config), "--out", str(full_sweep), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "(12 already finished, 0 run now" in out and "±" in out
    assert {p: p.stat().st_mtime_ns for p in full_sweep.glob("*/summary.json")} == before


def default_sigint() -> None:
    """``preexec_fn`` of a child that a test interrupts with SIGINT: SIGINT at its default
    disposition. A shell starts background jobs with SIGINT ignored, children inherit that, and
    Python (and decentlearn) leave it ignored, as a nohup'ed program should."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_then_resume_redoes_only_unfinished(full_sweep, tmp_path, capsys):
    config = write(tmp_path, GRID.replace("rounds = 4", "rounds = 4\nthreads = 1"))
    out = tmp_path / "out"
    # The package under test (the installed one in CI, the in-place build here), never the
    # checkout's unbuilt decentlearn/ through the working directory.
    pkg_root = str(Path(decentlearn.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": pkg_root}
    proc = subprocess.Popen([sys.executable, "-m", "decentlearn", "sweep", str(config), "--out",
                             str(out), "--quiet"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_sigint)

    def completed():
        n = 0
        for s in out.glob("*/summary.json"):
            try:
                n += json.loads(s.read_text())["status"] == "completed"
            except (OSError, ValueError, KeyError):
                pass
        return n

    deadline = time.monotonic() + 120
    while completed() < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    done = {}
    for s in out.glob("*/summary.json"):
        status = json.loads(s.read_text())["status"]
        if status == "completed":
            done[s] = (s.stat().st_mtime_ns, (s.parent / "metrics.csv").stat().st_mtime_ns)
        else:
            assert status in ("interrupted", "running"), status
    # (a run that had just written "completed" when SIGINT came may be marked interrupted)
    assert 1 <= len(done) < 12
    capsys.readouterr()
    assert main(["sweep", str(config), "--out", str(out), "--quiet"]) == 0
    stdout = capsys.readouterr().out
    assert f"({len(done)} already finished, {12 - len(done)} run now" in stdout
    for s, mtimes in done.items():  # finished runs were not redone
        assert (s.stat().st_mtime_ns, (s.parent / "metrics.csv").stat().st_mtime_ns) == mtimes
    # the final table equals the uninterrupted sweep's (threads never change results)
    assert read_csv(out / "summary.csv") == read_csv(full_sweep / "summary.csv")


def test_parallel_jobs_give_the_same_runs(full_sweep, tmp_path):
    config = write(tmp_path, GRID.replace('partition = ["iid", "dirichlet:0.1"]',
                                          'partition = "iid"').replace("seed = [0, 1, 2]",
                                                                       "seed = 1"))
    out = tmp_path / "par"
    assert main(["sweep", str(config), "--out", str(out), "--jobs", "2", "--quiet"]) == 0
    for topo in ("ring", "complete"):
        got = json.loads((out / f"topology-{topo}" / "summary.json").read_text())
        ref = json.loads((full_sweep / f"topology-{topo}__partition-iid__seed-1" /
                          "summary.json").read_text())
        for key in ("test_accuracy_mean", "consensus_distance", "bytes_sent_total"):
            assert got[key] == ref[key], key


def test_changed_options_rerun_the_point(tmp_path, capsys):
    config = write(tmp_path, "[run]\npeers = 4\nrounds = 2\neval_every = 1\nseed = [0]\n")
    out = tmp_path / "o"
    assert main(["sweep", str(config), "--out", str(out), "--quiet"]) == 0
    config.write_text("[run]\npeers = 4\nrounds = 3\neval_every = 1\nseed = [0]\n")
    capsys.readouterr()
    assert main(["sweep", str(config), "--out", str(out), "--quiet"]) == 0
    assert "(0 already finished, 1 run now" in capsys.readouterr().out
    assert json.loads((out / "seed-0" / "summary.json").read_text())["rounds"] == 3


@pytest.mark.parametrize("line, message", [
    ('topology = []', "'topology' is an empty list"),
    ('seed = [1, 1]', "lists a value twice"),
    ('bogus = [1, 2]', "unknown option 'bogus'"),
    ('peers = [4, 0]', "point peers=0: peers must be an integer >= 1"),
    ('partition = ["iid", "dirichlt:0.1"]', "did you mean 'dirichlet'"),
    ('model = ["mlp", "resnet"]', "model"),
    ('compress = ["none", "topk:2"]', "point compress='topk:2'"),
    ('lr = [[0.1]]', "must hold scalars"),
])
def test_invalid_grid_one_line_exit_2(tmp_path, capsys, line, message):
    config = write(tmp_path, f"[run]\nrounds = 2\n{line}\n")
    assert main(["sweep", str(config), "--out", str(tmp_path / "never")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
    assert not (tmp_path / "never").exists()


def test_sweep_refuses_a_point_that_does_not_fit(tmp_path, capsys, monkeypatch):
    from decentlearn.runner import memory
    from decentlearn.sim import RunConfig
    small = memory.estimate(RunConfig(peers=4, rounds=1), probe=False).total
    monkeypatch.setenv(memory.LIMIT_ENV, str(int(1.5 * small)))  # room for 4 peers, not 2000
    config = write(tmp_path, "[run]\nrounds = 1\npeers = [4, 2000]\n")
    assert main(["sweep", str(config), "--out", str(tmp_path / "never")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "point peers-2000: refused" in err
    assert not (tmp_path / "never").exists()


def test_sweep_usage_errors(tmp_path, capsys):
    assert main(["sweep", str(tmp_path / "missing.toml"), "--out", str(tmp_path)]) == 2
    assert "no such file" in capsys.readouterr().err
    config = write(tmp_path, "[run]\nrounds = 2\n")
    assert main(["sweep", str(config), "--out", str(tmp_path / "x"), "--jobs", "0"]) == 2
    assert "--jobs must be >= 1" in capsys.readouterr().err
    assert main(["sweep", str(config)]) == 2  # --out is required
    assert "--out" in capsys.readouterr().err
