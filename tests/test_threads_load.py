"""Threads on a busy machine (issue 24): decentlearn's OpenMP and OpenBLAS wait defaults, BLAS
limits.

The speed itself is measured by benchmarks/bench_load.py, never asserted here; these tests check
the mechanisms: the spin count reaches libgomp and the thread timeout reaches OpenBLAS unless the
user chose them, OpenBLAS's idle threads then stop using CPU time at once, and numpy's BLAS runs
on the run's thread count during a run (evaluation included)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from threadpoolctl import threadpool_info

import decentlearn

from decentlearn.sim import Callback, RunConfig, Simulator


def _python(code: str, env: dict) -> str:
    """``python -c code`` on the package under test (the installed one in CI, the in-place build
    here), from a temporary directory: never the checkout's unbuilt decentlearn/."""
    with tempfile.TemporaryDirectory() as cwd:
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _env(**overrides) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPENBLAS_THREAD_TIMEOUT")}
    env["PYTHONPATH"] = str(Path(decentlearn.__file__).resolve().parent.parent)
    env.update(overrides)
    return env


def test_spin_count_default_is_set_before_libgomp_loads():
    code = ("import os, decentlearn as dl\n"
            "before = os.environ.get('GOMP_SPINCOUNT')\n"
            "from decentlearn import _core\n"
            "print(before, dl.config()['openmp_wait'])")
    out = _python(code, _env())
    assert out == (f"{decentlearn.OMP_SPINCOUNT_DEFAULT} GOMP_SPINCOUNT="
                   f"{decentlearn.OMP_SPINCOUNT_DEFAULT} (decentlearn's default)")
    # libgomp reads the variable when it loads: _core must not be loaded before the default is set
    code = "import sys, decentlearn\nprint('decentlearn._core' in sys.modules)"
    assert _python(code, _env()) == "False"


@pytest.mark.parametrize("var,value", [("OMP_WAIT_POLICY", "active"), ("GOMP_SPINCOUNT", "7")])
def test_a_users_wait_policy_is_kept(var, value):
    code = "import os, decentlearn as dl\nprint(os.environ.get('GOMP_SPINCOUNT'), dl.config()['openmp_wait'])"
    spin, _, how = _python(code, _env(**{var: value})).partition(" ")
    assert spin == (value if var == "GOMP_SPINCOUNT" else "None")
    assert how == f"{var}={value} (from the environment)"


def test_blas_thread_timeout_default_is_set_before_openblas_loads():
    code = ("import os, decentlearn as dl\n"
            "print(os.environ.get('OPENBLAS_THREAD_TIMEOUT'), dl.config()['blas_wait'])")
    out = _python(code, _env())
    assert out == (f"{decentlearn.BLAS_THREAD_TIMEOUT_DEFAULT} OPENBLAS_THREAD_TIMEOUT="
                   f"{decentlearn.BLAS_THREAD_TIMEOUT_DEFAULT} (decentlearn's default)")


def test_a_users_blas_thread_timeout_is_kept_and_a_late_import_says_so():
    code = ("import os, decentlearn as dl\n"
            "print(os.environ.get('OPENBLAS_THREAD_TIMEOUT'), dl.config()['blas_wait'])")
    assert _python(code, _env(OPENBLAS_THREAD_TIMEOUT="20")) == (
        "20 OPENBLAS_THREAD_TIMEOUT=20 (from the environment)")
    if not _openblas():
        pytest.skip("numpy's BLAS is not OpenBLAS")
    code = "import numpy, os, decentlearn as dl\n" + code.split("\n", 1)[1]
    assert _python(code, _env()) == (
        "None OpenBLAS's default (OpenBLAS was loaded before decentlearn)")


def _openblas() -> bool:
    return any(i["internal_api"] == "openblas" for i in threadpool_info())


# CPU seconds the process uses while its main thread sleeps 0.3 s right after a 512^2 matmul on 2
# BLAS threads: only OpenBLAS's idle worker can use any.
_IDLE_CPU = """
import time, numpy as np
from threadpoolctl import threadpool_limits
a = np.ones((512, 512), np.float32)
with threadpool_limits(limits=2, user_api="blas"):
    np.matmul(a, a)
    t0 = time.process_time()
    time.sleep(0.3)
    print(time.process_time() - t0)
"""


