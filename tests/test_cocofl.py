"""CoCoFL partial freezing (decentlearn.nn.cocofl): spec parsing and validation, reproducible tier
assignment, exact frozen prefixes, frozen layers forward in int8 with no gradient, the optimizer
leaving frozen slices untouched, closed-form compute counts, and CoCoFL beating dropping."""

import numpy as np
import pytest

from decentlearn.nn import cocofl, lowp
from decentlearn.nn.cocofl import DROP
from decentlearn.nn import make_model
from decentlearn.optim import SGD, SGDConfig
from decentlearn.sim import RunConfig, Simulator, simulate


def _setup(spec="mlp:16,12", peers=4, batch=8, seed=0):
    rng = np.random.default_rng(seed)
    model = make_model(spec, (1, 8, 8), 10)
    params = np.stack([model.init(s) for s in range(peers)]).astype(np.float32)
    x = rng.random((peers, batch, 1, 8, 8), dtype=np.float32)
    y = rng.integers(0, 10, (peers, batch))
    return model, params, x, y


def test_parse_and_validation():
    assert cocofl.parse("0.5:2").tiers == ((0.5, 2),)
    assert cocofl.parse("0.25:1, 0.25:2").tiers == ((0.25, 1), (0.25, 2))
    assert cocofl.parse("0.5:drop").tiers == ((0.5, DROP),)
    assert str(cocofl.parse("0.25:1,0.5:drop")) == "0.25:1,0.5:drop"
    for bad, needle in [("0.5", "FRACTION:LAYERS"), ("x:1", "FRACTION:LAYERS"),
                        ("0.5:y", "FRACTION:LAYERS"), ("1.5:1", r"\[0, 1\]"),
                        ("-0.1:1", r"\[0, 1\]"), ("0.5:0", ">= 1"), ("0.6:1,0.6:2", "sum"),
                        ("nan:1", "FRACTION:LAYERS")]:
        with pytest.raises(ValueError, match=needle):
            cocofl.parse(bad)
        with pytest.raises(ValueError, match=needle):
            RunConfig(cocofl=bad)
    with pytest.raises(TypeError, match="cocofl"):
        cocofl.parse(2)
    with pytest.raises(ValueError, match="precision must be 'fp32'"):
        RunConfig(cocofl="0.5:1", precision="int8")
    # mlp:16 has 2 layers with parameters: freezing 2 would leave nothing to train.
    with pytest.raises(ValueError, match="must be < 2"):
        Simulator(RunConfig(peers=4, model="mlp:16", cocofl="0.5:2"))


def test_assign_reproducible_and_sized():
    spec = cocofl.parse("0.25:1,0.25:2,0.25:drop")
    a = cocofl.assign(spec, 16, 3, seed=5)
    assert np.array_equal(a, cocofl.assign(spec, 16, 3, seed=5))
    assert not np.array_equal(a, cocofl.assign(spec, 16, 3, seed=6))
    assert [int((a == k).sum()) for k in (0, 1, 2, 3)] == [4, 4, 4, 4]
    assert cocofl.assign(cocofl.parse("0:1"), 5, 3, 0).tolist() == [0] * 5
    assert (cocofl.assign(cocofl.parse("1:1"), 5, 3, 0) == 1).all()


def test_frozen_cut_is_the_layout_prefix():
    model = make_model("mlp:16,12", (1, 8, 8), 10)
    assert model.param_layers == ("fc1", "fc2", "fc3")
    layout = {name: sl for name, sl, _ in model.layout()}
    assert model.frozen_cut(0) == 0
    assert model.frozen_cut(1) == layout["fc1.bias"].stop == 64 * 16 + 16
    assert model.frozen_cut(2) == layout["fc2.bias"].stop
    assert model.frozen_cut(3) == model.dim
    with pytest.raises(ValueError, match="n_frozen"):
        model.frozen_cut(4)
    cnn = make_model("cnn:gn", (1, 8, 8), 10)
    assert cnn.param_layers[:2] == ("conv1", "gn1")


