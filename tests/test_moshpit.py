"""Moshpit averaging as a time-varying topology: exact mean after d rounds on a full grid (dense
float64 reference and the C gossip kernel), geometric convergence with missing peers at the rate
sigma_2 of the period product (computed densely), and grid/peer-count errors."""

from __future__ import annotations

import numpy as np
import pytest

from decentlearn import ops, topology as T
from decentlearn.cli import main


def test_full_4x4x4_grid_gives_the_exact_mean_after_3_rounds() -> None:
    top = T.make("moshpit:4x4x4", 64)
    assert top.period == 3 and not top.directed
    x = np.random.default_rng(0).standard_normal((64, 33))
    y = x.copy()
    for t in range(3):
        y = top.mixing_matrix(t) @ y
    np.testing.assert_allclose(y, np.broadcast_to(x.mean(axis=0), y.shape), atol=1e-12)
    # The same through the C gossip kernel, float32.
    z = x.astype(np.float32)
    for t in range(3):
        z = ops.gossip(top, z, t=t)
    np.testing.assert_allclose(z, np.broadcast_to(x.mean(axis=0), z.shape), atol=1e-6)
    assert top.period_spectral_gap() == pytest.approx(1.0, abs=1e-12)
    # One round alone averages groups of 4 along one axis only.
    one = top.mixing_matrix(0)
    assert set(np.round(np.unique(one), 12)) == {0.0, 0.25}


@pytest.mark.parametrize("seed", range(4))
def test_missing_peers_converge_geometrically(seed: int) -> None:
    n = 58  # 10% of the 64 cells empty
    top = T.make("moshpit:4x4x4:sparse", n, seed=seed)
    period = np.eye(n)
    for t in range(3):
        period = top.mixing_matrix(t) @ period
    rho = np.linalg.svd(period, compute_uv=False)[1]  # contraction of one period
    assert rho <= 0.5  # stated rate: at least halves the disagreement every 3 rounds
    assert 1.0 - top.period_spectral_gap() == pytest.approx(rho, abs=1e-9)
    x = np.random.default_rng(seed).standard_normal((n, 8))
    mean = x.mean(axis=0)
    err0 = np.linalg.norm(x - mean)
    y = x.copy()
    for k in range(1, 11):
        for t in range(3):
            y = top.mixing_matrix(t) @ y
        np.testing.assert_allclose(y.mean(axis=0), mean, atol=1e-12)  # the mean is preserved
        assert np.linalg.norm(y - mean) <= rho**k * err0 * (1 + 1e-9)
    assert np.linalg.norm(y - mean) < 1e-3 * err0


@pytest.mark.parametrize(("spec", "n", "needle"), [
    ("moshpit:4x4x4", 60, "GRID=4x4x4 has 64 cells but n=60"),
    ("moshpit:4x4", 20, "fewer than the n=20 peers"),
    ("moshpit:3", 60, "perfect 3-th power"),
    ("moshpit:4x4:everywhere", 16, "PLACEMENT must be"),
])
def test_grid_not_matching_the_peers(spec: str, n: int, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        T.make(spec, n)


def test_cli_runs_dpsgd_on_moshpit_and_reports_bad_grid(capsys, tmp_path) -> None:
    assert main(["run", "--peers", "8", "--topology", "moshpit:2x2x2", "--rounds", "3",
                 "--quiet", "--out", str(tmp_path / "ok")]) == 0
    capsys.readouterr()
    code = main(["run", "--peers", "9", "--topology", "moshpit:2x2x2", "--rounds", "1",
                 "--quiet", "--out", str(tmp_path / "bad")])
    err = capsys.readouterr().err
    assert code == 2 and "GRID=2x2x2 has 8 cells, fewer than the n=9 peers" in err
    assert len(err.strip().splitlines()) == 1
