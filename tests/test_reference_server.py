"""The server baselines against dense NumPy ports of their references' rules, and the byte
columns of every run against closed-form counts.

References (their rules are ported below, densely, per round; no code of theirs is used):

* FedAvg: McMahan et al. 2017, Algorithm 1 (m = max(C·K, 1) clients sampled without
  replacement, ClientUpdate, w_{t+1} = sum_k n_k / m_t w^k_{t+1}); Flower
  ``src/py/flwr/server/strategy/aggregate.py`` (``aggregate``: the models weighted by their
  ``num_examples``, divided by their sum).
* STC-FL: Sattler et al. 2019, Algorithm 2; the authors' ``felisat/federated-learning``
  (``compression_utils.py``: ``stc()``, keep every |x| >= v, v the k-th largest magnitude,
  k = ceil(p·N), values +-mean of the top k; ``distributed_training_utils.py``: client and
  server residuals, ``aggregation="mean"``, or ``"weighted_mean"`` by client sizes).
* FedHiSyn: Li et al. 2022 (ring passes inside speed categories, then the server's average of
  every device's model weighted as FedAvg's).
"""

import csv
import json
import math

import numpy as np
import pytest

from decentlearn import ops
from decentlearn.cli import main
from decentlearn.sim import RunConfig, Simulator


def _sim(**kw):
    cfg = dict(peers=8, topology="ring", partition="dirichlet:0.1", rounds=4, lr=0.1,
               momentum=0.0, eval_every=4, seed=3, batch_size=8, model="linear")
    cfg.update(kw)
    return Simulator(RunConfig(**cfg))


def _local(model, x, xb, yb, lr):
    """One plain SGD step of the rows ``x`` on their minibatches (the clients' ClientUpdate)."""
    _, g = model.loss_and_grad(x.astype(np.float32), xb, yb)
    return x - lr * g.astype(np.float64)


def flower_aggregate(results):
    """Port of Flower's ``aggregate``: results = [(model, num_examples)], the models weighted by
    their example counts over the total."""
    total = sum(n for _, n in results)
    return sum(m * n for m, n in results) / total


def reference_stc(T, p):
    """Port of the authors' ``stc(T, hp)`` (approx = 1.0) on one flat tensor: v = the k-th
    largest |T| with k = ceil(N·p); every entry with T >= v becomes +mean(top-k |T|), every one
    with T <= -v becomes -mean. Returns (the compressed tensor, the kept positions)."""
    T = np.asarray(T, dtype=np.float64)
    k = int(np.ceil(T.size * p))
    top = np.sort(np.abs(T))[::-1][:k]
    v, mean = top[-1], top.mean()
    out = np.where(T >= v, mean, 0.0)
    out = np.where(T <= -v, -mean, out)
    return out, np.flatnonzero(out)


def reference_stc_exact_k(T, p):
    """``reference_stc`` with the tie rule decentlearn keeps: exactly k = ceil(N·p) entries, those
    of the k largest magnitudes of the float32 message, ties to the lowest index (the authors'
    ``>= v`` keeps every entry tied at the k-th magnitude). Returns (tensor, kept positions)."""
    T32 = np.asarray(T, dtype=np.float32)
    k = int(np.ceil(T32.size * p))
    kept = np.sort(np.argsort(-np.abs(T32), kind="stable")[:k])
    mean = np.abs(T32[kept]).astype(np.float64).mean()
    out = np.zeros(T32.size)
    out[kept] = np.where(T32[kept] < 0, -mean, mean)
    return out, kept


def stc_row_bytes(positions, dim):
    """Bytes of one STC message as decentlearn codes it (compress/stc.py): a 12-byte header and
    a Rice code, per kept position the gap to the previous one (unary quotient, its terminator,
    b remainder bits) and a sign bit."""
    k = positions.size
    b = ops.golomb_param(k, dim)
    gaps = np.diff(np.concatenate([[-1], positions])) - 1
    bits = int(((gaps >> b) + 1 + b + 1).sum())
    return 12 + math.ceil(bits / 8)