@pytest.mark.parametrize("spec", ["mlp:16,12", "cnn"])
def test_frozen_layers_get_no_gradient_and_trained_ones_match(spec):
    model, params, x, y = _setup(spec)
    frozen = np.array([0, 1, 2, 0])
    loss, grad = model.loss_and_grad(params, x, y, step=0, frozen=frozen)
    full_loss, full_grad = model.loss_and_grad(params, x, y, step=0)
    for p, k in enumerate(frozen):
        cut = model.frozen_cut(int(k))
        assert not grad[p, :cut].any()
        if k == 0:  # unconstrained peers: exactly the ordinary pass
            assert np.array_equal(grad[p], full_grad[p]) and loss[p] == full_loss[p]
        else:  # trained layers see int8-forward activations: close to fp32, not equal
            assert grad[p, cut:].any()
            rel = np.linalg.norm(grad[p, cut:] - full_grad[p, cut:]) / np.linalg.norm(
                full_grad[p, cut:])
            assert rel < 0.1
    # A group computed alone gives the same result as inside a mixed batch.
    l1, g1 = model.loss_and_grad(params[1:2], x[1:2], y[1:2], step=0, frozen=1)
    assert np.array_equal(g1[0], grad[1]) and l1[0] == loss[1]


def test_frozen_dense_forward_is_int8():
    model, params, x, y = _setup("mlp:16,12", peers=2)
    _, grad = model.loss_and_grad(params, x, y, frozen=1)
    # Reference: fc1 in int8 (nearest rounding), the rest float32, by hand.
    w1 = params[:, :64 * 16].reshape(2, 64, 16)
    b1 = params[:, 64 * 16:64 * 16 + 16]
    h_ref, _ = lowp.dense_forward(x.reshape(2, 8, 64), w1, b1, False, False)
    fc2 = make_model("mlp:12", (16,), 10)
    _, g_rest = fc2.loss_and_grad(np.ascontiguousarray(params[:, model.frozen_cut(1):]),
                                  np.maximum(h_ref, 0), y)
    np.testing.assert_allclose(grad[:, model.frozen_cut(1):], g_rest, rtol=1e-5, atol=1e-7)


def test_dropped_peers_get_zero_gradient():
    model, params, x, y = _setup()
    loss, grad = model.loss_and_grad(params, x, y, frozen=np.array([3, 0, 3, 0]))
    assert not grad[[0, 2]].any() and grad[[1, 3]].any()
    assert np.isfinite(loss).all()
    with pytest.raises(ValueError, match="frozen"):
        model.loss_and_grad(params, x, y, frozen=np.array([4, 0, 0, 0]))
    with pytest.raises(ValueError, match="frozen"):
        model.loss_and_grad(params, x, y, frozen=np.array([1, 0]))


@pytest.mark.parametrize("kw", [dict(momentum=0.0), dict(momentum=0.9),
                                dict(momentum=0.9, nesterov=True, weight_decay=1e-2),
                                dict(momentum=0.9, nesterov=True), dict(weight_decay=1e-2)])
def test_optimizer_leaves_frozen_prefixes_untouched(kw):
    rng = np.random.default_rng(0)
    params = rng.standard_normal((4, 50), dtype=np.float32)
    before = params.copy()
    opt = SGD(SGDConfig(lr=0.1, **kw), params.shape)
    cut = np.array([0, 10, 50, 10])
    for _ in range(3):
        opt.step(params, rng.standard_normal((4, 50), dtype=np.float32), frozen=cut)
    for p, c in enumerate(cut):
        assert np.array_equal(params[p, :c], before[p, :c])
        assert not opt.momentum_buffer[p, :c].any()
        assert c == 50 or not np.array_equal(params[p, c:], before[p, c:])
    with pytest.raises(ValueError, match="frozen"):
        opt.step(params, params.copy(), frozen=np.array([0, 51, 0, 0]))


def test_local_step_does_not_move_frozen_parameters():
    sim = Simulator(RunConfig(peers=8, model="mlp:16,12", cocofl="0.25:1,0.25:2,0.25:drop",
                              weight_decay=1e-3, rounds=1))
    alg = sim.algorithm
    for _ in range(3):  # local steps only: gossip would overwrite frozen layers by design
        before = alg.params.copy()
        alg.local_step(sim.sample)
        for p, k in enumerate(sim.frozen):
            cut = sim.model.frozen_cut(int(k))
            assert np.array_equal(alg.params[p, :cut], before[p, :cut])
            assert cut == sim.model.dim or not np.array_equal(alg.params[p, cut:],
                                                               before[p, cut:])


