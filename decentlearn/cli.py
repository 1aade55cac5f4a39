"""The ``decentlearn`` command: ``run`` (the main job), ``bench``, ``download`` and ``info``.

A user's mistake (a bad flag, a bad value, a missing data directory) is reported on one line on
stderr with exit code 2 and no traceback. Progress goes to stderr through tqdm; results go to the
run directory (metrics.csv, summary.json, config.toml, curves.png) and a table on stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path

from decentlearn import __version__

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


class UsageError(Exception):
    """A mistake of the user's, reported in one line with exit code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports errors in one line (no usage dump) with exit code 2."""

    def error(self, message):
        raise UsageError(f"{self.prog}: error: {message}")


def _run_fields() -> dict[str, dataclasses.Field]:
    from decentlearn.sim import RunConfig
    return {f.name: f for f in dataclasses.fields(RunConfig)}


def _optional_int(text: str) -> int | None:
    return None if text.lower() in ("none", "auto") else int(text)


def _add_run_parser(sub) -> None:
    p = sub.add_parser("run", help="simulate decentralized training and save metrics and plots",
                       description="Simulate n peers training over a graph. Flags override the "
                                   "--config file, which overrides the defaults.")
    a = p.add_argument
    a("--config", metavar="FILE.toml", help="TOML file with any of the options below")
    a("--dataset", help="digits (embedded, default), fashion-mnist, mnist, cifar10, "
                        "synthetic:ALPHA:BETA")
    a("--data-dir", help="directory holding the dataset files (else $DECENTLEARN_DATA, "
                         "Debian's /usr/share/datasets, ~/.cache/decentlearn)")
    a("--peers", type=int, help="number of peers (default 16)")
    a("--topology", help="ring, torus, exponential, one-peer-exponential, complete, star, "
                         "hypercube, random-regular:D, small-world:K:P, edges:FILE")
    a("--weights", help="mixing weights: metropolis (default), max-degree, uniform")
    a("--partition", help="iid, shards:K, dirichlet:ALPHA, classes:C, natural "
                          "(default dirichlet:0.1)")
    a("--model", help="linear, mlp, mlp:H1,H2, cnn, cnn:gn")
    a("--precision", choices=["fp32", "int8"],
      help="arithmetic of the layers' matrix products: fp32 (default) or int8 (int8 GEMMs, "
           "stochastic rounding of gradients, float32 master weights)")
    a("--cocofl", metavar="SPEC",
      help="CoCoFL partial freezing: FRACTION:K[,FRACTION:K...] — a fraction of the peers "
           "(drawn from --seed) freezes its first K layers with parameters, which run int8 and "
           "are not trained; K=drop: those peers do not train at all (baseline)")
    a("--algorithm", help="dpsgd (D-PSGD; with --compress: compressed differences, DCD-PSGD) "
                           "or choco (CHOCO-SGD)")
    a("--clique-averaging", action=argparse.BooleanOptionalAction, default=None,
      help="D-Cliques Clique Averaging: each peer's gradient is replaced by its clique's average "
           "before the optimizer step (needs --topology d-cliques[:SIZE[:INTER]])")
    a("--mixing", help="gossip (one exchange of W per round, default) or finite-time (the "
                       "exact average each round through W's minimal polynomial: K exchanges)")
    a("--compress", help="what peers send: none (float32, default), natural, dither:S, topk:R, "
                         "randk:R, stc:R, qsgd:S, bucket:BITS:SIZE, sign, int8")
    a("--gamma", type=float, help="CHOCO consensus step size in (0, 1] (default 1)")
    a("--variant", help="atc (adapt then combine, default) or cta (combine then adapt)")
    a("--rounds", type=int, help="communication rounds")
    a("--local-steps", type=int, help="SGD steps per peer between communications")
    a("--batch-size", type=int, help="minibatch size per peer and step")
    a("--lr", type=float, help="learning rate")
    a("--momentum", type=float, help="SGD momentum")
    a("--nesterov", action=argparse.BooleanOptionalAction, default=None, help="Nesterov momentum")
    a("--weight-decay", type=float, help="L2 weight decay")
    a("--seed", type=int, help="seed of every random choice in the run")
    a("--threads", type=_optional_int, help="threads for the C kernels (default: all allowed)")
    a("--eval-every", type=int, help="evaluate every N rounds")
    a("--eval-samples", type=_optional_int, help="evaluate on N test samples (default all)")
    a("--out", help="output directory (default runs/<timestamp>)")
    a("--quiet", action="store_true", help="no progress bar")


