"""The limit kernels of decentlearn.experiments.bench: the streaming copy against np.copyto, the int8 peak
loop's operation count against its closed form; bench's timing and table helpers."""

import platform

import numpy as np
import pytest

from decentlearn import ops
from decentlearn._reference import copy as ref_copy
from decentlearn._reference import peak as ref_peak
from decentlearn.experiments import bench
from decentlearn.outputs.format import format_table


@pytest.mark.parametrize("n", [0, 1, 7, 33, 1000, 100_000, (1 << 16) * 3 + 5])
@pytest.mark.parametrize("offset", [0, 1, 3])
def test_copy_matches_copyto(n, offset):
    src = np.random.default_rng(n).standard_normal(n, dtype=np.float32)
    for threads in (1, 2):
        buf = np.full(n + offset + 4, -1.0, np.float32)
        dst = buf[offset:offset + n]  # dst not 16-byte aligned for offset 1, 3
        want = np.full_like(buf, -1.0)
        ref_copy.copy_f32(src, want[offset:offset + n])
        out = ops.copy_f32(src, dst, n_threads=threads)
        assert out is dst
        np.testing.assert_array_equal(buf, want)  # nothing written outside dst


@pytest.mark.parametrize("n", [0, 1, 7, 33, 100_000, (1 << 16) * 3 + 5])
def test_read_matches_xor_reduce(n):
    buf = np.random.default_rng(n).standard_normal(n + 1, dtype=np.float32)
    for src in (buf[:n], buf[1:]):  # aligned and 4 bytes off
        for threads in (1, 2):
            assert ops.read_f32(src, n_threads=threads) == ref_copy.read_f32(src)
    with pytest.raises(TypeError, match="src must have dtype float32"):
        ops.read_f32(buf.astype(np.float64))


def test_copy_shapes_and_errors():
    src = np.arange(12, dtype=np.float32).reshape(3, 4)
    dst = np.empty(12, np.float32)
    np.testing.assert_array_equal(ops.copy_f32(src, dst), src.ravel())
    with pytest.raises(TypeError, match="src must have dtype float32"):
        ops.copy_f32(src.astype(np.float64), dst)
    with pytest.raises(ValueError, match="dst must have src's size 12, got 11"):
        ops.copy_f32(src, dst[:11])
    with pytest.raises(ValueError, match="C-contiguous"):
        ops.copy_f32(src, np.empty(24, np.float32)[::2])
    with pytest.raises(ValueError, match="overlap"):
        ops.copy_f32(dst[:6], dst[3:9])
    with pytest.raises(TypeError, match="numpy arrays"):
        ops.copy_f32([1.0], dst)
    ro = np.empty(12, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="dst must be writeable"):
        ops.copy_f32(src, ro)


def test_peak_ops_closed_form(isa):
    want_isa = isa if platform.machine().lower() in ("x86_64", "amd64") else None
    for reps in (0, 1, 1000):
        for threads in (1, 2):
            n_ops, check = ops.peak_s8(reps, n_threads=threads)
            if want_isa is not None:
                assert n_ops == ref_peak.peak_ops(want_isa, reps, threads)
            assert isinstance(check, int)
    # the checksum is a pure function of (reps, thread ids): same for the same call
    assert ops.peak_s8(100, n_threads=2) == ops.peak_s8(100, n_threads=2)
    with pytest.raises(ValueError, match="reps"):
        ops.peak_s8(-1)


def test_peak_window_counts_whole_chunks(isa):
    """peak_s8_window: every thread runs whole chunks (each peak_s8(chunk, 1)'s closed-form count)
    until the window ends, so the count is a multiple of one chunk's, at least one per thread,
    and the window lasts at least the time asked."""
    want_isa = isa if platform.machine().lower() in ("x86_64", "amd64") else None
    for threads in (1, 2, 3):
        n_ops, elapsed, check = ops.peak_s8_window(3, 0.002, n_threads=threads)
        one = ops.peak_s8(3, n_threads=1)[0]
        if want_isa is not None:
            assert one == ref_peak.peak_ops(want_isa, 3, 1)
        assert n_ops % one == 0 and n_ops >= threads * one
        assert elapsed >= 0.002 and isinstance(check, int)
    n_ops, elapsed, _ = ops.peak_s8_window(1, 0, n_threads=2)  # a zero window: one chunk each
    assert n_ops == 2 * ops.peak_s8(1, n_threads=1)[0] and elapsed >= 0
    with pytest.raises(ValueError, match="chunk"):
        ops.peak_s8_window(0, 0.01)
    with pytest.raises(ValueError, match="seconds"):
        ops.peak_s8_window(1, -1.0)
    with pytest.raises(ValueError, match="seconds"):
        ops.peak_s8_window(1, float("nan"))


