"""ops.topk / randk / threshold against the NumPy reference and np.argpartition; the sparse
compressors (topk, randk, threshold): round trips, exact sizes, untrusted bytes."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decentlearn import ops
from decentlearn._reference import rng as ref_rng
from decentlearn._reference import topk as ref
from decentlearn.compress import make
from decentlearn.compress.sparse_pairs import sparse_k


def rand_x(rows, dim, seed=0, ties=False):
    x = np.random.default_rng(seed).standard_normal((rows, dim), dtype=np.float32)
    return np.round(x * 2).astype(np.float32) if ties else x


def assert_same(a, b):
    assert len(a) == len(b)
    for u, v in zip(a, b):
        assert u.dtype == v.dtype and u.shape == v.shape
        np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize("dim", [0, 1, 7, 33, 1000, 100_000])
@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("ties", [False, True])
def test_matches_reference(isa, dim, rows, ties):
    x = rand_x(rows, dim, seed=dim + rows, ties=ties)
    before = x.copy()
    for k in sorted({0, min(1, dim), dim // 3, dim}):
        assert_same(ops.topk(x, k), ref.topk(x, k))
        assert_same(ops.randk(x, k, seed=5, step=2, peer0=3), ref.randk(x, k, 5, 2, 3))
    for v in (0.0, 0.5, 2.0, np.inf):
        assert_same(ops.threshold(x, v), ref.threshold(x, v))
    np.testing.assert_array_equal(x, before)


def check_top_magnitudes(x, k, idx, val):
    """idx holds the k largest |x| (as a multiset, against np.argpartition), ascending, with ties
    at the k-th magnitude resolved to the lowest indices; val = x[idx]."""
    mag = np.abs(x)
    assert idx.shape == (k,) and np.all(np.diff(idx) > 0)
    np.testing.assert_array_equal(val, x[idx])
    if k == 0:
        return
    expect = np.sort(mag[np.argpartition(mag, -k)[-k:]])
    np.testing.assert_array_equal(np.sort(mag[idx]), expect)
    kth = expect[0]
    at = np.flatnonzero(mag == kth)
    n_eq = np.count_nonzero(mag[idx] == kth)
    np.testing.assert_array_equal(idx[mag[idx] == kth], at[:n_eq])


@pytest.mark.parametrize("dim,k", [(1, 1), (10, 3), (1000, 0), (1000, 1), (1000, 1000),
                                   (100_000, 100), (100_000, 50_000), (100_000, 99_999)])
@pytest.mark.parametrize("ties", [False, True])
def test_exactly_the_k_largest(isa, dim, k, ties):
    x = rand_x(1, dim, seed=k, ties=ties)[0]
    idx, val = ops.topk(x, k)
    check_top_magnitudes(x, k, idx[0], val[0])


def adversarial_rows(n):
    """Rows that defeat the sampled threshold: ties (zeros), spikes exactly at the sample
    positions (too few candidates: lower and refilter, then fall back), infinities."""
    rng = np.random.default_rng(7)
    sparse = np.zeros(n, np.float32)
    sparse[rng.choice(n, n // 100, replace=False)] = rng.standard_normal(n // 100)
    spikes = rng.standard_normal(n).astype(np.float32)
    spikes[np.arange(1 << 14) * n // (1 << 14)] = 1000 + np.arange(1 << 14, dtype=np.float32)
    infs = rng.standard_normal(n).astype(np.float32)
    infs[::1000] = np.inf
    infs[5::1000] = -np.inf
    return {"sparse": sparse, "spikes": spikes, "infs": infs, "normal": rand_x(1, n, 3)[0],
            "ties": rand_x(1, n, 4, ties=True)[0]}


@pytest.mark.parametrize("kind", ["sparse", "spikes", "infs", "normal", "ties"])
def test_one_long_row(kind):
    n = 2_000_000
    x = adversarial_rows(n)[kind]
    before = x.copy()
    for k in (2000, 20_000, 150_000):
        idx, val = ops.topk(x, k, n_threads=2)
        check_top_magnitudes(x, k, idx[0], val[0])
        for t in (1, 3):
            assert_same(ops.topk(x, k, n_threads=t), (idx, val))
    np.testing.assert_array_equal(x, before)


def test_long_row_matches_reference_every_isa(isa):
    x = rand_x(1, 2_000_000, 11)
    assert_same(ops.topk(x, 5000), ref.topk(x, 5000))
    assert_same(ops.randk(x, 5000, seed=1), ref.randk(x, 5000, seed=1))
    assert_same(ops.threshold(x, 3.0), ref.threshold(x, 3.0))


@pytest.mark.parametrize("rows,dim", [(1, 2_000_000), (64, 5000), (5, 300_000)])
def test_thread_count_does_not_change_bits(isa, rows, dim):
    x = rand_x(rows, dim, 2)
    k = dim // 100
    results = [(ops.topk(x, k, n_threads=t), ops.randk(x, k, seed=9, n_threads=t),
                ops.threshold(x, 2.5, n_threads=t)) for t in (1, 2, 3)]
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert_same(a, b)


def test_randk_is_uniform_distinct_and_reproducible():
    dim, k, n_seeds = 50, 5, 4000
    x = np.arange(dim, dtype=np.float32)[None, :].repeat(8, axis=0)
    counts = np.zeros(dim)
    for seed in range(n_seeds // 8):
        idx, val = ops.randk(x, k, seed=seed, step=3)
        assert np.all(np.diff(idx, axis=1) > 0)
        np.testing.assert_array_equal(val, idx.astype(np.float32))
        np.add.at(counts, idx.ravel(), 1)
    expected = n_seeds * k / dim
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 97.0  # 49 degrees of freedom, 99.99% point
    x = rand_x(4, 3000, 1)
    a = ops.randk(x, 30, seed=4, step=1, peer0=0)
    assert_same(ops.randk(x, 30, seed=4, step=1, peer0=0), a)
    b = ops.randk(x[2:], 30, seed=4, step=1, peer0=2)  # row r is peer peer0 + r
    assert_same((a[0][2:], a[1][2:]), b)
    assert not np.array_equal(ops.randk(x, 30, seed=5, step=1)[0], a[0])
    # it is the k smallest counter-RNG numbers of the row
    u = ref_rng.rng_u32_keyed(ref_rng.rng_key(4, 1, 0), np.arange(3000, dtype=np.uint64))
    np.testing.assert_array_equal(np.sort(u[a[0][0]]), np.sort(u)[:30])


def test_out_arrays_and_one_dimensional_input():
    x = rand_x(1, 500, 3)[0]
    oi, ov = np.empty(20, np.int32), np.empty(20, np.float32)
    ri, rv = ops.topk(x, 20, out_idx=oi, out_val=ov)
    assert ri is oi and rv is ov
    assert_same((oi[None], ov[None]), ref.topk(x, 20))
    assert ops.topk(x, 20)[0].shape == (1, 20)


def test_bad_input():
    x = rand_x(2, 100)
    with pytest.raises(TypeError, match="x must have dtype float32"):
        ops.topk(x.astype(np.float64), 3)
    with pytest.raises(ValueError, match="C-contiguous"):
        ops.topk(rand_x(4, 100)[:, ::2], 3)
    for bad_k in (-1, 101):
        with pytest.raises(ValueError, match=r"k must be in \[0, dim=100\]"):
            ops.topk(x, bad_k)
        with pytest.raises(ValueError, match=r"k must be in \[0, dim=100\]"):
            ops.randk(x, bad_k)
    with pytest.raises(TypeError, match="k must be an int"):
        ops.topk(x, 2.5)
    with pytest.raises(ValueError, match="seed must be an integer >= 0"):
        ops.randk(x, 3, seed=-1)
    with pytest.raises(ValueError, match="v must be a number >= 0"):
        ops.threshold(x, -1.0)
    with pytest.raises(ValueError, match="v must be a number >= 0"):
        ops.threshold(x, float("nan"))
    with pytest.raises(ValueError, match="out_idx must have shape"):
        ops.topk(x, 3, out_idx=np.empty((2, 4), np.int32))
    with pytest.raises(TypeError, match="out_val must have dtype float32"):
        ops.topk(x, 3, out_val=np.empty((2, 3), np.float64))
    with pytest.raises(ValueError, match="n_threads"):
        ops.topk(x, 3, n_threads=0)
    for n in (100, 2_000_000):  # NaN found by the direct path and by the candidate filter
        y = rand_x(1, n)
        y[0, n // 2 + 1] = np.nan
        for k in (0, 5, n // 3, n):
            with pytest.raises(ValueError, match="x must not contain NaN"):
                ops.topk(y, k)
        with pytest.raises(ValueError, match="x must not contain NaN"):
            ops.threshold(y, 1.0)
        ops.randk(y, 5)  # random-k never looks at the values it does not send


# --- compressors ------------------------------------------------------------------------------
SPECS = ["topk:0.1", "topk:1", "randk:0.05", "randk:0.3:unbiased", "threshold:1.0",
         "threshold:0"]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (3, 33), (2, 1000), (4, 0)])
def test_compressor_round_trip(spec, shape):
    c = make(spec)
    assert make(c.spec) == c
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    p = c.compress(x, seed=3, step=1)
    data = p.to_bytes()
    assert len(data) == p.nbytes
    y = c.decompress(p)
    assert y.shape == x.shape and y.dtype == np.float32
    np.testing.assert_array_equal(c.decompress(c.from_bytes(data, shape)), y)
    rows = x.reshape(shape if len(shape) == 2 else (1, shape[0]))
    if spec.startswith("topk") and rows.size:
        k = sparse_k(c.ratio, shape[-1])
        assert p.nbytes == 8 * k * rows.shape[0]
        idx = ref.topk(rows, k)[0]
        expect = np.zeros_like(rows)
        np.put_along_axis(expect, idx.astype(np.intp), np.take_along_axis(rows, idx, 1), 1)
        np.testing.assert_array_equal(y.reshape(rows.shape), expect)
    if spec.startswith("threshold"):
        keep = np.abs(x) >= c.value
        np.testing.assert_array_equal(y, np.where(keep, x, 0))
        assert p.nbytes == 4 * rows.shape[0] + 8 * keep.sum()


def test_sparse_k_and_specs():
    assert sparse_k(0.07, 100) == 7 and sparse_k(0.001, 10) == 1 and sparse_k(1, 5) == 5
    assert sparse_k(0.5, 0) == 0
    assert make("randk:0.5:unbiased").unbiased and not make("randk:0.5").unbiased
    assert not make("topk:0.5").unbiased
    for bad in ["topk", "topk:0", "topk:1.5", "topk:x", "topk:0.1:2", "randk:0.1:biased",
                "threshold", "threshold:-1", "threshold:inf", "threshold:nan", "threshold:a"]:
        with pytest.raises(ValueError):
            make(bad)


def test_randk_unbiased_averages_to_x():
    c = make("randk:0.25:unbiased")
    x = np.random.default_rng(0).standard_normal((2, 40)).astype(np.float32)
    mean = np.mean([c.decompress(c.compress(x, seed=s)) for s in range(3000)], axis=0)
    # each coordinate: mean of 3000 draws of 4 x Bernoulli(1/4) x; sd = x sqrt(3 / 3000)
    assert np.all(np.abs(mean - x) <= 6 * np.abs(x) * np.sqrt(3 / 3000) + 1e-6)


def test_compressors_reject_non_finite_values_sent():
    x = np.ones(10, np.float32)
    x[3] = np.inf
    for spec in ("topk:0.2", "threshold:0.5"):
        with pytest.raises(ValueError, match="must be finite"):
            make(spec).compress(x)


@settings(max_examples=150, deadline=None)
@given(spec=st.sampled_from(SPECS), dim=st.integers(0, 40), rows=st.integers(1, 3),
       mode=st.sampled_from(["random", "truncate", "extend", "flip"]),
       seed=st.integers(0, 2**32 - 1))
def test_untrusted_bytes(spec, dim, rows, mode, seed):
    c = make(spec)
    rng = np.random.default_rng(seed)
    shape = (rows, dim)
    good = bytearray(c.compress(rng.standard_normal(shape).astype(np.float32)).to_bytes())
    if mode == "random":
        data = rng.integers(0, 256, rng.integers(0, 2 * len(good) + 8), dtype=np.uint8).tobytes()
    elif mode == "truncate":
        data = bytes(good[:rng.integers(0, len(good) + 1)])
    elif mode == "extend":
        data = bytes(good) + rng.integers(0, 256, rng.integers(1, 9), dtype=np.uint8).tobytes()
    else:
        if good:
            pos = int(rng.integers(0, len(good)))
            good[pos] ^= 1 << int(rng.integers(0, 8))
        data = bytes(good)
    try:
        y = c.decompress(c.from_bytes(data, shape))
    except ValueError:
        return
    assert y.shape == shape and y.dtype == np.float32 and np.isfinite(y).all()


def test_parallel_select_with_ties_across_threads(isa):
    """Long row whose k-th magnitude is shared by many elements spread over the whole row: the
    candidates' select runs per thread and splits the ties in index order; 1, 2, 3 threads and the
    reference agree bit for bit."""
    x = np.round(rand_x(1, 2_000_000, 21) * 512) / np.float32(512)  # ~1,000 values per level
    for k in (20_000, 150_000):
        want, want_r = ref.topk(x, k), ref.randk(x, k, 3, 1, 0)
        for t in (1, 2, 3):
            assert_same(ops.topk(x, k, n_threads=t), want)
            assert_same(ops.randk(x, k, seed=3, step=1, n_threads=t), want_r)


def test_candidate_buffers_kept_between_calls_of_any_size(isa):
    """The filter's candidate buffers are kept per thread and reused by the next call, bigger or
    smaller, on 1 or 2 threads: every call still agrees with the reference, at k = 0.1% and 1%
    (the dense AVX2 emission, whose histogram feeds the select) and with ties at the k-th."""
    rows = {n: rand_x(1, n, seed=n % 97) for n in (100_000, 1_500_000)}
    rows["ties"] = np.round(rand_x(1, 1_000_000, 5) * 256) / np.float32(256)
    want = {}
    for key, x in rows.items():
        for ratio in (0.01, 0.001, 0.05):
            k = int(ratio * x.shape[1])
            want[key, k] = ref.topk(x, k)
    for t in (1, 2):
        for (key, k), w in want.items():
            assert_same(ops.topk(rows[key], k, n_threads=t), w)


def test_nan_among_the_candidates_of_a_long_row(isa):
    """A NaN off the sample positions reaches the select only as a candidate: found from the
    filter's histogram (the lowest NaN payloads share the infinity's bin and are checked one by
    one), on every thread count; infinities alone are ordinary magnitudes."""
    n = 1_000_000
    x = rand_x(1, n, 8)
    x[0, 123_457] = np.inf
    x[0, 777_777] = -np.inf
    for k in (n // 100, n // 1000):
        w = ref.topk(x, k)
        for t in (1, 2, 3):
            assert_same(ops.topk(x, k, n_threads=t), w)
    for bits in (0x7FC00000, 0x7F800001, 0xFF800001):  # quiet NaN, the lowest payloads
        y = x.copy()
        y.view(np.uint32)[0, n // 2 + 1] = bits  # n // 2 + 1 is not a sample position
        for k in (n // 100, n // 1000):
            for t in (1, 2):
                with pytest.raises(ValueError, match="x must not contain NaN"):
                    ops.topk(y, k, n_threads=t)


@pytest.mark.slow
def test_candidates_beyond_the_kept_buffer_size():
    """A row whose candidates need more than the 64 MiB each thread keeps between calls: the
    buffer is allocated for the call alone, with the same result on 1 and 2 threads."""
    x = rand_x(1, 24_000_000, 12)
    k = 10_000_000
    w = ref.topk(x, k)
    for t in (1, 2):
        assert_same(ops.topk(x, k, n_threads=t), w)


@pytest.mark.parametrize("rows,k,dim", [(0, 3, 10), (3, 0, 10), (1, 0, 0), (5, 7, 7),
                                        (64, 819, 8192), (3, 40, 100_000)])
def test_scatter_matches_put_along_axis(rows, k, dim):
    """ops.scatter (the sparse decoders' dense rows) against np.put_along_axis: unique sorted
    indices as top-k sends them, and repeated ones in any order (the last value wins)."""
    rng = np.random.default_rng(rows * k + dim)
    val = rng.standard_normal((rows, k)).astype(np.float32)
    uniq = np.sort(np.argsort(rng.random((rows, dim)), axis=1)[:, :k], axis=1).astype(np.int32)
    rep = rng.integers(0, max(dim, 1), (rows, k)).astype(np.int32) if dim else uniq
    for idx in (uniq, rep):
        want = ref.scatter(idx, val, dim)
        for nt in (1, 2, 5):
            out = np.full((rows, dim), np.nan, np.float32)  # every entry written
            got = ops.scatter(idx, val, dim, out=out, n_threads=nt)
            assert got is out
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_scatter_refuses_indices_out_of_range_and_writes_nothing():
    idx = np.array([[0, 3], [1, 4]], np.int32)
    val = np.ones((2, 2), np.float32)
    for bad in (4, -1):
        idx2 = idx.copy()
        idx2[1, 1] = bad
        out = np.full((2, 4), 7.0, np.float32)
        with pytest.raises(ValueError, match=r"scatter: idx must hold column indices in \[0, dim\)"):
            ops.scatter(idx2, val, 4, out=out)
        assert (out == 7.0).all()
        with pytest.raises(ValueError, match="idx must hold column indices"):
            ref.scatter(idx2, val, 4)
    with pytest.raises(ValueError, match="val must have shape"):
        ops.scatter(idx, np.ones((2, 1), np.float32), 4)
    with pytest.raises(TypeError, match="idx must have dtype int32"):
        ops.scatter(idx.astype(np.int64), val, 4)
    with pytest.raises(ValueError, match="dim must be an int >= 0"):
        ops.scatter(idx, val, -1)


def _short_rows(kind, rows, dim, seed):
    """Rows for the short-row paths (tiny: < 512 elements, small: a sampled threshold, one
    filter pass, a radix select of the candidates; the per-row radix select when that fails)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, dim), dtype=np.float32)
    if kind == "ties":  # few distinct magnitudes: the k-th value shared by many
        x = np.round(x).astype(np.float32)
    elif kind == "equal":  # every magnitude equal, signs mixed, -0.0 and 0.0 among them
        x = np.where(rng.random((rows, dim)) < 0.5, -1.0, 1.0).astype(np.float32)
    elif kind == "zeros":  # mostly zeros: the sampled threshold is 0, the guess gives up
        x[rng.random((rows, dim)) < 0.97] = 0.0
        x[:, ::7] = -0.0
    elif kind == "spikes":  # a few huge values the sample misses
        x[:, rng.integers(0, dim, 3)] = 1e30
    elif kind == "infs":
        x[:, ::97] = np.inf
        x[:, 5::101] = -np.inf
    elif kind == "wide":  # magnitudes over the whole float range
        x = (x * np.exp(rng.uniform(-80, 80, (rows, dim)))).astype(np.float32)
    return x


