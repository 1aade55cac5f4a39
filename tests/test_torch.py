"""decentlearn.torch: the TorchModel adapter against independent references — decentlearn's
native models (same architecture and rows: same losses, gradients and D-PSGD trajectory) and a
per-peer loop over nn.Module copies (plain PyTorch autograd, BatchNorm statistics included)."""

import copy
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="decentlearn.torch needs the torch extra")

from decentlearn.nn import make_model  # noqa: E402
from decentlearn.sim import RunConfig, Simulator  # noqa: E402
from decentlearn.torch import TorchModel, make_torch_model  # noqa: E402

# float32 tolerance of one pass: the two implementations sum in different orders.
RTOL, ATOL = 1e-5, 1e-5


def _batch(shape, n_peers, batch, seed=0, n_classes=10):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_peers, batch, *shape)).astype(np.float32)
    return x, rng.integers(0, n_classes, (n_peers, batch))


@pytest.mark.parametrize("spec,shape", [("mlp:32,16", (1, 8, 8)), ("cnn", (1, 8, 8)),
                                        ("cnn", (1, 28, 28))])
def test_twin_of_native_model_same_losses_and_grads(spec, shape):
    native = make_model(spec, shape, 10)
    twin = make_model("torch:" + spec, shape, 10)
    assert isinstance(twin, TorchModel) and twin.dim == native.dim
    assert [(n, s) for n, _, s in twin.layout()] == [
        (n.replace("dense", "fc").replace("conv2d", "conv"), s) for n, _, s in native.layout()
    ] or [s for _, _, s in twin.layout()] == [s for _, _, s in native.layout()]
    X = np.stack([native.init(s) for s in range(3)]).astype(np.float32)
    x, y = _batch(shape, 3, 5)
    ln, gn = native.loss_and_grad(X.copy(), x, y)
    g = np.full_like(X, np.nan)
    lt, gt = twin.loss_and_grad(X.copy(), x, y, grad=g)
    assert gt is g  # written into the caller's buffer
    np.testing.assert_allclose(lt, ln, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(gt, gn, rtol=1e-4, atol=ATOL * np.abs(gn).max())
    np.testing.assert_allclose(twin.forward(X, x[0]), native.forward(X, x[0]), rtol=1e-4,
                               atol=1e-5)
    for a, b in zip(twin.evaluate(X, x[0], y[0], batch_size=2), native.evaluate(X, x[0], y[0])):
        np.testing.assert_allclose(a, b, rtol=1e-5)


@pytest.mark.parametrize("model,momentum", [("mlp", 0.9), ("cnn", 0.0)])
def test_dpsgd_20_rounds_same_params_as_native(model, momentum):
    """Same init, data and minibatches: after 20 rounds of D-PSGD the parameters agree to 1e-6
    absolute (measured: 2e-7 for both; the updates themselves are ~0.1-0.6). The CNN runs
    without momentum: with momentum 0.9 its float32 rounding differences are amplified to 2e-3
    over 20 rounds (a ReLU/max-pool decision flipping), which is chaos, not a bug."""
    cfg = RunConfig(peers=6, rounds=20, eval_every=20, model=model, partition="dirichlet:0.5",
                    batch_size=8, lr=0.05, momentum=momentum, topology="ring", threads=1)
    native = Simulator(cfg)
    twin = Simulator(cfg.replace(model="torch:" + model))
    twin.algorithm.params[...] = native.algorithm.params  # the native init for both
    x0 = native.algorithm.params.copy()
    a = native.run().params
    b = twin.run().params
    assert np.abs(a - x0).max() > 0.1  # it trained
    np.testing.assert_allclose(b, a, rtol=0, atol=1e-6)


def _loop_reference(model: TorchModel, X, x, y):
    """Plain PyTorch: one module per peer, loaded with its row, autograd, per-peer loss."""
    losses, grads, rows = [], [], []
    for i in range(X.shape[0]):
        m = copy.deepcopy(model.module)
        model.load_row.__func__(_Shim(model, m), X[i])
        m.train()
        m.zero_grad()
        loss = torch.nn.functional.cross_entropy(m(torch.from_numpy(x[i])), torch.from_numpy(y[i]))
        loss.backward()
        losses.append(loss.item())
        grads.append(np.concatenate([p.grad.reshape(-1).numpy() for p in m.parameters()]))
        rows.append(_Shim(model, m).row())
    return np.array(losses), np.stack(grads), np.stack(rows)


class _Shim:
    """A TorchModel view of another copy of the module (same layout)."""

    def __init__(self, model, module):
        self._layout, self._n_params, self.dim, self.module = (
            model._layout, model._n_params, model.dim, module)

    def _module_tensors(self):
        return TorchModel._module_tensors(self)

    def row(self):
        return TorchModel.row_of_module(self)


@pytest.mark.parametrize("spec,shape", [("resnet20", (3, 8, 8)), ("vgg11", (3, 8, 8)),
                                        ("gn-lenet", (3, 8, 8)), ("resnet20:gn", (1, 8, 8))])
def test_batched_equals_per_peer_loop(spec, shape):
    """The vmapped pass gives every peer what its own nn.Module gives: loss, gradient, and the
    BatchNorm running statistics updated in its row."""
    model = make_torch_model(spec, shape, 10)
    X = np.stack([model.init(s) for s in range(3)])
    X[:, model.params_dim:] += np.random.default_rng(0).random((3, model.dim - model.params_dim),
                                                               dtype=np.float32)
    x, y = _batch(shape, 3, 8)
    ref_loss, ref_grad, ref_rows = _loop_reference(model, X, x, y)
    loss, grad = model.loss_and_grad(X, x, y)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    p = model.params_dim
    # BatchNorm over a few values per channel (8 samples at 1x1 in VGG's last stage) amplifies
    # float32 rounding: agreement to 2e-4 of the largest gradient entry.
    np.testing.assert_allclose(grad[:, :p], ref_grad, rtol=1e-3, atol=2e-4 * np.abs(ref_grad).max())
    assert not grad[:, p:].any()
    np.testing.assert_allclose(X[:, p:], ref_rows[:, p:], rtol=1e-5, atol=1e-6)  # statistics


def test_char_lstm_batched_equals_loop_and_torch_lstm():
    model = make_torch_model("char-lstm:16", (12,), 20)
    X = np.stack([model.init(s) for s in range(2)])
    rng = np.random.default_rng(0)
    x = rng.integers(0, 20, (2, 3, 12)).astype(np.float32)
    y = rng.integers(0, 20, (2, 3))
    ref_loss, ref_grad, _ = _loop_reference(model, X, x, y)
    loss, grad = model.loss_and_grad(X, x, y)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-4, atol=1e-6)
    # the written-out cell is PyTorch's LSTM: copy the weights into nn.LSTM and compare
    m = model.load_row(X[0])
    lstm = torch.nn.LSTM(8, 16, num_layers=2, batch_first=True)
    with torch.no_grad():
        for k, cell in enumerate(m.cells):
            getattr(lstm, f"weight_ih_l{k}").copy_(cell["ih"].weight)
            getattr(lstm, f"bias_ih_l{k}").copy_(cell["ih"].bias)
            getattr(lstm, f"weight_hh_l{k}").copy_(cell["hh"].weight)
            getattr(lstm, f"bias_hh_l{k}").zero_()
        xt = torch.from_numpy(x[0])
        h, _ = lstm(m.embed(xt.long()))
        np.testing.assert_allclose(m(xt).numpy(), m.fc(h[:, -1]).numpy(), rtol=1e-4, atol=1e-5)


