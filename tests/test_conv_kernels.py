"""Conv2d's im2col / col2im kernels (csrc/conv.c) against their NumPy references
(decentlearn/_reference/conv.py), against a direct loop im2col, as adjoints of each other, and 1
vs 2 threads bit for bit; and conv_pad, the zero-padded wide rows, against the reference and the
padding Conv2d used to build in NumPy."""

import itertools

import numpy as np
import pytest

from decentlearn import ops
from decentlearn._reference import conv as ref


def _wide(x: np.ndarray, k: int, p: int) -> tuple[np.ndarray, int, int]:
    """Wide-row padded images (..., C, B, Hp*Wp + k - 1) of x (..., C, B, H, W), as Conv2d builds
    them; returns (xp, wp, run)."""
    *lead, c, b, h, w = x.shape
    hp, wp = h + 2 * p, w + 2 * p
    xp = np.zeros((*lead, c, b, hp * wp + k - 1), x.dtype)
    np.reshape(xp[..., : hp * wp], (*lead, c, b, hp, wp))[..., p : p + h, p : p + w] = x
    return xp, wp, (hp - k + 1) * wp


# (groups or None for a shared input, channels, batch, H, W, k, padding)
SHAPES = [
    (1, 1, 1, 5, 5, 3, 1),
    (3, 3, 2, 7, 9, 3, 0),
    (None, 3, 3, 9, 7, 5, 2),
    (3, 1, 1, 6, 5, 1, 0),
    (1, 3, 5, 11, 13, 5, 1),
    (3, 3, 4, 28, 28, 5, 2),
    (None, 1, 2, 4, 3, 1, 2),
    (2, 2, 3, 5, 8, 5, 0),
]


def _case(groups, c, b, h, w, k, p, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    lead = () if groups is None else (groups,)
    if dtype == np.int8:
        x = rng.integers(-127, 128, (*lead, c, b, h, w)).astype(np.int8)
    else:
        x = rng.standard_normal((*lead, c, b, h, w)).astype(np.float32)
    return x, *_wide(x, k, p)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.int8])
