"""MaxPool2d's kernels (csrc/pool.c) against their NumPy references (decentlearn/_reference/pool.py),
against a direct loop over the windows, bit for bit at 1 and 2 threads, and their argument
checks; and the layer on Conv2d's cropped wide rows (a view, no copy)."""

import numpy as np
import pytest

from decentlearn import ops
from decentlearn._reference import pool as ref
from decentlearn.nn import make_model
from decentlearn.nn.layers import MaxPool2d, Scratch, _image_rows


def _images(rng, n, h, ld, ties=True):
    x = rng.integers(-3, 4, size=(n, h, ld)).astype(np.float32) if ties else \
        rng.standard_normal((n, h, ld), dtype=np.float32)
    return x


def _loop(x, w):
    """The windows one by one: the maximum, ties to the left column, then to the top row."""
    n, h, _ = x.shape
    y = np.empty((n, h // 2, w // 2), np.float32)
    win = np.empty((n, h // 2, w // 2, 2), np.int64)
    for i in range(n):
        for r in range(h // 2):
            for j in range(w // 2):
                best = None
                for dc in (0, 1):  # left column first, top row first: strict > to move on
                    for dr in (0, 1):
                        v = x[i, 2 * r + dr, 2 * j + dc]
                        if best is None or v > best[0]:
                            best = (v, dr, dc)
                y[i, r, j] = best[0]
                win[i, r, j] = best[1:]
    return y, win


@pytest.mark.parametrize("ties", [True, False])
@pytest.mark.parametrize("n,h,ld,w", [(3, 4, 6, 6), (5, 8, 12, 8), (1, 2, 3, 2), (7, 6, 10, 0)])
def test_forward_matches_reference_and_loop(ties, n, h, ld, w):
    rng = np.random.default_rng(n * 100 + ld)
    x = _images(rng, n, h, ld, ties)
    y, code = np.empty((n, h // 2, w // 2), np.float32), np.empty((n, h // 2, w // 2), np.uint8)
    y_ref, code_ref = np.empty_like(y), np.empty_like(code)
    assert ops.maxpool2_forward(x, w, y, code) is y
    ref.maxpool2_forward(x, w, y_ref, code_ref)
    np.testing.assert_array_equal(y, y_ref)
    np.testing.assert_array_equal(code, code_ref)
    y_loop, win = _loop(x, w)
    np.testing.assert_array_equal(y, y_loop)
    # The code's winner is the loop's: column from bit 0, row from the bit of that column.
    col = code & 1
    row = np.where(col == 1, (code >> 2) & 1, (code >> 1) & 1)
    np.testing.assert_array_equal(np.stack([row, col], -1), win)


def test_backward_matches_reference_and_routes_to_the_winner():
    rng = np.random.default_rng(1)
    n, h, w = 4, 6, 8
    x = _images(rng, n, h, w)
    y, code = np.empty((n, 3, 4), np.float32), np.empty((n, 3, 4), np.uint8)
    ops.maxpool2_forward(x, w, y, code)
    dy = rng.standard_normal(y.shape, dtype=np.float32)
    dx = ops.maxpool2_backward(dy, code)
    np.testing.assert_array_equal(dx, ref.maxpool2_backward(dy, code, np.empty_like(dx)))
    _, win = _loop(x, w)
    want = np.zeros_like(dx)
    for i, r, j in np.ndindex(*dy.shape):
        dr, dc = win[i, r, j]
        want[i, 2 * r + dr, 2 * j + dc] = dy[i, r, j]
    np.testing.assert_array_equal(dx, want)


def test_non_finite_values_as_numpy():
    x = np.array([[[np.nan, 1, -np.inf, -np.inf], [2, 3, -np.inf, np.inf]]], np.float32)
    y, code = np.empty((1, 1, 2), np.float32), np.empty((1, 1, 2), np.uint8)
    ops.maxpool2_forward(x, 4, y, code)
    y_ref, code_ref = np.empty_like(y), np.empty_like(code)
    ref.maxpool2_forward(x, 4, y_ref, code_ref)
    np.testing.assert_array_equal(y, y_ref)  # NaN propagates (np.maximum), inf wins
    assert np.isnan(y[0, 0, 0]) and y[0, 0, 1] == np.inf
    np.testing.assert_array_equal(code, code_ref)
    dy = np.array([[[np.inf, np.nan]]], np.float32)  # inf - inf and 0 * nan: NaN, as NumPy gives
    with np.errstate(invalid="ignore"):
        want = ref.maxpool2_backward(dy, code, np.empty((1, 2, 4), np.float32))
    np.testing.assert_array_equal(ops.maxpool2_backward(dy, code), want)


def test_same_bits_for_any_thread_count():
    rng = np.random.default_rng(2)
    x = _images(rng, 600, 16, 20, ties=False)
    outs = []
    for t in (1, 2, 3):
        code = np.empty((600, 8, 8), np.uint8)
        y = ops.maxpool2_forward(x, 16, None, code, n_threads=t)
        dx = ops.maxpool2_backward(y * 3, code, n_threads=t)
        outs.append((y.tobytes(), code.tobytes(), dx.tobytes()))
    assert outs[0] == outs[1] == outs[2]


def test_bad_arguments():
    x = np.zeros((2, 4, 6), np.float32)
    y, code = np.empty((2, 2, 3), np.float32), np.empty((2, 2, 3), np.uint8)
    with pytest.raises(ValueError, match="even"):
        ops.maxpool2_forward(np.zeros((2, 3, 6), np.float32), 6, y)
    with pytest.raises(ValueError, match="w must be an integer in"):
        ops.maxpool2_forward(x, 8, y)
    with pytest.raises(ValueError, match="even"):
        ops.maxpool2_forward(x, 5, y)
    with pytest.raises(ValueError, match="y must have shape"):
        ops.maxpool2_forward(x, 4, y)
    with pytest.raises(ValueError, match="code must have shape"):
        ops.maxpool2_forward(x, 6, y, code[:, :1].copy())
    with pytest.raises(TypeError):
        ops.maxpool2_forward(x.astype(np.float64), 6, y)
    with pytest.raises(ValueError, match="contiguous"):
        ops.maxpool2_forward(np.zeros((2, 4, 12), np.float32)[..., ::2], 6, y)
    with pytest.raises(ValueError, match="dx must have shape"):
        ops.maxpool2_backward(y, code, np.empty((2, 4, 4), np.float32))
    with pytest.raises(ValueError, match="3-D"):
        ops.maxpool2_forward(np.zeros((4, 6), np.float32), 6, y)


def test_layer_pools_cropped_wide_rows_without_a_copy():
    rng = np.random.default_rng(3)
    wide = rng.standard_normal((2, 3, 4, 6, 10), dtype=np.float32)  # (P, C, B, H, Wp)
    x = wide[..., :8]  # Conv2d's output: the first Wo columns of its wide rows
    rows, w = _image_rows(x)
    assert w == 8 and rows.shape == (24, 6, 10) and np.shares_memory(rows, wide)
    layer = MaxPool2d()
    y, code = layer.forward((), x, True, Scratch())
    y2, code2 = layer.forward((), np.ascontiguousarray(x), True, Scratch())
    np.testing.assert_array_equal(y, y2)
    np.testing.assert_array_equal(code, code2)
    # float64 runs the NumPy reference: the same maxima and gradient
    y64, c64 = layer.forward((), x.astype(np.float64), True, Scratch())
    np.testing.assert_array_equal(y64, y.astype(np.float64))
    dy = rng.standard_normal(y.shape, dtype=np.float32)
    dx = layer.backward((), (), dy, code, True, Scratch())
    dx64 = layer.backward((), (), dy.astype(np.float64), c64, True, Scratch())
    np.testing.assert_array_equal(dx64, dx.astype(np.float64))


def test_cnn_gradient_unchanged_by_the_kernel():
    """The CNN's loss and gradient with the C pooling equal those with the NumPy reference."""
    model = make_model("cnn", (1, 8, 8), 10)
    rng = np.random.default_rng(4)
    params = np.stack([model.init(s) for s in range(3)]).astype(np.float32)
    x = rng.standard_normal((3, 5, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, (3, 5))
    loss, grad = model.loss_and_grad(params, x, y)
    import decentlearn.nn.layers as layers
    saved = layers.ops
    try:
        class _RefOps:  # the layer's kernels swapped for their references
            def __getattr__(self, name):
                return getattr(ref, name) if name.startswith("maxpool2") else getattr(saved, name)
        layers.ops = _RefOps()
        loss_ref, grad_ref = model.loss_and_grad(params, x, y)
    finally:
        layers.ops = saved
    np.testing.assert_array_equal(loss, loss_ref)
    np.testing.assert_array_equal(grad, grad_ref)
