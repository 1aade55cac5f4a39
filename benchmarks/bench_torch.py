"""Torch-model benchmark: one D-PSGD round (ring, momentum SGD) for 16 peers, every execution mode
of ``TorchModel`` against a per-peer loop over nn.Module copies, in one process.

    PYTHONPATH=. python benchmarks/bench_torch.py [--models resnet20,cnn,mlp] [--peers 16]
        [--batch 32] [--repeat 2] [--threads 2] [--out benchmarks/results/torch.json]

For every model (resnet20 on 3x32x32 inputs, the native twins cnn and mlp on 1x28x28), measured
in one process, interleaved, best of ``repeat`` after one warm-up round:
- decentlearn's D-PSGD round with ``TorchModel`` (then decentlearn's C optimizer and gossip) in
  mode ``batched`` (one vmapped pass over all peers: each convolution is one convolution of the
  peers folded into the channels, ``groups = P``), ``grouped:1`` (a plain ``functional_call``
  per peer on its row: ordinary convolutions) and ``auto`` (the mode auto chose; the one-off cost
  of its measurement, on the first batch, is reported apart with every candidate's time);
- torch compute: the forward + backward alone of ``batched`` and of the mode auto chose, on
  views prepared the same way but without the checks and the gradient copy; the overhead of
  decentlearn around torch is (round - torch compute) / round (views, checks, the gradient copy
  into the algorithm's buffer, optimizer, gossip, bookkeeping);
- per-peer loop: how decentralizepy-style simulators run it, 16 ``nn.Module`` copies, each
  forward/backward and ``torch.optim.SGD`` step in turn, then gossip as a loop over peers and
  their state tensors (new = sum_j W_ij x_j). Ratios are loop / decentlearn.
For resnet20 also one convolution alone (its first stage's 16->16 3x3 at 32x32), forward and
backward: the peers folded into the channels (``groups = P``, what vmap runs) against P ordinary
convolutions. Thread discipline: process CPU seconds / wall seconds of decentlearn's rounds at
``threads`` and at 1 thread (above the thread count would be oversubscription) and the OpenMP
runtimes loaded. Inputs are random; absolute seconds move with the machine's load (the JSON
records the load average), ratios much less.

With ``--device DEVICE`` (cuda, cuda:N or cpu) it measures instead a whole round on that device
against the CPU:

    PYTHONPATH=. python benchmarks/bench_torch.py --device cuda [--model resnet20:gn]
        [--peers 16,64] [--batch 32] [--image-size 32] [--repeat 3] [--cpu-threads 2,all]

For each peer count, one run (``Simulator`` on random 3xSxS data, D-PSGD, ring, SGD momentum
0.9) per case, every case in the same process, interleaved, best of ``repeat`` after a warm-up
round; a round is ``algorithm.round(runner.sample, t)``: sampling the minibatches, forward and
backward of every peer, the optimizer step, the gossip and the byte count. Cases: the device
path (``device=DEVICE``, host kernels on all cores), the same with cuDNN's autotuner instead of
deterministic kernels (CUDA only; run last, the settings are process-wide), and the CPU host path
(``--cpu-mode``, default ``grouped:1``, the mode ``auto`` picks for ResNet-20 on CPUs) at each
``--cpu-threads`` count. Also, for the device case, the forward/backward call alone (matrix and
batch to the device, gradients back) and the copy of the (P, dim) matrix to the device and back
alone (through pinned staging buffers, the default, and straight from pageable memory). Ratios
are CPU round / device round. Needs no GPU with ``--device cpu`` (a smoke test).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import decentlearn  # noqa: F401  (before numpy: its OpenBLAS and OpenMP wait defaults)
import numpy as np
import torch

import decentlearn
from decentlearn import algorithms, topology
from decentlearn.experiments.bench import cpu_info
from decentlearn.comm import SimComm
from decentlearn.optim import SGD, SGDConfig
from decentlearn.torch import TorchModel, make_torch_model

SHAPES = {"resnet20": (3, 32, 32), "cnn": (1, 28, 28), "mlp": (1, 28, 28)}
LR, MOMENTUM = 0.05, 0.9


def _cpu_seconds() -> float:
    return time.process_time()  # every thread of the process, user + system


def _openmp_runtimes() -> list[str]:
    try:
        with open("/proc/self/maps") as f:
            return sorted({ln.split()[-1] for ln in f if "gomp" in ln or "iomp" in ln})
    except OSError:
        return []


def _torch_compute(model: TorchModel, X: np.ndarray, xt: torch.Tensor, yt: torch.Tensor,
                   group: int) -> None:
    """Forward + backward of every peer, ``group`` peers per pass, nothing else."""
    model.module.train()
    for s, e in model._spans(X.shape[0], group):
        plain = group == 1
        p, b, leaves = model._views(X[s:e], 0, plain)
        logits = model._logits(p, b, xt[s] if plain else xt[s:e], False, plain)
        torch.autograd.grad(model._loss(logits, yt[s:e]).sum(), leaves)


def _loop_case(model: TorchModel, init: np.ndarray, top, P: int, xt: torch.Tensor,
               yt: torch.Tensor) -> Callable[[int], None]:
    model.load_row(init)
    mods = [copy.deepcopy(model.module).train() for _ in range(P)]
    opts = [torch.optim.SGD(m.parameters(), lr=LR, momentum=MOMENTUM) for m in mods]
    indptr, indices, data = top.csr(0)
    W = np.zeros((P, P))
    for i in range(P):
        W[i, indices[indptr[i]:indptr[i + 1]]] = data[indptr[i]:indptr[i + 1]]
    neighbours = [[(j, float(W[i, j])) for j in np.flatnonzero(W[i])] for i in range(P)]

    def loop_round(t: int) -> None:
        for i in range(P):
            opts[i].zero_grad()
            torch.nn.functional.cross_entropy(mods[i](xt[i]), yt[i]).backward()
            opts[i].step()
        states = [{k: v.clone() for k, v in m.state_dict().items()} for m in mods]
        with torch.no_grad():
            for i in range(P):
                for k, v in mods[i].state_dict().items():
                    if v.is_floating_point():
                        v.copy_(sum(w * states[j][k] for j, w in neighbours[i]))

    return loop_round


def _interleaved(cases: dict[str, Callable[[int], None]],
                 repeat: int) -> tuple[dict, dict]:
    """Best wall seconds and best process CPU seconds of each case. On a loaded machine the CPU
    seconds (at 1 thread: the work itself, whoever else runs) are the steadier measure."""
    for fn in cases.values():  # warm-up (allocations, kernels' first calls)
        fn(0)
    best = {k: float("inf") for k in cases}
    cpu = {k: float("inf") for k in cases}
    for r in range(repeat):
        for name, fn in cases.items():
            c0, t0 = _cpu_seconds(), time.perf_counter()
            fn(r + 1)
            best[name] = min(best[name], time.perf_counter() - t0)
            cpu[name] = min(cpu[name], _cpu_seconds() - c0)
    return best, cpu


def _conv_layer(P: int, B: int, repeat: int) -> dict:
    """One 16->16 3x3 convolution at 32x32 (ResNet-20's first stage), forward + backward with
    respect to input and weight, for P peers: folded into the channels (groups=P) vs P calls."""
    rng = np.random.default_rng(1)
    x = torch.from_numpy(rng.standard_normal((P, B, 16, 32, 32), dtype=np.float32))
    w = torch.from_numpy(rng.standard_normal((P, 16, 16, 3, 3), dtype=np.float32))

    def folded() -> None:
        xf = x.transpose(0, 1).reshape(B, P * 16, 32, 32).requires_grad_(True)
        wf = w.reshape(P * 16, 16, 3, 3).clone().requires_grad_(True)
        out = torch.nn.functional.conv2d(xf, wf, padding=1, groups=P)
        torch.autograd.grad(out.square().sum(), (xf, wf))

    def per_peer() -> None:
        for i in range(P):
            xi = x[i].clone().requires_grad_(True)
            wi = w[i].clone().requires_grad_(True)
            out = torch.nn.functional.conv2d(xi, wi, padding=1)
            torch.autograd.grad(out.square().sum(), (xi, wi))

    best, cpu = _interleaved({"folded_groups_P": lambda t: folded(),
                              "per_peer_plain": lambda t: per_peer()}, repeat)
    return {"layer": "conv3x3 16->16 at 32x32, padding 1, forward + backward", "seconds": best,
            "cpu_seconds": cpu,
            "ratio_folded_over_per_peer": best["folded_groups_P"] / best["per_peer_plain"],
            "ratio_folded_over_per_peer_cpu": cpu["folded_groups_P"] / cpu["per_peer_plain"]}


def bench_model(name: str, P: int, B: int, threads: int, repeat: int,
                thread_check: bool) -> dict:
    shape = SHAPES[name]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((P, B, *shape)).astype(np.float32)
    y = rng.integers(0, 10, (P, B))
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    top = topology.make("ring", P)
    models: dict[str, TorchModel] = {}
    algs = {}
    for mode in ("batched", "grouped:1", "auto"):
        model = make_torch_model(name, shape, 10)
        model.n_threads = threads
        model.mode = mode
        init = model.init(0)
        params = np.ascontiguousarray(np.broadcast_to(init, (P, model.dim)))
        models[mode] = model
        algs[mode] = algorithms.make(
            "dpsgd", model=model, comm=SimComm(top, n_threads=threads),
            optimizer=SGD(SGDConfig(lr=LR, momentum=MOMENTUM), params.shape, n_threads=threads),
            params=params)
    # auto's one-off measurement (every candidate, twice) on the first batch, plus its real pass
    t0 = time.perf_counter()
    models["auto"].loss_and_grad(algs["auto"].params.copy(), x, y)
    auto_seconds = time.perf_counter() - t0
    (choice,) = models["auto"].mode_report()["chosen"]
    X = algs["batched"].params.copy()
    cases: dict[str, Callable[[int], None]] = {
        f"decentlearn_{m}": (lambda t, a=algs[m]: a.round(lambda: (x, y), t)) for m in algs}
    cases["torch_compute_batched"] = lambda t: _torch_compute(models["batched"], X, xt, yt, P)
    cases["torch_compute_auto"] = lambda t: _torch_compute(models["auto"], X, xt, yt,
                                                           choice["group"])
    cases["per_peer_loop"] = _loop_case(models["batched"], models["batched"].init(0), top, P,
                                        xt, yt)
    best, cpu = _interleaved(cases, repeat)
    out = {
        "model": f"torch:{name}", "input_shape": list(shape), "dim": models["batched"].dim,
        "seconds": best, "cpu_seconds": cpu,
        "auto": {"chosen": choice["chosen"], "candidates_seconds": choice["seconds"],
                 "measurement_and_first_pass_seconds": auto_seconds},
        "ratio_per_peer_loop_over": {m: best["per_peer_loop"] / best[f"decentlearn_{m}"]
                                     for m in algs},
        "ratio_batched_over": {m: best["decentlearn_batched"] / best[f"decentlearn_{m}"]
                               for m in algs},
        "ratio_per_peer_loop_over_cpu": {m: cpu["per_peer_loop"] / cpu[f"decentlearn_{m}"]
                                         for m in algs},
        "decentlearn_overhead_fraction": {
            "batched": 1 - best["torch_compute_batched"] / best["decentlearn_batched"],
            "auto": 1 - best["torch_compute_auto"] / best["decentlearn_auto"]},
        "decentlearn_overhead_fraction_cpu": {
            "batched": 1 - cpu["torch_compute_batched"] / cpu["decentlearn_batched"],
            "auto": 1 - cpu["torch_compute_auto"] / cpu["decentlearn_auto"]},
    }
    if thread_check:  # CPU s / wall s of one round at `threads` and at 1 thread
        ratio = {}
        for n in sorted({threads, 1}, reverse=True):
            models["auto"].n_threads = n
            algs["auto"].comm.n_threads = n
            c0, t0 = _cpu_seconds(), time.perf_counter()
            algs["auto"].round(lambda: (x, y), 99)
            ratio[str(n)] = (_cpu_seconds() - c0) / (time.perf_counter() - t0)
        out["cpu_seconds_per_wall_second_auto"] = ratio
        models["auto"].n_threads = threads
        algs["auto"].comm.n_threads = threads
    return out


def _sync(device: str | None) -> None:
    if device is not None and device.startswith("cuda"):
        torch.cuda.synchronize()


def _device_runner(spec: str, P: int, B: int, S: int, threads: int, device: str | None,
                   cpu_mode: str):
    """A runner of D-PSGD on the ring over random (3, S, S) data, 10 classes, 64 samples per
    peer (sampling draws real minibatches), set up for ``device`` (None: the CPU host path)."""
    from decentlearn.data import Dataset
    from decentlearn.sim import RunConfig, Simulator
    rng = np.random.default_rng(0)
    n = 64 * P
    ds = Dataset(name="random", x_train=rng.standard_normal((n, 3, S, S), dtype=np.float32),
                 y_train=rng.integers(0, 10, n), x_test=np.zeros((10, 3, S, S), np.float32),
                 y_test=np.arange(10), n_classes=10, input_shape=(3, S, S))
    cfg = RunConfig(model=f"torch:{spec}", peers=P, topology="ring", algorithm="dpsgd",
                    partition="iid", batch_size=B, lr=LR, momentum=MOMENTUM, threads=threads,
                    rounds=1_000_000, eval_every=1_000_000, device=device,
                    torch_mode="batched" if device is not None else cpu_mode)
    return Simulator(cfg, dataset=ds)


def bench_device(args) -> dict:
    """Whole D-PSGD rounds on ``args.device`` against the CPU host path (module docstring)."""
    device = args.device
    cuda = device.startswith("cuda")
    all_cores = os.cpu_count() or 1
    cpu_threads = sorted({all_cores if t == "all" else int(t)
                          for t in args.cpu_threads.split(",")})
    report: dict = {
        "benchmark": "one whole D-PSGD round (ring, SGD momentum 0.9): sampling, forward and "
                     "backward of every peer, optimizer step, gossip, byte count",
        "model": f"torch:{args.model}", "batch": args.batch,
        "input_shape": [3, args.image_size, args.image_size], "device": device,
        "cpu_mode": args.cpu_mode, "repeat": args.repeat, "peers": {}}
    if cuda:
        from decentlearn.torch.device import cuda_report
        report["cuda"] = cuda_report()
        gpu = torch.cuda.get_device_name(torch.device(device))
        print(f"device {device}: {gpu}; torch {torch.__version__}, CUDA {torch.version.cuda}; "
              f"TF32 convolutions {torch.backends.cudnn.allow_tf32}, TF32 matmul "
              f"{torch.backends.cuda.matmul.allow_tf32} (PyTorch's defaults)")
    print(f"CPU: {cpu_info()['model_name']}, {all_cores} CPUs (load average "
          f"{os.getloadavg()[0]:.1f})")
    for P in [int(p) for p in str(args.peers).split(",")]:
        sims = {f"device {device}": _device_runner(args.model, P, args.batch, args.image_size,
                                                   all_cores, device, args.cpu_mode)}
        for t in cpu_threads:
            sims[f"cpu {t} threads"] = _device_runner(args.model, P, args.batch,
                                                      args.image_size, t, None, args.cpu_mode)
        dev_sim = sims[f"device {device}"]
        dim = dev_sim.model.dim

        def round_case(sim, dev):
            def run(t: int) -> None:
                sim.model.n_threads = sim.config.threads  # torch's pool is process-wide
                sim.comm.n_threads = sim.config.threads
                sim.algorithm.round(sim.sample, t)
                _sync(dev)
            return run

        cases = {k: round_case(sim, device if k.startswith("device") else None)
                 for k, sim in sims.items()}
        x, y = dev_sim.sample()
        X = dev_sim.algorithm.params.copy()
        G = np.empty_like(X)

        def fwd_bwd(t: int) -> None:
            dev_sim.model.n_threads = all_cores
            dev_sim.model.loss_and_grad(X, x, y, grad=G)
            _sync(device)

        def copies(t: int) -> None:  # the (P, dim) matrix to the device and back
            d = dev_sim.model._device_params(X)
            dev_sim.model._download("grad", d, G)

        cases["device forward/backward call"] = fwd_bwd
        cases["device matrix copy both ways"] = copies
        if cuda:  # the same copies without the pinned staging buffers
            def pageable(t: int) -> None:
                dev_sim.model.pin_memory = False
                try:
                    copies(t)
                finally:
                    dev_sim.model.pin_memory = True
            cases["device matrix copy both ways, pageable"] = pageable
        best, cpu_s = _interleaved(cases, args.repeat)
        if cuda:  # cuDNN's autotuner, non-deterministic kernels: process-wide, so measured last
            torch.use_deterministic_algorithms(False)
            torch.backends.cudnn.deterministic = False
            torch.backends.cudnn.benchmark = True
            fast = _interleaved({"device, autotuned (non-deterministic)":
                                 round_case(dev_sim, device)}, args.repeat)
            best.update(fast[0])
            cpu_s.update(fast[1])
            from decentlearn.torch.device import make_deterministic
            make_deterministic()
        dev_round = best[f"device {device}"]
        r = {"dim": dim, "seconds": best, "cpu_seconds": cpu_s,
             "ratio_cpu_round_over_device_round": {
                 k: best[k] / dev_round for k in sims if k.startswith("cpu")},
             "device_round_fraction": {
                 "forward_backward_call": best["device forward/backward call"] / dev_round,
                 "matrix_copy_both_ways": best["device matrix copy both ways"] / dev_round,
                 "matrix_copy_both_ways_pageable":
                     best.get("device matrix copy both ways, pageable", math.nan) / dev_round}}
        report["peers"][str(P)] = r
        print(f"{P} peers, torch:{args.model} (dim {dim:,}), batch {args.batch}, "
              f"{args.image_size}x{args.image_size}, best of {args.repeat}:")
        for k, v in best.items():
            extra = (f"  ({best[k] / dev_round:.1f}x the device round)"
                     if k.startswith("cpu") else "")
            print(f"  {k:<40} {1e3 * v:9.1f} ms{extra}")
        frac = r["device_round_fraction"]
        print(f"  of the device round: forward/backward call "
              f"{100 * frac['forward_backward_call']:.0f}%, matrix copy both ways "
              f"{100 * frac['matrix_copy_both_ways']:.1f}%")
        for sim in sims.values():
            sim.comm.close()
    report.update({
        "machine": {"cpu_count": all_cores, "platform": platform.platform(), "cpu": cpu_info(),
                    "load_average_1_5_15_after": os.getloadavg()},
        "versions": {"decentlearn": decentlearn.__version__, "torch": torch.__version__,
                     "cuda": torch.version.cuda, "numpy": np.__version__}})
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet20,cnn,mlp")
    ap.add_argument("--peers", default=None,
                    help="peers (with --device: a comma-separated list, default 16,64)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=None,
                    help="best of this many rounds (default 2; 3 with --device)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default=None,
                    help="cuda, cuda:N or cpu: measure whole rounds on that device against the "
                         "CPU (module docstring)")
    ap.add_argument("--model", default="resnet20:gn", help="with --device: the torch model")
    ap.add_argument("--image-size", type=int, default=32, help="with --device: S of 3xSxS")
    ap.add_argument("--cpu-threads", default="2,all",
                    help="with --device: CPU thread counts of the baseline rounds")
    ap.add_argument("--cpu-mode", default="grouped:1",
                    help="with --device: --torch-mode of the CPU baseline")
    ap.add_argument("--out", default=None,
                    help="JSON report (default benchmarks/results/torch.json, or "
                         "torch_device.json with --device)")
    args = ap.parse_args()
    results = Path(__file__).parent / "results"
    if args.device is not None:
        from decentlearn.torch.device import parse_device
        try:
            parse_device(args.device, "--device")
        except ValueError as e:
            ap.error(str(e))
        args.peers = args.peers or "16,64"
        args.repeat = args.repeat or 3
        report = bench_device(args)
        out = Path(args.out or results / "torch_device.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
        return
    args.peers = int(args.peers or 16)
    args.repeat = args.repeat or 2
    args.out = args.out or str(results / "torch.json")
    P, B = args.peers, args.batch
    names = args.models.split(",")
    for name in names:
        if name not in SHAPES:
            ap.error(f"--models: {name!r} is not one of {', '.join(SHAPES)}")
    load_before = os.getloadavg()
    report: dict = {
        "benchmark": "one D-PSGD round (ring, SGD momentum 0.9), TorchModel modes vs a per-peer "
                     "loop over nn.Module copies",
        "peers": P, "batch": B, "threads": args.threads, "repeat": args.repeat, "models": {}}
    print(f"{P} peers, batch {B}, {args.threads} threads, best of {args.repeat} "
          f"(load average {load_before[0]:.1f} on {os.cpu_count()} CPUs)")
    torch.set_num_threads(args.threads)
    if "resnet20" in names:
        report["conv_layer"] = conv = _conv_layer(P, B, args.repeat)
        print(f"  one conv layer: folded (groups=P) {conv['seconds']['folded_groups_P']:.3f} s "
              f"({conv['cpu_seconds']['folded_groups_P']:.3f} CPU s), {P} plain "
              f"{conv['seconds']['per_peer_plain']:.3f} s "
              f"({conv['cpu_seconds']['per_peer_plain']:.3f} CPU s)")
    for k, name in enumerate(names):
        r = bench_model(name, P, B, args.threads, args.repeat, thread_check=k == 0)
        report["models"][name] = r
        cand = {m: round(s, 3) for m, s in r["auto"]["candidates_seconds"].items()}
        print(f"torch:{name} (dim {r['dim']:,}): auto chose {r['auto']['chosen']} "
              f"(candidates {cand})")
        for case, s in r["seconds"].items():
            print(f"  {case:<24} {s:8.3f} s / round ({r['cpu_seconds'][case]:.3f} CPU s)")
        for key in ("ratio_per_peer_loop_over", "ratio_per_peer_loop_over_cpu"):
            print(f"  per-peer loop / decentlearn{' (CPU s)' if key.endswith('cpu') else ''}: "
                  + ", ".join(f"{m} {v:.2f}x" for m, v in r[key].items()))
        for key in ("decentlearn_overhead_fraction", "decentlearn_overhead_fraction_cpu"):
            print(f"  decentlearn overhead around torch"
                  f"{' (CPU s)' if key.endswith('cpu') else ''}: "
                  + ", ".join(f"{m} {100 * v:.1f}%" for m, v in r[key].items()))
        if "cpu_seconds_per_wall_second_auto" in r:
            print(f"  CPU s per wall s: {r['cpu_seconds_per_wall_second_auto']}")
    report.update({
        "openmp_runtimes": _openmp_runtimes(),
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                    "cpu": cpu_info(),
                    "load_average_1_5_15_before": load_before,
                    "load_average_1_5_15_after": os.getloadavg(),
                    "note": "shared machine, loaded by other jobs while this ran"},
        "versions": {"decentlearn": decentlearn.__version__, "torch": torch.__version__,
                     "numpy": np.__version__}})
    print(f"  OpenMP runtimes: {report['openmp_runtimes']}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
