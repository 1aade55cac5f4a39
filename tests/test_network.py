"""decentlearn.network: the seeded network model, simulated clocks against closed forms and a dense
reference, faults, push-sum, Epidemic Learning, asynchronous AD-PSGD, and the CLI."""

import json
import math

import numpy as np
import pytest

from decentlearn import topology
from decentlearn.cli import main
from decentlearn.comm import SimComm
from decentlearn.algorithms import mixing_hints
from decentlearn.network import (NetworkConfig, NetworkModel, allreduce_time,
                                 load_network, preset, ring_allreduce_closed_form,
                                 server_round_time)
from decentlearn.network.faults import FaultyTopology
from decentlearn.algorithms.pushsum import PushSum
from decentlearn.network.model import Dist
from decentlearn.optim import SGD, SGDConfig
from decentlearn.seeds import hash_uniform
from decentlearn.sim import RunConfig, Simulator, simulate
from decentlearn.topology import check_mixing, make as make_topology
from decentlearn.topology.dynamic import epidemic, random_matching

DIM = 1000  # float32 row of a mixing test: 4000 bytes


def uniform(**kw) -> NetworkConfig:
    base = dict(name="uniform", latency_ms=2.0, bandwidth_mbps=80.0, compute_sps=500.0)
    base.update(kw)
    return NetworkConfig(**base)


def write_toml(tmp_path, **fields) -> str:
    lines = ["[network]"] + [f"{k} = {json.dumps(v)}" for k, v in fields.items()]
    path = tmp_path / "net.toml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


# --------------------------------------------------------------------------------------------------
# The model


def test_dist_specs_and_quantiles():
    assert Dist(3).quantile(np.array([0.1, 0.9])).tolist() == [3.0, 3.0]
    assert Dist("uniform:1:3").quantile(np.array([0.0, 0.5])).tolist() == [1.0, 2.0]
    assert Dist("lognormal:10:0.5").quantile(np.array([0.5]))[0] == pytest.approx(10.0)
    tiers = Dist("tiers:1@0.25,2@0.75")
    assert tiers.quantile(np.array([0.1, 0.3, 0.99])).tolist() == [1.0, 2.0, 2.0]
    assert tiers.mean() == pytest.approx(1.75)


@pytest.mark.parametrize("changes,match", [
    (dict(bandwidth_mbps=-5), "bandwidth_mbps must be > 0"),
    (dict(bandwidth_mbps="uniform:-1:3"), "bandwidth_mbps must be > 0"),
    (dict(latency_ms=-1), "latency_ms must be >= 0"),
    (dict(link_drop=1.5), "link_drop must be a probability"),
    (dict(straggler_prob=-0.1), "straggler_prob must be a probability"),
    (dict(straggler_slowdown=0.5), "straggler_slowdown must be >= 1"),
    (dict(compute_sps="gamma:1:2"), "compute_sps must be a number or one of"),
    (dict(compute_sps="tiers:1@0.5,2@0.6"), "sum to 1"),
    (dict(churn_state="forget"), "churn_state must be one of"),
    (dict(churn_leave=0.1, churn_join=0.0), "churn_join must be > 0"),
])
def test_config_rejects_bad_values(changes, match):
    with pytest.raises(ValueError, match=match):
        NetworkConfig(**changes)


def test_presets_and_toml(tmp_path):
    with pytest.raises(ValueError, match="unknown network preset 'lan'"):
        preset("lan")
    for name in ("datacenter", "wan", "edge", "mobile"):
        assert preset(name).name == name
    cfg = load_network(write_toml(tmp_path, preset="wan", link_drop=0.2))
    assert cfg.link_drop == 0.2 and cfg.latency_ms == preset("wan").latency_ms
    cfg = load_network(write_toml(tmp_path, latency_ms=1, bandwidth_mbps="uniform:10:20"))
    assert cfg.name == "net" and cfg.bandwidth_mbps.kind == "uniform"
    with pytest.raises(ValueError, match="unknown key 'bandwith_mbps'"):
        load_network(write_toml(tmp_path, bandwith_mbps=1))
    with pytest.raises(ValueError, match="does not exist"):
        load_network(str(tmp_path / "missing.toml"))