def test_shared_batch_equals_broadcast_batch_and_inputs_untouched():
    model = make_torch_model("gn-lenet", (3, 8, 8), 10)
    X = np.stack([model.init(s) for s in range(3)])
    x, y = _batch((3, 8, 8), 1, 4)
    x0, y0 = x[0].copy(), y[0].copy()
    X0 = X.copy()
    l1, g1 = model.loss_and_grad(X, x[0], y[0])
    l2, g2 = model.loss_and_grad(X, np.broadcast_to(x[0], (3, *x[0].shape)),
                                 np.broadcast_to(y[0], (3, 4)))
    np.testing.assert_allclose(l1, l2, rtol=1e-6)
    np.testing.assert_allclose(g1, g2, rtol=1e-5, atol=1e-5 * np.abs(g1).max())
    np.testing.assert_array_equal(X, X0)  # no buffers in gn-lenet: params untouched
    np.testing.assert_array_equal(x[0], x0)
    np.testing.assert_array_equal(y[0], y0)


def test_frozen_layers_get_zero_grad_and_trained_ones_unchanged():
    model = make_torch_model("cnn", (1, 8, 8), 10)
    X = np.stack([model.init(s) for s in range(4)])
    x, y = _batch((1, 8, 8), 4, 5)
    _, full = model.loss_and_grad(X, x, y)
    frozen = np.array([0, 1, 2, len(model.param_layers)])
    loss, g = model.loss_and_grad(X, x, y, frozen=frozen)
    for i, k in enumerate(frozen):
        cut = model.frozen_cut(int(k))
        assert not g[i, :cut].any()
        np.testing.assert_allclose(g[i, cut:], full[i, cut:], rtol=1e-5, atol=1e-7)
    assert model.frozen_cut(1) == 6 * 1 * 25 + 6  # conv1's weight and bias


