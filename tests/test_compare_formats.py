"""decentlearn compare --format csv|json for other programs (unique columns, raw numbers), folders
of runs (a sweep's output) for plot and compare, and stale ``running`` summaries."""

import csv
import importlib.util
import io
import json
import os
import socket
import subprocess
import sys
import time

import pytest

from decentlearn.cli import main
from decentlearn.outputs import liveness
from decentlearn.outputs.rundir import RunDirError, find_runs, load_run

SMALL = ["--peers", "4", "--eval-every", "2", "--quiet"]

#: Columns that are text (the rest must be numbers, or empty where absent).
TEXT = {"run", "path", "status", "network"}
INTEGER = {"last_round", "bytes_sent_total", "rounds"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three runs that differ in rounds (a config field named like a summary column) and network
    (sim_seconds absent from two of them), and an interrupted one with no final summary."""
    root = tmp_path_factory.mktemp("cmp")
    for name, extra in (("a", ["--rounds", "4"]), ("b", ["--rounds", "6"]),
                        ("c", ["--rounds", "4", "--network", "datacenter"])):
        assert main(["run", *SMALL, *extra, "--out", str(root / name)]) == 0
    cut = root / "d"
    cut.mkdir()
    (cut / "summary.json").write_text(json.dumps({"status": "interrupted", "last_round": 3}))
    return root, [root / n for n in "abcd"]


def _csv(capsys, *paths) -> list[dict]:
    assert main(["compare", *map(str, paths), "--format", "csv"]) == 0
    text = capsys.readouterr().out
    header = next(csv.reader(io.StringIO(text)))
    assert len(header) == len(set(header)), header  # every column name once
    return header, list(csv.DictReader(io.StringIO(text))), text


def test_csv_columns_are_unique_and_numbers_raw(runs, capsys):
    _, dirs = runs
    header, rows, _ = _csv(capsys, *dirs)
    assert "rounds" in header and "last_round" in header  # the config field and the summary's
    for col in header:
        if col in TEXT:
            continue
        for row in rows:
            cell = row[col]
            if cell == "":
                continue  # absent
            float(cell)  # every numeric cell parses, no units, no '-'
            if col in INTEGER:
                assert cell == str(int(cell)), (col, cell)  # integers, not 4.74 MiB
    for row, d in zip(rows, dirs):
        summary = json.loads((d / "summary.json").read_text())
        for key in ("test_accuracy_mean", "test_accuracy_min", "test_accuracy_avg_model",
                    "consensus_distance", "wall_seconds", "bytes_sent_total", "last_round"):
            if key in summary:  # unrounded: the very number of summary.json
                assert float(row[key]) == summary[key], key
            else:
                assert row[key] == "", key
    assert [r["sim_seconds"] != "" for r in rows] == [False, False, True, False]
    assert [r["status"] for r in rows] == ["completed", "completed", "completed", "interrupted"]
    assert rows[3]["rounds"] == "" and rows[3]["network"] == ""  # no config: absent, not "?"


def test_csv_numeric_dtypes_in_pandas(runs, capsys):
    pd = pytest.importorskip("pandas")
    _, dirs = runs
    header, _, text = _csv(capsys, *dirs)
    frame = pd.read_csv(io.StringIO(text))
    numeric = [c for c in header if c not in TEXT]
    assert len(numeric) >= 9
    for col in numeric:
        assert pd.api.types.is_numeric_dtype(frame[col]), (col, frame[col].dtype)
    assert frame["bytes_sent_total"].iloc[0] == json.loads(
        (dirs[0] / "summary.json").read_text())["bytes_sent_total"]


def test_json_raw_values(runs, capsys):
    _, dirs = runs
    assert main(["compare", *map(str, dirs), "--format", "json"]) == 0
    records = json.loads(capsys.readouterr().out)
    first = json.loads((dirs[0] / "summary.json").read_text())
    assert isinstance(records[0]["bytes_sent_total"], int)
    assert records[0]["bytes_sent_total"] == first["bytes_sent_total"]
    assert isinstance(records[0]["wall_seconds"], float)
    assert records[0]["test_accuracy_mean"] == first["test_accuracy_mean"]
    assert records[0]["sim_seconds"] is None and records[3]["test_accuracy_mean"] is None
    assert records[0]["rounds"] == 4 and records[1]["rounds"] == 6
    assert records[2]["network"] == "datacenter" and records[0]["network"] is None


def test_table_stays_for_people(runs, capsys):
    _, dirs = runs
    assert main(["compare", *map(str, dirs)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "last round" in lines[0] and "MiB" in lines[2]
    assert lines[-1].split()[0] == "d" and "-" in lines[-1].split()


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    grid = root / "grid.toml"
    grid.write_text('[run]\npeers = 4\nrounds = 2\neval_every = 1\ntopology = ["ring", '
                    '"complete"]\nseed = [0, 1]\n')
    out = root / "out"
    assert main(["sweep", str(grid), "--out", str(out), "--quiet"]) == 0
    return out


def test_compare_and_plot_take_a_sweep_folder(sweep, tmp_path, capsys):
    capsys.readouterr()
    points = sorted(p.name for p in sweep.iterdir() if p.is_dir())
    assert len(points) == 4 and (sweep / "summary.json").is_file()
    assert [p.name for p in find_runs([sweep])] == points
    assert main(["compare", str(sweep), "--format", "json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [r["run"] for r in records] == points
    assert all(r["status"] == "completed" and r["last_round"] == 2 for r in records)
    png = tmp_path / "sweep.png"
    assert main(["plot", str(sweep), "--out", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "4 runs" in capsys.readouterr().out
    # a folder holding sweeps: every run below it
    assert len(find_runs([sweep.parent])) == 4


@pytest.mark.parametrize("command", ["compare", "plot"])
def test_a_folder_without_runs_is_one_line_exit_2(command, tmp_path, capsys):
    empty = tmp_path / "nothing"
    (empty / "sub").mkdir(parents=True)
    (empty / "summary.json").write_text(json.dumps({"axes": {}, "rows": []}))  # a sweep's own
    args = [command, str(empty)] + (["--out", str(tmp_path / "x.png")] if command == "plot"
                                    else [])
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no runs in this folder" in err and str(empty) in err
    with pytest.raises(RunDirError, match="no runs"):
        find_runs([empty])
    assert not (tmp_path / "x.png").exists()


# --- stale running summaries ------------------------------------------------------------------

def _wait_for(predicate, seconds=120.0):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_sigkilled_run_shows_as_stale(tmp_path, capsys):
    out = tmp_path / "killed"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, "-m", "decentlearn", "run", "--peers", "4",
                             "--rounds", "1000000", "--eval-every", "1", "--quiet", "--out",
                             str(out)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, cwd=tmp_path)
    try:
        assert _wait_for(lambda: (out / "metrics.csv").is_file()
                         and (out / "metrics.csv").read_text().count("\n") >= 2)
        summary = json.loads((out / "summary.json").read_text())
        assert summary["status"] == "running"
        assert summary["process"]["pid"] == proc.pid
        assert summary["process"]["host"] == socket.gethostname()
        assert load_run(out).status == "running"  # alive
        proc.kill()
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    assert json.loads((out / "summary.json").read_text())["status"] == "running"  # forever
    assert load_run(out).status == "stale"
    assert main(["compare", str(out), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["status"] == "stale"
    assert main(["compare", str(out)]) == 0
    assert "stale" in capsys.readouterr().out
    # plot's legend says so too: a partial curve is not read as a finished run
    from decentlearn.outputs.plot import run_labels
    assert run_labels([load_run(out)]) == ["killed (stale)"]
    if importlib.util.find_spec("matplotlib") is not None:
        assert main(["plot", str(out), "--out", str(tmp_path / "p.png")]) == 0
        assert "killed (stale)" in capsys.readouterr().out


def test_stale_rules_on_this_host_and_elsewhere(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text("{}")
    me = liveness.process_record(30.0)
    running = {"status": "running", "process": me}
    assert liveness.status_of(running, path) == "running"  # this very process
    recycled = dict(me, pid_start=(me["pid_start"] or 0) + 1)  # same pid, another process
    if me["pid_start"] is not None:
        assert liveness.status_of({"status": "running", "process": recycled}, path) == "stale"
    if me["boot_id"] is not None:
        rebooted = dict(me, boot_id="another-boot")
        assert liveness.status_of({"status": "running", "process": rebooted}, path) == "stale"
    # written on another host: the heartbeat (summary.json's modification time) decides
    other = {"status": "running", "process": dict(me, host=me["host"] + "-elsewhere",
                                                   heartbeat_seconds=30.0)}
    now = time.time()
    os.utime(path, (now - 60, now - 60))
    assert liveness.status_of(other, path, now=now) == "running"
    os.utime(path, (now - liveness.STALE_AFTER_SECONDS - 1,) * 2)
    assert liveness.status_of(other, path, now=now) == "stale"
    # a finished run, or a running one from before the record: as written
    assert liveness.status_of({"status": "completed", "process": recycled}, path) == "completed"
    assert liveness.status_of({"status": "running"}, path) == "running"


def test_heartbeat_touches_the_summary(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text("{}")
    os.utime(path, (1000.0, 1000.0))
    beat = liveness.Heartbeat(path, 0.02)
    beat.start()
    try:
        assert _wait_for(lambda: os.stat(path).st_mtime > time.time() - 60, 10.0)
    finally:
        beat.stop()
    with pytest.raises(ValueError, match="seconds must be a number > 0"):
        liveness.Heartbeat(path, 0)


def test_pid_alive():
    assert liveness.pid_alive(os.getpid(), liveness.process_start(os.getpid()))
    assert not liveness.pid_alive(0) and not liveness.pid_alive(-3)
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    try:  # exited but not reaped (no poll, no wait): a zombie is not alive
        stat = f"/proc/{proc.pid}/stat"
        if os.path.exists(stat):
            def zombie():
                with open(stat) as f:
                    return f.read().rsplit(")", 1)[1].split()[0] == "Z"
            assert _wait_for(zombie, 30)
            assert not liveness.pid_alive(proc.pid)
    finally:
        proc.wait()
    assert not liveness.pid_alive(proc.pid)


@pytest.mark.parametrize("started", [False, True])
def test_heartbeat_survives_ctrl_c_inside_start(tmp_path, monkeypatch, started):
    """A KeyboardInterrupt while the thread is being started (a sweep's Ctrl-C landing there)
    leaves the run able to stop cleanly: stop() never joins a thread that did not start, and
    stops one that did."""
    import threading

    real_start = threading.Thread.start

    def interrupted(self):
        if started:
            real_start(self)
        raise KeyboardInterrupt

    beat = liveness.Heartbeat(tmp_path / "summary.json", 0.01)
    monkeypatch.setattr(threading.Thread, "start", interrupted)
    with pytest.raises(KeyboardInterrupt):
        beat.start()
    monkeypatch.setattr(threading.Thread, "start", real_start)
    beat.stop()  # was: RuntimeError "cannot join thread before it is started"
    assert not any(t.name == "decentlearn-heartbeat" and t.is_alive()
                   for t in threading.enumerate())