def test_best_of_round_robin():
    calls = []
    out = bench.best_of({"a": lambda: calls.append("a"), "b": (lambda: calls.append("b"), 2)}, 3)
    assert calls == ["a", "b", "a", "b", "a", "b", "a"]  # warm-up each, then in turn
    assert set(out) == {"a", "b"} and all(0 <= b <= m for b, m in out.values())
    best, med = bench.best_of(lambda: None, 2)
    assert 0 <= best <= med
    with pytest.raises(ValueError, match="repeat"):
        bench.best_of(lambda: None, 0)


def test_table_and_json(tmp_path):
    text = format_table(["name", "value"], [["a", "1.0"], ["longer", "22"]], indent="  ", rule=False)
    assert text.splitlines() == ["  name    value", "  a         1.0", "  longer     22"]
    path = bench.save_json({"x": np.float64(1.5)}, "t", tmp_path / "r" / "t.json")
    assert path.read_text() == '{\n  "x": 1.5\n}\n'


def test_measure_limits_small():
    lim = bench.measure_limits(n_threads=1, nbytes=1 << 20, repeat=1)
    for key in ("copy_nt_gbs", "copyto_gbs", "sgemm_gflops", "int8_peak_gops"):
        assert lim[key] > 0, key
    assert lim["copy_gbs"] == max(lim["copy_nt_gbs"], lim["copyto_gbs"])
    assert lim["blas"]["library"] and lim["blas"]["threads"] >= 1
    assert "model_name" in lim["cpu"] and lim["int8_peak_instruction"]
    assert bench.format_limits(lim).startswith("CPU ")


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.uint8, np.int64, np.bool_])
@pytest.mark.parametrize("shape", [(50,), (50, 3), (40, 8, 8), (7, 1, 28, 28)])
def test_take_rows_matches_np_take(dtype, shape):
    rng = np.random.default_rng(len(shape))
    src = (rng.standard_normal(shape) * 50).astype(dtype)
    for idx in (rng.integers(0, shape[0], (16, 32)), rng.integers(0, shape[0], 5),
                np.zeros((0, 4), np.int64), np.array(shape[0] - 1)):
        want = ref_copy.take_rows(src, idx)
        for threads in (1, 2, 3):
            got = ops.take_rows(src, idx, n_threads=threads)
            assert got.dtype == src.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
    # a big gather (threaded), into a given out
    src = rng.standard_normal((1000, 64), dtype=np.float32)
    idx = rng.integers(0, 1000, (256, 32)).astype(np.int32)
    out = np.empty((256, 32, 64), np.float32)
    assert ops.take_rows(src, idx, out=out, n_threads=2) is out
    np.testing.assert_array_equal(out, np.take(src, idx, axis=0))


def _segments(rng, sizes):
    """A permutation of arange(sum(sizes)) cut into segments of the given sizes (start, size)."""
    sizes = np.asarray(sizes, np.int64)
    start = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    return rng.permutation(int(sizes.sum())).astype(np.int64), start, sizes


@pytest.mark.parametrize("sizes,batch", [([1, 2, 3, 40], 8), ([5] * 300, 32), ([1] * 7, 3),
                                         ([1000, 1, 17], 64), ([3, 4], 0)])
def test_batch_indices_matches_reference(sizes, batch):
    rng = np.random.default_rng(len(sizes) + batch)
    perm, start, size = _segments(rng, sizes)
    cursor = np.array([rng.integers(0, 3 * s) for s in size], np.int64)  # past the end too
    want = ref_copy.batch_indices(perm, start, size, cursor, batch)
    for threads in (1, 2, 3, 16):
        got = ops.batch_indices(perm, start, size, cursor, batch, n_threads=threads)
        assert got.dtype == np.int64 and got.shape == (len(sizes), batch)
        np.testing.assert_array_equal(got, want)
    out = np.empty((len(sizes), batch), np.int64)
    assert ops.batch_indices(perm, start, size, cursor, batch, out=out) is out
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("sizes", [[1, 2, 3, 40], [5] * 300, [1] * 7, [1000, 1, 17, 2000], [2]])
def test_shuffle_segments_matches_reference(sizes):
    """The listed peers' segments reordered as one stable argsort of (q + u) over all of them
    would (the reference), per segment on threads; unlisted segments untouched. Ties included:
    u drawn from a few values, so equal keys keep their order."""
    rng = np.random.default_rng(sum(sizes))
    perm, start, size = _segments(rng, sizes)
    for listed in (np.arange(len(sizes)), np.arange(0, len(sizes), 2)):
        n_u = int(size[listed].sum())
        for u in (rng.random(n_u), rng.integers(0, 3, n_u) / 4.0):
            want = perm.copy()
            ref_copy.shuffle_segments(want, start, size, listed, u)
            for threads in (1, 2, 3, 16):
                got = perm.copy()
                assert ops.shuffle_segments(got, start, size, listed, u, n_threads=threads) is None
                np.testing.assert_array_equal(got, want)
            others = np.setdiff1d(np.arange(len(sizes)), listed)
            for p in others:
                seg = slice(start[p], start[p] + size[p])
                np.testing.assert_array_equal(got[seg], perm[seg])


