"""ops.consensus_sums (csrc/consensus.c) against its NumPy reference, its independence of the
thread count, bad input, and metrics.consensus_distance_approx built on it against the exact
consensus distance."""

from __future__ import annotations

import numpy as np
import pytest

from decentlearn import metrics, ops
from decentlearn._reference import consensus as ref


@pytest.mark.parametrize("shape", [(1, 1), (3, 511), (7, 512), (16, 513), (5, 3000), (200, 37),
                                   (0, 10), (4, 0)])
def test_matches_reference_and_is_thread_independent(shape):
    X = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    got = ops.consensus_sums(X, n_threads=1)
    np.testing.assert_allclose(got, ref.consensus_sums(X), rtol=1e-12, atol=1e-12)
    for t in (2, 3, 8):
        np.testing.assert_array_equal(ops.consensus_sums(X, n_threads=t), got)


def test_consensus_distance_approx_uses_it_and_matches_exact():
    rng = np.random.default_rng(1)
    X = (rng.standard_normal((64, 4097)) * 0.01 + rng.standard_normal(4097)).astype(np.float32)
    exact = metrics.consensus_distance(X)
    assert metrics.consensus_distance_approx(X) == pytest.approx(exact, rel=1e-9)
    # float64 or non-contiguous input: the NumPy path, same value
    assert metrics.consensus_distance_approx(X.astype(np.float64)) == pytest.approx(exact,
                                                                                   rel=1e-9)
    assert metrics.consensus_distance_approx(np.asfortranarray(X)) == pytest.approx(exact,
                                                                                    rel=1e-9)


def test_non_finite_values_propagate():
    X = np.ones((4, 600), np.float32)
    X[2, 555] = np.inf
    assert not np.isfinite(ops.consensus_sums(X)).all()
    assert not np.isfinite(metrics.consensus_distance_approx(X))
    X[2, 555] = np.nan
    assert np.isnan(metrics.consensus_distance_approx(X))  # not hidden by max(0, .)
    assert np.isnan(metrics.consensus_distance_approx(X.astype(np.float64)))


def test_bad_input():
    X = np.ones((3, 4), np.float32)
    with pytest.raises(TypeError, match="X must be a numpy array"):
        ops.consensus_sums([[1.0]])
    with pytest.raises((TypeError, ValueError), match="X"):
        ops.consensus_sums(X.astype(np.float64))
    with pytest.raises(ValueError, match="out must have 2 float64 entries"):
        ops.consensus_sums(X, out=np.zeros(3))
    with pytest.raises((TypeError, ValueError), match="out"):
        ops.consensus_sums(X, out=np.zeros(2, np.float32))
    with pytest.raises((TypeError, ValueError), match="X"):
        ops.consensus_sums(np.ones((3, 4, 2), np.float32))