def test_draws_are_keyed_symmetric_and_follow_the_distribution():
    m = NetworkModel(NetworkConfig(latency_ms="uniform:1:3", bandwidth_mbps="tiers:10@0.3,100@0.7",
                                   compute_sps="lognormal:100:0.5", link_drop=0.2), 400, seed=5)
    i, j = np.triu_indices(400, 1)
    np.testing.assert_array_equal(m.latency(i, j), m.latency(j, i))
    np.testing.assert_array_equal(m.link_down(3, i, j), m.link_down(3, j, i))
    # Order-free: a subset asked alone gets the same values.
    np.testing.assert_array_equal(m.bandwidth(i[::7], j[::7]), m.bandwidth(i, j)[::7])
    lat = m.latency(i, j) * 1e3
    assert 1.0 <= lat.min() and lat.max() <= 3.0
    m_links = i.size  # 79800 links: binomial sd of a frequency is below 0.002
    assert abs((m.bandwidth(i, j) == 10e6 / 8).mean() - 0.3) < 0.01
    assert abs(m.link_down(7, i, j).mean() - 0.2) < 0.01 and m_links > 50_000
    assert abs(np.median(m.compute_sps) - 100) < 10  # 400 draws: median within ~6% (3 sd)
    assert (hash_uniform(1, 2, np.arange(10)) == hash_uniform(1, 2, np.arange(10))).all()
    assert not (hash_uniform(1, 2, np.arange(10)) == hash_uniform(2, 2, np.arange(10))).any()


def test_churn_is_a_markov_chain_with_the_stated_rates():
    m = NetworkModel(NetworkConfig(churn_leave=0.1, churn_join=0.4), 2000, seed=1)
    on = np.array([m.online(t) for t in range(30)])
    assert on[0].all()
    stay = on[:-1] & on[1:]
    leave_rate = 1 - stay.sum() / on[:-1].sum()
    back = ~on[:-1] & on[1:]
    join_rate = back.sum() / (~on[:-1]).sum()
    assert abs(leave_rate - 0.1) < 0.01 and abs(join_rate - 0.4) < 0.03
    # Asking for an earlier round again replays the chain.
    np.testing.assert_array_equal(m.online(5), on[5])
    np.testing.assert_array_equal(m.joined(6), ~on[5] & on[6])


# --------------------------------------------------------------------------------------------------
# Clocks and cost models


def one_round_seconds(spec: str, n: int, cfg: NetworkConfig, samples: float) -> float:
    topo = topology.make(spec, n)
    comm = SimComm(topo, network=NetworkModel(cfg, n), samples_per_round=samples)
    X = np.ones((n, DIM), dtype=np.float32)
    for t in range(3):
        X = comm.mix(X, t)
        comm.round_done(t)
    rounds = comm.clock.round_seconds
    assert rounds[0] == pytest.approx(rounds[1], rel=1e-12) == pytest.approx(rounds[2], rel=1e-12)
    return comm.sim_seconds / 3


@pytest.mark.parametrize("nic,ring_share,star_share", [("shared", 2, 15), ("dedicated", 1, 1)])
def test_ring_and_star_rounds_take_the_closed_form_time(nic, ring_share, star_share):
    cfg = uniform(nic=nic)
    lat, bw, nbytes, samples = 2e-3, 80e6 / 8, 4 * DIM, 64
    compute = samples / 500.0
    assert one_round_seconds("ring", 16, cfg, samples) == pytest.approx(
        compute + lat + ring_share * nbytes / bw, rel=1e-12)
    assert one_round_seconds("star", 16, cfg, samples) == pytest.approx(
        compute + lat + star_share * nbytes / bw, rel=1e-12)


