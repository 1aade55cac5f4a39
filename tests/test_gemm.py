"""Exact int8 GEMM (every ISA path, packed and unpacked B, any thread count), fused dequantization,
and the int8 quantize/dequantize/absmax kernels against the NumPy reference (bit for bit)."""

import itertools

import numpy as np
import pytest

from decentlearn import _core, ops
from decentlearn._reference import gemm_s8 as ref

SIZES = [1, 7, 33, 255, 1000]
# every (m, k, n) from SIZES with at most ~2e7 multiply-adds (the int64 reference is not BLAS)
SHAPES = [s for s in itertools.product(SIZES, repeat=3) if s[0] * s[1] * s[2] <= 2 * 10**7]
ISAS = _core.config()["isa_supported"]
_REF: dict = {}


def _ab(m, k, n, seed=0):
    key = (m, k, n, seed)
    if key not in _REF:
        rng = np.random.default_rng(seed)
        a = rng.integers(-128, 128, (m, k), dtype=np.int8)
        b = rng.integers(-128, 128, (k, n), dtype=np.int8)
        _REF[key] = (a, b, a.astype(np.int64) @ b.astype(np.int64))
    return _REF[key]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gemm_exact(isa, shape):
    a, b, want = _ab(*shape)
    a0, b0 = a.copy(), b.copy()
    pb = ops.pack_b_s8(b)
    for threads in (1, 2, 3):
        np.testing.assert_array_equal(ops.gemm_s8(a, pb, n_threads=threads), want)
    np.testing.assert_array_equal(ops.gemm_s8(a, b, n_threads=2), want)  # packed on the fly
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(b, b0)


@pytest.mark.parametrize("m,k,n", [(0, 5, 3), (4, 0, 9), (3, 7, 0), (0, 0, 0), (65, 0, 70)])
def test_gemm_empty(isa, m, k, n):
    a = np.ones((m, k), np.int8)
    b = np.ones((k, n), np.int8)
    np.testing.assert_array_equal(ops.gemm_s8(a, b), np.zeros((m, n), np.int32))
    y = ops.gemm_s8_f32(a, ops.pack_b_s8(b), 0.5, 2.0, bias=np.full(n, 3.0, np.float32))
    np.testing.assert_array_equal(y, np.full((m, n), 3.0, np.float32))


@pytest.mark.parametrize("va,vb", [(-127, 127), (127, 127), (-128, -128), (-128, 127), (127, -128)])
def test_gemm_extremes(isa, va, vb):
    for m, k, n in [(7, 1000, 65), (13, 4099, 70)]:
        a = np.full((m, k), va, np.int8)
        b = np.full((k, n), vb, np.int8)
        a[1, ::3] = -va if va != -128 else 127
        b[::5, 2] = 0
        want = a.astype(np.int64) @ b.astype(np.int64)
        np.testing.assert_array_equal(ops.gemm_s8(a, b, n_threads=2), want)


def test_gemm_largest_k(isa):
    """At k = GEMM_S8_MAX_K the VNNI accumulators wrap modulo 2^32 mid-sum and still end exact."""
    k = ops.GEMM_S8_MAX_K
    assert k == ref.MAX_K == 131071
    a = np.empty((3, k), np.int8)
    a[0], a[1], a[2] = 127, -128, -128
    a[2, ::2] = 127
    b = np.empty((k, 5), np.int8)
    b[:, 0], b[:, 1], b[:, 2], b[:, 3], b[:, 4] = 127, -128, 0, -127, 1
    b[::7, 4] = -128
    want = a.astype(np.int64) @ b.astype(np.int64)
    assert np.abs(want).max() <= 2**31 - 1
    np.testing.assert_array_equal(ops.gemm_s8(a, b), want)
    with pytest.raises(ValueError, match="k=131072"):
        ops.gemm_s8(np.zeros((1, k + 1), np.int8), np.zeros((k + 1, 1), np.int8))
    with pytest.raises(ValueError, match="exact"):
        ops.pack_b_s8(np.zeros((k + 1, 1), np.int8))


