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
                   "qsgd:127 encode", "gemm_s8 with quantize+pack", "read-only floor",
                   "exponential gossip: fraction of copy bandwidth"):
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


# ------------------------------------------------------------------------------------------------
# Results survive: streamed rows, summary statuses, signals (real subprocesses)

ROOT = str(Path(decentlearn.__file__).resolve().parent.parent)
ENV = dict(os.environ, PYTHONWARNINGS="ignore", PYTHONFAULTHANDLER="1",
           PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))


def csv_rows(path):
    """The data rows of metrics.csv, checking that every line is complete."""
    text = path.read_text()
    assert text.endswith("\n"), "metrics.csv ends in a partial line"
    lines = text.splitlines()
    width = len(lines[0].split(","))
    assert all(len(line.split(",")) == width for line in lines), "a row has missing fields"
    return list(csv.DictReader(lines))


def default_sigint() -> None:
    """``preexec_fn`` of a child that a test interrupts with SIGINT: SIGINT at its default
    disposition. A shell starts background jobs with SIGINT ignored, children inherit that, and
    Python (and decentlearn) leave it ignored, as a nohup'ed program should."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_long_run(out):
    return subprocess.Popen(
        [sys.executable, "-m", "decentlearn", "run", "--peers", "4", "--model", "linear",
         "--rounds", "100000", "--eval-every", "1", "--quiet", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, cwd=out.parent,
        preexec_fn=default_sigint)


def wait_for_rows(proc, path, n, timeout=60.0):
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if path.exists() and path.read_text().count("\n") >= n + 1:
            return
        time.sleep(0.02)
    proc.kill()
    raise AssertionError(f"no {n} rows in {path} after {timeout} s")


@pytest.mark.parametrize("sig,code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_signal_leaves_rows_and_interrupted_summary(tmp_path, sig, code):
    import signal
    out = tmp_path / "run"
    proc = start_long_run(out)
    wait_for_rows(proc, out / "metrics.csv", 3)
    proc.send_signal(getattr(signal, sig))
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # show where it hangs: faulthandler dumps on SIGABRT
        proc.send_signal(signal.SIGABRT)
        _, err = proc.communicate(timeout=30)
        raise AssertionError(f"no exit 60 s after {sig}; its threads:\n{err}") from None
    assert proc.returncode == code, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and sig in err
    rows = csv_rows(out / "metrics.csv")
    assert len(rows) >= 3 and [int(r["round"]) for r in rows] == list(range(1, len(rows) + 1))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert summary["last_round"] >= int(rows[-1]["round"]) == summary["last_eval_round"]
    assert (out / "config.toml").read_text().count("peers = 4") == 1


def test_sigkill_leaves_finished_rows(tmp_path):
    import signal
    out = tmp_path / "run"
    proc = start_long_run(out)
    wait_for_rows(proc, out / "metrics.csv", 3)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert len(csv_rows(out / "metrics.csv")) >= 3
    assert json.loads((out / "summary.json").read_text())["status"] == "running"


def test_broken_pipe_exits_quietly(tmp_path):
    """`decentlearn run ... | head -1`: the reader is gone before the table is printed."""
    proc = subprocess.Popen([sys.executable, "-m", "decentlearn", "run", *SMALL, "--out",
                             str(tmp_path / "run")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=ENV, cwd=tmp_path)
    proc.stdout.close()
    with proc.stderr:
        err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert proc.returncode in (0, 141), err
    assert err == "", err
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "completed"


def test_divergence_stops_early_with_status(tmp_path, capsys):
    """The issue's case: compressed D-PSGD with qsgd:2 (default 16 peers) reached a consensus
    distance of 7.7e23 and stopped only at round 87; now it is warned about at the start and
    stopped as soon as the loss or consensus distance passes its bound."""
    out = tmp_path / "run"
    code, _, err = run_cli(["run", "--compress", "qsgd:2", "--rounds", "100", "--eval-every", "1",
                            "--quiet", "--out", str(out)], capsys)
    assert code == 3 and "Traceback" not in err  # 3: diverged (2 is a usage mistake)
    lines = err.strip().splitlines()
    assert len(lines) == 2 and "warning: compressed D-PSGD needs a low-variance" in lines[0]
    assert "training diverged at round" in lines[1]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["last_round"] <= 15
    assert summary["error"].startswith("training diverged at round")
    assert len(csv_rows(out / "metrics.csv")) == summary["last_round"]


# ------------------------------------------------------------------------------------------------
# Output directories and full disks


def test_existing_run_dir_refused_unless_overwrite(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", *SMALL, "--out", str(out)]) == 0
    before = (out / "summary.json").read_text()
    code, _, err = run_cli(["run", *SMALL, "--seed", "3", "--out", str(out)], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "already holds a run" in err and "--overwrite" in err
    assert (out / "summary.json").read_text() == before
    assert main(["run", *SMALL, "--seed", "3", "--out", str(out), "--overwrite"]) == 0
    assert json.loads((out / "summary.json").read_text())["config"]["seed"] == 3
    assert len(csv_rows(out / "metrics.csv")) == 2
    capsys.readouterr()


def test_default_run_dir_never_collides(tmp_path, monkeypatch, capsys):
    from decentlearn.outputs import rundir
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(rundir.time, "strftime", lambda fmt: "20260101-120000")
    for _ in range(2):
        assert main(["run", *SMALL]) == 0
    made = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert made == ["20260101-120000", "20260101-120000-2"]
    assert all((tmp_path / "runs" / m / "summary.json").is_file() for m in made)
    capsys.readouterr()


def unwritable_dir(tmp_path):
    if os.geteuid() == 0:  # root writes through file modes; /sys refuses everyone
        return Path("/sys/decentlearn-test-run")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    return ro / "run"


@pytest.mark.parametrize("kind", ["read-only", "file", "under-a-file"])
def test_out_unusable_is_one_line(tmp_path, capsys, kind):
    (tmp_path / "f").write_text("")
    out = {"read-only": unwritable_dir(tmp_path), "file": tmp_path / "f",
           "under-a-file": tmp_path / "f" / "run"}[kind]
    code, _, err = run_cli(["run", *SMALL, "--out", str(out)], capsys)
    assert code == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and str(out) in err


@pytest.mark.parametrize("n_ok,failing", [(0, "config.toml"), (5, "metrics.csv"),
                                          (6, "peers.csv"), (14, "summary.json")])
def test_full_disk_is_one_line_and_leaves_no_empty_file(tmp_path, monkeypatch, capsys, n_ok,
                                                        failing):
    """ENOSPC injected at the (n_ok + 1)-th write (config, running summary, then per evaluation
    the peers' rows and the metrics row, 6 times, final summary):
    one line naming the file and "no space", exit 2, no 0-byte or partial file."""
    from test_results import full_disk_after
    out = tmp_path / "run"
    full_disk_after(monkeypatch, n_ok)
    code, _, err = run_cli(["run", *SMALL[:4], "--eval-every", "1", "--quiet", "--out", str(out)],
                            capsys)
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines() == [
        f"decentlearn: error: cannot write {out / failing}: no space left on device"]
    for name in ("summary.json", "config.toml"):
        assert not (out / name).exists() or (out / name).stat().st_size > 0
    if n_ok:
        assert json.loads((out / "summary.json").read_text())["status"] == "running"
        assert len(csv_rows(out / "metrics.csv")) == min((n_ok - 2) // 2, 6)
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_plot_failure_keeps_results(tmp_path, monkeypatch, capsys):
    import decentlearn.outputs.plot

    def broken(*args, **kwargs):
        raise RuntimeError("no display\nmore")

    monkeypatch.setattr(decentlearn.outputs.plot, "plot_curves", broken)
    out = tmp_path / "run"
    code, stdout, err = run_cli(["run", *SMALL, "--out", str(out)], capsys)
    assert code == 0 and err.strip().splitlines() == [
        f"decentlearn: warning: {out / 'curves.png'} not written: no display"]
    assert json.loads((out / "summary.json").read_text())["status"] == "completed"
    assert len(csv_rows(out / "metrics.csv")) == 2 and not (out / "curves.png").exists()


# ------------------------------------------------------------------------------------------------
# One-line errors: downloads, config files, typos


@pytest.fixture
def http_404():
    import http.server
    import threading

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_error(404, "File not found")

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def closed_port_url():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # nothing listens there any more: connection refused


@pytest.mark.parametrize("where", ["404", "unreachable"])
def test_download_errors_are_one_line(tmp_path, capsys, http_404, where):
    url = http_404 if where == "404" else closed_port_url()
    code, _, err = run_cli(["download", "mnist", "--data-dir", str(tmp_path / "d"),
                            "--mirror", url], capsys)
    assert code == 2 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("decentlearn: error: download mnist:")
    assert ("404" in lines[0]) if where == "404" else ("refused" in lines[0].lower())


@pytest.mark.parametrize("text,needle", [
    ('peers = 4\n[run]\nrounds = 3\n', "key 'peers' is outside the [run] table"),
    ('[run]\npeers = 4\n[sweep]\nlr = [0.1, 0.2]\n', "unknown section [sweep]"),
    ('[sweep]\nlr = [0.1]\n', "unknown section [sweep]"),
    ('[run]\npeer = 4\n', "unknown option 'peer'; did you mean 'peers'?"),
])
def test_config_file_structure_errors(tmp_path, capsys, text, needle):
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    code, _, err = run_cli(["run", "--config", str(cfg), "--out", str(tmp_path / "x")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err
    assert not (tmp_path / "x").exists()


def test_config_run_table_alone_works(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[run]\npeers = 4\nrounds = 2\neval_every = 2\n')
    assert main(["run", "--config", str(cfg), "--quiet", "--out", str(tmp_path / "r")]) == 0
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["config"]["peers"] == 4
    capsys.readouterr()


@pytest.mark.parametrize("args,needle", [
    (["run", "--peer", "8"], "unrecognized arguments: --peer 8 (did you mean --peers?)"),
    (["run", "--pers", "8"], "(did you mean --peers?)"),
    (["run", "--rouds=5"], "(did you mean --rounds?)"),
    (["run", "--topology", "rnig"], "unknown topology 'rnig'; did you mean 'ring'?"),
    (["run", "--algorithm", "choko"], "unknown algorithm 'choko'; did you mean 'choco'?"),
    (["run", "--compress", "tpok:0.01"], "did you mean 'topk'?"),
    (["run", "--compress", "ef:tpok:0.01"], "did you mean 'topk'?"),
    (["run", "--model", "mpl"], "unknown model 'mpl'; did you mean 'mlp'?"),
    (["run", "--dataset", "fashion-mnst"], "did you mean 'fashion-mnist'?"),
    (["run", "--partition", "dirichle:0.1"], "did you mean 'dirichlet'?"),
    (["run", "--precision", "fp33"], "did you mean 'fp32'?"),
    (["bench", "gosip"], "did you mean 'gossip'?"),
    (["run", "--algorithm", "choco", "--compress", "topk:0.01"], "needs gamma"),
    (["run", "--error-feedback"], "--error-feedback needs a compressor"),
])
def test_typos_are_caught_with_a_suggestion(args, needle, capsys, tmp_path):
    code, _, err = run_cli([*args, "--out", str(tmp_path / "x")], capsys)
    assert code == 2 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], err


def _registered_names():
    """(flag, registered name) for every name a spec flag of `run` accepts, discovered from the
    registries after importing everything a run can use."""
    import decentlearn.network  # noqa: F401 - registers pushsum and epidemic
    import decentlearn.sim  # noqa: F401
    from decentlearn import algorithms, compress, optim, topology
    from decentlearn.data import available_datasets, available_partitions
    from decentlearn.nn import available_models
    families = {"algorithm": algorithms.available(), "topology": topology.available(),
                "compress": compress.available(), "model": available_models(),
                "dataset": [f.split(":")[0] for f in available_datasets()],
                "partition": [f.split(":")[0] for f in available_partitions()],
                "optimizer": optim.OPTIMIZERS}
    return [(flag, name) for flag, names in families.items() for name in names]


def _run_help(capsys):
    with pytest.raises(SystemExit) as info:
        main(["run", "--help"])
    assert info.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("flag,name", _registered_names())
def test_run_help_lists_every_registered_name(flag, name, capsys):
    """`run --help` names every registered algorithm, topology, compressor, model, data set,
    partition and optimizer in its flag's help (generated from the registries: a name added to a
    registry appears without editing the CLI)."""
    lines = _run_help(capsys).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"  --{flag} "))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith(" " * 4))
    text = " ".join(" ".join(lines[start:end]).split())
    import re
    assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text), (flag, name, text)


@pytest.mark.parametrize("flag", ["algorithm", "topology"])
def test_run_help_lists_exactly_the_registered_names(flag):
    from decentlearn.cli import build_parser
    names = sorted(n for f, n in _registered_names() if f == flag)
    run = build_parser()._subparsers._group_actions[0].choices["run"]
    action = next(a for a in run._actions if f"--{flag}" in a.option_strings)
    assert ", ".join(names) in action.help  # every name, in order, and nothing between them


def test_algorithm_options_have_their_own_help_group(capsys):
    from decentlearn.cli import build_parser
    run = build_parser()._subparsers._group_actions[0].choices["run"]
    groups = {g.title: {o for a in g._group_actions for o in a.option_strings}
              for g in run._action_groups if g.title.endswith(" options")}
    # One group per set of algorithms sharing the options, generated from their Options.
    assert groups["choco options"] == {"--gamma"}
    assert groups["compngc, ngc options"] == {"--ngc-alpha", "--ngc-gamma", "--ngc-weights",
                                              "--ngc-self-gradient"}
    assert groups["compngc options"] == {"--compngc-local"}
    assert groups["fedavg, fedhisyn, stc-fl options"] == {"--participation", "--weighting"}
    assert groups["fedhisyn options"] == {"--categories", "--speeds", "--hops-max"}
    assert groups["stc-fl options"] == {"--server-compress"}
    assert groups["skewscout options"] == {"--skew-target", "--skew-probe-every",
                                           "--skew-period-max"}
    text = _run_help(capsys)
    assert text.index("skewscout options:") < text.index("  --skew-period-max SKEW_PERIOD_MAX\n")


def test_every_parser_refuses_abbreviations():
    from decentlearn.cli import build_parser
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.choices and "run" in a.choices)
    assert not parser.allow_abbrev
    assert all(not p.allow_abbrev for p in subparsers.choices.values())


# ------------------------------------------------------------------------------------------------
# Runs set up wrong say so; error feedback; summary formatting


def test_setup_warnings_are_one_line_each(tmp_path, capsys):
    code, _, err = run_cli(["run", *SMALL, "--compress", "topk:0.01",
                            "--out", str(tmp_path / "a")], capsys)
    assert code == 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and all(line.startswith("decentlearn: warning: ") for line in lines)
    assert "'topk:0.01' is biased" in lines[0] and "--compress ef:topk:0.01" in lines[0]
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert len(summary["warnings"]) == 1
    # An option of another algorithm is no warning but a mistake, in one line.
    code, _, err = run_cli(["run", *SMALL, "--gamma", "0.5", "--out", str(tmp_path / "b")], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "option 'gamma' is not an option of algorithm 'dpsgd' (it is choco's)" in err


@pytest.mark.parametrize("flags", [["--compress", "ef:topk:0.01"],
                                   ["--compress", "topk:0.01", "--error-feedback"]])
def test_error_feedback_from_the_cli(tmp_path, capsys, flags):
    from decentlearn import compress
    from decentlearn.sim import RunConfig, Simulator
    code, _, err = run_cli(["run", *SMALL, *flags, "--out", str(tmp_path / "a")], capsys)
    assert code == 0 and err == ""  # no "biased" warning: error feedback keeps what top-k drops
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["config"]["compress"] == "ef:topk:0.01"
    sim = Simulator(RunConfig(peers=4, compress="ef:topk:0.01"))
    assert isinstance(sim.algorithm.compressor, compress.ErrorFeedback)


def test_summary_table_spectral_gap_keeps_small_values():
    from decentlearn.outputs.format import format_summary
    summary = {"test_accuracy_mean": 0.5, "test_accuracy_min": 0.4, "test_accuracy_max": 0.6,
               "test_accuracy_avg_model": 0.55, "consensus_distance": 1e-3,
               "bytes_sent_total": 10, "bytes_sent_max_peer": 5, "spectral_gap": 2.6e-5,
               "rounds": 1, "wall_seconds": 1.0}
    table = format_summary(summary)
    assert "2.6e-05" in table and "0.0000" not in table
    assert "0.1953" in format_summary(dict(summary, spectral_gap=0.19526214587563473))


def test_one_bytes_format_in_every_table():
    """The run's table and `compare` write byte counts alike (units.format_bytes)."""
    from decentlearn.outputs.format import compare_rows, format_summary
    from decentlearn.outputs.rundir import Run
    from decentlearn.units import format_bytes
    assert [format_bytes(n) for n in (0, 512, 1536, 10_240_000, 3 << 30)] == [
        "0 B", "512 B", "1.5 KiB", "9.77 MiB", "3 GiB"]
    # 3 significant digits never turn into an exponent: from 999.5 of a unit on, the next unit
    assert [format_bytes(n) for n in (1023, 999 << 20, 999.6 * 2**20, 1010 << 20,
                                      1023.999 * 2**20, 1000 << 10)] == [
        "1023 B", "999 MiB", "0.976 GiB", "0.986 GiB", "1 GiB", "0.977 MiB"]
    summary = {"test_accuracy_mean": 0.5, "test_accuracy_min": 0.4, "test_accuracy_max": 0.6,
               "test_accuracy_avg_model": 0.55, "consensus_distance": 1e-3,
               "bytes_sent_total": 10_240_000, "bytes_sent_max_peer": 1536, "spectral_gap": 0.5,
               "rounds": 1, "wall_seconds": 1.0}
    table = format_summary(summary)
    assert "bytes sent, total               9.77 MiB\n" in table and "1.5 KiB" in table
    header, rows = compare_rows([Run(Path("r"), {}, summary, [])])
    assert rows[0][header.index("bytes sent")] == "9.77 MiB"
