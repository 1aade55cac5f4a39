"""Natural compression / dithering benchmark: decentlearn's C kernels vs NumPy, side by side.

    python benchmarks/bench_natural.py [--n 25000000] [--repeat 9] [--threads N] [--out FILE.json]

Baselines run in the same process: natural compression as GRACE writes it (view the float32 array as
int32, add random integers below 2^23 from numpy's Generator, mask the mantissa; the result stays
float32, so it writes 4 B per value where the C kernel writes a 1-byte code), and natural dithering
in NumPy (norm, floor(log2), uniform random rounding). Reports best and median times, the ratio, GB/s
(bytes the kernel must move: natural encode reads 4 B and writes 1 B per value) and the fraction of
the machine's memory bandwidth (46 GB/s read+write; also an in-process copy measured just before).
Saves JSON to benchmarks/results/natural.json. The machine is shared: best-of-N, and the
median/best spread is printed as the noise figure.
"""

import argparse
import json
from pathlib import Path

import numpy as np

from decentlearn import bench, config, ops


def grace_natural(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """GRACE's bit trick: int32 view + random 23-bit integers, then keep sign and exponent."""
    r = rng.integers(0, 1 << 23, size=x.shape, dtype=np.int32)
    return ((x.view(np.int32) + r) & np.int32(-(1 << 23))).view(np.float32)


def numpy_dither(x: np.ndarray, s: int, rng: np.random.Generator):
    """Natural dithering with s levels, p = 2, in plain NumPy (float32 levels and signs)."""
    norm = np.float32(np.linalg.norm(x))
    r = np.abs(x) / norm
    delta = np.float32(2.0 ** (1 - s))
    lo = np.where(r >= delta, np.exp2(np.floor(np.log2(np.maximum(r, delta)))), 0)
    hi = np.where(r >= delta, 2 * lo, delta)
    up = rng.random(x.shape, dtype=np.float32) < (r - lo) / (hi - lo)
    return norm, np.sign(x) * np.where(up, hi, lo).astype(np.float32)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=25_000_000)
    p.add_argument("--repeat", type=int, default=9)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--s", type=int, default=8, help="dithering levels")
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "natural.json"))
    args = p.parse_args()

    threads = ops.resolve_threads(args.threads)
    n, rep = args.n, args.repeat
    x = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    codes = np.empty(n, np.uint8)
    y = np.empty(n, np.float32)
    rng = np.random.default_rng(1)
    copy_gbs = bench.measure_copy_bandwidth(min(2 * x.nbytes, 1 << 28))
    cfg = config()
    bw = bench.MEM_BW_RW_GBS

    def row(name, fn, moved, baseline=None, base_repeat=None):
        best, med = bench._time(fn, rep)
        out = {"kernel": name, "best_s": best, "median_s": med, "noise": med / best - 1,
               "bytes_moved": moved, "gbs": moved / best / 1e9,
               "fraction_of_mem_bw": moved / best / 1e9 / bw,
               "fraction_of_copy": moved / best / 1e9 / copy_gbs}
        if baseline is not None:
            bbest, bmed = bench._time(baseline, base_repeat or max(3, rep // 3))
            out.update(baseline_best_s=bbest, baseline_median_s=bmed, speedup=bbest / best)
        return out

    step = [0]

    def enc():
        step[0] += 1
        ops.natural_encode(x, seed=1, step=step[0], out=codes, n_threads=threads)

    rows = [
        row("natural_encode", enc, 5 * n, lambda: grace_natural(x, rng)),
        row("natural_decode", lambda: ops.natural_decode(codes, out=y, n_threads=threads), 5 * n),
        row(f"dither_encode s={args.s}",
            lambda: ops.dither_encode(x, args.s, n_threads=threads),
            # reads x twice (norm, then codes), writes 1-byte codes
            9 * n, lambda: numpy_dither(x, args.s, rng), base_repeat=3),
    ]
    norms, dcodes = ops.dither_encode(x, args.s, n_threads=threads)
    yd = np.empty((1, n), np.float32)
    rows.append(row(f"dither_decode s={args.s}",
                    lambda: ops.dither_decode(norms, dcodes, args.s, out=yd, n_threads=threads),
                    5 * n))
    report = {"benchmark": "natural", "n": n, "threads": threads, "isa": cfg["isa"],
              "numpy": cfg["numpy"], "numpy_blas": cfg["numpy_blas"], "mem_bw_rw_gbs": bw,
              "copy_gbs_measured": copy_gbs, "repeat": rep, "rows": rows}

    print(f"natural compression, {n:,} float32 values, {threads} threads, isa={cfg['isa']}, "
          f"numpy {cfg['numpy']} ({cfg['numpy_blas']})")
    print(f"machine bandwidth {bw:.0f} GB/s (read+write); in-process copy {copy_gbs:.1f} GB/s")
    print(f"{'kernel':<18}{'best ms':>9}{'median':>9}{'GB/s':>8}{'of 46':>7}{'of copy':>8}"
          f"{'numpy ms':>10}{'speedup':>9}")
    for r in rows:
        base = (f"{r['baseline_best_s'] * 1e3:10.1f}{r['speedup']:8.1f}x"
                if "speedup" in r else "")
        print(f"{r['kernel']:<18}{r['best_s'] * 1e3:9.2f}{r['median_s'] * 1e3:9.2f}"
              f"{r['gbs']:8.1f}{r['fraction_of_mem_bw']:7.0%}{r['fraction_of_copy']:8.0%}{base}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nreport saved to {out}")


if __name__ == "__main__":
    main()