def test_gemm_vector_and_out(isa):
    a, b, want = _ab(33, 255, 7)
    pb = ops.pack_b_s8(b)
    np.testing.assert_array_equal(ops.gemm_s8(a[3], pb), want[3])
    out = np.full((33, 7), -1, np.int32)
    assert ops.gemm_s8(a, pb, out=out) is out
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_gemm_f32(isa, per_channel, with_bias):
    rng = np.random.default_rng(1)
    for m, k, n in [(7, 33, 255), (255, 1000, 33), (1, 7, 1), (70, 129, 130)]:
        a, b, c = _ab(m, k, n)
        a_scale = 0.0137
        b_scale = (rng.uniform(0.001, 0.1, n).astype(np.float32) if per_channel
                   else np.float32(0.021))
        bias = rng.standard_normal(n).astype(np.float32) if with_bias else None
        want = ref.gemm_s8_f32(a, b, a_scale, b_scale, bias)
        for threads in (1, 2):
            got = ops.gemm_s8_f32(a, ops.pack_b_s8(b), a_scale, b_scale, bias, n_threads=threads)
            assert got.dtype == np.float32 and got.shape == (m, n)
            # rtol 1e-6 on the value, plus float32 roundings of the terms where bias cancels
            terms = np.abs(c * a_scale * np.asarray(b_scale, np.float64))
            if bias is not None:
                terms = terms + np.abs(bias)
            np.testing.assert_array_less(np.abs(got - want), 1e-6 * np.abs(want) + 4e-7 * terms + 1e-30)


def test_packed_layout(isa):
    b = _ab(7, 33, 70)[1]
    pb = ops.pack_b_s8(b)
    assert pb.k == 33 and pb.n == 70 and pb.shape == (33, 70)
    assert pb.layout == _core.gemm_s8_layout()["name"]
    assert pb.data.ctypes.data % 64 == 0 and not pb.data.flags.writeable
    np.testing.assert_array_equal(pb.colsum[:70], b.astype(np.int64).sum(axis=0))
    assert "PackedB(k=33, n=70" in repr(pb)


def test_packed_other_layout_rejected():
    a, b, want = _ab(33, 255, 70)
    default = _core.config()["isa"]
    try:
        packs = {}
        for isa in ISAS:
            _core.set_isa(isa)
            packs[isa] = ops.pack_b_s8(b)
        for isa in ISAS:
            _core.set_isa(isa)
            for pb in packs.values():
                if pb.layout == _core.gemm_s8_layout()["name"]:
                    np.testing.assert_array_equal(ops.gemm_s8(a, pb), want)
                else:
                    with pytest.raises(ValueError, match="pack B again"):
                        ops.gemm_s8(a, pb)
    finally:
        _core.set_isa(default)


def test_gemm_bad_input(isa):
    a, b, _ = _ab(7, 33, 70)
    pb = ops.pack_b_s8(b)
    with pytest.raises(TypeError, match="a must have dtype int8"):
        ops.gemm_s8(a.astype(np.float32), pb)
    with pytest.raises(TypeError, match="b must"):
        ops.gemm_s8(a, b.tolist())
    with pytest.raises(TypeError, match="dtype int8"):
        ops.pack_b_s8(b.astype(np.int16))
    with pytest.raises(ValueError, match="C-contiguous"):
        ops.gemm_s8(np.asfortranarray(a), pb)
    with pytest.raises(ValueError, match="C-contiguous"):
        ops.pack_b_s8(b[:, ::2])
    with pytest.raises(ValueError, match="2-D"):
        ops.gemm_s8(a.reshape(7, 33, 1), pb)
    with pytest.raises(ValueError, match="a has 32 columns but packed_b has k=33"):
        ops.gemm_s8(a[:, :32].copy(), pb)
    with pytest.raises(ValueError, match="out must have shape"):
        ops.gemm_s8(a, pb, out=np.empty((7, 69), np.int32))
    with pytest.raises(TypeError, match="out must have dtype int32"):
        ops.gemm_s8(a, pb, out=np.empty((7, 70), np.int64))
    bad = ops.PackedB(pb.data[:-1], pb.colsum, pb.k, pb.n, pb.layout)
    with pytest.raises(ValueError, match="packed_b.data must have"):
        ops.gemm_s8(a, bad)
    bad = ops.PackedB(pb.data, pb.colsum, pb.k, pb.n + 100, pb.layout)
    with pytest.raises(ValueError, match="packed_b"):
        ops.gemm_s8(a, bad)
    with pytest.raises(ValueError, match="b_scale must have 1 or n=70"):
        ops.gemm_s8_f32(a, pb, 1.0, np.ones(69, np.float32))
    with pytest.raises(ValueError, match="bias must have n=70"):
        ops.gemm_s8_f32(a, pb, 1.0, 1.0, bias=np.ones(7, np.float32))
    with pytest.raises(TypeError, match="bias must have dtype float32"):
        ops.gemm_s8_f32(a, pb, 1.0, 1.0, bias=np.ones(70))
    with pytest.raises(ValueError, match="a_scale must be finite"):
        ops.gemm_s8_f32(a, pb, float("nan"), 1.0)
    with pytest.raises(ValueError, match="n_threads"):
        ops.gemm_s8(a, pb, n_threads=0)


