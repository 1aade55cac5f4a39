"""Batched int8 GEMM over peers (ops.gemm_s8_batched[_f32]) against the int64 NumPy reference on
every ISA path: shared and per-peer A, stored transposes, strided views, per-peer and per-channel
scales, thread-count independence, argument errors."""

import numpy as np
import pytest

from decentlearn import ops
from decentlearn._reference import gemm_s8 as ref

SHAPES = [(1, 1, 1, 1), (3, 7, 33, 65), (2, 33, 1000, 7), (4, 70, 129, 130), (2, 0, 5, 3),
          (2, 4, 0, 9), (16, 32, 100, 10)]


def _ops(shape, seed=0):
    p, m, k, n = shape
    rng = np.random.default_rng(seed)
    return (rng.integers(-128, 128, (p, m, k), dtype=np.int8),
            rng.integers(-128, 128, (p, k, n), dtype=np.int8))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_batched_exact(isa, shape):
    a, b = _ops(shape)
    a0, b0 = a.copy(), b.copy()
    want = ref.gemm_s8_batched(a, b)
    at = np.ascontiguousarray(a.transpose(0, 2, 1))
    bt = np.ascontiguousarray(b.transpose(0, 2, 1))
    for threads in (1, 2, 3):
        np.testing.assert_array_equal(ops.gemm_s8_batched(a, b, n_threads=threads), want)
        np.testing.assert_array_equal(
            ops.gemm_s8_batched(at, bt, trans_a=True, trans_b=True, n_threads=threads), want)
    np.testing.assert_array_equal(ops.gemm_s8_batched(at, b, trans_a=True), want)
    np.testing.assert_array_equal(ops.gemm_s8_batched(a, bt, trans_b=True), want)
    # a shared by every peer
    np.testing.assert_array_equal(ops.gemm_s8_batched(a[0], b), ref.gemm_s8_batched(a[0], b))
    # b shared by every peer (a stride-0 broadcast: packed once), plain and stored transposed
    p = a.shape[0]
    bs = np.broadcast_to(b[0], b.shape)
    bst = np.broadcast_to(bt[0], bt.shape)
    want_s = ref.gemm_s8_batched(a, bs)
    for threads in (1, 2):
        np.testing.assert_array_equal(ops.gemm_s8_batched(a, bs, n_threads=threads), want_s)
        np.testing.assert_array_equal(
            ops.gemm_s8_batched(a, bst, trans_b=True, n_threads=threads), want_s)
    assert want_s.shape[0] == p
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(b, b0)


def test_batched_per_peer_equals_single(isa):
    a, b = _ops((5, 33, 257, 70), seed=3)
    got = ops.gemm_s8_batched(a, b, n_threads=2)
    for p in range(5):
        np.testing.assert_array_equal(got[p], ops.gemm_s8(a[p], b[p]))


def test_batched_strided_views(isa):
    """Operands and out as column slices of wider peer rows (as parameter/gradient views are)."""
    rng = np.random.default_rng(1)
    p, m, k, n = 3, 9, 40, 17
    big_a = rng.integers(-128, 128, (p, m, k + 5), dtype=np.int8)
    big_b = rng.integers(-128, 128, (p, 2 * k, n + 3), dtype=np.int8)
    a, b = big_a[:, :, 2:2 + k], big_b[:, ::2, 1:1 + n]
    want = ref.gemm_s8_batched(a, b)
    rows = np.zeros((p, 1000), np.float32)
    out = rows[:, 100:100 + m * n].reshape(p, m, n)
    ones = np.ones(p, np.float32)
    assert ops.gemm_s8_batched_f32(a, b, ones, ones, out=out, n_threads=2) is out
    np.testing.assert_array_equal(out, want)  # |values| < 2^24: exact in float32
    assert not rows[:, :100].any() and not rows[:, 100 + m * n:].any()
    # flat (P, m*n)-per-peer gradient views, the layout nn.Dense writes into
    out32 = np.zeros((p, 2, m, n), np.int32)[:, 1]
    np.testing.assert_array_equal(ops.gemm_s8_batched(a, b, out=out32), want)


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("shared", [False, True])
def test_batched_f32(isa, per_channel, shared):
    rng = np.random.default_rng(2)
    for shape in [(3, 7, 33, 65), (2, 70, 129, 130), (4, 1, 1000, 1)]:
        p, m, k, n = shape
        a, b = _ops(shape, seed=5)
        if shared:
            a = a[0]
        a_s = rng.uniform(1e-3, 0.1, p).astype(np.float32)
        b_s = rng.uniform(1e-3, 0.1, (p, n) if per_channel else p).astype(np.float32)
        want = ref.gemm_s8_batched_f32(a, b, a_s, b_s)
        for threads in (1, 2):
            got = ops.gemm_s8_batched_f32(a, b, a_s, b_s, n_threads=threads)
            assert got.dtype == np.float32 and got.shape == (p, m, n)
            np.testing.assert_array_equal(got, want)  # one float32 product: bit-identical
        bias = rng.standard_normal((p, n)).astype(np.float32)
        got = ops.gemm_s8_batched_f32(a, b, a_s, b_s, bias=bias)
        want = ref.gemm_s8_batched_f32(a, b, a_s, b_s, bias=bias)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(bias).max())


def test_batched_errors():
    a, b = _ops((2, 3, 4, 5))
    with pytest.raises(TypeError, match="a must have dtype int8"):
        ops.gemm_s8_batched(a.astype(np.int16), b)
    with pytest.raises(ValueError, match="b must be 3-D"):
        ops.gemm_s8_batched(a, b[0])
    with pytest.raises(ValueError, match="shapes do not match"):
        ops.gemm_s8_batched(a, b[:, :3])
    with pytest.raises(ValueError, match="shapes do not match"):
        ops.gemm_s8_batched(a[:1], b)
    with pytest.raises(ValueError, match="contiguous last axis"):
        ops.gemm_s8_batched(a[:, :, ::2], b[:, :2])
    with pytest.raises(ValueError, match="out must have shape"):
        ops.gemm_s8_batched(a, b, out=np.empty((2, 3, 4), np.int32))
    with pytest.raises(ValueError, match="a_scale must have shape"):
        ops.gemm_s8_batched_f32(a, b, np.ones(3, np.float32), 1.0)
    with pytest.raises(ValueError, match="b_scale must have shape"):
        ops.gemm_s8_batched_f32(a, b, 1.0, np.ones((2, 4), np.float32))
    with pytest.raises(ValueError, match="finite"):
        ops.gemm_s8_batched_f32(a, b, float("nan"), 1.0)
    with pytest.raises(ValueError, match="must not overlap"):
        buf = np.zeros((2, 3, 5), np.int32)
        ops.gemm_s8_batched(buf.view(np.int8)[:, :, :4], b, out=buf)
    with pytest.raises(ValueError, match="n_threads"):
        ops.gemm_s8_batched(a, b, n_threads=0)
