"""The fused int8 dense layer kernels (ops.gemm_s8_dense_forward / gemm_s8_dense_backward) against
their NumPy reference (decentlearn._reference.gemm_s8) and against the unfused kernels they replace
(quantize_s8 + gemm_s8_batched_f32), on every ISA path: codes and scales bit-identical, outputs
bit-identical except the bias multiply-add (one rounding), 1 == 2 == 3 threads bit for bit,
argument errors."""

import numpy as np
import pytest

from decentlearn import _core, ops
from decentlearn._reference import gemm_s8 as ref

# (peers, batch, in, out): the MLP's layers, edge tiles, one peer, empty batch and inputs; batches
# of 64 and more run the AMX tiles on the amx path: whole 32-row tiles with k a multiple of 64 (A
# read in place) or not (packed A, a partial last k block), a half panel (n = 96), a partial tile
SHAPES = [(3, 32, 64, 128), (4, 32, 128, 10), (2, 7, 33, 17), (1, 1, 1, 1), (5, 0, 3, 4),
          (2, 5, 0, 3), (3, 13, 40, 65), (2, 13, 31, 10), (2, 64, 128, 96), (2, 70, 200, 130)]


def _data(shape, shared, seed=0):
    p, b, i, o = shape
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1 if shared else p, b, i)).astype(np.float32)
    w = rng.standard_normal((p, i, o)).astype(np.float32)
    bias = rng.standard_normal((p, o)).astype(np.float32)
    dy = rng.standard_normal((p, b, o)).astype(np.float32)
    mask = rng.standard_normal((p, b, i)).astype(np.float32)
    return x, w, bias, dy, mask


