"""ops.axpby and ops.scale_rows, the threaded ``a x + b y`` and row scaling of the algorithms'
whole-matrix updates, against their NumPy twins and NumPy's own expressions bit for bit (in place,
at several thread counts and sizes, with zeros, infinities and NaN), and their argument checks."""

from __future__ import annotations

import numpy as np
import pytest

from decentlearn import ops
from decentlearn._reference import copy as ref_copy

SIZES = [0, 1, 7, 1000, (1 << 16) * 3 + 5]


def _data(n, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * np.exp(rng.uniform(-30, 30, n))).astype(np.float32)
    if n >= 8:
        x[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3e38, 3e38]
    return x


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("a,b", [(1, 1), (1, -1), (1, 0.3), (2, -1), (0.5, 0.7), (-1.5, 0)])
def test_matches_twin_in_place_and_at_any_thread_count(n, a, b):
    x, y = _data(n, n), _data(n, n + 1)[::-1].copy()
    with np.errstate(all="ignore"):
        want = ref_copy.axpby(a, x, b, y)
        for nt in (1, 2, 5):
            np.testing.assert_array_equal(_bits(ops.axpby(a, x, b, y, n_threads=nt)), _bits(want))
            xx, yy = x.copy(), y.copy()
            assert ops.axpby(a, xx, b, y, out=xx, n_threads=nt) is xx
            ops.axpby(a, x, b, yy, out=yy, n_threads=nt)
            np.testing.assert_array_equal(_bits(xx), _bits(want))
            np.testing.assert_array_equal(_bits(yy), _bits(want))
            xx = x.copy()  # x and y one array: a x + b x
            ops.axpby(a, xx, b, xx, out=xx, n_threads=nt)
            np.testing.assert_array_equal(_bits(xx), _bits(ref_copy.axpby(a, x, b, x)))


def test_equals_numpys_own_expressions():
    """The forms the algorithms replaced: x + y, x - y, x + b y, 2 x - y (products with 1, 2 and
    -1 are exact)."""
    x, y = _data(5000, 1).reshape(50, 100), _data(5000, 2).reshape(50, 100)
    b = np.float32(0.37)
    with np.errstate(all="ignore"):
        for got, want in ((ops.axpby(1, x, 1, y), x + y), (ops.axpby(1, x, -1, y), x - y),
                          (ops.axpby(1, x, 0.37, y), x + b * y),
                          (ops.axpby(2, x, -1, y), 2 * x - y)):
            assert got.shape == x.shape and got.dtype == np.float32
            np.testing.assert_array_equal(_bits(got), _bits(want))


def test_bad_arguments():
    x = np.zeros((3, 4), np.float32)
    with pytest.raises(TypeError, match="x must have dtype float32"):
        ops.axpby(1, x.astype(np.float64), 1, x)
    with pytest.raises(ValueError, match="y and out must have x's size 12, got 11"):
        ops.axpby(1, x, 1, np.zeros(11, np.float32))
    with pytest.raises(ValueError, match="y must have contiguous rows"):
        ops.axpby(1, x, 1, np.zeros((3, 8), np.float32)[:, ::2])
    with pytest.raises(ValueError, match="C-contiguous"):  # not 2-D: one flat size only
        ops.axpby(1, np.zeros(12, np.float32), 1, np.zeros((2, 12), np.float32)[:, ::2])
    buf = np.zeros(20, np.float32)
    with pytest.raises(ValueError, match="out must be x itself or share no memory with it"):
        ops.axpby(1, buf[1:13], 1, x, out=buf[:12])
    with pytest.raises(ValueError, match="out must be y itself or share no memory with it"):
        ops.axpby(1, x, 1, buf[:12], out=buf[2:14])
    ro = np.zeros((3, 4), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="out must be writeable"):
        ops.axpby(1, x, 1, x, out=ro)
    with pytest.raises(TypeError, match="numpy arrays"):
        ops.axpby(1, [1.0], 1, x)


@pytest.mark.parametrize("rows,dim", [(0, 5), (1, 70_000), (3, 7), (256, 9610)])
@pytest.mark.parametrize("divide", [False, True])
def test_scale_rows_is_numpys_broadcast(rows, dim, divide):
    """ops.scale_rows: x * s[:, None] or x / s[:, None], bit for bit, in place too, with zeros,
    infinities and NaN among x and s; few rows split into column blocks."""
    rng = np.random.default_rng(rows + dim)
    x = _data(rows * dim, rows).reshape(rows, dim)
    s = rng.standard_normal(rows).astype(np.float32)
    if rows >= 3:
        s[:3] = [0.0, -np.inf, np.nan]
    with np.errstate(all="ignore"):
        want = x / s[:, None] if divide else x * s[:, None]
        np.testing.assert_array_equal(_bits(ref_copy.scale_rows(x, s, divide)), _bits(want))
        for nt in (1, 2, 5):
            np.testing.assert_array_equal(_bits(ops.scale_rows(x, s, divide, n_threads=nt)),
                                          _bits(want))
            y = x.copy()
            assert ops.scale_rows(y, s, divide, out=y, n_threads=nt) is y
            np.testing.assert_array_equal(_bits(y), _bits(want))


