"""Quantizers (QSGD, buckets, sign, int8): C kernels equal the NumPy reference bit for bit on every
ISA path and thread count; statistical properties; compressors' wire formats and fuzzed parsing."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decentlearn import _core, ops
from decentlearn._reference import quant as ref
from decentlearn.compress import make
from decentlearn.compress import QSGD, Bucket

DIMS = [0, 1, 7, 33, 1000, 100_000]
ISAS = _core.config()["isa_supported"]


def _data(rows, dim, seed=0):
    x = np.random.default_rng(seed).standard_normal((rows, dim), dtype=np.float32)
    if dim > 3:
        x[:, 3] = 0.0  # exact zeros and a -0.0
        x[:, 2] = -0.0
    return x


# (name, encode kwargs, decode args after the encoded arrays)
CASES = [
    ("qsgd", {"levels": 1}, lambda d: {"levels": 1, "dim": d}),
    ("qsgd", {"levels": 5}, lambda d: {"levels": 5, "dim": d}),
    ("qsgd", {"levels": 127}, lambda d: {"levels": 127, "dim": d}),
    ("bucket", {"bits": 4, "bucket": 17}, lambda d: {"bits": 4, "bucket": 17, "dim": d}),
    ("bucket", {"bits": 8, "bucket": 512}, lambda d: {"bits": 8, "bucket": 512, "dim": d}),
    ("bucket", {"bits": 4, "bucket": 4096}, lambda d: {"bits": 4, "bucket": 4096, "dim": d}),
    ("sign", {}, lambda d: {"dim": d}),
    ("int8", {}, lambda d: {}),
]
STOCHASTIC = {"qsgd", "bucket", "int8"}


def _encode(mod, name, x, kw, seed=(3, 4, 5), **extra):
    fn = getattr(mod, f"{name}_encode")
    if name in STOCHASTIC:
        return fn(x, **kw, seed=seed[0], step=seed[1], peer0=seed[2], **extra)
    return fn(x, **kw, **extra)


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("name,kw,dkw", CASES)
def test_matches_reference_on_every_isa(isa, name, kw, dkw, dim):
    rows = 1 if dim == 100_000 else 3
    x = _data(rows, dim, seed=dim)
    x0 = x.copy()
    got = _encode(ops, name, x, kw)
    want = _encode(ref, name, x, kw)
    np.testing.assert_array_equal(x, x0)  # input not modified
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g.view(np.uint8), w.view(np.uint8))  # bits, -0.0 included
    dec = getattr(ops, f"{name}_decode")(*got, **dkw(dim))
    want_dec = getattr(ref, f"{name}_decode")(*want, **dkw(dim))
    np.testing.assert_array_equal(dec.view(np.uint8), want_dec.view(np.uint8))  # -0.0 included
    assert dec.shape == (rows, dim) and np.isfinite(dec).all()


@pytest.mark.parametrize("name,kw,dkw", CASES)
def test_threads_and_isas_are_bit_identical(name, kw, dkw):
    # 3 rows: 1 thread takes the whole-row path, 2 and 3 threads the (row, chunk) path.
    x = _data(3, 50_001, seed=1)
    results = []
    default = _core.config()["isa"]
    try:
        for isa in ISAS:
            _core.set_isa(isa)
            for t in (1, 2, 3):
                results.append(_encode(ops, name, x, kw, n_threads=t))
    finally:
        _core.set_isa(default)
    for r in results[1:]:
        for a, b in zip(results[0], r):
            np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))
    d1 = getattr(ops, f"{name}_decode")(*results[0], **dkw(x.shape[1]), n_threads=1)
    d2 = getattr(ops, f"{name}_decode")(*results[0], **dkw(x.shape[1]), n_threads=2)
    np.testing.assert_array_equal(d1, d2)


def test_rows_are_peers():
    x = _data(4, 300, seed=2)
    a = ops.qsgd_encode(x, 7, seed=9, step=1, peer0=10)
    b = ops.qsgd_encode(x[2:], 7, seed=9, step=1, peer0=12)
    np.testing.assert_array_equal(a[1][2:], b[1])
    c = ops.qsgd_encode(x, 7, seed=9, step=2, peer0=10)
    assert not np.array_equal(a[1], c[1])


def test_one_dimensional_input_is_one_row():
    x = _data(1, 100)[0]
    n, p = ops.qsgd_encode(x, 3)
    assert n.shape == (1,) and p.shape == (1, (100 * 3 + 7) // 8)
    np.testing.assert_array_equal(make("int8").decompress(make("int8").compress(x)).shape, [100])


N_SEEDS = 5000


def _step(payload):
    """Each element's quantization step h (decoded values are k * h apart)."""
    a, c, dim = payload.arrays, payload.compressor, payload.dim
    if c.kind == "qsgd":
        h = a["norm"] / np.float32(c.levels)
        return np.broadcast_to(h[:, None], (h.size, dim))
    if c.kind == "bucket":
        return np.repeat(a["scale"], c.bucket, axis=1)[:, :dim]
    return np.broadcast_to(a["scale"][:, None], (a["scale"].size, dim))


