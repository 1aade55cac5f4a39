"""Checkpoints (decentlearn.runner.checkpoint): a run stopped at a round boundary, saved, restored into a
new Simulator and run to the end equals the uninterrupted run bit for bit (final parameters,
metrics rows except wall-clock, summary); damaged or foreign checkpoints are refused in one line."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import decentlearn
from decentlearn import algorithms
from decentlearn.runner import checkpoint
from decentlearn.errors import CheckpointError
from decentlearn.state import join_rows, take_rows
from decentlearn.cli import main
from decentlearn.sim import RunConfig, Simulator

BASE = dict(peers=4, rounds=6, eval_every=2, batch_size=8, eval_samples=60, model="linear",
            seed=3)

#: The minimal options each algorithm needs, and options that make its state non-trivial
#: (partial participation, probes within the run).
OPTIONS = {
    "choco": dict(compress="topk:0.3", gamma=0.4),
    "d2": dict(momentum=0.0),
    "fedavg": dict(participation=0.5),
    "stc-fl": dict(participation=0.5),
    "fedhisyn": dict(participation=0.75, categories=2),
    "skewscout": dict(skew_probe_every=2),
}

#: Further runs: compressors (error feedback included), a network model with faults and churn,
#: asynchronous gossip, time-varying graphs, int8 training, CoCoFL, clique averaging.
VARIANTS = {
    "dpsgd-natural": dict(algorithm="dpsgd", compress="natural"),
    "dpsgd-cta": dict(algorithm="dpsgd", variant="cta", local_steps=2),
    "choco-ef": dict(algorithm="choco", compress="ef:topk:0.2", gamma=0.3),
    "allreduce-int8": dict(algorithm="allreduce", compress="int8"),
    "fedavg-topk": dict(algorithm="fedavg", compress="topk:0.5", participation=0.5),
    "compngc-topk": dict(algorithm="compngc", compress="topk:0.3"),
    "dpsgd-mobile": dict(algorithm="dpsgd", network="mobile"),
    "choco-edge": dict(algorithm="choco", compress="topk:0.3", gamma=0.4, network="edge"),
    "pushsum-mobile": dict(algorithm="pushsum", network="mobile", topology="directed-ring"),
    "allreduce-wan": dict(algorithm="allreduce", network="wan"),
    "async": dict(algorithm="dpsgd", network="wan", asynchronous=True),
    "random-matching": dict(algorithm="dsgt", topology="random-matching"),
    "moshpit": dict(algorithm="dpsgd", topology="moshpit:2"),
    "finite-time": dict(algorithm="dpsgd", mixing="finite-time", topology="ring"),
    "int8-mlp": dict(algorithm="dpsgd", precision="int8", model="mlp:16"),
    "cocofl": dict(algorithm="dpsgd", cocofl="0.5:1", model="mlp:16"),
    "clique-averaging": dict(algorithm="dpsgd", peers=6, topology="d-cliques:3",
                             clique_averaging=True, partition="classes:2"),
    "adam-cosine": dict(algorithm="dpsgd", optimizer="adam", lr=0.003, lr_schedule="cosine",
                        warmup=2),
    "lamb-choco": dict(algorithm="choco", compress="topk:0.3", gamma=0.4, optimizer="lamb",
                       lr=0.01),
    "lars-step-churn": dict(algorithm="dpsgd", optimizer="lars", lr=1.0,
                            lr_schedule="step:3:0.5", network="mobile"),
    "nonlinear-mixing": dict(algorithm="dpsgd", mixing="nonlinear:0.8:0.5"),
}


class Stop(Exception):
    pass


class SaveAndStop:
    """Saves a checkpoint after round k, then stops the run (an interruption at a boundary)."""

    def __init__(self, path, k):
        self.path, self.k = path, k

    def on_round_end(self, sim, t):
        pass

    def on_eval(self, sim, row):
        pass

    def on_round_complete(self, sim, t):
        if t + 1 == self.k:
            sim.save_checkpoint(self.path)
            raise Stop


def strip(history):
    return [{k: v for k, v in row.items() if k != "wall_seconds"} for row in history]


def comparable(summary):
    return {k: v for k, v in summary.items() if k not in ("wall_seconds", "evaluation")}


def interrupted_and_resumed(config, k, path):
    sim = Simulator(config)
    with pytest.raises(Stop):
        sim.run([SaveAndStop(path, k)])
    fresh = Simulator.from_checkpoint(path, config)  # a new object: nothing shared in memory
    assert fresh.next_round == k
    return fresh.run()


def assert_same_run(config, path, k=3):
    full = Simulator(config).run()
    resumed = interrupted_and_resumed(config, k, path)
    assert np.array_equal(full.params, resumed.params)
    assert strip(full.history) == strip(resumed.history)
    assert comparable(full.summary) == comparable(resumed.summary)
    return full, resumed


@pytest.mark.parametrize("name", algorithms.available())
def test_every_algorithm_resumes_bit_identical(name, tmp_path):
    config = RunConfig(**{**BASE, "algorithm": name, **OPTIONS.get(name, {})})
    assert_same_run(config, tmp_path / "c.npz")


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variants_resume_bit_identical(variant, tmp_path):
    config = RunConfig(**{**BASE, **VARIANTS[variant]})
    k = 3 if config.eval_every == 2 else 2
    full, _ = assert_same_run(config, tmp_path / "c.npz", k=k)
    if config.network is not None:
        assert full.summary["sim_seconds"] > 0


def test_resume_with_other_threads(tmp_path):
    """threads is outside the fingerprint: results do not depend on it, before or after."""
    config = RunConfig(**{**BASE, "algorithm": "choco", **OPTIONS["choco"]})
    full = Simulator(config.replace(threads=2)).run()
    sim = Simulator(config.replace(threads=2))
    with pytest.raises(Stop):
        sim.run([SaveAndStop(tmp_path / "c.npz", 3)])
    resumed = Simulator.from_checkpoint(tmp_path / "c.npz", config.replace(threads=1)).run()
    assert np.array_equal(full.params, resumed.params)
    assert strip(full.history) == strip(resumed.history)


def test_checkpoint_between_evaluations_keeps_the_loss_average(tmp_path):
    """Round 3 is not an evaluation round: the partial train_loss sum must survive."""
    config = RunConfig(**{**BASE, "eval_every": 4, "rounds": 8})
    assert_same_run(config, tmp_path / "c.npz", k=3)


def test_restoring_is_not_trivially_equal(tmp_path):
    """The comparison detects lost state: dropping the momentum from the checkpoint changes the
    final parameters (so equality above means the state was restored)."""
    config = RunConfig(**BASE)
    path = tmp_path / "c.npz"
    full = Simulator(config).run()
    sim = Simulator(config)
    with pytest.raises(Stop):
        sim.run([SaveAndStop(path, 3)])
    state, _ = checkpoint.read(path)
    state["algorithm.optimizer.momentum"] = np.zeros_like(state["algorithm.optimizer.momentum"])
    fresh = Simulator(config)
    fresh.load_state_dict(state)
    assert not np.array_equal(full.params, fresh.run().params)


def test_state_round_trips_through_the_file(tmp_path):
    config = RunConfig(**{**BASE, "algorithm": "skewscout", "skew_probe_every": 1})
    sim = Simulator(config)
    with pytest.raises(Stop):
        sim.run([SaveAndStop(tmp_path / "c.npz", 2)])
    state, meta = checkpoint.read(tmp_path / "c.npz", fingerprint=checkpoint.fingerprint(config),
                                  n_peers=4, dim=sim.model.dim)
    assert meta["round"] == 2 and meta["format_version"] == checkpoint.FORMAT_VERSION
    assert meta["decentlearn_version"] == decentlearn.__version__
    mine = sim.state_dict()
    assert set(state) == set(mine)
    for key, value in mine.items():
        if isinstance(value, (np.ndarray, np.generic)):
            assert np.asarray(state[key]).dtype == np.asarray(value).dtype, key
            assert np.array_equal(state[key], value), key
        else:
            assert json.loads(json.dumps(value)) == state[key], key
    assert isinstance(state["sampler._rng"]["__generator__"]["state"]["state"], int)


def test_rows_split_and_join_for_process_blocks(tmp_path):
    """What a multi-process backend does: blocks of peers' rows written as one file by one
    process, read back and cut into the blocks again."""
    config = RunConfig(**{**BASE, "peers": 5, "algorithm": "stc-fl", "participation": 0.6})
    sim = Simulator(config)
    with pytest.raises(Stop):
        sim.run([SaveAndStop(tmp_path / "c.npz", 2)])
    state = sim.state_dict()
    kinds = sim.state_kinds()  # declared by the algorithm and the communicator
    names = sorted(k for k, v in kinds.items() if v == "row" and isinstance(state[k], np.ndarray))
    assert {"algorithm.params", "algorithm.optimizer.momentum", "algorithm.client_error",
            "algorithm.synced_round", "comm.bytes_sent"} <= set(names)
    assert kinds["algorithm.server"] == "replicated" and "sampler._perm" not in names
    blocks = [take_rows(state, names, lo, hi) for lo, hi in ((0, 2), (2, 5))]
    assert blocks[1]["algorithm.params"].shape == (3, sim.model.dim)
    joined = join_rows(blocks, names)
    dim = sim.model.dim
    checkpoint.write(tmp_path / "joined.npz", joined, fingerprint=checkpoint.fingerprint(config),
                     n_peers=5, dim=dim, round=2)
    back, _ = checkpoint.read(tmp_path / "joined.npz", fingerprint=checkpoint.fingerprint(config),
                              n_peers=5, dim=dim)
    full = Simulator(config).run()
    fresh = Simulator(config)
    fresh.load_state_dict(back)
    assert np.array_equal(full.params, fresh.run().params)


def test_fingerprint_ignores_only_rounds_threads_data_dir():
    a = RunConfig(**BASE)
    fp = checkpoint.fingerprint(a)
    assert fp == checkpoint.fingerprint(a.replace(rounds=99, threads=1, data_dir="/elsewhere"))
    for change in (dict(lr=0.051), dict(seed=4), dict(peers=5), dict(eval_every=3),
                   dict(compress="topk:0.5", algorithm="choco", gamma=0.5)):
        assert checkpoint.fingerprint(a.replace(**change)) != fp, change


# ---- refusals --------------------------------------------------------------------------------

@pytest.fixture
def saved(tmp_path):
    config = RunConfig(**BASE)
    sim = Simulator(config)
    with pytest.raises(Stop):
        sim.run([SaveAndStop(tmp_path / "c.npz", 2)])
    return config, tmp_path / "c.npz"


def one_line_error(config, path):
    with pytest.raises(CheckpointError) as e:
        Simulator.from_checkpoint(path, config)
    message = str(e.value)
    assert "\n" not in message and message
    return message


def test_truncated_and_corrupted_checkpoints_are_refused(saved, tmp_path):
    config, path = saved
    data = path.read_bytes()
    bad = tmp_path / "bad.npz"
    original, _ = checkpoint.read(path)
    rng = np.random.default_rng(0)
    offsets = sorted({0, 1, 4, 30, 100, len(data) // 3, len(data) // 2, len(data) - 22,
                      len(data) - 1, *rng.integers(1, len(data), 8).tolist()})
    for n in offsets:  # truncated
        bad.write_bytes(data[:n])
        one_line_error(config, bad)
    for pos in sorted({*rng.integers(0, len(data), 60).tolist(), len(data) // 2}):  # bit flips
        flipped = bytearray(data)
        flipped[pos] ^= 0xFF
        bad.write_bytes(bytes(flipped))
        try:
            state, _ = checkpoint.read(bad)
        except CheckpointError as e:
            assert "\n" not in str(e)
        else:  # a flip in bytes the zip reader ignores (a member's timestamp) changes nothing
            assert set(state) == set(original)
            for key, value in original.items():
                assert np.array_equal(value, state[key]) if isinstance(value, np.ndarray) \
                    else value == state[key], (pos, key)


def test_payload_corruption_caught_by_checksum(saved, tmp_path):
    """A byte of a parameter array changed and the zip's CRC patched to match: only the
    checkpoint's own SHA-256 can tell."""
    import zipfile
    config, path = saved
    bad = tmp_path / "bad.npz"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(bad, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "algorithm.params.npy":
                data = data[:-1] + bytes([data[-1] ^ 1])
            dst.writestr(info.filename, data)
    assert "checksum" in one_line_error(config, bad)


def test_foreign_checkpoints_are_refused(saved, tmp_path, monkeypatch):
    config, path = saved
    assert "configuration" in one_line_error(config.replace(lr=0.06), path)
    assert "n_peers" in one_line_error(config.replace(peers=5), path)
    assert "no checkpoint" in one_line_error(config, tmp_path / "missing.npz")
    state, meta = checkpoint.read(path)
    other = tmp_path / "dim.npz"
    checkpoint.write(other, state, fingerprint=meta["fingerprint"], n_peers=4,
                     dim=meta["dim"] + 1, round=2)
    assert "dim" in one_line_error(config, other)
    monkeypatch.setattr(checkpoint, "FORMAT_VERSION", 99)
    future = tmp_path / "future.npz"
    checkpoint.write(future, state, fingerprint=meta["fingerprint"], n_peers=4,
                     dim=meta["dim"], round=2)
    monkeypatch.undo()
    assert "format version 99" in one_line_error(config, future)
    # Same fingerprint, but a state array of another shape (e.g. a hand-made file).
    state["algorithm.params"] = state["algorithm.params"][:, :-1].copy()
    odd = tmp_path / "odd.npz"
    checkpoint.write(odd, state, fingerprint=meta["fingerprint"], n_peers=4, dim=meta["dim"],
                     round=2)
    assert "algorithm.params" in one_line_error(config, odd)
    state, _ = checkpoint.read(path)
    state["comm.server_bytes_sent"] = "many"  # a JSON value of the wrong kind
    checkpoint.write(odd, state, fingerprint=meta["fingerprint"], n_peers=4, dim=meta["dim"],
                     round=2)
    assert "comm.server_bytes_sent" in one_line_error(config, odd)


def test_no_pickle_in_checkpoints(saved, tmp_path):
    """An object array smuggled into the file is refused, never unpickled."""
    import zipfile
    config, path = saved
    bad = tmp_path / "pickle.npz"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(bad, "w") as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
        buf = __import__("io").BytesIO()
        np.lib.format.write_array(buf, np.array([object()], dtype=object), allow_pickle=True)
        dst.writestr("evil.npy", buf.getvalue())
    assert "objects" in one_line_error(config, bad)
    with pytest.raises(TypeError, match="object arrays"):
        checkpoint.write(tmp_path / "x.npz", {"a": np.array([None], dtype=object)},
                         fingerprint="", n_peers=1, dim=1, round=0)


# ---- CLI -------------------------------------------------------------------------------------

SMALL = ["--peers", "4", "--model", "linear", "--batch-size", "8", "--eval-samples", "60",
         "--quiet"]
ROOT = str(Path(decentlearn.__file__).resolve().parent.parent)
ENV = dict(os.environ, PYTHONWARNINGS="ignore",
           PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))


