"""``decentlearn bench``: the benchmarks of :mod:`decentlearn.experiments.bench`, printed and
optionally saved as JSON."""

from __future__ import annotations

from decentlearn.cli.parser import UsageError


def cmd_bench(args) -> int:
    from decentlearn.experiments import bench
    shapes = bench.GEMM_SHAPES if args.what == "gemm" else bench.GEMM_SHAPES[:1]
    if args.what in ("gemm", "all"):
        if args.shapes != "default":
            try:
                shapes = [(s, *(int(v) for v in s.split("x"))) for s in args.shapes.split(",")]
                if any(len(s) != 4 or min(s[1:]) < 1 for s in shapes):
                    raise ValueError
            except ValueError:
                raise UsageError(f"bench {args.what}: --shapes must be MxKxN[,MxKxN...] with "
                                 f"positive sizes, got {args.shapes!r}") from None
    for name in ("n", "peers", "dim", "repeat"):
        if getattr(args, name) < 1:
            raise UsageError(f"bench: --{name} must be >= 1, got {getattr(args, name)}")
    t, rep = args.threads, args.repeat
    if args.cpu_time and t != 1:
        raise UsageError("bench: --cpu-time needs --threads 1 (CPU time of one thread)")
    with bench.clock("cpu" if args.cpu_time else "wall"):
        report = _bench_report(bench, args, shapes, t, rep)
    if args.json:
        bench.save_json(report, args.what, args.json)
    return 0


def _bench_report(bench, args, shapes, t: int | None, rep: int) -> dict:
    if args.what == "all":
        report = bench.bench_all(rep, t, args.n, args.peers, args.dim, shapes,
                                 progress=lambda name, r: print(bench.format_report(r) + "\n",
                                                                flush=True))
        print("acceptance figures (issues 8 and 24), same process:")
        print(bench.format_acceptance(report["acceptance"]))
    else:
        report = {
            "gossip": lambda: bench.bench_gossip(args.peers, args.dim, rep, t, args.graphs),
            "compress": lambda: bench.bench_compress(args.n, rep, t),
            "natural": lambda: bench.bench_natural(args.n, rep, t),
            "topk": lambda: bench.bench_topk(args.n, repeat=rep, n_threads=t),
            "stc": lambda: bench.bench_stc(args.n, repeat=rep, n_threads=t),
            "quant": lambda: bench.bench_quant(args.peers, args.dim, rep, t),
            "gemm": lambda: bench.bench_gemm(shapes, rep, t),
        }[args.what]()
        print(bench.format_report(report))
    return report
