"""Server baselines (allreduce, FedAvg, STC-FL, FedHiSyn) against dense NumPy references of their
rules, with exact byte counts."""

import numpy as np
import pytest

from decentlearn.comm import SimComm
from decentlearn.sim import RunConfig, Simulator, simulate
from decentlearn.topology import make as make_topology
from test_choco import KeepHalf


def _sim(**kw):
    cfg = dict(peers=6, topology="ring", partition="classes:2", rounds=3, lr=0.1, momentum=0.0,
               eval_every=3, seed=4, batch_size=8)
    cfg.update(kw)
    return Simulator(RunConfig(**cfg))


def _local(model, x, xb, yb, lr):
    _, g = model.loss_and_grad(x.astype(np.float32), xb, yb)
    return x - lr * g.astype(np.float64)


def test_allreduce_is_exact_average_with_ring_bytes(record_batches):
    sim = _sim(algorithm="allreduce", local_steps=2)
    draws = record_batches(sim)
    x = sim.params.astype(np.float64).copy()
    sim.run()
    for k in range(0, len(draws), 2):
        for xb, yb in draws[k:k + 2]:
            x = _local(sim.model, x, xb, yb, 0.1)
        x[...] = x.mean(axis=0)
    np.testing.assert_allclose(sim.params, x, atol=2e-5)
    n, dim = sim.params.shape
    # Ring all-reduce: 2(n-1) chunk sends per peer... 2(n-1)·dim·4 bytes in all per round.
    assert sim.comm.bytes_sent.sum() == 3 * 2 * (n - 1) * dim * 4
    assert sim.comm.bytes_sent.max() - sim.comm.bytes_sent.min() <= 3 * 2 * 4


def test_allreduce_ring_bytes_per_peer_formula():
    comm = SimComm(make_topology("ring", 4))
    X = np.ones((4, 10), np.float32)
    comm.allreduce(X, 0)
    # chunks of 10 over 4 peers: 3, 3, 2, 2; peer p sends 2·10 - chunk[p+1] - chunk[p] values.
    np.testing.assert_array_equal(comm.bytes_sent, 4 * np.array([14, 15, 16, 15]))


def test_allreduce_compressed_keeps_peers_identical():
    sim = _sim(algorithm="allreduce", compress="int8", rounds=4, eval_every=4)
    sim.run()
    assert np.array_equal(sim.params, np.broadcast_to(sim.params[0], sim.params.shape))
    n, dim = 6, sim.model.dim
    c = -(-dim // n)
    # per round: n - 1 chunk messages, then the chunk average to n - 1 peers; 4 + c bytes each.
    assert (sim.comm.bytes_sent == 4 * 2 * (n - 1) * (4 + c)).all()


def test_allreduce_compressed_dense_reference():
    """Chunked scatter-reduce with re-compression, written with an explicit loop over chunks and
    a deterministic compressor (keep even entries): mean of C(chunks), then C of the mean."""
    comm = SimComm(make_topology("ring", 3))
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3, 10)).astype(np.float32)
    got = comm.allreduce_compressed(KeepHalf(), X, 0)
    c = 4
    padded = np.zeros((3, 12))
    padded[:, :10] = X
    out = np.zeros(12)
    for j in range(3):
        parts = padded[:, j * c:(j + 1) * c].copy()
        parts[:, 1::2] = 0
        avg = parts.mean(axis=0)
        avg[1::2] = 0
        out[j * c:(j + 1) * c] = avg
    np.testing.assert_allclose(got[0], out[:10], atol=1e-6)
    # KeepHalf: 4 · ceil(c / 2) = 8 bytes per message; 2 + 2 messages per peer.
    np.testing.assert_array_equal(comm.bytes_sent, [32, 32, 32])


def test_fedavg_partial_participation_matches_dense(record_batches):
    """McMahan et al. 2017, Algorithm 1: the round's clients weighted by n_k / sum_j n_j."""
    sim = _sim(algorithm="fedavg", participation=0.5, local_steps=2)
    draws = record_batches(sim)
    alg = sim.algorithm
    n_k = sim.partition.sizes.astype(np.float64)
    assert len(set(n_k)) > 1  # unequal sample counts: the weights matter
    server = sim.params[0].astype(np.float64).copy()
    sim.run()
    n, dim = sim.params.shape
    uploads = np.zeros(n, np.int64)
    for t in range(3):
        clients = alg.clients(t)
        assert clients.size == 3 and np.array_equal(clients, alg.clients(t))  # seeded
        x = np.broadcast_to(server, (n, dim)).copy()
        for xb, yb in draws[2 * t:2 * t + 2]:
            x[clients] = _local(sim.model, x[clients], xb[clients], yb[clients], 0.1)
        w = n_k[clients] / n_k[clients].sum()
        server = server + w @ (x[clients] - server)
        uploads[clients] += 4 * dim
    np.testing.assert_allclose(sim.params, np.broadcast_to(server, (n, dim)), atol=2e-5)
    np.testing.assert_array_equal(sim.comm.upload_bytes, uploads)
    assert not sim.comm.bytes_sent.any()  # no peer-to-peer traffic
    assert sim.comm.server_bytes_sent == 3 * 3 * 4 * dim
    assert len({tuple(alg.clients(t)) for t in range(10)}) > 1


