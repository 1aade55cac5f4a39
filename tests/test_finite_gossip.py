"""Finite-time consensus: the minimal-polynomial rule reaches the average to 1e-6 in exactly K
steps (K = distinct eigenvalues of W other than 1, closed form floor(n/2) on rings), the
time-varying exact schemes (one-peer exponential on 2^k peers, hypercube pairing) in log2(n)
rounds, and the communicator gives D-PSGD exact consensus every round."""

from __future__ import annotations

import numpy as np
import pytest

from decentlearn import finite_gossip as F, topology as T
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
    comm = F.FiniteTimeComm(top)
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