def test_dpsgd_run_reports_the_closed_form_time(tmp_path):
    path = write_toml(tmp_path, latency_ms=2.0, bandwidth_mbps=80.0, compute_sps=500.0)
    cfg = RunConfig(peers=8, rounds=6, eval_every=3, network=path, batch_size=16, local_steps=2)
    result = simulate(cfg)
    sim_dim = Simulator(cfg.replace(network=None)).model.dim
    per_round = 32 / 500.0 + 2e-3 + 2 * 4 * sim_dim / 10e6
    assert [row["sim_seconds"] for row in result.history] == pytest.approx(
        [3 * per_round, 6 * per_round], rel=1e-12)
    assert result.summary["sim_seconds"] == pytest.approx(6 * per_round, rel=1e-12)
    assert result.summary["sim_round_seconds"] == pytest.approx([per_round] * 6, rel=1e-12)


def test_ring_allreduce_and_server_round_closed_forms():
    m = NetworkModel(uniform(), 16)
    lat, bw = 2e-3, 10e6
    for n in (1, 2, 16):
        closed = ring_allreduce_closed_form(1e6, n, lat, bw)
        expected = 0.0 if n == 1 else 2 * (n - 1) / n * 1e6 / bw + 2 * (n - 1) * lat
        assert closed == pytest.approx(expected, rel=1e-15)
        assert allreduce_time(m, 1e6, np.arange(n)) == pytest.approx(closed, rel=1e-12)
    clients = np.array([1, 4, 9, 12])
    t = server_round_time(m, 4e5, 1e5, clients, samples=100)
    assert t == pytest.approx(2 * lat + 4 * 5e5 / bw + 100 / 500.0, rel=1e-12)


def test_allreduce_and_server_rounds_on_the_clock():
    """The hooks a collective communicator calls: compute, then the cost model, for everyone."""
    n, samples, nbytes = 16, 64, 4e5
    model = NetworkModel(uniform(), n)
    comm = SimComm(topology.make("ring", n), network=model, samples_per_round=samples)
    lat, bw = 2e-3, 10e6
    comm.clock.allreduce(0, nbytes)
    comm.round_done(0)
    first = samples / 500.0 + 2 * (n - 1) / n * nbytes / bw + 2 * (n - 1) * lat
    assert comm.sim_seconds == pytest.approx(first, rel=1e-12)
    clients = np.arange(0, n, 4)
    comm.clock.server_round(1, nbytes, nbytes / 2, clients)
    comm.round_done(1)
    second = 2 * lat + 4 * 1.5 * nbytes / bw + samples / 500.0
    assert comm.clock.round_seconds == pytest.approx([first, second], rel=1e-12)


def test_heterogeneous_allreduce_is_paced_by_its_slowest_ring_link():
    m = NetworkModel(NetworkConfig(latency_ms="uniform:1:5", bandwidth_mbps="uniform:10:100"), 6)
    peers = np.arange(6)
    worst = max(m.latency(k, (k + 1) % 6)[0] + (6e5 / 6) / m.bandwidth(k, (k + 1) % 6)[0]
                for k in range(6))
    assert allreduce_time(m, 6e5, peers) == pytest.approx(10 * worst, rel=1e-12)


def dense_clock_reference(model, topo, rounds, samples, nbytes):
    """Per-peer clocks written out link by link, from the docstring of network.clock."""
    n = topo.n
    clock = np.zeros(n)
    totals = []
    for t in range(rounds):
        W = topo.mixing_matrix(t)
        compute = model.compute_time(t, samples)
        ready = clock + compute
        end = ready.copy()
        outdeg = [(W[:, j] != 0).sum() - 1 for j in range(n)]
        indeg = [(W[i] != 0).sum() - 1 for i in range(n)]
        for i in range(n):
            for j in range(n):
                if i != j and W[i, j] != 0:
                    share = max(outdeg[j], indeg[i])
                    lat = model.latency(j, i)[0]
                    bw = model.bandwidth(j, i)[0]
                    end[i] = max(end[i], ready[j] + lat + share * nbytes / bw)
        clock = end
        totals.append(clock.max())
    return totals


