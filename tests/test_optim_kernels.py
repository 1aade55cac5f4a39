"""The Adam/AdamW, LAMB and LARS step kernels (csrc/optim.c through decentlearn.ops) against their
NumPy twins (decentlearn/_reference/optim.py) bit for bit at several thread counts, on every ISA
path (their spans have portable, AVX2 and AVX-512 builds, none with FMA contraction); the twins'
Adam against the NumPy form the optimizer ran before the kernel (so runs keep their bits) and
their layer sums against plain loops; bad arguments; and the optimizer classes' two paths (the
kernels, and the twins for float64 and strided operands) agreeing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from decentlearn import ops
from decentlearn._reference import optim as ref
from decentlearn.optim import OptimizerConfig, make

THREADS = (1, 3, 8)
# rows, columns, layer bounds: a tiny model; chunk edges (4,096) inside and on a layer; fewer
# rows than threads; one column
SHAPES = [(5, 16, [0, 6, 7, 15, 16]), (2, 9000, [0, 4096, 8200, 8999, 9000]),
          (40, 700, [0, 700]), (1, 1, [0, 1]), (9, 300, [0, 1, 2, 300])]


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.int32)


def _problem(P, D, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((P, D)).astype(np.float32)
    g = rng.standard_normal((P, D)).astype(np.float32)
    m = (0.1 * rng.standard_normal((P, D))).astype(np.float32)
    v = (0.1 * np.abs(rng.standard_normal((P, D)))).astype(np.float32)
    steps = rng.integers(1, 7, P)
    if D > 2:
        x[0, 1:3] = 0.0  # zero entries; with bounds [0, 1, 2, ...] a zero-norm layer
        g[-1, :] = 0.0  # a peer without gradient: LARS's and LAMB's ratio 1
    frozen = rng.integers(0, D + 1, P)
    frozen[0] = D  # all frozen
    if D > 4096:
        frozen[-1] = 4096  # on a chunk edge
    return x, g, m, v, steps, frozen


@pytest.mark.parametrize("P,D,bounds", SHAPES)
@pytest.mark.parametrize("decoupled,wd", [(False, 0.0), (False, 0.01), (True, 0.1)])
@pytest.mark.parametrize("with_frozen", [False, True])
def test_adam_step_matches_twin_bitwise(isa, P, D, bounds, decoupled, wd, with_frozen):
    x, g, m, v, steps, frozen = _problem(P, D, P * D)
    frozen = frozen if with_frozen else None
    want = [x.copy(), m.copy(), v.copy()]
    ref.adam_step(*want[:1], g, *want[1:], steps, 0.01, 0.9, 0.999, 1e-8, wd, decoupled, frozen)
    for nt in THREADS:
        got = [x.copy(), m.copy(), v.copy()]
        ops.adam_step(got[0], g, got[1], got[2], steps, 0.01, 0.9, 0.999, 1e-8, wd, decoupled,
                      frozen, n_threads=nt)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(_bits(a), _bits(b))
    if with_frozen:
        for p, cut in enumerate(frozen):
            assert np.array_equal(_bits(want[0][p, :cut]), _bits(x[p, :cut]))
            assert not want[1][p, :cut].any() and not want[2][p, :cut].any()


@pytest.mark.parametrize("P,D,bounds", SHAPES)
@pytest.mark.parametrize("wd", [0.0, 0.01])
@pytest.mark.parametrize("with_frozen", [False, True])
def test_lamb_step_matches_twin_bitwise(isa, P, D, bounds, wd, with_frozen):
    x, g, m, v, steps, frozen = _problem(P, D, P + D)
    frozen = frozen if with_frozen else None
    bounds = np.array(bounds)
    want = [x.copy(), m.copy(), v.copy(), np.zeros_like(x)]
    ref.lamb_step(want[0], g, want[1], want[2], want[3], steps, 0.02, 0.8, 0.99, 1e-6, wd, bounds,
                  frozen)
    for nt in THREADS:
        got = [x.copy(), m.copy(), v.copy(), np.zeros_like(x)]
        ops.lamb_step(got[0], g, got[1], got[2], got[3], steps, 0.02, 0.8, 0.99, 1e-6, wd, bounds,
                      frozen, n_threads=nt)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(_bits(a), _bits(b))


@pytest.mark.parametrize("P,D,bounds", SHAPES)
@pytest.mark.parametrize("momentum,wd", [(0.0, 0.0), (0.9, 1e-3)])
@pytest.mark.parametrize("with_frozen", [False, True])
def test_lars_step_matches_twin_bitwise(isa, P, D, bounds, momentum, wd, with_frozen):
    x, g, m, _, _, frozen = _problem(P, D, 3 * P + D)
    frozen = frozen if with_frozen else None
    bounds = np.array(bounds)
    want = [x.copy(), m.copy()]
    ref.lars_step(want[0], g, want[1], 0.5, momentum, wd, 0.001, 1e-9, bounds, frozen)
    for nt in THREADS:
        got = [x.copy(), m.copy()]
        ops.lars_step(got[0], g, got[1], 0.5, momentum, wd, 0.001, 1e-9, bounds, frozen,
                      n_threads=nt)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(_bits(a), _bits(b))
    if momentum == 0:  # no momentum buffer needed
        got = x.copy()
        ops.lars_step(got, g, None, 0.5, 0.0, wd, 0.001, 1e-9, bounds, frozen)
        np.testing.assert_array_equal(_bits(got), _bits(want[0]))


def _adam_numpy_before_the_kernel(x, grad, m, v, steps, lr, b1, b2, eps, wd, adamw):
    """decentlearn.optim.Adam's float32 step before ops.adam_step (commit 23dee35), in place."""
    f32 = np.float32
    bias = lambda beta: (1.0 - np.power(beta, steps.astype(np.float64)))[:, None]  # noqa: E731
    tmp = np.empty_like(x)
    s = np.empty_like(x)
    g = grad
    if wd != 0 and not adamw:
        g = np.multiply(x, wd, out=s)
        g += grad
    m *= b1
    m += np.multiply(g, 1.0 - b1, out=tmp)
    v *= b2
    np.square(g, out=tmp)
    tmp *= 1.0 - b2
    v += tmp
    denom = np.sqrt(v, out=s)
    denom /= np.sqrt(bias(b2)).astype(f32)
    denom += f32(eps)
    np.divide(m, denom, out=denom)
    denom *= (lr / bias(b1)).astype(f32)
    if wd != 0 and adamw:
        denom += np.multiply(x, f32(lr * wd), out=tmp)
    x -= denom