def test_unfold_matches_reference_and_direct_im2col(shape, dtype):
    groups, c, b, h, w, k, p = shape
    x, xp, wp, run = _case(groups, c, b, h, w, k, p, dtype)
    lead = xp.shape[:-3]
    for b0, b1 in [(0, b), (b // 2, b), (0, 1)]:
        # one spare row (Conv2d's row of ones) and spare columns, both left alone
        cols = np.full((*lead, c * k * k + 1, b * run + 3), 7, dtype)
        want = np.full_like(cols, 7)
        got = ops.conv_unfold(xp, b0, b1, cols, k, wp, run)
        ref.conv_unfold(xp, b0, b1, want, k, wp, run)
        assert np.array_equal(cols, want)
        assert got.shape == (*lead, c * k * k + 1, (b1 - b0) * run)
        # direct im2col of the valid output columns
        ho, wo = h + 2 * p - k + 1, w + 2 * p - k + 1
        xpad = np.pad(x, [(0, 0)] * (x.ndim - 2) + [(p, p), (p, p)])
        g = np.reshape(got[..., : c * k * k, :], (*lead, c, k, k, b1 - b0, ho, wp))
        for ci, i, j in itertools.product(range(c), range(k), range(k)):
            assert np.array_equal(g[..., ci, i, j, :, :, :wo],
                                  xpad[..., ci, b0:b1, i : i + ho, j : j + wo])


@pytest.mark.parametrize("shape", SHAPES)
def test_fold_matches_reference_bitwise_and_is_the_adjoint(shape):
    groups, c, b, h, w, k, p = shape
    x, xp, wp, run = _case(groups, c, b, h, w, k, p)
    g = groups or 1
    rng = np.random.default_rng(1)
    lead = () if groups is None else (g,)
    for b0, b1 in [(0, b), (b // 2, b)]:
        dcols = rng.standard_normal((*lead, c * k * k + 2, (b1 - b0) * run + 1)).astype(np.float32)
        base = rng.standard_normal(xp.shape).astype(np.float32)
        got, want = base.copy(), base.copy()
        assert ops.conv_fold(dcols, got, b0, b1, k, wp, run) is got
        ref.conv_fold(dcols, want, b0, b1, k, wp, run)
        assert np.array_equal(got, want)
        # <unfold(xp), dcols> == <xp, fold(dcols)> in float64
        cols = np.zeros((*lead, c * k * k, (b1 - b0) * run), np.float32)
        ops.conv_unfold(xp, b0, b1, cols, k, wp, run)
        zero = np.zeros_like(xp)
        ops.conv_fold(dcols, zero, b0, b1, k, wp, run)
        lhs = np.sum(cols.astype(np.float64) * dcols[..., : c * k * k, : (b1 - b0) * run])
        rhs = np.sum(xp.astype(np.float64) * zero)
        assert lhs == pytest.approx(rhs, rel=1e-5, abs=1e-4)


def test_one_and_two_threads_give_the_same_bits():
    x, xp, wp, run = _case(3, 3, 8, 28, 28, 5, 2)
    k, b = 5, 8
    cols1 = np.zeros((3, 3 * k * k, b * run), np.float32)
    cols2 = np.ones_like(cols1)
    ops.conv_unfold(xp, 0, b, cols1, k, wp, run, n_threads=1)
    ops.conv_unfold(xp, 0, b, cols2, k, wp, run, n_threads=2)
    assert np.array_equal(cols1, cols2)
    d1 = np.zeros_like(xp)
    d2 = np.zeros_like(xp)
    ops.conv_fold(cols1, d1, 0, b, k, wp, run, n_threads=1)
    ops.conv_fold(cols1, d2, 0, b, k, wp, run, n_threads=2)
    assert np.array_equal(d1, d2)


def test_bad_arguments_raise():
    x, xp, wp, run = _case(2, 1, 2, 5, 5, 3, 1)
    cols = np.zeros((2, 9, 2 * run), np.float32)
    with pytest.raises(TypeError, match="cols must have dtype float32"):
        ops.conv_unfold(xp, 0, 2, cols.astype(np.float64), 3, wp, run)
    with pytest.raises(ValueError, match="b1"):
        ops.conv_unfold(xp, 0, 3, cols, 3, wp, run)
    with pytest.raises(ValueError, match="cols must have shape"):
        ops.conv_unfold(xp, 0, 2, cols[:, :8].copy(), 3, wp, run)
    with pytest.raises(ValueError, match="cols must have 2 rows"):
        ops.conv_unfold(xp, 0, 2, cols[:1].copy(), 3, wp, run)
    with pytest.raises(ValueError, match="xp rows must hold"):
        ops.conv_unfold(xp, 0, 2, cols, 3, wp, run + 5)
    with pytest.raises(ValueError, match="C-contiguous"):
        ops.conv_fold(cols, xp[..., ::2], 0, 1, 1, 1, 1)
    with pytest.raises(TypeError, match="dcols must have dtype float32"):
        ops.conv_fold(cols.astype(np.int8), xp, 0, 2, 3, wp, run)


@pytest.mark.parametrize("n,h,ld,w,pad,wp,extra", [
    (6, 4, 4, 4, 2, 8, 4),     # conv2 of the digits CNN: padded input, k - 1 = 4 trailing zeros
    (9, 8, 8, 8, 2, 12, 4),    # conv1
    (5, 4, 8, 4, 0, 8, 0),     # the output gradient on wide rows (pad 0, wp > w)
    (4, 3, 7, 5, 1, 9, 3),     # rows read from a wider source (ld > w), wp > w + 2 pad
    (3, 0, 2, 2, 1, 4, 2),     # no rows: all zeros
    (1, 1, 1, 0, 0, 1, 0),     # empty rows
])
@pytest.mark.parametrize("threads", [1, 2])
def test_pad_matches_reference_and_numpy_padding(n, h, ld, w, pad, wp, extra, threads):
    rng = np.random.default_rng(n * 7 + h)
    src = rng.standard_normal((n, h, ld)).astype(np.float32)
    length = (h + 2 * pad) * wp + extra
    dst = np.full((n, length), np.nan, np.float32)  # every element must be written
    assert ops.conv_pad(src, w, dst, pad, wp, n_threads=threads) is dst
    want = np.full_like(dst, np.nan)
    ref.conv_pad(src, w, want, pad, wp)
    np.testing.assert_array_equal(dst, want)
    grid = np.zeros((n, h + 2 * pad, wp), np.float32)  # the padding written out directly
    grid[:, pad : pad + h, pad : pad + w] = src[:, :, :w]
    np.testing.assert_array_equal(dst[:, : (h + 2 * pad) * wp], grid.reshape(n, -1))
    assert not dst[:, (h + 2 * pad) * wp :].any()


def test_pad_on_many_images_is_thread_independent():
    rng = np.random.default_rng(3)
    src = rng.standard_normal((3000, 4, 4)).astype(np.float32)
    a, b = np.empty((3000, 68), np.float32), np.empty((3000, 68), np.float32)
    ops.conv_pad(src, 4, a, 2, 8, n_threads=1)
    ops.conv_pad(src, 4, b, 2, 8, n_threads=2)
    np.testing.assert_array_equal(a, b)


def test_pad_bad_arguments_raise():
    src = np.zeros((2, 3, 4), np.float32)
    dst = np.zeros((2, 40), np.float32)
    with pytest.raises(ValueError, match=r"wp >= w \+ 2\*pad|w \+ 2\*pad <= wp"):
        ops.conv_pad(src, 4, dst, 2, 7)
    with pytest.raises(ValueError, match="w <= 4"):
        ops.conv_pad(src, 5, dst, 0, 8)
    with pytest.raises(ValueError, match=r"dst rows must hold \(h \+ 2\*pad\)\*wp = 56"):
        ops.conv_pad(src, 4, dst, 2, 8)
    with pytest.raises(ValueError, match="dst"):
        ops.conv_pad(src, 4, np.zeros((3, 40), np.float32), 0, 4)
    with pytest.raises(ValueError, match="pad"):
        ops.conv_pad(src, 4, dst, -1, 8)
    with pytest.raises(ValueError, match="C-contiguous"):
        ops.conv_pad(np.zeros((2, 4, 3), np.float32).transpose(0, 2, 1), 4, dst, 0, 4)
    with pytest.raises((TypeError, ValueError), match="float32"):
        ops.conv_pad(src.astype(np.float64), 4, dst, 0, 4)
    with pytest.raises(ValueError, match="must not share memory"):
        buf = np.zeros(200, np.float32)
        ops.conv_pad(buf[:24].reshape(2, 3, 4), 4, buf[:80].reshape(2, 40), 0, 4)


@pytest.mark.parametrize("n,h,w,pad,wp,extra", [(6, 4, 4, 2, 8, 4), (9, 8, 8, 2, 12, 4),
                                                 (4, 3, 5, 1, 9, 3), (2, 0, 3, 1, 5, 0),
                                                 (3000, 4, 4, 2, 8, 4)])
@pytest.mark.parametrize("threads", [1, 2])
def test_crop_inverts_pad_and_matches_reference(n, h, w, pad, wp, extra, threads):
    rng = np.random.default_rng(n + h)
    length = (h + 2 * pad) * wp + extra
    src = rng.standard_normal((n, length)).astype(np.float32)
    dst = np.full((n, h, w), np.nan, np.float32)
    assert ops.conv_crop(src, pad, wp, dst, n_threads=threads) is dst
    want = np.full_like(dst, np.nan)
    ref.conv_crop(src, pad, wp, want)
    np.testing.assert_array_equal(dst, want)
    grid = src[:, : (h + 2 * pad) * wp].reshape(n, h + 2 * pad, wp)  # the interior, directly
    np.testing.assert_array_equal(dst, grid[:, pad : pad + h, pad : pad + w])
    back = np.empty((n, length), np.float32)  # pad then crop is the identity on the images
    ops.conv_pad(dst, w, back, pad, wp)
    again = np.empty_like(dst)
    ops.conv_crop(back, pad, wp, again)
    np.testing.assert_array_equal(again, dst)


def test_crop_bad_arguments_raise():
    src = np.zeros((2, 40), np.float32)
    with pytest.raises(ValueError, match=r"w \+ 2\*pad <= wp"):
        ops.conv_crop(src, 2, 7, np.zeros((2, 3, 4), np.float32))
    with pytest.raises(ValueError, match=r"src rows must hold \(h \+ 2\*pad\)\*wp = 56"):
        ops.conv_crop(src, 2, 8, np.zeros((2, 3, 4), np.float32))
    with pytest.raises(ValueError, match="dst must have src's 2 rows"):
        ops.conv_crop(src, 0, 4, np.zeros((3, 3, 4), np.float32))
    with pytest.raises(ValueError, match="dst must have src's 2 rows"):
        ops.conv_crop(src, 0, 4, np.zeros((1, 3, 4), np.float32))
    with pytest.raises(ValueError, match="pad"):
        ops.conv_crop(src, -1, 8, np.zeros((2, 3, 4), np.float32))


# (peers, groups (None: shared), channels, batch, H, W, k, padding, Cout): partial panels, C*k*k
# + 1 past one 256-value k block (12*25 + 1), runs past one 512-column block, Cout past 32 rows
FORWARD_SHAPES = [
    (2, 2, 1, 2, 28, 28, 5, 2, 6),
    (3, None, 3, 3, 9, 7, 5, 2, 5),
    (2, 2, 6, 2, 14, 14, 5, 2, 16),
    (1, 1, 12, 1, 6, 6, 5, 2, 3),
    (2, 2, 2, 1, 30, 30, 3, 1, 40),
    (3, 3, 1, 1, 1, 1, 1, 0, 1),
    (2, 1, 3, 2, 5, 8, 5, 0, 33),
]


def _forward_case(peers, groups, c, b, h, w, k, p, cout, seed=0):
    x, xp, wp, run = _case(groups, c, b, h, w, k, p, seed=seed)
    rng = np.random.default_rng(seed + 1)
    wb = rng.standard_normal((peers, cout, c * k * k + 1)).astype(np.float32)
    return wb, xp, wp, run


@pytest.mark.parametrize("shape", FORWARD_SHAPES)
def test_forward_is_the_gemm_on_unfolded_columns(isa, shape):
    """On every ISA path, conv_forward equals that path's nn_gemm on conv_unfold's columns plus a
    row of ones bit for bit (the path it replaces in Conv2d), is within float32 rounding of the
    float64 reference, and gives the same bits on 1 and 2 threads."""
    peers, groups, c, b, h, w, k, p, cout = shape
    wb, xp, wp, run = _forward_case(*shape)
    x4 = xp if xp.ndim == 4 else xp[None]
    cols = np.ones((x4.shape[0], c * k * k + 1, b * run), np.float32)
    ops.conv_unfold(x4, 0, b, cols, k, wp, run)
    want = ops.nn_gemm(wb, cols)
    got = ops.conv_forward(wb, xp, None, k, wp, run, n_threads=1)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    y = np.full_like(got, np.nan)
    assert ops.conv_forward(wb, xp, y, k, wp, run, n_threads=2) is y
    np.testing.assert_array_equal(y.view(np.uint32), got.view(np.uint32))
    r = ref.conv_forward(wb, xp, None, k, wp, run)
    np.testing.assert_allclose(got, r, rtol=1e-5, atol=1e-5 * np.sqrt(c * k * k + 1))


@pytest.mark.parametrize("shape", FORWARD_SHAPES)
def test_forward_params_reads_the_layers_views(isa, shape):
    """conv_forward_params on the weight and bias columns of a (P, dim) parameter matrix (strided
    views, read in place) gives conv_forward's bits with wb = [w | bias], on 1 and 3 threads, and
    the NumPy twin's within float32 rounding."""
    peers, groups, c, b, h, w, k, p, cout = shape
    wb, xp, wp, run = _forward_case(*shape, seed=13)
    kk = wb.shape[2] - 1
    params = np.random.default_rng(14).standard_normal((peers, 3 + cout * kk + cout + 5),
                                                       dtype=np.float32)
    params[:, 3:3 + cout * kk] = wb[..., :kk].reshape(peers, -1)
    params[:, 3 + cout * kk:3 + cout * kk + cout] = wb[..., kk]
    wv = params[:, 3:3 + cout * kk].reshape(peers, cout, kk)
    bv = params[:, 3 + cout * kk:3 + cout * kk + cout]
    want = ops.conv_forward(wb, xp, None, k, wp, run, n_threads=1)
    for threads in (1, 3):
        got = np.full_like(want, np.nan)
        assert ops.conv_forward_params(wv, bv, xp, got, k, wp, run, n_threads=threads) is got
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    r = ref.conv_forward_params(wv, bv, xp, None, k, wp, run)
    np.testing.assert_allclose(got, r, rtol=1e-4, atol=1e-5 * np.sqrt(kk + 1))


def test_forward_params_bad_arguments_raise():
    wb, xp, wp, run = _forward_case(2, 2, 3, 2, 5, 5, 3, 1, 4, seed=2)
    w, bias = np.ascontiguousarray(wb[..., :-1]), np.ascontiguousarray(wb[..., -1])
    y = np.zeros((2, 4, 2 * run), np.float32)
    with pytest.raises(ValueError, match=r"w has 26 entries on axis 2, expected 27"):
        ops.conv_forward_params(w[..., :-1], bias, xp, y, 3, wp, run)
    with pytest.raises(ValueError, match=r"bias has 3 entries on axis 1, expected 4"):
        ops.conv_forward_params(w, bias[:, :-1], xp, y, 3, wp, run)
    with pytest.raises(ValueError, match="w must have a contiguous last axis"):
        ops.conv_forward_params(np.repeat(w, 2, axis=2)[..., ::2], bias, xp, y, 3, wp, run)
    with pytest.raises(ValueError, match=r"y must have shape \(2, 4, %d\)" % (2 * run)):
        ops.conv_forward_params(w, bias, xp, y[..., :-1].copy(), 3, wp, run)
    with pytest.raises(TypeError, match="bias must have dtype float32"):
        ops.conv_forward_params(w, bias.astype(np.float64), xp, y, 3, wp, run)
    buf = np.zeros(y.size + w.size, np.float32)
    with pytest.raises(ValueError, match="y must not overlap xp, w or bias"):
        ops.conv_forward_params(buf[:w.size].reshape(w.shape), bias, xp,
                                buf[4:4 + y.size].reshape(y.shape), 3, wp, run)


def test_forward_same_bits_on_every_fma_path():
    paths = [i for i in ops.supported_isas() if i != "generic"]
    if len(paths) < 2:
        pytest.skip("one FMA build on this CPU")
    outs = []
    for shape in FORWARD_SHAPES:
        wb, xp, wp, run = _forward_case(*shape, seed=3)
        k = shape[6]
        for isa in paths:
            with ops.using_isa(isa):
                outs.append((shape, isa, ops.conv_forward(wb, xp, None, k, wp, run)))
    for (s0, i0, y0), (s1, i1, y1) in zip(outs, outs[1:]):
        if s0 == s1:
            np.testing.assert_array_equal(y1.view(np.uint32), y0.view(np.uint32),
                                          err_msg=f"{i1} against {i0} on {s0}")


def test_forward_bad_arguments_raise():
    wb, xp, wp, run = _forward_case(2, 2, 3, 2, 5, 5, 3, 1, 4)  # xp (2, 3, 2, 52): L = 49 + 2
    with pytest.raises(ValueError, match=r"wb must have C\*k\*k \+ 1 = 28 columns"):
        ops.conv_forward(wb[..., :-1].copy(), xp, None, 3, wp, run)
    with pytest.raises(ValueError, match=r"xp rows must hold \(k-1\)\*wp \+ k-1 \+ run"):
        ops.conv_forward(wb, xp, None, 3, wp, run + 1)
    with pytest.raises(ValueError, match="1 <= k <= wp"):
        ops.conv_forward(wb, xp, None, 3, 2, run)
    with pytest.raises(ValueError, match=r"xp must have 1 \(shared\) or P=3 groups"):
        ops.conv_forward(np.concatenate([wb, wb[:1]]), xp, None, 3, wp, run)
    with pytest.raises(ValueError, match=r"y must have shape \(2, 4, 70\)"):
        ops.conv_forward(wb, xp, np.zeros((2, 4, 69), np.float32), 3, wp, run)
    with pytest.raises(TypeError, match="wb must be a 3-D float32"):
        ops.conv_forward(wb.astype(np.float64), xp, None, 3, wp, run)
    with pytest.raises(TypeError, match="xp must have dtype float32"):
        ops.conv_forward(wb, xp.astype(np.float64), None, 3, wp, run)
    buf = np.zeros(2 * 4 * 70 + xp.size, np.float32)
    xpv = buf[: xp.size].reshape(xp.shape)
    xpv[...] = xp
    with pytest.raises(ValueError, match="y must not overlap xp or wb"):
        ops.conv_forward(wb, xpv, buf[xp.size - 8: xp.size - 8 + 560].reshape(2, 4, 70), 3, wp, run)
    with pytest.raises(ValueError, match="k"):
        ops.conv_forward(wb, xp, None, 0, wp, run)


def _wgrad_by_gemm(xp, dy, k, wp, run, chunk):
    """The path conv_weight_grad replaces in Conv2d.backward: unfold a chunk, nn_gemm it against
    dy^T, accumulating from the second chunk on."""
    x4 = xp if xp.ndim == 4 else xp[None]
    g, c, b, _ = x4.shape
    p = dy.shape[0]
    cols = np.ones((g, c * k * k + 1, chunk * run), np.float32)
    out = np.empty((p, c * k * k + 1, dy.shape[1]), np.float32)
    for b0 in range(0, b, chunk):
        b1 = min(b, b0 + chunk)
        cc = ops.conv_unfold(x4, b0, b1, cols, k, wp, run)
        ops.nn_gemm(np.broadcast_to(cc, (p, *cc.shape[1:])) if g == 1 else cc,
                    dy[..., b0 * run : b1 * run].swapaxes(-1, -2), out=out, accumulate=b0 > 0)
    return out


@pytest.mark.parametrize("shape", FORWARD_SHAPES)
@pytest.mark.parametrize("chunk", [1, 2, 5])
def test_weight_grad_is_the_gemm_on_unfolded_chunks(isa, shape, chunk):
    """On every ISA path, conv_weight_grad equals the chunked gemm on conv_unfold's columns bit
    for bit (256-value blocks straddling samples included: run is not a multiple of 256), on 1
    and 2 threads, and is within float32 rounding of the float64 reference."""
    peers, groups, c, b, h, w, k, p, cout = shape
    _, xp, wp, run = _forward_case(*shape, seed=5)
    dy = np.random.default_rng(7).standard_normal((peers, cout, b * run)).astype(np.float32)
    dy[:, :, ::7] = 0.0
    want = _wgrad_by_gemm(xp, dy, k, wp, run, chunk)
    got = ops.conv_weight_grad(xp, dy, None, k, wp, run, chunk, n_threads=1)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    g = np.full_like(got, np.nan)
    assert ops.conv_weight_grad(xp, dy, g, k, wp, run, chunk, n_threads=2) is g
    np.testing.assert_array_equal(g.view(np.uint32), got.view(np.uint32))
    r = ref.conv_weight_grad(xp, dy, None, k, wp, run, chunk)
    np.testing.assert_allclose(got, r, rtol=1e-4, atol=1e-5 * np.sqrt(b * run))


@pytest.mark.parametrize("shape", FORWARD_SHAPES)
@pytest.mark.parametrize("chunk", [1, 3])
def test_param_grad_is_the_weight_grad_in_the_layers_layout(isa, shape, chunk):
    """conv_param_grad writes conv_weight_grad's g in the layer's layout, bit for bit: the weight
    rows transposed and the bias row, into views of one gradient matrix (peers dim apart, the
    weight and bias columns of every row), on 1 and 3 threads, every value written; the NumPy
    twin's float64 sums agree within float32 rounding; the other columns are left alone."""
    peers, groups, c, b, h, w, k, p, cout = shape
    _, xp, wp, run = _forward_case(*shape, seed=11)
    dy = np.random.default_rng(3).standard_normal((peers, cout, b * run)).astype(np.float32)
    dy[:, :, ::5] = -0.0
    g = ops.conv_weight_grad(xp, dy, None, k, wp, run, chunk, n_threads=1)
    kk = c * k * k
    for threads in (1, 3):
        grad = np.full((peers, 7 + cout * kk + cout + 2), np.nan, np.float32)
        gw = grad[:, 7:7 + cout * kk].reshape(peers, cout, kk)
        gb = grad[:, 7 + cout * kk:7 + cout * kk + cout]
        assert ops.conv_param_grad(xp, dy, gw, gb, k, wp, run, chunk, n_threads=threads) is None
        np.testing.assert_array_equal(gw.view(np.uint32),
                                      np.ascontiguousarray(g[:, :kk].swapaxes(1, 2)).view(np.uint32))
        np.testing.assert_array_equal(gb.view(np.uint32), g[:, kk].view(np.uint32))
        assert np.isnan(grad[:, :7]).all() and np.isnan(grad[:, 7 + cout * kk + cout:]).all()
    rw, rb = np.empty_like(gw), np.empty_like(gb)
    ref.conv_param_grad(xp, dy, rw, rb, k, wp, run, chunk)
    np.testing.assert_allclose(gw, rw, rtol=1e-4, atol=1e-5 * np.sqrt(b * run))
    np.testing.assert_allclose(gb, rb, rtol=1e-4, atol=1e-5 * np.sqrt(b * run))


def test_param_grad_zero_batch_and_bad_arguments():
    _, xp, wp, run = _forward_case(2, 2, 3, 2, 5, 5, 3, 1, 4, seed=1)
    dy = np.ones((2, 4, 2 * run), np.float32)
    gw, gb = np.full((2, 4, 27), np.nan, np.float32), np.full((2, 4), np.nan, np.float32)
    ops.conv_param_grad(xp[:, :, :0], dy[:, :, :0], gw, gb, 3, wp, run, 1)  # no samples: zeros
    assert not gw.any() and not gb.any() and not np.signbit(gw).any()
    with pytest.raises(ValueError, match=r"gw has 26 entries on axis 2, expected 27"):
        ops.conv_param_grad(xp, dy, gw[..., :-1], gb, 3, wp, run, 1)
    with pytest.raises(ValueError, match=r"gb has 3 entries on axis 1, expected 4"):
        ops.conv_param_grad(xp, dy, gw, gb[:, :-1], 3, wp, run, 1)
    with pytest.raises(ValueError, match="gw must have a contiguous last axis"):
        ops.conv_param_grad(xp, dy, np.repeat(gw, 2, axis=2)[..., ::2], gb, 3, wp, run, 1)
    with pytest.raises(TypeError, match="gb must have dtype float32"):
        ops.conv_param_grad(xp, dy, gw, gb.astype(np.float64), 3, wp, run, 1)
    with pytest.raises(ValueError, match=r"chunk must be an integer in \[1, "):
        ops.conv_param_grad(xp, dy, gw, gb, 3, wp, run, 0)
    grad = np.zeros((2, 4 * 27 + 4), np.float32)
    overlap = grad[:, 1:1 + 4 * 27].reshape(2, 4, 27)  # its last column is gb's first
    with pytest.raises(ValueError, match="gw and gb must not overlap each other"):
        ops.conv_param_grad(xp, dy, overlap, grad[:, 4 * 27:], 3, wp, run, 1)
    buf = np.zeros(dy.size + 4 * 27 * 2, np.float32)
    dyv = buf[: dy.size].reshape(dy.shape)
    dyv[...] = dy
    with pytest.raises(ValueError, match="gw and gb must not overlap xp or dy"):
        ops.conv_param_grad(xp, dyv, buf[8:8 + 216].reshape(2, 4, 27), gb, 3, wp, run, 1)


def test_weight_grad_same_bits_on_every_fma_path():
    paths = [i for i in ops.supported_isas() if i != "generic"]
    if len(paths) < 2:
        pytest.skip("one FMA build on this CPU")
    for shape in FORWARD_SHAPES:
        peers, _, _, b, _, _, k, _, cout = shape
        _, xp, wp, run = _forward_case(*shape, seed=9)
        dy = np.random.default_rng(2).standard_normal((peers, cout, b * run)).astype(np.float32)
        outs = {}
        for isa in paths:
            with ops.using_isa(isa):
                outs[isa] = ops.conv_weight_grad(xp, dy, None, k, wp, run, 2)
        for isa in paths[1:]:
            np.testing.assert_array_equal(outs[isa].view(np.uint32), outs[paths[0]].view(np.uint32),
                                          err_msg=f"{isa} against {paths[0]} on {shape}")


def test_weight_grad_bad_arguments_raise():
    _, xp, wp, run = _forward_case(2, 2, 3, 2, 5, 5, 3, 1, 4)  # xp (2, 3, 2, 51), run 35
    dy = np.zeros((2, 4, 70), np.float32)
    with pytest.raises(ValueError, match=r"dy must have shape \(2, 4, 70\), got \(2, 4, 69\)"):
        ops.conv_weight_grad(xp, dy[..., :-1].copy(), None, 3, wp, run, 1)
    with pytest.raises(ValueError, match=r"g must have shape \(2, 28, 4\)"):
        ops.conv_weight_grad(xp, dy, np.zeros((2, 27, 4), np.float32), 3, wp, run, 1)
    with pytest.raises(ValueError, match=r"xp rows must hold"):
        ops.conv_weight_grad(xp, np.zeros((2, 4, 72), np.float32), None, 3, wp, run + 1, 1)
    with pytest.raises(ValueError, match=r"xp must have 1 \(shared\) or P=3 groups"):
        ops.conv_weight_grad(xp, np.zeros((3, 4, 70), np.float32), None, 3, wp, run, 1)
    with pytest.raises(ValueError, match="chunk"):
        ops.conv_weight_grad(xp, dy, None, 3, wp, run, 0)
    with pytest.raises(TypeError, match="dy must be a 3-D float32"):
        ops.conv_weight_grad(xp, dy.astype(np.float64), None, 3, wp, run, 1)
    buf = np.zeros(dy.size + 2 * 28 * 4, np.float32)
    dyv = buf[: dy.size].reshape(dy.shape)
    with pytest.raises(ValueError, match="g must not overlap xp or dy"):
        ops.conv_weight_grad(xp, dyv, buf[8 : 8 + 224].reshape(2, 28, 4), 3, wp, run, 1)


def _dgrad_by_gemm(w, dy, c, b, length, k, wp, run):
    """The path conv_input_grad replaces in Conv2d.backward: the column gradient W^T dy by nn_gemm,
    folded into zeros."""
    dcols = ops.nn_gemm(w.transpose(0, 2, 1), dy)
    dxp = np.zeros((w.shape[0], c, b, length), np.float32)
    return ops.conv_fold(dcols, dxp, 0, b, k, wp, run)


# (peers, channels, batch, H, W, k, padding, Cout): the README CNN's second convolution, channel
# counts around the 6- and 3-channel blocks, Cout past one 256 block, k = 1
INPUT_GRAD_SHAPES = [
    (2, 6, 2, 14, 14, 5, 2, 16),
    (3, 2, 4, 7, 9, 3, 1, 5),
    (2, 7, 2, 9, 9, 3, 1, 300),
    (1, 13, 1, 6, 6, 5, 2, 3),
    (2, 1, 3, 28, 28, 5, 2, 6),
    (3, 4, 1, 5, 8, 5, 0, 33),
    (2, 3, 2, 4, 4, 1, 0, 2),
]


def _input_grad_case(peers, c, b, h, w, k, p, cout, seed=0):
    rng = np.random.default_rng(seed)
    hp, wp = h + 2 * p, w + 2 * p
    run, length = (hp - k + 1) * wp, hp * wp + k - 1
    wt = rng.standard_normal((peers, cout, c * k * k)).astype(np.float32)
    dy = rng.standard_normal((peers, cout, b * run)).astype(np.float32)
    return wt, dy, wp, run, length


@pytest.mark.parametrize("shape", INPUT_GRAD_SHAPES)
def test_input_grad_is_the_folded_column_gradient(isa, shape):
    """On every ISA path, conv_input_grad equals nn_gemm's W^T dy folded into zeros by conv_fold
    bit for bit, writes every element, gives the same bits on 1 and 2 threads, and is within
    float32 rounding of the float64 reference."""
    peers, c, b, h, w, k, p, cout = shape
    wt, dy, wp, run, length = _input_grad_case(*shape)
    dy[:, :, ::5] = 0.0
    want = _dgrad_by_gemm(wt, dy, c, b, length, k, wp, run)
    got = np.full((peers, c, b, length), np.nan, np.float32)
    assert ops.conv_input_grad(wt, dy, got, k, wp, run, n_threads=1) is got
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    two = np.full_like(got, np.nan)
    ops.conv_input_grad(wt, dy, two, k, wp, run, n_threads=2)
    np.testing.assert_array_equal(two.view(np.uint32), got.view(np.uint32))
    r = ref.conv_input_grad(wt, dy, np.empty_like(got), k, wp, run)
    np.testing.assert_allclose(got, r, rtol=1e-4, atol=1e-5 * np.sqrt(cout * k * k))


def test_input_grad_special_values_and_fma_paths():
    """An infinite weight times the zero padding of dy never reaches a sum (the column-gradient
    path has no such term), NaN and infinities land where that path puts them, and every FMA
    path gives the same bits."""
    wt, dy, wp, run, length = _input_grad_case(2, 6, 2, 14, 14, 5, 2, 16, seed=4)
    wt[0, 3, 7] = np.inf
    wt[1, 0, 100] = -np.inf
    dy[1, 2, 40] = np.nan
    dy[0, 5, ::9] = -0.0
    want = _dgrad_by_gemm(wt, dy, 6, 2, length, 5, wp, run)
    paths = [i for i in ops.supported_isas() if i != "generic"] or ["generic"]
    for isa in paths:
        with ops.using_isa(isa):
            got = ops.conv_input_grad(wt, dy, np.empty_like(want), 5, wp, run)
        nan = np.isnan(want)
        np.testing.assert_array_equal(np.isnan(got), nan, err_msg=isa)
        np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32),
                                      err_msg=isa)
        assert np.isinf(got).any() and not nan.all()


@pytest.mark.parametrize("shape", INPUT_GRAD_SHAPES[:3] + INPUT_GRAD_SHAPES[-2:])
def test_input_grad_reads_strided_weights_in_place(isa, shape):
    """Conv2d passes its weights as a view into the (P, dim) parameter matrix (peers dim apart,
    and a column block of a wider row): the same bits as the contiguous copy, on 1 and 3
    threads; a last axis that is not contiguous, or a dxp overlapping the weights, is refused."""
    peers, c, b, h, w, k, p, cout = shape
    wt, dy, wp, run, length = _input_grad_case(*shape, seed=7)
    kk = wt.shape[2]
    params = np.random.default_rng(8).standard_normal((peers, 5 + cout * kk + 11)).astype(np.float32)
    params[:, 5:5 + cout * kk] = wt.reshape(peers, -1)
    view = params[:, 5:5 + cout * kk].reshape(peers, cout, kk)  # strided peers, no copy
    assert not view.flags.c_contiguous and np.shares_memory(view, params)
    want = ops.conv_input_grad(wt, dy, np.empty((peers, c, b, length), np.float32), k, wp, run)
    for threads in (1, 3):
        got = np.full_like(want, np.nan)
        ops.conv_input_grad(view, dy, got, k, wp, run, n_threads=threads)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    if kk > 1:
        with pytest.raises(ValueError, match="w must have a contiguous last axis"):
            ops.conv_input_grad(np.repeat(wt, 2, axis=2)[..., ::2], dy, want, k, wp, run)
    alias = np.zeros(peers * c * b * length + cout * kk * peers, np.float32)
    wv = alias[: peers * cout * kk].reshape(peers, cout, kk)
    with pytest.raises(ValueError, match="dxp must not overlap w or dy"):
        ops.conv_input_grad(wv, dy, alias[4 : 4 + want.size].reshape(want.shape), k, wp, run)


def test_input_grad_bad_arguments_raise():
    wt, dy, wp, run, length = _input_grad_case(2, 3, 2, 5, 5, 3, 1, 4)  # run 35, length 51
    dxp = np.zeros((2, 3, 2, length), np.float32)  # (np.empty's garbage may hold a signaling NaN)
    with pytest.raises(ValueError, match=r"w must have shape \(2, 4, 27\)"):
        ops.conv_input_grad(wt[..., :-1].copy(), dy, dxp, 3, wp, run)
    with pytest.raises(ValueError, match=r"dy must have shape \(2, 4, 70\), got \(2, 4, 69\)"):
        ops.conv_input_grad(wt, dy[..., :-1].copy(), dxp, 3, wp, run)
    with pytest.raises(ValueError, match=r"dxp rows must hold"):
        ops.conv_input_grad(wt, dy, dxp[..., :-1].copy(), 3, wp, run)
    with pytest.raises(ValueError, match="1 <= k <= wp"):
        ops.conv_input_grad(wt, dy, dxp, 3, 2, run)
    with pytest.raises(TypeError, match="w must be a 3-D float32"):
        ops.conv_input_grad(wt.astype(np.float64), dy, dxp, 3, wp, run)
    with pytest.raises(TypeError, match="dxp must have dtype float32"):
        ops.conv_input_grad(wt, dy, dxp.astype(np.float64), 3, wp, run)
    buf = np.zeros(dy.size + dxp.size, np.float32)
    dyv = buf[: dy.size].reshape(dy.shape)
    with pytest.raises(ValueError, match="dxp must not overlap w or dy"):
        ops.conv_input_grad(wt, dyv, buf[8 : 8 + dxp.size].reshape(dxp.shape), 3, wp, run)


def _check_bits(want, reference, run_op):
    """The NumPy reference equals ``want`` bit for bit, and ``run_op(out, threads)`` (the kernel
    on a NaN-filled ``out``, returning it) writes the same bits on 1, 2 and 3 threads."""
    np.testing.assert_array_equal(reference.view(np.uint32), want.view(np.uint32))
    for threads in (1, 2, 3):
        got = np.full_like(want, np.nan)
        assert run_op(got, threads) is got
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32),
                                      err_msg=f"{threads} threads")


