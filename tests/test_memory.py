"""Memory estimate (decentlearn.runner.memory, `run --dry-run`): the probe counts the state arrays the
run really holds, the estimate bounds what a run allocates, and a run that does not fit is refused
with the figure before anything is allocated."""

import re
import tracemalloc
import warnings

import numpy as np
import pytest

from decentlearn.runner import memory
from decentlearn.cli import main
from decentlearn.data import load_dataset
from decentlearn.sim import RunConfig, Simulator


@pytest.mark.parametrize("kw, buffers", [
    # params, gradient, momentum, gossip output
    (dict(), {"parameters": 4, "optimizer state": 4, "algorithm state": 4, "gossip buffers": 4}),
    # CHOCO: params, gradient, momentum, x_hat, its neighbours' mix, error-feedback memory
    (dict(algorithm="choco", compress="ef:topk:0.1", gamma=0.3), None),
])
def test_probe_matches_the_arrays_of_a_built_run(kw, buffers):
    config = RunConfig(peers=12, rounds=2, eval_every=2, **kw)
    parts, note = memory.probe_state(config)
    assert "probe" in note
    if buffers is not None:
        assert parts == pytest.approx(buffers)
    # independent count: the (peers, dim)-sized float32 arrays of a run built here, found by
    # scanning every object's __dict__ one level below the algorithm
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sim = Simulator(config.replace(partition="iid"))
        sim.run()
    dim, found = sim.model.dim, {}
    for owner in (sim.algorithm, sim.algorithm.optimizer, sim.comm,
                  *[v for v in vars(sim.algorithm).values() if hasattr(v, "__dict__")]):
        for v in vars(owner).values():
            if isinstance(v, np.ndarray) and v.size == 12 * dim:
                base = v if v.base is None else v.base
                found[base.__array_interface__["data"][0]] = v.nbytes
    assert sum(found.values()) / (12 * dim) == pytest.approx(sum(parts.values()))


def _reachable_arrays(root, path, out, seen, depth=0):
    """Every NumPy array reachable from ``root`` through decentlearn objects' attributes, lists,
    tuples and dicts: base address -> (nbytes, path). The reference the declarations are checked
    against (it knows nothing of them)."""
    if depth > 6 or id(root) in seen:
        return
    seen.add(id(root))
    if isinstance(root, np.ndarray):
        base = root
        while isinstance(base.base, np.ndarray):
            base = base.base
        out.setdefault(base.__array_interface__["data"][0], (base.nbytes, path))
        return
    if isinstance(root, dict):
        items = list(root.items())
    elif isinstance(root, (list, tuple)):
        items = list(enumerate(root))
    elif (type(root).__module__ or "").startswith("decentlearn"):
        items = list(getattr(root, "__dict__", {}).items())
    else:
        return
    for key, value in items:
        # the model holds no parameters; the data set is shared (counted apart)
        if key not in ("model", "dataset", "topology", "partition", "sampler", "network",
                       "x_train", "y_train"):
            _reachable_arrays(value, f"{path}.{key}", out, seen, depth + 1)


def _variants():
    from decentlearn import algorithms
    cases = [dict(algorithm=name, **algorithms.get(name).example)
             for name in algorithms.available()]
    return cases + [
        dict(compress="qsgd:16"), dict(compress="ef:topk:0.1", optimizer="adam"),
        dict(optimizer="lamb"), dict(optimizer="lars", momentum=0.9),
        dict(algorithm="choco", compress="ef:topk:0.1", gamma=0.3),
        dict(mixing="finite-time", momentum=0.0), dict(mixing="nonlinear"),
        dict(network="mobile"), dict(network="edge", asynchronous=True),
        dict(algorithm="stc-fl", server_compress="topk:0.1"),
    ]


@pytest.mark.parametrize("kw", _variants(), ids=lambda kw: "-".join(f"{v}" for v in kw.values())
                         or "default")