def test_openblas_idle_threads_stop_spinning_with_the_default():
    """Mechanism: with OpenBLAS's own timeout (2^28 cycles) the idle worker spins about 0.1 s
    after the call (128 ms of CPU measured on 2 cores); with decentlearn's (2^16 cycles) well under
    a millisecond. Bounds: 20 ms either side, far from both."""
    if not _openblas():
        pytest.skip("numpy's BLAS is not OpenBLAS")
    if os.cpu_count() is None or os.cpu_count() < 2:
        pytest.skip("OpenBLAS has one thread on one CPU: nothing to spin")
    ours = float(_python("import decentlearn\n" + _IDLE_CPU, _env()))
    theirs = float(_python(_IDLE_CPU, _env(OPENBLAS_THREAD_TIMEOUT="28")))
    assert ours < 0.02, ours
    assert theirs > 0.02, theirs  # the control: the timeout is what stops the spin


class _BlasThreads(Callback):
    def __init__(self):
        self.seen = []

    def _record(self):
        self.seen.append({i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"})

    def on_round_end(self, sim, t):
        self._record()

    def on_eval(self, sim, row):
        self._record()


def test_blas_runs_on_the_runs_threads_and_is_restored():
    blas = [i for i in threadpool_info() if i["user_api"] == "blas"]
    if not blas:
        pytest.skip("numpy's BLAS is not visible to threadpoolctl")
    before = {i["num_threads"] for i in blas}
    cb = _BlasThreads()
    sim = Simulator(RunConfig(peers=4, rounds=2, eval_every=1, threads=1, eval_peer_samples=20,
                              eval_samples=40))
    sim.run([cb])
    assert cb.seen and all(s == {1} for s in cb.seen), cb.seen
    assert {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"} == before


def test_bench_load_script_runs_and_reports(tmp_path):
    """benchmarks/bench_load.py end to end on tiny settings (the embedded digits, 2 rounds, one
    busy loop): it reports every case and its ratio to the quiet run, and leaves no process
    behind. The times themselves are never asserted."""
    import importlib.util
    import json

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_load.py"
    if not script.is_file():
        pytest.skip("benchmarks/ is not beside the tests")
    spec = importlib.util.spec_from_file_location("bench_load", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "load.json"
    env = [f"PYTHONPATH={Path(decentlearn.__file__).resolve().parent.parent}"]
    assert module.main(["--dataset", "digits", "--rounds", "2", "--others", "1", "--cases",
                        "quiet,busy", "--env", env[0], "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report["seconds"]) == {"quiet", "busy"} and report["ratio"]["quiet"] == 1.0
    assert all(v > 0 for v in report["seconds"].values())


def test_bench_serial_script_splits_the_round(tmp_path):
    """benchmarks/bench_serial.py on a tiny setting (one case, 3 rounds), in its own process so
    that its kernel wrappers stay there: each case's round is its kernels' time plus the time
    outside them, every round calls the kernels, and the 16-thread bound follows Amdahl's law.
    The times themselves are never asserted."""
    import json

    bench = Path(__file__).resolve().parents[1] / "benchmarks"
    if not (bench / "bench_serial.py").is_file():
        pytest.skip("benchmarks/ is not beside the tests")
    out = tmp_path / "serial.json"
    root = Path(decentlearn.__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "bench_serial.py", "--cases", "mlp-256,cnn-64",
                           "--rounds", "3", "--repeat", "1", "--parts", "--out", str(out)],
                          cwd=bench, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert set(report["results"]) == {"mlp-256", "cnn-64"}
    for name, r in report["results"].items():
        assert r["kernels_ms"] > 0 and r["kernel_calls"] >= 5
        assert r["kernels_ms"] + r["outside_ms"] == pytest.approx(r["round_ms"])
        parts = r["outside_by_part_ms"]  # every layer pass, the phases and the rest
        assert {"sample", "optimizer", "gossip", "rest of the round"} <= set(parts)
        assert sum(1 for k in parts if k.startswith("L")) >= (4 if name == "mlp-256" else 20)
        assert sum(parts.values()) == pytest.approx(r["outside_ms"])
        s = r["outside_share"]
        bound = float(proc.stdout.split(name, 1)[1].split("at most ", 1)[1].split("x", 1)[0])
        assert bound == pytest.approx(1 / (s + (1 - s) / 16), abs=0.05)