def _input_grad_s8_case(peers, c, b, h, w, k, p, cout, seed=0):
    rng = np.random.default_rng(seed)
    hp, wp = h + 2 * p, w + 2 * p
    run, length = (hp - k + 1) * wp, hp * wp + k - 1
    wq = rng.integers(-127, 128, (peers, cout, c * k * k)).astype(np.int8)
    dq = rng.integers(-127, 128, (peers, cout, b * run)).astype(np.int8)
    sw = (rng.random(peers) * 0.02 + 1e-3).astype(np.float32)
    sdy = (rng.random(peers) * 0.02 + 1e-3).astype(np.float32)
    return wq, sw, dq, sdy, wp, run, length


@pytest.mark.parametrize("shape", INPUT_GRAD_SHAPES)
def test_input_grad_s8_is_the_int8_gemm_then_fold(isa, shape):
    """On every ISA path, conv_input_grad_s8 equals what Conv2d's int8 backward computed before
    it (gemm_s8_batched_f32 of wq^T and the codes on the im2col columns, then conv_fold into
    zeros) and the exact NumPy reference, bit for bit, writes every element, and gives the same
    bits on 1, 2 and 3 threads."""
    peers, c, b, h, w, k, p, cout = shape
    wq, sw, dq, sdy, wp, run, length = _input_grad_s8_case(*shape)
    dq[:, :, ::5] = 0  # the wide columns' codes are 0
    dcols = ops.gemm_s8_batched_f32(wq, dq, sw, sdy, trans_a=True)
    want = ops.conv_fold(dcols, np.zeros((peers, c, b, length), np.float32), 0, b, k, wp, run)
    _check_bits(want, ref.conv_input_grad_s8(wq, sw, dq, sdy, np.empty_like(want), k, wp, run),
                lambda out, nt: ops.conv_input_grad_s8(wq, sw, dq, sdy, out, k, wp, run,
                                                       n_threads=nt))


