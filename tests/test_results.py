"""Run outputs: atomic writes under faults, streamed metrics.csv, summary statuses, run directories."""

import csv
import errno
import json
import os
import signal
import threading

import pytest

from decentlearn import atomic, interrupts
from decentlearn.atomic import OutputError, atomic_write
from decentlearn.outputs.rundir import RunWriter, new_run_dir, prepare_run_dir
from decentlearn.sim import DivergenceError, RunConfig

ROW = {"round": 1, "train_loss": 2.0, "test_accuracy_mean": 0.5, "consensus_distance": 0.1}


def full_disk_after(monkeypatch, n_ok):
    """From the (n_ok + 1)-th write on, half of the bytes reach the file and then ENOSPC."""
    real = atomic.write_all
    calls = {"n": 0}

    def write(fd, data):
        calls["n"] += 1
        if calls["n"] > n_ok:
            os.write(fd, bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd, data)

    monkeypatch.setattr(atomic, "write_all", write)
    return calls


def no_temp_files(directory):
    return [p.name for p in directory.iterdir() if p.name.endswith(".tmp")] == []


def test_atomic_write_replaces_and_never_truncates(tmp_path, monkeypatch):
    path = tmp_path / "summary.json"
    atomic_write(path, '{"status": "running"}\n')
    assert json.loads(path.read_text()) == {"status": "running"}
    full_disk_after(monkeypatch, 0)
    with pytest.raises(OutputError) as info:
        atomic_write(path, '{"status": "completed", "padding": "' + "x" * 100_000 + '"}\n')
    assert str(info.value) == f"cannot write {path}: no space left on device"
    assert info.value.errno == errno.ENOSPC
    assert json.loads(path.read_text()) == {"status": "running"}  # the old file, whole
    assert no_temp_files(tmp_path)
    fresh = tmp_path / "config.toml"
    with pytest.raises(OutputError, match="no space"):
        atomic_write(fresh, "peers = 4\n")
    assert not fresh.exists() and no_temp_files(tmp_path)


def test_metrics_rows_are_flushed_and_whole(tmp_path, monkeypatch):
    writer = RunWriter(tmp_path, RunConfig(peers=4))
    writer.start()
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "running"
    assert (tmp_path / "config.toml").read_text().startswith("# decentlearn run configuration")
    for r in (1, 2):
        writer.append(dict(ROW, round=r))
        # Flushed at once: another reader sees every row without the writer closing the file.
        with open(tmp_path / "metrics.csv", newline="") as f:
            assert [int(row["round"]) for row in csv.DictReader(f)] == list(range(1, r + 1))
    full_disk_after(monkeypatch, 0)
    with pytest.raises(OutputError, match="metrics.csv: no space left on device"):
        writer.append(dict(ROW, round=3))
    text = (tmp_path / "metrics.csv").read_text()
    assert text.endswith("\n") and text.count("\n") == 3  # header + 2 rows, the half row cut off
    with pytest.raises(ValueError, match="not in metrics.csv's columns"):
        writer.append(dict(ROW, round=4, surprise=1))
    writer.close()


@pytest.mark.parametrize("exc,status", [
    (KeyboardInterrupt(), "interrupted"),
    (interrupts.Interrupted(signal.SIGTERM), "interrupted"),
    (DivergenceError(4, RunConfig(), "the consensus distance 1e9 exceeds the bound"), "diverged"),
    (RuntimeError("kernel exploded\nsecond line"), "failed"),
])
def test_status_on_exception(tmp_path, exc, status):
    with pytest.raises(type(exc)):
        with RunWriter(tmp_path, RunConfig(peers=4)) as writer:
            writer.on_round_end(None, 0)
            writer.on_eval(None, dict(ROW, round=1))
            writer.on_round_end(None, 1)
            raise exc
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == status and summary["last_round"] == 2
    assert summary["last_eval_round"] == 1 and summary["test_accuracy_mean"] == 0.5
    assert summary["config"]["peers"] == 4
    assert "\n" not in summary["error"]
    if status == "failed":
        assert summary["error"] == "kernel exploded"


