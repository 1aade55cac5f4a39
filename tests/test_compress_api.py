"""The contract every registered compressor keeps, checked generically.

Family-specific properties (exact top-k, Golomb bit counts, variance bounds ...) live in each
family's own test file; this file checks what all compressors promise: exact wire size, wire round
trip, thread-count and row-split independence, untouched inputs, unbiasedness where claimed, and
untrusted bytes -> ValueError.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decentlearn import compress

EXAMPLES = ["none", "natural", "dither:8", "dither:4:inf", "topk:0.05", "randk:0.1",
            "randk:0.1:unbiased", "threshold:1.5", "stc:0.05", "qsgd:16", "bucket:8:128",
            "bucket:4:512", "sign", "int8"]
EXPECTED_KINDS = sorted({s.split(":")[0] for s in EXAMPLES})
SPECS = [s for s in EXAMPLES if s.split(":")[0] in compress.available()]


def data(rows=3, dim=1001, seed=0):
    return np.random.default_rng(seed).standard_normal((rows, dim), dtype=np.float32)


def test_every_family_is_registered():
    assert sorted(set(compress.available()) & set(EXPECTED_KINDS)) == EXPECTED_KINDS


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("shape", [(1001,), (3, 1001), (2, 1), (4, 7)])
def test_wire_round_trip_and_exact_size(spec, shape):
    c = compress.make(spec)
    x = data(*((1,) + shape if len(shape) == 1 else shape)).reshape(shape)
    before = x.copy()
    p = c.compress(x, seed=5, step=3)
    np.testing.assert_array_equal(x, before)
    wire = p.to_bytes()
    assert len(wire) == p.nbytes
    assert sum(len(p.to_bytes(r)) for r in range(p.n_rows)) == p.nbytes
    q = c.from_bytes(wire, shape)
    y = c.decompress(p)
    assert y.shape == shape and y.dtype == np.float32
    np.testing.assert_array_equal(c.decompress(q), y)
    assert q.nbytes == p.nbytes


@pytest.mark.parametrize("spec", SPECS)
def test_threads_and_row_split_do_not_change_bits(spec):
    c = compress.make(spec)
    x = data(5, 20_000, seed=1)
    one = c.compress(x, seed=9, step=2, n_threads=1).to_bytes()
    assert c.compress(x, seed=9, step=2, n_threads=2).to_bytes() == one
    # Rows 2.. compressed alone with peer0=2 give the same messages (the MPI runner's case).
    full = c.compress(x, seed=9, step=2)
    part = c.compress(np.ascontiguousarray(x[2:]), seed=9, step=2, peer0=2)
    assert part.to_bytes() == b"".join(full.to_bytes(r) for r in range(2, 5))


@pytest.mark.parametrize("spec", [s for s in SPECS if compress.make(s).unbiased])
def test_unbiased_on_average(spec):
    """E[decompress(compress(x))] = x, tested on 8 random projections of the error over 3000 seeds:
    each projection's mean within 5 standard errors of 0. (Per-element sample standard errors are
    unreliable when a rounding outcome is rare; the families' own tests use theoretical ones.)"""
    c = compress.make(spec)
    x = data(1, 64, seed=3)
    errors = np.stack([(c.decompress(c.compress(x, seed=s)) - x).ravel()
                       for s in range(3000)]).astype(np.float64)
    w = np.random.default_rng(0).standard_normal((64, 8))
    proj = errors @ w
    se = proj.std(axis=0, ddof=1) / np.sqrt(len(proj))
    assert np.all(np.abs(proj.mean(axis=0)) <= 5 * se + 1e-6)


@pytest.mark.parametrize("spec", SPECS)
def test_error_feedback_telescopes(spec):
    """sum_t x_t == sum_t decompress(message_t) + final residual (nothing is lost, only delayed)."""
    ef = compress.ErrorFeedback(compress.make(spec))
    sent = np.zeros((2, 300))
    total = np.zeros((2, 300))
    for t in range(6):
        x = data(2, 300, seed=10 + t)
        total += x
        sent += ef.decompress(ef.compress(x, seed=1, step=t))
    np.testing.assert_allclose(sent + ef.error, total, rtol=0, atol=1e-4)


def _mutations(wire: bytes, rng: np.random.Generator):
    yield wire[: rng.integers(0, len(wire) + 1)]              # truncated
    yield wire + bytes(rng.integers(0, 256, rng.integers(1, 9), dtype=np.uint8))  # extended
    b = bytearray(wire)
    for _ in range(rng.integers(1, 4)):                        # bit flips
        if b:
            i = rng.integers(0, len(b))
            b[i] ^= 1 << rng.integers(0, 8)
    yield bytes(b)
    yield bytes(rng.integers(0, 256, rng.integers(0, 2 * len(wire) + 8), dtype=np.uint8))


