"""Runs set up wrong say so at the start (SetupWarning) and stop early when they diverge."""

import math
import warnings

import numpy as np
import pytest

from decentlearn import compress
from decentlearn.sim import (DIVERGENCE_CONSENSUS_FACTOR, DivergenceError, RunConfig, SetupWarning,
                             Simulator, simulate)

SMALL = dict(peers=4, rounds=2, eval_every=2)


def problems(**kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sim = Simulator(RunConfig(**{**SMALL, **kw}))
    assert all(issubclass(w.category, SetupWarning) for w in caught)
    assert [str(w.message) for w in caught] == sim.problems
    return sim.problems


@pytest.mark.parametrize("kw,needle", [
    (dict(compress="topk:0.01"), "'topk:0.01' is biased"),
    (dict(compress="sign"), "'sign' is biased"),
    (dict(compress="qsgd:2"), "needs a low-variance compressor and 'qsgd:2' has variance factor"),
    (dict(algorithm="choco", compress="qsgd:2", gamma=0.5), "CHOCO-SGD needs a contraction"),
    (dict(compress="randk:0.1:unbiased"), "variance factor"),
])
def test_setup_warnings(kw, needle):
    found = problems(**kw)
    assert len(found) == 1 and needle in found[0]


@pytest.mark.parametrize("kw", [
    dict(), dict(compress="natural"), dict(compress="int8"), dict(compress="bucket:8:512"),
    dict(compress="ef:topk:0.01"), dict(algorithm="choco", compress="topk:0.01", gamma=0.1),
    dict(algorithm="choco", compress="sign", gamma=1.0), dict(algorithm="choco"),
])
def test_sound_setups_are_quiet(kw):
    assert problems(**kw) == []


def test_variance_factors_bound_the_error():
    """E||C(x) - x||^2 <= omega ||x||^2, estimated over seeds (10% slack for the estimate)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 300)).astype(np.float32)
    for spec in ("qsgd:2", "qsgd:8", "natural", "dither:4", "randk:0.2:unbiased", "int8",
                 "bucket:4:64", "none"):
        c = compress.make(spec)
        omega = c.variance_factor(x.shape[1])
        err = np.mean([np.sum((c.decompress(c.compress(x, seed=s)) - x) ** 2)
                       for s in range(200)])
        assert err <= 1.1 * omega * np.sum(x.astype(np.float64) ** 2) + 1e-9, spec
    assert compress.make("topk:0.1").variance_factor(300) is None
    assert compress.make("topk:0.1").biased and not compress.make("qsgd:4").biased


def test_qsgd2_dpsgd_stops_within_ten_rounds():
    """The issue's run (digits, 16 peers, ring, D-PSGD with qsgd:2) grew to a consensus distance
    of 7.7e23 and stopped only at round 87 when values overflowed; the bounds stop it early."""
    with pytest.warns(SetupWarning), pytest.raises(DivergenceError) as info:
        simulate(RunConfig(compress="qsgd:2", rounds=100, eval_every=100))
    assert info.value.round <= 10
    assert "exceeds" in str(info.value)


def test_growing_consensus_distance_stops_choco():
    """CHOCO with top-1% and gamma = 1 lets the consensus distance grow geometrically (the peers
    drift apart while the loss still looks sane): stopped by the consensus bound."""
    with pytest.raises(DivergenceError, match="consensus distance .* exceeds") as info:
        simulate(RunConfig(algorithm="choco", compress="topk:0.01", gamma=1.0, rounds=200,
                           eval_every=200))
    assert info.value.round < 150


def test_healthy_run_is_not_stopped():
    res = simulate(RunConfig(peers=8, rounds=40, eval_every=40, lr=0.2))
    x0 = Simulator(RunConfig(peers=8)).params[0].astype(np.float64)
    assert res.summary["consensus_distance"] < DIVERGENCE_CONSENSUS_FACTOR * max(1, x0 @ x0) / 100
    assert math.isfinite(res.summary["final_train_loss"]) and res.summary["warnings"] == []


def test_choco_with_a_compressor_needs_gamma():
    """No default gamma fits every compressor (docs/simulator.md): refuse to guess."""
    with pytest.raises(ValueError, match="needs gamma"):
        RunConfig(algorithm="choco", compress="topk:0.01")
    assert RunConfig(algorithm="choco").algorithm_options().gamma is None
    assert Simulator(RunConfig(algorithm="choco", rounds=1)).algorithm.gamma == 1.0  # = D-PSGD
    config = RunConfig(algorithm="choco", compress="topk:0.01", gamma=0.1)
    assert config.algorithm_options().gamma == 0.1 and config.options == {"gamma": 0.1}
    with pytest.raises(ValueError, match=r"gamma must be a number in \(0, 1\]"):
        RunConfig(algorithm="choco", gamma=True)
    with pytest.raises(ValueError, match="option 'gamma' is not an option of algorithm 'dpsgd'"):
        RunConfig(gamma=0.3)  # an option of another algorithm is refused, not ignored


def test_consensus_distance_approx_matches_exact():
    from decentlearn import metrics
    rng = np.random.default_rng(1)
    for scale in (1e-3, 1.0, 1e6):
        X = (rng.standard_normal((7, 33)) * scale + 5 * scale).astype(np.float32)
        exact = metrics.consensus_distance(X)
        mean_sq = np.mean(np.sum(X.astype(np.float64) ** 2, axis=1))
        assert abs(metrics.consensus_distance_approx(X) - exact) <= 1e-12 * mean_sq + 1e-9 * exact
    assert metrics.consensus_distance_approx(np.ones((3, 4), np.float32)) == 0.0
    assert metrics.consensus_distance_approx(np.zeros((0, 4), np.float32)) == 0.0
