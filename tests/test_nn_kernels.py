"""The layers' C kernels (csrc/nn_impl.h, csrc/optim.c) against their NumPy references in
decentlearn/_reference/nn.py and optim.py: awkward shapes and peer counts, strided and broadcast
operands, every ISA path, 1 thread == 2 threads bit for bit, and the FMA builds (AVX2, AVX-512)
bit for bit against each other."""

import numpy as np
import pytest

from decentlearn import _core, ops
from decentlearn._reference import nn as ref
from decentlearn._reference import optim as ref_optim

RTOL = 2e-5  # float32 sums of up to a few hundred terms vs the float64 reference


def _close(got, want, k):
    scale = np.sqrt(max(k, 1)) * 4
    np.testing.assert_allclose(got, want, rtol=RTOL * scale, atol=RTOL * scale)


def _rand(rng, shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("P,M,N,K", [(1, 1, 1, 1), (3, 7, 33, 5), (1, 100, 17, 300), (5, 6, 16, 0),
                                     (2, 13, 600, 40), (7, 32, 10, 128), (4, 1, 129, 257)])
@pytest.mark.parametrize("trans", ["nn", "tn", "nt", "tt"])
def test_gemm_matches_reference(isa, P, M, N, K, trans):
    rng = np.random.default_rng(P * 1000 + M + N + K)
    a = _rand(rng, (P, K, M)).transpose(0, 2, 1) if trans[0] == "t" else _rand(rng, (P, M, K))
    b = _rand(rng, (P, N, K)).transpose(0, 2, 1) if trans[1] == "t" else _rand(rng, (P, K, N))
    _close(ops.nn_gemm(a, b), ref.nn_gemm(a, b), K)
    c0 = _rand(rng, (P, M, N))
    got, want = c0.copy(), c0.copy()
    ops.nn_gemm(a, b, out=got, accumulate=True)
    ref.nn_gemm(a, b, out=want, accumulate=True)
    _close(got, want, K)


def test_gemm_broadcast_and_row_views(isa):
    rng = np.random.default_rng(1)
    P, M, N, K = 6, 9, 20, 11
    shared = _rand(rng, (1, M, K))
    params = _rand(rng, (P, 3 + K * N + 5))  # B_p is a window of each parameter row
    b = params[:, 3:3 + K * N].reshape(P, K, N)
    out = np.empty((P, M, N), np.float32)
    _close(ops.nn_gemm(shared, b, out=out), ref.nn_gemm(shared, b), K)
    a0 = np.broadcast_to(shared, (P, M, K))  # stride 0 over peers
    _close(ops.nn_gemm(a0, b), ref.nn_gemm(a0, b), K)


@pytest.mark.parametrize("P,B,I,O", [(1, 1, 1, 1), (3, 5, 7, 33), (9, 32, 64, 10), (2, 70, 130, 17),
                                     (4, 6, 300, 16), (4, 20, 3, 5), (1, 100, 40, 10),
                                     (3, 9, 10, 10), (2, 14, 12, 9)])
@pytest.mark.parametrize("shared", [False, True])
def test_dense_matches_reference(isa, P, B, I, O, shared):
    rng = np.random.default_rng(P + B + I + O)
    dim = I * O + O + 3
    params = _rand(rng, (P, dim))
    w = params[:, :I * O].reshape(P, I, O)
    bias = params[:, I * O:I * O + O]
    x = np.broadcast_to(_rand(rng, (B, I)), (P, B, I)) if shared else _rand(rng, (P, B, I))
    for relu in (False, True):
        _close(ops.dense_forward(x, w, bias, relu), ref.dense_forward(x, w, bias, relu), I)
    _close(ops.dense_forward(x, w), ref.dense_forward(x, w), I)
    dy = _rand(rng, (P, B, O))
    mask = _rand(rng, (P, B, I))
    grad = np.full((P, dim), np.nan, np.float32)
    gw, gb = grad[:, :I * O].reshape(P, I, O), grad[:, I * O:I * O + O]
    want = np.zeros_like(grad)
    wgw, wgb = want[:, :I * O].reshape(P, I, O), want[:, I * O:I * O + O]
    dx, wdx = np.empty((P, B, I), np.float32), np.empty((P, B, I), np.float32)
    ops.dense_backward(x, w, dy, gw, gb, dx, mask)
    ref.dense_backward(x, w, dy, wgw, wgb, wdx, mask)
    _close(gw, wgw, B)
    _close(gb, wgb, B)
    _close(dx, wdx, O)
    assert np.isnan(grad[:, I * O + O:]).all()  # nothing written outside the views
    ops.dense_backward(x, w, dy, gw, gb)  # no dx
    _close(gw, wgw, B)


@pytest.mark.parametrize("P", [1, 3, 64])
def test_gemm_dense_thread_count_bit_identical(P):
    rng = np.random.default_rng(P)
    batch = 50 if P >= 64 else 700  # enough work for a thread team (row blocks when P is small)
    a, b = _rand(rng, (P, 301, 200)), _rand(rng, (P, 200, 45))
    one = ops.nn_gemm(a, b, n_threads=1)
    assert np.array_equal(one, ops.nn_gemm(a, b, n_threads=2))
    assert np.array_equal(one, ops.nn_gemm(a, b, n_threads=3))
    for n_out in (40, 10):  # 10: the transposed narrow-output path
        x, w, bias = _rand(rng, (P, batch, 128)), _rand(rng, (P, 128, n_out)), _rand(rng, (P, n_out))
        assert np.array_equal(ops.dense_forward(x, w, bias, True, n_threads=1),
                              ops.dense_forward(x, w, bias, True, n_threads=2))
    dy = _rand(rng, (P, batch, 10))
    outs = []
    # fewer peers than threads: dW's and dX's rows are split into blocks (and db kept whole)
    for nt in (1, 2, 3, 8):
        gw, gb, dx = np.empty_like(w), np.empty_like(bias), np.empty_like(x)
        ops.dense_backward(x, w, dy, gw, gb, dx, x, n_threads=nt)
        outs.append((gw, gb, dx))
        gw2, gb2 = np.empty_like(w), np.empty_like(bias)
        ops.dense_backward(x, w, dy, gw2, gb2, n_threads=nt)  # without dx
        assert np.array_equal(gw2, gw) and np.array_equal(gb2, gb)
    for other in outs[1:]:
        for u, v in zip(outs[0], other):
            assert np.array_equal(u, v)


@pytest.mark.parametrize("N", [45, 10, 16])
def test_a_row_does_not_depend_on_its_block(isa, N):
    """Row r of C = A B gets the same bits whichever row block and kernel instance computes it
    (6-row tiles, shorter last tiles, B read in place for at most 32 rows or packed beyond): the
    product of A[:, s:] equals the last rows of the product of A for every shift s. A thread's
    share of a few peers' rows decides the blocks, so this keeps results independent of the
    thread count (the multiply-adds are explicit: a compiler's contraction choices differed
    between the instances of gossip's kernel once)."""
    rng = np.random.default_rng(N)
    a, b = _rand(rng, (2, 41, 300)), _rand(rng, (2, 300, N))
    full = ops.nn_gemm(a, b, n_threads=1)
    for s in range(1, 14):
        np.testing.assert_array_equal(ops.nn_gemm(np.ascontiguousarray(a[:, s:]), b, n_threads=1),
                                      full[:, s:], err_msg=f"shift {s}")


#: The builds whose multiply-adds are FMAs (every path but the portable one; nn_fma): their
#: tiles differ (6 x 16 and a 12-column narrow panel on AVX2, 6 x 32 and a 16-column one with
#: masked edges on AVX-512) but every element is the same chain of operations.
FMA_PATHS = [i for i in _core.config()["isa_supported"] if i != "generic"]


def _on_each_fma_path(fn):
    out, active = {}, _core.config()["isa"]
    try:
        for isa in FMA_PATHS:
            _core.set_isa(isa)
            out[isa] = fn()
    finally:
        _core.set_isa(active)
    return out


@pytest.mark.skipif(len(FMA_PATHS) < 2, reason="one FMA build on this CPU")
@pytest.mark.parametrize("P,B,I,O", [(3, 32, 64, 128), (2, 7, 300, 10), (4, 13, 5, 12),
                                     (2, 9, 40, 16), (3, 6, 17, 17), (2, 11, 33, 31),
                                     (2, 20, 520, 47), (5, 1, 3, 1), (2, 8, 16, 70)])
def test_fma_paths_bit_identical(P, B, I, O):
    """Every output of nn_gemm (plain, accumulate, transposed operands) and of the dense forward
    and backward (bias, ReLU, mask; k past one 256 block) is the same float on every FMA path,
    infinities and -0.0 included; NaN in the same places (its payload is not compared)."""
    rng = np.random.default_rng(P * 7 + B + I + O)
    x, w, b = _rand(rng, (P, B, I)), _rand(rng, (P, I, O)), _rand(rng, (P, O))
    dy, mask = _rand(rng, (P, B, O)), _rand(rng, (P, B, I))
    x.flat[::17] = -0.0
    x[0, 0, ::3] = np.inf  # specials on peer 0 only: the other peers stay finite
    w[0, :, 0] = np.nan
    c0 = _rand(rng, (P, B, O))

    def run():
        acc = c0.copy()
        ops.nn_gemm(x, w, out=acc, accumulate=True)
        gw, gb, dx = np.empty_like(w), np.empty_like(b), np.empty_like(x)
        ops.dense_backward(x, w, dy, gw, gb, dx, mask)
        return [ops.nn_gemm(x, w), acc, ops.nn_gemm(w.transpose(0, 2, 1), x.transpose(0, 2, 1)),
                ops.dense_forward(x, w, b, True), ops.dense_forward(x, w, b, False), gw, gb, dx]

    outs = _on_each_fma_path(run)
    first = FMA_PATHS[0]
    assert all(np.isfinite(o[1:]).all() for o in outs[first][:5])  # peers 1.. compared as numbers
    for isa in FMA_PATHS[1:]:
        for got, want in zip(outs[isa], outs[first]):
            nan = np.isnan(want)
            np.testing.assert_array_equal(np.isnan(got), nan, err_msg=f"{isa} against {first}")
            np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32),
                                          err_msg=f"{isa} against {first}")