def test_scale_rows_bad_arguments():
    x = np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match="s must have shape"):
        ops.scale_rows(x, np.ones(2, np.float32))
    with pytest.raises(TypeError, match="s must have dtype float32"):
        ops.scale_rows(x, np.ones(3))
    buf = np.ones((4, 4), np.float32)
    with pytest.raises(ValueError, match="out must be x itself or share no memory with it"):
        ops.scale_rows(buf[:3], np.ones(3, np.float32), out=buf[1:])


def test_copy2d_copies_column_blocks_both_ways():
    """ops.copy2d: a column block of a wider matrix out (a new C-contiguous array) and back in,
    np.copyto's values; nothing outside the block written; overlap and shapes refused."""
    rng = np.random.default_rng(4)
    X = rng.standard_normal((300, 1000)).astype(np.float32)
    for nt in (1, 3):
        block = ops.copy2d(X[:, 123:877], n_threads=nt)
        assert block.flags.c_contiguous
        np.testing.assert_array_equal(block, X[:, 123:877])
        np.testing.assert_array_equal(block, ref_copy.copy2d(X[:, 123:877]))
        Y = np.full_like(X, 7.0)
        assert ops.copy2d(block, Y[:, 123:877], n_threads=nt).base is Y
        np.testing.assert_array_equal(Y[:, 123:877], block)
        assert (Y[:, :123] == 7).all() and (Y[:, 877:] == 7).all()
    with pytest.raises(ValueError, match="dst must not overlap src"):
        ops.copy2d(X[:, 0:100], X[:, 50:150])
    with pytest.raises(ValueError, match=r"dst must have src's shape \(300, 10\), got \(300, 11\)"):
        ops.copy2d(X[:, :10], np.empty((300, 11), np.float32))
    with pytest.raises(ValueError, match="contiguous rows"):
        ops.copy2d(X[:, ::2], np.empty((300, 500), np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8])
def test_place_rows_is_zeros_then_assignment(dtype):
    """ops.place_rows: out[rows[i]] = src[i], zero rows elsewhere (every row written, whatever out
    held), any plain dtype and row shape; bad rows refused before anything is written."""
    rng = np.random.default_rng(5)
    src = rng.integers(1, 100, (40, 3, 7)).astype(dtype)
    rows = rng.permutation(100)[:40]
    want = np.zeros((100, 3, 7), dtype)
    want[rows] = src
    np.testing.assert_array_equal(ref_copy.place_rows(src, rows, 100), want)
    for nt in (1, 3):
        out = np.full((100, 3, 7), 9, dtype)
        assert ops.place_rows(src, rows, 100, out=out, n_threads=nt) is out
        np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(ops.place_rows(src[:0], rows[:0], 5), np.zeros((5, 3, 7), dtype))
    out = np.full((100, 3, 7), 9, dtype)
    for bad, match in ((np.r_[rows[:39], rows[0]], "distinct"), (np.r_[rows[:39], 100], r"\[0, 100\)"),
                       (np.r_[rows[:39], -1], r"\[0, 100\)"), (rows[:10], "one row index per row")):
        with pytest.raises(ValueError, match=match):
            ops.place_rows(src, bad, 100, out=out)
        assert (out == 9).all()
    with pytest.raises(ValueError, match="out must have shape"):
        ops.place_rows(src, rows, 100, out=np.zeros((100, 3, 6), dtype))


@pytest.mark.parametrize("rows,width", [(0, 5), (1, 300), (5, 7), (256, 8192), (300, 1280)])
def test_column_blocks_in_and_out_are_the_twin_bit_for_bit(rows, width):
    """x, y and out as column blocks of wider matrices (each row contiguous, the rows of each
    operand their own stride apart; CompNGC's error feedback reads one tensor's columns of every
    edge's cross-gradient in place): the same bits as on contiguous copies, at any thread count,
    in place on a block, and nothing written outside out's columns."""
    X = _data(rows * (width + 9), rows + 1).reshape(rows, width + 9)
    Y = _data(rows * (width + 40), rows + 2).reshape(rows, width + 40)
    x, y = X[:, 4:4 + width], Y[:, 33:33 + width]
    with np.errstate(all="ignore"):
        for a, b in ((1, 1), (1, -1), (0.5, 0.7)):
            want = ref_copy.axpby(a, x.copy(), b, y.copy())
            for nt in (1, 3):
                got = ops.axpby(a, x, b, y, n_threads=nt)  # a new C-contiguous array
                assert got.flags.c_contiguous
                np.testing.assert_array_equal(_bits(got), _bits(want))
                O = np.full((rows, width + 21), 7.0, np.float32)
                assert ops.axpby(a, x, b, y, out=O[:, 10:10 + width], n_threads=nt).base is O
                np.testing.assert_array_equal(_bits(O[:, 10:10 + width]), _bits(want))
                assert (O[:, :10] == 7).all() and (O[:, 10 + width:] == 7).all()
                XX = X.copy()  # in place on x's block; y contiguous
                ops.axpby(a, XX[:, 4:4 + width], b, y.copy(), out=XX[:, 4:4 + width], n_threads=nt)
                np.testing.assert_array_equal(_bits(XX[:, 4:4 + width]), _bits(want))
                np.testing.assert_array_equal(_bits(XX[:, :4]), _bits(X[:, :4]))


