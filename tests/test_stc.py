"""Sparse Ternary Compression: the C Golomb/Rice coder equals its NumPy reference bit for bit and
rejects every malformed code; the stc compressor round-trips through its wire format."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decentlearn import compress, ops
from decentlearn._reference import stc as ref
from decentlearn.compress import stc as stc_mod

DIMS = [0, 1, 7, 33, 1000, 100_000]


def random_rows(rng, rows, k, dim):
    """(positions, negative): uniformly random sorted k-subsets of [0, dim) and random signs."""
    pos = np.stack([np.sort(rng.choice(dim, k, replace=False)) for _ in range(rows)]) \
        if rows else np.zeros((0, k))
    neg = rng.integers(0, 2, (rows, k)).astype(np.uint8)
    return np.ascontiguousarray(pos.reshape(rows, k), dtype=np.int32), neg


# --- the Golomb/Rice coder ---------------------------------------------------------------------

def test_golomb_param():
    # b* = 1 + floor(log2(log(0.618) / log(1 - p))): p = 0.01 -> log2(47.9) = 5.58 -> 6
    assert ops.golomb_param(1, 100) == 6
    assert ops.golomb_param(10_000, 1_000_000) == 6
    assert ops.golomb_param(1_000, 1_000_000) == 9
    assert ops.golomb_param(0, 10) == 0 and ops.golomb_param(10, 10) == 0
    assert ops.golomb_param(1, 2**31 - 1) == 30  # 1 + floor(log2(0.481 * 2**31))
    for dim in (1, 7, 33, 1000, 100_000):
        for k in range(0, dim + 1, max(1, dim // 97)):
            assert ops.golomb_param(k, dim) == ref.golomb_param(k, dim)
    with pytest.raises(ValueError, match="k must be in"):
        ops.golomb_param(11, 10)


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("rows", [1, 3])
def test_codec_matches_reference(isa, dim, rows):
    rng = np.random.default_rng(dim + rows)
    for k in sorted({min(dim, 1), dim // 1000, dim // 50, dim // 3, dim}):
        for b in {ops.golomb_param(k, dim), 0, 3, int(rng.integers(0, 32))}:
            pos, neg = random_rows(rng, rows, k, dim)
            pos0, neg0 = pos.copy(), neg.copy()
            data, nbits = ops.golomb_encode(pos, neg, dim, b, n_threads=1)
            rdata, rnbits = ref.golomb_encode(pos, neg, dim, b)
            np.testing.assert_array_equal(data, rdata)
            np.testing.assert_array_equal(nbits, rnbits)
            assert data.shape == (rows, ops.golomb_max_bytes(k, dim, b))
            for t in (2, 3):
                d2, n2 = ops.golomb_encode(pos, neg, dim, b, n_threads=t)
                np.testing.assert_array_equal(d2, data)
                np.testing.assert_array_equal(n2, nbits)
            np.testing.assert_array_equal(pos, pos0)
            np.testing.assert_array_equal(neg, neg0)
            data0 = data.copy()
            for t in (1, 2, 3):
                p2, s2 = ops.golomb_decode(data, nbits, k, dim, b, n_threads=t)
                np.testing.assert_array_equal(p2, pos)
                np.testing.assert_array_equal(s2, neg)
            np.testing.assert_array_equal(data, data0)
            if k * (b + 2) + (dim >> b) < 50_000:  # the Python decoder is slow
                rp, rs = ref.golomb_decode(data, nbits, k, dim, b)
                np.testing.assert_array_equal(rp, pos)
                np.testing.assert_array_equal(rs, neg)


def test_codec_many_rows_threads():
    rng = np.random.default_rng(5)
    pos, neg = random_rows(rng, 256, 300, 20_000)  # above the one-thread cut-off
    b = ops.golomb_param(300, 20_000)
    data, nbits = ops.golomb_encode(pos, neg.astype(bool), 20_000, b, n_threads=1)
    for t in (2, 3):
        d2, n2 = ops.golomb_encode(pos, neg, 20_000, b, n_threads=t)
        np.testing.assert_array_equal(d2, data)
        np.testing.assert_array_equal(n2, nbits)
        p2, s2 = ops.golomb_decode(data, nbits, 300, 20_000, b, n_threads=t)
        np.testing.assert_array_equal(p2, pos)
        np.testing.assert_array_equal(s2, neg)
    bad = nbits.copy()
    bad[77] += 1  # one malformed row fails the batch, whatever the threads
    for t in (1, 2, 3):
        with pytest.raises(ValueError, match="malformed"):
            ops.golomb_decode(data, bad, 300, 20_000, b, n_threads=t)


@pytest.mark.parametrize("dim,k,b", [(2_000_000, 100_000, 3), (1_000_000, 32_768, 0),
                                     (600_000, 40_001, 31)])
def test_codec_one_long_row_in_chunks(dim, k, b):
    """One row of >= 2 chunks (16,384 positions) is coded on several threads in fixed chunks at
    prefix bit offsets, the bytes shared by two chunks merged afterwards: the reference's bytes
    for every thread count (b = 0: chunk offsets land on every bit phase), and a bad position in
    a later chunk is still refused."""
    rng = np.random.default_rng(dim + k)
    pos = np.sort(rng.choice(dim, k, replace=False)).astype(np.int32)[None]
    neg = (rng.random((1, k)) < 0.5).astype(np.uint8)
    rdata, rnbits = ref.golomb_encode(pos, neg, dim, b)
    for t in (1, 2, 3):
        data, nbits = ops.golomb_encode(pos, neg, dim, b, n_threads=t)
        np.testing.assert_array_equal(data, rdata)
        np.testing.assert_array_equal(nbits, rnbits)
    bad = pos.copy()
    bad[0, 20_000] = bad[0, 19_999]  # second chunk
    for t in (1, 2):
        with pytest.raises(ValueError, match="positions"):
            ops.golomb_encode(bad, neg, dim, b, n_threads=t)
    late = pos.copy()
    late[0, -1] = dim  # last chunk, out of range
    with pytest.raises(ValueError, match="positions"):
        ops.golomb_encode(late, neg, dim, b, n_threads=2)


def test_codec_one_row_and_hand_example():
    # b = 2: pos 0 (gap 0) "0 00 1", pos 3 (gap 2) "0 01 0", pos 4 (gap 0) "0 00 0",
    # pos 100 (gap 95 = 23 * 4 + 3) 23 ones "0 11 1": 39 bits, LSB first.
    pos = np.array([0, 3, 4, 100], np.int32)
    neg = np.array([True, False, False, True])
    data, nbits = ops.golomb_encode(pos, neg, 200, 2)
    assert data.ndim == 1 and int(nbits) == 39
    assert data[:5].tolist() == [0b01001000, 0xF0, 0xFF, 0xFF, 0b01110111]
    assert not data[5:].any()
    p, s = ops.golomb_decode(data, nbits, 4, 200, 2)
    assert p.tolist() == [0, 3, 4, 100] and s.tolist() == [1, 0, 0, 1]


@pytest.mark.parametrize("p", [0.001, 0.01, 0.1])
def test_bits_per_position_match_closed_form(p):
    """Mean Golomb bits per kept position, EXCLUDING the sign bit, on a uniformly random k-subset
    of a large dim, is within 1% of b* + 1 / (1 - (1 - p)^(2^b*)) (Sattler et al.)."""
    dim = 4_000_000 if p < 0.1 else 1_000_000
    k = int(p * dim)
    rng = np.random.default_rng(int(1 / p))
    pos = np.sort(rng.choice(dim, k, replace=False)).astype(np.int32)
    b = ops.golomb_param(k, dim)
    _, nbits = ops.golomb_encode(pos, np.zeros(k, np.uint8), dim, b)
    measured = int(nbits) / k - 1
    expected = ref.expected_bits_per_position(k / dim, b)
    assert abs(measured / expected - 1) < 0.01, (measured, expected)


def test_encode_errors():
    pos = np.array([[1, 5, 9]], np.int32)
    neg = np.zeros((1, 3), np.uint8)
    with pytest.raises(TypeError, match="positions must have dtype int32"):
        ops.golomb_encode(pos.astype(np.int64), neg, 10, 2)
    with pytest.raises(TypeError, match="negative must have dtype uint8"):
        ops.golomb_encode(pos, neg.astype(np.int32), 10, 2)
    with pytest.raises(ValueError, match="positions must be C-contiguous"):
        ops.golomb_encode(np.zeros((3, 2), np.int32).T, np.zeros((2, 3), np.uint8), 10, 2)
    with pytest.raises(ValueError, match="strictly increasing"):
        ops.golomb_encode(np.array([[1, 1, 9]], np.int32), neg, 10, 2)
    with pytest.raises(ValueError, match="strictly increasing"):
        ops.golomb_encode(np.array([[1, 5, 10]], np.int32), neg, 10, 2)
    with pytest.raises(ValueError, match="strictly increasing"):
        ops.golomb_encode(np.array([[-1, 5, 9]], np.int32), neg, 10, 2)
    with pytest.raises(ValueError, match="k <= dim"):
        ops.golomb_encode(pos, neg, 2, 2)
    with pytest.raises(ValueError, match=r"b must be in \[0, 31\]"):
        ops.golomb_encode(pos, neg, 10, 32)
    with pytest.raises(ValueError, match="negative must have shape"):
        ops.golomb_encode(pos, np.zeros((1, 2), np.uint8), 10, 2)
    with pytest.raises(TypeError, match="dim must be an int"):
        ops.golomb_encode(pos, neg, 10.0, 2)
    with pytest.raises(ValueError, match="n_threads"):
        ops.golomb_encode(pos, neg, 10, 2, n_threads=0)


def test_decode_argument_errors():
    data, nbits = ops.golomb_encode(np.array([[1, 5]], np.int32), np.zeros((1, 2), np.uint8), 10, 1)
    with pytest.raises(TypeError, match="data must have dtype uint8"):
        ops.golomb_decode(data.astype(np.int8), nbits, 2, 10, 1)
    with pytest.raises(TypeError, match="nbits must have dtype int64"):
        ops.golomb_decode(data, nbits.astype(np.int32), 2, 10, 1)
    with pytest.raises(ValueError, match="nbits must have shape"):
        ops.golomb_decode(data, np.zeros(2, np.int64), 2, 10, 1)
    with pytest.raises(ValueError, match="k <= dim"):
        ops.golomb_decode(data, nbits, 11, 10, 1)


def malformed(data, nbits, k, dim, b):
    """Asserts both decoders reject the code with ValueError."""
    with pytest.raises(ValueError, match="malformed encoded data"):
        ops.golomb_decode(data, nbits, k, dim, b)
    with pytest.raises(ValueError):
        ref.golomb_decode(np.atleast_2d(data), np.atleast_1d(nbits), k, dim, b)


def test_decode_rejects_malformed_codes():
    rng = np.random.default_rng(1)
    dim, k = 500, 20
    b = ops.golomb_param(k, dim)
    pos, neg = random_rows(rng, 1, k, dim)
    data, nbits = ops.golomb_encode(pos, neg, dim, b)
    n = int(nbits[0])

    def nb(v):
        return np.array([v], np.int64)

    # wrong nbits: too few (truncated), too many, beyond the buffer, negative
    for wrong in (0, n - 1, n - 8, n + 1, n + 8, 8 * data.shape[1] + 1, -1):
        malformed(data, nb(wrong), k, dim, b)
    # truncated buffer: the bytes that hold the code are cut
    cut = data[:, :(n + 7) // 8 - 1].copy()
    malformed(cut, nbits, k, dim, b)
    # wrong k for a good code
    malformed(data, nbits, k - 1, dim, b)
    malformed(data, nbits, k + 1, dim, b)
    # non-zero padding
    if n % 8:
        bad = data.copy()
        bad[0, n // 8] |= 1 << (n % 8)
        malformed(bad, nbits, k, dim, b)
    # a unary run longer than dim, and a remainder that lands on dim (positions >= dim)
    ones = np.full((1, 64), 0xFF, np.uint8)
    malformed(ones, nb(8 * 64), 1, 100, 0)
    malformed(ones, nb(8 * 64), 1, 2**31 - 1, 31)  # 32 ones then "remainder": beyond dim
    # dim = 5, b = 2, k = 1: gap 5 = q 1, r 1 -> position 5: "1 0 10 0" = 0b00101
    malformed(np.array([[0b00101]], np.uint8), nb(5), 1, 5, 2)
    ops.golomb_decode(np.array([[0b00001]], np.uint8), nb(5), 1, 5, 2)  # gap 4: position 4 is fine
    # a second position after the last valid index
    d2, n2 = ops.golomb_encode(np.array([[4]], np.int32), np.zeros((1, 1), np.uint8), 5, 0)
    bits = np.unpackbits(d2[0], bitorder="little")[:int(n2[0])]
    twice = np.packbits(np.concatenate([bits, [0, 0]]), bitorder="little")[None]
    malformed(twice, nb(bits.size + 2), 2, 5, 0)
    # k = 0 needs nbits = 0
    malformed(np.zeros((1, 1), np.uint8), nb(1), 0, 5, 0)
    ops.golomb_decode(np.zeros((1, 0), np.uint8), nb(0), 0, 0, 0)


def test_every_single_bit_flip_is_rejected_or_canonical():
    """A flipped bit either makes the code invalid (both decoders say so) or decodes to positions
    that encode back to exactly the flipped bytes: the code is a bijection."""
    rng = np.random.default_rng(2)
    dim, k = 300, 12
    b = ops.golomb_param(k, dim)
    pos, neg = random_rows(rng, 1, k, dim)
    data, nbits = ops.golomb_encode(pos, neg, dim, b)
    valid = 0
    for bit in range(8 * data.shape[1]):
        bad = data.copy()
        bad[0, bit // 8] ^= 1 << (bit % 8)
        try:
            p2, s2 = ops.golomb_decode(bad, nbits, k, dim, b)
        except ValueError:
            with pytest.raises(ValueError):
                ref.golomb_decode(bad, nbits, k, dim, b)
            continue
        valid += 1
        rp, rs = ref.golomb_decode(bad, nbits, k, dim, b)
        np.testing.assert_array_equal(rp, p2)
        np.testing.assert_array_equal(rs, s2)
        d3, n3 = ops.golomb_encode(p2, s2, dim, b)
        assert int(n3[0]) == int(nbits[0])
        m = (int(nbits[0]) + 7) // 8
        np.testing.assert_array_equal(d3[0, :m], bad[0, :m])
    assert valid >= k  # at least the sign flips decode


# --- the stc compressor -----------------------------------------------------------------------

def test_spec_parsing():
    c = compress.make("stc:0.01")
    assert isinstance(c, stc_mod.STC) and c.ratio == 0.01 and c.spec == "stc:0.01"
    assert compress.make(c.spec).ratio == c.ratio
    assert not c.unbiased and "stc" in compress.available()
    for spec in ("stc", "stc:0", "stc:1.5", "stc:abc", "stc:0.1:3", "stc:nan"):
        with pytest.raises(ValueError, match="stc"):
            compress.make(spec)
    with pytest.raises(ValueError, match=r"ratio must be in \(0, 1\]"):
        stc_mod.STC(0.0)
    with pytest.raises(TypeError, match="ratio must be a number"):
        stc_mod.STC("0.1")
    assert [c.k(d) for d in (0, 1, 7, 100, 1000)] == [0, 1, 1, 1, 10]
    assert stc_mod.STC(1.0).k(33) == 33


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("rows", [1, 4])
@pytest.mark.parametrize("ratio", [0.01, 0.3, 1.0])
def test_compressor_matches_reference_and_round_trips(isa, dim, rows, ratio):
    rng = np.random.default_rng(dim * 7 + rows)
    x = rng.standard_normal((rows, dim)).astype(np.float32)
    x0 = x.copy()
    c = stc_mod.STC(ratio)
    p = c.compress(x, n_threads=1)
    np.testing.assert_array_equal(x, x0)
    y = c.decompress(p)
    pos, neg, mu = ref.stc_compress(x, ratio)
    np.testing.assert_array_equal(p.arrays["positions"], pos)
    np.testing.assert_array_equal(p.arrays["mu"], mu)
    np.testing.assert_array_equal(y, ref.stc_decompress(pos, neg, mu, dim))
    # exactly k non-zeros, all +-mu, on the k largest magnitudes
    k = c.k(dim)
    assert ((y != 0).sum(axis=1) == k).all()
    np.testing.assert_array_equal(np.abs(y), np.where(y != 0, mu[:, None], 0))
    if k:
        assert (np.sign(y[y != 0]) == np.sign(x[y != 0])).all()
    # wire: exact length, per-row lengths, bit-exact round trip
    wire = p.to_bytes()
    assert len(wire) == p.nbytes
    assert [len(p.to_bytes(r)) for r in range(rows)] == p.row_nbytes.tolist()
    q = c.from_bytes(wire, x.shape)
    assert q.to_bytes() == wire
    np.testing.assert_array_equal(c.decompress(q), y)
    # threads do not matter
    for t in (2, 3):
        assert c.compress(x, n_threads=t).to_bytes() == wire


def test_compressor_one_row_and_size():
    x = np.random.default_rng(3).standard_normal(100_000).astype(np.float32)
    c = compress.make("stc:0.01")
    p = c.compress(x)
    y = c.decompress(p)
    assert y.shape == x.shape and y.dtype == np.float32
    assert np.array_equal(c.decompress(c.from_bytes(p.to_bytes(), x.shape)), y)
    # about k * (b* + 1/(1-(1-p)^2^b*) + 1 sign) bits plus the 12-byte header
    k, b = 1000, ops.golomb_param(1000, 100_000)
    bound = 12 + k * (ref.expected_bits_per_position(0.01, b) + 1) / 8
    assert abs(p.nbytes / bound - 1) < 0.05


def test_compressor_input_errors():
    c = compress.make("stc:0.1")
    with pytest.raises(TypeError, match="x must have dtype float32"):
        c.compress(np.zeros((2, 10)))
    with pytest.raises(ValueError, match="C-contiguous"):
        c.compress(np.zeros((10, 2), np.float32).T)
    for bad in (np.nan, np.inf, -np.inf):
        x = np.ones((2, 50), np.float32)
        x[1, 7] = bad
        with pytest.raises(ValueError, match="finite|NaN"):
            c.compress(x)


def test_ties_go_to_lowest_indices():
    c = compress.make("stc:0.34")  # k = 3 of 6
    x = np.array([[0, 1, -1, 1, 0, 0], [0, 0, 0, 0, 0, 0]], np.float32)
    p = c.compress(x)
    assert p.arrays["positions"].tolist() == [[1, 2, 3], [0, 1, 2]]
    assert c.decompress(p).tolist() == [[0, 1, -1, 1, 0, 0], [0] * 6]
    x = np.random.default_rng(4).integers(-3, 4, (5, 200)).astype(np.float32)
    for ratio in (0.005, 0.085, 1.0):
        pos, neg, mu = ref.stc_compress(x, ratio)
        p = stc_mod.STC(ratio).compress(x)
        np.testing.assert_array_equal(p.arrays["positions"], pos)
        np.testing.assert_array_equal(p.arrays["negative"], neg)
        np.testing.assert_array_equal(p.arrays["mu"], mu)


def test_zero_rows_and_error_feedback():
    c = compress.make("stc:0.1")
    x = np.zeros((3, 40), np.float32)
    p = c.compress(x)
    assert not c.decompress(p).any()
    assert np.array_equal(c.decompress(c.from_bytes(p.to_bytes(), x.shape)), x)
    ef = compress.ErrorFeedback(compress.make("stc:0.05"))
    v = np.random.default_rng(6).standard_normal((2, 400)).astype(np.float32)
    sent = sum(ef.decompress(ef.compress(v)) for _ in range(200))
    # what is sent plus what is still owed is exactly what was fed in
    np.testing.assert_allclose(sent + ef.error, 200 * v, rtol=1e-4, atol=1e-2)


def _message(c, dim, mu=1.0, nbits=None, k=None, code=b""):
    import struct
    k = c.k(dim) if k is None else k
    nbits = 8 * len(code) if nbits is None else nbits
    return struct.pack("<IfI", k, mu, nbits) + code


def test_from_bytes_rejects_malformed_messages():
    c = compress.make("stc:0.1")
    x = np.random.default_rng(7).standard_normal((2, 100)).astype(np.float32)
    wire = c.compress(x).to_bytes()
    row0 = c.compress(x[0]).to_bytes()
    for data, what in [
        (wire[:-1], "truncated"), (wire + b"\0", "unexpected bytes"),
        (wire[:len(row0)] + wire[len(row0):][:5], "truncated"),
        (row0[:4] + np.float32(np.nan).tobytes() + row0[8:], "mu must be finite"),
        (row0[:4] + np.float32(np.inf).tobytes() + row0[8:], "mu must be finite"),
        (row0[:4] + np.float32(-1).tobytes() + row0[8:], "mu must be finite"),
        (np.uint32(9).tobytes() + row0[4:], "k must be 10"),
        (row0[:8] + np.uint32(2**32 - 1).tobytes() + row0[12:], "nbits"),
        (row0[:8] + (np.frombuffer(row0[8:12], np.uint32) - 1).tobytes() + row0[12:],
         "malformed|truncated|unexpected"),
        (_message(c, 100, code=b"\xff" * 8), "malformed"),
    ]:
        shape = x.shape if len(data) > len(row0) else (100,)
        with pytest.raises(ValueError, match=what):
            c.decompress(c.from_bytes(data, shape))


@st.composite
def mutated_messages(draw):
    rows = draw(st.integers(0, 3))
    dim = draw(st.sampled_from([0, 1, 5, 33, 200]))
    ratio = draw(st.sampled_from([0.01, 0.1, 0.5, 1.0]))
    seed = draw(st.integers(0, 2**16))
    x = np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)
    c = stc_mod.STC(ratio)
    wire = bytearray(c.compress(x).to_bytes())
    kind = draw(st.sampled_from(["random", "truncate", "extend", "flip", "flips"]))
    if kind == "random":
        wire = bytearray(draw(st.binary(max_size=200)))
    elif kind == "truncate" and wire:
        wire = wire[:draw(st.integers(0, len(wire) - 1))]
    elif kind == "extend":
        wire += draw(st.binary(min_size=1, max_size=16))
    elif wire:
        for _ in range(1 if kind == "flip" else draw(st.integers(2, 8))):
            i = draw(st.integers(0, 8 * len(wire) - 1))
            wire[i // 8] ^= 1 << (i % 8)
    return c, bytes(wire), (rows, dim)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_messages())
def test_fuzz_from_bytes_and_decompress(case):
    c, wire, shape = case
    try:
        y = c.decompress(c.from_bytes(wire, shape))
    except ValueError:
        return
    assert y.shape == shape and y.dtype == np.float32 and np.isfinite(y).all()
    # float64: a few finite float32 values near FLT_MAX overflow a float32 sum (found by
    # hypothesis: STC(1.0) rows whose mean magnitude is 3.4e38)
    assert math.isfinite(float(np.abs(y).sum(dtype=np.float64)))


def test_decoded_values_near_flt_max_are_finite():
    c = compress.make("stc:1.0")
    wire = (b"\x05\x00\x00\x00o\x93\x9d>\n\x00\x00\x00\x08\x02\x05\x00\x00\x00\x00\x97j\x7f"
            b"\n\x00\x00\x00\x80\x02")
    y = c.decompress(c.from_bytes(wire, (2, 5)))
    assert np.isfinite(y).all() and np.abs(y).max() > 1e38
    assert math.isfinite(float(np.abs(y).sum(dtype=np.float64)))


def _ternary_cases(rng):
    """(name, val) rows of kept values: ordinary, zeros and -0.0, subnormals, magnitudes spread too
    wide for an exact sum, an infinity, one long multi-chunk row, no kept values."""
    normal = rng.standard_normal((3, 1000)).astype(np.float32)
    zeros = normal.copy()
    zeros[:, ::3] = 0.0
    zeros[:, 1::7] = -0.0
    zeros[2] = 0.0
    sub = (rng.standard_normal((2, 500)) * 1e-40).astype(np.float32)
    wide = (rng.standard_normal((2, 4000)) * np.exp(rng.uniform(-40, 40, (2, 4000)))).astype(
        np.float32)
    wide[1] = np.abs(normal[0, 0])  # a row of one repeated value: exact
    inf = normal[:2].copy()
    inf[0, 5] = np.inf
    long = rng.standard_normal((1, 100_003)).astype(np.float32)
    return [("normal", normal), ("zeros", zeros), ("subnormal", sub), ("wide", wide),
            ("inf", inf), ("long", long), ("empty", np.zeros((3, 0), np.float32))]


def test_ternary_matches_reference():
    """ops.stc_ternary against the NumPy reference: signs (-0.0 is not negative), the exact flag
    by the stated rule, and on exact rows NumPy's float64 sum bit for bit (also the exactly
    rounded sum); the same bits for 1, 2 and 3 threads."""
    rng = np.random.default_rng(11)
    seen = set()
    for name, val in _ternary_cases(rng):
        sums, exact, neg = ops.stc_ternary(val, n_threads=1)
        r_sums, r_exact, r_neg = ref.stc_ternary(val)
        np.testing.assert_array_equal(neg, r_neg, err_msg=name)
        np.testing.assert_array_equal(exact, r_exact, err_msg=name)
        np.testing.assert_array_equal(sums[exact], r_sums[exact], err_msg=name)
        for r in np.flatnonzero(exact):
            assert sums[r] == math.fsum(np.abs(val[r].astype(np.float64))), (name, r)
        fin = np.isfinite(r_sums) & ~exact
        np.testing.assert_allclose(sums[fin], r_sums[fin], rtol=1e-12, err_msg=name)
        for t in (2, 3):
            s2, e2, n2 = ops.stc_ternary(val, n_threads=t)
            assert s2.tobytes() == sums.tobytes() and (e2 == exact).all() and (n2 == neg).all()
        seen.update(exact.tolist())
    assert seen == {True, False}  # both kinds of row were exercised


def test_ternary_one_row_and_errors():
    v = np.array([1.5, -2.0, -0.0, 0.25], np.float32)
    s, e, n = ops.stc_ternary(v)
    assert s.shape == () and float(s) == 3.75 and bool(e)
    np.testing.assert_array_equal(n, [0, 1, 0, 0])
    with pytest.raises(TypeError, match="val must have dtype float32"):
        ops.stc_ternary(v.astype(np.float64))


def test_compressor_mu_when_the_sum_is_not_exact():
    """Rows whose magnitudes span too wide a range for an order-free float64 sum take NumPy's
    sum: mu equals the reference's np.abs(val).sum(dtype=float64) / k bit for bit, with either
    kind of row in one matrix."""
    rng = np.random.default_rng(12)
    x = (rng.standard_normal((3, 5000)) * np.exp(rng.uniform(-60, 60, (3, 5000)))).astype(
        np.float32)
    x[1] = rng.standard_normal(5000).astype(np.float32)
    c = stc_mod.STC(0.5)
    _, val = ops.topk(x, c.k(5000))
    assert set(ops.stc_ternary(val)[1].tolist()) == {True, False}
    _, _, mu = ref.stc_compress(x, 0.5)
    for t in (1, 2):
        np.testing.assert_array_equal(c.compress(x, n_threads=t).arrays["mu"], mu)