def test_sync_clock_matches_a_dense_reference_on_a_heterogeneous_network():
    cfg = NetworkConfig(latency_ms="lognormal:20:0.6", bandwidth_mbps="uniform:5:500",
                        compute_sps="tiers:100@0.5,400@0.5", straggler_prob=0.3,
                        straggler_slowdown=5.0)
    topo = topology.make("random-regular:3", 10, seed=2)
    model = NetworkModel(cfg, 10, seed=9)
    comm = SimComm(topo, network=model, samples_per_round=32)
    X = np.zeros((10, DIM), dtype=np.float32)
    seen = []
    for t in range(5):
        X = comm.mix(X, t)
        comm.round_done(t)
        seen.append(comm.sim_seconds)
    np.testing.assert_allclose(seen, dense_clock_reference(model, topo, 5, 32, 4 * DIM),
                               rtol=1e-12)


# --------------------------------------------------------------------------------------------------
# Faults


@pytest.mark.parametrize("spec", ["ring", "random-regular:4", "small-world:4:0.3", "torus"])
def test_every_faulty_round_is_doubly_stochastic_and_drops_at_the_stated_rate(spec):
    n = 36
    base = topology.make(spec, n, seed=1)
    model = NetworkModel(NetworkConfig(link_drop=0.2, churn_leave=0.05, churn_join=0.5,
                                       straggler_prob=0.1, straggler_mode="skip"), n, seed=4)
    view = FaultyTopology(base, model)
    for t in range(40):
        W = view.mixing_matrix(t)
        np.testing.assert_allclose(W.sum(axis=0), 1.0, atol=1e-12)
        np.testing.assert_allclose(W.sum(axis=1), 1.0, atol=1e-12)
        np.testing.assert_array_equal(W, W.T)
        assert W.min() >= 0
        off = ~model.online(t)
        np.testing.assert_array_equal(W[off][:, off], np.eye(int(off.sum())))
        # Surviving links keep their base weight.
        B = base.mixing_matrix(t)
        kept = (W != 0) & ~np.eye(n, dtype=bool)
        np.testing.assert_array_equal(W[kept], B[kept])
    stats = view.stats()
    # Independent drops at 0.2 plus offline/skipping endpoints: more than 0.2 of the links.
    assert 0.2 < stats["link_drop_rate"] < 0.6
    assert 0.0 < stats["offline_rate"] < 0.2


def test_faults_on_a_push_sum_topology_keep_columns_summing_to_one():
    model = NetworkModel(NetworkConfig(link_drop=0.3), 12, seed=2)
    view = FaultyTopology(epidemic(12, 3, seed=1, kind="column"), model)
    for t in range(20):
        W = view.mixing_matrix(t)
        np.testing.assert_allclose(W.sum(axis=0), 1.0, atol=1e-12)
    row_view = FaultyTopology(epidemic(12, 3, seed=1, kind="row"), model)
    for t in range(20):
        np.testing.assert_allclose(row_view.mixing_matrix(t).sum(axis=1), 1.0, atol=1e-12)


def test_directed_doubly_stochastic_topology_with_faults_needs_push_sum():
    base = topology.make("one-peer-exponential", 8)
    model = NetworkModel(NetworkConfig(link_drop=0.1), 8)
    with pytest.raises(ValueError, match="pushsum"):
        FaultyTopology(base, model)
    view = FaultyTopology(base, model, kind="column")
    np.testing.assert_allclose(view.mixing_matrix(3).sum(axis=0), 1.0, atol=1e-12)