def test_gemm_bad_input():
    a = np.zeros((2, 3, 4), np.float32)
    b = np.zeros((2, 4, 5), np.float32)
    with pytest.raises(TypeError, match="dtype float32"):
        ops.nn_gemm(a.astype(np.float64), b)
    with pytest.raises(ValueError, match="axis 1"):
        ops.nn_gemm(a, np.zeros((2, 3, 5), np.float32))
    with pytest.raises(ValueError, match=r"1 \(shared\) or P=2 peers"):
        ops.nn_gemm(a, np.zeros((3, 4, 5), np.float32), out=np.zeros((2, 3, 5), np.float32))
    c = np.zeros((2, 3, 4), np.float32)
    with pytest.raises(ValueError, match="must not overlap"):
        ops.nn_gemm(c, np.zeros((2, 4, 4), np.float32), out=c)
    with pytest.raises(ValueError, match="contiguous last axis"):
        ops.nn_gemm(a, b, out=np.zeros((2, 5, 3), np.float32).transpose(0, 2, 1))
    with pytest.raises(ValueError, match="n_threads"):
        ops.nn_gemm(a, b, n_threads=0)
    w = np.zeros((2, 4, 5), np.float32)
    with pytest.raises(ValueError, match="gw must not overlap w"):
        ops.dense_backward(a, w, np.zeros((2, 3, 5), np.float32), w, np.zeros((2, 5), np.float32))


