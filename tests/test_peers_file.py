"""peers.csv: every peer's accuracy and loss at every evaluation, streamed, resumed, and read back
by decentlearn.outputs.load_peers."""

import csv

import numpy as np
import pytest

from decentlearn.cli import main
from decentlearn.outputs import RunWriter, load_peers
from decentlearn.outputs.peers import PEER_COLUMNS, PeersWriter
from decentlearn.sim import Callback, RunConfig, Simulator

CONFIG = RunConfig(peers=6, rounds=6, eval_every=2, seed=3)


class Capture(Callback):
    """What the evaluator computed: every peer's accuracy and loss at each evaluation."""

    def __init__(self):
        self.rounds, self.acc, self.loss = [], [], []

    def on_eval(self, sim, row):
        self.rounds.append(row["round"])
        self.acc.append(np.array(sim.last_accuracy, dtype=np.float64))
        self.loss.append(np.array(sim.last_loss, dtype=np.float64))


def _metrics(run_dir):
    with open(run_dir / "metrics.csv", newline="") as f:
        return [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]


def test_every_evaluation_of_every_peer_is_saved(tmp_path):
    seen = Capture()
    with RunWriter(tmp_path, CONFIG) as writer:
        result = Simulator(CONFIG).run([writer, seen])
        writer.finish(result.summary)
    peers = load_peers(tmp_path)
    assert peers.rounds.tolist() == seen.rounds == [2, 4, 6]
    assert peers.accuracy.shape == peers.loss.shape == (3, 6) and peers.n_peers == 6
    np.testing.assert_array_equal(peers.accuracy, np.stack(seen.acc))  # bit for bit
    np.testing.assert_array_equal(peers.loss, np.stack(seen.loss))
    rows = _metrics(tmp_path)
    for e, row in enumerate(rows):  # metrics.csv's columns are these rows' mean, min and max
        assert row["round"] == peers.rounds[e]
        assert float(np.mean(peers.accuracy[e])) == row["test_accuracy_mean"]
        assert float(np.min(peers.accuracy[e])) == row["test_accuracy_min"]
        assert float(np.max(peers.accuracy[e])) == row["test_accuracy_max"]
    # the long format any tool reads
    with open(tmp_path / "peers.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert tuple(table[0]) == PEER_COLUMNS and len(table) == 3 * 6
    assert [int(r["peer"]) for r in table[:6]] == list(range(6))


def test_an_interrupted_run_keeps_its_evaluations(tmp_path):
    class Stop(Callback):
        def on_eval(self, sim, row):
            if row["round"] == 4:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        with RunWriter(tmp_path, CONFIG) as writer:
            Simulator(CONFIG).run([writer, Stop()])
    assert load_peers(tmp_path).rounds.tolist() == [2, 4]
    # a run killed while writing an evaluation: its partial rows are left out
    with open(tmp_path / "peers.csv", "a") as f:
        f.write("6,0,0.5,1.0\n6,1,0.5")
    assert load_peers(tmp_path).rounds.tolist() == [2, 4]


def test_resume_continues_the_file(tmp_path):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    base = ["run", "--peers", "4", "--eval-every", "2", "--quiet"]
    assert main([*base, "--rounds", "8", "--out", str(whole)]) == 0
    assert main([*base, "--rounds", "4", "--checkpoint-every", "2", "--out", str(cut)]) == 0
    # rows of rounds after the checkpoint (a run killed after writing them) are dropped on resume
    with open(cut / "peers.csv", "a") as f:
        f.write("".join(f"6,{i},0.25,9.0\n" for i in range(4)))
    assert main(["run", "--resume", str(cut), "--rounds", "8", "--quiet"]) == 0
    a, b = load_peers(whole), load_peers(cut)
    assert b.rounds.tolist() == [2, 4, 6, 8]
    np.testing.assert_array_equal(a.rounds, b.rounds)
    np.testing.assert_array_equal(a.accuracy, b.accuracy)
    np.testing.assert_array_equal(a.loss, b.loss)
    assert (whole / "peers.csv").read_bytes() == (cut / "peers.csv").read_bytes()


def test_writer_and_loader_errors(tmp_path):
    w = PeersWriter(tmp_path / "peers.csv")
    with pytest.raises(ValueError, match="loss must have one value per peer"):
        w.append(1, np.zeros(3), np.zeros(2))
    w.append(1, np.array([0.5, 1.0]), np.array([np.nan, np.inf]))
    w.close()
    p = load_peers(tmp_path)
    assert np.isnan(p.loss[0, 0]) and np.isinf(p.loss[0, 1])
    (tmp_path / "peers.csv").write_text("round,peer,test_accuracy,test_loss\n1,1,0.5,1\n")
    with pytest.raises(ValueError, match="peers 0..0 in order"):
        load_peers(tmp_path)
    (tmp_path / "peers.csv").write_text("a,b\n")
    with pytest.raises(ValueError, match="expected the header"):
        load_peers(tmp_path)
    with pytest.raises(ValueError, match="cannot read"):
        load_peers(tmp_path / "nowhere")


def test_no_peers_file_when_asked(tmp_path):
    with RunWriter(tmp_path, CONFIG, peers=False) as writer:
        writer.finish(Simulator(CONFIG.replace(rounds=2)).run([writer]).summary)
    assert not (tmp_path / "peers.csv").exists() and (tmp_path / "metrics.csv").exists()
