"""Tests of decentlearn.optim: SGD against a scalar, one-element-at-a-time implementation of
PyTorch's SGD formula over several steps (momentum, Nesterov, weight decay, per-step learning
rates), the gradient left untouched, the momentum buffer, and argument validation."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decentlearn.optim import SGD, SGDConfig


def reference_sgd(
    cfg: SGDConfig, params: np.ndarray, grads: list[np.ndarray], lrs: list[float | None]
) -> tuple[np.ndarray, np.ndarray]:
    """torch.optim.SGD (dampening 0) written one scalar at a time in Python floats."""
    p = [float(v) for v in params.ravel()]
    buf: list[float | None] = [None] * len(p)
    for grad, lr_step in zip(grads, lrs):
        lr = cfg.lr if lr_step is None else lr_step
        for i, gi in enumerate(float(v) for v in grad.ravel()):
            d = gi + cfg.weight_decay * p[i]
            if cfg.momentum != 0:
                b = d if buf[i] is None else cfg.momentum * buf[i] + d  # type: ignore[operator]
                buf[i] = b
                d = d + cfg.momentum * b if cfg.nesterov else b
            p[i] -= lr * d
    out_buf = np.array([0.0 if b is None else b for b in buf]).reshape(params.shape)
    return np.array(p).reshape(params.shape), out_buf


CONFIGS = [
    SGDConfig(lr=0.1),
    SGDConfig(lr=0.1, weight_decay=0.01),
    SGDConfig(lr=0.05, momentum=0.9),
    SGDConfig(lr=0.05, momentum=0.9, weight_decay=5e-4),
    SGDConfig(lr=0.05, momentum=0.9, nesterov=True),
    SGDConfig(lr=0.05, momentum=0.5, nesterov=True, weight_decay=0.1),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=repr)
@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-12), (np.float32, 1e-5)])
def test_matches_scalar_reference(cfg: SGDConfig, dtype: type, rtol: float) -> None:
    rng = np.random.default_rng(0)
    shape = (3, 7)
    params = rng.standard_normal(shape).astype(dtype)
    grads = [rng.standard_normal(shape).astype(dtype) for _ in range(5)]
    lrs: list[float | None] = [None, None, 0.01, None, 0.2]
    ref_params, ref_buf = reference_sgd(cfg, params, grads, lrs)
    opt = SGD(cfg, shape, dtype)
    for grad, lr in zip(grads, lrs):
        opt.step(params, grad, lr=lr)
    assert params.dtype == dtype
    np.testing.assert_allclose(params, ref_params, rtol=rtol, atol=rtol)
    if cfg.momentum:
        np.testing.assert_allclose(opt.momentum_buffer, ref_buf, rtol=rtol, atol=rtol)


@settings(max_examples=30, deadline=None)
@given(
    lr=st.floats(1e-4, 1.0),
    momentum=st.sampled_from([0.0, 0.3, 0.9, 0.99]),
    nesterov=st.booleans(),
    weight_decay=st.sampled_from([0.0, 1e-4, 0.1]),
    steps=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_matches_scalar_reference_property(
    lr: float, momentum: float, nesterov: bool, weight_decay: float, steps: int, seed: int
) -> None:
    nesterov = nesterov and momentum > 0
    cfg = SGDConfig(lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay)
    rng = np.random.default_rng(seed)
    params = rng.standard_normal((2, 5))
    grads = [rng.standard_normal((2, 5)) for _ in range(steps)]
    ref, _ = reference_sgd(cfg, params, grads, [None] * steps)
    opt = SGD(cfg, params.shape, np.float64)
    for g in grads:
        opt.step(params, g)
    np.testing.assert_allclose(params, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cfg", CONFIGS, ids=repr)
def test_grad_is_not_modified(cfg: SGDConfig) -> None:
    rng = np.random.default_rng(1)
    params = rng.standard_normal((4, 6)).astype(np.float32)
    grad = rng.standard_normal((4, 6)).astype(np.float32)
    saved = grad.copy()
    grad.flags.writeable = False  # any write would raise
    opt = SGD(cfg, params.shape)
    for _ in range(3):
        opt.step(params, grad)
    np.testing.assert_array_equal(grad, saved)


def test_momentum_buffer() -> None:
    cfg = SGDConfig(lr=0.1, momentum=0.9)
    opt = SGD(cfg, (2, 3), np.float64)
    buf = opt.momentum_buffer
    assert buf.shape == (2, 3) and buf.dtype == np.float64 and not buf.any()
    params = np.ones((2, 3))
    grad = np.full((2, 3), 2.0)
    opt.step(params, grad)
    np.testing.assert_array_equal(opt.momentum_buffer, grad)  # first step: buf = g
    assert opt.momentum_buffer is buf
    buf[...] = buf.mean(axis=0)  # what a simulator may do: average it in place
    opt.reset()
    assert not opt.momentum_buffer.any()
    params2 = np.ones((2, 3))
    opt.step(params2, grad)
    np.testing.assert_allclose(params2, 1 - 0.1 * 2.0)
    with pytest.raises(AttributeError):
        opt.momentum_buffer = np.zeros((2, 3))  # type: ignore[misc]


def test_zero_dim_shapes() -> None:
    opt = SGD(SGDConfig(lr=0.1, momentum=0.9), (0, 5))
    opt.step(np.zeros((0, 5), np.float32), np.zeros((0, 5), np.float32))


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"lr": 0.0}, ValueError),
        ({"lr": -1.0}, ValueError),
        ({"lr": float("nan")}, ValueError),
        ({"lr": float("inf")}, ValueError),
        ({"lr": "0.1"}, TypeError),
        ({"lr": True}, TypeError),
        ({"lr": 0.1, "momentum": 1.0}, ValueError),
        ({"lr": 0.1, "momentum": -0.1}, ValueError),
        ({"lr": 0.1, "nesterov": True}, ValueError),
        ({"lr": 0.1, "momentum": 0.9, "nesterov": 1}, TypeError),
        ({"lr": 0.1, "weight_decay": -1e-4}, ValueError),
        ({"lr": 0.1, "weight_decay": None}, TypeError),
    ],
)
def test_config_validation(kwargs: dict, error: type) -> None:
    with pytest.raises(error):
        SGDConfig(**kwargs)


def test_config_is_frozen_and_named_in_errors() -> None:
    cfg = SGDConfig(lr=0.1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.lr = 0.2  # type: ignore[misc]
    with pytest.raises(ValueError, match="momentum"):
        SGDConfig(lr=0.1, momentum=2.0)
    with pytest.raises(ValueError, match="nesterov"):
        SGDConfig(lr=0.1, nesterov=True)


def test_step_argument_errors() -> None:
    opt = SGD(SGDConfig(lr=0.1, momentum=0.9), (2, 3))
    p = np.zeros((2, 3), np.float32)
    g = np.zeros((2, 3), np.float32)
    with pytest.raises(TypeError, match="grad"):
        opt.step(p, g.astype(np.float64))
    with pytest.raises(ValueError, match="params"):
        opt.step(np.zeros((3, 3), np.float32), g)
    with pytest.raises(TypeError, match="params"):
        opt.step(p.tolist(), g)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lr"):
        opt.step(p, g, lr=0.0)
    ro = p.copy()
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="params"):
        opt.step(ro, g)
    with pytest.raises(TypeError, match="config"):
        SGD({"lr": 0.1}, (2, 3))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="shape"):
        SGD(SGDConfig(lr=0.1), (2,))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="dtype"):
        SGD(SGDConfig(lr=0.1), (2, 3), np.int64)
    assert "SGD(" in repr(opt) and "lr=0.1" in repr(opt)
