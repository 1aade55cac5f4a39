"""int8 training (precision="int8"): forward error within the quantization bound, gradients
unbiased over the stochastic rounding of dY, peers independent, reproducible by (seed, step), and
int8 D-PSGD reaching the accuracy of fp32."""

import os

import numpy as np
import pytest

from decentlearn.nn import lowp
from decentlearn.nn import Conv2d, Dense, Model, Scratch, make_model
from decentlearn.sim import RunConfig, simulate


def _setup(spec="mlp:16", peers=3, batch=8, seed=0):
    rng = np.random.default_rng(seed)
    fp = make_model(spec, (1, 8, 8), 10)
    i8 = make_model(spec, (1, 8, 8), 10, precision="int8", seed=7)
    params = np.stack([fp.init(s) for s in range(peers)]).astype(np.float32)
    x = rng.random((peers, batch, 1, 8, 8), dtype=np.float32)
    y = rng.integers(0, 10, (peers, batch))
    return fp, i8, params, x, y


def _deq(a):
    """Dequantized per-peer (nearest) codes, as the int8 forward sees a (P, ...) tensor."""
    flat = np.ascontiguousarray(a, dtype=np.float32).reshape(a.shape[0], -1)
    q, s = lowp.quantize_peers(flat)
    return (q.astype(np.float32) * s[:, None]).reshape(a.shape)


def test_precision_validation():
    with pytest.raises(ValueError, match="precision"):
        make_model("mlp", (64,), 10, precision="int4")
    with pytest.raises(ValueError, match="precision"):
        Dense(4, 3, precision="fp16")
    with pytest.raises(ValueError, match="precision"):
        RunConfig(precision="bf16")
    m = make_model("mlp", (64,), 10, precision="int8")
    assert m.precision == "int8" and make_model("mlp", (64,), 10).precision == "fp32"
    with pytest.raises(TypeError, match="float32"):
        m.forward(np.zeros((1, m.dim)), np.zeros((2, 64)))


def test_forward_within_quantization_bound():
    """|Q(x)Q(W) - xW| <= (sx/2) sum|W| + (sw/2) sum|x| + k sx sw / 4, elementwise (per layer)."""
    rng = np.random.default_rng(0)
    p, b, k, n = 4, 16, 200, 30
    layer = Dense(k, n, precision="int8")
    x = rng.standard_normal((p, b, k)).astype(np.float32)
    w = rng.standard_normal((p, k, n)).astype(np.float32) * 0.1
    bias = rng.standard_normal((p, n)).astype(np.float32)
    y, _ = layer.forward((w, bias), x, False, None)
    exact = np.matmul(x.astype(np.float64), w) + bias[:, None, :]
    sx = np.abs(x).max(axis=(1, 2)) / 127
    sw = np.abs(w).max(axis=(1, 2)) / 127
    bound = (sx[:, None, None] / 2 * np.abs(w).sum(axis=1)[:, None, :]
             + sw[:, None, None] / 2 * np.abs(x).sum(axis=2)[:, :, None]
             + k * (sx * sw)[:, None, None] / 4)
    err = np.abs(y - exact)
    assert (err <= bound * (1 + 1e-5) + 1e-5 * np.abs(exact)).all()
    rel = np.linalg.norm(y - exact) / np.linalg.norm(exact)
    assert rel < 0.02  # ~0.5 % typical for 8-bit absmax codes of Gaussian data


def test_model_forward_close_to_fp32():
    fp, i8, params, x, _ = _setup("mlp:64", peers=2, batch=64)
    a, b = fp.forward(params, x), i8.forward(params, x)
    assert np.linalg.norm(a - b) / np.linalg.norm(a) < 0.03
    # the int8 forward equals float arithmetic on the dequantized codes (float rounding aside)
    np.testing.assert_allclose(np.argmax(a, -1).mean(), np.argmax(b, -1).mean(), atol=0.2)