def test_column_blocks_bad_arguments():
    A = np.zeros((4, 40), np.float32)
    with pytest.raises(ValueError, match="out must be x itself or share no memory with it"):
        ops.axpby(1, A[:, 0:10], 1, np.zeros((4, 10), np.float32), out=A[:, 1:11])
    with pytest.raises(ValueError, match=r"y and out must have x's shape \(4, 10\)"):
        ops.axpby(1, A[:, 0:10], 1, np.zeros((4, 11), np.float32)[:, :11], out=A[:, 20:30])
    # blocks of one matrix that share no element are fine
    ops.axpby(1, A[:, 0:10], 1, A[:, 10:20], out=A[:, 20:30])
    with pytest.raises(ValueError, match="x must have contiguous rows with a positive row stride"):
        ops.axpby(1, A[::-1, 0:10], 1, A[:, 10:20], out=A[:, 20:30])


def test_one_row_broadcast_to_every_row():
    """x or y as one row broadcast to every row (np.broadcast_to: row stride 0; the server
    algorithms' x_i - x): NumPy's x - row bit for bit, at any thread count, in place."""
    X = _data(300 * 1000, 11).reshape(300, 1000)
    row = _data(1000, 12).reshape(1, 1000)
    with np.errstate(all="ignore"):
        want = X - row
        for nt in (1, 3):
            xx = X.copy()
            ops.axpby(1, xx, -1, np.broadcast_to(row, xx.shape), out=xx, n_threads=nt)
            np.testing.assert_array_equal(_bits(xx), _bits(want))
            got = ops.axpby(-1, np.broadcast_to(row, X.shape), 1, X, n_threads=nt)
            np.testing.assert_array_equal(_bits(got), _bits(ref_copy.axpby(-1, row, 1, X)))
    with pytest.raises(ValueError, match="out must have contiguous rows"):
        ops.axpby(1, X, 1, X, out=np.broadcast_to(row, X.shape))  # not writeable, stride 0


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_put_rows_is_fancy_assignment(dtype):
    """ops.put_rows: dst[idx] = src (one row per index, or one row into every listed row), any
    plain dtype; idx not strictly increasing or out of range refused before anything is
    written."""
    rng = np.random.default_rng(6)
    dst0 = rng.integers(-50, 50, (100, 3, 7)).astype(dtype)
    idx = np.sort(rng.permutation(100)[:40])
    src = rng.integers(100, 200, (40, 3, 7)).astype(dtype)
    for s in (src, src[:1]):
        want = ref_copy.put_rows(dst0.copy(), idx, s)
        for nt in (1, 3):
            dst = dst0.copy()
            assert ops.put_rows(dst, idx, s, n_threads=nt) is dst
            np.testing.assert_array_equal(dst, want)
    dst = dst0.copy()
    for bad in (idx[::-1], np.r_[idx[:39], idx[38]], np.r_[idx[:39], 100], np.r_[-1, idx[1:]]):
        with pytest.raises(IndexError, match=r"strictly increasing in \[0, 100\)"):
            ops.put_rows(dst, bad, src)
        np.testing.assert_array_equal(dst, dst0)
    with pytest.raises(ValueError, match="src must have len"):
        ops.put_rows(dst, idx, src[:3])
    with pytest.raises(ValueError, match="dst's row shape"):
        ops.put_rows(dst, idx, np.zeros((40, 3, 6), dtype))
    with pytest.raises(ValueError, match="dst must not share memory with src"):
        ops.put_rows(dst, idx[:1], dst[5:6])


def test_count_ne_rows_is_numpys_count():
    """ops.count_ne_rows: np.count_nonzero(a[idx] != b, axis=1), IEEE comparisons (NaN differs
    from itself, -0 equals +0), repeated indices allowed, at any thread count."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal((60, 3001)).astype(np.float32)
    b = a[3].copy()
    b[::5] = 0
    a[7, :10] = np.nan
    b[20:30] = np.nan
    a[9, 40] = -0.0
    b[40] = 0.0
    idx = np.array([3, 7, 9, 9, 0, 59])
    want = np.count_nonzero(a[idx] != b, axis=1)
    np.testing.assert_array_equal(ref_copy.count_ne_rows(a, idx, b), want)
    for nt in (1, 3):
        np.testing.assert_array_equal(ops.count_ne_rows(a, idx, b, n_threads=nt), want)
    with pytest.raises(IndexError, match=r"\[0, 60\)"):
        ops.count_ne_rows(a, [60], b)
    with pytest.raises(ValueError, match="b must have a's 3001 columns"):
        ops.count_ne_rows(a, idx, b[:-1])