def test_cli_composes_with_algorithms_compressors_cocofl(tmp_path):
    """A user's factory (torch:package.module:factory) through the CLI with CHOCO and top-k, and
    CoCoFL freezing through the simulator."""
    pkg = tmp_path / "mymodels"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent("""
        import torch
        def small(arg, input_shape, n_classes):
            return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 16),
                                       torch.nn.ReLU(), torch.nn.Linear(16, n_classes))
    """))
    sys.path.insert(0, str(tmp_path))
    try:
        from decentlearn.cli import main
        rc = main(["run", "--model", "torch:mymodels:small", "--algorithm", "choco", "--compress",
                   "topk:0.1", "--gamma", "0.5", "--peers", "4", "--rounds", "4",
                   "--eval-every", "2", "--threads", "1", "--quiet", "--out",
                   str(tmp_path / "run")])
        assert rc == 0
        assert (tmp_path / "run" / "summary.json").is_file()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("mymodels", None)
    r = Simulator(RunConfig(peers=4, rounds=3, eval_every=3, model="torch:cnn",
                            cocofl="0.5:2", threads=1)).run()
    assert 0 <= r.summary["test_accuracy_mean"] <= 1
    assert r.summary["constrained_peers"]


@pytest.mark.parametrize("spec,match", [
    ("torch:nosuchnet", "torch model"), ("torch:resnet20:x", "resnet20"),
    ("torch:os.path:nosuch", "no callable"), ("torch:no_such_pkg_xyz.mod:f", "cannot import"),
    ("torch:badfactory:make", "must return a torch.nn.Module"),
])
def test_bad_specs_name_the_problem(spec, match, monkeypatch):
    bad = type(sys)("badfactory")
    bad.make = lambda arg, input_shape, n_classes: 3
    monkeypatch.setitem(sys.modules, "badfactory", bad)
    with pytest.raises((ValueError, TypeError), match=match):
        make_model(spec, (3, 8, 8), 10)


def test_int8_precision_is_a_clear_error():
    with pytest.raises(ValueError, match="float32"):
        make_model("torch:cnn", (1, 8, 8), 10, precision="int8")


