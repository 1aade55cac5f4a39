"""Finite-time consensus: the minimal-polynomial rule reaches the average to 1e-6 in exactly K
steps (K = distinct eigenvalues of W other than 1, closed form floor(n/2) on rings), the
time-varying exact schemes (one-peer exponential on 2^k peers, hypercube pairing) in log2(n)
rounds, and the communicator gives D-PSGD exact consensus every round."""

from __future__ import annotations

import numpy as np
import pytest

from decentlearn import ops, topology
from decentlearn.comm import mixing as finite_gossip
from decentlearn import topology as T
from decentlearn.comm import SimComm
from decentlearn.comm import mixing as F
from decentlearn.topology import round_matrix
from decentlearn.sim import RunConfig, Simulator, simulate

GRAPHS = [("ring", 16), ("ring", 33), ("ring", 64), ("torus", 16), ("torus", 64),
          ("exponential", 16), ("exponential", 50), ("exponential", 64)]


def ring_eigenvalue_count(n: int) -> int:
    # 1/3 + 2/3 cos(2 pi k / n), k = 1 .. floor(n / 2), are distinct and != 1.
    return n // 2


def consensus_error(x: np.ndarray) -> float:
    return float(np.abs(x - x.mean(axis=0)).max())


@pytest.mark.parametrize(("spec", "n"), GRAPHS)
def test_minimal_polynomial_rule_is_exact_in_k_steps(spec: str, n: int) -> None:
    top = T.make(spec, n)
    schedule = F.minimal_polynomial_schedule(top)
    eig = np.linalg.eigvalsh(top.mixing_matrix())
    distinct = np.unique(np.round(eig, 8))
    assert schedule.size == distinct.size - 1  # K: distinct eigenvalues other than 1
    if spec == "ring":
        assert schedule.size == ring_eigenvalue_count(n)
    x = np.random.default_rng(n).standard_normal((n, 6))
    w = top.mixing_matrix()
    y = x.copy()
    for lam in schedule:
        y = (w @ y - lam * y) / (1 - lam)
    assert consensus_error(y) <= 1e-6
    np.testing.assert_allclose(y.mean(axis=0), x.mean(axis=0), atol=1e-12)
    # Through the C kernel in float32, the communicator gets within float32 rounding.
    comm = F.FiniteTimeComm(SimComm(top))
    x32 = x.astype(np.float32)
    z = comm.mix(x32, 0)
    assert np.abs(z - x.mean(axis=0)).max() <= 1e-4
    assert comm.steps == schedule.size
    np.testing.assert_array_equal(comm.bytes_sent, schedule.size * 6 * 4 * top.degree())


@pytest.mark.parametrize("n", [8, 32, 128])
@pytest.mark.parametrize("spec", ["one-peer-exponential", "moshpit"])
def test_time_varying_exact_schemes_take_log2_n_rounds(spec: str, n: int) -> None:
    k = n.bit_length() - 1
    top = T.make(spec if spec != "moshpit" else "moshpit:" + "x".join(["2"] * k), n)
    assert top.period == k
    x = np.random.default_rng(0).standard_normal((n, 3))
    y = x.copy()
    for t in range(k):
        assert consensus_error(y) > 1e-6
        y = top.rounds[t] @ y
    assert consensus_error(y) <= 1e-12


def test_finite_time_mixing_gives_dpsgd_exact_consensus_each_round() -> None:
    res = simulate(peers=12, topology="ring", mixing="finite-time", rounds=3, eval_every=3,
                   partition="classes:1")
    assert res.summary["consensus_distance"] < 1e-4


