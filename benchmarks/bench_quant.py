"""Quantizer encoders benchmark: decentlearn's C kernels (QSGD, buckets, sign, int8) vs a
straightforward NumPy implementation of the same quantizer, side by side in one process.

    python benchmarks/bench_quant.py [--peers 1000] [--dim 25600] [--repeat 7] [--threads N]

Each encoder runs on a (peers, dim) float32 matrix (25.6M values by default; dim must be a
multiple of 512 for the NumPy bucket baseline). Reports best and median of ``repeat`` warm runs,
the ratio NumPy / C, GB/s of the C kernel counting the bytes it
must move (read x once, write the codes once), and that as a fraction of the machine's read+write
memory bandwidth (bench.MEM_BW_RW_GBS) and of an np.copyto measured just before. Saves JSON to
benchmarks/results/quant.json. Speeds are never asserted in tests; this is where they are read.
"""

import argparse
import json
from pathlib import Path

import numpy as np

from decentlearn import bench, config, ops


def np_qsgd(x, s, rng):
    norm = np.sqrt(np.einsum("ij,ij->i", x, x, dtype=np.float64)).astype(np.float32)
    t = np.abs(x) * (s / np.maximum(norm, 1e-30))[:, None].astype(np.float32)
    level = np.minimum(np.floor(t + rng.random(x.shape, dtype=np.float32)), s).astype(np.uint8)
    codes = (level << 1) | (x < 0)
    return norm, codes  # 8-bit codes for S = 127: no packing needed


def np_bucket(x, bits, bucket, rng):
    n, d = x.shape
    xb = x.reshape(n, d // bucket, bucket)
    lo = xb.min(axis=2, keepdims=True)
    scale = (xb.max(axis=2, keepdims=True) - lo) / np.float32(2**bits - 1)
    inv = np.where(scale > 0, 1 / np.where(scale > 0, scale, 1), 0).astype(np.float32)
    q = np.minimum(np.floor((xb - lo) * inv + rng.random(xb.shape, dtype=np.float32)),
                   2**bits - 1).astype(np.uint8).reshape(n, d)
    if bits == 4:
        q = q[:, 0::2] | (q[:, 1::2] << 4)
    return lo, scale, q


def np_sign(x, rng):
    scale = np.abs(x).mean(axis=1, dtype=np.float64).astype(np.float32)
    return scale, np.packbits(x < 0, axis=1, bitorder="little")


def np_int8(x, rng):
    scale = np.abs(x).max(axis=1) / np.float32(127)
    t = x * (1 / np.where(scale > 0, scale, 1))[:, None]
    q = np.clip(np.floor(t + rng.random(x.shape, dtype=np.float32)), -127, 127).astype(np.int8)
    return scale, q


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peers", type=int, default=1000)
    p.add_argument("--dim", type=int, default=25_600)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "quant.json"))
    args = p.parse_args()
    threads = ops.resolve_threads(args.threads)
    x = np.random.default_rng(0).standard_normal((args.peers, args.dim), dtype=np.float32)
    n, d = x.shape
    rng = np.random.default_rng(1)
    copy_gbs = bench.measure_copy_bandwidth(min(2 * x.nbytes, 1 << 28))
    cases = [
        ("qsgd:127", lambda: ops.qsgd_encode(x, 127, n_threads=threads),
         lambda: np_qsgd(x, 127, rng), 4 * n + n * d),
        ("bucket:4:512", lambda: ops.bucket_encode(x, 4, 512, n_threads=threads),
         lambda: np_bucket(x, 4, 512, rng), 8 * n * -(-d // 512) + n * ((d + 1) // 2)),
        ("bucket:8:512", lambda: ops.bucket_encode(x, 8, 512, n_threads=threads),
         lambda: np_bucket(x, 8, 512, rng), 8 * n * -(-d // 512) + n * d),
        ("sign", lambda: ops.sign_encode(x, n_threads=threads), lambda: np_sign(x, rng),
         4 * n + n * ((d + 7) // 8)),
        ("int8", lambda: ops.int8_encode(x, n_threads=threads), lambda: np_int8(x, rng),
         4 * n + n * d),
    ]
    cfg = config()
    report = {"benchmark": "quant", "n_peers": n, "dim": d, "threads": threads, "isa": cfg["isa"],
              "numpy_blas": cfg["numpy_blas"], "numpy": cfg["numpy"],
              "mem_bw_rw_gbs": bench.MEM_BW_RW_GBS, "copy_gbs_measured": copy_gbs, "rows": []}
    print(f"quantizer encoders on {n} x {d} float32 ({n * d / 1e6:.0f}M values), "
          f"{threads} threads, ISA {cfg['isa']}, numpy {cfg['numpy']} ({cfg['numpy_blas']})")
    print(f"np.copyto measured {copy_gbs:.1f} GB/s read+write; machine figure "
          f"{bench.MEM_BW_RW_GBS:.0f} GB/s")
    print(f"{'encoder':14s} {'C best ms':>9s} {'C med ms':>9s} {'NumPy ms':>9s} {'ratio':>7s} "
          f"{'GB/s':>6s} {'of mem':>7s} {'of copy':>7s}")
    for spec, c_fn, np_fn, out_bytes in cases:
        c_best, c_med = bench._time(c_fn, args.repeat)
        n_best, n_med = bench._time(np_fn, max(1, args.repeat // 2))
        moved = x.nbytes + out_bytes
        gbs = moved / c_best / 1e9
        row = {"encoder": spec, "decentlearn_s": c_best, "decentlearn_median_s": c_med,
               "numpy_s": n_best, "numpy_median_s": n_med, "ratio": n_best / c_best,
               "bytes_moved": moved, "decentlearn_gbs": gbs,
               "fraction_of_mem_bw": gbs / bench.MEM_BW_RW_GBS,
               "fraction_of_copy": gbs / copy_gbs}
        report["rows"].append(row)
        print(f"{spec:14s} {1e3 * c_best:9.2f} {1e3 * c_med:9.2f} {1e3 * n_best:9.1f} "
              f"{n_best / c_best:6.1f}x {gbs:6.1f} {gbs / bench.MEM_BW_RW_GBS:6.0%} "
              f"{gbs / copy_gbs:6.0%}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nreport saved to {out}")


if __name__ == "__main__":
    main()