def _int8_forward_grad(params, x, y, model):
    """Gradient of the int8 forward pass (straight-through, exact dY) for "linear" / "mlp:H"."""
    layout = {name: (sl, shape) for name, sl, shape in model.layout()}
    p = params.shape[0]
    dense = [n[:-len(".weight")] for n in layout if n.endswith(".weight")]
    h = x.reshape(p, x.shape[1], -1)
    acts = []
    for i, name in enumerate(dense):
        sl, shape = layout[name + ".weight"]
        w = params[:, sl].reshape(p, *shape)
        bsl, _ = layout[name + ".bias"]
        hq, wq = _deq(h), _deq(w)
        acts.append((hq, wq))
        h = np.matmul(hq, wq) + params[:, bsl][:, None, :]
        if i < len(dense) - 1:
            h = np.maximum(h, 0)
    z = h - h.max(-1, keepdims=True)
    e = np.exp(z)
    g = e / e.sum(-1, keepdims=True)
    g[np.arange(p)[:, None], np.arange(y.shape[1])[None], y] -= 1
    g /= y.shape[1]
    grad = np.zeros_like(params)
    for i in range(len(dense) - 1, -1, -1):
        hq, wq = acts[i]
        sl, shape = layout[dense[i] + ".weight"]
        grad[:, sl] = np.matmul(hq.transpose(0, 2, 1), g).reshape(p, -1)
        grad[:, layout[dense[i] + ".bias"][0]] = g.sum(1)
        if i:
            g = np.matmul(g, wq.transpose(0, 2, 1))
            # ReLU mask of the previous layer's output
            sl_b = layout[dense[i - 1] + ".bias"][0]
            pre = np.matmul(*acts[i - 1]) + params[:, sl_b][:, None, :]
            g = g * (pre > 0)
    return grad


@pytest.mark.parametrize("spec", ["linear", "mlp:16"])
def test_gradient_unbiased(spec):
    """Mean over 400 rounding streams within 5 standard errors of the int8-forward gradient, and
    within 10 % (relative L2) of the fp32 gradient (the forward's rounding biases it slightly)."""
    fp, i8, params, x, y = _setup(spec, peers=2, batch=16)
    want = _int8_forward_grad(params, x, y, i8)
    draws = np.stack([i8.loss_and_grad(params, x, y, step=s)[1] for s in range(400)])
    mean = draws.mean(0)
    se = draws.std(0, ddof=1) / np.sqrt(len(draws))
    scale = np.abs(want).max()
    assert (np.abs(mean - want) <= 5 * se + 2e-3 * scale).all()
    _, g32 = fp.loss_and_grad(params, x, y)
    assert np.linalg.norm(mean - g32) / np.linalg.norm(g32) < 0.1


def test_reproducible_and_peer_independent():
    _, i8, params, x, y = _setup("mlp:16", peers=3)
    l1, g1 = i8.loss_and_grad(params, x, y, step=5)
    l2, g2 = i8.loss_and_grad(params, x, y, step=5)
    np.testing.assert_array_equal(g1, g2)
    np.testing.assert_array_equal(l1, l2)
    _, g3 = i8.loss_and_grad(params, x, y, step=6)
    assert not np.array_equal(g1, g3)
    other = make_model("mlp:16", (1, 8, 8), 10, precision="int8", seed=8)
    assert not np.array_equal(g1, other.loss_and_grad(params, x, y, step=5)[1])
    # a peer's gradient depends on its own data and parameters only
    x2, p2 = x.copy(), params.copy()
    x2[1] *= 0.5
    p2[2] += 0.01
    _, g4 = i8.loss_and_grad(p2, x2, y, step=5)
    np.testing.assert_array_equal(g4[0], g1[0])
    # the forward of each peer equals its forward alone; shared input == broadcast input
    f = i8.forward(params, x)
    for p in range(3):
        np.testing.assert_array_equal(i8.forward(params[p:p + 1], x[p:p + 1])[0], f[p])
    np.testing.assert_array_equal(i8.forward(params, x[0]),
                                  i8.forward(params, np.broadcast_to(x[0], x.shape).copy()))
    # the step counter advances once per call when no step is given
    s0 = i8.steps
    i8.loss_and_grad(params, x, y)
    assert i8.steps == s0 + 1


def test_int8_training_digits():
    """int8 D-PSGD on iid digits reaches fp32's accuracy."""
    cfg = RunConfig(dataset="digits", partition="iid", rounds=300, eval_every=300, seed=0)
    r8 = simulate(cfg.replace(precision="int8"))
    r32 = simulate(cfg)
    assert r8.summary["precision"] == "int8" and r8.config.precision == "int8"
    assert r8.summary["test_accuracy_mean"] >= 0.9
    assert abs(r8.summary["test_accuracy_mean"] - r32.summary["test_accuracy_mean"]) < 0.03


