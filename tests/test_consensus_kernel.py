"""ops.consensus_sums and ops.consensus_distance (csrc/consensus.c) against their NumPy references,
their independence of the thread count, bad input, and metrics.consensus_distance_approx and
metrics.consensus_distance built on them against a plain float64 computation."""

from __future__ import annotations

import warnings

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


_SHAPES = [(1, 1), (3, 5), (7, 255), (7, 256), (16, 257), (9, 263), (5, 3000), (200, 37), (64, 8),
           (2, 9)]


@pytest.mark.parametrize("shape", _SHAPES)
def test_distance_equals_its_twin_bit_for_bit_at_any_thread_count(shape):
    rng = np.random.default_rng(sum(shape))
    X = (rng.standard_normal(shape) * 3 + rng.standard_normal(shape[1]) * 100).astype(np.float32)
    got = ops.consensus_distance(X, n_threads=1)
    assert got.dtype == np.float64 and got.shape == (1,)
    np.testing.assert_array_equal(got, ref.consensus_distance(X))
    for t in (2, 3, 8):
        np.testing.assert_array_equal(ops.consensus_distance(X, n_threads=t), got)
    # and it is the consensus distance: a plain float64 computation, to rounding
    x = X.astype(np.float64)
    plain = ((x - x.mean(axis=0)) ** 2).sum() / shape[0]
    assert got[0] == pytest.approx(plain, rel=1e-12, abs=1e-300)


def test_the_twin_is_the_order_it_states():
    """The twin's sums, written out as loops in the stated order (rows in order per column, the
    columns of a chunk in order, the chunks in order), give its bits: so the kernel's equality
    with the twin checks that order, not only a value."""
    rng = np.random.default_rng(5)
    X = (rng.standard_normal((6, 300)) * 1e3 + 1e4).astype(np.float32)
    P, D = X.shape
    parts = []
    for c0 in range(0, D, ref.CHUNK):
        t = 0.0
        for c in range(c0, min(D, c0 + ref.CHUNK)):
            m = 0.0
            for i in range(P):
                m += float(X[i, c])
            m /= P
            q = 0.0
            for i in range(P):
                d = float(X[i, c]) - m
                q += d * d
            t += q
        parts.append(t)
    total = 0.0
    for t in parts:
        total += t
    assert ref.consensus_distance(X)[0] == total / P
    assert ops.consensus_distance(X)[0] == total / P


def test_metrics_consensus_distance_uses_it_and_the_twin_elsewhere():
    rng = np.random.default_rng(2)
    X = (rng.standard_normal((33, 1000)) + 5).astype(np.float32)
    want = float(ops.consensus_distance(X)[0])
    assert metrics.consensus_distance(X) == want
    # a strided or Fortran-ordered view: the NumPy twin, the same bits
    assert metrics.consensus_distance(np.asfortranarray(X)) == want
    wide = np.zeros((33, 2000), np.float32)
    wide[:, ::2] = X
    assert metrics.consensus_distance(wide[:, ::2]) == want
    with pytest.raises(ValueError, match="2-dimensional"):
        metrics.consensus_distance(X[0])
    with pytest.raises(ValueError, match="at least one peer"):
        metrics.consensus_distance(X[:0])


def test_distance_of_identical_rows_is_zero_and_non_finite_propagates():
    X = np.tile(np.linspace(-3, 3, 700, dtype=np.float32), (5, 1))
    assert ops.consensus_distance(X)[0] == 0.0
    X[3, 10] = np.nan
    assert np.isnan(ops.consensus_distance(X)[0]) and np.isnan(ref.consensus_distance(X)[0])
    X[3, 10] = np.inf
    assert not np.isfinite(ops.consensus_distance(X)[0])
    assert ops.consensus_distance(np.zeros((0, 4), np.float32))[0] == 0.0
    assert ops.consensus_distance(np.zeros((4, 0), np.float32))[0] == 0.0


def test_distance_bad_input():
    X = np.ones((3, 4), np.float32)
    with pytest.raises(TypeError, match="X must be a numpy array"):
        ops.consensus_distance([[1.0]])
    with pytest.raises((TypeError, ValueError), match="X"):
        ops.consensus_distance(X.astype(np.float64))
    with pytest.raises((TypeError, ValueError), match="X"):
        ops.consensus_distance(np.asfortranarray(np.ones((3, 4), np.float32)))
    with pytest.raises(ValueError, match="out must have 1 float64 entry"):
        ops.consensus_distance(X, out=np.zeros(2))
    with pytest.raises((TypeError, ValueError), match="out"):
        ops.consensus_distance(X, out=np.zeros(1, np.float32))
    with pytest.raises((TypeError, ValueError), match="n_threads"):
        ops.consensus_distance(X, n_threads=0)


