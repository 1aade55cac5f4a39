"""Benchmarks of the C kernels against the baselines people use, and against this machine's limits,
all measured side by side in one process.

Every report starts with the limits measured in the same process (:func:`measure_limits`): the copy
bandwidth (decentlearn's non-temporal streaming copy ``ops.copy_f32`` and ``np.copyto``, counting
the bytes a copy must move: read once, write once), numpy's sgemm rate (a 1024^3 float32 matmul;
its BLAS, version and threads from threadpoolctl) and the int8 multiply-add peak of the active ISA
path (``ops.peak_s8``: an in-register ``pmaddwd``/``vpmaddwd``/``vpdpbusd`` loop or AMX
``tdpbssd`` on resident tiles, timed on every thread over one window by ``ops.peak_s8_window``;
:func:`bench_gemm_paths` compares ISA paths, each against its own peak). Each kernel row
then gives its best and median time, every baseline's time and the speedup over it, and the
kernel's rate as a fraction of the matching limit: memory-bound kernels count the bytes they must
move (inputs read once, outputs written once) against the faster of the two copies; int8 GEMMs
count 2 m n k operations against the int8 peak. Nothing here is a fixed machine figure.

Timing: :func:`best_of` runs contenders round-robin after a warm-up call each, so load from other
processes hits a kernel and its baselines alike, and reports (best, median). :func:`format_rows`
prints a report's rows (with ``outputs.format.format_table``), :func:`save_json` writes it to
benchmarks/results/. ``decentlearn bench all`` (:func:`bench_all`) runs every benchmark once and
prints the acceptance figures.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from decentlearn.outputs.format import format_table

#: Where the benchmark scripts and ``decentlearn bench`` save their JSON reports.
RESULTS_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "results"

#: The clock best_of reads: "wall" (time.perf_counter, the default) or "cpu" (time.process_time:
#: CPU seconds of the whole process, meaningful for one-threaded runs on a loaded machine only).
_CLOCK = {"name": "wall", "fn": time.perf_counter}


@contextlib.contextmanager
def clock(name: str):
    """Within the block, best_of times with the "wall" or the "cpu" clock (see _CLOCK). With
    "cpu", numpy's BLAS is limited to one thread too, so every contender runs on one thread."""
    fns = {"wall": time.perf_counter, "cpu": time.process_time}
    if name not in fns:
        raise ValueError(f"clock must be 'wall' or 'cpu', got {name!r}")
    from threadpoolctl import threadpool_limits

    old = dict(_CLOCK)
    _CLOCK.update(name=name, fn=fns[name])
    try:
        if name == "cpu":
            with threadpool_limits(1, user_api="blas"):
                yield
        else:
            yield
    finally:
        _CLOCK.update(old)


# ---- timing, JSON -----------------------------------------------------------------------------

def best_of(fns: Callable | dict, repeat: int = 5) -> tuple[float, float] | dict:
    """Best and median seconds of ``repeat`` calls after one warm-up call.

    ``fns`` is one callable (returns ``(best, median)``) or a dict ``name -> callable`` or
    ``name -> (callable, repeat)``: those run round-robin (a call of each in turn, each until its
    own repeat count) and the result is ``name -> (best, median)``."""
    if callable(fns):
        return best_of({"f": fns}, repeat)["f"]
    plan = {k: (v if isinstance(v, tuple) else (v, repeat)) for k, v in fns.items()}
    if any(r < 1 for _, r in plan.values()):
        raise ValueError(f"repeat must be >= 1, got {[r for _, r in plan.values()]}")
    for fn, _ in plan.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in plan}
    for i in range(max(r for _, r in plan.values())):
        for k, (fn, r) in plan.items():
            if i < r:
                now = _CLOCK["fn"]
                t0 = now()
                fn()
                times[k].append(now() - t0)
    return {k: (min(t), statistics.median(t)) for k, t in times.items()}


def save_json(report: dict, name: str, path: str | Path | None = None) -> Path:
    """Writes ``report`` as JSON to ``path`` (default benchmarks/results/<name>.json)."""
    out = Path(path) if path is not None else RESULTS_DIR / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=float) + "\n")
    return out


# ---- the machine and its limits ------------------------------------------------------------------

def cpu_info() -> dict:
    """CPU model name, family and model (x86 /proc/cpuinfo), and the SIMD flags that matter here."""
    info = {"model_name": "unknown", "family": None, "model": None, "flags": []}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return info
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "model name" and info["model_name"] == "unknown":
            info["model_name"] = value
        elif key == "cpu family" and info["family"] is None:
            info["family"] = int(value)
        elif key == "model" and info["model"] is None:
            info["model"] = int(value)
        elif key == "flags" and not info["flags"]:
            info["flags"] = sorted(set(value.split()) & {"avx2", "fma", "avx512f", "avx512bw",
                                                          "avx512vl", "avx512_vnni"})
    return info


def blas_info() -> dict:
    """numpy's BLAS as threadpoolctl sees it: library, version, threads, kernel architecture, and
    how long its idle threads spin (``wait``, decentlearn.config()'s ``blas_wait``: OpenBLAS's own
    default lets them spin about 0.1 s after each call, which slowed the int8 GEMM run
    round-robin with numpy's sgemm 2.5x on 2 cores and 5-10x on 16)."""
    from threadpoolctl import threadpool_info

    import decentlearn

    wait = decentlearn.config()["blas_wait"]
    for pool in threadpool_info():
        if pool.get("user_api") == "blas":
            return {"library": pool.get("internal_api"), "version": pool.get("version"),
                    "threads": pool.get("num_threads"),
                    "architecture": pool.get("architecture"),
                    "file": Path(pool.get("filepath", "")).name, "wait": wait}
    return {"library": "unknown", "version": None, "threads": None, "architecture": None,
            "file": None, "wait": wait}


