"""Tests of Adam, AdamW, LARS, LAMB and the learning-rate schedules (decentlearn.optim) against
their update formulas written densely, one peer and one layer at a time in float64 (the papers'
algorithms: Kingma & Ba 2015 Alg. 1 with PyTorch's epsilon placement, Loshchilov & Hutter 2019,
You et al. 2017 and 2019 Alg. 2), against torch.optim where the formula is the same, and in runs
of the simulator."""

from __future__ import annotations

import math

import numpy as np
import pytest

from decentlearn import algorithms
from decentlearn.optim import OPTIMIZERS, LRSchedule, OptimizerConfig, make
from decentlearn.sim import RunConfig, simulate

SEGMENTS = [(0, 6), (6, 7), (7, 15), (15, 16)]  # weight, bias, weight, bias of a tiny model


def _norm(v: np.ndarray) -> float:
    return math.sqrt(float(np.dot(v, v)))


def reference(cfg: OptimizerConfig, x0: np.ndarray, grads: list[np.ndarray],
              lrs: list[float], segments=SEGMENTS, frozen=None) -> np.ndarray:
    """The update formulas, peer by peer and layer by layer, in float64."""
    P, D = x0.shape
    out = np.empty((P, D))
    b1, b2, eps, wd = cfg.momentum, cfg.beta2, cfg.eps_value, cfg.weight_decay
    for p in range(P):
        x = x0[p].astype(np.float64)
        cut = 0 if frozen is None else int(frozen[p])
        m, v, buf = np.zeros(D), np.zeros(D), np.zeros(D)
        for t, (grad, lr) in enumerate(zip(grads, lrs), start=1):
            g = grad[p].astype(np.float64)
            if cfg.name in ("adam", "adamw"):
                if cfg.name == "adam":
                    g = g + wd * x
                m = b1 * m + (1 - b1) * g
                v = b2 * v + (1 - b2) * g * g
                mhat, vhat = m / (1 - b1 ** t), v / (1 - b2 ** t)
                u = lr * mhat / (np.sqrt(vhat) + eps)
                if cfg.name == "adamw":
                    u = u + lr * wd * x
            elif cfg.name == "lars":
                u = np.empty(D)
                for a, b in segments:
                    wn, gn = _norm(x[a:b]), _norm(g[a:b])
                    trust = (cfg.trust_coefficient * wn / (gn + wd * wn + eps)
                             if wn > 0 and gn > 0 else 1.0)
                    u[a:b] = lr * trust * (g[a:b] + wd * x[a:b])
                buf = cfg.momentum * buf + u
                buf[:cut] = 0
                u = buf.copy()
            else:  # lamb
                m = b1 * m + (1 - b1) * g
                v = b2 * v + (1 - b2) * g * g
                r = (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps) + wd * x
                r[:cut] = 0
                u = np.empty(D)
                for a, b in segments:
                    wn, rn = _norm(x[a:b]), _norm(r[a:b])
                    u[a:b] = lr * (wn / rn if wn > 0 and rn > 0 else 1.0) * r[a:b]
            u[:cut] = 0
            if cfg.name != "lars":
                m[:cut], v[:cut] = 0, 0
            x = x - u
        out[p] = x
    return out


CASES = [
    OptimizerConfig(name="adam", lr=0.01),
    OptimizerConfig(name="adam", lr=0.003, momentum=0.5, beta2=0.99, weight_decay=0.01),
    OptimizerConfig(name="adamw", lr=0.01, weight_decay=0.1),
    OptimizerConfig(name="lars", lr=0.5, momentum=0.9, weight_decay=1e-3),
    OptimizerConfig(name="lars", lr=0.5, momentum=0.0, trust_coefficient=0.02),
    OptimizerConfig(name="lamb", lr=0.01, weight_decay=0.01),
    OptimizerConfig(name="lamb", lr=0.02, momentum=0.8, beta2=0.9, eps=1e-4),
]


