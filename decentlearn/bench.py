"""Benchmarks of the C kernels against the baselines people use, run side by side in one process.

Each report names numpy's BLAS and the thread count, gives the best (and median) time of every
contender, the ratio to the C kernel, and the C kernel's bandwidth as a fraction of the machine's
memory bandwidth: both the figure measured for this machine type (``MEM_BW_RW_GBS``, override with
$DECENTLEARN_MEM_BW_GBS) and a copy measured in the same process just before.
"""

from __future__ import annotations

import os
import statistics
import time

import numpy as np

#: DRAM read+write bandwidth measured on the project's 2-core machine (GB/s).
MEM_BW_RW_GBS = float(os.environ.get("DECENTLEARN_MEM_BW_GBS", "46"))
#: DRAM read-only bandwidth measured on the same machine (GB/s).
MEM_BW_READ_GBS = float(os.environ.get("DECENTLEARN_MEM_BW_READ_GBS", "33"))


def _time(fn, repeat: int) -> tuple[float, float]:
    """(best, median) seconds of ``repeat`` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times)


def numpy_neighbor_loop(W_dense: np.ndarray, X: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Gossip as BlueFog/decentralizepy write it: per peer, a weighted sum of neighbours' arrays."""
    for i in range(X.shape[0]):
        acc = W_dense[i, i] * X[i]
        for j in np.flatnonzero(W_dense[i]):
            if j != i:
                acc += W_dense[i, j] * X[j]
        out[i] = acc
    return out


def measure_copy_bandwidth(nbytes: int = 1 << 28, repeat: int = 5) -> float:
    """Read+write GB/s of an in-process np.copyto of ``nbytes`` (counts bytes read + written)."""
    a = np.ones(nbytes // 4, dtype=np.float32)
    b = np.empty_like(a)
    best, _ = _time(lambda: np.copyto(b, a), repeat)
    return 2 * a.nbytes / best / 1e9


def bench_gossip(n_peers: int = 1000, dim: int = 25_600, repeat: int = 5,
                 n_threads: int | None = None, graphs: str = "ring,exponential",
                 slow_repeat: int = 3) -> dict:
    """Times ops.gossip against (a) the NumPy per-neighbour loop, (b) scipy.sparse CSR @ dense,
    (c) dense W @ X (BLAS), for each topology spec in ``graphs``."""
    import scipy.sparse as sp

    from decentlearn import config, ops, topology

    if n_peers < 1 or dim < 1 or repeat < 1:
        raise ValueError("peers, dim and repeat must be >= 1")
    threads = ops.resolve_threads(n_threads)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n_peers, dim), dtype=np.float32)
    Y = np.empty_like(X)
    copy_gbs = measure_copy_bandwidth(min(2 * X.nbytes, 1 << 28))
    moved = 2 * X.nbytes  # the kernel's minimum traffic: read X once, write Y once
    cfg = config()
    report = {"benchmark": "gossip", "n_peers": n_peers, "dim": dim, "threads": threads,
              "isa": cfg["isa"], "numpy_blas": cfg["numpy_blas"], "numpy": cfg["numpy"],
              "mem_bw_rw_gbs": MEM_BW_RW_GBS, "copy_gbs_measured": copy_gbs, "graphs": []}
    for spec in [g.strip() for g in graphs.split(",") if g.strip()]:
        top = topology.make(spec, n_peers)
        W = top.mixing_matrix().astype(np.float32)
        S = sp.csr_matrix(W)
        best, med = _time(lambda: ops.gossip(top, X, out=Y, n_threads=threads), repeat)
        gbs = moved / best / 1e9
        row = {"topology": spec, "degree_max": int(top.degree().max()),
               "nnz": int(S.nnz), "decentlearn_s": best, "decentlearn_median_s": med,
               "decentlearn_gbs": gbs, "fraction_of_mem_bw": gbs / MEM_BW_RW_GBS,
               "fraction_of_copy_bw": gbs / copy_gbs, "baselines": {}}
        baselines = {
            "numpy_neighbor_loop": lambda: numpy_neighbor_loop(W, X, Y),
            "scipy_csr": lambda: S @ X,
            "dense_blas": lambda: W @ X,
        }
        for name, fn in baselines.items():
            b_best, b_med = _time(fn, slow_repeat)
            row["baselines"][name] = {"best_s": b_best, "median_s": b_med,
                                      "speedup": b_best / best}
        report["graphs"].append(row)
    return report


def format_report(report: dict) -> str:
    """A human-readable table of a bench_gossip report."""
    lines = [
        f"gossip Y = W X, {report['n_peers']} peers x {report['dim']} float32 "
        f"({report['n_peers'] * report['dim'] * 4 / 1e6:.0f} MB), {report['threads']} threads, "
        f"ISA {report['isa']}; numpy {report['numpy']} with {report['numpy_blas']}",
        f"memory bandwidth: {report['mem_bw_rw_gbs']:.0f} GB/s read+write (machine figure), "
        f"{report['copy_gbs_measured']:.1f} GB/s measured by np.copyto in this process",
    ]
    for g in report["graphs"]:
        lines.append(
            f"\n{g['topology']} (max degree {g['degree_max']}, nnz {g['nnz']}): decentlearn "
            f"{g['decentlearn_s'] * 1e3:.2f} ms (median {g['decentlearn_median_s'] * 1e3:.2f}), "
            f"{g['decentlearn_gbs']:.1f} GB/s = {100 * g['fraction_of_mem_bw']:.0f}% of "
            f"{report['mem_bw_rw_gbs']:.0f} GB/s, {100 * g['fraction_of_copy_bw']:.0f}% of copy")
        for name, b in g["baselines"].items():
            lines.append(f"  {name:<22} {b['best_s'] * 1e3:9.2f} ms   decentlearn is "
                         f"{b['speedup']:6.1f}x faster")
    return "\n".join(lines)