def _codes_equal(a, b):
    for f in ("xq", "sx", "wq", "sw"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("shared", [False, True])
def test_dense_forward_matches_reference(isa, shape, shared):
    x, w, bias, _, _ = _data(shape, shared)
    x0, w0 = x.copy(), w.copy()
    for b_arg in (None, bias):
        for relu in (False, True):
            want, want_codes = ref.gemm_s8_dense_forward(x, w, b_arg, relu)
            y1, c1 = ops.gemm_s8_dense_forward(x, w, b_arg, relu, n_threads=1)
            _codes_equal(c1, want_codes)
            if b_arg is None:
                np.testing.assert_array_equal(y1, want)
            else:  # the epilogue may fuse y = c * s + bias into one rounding
                np.testing.assert_allclose(y1, want, rtol=1e-6, atol=1e-6 * np.abs(bias).max())
            for threads in (2, 3):
                y, c = ops.gemm_s8_dense_forward(x, w, b_arg, relu, n_threads=threads)
                np.testing.assert_array_equal(y, y1)
                _codes_equal(c, c1)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(w, w0)


@pytest.mark.parametrize("shared", [False, True])
def test_dense_forward_into_given_codes(isa, shared):
    """codes= (the Dense layer's reused arrays): the same y and codes as fresh arrays, written in
    place (also by the reference); a peer-strided bias (a view of the parameter matrix) needs no
    copy and gives the contiguous bias's y."""
    x, w, bias, _, _ = _data((3, 32, 64, 128), shared, seed=4)
    want, want_codes = ops.gemm_s8_dense_forward(x, w, bias, True)
    px = x.shape[0]
    codes = ops.DenseCodes(np.full((px, 32, 64), 5, np.int8), np.zeros(px, np.float32),
                           np.full((3, 64, 128), 5, np.int8), np.zeros(3, np.float32))
    for _ in range(2):  # reused twice: fully overwritten each time
        y, c = ops.gemm_s8_dense_forward(x, w, bias, True, codes=codes)
        assert c is codes
        np.testing.assert_array_equal(y, want)
        _codes_equal(c, want_codes)
    ref_codes = ops.DenseCodes(*(np.empty_like(getattr(want_codes, f))
                                 for f in ("xq", "sx", "wq", "sw")))
    _, rc = ref.gemm_s8_dense_forward(x, w, bias, True, codes=ref_codes)
    assert rc is ref_codes
    _codes_equal(rc, want_codes)
    wide = np.zeros((3, 200), np.float32)
    wide[:, 50:178] = bias
    y, _ = ops.gemm_s8_dense_forward(x, w, wide[:, 50:178], True)
    np.testing.assert_array_equal(y, want)
    with pytest.raises(TypeError, match="codes must be a DenseCodes"):
        ops.gemm_s8_dense_forward(x, w, bias, codes=(1, 2))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("shared", [False, True])
def test_dense_backward_matches_reference(isa, shape, shared):
    x, w, bias, dy, mask = _data(shape, shared, seed=1)
    p, b, i, o = shape
    _, codes = ops.gemm_s8_dense_forward(x, w, bias)
    for m_arg, with_dx in ((None, False), (None, True), (mask, True)):
        want = [np.full((p, i, o), np.nan, np.float32), np.full((p, o), np.nan, np.float32),
                np.full((p, b, i), np.nan, np.float32) if with_dx else None]
        ref.gemm_s8_dense_backward(dy, codes, *want, mask=m_arg, seed=3, step=4, peer0=2)
        for threads in (1, 2, 3):
            got = [np.full_like(want[0], np.nan), np.full_like(want[1], np.nan),
                   np.full_like(want[2], np.nan) if with_dx else None]
            ops.gemm_s8_dense_backward(dy, codes, *got, mask=m_arg, seed=3, step=4, peer0=2,
                                       n_threads=threads)
            for g, r, name in zip(got, want, ("gw", "gb", "dx")):
                if r is not None:
                    np.testing.assert_array_equal(g, r, err_msg=name)


def test_dense_matches_unfused_kernels(isa):
    """The fused kernels compute what quantize_s8 + gemm_s8_batched_f32 computed before them (the
    int8 semantics of nn.Dense), bit for bit on the same ISA path."""
    x, w, bias, dy, mask = _data((6, 32, 64, 128), False, seed=2)
    p = 6
    y, codes = ops.gemm_s8_dense_forward(x, w, bias, relu=True)
    sx = ops.absmax_scale(x.reshape(p, -1), axis=0)
    xq = ops.quantize_s8(x.reshape(p, -1), sx, axis=0).reshape(x.shape)
    sw = ops.absmax_scale(w.reshape(p, -1), axis=0)
    wq = ops.quantize_s8(w.reshape(p, -1), sw, axis=0).reshape(w.shape)
    y0 = np.maximum(ops.gemm_s8_batched_f32(xq, wq, sx, sw, bias=bias), 0)
    np.testing.assert_array_equal(y, y0)
    gw, gb, dx = np.empty_like(w), np.empty_like(bias), np.empty_like(x)
    ops.gemm_s8_dense_backward(dy, codes, gw, gb, dx, mask, seed=5, step=6, peer0=7)
    sdy = ops.absmax_scale(dy.reshape(p, -1), axis=0)
    dyq = ops.quantize_s8(dy.reshape(p, -1), sdy, axis=0, rounding="stochastic", seed=5, step=6,
                          peer0=7).reshape(dy.shape)
    np.testing.assert_array_equal(gw, ops.gemm_s8_batched_f32(xq, dyq, sx, sdy, trans_a=True))
    np.testing.assert_array_equal(gb, np.sum(dy, axis=1))
    dx0 = ops.gemm_s8_batched_f32(dyq, wq, sdy, sw, trans_b=True) * (mask > 0)
    np.testing.assert_array_equal(dx, dx0)


def test_dense_views_of_parameter_rows():
    """w and gw as strided views of (P, dim) parameter/gradient rows, a stride-0 shared x."""
    rng = np.random.default_rng(4)
    p, b, i, o = 3, 9, 20, 11
    params = rng.standard_normal((p, 1000)).astype(np.float32)
    w = params[:, 100:100 + i * o].reshape(p, i, o)
    bias = params[:, 400:400 + o]
    x = np.broadcast_to(rng.standard_normal((1, b, i)).astype(np.float32), (p, b, i))
    y, codes = ops.gemm_s8_dense_forward(x, w, bias)
    want, wc = ref.gemm_s8_dense_forward(x, w, bias)
    assert codes.xq.shape == (1, b, i)  # quantized once
    _codes_equal(codes, wc)
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-5)
    grads = np.zeros((p, 1000), np.float32)
    gw, gb = grads[:, 100:100 + i * o].reshape(p, i, o), grads[:, 400:400 + o]
    dy = rng.standard_normal((p, b, o)).astype(np.float32)
    ops.gemm_s8_dense_backward(dy, codes, gw, gb)
    want_gw, want_gb = np.empty((p, i, o), np.float32), np.empty((p, o), np.float32)
    ref.gemm_s8_dense_backward(dy, codes, want_gw, want_gb)
    np.testing.assert_array_equal(gw, want_gw)
    np.testing.assert_array_equal(gb, want_gb)
    assert not grads[:, :100].any() and not grads[:, 100 + i * o:400].any()