@pytest.mark.parametrize("shape", [(1, 3), (7, 255), (16, 257), (64, 8), (2, 9), (300, 1000)])
def test_distance_gives_numpys_mean_from_the_same_pass(shape):
    """The evaluation's average model comes from ``mean``: it must be NumPy's
    X.mean(axis=0, dtype=float64) bit for bit (the runs' accuracies of the average model
    depend on it), at any thread count, from the kernel, the twin and metrics alike."""
    rng = np.random.default_rng(sum(shape) + 1)
    X = (rng.standard_normal(shape) * 7 + 11).astype(np.float32)
    want = X.mean(axis=0, dtype=np.float64)
    for t in (1, 2, 3):
        mean = np.full(shape[1], np.nan)
        dist = ops.consensus_distance(X, mean=mean, n_threads=t)
        np.testing.assert_array_equal(mean, want)
        np.testing.assert_array_equal(dist, ops.consensus_distance(X))  # mean changes nothing
    mean = np.full(shape[1], np.nan)
    ref.consensus_distance(X, mean=mean)
    np.testing.assert_array_equal(mean, want)
    for view in (X, np.asfortranarray(X)):
        mean = np.full(shape[1], np.nan)
        assert metrics.consensus_distance(view, mean=mean) == ops.consensus_distance(X)[0]
        np.testing.assert_array_equal(mean, want)


def test_distance_mean_bad_input():
    X = np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match="mean"):
        ops.consensus_distance(X, mean=np.zeros(5))
    with pytest.raises((TypeError, ValueError), match="mean"):
        ops.consensus_distance(X, mean=np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="mean"):
        ops.consensus_distance(X, mean=np.zeros((1, 4)))
    mean = np.zeros(4)
    with pytest.raises(ValueError):  # an output that overlaps the input
        ops.consensus_distance(X, out=mean[:1], mean=mean)


@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (1, 1), (3, 7), (16, 513), (256, 9610)])
def test_column_mean_and_weighted_sum_are_numpys_bits(shape):
    """ops.column_mean is NumPy's X.mean(axis=0, dtype=float64) and ops.weighted_column_sum its
    add.reduce of the float64 products, bit for bit (signed zeros, a column of -0.0 included) at
    1, 2 and 5 threads; their twins are those NumPy expressions, and a plain loop agrees."""
    rng = np.random.default_rng(shape[0] * 7 + shape[1])
    X = (rng.standard_normal(shape) * np.exp(rng.uniform(-20, 20, shape))).astype(np.float32)
    if shape[0] > 2 and shape[1] > 2:
        X[:, 1] = -0.0
    w = rng.random(shape[0])
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the mean of no rows: NaN
        mean = X.mean(axis=0, dtype=np.float64)
    wsum = np.add.reduce(w[:, None] * X.astype(np.float64), axis=0) if shape[0] else \
        np.zeros(shape[1])
    np.testing.assert_array_equal(ref.column_mean(X).view(np.uint64), mean.view(np.uint64))
    np.testing.assert_array_equal(ref.weighted_column_sum(X, w).view(np.uint64),
                                  wsum.view(np.uint64))
    for nt in (1, 2, 5):
        np.testing.assert_array_equal(ops.column_mean(X, n_threads=nt).view(np.uint64),
                                      mean.view(np.uint64))
        np.testing.assert_array_equal(ops.weighted_column_sum(X, w, n_threads=nt).view(np.uint64),
                                      wsum.view(np.uint64))
    if 0 < shape[0] <= 16:  # the stated order, as a loop
        acc = np.zeros(shape[1])
        for k in range(shape[0]):
            acc = acc + w[k] * X[k].astype(np.float64)
        np.testing.assert_array_equal(acc.view(np.uint64), wsum.view(np.uint64))


def test_column_sums_check_their_arguments():
    X = np.ones((3, 4), np.float32)
    with pytest.raises(TypeError, match="X must have dtype float32"):
        ops.column_mean(X.astype(np.float64))
    with pytest.raises(ValueError, match="mean must have shape"):
        ops.column_mean(X, out=np.empty(3))
    with pytest.raises(ValueError, match="w must have shape"):
        ops.weighted_column_sum(X, np.ones(2))
    with pytest.raises(TypeError, match="w must have dtype float64"):
        ops.weighted_column_sum(X, np.ones(3, np.float32))


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 15, 16, 127, 128, 129, 135, 255, 256, 257, 1000,
                               2048, 8191, 8193, 14700])
def test_row_sums_are_numpys_pairwise_sums(n):
    """ops.row_sums gives np.sum(x, axis=1) bit for bit (NumPy's pairwise float32 summation:
    plain under 8 values, eight running sums up to 128, halves above), also for the trailing
    axes of a 5-D array (the int8 convolution's bias gradient), on 1, 2 and 3 threads; values of
    very different magnitudes make any other order show."""
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((7, n)) * 10.0 ** rng.integers(-3, 6, (7, n))).astype(np.float32)
    want = np.sum(x, axis=1)
    for threads in (1, 2, 3):
        got = np.full(7, np.nan, np.float32)
        assert ops.row_sums(x, got, n_threads=threads) is got
        assert got.tobytes() == want.tobytes()
    assert ref.row_sums(x).tobytes() == want.tobytes()


def test_row_sums_of_trailing_axes_and_bad_input():
    x5 = np.random.default_rng(1).standard_normal((4, 6, 32, 8, 8)).astype(np.float32)
    got = ops.row_sums(x5.reshape(24, -1)).reshape(4, 6)
    assert got.tobytes() == np.sum(x5, axis=(2, 3, 4)).tobytes()
    with pytest.raises(TypeError, match="x must have dtype float32"):
        ops.row_sums(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="C-contiguous"):
        ops.row_sums(np.zeros((3, 2), np.float32).T)
    with pytest.raises(ValueError, match="out"):
        ops.row_sums(np.zeros((2, 3), np.float32), np.zeros(3, np.float32))