@pytest.mark.parametrize("kind", ["normal", "ties", "equal", "zeros", "spikes", "infs", "wide"])
@pytest.mark.parametrize("dim", [1, 9, 300, 511, 512, 513, 4096, 9610, 65536])
def test_short_rows_match_reference(isa, kind, dim):
    x = _short_rows(kind, 4, dim, dim)
    for k in sorted({0, 1, max(1, dim // 100), dim // 10, dim // 2, dim - 1, dim} - {-1}):
        if not 0 <= k <= dim:
            continue
        want = ref.topk(x, k)
        for nt in (1, 3):
            assert_same(ops.topk(x, k, n_threads=nt), want)


@pytest.mark.parametrize("dim", [300, 5000])
def test_short_rows_refuse_nan_wherever_it_is(isa, dim):
    """A NaN the sample sees, one it misses (it passes the filter: its score is the highest),
    and one in a tiny row: ValueError, as the reference."""
    for pos in (0, 1, dim // 2, dim - 1):
        x = _short_rows("normal", 2, dim, pos)
        x[1, pos] = np.nan
        with pytest.raises(ValueError, match="NaN"):
            ops.topk(x, dim // 10)
        with pytest.raises(ValueError, match="NaN"):
            ref.topk(x, dim // 10)


@pytest.mark.parametrize("dim", [1, 9, 300, 511, 512, 4096, 9610, 65536])
def test_short_rows_randk_matches_reference(isa, dim):
    """Random-k of short rows (an analytic threshold, one vectorized pass of the counter
    generator, a radix select of the candidates) picks the reference's indices, whatever the
    thread count; k from 0 to dim (every score passing when k is close to dim)."""
    x = _short_rows("normal", 5, dim, dim)
    for k in sorted({0, 1, max(1, dim // 100), dim // 10, dim // 2, dim - 1, dim}):
        if not 0 <= k <= dim:
            continue
        want = ref.randk(x, k, seed=3, step=7, peer0=11)
        for nt in (1, 3):
            assert_same(ops.randk(x, k, seed=3, step=7, peer0=11, n_threads=nt), want)
