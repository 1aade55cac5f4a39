"""ops.spmm (W @ X in float32 arithmetic, scipy.sparse's order) against its NumPy twin bit for
bit: shapes, stored orders, signed zeros, threads, the ISA paths, bad input."""

import platform

import numpy as np
import pytest
import scipy.sparse as sp

from decentlearn import ops
from decentlearn._reference import gossip as ref


def rect(n_rows, n_cols, density, seed, shuffle=False):
    """A random (n_rows, n_cols) float32 CSR matrix; ``shuffle``: each row's entries in a random
    stored order (not sorted by column), which the sums must follow."""
    rng = np.random.default_rng(seed)
    A = sp.random(n_rows, n_cols, density=density, random_state=rng, format="csr",
                  dtype=np.float32)
    if shuffle:
        for i in range(n_rows):
            lo, hi = A.indptr[i], A.indptr[i + 1]
            perm = lo + rng.permutation(hi - lo)
            A.indices[lo:hi], A.data[lo:hi] = A.indices[perm].copy(), A.data[perm].copy()
        A.has_sorted_indices = False
    return A


@pytest.mark.parametrize("n_rows, n_cols, dim, density", [
    (7, 11, 3000, 0.3), (256, 512, 2500, 0.004), (5, 3, 1, 0.6), (0, 4, 5, 0.5), (4, 0, 5, 0.5),
    (3, 6, 0, 0.5), (33, 17, 1025, 0.2)])
@pytest.mark.parametrize("shuffle", [False, True])
def test_spmm_is_its_twin_bit_for_bit(n_rows, n_cols, dim, density, shuffle):
    W = rect(n_rows, n_cols, density, seed=n_rows + dim, shuffle=shuffle)
    X = np.random.default_rng(1).standard_normal((n_cols, dim), dtype=np.float32) * 1e3
    want = ref.spmm(W, X)
    for threads in (1, 2, 3):
        got = ops.spmm(W, X, n_threads=threads)
        assert got.dtype == np.float32 and got.shape == (n_rows, dim)
        assert got.tobytes() == want.tobytes()
    if platform.machine() in ("x86_64", "AMD64"):  # scipy's x86-64 wheels fuse nothing either
        assert got.tobytes() == np.asarray(W @ X, dtype=np.float32).tobytes()


def test_spmm_order_signed_zeros_and_empty_rows():
    """Sums start at +0 (a single -0 term gives +0, as scipy's), follow the stored order (1e8 + 1
    - 1e8 is 0 in float32, 1e8 - 1e8 + 1 is 1), and a row without entries is zeros, whatever
    was in out."""
    X = np.array([[-0.0, 1e8], [1.0, 1.0], [0.0, -1e8]], np.float32)
    W = (np.array([0, 1, 4, 4, 7], np.int64), np.array([0, 0, 1, 2, 0, 2, 1], np.int32),
         np.ones(7, np.float32), 3)
    out = np.full((4, 2), np.nan, np.float32)
    got = ops.spmm(W, X, out=out)
    assert got is out
    np.testing.assert_array_equal(np.signbit(got[0]), [False, False])
    np.testing.assert_array_equal(got, [[0, 1e8], [1, 0], [0, 0], [1, 1]])
    assert got.tobytes() == ref.spmm(W, X).tobytes()


def test_spmm_same_bits_on_every_isa_path():
    W, X = rect(64, 128, 0.05, seed=3), np.random.default_rng(2).standard_normal((128, 4099),
                                                                               np.float32)
    results = set()
    for isa in ops.supported_isas():
        with ops.using_isa(isa):
            results.add(ops.spmm(W, X).tobytes())
    assert results == {ref.spmm(W, X).tobytes()}


def test_spmm_bad_input():
    W, X = rect(4, 6, 0.5, seed=0), np.zeros((6, 3), np.float32)
    with pytest.raises(TypeError, match="W must hold float32 values, got float64"):
        ops.spmm(W.astype(np.float64), X)
    with pytest.raises(TypeError, match="W must be a scipy.sparse matrix"):
        ops.spmm(np.eye(4), X)
    with pytest.raises(ValueError, match=r"X must have one row per column of W: W is 4 x 6"):
        ops.spmm(W, np.zeros((5, 3), np.float32))
    with pytest.raises(TypeError, match="X"):
        ops.spmm(W, X.astype(np.float64))
    with pytest.raises(ValueError, match=r"out must have shape \(4, 3\)"):
        ops.spmm(W, X, out=np.zeros((4, 4), np.float32))
    with pytest.raises(ValueError, match="out"):
        ops.spmm(W, X, out=X[:4])  # overlaps X
    bad = (np.array([0, 2, 1, 3, 3], np.int64), np.zeros(3, np.int32), np.ones(3, np.float32), 6)
    with pytest.raises(ValueError, match="indptr must start at 0 and be non-decreasing"):
        ops.spmm(bad, X)
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.float32), 6)
    with pytest.raises(ValueError, match=r"W.indptr must have n_rows \+ 1 >= 1 entries"):
        ops.spmm(empty, X)
    with pytest.raises(TypeError, match="W.indptr must have dtype int64"):
        ops.spmm((np.array([0, 1], np.int32), np.zeros(1, np.int32), np.ones(1, np.float32), 6), X)
    bad = (np.array([0, 1, 1, 1, 1], np.int64), np.array([6], np.int32), np.ones(1, np.float32), 6)
    with pytest.raises(ValueError, match=r"W.indices must lie in \[0, 6\)"):
        ops.spmm(bad, X)


def test_spmm_column_blocks_of_wider_matrices():
    """X and out as column blocks (each row contiguous, rows apart: NGC sums each tensor's
    received rows into that tensor's columns): the twin's bits, nothing written outside out's
    columns, and X's and out's rows checked against each other."""
    W = rect(40, 60, 0.1, seed=4, shuffle=True)
    X = np.random.default_rng(5).standard_normal((60, 1500), dtype=np.float32)
    want = ref.spmm(W, np.ascontiguousarray(X[:, 200:1400]))
    for threads in (1, 3):
        O = np.full((40, 2000), 7.0, np.float32)
        got = ops.spmm(W, X[:, 200:1400], out=O[:, 300:1500], n_threads=threads)
        assert got.base is O and got.tobytes() == want.tobytes()
        assert (O[:, :300] == 7).all() and (O[:, 1500:] == 7).all()
    S, M = rect(60, 60, 0.1, seed=6), np.zeros((60, 100), np.float32)
    ops.spmm(S, M[:, 0:30], out=M[:, 50:80])  # disjoint columns of one matrix
    with pytest.raises(ValueError, match="out must not overlap X"):
        ops.spmm(S, M[:, 0:30], out=M[:, 20:50])
    with pytest.raises(ValueError, match="out must not overlap X"):  # rows apart: not proven
        ops.spmm(W, M[:, 0:30], out=M[:40, 50:80])
    with pytest.raises(ValueError, match="out must have contiguous rows"):
        ops.spmm(W, X[:, :30], out=np.zeros((40, 60), np.float32)[:, ::2])
    with pytest.raises(ValueError, match="X must have contiguous rows"):
        ops.spmm(W, X[:, ::50])