def test_input_grad_s8_bad_arguments_raise():
    wq, sw, dq, sdy, wp, run, length = _input_grad_s8_case(2, 3, 2, 5, 5, 3, 1, 4)  # run 35
    dxp = np.zeros((2, 3, 2, length), np.float32)
    with pytest.raises(ValueError, match=r"wq must have shape \(2, 4, 27\)"):
        ops.conv_input_grad_s8(wq[..., :-1].copy(), sw, dq, sdy, dxp, 3, wp, run)
    with pytest.raises(ValueError, match=r"dq must have shape \(2, 4, 70\), got \(2, 4, 69\)"):
        ops.conv_input_grad_s8(wq, sw, dq[..., :-1].copy(), sdy, dxp, 3, wp, run)
    with pytest.raises(ValueError, match=r"dxp rows must hold"):
        ops.conv_input_grad_s8(wq, sw, dq, sdy, dxp[..., :-1].copy(), 3, wp, run)
    with pytest.raises(ValueError, match="1 <= k <= wp"):
        ops.conv_input_grad_s8(wq, sw, dq, sdy, dxp, 3, 2, run)
    with pytest.raises(ValueError, match="sw"):
        ops.conv_input_grad_s8(wq, sw[:1].copy(), dq, sdy, dxp, 3, wp, run)
    with pytest.raises(ValueError, match="dxp"):
        ops.conv_input_grad_s8(wq, sw, dq, sdy, dxp[:1].copy(), 3, wp, run)
    with pytest.raises(TypeError, match="wq must be a 3-D int8"):
        ops.conv_input_grad_s8(wq.astype(np.int16), sw, dq, sdy, dxp, 3, wp, run)
    with pytest.raises(TypeError, match="sdy must be a 1-D float32"):
        ops.conv_input_grad_s8(wq, sw, dq, sdy.astype(np.float64), dxp, 3, wp, run)
    with pytest.raises(TypeError, match="dxp must be a 4-D float32"):
        ops.conv_input_grad_s8(wq, sw, dq, sdy, dxp.astype(np.float64), 3, wp, run)
    with pytest.raises(ValueError, match="contiguous"):
        ops.conv_input_grad_s8(wq[:, :, ::1][:, ::-1], sw, dq, sdy, dxp, 3, wp, run)


