"""Torch-model benchmark: one D-PSGD round (ring, momentum SGD) of ResNet-20 for 16 peers.

    python benchmarks/bench_torch.py [--peers 16] [--batch 32] [--repeat 3] [--threads 2]
                                     [--out benchmarks/results/torch.json]

Measured in one process, interleaved, best of ``repeat``:
- batched: decentlearn's D-PSGD round with ``TorchModel`` (all peers in one vmapped
  forward/backward on rows of the shared (P, dim) array, then decentlearn's C optimizer and gossip);
- torch compute: the same vmapped forward + backward alone, on tensors prepared beforehand: the
  overhead of decentlearn around torch is (batched - torch compute) / batched (views, checks, the
  gradient copy into the algorithm's buffer, optimizer, gossip, bookkeeping);
- per-peer loop: how decentralizepy-style simulators run it, 16 ``nn.Module`` copies, each
  forward/backward and ``torch.optim.SGD`` step in turn, then gossip as a loop over peers and
  their state tensors (new = sum_j W_ij x_j). The ratio is loop / batched.
Thread discipline: process CPU seconds / wall seconds of batched rounds at each thread count
(above the thread count would mean oversubscription) and the OpenMP runtimes loaded.
Inputs are random 3x32x32 images (CIFAR's shape); the absolute numbers move with the machine's
load (the JSON records the load average), the ratios much less.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch

import decentlearn
from decentlearn import algorithms, topology
from decentlearn.comm import SimComm
from decentlearn.optim import SGD, SGDConfig
from decentlearn.torch import make_torch_model


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def _openmp_runtimes() -> list[str]:
    try:
        with open("/proc/self/maps") as f:
            return sorted({ln.split()[-1] for ln in f if "gomp" in ln or "iomp" in ln})
    except OSError:
        return []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peers", type=int, default=16)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", default="resnet20")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "torch.json"))
    args = ap.parse_args()
    P, B = args.peers, args.batch

    model = make_torch_model(args.model, (3, 32, 32), 10)
    model.n_threads = args.threads
    rng = np.random.default_rng(0)
    x = rng.standard_normal((P, B, 3, 32, 32)).astype(np.float32)
    y = rng.integers(0, 10, (P, B))
    init = model.init(0)
    top = topology.make("ring", P)
    lr, momentum = 0.05, 0.9

    # --- batched: decentlearn's D-PSGD round -------------------------------------------------
    params = np.ascontiguousarray(np.broadcast_to(init, (P, model.dim)))
    alg = algorithms.make("dpsgd", model=model, comm=SimComm(top, n_threads=args.threads),
                          optimizer=SGD(SGDConfig(lr=lr, momentum=momentum), params.shape,
                                        n_threads=args.threads),
                          params=params)

    def batched_round(t: int) -> None:
        alg.round(lambda: (x, y), t)

    # --- torch compute alone ---------------------------------------------------------------
    X = alg.params.copy()

    def torch_compute() -> None:
        model.module.train()
        p, b, leaves = model._views(X, 0)
        losses = model._loss(model._logits(p, b, torch.from_numpy(x), False),
                             torch.from_numpy(y))
        torch.autograd.grad(losses.sum(), leaves)

    # --- per-peer loop over nn.Module copies ------------------------------------------------
    model.load_row(init)
    mods = [copy.deepcopy(model.module).train() for _ in range(P)]
    opts = [torch.optim.SGD(m.parameters(), lr=lr, momentum=momentum) for m in mods]
    indptr, indices, data = top.csr(0)
    W = np.zeros((P, P))
    for i in range(P):
        W[i, indices[indptr[i]:indptr[i + 1]]] = data[indptr[i]:indptr[i + 1]]
    neighbours = [[(j, float(W[i, j])) for j in np.flatnonzero(W[i])] for i in range(P)]
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)

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

    cases = {"batched": batched_round, "torch_compute": lambda t: torch_compute(),
             "per_peer_loop": loop_round}
    for fn in cases.values():  # warm-up (allocations, kernels' first calls)
        fn(0)
    best = {k: float("inf") for k in cases}
    cpu_ratio = {}
    for r in range(args.repeat):
        for name, fn in cases.items():
            c0, t0 = _cpu_seconds(), time.perf_counter()
            fn(r + 1)
            wall = time.perf_counter() - t0
            best[name] = min(best[name], wall)
            if name == "batched":
                cpu_ratio[args.threads] = max(cpu_ratio.get(args.threads, 0.0),
                                              (_cpu_seconds() - c0) / wall)
    # thread discipline at one thread as well
    model.n_threads = 1
    alg.comm.n_threads = 1
    c0, t0 = _cpu_seconds(), time.perf_counter()
    batched_round(99)
    cpu_ratio[1] = (_cpu_seconds() - c0) / (time.perf_counter() - t0)
    model.n_threads = args.threads

    overhead = (best["batched"] - best["torch_compute"]) / best["batched"]
    report = {
        "benchmark": "one D-PSGD round (ring, SGD momentum 0.9)",
        "model": f"torch:{args.model}", "dim": model.dim, "peers": P, "batch": B,
        "threads": args.threads, "repeat": args.repeat,
        "seconds": best,
        "ratio_per_peer_loop_over_batched": best["per_peer_loop"] / best["batched"],
        "decentlearn_overhead_fraction": overhead,
        "cpu_seconds_per_wall_second": {str(k): v for k, v in cpu_ratio.items()},
        "openmp_runtimes": _openmp_runtimes(),
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                    "load_average_1_5_15": os.getloadavg(),
                    "note": "shared machine, loaded by other jobs while this ran"},
        "versions": {"decentlearn": decentlearn.__version__, "torch": torch.__version__,
                     "numpy": np.__version__},
    }
    print(f"{report['model']}, {P} peers, batch {B}, {args.threads} threads, best of "
          f"{args.repeat} (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    for k, v in best.items():
        print(f"  {k:<15} {v:8.3f} s / round")
    print(f"  per-peer loop / batched: {report['ratio_per_peer_loop_over_batched']:.2f}x")
    print(f"  decentlearn overhead around torch: {100 * overhead:.1f}% of the round")
    print(f"  CPU s per wall s: {report['cpu_seconds_per_wall_second']}; OpenMP runtimes: "
          f"{report['openmp_runtimes']}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