def test_bad_inputs():
    model = make_torch_model("mlp:8", (1, 8, 8), 10)
    X = model.init(0)[None]
    x, y = _batch((1, 8, 8), 1, 2)
    with pytest.raises(TypeError, match="float32"):
        model.loss_and_grad(X.astype(np.float64), x, y)
    with pytest.raises(ValueError, match="shape"):
        model.loss_and_grad(X[:, :-1], x, y)
    with pytest.raises(ValueError, match="labels"):
        model.loss_and_grad(X, x, y + 10)
    with pytest.raises(ValueError, match="share memory"):
        model.loss_and_grad(X, x, y, grad=X)
    with pytest.raises(ValueError, match="logits"):
        TorchModel(torch.nn.Linear(64, 3), (64,), 10)
    bn = torch.nn.Sequential(torch.nn.BatchNorm1d(4, momentum=None), torch.nn.Linear(4, 2))
    with pytest.raises(ValueError, match="momentum=None"):
        TorchModel(bn, (4,), 2)


def test_threads_govern_torch_and_one_openmp_runtime():
    """--threads sets torch's intra-op pool; decentlearn and torch share one libgomp (one
    OpenMP thread pool in the process: the two never run teams side by side)."""
    before = torch.get_num_threads()
    try:
        Simulator(RunConfig(peers=2, rounds=1, model="torch:mlp:8", threads=1))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        pytest.skip("no /proc/self/maps")
    gomp = {line.split()[-1] for line in maps.splitlines() if "libgomp" in line}
    assert len(gomp) <= 1, gomp


def test_init_is_deterministic_and_leaves_global_rng():
    model = make_torch_model("resnet20", (3, 8, 8), 10)
    state = torch.random.get_rng_state()
    a, b, c = model.init(3), model.init(3), model.init(4)
    assert torch.equal(state, torch.random.get_rng_state())
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    running_var = [sl for n, sl, _ in model.layout() if n.endswith("running_var")]
    assert running_var and all((a[sl] == 1).all() for sl in running_var)


def test_char_lstm_on_leaf_shakespeare_natural_partition(tmp_path):
    import json
    text = {"A": "To be, or not to be: that is the question. " * 2,
            "B": "O, what a noble mind is here o'erthrown! " * 2}
    for part in ("train", "test"):
        (tmp_path / part).mkdir()
        data = {u: {"x": [t[i:i + 10] for i in range(len(t) - 10)],
                    "y": [t[i + 10] for i in range(len(t) - 10)]} for u, t in text.items()}
        (tmp_path / part / "d.json").write_text(json.dumps({"users": list(text),
                                                            "user_data": data}))
    cfg = RunConfig(dataset="shakespeare", data_dir=str(tmp_path), peers=2, rounds=2,
                    eval_every=2, model="torch:char-lstm:8", partition="natural", threads=1)
    r = Simulator(cfg).run()
    assert r.params.shape[0] == 2 and np.isfinite(r.summary["test_loss_avg_model"])


# ---- execution modes (TorchModel.mode, --torch-mode) -------------------------------------------

MODES = ("batched", "grouped:2", "grouped:1", "auto")