def _conv_setup(peers=3, batch=4, cin=3, cout=5, k=3, pad=1, hw=(7, 9), seed=0):
    rng = np.random.default_rng(seed)
    fp = Conv2d(cin, cout, kernel_size=k, padding=pad)
    i8 = Conv2d(cin, cout, kernel_size=k, padding=pad, precision="int8")
    w = rng.standard_normal((peers, cout, cin, k, k)).astype(np.float32) * 0.3
    b = rng.standard_normal((peers, cout)).astype(np.float32)
    x = rng.standard_normal((peers, cin, batch, *hw)).astype(np.float32)  # channel-major
    return fp, i8, w, b, x


def test_conv_forward_within_quantization_bound():
    """Per output: |Q(p)Q(w) - pw| <= (sx/2) sum|w| + (sw/2) sum|p| + K sx sw / 4 over the patch p
    and the output channel's weights w; also with an input shared by all peers."""
    fp, i8, w, b, x = _conv_setup(peers=4, batch=5, cin=4, cout=6, k=5, pad=2, hw=(12, 10))
    y, _ = i8.forward((w, b), x, False, Scratch())
    f64 = Conv2d(4, 6, kernel_size=5, padding=2)
    exact, _ = f64.forward((w.astype(np.float64), b.astype(np.float64)), x.astype(np.float64),
                           False, Scratch())
    # sum|p| per output: |x| convolved with an all-ones kernel
    patch_abs, _ = f64.forward((np.ones((4, 6, 4, 5, 5)), np.zeros((4, 6))),
                               np.abs(x).astype(np.float64), False, Scratch())
    sx = np.abs(x).max(axis=(1, 2, 3, 4)) / 127
    sw = np.abs(w).max(axis=(1, 2, 3, 4)) / 127
    e = (slice(None), None, None, None, None)
    bound = (sx[e] / 2 * np.abs(w).sum(axis=(2, 3, 4))[:, :, None, None, None]
             + sw[e] / 2 * patch_abs + 4 * 25 * (sx * sw)[e] / 4)
    err = np.abs(y - exact)
    assert (err <= bound * (1 + 1e-5) + 1e-5 * np.abs(exact)).all()
    assert np.linalg.norm(y - exact) / np.linalg.norm(exact) < 0.02
    # a shared input (stride 0 over peers) gives what its broadcast copy gives
    xs = np.broadcast_to(x[:1], x.shape)
    ys, _ = i8.forward((w, b), xs, False, Scratch())
    yc, _ = i8.forward((w, b), np.ascontiguousarray(xs), False, Scratch())
    np.testing.assert_array_equal(ys, yc)


@pytest.mark.parametrize("shared", [False, True])
def test_conv_gradient_unbiased(shared):
    """dW, db, dX averaged over 400 rounding streams within 5 standard errors of the gradient of
    the int8 forward (the fp32 layer on the dequantized input and weights), and close to fp32."""
    fp, i8, w, b, x = _conv_setup()
    if shared:
        x = np.broadcast_to(x[:1], x.shape)
    rng = np.random.default_rng(1)
    y, ctx = i8.forward((w, b), x, True, sc := Scratch())
    dy = rng.standard_normal(y.shape).astype(np.float32)
    draws = []
    for step in range(400):
        g = (np.empty_like(w), np.empty_like(b))
        sc.rng = (123, step)
        dx = i8.backward((w, b), g, dy, ctx, True, sc)
        draws.append(np.concatenate([g[0].reshape(3, -1), g[1], dx.reshape(3, -1)], axis=1))
    draws = np.stack(draws)

    def fp_grad(xx, ww):
        s = Scratch()
        _, c = fp.forward((ww, b), xx, True, s)
        g = (np.empty_like(w), np.empty_like(b))
        dx = fp.backward((ww, b), g, dy.copy(), c, True, s)
        return np.concatenate([g[0].reshape(3, -1), g[1], dx.reshape(3, -1)], axis=1)

    xq = np.broadcast_to(_deq(x[:1]), x.shape) if shared else _deq(x)
    want = fp_grad(xq, _deq(w))
    mean = draws.mean(0)
    se = draws.std(0, ddof=1) / np.sqrt(len(draws))
    assert (np.abs(mean - want) <= 5 * se + 1e-3 * np.abs(want).max()).all()
    g32 = fp_grad(x, w)
    assert np.linalg.norm(mean - g32) / np.linalg.norm(g32) < 0.05
    assert np.linalg.norm(draws[0] - g32) / np.linalg.norm(g32) < 0.1  # a single draw, too