def test_fedavg_full_participation_equals_allreduce():
    """With uniform weights and every peer a client, FedAvg is local steps then the exact mean."""
    a = simulate(RunConfig(peers=6, rounds=3, eval_every=3, algorithm="fedavg", local_steps=2,
                           momentum=0.0, weighting="uniform"))
    b = simulate(RunConfig(peers=6, rounds=3, eval_every=3, algorithm="allreduce", local_steps=2,
                           momentum=0.0))
    np.testing.assert_allclose(a.params, b.params, atol=1e-5)


def test_stc_fl_matches_dense_error_feedback_on_both_sides(record_batches):
    """Sattler et al. (2019), Algorithm 2, written densely: client and server residuals, partial
    participation. A deterministic value-independent compressor (keep the even entries) for both
    directions, so float64 and float32 roundings cannot change what is kept. The server weights
    the clients by n_k / sum_j n_j (the default weighting)."""
    sim = _sim(algorithm="stc-fl", participation=0.5, rounds=4, eval_every=4)
    draws = record_batches(sim)
    alg = sim.algorithm
    n_k = sim.partition.sizes.astype(np.float64)
    alg.compressor = alg.server_compressor = up = down = KeepHalf()

    def C(comp, v):
        out = np.array(v, dtype=np.float64)
        out[..., 1::2] = 0
        return out

    n, dim = sim.params.shape
    server = sim.params[0].astype(np.float64).copy()
    e_client = np.zeros((n, dim))
    e_server = np.zeros(dim)
    synced = np.zeros(n, np.int64)
    synced_model = np.broadcast_to(server, (n, dim)).astype(np.float32)
    last_down = 0
    server_bytes = 0

    class History:  # the server model (float32) at the start of every round, and at the end
        def on_round_end(self, s, t):
            sim_server_history.append(s.algorithm.server[0].copy())

        def on_eval(self, s, row):
            pass
    sim_server_history = [sim.params[0].copy()]
    sim.run([History()])
    for t, (xb, yb) in enumerate(draws):
        clients = alg.clients(t)
        missed = t - synced[clients]
        server_bytes += last_down * int(np.count_nonzero(missed == 1))
        for c in clients[missed > 1]:  # the sum of the missed updates as a sparse message
            nnz = np.count_nonzero(synced_model[c] != sim_server_history[t])
            server_bytes += min(4 + 8 * nnz, 4 * dim)
        synced[clients] = t
        synced_model[clients] = sim_server_history[t]
        x = np.broadcast_to(server, (n, dim)).copy()
        x[clients] = _local(sim.model, x[clients], xb[clients], yb[clients], 0.1)
        acc = e_client[clients] + (x[clients] - server)
        sent = C(up, acc)
        e_client[clients] = acc - sent
        a = e_server + (n_k[clients] / n_k[clients].sum()) @ sent
        upd = C(down, a[None])[0]
        e_server = a - upd
        last_down = down.compress(a[None].astype(np.float32)).nbytes
        server = server + upd
        np.testing.assert_allclose(sim_server_history[t + 1], server, atol=2e-5)
    np.testing.assert_allclose(sim.params[0], server, atol=2e-5)
    np.testing.assert_allclose(alg.client_error, e_client, atol=2e-5)
    assert sim.comm.server_bytes_sent == server_bytes


def test_stc_fl_full_participation_download_bytes():
    sim = _sim(algorithm="stc-fl", compress="stc:0.05", rounds=3, eval_every=3)
    sizes = []
    orig = sim.algorithm.server_compressor.compress

    def spy(*a, **k):
        p = orig(*a, **k)
        sizes.append(p.nbytes)
        return p
    object.__setattr__(sim.algorithm, "server_compressor",
                       type("Spy", (), {"compress": staticmethod(spy),
                                        "decompress": sim.algorithm.server_compressor.decompress,
                                        "spec": "stc:0.05"})())
    sim.run()
    # Round 0: everyone holds x_0; rounds 1, 2: each of 6 clients downloads the last C_down message.
    assert sim.comm.server_bytes_sent == 6 * (sizes[0] + sizes[1])


def test_fedhisyn_equal_speeds_is_fedavg():
    a = simulate(RunConfig(peers=6, rounds=3, eval_every=3, algorithm="fedhisyn", local_steps=2,
                           momentum=0.0, speeds="uniform:1:1", categories=2))
    b = simulate(RunConfig(peers=6, rounds=3, eval_every=3, algorithm="fedavg", local_steps=2,
                           momentum=0.0))
    np.testing.assert_allclose(a.params, b.params, atol=1e-5)


