"""The softmax cross-entropy kernels (csrc/loss.c): against their NumPy references
(decentlearn/_reference/loss.py) bit for bit at 1 and 2 threads; exp against float64 np.exp (the
correctly rounded value, within one ulp); the loss and gradient against a float64 log-softmax
written directly; NaN and infinity as np.maximum/np.exp give them; argument checks; and the model's
loss_and_grad against the float64 NumPy form."""

import numpy as np
import pytest

from decentlearn import ops
from decentlearn._reference import loss as ref
from decentlearn.nn import make_model


def _ulps(a, b):
    """|a - b| in float32 ulps (for finite values of one sign or zero)."""
    ia = a.view(np.int32).astype(np.int64)
    ib = b.view(np.int32).astype(np.int64)
    ia = np.where(ia < 0, -(ia & 0x7FFFFFFF), ia)
    ib = np.where(ib < 0, -(ib & 0x7FFFFFFF), ib)
    return np.abs(ia - ib)


def test_exp_is_within_one_ulp_of_the_correctly_rounded_value_and_matches_the_reference():
    rng = np.random.default_rng(0)
    x = np.concatenate([
        (rng.standard_normal(200_000) * 30).astype(np.float32),
        rng.uniform(-1e-3, 1e-3, 10_000).astype(np.float32),
        # the ends of the range: denormal results, the clamps, overflow to inf
        np.linspace(-110, -80, 3001, dtype=np.float32), np.linspace(85, 95, 1001, dtype=np.float32),
        np.array([0.0, -0.0, -104.0, 89.0, 88.72283, 88.72284, -87.33654, -103.97],
                 np.float32),
    ])
    y = ops.exp_f32(x)
    np.testing.assert_array_equal(y.view(np.uint32), ref.exp_f32(x).view(np.uint32))
    with np.errstate(over="ignore"):
        exact = np.exp(x.astype(np.float64)).astype(np.float32)  # float64 exp, rounded once
    finite = np.isfinite(exact)
    np.testing.assert_array_equal(np.isinf(y), ~finite)
    d = _ulps(y[finite], exact[finite])
    assert d.max() <= 1
    # the polynomial's error is < 0.01 ulp before rounding: ties aside, correctly rounded
    assert np.mean(d == 0) > 0.999
    assert ops.exp_f32(np.float32([0.0]))[0] == 1.0


def test_exp_special_values():
    x = np.array([np.nan, -np.inf, np.inf, -1e30, 1e30, -200.0], np.float32)
    y = ops.exp_f32(x)
    assert np.isnan(y[0])
    np.testing.assert_array_equal(y[1:], np.float32([0, np.inf, 0, np.inf, 0]))
    np.testing.assert_array_equal(np.isnan(ref.exp_f32(x)), np.isnan(y))


def _dense_xent(logits, labels):
    """float64 log-softmax, written directly: loss (P,) and gradient (P, B, C)."""
    z = logits.astype(np.float64)
    m = z.max(axis=-1, keepdims=True)
    lse = m[..., 0] + np.log(np.exp(z - m).sum(axis=-1))
    zy = np.take_along_axis(z, labels[..., None], axis=-1)[..., 0]
    p = np.exp(z - lse[..., None])
    onehot = np.eye(z.shape[-1])[labels]
    return (lse - zy).mean(axis=1), (p - onehot) / z.shape[1]


