"""BatchNorm2d batched over peers: gradients against finite differences, running statistics and
evaluation against a NumPy reference, and the cnn-bn model."""

import numpy as np
import pytest

from decentlearn import nn
from decentlearn.nn.batchnorm import BatchNorm2d


def _model():
    layers = [nn.Conv2d(1, 2, kernel_size=3, padding=1), BatchNorm2d(2, momentum=0.25),
              nn.ReLU(), nn.Flatten(), nn.Dense(2 * 4 * 4, 3, init="torch_uniform")]
    return nn.Model(layers, (1, 4, 4), 3)


def _bn_slices(model):
    return {name: sl for name, sl, _ in model.layout() if name.startswith("bn1.")}


def test_gradient_matches_finite_differences():
    model = _model()
    rng = np.random.default_rng(0)
    params = np.stack([model.init(s, np.float64) for s in (1, 2)])
    params += rng.normal(0, 0.1, params.shape)
    x = rng.normal(size=(2, 5, 1, 4, 4))
    y = rng.integers(0, 3, (2, 5))
    _, grad = model.loss_and_grad(params.copy(), x, y)
    sl = _bn_slices(model)
    assert not grad[:, sl["bn1.running_mean"]].any() and not grad[:, sl["bn1.running_var"]].any()
    eps = 1e-6
    for j in rng.choice(model.dim, 25, replace=False):
        p_plus, p_minus = params.copy(), params.copy()
        p_plus[:, j] += eps
        p_minus[:, j] -= eps
        lp, _ = model.loss_and_grad(p_plus, x, y)
        lm, _ = model.loss_and_grad(p_minus, x, y)
        np.testing.assert_allclose(grad[:, j], (lp - lm) / (2 * eps), atol=1e-6)


def test_running_statistics_update_and_eval():
    """Training updates r <- (1 - m) r + m stat (unbiased variance) per peer in the parameter row;
    evaluation normalises with the running statistics (NumPy reference)."""
    bn = BatchNorm2d(3, momentum=0.25)
    model = nn.Model([bn, nn.Flatten(), nn.Dense(3 * 2 * 2, 2)], (3, 2, 2), 2)
    rng = np.random.default_rng(1)
    params = np.stack([model.init(0)] * 2).astype(np.float32)
    sl = _bn_slices(model)
    params[:, sl["bn1.weight"]] = rng.uniform(0.5, 2, (2, 3))
    params[:, sl["bn1.bias"]] = rng.normal(size=(2, 3))
    x = rng.normal(2.0, 3.0, size=(2, 6, 3, 2, 2)).astype(np.float32)
    y = rng.integers(0, 2, (2, 6))
    model.loss_and_grad(params, x, y)
    mean = x.mean(axis=(1, 3, 4))
    var = x.var(axis=(1, 3, 4), ddof=1)
    np.testing.assert_allclose(params[:, sl["bn1.running_mean"]], 0.25 * mean, atol=1e-5)
    np.testing.assert_allclose(params[:, sl["bn1.running_var"]], 0.75 + 0.25 * var, atol=1e-4)
    # Evaluation: y = gamma (x - rm) / sqrt(rv + eps) + beta, then the dense layer.
    logits = model.forward(params, x)
    rm, rv = params[:, sl["bn1.running_mean"]], params[:, sl["bn1.running_var"]]
    g, b = params[:, sl["bn1.weight"]], params[:, sl["bn1.bias"]]
    norm = (x - rm[:, None, :, None, None]) / np.sqrt(rv[:, None, :, None, None] + 1e-5)
    h = norm * g[:, None, :, None, None] + b[:, None, :, None, None]
    dense = [(n, s, shp) for n, s, shp in model.layout() if n.startswith("fc")]
    W = params[:, dense[0][1]].reshape(2, *dense[0][2])
    bias = params[:, dense[1][1]]
    assert W.shape == (2, 12, 2)  # Dense weight: (in, out) per peer
    ref = np.einsum("pbi,pio->pbo", h.reshape(2, 6, -1), W) + bias[:, None, :]
    np.testing.assert_allclose(logits, ref, atol=1e-4)


def test_cnn_bn_model_builds_and_trains_one_step():
    model = nn.make_model("cnn-bn", (1, 28, 28), 10)
    names = [n for n, _ in model.layers]
    assert names[:2] == ["conv1", "bn1"] and names.count("bn1") == 1 and "bn2" in names
    params = np.stack([model.init(0)] * 2)
    rng = np.random.default_rng(0)
    loss, grad = model.loss_and_grad(params, rng.normal(size=(2, 4, 1, 28, 28)).astype(np.float32),
                                     rng.integers(0, 10, (2, 4)))
    assert np.isfinite(loss).all() and np.isfinite(grad).all()
    with pytest.raises(ValueError, match="cnn-bn"):
        nn.make_model("cnn-bn:x", (1, 28, 28), 10)


@pytest.mark.parametrize("kw", [dict(num_channels=0), dict(num_channels=2, momentum=0.0),
                                dict(num_channels=2, eps=-1.0)])
def test_bad_hyperparameters(kw):
    with pytest.raises(ValueError):
        BatchNorm2d(**kw)