@pytest.fixture
def one_thread():
    """torch on one thread (its pool is process-wide: restored after). On a loaded 2-core
    machine two spinning OpenMP threads make these small passes 20x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _model(spec, shape, n_classes=10):
    model = make_torch_model(spec, shape, n_classes)
    model.n_threads = 1
    return model


@pytest.mark.parametrize("spec,shape", [("resnet20", (3, 8, 8)), ("char-lstm:8", (6,)),
                                        ("mlp:16", (1, 8, 8))])
def test_modes_equal_per_peer_loop_grads_in_buffer_stats_per_peer(spec, shape, one_thread):
    """Every mode gives each peer what its own nn.Module gives (the tolerance of
    test_batched_equals_per_peer_loop: the modes differ from one another only by float32
    rounding of different kernels), writes the gradient into the caller's buffer and each peer's
    BatchNorm statistics into its own row."""
    n_classes = 20 if spec.startswith("char") else 10
    model = _model(spec, shape, n_classes)
    P = 5
    X0 = np.stack([model.init(s) for s in range(P)])
    X0[:, model.params_dim:] += np.random.default_rng(1).random(
        (P, model.dim - model.params_dim), dtype=np.float32)
    rng = np.random.default_rng(0)
    if spec.startswith("char"):
        x = rng.integers(0, n_classes, (P, 4, *shape)).astype(np.float32)
        y = rng.integers(0, n_classes, (P, 4))
    else:
        x, y = _batch(shape, P, 4)
    ref_loss, ref_grad, ref_rows = _loop_reference(model, X0, x, y)
    p = model.params_dim
    for mode in MODES:
        model.mode = mode
        X = X0.copy()
        g = np.full_like(X, np.nan)
        loss, out = model.loss_and_grad(X, x, y, grad=g)
        assert out is g and np.isfinite(g).all(), mode
        np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, err_msg=mode)
        np.testing.assert_allclose(g[:, :p], ref_grad, rtol=1e-3,
                                   atol=2e-4 * np.abs(ref_grad).max(), err_msg=mode)
        assert not g[:, p:].any()
        np.testing.assert_allclose(X[:, p:], ref_rows[:, p:], rtol=1e-5, atol=1e-6,
                                   err_msg=mode)  # each peer's own statistics, in its row
        np.testing.assert_array_equal(X[:, :p], X0[:, :p])  # weights untouched
    if model.params_dim < model.dim:  # the statistics moved, and differently for each peer
        assert not np.allclose(X[:, p:], X0[:, p:])
        assert not np.allclose(X[0, p:] - X0[0, p:], X[1, p:] - X0[1, p:])


def test_modes_equal_native_twin_forward_evaluate_shared_batch_and_frozen(one_thread):
    """torch:cnn in every mode against the native cnn (the twin test's tolerances), with a
    shared batch, evaluation, and CoCoFL's mixed per-peer freezing."""
    shape = (1, 8, 8)
    native = make_model("cnn", shape, 10)
    twin = make_model("torch:cnn", shape, 10)
    twin.n_threads = 1
    X = np.stack([native.init(s) for s in range(4)]).astype(np.float32)
    x, y = _batch(shape, 4, 5)
    ln, gn = native.loss_and_grad(X.copy(), x, y)
    lsh, gsh = native.loss_and_grad(X.copy(), x[0], y[0])
    frozen = np.array([0, 1, 2, len(twin.param_layers)])
    for mode in MODES:
        twin.mode = mode
        lt, gt = twin.loss_and_grad(X.copy(), x, y)
        np.testing.assert_allclose(lt, ln, rtol=RTOL, atol=ATOL, err_msg=mode)
        np.testing.assert_allclose(gt, gn, rtol=1e-4, atol=ATOL * np.abs(gn).max(), err_msg=mode)
        lt, gt = twin.loss_and_grad(X.copy(), x[0], y[0])
        np.testing.assert_allclose(lt, lsh, rtol=RTOL, atol=ATOL, err_msg=mode)
        np.testing.assert_allclose(gt, gsh, rtol=1e-4, atol=ATOL * np.abs(gsh).max())
        np.testing.assert_allclose(twin.forward(X, x[0]), native.forward(X, x[0]), rtol=1e-4,
                                   atol=1e-5, err_msg=mode)
        for a, b in zip(twin.evaluate(X, x[0], y[0], batch_size=2),
                        native.evaluate(X, x[0], y[0])):
            np.testing.assert_allclose(a, b, rtol=1e-5, err_msg=mode)
        _, gf = twin.loss_and_grad(X.copy(), x, y, frozen=frozen)
        for i, k in enumerate(frozen):
            cut = twin.frozen_cut(int(k))
            assert not gf[i, :cut].any()
            np.testing.assert_allclose(gf[i, cut:], gn[i, cut:], rtol=1e-4,
                                       atol=ATOL * np.abs(gn).max(), err_msg=mode)


def test_auto_records_its_choice_and_equals_that_mode_bit_for_bit(one_thread):
    """auto times its candidates on scratch copies (params, statistics and torch's RNG as they
    were), caches the choice per batch shape, and then computes exactly what the chosen mode
    computes, so the recorded choice reproduces the numbers."""
    model = _model("resnet20", (3, 8, 8))
    X0 = np.stack([model.init(s) for s in range(4)])
    x, y = _batch((3, 8, 8), 4, 4)
    model.mode = "auto"
    rng_state = torch.random.get_rng_state()
    X1 = X0.copy()
    l1, g1 = model.loss_and_grad(X1, x, y)
    assert torch.equal(rng_state, torch.random.get_rng_state())
    (entry,) = model.mode_report()["chosen"]
    assert entry["peers"] == 4 and entry["input_shape"] == [4, 4, 3, 8, 8]
    assert set(entry["seconds"]) == {"batched", "grouped:2", "grouped:1"}
    assert entry["chosen"] in entry["seconds"]
    assert entry["seconds"][entry["chosen"]] == min(entry["seconds"].values())
    model.loss_and_grad(X0.copy(), x, y)  # same shape: cached, no new measurement
    assert len(model.mode_report()["chosen"]) == 1
    model.mode = entry["chosen"]
    assert model.mode_report() == {"mode": entry["chosen"]}
    X2 = X0.copy()
    l2, g2 = model.loss_and_grad(X2, x, y)
    np.testing.assert_array_equal(l1, l2)
    np.testing.assert_array_equal(g1, g2)
    np.testing.assert_array_equal(X1, X2)  # statistics updated once, by the real pass


def test_torch_mode_in_simulator_summary_and_dpsgd_agrees_across_modes(one_thread):
    cfg = RunConfig(peers=4, rounds=3, eval_every=3, model="torch:cnn", batch_size=4, lr=0.05,
                    threads=1, torch_mode="grouped:1")
    a = Simulator(cfg).run()
    b = Simulator(cfg.replace(torch_mode="auto")).run()
    c = Simulator(cfg.replace(torch_mode="batched")).run()
    assert a.summary["torch_mode"] == {"mode": "grouped:1"}
    assert b.summary["torch_mode"]["mode"] == "auto" and b.summary["torch_mode"]["chosen"]
    assert c.summary["config"]["torch_mode"] == "batched"
    np.testing.assert_allclose(a.params, c.params, rtol=0, atol=1e-5)
    np.testing.assert_allclose(b.params, c.params, rtol=0, atol=1e-5)


@pytest.mark.parametrize("mode", ["fast", "grouped", "grouped:0", "grouped:-2", "grouped:2.5",
                                  "Batched", "grouped:²", 3, None])
def test_bad_mode_is_one_line_value_error_naming_the_argument(mode):
    model = TorchModel(torch.nn.Linear(4, 2), (4,), 2)
    with pytest.raises(ValueError, match=r"^mode must be 'batched', 'grouped:G'") as e:
        model.mode = mode
    assert "\n" not in str(e.value)
    assert model.mode == "batched"  # unchanged
    with pytest.raises(ValueError, match=r"^mode must be"):
        TorchModel(torch.nn.Linear(4, 2), (4,), 2, mode=mode)
    # the torch-free twin check (a value that is no string at all: TypeError)
    with pytest.raises(ValueError if isinstance(mode, str) else TypeError,
                       match=r"^torch_mode must be"):
        RunConfig(model="torch:mlp", torch_mode=mode)


@pytest.mark.parametrize("mode", ["batched", "auto", "grouped:1", "grouped:16", "grouped:007"])
def test_good_modes_accepted_by_model_and_config(mode):
    model = TorchModel(torch.nn.Linear(4, 2), (4,), 2)
    model.mode = mode
    assert model.mode == mode
    assert RunConfig(model="torch:mlp", torch_mode=mode).torch_mode == mode


def test_cli_torch_mode_bad_value_exit_2(capsys):
    from decentlearn.cli import main
    assert main(["run", "--model", "torch:mlp", "--torch-mode", "fastest", "--rounds", "1",
                 "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("decentlearn: error: torch_mode must be") and "\n" not in err
    assert main(["run", "--model", "mlp", "--torch-mode", "auto", "--rounds", "1",
                 "--quiet"]) == 2
    assert "torch models" in capsys.readouterr().err