def test_completed_summary_and_nonfinite_values(tmp_path):
    with RunWriter(tmp_path, RunConfig(peers=4)) as writer:
        writer.append(dict(ROW, round=6))
        writer.finish({"rounds": 6, "consensus_distance": float("inf"), "test_accuracy_mean": 0.5})
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["last_round"] == 6
    assert summary["consensus_distance"] == "inf"  # valid JSON, not Infinity


def test_interrupt_after_finish_keeps_completed(tmp_path):
    """Ctrl-C landing after finish() (while the writer closes) leaves a complete run complete, so a
    sweep does not redo it."""
    with pytest.raises(KeyboardInterrupt):
        with RunWriter(tmp_path, RunConfig(peers=4)) as writer:
            writer.append(dict(ROW, round=6))
            writer.finish({"rounds": 6, "test_accuracy_mean": 0.5})
            raise KeyboardInterrupt
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["test_accuracy_mean"] == 0.5
    assert "error" not in summary


def test_summary_keeps_last_good_version_when_disk_fills(tmp_path, monkeypatch):
    with pytest.raises(OutputError):
        with RunWriter(tmp_path, RunConfig(peers=4)) as writer:
            writer.append(ROW)
            full_disk_after(monkeypatch, 0)
            writer.finish({"rounds": 1})
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "running"
    assert no_temp_files(tmp_path)


def test_run_dirs(tmp_path):
    a = new_run_dir(tmp_path / "runs", stamp="20260101-000000")
    b = new_run_dir(tmp_path / "runs", stamp="20260101-000000")
    c = new_run_dir(tmp_path / "runs", stamp="20260101-000000")
    assert [p.name for p in (a, b, c)] == ["20260101-000000", "20260101-000000-2",
                                           "20260101-000000-3"]
    # Many threads asking at once still get distinct directories.
    got, lock = [], threading.Lock()

    def take():
        d = new_run_dir(tmp_path / "race", stamp="s")
        with lock:
            got.append(d)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == 8
    (a / "metrics.csv").write_text("round\n")
    with pytest.raises(FileExistsError, match="already holds a run"):
        prepare_run_dir(a)
    assert prepare_run_dir(a, overwrite=True) == a and not (a / "metrics.csv").exists()
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError):
        prepare_run_dir(tmp_path / "file")
    with pytest.raises(OutputError, match="cannot write"):
        prepare_run_dir(tmp_path / "file" / "sub")


def test_signals_as_interrupts_restores_handlers():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(interrupts.Interrupted) as info:
        with interrupts.signals_as_interrupts((signal.SIGTERM,)):
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(10**6):  # the handler runs between bytecodes
                pass
    assert info.value.signum == signal.SIGTERM and isinstance(info.value, KeyboardInterrupt)
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.parametrize("whole", [True, False])
def test_a_signal_between_write_and_bookkeeping_keeps_file_and_summary_agreeing(tmp_path, monkeypatch,
                                                                                  whole):
    """KeyboardInterrupt/SIGTERM can land right after a row reached the file (whole=True) or in the
    middle of writing it (whole=False): the summary's last evaluation round must then be the last
    complete row on disk, and the file must hold only complete rows."""
    writer = RunWriter(tmp_path)
    writer.append({"round": 1, "train_loss": 1.0})
    real = atomic.write_all

    def interrupted(fd, data):
        real(fd, data if whole else data[: len(data) // 2])
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic, "write_all", interrupted)
    with pytest.raises(KeyboardInterrupt):
        writer.append({"round": 2, "train_loss": 0.5})
    monkeypatch.setattr(atomic, "write_all", real)
    writer.write_summary("interrupted")
    writer.close()
    with open(tmp_path / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["round"]) for r in rows] == ([1, 2] if whole else [1])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["last_eval_round"] == int(rows[-1]["round"])
    assert (tmp_path / "metrics.csv").read_bytes().endswith(b"\n")