#: The instruction of each ISA path's int8 GEMM and peak loop.
INT8_PEAK_INSTRUCTION = {"generic": "pmaddwd (SSE2)", "avx2": "vpmaddwd (AVX2)",
                         "avx512": "vpmaddwd (AVX2; AVX-512 path without VNNI)",
                         "avx512vnni": "vpdpbusd (AVX-512 VNNI)", "amx": "tdpbssd (AMX tiles)"}


def measure_int8_peak(n_threads: int | None = None, repeat: int = 5,
                      seconds: float = 0.05) -> float:
    """The active ISA path's int8 peak in GOP/s on ``n_threads`` threads: the best of ``repeat``
    windows of ``seconds`` in which every thread runs the path's in-register loop at once
    (ops.peak_s8_window; chunks of about 1 ms of one thread's loop). Under the cpu clock
    (bench.clock("cpu"), one thread) a fixed number of iterations is timed by best_of instead."""
    from decentlearn import ops

    threads = ops.resolve_threads(n_threads)
    chunk = 64
    while True:  # about 1 ms of one thread's loop per chunk: the window's end is that precise
        t, _ = best_of(lambda: ops.peak_s8(chunk, n_threads=1), 1)
        if t >= 1e-3 or chunk > 1 << 30:
            break
        chunk *= 2
    if _CLOCK["name"] != "wall":  # the cpu clock (one thread): chunks timed by best_of
        reps = chunk * max(1, int(seconds / 1e-3))
        n_ops = ops.peak_s8(reps, n_threads=threads)[0]
        t, _ = best_of(lambda: ops.peak_s8(reps, n_threads=threads), max(repeat, 1))
        return n_ops / max(t, 1e-9) / 1e9
    best = 0.0
    for _ in range(max(repeat, 1)):
        n_ops, elapsed, _ = ops.peak_s8_window(chunk, seconds, n_threads=threads)
        best = max(best, n_ops / max(elapsed, 1e-9) / 1e9)
    return best