# ---- quantization ------------------------------------------------------------------------------

DIMS = [0, 1, 7, 33, 1000, 100_000]


def _x(rows, dim, seed=0):
    x = np.random.default_rng(seed).standard_normal((rows, dim), dtype=np.float32) * 3
    if dim > 4:
        x[:, 2], x[:, 3] = -0.0, 0.0
        x[:, 4] = 1e9  # saturates to 127
    return x


def _scales(x, axis):
    return ops.absmax_scale(x, axis=axis) * np.float32(0.5)  # half the range: exercise clamping


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
def test_quantize_matches_reference(isa, dim, axis, rounding):
    rows = 3 if dim < 100_000 else 2
    x = _x(rows, dim)
    x0 = x.copy()
    scale = _scales(x, axis)
    want = ref.quantize_s8(x, scale, axis, rounding, seed=7, step=2, peer0=5)
    for threads in (1, 2, 3):
        got = ops.quantize_s8(x, scale, axis, rounding, seed=7, step=2, peer0=5, n_threads=threads)
        assert got.dtype == np.int8
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(x, x0)
    assert got.size == 0 or (got.min() >= -127 and got.max() <= 127)
    y = ops.dequantize_s8(got, scale, axis)
    np.testing.assert_array_equal(y, ref.dequantize_s8(got, scale, axis))


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_absmax_scale(isa, axis):
    for rows, dim in [(3, 0), (1, 1), (4, 7), (3, 1000), (2, 100_000), (0, 5)]:
        x = _x(rows, dim)
        if rows and dim:
            x[0] = 0.0  # an all-zero row: scale 1 per row
        got = ops.absmax_scale(x, axis=axis)
        want = ref.absmax_scale(x, axis=axis)
        np.testing.assert_array_equal(got, want)
        assert np.asarray(got).dtype == np.float32