@pytest.mark.parametrize("momentum,nesterov,wd", [(0.0, False, 0.0), (0.9, False, 0.0),
                                                  (0.9, True, 1e-3), (0.5, False, 0.1),
                                                  (0.0, False, 0.01)])
@pytest.mark.parametrize("P,D", [(1, 1), (3, 7), (5, 1000), (70, 2049)])
@pytest.mark.parametrize("with_frozen", [False, True])
def test_sgd_step_matches_reference_bitwise(P, D, momentum, nesterov, wd, with_frozen):
    rng = np.random.default_rng(P * D)
    params, grad, buf = _rand(rng, (P, D)), _rand(rng, (P, D)), _rand(rng, (P, D))
    frozen = rng.integers(0, D + 1, P).astype(np.int64) if with_frozen else None
    want_p, want_b = params.copy(), buf.copy()
    ref_optim.sgd_step(want_p, grad, want_b, 0.05, momentum, wd, nesterov, frozen)
    for nt in (1, 2):
        p, m = params.copy(), buf.copy()
        ops.sgd_step(p, grad, m, 0.05, momentum, wd, nesterov, frozen, n_threads=nt)
        assert np.array_equal(p, want_p)
        if momentum:
            assert np.array_equal(m, want_b)


@pytest.mark.parametrize("P,D", [(1, 50_000), (2, 40_000), (3, 70_001)])
@pytest.mark.parametrize("momentum,nesterov,wd", [(0.0, False, 0.0), (0.9, True, 1e-3)])
def test_sgd_step_fewer_rows_than_threads_splits_columns_with_the_same_bits(P, D, momentum,
                                                                           nesterov, wd):
    """Fewer rows than threads: the step also splits each row into column blocks (16,384
    values); frozen prefixes that end inside a later block keep their entries and zero their
    momentum there: the reference's bits at 1, 2, 3 and 8 threads."""
    rng = np.random.default_rng(P + D)
    params, grad, buf = _rand(rng, (P, D)), _rand(rng, (P, D)), _rand(rng, (P, D))
    frozen = np.array([20_000, 16_384, D][:P], np.int64)  # inside, on and past block edges
    for fz in (None, frozen):
        want_p, want_b = params.copy(), buf.copy()
        ref_optim.sgd_step(want_p, grad, want_b, 0.05, momentum, wd, nesterov, fz)
        for nt in (1, 2, 3, 8):
            p, m = params.copy(), buf.copy()
            ops.sgd_step(p, grad, m, 0.05, momentum, wd, nesterov, fz, n_threads=nt)
            assert np.array_equal(p, want_p), (fz is None, nt)
            assert np.array_equal(m, want_b), (fz is None, nt)