def _forward_s8_case(peers, groups, c, b, h, w, k, p, cout, seed=0):
    _, xq, wp, run = _case(groups, c, b, h, w, k, p, dtype=np.int8, seed=seed)
    rng = np.random.default_rng(seed + 1)
    wq = rng.integers(-127, 128, (peers, cout, c * k * k)).astype(np.int8)
    sw = (rng.random(peers) * 0.02 + 1e-3).astype(np.float32)
    sx = (rng.random(1 if groups is None else groups) * 0.02 + 1e-3).astype(np.float32)
    bias = rng.standard_normal((peers, cout)).astype(np.float32)
    return wq, sw, xq, sx, bias, wp, run


@pytest.mark.parametrize("shape", FORWARD_SHAPES)
def test_forward_s8_is_the_int8_gemm_on_unfolded_codes(isa, shape):
    """On every ISA path, conv_forward_s8 equals what Conv2d's int8 forward computed before it
    (gemm_s8_batched_f32 on the conv_unfold columns of the codes, then the bias add) and the
    exact NumPy reference, bit for bit, a shared input included, on 1, 2 and 3 threads."""
    peers, groups, c, b, h, w, k, p, cout = shape
    wq, sw, xq, sx, bias, wp, run = _forward_s8_case(*shape)
    lead = () if groups is None else (groups,)
    cols = ops.conv_unfold(xq, 0, b, np.empty((*lead, c * k * k, b * run), np.int8), k, wp, run)
    want = ops.gemm_s8_batched_f32(wq, np.broadcast_to(cols, (peers, *cols.shape[-2:])), sw,
                                   np.broadcast_to(sx, (peers,)))
    want += bias[:, :, None]
    _check_bits(want, ref.conv_forward_s8(wq, sw, xq, sx, bias, np.empty_like(want), k, wp, run),
                lambda out, nt: ops.conv_forward_s8(wq, sw, xq, sx, bias, out, k, wp, run,
                                                    n_threads=nt))