def rows_of(run_dir):
    with open(run_dir / "metrics.csv") as f:
        return [{k: v for k, v in r.items() if k != "wall_seconds"} for r in csv.DictReader(f)]


def summary_of(run_dir):
    s = json.loads((run_dir / "summary.json").read_text())
    return {k: v for k, v in s.items()
            if k not in ("wall_seconds", "evaluation", "config", "last_round")}, s


def final_params(run_dir):
    state, _ = checkpoint.read(run_dir / checkpoint.FILENAME)
    return state["algorithm.params"]


def cli(args, capsys):
    code = main(args)
    _, err = capsys.readouterr()
    return code, err


def test_cli_refusals_one_line_exit_2(tmp_path, capsys):
    run = tmp_path / "run"
    code, _ = cli(["run", *SMALL, "--rounds", "4", "--eval-every", "2", "--out", str(run)],
                  capsys)
    assert code == 0
    code, err = cli(["run", "--resume", str(run)], capsys)  # no checkpoint written
    assert code == 2 and len(err.strip().splitlines()) == 1 and "no checkpoint" in err
    code, err = cli(["run", "--resume", str(tmp_path / "nowhere")], capsys)
    assert code == 2 and "not a run directory" in err
    code, _ = cli(["run", *SMALL, "--rounds", "4", "--eval-every", "2", "--out", str(run),
                   "--overwrite", "--checkpoint-every", "3"], capsys)
    assert code == 0 and (run / checkpoint.FILENAME).exists()
    code, err = cli(["run", "--resume", str(run)], capsys)  # completed, no extra rounds
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--rounds" in err
    code, err = cli(["run", "--resume", str(run), "--lr", "0.1"], capsys)
    assert code == 2 and "--lr" in err
    code, err = cli(["run", *SMALL, "--checkpoint-every", "0", "--out", str(tmp_path / "x")],
                    capsys)
    assert code == 2 and "--checkpoint-every" in err
    data = (run / checkpoint.FILENAME).read_bytes()
    (run / checkpoint.FILENAME).write_bytes(data[: len(data) // 2])
    code, err = cli(["run", "--resume", str(run), "--rounds", "6"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "truncated" in err
    assert "Traceback" not in err
    (run / "config.toml").write_text((run / "config.toml").read_text()
                                     .replace("lr = 0.05", "lr = 0.07"))
    (run / checkpoint.FILENAME).write_bytes(data)
    code, err = cli(["run", "--resume", str(run), "--rounds", "6"], capsys)
    assert code == 2 and "another configuration" in err


def test_cli_extend_a_completed_run(tmp_path, capsys):
    """--rounds extends a finished run: the same final parameters as a run of that length; the
    rows equal except the old final row (evaluated then as a final row) and the train_loss of
    the next row (averaged since the old final row)."""
    a, b = tmp_path / "a", tmp_path / "b"
    common = [*SMALL, "--eval-every", "2", "--checkpoint-every", "4"]
    assert cli(["run", *common, "--rounds", "8", "--out", str(a)], capsys)[0] == 0
    assert cli(["run", *common, "--rounds", "5", "--out", str(b)], capsys)[0] == 0
    assert cli(["run", "--resume", str(b), "--rounds", "8"], capsys)[0] == 0
    assert np.array_equal(final_params(a), final_params(b))
    ra, rb = rows_of(a), rows_of(b)
    assert [r["round"] for r in rb] == ["2", "4", "5", "6", "8"]
    rb = [r for r in rb if r["round"] != "5"]
    assert rb[2].pop("train_loss") != ra[2].pop("train_loss")
    assert rb == ra
    assert summary_of(a)[0] == summary_of(b)[0]
    assert "rounds = 8" in (b / "config.toml").read_text()


def test_cli_sigterm_then_resume_equals_uninterrupted(tmp_path, capsys):
    run, ref = tmp_path / "run", tmp_path / "ref"
    args = [*SMALL, "--rounds", "150", "--eval-every", "10", "--checkpoint-every", "5"]
    proc = subprocess.Popen([sys.executable, "-m", "decentlearn", "run", *args, "--out",
                             str(run)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=ENV, cwd=tmp_path)
    deadline = time.monotonic() + 120
    metrics = run / "metrics.csv"
    while not (metrics.exists() and metrics.read_text().count("\n") >= 3):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no rows after 120 s"
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "checkpoint of round" in err and "--resume" in err
    _, meta = checkpoint.read(run / checkpoint.FILENAME)
    assert 5 <= meta["round"] < 150
    assert json.loads((run / "summary.json").read_text())["status"] == "interrupted"
    assert cli(["run", "--resume", str(run)], capsys)[0] == 0
    assert cli(["run", *args, "--out", str(ref)], capsys)[0] == 0
    assert rows_of(run) == rows_of(ref)
    (s_run, full), (s_ref, _) = summary_of(run), summary_of(ref)
    assert s_run == s_ref and full["status"] == "completed" and full["last_round"] == 150
    assert np.array_equal(final_params(run), final_params(ref))


def test_cosine_schedule_run_cannot_be_extended(tmp_path, capsys):
    """A cosine schedule depends on the planned rounds: extending such a run on resume would
    silently differ from a run of the new length, so it is refused in one line."""
    out = tmp_path / "run"
    assert cli(["run", *SMALL, "--rounds", "4", "--eval-every", "2", "--checkpoint-every", "2",
                "--lr-schedule", "cosine", "--out", str(out)], capsys)[0] == 0
    code, err = cli(["run", "--resume", str(out), "--rounds", "6"], capsys)
    assert code == 2 and "depends on the number of rounds" in err
    assert len(err.strip().splitlines()) == 1


def _sigterm_at_draw(sim, draw: int) -> None:
    """Makes ``sim`` send itself SIGTERM at its ``draw``-th minibatch (inside a round)."""
    calls, original = [0], sim.sample

    def sample():
        calls[0] += 1
        if calls[0] == draw:
            os.kill(os.getpid(), signal.SIGTERM)
        return original()
    sim.sample = sample


@pytest.mark.parametrize("algorithm", ["choco", "stc-fl"])
def test_sigterm_mid_round_saves_that_round_and_resumes_bit_identically(tmp_path, algorithm):
    """SIGTERM inside round 3 (of 6, checkpoints every 4, so none yet): the round finishes, its
    checkpoint is written, the run stops with Interrupted(SIGTERM); resuming from it ends with
    the uninterrupted run's parameters (a server baseline included)."""
    from decentlearn.interrupts import Interrupted
    extra = (dict(compress="topk:0.1", gamma=0.5) if algorithm == "choco"
             else dict(participation=0.5))
    config = RunConfig(peers=4, rounds=6, model="linear", batch_size=8, eval_samples=60,
                       eval_every=2, algorithm=algorithm, seed=5, **extra)
    path = tmp_path / "ck.npz"
    sim = Simulator(config)
    _sigterm_at_draw(sim, 3)  # one draw per round: inside round index 2, the third
    saver = checkpoint.CheckpointCallback(path, every=4)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted) as info:
        with checkpoint.stop_at_round_end(saver):
            sim.run([saver])
    assert info.value.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before and not saver.watching
    assert sim.next_round == 3 and saver.saved_round == 3
    _, meta = checkpoint.read(path)
    assert meta["round"] == 3
    resumed = Simulator.from_checkpoint(path, config).run()
    assert np.array_equal(resumed.params, Simulator(config).run().params)


def test_second_sigterm_interrupts_at_once(tmp_path):
    """A second SIGTERM while the first waits for the round's end raises immediately (no
    checkpoint of an unfinished round)."""
    from decentlearn.interrupts import Interrupted
    config = RunConfig(peers=4, rounds=6, model="linear", batch_size=8, eval_samples=60,
                       eval_every=2)
    sim = Simulator(config)
    calls, original = [0], sim.sample

    def sample():
        calls[0] += 1
        if calls[0] == 2:
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)
        return original()
    sim.sample = sample
    saver = checkpoint.CheckpointCallback(tmp_path / "ck.npz", every=4)
    with pytest.raises(Interrupted):
        with checkpoint.stop_at_round_end(saver):
            sim.run([saver])
    assert sim.next_round == 1 and saver.saved_round is None
    assert not (tmp_path / "ck.npz").exists()