def test_random_matching_and_epidemic_graphs():
    rm = random_matching(9, seed=3)
    for t in range(5):
        W = rm.mixing_matrix(t)
        np.testing.assert_array_equal(W, W.T)
        assert sorted(np.diag(W).tolist()) == [0.5] * 8 + [1.0]
    assert not np.array_equal(rm.mixing_matrix(0), rm.mixing_matrix(1))
    ep = epidemic(10, 3, seed=1, kind="column")
    for t in range(5):
        W = ep.mixing_matrix(t)
        np.testing.assert_array_equal(ep.send_counts(t), np.full(10, 3))
        np.testing.assert_allclose(W.sum(axis=0), 1.0, atol=1e-15)
    assert ep.stochastic == "column"


def test_mixing_checker_accepts_declared_kinds_only():
    ep = make_topology("epidemic:2", 8, seed=0, mixing=("doubly",))
    with pytest.raises(ValueError, match="row-stochastic.*dpsgd.*epidemic"):
        check_mixing(ep, ("doubly",), "algorithm 'dpsgd'", hints=mixing_hints())
    check_mixing(make_topology("epidemic:2", 8, mixing=("column", "doubly")), ("column", "doubly"),
                 "algorithm 'pushsum'")
    with pytest.raises(ValueError, match="row-stochastic.*choco.*pushsum"):
        Simulator(RunConfig(peers=8, topology="epidemic:2", algorithm="choco", rounds=1))


class ZeroGradModel:
    """A model whose loss is 0 and gradient 0: the round is pure push-sum mixing."""

    def __init__(self, dim):
        self.dim = dim

    def loss_and_grad(self, params, x, y, grad=None, frozen=0):
        grad[:] = 0
        return np.zeros(params.shape[0]), grad


@pytest.mark.parametrize("spec,rounds", [("directed-ring", 600), ("epidemic:2", 100)])
def test_push_sum_reaches_the_exact_average(spec, rounds):
    """z_i = x_i / w_i -> mean(x_0) for every peer; tolerance 1e-5 relative (float32 state)."""
    n, dim = 12, 7
    topo = make_topology(spec, n, seed=3, mixing=("column", "doubly"))
    comm = SimComm(topo)
    x0 = np.random.default_rng(0).normal(size=(n, dim)).astype(np.float32)
    alg = PushSum(model=ZeroGradModel(dim), comm=comm, params=x0.copy(),
                  optimizer=SGD(SGDConfig(lr=0.1, momentum=0.0), (n, dim)))
    for t in range(rounds):
        alg.round(lambda: (None, None), t)
    target = x0.astype(np.float64).mean(axis=0)
    np.testing.assert_allclose(alg.params, np.broadcast_to(target, (n, dim)), rtol=0,
                               atol=1e-5 * np.abs(x0).max())
    # w is mixed with the kernel's float32 weights: the sum is kept to their rounding per round.
    assert alg.weights.sum() == pytest.approx(n, rel=rounds * 1e-7)
    if spec.startswith("epidemic"):
        # The numerators alone (column-stochastic mixing without the weights) are biased.
        assert np.abs(alg.numerators - target).max() > 1e-2


# --------------------------------------------------------------------------------------------------
# Runs: convergence under faults, churn, reproducibility


def test_twenty_percent_link_drops_still_converge_and_show_in_the_metrics(tmp_path):
    net = write_toml(tmp_path, link_drop=0.2)
    r = simulate(RunConfig(peers=8, rounds=60, eval_every=30, partition="iid", network=net,
                           seed=1))
    assert r.summary["test_accuracy_mean"] > 0.85
    assert abs(r.history[-1]["link_drop_rate"] - 0.2) < 0.05  # 480 ring links drawn
    assert r.summary["link_drop_rate"] == r.history[-1]["link_drop_rate"]


