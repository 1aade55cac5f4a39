"""Natural compression and natural dithering: C kernels equal the NumPy reference bit for bit on
every ISA path and thread count, are unbiased with the paper's variance bounds, reject bad input,
and their compressors' wire format survives untrusted bytes."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decentlearn import compress, ops
from decentlearn._reference import natural as ref

DIMS = [0, 1, 7, 33, 1000, 100_000]
SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 0.75, -3.0, 2.0**-63, -(2.0**-63), 2.0**-64, 1e-30,
                    -1e-20, 1.5e-19, np.float32(1e-45), -3e-39, 1e-40, 2.0**63, 1.5 * 2**63, 2.0**64,
                    -3e38, np.finfo(np.float32).max, np.finfo(np.float32).tiny, 2.0**-126 * 1.5,
                    1e-8, 123.456, -0.1], dtype=np.float32)


def make_x(rows, dim, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, dim)).astype(np.float32)
    x *= np.exp2(rng.integers(-70, 70, (rows, dim))).astype(np.float32)
    flat = x.reshape(-1)
    k = min(flat.size, SPECIAL.size)
    flat[:k] = SPECIAL[:k]
    return x


# --- C == reference, every ISA path, every shape ---------------------------------------------

@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("rows", [1, 3])
def test_natural_matches_reference(isa, rows, dim):
    x = make_x(rows, dim, seed=dim)
    x0 = x.copy()
    codes = ops.natural_encode(x, seed=7, step=3, peer0=5)
    assert codes.dtype == np.uint8 and codes.shape == x.shape
    np.testing.assert_array_equal(codes, ref.natural_encode(x, 7, 3, 5))
    y = ops.natural_decode(codes)
    np.testing.assert_array_equal(y.view(np.uint32), ref.natural_decode(codes).view(np.uint32))
    np.testing.assert_array_equal(x, x0)  # input untouched


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("s,p", [(1, 2.0), (3, 2.0), (8, 1.0), (8, math.inf), (31, 2.0)])
def test_dither_matches_reference(isa, s, p, dim):
    x = make_x(2, dim, seed=dim + s)
    x[1] = 0.0 if dim % 2 else x[1]  # an all-zero row now and then
    x0 = x.copy()
    norms, codes = ops.dither_encode(x, s, p, seed=4, step=1, peer0=9)
    rn, rc = ref.dither_encode(x, s, p, 4, 1, 9)
    np.testing.assert_array_equal(norms.view(np.uint32), rn.view(np.uint32))
    np.testing.assert_array_equal(codes, rc)
    assert codes.max(initial=0) >> 1 <= s
    y = ops.dither_decode(norms, codes, s)
    np.testing.assert_array_equal(y.view(np.uint32),
                                  ref.dither_decode(norms, codes, s).view(np.uint32))
    np.testing.assert_array_equal(x, x0)


def test_one_dimensional_input_is_one_row():
    x = make_x(1, 500)[0]
    np.testing.assert_array_equal(ops.natural_encode(x, seed=2),
                                  ops.natural_encode(x[None], seed=2)[0])
    assert ops.natural_encode(x).shape == (500,)
    norms, codes = ops.dither_encode(x, 4)
    assert norms.shape == (1,) and codes.shape == (1, 500)


@pytest.mark.parametrize("rows,dim", [(3, 100_000), (1, 250_003), (40, 777)])
def test_threads_do_not_change_bits(isa, rows, dim):
    x = make_x(rows, dim, seed=1)
    c1 = ops.natural_encode(x, seed=5, n_threads=1)
    n1, d1 = ops.dither_encode(x, 6, seed=5, n_threads=1)
    for t in (2, 3):
        np.testing.assert_array_equal(ops.natural_encode(x, seed=5, n_threads=t), c1)
        n, d = ops.dither_encode(x, 6, seed=5, n_threads=t)
        np.testing.assert_array_equal(n, n1)
        np.testing.assert_array_equal(d, d1)
        np.testing.assert_array_equal(ops.natural_decode(c1, n_threads=t),
                                      ops.natural_decode(c1, n_threads=1))
        np.testing.assert_array_equal(ops.dither_decode(n1, d1, 6, n_threads=t),
                                      ops.dither_decode(n1, d1, 6, n_threads=1))


def test_streaming_sizes_and_misaligned_output_match_reference(isa):
    """Arrays of 2^22 values or more take the non-temporal store paths (encode's staged codes,
    decode's aligned head, wide body and tail); every code value, an output 4 bytes off the vector
    alignment, and 1 vs 2 threads."""
    n = (1 << 22) + 45
    x = make_x(1, n, seed=4)[0]
    codes = ops.natural_encode(x, seed=3, step=1, n_threads=2)
    np.testing.assert_array_equal(codes, ref.natural_encode(x, 3, 1))
    np.testing.assert_array_equal(ops.natural_encode(x, seed=3, step=1, n_threads=1), codes)
    every = (np.arange(n) * 37 % 256).astype(np.uint8)
    buf = np.empty(n + 1, np.float32)
    y = ops.natural_decode(every, out=buf[1:], n_threads=2)
    np.testing.assert_array_equal(y.view(np.uint32), ref.natural_decode(every).view(np.uint32))


def test_rows_are_peers():
    x = make_x(5, 300, seed=3)
    full = ops.natural_encode(x, seed=1, step=2, peer0=10)
    np.testing.assert_array_equal(ops.natural_encode(x[2:], seed=1, step=2, peer0=12), full[2:])


# --- semantics -------------------------------------------------------------------------------

def test_code_table():
    codes = np.arange(256, dtype=np.uint8)
    y = ops.natural_decode(codes)
    c = np.arange(256) & 0x7F
    want = np.where(c == 0, 0.0, np.exp2(c - 64.0) * np.where(np.arange(256) >= 128, -1, 1))
    np.testing.assert_array_equal(y, want.astype(np.float32))
    assert y[0x80] == 0 and y[0] == 0


def test_exact_and_saturated_values(isa):
    x = np.array([0.0, -0.0, 1.0, -0.5, 2.0**-63, -(2.0**63), 2.0**64, -3e38, 1.5 * 2**63],
                 dtype=np.float32)
    for seed in range(20):
        codes = ops.natural_encode(x, seed=seed)
        assert codes[0] == 0 and codes[1] == 0  # +-0 -> code 0
        y = ops.natural_decode(codes)
        np.testing.assert_array_equal(y[:6], x[:6])  # powers of two are kept exactly
        np.testing.assert_array_equal(y[6:], np.float32([2.0**63, -(2.0**63), 2.0**63]))


def test_dither_norms():
    x = np.zeros((3, 40), np.float32)
    x[1, :2] = 3e38  # ||x||_2 overflows float32: sent as FLT_MAX
    x[2, :] = np.arange(40)
    for p, want2 in ((2.0, np.sqrt((np.arange(40.0) ** 2).sum())), (1.0, 780.0), (math.inf, 39.0)):
        norms, codes = ops.dither_encode(x, 5, p)
        assert norms[0] == 0 and not codes[0].any()
        assert norms[1] == (np.float32(3e38) if p == math.inf else np.finfo(np.float32).max)
        assert norms[2] == np.float32(want2)
        assert (codes >> 1).max() <= 5


# --- statistics ------------------------------------------------------------------------------

N_SEEDS = 10_000
STAT_X = np.array([1.0, -1.0, 0.3, -0.7, 1.5, -1.25, 3.0e-5, 1e6, -2.5e12, 2.0**-63,
                   1.5 * 2**-64, 3e-20, -5e-25, 1e-30, 2.0**-100, np.float32(1e-45), -1e-40,
                   2.0**-126, 7.0, -0.0625, 0.0], dtype=np.float32)


def natural_var(x):
    """Per-element variance of natural compression (exact, float64)."""
    a = np.abs(x.astype(np.float64))
    lo = np.where(a >= 2.0**-63, np.exp2(np.floor(np.log2(np.maximum(a, 2.0**-63)))), 0.0)
    hi = np.where(a >= 2.0**-63, 2 * lo, 2.0**-63)
    return (hi - a) * (a - lo)


def test_natural_is_unbiased():
    samples = np.stack([ops.natural_decode(ops.natural_encode(STAT_X, seed=s))
                        for s in range(N_SEEDS)]).astype(np.float64)
    mean = samples.mean(axis=0)
    se = np.sqrt(natural_var(STAT_X) / N_SEEDS)
    # Within 4 standard errors of x; elements with zero variance (powers of two, 0) exactly x.
    # Subnormals and |x| < 2^-94 always round to 0: |x| is far below 4 se there.
    assert np.all(np.abs(mean - STAT_X) <= 4 * se), np.abs(mean - STAT_X) / np.maximum(se, 1e-300)
    # the empirical variance agrees with the exact one (within 10 %) in the normal range
    v, ve = samples.var(axis=0), natural_var(STAT_X)
    big = (ve > 1e-3 * STAT_X.astype(np.float64) ** 2) & (np.abs(STAT_X) >= 2.0**-63)
    np.testing.assert_allclose(v[big], ve[big], rtol=0.1)


@pytest.mark.parametrize("kind", ["normal", "worst"])
def test_natural_second_moment_bound(kind):
    # E||C(x)||^2 <= 9/8 ||x||^2 (Horvath et al., Thm. 1). The worst case |x| = 1.5 2^e gives
    # 10/9 ||x||^2; tolerance: the bound must hold for the estimate + 4 standard errors.
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(4000) if kind == "normal"
         else 1.5 * np.exp2(rng.integers(-2, 3, 4000)) * rng.choice([-1, 1], 4000))
    x = x.astype(np.float32)
    xx = np.stack([x] * 500)
    y = ops.natural_decode(ops.natural_encode(xx, seed=3)).astype(np.float64)
    ratio = (y**2).sum(axis=1) / (x.astype(np.float64) ** 2).sum()
    se = ratio.std() / np.sqrt(ratio.size)
    assert ratio.mean() + 4 * se <= 9 / 8
    if kind == "worst":
        assert abs(ratio.mean() - 10 / 9) < 4 * se


def dither_samples(x, s, p, n):
    return np.stack([ops.dither_decode(*ops.dither_encode(x, s, p, seed=k), s)[0]
                     for k in range(n)]).astype(np.float64)


@pytest.mark.parametrize("s,p", [(2, 2.0), (5, 2.0), (3, math.inf), (4, 1.0)])
def test_dither_is_unbiased(s, p):
    x = STAT_X[STAT_X != 0][:12].copy()
    x[-1] = 1e-4
    norms, _ = ops.dither_encode(x, s, p)
    norm = np.float64(norms[0])
    samples = dither_samples(x, s, p, N_SEEDS)
    r = np.abs(x.astype(np.float64)) / norm
    delta = 2.0 ** (1 - s)
    lo = np.where(r >= delta, np.exp2(np.floor(np.log2(np.maximum(r, delta)))), 0.0)
    hi = np.where(r >= delta, np.minimum(2 * lo, 1.0), delta)
    se = norm * np.sqrt((hi - r) * (r - lo) / N_SEEDS)
    # r = |x| / norm is rounded to float32 (relative 2^-24) before the unbiased rounding.
    tol = 4 * se + np.abs(x) * 2.0**-23
    assert np.all(np.abs(samples.mean(axis=0) - x) <= tol)


@pytest.mark.parametrize("s,d", [(2, 50), (4, 1000), (8, 1000), (3, 20_000)])
def test_dither_second_moment_bound(s, d):
    # E||C(x)||^2 <= (1 + w) ||x||^2, w = 1/8 + sqrt(d) 2^(1-s) min(1, sqrt(d) 2^(1-s)) (p = 2).
    x = np.random.default_rng(s).standard_normal(d).astype(np.float32)
    xx = np.stack([x] * 200)
    norms, codes = ops.dither_encode(xx, s, seed=1)
    y = ops.dither_decode(norms, codes, s).astype(np.float64)
    ratio = (y**2).sum(axis=1) / (x.astype(np.float64) ** 2).sum()
    t = math.sqrt(d) * 2.0 ** (1 - s)
    w = 1 / 8 + t * min(1.0, t)
    assert ratio.mean() + 4 * ratio.std() / math.sqrt(ratio.size) <= 1 + w
    np.testing.assert_allclose(y.mean(axis=0), x, atol=6 * float(norms[0]) / math.sqrt(200))


# --- bad input -------------------------------------------------------------------------------

def test_bad_input_errors():
    x = make_x(2, 10)
    with pytest.raises(TypeError, match="x must have dtype float32, got float64"):
        ops.natural_encode(x.astype(np.float64))
    with pytest.raises(ValueError, match="x must be C-contiguous"):
        ops.natural_encode(make_x(2, 20)[:, ::2])
    with pytest.raises(TypeError, match="x must have dtype float32"):
        ops.dither_encode(x.astype(np.float64), 3)
    with pytest.raises(ValueError, match="x must be C-contiguous"):
        ops.dither_encode(make_x(2, 20)[:, ::2], 3)
    for bad in (np.nan, np.inf, -np.inf):
        y = x.copy()
        y[1, 7] = bad
        with pytest.raises(ValueError, match="x must be finite"):
            ops.natural_encode(y)
        for p in (1, 2, math.inf):
            with pytest.raises(ValueError, match="x must be finite"):
                ops.dither_encode(y, 3, p)
    for s in (0, 32, -1, 2.5, True):
        with pytest.raises(ValueError, match=r"s must be an integer in \[1, 31\]"):
            ops.dither_encode(x, s)
        with pytest.raises(ValueError, match=r"s must be an integer in \[1, 31\]"):
            ops.dither_decode(np.ones(2, np.float32), np.zeros((2, 10), np.uint8), s)
    for p in (3, 0.5, -math.inf, math.nan):
        with pytest.raises(ValueError, match="p must be 1, 2 or inf"):
            ops.dither_encode(x, 3, p)
    with pytest.raises(ValueError, match="seed must be an integer >= 0"):
        ops.natural_encode(x, seed=-1)
    with pytest.raises(ValueError, match="peer0 must be an integer >= 0"):
        ops.dither_encode(x, 3, peer0=-2)
    with pytest.raises(ValueError, match=r"out must have shape \(2, 10\)"):
        ops.natural_encode(x, out=np.empty((2, 11), np.uint8))
    with pytest.raises(TypeError, match="out must have dtype uint8"):
        ops.natural_encode(x, out=np.empty((2, 10), np.int8))
    with pytest.raises(ValueError, match="out must be C-contiguous"):
        ops.natural_encode(x, out=np.empty((2, 20), np.uint8)[:, ::2])
    with pytest.raises(TypeError, match="codes must have dtype uint8"):
        ops.natural_decode(np.zeros((2, 3), np.int32))
    out = np.empty((2, 10), np.uint8)
    assert ops.natural_encode(x, out=out) is out


def test_dither_decode_rejects_malformed():
    codes = np.zeros((2, 5), np.uint8)
    norms = np.ones(2, np.float32)
    for bad_norm in (np.nan, np.inf, -1.0, -0.0):
        n = norms.copy()
        n[1] = bad_norm
        with pytest.raises(ValueError, match="malformed"):
            ops.dither_decode(n, codes, 3)
    c = codes.copy()
    c[1, 4] = (4 << 1) | 1  # level 4 > s = 3
    with pytest.raises(ValueError, match="malformed"):
        ops.dither_decode(norms, c, 3)
    with pytest.raises(ValueError, match=r"norms must have shape \(2,\)"):
        ops.dither_decode(np.ones(3, np.float32), codes, 3)
    with pytest.raises(TypeError, match="norms must have dtype float32"):
        ops.dither_decode(np.ones(2), codes, 3)


# --- compressors -----------------------------------------------------------------------------

SPECS = ["natural", "dither:1", "dither:3", "dither:8:inf", "dither:31:1", "dither:7:2"]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("shape", [(0,), (1,), (33,), (4, 7), (3, 1000), (2, 0)])
def test_compressor_round_trip(spec, shape):
    c = compress.make(spec)
    assert c.unbiased
    x = make_x(1, int(np.prod(shape)), seed=2).reshape(shape)
    payload = c.compress(x, seed=3, step=1)
    data = payload.to_bytes()
    assert len(data) == payload.nbytes
    dim = shape[-1]
    per_row = dim if spec == "natural" else 4 + (dim * c.bits + 7) // 8
    assert payload.nbytes == per_row * (1 if len(shape) == 1 else shape[0])
    y = c.decompress(payload)
    assert y.shape == x.shape and y.dtype == np.float32
    np.testing.assert_array_equal(c.decompress(c.from_bytes(data, shape)), y)
    if len(shape) == 2 and shape[0] > 1:
        assert payload.to_bytes(1) == data[per_row:2 * per_row]


def test_compressor_specs():
    assert compress.make("dither:4").spec == "dither:4"
    assert compress.make("dither:4:inf").spec == "dither:4:inf"
    assert compress.make("dither:4:1").p == 1.0
    assert compress.make("dither:3").bits == 3 and compress.make("dither:31").bits == 6
    assert compress.make("dither:1").bits == 2 and compress.make("dither:4").bits == 4
    for bad in ("dither", "dither:0", "dither:32", "dither:x", "dither:3:3", "dither:3:2:1"):
        with pytest.raises(ValueError):
            compress.make(bad)
    with pytest.raises(ValueError, match="takes no parameters"):
        compress.make("natural:3")


@settings(max_examples=150, deadline=None)
@given(spec=st.sampled_from(SPECS), rows=st.integers(1, 3), dim=st.integers(0, 40),
       seed=st.integers(0, 2**16), mode=st.sampled_from(["random", "truncate", "extend", "flip"]),
       pos=st.integers(0, 10_000), nbytes=st.integers(1, 9))
def test_from_bytes_fuzz(spec, rows, dim, seed, mode, pos, nbytes):
    c = compress.make(spec)
    rng = np.random.default_rng(seed)
    good = c.compress(make_x(rows, dim, seed), seed=seed).to_bytes()
    if mode == "random":
        n = max(0, len(good) + int(rng.integers(-2, 3)))
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
    elif mode == "truncate":
        data = good[:max(0, len(good) - nbytes)]
    elif mode == "extend":
        data = good + bytes(rng.integers(0, 256, nbytes, dtype=np.uint8))
    else:
        b = bytearray(good)
        if b:
            b[pos % len(b)] ^= 1 << (pos % 8)
        data = bytes(b)
    try:
        y = c.decompress(c.from_bytes(data, (rows, dim)))
    except ValueError:
        return
    assert y.shape == (rows, dim) and y.dtype == np.float32
    assert np.isfinite(y).all()