@pytest.mark.parametrize("wd,adamw", [(0.0, False), (0.01, False), (0.1, True)])
def test_adam_keeps_the_bits_of_its_numpy_form(wd, adamw):
    """The kernel's operations are those of the NumPy code it replaced: five steps give the same
    bits, so runs with Adam report what they reported before."""
    x, g, m, v, _, _ = _problem(6, 3000, 7)
    want = [x.copy(), np.zeros_like(x), np.zeros_like(x)]
    got = [x.copy(), np.zeros_like(x), np.zeros_like(x)]
    rng = np.random.default_rng(1)
    for t in range(1, 6):
        steps = np.full(6, t)
        steps[2] = max(1, t - 2)  # peers at different step counts
        grad = rng.standard_normal(x.shape).astype(np.float32)
        _adam_numpy_before_the_kernel(want[0], grad, want[1], want[2], steps, 0.003, 0.9,
                                      0.999, 1e-8, wd, adamw)
        ops.adam_step(got[0], grad, got[1], got[2], steps, 0.003, 0.9, 0.999, 1e-8, wd, adamw,
                      n_threads=2)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(_bits(a), _bits(b))


def test_layer_sums_follow_the_stated_order():
    """The twin's (and so the kernels') sum of squares: 16 lanes in column order per chunk of
    4,096 columns, lanes then chunks added in order — written here as plain loops."""
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((2, 9000)) * np.exp(rng.uniform(-8, 8, (2, 9000)))).astype(np.float32)
    bounds = [0, 5000, 9000]
    got = ref._sumsq(a, bounds)
    for r in range(2):
        for s, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
            total = 0.0
            for c0 in range(lo, hi, 4096):
                lanes = [0.0] * 16
                for j in range(c0, min(hi, c0 + 4096)):
                    lanes[(j - c0) % 16] += float(a[r, j]) ** 2
                chunk = 0.0
                for value in lanes:
                    chunk += value
                total += chunk
            assert got[r, s] == total
            assert math.isclose(got[r, s], math.fsum(float(t) ** 2 for t in a[r, lo:hi]),
                                rel_tol=1e-12)