def test_shuffle_segments_keys_that_round_across_a_segment():
    """q + u rounds to q + 1 when u is within 2^-53 of 1 and q >= 1: the key then equals the
    next segment's smallest possible key. One stable argsort keeps that sample last in its own
    segment, and so must the per-segment sort."""
    perm = np.arange(6, dtype=np.int64)
    start, size = np.array([0, 3], np.int64), np.array([3, 3], np.int64)
    top = np.nextafter(1.0, 0.0)
    u = np.array([0.5, top, 0.25, 0.0, top, 0.75])
    want = perm.copy()
    ref_copy.shuffle_segments(want, start, size, np.array([0, 1]), u)
    got = perm.copy()
    ops.shuffle_segments(got, start, size, np.array([0, 1]), u)
    np.testing.assert_array_equal(got, want)
    assert sorted(got[:3]) == [0, 1, 2] and sorted(got[3:]) == [3, 4, 5]


def test_sampler_kernel_errors():
    perm = np.arange(10, dtype=np.int64)
    start, size, cursor = (np.array(v, np.int64) for v in ([0, 4], [4, 6], [0, 0]))
    with pytest.raises(ValueError, match="size must be >= 1"):
        ops.batch_indices(perm, start, np.array([4, 0]), cursor, 2)
    with pytest.raises(ValueError, match="cursor >= 0"):
        ops.batch_indices(perm, start, size, np.array([0, -1]), 2)
    with pytest.raises(IndexError, match=r"lie in \[0, 10\)"):
        ops.batch_indices(perm, start, np.array([4, 7]), cursor, 2)
    with pytest.raises(ValueError, match="cursor must have start's length 2"):
        ops.batch_indices(perm, start, size, np.array([0]), 2)
    with pytest.raises(TypeError, match="perm must hold integers"):
        ops.batch_indices(perm.astype(float), start, size, cursor, 2)
    with pytest.raises(ValueError, match="batch must be an int >= 0"):
        ops.batch_indices(perm, start, size, cursor, -1)
    with pytest.raises(ValueError, match="out must have shape"):
        ops.batch_indices(perm, start, size, cursor, 2, out=np.empty((2, 3), np.int64))
    with pytest.raises(ValueError, match="out must have 2 rows"):
        ops.batch_indices(perm, start, size, cursor, 2, out=np.empty((3, 2), np.int64))
    u = np.zeros(10)
    before = perm.copy()
    for peers, uu, msg in (([1, 0], u, "ascend strictly"), ([0, 2], u, "ascend strictly"),
                           ([0, 1], u[:9], "one value per sample"),
                           ([0], u, "one value per sample")):
        with pytest.raises(ValueError, match=msg):
            ops.shuffle_segments(perm, start, size, np.array(peers), uu)
        np.testing.assert_array_equal(perm, before)  # nothing written
    with pytest.raises(IndexError, match="lie in"):
        ops.shuffle_segments(perm, start, np.array([4, 7]), np.array([1]), np.zeros(7))
    with pytest.raises(TypeError, match="perm must be an int64"):
        ops.shuffle_segments(perm.astype(np.int32), start, size, np.array([0]), np.zeros(4))
    with pytest.raises(TypeError, match="u must be a float64"):
        ops.shuffle_segments(perm, start, size, np.array([0]), np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="perm must be C-contiguous"):
        ops.shuffle_segments(np.zeros(20, np.int64)[::2], start, size, np.array([0]), np.zeros(4))


def test_take_rows_errors():
    src = np.arange(12, dtype=np.float32).reshape(6, 2)
    out = np.full((2, 2), -1.0, np.float32)
    for bad in ([0, 6], [-1, 0]):  # no wrap-around: nothing is written
        with pytest.raises(IndexError, match=r"idx must lie in \[0, 6\)"):
            ops.take_rows(src, np.array(bad), out=out)
        np.testing.assert_array_equal(out, -1.0)
    with pytest.raises(TypeError, match="idx must hold integers"):
        ops.take_rows(src, np.array([0.0]))
    with pytest.raises(ValueError, match="out must have shape"):
        ops.take_rows(src, np.array([0, 1]), out=np.empty((2, 3), np.float32))
    with pytest.raises(TypeError, match="out must have dtype float32"):
        ops.take_rows(src, np.array([0, 1]), out=np.empty((2, 2), np.float64))
    with pytest.raises(ValueError, match="src"):
        ops.take_rows(src[:, ::2], np.array([0]))  # not C-contiguous
    with pytest.raises(TypeError, match="not Python objects"):
        ops.take_rows(np.array([object(), 1], dtype=object), np.array([0]))
    with pytest.raises(ValueError, match="overlap|share"):
        ops.take_rows(src, np.array([0, 1]), out=src[:2])