def _decode_or_reject(c, blob, shape):
    """from_bytes + decompress: a ValueError from either, or a float32 array of the shape."""
    try:
        y = c.decompress(c.from_bytes(blob, shape))
    except ValueError:
        return
    assert y.shape == shape and y.dtype == np.float32


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), dim=st.integers(1, 300), rows=st.integers(1, 3))
def test_untrusted_bytes_raise_value_error_or_decode(spec, seed, dim, rows):
    c = compress.make(spec)
    rng = np.random.default_rng(seed)
    shape = (rows, dim)
    wire = c.compress(data(rows, dim, seed=seed % 1000), seed=seed).to_bytes()
    for blob in _mutations(wire, rng):
        _decode_or_reject(c, blob, shape)


@pytest.mark.parametrize("spec", ["topk:0", "topk:1.5", "topk:x", "qsgd:0", "bucket:3:128",
                                  "bucket:8:7", "dither:0", "nope", "natural:3", ""])
def test_bad_specs(spec):
    with pytest.raises(ValueError):
        compress.make(spec)


def test_compress_input_checks():
    c = compress.make("none")
    with pytest.raises(TypeError, match="x must have dtype float32"):
        c.compress(np.zeros(4))
    with pytest.raises(ValueError, match="C-contiguous"):
        c.compress(np.zeros((4, 4), np.float32)[:, ::2])
    with pytest.raises(ValueError, match="seed must be an integer >= 0"):
        c.compress(np.zeros(4, np.float32), seed=-1)
    with pytest.raises(ValueError, match="was not made by"):
        compress.make("none").decompress("not a payload")


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("shape", [(3, 1001), (1001,), (2, 1)])
def test_decompress_into_out_is_the_fresh_decode(spec, shape):
    """decompress(payload, out=buf) fills every value of buf (NaN before) with the bits of a fresh
    decode and returns buf itself: runs decoding every round reuse their buffers."""
    c = compress.make(spec)
    x = data(*((1,) + shape if len(shape) == 1 else shape)).reshape(shape)
    p = c.compress(x, seed=4, step=1)
    fresh = c.decompress(p)
    buf = np.full(shape, np.nan, dtype=np.float32)
    got = c.decompress(p, out=buf)
    assert got is buf
    assert got.tobytes() == fresh.tobytes()


@pytest.mark.parametrize("out, what", [
    (np.zeros((3, 100), np.float64), "float64"),
    (np.zeros((3, 99), np.float32), r"\(3, 99\)"),
    (np.zeros((100, 3), np.float32).T, "not C-contiguous"),
    (np.zeros(300, np.float32), r"\(300,\)"),
    ([[0.0] * 100] * 3, "list"),
])
def test_decompress_refuses_a_wrong_out(out, what):
    c = compress.make("sign")
    p = c.compress(data(3, 100))
    with pytest.raises(ValueError, match=rf"out must be .*\(3, 100\).*{what}"):
        c.decompress(p, out=out)
    ro = np.zeros((3, 100), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="out must be a writeable.*read-only"):
        c.decompress(p, out=ro)


@pytest.mark.parametrize("spec", SPECS)
def test_error_feedback_keeps_the_decoded_message_in_reused_buffers(spec):
    """ef.decoded is decompress(message) bit for bit; x + e and the decoded message go into the
    same arrays every call (no fresh pages per round), and the residual is what it was before the
    buffers were kept: (x + e) - decoded, in NumPy's float32."""
    ef = compress.ErrorFeedback(compress.make(spec))
    e = np.zeros((2, 300), np.float32)
    kept = None
    for t in range(3):
        x = data(2, 300, seed=20 + t)
        corrected = x + e
        p = ef.compress(x, seed=2, step=t)
        np.testing.assert_array_equal(ef.decoded, ef.decompress(p))
        e = corrected - ef.decompress(p)
        assert ef.error.tobytes() == e.tobytes()
        if kept is not None:
            assert ef.decoded is kept[0] and ef._corrected is kept[1]
        kept = (ef.decoded, ef._corrected)


@pytest.mark.parametrize("spec", SPECS)
def test_error_feedback_reads_a_column_block_in_place(spec):
    """x as one tensor's columns of a wider matrix (rows contiguous, apart: CompNGC's per-tensor
    messages): the same payloads, residuals and decoded messages, bit for bit, as on contiguous
    copies of the block, round after round, in the reused buffers."""
    ef, ef_copy = (compress.ErrorFeedback(compress.make(spec)) for _ in range(2))
    for t in range(3):
        wide = data(5, 700, seed=30 + t)
        block = wide[:, 123:423]
        p = ef.compress(block, seed=3, step=t, n_threads=2)
        q = ef_copy.compress(np.ascontiguousarray(block), seed=3, step=t)
        assert p.to_bytes() == q.to_bytes()
        assert ef.error.tobytes() == ef_copy.error.tobytes()
        assert ef.decoded.tobytes() == ef_copy.decoded.tobytes()
        assert ef.error.flags.c_contiguous and ef._corrected is not None