@pytest.mark.parametrize("shape", [(3, 5, 10), (1, 1, 1), (4, 300, 7), (2, 600, 3), (64, 32, 10)])
@pytest.mark.parametrize("threads", [1, 2])
def test_softmax_xent_matches_reference_and_float64(shape, threads):
    rng = np.random.default_rng(sum(shape))
    logits = (rng.standard_normal(shape) * 4).astype(np.float32)
    labels = rng.integers(0, shape[2], shape[:2])
    z = logits.copy()
    loss = ops.softmax_xent(z, labels, n_threads=threads)
    z_ref = logits.copy()
    loss_ref = ref.softmax_xent(z_ref, labels)
    np.testing.assert_array_equal(z.view(np.uint32), z_ref.view(np.uint32))
    np.testing.assert_allclose(loss, loss_ref, rtol=1e-15, atol=1e-15)  # libm's log vs NumPy's
    loss64, grad64 = _dense_xent(logits, labels)
    np.testing.assert_allclose(loss, loss64, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(z, grad64, rtol=1e-5, atol=1e-7)
    # without the gradient: the same loss, logits left as the softmax numerators
    z2 = logits.copy()
    np.testing.assert_array_equal(ops.softmax_xent(z2, labels, want_grad=False), loss)
    m = logits.max(axis=-1, keepdims=True)
    np.testing.assert_array_equal(z2, ops.exp_f32(logits - m))


def test_results_do_not_depend_on_the_thread_count():
    rng = np.random.default_rng(5)
    logits = (rng.standard_normal((257, 33, 10)) * 6).astype(np.float32)
    labels = rng.integers(0, 10, (257, 33))
    outs = []
    for t in (1, 2, 3):
        z = logits.copy()
        outs.append((ops.softmax_xent(z, labels, n_threads=t), z))
    for loss, z in outs[1:]:
        np.testing.assert_array_equal(loss, outs[0][0])
        np.testing.assert_array_equal(z, outs[0][1])


def test_shared_labels_row_is_broadcast():
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((6, 9, 4)).astype(np.float32)
    y = rng.integers(0, 4, 9)
    a, b, c = logits.copy(), logits.copy(), logits.copy()
    la = ops.softmax_xent(a, np.broadcast_to(y, (6, 9)))
    lb = ops.softmax_xent(b, np.tile(y, (6, 1)))
    lc = ops.softmax_xent(c, y[None, :])
    np.testing.assert_array_equal(la, lb)
    np.testing.assert_array_equal(lc, lb)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(c, b)


def test_nan_and_infinity_propagate_as_in_numpy():
    logits = np.zeros((3, 2, 4), np.float32)
    logits[0, 0, 2] = np.nan
    logits[1, 1, 0] = np.inf
    logits[2, 0, 1] = -np.inf
    labels = np.zeros((3, 2), np.int64)
    z = logits.copy()
    loss = ops.softmax_xent(z, labels)
    z_ref = logits.copy()
    loss_ref = ref.softmax_xent(z_ref, labels)
    assert np.isnan(loss[0]) and np.isnan(loss[1]) and np.isfinite(loss[2])
    np.testing.assert_array_equal(np.isnan(z), np.isnan(z_ref))
    np.testing.assert_array_equal(z[2], z_ref[2])
    np.testing.assert_allclose(loss[2], loss_ref[2], rtol=1e-15)
    assert z[2, 0, 1] == 0.0  # exp(-inf) = 0: its softmax share and gradient are 0


def test_bad_arguments_raise_clear_errors():
    z = np.zeros((2, 3, 4), np.float32)
    with pytest.raises(ValueError, match=r"labels must be class indices in \[0, 4\), got 4 at \(1, 2\)"):
        ops.softmax_xent(z, np.array([[0, 1, 2], [3, 0, 4]]))
    with pytest.raises(ValueError, match=r"got -1 at \(0, 0\)"):
        ops.softmax_xent(z, np.array([[-1, 1, 2], [3, 0, 1]]))
    with pytest.raises(ValueError, match="labels must have 2 rows"):
        ops.softmax_xent(z, np.zeros((3, 3), np.int64))
    with pytest.raises(ValueError, match="labels"):
        ops.softmax_xent(z, np.zeros((2, 4), np.int64))
    with pytest.raises(ValueError, match="at least one class"):
        ops.softmax_xent(np.zeros((2, 3, 0), np.float32), np.zeros((2, 3), np.int64))
    with pytest.raises(ValueError, match="3-D"):
        ops.softmax_xent(np.zeros((2, 3), np.float32), np.zeros((2, 3), np.int64))
    with pytest.raises(ValueError, match="C-contiguous"):
        ops.softmax_xent(np.zeros((2, 4, 3), np.float32).transpose(0, 2, 1),
                         np.zeros((2, 3), np.int64))
    with pytest.raises((TypeError, ValueError), match="float32"):
        ops.softmax_xent(np.zeros((2, 3, 4), np.float64), np.zeros((2, 3), np.int64))
    with pytest.raises(ValueError, match="size"):
        ops.exp_f32(np.zeros(3, np.float32), out=np.zeros(4, np.float32))


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_model_loss_and_grad_matches_the_float64_numpy_form(name):
    """float32 models run the C kernel, float64 ones the NumPy form: the same loss and gradient
    up to float32 rounding."""
    rng = np.random.default_rng(3)
    model = make_model(name, (1, 8, 8), 10)
    p = np.stack([model.init(seed) for seed in range(3)])
    x = rng.standard_normal((3, 5, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, (3, 5))
    loss32, g32 = model.loss_and_grad(p, x, y, step=0)
    loss64, g64 = model.loss_and_grad(p.astype(np.float64), x.astype(np.float64), y, step=0)
    assert g32.dtype == np.float32 and g64.dtype == np.float64
    np.testing.assert_allclose(loss32, loss64, rtol=1e-5)
    np.testing.assert_allclose(g32, g64, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("shared", [False, True])
def test_correct_counts_are_numpys_argmax_hits(threads, shared):
    """``correct`` counts per peer the rows whose np.argmax is the label: ties go to the first
    maximum, a NaN anywhere in a row to the first NaN; counted from the logits before they are
    overwritten, at any thread count, by the kernel and its reference alike."""
    rng = np.random.default_rng(7)
    P, B, C = 9, 40, 10
    z = rng.integers(-3, 4, (P, B, C)).astype(np.float32)  # many ties
    z[0, 0, :] = np.nan
    z[1, 2, 5] = np.nan
    z[2, 3, 7] = np.nan
    z[2, 3, 8] = np.nan
    z[3, 4, :] = -np.inf
    z[4, 5, 2] = np.inf
    y = rng.integers(0, C, (1, B) if shared else (P, B))
    y[0, 0] = 0
    if not shared:
        y[1, 2], y[2, 3] = 5, 7
    want = np.count_nonzero(np.argmax(z, axis=-1) == np.broadcast_to(y, (P, B)), axis=1)
    assert want.max() > 0 and want.min() < B
    for fn in (ops.softmax_xent, ref.softmax_xent):
        zz, correct = z.copy(), np.full(P, -1, np.int64)
        with np.errstate(all="ignore"):
            loss = fn(zz, y, want_grad=False, n_threads=threads, correct=correct)
        np.testing.assert_array_equal(correct, want)
        zz2 = z.copy()
        with np.errstate(all="ignore"):
            loss2 = fn(zz2, y, want_grad=False, n_threads=threads)  # counting changes nothing
        np.testing.assert_array_equal(loss, loss2)
        np.testing.assert_array_equal(zz.view(np.uint32), zz2.view(np.uint32))


def test_correct_bad_arguments():
    z = np.zeros((3, 4, 5), np.float32)
    y = np.zeros((3, 4), np.int64)
    with pytest.raises(ValueError, match="correct"):
        ops.softmax_xent(z, y, correct=np.zeros(2, np.int64))
    with pytest.raises((TypeError, ValueError), match="correct"):
        ops.softmax_xent(z, y, correct=np.zeros(3, np.float64))


def test_model_evaluate_accuracy_is_the_argmax_accuracy():
    """Model.evaluate's accuracies (now counted inside the loss kernel) against np.argmax of the
    model's own logits."""
    rng = np.random.default_rng(3)
    model = make_model("mlp", (8, 8), 10)
    params = (rng.standard_normal((5, model.dim)) * 0.3).astype(np.float32)
    x = rng.standard_normal((70, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, 70)
    acc, _ = model.evaluate(params, x, y, batch_size=32)
    logits, _ = model._forward(params, model._check_x(x, 5, np.float32)[0], train=False)
    want = np.count_nonzero(np.argmax(logits, axis=-1) == y, axis=1) / 70
    assert 0 < want.min() and want.max() < 1
    np.testing.assert_array_equal(acc, want)
