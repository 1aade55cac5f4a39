"""The sparse spectral gap (ARPACK on the deflated operator) against dense eigendecompositions and
closed forms, for static graphs above the dense cut-off and for the product over one period."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse.linalg as spla

from decentlearn import topology as T
from decentlearn.topology import spectral


def dense_gap(w: np.ndarray) -> float:
    if np.array_equal(w, w.T):
        return 1.0 - np.sort(np.abs(np.linalg.eigvalsh(w)))[::-1][1]
    return 1.0 - np.linalg.svd(w, compute_uv=False)[1]


@pytest.mark.parametrize(
    ("spec", "n"),
    [("ring", 65), ("ring", 200), ("torus", 144), ("exponential", 200), ("star", 100),
     ("small-world:4:0.2", 150), ("random-regular:3", 120), ("one-peer-exponential", 100),
     ("complete", 80)],
)
def test_sparse_gap_matches_dense(spec: str, n: int) -> None:
    assert n > T.DENSE_GAP_MAX_N  # the ARPACK path
    top = T.make(spec, n)
    assert top.spectral_gap() == pytest.approx(dense_gap(top.mixing_matrix()), rel=1e-8, abs=1e-12)


@pytest.mark.parametrize(
    ("spec", "n"),
    [("ring", 65), ("ring", 200), ("torus", 144), ("exponential", 200), ("star", 100),
     ("small-world:4:0.2", 150), ("random-regular:3", 120), ("complete", 80),
     ("hypercube", 128)],  # metropolis on a hypercube: lambda_n = -lambda_2
)
def test_shift_invert_fallback_matches_dense(spec: str, n: int, monkeypatch) -> None:
    """With plain ARPACK made to stall, the shift-invert solver (used for rings and
    tori of 10^4 peers, whose eigenvalues cluster near 1) gives the same gap."""
    plain = spectral._largest

    def stalled(op, v0, ncv, maxiter=None):
        if maxiter is not None:
            raise spla.ArpackNoConvergence("forced", np.empty(0), np.empty((0, 0)))
        return plain(op, v0, ncv)

    monkeypatch.setattr(spectral, "_largest", stalled)
    top = T.make(spec, n)
    assert top.spectral_gap() == pytest.approx(dense_gap(top.mixing_matrix()), rel=1e-7, abs=1e-12)


@pytest.mark.parametrize("n", [100, 500, 4000, pytest.param(10_000, marks=pytest.mark.slow)])
def test_ring_gap_closed_form(n: int) -> None:
    # Metropolis ring: W = I/3 + (P + P^T)/3, eigenvalues 1/3 + 2/3 cos(2 pi k / n).
    lam = 1 / 3 + 2 / 3 * np.cos(2 * np.pi * np.arange(n) / n)
    expected = 1.0 - np.sort(np.abs(lam))[-2]
    assert T.make("ring", n).spectral_gap() == pytest.approx(expected, rel=1e-8)


@pytest.mark.parametrize("n", [16, 64, 100])
def test_period_gap_is_the_gap_of_the_product(n: int) -> None:
    top = T.make("one-peer-exponential", n)
    product = np.eye(n)
    for t in range(top.period):
        product = top.mixing_matrix(t) @ product
    expected = 1.0 - np.linalg.svd(product, compute_uv=False)[1]
    assert top.period_spectral_gap() == pytest.approx(expected, abs=1e-9)
    if n & (n - 1) == 0:  # 2^k peers: one period averages exactly (Ying et al. 2021)
        assert top.period_spectral_gap() == pytest.approx(1.0, abs=1e-9)


def test_period_gap_of_static_graph_is_its_gap() -> None:
    top = T.make("torus", 100)
    assert top.period_spectral_gap() == top.spectral_gap()
