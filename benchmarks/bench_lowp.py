"""int8 training round benchmark: D-PSGD ring rounds with precision="int8" against "fp32", in one
process, for the digits MLP (256 peers, 64-128-10) and CNN (16 peers) at batch 32, and, when
Fashion-MNIST is installed (``apt-get install dataset-fashion-mnist``), an MLP of paper scale
(784-512-512-10, 16 peers, batch 128) and the README's CNN (``cnn:gn``, 64 peers, batch 32);
momentum 0.9, a ring.

    python benchmarks/bench_lowp.py [--threads 1] [--isa amx,avx512vnni] [--cpu-time]
                                    [--repeat 30] [--out FILE]

The two precisions run round-robin (one fp32 round, one int8 round, ...) so that load on a shared
machine hits both alike; per precision the best ``loss_and_grad`` and the best whole round
(sampling, loss_and_grad, SGD step, gossip) are reported, and their ratio (fp32 time / int8 time:
> 1 means int8 is faster). ``--isa`` runs every case on each of the named ISA paths in turn
(default: the active one), e.g. the AMX tiles against AVX-512 VNNI on a CPU that has both.
``--cpu-time`` times with this thread's CPU clock (needs --threads 1: the cycles the thread got,
the fair figure on a loaded machine). numpy's BLAS is limited to the same thread count with
threadpoolctl. Writes JSON (default benchmarks/results/lowp.json).
"""

import argparse
import json
import time
from pathlib import Path

import decentlearn  # noqa: F401  (before numpy: its OpenBLAS and OpenMP wait defaults)
from threadpoolctl import threadpool_info, threadpool_limits

from decentlearn import config
from decentlearn.data import load_dataset
from decentlearn.experiments.bench import cpu_info
from decentlearn.ops import isa as isa_paths
from decentlearn.sim import RunConfig, Simulator

# name: (model, peers, dataset, batch size)
CASES = {"mlp_256_peers_digits": ("mlp", 256, "digits", 32),
         "cnn_16_peers_digits": ("cnn", 16, "digits", 32),
         "mlp_784-512-512-10_16_peers_fashion_b128": ("mlp:512,512", 16, "fashion-mnist", 128),
         "readme_cnn-gn_64_peers_fashion": ("cnn:gn", 64, "fashion-mnist", 32)}


def available(dataset: str) -> bool:
    try:
        load_dataset(dataset)
    except FileNotFoundError:
        return False
    return True


def run_case(model: str, peers: int, dataset: str, batch: int, threads: int, repeat: int,
             clock) -> dict:
    cfg = RunConfig(dataset=dataset, peers=peers, topology="ring", partition="iid", model=model,
                    batch_size=batch, momentum=0.9, eval_every=10**6, rounds=10**6,
                    threads=threads)
    sims = {p: Simulator(cfg.replace(precision=p)) for p in ("fp32", "int8")}
    best = {p: {"loss_and_grad_s": float("inf"), "round_s": float("inf")} for p in sims}
    for t in range(repeat + 3):
        for p, sim in sims.items():
            alg = sim.algorithm
            x, y = sim.sample()
            t0 = clock()
            sim.model.loss_and_grad(alg.params, x, y, grad=alg._grad)
            t1 = clock()
            alg.round(sim.sample, t)
            t2 = clock()
            if t >= 3:  # warm-up rounds excluded
                best[p]["loss_and_grad_s"] = min(best[p]["loss_and_grad_s"], t1 - t0)
                best[p]["round_s"] = min(best[p]["round_s"], t2 - t1)
    return {**best,
            "int8_speed_vs_fp32_round": best["fp32"]["round_s"] / best["int8"]["round_s"],
            "int8_speed_vs_fp32_loss_and_grad":
                best["fp32"]["loss_and_grad_s"] / best["int8"]["loss_and_grad_s"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--cpu-time", action="store_true", help="this thread's CPU clock (--threads 1)")
    p.add_argument("--isa", default=None,
                   help="comma-separated ISA paths to run each case on (default: the active one)")
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "lowp.json"))
    args = p.parse_args()
    if args.cpu_time and args.threads != 1:
        p.error("--cpu-time needs --threads 1 (it counts one thread's cycles)")
    paths = args.isa.split(",") if args.isa else [config()["isa"]]
    for path in paths:
        if path not in isa_paths.supported_isas():
            p.error(f"--isa: {path!r} is not a supported path here "
                    f"({', '.join(isa_paths.supported_isas())})")
    clock = time.thread_time if args.cpu_time else time.perf_counter
    blas = [{k: i.get(k) for k in ("internal_api", "version", "architecture")}
            for i in threadpool_info() if i.get("user_api") == "blas"]
    cpu = cpu_info()["model_name"]
    print(f"int8 vs fp32 rounds: CPU {cpu}, ISA {', '.join(paths)}, {args.threads} thread(s), "
          f"{'thread CPU time' if args.cpu_time else 'wall time'}, best of {args.repeat}")
    report = {"cpu": cpu, "isa": paths[0] if len(paths) == 1 else paths, "threads": args.threads,
              "clock": "thread_time" if args.cpu_time else "perf_counter", "repeat": args.repeat,
              "numpy_blas": blas, "cases": {}}
    with threadpool_limits(limits=args.threads, user_api="blas"):
        for name, (model, peers, dataset, batch) in CASES.items():
            if not available(dataset):
                print(f"  {name}: skipped, data set {dataset!r} not installed")
                continue
            for path in paths:
                with isa_paths.using_isa(path):
                    r = run_case(model, peers, dataset, batch, args.threads, args.repeat, clock)
                key = name if len(paths) == 1 else f"{name}@{path}"
                report["cases"][key] = r
                print(f"  {key}: round fp32 {1e3 * r['fp32']['round_s']:.2f} ms, int8 "
                      f"{1e3 * r['int8']['round_s']:.2f} ms -> int8 "
                      f"{r['int8_speed_vs_fp32_round']:.2f}x fp32 speed; loss_and_grad "
                      f"{1e3 * r['fp32']['loss_and_grad_s']:.2f} / "
                      f"{1e3 * r['int8']['loss_and_grad_s']:.2f} ms -> "
                      f"{r['int8_speed_vs_fp32_loss_and_grad']:.2f}x")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