def test_offline_peers_do_not_train_and_reset_peers_restart_from_the_initial_model(tmp_path):
    for state in ("keep", "reset"):
        net = write_toml(tmp_path, churn_leave=0.3, churn_join=0.5, churn_state=state)
        sim = Simulator(RunConfig(peers=8, rounds=10, network=net, seed=2))
        init = sim.params[0].copy()
        checked = 0
        for t in range(10):
            sim.offline_hook.before_round(t)
            joined = sim.network.joined(t)
            if state == "reset" and joined.any():
                np.testing.assert_array_equal(sim.params[joined], np.broadcast_to(
                    init, (int(joined.sum()), init.size)))
            before = sim.params.copy()
            mom = sim.algorithm.optimizer.momentum_buffer.copy()
            sim.algorithm.round(sim.sample, t)
            sim.offline_hook.after_round(t)
            off = ~sim.network.online(t)
            np.testing.assert_array_equal(sim.params[off], before[off])
            np.testing.assert_array_equal(sim.algorithm.optimizer.momentum_buffer[off], mom[off])
            checked += int(off.sum())
        assert checked > 0


@pytest.mark.parametrize("asynchronous", [False, True])
def test_same_seed_same_times_faults_and_parameters_at_1_and_2_threads(tmp_path, asynchronous):
    if asynchronous:
        net = write_toml(tmp_path, preset="wan", link_drop=0.1, straggler_prob=0.2,
                         straggler_slowdown=3.0)
    else:
        net = "mobile"
    cfg = RunConfig(peers=8, rounds=12, eval_every=4, network=net, asynchronous=asynchronous,
                    seed=7, model="mlp")
    runs = [simulate(cfg.replace(threads=k)) for k in (1, 2, 2)]

    def rows(r):
        return [{k: v for k, v in row.items() if k != "wall_seconds"} for row in r.history]

    assert "sim_seconds" in runs[0].history[0]
    if not asynchronous:
        assert runs[0].summary["link_drop_rate"] > 0 and runs[0].summary["offline_rate"] > 0
    for r in runs[1:]:
        np.testing.assert_array_equal(r.params, runs[0].params)
        assert rows(r) == rows(runs[0])  # same times, drop and churn rates, accuracies, bytes
    other = simulate(cfg.replace(seed=8))
    assert other.summary["sim_seconds"] != runs[0].summary["sim_seconds"]


def test_async_waves_equal_one_event_at_a_time(tmp_path):
    net = write_toml(tmp_path, compute_sps="tiers:300@0.5,900@0.5", latency_ms="uniform:1:10",
                     straggler_prob=0.2, straggler_slowdown=4.0, link_drop=0.1)
    cfg = RunConfig(peers=10, rounds=6, eval_every=6, network=net, asynchronous=True, seed=3,
                    topology="random-regular:4")
    batched = Simulator(cfg)
    single = Simulator(cfg)
    single.algorithm.max_wave = 1
    a, b = batched.run(), single.run()
    np.testing.assert_array_equal(a.params, b.params)
    assert a.summary["sim_seconds"] == b.summary["sim_seconds"] > 0
    assert a.summary["bytes_sent_total"] == b.summary["bytes_sent_total"]


def test_async_learns_and_faster_peers_do_more_updates(tmp_path):
    net = write_toml(tmp_path, compute_sps="tiers:200@0.5,800@0.5", latency_ms=1.0)
    sim = Simulator(RunConfig(peers=8, rounds=40, eval_every=40, network=net, asynchronous=True,
                              partition="iid", seed=1))
    r = sim.run()
    assert r.summary["test_accuracy_mean"] > 0.8
    fast = sim.network.compute_sps == 800
    assert fast.any() and (~fast).any()
    assert sim.algorithm.updates[fast].min() > 2 * sim.algorithm.updates[~fast].max()


# --------------------------------------------------------------------------------------------------
# Configuration and CLI


def test_run_config_validates_network_and_async():
    with pytest.raises(ValueError, match="unknown network preset 'lan'"):
        RunConfig(network="lan")
    with pytest.raises(ValueError, match="algorithm 'choco' has no asynchronous form"):
        RunConfig(network="wan", asynchronous=True, algorithm="choco")
    with pytest.raises(ValueError, match="needs a network model"):
        RunConfig(asynchronous=True)


