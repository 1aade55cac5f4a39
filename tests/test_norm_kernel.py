"""GroupNorm's kernels (csrc/norm.c) against their NumPy references (decentlearn/_reference/norm.py)
bit for bit at 1 and 2 threads, against GroupNorm written directly in float64 (forward) and its
gradient by the chain rule in float64 and by finite differences (backward), their argument
checks, and the layer's float32 path against its float64 (NumPy) path."""

import numpy as np
import pytest

from decentlearn import ops
from decentlearn._reference import norm as ref
from decentlearn.nn import make_model
from decentlearn.nn.layers import GroupNorm, Scratch

# (P, C, groups, B, H, W, ld): W % 8 != 0 and ld > W (Conv2d's wide rows), one group, one channel
# per group, one sample, the README CNN's 28x28 with 6 channels in 2 groups.
SHAPES = [(3, 6, 2, 4, 5, 5, 7), (2, 16, 4, 3, 14, 14, 18), (1, 4, 1, 2, 3, 9, 9),
          (2, 6, 6, 1, 8, 8, 8), (2, 6, 2, 32, 28, 28, 32), (1, 1, 1, 1, 1, 1, 1)]


def _case(shape, seed=0):
    p, c, g, b, h, w, ld = shape
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((p * c * b, h, ld)) * 3 + 1).astype(np.float32)
    dy = rng.standard_normal((p * c * b, h, ld)).astype(np.float32)
    gamma = rng.standard_normal((p, c)).astype(np.float32)
    beta = rng.standard_normal((p, c)).astype(np.float32)
    return x, dy, gamma, beta


def _run(impl, shape, x, dy, gamma, beta, threads=None, need_dx=True):
    p, c, g, b, h, w, _ = shape
    n = p * c * b
    xc, y = np.full((n, h * w), np.nan, np.float32), np.full((n, h * w), np.nan, np.float32)
    rstd = np.full((p, g, b), np.nan, np.float32)
    impl.groupnorm_forward(x, w, gamma, beta, g, 1e-5, xc, rstd, y, n_threads=threads)
    gg, gb = np.full((p, c), np.nan, np.float32), np.full((p, c), np.nan, np.float32)
    dx = np.full((n, h * w), np.nan, np.float32) if need_dx else None
    impl.groupnorm_backward(dy, w, xc, rstd, gamma, gg, gb, dx, n_threads=threads)
    return xc, rstd, y, gg, gb, dx