@pytest.mark.parametrize(("changes", "needle"), [
    ({"topology": "one-peer-exponential"}, "static symmetric W"),
    ({"algorithm": "choco"}, "uncompressed dpsgd only"),
    ({"mixing": "exact"}, "mixing must be"),
])
def test_bad_finite_time_requests(changes: dict, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        Simulator(RunConfig(peers=8, rounds=1, mixing="finite-time").replace(**changes))


# --------------------------------------------------------------------------------------------------
# Nonlinear gossip (NGO)


def _dense_nonlinear(w: np.ndarray, x: np.ndarray, alpha: float, eta: float) -> np.ndarray:
    """x_i + eta sum_{j != i} w_ij sign(x_j - x_i) |x_j - x_i|^alpha, in float64, peer by peer."""
    out = x.astype(np.float64).copy()
    for i in range(w.shape[0]):
        for j in range(w.shape[0]):
            if i != j and w[i, j] != 0:
                z = x[j].astype(np.float64) - x[i]
                out[i] += eta * w[i, j] * np.sign(z) * np.abs(z) ** alpha
    return out


@pytest.mark.parametrize("spec", ["ring", "torus", "exponential", "star", "one-peer-exponential"])
@pytest.mark.parametrize("alpha, eta", [(0.5, 0.5), (0.8, 1.0), (1.0, 0.3)])
def test_nonlinear_gossip_matches_dense_rule(spec, alpha, eta):
    top = topology.make(spec, 16)
    x = np.random.default_rng(3).standard_normal((16, 7)).astype(np.float32)
    for t in range(3):
        w = round_matrix(top, t).toarray()
        got = finite_gossip.nonlinear_gossip(top, x, alpha, eta, t)
        np.testing.assert_allclose(got, _dense_nonlinear(w, x, alpha, eta), rtol=1e-5, atol=2e-6)
        if not top.directed:  # symmetric weights: the average is kept (float32 rounding)
            np.testing.assert_allclose(got.mean(axis=0), x.mean(axis=0), atol=2e-6)
        x = got


def test_nonlinear_gossip_with_alpha_eta_one_is_linear_gossip():
    top = topology.make("torus", 16)
    x = np.random.default_rng(4).standard_normal((16, 33)).astype(np.float32)
    np.testing.assert_allclose(finite_gossip.nonlinear_gossip(top, x, 1.0, 1.0),
                               ops.gossip(top, x), atol=3e-7)


@pytest.mark.parametrize("alpha, eta", [(0.5, 0.5), (0.5, 0.1), (0.75, 0.3)])
def test_nonlinear_gossip_two_peers_reaches_its_floor_in_bounded_steps(alpha, eta):
    """Two peers (w = 1/2): the gap d follows d <- d - eta sign(d)|d|^alpha. Closed form: with
    r = eta^(1/(1-alpha)), every step with |d| > r shrinks |d| by more than r (so |d| <= r after at
    most ceil(|d0| / r) steps, the discrete finite-time property) and |d| <= r is invariant."""
    top = topology.make("complete", 2)
    d0 = 3.0
    r = eta ** (1 / (1 - alpha))
    x = np.array([[d0 / 2], [-d0 / 2]], np.float32)
    bound = int(np.ceil(d0 / r))
    hit = None
    for k in range(1, bound + 50):
        x = finite_gossip.nonlinear_gossip(top, x, alpha, eta)
        gap = abs(float(x[0, 0] - x[1, 0]))
        if hit is None and gap <= r * (1 + 1e-5):
            hit = k
        if hit is not None:
            assert gap <= r * (1 + 1e-5), (k, gap, r)
        assert abs(float(x.sum())) < 1e-5  # the mean (0) is kept
    assert hit is not None and hit <= bound


def test_nonlinear_mixing_runs_and_refuses_what_it_cannot_do():
    r = simulate(RunConfig(rounds=20, eval_every=20, peers=8, mixing="nonlinear:0.8:0.5",
                           partition="iid"))
    assert r.summary["test_accuracy_mean"] > 0.6
    assert r.summary["bytes_sent_total"] == simulate(RunConfig(
        rounds=20, eval_every=20, peers=8, partition="iid")).summary["bytes_sent_total"]
    for bad in ("nonlinear:0", "nonlinear:0.5:2", "nonlinear:x", "nonlinear:0.5:0.5:1"):
        with pytest.raises(ValueError, match="mixing must be gossip, finite-time or nonlinear"):
            RunConfig(mixing=bad)
    with pytest.raises(ValueError, match="mixing='nonlinear'"):
        simulate(RunConfig(rounds=2, mixing="nonlinear", algorithm="choco"))
    with pytest.raises(ValueError, match="needs symmetric weights"):
        simulate(RunConfig(rounds=2, mixing="nonlinear", topology="one-peer-exponential"))
