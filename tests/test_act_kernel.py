"""ReLU's kernels (csrc/act.c) and Flatten's reorder (ops.swap_axes12, csrc/copy.c) against their
NumPy references (decentlearn/_reference/act.py, copy.py), np.multiply(dy, y > 0) and
np.maximum(x, 0) bit for bit, special values included, at 1 and 2 threads; their argument checks;
and the ReLU and Flatten layers' float32 passes against their NumPy forms."""

import numpy as np
import pytest

from decentlearn import ops
from decentlearn._reference import act as ref
from decentlearn.nn.layers import ReLU, Scratch


@pytest.mark.parametrize("n", [0, 1, 17, 70_000, 300_001])
@pytest.mark.parametrize("threads", [1, 2])
def test_relu_backward_matches_numpy_bitwise(n, threads):
    rng = np.random.default_rng(n)
    dy = rng.standard_normal(n).astype(np.float32)
    y = np.maximum(rng.standard_normal(n).astype(np.float32), 0)
    if n >= 17:  # infinities and NaN in dy meet both sides of the mask; -0 and NaN in y
        dy[:6] = [np.inf, -np.inf, np.nan, -1.0, np.inf, -2.0]
        y[:6] = [0.0, 1.0, 0.0, 0.0, 3.0, -0.0]
        y[6] = np.nan
        # the kernel reads y > 0 from y's bits: +inf, the smallest subnormals of either sign and
        # NaNs next to +inf's bits and with the sign bit set sit at the edges of that test
        y[7:12] = np.array([0x7F800000, 0x00000001, 0x80000001, 0x7F800001, 0xFFC00000],
                           np.uint32).view(np.float32)
    out = ops.relu_backward(dy, y, n_threads=threads)
    with np.errstate(invalid="ignore"):
        want = np.multiply(dy, y > 0)
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))
    np.testing.assert_array_equal(out.view(np.uint32), ref.relu_backward(dy, y).view(np.uint32))


def test_relu_backward_any_shape_and_into_out():
    rng = np.random.default_rng(1)
    dy = rng.standard_normal((3, 4, 5)).astype(np.float32)
    y = rng.standard_normal((3, 4, 5)).astype(np.float32)
    out = np.empty_like(dy)
    assert ops.relu_backward(dy, y, out) is out
    np.testing.assert_array_equal(out, dy * (y > 0))


def test_relu_backward_bad_arguments():
    x = np.ones(10, np.float32)
    with pytest.raises(ValueError, match="same size"):
        ops.relu_backward(x, np.ones(9, np.float32))
    with pytest.raises(ValueError, match="must not share memory"):
        ops.relu_backward(x, np.ones(10, np.float32), out=x)
    with pytest.raises((TypeError, ValueError), match="float32"):
        ops.relu_backward(x.astype(np.float64), x)
    with pytest.raises(ValueError, match="C-contiguous"):
        ops.relu_backward(np.ones(20, np.float32)[::2], x)


def test_layer_backward_float32_matches_numpy_form():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 4, 5, 5)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    layer = ReLU()
    y, ctx = layer.forward((), x.copy(), True, Scratch())
    dx = layer.backward((), (), dy.copy(), ctx, True, Scratch())
    np.testing.assert_array_equal(dx, np.multiply(dy, np.maximum(x, 0) > 0))
    assert layer.backward((), (), dy, ctx, False, Scratch()) is None


@pytest.mark.parametrize("n", [0, 5, 70_000, 300_001])
@pytest.mark.parametrize("threads", [1, 2])
def test_relu_forward_in_place_matches_np_maximum_bitwise(n, threads):
    rng = np.random.default_rng(n + 3)
    x = rng.standard_normal(n).astype(np.float32)
    if n >= 5:
        x[:5] = [-0.0, np.nan, -np.inf, np.inf, -1e-45]
    want = np.maximum(x, 0)
    got = x.copy()
    assert ops.relu_forward(got, n_threads=threads) is got
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    np.testing.assert_array_equal(ref.relu_forward(x.copy()).view(np.uint32), want.view(np.uint32))
    if n >= 5:
        assert not np.signbit(got[0]) and np.isnan(got[1]) and got[2] == 0 and got[3] == np.inf


def test_relu_forward_needs_a_contiguous_float32_array():
    with pytest.raises(ValueError, match="C-contiguous"):
        ops.relu_forward(np.ones(20, np.float32)[::2])
    with pytest.raises((TypeError, ValueError), match="float32"):
        ops.relu_forward(np.ones(20))


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 1, 1, 1), (3, 16, 32, 4), (2, 0, 3, 4),
                                   (64, 6, 32, 196)])
@pytest.mark.parametrize("threads", [1, 2])
def test_swap_axes12_is_the_transposed_copy(shape, threads):
    from decentlearn._reference import copy as ref_copy
    src = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    out = ops.swap_axes12(src, n_threads=threads)
    np.testing.assert_array_equal(out, src.transpose(0, 2, 1, 3))
    np.testing.assert_array_equal(out, ref_copy.swap_axes12(src))
    assert out.flags.c_contiguous


def test_swap_axes12_bad_arguments():
    src = np.zeros((2, 3, 4, 5), np.float32)
    with pytest.raises(ValueError, match=r"dst must have shape \(2, 4, 3, 5\)"):
        ops.swap_axes12(src, np.zeros((2, 3, 4, 5), np.float32))
    with pytest.raises(ValueError, match="4-D"):
        ops.swap_axes12(np.zeros((2, 3, 4), np.float32))
    with pytest.raises(ValueError, match="must not share memory"):
        buf = np.zeros(240, np.float32)
        ops.swap_axes12(buf[:120].reshape(2, 3, 4, 5), buf[:120].reshape(2, 4, 3, 5))


def test_flatten_forward_and_backward_match_the_transposes():
    from decentlearn.nn.layers import Flatten
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 4, 5, 2, 2)).astype(np.float32)
    layer = Flatten()
    y, ctx = layer.forward((), x, True, Scratch())
    np.testing.assert_array_equal(y, x.transpose(0, 2, 1, 3, 4).reshape(3, 5, 16))
    dy = rng.standard_normal(y.shape).astype(np.float32)
    dx = layer.backward((), (), dy, ctx, True, Scratch())
    np.testing.assert_array_equal(dx, dy.reshape(3, 5, 4, 2, 2).transpose(0, 2, 1, 3, 4))