def _dense64(shape, x, dy, gamma, beta, eps=1e-5):
    """GroupNorm and its gradients in float64, written from the definition."""
    p, c, g, b, h, w, _ = shape
    x6 = x[:, :, :w].astype(np.float64).reshape(p, g, c // g, b, h, w)
    d6 = dy[:, :, :w].astype(np.float64).reshape(p, g, c // g, b, h, w)
    mean = x6.mean(axis=(2, 4, 5), keepdims=True)
    var = x6.var(axis=(2, 4, 5), keepdims=True)
    xhat = (x6 - mean) / np.sqrt(var + eps)
    gam = gamma.astype(np.float64).reshape(p, g, c // g, 1, 1, 1)
    y = xhat * gam + beta.astype(np.float64).reshape(p, g, c // g, 1, 1, 1)
    g_beta = d6.sum(axis=(3, 4, 5)).reshape(p, c)
    g_gamma = (d6 * xhat).sum(axis=(3, 4, 5)).reshape(p, c)
    dxhat = d6 * gam
    dx = (dxhat - dxhat.mean(axis=(2, 4, 5), keepdims=True)
          - xhat * (dxhat * xhat).mean(axis=(2, 4, 5), keepdims=True)) / np.sqrt(var + eps)
    return y.reshape(p * c * b, h * w), g_gamma, g_beta, dx.reshape(p * c * b, h * w)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("threads", [1, 2, 3, 8])  # the forward splits (peer, group, sample)
def test_kernels_match_reference_bitwise(shape, threads):
    x, dy, gamma, beta = _case(shape)
    got = _run(ops, shape, x, dy, gamma, beta, threads)
    want = _run(ref, shape, x, dy, gamma, beta)
    for name, a, b in zip(("xc", "rstd", "y", "g_gamma", "g_beta", "dx"), got, want):
        np.testing.assert_array_equal(a, b, err_msg=name)


@pytest.mark.parametrize("shape", SHAPES)
def test_kernels_match_float64_groupnorm(shape):
    x, dy, gamma, beta = _case(shape, seed=1)
    xc, rstd, y, gg, gb, dx = _run(ops, shape, x, dy, gamma, beta)
    y64, gg64, gb64, dx64 = _dense64(shape, x, dy, gamma, beta)
    scale = np.abs(y64).max() + 1
    np.testing.assert_allclose(y, y64, atol=1e-5 * scale)
    np.testing.assert_allclose(gb, gb64, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(gg, gg64, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(dx, dx64, atol=2e-5 * (np.abs(dx64).max() + 1))


def test_backward_is_the_gradient_by_finite_differences():
    shape = (1, 4, 2, 2, 3, 5, 6)
    x, dy, gamma, beta = _case(shape, seed=2)
    x64 = x.astype(np.float64)
    _, _, _, gg, gb, dx = _run(ops, shape, x, dy, gamma, beta)

    def loss(xv, gam, bet):  # <dy, GroupNorm(x)> in float64
        y64, *_ = _dense64(shape, xv, dy, gam, bet)
        return float(np.sum(y64.reshape(-1, 3, 5) * dy[:, :, :5]))

    h = 1e-6
    rng = np.random.default_rng(3)
    for _ in range(6):
        i, r, j = rng.integers(0, x.shape[0]), rng.integers(0, 3), rng.integers(0, 5)
        xp, xm = x64.copy(), x64.copy()
        xp[i, r, j] += h
        xm[i, r, j] -= h
        fd = (loss(xp, gamma, beta) - loss(xm, gamma, beta)) / (2 * h)
        assert abs(dx[i, r * 5 + j] - fd) < 1e-3 * (1 + abs(fd))
    for k in range(4):
        gp, gm = gamma.astype(np.float64), gamma.astype(np.float64)
        gp = gp.copy()
        gm = gm.copy()
        gp[0, k] += h
        gm[0, k] -= h
        fd = (loss(x64, gp, beta) - loss(x64, gm, beta)) / (2 * h)
        assert abs(gg[0, k] - fd) < 1e-3 * (1 + abs(fd))
    np.testing.assert_allclose(gb[0], dy[:, :, :5].reshape(4, 2, 3, 5).sum(axis=(1, 2, 3)),
                               rtol=1e-5)


@pytest.mark.parametrize("shape", [SHAPES[0], SHAPES[4]])
@pytest.mark.parametrize("threads", [1, 3, 8])  # SHAPES[4], 2 peers: the split backward at 3, 8
def test_without_dx_only_the_parameter_gradients(shape, threads):
    x, dy, gamma, beta = _case(shape)
    with_dx = _run(ops, shape, x, dy, gamma, beta, threads)
    without = _run(ops, shape, x, dy, gamma, beta, threads, need_dx=False)
    np.testing.assert_array_equal(with_dx[3], without[3])
    np.testing.assert_array_equal(with_dx[4], without[4])
    assert without[5] is None
    want = _run(ref, shape, x, dy, gamma, beta)
    np.testing.assert_array_equal(without[3], want[3])
    np.testing.assert_array_equal(without[4], want[4])


def test_bad_arguments_raise():
    x = np.zeros((2 * 4 * 3, 5, 6), np.float32)
    gamma = np.ones((2, 4), np.float32)
    xc = np.zeros((24, 25), np.float32)
    y = np.zeros((24, 25), np.float32)
    rstd = np.zeros((2, 2, 3), np.float32)
    with pytest.raises(ValueError, match="groups must divide the 4 channels"):
        ops.groupnorm_forward(x, 5, gamma, gamma, 3, 1e-5, xc, np.zeros((2, 3, 3), np.float32), y)
    with pytest.raises(ValueError, match="w <= 6"):
        ops.groupnorm_forward(x, 7, gamma, gamma, 2, 1e-5, xc, rstd, y)
    with pytest.raises(ValueError, match="P\\*C\\*B"):
        ops.groupnorm_forward(x[:23], 5, gamma, gamma, 2, 1e-5, xc[:23], rstd, y[:23])
    with pytest.raises(ValueError, match="eps"):
        ops.groupnorm_forward(x, 5, gamma, gamma, 2, 0.0, xc, rstd, y)
    with pytest.raises(ValueError, match="rstd must have shape \\(2, 2, 3\\)"):
        ops.groupnorm_forward(x, 5, gamma, gamma, 2, 1e-5, xc, np.zeros((2, 2, 4), np.float32), y)
    with pytest.raises(ValueError, match="beta must have shape"):
        ops.groupnorm_forward(x, 5, gamma, np.ones((2, 5), np.float32), 2, 1e-5, xc, rstd, y)
    with pytest.raises(ValueError, match="xc must have shape \\(24, 25\\)"):
        ops.groupnorm_forward(x, 5, gamma, gamma, 2, 1e-5, np.zeros((24, 30), np.float32), rstd,
                              y)
    with pytest.raises((TypeError, ValueError), match="float32"):
        ops.groupnorm_forward(x.astype(np.float64), 5, gamma, gamma, 2, 1e-5, xc, rstd, y)
    with pytest.raises(ValueError, match="must not share memory"):
        ops.groupnorm_forward(x, 5, gamma, gamma, 2, 1e-5, xc, rstd, xc)
    gg = np.zeros((2, 4), np.float32)
    with pytest.raises(ValueError, match="g_beta must have shape \\(2, 4\\)"):
        ops.groupnorm_backward(x, 5, xc, rstd, gamma, gg, np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="dx must have shape"):
        ops.groupnorm_backward(x, 5, xc, rstd, gamma, gg, gg.copy(), np.zeros((24, 5), np.float32))
    with pytest.raises(ValueError, match="groups\\) must divide"):
        ops.groupnorm_backward(x, 5, xc, np.zeros((2, 3, 3), np.float32), gamma, gg, gg.copy())


def test_layer_float32_matches_its_float64_path_on_wide_rows():
    """The layer on a Conv2d-like strided input (wide rows, a column crop): the C path against the
    NumPy float64 path, forward and backward."""
    rng = np.random.default_rng(4)
    layer = GroupNorm(2, 6)
    p, c, b, h, w, ld = 3, 6, 4, 7, 7, 11
    wide = rng.standard_normal((p, c, b, h, ld)).astype(np.float32)
    x = wide[..., :w]
    gamma = rng.standard_normal((p, c)).astype(np.float32)
    beta = rng.standard_normal((p, c)).astype(np.float32)
    dy = rng.standard_normal((p, c, b, h, w)).astype(np.float32)
    y32, ctx32 = layer.forward((gamma, beta), x, True, Scratch())
    y64, ctx64 = layer.forward((gamma.astype(np.float64), beta.astype(np.float64)),
                               x.astype(np.float64), True, Scratch())
    np.testing.assert_allclose(y32, y64, atol=1e-5)
    g32 = (np.empty((p, c), np.float32), np.empty((p, c), np.float32))
    g64 = (np.empty((p, c)), np.empty((p, c)))
    dx32 = layer.backward((gamma, beta), g32, dy, ctx32, True, Scratch())
    dx64 = layer.backward((gamma.astype(np.float64), beta.astype(np.float64)), g64,
                          dy.astype(np.float64), ctx64, True, Scratch())
    np.testing.assert_allclose(dx32, dx64, atol=1e-5)
    np.testing.assert_allclose(g32[0], g64[0], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(g32[1], g64[1], rtol=1e-5, atol=1e-4)


def test_model_float32_matches_float64():
    rng = np.random.default_rng(0)
    model = make_model("cnn:gn", (1, 28, 28), 10)
    params = np.stack([model.init(s) for s in range(2)])
    params += rng.standard_normal(params.shape).astype(np.float32) * 0.05
    x = rng.standard_normal((2, 5, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, (2, 5))
    l32, g32 = model.loss_and_grad(params, x, y, step=0)
    l64, g64 = model.loss_and_grad(params.astype(np.float64), x.astype(np.float64), y, step=0)
    np.testing.assert_allclose(l32, l64, rtol=1e-6)
    np.testing.assert_allclose(g32, g64, atol=1e-5 * np.abs(g64).max())