def test_sgd_step_bad_input():
    p = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="frozen must hold prefix lengths"):
        ops.sgd_step(p, p.copy(), None, 0.1, frozen=np.array([0, 4]))
    with pytest.raises(ValueError, match="buf is required"):
        ops.sgd_step(p, p.copy(), None, 0.1, momentum=0.9)
    with pytest.raises(ValueError, match="grad must not overlap"):
        ops.sgd_step(p, p, None, 0.1)
    with pytest.raises(TypeError, match="float32"):
        ops.sgd_step(p, p.astype(np.float64), None, 0.1)


@pytest.mark.parametrize("spec,input_shape", [("linear", (1, 8, 8)), ("mlp:24,12", (1, 8, 8)),
                                              ("cnn", (1, 8, 8)), ("cnn:gn", (3, 8, 8))])
def test_model_float32_c_path_matches_float64_numpy_path(spec, input_shape):
    # float32 runs the C kernels (fused bias/ReLU, the ReLU mask inside dX, conv GEMMs); float64
    # runs np.matmul with the same fusion done in NumPy (checked by finite differences elsewhere).
    from decentlearn.nn import make_model

    model = make_model(spec, input_shape, 5)
    rng = np.random.default_rng(3)
    p64 = np.stack([model.init(s, np.float64) for s in range(4)])
    p64 += 0.05 * rng.standard_normal(p64.shape)
    x = rng.standard_normal((4, 7, *input_shape))
    y = rng.integers(0, 5, (4, 7))
    l64, g64 = model.loss_and_grad(p64, x, y)
    for nt in (1, 2):
        model.n_threads = nt
        l32, g32 = model.loss_and_grad(p64.astype(np.float32), x.astype(np.float32), y)
        np.testing.assert_allclose(l32, l64, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(g32, g64, rtol=2e-3, atol=2e-4 * np.abs(g64).max())
        if nt == 1:
            g_one = g32
        else:
            assert np.array_equal(g32, g_one)
    acc32, _ = model.evaluate(p64.astype(np.float32), x[0].astype(np.float32), y[0])
    acc64, _ = model.evaluate(p64, x[0], y[0])
    assert np.abs(acc32 - acc64).max() <= 1 / 7 + 1e-12  # at most one near-tie flips