@pytest.mark.parametrize("spec", ["qsgd:1", "qsgd:4", "qsgd:127", "bucket:4:16", "bucket:8:128",
                                  "int8"])
def test_unbiased_over_seeds(spec):
    # One row per seed: row r of the batch draws from peer r, an independent stream.
    x = _data(1, 96, seed=3)[0] * np.float32(3)
    c = make(spec)
    assert c.unbiased
    batch = np.ascontiguousarray(np.broadcast_to(x, (N_SEEDS, x.size)))
    p = c.compress(batch, seed=11)
    dec = c.decompress(p).astype(np.float64)
    mean = dec.mean(axis=0)
    se = dec.std(axis=0) / np.sqrt(N_SEEDS)
    # An element whose rounding probability f is below 8 / N may round the same way in every
    # sample (empirical se 0) while |mean - x| = f h: hence the 8 h / N floor (h = the step).
    h = _step(p)[0].astype(np.float64)
    assert np.all(np.abs(mean - x) <= 4 * se + 8 * h / N_SEEDS + 1e-6 * np.abs(x).max())


@pytest.mark.parametrize("levels", [1, 2, 8, 127])
def test_qsgd_variance_bound(levels):
    d = 256
    x = _data(1, d, seed=4)[0]
    batch = np.ascontiguousarray(np.broadcast_to(x, (N_SEEDS, d)))
    c = QSGD(levels)
    err = ((c.decompress(c.compress(batch, seed=5)) - x).astype(np.float64) ** 2).sum(axis=1)
    bound = min(d / levels**2, np.sqrt(d) / levels) * float((x.astype(np.float64) ** 2).sum())
    assert err.mean() <= bound * 1.02


@pytest.mark.parametrize("bits,bucket", [(4, 16), (4, 100), (8, 128), (8, 1024)])
def test_bucket_error_at_most_one_scale(bits, bucket):
    x = _data(5, 3001, seed=6) * np.float32(10)
    c = Bucket(bits, bucket)
    p = c.compress(x, seed=1)
    scale = np.repeat(p.arrays["scale"], bucket, axis=1)[:, :x.shape[1]]
    err = np.abs(c.decompress(p) - x)
    assert np.all(err <= scale * (1 + 1e-5) + 1e-6 * np.abs(x))
    lo = np.repeat(p.arrays["lo"], bucket, axis=1)[:, :x.shape[1]]
    assert np.all(lo <= x)


def test_bucket_constant_bucket_decodes_exactly():
    x = np.full((2, 40), 2.5, np.float32)
    lo, scale, packed = ops.bucket_encode(x, 4, 16)
    assert np.all(scale == 0) and np.all(packed == 0)
    np.testing.assert_array_equal(ops.bucket_decode(lo, scale, packed, 4, 16, 40), x)


def test_sign_decodes_to_plus_minus_scale():
    x = _data(3, 1001, seed=7)
    c = make("sign")
    assert not c.unbiased
    dec = c.decompress(c.compress(x))
    scale = np.abs(x.astype(np.float64)).mean(axis=1).astype(np.float32)
    np.testing.assert_allclose(np.abs(dec), np.broadcast_to(scale[:, None], x.shape), rtol=1e-6)
    np.testing.assert_array_equal(dec < 0, x < 0)


