"""STC benchmark: Sparse Ternary Compression encode (top-k + ternarize + Golomb/Rice code) against
top-k alone, side by side in one process, plus the coder's measured bits per kept position
against Sattler et al.'s closed form.

    python benchmarks/bench_stc.py [--values 25000000] [--ratios 0.01,0.001] [--repeat 7]

Layouts: one row of all the values, and 100 rows (peers) sharing them. The baseline is ops.topk
(the first stage of STC encode), so the ratio is what ternarizing and coding add. Saves JSON to
benchmarks/results/stc.json. Speeds are never asserted in tests; this is where they are read.
"""

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from decentlearn import config, ops
from decentlearn._reference import stc as ref
from decentlearn.bench import _time
from decentlearn.compress import stc as stc_mod

MEM_BW_READ_GBS = 33.0


def _time_pair(f, g, repeat: int) -> tuple[float, float, float, float]:
    """(best f, median f, best g, median g) seconds, f and g run alternately after a warm-up so
    that load from other processes hits both alike."""
    f(), g()
    tf, tg = [], []
    for _ in range(repeat):
        for fn, ts in ((f, tf), (g, tg)):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
    return min(tf), statistics.median(tf), min(tg), statistics.median(tg)


def bench_case(x: np.ndarray, ratio: float, repeat: int, threads: int) -> dict:
    c = stc_mod.STC(ratio)
    n, dim = x.shape
    k = c.k(dim)
    b = ops.golomb_param(k, dim)
    topk_best, topk_med, stc_best, stc_med = _time_pair(
        lambda: ops.topk(x, k, n_threads=threads), lambda: c.compress(x, n_threads=threads),
        repeat)
    p = c.compress(x, n_threads=threads)
    a = p.arrays
    enc_best, _ = _time(lambda: ops.golomb_encode(a["positions"], a["negative"], dim, b,
                                                  n_threads=threads), repeat)
    dec_best, _ = _time(lambda: ops.golomb_decode(a["data"], a["nbits"], k, dim, b,
                                                  n_threads=threads), repeat)
    wire = p.to_bytes()
    parse_best, _ = _time(lambda: c.from_bytes(wire, x.shape), repeat)
    dcmp_best, _ = _time(lambda: c.decompress(p), repeat)
    bits = float(a["nbits"].sum()) / (n * k) - 1  # without the sign bit
    closed = ref.expected_bits_per_position(k / dim, b)
    return {
        "rows": n, "dim": dim, "ratio": ratio, "k": k, "b": b,
        "topk_s": topk_best, "topk_median_s": topk_med,
        "stc_encode_s": stc_best, "stc_encode_median_s": stc_med,
        "stc_over_topk": stc_best / topk_best,
        "golomb_encode_s": enc_best, "golomb_decode_s": dec_best,
        "from_bytes_s": parse_best, "decompress_s": dcmp_best,
        "stc_encode_gbs": x.nbytes / stc_best / 1e9,
        "fraction_of_read_bw": x.nbytes / stc_best / 1e9 / MEM_BW_READ_GBS,
        "bits_per_position": bits, "closed_form_bits": closed,
        "bits_rel_err": bits / closed - 1,
        "wire_bytes": p.nbytes, "wire_fraction_of_f32": p.nbytes / x.nbytes,
        "noise_topk_median_over_best": topk_med / topk_best,
        "noise_stc_median_over_best": stc_med / stc_best,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--values", type=int, default=25_000_000)
    ap.add_argument("--ratios", default="0.01,0.001")
    ap.add_argument("--rows", default="1,100")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "stc.json"))
    args = ap.parse_args()
    threads = ops.resolve_threads(args.threads)
    cfg = config()
    report = {"benchmark": "stc", "values": args.values, "threads": threads, "isa": cfg["isa"],
              "numpy_blas": cfg["numpy_blas"], "numpy": cfg["numpy"],
              "mem_bw_read_gbs": MEM_BW_READ_GBS, "cases": []}
    print(f"STC encode vs ops.topk; {threads} threads, isa {cfg['isa']}, numpy "
          f"{cfg['numpy']} ({cfg['numpy_blas']}); best of {args.repeat}")
    print(f"{'rows x dim':>16} {'p':>6} {'b':>3} {'topk ms':>8} {'stc ms':>8} {'ratio':>6} "
          f"{'GB/s':>6} {'golomb enc/dec ms':>18} {'bits/pos':>9} {'closed':>7} {'noise':>6}")
    rng = np.random.default_rng(0)
    for rows in (int(r) for r in args.rows.split(",")):
        x = rng.standard_normal((rows, args.values // rows), dtype=np.float32)
        for ratio in (float(r) for r in args.ratios.split(",")):
            r = bench_case(x, ratio, args.repeat, threads)
            report["cases"].append(r)
            print(f"{rows:>5} x {r['dim']:>8} {ratio:>6} {r['b']:>3} {1e3 * r['topk_s']:>8.1f} "
                  f"{1e3 * r['stc_encode_s']:>8.1f} {r['stc_over_topk']:>5.2f}x "
                  f"{r['stc_encode_gbs']:>6.2f} {1e3 * r['golomb_encode_s']:>8.2f}/"
                  f"{1e3 * r['golomb_decode_s']:<8.2f} {r['bits_per_position']:>9.3f} "
                  f"{r['closed_form_bits']:>7.3f} "
                  f"{max(r['noise_topk_median_over_best'], r['noise_stc_median_over_best']):>5.2f}x")
    print("bits/pos excludes the sign bit; noise = worst median/best of the two timed contenders")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"report saved to {out}")


if __name__ == "__main__":
    main()