def test_forward_s8_bad_arguments_raise():
    wq, sw, xq, sx, bias, wp, run = _forward_s8_case(2, 2, 3, 2, 5, 5, 3, 1, 4)  # run 35
    y = np.zeros((2, 4, 70), np.float32)
    with pytest.raises(ValueError, match=r"wq must have shape \(2, 4, 27\)"):
        ops.conv_forward_s8(wq[..., :-1].copy(), sw, xq, sx, bias, y, 3, wp, run)
    with pytest.raises(ValueError, match=r"y must have shape \(2, 4, 70\), got \(2, 4, 69\)"):
        ops.conv_forward_s8(wq, sw, xq, sx, bias, y[..., :-1].copy(), 3, wp, run)
    with pytest.raises(ValueError, match=r"xq rows must hold"):
        ops.conv_forward_s8(wq, sw, xq[..., :-1].copy(), sx, bias, y, 3, wp, run)
    with pytest.raises(ValueError, match=r"xq must have 1 \(shared\) or P=2 groups"):
        ops.conv_forward_s8(wq, sw, np.concatenate([xq, xq[:1]]), sx, bias, y, 3, wp, run)
    with pytest.raises(ValueError, match=r"sx must have 2 entries"):
        ops.conv_forward_s8(wq, sw, xq, sx[:1].copy(), bias, y, 3, wp, run)
    with pytest.raises(ValueError, match=r"bias must have shape \(2, 4\)"):
        ops.conv_forward_s8(wq, sw, xq, sx, bias[:, :3].copy(), y, 3, wp, run)
    with pytest.raises(ValueError, match="1 <= k <= wp"):
        ops.conv_forward_s8(wq, sw, xq, sx, bias, y, 3, 2, run)
    with pytest.raises(TypeError, match="xq must have dtype int8"):
        ops.conv_forward_s8(wq, sw, xq.astype(np.float32), sx, bias, y, 3, wp, run)
    with pytest.raises(TypeError, match="bias must be a 2-D float32"):
        ops.conv_forward_s8(wq, sw, xq, sx, bias.astype(np.float64), y, 3, wp, run)
    with pytest.raises(ValueError, match="contiguous"):
        ops.conv_forward_s8(wq, sw, xq, sx, np.ones((4, 2), np.float32).T, y, 3, wp, run)