@pytest.mark.parametrize("dim", [1, 7, 8, 9, 16, 17, 1001])
def test_sign_decode_bits_at_every_length(dim):
    """Eight values per byte from a nibble table, then a bit-by-bit tail: every bit pattern and
    a zero scale (-0.0 where the bit is set) give the reference's bits."""
    rng = np.random.default_rng(dim)
    packed = rng.integers(0, 256, (4, -(-dim // 8)), dtype=np.uint8)
    packed[0, :] = np.arange(packed.shape[1]) % 256  # many byte values in one row
    scale = np.array([0.5, 0.0, 3e38, 1e-45], np.float32)
    got = ops.sign_decode(scale, packed, dim, n_threads=2)
    want = ref.sign_decode(scale, packed, dim)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    bits = np.unpackbits(packed, axis=1, bitorder="little")[:, :dim].astype(bool)
    np.testing.assert_array_equal(np.signbit(got), bits)


def test_int8_codes_in_range_and_max_exact():
    x = _data(2, 500, seed=8)
    _scale, q = ops.int8_encode(x)
    assert q.min() >= -127 and q.max() <= 127
    j = np.abs(x).argmax(axis=1)
    np.testing.assert_array_equal(np.abs(q[np.arange(2), j]), [127, 127])


def test_qsgd_zero_row():
    norm, packed = ops.qsgd_encode(np.zeros((2, 9), np.float32), 3)
    assert np.all(norm == 0)
    assert np.all(ops.qsgd_decode(norm, packed, 3, 9) == 0)


@pytest.mark.parametrize("name,kw,dkw", CASES)
def test_input_errors(name, kw, dkw):
    x = _data(2, 40)
    with pytest.raises(TypeError, match="x must have dtype float32"):
        _encode(ops, name, x.astype(np.float64), kw)
    with pytest.raises(ValueError, match="x must be C-contiguous"):
        _encode(ops, name, x[:, ::2], kw)
    for bad in (np.nan, np.inf, -np.inf):
        y = x.copy()
        y[1, 17] = bad
        with pytest.raises(ValueError, match="x must be finite"):
            _encode(ops, name, y, kw)


def test_parameter_errors():
    x = _data(1, 10)
    for levels in (0, 128, 2.0, True):
        with pytest.raises(ValueError, match="levels"):
            ops.qsgd_encode(x, levels)
    with pytest.raises(ValueError, match="bits must be 4 or 8"):
        ops.bucket_encode(x, 2, 16)
    with pytest.raises(ValueError, match="bucket"):
        ops.bucket_encode(x, 4, 0)
    with pytest.raises(ValueError, match="seed"):
        ops.int8_encode(x, seed=-1)
    with pytest.raises(ValueError, match=r"packed must have shape \(1, 10\)"):
        ops.qsgd_decode(np.ones(1, np.float32), np.zeros((1, 9), np.uint8), 127, 10)
    with pytest.raises(ValueError, match=r"norm must have shape \(1,\)"):
        ops.qsgd_decode(np.ones(2, np.float32), np.zeros((1, 10), np.uint8), 127, 10)
    for spec in ("qsgd", "qsgd:0", "qsgd:128", "qsgd:x", "bucket:4", "bucket:5:128",
                 "bucket:8:8", "bucket:8:5000", "sign:1", "int8:2"):
        with pytest.raises(ValueError, match=spec.split(":")[0]):
            make(spec)


def test_decoders_reject_bad_headers_and_codes():
    one = np.ones(1, np.float32)
    for bad in (-1.0, np.nan, np.inf):
        v = np.array([bad], np.float32)
        with pytest.raises(ValueError, match="norm must be finite"):
            ops.qsgd_decode(v, np.zeros((1, 2), np.uint8), 3, 5)
        with pytest.raises(ValueError, match="scale must be finite"):
            ops.sign_decode(v, np.zeros((1, 1), np.uint8), 5)
        with pytest.raises(ValueError, match="scale must be finite"):
            ops.int8_decode(v, np.zeros((1, 5), np.int8))
        with pytest.raises(ValueError, match="scale finite"):
            ops.bucket_decode(one[None], v[None], np.zeros((1, 3), np.uint8), 4, 16, 5)
        if bad != -1.0:
            with pytest.raises(ValueError, match="lo must be finite"):
                ops.bucket_decode(v[None], one[None], np.zeros((1, 3), np.uint8), 4, 16, 5)
    with pytest.raises(ValueError, match="level <= levels = 5"):  # level 7 > S = 5
        ops.qsgd_decode(one, np.array([[7 << 1]], np.uint8), 5, 1)
    with pytest.raises(ValueError, match=r"q in \[-127, 127\]"):
        ops.int8_decode(one, np.array([[-128]], np.int8))
    big = np.array([3e38], np.float32)
    with pytest.raises(ValueError, match="127 \\* scale finite"):
        ops.int8_decode(big, np.zeros((1, 1), np.int8))


SPECS = ["qsgd:1", "qsgd:6", "qsgd:127", "bucket:4:16", "bucket:8:17", "sign", "int8"]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("shape", [(0,), (5,), (3, 0), (3, 40), (2, 1000), (0, 7)])
def test_wire_round_trip(spec, shape):
    c = make(spec)
    x = np.random.default_rng(1).standard_normal(shape, dtype=np.float32)
    p = c.compress(x, seed=2, step=3, peer0=1)
    data = p.to_bytes()
    assert len(data) == p.nbytes
    rows = 1 if len(shape) == 1 else shape[0]
    assert p.nbytes == rows * c.row_nbytes(shape[-1])
    q = c.from_bytes(data, shape)
    np.testing.assert_array_equal(c.decompress(q), c.decompress(p))
    assert c.decompress(p).shape == shape
    if rows:
        assert p.to_bytes(row=rows - 1) == data[-c.row_nbytes(shape[-1]):]


@settings(max_examples=150, deadline=None)
@given(spec=st.sampled_from(SPECS), rows=st.integers(1, 3), dim=st.integers(0, 40),
       seed=st.integers(0, 2**16), mode=st.sampled_from(["flip", "truncate", "extend", "random"]),
       where=st.integers(0, 10**6), byte=st.integers(0, 255), bit=st.integers(0, 7))
def test_fuzzed_messages_raise_value_error_or_decode_finite(spec, rows, dim, seed, mode, where,
                                                           byte, bit):
    c = make(spec)
    x = np.random.default_rng(seed).standard_normal((rows, dim), dtype=np.float32)
    data = bytearray(c.compress(x, seed=seed).to_bytes())
    if mode == "flip" and data:
        data[where % len(data)] ^= 1 << bit
    elif mode == "truncate":
        data = data[:where % (len(data) + 1)]
    elif mode == "extend":
        data += bytes([byte]) * (1 + where % 9)
    elif mode == "random":
        data = bytearray(np.random.default_rng(where).integers(0, 256, len(data), dtype=np.uint8))
    try:
        out = c.decompress(c.from_bytes(bytes(data), (rows, dim)))
    except ValueError:
        return
    assert out.shape == (rows, dim) and out.dtype == np.float32 and np.isfinite(out).all()


@settings(max_examples=30, deadline=None)
@given(spec=st.sampled_from(SPECS), dim=st.integers(1, 30), byte=st.integers(0, 255))
def test_fuzzed_headers(spec, dim, byte):
    # Extreme header values: all-0xFF (NaN), huge, negative, denormal.
    c = make(spec)
    data = bytearray(c.compress(np.ones((1, dim), np.float32)).to_bytes())
    data[:4] = bytes([byte, byte, byte if byte < 128 else 0x7F, byte])
    try:
        out = c.decompress(c.from_bytes(bytes(data), (1, dim)))
    except ValueError:
        return
    assert np.isfinite(out).all()


def test_encoders_never_make_a_message_their_decoders_refuse(isa):
    """Issue 22: x[0, 5] = 3.4e38, x[0, 7] = -3.4e38 gave QSGD a norm of FLT_MAX whose
    127 * float32(FLT_MAX / 127) overflows, which qsgd_decode refused as malformed; int8 (scale
    FLT_MAX / 127) and buckets spanning more than FLT_MAX likewise. Near FLT_MAX the norm/scale
    is now the largest float32 whose message decodes, in C on every ISA path as in the NumPy
    reference."""
    big = np.float32(np.finfo(np.float32).max)
    x = np.zeros((4, 40), np.float32)
    x[0, 5], x[0, 7] = 3.4e38, -3.4e38
    x[1, 3] = big
    x[2, :] = big
    x[3, 0], x[3, 1] = -big, big
    for levels in (1, 4, 25, 31, 49, 100, 127):
        norm, packed = ops.qsgd_encode(x, levels)
        r_norm, r_packed = ref.qsgd_encode(x, levels)
        assert np.array_equal(norm, r_norm) and np.array_equal(packed, r_packed)
        out = ops.qsgd_decode(norm, packed, levels, x.shape[1])
        assert np.isfinite(out).all() and np.array_equal(
            out, ref.qsgd_decode(norm, packed, levels, x.shape[1]))
        assert (norm[:3] >= np.float32(3.4e38)).all()  # a few ulps below FLT_MAX at most
    scale, q = ops.int8_encode(x)
    r_scale, r_q = ref.int8_encode(x)
    assert np.array_equal(scale, r_scale) and np.array_equal(q, r_q)
    assert np.isfinite(ops.int8_decode(scale, q)).all()
    for bits, bucket in ((4, 8), (8, 16), (4, 64)):
        got = ops.bucket_encode(x, bits, bucket)
        want = ref.bucket_encode(x, bits, bucket)
        assert all(np.array_equal(a, b) for a, b in zip(got, want))
        assert np.isfinite(ops.bucket_decode(*got, bits, bucket, x.shape[1])).all()
