"""Round-time benchmark of the simulator: how close a round is to its FLOP cost, how it scales with
threads, what int8 and the CNN cost, and the evaluation's share of a run, in one process.

    python benchmarks/bench_round.py [--quick] [--repeat 5] [--out benchmarks/results/round.json]

Cases (each a D-PSGD ring round: sampling, loss_and_grad, SGD step with momentum, gossip):
- mlp: 256 peers, digits (8x8), "mlp" (64-128-10), batch 32, at 1 and 2 threads (BLAS limited to
  the same count with threadpoolctl), and int8 at 2 threads;
- cnn: 16 peers, digits, "cnn" at 2 threads, fp32 and int8;
- cnn-fashion: the README's example (64 peers, Fashion-MNIST 28x28, "cnn:gn", small-world) when
  the data set is installed: seconds per round and the projected 500-round run.
FLOP time: 6 x peers x batch x parameters (MLP; the CNN's multiply-adds come from
cocofl.cost_summary) at numpy's own sgemm rate with 2 BLAS threads (the round's thread count),
measured here on a 1024^3 product. Evaluation share: short runs with the default
evaluation settings, summary["evaluation"]["fraction_of_run"]. Every time is the best of
``repeat`` blocks of rounds; ratios are taken within this process, so a loaded machine moves the
absolute numbers more than the ratios. Writes JSON to benchmarks/results/round.json.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import decentlearn  # noqa: F401  (before numpy: its OpenBLAS and OpenMP wait defaults)
import numpy as np
import scipy.sparse
from threadpoolctl import threadpool_info, threadpool_limits

import decentlearn
from decentlearn.nn import cocofl
from decentlearn.experiments.bench import cpu_info
from decentlearn.sim import RunConfig, Simulator


def sgemm_rate(threads: int | None, n: int = 1024, repeat: int = 5) -> float:
    """numpy float32 matmul FLOP/s on n x n x n (best of repeat), BLAS limited to ``threads``."""
    a = np.random.default_rng(0).random((n, n), dtype=np.float32)
    c = np.empty_like(a)
    with threadpool_limits(limits=threads, user_api="blas"):
        np.matmul(a, a, out=c)
        best = min(_timed(lambda: np.matmul(a, a, out=c)) for _ in range(repeat))
    return 2.0 * n**3 / best


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def round_time(config: RunConfig, threads: int, rounds: int, repeat: int) -> dict:
    """Best seconds per round (of ``repeat`` blocks of ``rounds``) and its split."""
    sim = Simulator(config.replace(threads=threads))
    alg, model = sim.algorithm, sim.model
    with threadpool_limits(limits=threads, user_api="blas"):
        for t in range(3):
            alg.round(sim.sample, t)
        best = min(_timed(lambda: [alg.round(sim.sample, t) for t in range(rounds)])
                   for _ in range(repeat)) / rounds
        x, y = sim.sample()
        grad = alg._grad
        parts = {
            "sample": min(_timed(sim.sample) for _ in range(repeat * 3)),
            "loss_and_grad": min(_timed(lambda: model.loss_and_grad(alg.params, x, y, grad=grad))
                                 for _ in range(repeat * 3)),
            "optimizer": min(_timed(lambda: alg.optimizer.step(alg.params, grad))
                             for _ in range(repeat * 3)),
        }

        def mix():
            alg.params = alg.comm.mix(alg.params, 0)

        parts["gossip"] = min(_timed(mix) for _ in range(repeat * 3))
    cost = cocofl.cost_summary(model, np.zeros(config.peers, dtype=np.int64), config.batch_size,
                               config.local_steps, config.momentum != 0)
    return {"seconds_per_round": best, "split_seconds": parts, "n_params": model.dim,
            "compute": cost}


def torch_round_time(config: RunConfig, threads: int, rounds: int, repeat: int) -> dict | None:
    """The same D-PSGD MLP round written batched in torch (the issue's comparison): minibatch
    gather, bmm forward, manual backward, momentum SGD on one (P, D) tensor, sparse W @ X gossip.
    None when torch is not installed."""
    try:
        import torch
    except ImportError:
        return None
    sim = Simulator(config.replace(threads=threads))
    model, alg = sim.model, sim.algorithm
    layout = {name: (sl, shape) for name, sl, shape in model.layout()}
    if len(layout) != 4:
        return None  # the comparison is written for a one-hidden-layer MLP
    torch.set_num_threads(threads)
    P, B = config.peers, config.batch_size
    X = torch.from_numpy(sim.dataset.x_train.reshape(len(sim.dataset.y_train), -1)
                         .astype(np.float32))
    Y = torch.from_numpy(sim.dataset.y_train.astype(np.int64))
    params = torch.from_numpy(alg.params.copy())
    buf, grad = torch.zeros_like(params), torch.zeros_like(params)
    (w1s, w1shape), (b1s, _), (w2s, w2shape), (b2s, _) = layout.values()
    w = sim.topology.mixing_matrix()
    coo = scipy.sparse.coo_array(w)
    with warnings.catch_warnings():  # torch's notes on sparse invariant checks / beta CSR
        warnings.simplefilter("ignore")
        W = torch.sparse_coo_tensor(np.vstack([coo.row, coo.col]), coo.data.astype(np.float32),
                                    (P, P)).coalesce()
    gen = torch.Generator().manual_seed(0)
    n = X.shape[0]

    def one_round():
        nonlocal params
        idx = torch.randint(0, n, (P, B), generator=gen)
        x, y = X[idx], Y[idx]
        W1 = params[:, w1s].view(P, *w1shape)
        W2 = params[:, w2s].view(P, *w2shape)
        h = torch.relu(torch.baddbmm(params[:, b1s].unsqueeze(1), x, W1))
        z = torch.baddbmm(params[:, b2s].unsqueeze(1), h, W2)
        p = torch.softmax(z, dim=2)
        p.scatter_add_(2, y.unsqueeze(2), torch.full((P, B, 1), -1.0))
        p /= B
        torch.bmm(h.transpose(1, 2), p, out=grad[:, w2s].view(P, *w2shape))
        grad[:, b2s] = p.sum(1)
        dh = torch.bmm(p, W2.transpose(1, 2)).mul_(h > 0)
        torch.bmm(x.transpose(1, 2), dh, out=grad[:, w1s].view(P, *w1shape))
        grad[:, b1s] = dh.sum(1)
        buf.mul_(config.momentum).add_(grad)
        params.add_(buf, alpha=-config.lr)
        params = torch.sparse.mm(W, params)

    with torch.no_grad():
        for _ in range(3):
            one_round()
        best = min(_timed(lambda: [one_round() for _ in range(rounds)])
                   for _ in range(repeat)) / rounds
    return {"seconds_per_round": best, "torch": torch.__version__, "threads": threads}


def round_flops(config: RunConfig, n_params: int) -> float:
    """6 x peers x batch x parameters x local steps (the issue's definition)."""
    return 6.0 * config.peers * config.batch_size * n_params * config.local_steps


def eval_share(config: RunConfig, threads: int) -> dict:
    sim = Simulator(config.replace(threads=threads))
    with threadpool_limits(limits=threads, user_api="blas"):
        res = sim.run()
    ev = res.summary["evaluation"]
    return {"rounds": config.rounds, "eval_every": config.eval_every,
            "run_seconds": res.history[-1]["wall_seconds"], **ev}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="fewer rounds (a smoke test)")
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "round.json"))
    args = p.parse_args()
    repeat, rounds = (2, 3) if args.quick else (args.repeat, 10)

    blas = [{k: i.get(k) for k in ("internal_api", "version", "num_threads", "architecture")}
            for i in threadpool_info() if i.get("user_api") == "blas"]
    rate_default = sgemm_rate(None)
    rate_2 = sgemm_rate(2)  # the FLOP time of a 2-thread round is taken at 2-thread sgemm
    rate_1 = sgemm_rate(1)
    out: dict = {"cpu": cpu_info()["model_name"], "config": decentlearn.config(),
                 "numpy_blas": blas,
                 "sgemm_gflops_default_threads": rate_default / 1e9,
                 "sgemm_gflops_2_threads": rate_2 / 1e9,
                 "sgemm_gflops_1_thread": rate_1 / 1e9, "cases": {}}
    print(f"CPU: {out['cpu']}; numpy BLAS {blas}")
    print(f"numpy sgemm 1024^3: {rate_default / 1e9:.1f} GFLOP/s (default threads), "
          f"{rate_2 / 1e9:.1f} GFLOP/s (2 threads), "
          f"{rate_1 / 1e9:.1f} GFLOP/s (1 thread)")

    mlp = RunConfig(dataset="digits", peers=256, topology="ring", partition="iid", model="mlp",
                    batch_size=32, momentum=0.9, eval_every=10**6, rounds=10**6)
    r1 = round_time(mlp, 1, rounds, repeat)
    r2 = round_time(mlp, 2, rounds, repeat)
    r8 = round_time(mlp.replace(precision="int8"), 2, rounds, repeat)
    flop = round_flops(mlp, r2["n_params"])
    flop_s = flop / rate_2
    out["cases"]["mlp_256_peers"] = {
        "threads_1": r1, "threads_2": r2, "int8_threads_2": r8, "round_flops": flop,
        "flop_seconds_at_numpy_sgemm": flop_s,
        "ratio_to_flop_time_threads_2": r2["seconds_per_round"] / flop_s,
        "ratio_to_flop_time_threads_1_vs_1_thread_sgemm": r1["seconds_per_round"] / (flop / rate_1),
        "speedup_2_threads": r1["seconds_per_round"] / r2["seconds_per_round"],
        "int8_speed_vs_fp32": r2["seconds_per_round"] / r8["seconds_per_round"],
    }
    m = out["cases"]["mlp_256_peers"]
    tr = torch_round_time(mlp, 2, rounds, repeat)
    if tr is not None:
        m["torch_batched_threads_2"] = tr
        m["speed_vs_torch_batched"] = tr["seconds_per_round"] / r2["seconds_per_round"]
        print(f"batched torch MLP round (2 threads): {1e3 * tr['seconds_per_round']:.2f} ms; "
              f"decentlearn is {m['speed_vs_torch_batched']:.2f}x its speed")
    print(f"MLP 256 peers: {1e3 * r1['seconds_per_round']:.2f} ms (1 thread), "
          f"{1e3 * r2['seconds_per_round']:.2f} ms (2 threads) = "
          f"{m['ratio_to_flop_time_threads_2']:.2f}x its FLOP time ({1e3 * flop_s:.2f} ms); "
          f"2 threads {m['speedup_2_threads']:.2f}x 1 thread; int8 "
          f"{1e3 * r8['seconds_per_round']:.2f} ms = {m['int8_speed_vs_fp32']:.2f}x fp32 speed")

    cnn = RunConfig(dataset="digits", peers=16, topology="ring", partition="iid", model="cnn",
                    batch_size=32, momentum=0.9, eval_every=10**6, rounds=10**6)
    c32 = round_time(cnn, 2, rounds, repeat)
    c8 = round_time(cnn.replace(precision="int8"), 2, rounds, repeat)
    out["cases"]["cnn_16_peers_digits"] = {
        "fp32_threads_2": c32, "int8_threads_2": c8,
        "int8_speed_vs_fp32": c32["seconds_per_round"] / c8["seconds_per_round"]}
    print(f"CNN 16 peers (digits): fp32 {1e3 * c32['seconds_per_round']:.2f} ms, int8 "
          f"{1e3 * c8['seconds_per_round']:.2f} ms per round")

    share = eval_share(mlp.replace(rounds=40 if args.quick else 100, eval_every=10), 2)
    out["cases"]["mlp_256_peers"]["evaluation"] = share
    print(f"MLP evaluation: {100 * share['fraction_of_run']:.1f}% of a {share['rounds']}-round "
          f"run (peers on {share['peer_samples']} samples, average model on "
          f"{share['avg_model_samples']}, {share['avg_model_samples_final']} at the end)")

    try:
        fashion = RunConfig(dataset="fashion-mnist", peers=64, topology="small-world:4:0.1",
                            partition="shards:2", model="cnn:gn", lr=0.05, rounds=500,
                            eval_every=10)
        t0 = time.perf_counter()
        sim = Simulator(fashion.replace(threads=2))
        setup = time.perf_counter() - t0
        alg = sim.algorithm
        with threadpool_limits(limits=2, user_api="blas"):
            alg.round(sim.sample, 0)
            n = 2 if args.quick else 4
            train = min(_timed(lambda: alg.round(sim.sample, 1)) for _ in range(n))
            inter = _timed(sim.evaluate)
            final = _timed(lambda: sim.evaluate(final=True))
        # 500 rounds: 49 intermediate evaluations and the final one.
        evals = 49 * inter + final
        projected = 500 * train + evals
        out["cases"]["readme_fashion_cnn"] = {
            "setup_seconds": setup, "seconds_per_round": train,
            "eval_seconds_intermediate": inter, "eval_seconds_final": final,
            "peer_samples": sim.eval_peer_samples, "avg_model_samples": sim.eval_avg_samples,
            "projected_500_round_minutes": projected / 60,
            "projected_eval_fraction": evals / projected}
        print(f"README Fashion-MNIST CNN: {train:.3f} s per round, evaluation {inter:.2f} s "
              f"({final:.2f} s the final one); 500 rounds ~ {projected / 60:.1f} min with "
              f"evaluation {100 * evals / projected:.1f}% of it")
    except (OSError, ValueError) as e:  # data set not installed
        out["cases"]["readme_fashion_cnn"] = {"skipped": str(e)}
        print(f"README Fashion-MNIST CNN: skipped ({e})")

    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2, default=float) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