# ---- FedAvg ----------------------------------------------------------------------------------


def test_fedavg_equals_flower_weighted_aggregate(record_batches):
    """FedAvg with unequal client sample counts and partial participation over 4 rounds: the
    server model is Flower's ``aggregate`` of the clients' models weighted by n_k."""
    sim = _sim(algorithm="fedavg", participation=0.5, local_steps=2)
    alg = sim.algorithm
    n_k = sim.partition.sizes
    assert n_k.max() > 2 * n_k.min()  # unequal: a uniform mean would differ
    draws = record_batches(sim)
    n, dim = sim.params.shape
    server = sim.params[0].astype(np.float64).copy()
    history = []

    class Keep:
        def on_round_end(self, s, t):
            history.append(s.algorithm.server[0].copy())

        def on_eval(self, s, row):
            pass
    sim.run([Keep()])
    uniform = []
    for t in range(4):
        clients = alg.clients(t)
        x = np.broadcast_to(server, (n, dim)).copy()
        for xb, yb in draws[2 * t:2 * t + 2]:
            x[clients] = _local(sim.model, x[clients], xb[clients], yb[clients], 0.1)
        uniform.append(x[clients].mean(axis=0))
        server = flower_aggregate([(x[k], int(n_k[k])) for k in clients])
        np.testing.assert_allclose(history[t], server, atol=2e-5, rtol=0)
    np.testing.assert_allclose(sim.params, np.broadcast_to(server, (n, dim)), atol=2e-5, rtol=0)
    # The weights matter here: the unweighted mean of the last round is far from the result.
    assert np.abs(uniform[-1] - server).max() > 1e-3


def test_fedavg_uniform_weighting_is_the_plain_mean(record_batches):
    """``weighting="uniform"``: the server takes the plain mean of the clients' models (the
    authors' ``aggregation="mean"``), whatever their sample counts."""
    sim = _sim(algorithm="fedavg", participation=0.5, weighting="uniform", rounds=3,
               eval_every=3)
    alg = sim.algorithm
    draws = record_batches(sim)
    n, dim = sim.params.shape
    server = sim.params[0].astype(np.float64).copy()
    sim.run()
    for t in range(3):
        clients = alg.clients(t)
        x = np.broadcast_to(server, (n, dim)).copy()
        xb, yb = draws[t]
        x[clients] = _local(sim.model, x[clients], xb[clients], yb[clients], 0.1)
        server = flower_aggregate([(x[k], 1) for k in clients])
    np.testing.assert_allclose(sim.params[0], server, atol=2e-5, rtol=0)
    assert alg.report()["weighting"] == "uniform"


def test_client_sampling_is_uniform_without_replacement():
    """m = max(1, floor(C·K)) distinct clients per round; over 3000 rounds every peer is picked
    with frequency m/K: each count is Binomial(3000, 0.3), within 6 standard deviations."""
    sim = _sim(algorithm="fedavg", participation=0.3, peers=10, rounds=1, eval_every=1)
    alg = sim.algorithm
    assert alg.n_clients == 3
    counts = np.zeros(10)
    for t in range(3000):
        c = alg.clients(t)
        assert c.size == 3 and np.unique(c).size == 3 and np.array_equal(c, np.sort(c))
        counts[c] += 1
    sd = math.sqrt(3000 * 0.3 * 0.7)
    assert np.abs(counts - 900).max() < 6 * sd
    # floor(C·K), never rounded up, and at least one client.
    assert _sim(algorithm="fedavg", participation=0.39, peers=10).algorithm.n_clients == 3
    assert _sim(algorithm="fedavg", participation=0.01, peers=10).algorithm.n_clients == 1