def _resolve_run_config(args) -> tuple:
    from decentlearn.sim import RunConfig
    fields = _run_fields()
    values: dict = {}
    if args.config:
        path = Path(args.config)
        if not path.is_file():
            raise UsageError(f"--config {args.config}: no such file")
        try:
            with open(path, "rb") as f:
                loaded = tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise UsageError(f"--config {args.config}: not valid TOML ({e})") from None
        loaded = loaded.get("run", loaded)
        for key, value in loaded.items():
            name = key.replace("-", "_")
            if name not in fields:
                raise UsageError(f"--config {args.config}: unknown option {key!r}; expected one "
                                 f"of {', '.join(sorted(fields))}")
            values[name] = value
    for name in fields:
        value = getattr(args, name, None)
        if value is not None:
            values[name] = value
    try:
        return RunConfig(**values)
    except (TypeError, ValueError) as e:
        raise UsageError(f"run: {e}") from None


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))  # a JSON string is a valid TOML basic string


def write_config_toml(config, path: str | os.PathLike) -> None:
    """Writes the resolved run configuration so that ``--config`` can replay it."""
    lines = ["# decentlearn run configuration (replay with: decentlearn run --config THIS_FILE)"]
    for key, value in config.to_dict().items():
        lines.append(f"# {key} = (default: unset)" if value is None
                     else f"{key} = {_toml_value(value)}")
    Path(path).write_text("\n".join(lines) + "\n")


