"""Tests of decentlearn.nn: gradients against central finite differences in float64 (every layer
type and every model spec, with peers that have different parameters and batches), batched versus
one-peer-at-a-time results, shared versus per-peer inputs, dtypes, chunking and scratch reuse,
input validation, and a small end-to-end training run."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decentlearn import nn
from decentlearn.nn import (
    Conv2d,
    Dense,
    Flatten,
    GroupNorm,
    MaxPool2d,
    Model,
    ReLU,
    Scratch,
    available_models,
    make_model,
)
from decentlearn.optim import SGD, SGDConfig

FD_EPS = 1e-6
FD_RTOL = 1e-6


def _peer_params(model: Model, n_peers: int, dtype: type = np.float64, seed: int = 0) -> np.ndarray:
    """Different parameters per peer: each its own init plus noise (so biases are not zero)."""
    rng = np.random.default_rng(seed)
    params = np.stack([model.init(100 + p, dtype) for p in range(n_peers)])
    params += (0.1 * rng.standard_normal(params.shape)).astype(dtype)
    return params


def _batch(model: Model, n_peers: int, batch: int, dtype: type = np.float64, seed: int = 1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_peers, batch, *model.input_shape)).astype(dtype)
    y = rng.integers(0, model.n_classes, size=(n_peers, batch))
    return x, y


def _coords(model: Model, per_tensor: int, rng: np.random.Generator) -> np.ndarray:
    """A few random coordinates of every parameter tensor."""
    picks = [
        rng.choice(
            np.arange(sl.start, sl.stop), size=min(per_tensor, sl.stop - sl.start), replace=False
        )
        for _, sl, _ in model.layout()
    ]
    return np.concatenate(picks)


def _check_fd(
    model: Model, params: np.ndarray, x: np.ndarray, y: np.ndarray, per_tensor: int = 4
) -> None:
    loss, grad = model.loss_and_grad(params, x, y)
    rng = np.random.default_rng(2)
    n_peers = params.shape[0]
    fd, an = [], []
    for j in _coords(model, per_tensor, rng):
        # Each peer's loss depends on its own row only, so all peers are perturbed at once, each
        # at a different coordinate.
        cols = (j + 7 * np.arange(n_peers)) % model.dim
        rows = np.arange(n_peers)
        plus, minus = params.copy(), params.copy()
        plus[rows, cols] += FD_EPS
        minus[rows, cols] -= FD_EPS
        lp, _ = model.loss_and_grad(plus, x, y)
        lm, _ = model.loss_and_grad(minus, x, y)
        fd.append((lp - lm) / (2 * FD_EPS))
        an.append(grad[rows, cols])
    fd_a, an_a = np.array(fd), np.array(an)
    err = np.linalg.norm(fd_a - an_a) / np.linalg.norm(an_a)
    assert err < FD_RTOL, f"relative error {err:.3g}"
    np.testing.assert_allclose(an_a, fd_a, rtol=1e-4, atol=1e-8)
    assert loss.dtype == np.float64 and loss.shape == (n_peers,)


# ---- finite differences: models ------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, input_shape",
    [
        ("linear", (1, 8, 8)),
        ("linear", (5,)),
        ("mlp", (1, 4, 4)),
        ("mlp:6,5", (7,)),
        ("cnn", (1, 8, 8)),
        ("cnn", (2, 8, 12)),
        ("cnn:gn", (1, 8, 8)),
        ("cnn:gn", (3, 4, 8)),
    ],
)
def test_finite_differences_model_specs(spec: str, input_shape: tuple[int, ...]) -> None:
    model = make_model(spec, input_shape, 4)
    params = _peer_params(model, 3)
    x, y = _batch(model, 3, 4)
    _check_fd(model, params, x, y)


def test_finite_differences_shared_input() -> None:
    model = make_model("cnn:gn", (1, 8, 8), 3)
    params = _peer_params(model, 2)
    x, y = _batch(model, 1, 5)
    _check_fd(model, params, x[0], y[0])


@pytest.mark.parametrize("chunk", [1, 1 << 30])
def test_finite_differences_custom_convs(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    # kernel 3 without padding and with padding 1, GroupNorm with 1 group and one group per
    # channel; chunk=1 unfolds one sample at a time (the multi-chunk path), 2**30 all at once.
    monkeypatch.setattr(nn.layers, "_CONV_CHUNK", chunk)
    layers = [
        Conv2d(2, 4, kernel_size=3, padding=0),  # 10x10 -> 8x8
        GroupNorm(1, 4),
        ReLU(),
        Conv2d(4, 4, kernel_size=3, padding=1),
        GroupNorm(4, 4),
        MaxPool2d(),
        ReLU(),
        Flatten(),
        Dense(4 * 4 * 4, 3),
    ]
    model = Model(layers, (2, 10, 10), 3)
    params = _peer_params(model, 3)
    x, y = _batch(model, 3, 3)
    _check_fd(model, params, x, y)


# ---- finite differences: single layers (parameter and input gradients) ---------------------


def _layer_case(layer: nn.Layer, in_shape: tuple[int, ...], n_peers: int, batch: int):
    rng = np.random.default_rng(3)
    ws = tuple(rng.standard_normal((n_peers, *s)) for _, s in layer.param_shapes())
    if layer.spatial:
        c, h, w = in_shape
        x = rng.standard_normal((n_peers, c, batch, h, w))  # channel-major
    else:
        x = rng.standard_normal((n_peers, batch, *in_shape))
    if isinstance(layer, ReLU):
        x = np.sign(x) * (0.05 + np.abs(x))  # no pre-activation near the kink
    return ws, x


@pytest.mark.parametrize(
    "layer, in_shape",
    [
        (Dense(5, 3), (5,)),
        (Conv2d(2, 3, kernel_size=5, padding=2), (2, 6, 4)),
        (Conv2d(3, 2, kernel_size=3, padding=0), (3, 5, 6)),
        (MaxPool2d(), (2, 4, 6)),
        (ReLU(), (7,)),
        (GroupNorm(2, 4), (4, 3, 2)),
        (Flatten(), (2, 3, 2)),
    ],
)
def test_finite_differences_layers(layer: nn.Layer, in_shape: tuple[int, ...]) -> None:
    n_peers, batch = 2, 3
    ws, x = _layer_case(layer, in_shape, n_peers, batch)

    def readonly(a: np.ndarray) -> np.ndarray:
        v = a.view()
        v.flags.writeable = False  # as the model passes its input: layers must not write it
        return v

    y0, _ = layer.forward(ws, readonly(x), False, Scratch())
    r = np.random.default_rng(4).standard_normal(y0.shape)

    def objective(ws_: tuple[np.ndarray, ...], x_: np.ndarray) -> np.ndarray:
        out, _ = layer.forward(ws_, readonly(x_), False, Scratch())
        return (out * r).reshape(n_peers, -1).sum(axis=1)  # one scalar per peer

    scratch = Scratch()
    _, ctx = layer.forward(ws, readonly(x), True, scratch)
    gs = tuple(np.full_like(w, np.nan) for w in ws)
    dx = layer.backward(ws, gs, r.copy(), ctx, True, scratch)
    assert dx is not None and dx.shape == x.shape
    rng = np.random.default_rng(5)
    targets = [(x, dx)] + list(zip(ws, gs))
    for k, (arr, an) in enumerate(targets):
        flat = arr.reshape(n_peers, -1)
        for j in rng.choice(flat.shape[1], size=min(6, flat.shape[1]), replace=False):
            saved = flat[:, j].copy()
            flat[:, j] = saved + FD_EPS
            fp = objective(ws, x)
            flat[:, j] = saved - FD_EPS
            fm = objective(ws, x)
            flat[:, j] = saved
            fd = (fp - fm) / (2 * FD_EPS)
            np.testing.assert_allclose(
                an.reshape(n_peers, -1)[:, j],
                fd,
                rtol=FD_RTOL,
                atol=1e-8,
                err_msg=f"target {k}, coordinate {j}",
            )


def test_maxpool_ties_route_to_one_element() -> None:
    x = np.zeros((1, 1, 1, 2, 4))  # two windows of equal values
    x[..., 2:] = 3.0
    scratch = Scratch()
    y, ctx = MaxPool2d().forward((), x, True, scratch)
    dx = MaxPool2d().backward((), (), np.ones_like(y), ctx, True, scratch)
    # Left column, then top row.
    expected = np.array([[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    np.testing.assert_array_equal(dx[0, 0, 0], expected)


# ---- batching ------------------------------------------------------------------------------

SPECS = [("linear", (1, 8, 8)), ("mlp", (1, 8, 8)), ("cnn", (1, 8, 8)), ("cnn:gn", (3, 8, 8))]


@pytest.mark.parametrize("spec, input_shape", SPECS)
def test_batched_equals_per_peer(spec: str, input_shape: tuple[int, ...]) -> None:
    model = make_model(spec, input_shape, 10)
    params = _peer_params(model, 4, np.float32)
    x, y = _batch(model, 4, 6, np.float32)
    loss, grad = model.loss_and_grad(params, x, y)
    logits = model.forward(params, x)
    for p in range(4):
        l1, g1 = model.loss_and_grad(params[p : p + 1], x[p : p + 1], y[p : p + 1])
        np.testing.assert_allclose(l1[0], loss[p], rtol=1e-6)
        np.testing.assert_allclose(g1[0], grad[p], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(
            model.forward(params[p : p + 1], x[p : p + 1])[0], logits[p], rtol=1e-6, atol=1e-6
        )


@settings(max_examples=15, deadline=None)
@given(n_peers=st.integers(1, 4), batch=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_batched_equals_per_peer_property(n_peers: int, batch: int, seed: int) -> None:
    model = make_model("cnn:gn", (1, 4, 4), 3)
    params = _peer_params(model, n_peers, np.float32, seed)
    x, y = _batch(model, n_peers, batch, np.float32, seed + 1)
    loss, grad = model.loss_and_grad(params, x, y)
    p = seed % n_peers
    l1, g1 = model.loss_and_grad(params[p : p + 1], x[p : p + 1], y[p : p + 1])
    np.testing.assert_allclose(l1[0], loss[p], rtol=1e-6)
    np.testing.assert_allclose(g1[0], grad[p], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("spec, input_shape", SPECS)
def test_shared_input_equals_repeated_input(spec: str, input_shape: tuple[int, ...]) -> None:
    model = make_model(spec, input_shape, 10)
    params = _peer_params(model, 3, np.float32)
    x, y = _batch(model, 1, 5, np.float32)
    repeated = np.repeat(x, 3, axis=0)
    np.testing.assert_allclose(
        model.forward(params, x[0]), model.forward(params, repeated), rtol=1e-6, atol=1e-6
    )
    l_shared, g_shared = model.loss_and_grad(params, x[0], y[0])
    l_rep, g_rep = model.loss_and_grad(params, repeated, np.repeat(y, 3, axis=0))
    np.testing.assert_allclose(l_shared, l_rep, rtol=1e-6)
    np.testing.assert_allclose(g_shared, g_rep, rtol=1e-6, atol=1e-7)


def test_peers_are_independent() -> None:
    model = make_model("cnn:gn", (1, 8, 8), 4)
    params = _peer_params(model, 3, np.float32)
    x, y = _batch(model, 3, 4, np.float32)
    loss, grad = model.loss_and_grad(params, x, y)
    changed = params.copy()
    changed[1] += 0.5
    x2 = x.copy()
    x2[1] += 1.0
    loss2, grad2 = model.loss_and_grad(changed, x2, y)
    np.testing.assert_array_equal(loss2[[0, 2]], loss[[0, 2]])
    np.testing.assert_array_equal(grad2[[0, 2]], grad[[0, 2]])
    assert not np.array_equal(grad2[1], grad[1])


# ---- dtypes, buffers, inputs ---------------------------------------------------------------


def _arrays(obj: object) -> list[np.ndarray]:
    if isinstance(obj, np.ndarray):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [a for o in obj for a in _arrays(o)]
    return []


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("spec, input_shape", SPECS)
def test_dtype_is_kept(spec: str, input_shape: tuple[int, ...], dtype: type) -> None:
    model = make_model(spec, input_shape, 10)
    params = _peer_params(model, 2, dtype)
    x, y = _batch(model, 2, 3, np.float64)  # x is cast to params.dtype
    assert model.forward(params, x).dtype == dtype
    assert model.forward(params, x.astype(np.uint8)).dtype == dtype
    loss, grad = model.loss_and_grad(params, x, y)
    assert grad.dtype == dtype and loss.dtype == np.float64
    acc, mean_loss = model.evaluate(params, x[0], y[0])
    assert acc.dtype == np.float64 and mean_loss.dtype == np.float64
    # No silent upcasts: every intermediate kept for the backward pass is in params.dtype (or a
    # mask: bool, or MaxPool2d's uint8 winner codes).
    xb, _ = model._check_x(x, 2, np.dtype(dtype))
    _, ctxs = model._forward(params, xb, train=True)
    for arr in _arrays(ctxs):
        assert arr.dtype in (np.dtype(dtype), np.dtype(bool), np.dtype(np.uint8)), arr.dtype


def test_grad_is_written_into_given_buffer() -> None:
    model = make_model("cnn:gn", (1, 8, 8), 10)
    params = _peer_params(model, 2, np.float32)
    x, y = _batch(model, 2, 3, np.float32)
    _, expected = model.loss_and_grad(params, x, y)
    buf = np.full_like(params, np.nan)
    _, grad = model.loss_and_grad(params, x, y, grad=buf)
    assert grad is buf
    np.testing.assert_array_equal(buf, expected)


def test_inputs_are_not_modified() -> None:
    model = make_model("cnn:gn", (1, 8, 8), 10)
    params = _peer_params(model, 2, np.float32)
    x, y = _batch(model, 2, 3, np.float32)
    copies = params.copy(), x.copy(), y.copy()
    model.loss_and_grad(params, x, y)
    model.forward(params, x)
    model.evaluate(params, x[0], y[0], batch_size=2)
    for a, b in zip((params, x, y), copies):
        np.testing.assert_array_equal(a, b)


def test_scratch_reuse_across_shapes_and_threads() -> None:
    model = make_model("cnn:gn", (1, 8, 8), 10)
    params = _peer_params(model, 3, np.float32)
    x, y = _batch(model, 3, 5, np.float32)
    l_ref, g_ref = make_model("cnn:gn", (1, 8, 8), 10).loss_and_grad(params, x, y)
    model.loss_and_grad(params[:2], x[:2, :2], y[:2, :2])  # smaller shapes first
    model.evaluate(params, x[0], y[0], batch_size=3)
    model.forward(params, x[:, :1].astype(np.float64))
    loss, grad = model.loss_and_grad(params, x, y)
    np.testing.assert_array_equal(loss, l_ref)
    np.testing.assert_array_equal(grad, g_ref)

    results: list[np.ndarray] = []

    def work() -> None:
        for _ in range(3):
            results.append(model.loss_and_grad(params, x, y)[1])

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g in results:
        np.testing.assert_array_equal(g, g_ref)


def test_params_need_not_be_contiguous() -> None:
    model = make_model("mlp", (1, 8, 8), 10)
    params = _peer_params(model, 2, np.float32)
    x, y = _batch(model, 2, 3, np.float32)
    wide = np.zeros((2, model.dim + 5), np.float32)
    wide[:, 2 : 2 + model.dim] = params
    np.testing.assert_array_equal(
        model.loss_and_grad(wide[:, 2 : 2 + model.dim], x, y)[1],
        model.loss_and_grad(params, x, y)[1],
    )
    fortran = np.asfortranarray(params)
    np.testing.assert_array_equal(model.forward(fortran, x), model.forward(params, x))


# ---- evaluate ------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["mlp", "cnn:gn"])
def test_evaluate_matches_forward_and_ignores_chunking(spec: str) -> None:
    model = make_model(spec, (1, 8, 8), 10)
    params = _peer_params(model, 3, np.float64)
    x, y = _batch(model, 1, 23)
    x, y = x[0], y[0]
    logits = model.forward(params, x)
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    ref_loss = -logp[:, np.arange(23), y].mean(1)
    ref_acc = (logits.argmax(-1) == y).mean(1)
    for batch_size in (1024, 7, 1):
        acc, loss = model.evaluate(params, x, y, batch_size=batch_size)
        np.testing.assert_array_equal(acc, ref_acc)
        np.testing.assert_allclose(loss, ref_loss, rtol=1e-12)


def test_loss_is_stable_for_huge_logits() -> None:
    model = make_model("linear", (3,), 2)
    params = np.zeros((1, model.dim), np.float32)
    params[0, :6] = [1e4, -1e4, 0, 0, 0, 0]  # weight (3, 2): logits (1e4 x0, -1e4 x0)
    x = np.array([[[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]]], np.float32)
    y = np.array([[0, 0]])
    loss, grad = model.loss_and_grad(params, x, y)
    assert np.isfinite(loss).all() and np.isfinite(grad).all()
    np.testing.assert_allclose(loss, [1e4], rtol=1e-6)  # (0 + 2e4) / 2


# ---- specs, layout, init, repr -------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, input_shape, dim",
    [
        ("linear", (1, 8, 8), 650),
        ("linear", (1, 28, 28), 7_850),
        ("mlp", (1, 8, 8), 9_610),
        ("mlp", (1, 28, 28), 101_770),
        ("mlp:256,128", (1, 28, 28), 235_146),
        ("cnn", (1, 8, 8), 21_386),
        ("cnn", (1, 28, 28), 107_786),
        ("cnn:gn", (1, 28, 28), 107_830),
        ("cnn", (3, 32, 32), 136_886),
    ],
)
def test_dims_and_layout(spec: str, input_shape: tuple[int, ...], dim: int) -> None:
    model = make_model(spec, input_shape, 10)
    assert model.dim == dim
    layout = model.layout()
    names = [name for name, _, _ in layout]
    assert len(set(names)) == len(names)
    offset = 0
    for _, sl, shape in layout:
        assert sl.start == offset and sl.stop - sl.start == int(np.prod(shape))
        offset = sl.stop
    assert offset == dim
    text = repr(model)
    assert spec in text and f"{dim:,}" in text and "fc1" in text


def test_layout_names_and_shapes_cnn_gn() -> None:
    model = make_model("cnn:gn", (1, 28, 28), 10)
    shapes = {name: shape for name, _, shape in model.layout()}
    assert shapes["conv1.weight"] == (6, 1, 5, 5)
    assert shapes["gn1.weight"] == (6,) and shapes["gn2.bias"] == (16,)
    assert shapes["fc1.weight"] == (784, 120)
    assert shapes["fc3.bias"] == (10,)
    groups = [layer.num_groups for _, layer in model.layers if isinstance(layer, GroupNorm)]
    assert groups == [2, 4]


def test_init() -> None:
    model = make_model("cnn:gn", (1, 28, 28), 10)
    a, b = model.init(0), model.init(0)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (model.dim,) and a.dtype == np.float32
    assert not np.array_equal(a, model.init(1))
    np.testing.assert_array_equal(model.init(0, np.float64).astype(np.float32), a)
    for name, sl, shape in model.layout():
        v = a[sl]
        if name.startswith("gn") and name.endswith(".weight"):
            np.testing.assert_array_equal(v, 1)
        elif name.endswith(".bias"):
            np.testing.assert_array_equal(v, 0)
        elif name == "fc1.weight":  # He-normal: std sqrt(2 / fan_in)
            np.testing.assert_allclose(v.std(), np.sqrt(2 / 784), rtol=0.05)
        elif name == "fc3.weight":  # logits layer, PyTorch-like U(+-1/sqrt(fan_in))
            assert np.abs(v).max() <= 1 / np.sqrt(84)
            np.testing.assert_allclose(v.std(), 1 / np.sqrt(3 * 84), rtol=0.1)
    with pytest.raises(ValueError, match="seed"):
        model.init(-1)
    with pytest.raises(TypeError, match="dtype"):
        model.init(0, np.int32)


def test_registry() -> None:
    assert {"linear", "mlp", "cnn"} <= set(available_models())
    with pytest.raises(ValueError, match="already registered"):
        nn.register_model("mlp")(lambda arg, shape, k: [])


@pytest.mark.parametrize(
    "spec, input_shape, n_classes, error",
    [
        ("resnet", (1, 8, 8), 10, ValueError),
        ("linear:3", (1, 8, 8), 10, ValueError),
        ("mlp:", (1, 8, 8), 10, ValueError),
        ("mlp:12,x", (1, 8, 8), 10, ValueError),
        ("mlp:0", (1, 8, 8), 10, ValueError),
        ("cnn", (1, 10, 10), 10, ValueError),
        ("cnn", (64,), 10, ValueError),
        ("cnn:bn", (1, 8, 8), 10, ValueError),
        ("mlp", (1, 8, 8), 1, ValueError),
        ("mlp", [1, 8, 8], 10, TypeError),
        ("mlp", (1, 0, 8), 10, ValueError),
        (3, (1, 8, 8), 10, TypeError),
    ],
)
def test_make_model_errors(spec: object, input_shape: object, n_classes: int, error: type) -> None:
    with pytest.raises(error):
        make_model(spec, input_shape, n_classes)  # type: ignore[arg-type]


def test_layer_validation() -> None:
    with pytest.raises(ValueError, match="num_groups"):
        GroupNorm(4, 6)
    with pytest.raises(TypeError, match="in_features"):
        Dense(2.5, 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="padding"):
        Conv2d(1, 2, padding=-1)
    with pytest.raises(ValueError, match="init"):
        Dense(2, 3, init="xavier")
    with pytest.raises(ValueError, match="logits"):
        Model([Dense(4, 3)], (4,), 2)


# ---- argument validation -------------------------------------------------------------------


def test_argument_errors() -> None:
    model = make_model("mlp", (1, 8, 8), 10)
    params = _peer_params(model, 2, np.float32)
    x, y = _batch(model, 2, 3, np.float32)
    with pytest.raises(TypeError, match="y"):
        model.loss_and_grad(params, x, y.astype(np.float32))
    with pytest.raises(ValueError, match=r"y must hold labels in \[0, 10\)"):
        model.loss_and_grad(params, x, np.full((2, 3), 10))
    with pytest.raises(ValueError, match="y"):
        model.loss_and_grad(params, x, -np.ones((2, 3), int))
    with pytest.raises(ValueError, match="y must have shape"):
        model.loss_and_grad(params, x, y[:, :2])
    with pytest.raises(ValueError, match="x"):
        model.loss_and_grad(params, x[:1], y)
    with pytest.raises(ValueError, match="x must have shape"):
        model.forward(params, x[..., :4])
    with pytest.raises(TypeError, match="x"):
        model.forward(params, x.astype(complex))
    with pytest.raises(ValueError, match="params"):
        model.forward(params[0], x)
    with pytest.raises(TypeError, match="params"):
        model.forward(params.astype(np.float16), x)
    with pytest.raises(TypeError, match="params"):
        model.forward(params.tolist(), x)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="grad"):
        model.loss_and_grad(params, x, y, grad=np.empty(params.shape, np.float64))
    with pytest.raises(ValueError, match="grad"):
        model.loss_and_grad(params, x, y, grad=np.empty((2, model.dim + 1), np.float32))
    with pytest.raises(ValueError, match="grad"):
        model.loss_and_grad(params, x, y, grad=np.empty((model.dim, 2), np.float32).T)
    with pytest.raises(ValueError, match="grad must not share memory"):
        model.loss_and_grad(params, x, y, grad=params)
    with pytest.raises(ValueError, match="batch"):
        model.loss_and_grad(params, x[:, :0], y[:, :0])
    with pytest.raises(ValueError, match="batch_size"):
        model.evaluate(params, x[0], y[0], batch_size=0)
    with pytest.raises(ValueError, match="x must have shape"):
        model.evaluate(params, x, y)


# ---- end to end ----------------------------------------------------------------------------


def test_mlp_learns_separable_problem() -> None:
    rng = np.random.default_rng(0)
    n_classes, n_feat, n_peers, batch = 4, 20, 4, 32
    centers = 3.0 * rng.standard_normal((n_classes, n_feat))

    def sample(n: int) -> tuple[np.ndarray, np.ndarray]:
        labels = rng.integers(0, n_classes, n)
        return (centers[labels] + rng.standard_normal((n, n_feat))).astype(np.float32), labels

    model = make_model("mlp:32", (n_feat,), n_classes)
    params = np.tile(model.init(0), (n_peers, 1))
    opt = SGD(SGDConfig(lr=0.05, momentum=0.9), params.shape)
    grad = np.empty_like(params)
    for _ in range(100):
        xb, yb = sample(n_peers * batch)
        model.loss_and_grad(
            params, xb.reshape(n_peers, batch, n_feat), yb.reshape(n_peers, batch), grad=grad
        )
        opt.step(params, grad)
    x_test, y_test = sample(2000)
    acc, loss = model.evaluate(params, x_test, y_test)
    assert (acc > 0.95).all(), acc
    assert (loss < 0.3).all(), loss