def test_fedavg_does_not_depend_on_threads():
    a = _sim(algorithm="fedavg", participation=0.5, threads=1).run()
    b = _sim(algorithm="fedavg", participation=0.5, threads=2).run()
    assert np.array_equal(a.params, b.params)
    assert a.summary["bytes_sent_total"] == b.summary["bytes_sent_total"]


@pytest.mark.parametrize("value", ["mean", "", None, 1])
def test_bad_weighting_is_rejected(value):
    with pytest.raises(ValueError, match="weighting must be one of 'samples', 'uniform'"):
        RunConfig(algorithm="fedavg", weighting=value)


def test_weighting_flag_is_one_line_error(capsys):
    assert main(["run", "--algorithm", "fedavg", "--weighting", "size", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "weighting" in err[0]


# ---- STC-FL ----------------------------------------------------------------------------------


@pytest.mark.parametrize("weighting", ["uniform", "samples"])
def test_stc_fl_equals_authors_rule(record_batches, weighting):
    """STC-FL with ``stc:0.05`` up and down, on FedProx's Synthetic(0.5, 0.5) (continuous
    features, the devices' own unequal shares), every client each round (participation 1, so each
    download is the last C_down message), 4 rounds, against the authors' rule: client residual
    A_i += ΔW_i, send stc(A_i), A_i -= stc(A_i); server ΔW = R + aggregate, send stc(ΔW),
    R = ΔW - stc(ΔW), W += stc(ΔW). ``uniform`` is their ``aggregation="mean"``, ``samples``
    their ``"weighted_mean"``. Ties: the server compresses a weighted sum of ternary messages,
    whose magnitudes tie often; decentlearn keeps exactly k of them (lowest index first) where
    the authors' ``>= v`` keeps every tie (``reference_stc_exact_k``; docs/algorithms.md says
    why). The bytes up and down equal the Rice-code sizes of the kept positions."""
    sim = _sim(algorithm="stc-fl", compress="stc:0.05", weighting=weighting,
               dataset="synthetic:0.5:0.5", partition="natural")
    draws = record_batches(sim)
    n, dim = sim.params.shape
    n_k = sim.partition.sizes.astype(np.float64)
    w = n_k / n_k.sum() if weighting == "samples" else np.full(n, 1.0 / n)
    server = sim.params[0].astype(np.float64).copy()
    R_client, R_server = np.zeros((n, dim)), np.zeros(dim)
    up_bytes = down_bytes = last_down = 0
    result = sim.run()
    for t in range(4):
        down_bytes += n * last_down  # every client missed exactly the last update (t >= 1)
        x = np.broadcast_to(server, (n, dim)).copy()
        xb, yb = draws[t]
        x = _local(sim.model, x, xb, yb, 0.1)
        R_client += x - server
        sent = np.zeros((n, dim))
        for i in range(n):
            sent[i], kept = reference_stc_exact_k(R_client[i], 0.05)
            up_bytes += stc_row_bytes(kept, dim)
        R_client -= sent
        dW = R_server + w @ sent
        update, kept = reference_stc_exact_k(dW, 0.05)
        last_down = stc_row_bytes(kept, dim)
        R_server = dW - update
        server = server + update
    np.testing.assert_allclose(sim.params[0], server, atol=2e-5, rtol=0)
    np.testing.assert_allclose(sim.algorithm.client_error, R_client, atol=2e-5, rtol=0)
    s = result.summary
    assert s["bytes_client_to_server"] == up_bytes
    assert s["bytes_server_to_client"] == down_bytes
    assert s["bytes_peer"] == 0 and s["bytes_sent_total"] == up_bytes + down_bytes
    report = s["algorithm_report"]
    assert report["bytes_client_to_server"] == up_bytes
    assert report["bytes_server_to_client"] == down_bytes


def test_reference_stc_ties_keep_more_than_k():
    """The tie rule this port documents: the authors' ``stc()`` keeps every entry whose
    magnitude equals the k-th (here 3 of them for k = 2), decentlearn's STC exactly k."""
    from decentlearn import compress
    T = np.array([3.0, -2.0, 2.0, 2.0, 0.5, 0.1, 0.0, 0.2, 0.3, 0.4])
    _, kept = reference_stc(T, 0.2)
    assert kept.tolist() == [0, 1, 2, 3]
    stc = compress.make("stc:0.2")
    out = stc.decompress(stc.compress(T[None].astype(np.float32)))
    assert np.count_nonzero(out) == 2 and out[0, 0] > 0


# ---- FedHiSyn --------------------------------------------------------------------------------


def test_fedhisyn_weighted_server_average(record_batches):
    """Equal speeds (one hop, no ring pass): FedHiSyn is local steps, then the server's average
    of the uploaded models weighted by the devices' sample counts (Flower's ``aggregate``)."""
    sim = _sim(algorithm="fedhisyn", speeds="uniform:1:1", categories=2, participation=0.75,
               rounds=3, eval_every=3)
    alg = sim.algorithm
    draws = record_batches(sim)
    n, dim = sim.params.shape
    n_k = sim.partition.sizes
    server = sim.params[0].astype(np.float64).copy()
    sim.run()
    for t in range(3):
        clients = alg.clients(t)
        assert clients.size == 6
        x = np.broadcast_to(server, (n, dim)).copy()
        xb, yb = draws[t]
        x[clients] = _local(sim.model, x[clients], xb[clients], yb[clients], 0.1)
        server = flower_aggregate([(x[k], int(n_k[k])) for k in clients])
    np.testing.assert_allclose(sim.params[0], server, atol=2e-5, rtol=0)


# ---- every byte, in summary.json and metrics.csv ---------------------------------------------


def _run_dir(tmp_path, name, *args):
    out = tmp_path / name
    assert main(["run", "--peers", "8", "--rounds", "4", "--eval-every", "2", "--model",
                 "linear", "--quiet", "--out", str(out), *args]) == 0
    summary = json.loads((out / "summary.json").read_text())
    with open(out / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return summary, rows


def _columns(rows, key):
    return [int(r[key]) for r in rows]


DIM = 64 * 10 + 10  # the linear model on digits: 8x8 pixels to 10 classes, and the biases


def test_byte_columns_closed_form(tmp_path):
    """Byte totals of FedAvg, FedHiSyn and SkewScout runs against closed forms, at every
    evaluation (rounds 2 and 4) in metrics.csv and at the end in summary.json: peer to peer,
    client to server, server to client, and their sum."""
    row = 4 * DIM  # one float32 model
    # FedAvg, 8 peers, C = 0.5: 4 clients per round download and upload one model each.
    s, rows = _run_dir(tmp_path, "fedavg", "--algorithm", "fedavg", "--participation", "0.5")
    assert s["n_params"] == DIM
    for r, t in zip(rows, (2, 4)):
        assert int(r["bytes_server_to_client"]) == t * 4 * row
        assert int(r["bytes_client_to_server"]) == t * 4 * row
        assert int(r["bytes_peer"]) == 0
        assert int(r["bytes_sent_total"]) == 2 * t * 4 * row
    assert (s["bytes_peer"], s["bytes_client_to_server"], s["bytes_server_to_client"],
            s["bytes_sent_total"]) == (0, 16 * row, 16 * row, 32 * row)
    alg = _sim(algorithm="fedavg", participation=0.5).algorithm  # the same clients each round
    picked = np.bincount(np.concatenate([alg.clients(t) for t in range(4)]), minlength=8)
    assert s["bytes_sent_max_peer"] == picked.max() * row  # one model uploaded per round picked
    assert s["algorithm_report"]["bytes_client_to_server"] == 16 * row
    # FedHiSyn, equal speeds: one hop, no ring pass; 6 of 8 clients per round (C = 0.75).
    s, rows = _run_dir(tmp_path, "fedhisyn", "--algorithm", "fedhisyn", "--participation",
                       "0.75", "--speeds", "uniform:1:1", "--categories", "2")
    assert _columns(rows, "bytes_server_to_client") == [2 * 6 * row, 4 * 6 * row]
    assert _columns(rows, "bytes_client_to_server") == [2 * 6 * row, 4 * 6 * row]
    assert _columns(rows, "bytes_peer") == [0, 0]
    assert s["bytes_sent_total"] == 2 * 4 * 6 * row
    # SkewScout on the ring (8 peers, 16 directed edges), probing every round with a period of
    # at most 1: it gossips every round (16 rows) and each probe sends 8 rows; no server.
    s, rows = _run_dir(tmp_path, "skew", "--algorithm", "skewscout", "--skew-probe-every", "1",
                       "--skew-period-max", "1")
    assert _columns(rows, "bytes_peer") == [2 * 24 * row, 4 * 24 * row]
    assert _columns(rows, "bytes_client_to_server") == [0, 0]
    assert _columns(rows, "bytes_server_to_client") == [0, 0]
    report = s["algorithm_report"]
    assert report["communications"] == 4 and report["probe_bytes"] == 4 * 8 * row
    assert report["bytes_saved_vs_every_round"] == -4 * 8 * row
    # Its own columns in metrics.csv: the probes so far, and no gossip skipped.
    assert _columns(rows, "probe_bytes") == [2 * 8 * row, 4 * 8 * row]
    assert _columns(rows, "bytes_saved_vs_every_round") == [-2 * 8 * row, -4 * 8 * row]
    assert _columns(rows, "comm_period") == [1, 1]
    assert s["bytes_sent_total"] == s["bytes_peer"] == 4 * 24 * row


def test_skewscout_saved_bytes_closed_form(tmp_path):
    """SkewScout with one probe at round 2 that lets the period grow: the bytes saved are the
    gossips skipped (16 rows each on the 8-peer ring) minus the probes' rows (8 each), and the
    peer bytes are the gossips made plus the probes."""
    s, rows = _run_dir(tmp_path, "skew", "--algorithm", "skewscout", "--skew-probe-every", "2",
                       "--skew-target", "1.0", "--skew-period-max", "4")
    row = 4 * DIM
    report = s["algorithm_report"]
    made = report["communications"]
    probes = len(report["probes"])
    assert probes == 2 and made < 4  # the period grew: some rounds skipped their gossip
    assert report["probe_bytes"] == probes * 8 * row
    assert report["bytes_saved_vs_every_round"] == (4 - made) * 16 * row - probes * 8 * row
    assert s["bytes_peer"] == made * 16 * row + probes * 8 * row == s["bytes_sent_total"]
    assert int(rows[-1]["bytes_saved_vs_every_round"]) == report["bytes_saved_vs_every_round"]


def test_compare_shows_byte_columns(tmp_path, capsys):
    _run_dir(tmp_path, "a", "--algorithm", "fedavg", "--participation", "0.5")
    _run_dir(tmp_path, "b", "--algorithm", "dpsgd")
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0]
    for name in ("peer bytes", "up bytes", "down bytes"):
        assert name in header
    row = 4 * DIM
    from decentlearn.units import format_bytes
    assert format_bytes(16 * row) in out.splitlines()[2]


@pytest.mark.parametrize("kw", [dict(compress="ef:stc:0.01"),
                                dict(compress="stc:0.01", server_compress="ef:topk:0.1")])
def test_stc_fl_refuses_a_second_error_feedback(kw):
    """STC-FL keeps its own residuals on both sides (the authors' Algorithm: error accumulation
    at the clients and the server); an ef: compressor would add a second feedback loop."""
    name = "server_compress" if "server_compress" in kw else "compress"
    with pytest.raises(ValueError, match=rf"{name} must be a compressor without 'ef:'"):
        RunConfig(algorithm="stc-fl", **kw)