def _format_table(summary: dict) -> str:
    rows = [
        ("test accuracy, peers mean", f"{summary['test_accuracy_mean']:.4f}"),
        ("test accuracy, peers min / max",
         f"{summary['test_accuracy_min']:.4f} / {summary['test_accuracy_max']:.4f}"),
        ("test accuracy, average model", f"{summary['test_accuracy_avg_model']:.4f}"),
        ("consensus distance", f"{summary['consensus_distance']:.4g}"),
        ("bytes sent, total", _human_bytes(summary["bytes_sent_total"])),
        ("bytes sent, busiest peer", _human_bytes(summary["bytes_sent_max_peer"])),
        ("spectral gap of W", "not computed (n > 2048)" if summary["spectral_gap"] is None
         else f"{summary['spectral_gap']:.4f}"),
        ("precision", str(summary.get("precision", "fp32"))),
        ("rounds", str(summary["rounds"])),
        ("wall time", f"{summary['wall_seconds']:.1f} s"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)


def _human_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    exp = min(int(math.log(n, 1024)), 4)
    return f"{n / 1024 ** exp:.2f} {'BKMGT'[exp]}iB ({n:,} B)"


def cmd_run(args) -> int:
    from decentlearn.metrics import write_csv
    from decentlearn.plot import plot_curves
    from decentlearn.sim import Callback, Simulator

    config = _resolve_run_config(args)
    out = Path(args.out or Path("runs") / time.strftime("%Y%m%d-%H%M%S"))
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a directory")
    try:
        sim = Simulator(config)
    except FileNotFoundError as e:
        raise UsageError(f"run: {e}") from None
    except (TypeError, ValueError) as e:
        raise UsageError(f"run: {e}") from None
    out.mkdir(parents=True, exist_ok=True)

    callbacks = []
    if not args.quiet:
        from tqdm import tqdm

        class Progress(Callback):
            def __init__(self):
                self.bar = tqdm(total=config.rounds, desc="rounds", unit="round",
                                dynamic_ncols=True, mininterval=0.5)

            def on_round_end(self, sim, t):
                self.bar.update(1)

            def on_eval(self, sim, row):
                self.bar.set_postfix(acc=f"{row['test_accuracy_mean']:.3f}",
                                     consensus=f"{row['consensus_distance']:.3g}", refresh=False)

        progress = Progress()
        callbacks.append(progress)
    try:
        result = sim.run(callbacks)
    finally:
        if callbacks:
            progress.bar.close()
    write_csv(result.history, out / "metrics.csv")
    (out / "summary.json").write_text(json.dumps(result.summary, indent=2) + "\n")
    write_config_toml(config, out / "config.toml")
    title = (f"{config.dataset}, {config.peers} peers, {config.topology}, {config.partition}, "
             f"{config.algorithm}" + (f", {config.compress}" if config.compress != "none" else ""))
    plotted = plot_curves(result.history, out / "curves.png", title)
    print(f"decentlearn {__version__}: {title}, {config.rounds} rounds")
    print(_format_table(result.summary))
    print(f"  results in {out}/ (metrics.csv, summary.json, config.toml"
          + (", curves.png)" if plotted else "; install matplotlib for curves.png)"))
    return 0


def cmd_bench(args) -> int:
    from decentlearn import bench
    if args.what == "gossip":
        report = bench.bench_gossip(n_peers=args.peers, dim=args.dim, repeat=args.repeat,
                                    n_threads=args.threads, graphs=args.graphs)
        print(bench.format_report(report))
    elif args.what == "gemm":
        shapes = bench.GEMM_SHAPES
        if args.shapes != "default":
            try:
                shapes = [(s, *(int(v) for v in s.split("x"))) for s in args.shapes.split(",")]
                if any(len(s) != 4 or min(s[1:]) < 1 for s in shapes):
                    raise ValueError
            except ValueError:
                raise UsageError(f"bench gemm: --shapes must be MxKxN[,MxKxN...] with positive "
                                 f"sizes, got {args.shapes!r}") from None
        report = bench.bench_gemm(shapes, repeat=args.repeat, n_threads=args.threads)
        print(bench.format_gemm_report(report))
    else:
        report = bench.bench_compress(n=args.n, repeat=args.repeat, n_threads=args.threads)
        print(bench.format_compress_report(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


def cmd_download(args) -> int:
    from tqdm import tqdm

    from decentlearn.data import download, download_dir

    bars: dict[str, tqdm] = {}

    def progress(filename: str, done: int, total: int | None) -> None:
        bar = bars.get(filename)
        if bar is None:
            bar = bars[filename] = tqdm(total=total, desc=filename, unit="B", unit_scale=True)
        bar.update(done - bar.n)

    try:
        path = download(args.name, download_dir(args.name, args.data_dir), progress=progress)
    finally:
        for bar in bars.values():
            bar.close()
    print(f"{args.name}: files in {path}")
    return 0


def cmd_info(args) -> int:
    from decentlearn import show_config
    show_config()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="decentlearn",
                     description="Simulate decentralized learning with C kernels.")
    parser.add_argument("--version", action="version", version=f"decentlearn {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    _add_run_parser(sub)
    b = sub.add_parser("bench", help="measure the C kernels against NumPy/SciPy baselines")
    b.add_argument("what", nargs="?", default="gossip", choices=["gossip", "compress", "gemm"])
    b.add_argument("--n", type=int, default=25_000_000, help="values (bench compress)")
    b.add_argument("--peers", type=int, default=1000)
    b.add_argument("--dim", type=int, default=25_600)
    b.add_argument("--repeat", type=int, default=5)
    b.add_argument("--threads", type=_optional_int, default=None)
    b.add_argument("--shapes", default="default",
                   help="bench gemm: MxKxN[,MxKxN...] (default: 1024^3, 256x784x256 and the "
                        "MLP layer's three products)")
    b.add_argument("--graphs", default="ring,exponential",
                   help="comma-separated topology specs")
    b.add_argument("--json", help="also write the report to this JSON file")
    d = sub.add_parser("download", help="download a dataset (mnist, fashion-mnist, cifar10)")
    d.add_argument("name", choices=["mnist", "fashion-mnist", "cifar10"])
    d.add_argument("--data-dir")
    sub.add_parser("info", help="print the build configuration (show_config)")
    return parser


COMMANDS = {"run": cmd_run, "bench": cmd_bench, "download": cmd_download, "info": cmd_info}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    try:
        args = parser.parse_args(argv or ["run"])
        if args.command is None:
            args = parser.parse_args(["run", *argv])
        return COMMANDS[args.command](args)
    except UsageError as e:
        print(e, file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError, TypeError) as e:
        print(f"decentlearn {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("decentlearn: interrupted", file=sys.stderr)
        return 130