@pytest.mark.parametrize("shape", FORWARD_SHAPES)
@pytest.mark.parametrize("chunk", [1, 2, 5])
def test_weight_grad_s8_is_the_int8_gemm_on_unfolded_chunks(isa, shape, chunk):
    """On every ISA path, conv_weight_grad_s8 equals what Conv2d's int8 backward computed before
    it (per chunk, gemm_s8_batched_f32 of the codes of dY and of the chunk's conv_unfold columns,
    the chunks' parts added in order) and the exact NumPy reference, bit for bit, a shared input
    included, on 1, 2 and 3 threads."""
    peers, groups, c, b, h, w, k, p, cout = shape
    _, sdy, xq, sx, _, wp, run = _forward_s8_case(*shape, seed=3)
    rng = np.random.default_rng(7)
    dq = rng.integers(-127, 128, (peers, cout, b * run)).astype(np.int8)
    dq[:, :, ::7] = 0
    lead = () if groups is None else (groups,)
    kk = c * k * k
    want = np.empty((peers, cout, kk), np.float32)
    part = np.empty_like(want)
    for b0 in range(0, b, chunk):
        b1 = min(b, b0 + chunk)
        cols = ops.conv_unfold(xq, b0, b1, np.empty((*lead, kk, (b1 - b0) * run), np.int8), k,
                               wp, run)
        ops.gemm_s8_batched_f32(dq[..., b0 * run : b1 * run],
                                np.broadcast_to(cols, (peers, *cols.shape[-2:])), sdy,
                                np.broadcast_to(sx, (peers,)), out=part if b0 else want,
                                trans_b=True)
        if b0:
            want += part
    _check_bits(want,
                ref.conv_weight_grad_s8(dq, sdy, xq, sx, np.empty_like(want), k, wp, run, chunk),
                lambda out, nt: ops.conv_weight_grad_s8(dq, sdy, xq, sx, out, k, wp, run, chunk,
                                                        n_threads=nt))


