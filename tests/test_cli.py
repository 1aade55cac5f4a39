"""The decentlearn command: outputs of `run`, config replay, and one-line errors with exit code 2."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import decentlearn

from decentlearn.cli import main

SMALL = ["--peers", "4", "--rounds", "6", "--eval-every", "3", "--quiet"]


def run_cli(args, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_run_writes_every_output(tmp_path, capsys):
    out = tmp_path / "run"
    code, stdout, _ = run_cli(["run", *SMALL, "--out", str(out)], capsys)
    assert code == 0
    for name in ("metrics.csv", "summary.json", "config.toml", "curves.png"):
        assert (out / name).is_file(), name
    summary = json.loads((out / "summary.json").read_text())
    for key in ("test_accuracy_mean", "test_accuracy_min", "test_accuracy_max",
                "test_accuracy_avg_model", "consensus_distance", "bytes_sent_total",
                "bytes_sent_max_peer", "rounds", "wall_seconds", "config"):
        assert key in summary, key
    assert summary["rounds"] == 6 and summary["config"]["peers"] == 4
    with open(out / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["round"]) for r in rows] == [3, 6]
    assert float(rows[-1]["test_accuracy_mean"]) == pytest.approx(summary["test_accuracy_mean"])
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "test accuracy, peers mean" in stdout


def test_config_file_replays_and_flags_override(tmp_path, capsys):
    first = tmp_path / "a"
    assert main(["run", *SMALL, "--topology", "torus", "--seed", "4", "--out", str(first)]) == 0
    replay = tmp_path / "b"
    assert main(["run", "--config", str(first / "config.toml"), "--quiet",
                 "--out", str(replay)]) == 0
    a = json.loads((first / "summary.json").read_text())
    b = json.loads((replay / "summary.json").read_text())
    assert a["config"] == b["config"]
    assert a["test_accuracy_mean"] == b["test_accuracy_mean"]
    assert a["consensus_distance"] == b["consensus_distance"]
    over = tmp_path / "c"
    assert main(["run", "--config", str(first / "config.toml"), "--rounds", "3", "--quiet",
                 "--out", str(over)]) == 0
    c = json.loads((over / "summary.json").read_text())
    assert c["rounds"] == 3 and c["config"]["topology"] == "torus"
    capsys.readouterr()


@pytest.mark.parametrize("args,needle", [
    (["run", "--peers", "0"], "peers must be an integer >= 1"),
    (["run", "--topology", "moebius"], "moebius"),
    (["run", "--dataset", "fashion-mnist", "--data-dir", "/nonexistent/dir"], "/nonexistent/dir"),
    (["run", "--partition", "shards"], "shards"),
    (["run", "--lr", "abc"], "--lr"),
    (["run", "--bogus"], "--bogus"),
    (["run", "--config", "/nonexistent.toml"], "/nonexistent.toml"),
    (["run", "--dataset", "imagenet"], "imagenet"),
])
def test_user_mistakes_are_one_line_exit_2(args, needle, capsys, tmp_path):
    code, out, err = run_cli([*args, "--out", str(tmp_path / "x")], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert needle in lines[0]
    assert "Traceback" not in err


def test_bad_config_key(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text('peers = 4\nlearning_rate = 0.1\n')
    code, _, err = run_cli(["run", "--config", str(cfg)], capsys)
    assert code == 2 and "unknown option 'learning_rate'" in err


def test_console_script_entry_point_and_module(tmp_path):
    """`python -m decentlearn` works and a user mistake gives exit code 2, no traceback."""
    root = str(Path(decentlearn.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONWARNINGS="ignore",
               PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "decentlearn", "run", "--peers", "0"],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = subprocess.run([sys.executable, "-m", "decentlearn", "info"], capture_output=True,
                          text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0 and "isa" in proc.stdout


def test_bench_small(capsys):
    code, out, _ = run_cli(["bench", "--peers", "16", "--dim", "512", "--repeat", "1"], capsys)
    assert code == 0
    for needle in ("numpy neighbour loop", "scipy CSR @ X", "dense W @ X", "np.copyto",
                   "limits measured now", "of copy", "int8 peak", "sgemm"):
        assert needle in out


def test_bench_compress_small(capsys):
    code, out, _ = run_cli(["bench", "compress", "--n", "200000", "--repeat", "1"], capsys)
    assert code == 0
    assert "natural encode" in out and "np.argpartition" in out and "STC encode" in out
    assert "closed form" in out


def test_bench_gemm_small(capsys, tmp_path):
    out_json = tmp_path / "gemm.json"
    code, out, _ = run_cli(["bench", "gemm", "--shapes", "8x16x8,33x7x5", "--repeat", "1",
                            "--json", str(out_json)], capsys)
    assert code == 0
    for needle in ("8x16x8", "33x7x5", "numpy sgemm", "pipeline+packB", "kernel",
                   "of int8 peak"):
        assert needle in out
    report = json.loads(out_json.read_text())
    assert len(report["rows"]) == 8 and report["limits"]["blas"]["library"]
    assert report["limits"]["int8_peak_gops"] > 0
    code, _, err = run_cli(["bench", "gemm", "--shapes", "8x16"], capsys)
    assert code == 2 and "--shapes" in err


def test_bench_all_small(capsys, tmp_path):
    """`bench all` runs every benchmark with one set of limits and prints each acceptance figure."""
    out_json = tmp_path / "all.json"
    code, out, _ = run_cli(["bench", "all", "--n", "100000", "--peers", "8", "--dim", "1024",
                            "--repeat", "1", "--shapes", "32x64x16", "--json", str(out_json)],
                           capsys)
    assert code == 0
    report = json.loads(out_json.read_text())
    assert set(report["reports"]) == {"gossip", "natural", "topk", "stc", "quant", "gemm"}
    figures = [a["figure"] for a in report["acceptance"]]
    for needle in ("vs np.argpartition", "/ top-k", "exponential gossip", "natural encode time",
                   "qsgd:127 encode", "gemm_s8 with quantize+pack"):
        assert any(needle in f for f in figures), needle
        assert needle in out
    assert sum("vs np.argpartition" in f for f in figures) == 2
    assert "46 GB/s" not in out and "machine figure" not in out
    code, _, err = run_cli(["bench", "all", "--repeat", "0"], capsys)
    assert code == 2 and "--repeat" in err


def test_bench_cpu_time(capsys):
    """--cpu-time (one thread, CPU seconds: for a loaded machine) is said in the report."""
    code, out, _ = run_cli(["bench", "topk", "--n", "100000", "--repeat", "1", "--threads", "1",
                            "--cpu-time"], capsys)
    assert code == 0 and "1 threads, cpu clock" in out
    code, _, err = run_cli(["bench", "topk", "--n", "100000", "--cpu-time"], capsys)
    assert code == 2 and "--threads 1" in err
