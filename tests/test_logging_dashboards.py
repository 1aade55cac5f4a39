"""Logging (library code never prints; run.log in the run directory) and the dashboard callbacks
(TensorBoard, MLflow), each read back with its own library when installed."""

import ast
import csv
import logging
import pathlib
import sys

import numpy as np
import pytest

import decentlearn
from decentlearn.cli import main
from decentlearn.outputs import RunWriter
from decentlearn.outputs.runlog import LOGGER, RunLog
from decentlearn.sim import RunConfig, Simulator

PACKAGE = pathlib.Path(decentlearn.__file__).parent
SMALL = ["run", "--peers", "4", "--rounds", "4", "--eval-every", "2", "--quiet"]

#: Functions whose purpose is to print (numpy.show_config does the same).
PRINTERS = {("__init__.py", "show_config")}


class _Prints(ast.NodeVisitor):
    """print() calls and tqdm imports, with the function they are in."""

    def __init__(self, rel):
        self.rel, self.where, self.found = rel, ["module"], []

    def visit_FunctionDef(self, node):
        self.where.append(node.name)
        self.generic_visit(node)
        self.where.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node):
        if isinstance(node.func, ast.Name) and node.func.id == "print" \
                and (self.rel, self.where[-1]) not in PRINTERS:
            self.found.append(f"{self.rel}:{node.lineno} print in {self.where[-1]}")
        self.generic_visit(node)

    def visit_Import(self, node):
        if any(a.name.split(".")[0] == "tqdm" for a in node.names):
            self.found.append(f"{self.rel}:{node.lineno} imports tqdm")

    def visit_ImportFrom(self, node):
        if (node.module or "").split(".")[0] == "tqdm":
            self.found.append(f"{self.rel}:{node.lineno} imports tqdm")


def test_library_code_never_prints():
    """Outside the CLI, nothing prints or draws progress bars (show_config's purpose is to print);
    the check is proved by a planted print."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] == "cli":
            continue
        visitor = _Prints(str(rel))
        visitor.visit(ast.parse(path.read_text(), str(path)))
        found += visitor.found
    assert found == []
    planted = _Prints("runner/loop.py")
    planted.visit(ast.parse("def f():\n    print('x')\nimport tqdm\n"))
    assert planted.found == ["runner/loop.py:2 print in f", "runner/loop.py:3 imports tqdm"]


def _metrics(run_dir):
    with open(run_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_run_log_holds_the_runs_records(tmp_path):
    out = tmp_path / "r"
    assert main([*SMALL, "--out", str(out)]) == 0
    log = (out / "run.log").read_text().splitlines()
    assert all(" INFO " in line or " WARNING " in line for line in log)
    assert any("decentlearn.runner: set up: digits" in line for line in log)
    evals = [line for line in log if "decentlearn.runner: round " in line]
    rows = _metrics(out)
    assert len(evals) == len(rows) == 2
    for line, row in zip(evals, rows):  # the logged numbers are metrics.csv's
        assert f"round {row['round']}/4: test accuracy {float(row['test_accuracy_mean']):.4f}" \
            in line
    assert "run completed" in log[-1]


def test_run_log_records_a_failure_and_setup_problems(tmp_path):
    out = tmp_path / "d"
    # compressed D-PSGD with a biased compressor: a setup problem (WARNING); huge lr: diverges
    code = main([*SMALL, "--compress", "topk:0.1", "--lr", "1e6", "--out", str(out)])
    assert code != 0
    log = (out / "run.log").read_text()
    assert "WARNING decentlearn.runner: setup problem: compressed D-PSGD" in log
    assert "ERROR decentlearn.outputs: run diverged: training diverged at round" in log


def test_cli_stderr_gets_no_log_records(tmp_path):
    """Without logging configured, no record reaches Python's last-resort stderr handler: the CLI
    reports an interruption in its one line (a planted SIGTERM mid-run)."""
    import os
    import signal
    import subprocess
    import time
    out = tmp_path / "r"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, "-m", "decentlearn", *SMALL[:-3], "--rounds",
                             "1000000", "--eval-every", "1", "--quiet", "--compress",
                             "topk:0.1", "--out", str(out)], env=env, cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not ((out / "metrics.csv").is_file()
                   and (out / "metrics.csv").read_text().count("\n") >= 2):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    lines = err.strip().splitlines()
    # the setup warning (compressed D-PSGD with topk) and the interruption: the CLI's lines only
    assert len(lines) == 2 and all(line.startswith("decentlearn: ") for line in lines), err
    log = (out / "run.log").read_text()
    assert "WARNING decentlearn.outputs: run interrupted" in log
    assert "WARNING decentlearn.runner: setup problem" in log


def test_library_logging_is_silent_unless_configured(tmp_path):
    """simulate() logs (a setup problem at WARNING) but, logging left unconfigured, nothing
    reaches stderr through Python's last-resort handler (the SetupWarning is ignored here)."""
    import subprocess
    code = ("from decentlearn import simulate\n"
            "simulate(peers=4, rounds=2, eval_every=2, compress='topk:0.1')\n")
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == ""
    code += ("import logging\nlogging.basicConfig(level=logging.INFO)\n"
             "simulate(peers=4, rounds=2, eval_every=2, compress='topk:0.1')\n")
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert "WARNING:decentlearn.runner:setup problem: compressed D-PSGD" in proc.stderr
    assert "INFO:decentlearn.runner:round 2/2: test accuracy" in proc.stderr