def test_weight_grad_s8_bad_arguments_raise():
    _, sdy, xq, sx, _, wp, run = _forward_s8_case(2, 2, 3, 2, 5, 5, 3, 1, 4)  # run 35
    dq = np.zeros((2, 4, 70), np.int8)
    gw = np.zeros((2, 4, 27), np.float32)
    with pytest.raises(ValueError, match=r"dq must have shape \(2, 4, 70\), got \(2, 4, 69\)"):
        ops.conv_weight_grad_s8(dq[..., :-1].copy(), sdy, xq, sx, gw, 3, wp, run, 1)
    with pytest.raises(ValueError, match=r"gw must have shape \(2, 4, 27\)"):
        ops.conv_weight_grad_s8(dq, sdy, xq, sx, gw[..., :-1].copy(), 3, wp, run, 1)
    with pytest.raises(ValueError, match=r"xq rows must hold"):
        ops.conv_weight_grad_s8(dq, sdy, xq[..., :-1].copy(), sx, gw, 3, wp, run, 1)
    with pytest.raises(ValueError, match=r"sx must have 2 entries"):
        ops.conv_weight_grad_s8(dq, sdy, xq, sx[:1].copy(), gw, 3, wp, run, 1)
    with pytest.raises(ValueError, match="chunk"):
        ops.conv_weight_grad_s8(dq, sdy, xq, sx, gw, 3, wp, run, 0)
    with pytest.raises(ValueError, match=r"chunk\*run"):
        ops.conv_weight_grad_s8(dq, sdy, xq, sx, gw, 3, wp, run, 10**5)
    with pytest.raises(TypeError, match="dq must be a 3-D int8"):
        ops.conv_weight_grad_s8(dq.astype(np.int16), sdy, xq, sx, gw, 3, wp, run, 1)
    with pytest.raises(ValueError, match="contiguous"):
        ops.conv_weight_grad_s8(dq, sdy, xq, sx, np.zeros((2, 27, 4), np.float32).swapaxes(1, 2),
                                3, wp, run, 1)