def test_fedhisyn_rings_hops_and_bytes(record_batches):
    """Dense reference: categories by speed quantile, hops = min(hops_max, floor(s_c / s_min)),
    train then pass along the category ring between hops, server average of all models weighted
    by the devices' sample counts."""
    sim = _sim(algorithm="fedhisyn", speeds="uniform:1:4", categories=2, hops_max=3, rounds=2,
               eval_every=2, local_steps=1)
    alg = sim.algorithm
    draws = record_batches(sim)
    n, dim = sim.params.shape
    s = alg.speeds
    order = np.argsort(s, kind="stable")
    cats = [order[:3], order[3:]]
    hops = np.zeros(n, np.int64)
    for members in cats:
        hops[members] = min(3, int(np.floor(s[members].min() / s.min() + 1e-9)))
    server = sim.params[0].astype(np.float64).copy()
    sim.run()
    k = 0
    for t in range(2):
        x = np.broadcast_to(server, (n, dim)).copy()
        for hop in range(hops.max()):
            busy = np.flatnonzero(hops > hop)
            xb, yb = draws[k]
            k += 1
            x[busy] = _local(sim.model, x[busy], xb[busy], yb[busy], 0.1)
            for members in cats:
                if hops[members[0]] > hop + 1:
                    x[members] = x[np.roll(members, 1)]
        w = sim.partition.sizes / sim.partition.sizes.sum()
        server = w @ x
    np.testing.assert_allclose(sim.params[0], server, atol=2e-5)
    passes = np.maximum(hops - 1, 0)
    np.testing.assert_array_equal(sim.comm.bytes_sent, 2 * 4 * dim * passes)
    np.testing.assert_array_equal(sim.comm.upload_bytes, np.full(n, 2 * 4 * dim))
    assert sim.comm.server_bytes_sent == 2 * n * 4 * dim


@pytest.mark.parametrize("kw,match", [
    (dict(algorithm="fedavg", participation=0.0), "participation"),
    (dict(algorithm="fedhisyn", categories=0), "categories"),
    (dict(algorithm="stc-fl", server_compress="nope"), "unknown compressor"),
])
def test_bad_options_are_rejected(kw, match):
    with pytest.raises(ValueError, match=match):
        RunConfig(**kw)


def test_fedhisyn_rejects_bad_speeds_and_compression():
    with pytest.raises(ValueError, match="speeds"):
        _sim(algorithm="fedhisyn", speeds="gamma:2")
    with pytest.raises(ValueError, match="compress must be 'none'"):
        _sim(algorithm="fedhisyn", compress="int8")
    with pytest.raises(ValueError, match="categories must be <= peers"):
        _sim(algorithm="fedhisyn", categories=7)


def test_server_bytes_are_reported_and_in_the_totals():
    """The bytes of each direction have their own column and summary.json field (closed form:
    FedAvg and FedHiSyn broadcast the 4·dim float32 model to each of the round's clients), their
    sum is bytes_sent_total, and each algorithm's report() reaches summary.json
    (tests/test_reference_server.py checks the counts of every server baseline)."""
    rounds, peers = 3, 6
    for name, extra, clients in (("fedavg", dict(participation=0.5), 3),
                                 ("fedhisyn", dict(participation=0.5, categories=2), 3)):
        sim = _sim(algorithm=name, rounds=rounds, eval_every=1, peers=peers, **extra)
        result = sim.run()
        dim, s = sim.model.dim, result.summary
        server = rounds * clients * 4 * dim
        assert s["bytes_server_to_client"] == server == s["algorithm_report"]["server_bytes_sent"]
        assert s["bytes_client_to_server"] == server  # one float32 model up per client
        assert s["bytes_sent_total"] == s["bytes_peer"] + 2 * server
        assert s["bytes_peer"] == int(sim.comm.bytes_sent.sum())
        assert s["algorithm_report"]["clients_per_round"] == clients
        assert [row["bytes_server_to_client"] for row in result.history] == \
            [(t + 1) * clients * 4 * dim for t in range(rounds)]
    # STC-FL: the server's downstream messages (exact sizes), and its own counters.
    sim = _sim(algorithm="stc-fl", participation=0.5, compress="stc:0.1")
    s = sim.run().summary
    assert s["bytes_server_to_client"] == sim.comm.server_bytes_sent > 0
    assert s["bytes_client_to_server"] == int(sim.comm.upload_bytes.sum()) > 0
    assert s["bytes_sent_total"] == s["bytes_client_to_server"] + s["bytes_server_to_client"]
    # Decentralized algorithms: zero server columns; their reports still reach summary.json.
    sim = _sim(algorithm="skewscout", skew_probe_every=1, rounds=2, eval_every=2)
    s = sim.run().summary
    assert s["bytes_server_to_client"] == s["bytes_client_to_server"] == 0
    assert s["bytes_sent_total"] == s["bytes_peer"] > 0
    report = s["algorithm_report"]
    assert json_clean(report) == json_clean(sim.algorithm.report())
    # Each probe sends every peer's model once to the next peer: n · 4·dim bytes.
    assert report["probe_bytes"] == 2 * peers * 4 * sim.model.dim


def json_clean(value):
    import json
    return json.loads(json.dumps(value))
