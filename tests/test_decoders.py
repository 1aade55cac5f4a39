"""Untrusted bytes (issue 7, points 4, 5, 6, 15): every decoder refuses what its encoder could not
have produced, bounds its work by the payload's length, and agrees with the independent NumPy
decoders of decentlearn/_reference/wire.py."""

import importlib.util
import pathlib
import struct
import tracemalloc

import numpy as np
import pytest

from decentlearn import compress
from decentlearn.compress import base as compress_base
from decentlearn._reference import stc as ref_stc
from decentlearn._reference import wire as ref_wire

ROOT = pathlib.Path(__file__).resolve().parents[1]
SPARSE = ["topk:1e-09", "randk:1e-09", "randk:1e-09:unbiased", "threshold:1.0", "stc:1e-09"]
ALL = ["none", "natural", "dither:8", "topk:0.05", "randk:0.1", "threshold:1.0", "stc:0.05",
       "qsgd:16", "bucket:8:128", "sign", "int8"]


def _pairs(idx, val, with_count: bool) -> bytes:
    head = struct.pack("<I", len(idx)) if with_count else b""
    return head + np.array(idx, "<u4").tobytes() + np.array(val, "<f4").tobytes()


# --- point 4: no int32 wrap, no dim the encoder would refuse -------------------------------------
@pytest.mark.parametrize("dim", [2**31, 2**31 + 1, 2**32 + 5])
def test_threshold_refuses_dims_above_int32(dim):
    """An index 2^31 + 3 < dim used to be narrowed to int32 (-2147483645) and accepted."""
    c = compress.make("threshold:1.0")
    with pytest.raises(ValueError, match="dim must be <= 2147483647"):
        c.from_bytes(_pairs([5, 2**31 + 3], [1.0, 2.0], True), (1, dim))


@pytest.mark.parametrize("spec", SPARSE)
@pytest.mark.parametrize("dim", [2**31, 2**32, 2**40])
def test_sparse_decoders_refuse_dims_the_encoder_refuses(spec, dim):
    c = compress.make(spec)
    with pytest.raises(ValueError, match="dim must be <= 2147483647"):
        c.from_bytes(b"\0" * 64, (1, dim))


@pytest.mark.parametrize("spec", ["topk:1e-09", "randk:1e-09", "threshold:1.0"])
def test_sparse_indices_at_the_top_of_int32(spec):
    """dim = 2^31 - 1: the last index 2^31 - 2 is kept exactly; 2^31 - 1 and above are refused.
    Compared in sparse form (the dense row would be 8 GB)."""
    dim = 2**31 - 1
    c = compress.make(spec)
    k = 3 if spec.startswith("threshold") else c.k(dim)
    good = list(range(dim - k, dim))
    blob = _pairs(good, np.arange(1, k + 1), spec.startswith("threshold"))
    p = c.from_bytes(blob, (1, dim))
    idx = p.arrays["idx"].reshape(-1)
    assert idx.dtype == np.int32 and idx.tolist() == good
    assert [r[0].tolist() for r in ref_wire.parse_sparse(spec, blob, (1, dim))] == [good]
    for bad in (dim, 2**31, 2**32 - 1):
        blob = _pairs(good[:-1] + [bad], np.arange(1, k + 1), spec.startswith("threshold"))
        with pytest.raises(ValueError, match="indices"):
            c.from_bytes(blob, (1, dim))


def test_stc_positions_at_the_top_of_int32():
    dim = 2**31 - 1
    c = compress.make("stc:1e-09")
    k = c.k(dim)
    b = ref_stc.golomb_param(k, dim)
    pos = np.arange(dim - k, dim)
    bits = ref_stc._encode_row(pos, np.zeros(k, np.uint8), dim, b)
    blob = struct.pack("<IfI", k, 0.5, bits.size) + np.packbits(bits, bitorder="little").tobytes()
    p = c.from_bytes(blob, (1, dim))
    assert p.arrays["positions"].reshape(-1).tolist() == pos.tolist()
    with pytest.raises(ValueError, match="dim must be <= 2147483647"):
        c.from_bytes(blob, (1, 2**31))


# --- point 5: work bounded by the payload --------------------------------------------------------
@pytest.mark.parametrize("spec", ALL)
def test_absurd_row_counts_are_refused_at_once(spec):
    """(10^6, 0) used to build a million empty rows (10^7 took 241 s and 6.7 GB); every decoder
    now refuses it, and (2^40, 5) / (10^7, 3), before reading a byte."""
    c = compress.make(spec)
    tracemalloc.start()
    try:
        for shape in [(2**40, 5), (10**7, 3), (60_000, 1)]:
            with pytest.raises(ValueError, match=r"truncated message \(\d+ rows .* need at least"):
                c.from_bytes(b"", shape)
        for shape in [(10**6, 0), (2**62, 0)]:  # empty messages, or a header per row
            with pytest.raises(ValueError, match="empty messages|need at least"):
                c.from_bytes(b"", shape)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # nothing proportional to the declared row count was allocated