@pytest.mark.parametrize("argv,match", [
    (["--network", "lan"], "unknown network preset 'lan'"),
    (["--network", "wan", "--async", "--algorithm", "choco"], "no asynchronous form"),
])
def test_cli_rejects_bad_network_input_in_one_line(argv, match, capsys, tmp_path):
    assert main(["run", "--out", str(tmp_path / "o"), "--quiet", *argv]) == 2
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1


def test_cli_bad_toml_value_is_one_line(capsys, tmp_path):
    path = write_toml(tmp_path, link_drop=1.5)
    assert main(["run", "--network", path, "--quiet", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "link_drop must be a probability" in err and len(err.strip().splitlines()) == 1


def test_cli_writes_sim_seconds(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "--peers", "4", "--rounds", "4", "--eval-every", "2", "--network",
                 "datacenter", "--quiet", "--out", str(out)]) == 0
    header = (out / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "sim_seconds" in header
    summary = json.loads((out / "summary.json").read_text())
    assert summary["sim_seconds"] > 0 and summary["config"]["network"] == "datacenter"
    assert math.isfinite(summary["sim_seconds"])


@pytest.mark.parametrize("algorithm,spec", [("epidemic", "epidemic:2"), ("pushsum", "epidemic:2"),
                                            ("dpsgd", "random-matching")])
def test_time_varying_and_directed_runs_learn(algorithm, spec):
    r = simulate(RunConfig(peers=8, rounds=40, eval_every=40, partition="iid", seed=1,
                           algorithm=algorithm, topology=spec))
    assert r.summary["test_accuracy_mean"] > 0.8
    assert r.summary["consensus_distance"] < 1.0


def test_cli_rejects_a_row_stochastic_topology_for_dpsgd(capsys, tmp_path):
    assert main(["run", "--topology", "epidemic:2", "--quiet", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "row-stochastic" in err and "--algorithm epidemic" in err
    assert len(err.strip().splitlines()) == 1


def test_push_sum_under_drops_and_churn_keeps_the_weight_sum_and_learns(tmp_path):
    net = write_toml(tmp_path, link_drop=0.2, churn_leave=0.1, churn_join=0.5,
                     churn_state="reset")
    sim = Simulator(RunConfig(peers=8, rounds=40, eval_every=40, partition="iid", seed=2,
                              algorithm="pushsum", topology="epidemic:2", network=net))
    r = sim.run()
    # Column-stochastic faulty views conserve sum(w) (to the float32 rounding of the weights).
    assert sim.algorithm.weights.sum() == pytest.approx(8, rel=40 * 1e-7)
    assert r.summary["offline_rate"] > 0 and r.summary["link_drop_rate"] > 0.2
    assert r.summary["test_accuracy_mean"] > 0.6  # chance is 0.1; resets cost accuracy


def test_allreduce_algorithm_is_timed_and_untimed_algorithms_refuse_a_network():
    """The all-reduce baseline's rounds take the ring all-reduce cost model's time; algorithms
    whose messages the model does not time yet refuse --network in one line."""
    from decentlearn.sim import RunConfig, Simulator
    base = dict(peers=4, rounds=2, eval_every=2, partition="iid", model="linear", lr=0.05,
                network="datacenter")
    sim = Simulator(RunConfig(algorithm="allreduce", **base))
    comm = sim.comm
    sim.run()
    from decentlearn.network import allreduce_time
    collective = allreduce_time(sim.network, 4 * sim.model.dim)
    assert collective > 0
    # each round: training (same for every peer on this preset's draw) + the collective
    assert all(r >= collective for r in comm.clock.round_seconds)
    untimed = Simulator(RunConfig(algorithm="dpsgd", topology="complete", **base))
    untimed.run()
    assert comm.sim_seconds != untimed.comm.sim_seconds
    for name in ("fedavg", "stc-fl", "fedhisyn", "ngc", "compngc", "skewscout"):
        with pytest.raises(ValueError, match=f"network: algorithm {name!r}"):
            RunConfig(algorithm=name, **base)