def measure_limits(n_threads: int | None = None, nbytes: int = 1 << 28, repeat: int = 5) -> dict:
    """This machine's limits, measured now in this process (see the module docstring).

    ``copy_gbs`` is the faster of the C streaming copy and np.copyto of ``nbytes`` float32 bytes,
    both counting 2 x nbytes moved; ``sgemm_gflops`` numpy's 1024^3 float32 matmul;
    ``int8_peak_gops`` the active path's int8 multiply-add loop on ``threads`` threads
    (measure_int8_peak: all threads over one time window, measured first)."""
    from decentlearn import config, ops

    threads = ops.resolve_threads(n_threads)
    peak = measure_int8_peak(threads, repeat)  # first: before numpy's BLAS threads run
    a = np.ones(max(nbytes // 4, 1 << 16), np.float32)
    b = np.empty_like(a)
    t = best_of({"c": lambda: ops.copy_f32(a, b, n_threads=threads),
                 "np": lambda: np.copyto(b, a)}, repeat)
    moved = 2 * a.nbytes
    m = np.random.default_rng(0).standard_normal((1024, 1024), dtype=np.float32)
    mo = np.empty_like(m)
    t_mm, _ = best_of(lambda: np.matmul(m, m, out=mo), repeat)
    cfg = config()
    instr = INT8_PEAK_INSTRUCTION[cfg["isa"]]
    copy_nt, copyto = moved / t["c"][0] / 1e9, moved / t["np"][0] / 1e9
    return {"cpu": cpu_info(), "isa": cfg["isa"], "threads": threads, "clock": _CLOCK["name"],
            "numpy": cfg["numpy"],
            "blas": blas_info(), "copy_bytes": a.nbytes,
            "copy_nt_gbs": copy_nt, "copyto_gbs": copyto, "copy_gbs": max(copy_nt, copyto),
            "copyto_s_per_byte": t["np"][0] / a.nbytes,
            "sgemm_gflops": 2 * 1024 ** 3 / t_mm / 1e9,
            "int8_peak_gops": peak, "int8_peak_instruction": instr}


def format_limits(lim: dict) -> str:
    """The limits as two lines (CPU and ISA, then the measured figures)."""
    cpu, blas = lim["cpu"], lim["blas"]
    return (f"CPU {cpu['model_name']} (family {cpu['family']} model {cpu['model']}), ISA path "
            f"{lim['isa']}, {lim['threads']} threads, {lim.get('clock', 'wall')} clock; numpy "
            f"{lim['numpy']} with {blas['library']} {blas['version']} ({blas['threads']} threads, "
            f"{blas['architecture']}; idle BLAS threads: {blas.get('wait', 'unknown')})\n"
            f"limits measured now: copy {lim['copy_nt_gbs']:.1f} GB/s (C streaming) / "
            f"{lim['copyto_gbs']:.1f} GB/s (np.copyto), read+write; numpy sgemm "
            f"{lim['sgemm_gflops']:.0f} GFLOP/s; int8 peak {lim['int8_peak_gops']:.0f} GOP/s "
            f"({lim['int8_peak_instruction']})")


def _limits(limits: dict | None, n_threads: int | None, nbytes: int) -> dict:
    return limits if limits is not None else measure_limits(n_threads, min(nbytes, 1 << 28))


def kernel_row(kernel: str, times: dict, limits: dict, moved: int | None = None,
               ops: float | None = None, **extra) -> dict:
    """One report row: ``times`` maps "kernel" and each baseline name to (best, median) seconds.
    ``moved`` bytes give GB/s and the fraction of the copy limit; ``ops`` give GOP/s and the
    fraction of the int8 peak."""
    best, med = times["kernel"]
    row = {"kernel": kernel, "best_s": best, "median_s": med, **extra}
    if moved is not None:
        row.update(bytes=moved, gbs=moved / best / 1e9,
                   fraction_of_limit=moved / best / 1e9 / limits["copy_gbs"], limit="copy")
    if ops is not None:
        row.update(gops=ops / best / 1e9,
                   fraction_of_limit=ops / best / 1e9 / limits["int8_peak_gops"],
                   limit="int8 peak")
    row["baselines"] = {k: {"best_s": b, "median_s": m, "speedup": b / best}
                        for k, (b, m) in times.items() if k != "kernel"}
    return row


def format_rows(rows: list[dict]) -> str:
    """The rows of a report as a table: time, rate, fraction of the limit, each baseline's
    speedup."""
    table = []
    for r in rows:
        rate = (f"{r['gbs']:.1f} GB/s" if "gbs" in r
                else f"{r['gops']:.0f} GOP/s" if "gops" in r else "")
        frac = f"{r['fraction_of_limit']:.0%} of {r['limit']}" if "limit" in r else ""
        base = "; ".join(f"{k} {1e3 * b['best_s']:.1f} ms -> {b['speedup']:.2f}x"
                         for k, b in r["baselines"].items())
        table.append([r["kernel"], f"{1e3 * r['best_s']:.2f}", f"{1e3 * r['median_s']:.2f}",
                      rate, frac, base])
    return format_table(["kernel", "best ms", "med ms", "rate", "fraction", "baselines (speedup)"],
                        table, indent="  ", rule=False)


def format_report(report: dict) -> str:
    """Limits, rows and notes of any report of this module."""
    lines = [report["title"], format_limits(report["limits"]), format_rows(report["rows"])]
    lines += report.get("notes", [])
    return "\n".join(lines)


def _report(name: str, title: str, limits: dict, rows: list, **extra) -> dict:
    return {"benchmark": name, "title": title, "limits": limits, "rows": rows, **extra}


# ---- gossip --------------------------------------------------------------------------------------

def numpy_neighbor_loop(W_dense: np.ndarray, X: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Gossip as BlueFog/decentralizepy write it: per peer, a weighted sum of neighbours' arrays."""
    for i in range(X.shape[0]):
        acc = W_dense[i, i] * X[i]
        for j in np.flatnonzero(W_dense[i]):
            if j != i:
                acc += W_dense[i, j] * X[j]
        out[i] = acc
    return out


def bench_gossip(n_peers: int = 1000, dim: int = 25_600, repeat: int = 5,
                 n_threads: int | None = None, graphs: str = "ring,exponential",
                 slow_repeat: int = 2, limits: dict | None = None, dense: bool = True) -> dict:
    """ops.gossip (Y = W X) against the NumPy per-neighbour loop, scipy.sparse CSR @ dense, dense
    W @ X (BLAS, with ``dense`` and up to 2,000 peers) and np.copyto of the same array, per
    topology in ``graphs``. Bytes moved: X read once, Y written once."""
    import scipy.sparse as sp

    from decentlearn import ops, topology

    if n_peers < 1 or dim < 1 or repeat < 1:
        raise ValueError("peers, dim and repeat must be >= 1")
    threads = ops.resolve_threads(n_threads)
    X = np.random.default_rng(0).standard_normal((n_peers, dim), dtype=np.float32)
    Y = np.empty_like(X)
    lim = _limits(limits, threads, 2 * X.nbytes)
    rows = []
    for spec in [g.strip() for g in graphs.split(",") if g.strip()]:
        top = topology.make(spec, n_peers)
        W = top.mixing_matrix().astype(np.float32)
        S = sp.csr_matrix(W)
        fns = {"kernel": lambda: ops.gossip(top, X, out=Y, n_threads=threads),
               "np.copyto": lambda: np.copyto(Y, X),
               "numpy neighbour loop": (lambda: numpy_neighbor_loop(W, X, Y), slow_repeat),
               "scipy CSR @ X": (lambda: S @ X, slow_repeat)}
        if dense and n_peers <= 2000:
            fns["dense W @ X"] = (lambda: np.matmul(W, X, out=Y), slow_repeat)
        rows.append(kernel_row(f"gossip {spec}", best_of(fns, repeat), lim, moved=2 * X.nbytes,
                               topology=spec, degree_max=int(top.degree().max()),
                               nnz=int(S.nnz)))
    return _report("gossip", f"gossip Y = W X, {n_peers} peers x {dim} float32 "
                   f"({X.nbytes / 1e6:.0f} MB), {threads} threads", lim, rows,
                   n_peers=n_peers, dim=dim, threads=threads)


# ---- natural compression and dithering -----------------------------------------------------------

def grace_natural(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Natural compression as GRACE writes it in NumPy: int32 view + random 23-bit integers, then
    keep sign and exponent (float32 out, not packed)."""
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


def bench_natural(n: int = 25_000_000, repeat: int = 7, n_threads: int | None = None,
                  s: int = 8, slow_repeat: int = 2, limits: dict | None = None) -> dict:
    """Natural compression encode/decode and natural dithering (s levels) on n float32 values,
    against np.copyto of the same array (x into a float32 buffer), GRACE's NumPy bit trick and
    dithering in NumPy. Bytes moved: natural encode reads 4 and writes 1 per value; dithering
    encode reads x twice (norm, then codes). The encode row also runs ``ops.read_f32`` (one
    read-only pass over x, the C kernel's threads) round-robin with it: natural encode's floor,
    since it must read x (its 1-byte codes are written non-temporally, a quarter of the traffic);
    the report's ``floor`` gives that time and its ratio to np.copyto, the best natural/copy ratio
    this machine allows."""
    from decentlearn import ops

    threads = ops.resolve_threads(n_threads)
    x = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    lim = _limits(limits, threads, 2 * x.nbytes)
    rng = np.random.default_rng(1)
    codes, y, xc = np.empty(n, np.uint8), np.empty(n, np.float32), np.empty(n, np.float32)
    step = [0]

    def enc():
        step[0] += 1
        ops.natural_encode(x, seed=1, step=step[0], out=codes, n_threads=threads)

    copy = lambda: np.copyto(xc, x)  # noqa: E731
    t_enc = best_of({"kernel": enc, "np.copyto": copy,
                     "read x once (C)": lambda: ops.read_f32(x, n_threads=threads),
                     "GRACE NumPy bit trick": (lambda: grace_natural(x, rng), slow_repeat)},
                    repeat)
    rows = [kernel_row("natural encode", t_enc, lim, moved=5 * n)]
    t_read, t_copy = t_enc["read x once (C)"][0], t_enc["np.copyto"][0]
    floor = {"read_s": t_read, "read_gbs": x.nbytes / t_read / 1e9,
             "floor_over_copyto": t_read / t_copy,
             "encode_over_floor": t_enc["kernel"][0] / t_read}
    rows.append(kernel_row("natural decode", best_of({
        "kernel": lambda: ops.natural_decode(codes, out=y, n_threads=threads),
        "np.copyto": copy}, repeat), lim, moved=5 * n))
    rows.append(kernel_row(f"dither encode s={s}", best_of({
        "kernel": lambda: ops.dither_encode(x, s, n_threads=threads), "np.copyto": copy,
        "NumPy dithering": (lambda: numpy_dither(x, s, rng), slow_repeat)}, repeat), lim,
        moved=9 * n))
    norms, dcodes = ops.dither_encode(x, s, n_threads=threads)
    yd = np.empty((1, n), np.float32)
    rows.append(kernel_row(f"dither decode s={s}", best_of({
        "kernel": lambda: ops.dither_decode(norms, dcodes, s, out=yd, n_threads=threads),
        "np.copyto": copy}, repeat), lim, moved=5 * n))
    notes = [f"  natural encode floor: one read of x takes {1e3 * t_read:.2f} ms "
             f"({floor['read_gbs']:.1f} GB/s read-only) = {floor['floor_over_copyto']:.2f}x the "
             f"np.copyto time (the best natural/copy ratio here); encode takes "
             f"{floor['encode_over_floor']:.2f}x the floor"]
    return _report("natural", f"natural compression and dithering, {n:,} float32 values, "
                   f"{threads} threads", lim, rows, n=n, threads=threads, floor=floor,
                   notes=notes)


# ---- top-k, random-k, threshold ------------------------------------------------------------------

def bench_topk(n: int = 25_000_000, ratios: tuple = (0.001, 0.01), repeat: int = 7,
               n_threads: int | None = None, slow_repeat: int = 3,
               limits: dict | None = None) -> dict:
    """Exact top-k of one row of n float32 values against ``np.argpartition(np.abs(x), -k)`` at
    k = ratio n, plus random-k and magnitude thresholding at the same density. Bytes moved: the
    row read once (a read-only kernel can exceed the read+write copy rate)."""
    from decentlearn import ops

    threads = ops.resolve_threads(n_threads)
    x = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    lim = _limits(limits, threads, 2 * x.nbytes)
    rows = []
    for ratio in ratios:
        k = max(1, int(round(ratio * n)))
        rows.append(kernel_row(f"top-k k={k:,} ({ratio:.1%})", best_of({
            "kernel": lambda: ops.topk(x, k, n_threads=threads),
            "np.argpartition(|x|)": (lambda: np.argpartition(np.abs(x), -k), slow_repeat)},
            repeat), lim, moved=x.nbytes, n=n, k=k, ratio=ratio))
        v = float(np.sort(np.abs(x[::97]))[-max(1, len(x[::97]) * k // n)])
        rows.append(kernel_row(f"random-k k={k:,}", best_of(
            {"kernel": lambda: ops.randk(x, k, seed=1, n_threads=threads)}, repeat), lim,
            moved=8 * k, n=n, k=k))
        rows.append(kernel_row(f"threshold |x| >= {v:.3f}", best_of({
            "kernel": lambda: ops.threshold(x, v, n_threads=threads),
            "np.flatnonzero(|x| >= v)": (lambda: np.flatnonzero(np.abs(x) >= v), slow_repeat)},
            repeat), lim, moved=x.nbytes, n=n))
    # Many short rows, as the simulator compresses them (one row per peer or edge and tensor):
    # up to 512 rows of 8,192 values, against np.argpartition along the rows.
    xs = np.random.default_rng(1).standard_normal((max(1, min(512, n // 8192)), 8192),
                                                  dtype=np.float32)
    for ratio in (0.1, 0.01):
        k = max(1, int(round(ratio * xs.shape[1])))
        rows.append(kernel_row(
            f"per-row top-k {xs.shape[0]}x{xs.shape[1]:,} k={k:,}", best_of({
                "kernel": lambda: ops.topk(xs, k, n_threads=threads),
                "np.argpartition(|x|, axis=1)": (
                    lambda: np.argpartition(np.abs(xs), -k, axis=1), slow_repeat)},
                repeat), lim, moved=xs.nbytes, n=xs.size, k=k, ratio=ratio))
    return _report("topk", f"top-k, random-k and threshold on one row of {n:,} float32 values, "
                   f"and top-k of many short rows, {threads} threads", lim, rows, n=n,
                   threads=threads,
                   notes=["  random-k rate counts its output only (it reads x at k positions)"])


# ---- STC -----------------------------------------------------------------------------------------

def bench_stc(n: int = 25_000_000, ratios: tuple = (0.01, 0.001), layouts: tuple = (1,),
              repeat: int = 7, n_threads: int | None = None, limits: dict | None = None) -> dict:
    """Sparse Ternary Compression encode (top-k + ternarize + Golomb/Rice code) against top-k alone
    (its first stage) on ``rows`` x n/rows float32 for each rows in ``layouts``, with the coder's
    measured bits per kept position against Sattler et al.'s closed form."""
    from decentlearn import ops
    from decentlearn._reference import stc as ref
    from decentlearn.compress import stc as stc_mod

    threads = ops.resolve_threads(n_threads)
    rng = np.random.default_rng(0)
    lim = _limits(limits, threads, 8 * n)
    rows = []
    for n_rows in layouts:
        x = rng.standard_normal((n_rows, n // n_rows), dtype=np.float32)
        for ratio in ratios:
            c = stc_mod.STC(ratio)
            dim = x.shape[1]
            k = c.k(dim)
            b = ops.golomb_param(k, dim)
            times = best_of({"kernel": lambda: c.compress(x, n_threads=threads),
                             "top-k alone": lambda: ops.topk(x, k, n_threads=threads)}, repeat)
            p = c.compress(x, n_threads=threads)
            bits = float(p.arrays["nbits"].sum()) / (n_rows * k) - 1  # without the sign bit
            row = kernel_row(f"STC encode {n_rows}x{dim:,} p={ratio}", times, lim,
                             moved=x.nbytes, rows=n_rows, dim=dim, ratio=ratio, k=k, golomb_b=b,
                             bits_per_position=bits,
                             closed_form_bits=float(ref.expected_bits_per_position(k / dim, b)),
                             wire_fraction_of_float32=p.nbytes / x.nbytes)
            row["stc_over_topk"] = times["kernel"][0] / times["top-k alone"][0]
            rows.append(row)
    notes = [f"  {r['kernel']}: {r['stc_over_topk']:.2f}x the top-k time; Golomb b="
             f"{r['golomb_b']}: {r['bits_per_position']:.3f} bits/position (closed form "
             f"{r['closed_form_bits']:.3f}); wire {r['wire_fraction_of_float32']:.2%} of float32"
             for r in rows]
    return _report("stc", f"STC encode vs top-k alone, {n:,} float32 values, {threads} threads",
                   lim, rows, n=n, threads=threads, notes=notes)


# ---- quantizers ----------------------------------------------------------------------------------

def np_qsgd(x, s, rng):
    """QSGD with s levels in NumPy (8-bit codes: level << 1 | sign)."""
    norm = np.sqrt(np.einsum("ij,ij->i", x, x, dtype=np.float64)).astype(np.float32)
    t = np.abs(x) * (s / np.maximum(norm, 1e-30))[:, None].astype(np.float32)
    level = np.minimum(np.floor(t + rng.random(x.shape, dtype=np.float32)), s).astype(np.uint8)
    return norm, (level << 1) | (x < 0)


def np_bucket(x, bits, bucket, rng):
    """Bucketed min/max stochastic quantization in NumPy (dim a multiple of bucket)."""
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
    """Scaled sign in NumPy: mean |x| per row and packed sign bits."""
    scale = np.abs(x).mean(axis=1, dtype=np.float64).astype(np.float32)
    return scale, np.packbits(x < 0, axis=1, bitorder="little")


def np_int8(x, rng):
    """Per-row absmax int8 with stochastic rounding in NumPy."""
    scale = np.abs(x).max(axis=1) / np.float32(127)
    t = x * (1 / np.where(scale > 0, scale, 1))[:, None]
    q = np.clip(np.floor(t + rng.random(x.shape, dtype=np.float32)), -127, 127).astype(np.int8)
    return scale, q


def bench_quant(n_peers: int = 1000, dim: int = 25_600, repeat: int = 5,
                n_threads: int | None = None, slow_repeat: int = 2,
                limits: dict | None = None) -> dict:
    """The quantizer encoders (QSGD, bucketed 4/8-bit, scaled sign, int8) on a (peers, dim)
    float32 matrix against the NumPy quantizer of each and np.copyto of the same matrix. Bytes
    moved: x read once, the codes written once (dim a multiple of 512 for the bucket baseline)."""
    from decentlearn import ops

    threads = ops.resolve_threads(n_threads)
    x = np.random.default_rng(0).standard_normal((n_peers, dim), dtype=np.float32)
    n, d = x.shape
    lim = _limits(limits, threads, 2 * x.nbytes)
    rng = np.random.default_rng(1)
    xc = np.empty_like(x)
    nb = -(-d // 512)
    cases = [
        ("qsgd:127", lambda: ops.qsgd_encode(x, 127, n_threads=threads),
         lambda: np_qsgd(x, 127, rng), 4 * n + n * d),
        ("bucket:4:512", lambda: ops.bucket_encode(x, 4, 512, n_threads=threads),
         lambda: np_bucket(x, 4, 512, rng), 8 * n * nb + n * ((d + 1) // 2)),
        ("bucket:8:512", lambda: ops.bucket_encode(x, 8, 512, n_threads=threads),
         lambda: np_bucket(x, 8, 512, rng), 8 * n * nb + n * d),
        ("sign", lambda: ops.sign_encode(x, n_threads=threads), lambda: np_sign(x, rng),
         4 * n + n * ((d + 7) // 8)),
        ("int8", lambda: ops.int8_encode(x, n_threads=threads), lambda: np_int8(x, rng),
         4 * n + n * d),
    ]
    rows = []
    for spec, c_fn, np_fn, out_bytes in cases:
        if spec.startswith("bucket") and d % 512:
            continue
        rows.append(kernel_row(f"{spec} encode", best_of({
            "kernel": c_fn, "np.copyto": lambda: np.copyto(xc, x),
            "NumPy": (np_fn, slow_repeat)}, repeat), lim, moved=x.nbytes + out_bytes,
            encoder=spec))
    return _report("quant", f"quantizer encoders on {n} x {d} float32 ({n * d / 1e6:.1f}M "
                   f"values), {threads} threads", lim, rows, n_peers=n, dim=d, threads=threads)


# ---- compress (natural + top-k + STC, the `decentlearn bench compress` command) -----------------

def bench_compress(n: int = 25_000_000, repeat: int = 5, n_threads: int | None = None,
                   limits: dict | None = None) -> dict:
    """bench_natural, bench_topk and bench_stc on n values with one set of limits."""
    from decentlearn import ops

    lim = _limits(limits, ops.resolve_threads(n_threads), 8 * n)
    parts = [bench_natural(n, repeat, n_threads, limits=lim),
             bench_topk(n, repeat=repeat, n_threads=n_threads, limits=lim),
             bench_stc(n, repeat=repeat, n_threads=n_threads, limits=lim)]
    rows = [r for p in parts for r in p["rows"]]
    notes = [s for p in parts for s in p.get("notes", [])]
    return _report("compress", f"compression kernels on {n:,} float32 values, "
                   f"{parts[0]['threads']} threads", lim, rows, n=n, notes=notes)


# ---- int8 GEMM -----------------------------------------------------------------------------------

#: (name, m, k, n) of bench_gemm: a large square product, a mid-size one and the three products
#: of an MLP layer 784 -> 128 at batch 512 (forward, dX, dW).
GEMM_SHAPES = (("1024^3", 1024, 1024, 1024), ("256x784x256", 256, 784, 256),
               ("mlp fwd XW", 512, 784, 128), ("mlp bwd dYW^T", 512, 128, 784),
               ("mlp bwd X^TdY", 784, 512, 128))


def default_gemm_paths() -> tuple[str, ...]:
    """The ISA paths bench_gemm compares: the active one, and avx512vnni beside amx."""
    from decentlearn import ops

    act = ops.active_isa()
    return ("avx512vnni", "amx") if act == "amx" else (act,)


def bench_gemm_paths(paths, shape=GEMM_SHAPES[0], repeat: int = 15,
                     n_threads: int | None = None) -> dict:
    """The int8 GEMM of one shape on each ISA path of ``paths``, in one process: per path its own
    int8 peak (measure_int8_peak) and the best time of ``pipeline`` (absmax + quantize of A, the
    fused dequantizing gemm_s8_f32 against a B packed once for the path) and ``kernel`` (gemm_s8
    alone), all paths and numpy sgemm run round-robin so that a shared machine slows them alike;
    returns per path GOP/s, the fraction of its peak and the ratio to the first path."""
    from decentlearn import ops

    threads = ops.resolve_threads(n_threads)
    name, m, k, n = shape
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((k, n), dtype=np.float32)
    y, y2 = ops.empty_aligned((m, n), np.float32), np.empty((m, n), np.float32)
    xq, c = np.empty((m, k), np.int8), ops.empty_aligned((m, n), np.int32)
    w_scale = ops.absmax_scale(w, axis=1)
    wq = ops.quantize_s8(w, w_scale, axis=1)
    peaks, packed, fns = {}, {}, {}
    for p in paths:
        with ops.using_isa(p):
            peaks[p] = measure_int8_peak(threads)
            packed[p] = ops.pack_b_s8(wq, n_threads=threads)

        def pipeline(p=p):
            with ops.using_isa(p):
                s = ops.absmax_scale(x, n_threads=threads)
                ops.quantize_s8(x, s, out=xq, n_threads=threads)
                ops.gemm_s8_f32(xq, packed[p], s, w_scale, out=y, n_threads=threads)

        def kernel(p=p):
            with ops.using_isa(p):
                ops.gemm_s8(xq, packed[p], out=c, n_threads=threads)

        fns[f"{p} pipeline"], fns[f"{p} kernel"] = pipeline, kernel
    fns["numpy sgemm"] = lambda: np.matmul(x, w, out=y2)
    times = best_of(fns, repeat)
    work = 2.0 * m * n * k
    rows = []
    for p in paths:
        row = {"isa": p, "shape": name, "peak_gops": peaks[p],
               "peak_instruction": INT8_PEAK_INSTRUCTION[p]}
        for v in ("pipeline", "kernel"):
            g = work / times[f"{p} {v}"][0] / 1e9
            row[f"{v}_gops"], row[f"{v}_fraction_of_peak"] = g, g / peaks[p]
            row[f"{v}_over_first"] = times[f"{paths[0]} {v}"][0] / times[f"{p} {v}"][0]
            row[f"{v}_over_numpy"] = times["numpy sgemm"][0] / times[f"{p} {v}"][0]
        rows.append(row)
    return {"threads": threads, "shape": name, "repeat": repeat,
            "numpy_gflops": work / times["numpy sgemm"][0] / 1e9, "paths": rows}


def format_gemm_paths(res: dict) -> list[str]:
    """bench_gemm_paths as report lines."""
    first = res["paths"][0]["isa"]
    out = [f"per ISA path, {res['shape']}, {res['threads']} threads (numpy sgemm "
           f"{res['numpy_gflops']:.0f} GFLOP/s, same process):"]
    for r in res["paths"]:
        out.append(f"  {r['isa']:>10}: peak {r['peak_gops']:.0f} GOP/s ({r['peak_instruction']}); "
                   f"pipeline {r['pipeline_gops']:.0f} GOP/s = "
                   f"{r['pipeline_fraction_of_peak']:.0%} of its peak, "
                   f"{r['pipeline_over_first']:.2f}x {first}, {r['pipeline_over_numpy']:.2f}x "
                   f"numpy; kernel {r['kernel_gops']:.0f} GOP/s = "
                   f"{r['kernel_fraction_of_peak']:.0%}, {r['kernel_over_first']:.2f}x {first}")
    return out


def bench_gemm(shapes=GEMM_SHAPES, repeat: int = 15, n_threads: int | None = None,
               limits: dict | None = None, paths=None) -> dict:
    """The int8 GEMM against NumPy float32 matmul on each (name, m, k, n) of ``shapes``.

    Rows per shape: ``pipeline`` (absmax + quantize + pack of A, fused dequantizing gemm_s8_f32
    against a B quantized and packed once), ``pipeline+packB`` (B quantized and packed inside
    every call too), ``kernel`` (gemm_s8 alone, int32 out) and ``kernel_f32`` (the fused
    dequantizing kernel alone), each against ``np.matmul`` float32 (the baseline, run
    round-robin with it). GOP/s counts 2 m n k, as a fraction of the measured int8 peak. Then
    the first shape on each ISA path of ``paths`` (default_gemm_paths(): avx512vnni and amx
    where amx is active), each against its own peak (bench_gemm_paths)."""
    from decentlearn import ops

    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    threads = ops.resolve_threads(n_threads)
    lim = _limits(limits, threads, 1 << 26)
    rng = np.random.default_rng(0)
    rows = []
    for name, m, k, n in shapes:
        x = rng.standard_normal((m, k), dtype=np.float32)
        w = rng.standard_normal((k, n), dtype=np.float32)
        y, y2 = ops.empty_aligned((m, n), np.float32), np.empty((m, n), np.float32)
        w_scale = ops.absmax_scale(w, axis=1)
        pb = ops.pack_b_s8(ops.quantize_s8(w, w_scale, axis=1), n_threads=threads)
        xq = np.empty((m, k), np.int8)
        c = ops.empty_aligned((m, n), np.int32)  # as ops allocates its outputs
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

        numpy_mm = lambda x=x, w=w, y2=y2: np.matmul(x, w, out=y2)  # noqa: E731
        variants = [("pipeline", pipeline), ("pipeline+packB", pipeline_pack_b),
                    ("kernel", lambda xq=xq, pb=pb, c=c: ops.gemm_s8(xq, pb, out=c,
                                                                     n_threads=threads)),
                    ("kernel_f32", lambda xq=xq, pb=pb, s0=s0, w_scale=w_scale, y=y:
                     ops.gemm_s8_f32(xq, pb, s0, w_scale, out=y, n_threads=threads))]
        for vname, fn in variants:
            times = best_of({"kernel": fn, "numpy sgemm": numpy_mm}, repeat)
            row = kernel_row(f"{name} {vname}", times, lim, ops=2.0 * m * n * k, shape=name,
                             m=m, k=k, n=n, variant=vname)
            row["numpy_gflops"] = 2.0 * m * n * k / times["numpy sgemm"][0] / 1e9
            rows.append(row)
    paths = default_gemm_paths() if paths is None else tuple(paths)
    per_path = bench_gemm_paths(paths, shapes[0], repeat, threads) if shapes else None
    return _report("gemm", f"int8 GEMM vs numpy float32 matmul, {threads} threads, best of "
                   f"{repeat}", lim, rows, threads=threads, repeat=repeat, per_path=per_path,
                   notes=format_gemm_paths(per_path) if per_path else [])


# ---- everything, with the acceptance figures -----------------------------------------------------

def _row(report: dict, prefix: str) -> dict:
    return next(r for r in report["rows"] if r["kernel"].startswith(prefix))


def acceptance(reports: dict) -> list[dict]:
    """The figures issues 8 and 24 ask of the kernels, from bench_all's reports: each with its
    value, target and whether it is met on this run."""
    out = []

    def add(what, value, target, ok, detail):
        out.append({"figure": what, "value": value, "target": target,
                    "met": None if ok is None else bool(ok), "detail": detail})

    topk, gossip = reports["topk"], reports["gossip"]
    for r in topk["rows"]:
        if r["kernel"].startswith("top-k"):
            s = r["baselines"]["np.argpartition(|x|)"]["speedup"]
            add(f"{r['kernel']} vs np.argpartition", s, ">= 20x", s >= 20,
                f"{1e3 * r['best_s']:.2f} ms vs "
                f"{1e3 * r['baselines']['np.argpartition(|x|)']['best_s']:.1f} ms")
    for r in reports["stc"]["rows"]:
        add(f"{r['kernel']} / top-k", r["stc_over_topk"], "<= 1.3x", r["stc_over_topk"] <= 1.3,
            f"{1e3 * r['best_s']:.2f} ms vs {1e3 * r['baselines']['top-k alone']['best_s']:.2f} ms")
    g = _row(gossip, "gossip exponential")
    s = g["baselines"]["numpy neighbour loop"]["speedup"]
    add("exponential gossip vs the per-neighbour loop", s, ">= 10x", s >= 10,
        f"{1e3 * g['best_s']:.1f} ms vs "
        f"{1e3 * g['baselines']['numpy neighbour loop']['best_s']:.1f} ms; "
        f"{g['fraction_of_limit']:.0%} of copy bandwidth")
    f = g["fraction_of_limit"]
    add("exponential gossip: fraction of copy bandwidth", f, ">= 50%", f >= 0.5,
        f"{g['gbs']:.1f} GB/s (X read once, Y written once) vs copy "
        f"{gossip['limits']['copy_gbs']:.1f} GB/s; np.copyto of X "
        f"{1e3 * g['baselines']['np.copyto']['best_s']:.1f} ms in the same rounds")
    nat = _row(reports["natural"], "natural encode")
    t = 1 / nat["baselines"]["np.copyto"]["speedup"]
    fl = reports["natural"].get("floor")
    add("natural encode time / np.copyto time", t, "<= 0.45x", t <= 0.45,
        f"{1e3 * nat['best_s']:.2f} ms vs {1e3 * nat['baselines']['np.copyto']['best_s']:.2f} ms; "
        f"{nat['fraction_of_limit']:.0%} of copy bandwidth"
        + (f"; read-only floor {fl['floor_over_copyto']:.2f}x copy" if fl else ""))
    if fl:
        t = fl["encode_over_floor"]
        add("natural encode time / its read-only floor", t, "<= 1.35x", t <= 1.35,
            f"{1e3 * nat['best_s']:.2f} ms vs one read of x (C, same threads) "
            f"{1e3 * fl['read_s']:.2f} ms, run round-robin with it")
    for r in reports["quant"]["rows"]:
        add(f"{r['kernel']}: fraction of copy bandwidth", r["fraction_of_limit"], "toward 100%",
            None, f"{r['gbs']:.1f} GB/s; {1 / r['baselines']['np.copyto']['speedup']:.2f}x the "
            f"np.copyto time")
    gm = next(r for r in reports["gemm"]["rows"] if r["variant"] == "pipeline")
    s = gm["baselines"]["numpy sgemm"]["speedup"]
    need = 3.0 if reports["gemm"]["limits"]["isa"] in ("avx512vnni", "amx") else 1.5
    add(f"gemm_s8 with quantize+pack of A ({gm['shape']}) vs numpy sgemm", s, f">= {need}x",
        s >= need,
        f"{gm['gops']:.0f} GOP/s = {gm['fraction_of_limit']:.0%} of the int8 peak; numpy "
        f"{gm['numpy_gflops']:.0f} GFLOP/s")
    pp = reports["gemm"].get("per_path")
    if pp and [r["isa"] for r in pp["paths"]] == ["avx512vnni", "amx"]:
        amx = pp["paths"][1]
        r = amx["pipeline_over_first"]
        add(f"gemm_s8 with quantize+pack of A ({pp['shape']}): amx / avx512vnni", r, ">= 4x",
            r >= 4, f"{amx['pipeline_gops']:.0f} vs {pp['paths'][0]['pipeline_gops']:.0f} GOP/s;"
            f" {amx['pipeline_fraction_of_peak']:.0%} / "
            f"{pp['paths'][0]['pipeline_fraction_of_peak']:.0%} of each path's peak")
    return out


def format_acceptance(items: list[dict]) -> str:
    return format_table(["figure", "value", "target", "met", "detail"],
                        [[i["figure"], f"{i['value']:.2f}" + ("" if "fraction" in i["figure"]
                                                               else "x"),
                          i["target"], {True: "yes", False: "NO", None: "-"}[i["met"]],
                          i["detail"]] for i in items], indent="  ", rule=False)


def bench_all(repeat: int = 5, n_threads: int | None = None, n: int = 25_000_000,
              n_peers: int = 1000, dim: int = 25_600, gemm_shapes=GEMM_SHAPES[:1],
              progress: Callable | None = None) -> dict:
    """Every benchmark once with one set of limits measured first; the reports and the
    acceptance figures. ``progress(name, report)`` is called after each benchmark."""
    from decentlearn import ops

    threads = ops.resolve_threads(n_threads)
    lim = measure_limits(threads)
    reports: dict = {}
    plan = [("gossip", lambda: bench_gossip(n_peers, dim, repeat, threads, limits=lim,
                                            dense=False)),
            ("natural", lambda: bench_natural(n, repeat, threads, limits=lim)),
            ("topk", lambda: bench_topk(n, repeat=repeat, n_threads=threads, limits=lim)),
            ("stc", lambda: bench_stc(n, repeat=repeat, n_threads=threads, limits=lim)),
            ("quant", lambda: bench_quant(n_peers, dim, repeat, threads, limits=lim)),
            ("gemm", lambda: bench_gemm(gemm_shapes, max(repeat, 7), threads, limits=lim))]
    for name, fn in plan:
        reports[name] = fn()
        if progress is not None:
            progress(name, reports[name])
    return {"benchmark": "all", "limits": lim, "reports": reports,
            "acceptance": acceptance(reports)}