def _args(name, P=3, D=8):
    x, g, m, v, steps, _ = _problem(P, D, 0)
    b = np.array([0, 5, D])
    if name == "adam":
        return ops.adam_step, [x, g, m, v, steps, 0.01, 0.9, 0.999, 1e-8]
    if name == "lamb":
        return ops.lamb_step, [x, g, m, v, np.zeros_like(x), steps, 0.01, 0.9, 0.999, 1e-6, 0.0, b]
    return ops.lars_step, [x, g, m, 0.5, 0.9, 0.0, 0.001, 1e-9, b]


@pytest.mark.parametrize("name", ["adam", "lamb", "lars"])
def test_bad_arguments_raise_naming_them(name):
    fn, args = _args(name)
    bad = list(args)
    bad[1] = args[1].astype(np.float64)
    with pytest.raises(TypeError, match="grad"):
        fn(*bad)
    bad = list(args)
    bad[1] = args[1][:, :4].copy()
    with pytest.raises(ValueError, match="grad"):
        fn(*bad)
    bad = list(args)
    bad[1] = args[0]  # the gradient is the parameters
    with pytest.raises(ValueError, match="share memory"):
        fn(*bad)
    with pytest.raises(ValueError, match="frozen must hold prefix lengths in"):
        fn(*args, frozen=np.array([0, 9, 0]))
    with pytest.raises(ValueError, match="frozen"):
        fn(*args, frozen=np.array([0, 1]))
    if name != "adam":
        for bounds in ([0, 8, 5], [1, 8], [0, 4], [0, 4, 4, 8], [0]):
            bad = list(args)
            bad[-1] = np.array(bounds)
            with pytest.raises(ValueError, match="bounds must rise strictly from 0 to dim = 8"):
                fn(*bad)


@pytest.mark.parametrize("name", ["adam", "lamb"])
def test_step_counts_are_checked(name):
    fn, args = _args(name)
    pos = 4 if name == "adam" else 5
    for bad, match in ((np.array([1, 2]), "steps must be a \\(3,\\) integer array"),
                       (np.array([1.0, 2.0, 3.0]), "integer array"),
                       (np.array([1, 0, 2]), "steps must be >= 1")):
        a = list(args)
        a[pos] = bad
        with pytest.raises(ValueError, match=match):
            fn(*a)


def test_lars_needs_its_buffer_with_momentum():
    fn, args = _args("lars")
    args[2] = None
    with pytest.raises(ValueError, match="buf is required when momentum"):
        fn(*args)


@pytest.mark.parametrize("name", ["adam", "adamw", "lamb", "lars"])
def test_optimizer_paths_agree(name):
    """The classes run the kernels for float32 C-contiguous operands and the twins otherwise:
    a strided view of the same values gives the same bits; float64 stays close."""
    cfg = OptimizerConfig(name=name, lr=0.01, weight_decay=0.01)
    x0, _, _, _, _, frozen = _problem(7, 300, 5)
    segs = [(0, 100), (100, 101), (101, 300)]
    rng = np.random.default_rng(9)
    grads = [rng.standard_normal(x0.shape).astype(np.float32) for _ in range(4)]
    fast, strided, wide = make(cfg, x0.shape, segments=segs), make(cfg, x0.shape, segments=segs), \
        make(cfg, x0.shape, dtype=np.float64, segments=segs)
    a = x0.copy()
    big = np.zeros((7, 600), np.float32)
    b = big[:, ::2]  # not C-contiguous: the twins
    b[...] = x0
    c = x0.astype(np.float64)
    for g in grads:
        fast.step(a, g, frozen=frozen)
        strided.step(b, np.asfortranarray(g), frozen=frozen)
        wide.step(c, g.astype(np.float64), frozen=frozen)
    np.testing.assert_array_equal(_bits(a), _bits(np.ascontiguousarray(b)))
    np.testing.assert_allclose(a, c, rtol=1e-4, atol=1e-5)
    for k, arr in fast.state_arrays().items():
        np.testing.assert_array_equal(arr, strided.state_arrays()[k])