def test_dense_errors():
    x, w, bias, dy, mask = _data((2, 4, 3, 5), False)
    with pytest.raises(TypeError, match="x must have dtype float32"):
        ops.gemm_s8_dense_forward(x.astype(np.float64), w)
    with pytest.raises(ValueError, match="x has 4 entries on axis 2, expected 3"):
        ops.gemm_s8_dense_forward(np.zeros((2, 4, 4), np.float32), w)
    with pytest.raises(ValueError, match=r"x must have 1 \(shared\) or P=2 peers"):
        ops.gemm_s8_dense_forward(np.zeros((3, 4, 3), np.float32), w)
    with pytest.raises(ValueError, match="bias has 4 entries on axis 1, expected 5"):
        ops.gemm_s8_dense_forward(x, w, bias[:, :4])
    with pytest.raises(ValueError, match="w must hold each peer's"):
        ops.gemm_s8_dense_forward(x, np.zeros((2, 3, 10), np.float32)[:, :, :5])
    buf = np.zeros(64, np.float32)
    xs = buf[:24].reshape(2, 4, 3)
    xs[...] = x
    with pytest.raises(ValueError, match="y must not overlap x"):
        ops.gemm_s8_dense_forward(xs, w, out=buf[:40].reshape(2, 4, 5))
    with pytest.raises(_core.NonFiniteError, match="finite"):
        bad = w.copy()
        bad[1, 0, 0] = np.inf
        ops.gemm_s8_dense_forward(x, bad)
    _, codes = ops.gemm_s8_dense_forward(x, w, bias)
    gw, gb, dx = np.empty_like(w), np.empty_like(bias), np.empty_like(x)
    with pytest.raises(TypeError, match="codes must be the DenseCodes"):
        ops.gemm_s8_dense_backward(dy, (1, 2, 3, 4), gw, gb)
    with pytest.raises(ValueError, match="gw has 4 entries on axis 2, expected 5"):
        ops.gemm_s8_dense_backward(dy, codes, gw[:, :, :4], gb)
    with pytest.raises(ValueError, match=r"xq must have 1 \(shared\) or P=1 peers on axis 0, got 2"):
        ops.gemm_s8_dense_backward(dy[:1], codes, gw[:1], gb[:1])
    with pytest.raises(ValueError, match="dx has 2 entries on axis 2, expected 3"):
        ops.gemm_s8_dense_backward(dy, codes, gw, gb, dx[:, :, :2])
    with pytest.raises(ValueError, match="gw must not overlap dy"):
        big = np.zeros((2, 100), np.float32)
        ops.gemm_s8_dense_backward(big[:, :20].reshape(2, 4, 5), codes,
                                   big[:, :15].reshape(2, 3, 5), gb)
    with pytest.raises(ValueError, match="step must be"):
        ops.gemm_s8_dense_backward(dy, codes, gw, gb, step=-1)
    with pytest.raises(_core.NonFiniteError, match="finite"):
        ops.gemm_s8_dense_backward(np.full_like(dy, np.nan), codes, gw, gb)

