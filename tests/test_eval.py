"""Evaluation of a run: budgeted sizes, stratified fixed subsamples, the summary record, and the
thread settings that reach every kernel."""

import numpy as np
import pytest

import decentlearn
from decentlearn import ops
from decentlearn.nn import make_model
from decentlearn.sim import RunConfig, Simulator, eval_sizes, stratified_order


def test_stratified_order_prefixes_are_stratified_and_fixed():
    rng = np.random.default_rng(0)
    y = rng.choice(4, size=1000, p=[0.1, 0.2, 0.3, 0.4])
    order = stratified_order(y, 4)
    assert np.array_equal(np.sort(order), np.arange(1000))  # a permutation
    assert np.array_equal(order, stratified_order(y, 4))  # fixed
    freq = np.bincount(y, minlength=4)
    for n in (10, 37, 100, 500):
        counts = np.bincount(y[order[:n]], minlength=4)
        # every class within about one sample of its proportional share
        assert np.all(np.abs(counts - n * freq / 1000) <= 2.0), (n, counts)


def test_eval_sizes_budget_and_overrides():
    c = RunConfig(peers=64, batch_size=32, eval_every=10, local_steps=1)
    peer, avg = eval_sizes(c, 10000, 10)
    train_fwd = 10 * 32 * 3
    assert peer == max(100, int(0.05 * train_fwd))
    # the 10-per-class floor (100 > 0.05 F = 48) binds: the peers take 64 x 100 = 6400 of the
    # 10% total (6144), so the average model gets no more than the peers' samples
    assert peer == 100 and avg == 100
    # floor not binding (batch 128: F = 3840, S_peer = 192): each side gets 5% of the training
    peer, avg = eval_sizes(c.replace(batch_size=128), 100000, 10)
    assert peer == 192 and avg == int(0.10 * 3840 * 64) - 64 * 192 == 12288
    # partly binding (batch 48: F = 1440, 0.05 F = 72 < 100): the average model gets the rest
    peer, avg = eval_sizes(c.replace(batch_size=48), 10000, 10)
    assert peer == 100 and avg == int(0.10 * 1440 * 64) - 6400 == 2816
    # one peer with a long interval: capped by the test set
    assert eval_sizes(c.replace(peers=1, eval_every=10**4), 10000, 10) == (10000, 10000)
    assert eval_sizes(c.replace(eval_peer_samples=2000), 10000, 10)[0] == 2000
    assert eval_sizes(c.replace(eval_peer_samples=20000), 10000, 10) == (10000, 10000)
    assert eval_sizes(c.replace(peers=2), 150, 10) == (100, 100)


def test_evaluation_matches_direct_model_evaluation_and_is_recorded():
    cfg = RunConfig(peers=6, rounds=4, eval_every=2, eval_peer_samples=50)
    sim = Simulator(cfg)
    res = sim.run()
    ev = res.summary["evaluation"]
    assert ev["peer_samples"] == 50 and ev["test_samples"] == len(sim.dataset.y_test)
    assert 0 < ev["fraction_of_run"] <= 1 and ev["seconds"] > 0
    idx = np.sort(stratified_order(sim.y_eval, sim.dataset.n_classes)[:50])
    acc, _ = sim.model.evaluate(res.params, sim.x_eval[idx], sim.y_eval[idx])
    assert res.history[-1]["test_accuracy_mean"] == pytest.approx(acc.mean())
    avg = res.params.mean(axis=0, keepdims=True, dtype=np.float64).astype(np.float32)
    acc_avg, _ = sim.model.evaluate(avg, sim.x_eval, sim.y_eval)  # final: the whole set
    assert res.history[-1]["test_accuracy_avg_model"] == pytest.approx(acc_avg[0])


def test_eval_peer_samples_validated():
    with pytest.raises(ValueError, match="eval_peer_samples"):
        RunConfig(eval_peer_samples=0)


def test_set_num_threads_governs_default_and_results_do_not_change():
    model = make_model("mlp:32", (1, 8, 8), 10)
    rng = np.random.default_rng(0)
    params = np.stack([model.init(s) for s in range(5)]).astype(np.float32)
    x = rng.standard_normal((5, 16, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, (5, 16))
    try:
        decentlearn.set_num_threads(1)
        assert decentlearn.get_num_threads() == 1 and ops.resolve_threads(None) == 1
        l1, g1 = model.loss_and_grad(params, x, y, step=0)
        decentlearn.set_num_threads(2)
        assert ops.resolve_threads(None) == 2
        l2, g2 = model.loss_and_grad(params, x, y, step=0)
    finally:
        decentlearn.set_num_threads(None)
    assert np.array_equal(l1, l2) and np.array_equal(g1, g2)
    with pytest.raises(ValueError, match="n_threads"):
        decentlearn.set_num_threads(0)
