"""The serial part of a round: time spent outside the C kernels, and the speed-up it allows.

    python benchmarks/bench_serial.py [--threads 1] [--cases mlp-256,mlp-1024,cnn-64]
                                      [--rounds 200] [--repeat 3] [--parts] [--out FILE.json]

Every ``decentlearn._core`` function the ops and layer modules call is wrapped with a clock, so a
round splits into its time inside the C kernels (which run on the threads) and the time outside
them: Python, NumPy steps between the kernels and the calls' own overhead, all on one thread at
any thread count. With a fraction ``s`` of one thread's round outside the kernels, Amdahl's law
caps the speed-up at ``T`` threads at ``1 / (s + (1 - s) / T)`` even if every kernel scaled
perfectly; issue 24 asks for 8x to 12x at 16 threads, which needs ``s`` under about 4% (10x) or
2.5% (12x). The cases are bench_threads.py's (digits, D-PSGD ring, batch 32, momentum SGD); the
figures are the best of ``repeat`` blocks of ``rounds`` rounds. The wrappers add about 0.3 us a
kernel call (10 to 40 calls a round). ``--parts`` also splits the time outside the kernels by
where it is spent: each layer's forward and backward pass, the sampling, the optimizer step, the
gossip, and the rest of the round (the model's own steps between its layers included).
"""

from __future__ import annotations

import argparse
import collections
import importlib
import json
import pkgutil
import time
import warnings
from pathlib import Path

import decentlearn  # noqa: F401  (before numpy: its OpenBLAS and OpenMP wait defaults)
from threadpoolctl import threadpool_limits

from bench_threads import BASE, CASES, _cpu
from decentlearn.sim import RunConfig, Simulator

_inside = [0.0, 0]  # seconds in the kernels, calls
_outside: collections.Counter = collections.Counter()  # seconds outside the kernels, by part


def _wrap(fn):
    clock = time.perf_counter

    def wrapper(*args, **kwargs):
        t0 = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            _inside[0] += clock() - t0
            _inside[1] += 1
    return wrapper


def wrap_kernels() -> int:
    """Wraps every ``decentlearn._core`` builtin bound in the ops, nn and optimizer modules;
    returns how many names were wrapped."""
    import decentlearn.ops
    names = ["decentlearn.ops." + m.name for m in pkgutil.iter_modules(decentlearn.ops.__path__)]
    names += ["decentlearn.nn.layers", "decentlearn.nn.model", "decentlearn.nn.lowp"]
    count = 0
    for name in names:
        mod = importlib.import_module(name)
        for key, value in list(vars(mod).items()):
            if (type(value).__name__ == "builtin_function_or_method"
                    and getattr(value, "__module__", "") == "decentlearn._core"):
                setattr(mod, key, _wrap(value))
                count += 1
    return count


def _part(fn, key):
    """``fn`` whose time outside the kernels is added to ``_outside[key]``."""
    clock = time.perf_counter

    def wrapper(*args, **kwargs):
        k0, t0 = _inside[0], clock()
        try:
            return fn(*args, **kwargs)
        finally:
            _outside[key] += clock() - t0 - (_inside[0] - k0)
    return wrapper


def measure(case: dict, threads: int, rounds: int, repeat: int, parts: bool = False) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sim = Simulator(RunConfig(**{**BASE, **case, "threads": threads}))
    alg = sim.algorithm
    sample = sim.sample
    if parts:  # the layers are frozen dataclasses: their methods are replaced on the instance
        for i, layer in enumerate(alg.model._layers):
            for name in ("forward", "backward"):
                object.__setattr__(layer, name, _part(getattr(layer, name),
                                                      f"L{i} {type(layer).__name__}.{name}"))
        sample = _part(sim.sample, "sample")
        alg.apply = _part(alg.apply, "optimizer")
        alg.comm.mix = _part(alg.comm.mix, "gossip")
    with threadpool_limits(limits=threads, user_api="blas"):
        for t in range(5):
            alg.round(sample, t)
        best = None
        for r in range(repeat):
            _inside[:] = [0.0, 0]
            _outside.clear()
            t0 = time.perf_counter()
            for t in range(rounds):
                alg.round(sample, 5 + r * rounds + t)
            wall = (time.perf_counter() - t0) / rounds
            if best is None or wall < best[0]:
                best = (wall, _inside[0] / rounds, _inside[1] / rounds,
                        {k: v / rounds * 1e3 for k, v in _outside.items()})
    wall, inside, calls, split = best
    out = {"round_ms": wall * 1e3, "kernels_ms": inside * 1e3,
           "outside_ms": (wall - inside) * 1e3, "outside_share": (wall - inside) / wall,
           "kernel_calls": calls}
    if parts:
        split["rest of the round"] = out["outside_ms"] - sum(split.values())
        out["outside_by_part_ms"] = dict(sorted(split.items(), key=lambda kv: -kv[1]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cases", default="mlp-256,mlp-1024,cnn-64")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--parts", action="store_true",
                    help="split the time outside the kernels by layer pass and phase")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    wrapped = wrap_kernels()
    print(f"CPU {_cpu()}, {args.threads} thread(s), ISA path "
          f"{decentlearn.ops.active_isa()}; {wrapped} kernel entry points wrapped")
    results = {}
    for name in args.cases.split(","):
        r = measure(CASES[name], args.threads, args.rounds, args.repeat, args.parts)
        s = r["outside_share"] if args.threads == 1 else None
        bound = (f"; at 16 threads at most {1 / (s + (1 - s) / 16):.1f}x" if s is not None
                 else "")
        print(f"{name:10s} round {r['round_ms']:8.3f} ms: kernels {r['kernels_ms']:8.3f} ms, "
              f"outside {r['outside_ms']:6.3f} ms ({r['outside_share']:.1%}), "
              f"{r['kernel_calls']:.0f} kernel calls{bound}")
        for part, ms in r.get("outside_by_part_ms", {}).items():
            print(f"    {part:28s} {ms:7.3f} ms outside the kernels")
        results[name] = r
    if args.out:
        args.out.write_text(json.dumps({"benchmark": "serial", "cpu": _cpu(),
                                        "threads": args.threads, "results": results}, indent=1))


if __name__ == "__main__":
    main()