@pytest.mark.parametrize("shape", [(300, 1000), (1024, 64), (77, 2049), (5000, 7)])
def test_absmax_scale_per_column_split_over_rows_at_any_thread_count(shape):
    """axis=1 (a weight's per-column scales) splits the rows between threads too (a 1024-column
    weight had run on one thread): the same scales at every count, a column's maximum found in
    any row block, and a non-finite value in a late row block still refused."""
    rng = np.random.default_rng(shape[0])
    x = rng.standard_normal(shape).astype(np.float32)
    x[-1, 3] = 1e6  # the largest value of column 3 in the last row block
    x[shape[0] // 2, -1] = -2e5  # and of the last column in the middle, negative
    want = ref.absmax_scale(x, axis=1)
    assert want[3] == np.float32(1e6) / np.float32(127)
    for threads in (1, 2, 3, 8):
        np.testing.assert_array_equal(ops.absmax_scale(x, axis=1, n_threads=threads), want)
    bad = x.copy()
    bad[-2, 0] = np.nan
    for threads in (1, 3, 8):
        with pytest.raises(ValueError, match="finite"):
            ops.absmax_scale(bad, axis=1, n_threads=threads)


def test_quantize_1d_and_rows():
    x = _x(4, 33)
    s = ops.absmax_scale(x)
    np.testing.assert_array_equal(ops.quantize_s8(x[2], s, rounding="stochastic", peer0=2),
                                  ops.quantize_s8(x, s, rounding="stochastic")[2])
    sc = ops.absmax_scale(x[1], axis=0)  # 1-D, per element
    assert sc.shape == (33,)
    np.testing.assert_array_equal(ops.quantize_s8(x[1], sc, axis=0),
                                  ref.quantize_s8(x[1], sc, axis=0))
    q = ops.quantize_s8(x[1], sc, axis=0)
    np.testing.assert_array_equal(np.abs(q), np.where(x[1] != 0, 127, 0))


def test_stochastic_unbiased():
    x = np.linspace(-1, 1, 257, dtype=np.float32).reshape(1, -1)
    s = np.float32(1 / 127 * 3)
    mean = np.mean([ops.quantize_s8(x, s, rounding="stochastic", step=t) for t in range(400)], axis=0)
    np.testing.assert_allclose(mean * s, x, atol=0.2 * s)


@pytest.mark.parametrize("n", [7, 16, 100, 1000])  # the scalar tail and whole SIMD blocks
def test_stochastic_rounding_ties_round_down_on_every_path(n):
    """floor(v) + (u < v - floor(v)): where the fraction equals the draw u exactly, the rule rounds
    down. Scale 1 (max |x| = 127) makes v = x, and x = u (24-bit multiples of 2**-24, exact in
    float32) puts every element on its tie; `<=` in a kernel would round them all up."""
    from decentlearn._reference import rng as ref_rng
    seed, step, peer0 = 11, 5, 3
    u = ref_rng.rng_unit(seed, step, peer0, 2, n)
    x = u.copy()
    x[:, 0] = 127.0  # the scale: 127 / 127 = 1 exactly
    x[1, 1:] = -u[1, 1:]  # negative ties: v - floor(v) = 1 - u, a tie only where u = 1/2
    scale = np.ones(2, np.float32)
    want = np.where(np.arange(n) == 0, 127, 0)
    want_neg = -np.ones(n - 1) + (u[1, 1:] < np.float32(1) - u[1, 1:])  # the rule, written out
    for isa in ISAS:
        with ops.using_isa(isa):
            q = ops.quantize_s8(x, scale, axis=0, rounding="stochastic", seed=seed, step=step,
                                peer0=peer0)
        np.testing.assert_array_equal(q[0], want, err_msg=isa)
        np.testing.assert_array_equal(q[1, 1:], want_neg, err_msg=isa)
        np.testing.assert_array_equal(q, ref.quantize_s8(x, scale, axis=0, rounding="stochastic",
                                                         seed=seed, step=step, peer0=peer0))


def test_quantize_bad_input():
    x = _x(3, 10)
    with pytest.raises(TypeError, match="x must have dtype float32"):
        ops.quantize_s8(x.astype(np.float64), 1.0)
    with pytest.raises(ValueError, match="x must have contiguous rows"):
        ops.quantize_s8(x[:, ::2], 1.0)
    with pytest.raises(ValueError, match="finite"):
        ops.quantize_s8(np.array([1.0, np.nan], np.float32), 1.0)
    for isa in ISAS:  # the NaN/inf check lives in each ISA's core
        _core.set_isa(isa)
        for bad in (np.inf, -np.inf, np.nan):
            for n in (2, 40):
                v = np.ones(n, np.float32)
                v[-1] = bad
                with pytest.raises(ValueError, match="finite"):
                    ops.absmax_scale(v)
                with pytest.raises(ValueError, match="finite"):
                    ops.quantize_s8(v, 1.0)
    _core.set_isa(_core.config()["isa_supported"][-1])
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="scale"):
            ops.quantize_s8(x, bad)
    with pytest.raises(ValueError, match="scale must have 3 values"):
        ops.quantize_s8(x, np.ones(10, np.float32), axis=0)
    with pytest.raises(TypeError, match="scale must be a float32 array"):
        ops.quantize_s8(x, 1.0, axis=1)
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        ops.quantize_s8(x, np.ones(10, np.float32), axis=2)
    with pytest.raises(ValueError, match="rounding"):
        ops.quantize_s8(x, 1.0, rounding="up")
    with pytest.raises(ValueError, match="seed"):
        ops.quantize_s8(x, 1.0, seed=-1)
    with pytest.raises(TypeError, match="q must have dtype int8"):
        ops.dequantize_s8(x, 1.0)


@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_quantize_and_absmax_accept_strided_rows(isa, rounding, axis):
    """Rows lying ld > dim apart (a slice of every peer's parameter row) give the same bits as
    their contiguous copy, without copying."""
    params = np.random.default_rng(5).standard_normal((7, 1000), dtype=np.float32)
    view = params[:, 100:433]
    assert not view.flags.c_contiguous
    dense = np.ascontiguousarray(view)
    s_view, s_dense = ops.absmax_scale(view, axis=axis), ops.absmax_scale(dense, axis=axis)
    np.testing.assert_array_equal(s_view, s_dense)
    q_view = ops.quantize_s8(view, s_view, axis=axis, rounding=rounding, seed=3, step=1)
    q_dense = ops.quantize_s8(dense, s_dense, axis=axis, rounding=rounding, seed=3, step=1)
    np.testing.assert_array_equal(q_view, q_dense)


def test_quantize_rejects_non_contiguous_rows():
    x = np.zeros((4, 10), np.float32)[:, ::2]
    with pytest.raises(ValueError, match="x must have contiguous rows"):
        ops.absmax_scale(x)
    with pytest.raises(ValueError, match="x must have contiguous rows"):
        ops.quantize_s8(x, 1.0)
    buf = np.zeros((4, 20), np.float32)
    out = buf.view(np.int8).reshape(-1)[:40].reshape(4, 10)  # the bytes of the input's first row
    with pytest.raises(ValueError, match="out must not overlap"):
        ops.quantize_s8(buf[:, :10], 1.0, out=out)
