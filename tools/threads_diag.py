"""Where results first depend on the thread count, if they do: bench_threads.py's D-PSGD rounds
run at each thread count (and on each ISA path) with every intermediate recorded — the sampled
batch, each layer's forward output and backward gradients, the loss and gradient, the gossip and
the optimizer step — and each run is compared, in call order, with the first one (1 thread).

    python tools/threads_diag.py [--threads 1,1,2,4,16] [--cases mlp-256,cnn-64,cnn-4] [--rounds 3]
                                 [--isas amx,avx512,avx2,generic] [--precision int8]

Prints, per ISA path, case and thread count, "same" or the first intermediate that differs: its
label (round, phase, layer), how many elements differ, the largest difference and the first
differing element as an index. A repeated thread count checks that a run is deterministic at all.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import warnings
from pathlib import Path

import decentlearn  # noqa: F401  (before numpy: its OpenBLAS and OpenMP wait defaults)
import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from bench_threads import BASE, CASES  # noqa: E402

from decentlearn.ops.isa import supported_isas, using_isa  # noqa: E402
from decentlearn.sim import RunConfig, Simulator  # noqa: E402


def case_of(name: str) -> dict:
    """bench_threads.py's case, or MODEL-PEERS for any other peer count (e.g. cnn-8: fewer peers
    than threads, where the layers split each peer's rows between threads)."""
    if name in CASES:
        return CASES[name]
    model, _, peers = name.rpartition("-")
    if not model or not peers.isdigit():
        raise SystemExit(f"--cases: {name!r} is neither {sorted(CASES)} nor MODEL-PEERS")
    return dict(peers=int(peers), model=model)


def record(case: dict, threads: int, rounds: int, keep: bool) -> list[tuple[str, str, object]]:
    """[(label, digest, copy of the array or None)] in call order over ``rounds`` rounds."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sim = Simulator(RunConfig(**{**BASE, **case, "threads": threads}))
    alg, model = sim.algorithm, sim.algorithm.model
    log: list[tuple[str, str, object]] = []
    where = {"round": 0}

    def note(label: str, obj) -> None:
        arrays = obj if isinstance(obj, (tuple, list)) else (obj,)
        for j, a in enumerate(arrays):
            if not isinstance(a, np.ndarray):
                continue
            a = np.ascontiguousarray(a)
            digest = hashlib.blake2b(a.tobytes(), digest_size=8).hexdigest()
            log.append((f"r{where['round']} {label}[{j}]", digest, a.copy() if keep else None))

    def wrap(obj, name, label, args_to_note=()):
        fn = getattr(obj, name)

        def wrapper(*args, **kwargs):
            out = fn(*args, **kwargs)
            note(label, out)
            for i in args_to_note:  # arrays the call wrote into (the layers' gradient views)
                note(f"{label} arg{i}", args[i])
            return out
        object.__setattr__(obj, name, wrapper)  # the layers are frozen dataclasses

    for i, layer in enumerate(model._layers):
        kind = type(layer).__name__
        wrap(layer, "forward", f"L{i} {kind}.forward")
        wrap(layer, "backward", f"L{i} {kind}.backward", args_to_note=(1,))
    sample = sim.sample

    def sampled():
        out = sample()
        note("sample", out)
        return out
    wrap(alg, "gradient", "gradient")
    wrap(alg.comm, "mix", "mix")
    apply = alg.apply

    def applied(params, grad):
        out = apply(params, grad)
        note("apply (params after)", params)
        return out
    alg.apply = applied
    with threadpool_limits(limits=threads, user_api="blas"):
        for t in range(rounds):
            where["round"] = t
            alg.round(sampled, t)
    note("params", alg.params)
    return log


def compare(ref, run) -> str:
    for (label, d0, a0), (label1, d1, _a1) in zip(ref, run):
        if label != label1:
            return f"call order differs: {label} vs {label1}"
        if d0 != d1:
            return f"first difference at {label}" + (describe(a0, _a1) if _a1 is not None else "")
    if len(ref) != len(run):
        return f"{len(ref)} vs {len(run)} intermediates"
    return "same"


def describe(a, b) -> str:
    if a.shape != b.shape or a.dtype != b.dtype:
        return f": {a.shape} {a.dtype} vs {b.shape} {b.dtype}"
    diff = a != b
    if a.dtype.kind == "f":
        diff &= ~(np.isnan(a) & np.isnan(b))
    idx = np.argwhere(diff)
    big = np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))[diff]) if idx.size else 0
    return (f": shape {a.shape} {a.dtype}, {len(idx)} elements differ, max |diff| {big:.3g}, "
            f"first at {tuple(int(v) for v in idx[0]) if len(idx) else None}, "
            f"rows differing {np.unique(idx[:, 0])[:12].tolist() if len(idx) else []}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", default="1,1,2,4,16")
    p.add_argument("--cases", default="mlp-256,cnn-64")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--isas", default=",".join(reversed(supported_isas())))
    p.add_argument("--precision", default="fp32", choices=["fp32", "int8"])
    args = p.parse_args()
    counts = [int(x) for x in args.threads.split(",")]
    for isa in args.isas.split(","):
        if isa not in supported_isas():
            print(f"{isa}: not supported here")
            continue
        with using_isa(isa):
            for name in args.cases.split(","):
                case = {**case_of(name), "precision": args.precision}
                ref = record(case, counts[0], args.rounds, keep=True)
                print(f"{isa} {name}: {len(ref)} intermediates over {args.rounds} rounds",
                      flush=True)
                for n in counts[1:]:
                    run = record(case, n, args.rounds, keep=True)
                    print(f"  {counts[0]}t vs {n}t: {compare(ref, run)}", flush=True)


if __name__ == "__main__":
    main()