def test_declared_arrays_are_every_array_a_run_holds(kw):
    """The memory estimate reads the declarations (state, scratch); every (peers x dim)-sized
    array reachable from the run's algorithm and communicator must be declared, with its size."""
    peers = 16
    config = RunConfig(peers=peers, rounds=2, eval_every=2, eval_peer_samples=20, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sim = Simulator(config)
        sim.run()
    dim = sim.model.dim
    found: dict = {}
    seen: set = set()
    _reachable_arrays(sim.algorithm, "algorithm", found, seen)
    _reachable_arrays(sim.comm, "comm", found, seen)
    held = {p: n for n, p in found.values() if n >= peers * dim}
    declared = {p: n for p, n in memory.declared_arrays(sim).items() if n >= peers * dim}
    assert sum(declared.values()) == sum(held.values()), (held, declared)


def test_state_objects_must_declare_their_kinds():
    sim = Simulator(RunConfig(peers=4, rounds=1))

    class Undeclared:
        def state_dict(self):
            return {"x": np.zeros((4, 3), np.float32)}
    sim.algorithm.optimizer = Undeclared()
    with pytest.raises(TypeError, match="optimizer .Undeclared. has state but does not declare"):
        sim.state_kinds()


@pytest.mark.parametrize("kw", [dict(peers=128), dict(peers=128, algorithm="choco",
                                                       compress="topk:0.1", gamma=0.3)])
def test_estimate_bounds_what_a_run_allocates(kw):
    config = RunConfig(rounds=3, eval_every=3, **kw)
    est = memory.estimate(config)
    data = load_dataset("digits")
    tracemalloc.start()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            Simulator(config, dataset=data).run()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    held = est.total - sum(est.shared.values())  # data and libraries were loaded before tracing
    assert peak <= held <= 4 * peak, (held, peak)


def test_estimate_scales_with_peers_and_reads_no_data():
    small = memory.estimate(RunConfig(dataset="cifar10", data_dir="/nonexistent", peers=100,
                                      model="linear"), probe=False)
    big = memory.estimate(RunConfig(dataset="cifar10", data_dir="/nonexistent", peers=200,
                                    model="linear"), probe=False)
    assert small.dim == big.dim == 3 * 32 * 32 * 10 + 10
    assert big.part_total("parameters") == 2 * small.part_total("parameters") == 2 * 100 * 4 * \
        small.dim
    assert big.shared["dataset"] == small.shared["dataset"]  # the data set is shared


def test_dry_run_prints_and_allocates_nothing(tmp_path, capsys):
    out = tmp_path / "never"
    assert main(["run", "--dry-run", "--peers", "1000", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    for part in ("parameters", "optimizer state", "gossip buffers", "data shares",
                 "evaluation", "dataset", "peak", "available"):
        assert part in text
    assert "1000 peers" in text and "fits" in text
    assert not out.exists()


def test_too_big_a_run_is_refused_with_the_figure(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(memory.LIMIT_ENV, "64M")
    out = tmp_path / "never"
    assert main(["run", "--peers", "2000", "--rounds", "1", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "refused" in err and "64 MiB is available" in err
    est = memory.estimate(RunConfig(peers=2000, rounds=1))
    m = re.search(r"needs about ([\d.]+) (MiB|GiB)", err)
    stated = float(m.group(1)) * 2 ** (20 if m.group(2) == "MiB" else 30)
    assert stated == pytest.approx(est.total, rel=0.05)  # the process's RSS moves a little
    assert not out.exists()
    assert main(["run", "--dry-run", "--peers", "2000"]) == 2
    captured = capsys.readouterr()
    assert "does NOT fit" in captured.out and "refused" in captured.err
    monkeypatch.setenv(memory.LIMIT_ENV, "lots")
    assert main(["run", "--dry-run"]) == 2
    assert memory.LIMIT_ENV in capsys.readouterr().err


def test_parse_bytes():
    assert memory._parse_bytes("24G") == 24 << 30
    assert memory._parse_bytes("512 MiB") == 512 << 20
    assert memory._parse_bytes("1000") == 1000
    with pytest.raises(ValueError, match=memory.LIMIT_ENV):
        memory._parse_bytes("-1G")


def _peak_of_round_3(sim) -> int:
    """Bytes allocated at the peak of round 3 (tracemalloc), after rounds 0-2 made the kept
    arrays."""
    alg = sim.algorithm
    for t in range(3):
        alg.round(sim.sample, t)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        alg.round(sim.sample, 3)
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("kw, most", [
    # NGC's one fresh array per round is its identity payload (the message's own copy)
    (dict(algorithm="ngc"), 1.3),
    (dict(algorithm="ngc", ngc_alpha=0.5, ngc_weights="mixing", ngc_self_gradient="start"), 1.3),
    (dict(algorithm="compngc"), 0.5),
    (dict(algorithm="compngc", compress="topk:0.1"), 0.5),
])
def test_ngc_rounds_reuse_their_work_arrays(kw, most):
    """After the first rounds, a round of NGC or CompNGC allocates less than ``most`` times one
    (edges x dim) float32 matrix at its peak: the neighbours' models, cross-gradients, received
    and decoded messages and sums go into kept arrays (fresh ones cost a page fault per 4 KiB
    every round). Before they were kept, a round allocated about four such matrices."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sim = Simulator(RunConfig(peers=32, rounds=1, **kw))
    one = sim.algorithm.comm.edges(3)[0].size * sim.algorithm.model.dim * 4
    peak = _peak_of_round_3(sim)
    assert peak < most * one, (peak, one)


@pytest.mark.parametrize("kw", [dict(algorithm="fedavg", participation=0.5),
                                dict(algorithm="stc-fl", compress="stc:0.05", participation=0.5),
                                dict(algorithm="fedhisyn", categories=3)])
def test_server_rounds_reuse_their_work_arrays(kw):
    """After the first rounds, a FedAvg, STC-FL or FedHiSyn round allocates less than twice one
    (clients x dim) float32 matrix at its peak: the clients' parameter rows and minibatches,
    x_i - x, A_i, the decoded uploads and FedHiSyn's shifted matrices go into kept arrays (what is
    left: the model's gradient of the clients' rows and the identity compressor's payload). With
    fresh arrays a round took 3.2x (FedAvg), 4.1x (STC-FL) and 3.1x (FedHiSyn)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sim = Simulator(RunConfig(peers=32, rounds=1, **kw))
    one = sim.algorithm.n_clients * sim.algorithm.model.dim * 4
    peak = _peak_of_round_3(sim)
    assert peak < 2 * one, (peak, one)