def _problem(seed=0, P=5, D=16, steps=6):
    rng = np.random.default_rng(seed)
    x0 = rng.standard_normal((P, D)).astype(np.float32)
    x0[1, 6] = 0.0  # a zero-norm layer (bias) on one peer: trust ratio 1
    grads = [rng.standard_normal((P, D)).astype(np.float32) for _ in range(steps)]
    grads[0][2, 7:15] = 0  # a zero-gradient layer
    return x0, grads


@pytest.mark.parametrize("cfg", CASES, ids=lambda c: f"{c.name}-{c.lr}-{c.weight_decay}")
@pytest.mark.parametrize("frozen", [None, np.array([0, 7, 0, 16, 3])], ids=["free", "frozen"])
def test_matches_dense_formula(cfg, frozen):
    x0, grads = _problem()
    lrs = [cfg.lr * f for f in (1.0, 0.5, 1.0, 0.25, 1.0, 0.8)]  # per-step lr (schedules)
    opt = make(cfg, x0.shape, segments=SEGMENTS)
    x = x0.copy()
    for g, lr in zip(grads, lrs):
        g_before = g.copy()
        opt.step(x, g, lr=lr, frozen=frozen)
        np.testing.assert_array_equal(g, g_before)  # the gradient is read only
    want = reference(cfg, x0, grads, lrs, frozen=frozen)
    np.testing.assert_allclose(x, want, rtol=2e-5, atol=2e-6)
    if frozen is not None:
        for p, cut in enumerate(frozen):
            np.testing.assert_array_equal(x[p, :cut], x0[p, :cut])
            for name, a in opt.state_arrays().items():
                if a.ndim == 2:
                    assert not a[p, :cut].any(), name
    assert (opt.steps == len(grads)).all()


@pytest.mark.parametrize("name", ["adam", "adamw", "lars", "lamb"])
def test_rows_are_independent(name):
    """A peer's update depends on its row only: stepping a subset of rows with the subset's state
    gives the same numbers as the batched step (asynchrony, churn and the MPI backend's row
    blocks rely on this)."""
    cfg = OptimizerConfig(name=name, lr=0.01, weight_decay=0.01)
    x0, grads = _problem(1, P=6)
    full, x = make(cfg, x0.shape, segments=SEGMENTS), x0.copy()
    for g in grads:
        full.step(x, g)
    rows = np.array([4, 1])
    part, xs = make(cfg, (2, x0.shape[1]), segments=SEGMENTS), x0[rows].copy()
    for g in grads:
        part.step(xs, np.ascontiguousarray(g[rows]))
    np.testing.assert_array_equal(xs, x[rows])