@pytest.mark.parametrize("spec", ALL)
def test_zero_dim_rows_round_trip(spec, monkeypatch):
    monkeypatch.setattr(compress_base, "MAX_EMPTY_ROWS", 8)  # the cap's logic, on a small cap
    c = compress.make(spec)
    x = np.zeros((3, 0), np.float32)
    wire = c.compress(x).to_bytes()
    y = c.decompress(c.from_bytes(wire, (3, 0)))
    assert y.shape == (3, 0) and y.dtype == np.float32
    np.testing.assert_array_equal(ref_wire.decode(spec, wire, (3, 0)), y)
    n = compress_base.MAX_EMPTY_ROWS
    if len(wire) == 0:  # rows of empty messages: the count is capped
        assert c.from_bytes(b"", (n, 0)).n_rows == n
        with pytest.raises(ValueError, match="empty messages"):
            c.from_bytes(b"", (n + 1, 0))


def test_stc_short_code_for_a_huge_row_is_refused_before_allocating():
    """A 12-byte header claiming k = 2^30 positions (dim 2^31 - 1) used to allocate the code and
    position buffers (GBs) before the decoder found the code empty."""
    c = compress.make("stc:0.5")
    dim = 2**31 - 1
    blob = struct.pack("<IfI", c.k(dim), 1.0, 0)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="truncated|nbits"):
            c.from_bytes(blob, (1, dim))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


# --- point 6: the none decoder refuses NaN/inf like the others ----------------------------------
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_none_decoder_refuses_nonfinite(bad):
    c = compress.make("none")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    wire = bytearray(c.compress(x).to_bytes())
    wire[4 * 4:4 * 5] = np.float32(bad).tobytes()
    with pytest.raises(ValueError, match="finite"):
        c.from_bytes(bytes(wire), (2, 3))
    np.testing.assert_array_equal(c.decompress(c.from_bytes(c.compress(x).to_bytes(), (2, 3))), x)


# --- point 15: one rounding rule for stc:R, topk:R and randk:R -----------------------------------
def test_stc_keeps_as_many_as_topk():
    assert compress.make("stc:0.07").k(100) == 7 == compress.make("topk:0.07").k(100)
    x = np.random.default_rng(0).standard_normal((2, 100)).astype(np.float32)
    assert (compress.make("stc:0.07").decompress(compress.make("stc:0.07").compress(x)) != 0
            ).sum(axis=1).tolist() == [7, 7]
    for r in ["0.07", "0.1", "0.3", "0.33", "1e-07", "0.001", "0.57", "1"]:
        for dim in [0, 1, 7, 100, 1000, 12345, 10**6, 2**31 - 1]:
            ks = {compress.make(f"{n}:{r}").k(dim) for n in ("stc", "topk", "randk")}
            assert ks == {ref_wire.ratio_k(r, dim)}, (r, dim, ks)


# --- every decoder against the independent reference ---------------------------------------------
def _fuzz_module():
    spec = importlib.util.spec_from_file_location("fuzz_decoders",
                                                  ROOT / "benchmarks" / "fuzz_decoders.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_short_fuzz_campaign_agrees_with_reference_decoders():
    """600 inputs of benchmarks/fuzz_decoders.py (mutated messages, edge indices at dims near
    2^31, zero-dim shapes, absurd row counts): no mismatch, crash or over-refusal."""
    fz = _fuzz_module()
    fz.run_mutate(compress, ref_wire, fz.SPECS, 600, seed=7, report=lambda: None)
    c = fz.COUNTS
    assert c["inputs"] >= 600 and c["decoded"] > 50 and c["refused"] > 50
    assert (c["mismatches"], c["crashes"], c["over_refused"], c["reference_errors"]) == \
        (0, 0, 0, 0), fz.EXAMPLES


@pytest.mark.parametrize("spec", ["none", "natural", "dither:8", "dither:3:inf", "topk:0.05",
                                  "randk:0.1:unbiased", "threshold:1.0", "stc:0.05", "qsgd:3",
                                  "bucket:4:64", "sign", "int8"])
def test_reference_decoders_match_valid_messages(spec):
    c = compress.make(spec)
    x = np.random.default_rng(1).standard_normal((3, 257)).astype(np.float32)
    p = c.compress(x, seed=3)
    wire = p.to_bytes()
    y = c.decompress(p)
    np.testing.assert_array_equal(ref_wire.decode(spec, wire, x.shape), y)
    with pytest.raises(ValueError):
        ref_wire.decode(spec, wire[:-1], x.shape)