def test_run_log_does_not_change_what_the_root_handlers_see(tmp_path):
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    root, logger = logging.getLogger(), logging.getLogger(LOGGER)
    keep = Keep()
    root.addHandler(keep)
    saved = (logger.level, logger.propagate, root.level)
    root.setLevel(logging.WARNING)
    try:
        with RunLog(tmp_path / "run.log"):
            logging.getLogger("decentlearn.runner").info("an info line")
            logging.getLogger("decentlearn.runner").warning("a warning line")
        assert (logger.level, logger.propagate, root.level) == saved  # restored
        text = (tmp_path / "run.log").read_text()
        assert "INFO decentlearn.runner: an info line" in text
        assert "WARNING decentlearn.runner: a warning line" in text
        # the root's handler got the warning once and no info, as it would without run.log
        assert [r.getMessage() for r in records] == ["a warning line"]
    finally:
        root.removeHandler(keep)
        root.setLevel(saved[2])


# --- dashboards -----------------------------------------------------------------------------------

def _run_with(tmp_path, callback):
    config = RunConfig(peers=4, rounds=4, eval_every=2)
    with RunWriter(tmp_path / "run", config) as writer, callback:
        result = Simulator(config).run([writer, callback])
        writer.finish(result.summary)
    return _metrics(tmp_path / "run")


def test_tensorboard_receives_the_metrics(tmp_path):
    pytest.importorskip("tensorboardX")
    ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    from decentlearn.outputs import TensorBoardCallback

    (tmp_path / "run").mkdir()
    cb = TensorBoardCallback(tmp_path / "tb", config=RunConfig(peers=4, rounds=4, eval_every=2))
    rows = _run_with(tmp_path, cb)
    acc = ea.EventAccumulator(str(tmp_path / "tb"),
                              size_guidance={ea.SCALARS: 0, ea.HISTOGRAMS: 0})
    acc.Reload()
    tags = acc.Tags()
    for key in ("test_accuracy_mean", "consensus_distance", "bytes_sent_total", "train_loss"):
        events = acc.Scalars(key)
        assert [e.step for e in events] == [int(r["round"]) for r in rows]
        # float32 in the event file
        np.testing.assert_allclose([e.value for e in events], [float(r[key]) for r in rows],
                                   rtol=1e-6)
    assert "peers/test_accuracy" in tags["histograms"]
    hist = acc.Histograms("peers/test_accuracy")
    assert [h.step for h in hist] == [2, 4] and hist[-1].histogram_value.num == 4
    assert "config" in str(tags)


# MLflow's own use of SQLAlchemy warns of deprecations that are not ours.
@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")
def test_mlflow_receives_the_metrics(tmp_path):
    pytest.importorskip("mlflow")
    pytest.importorskip("sqlalchemy")  # the sqlite store
    from mlflow.tracking import MlflowClient

    from decentlearn.outputs import MLflowCallback

    (tmp_path / "run").mkdir()
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    config = RunConfig(peers=4, rounds=4, eval_every=2)
    cb = MLflowCallback(uri, experiment="tests", run_name="small", config=config)
    rows = _run_with(tmp_path, cb)
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(cb.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "small"
    assert run.data.params["peers"] == "4" and run.data.params["algorithm"] == "dpsgd"
    for key in ("test_accuracy_mean", "test_accuracy_min", "consensus_distance",
                "bytes_sent_total"):
        history = sorted(client.get_metric_history(cb.run_id, key), key=lambda m: m.step)
        assert [m.step for m in history] == [int(r["round"]) for r in rows]
        assert [m.value for m in history] == [float(r[key]) for r in rows]


@pytest.mark.parametrize("name,package", [("tensorboard", "tensorboardX"), ("mlflow", "mlflow")])
def test_missing_dashboard_package_is_one_line_exit_2(name, package, tmp_path, capsys,
                                                      monkeypatch):
    for key in [k for k in sys.modules if k.startswith(package + ".")] + [package]:
        monkeypatch.setitem(sys.modules, key, None)  # as if not installed
    out = tmp_path / "r"
    assert main([*SMALL, "--log-to", name, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--log-to {name}" in err
    assert f"pip install 'decentlearn[{name}]'" in err
    assert not out.exists()  # refused before anything was made
    from decentlearn.outputs import MLflowCallback, TensorBoardCallback
    with pytest.raises(ImportError, match=f"decentlearn\\[{name}\\]"):
        (TensorBoardCallback(tmp_path) if name == "tensorboard" else MLflowCallback())


def test_log_to_writes_tensorboard_beside_the_run(tmp_path):
    pytest.importorskip("tensorboardX")
    out = tmp_path / "r"
    assert main([*SMALL, "--log-to", "tensorboard", "--out", str(out)]) == 0
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))


def test_a_failed_start_leaves_no_handler_attached(tmp_path, monkeypatch):
    from test_results import full_disk_after
    before = list(logging.getLogger(LOGGER).handlers)
    full_disk_after(monkeypatch, 0)  # config.toml cannot be written
    with pytest.raises(OSError, match="no space left on device"):
        with RunWriter(tmp_path, RunConfig(peers=2)):
            pass
    assert logging.getLogger(LOGGER).handlers == before