def grace_natural(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Natural compression as GRACE writes it in NumPy: int32 view + random 23-bit integers, then
    keep sign and exponent (float32 out, not packed)."""
    r = rng.integers(0, 1 << 23, size=x.shape, dtype=np.int32)
    return ((x.view(np.int32) + r) & np.int32(-(1 << 23))).view(np.float32)


def bench_compress(n: int = 25_000_000, repeat: int = 5, n_threads: int | None = None,
                   slow_repeat: int = 3) -> dict:
    """The compression kernels against their baselines in one process, on n float32 values:
    natural compression vs GRACE's NumPy bit trick; exact top-k vs np.argpartition at n = 10M and
    n (k = 0.1% and 1%); STC encode vs top-k alone; Golomb bits per kept position vs the closed
    form; GB/s of each kernel as a fraction of the memory bandwidth."""
    from decentlearn import compress, config, ops
    from decentlearn._reference.stc import expected_bits_per_position, stc_k

    threads = ops.resolve_threads(n_threads)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n, dtype=np.float32)
    cfg = config()
    report = {"benchmark": "compress", "n": n, "threads": threads, "isa": cfg["isa"],
              "numpy": cfg["numpy"], "numpy_blas": cfg["numpy_blas"],
              "mem_bw_rw_gbs": MEM_BW_RW_GBS, "mem_bw_read_gbs": MEM_BW_READ_GBS,
              "copy_gbs_measured": measure_copy_bandwidth(min(2 * x.nbytes, 1 << 28)),
              "rows": []}

    def add(name, seconds, baseline_name=None, baseline_s=None, moved=None, **extra):
        row = {"kernel": name, "best_s": seconds, **extra}
        if moved is not None:
            row["gbs"] = moved / seconds / 1e9
            row["fraction_of_mem_bw"] = row["gbs"] / MEM_BW_RW_GBS
        if baseline_s is not None:
            row.update(baseline=baseline_name, baseline_s=baseline_s, speedup=baseline_s / seconds)
        report["rows"].append(row)

    codes = np.empty(n, dtype=np.uint8)
    t, _ = _time(lambda: ops.natural_encode(x, seed=1, out=codes, n_threads=threads), repeat)
    tb, _ = _time(lambda: grace_natural(x, rng), slow_repeat)
    add("natural encode", t, "GRACE NumPy bit trick", tb, moved=5 * n)

    for size in sorted({min(10_000_000, n), n}):
        xs = x[:size]
        for ratio in (0.001, 0.01):
            k = max(1, int(ratio * size))
            t, _ = _time(lambda: ops.topk(xs, k, n_threads=threads), repeat)
            tb, _ = _time(lambda: np.argpartition(np.abs(xs), -k), slow_repeat)
            add(f"top-k n={size:,} k={k:,}", t, "np.argpartition(|x|)", tb, moved=4 * size,
                read_only_fraction=4 * size / t / 1e9 / MEM_BW_READ_GBS)

    for ratio in (0.01, 0.001):
        stc = compress.make(f"stc:{ratio}")
        k = stc_k(ratio, n)
        t_topk, _ = _time(lambda: ops.topk(x, k, n_threads=threads), repeat)
        t_stc, _ = _time(lambda: stc.compress(x, n_threads=threads), repeat)
        payload = stc.compress(x, n_threads=threads)
        nbits = int(payload.arrays["nbits"].sum())
        b = ops.golomb_param(k, n)
        measured = (nbits - k) / k  # the sign bit excluded
        add(f"STC encode p={ratio}", t_stc, "top-k alone", t_topk, moved=4 * n,
            ratio_to_topk=t_stc / t_topk, golomb_b=b, bits_per_position=measured,
            bits_closed_form=float(expected_bits_per_position(k / n, b)),
            wire_fraction_of_float32=payload.nbytes / (4 * n))
    return report


def format_compress_report(report: dict) -> str:
    lines = [f"compression kernels on {report['n']:,} float32 values, {report['threads']} threads, "
             f"ISA {report['isa']}; numpy {report['numpy']} with {report['numpy_blas']}",
             f"memory bandwidth: {report['mem_bw_rw_gbs']:.0f} GB/s read+write, "
             f"{report['mem_bw_read_gbs']:.0f} GB/s read only (machine figures); "
             f"np.copyto here {report['copy_gbs_measured']:.1f} GB/s"]
    for r in report["rows"]:
        s = f"  {r['kernel']:<28} {r['best_s'] * 1e3:8.2f} ms"
        if "gbs" in r:
            s += f"  {r['gbs']:5.1f} GB/s ({100 * r['fraction_of_mem_bw']:3.0f}% of r+w)"
        if "speedup" in r and "ratio_to_topk" not in r:
            s += f"  {r['speedup']:6.1f}x faster than {r['baseline']} ({r['baseline_s'] * 1e3:.1f} ms)"
        if "ratio_to_topk" in r:
            s += (f"  {r['ratio_to_topk']:.2f}x the top-k time; Golomb b={r['golomb_b']}: "
                  f"{r['bits_per_position']:.3f} bits/position vs {r['bits_closed_form']:.3f} "
                  f"closed form; wire {100 * r['wire_fraction_of_float32']:.2f}% of float32")
        lines.append(s)
    return "\n".join(lines)