def test_adam_matches_torch():
    torch = pytest.importorskip("torch", reason="torch not installed (pip install torch)")
    x0, grads = _problem(2)
    for cfg, cls in ((OptimizerConfig(name="adam", lr=0.01, weight_decay=0.01), torch.optim.Adam),
                     (OptimizerConfig(name="adamw", lr=0.01, weight_decay=0.1),
                      torch.optim.AdamW)):
        w = torch.nn.Parameter(torch.from_numpy(x0.copy()))
        topt = cls([w], lr=cfg.lr, betas=(cfg.momentum, cfg.beta2), eps=cfg.eps_value,
                   weight_decay=cfg.weight_decay, foreach=False)
        opt, x = make(cfg, x0.shape), x0.copy()
        for g in grads:
            w.grad = torch.from_numpy(g.copy())
            topt.step()
            opt.step(x, g)
        np.testing.assert_allclose(x, w.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_state_arrays_and_reset():
    cfg = OptimizerConfig(name="adam", lr=0.01)
    opt = make(cfg, (3, 4))
    x = np.ones((3, 4), np.float32)
    opt.step(x, np.ones((3, 4), np.float32))
    state = opt.state_arrays()
    assert set(state) == {"exp_avg", "exp_avg_sq", "steps"}
    assert all(a.shape[0] == 3 for a in state.values())
    opt.reset()
    assert not any(a.any() for a in opt.state_arrays().values())
    assert set(make(OptimizerConfig(), (3, 4)).state_arrays()) == {"momentum"}


@pytest.mark.parametrize("kwargs, match", [
    ({"name": "adma"}, "optimizer must be one of"),
    ({"name": "adam", "nesterov": True}, "nesterov applies to sgd only"),
    ({"name": "adam", "momentum": 1.0}, r"beta1 \(--momentum\)"),
    ({"name": "lamb", "beta2": -0.1}, "beta2"),
    ({"name": "adam", "eps": 0.0}, "eps must be > 0"),
    ({"name": "lars", "trust_coefficient": 0.0}, "trust_coefficient"),
    ({"name": "lars", "weight_decay": -1.0}, "weight_decay"),
])
def test_bad_hyperparameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        OptimizerConfig(**{"lr": 0.01, **kwargs})


def test_bad_segments():
    with pytest.raises(ValueError, match="segments must tile"):
        make(OptimizerConfig(name="lars"), (2, 10), segments=[(0, 4), (5, 10)])
    with pytest.raises(ValueError, match="segments must tile"):
        make(OptimizerConfig(name="lamb"), (2, 10), segments=[(0, 4)])


def test_schedules_closed_form():
    s = LRSchedule(lr=0.1, rounds=100, decay="step:30:0.1")
    assert [s(t) for t in (0, 29, 30, 59, 60, 89, 90, 99)] == pytest.approx(
        [0.1, 0.1, 0.01, 0.01, 0.001, 0.001, 1e-4, 1e-4])
    c = LRSchedule(lr=0.2, rounds=10, decay="cosine")
    for t in range(10):
        assert c(t) == pytest.approx(0.1 * (1 + math.cos(math.pi * t / 10)))
    f = LRSchedule(lr=0.2, rounds=10, decay="cosine:0.1")
    assert f(5) == pytest.approx(0.2 * (0.1 + 0.9 * 0.5))
    # Goyal et al.: lr 0.1 per 256 samples, 8192-sample batches -> 3.2, reached after warmup.
    g = LRSchedule(lr=0.1, rounds=90, warmup=5, scaling="linear:256", global_batch=8192)
    assert [g(t) for t in range(6)] == pytest.approx([0.64, 1.28, 1.92, 2.56, 3.2, 3.2])
    q = LRSchedule(lr=0.1, rounds=9, scaling="sqrt:64", global_batch=256)
    assert q(3) == pytest.approx(0.2)
    assert LRSchedule(lr=0.1, rounds=5).constant
    for bad, match in (({"decay": "step:0:0.1"}, "lr_schedule"), ({"decay": "exp"}, "lr_schedule"),
                       ({"warmup": -1}, "warmup"), ({"scaling": "linear:0"}, "lr_scaling"),
                       ({"scaling": "cubic:4"}, "lr_scaling")):
        with pytest.raises(ValueError, match=match):
            LRSchedule(lr=0.1, rounds=5, **bad)


def test_simulator_applies_the_schedule():
    """The optimizer's lr in round t is the schedule's, and a scheduled run equals a run whose
    lr is set by hand to the same values round by round (same seed, same data)."""
    base = RunConfig(rounds=4, eval_every=4, peers=4, model="linear", momentum=0.0,
                     partition="iid", lr=0.4)
    want = [0.2, 0.4, 0.2, 0.2]  # warmup 2 (x1/2, x1) times step:2:0.5 (x1, x1, x1/2, x1/2)
    seen = []

    class Spy:
        def on_round_end(self, sim, t):
            seen.append(sim.algorithm.optimizer.lr)

        def on_eval(self, sim, row):
            pass

    class ByHand(Spy):
        def on_round_end(self, sim, t):
            if t + 1 < len(want):
                sim.algorithm.optimizer.lr = want[t + 1]

    a = simulate(base.replace(lr_schedule="step:2:0.5", warmup=2), callbacks=[Spy()])
    assert seen == pytest.approx(want)
    b = simulate(base.replace(lr=want[0]), callbacks=[ByHand()])
    np.testing.assert_array_equal(a.params, b.params)
    c = simulate(base.replace(lr=want[0]))
    assert not np.array_equal(a.params, c.params)


@pytest.mark.parametrize("name", ["adam", "adamw", "lars", "lamb"])
def test_every_optimizer_trains(name):
    lr = {"adam": 0.003, "adamw": 0.003, "lars": 2.0, "lamb": 0.01}[name]
    r = simulate(RunConfig(rounds=60, eval_every=60, peers=8, optimizer=name, lr=lr,
                           partition="iid", weight_decay=1e-4))
    assert r.summary["test_accuracy_mean"] > 0.8, r.summary["test_accuracy_mean"]


@pytest.mark.parametrize("algorithm", sorted(set(algorithms.available()) - {"d2"}))
def test_every_algorithm_runs_with_adam(algorithm):
    extra = {"gamma": 0.5} if algorithm == "choco" else {}
    if algorithm in ("dsgt", "dacfl", "ngc", "compngc"):
        extra["local_steps"] = 1
    r = simulate(RunConfig(rounds=4, eval_every=4, peers=4, optimizer="adam", lr=0.002,
                           algorithm=algorithm, **extra))
    assert np.isfinite(r.params).all()
    assert r.history[-1]["test_accuracy_mean"] > 0.0


def test_d2_refuses_adaptive_optimizers():
    with pytest.raises(ValueError, match="d2 takes plain gradient steps: optimizer must be sgd"):
        simulate(RunConfig(rounds=2, peers=4, algorithm="d2", optimizer="adam", momentum=0.0))


@pytest.mark.parametrize("name", ["adam", "lamb"])
def test_async_steps_peers_with_any_optimizer(name):
    """Asynchronous gossip keeps every peer's optimizer state between its own updates: a run
    learns, and its per-peer step counts equal the updates each peer made."""
    r = RunConfig(network="datacenter", asynchronous=True, optimizer=name, peers=8,
                  rounds=30, eval_every=30, lr=0.003 if name == "adam" else 0.01,
                  partition="iid")
    from decentlearn.sim import Simulator
    sim = Simulator(r)
    result = sim.run()
    assert result.summary["test_accuracy_mean"] > 0.6
    alg = sim.algorithm
    np.testing.assert_array_equal(alg.peer_state.steps, alg.updates * r.local_steps)


def test_churn_keeps_adam_state_of_offline_peers(tmp_path):
    """Under churn an offline peer's parameters, Adam moments and step count do not move, and a
    peer that comes back with churn_state "reset" restarts with zero state."""
    from decentlearn.sim import Simulator
    for state in ("keep", "reset"):
        net = tmp_path / "net.toml"
        net.write_text(f'[network]\nchurn_leave = 0.3\nchurn_join = 0.5\n'
                       f'churn_state = "{state}"\n')
        sim = Simulator(RunConfig(peers=8, rounds=10, network=str(net), seed=2, optimizer="adam",
                                  lr=0.002))
        opt = sim.algorithm.optimizer
        checked = 0
        for t in range(10):
            sim.offline_hook.before_round(t)
            joined = sim.network.joined(t)
            if state == "reset" and joined.any():
                assert not opt.steps[joined].any() and not opt.momentum_buffer[joined].any()
            before = {k: a.copy() for k, a in opt.state_arrays().items()}
            sim.algorithm.round(sim.sample, t)
            sim.offline_hook.after_round(t)
            off = ~sim.network.online(t)
            for k, a in opt.state_arrays().items():
                np.testing.assert_array_equal(a[off], before[k][off], err_msg=k)
            assert (opt.steps[~off] == before["steps"][~off] + 1).all()
            checked += int(off.sum())
        assert checked > 0


def test_cli_lists_every_optimizer():
    from decentlearn.cli import build_parser
    text = build_parser()._subparsers._group_actions[0].choices["run"].format_help()
    for name in OPTIMIZERS:
        assert name in text