@pytest.mark.parametrize("spec", ["cnn", "cnn:gn"])
def test_cnn_int8_reproducible_and_peer_independent(spec):
    fp, i8, params, x, y = _setup(spec, peers=3)
    assert all(ly.precision == "int8" for _, ly in i8.layers if isinstance(ly, (Conv2d, Dense)))
    a, b = fp.forward(params, x), i8.forward(params, x)
    assert np.linalg.norm(a - b) / np.linalg.norm(a) < 0.05
    l1, g1 = i8.loss_and_grad(params, x, y, step=5)
    l2, g2 = i8.loss_and_grad(params, x, y, step=5)
    np.testing.assert_array_equal(g1, g2)
    np.testing.assert_array_equal(l1, l2)
    assert not np.array_equal(g1, i8.loss_and_grad(params, x, y, step=6)[1])
    # a peer's result depends on its own data and parameters only
    x2, p2 = x.copy(), params.copy()
    x2[1] *= 0.5
    p2[2] += 0.01
    _, g4 = i8.loss_and_grad(p2, x2, y, step=5)
    np.testing.assert_array_equal(g4[0], g1[0])
    f = i8.forward(params, x)
    for p in range(3):
        np.testing.assert_array_equal(i8.forward(params[p:p + 1], x[p:p + 1])[0], f[p])
    np.testing.assert_array_equal(i8.forward(params, x[0]),
                                  i8.forward(params, np.broadcast_to(x[0], x.shape).copy()))
    _, gs = i8.loss_and_grad(params, x[0], y[0], step=5)
    _, gc = i8.loss_and_grad(params, np.broadcast_to(x[0], x.shape).copy(),
                             np.broadcast_to(y[0], y.shape).copy(), step=5)
    np.testing.assert_array_equal(gs, gc)


def test_frozen_conv_forward_is_int8():
    """CoCoFL: a frozen Conv2d runs the int8 forward: the loss of an fp32 cnn with conv1 frozen is
    that of the same cnn with an int8 conv1."""
    fp, _, params, x, y = _setup("cnn", peers=2)
    layers = [ly for _, ly in fp.layers]
    layers[0] = Conv2d(1, 6, kernel_size=5, padding=2, precision="int8")
    mixed = Model(layers, (1, 8, 8), 10)
    loss, _ = fp.loss_and_grad(params, x, y, frozen=1)
    np.testing.assert_array_equal(loss, mixed.loss_and_grad(params, x, y)[0])
    assert not np.array_equal(loss, fp.loss_and_grad(params, x, y)[0])


@pytest.mark.parametrize("spec", ["cnn", "cnn:gn"])
def test_int8_cnn_training_digits(spec):
    """int8 convolutions and Dense layers train the cnn to fp32's accuracy (measured: cnn 0.950
    vs 0.955, cnn:gn 0.969 vs 0.968 after 150 rounds)."""
    cfg = RunConfig(dataset="digits", partition="iid", model=spec, rounds=150, eval_every=150)
    acc = {p: simulate(cfg.replace(precision=p)).summary["test_accuracy_mean"]
           for p in ("fp32", "int8")}
    assert acc["int8"] >= 0.9, acc
    assert abs(acc["int8"] - acc["fp32"]) < 0.03, acc


FASHION = "/usr/share/datasets/fashion-mnist"


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir(FASHION), reason=f"Fashion-MNIST not found at {FASHION}")
@pytest.mark.parametrize("partition,tol", [("iid", 0.01), ("dirichlet:0.5", 0.02)])
def test_int8_matches_fp32_fashion_mnist(partition, tol):
    """The acceptance runs: ring, 16 peers, 500 rounds, int8 within 1 point (iid) / 2 points
    (non-IID) of fp32 in mean peer test accuracy."""
    cfg = RunConfig(dataset="fashion-mnist", partition=partition, rounds=500, eval_every=500)
    acc = {p: simulate(cfg.replace(precision=p)).summary["test_accuracy_mean"]
           for p in ("fp32", "int8")}
    assert abs(acc["int8"] - acc["fp32"]) <= tol, acc