def test_compute_counts_closed_form():
    model = make_model("mlp:16,12", (1, 8, 8), 10)
    b = 32
    l1, l2, l3 = 64 * 16, 16 * 12, 12 * 10
    full = cocofl.peer_costs(model, 0, b)
    assert full["macs_fp32"] == b * (2 * l1 + 3 * l2 + 3 * l3) and full["macs_int8"] == 0
    assert full["activation_bytes"] == 4 * b * (64 + 16 + 12)
    assert full["optimizer_state_bytes"] == 4 * model.dim
    one = cocofl.peer_costs(model, 1, b)
    assert one["macs_int8"] == b * l1
    assert one["macs_fp32"] == b * (2 * l2 + 3 * l3)
    assert one["activation_bytes"] == 4 * b * (16 + 12)
    assert one["optimizer_state_bytes"] == 4 * (model.dim - model.frozen_cut(1))
    two = cocofl.peer_costs(model, 2, b, momentum=False)
    assert two["macs_int8"] == b * (l1 + l2) and two["macs_fp32"] == b * 2 * l3
    assert two["optimizer_state_bytes"] == 0
    assert cocofl.peer_costs(model, 3, b)["macs"] == 0
    s = cocofl.cost_summary(model, np.array([0, 1, 1, 0]), b, local_steps=2)
    assert s["constrained"]["compute_macs_per_round"] == 2 * one["macs"]
    assert s["constrained"]["compute_relative_to_full"] == pytest.approx(one["macs"]
                                                                         / full["macs"])
    assert s["unconstrained"]["compute_macs_per_round"] == 2 * full["macs"]


def test_compute_counts_int8_precision():
    """An int8 model's trained Dense layers count their three products as int8 MACs, in
    peer_costs and in the summary.json of a run (the fp32 model's closed form, moved)."""
    b = 32
    fp32 = make_model("mlp:16,12", (1, 8, 8), 10)
    int8 = make_model("mlp:16,12", (1, 8, 8), 10, precision="int8")
    l1, l2, l3 = 64 * 16, 16 * 12, 12 * 10
    for k in (0, 1, 2):
        f, q = cocofl.peer_costs(fp32, k, b), cocofl.peer_costs(int8, k, b)
        assert q["macs_fp32"] == 0 and q["macs_int8"] == f["macs"] == q["macs"]
    assert cocofl.peer_costs(int8, 0, b)["macs_int8"] == b * (2 * l1 + 3 * l2 + 3 * l3)
    res = simulate(RunConfig(peers=4, rounds=2, eval_every=2, model="mlp:16,12",
                             precision="int8"))
    full = res.summary["compute"]["full_peer"]
    assert full["macs_fp32"] == 0 and full["macs_int8"] == b * (2 * l1 + 3 * l2 + 3 * l3)
    unc = res.summary["compute"]["unconstrained"]
    assert unc["int8_macs_per_round"] == unc["compute_macs_per_round"] == full["macs"]


def test_run_reproducible_and_summary():
    cfg = RunConfig(peers=8, rounds=6, eval_every=3, model="mlp:16,12", cocofl="0.5:1")
    a, b = simulate(cfg), simulate(cfg)
    assert np.array_equal(a.params, b.params)
    assert a.summary["constrained_peers"] == b.summary["constrained_peers"]
    assert len(a.summary["constrained_peers"]) == 4
    assert a.summary["compute"]["constrained"]["compute_relative_to_full"] < 1
    assert a.summary["test_accuracy_constrained_mean"] is not None
    other = simulate(cfg.replace(seed=1))
    assert other.summary["constrained_peers"] != a.summary["constrained_peers"] or \
        not np.array_equal(other.params, a.params)


def test_cocofl_constrained_peers_beat_dropping():
    """Digits, ring of 16, non-IID: half the peers constrained. Training the upper layers on
    their own data (CoCoFL) must give those peers a better model than not training them."""
    base = RunConfig(peers=16, rounds=100, eval_every=100, model="mlp:64,32",
                     partition="dirichlet:0.1")
    co = simulate(base.replace(cocofl="0.5:1")).summary
    drop = simulate(base.replace(cocofl="0.5:drop")).summary
    assert co["constrained_peers"] == drop["constrained_peers"]
    assert co["test_accuracy_constrained_mean"] > drop["test_accuracy_constrained_mean"] + 0.03
    assert co["test_accuracy_avg_model"] > drop["test_accuracy_avg_model"]
