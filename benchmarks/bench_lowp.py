"""int8 training step benchmark: one D-PSGD local step (loss_and_grad + SGD step) of 16 peers,
batch 32, on 28x28 inputs, with precision="int8" vs "fp32", in one process.

    python benchmarks/bench_lowp.py [--repeat 30] [--model mlp] [--peers 16] [--batch 32]

Per precision: the best and median of ``repeat`` warm steps (after 3 warm-up steps), split into
loss_and_grad and the optimizer step, plus the forward pass alone. fp32 runs NumPy float32 matmul
(OpenBLAS sgemm); int8 quantizes activations, weights and (stochastically) output gradients and runs
the batched exact int8 GEMM with fused dequantization. The machine is shared: compare ratios taken
in the same run. Saves JSON to benchmarks/results/lowp.json.
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np

from decentlearn import config
from decentlearn.nn import make_model
from decentlearn.optim import SGD, SGDConfig


def _time(fn, repeat: int) -> tuple[float, float]:
    for _ in range(3):
        fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts), float(np.median(ts))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--model", default="mlp")
    p.add_argument("--peers", type=int, default=16)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "lowp.json"))
    args = p.parse_args()
    rng = np.random.default_rng(0)
    x = rng.random((args.peers, args.batch, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, (args.peers, args.batch))
    cfg = config()
    print(f"decentlearn int8 training step: {args.model}, {args.peers} peers, batch {args.batch}, "
          f"ISA {cfg.get('isa')}, numpy BLAS: see numpy.show_config()")
    rows = {}
    for precision in ("fp32", "int8"):
        model = make_model(args.model, (1, 28, 28), 10, precision=precision)
        params = np.ascontiguousarray(
            np.broadcast_to(model.init(0).astype(np.float32), (args.peers, model.dim)))
        grad = np.empty_like(params)
        opt = SGD(SGDConfig(lr=0.01, momentum=0.9), params.shape)

        def step():
            model.loss_and_grad(params, x, y, grad=grad)
            opt.step(params, grad)

        best, med = _time(step, args.repeat)
        lg, _ = _time(lambda: model.loss_and_grad(params, x, y, grad=grad), args.repeat)
        fw, _ = _time(lambda: model.forward(params, x), args.repeat)
        rows[precision] = {"step_best_ms": best * 1e3, "step_median_ms": med * 1e3,
                           "loss_and_grad_best_ms": lg * 1e3, "forward_best_ms": fw * 1e3}
        print(f"  {precision}: step best {best * 1e3:7.2f} ms (median {med * 1e3:7.2f}), "
              f"loss_and_grad {lg * 1e3:7.2f} ms, forward {fw * 1e3:7.2f} ms")
    ratio = rows["fp32"]["step_best_ms"] / rows["int8"]["step_best_ms"]
    print(f"  int8 step speed-up over fp32: {ratio:.2f}x (best of {args.repeat})")
    report = {"model": args.model, "peers": args.peers, "batch": args.batch, "isa": cfg.get("isa"),
              "repeat": args.repeat, "rows": rows, "speedup_int8_over_fp32": ratio}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
