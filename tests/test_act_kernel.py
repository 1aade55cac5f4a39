"""ReLU's backward kernel (csrc/act.c) against its NumPy reference (decentlearn/_reference/act.py)
and np.multiply(dy, y > 0) bit for bit, special values included, at 1 and 2 threads; its argument
checks; and the ReLU layer's float32 backward against its NumPy form."""

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
