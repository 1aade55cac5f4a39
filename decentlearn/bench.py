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


#: int8 VNNI peak measured on the project's 2-core machine (GOP/s, 2 ops per multiply-add).
VNNI_PEAK_GOPS = float(os.environ.get("DECENTLEARN_VNNI_PEAK_GOPS", "934"))

#: (name, m, k, n) of bench_gemm: a large square product, a mid-size one and the three products
#: of an MLP layer 784 -> 128 at batch 512 (forward, dX, dW).
GEMM_SHAPES = (("1024^3", 1024, 1024, 1024), ("256x784x256", 256, 784, 256),
               ("mlp fwd XW", 512, 784, 128), ("mlp bwd dYW^T", 512, 128, 784),
               ("mlp bwd X^TdY", 784, 512, 128))


def bench_gemm(shapes=GEMM_SHAPES, repeat: int = 15, n_threads: int | None = None,
               vnni_peak_gops: float = VNNI_PEAK_GOPS) -> dict:
    """The int8 GEMM against NumPy float32 matmul on each (name, m, k, n) of ``shapes``.

    Variants per shape: ``numpy`` (np.matmul float32, the baseline); ``pipeline`` (absmax +
    quantize + pack of A, fused dequantizing gemm_s8_f32 against a B quantized and packed once);
    ``pipeline+packB`` (B quantized and packed inside every call too); ``kernel`` (gemm_s8 alone,
    int32 out); ``kernel_f32`` (the fused dequantizing kernel alone). GOP/s counts 2 m n k;
    ``fraction_of_vnni_peak`` divides by ``vnni_peak_gops``.
    """
    from decentlearn import config, ops

    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    threads = ops.resolve_threads(n_threads)
    cfg = config()
    report = {"benchmark": "gemm", "threads": threads, "isa": cfg["isa"],
              "numpy_blas": cfg["numpy_blas"], "numpy": cfg["numpy"],
              "vnni_peak_gops": vnni_peak_gops, "repeat": repeat, "rows": []}
    rng = np.random.default_rng(0)
    for name, m, k, n in shapes:
        x = rng.standard_normal((m, k), dtype=np.float32)
        w = rng.standard_normal((k, n), dtype=np.float32)
        y = np.empty((m, n), np.float32)
        w_scale = ops.absmax_scale(w, axis=1)
        pb = ops.pack_b_s8(ops.quantize_s8(w, w_scale, axis=1), n_threads=threads)
        xq = np.empty((m, k), np.int8)
        c = np.empty((m, n), np.int32)
        s0 = ops.absmax_scale(x)
        ops.quantize_s8(x, s0, out=xq)

        def pipeline(x=x, xq=xq, pb=pb, w_scale=w_scale, y=y):
            s = ops.absmax_scale(x, n_threads=threads)
            ops.quantize_s8(x, s, out=xq, n_threads=threads)
            ops.gemm_s8_f32(xq, pb, s, w_scale, out=y, n_threads=threads)

        def pipeline_pack_b(x=x, w=w, xq=xq, y=y):
            ws = ops.absmax_scale(w, axis=1, n_threads=threads)
            pbb = ops.pack_b_s8(ops.quantize_s8(w, ws, axis=1, n_threads=threads), threads)
            s = ops.absmax_scale(x, n_threads=threads)
            ops.quantize_s8(x, s, out=xq, n_threads=threads)
            ops.gemm_s8_f32(xq, pbb, s, ws, out=y, n_threads=threads)

        variants = [("numpy", lambda x=x, w=w, y=y: np.matmul(x, w, out=y)),
                    ("pipeline", pipeline), ("pipeline+packB", pipeline_pack_b),
                    ("kernel", lambda xq=xq, pb=pb, c=c: ops.gemm_s8(xq, pb, out=c,
                                                                     n_threads=threads)),
                    ("kernel_f32", lambda xq=xq, pb=pb, s0=s0, w_scale=w_scale, y=y:
                     ops.gemm_s8_f32(xq, pb, s0, w_scale, out=y, n_threads=threads))]
        np_best, n_ops = None, 2.0 * m * n * k
        for vname, fn in variants:
            best, med = _time(fn, repeat)
            np_best = best if np_best is None else np_best
            gops = n_ops / best / 1e9
            report["rows"].append({"shape": name, "m": m, "k": k, "n": n, "variant": vname,
                                   "best_s": best, "median_s": med, "gops": gops,
                                   "ratio_vs_numpy": np_best / best,
                                   "fraction_of_vnni_peak": gops / vnni_peak_gops})
    return report


def format_gemm_report(report: dict) -> str:
    """A human-readable table of a bench_gemm report."""
    lines = [f"int8 GEMM vs numpy float32 matmul, {report['threads']} threads, ISA "
             f"{report['isa']}; numpy {report['numpy']} with {report['numpy_blas']}; best of "
             f"{report['repeat']}; VNNI peak {report['vnni_peak_gops']:.0f} GOP/s",
             f"  {'shape':15s} {'variant':15s} {'best ms':>8s} {'med ms':>8s} {'GOP/s':>6s} "
             f"{'vs numpy':>8s} {'of VNNI':>7s}"]
    for r in report["rows"]:
        lines.append(f"  {r['shape']:15s} {r['variant']:15s} {1e3 * r['best_s']:8.3f} "
                     f"{1e3 * r['median_s']:8.3f} {r['gops']:6.0f} {r['ratio_vs_numpy']:7.2f}x "
                     f"{r['fraction_of_vnni_peak']:6.0%}")
    return "\n".join(lines)
