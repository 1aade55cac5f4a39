"""The argument parser of every ``decentlearn`` command.

The names a spec flag accepts (``--algorithm``, ``--topology``, ``--compress``, ``--model``,
``--dataset``, ``--partition``, ``--optimizer``) and their defaults are read from the registries
and from ``RunConfig`` when the parser is built, so the help lists exactly what the library
accepts. The options of single algorithms have their own help group
(:func:`add_algorithm_options`).
"""

from __future__ import annotations

import argparse
import re

from decentlearn import __version__


class UsageError(Exception):
    """A mistake of the user's, reported in one line with exit code 2 (``error_line``)."""


#: How every error line of the command starts (a usage mistake, a diverged run, a failed MPI job).
ERROR_PREFIX = "decentlearn: error: "

#: ... and every warning line.
WARNING_PREFIX = "decentlearn: warning: "

#: The exit codes of ``decentlearn`` (docs/getting-started.md); an interrupted run exits with
#: 128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM).
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_DIVERGED, EXIT_MPI = 0, 1, 2, 3, 4


def error_line(message: object) -> str:
    """The one line reporting ``message``: ``decentlearn: error: MESSAGE``, its whitespace
    (newlines of a wrapped message) folded into single spaces."""
    text = " ".join(str(message).split())
    m = re.match(r"decentlearn(?: [a-z-]+)?: error: ", text)  # already prefixed by its raiser
    return ERROR_PREFIX + (text[m.end():] if m else text)


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help layout, wrapping lines at spaces only: a spec name
    (``one-peer-exponential``) is never cut at a hyphen."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        import textwrap
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        """Descriptions and epilogs: paragraphs are filled, indented lines (examples) kept."""
        import textwrap
        out = []
        for para in text.split("\n\n"):
            lines = para.splitlines()
            if any(line.startswith("  ") for line in lines):
                out.append("\n".join(indent + line for line in lines))
            else:
                out.append(textwrap.fill(" ".join(para.split()), width, initial_indent=indent,
                                         subsequent_indent=indent, break_on_hyphens=False))
        return "\n\n".join(out)


class Parser(argparse.ArgumentParser):
    """argparse that reports errors in one line (no usage dump) with exit code 2, takes no
    abbreviations (``--peer`` is not ``--peers``) and suggests the closest option or choice."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def _all_options(self) -> list[str]:
        options = []
        for action in self._actions:
            options += [o for o in action.option_strings if o.startswith("--")]
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    options += sub._all_options()
        return sorted(set(options))

    def error(self, message):
        from decentlearn.registry import closest
        if message.startswith("unrecognized arguments:"):
            options = self._all_options()
            for token in message.split(":", 1)[1].split():
                guess = (closest(token.split("=", 1)[0], options)
                         if token.startswith("--") else None)
                if guess is not None:
                    message += f" (did you mean {guess}?)"
                    break
        else:
            m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
            if m:
                guess = closest(m.group(1), re.findall(r"'([^']*)'", m.group(2)))
                if guess is not None:
                    message += f"; did you mean {guess!r}?"
        command = self.prog.partition(" ")[2]  # "decentlearn run" -> "run"
        raise UsageError(f"{command}: {message}" if command else message)


def optional_int(text: str) -> int | None:
    """An integer flag that also takes ``none`` or ``auto`` (None: the default)."""
    return None if text.lower() in ("none", "auto") else int(text)


def registered_names() -> dict[str, list[str]]:
    """What each spec flag of ``run`` accepts, read from the registries: flag -> names (spec
    forms for data sets and partitions)."""
    from decentlearn import algorithms, compress, optim, topology
    from decentlearn.data import available_datasets, available_partitions
    from decentlearn.nn import available_models

    # pushsum and epidemic register themselves in decentlearn.network: until the registries are
    # complete whatever the import order (issue 20), it is imported before algorithms.available().
    import decentlearn.network  # noqa: F401

    return {"algorithm": algorithms.available(), "topology": topology.available(),
            "compress": compress.available(), "model": list(available_models()),
            "dataset": list(available_datasets()), "partition": list(available_partitions()),
            "optimizer": list(optim.OPTIMIZERS)}


def _defaults() -> dict:
    import dataclasses

    from decentlearn.sim import RunConfig
    return {f.name: f.default for f in dataclasses.fields(RunConfig)}


def _option_type(f) -> type:
    """The argparse type of an algorithm option: its default's type, else its annotation's."""
    if f.default is not None and not isinstance(f.default, bool):
        return type(f.default)
    text = str(f.type)
    return next((t for t in (int, float) if t.__name__ in text.split(" | ")), str)


def add_algorithm_options(parser: argparse.ArgumentParser) -> list[argparse._ArgumentGroup]:
    """The flags of the algorithms' own options, generated from each registered algorithm's
    ``Options``: one help group per set of algorithms that share them ("choco options",
    "fedavg, fedhisyn, stc-fl options"), with each option's help and default."""
    from decentlearn import algorithms
    groups: dict[tuple[str, ...], argparse._ArgumentGroup] = {}
    for option, (f, names) in algorithms.option_fields().items():
        key = tuple(names)
        if key not in groups:
            groups[key] = parser.add_argument_group(f"{', '.join(names)} options")
        default = "unset" if f.default is None else f.default
        groups[key].add_argument("--" + option.replace("_", "-"), type=_option_type(f),
                                 metavar=f.metadata.get("metavar"),
                                 help=f"{f.metadata.get('help', '')} (default {default})")
    return list(groups.values())


#: The examples at the end of ``run --help``.
RUN_EXAMPLES = """examples:
  decentlearn run                                      # 16 peers on a ring, digits, D-PSGD
  decentlearn run --topology exponential --partition iid --rounds 300
  decentlearn run --algorithm choco --compress topk:0.01 --gamma 0.05
  decentlearn run --algorithm fedavg --participation 0.5 --local-steps 5
  decentlearn run --network wan --async                # AD-PSGD on a simulated WAN
  decentlearn run --config runs/RUN/config.toml --seed 1   # replay a run, one change
  decentlearn run --checkpoint-every 50 --out runs/a && decentlearn run --resume runs/a
  mpiexec -n 4 decentlearn run --backend mpi --peers 64

exit status: 0 done, 1 failed (an internal error), 2 a usage mistake (one line,
"decentlearn: error: ..."), 3 training diverged (metrics.csv and summary.json kept), 4 an MPI
job ended because a rank died or stopped answering, 128 + N stopped by signal N (130 Ctrl-C,
143 SIGTERM). Docs: docs/getting-started.md, docs/simulator.md."""


def add_run_parser(sub) -> argparse.ArgumentParser:
    """``run``'s flags in help groups (data, model, algorithm and each algorithm's options,
    training, topology, network, evaluation, output, MPI), each with its default, the names from
    the registries, and examples in the epilog."""
    from decentlearn.topology import available_weights
    p = sub.add_parser("run", help="simulate decentralized training and save metrics and plots",
                       description="Simulate n peers training over a graph. Flags override the "
                                   "--config file, which overrides the defaults.",
                       epilog=RUN_EXAMPLES)
    names = registered_names()
    default = _defaults()

    def listing(flag: str) -> str:
        return ", ".join(names[flag])

    def d(name: str) -> str:
        """``(default VALUE)`` of RunConfig's field ``name``."""
        value = default[name]
        if isinstance(value, bool):
            value = "on" if value else "off"
        return f"(default {value})"

    p.add_argument("--config", metavar="FILE.toml",
                   help="TOML file with any of the options below (keys as the flags without "
                        "--, e.g. lr = 0.1; docs/experiments.md)")

    a = p.add_argument_group("data").add_argument
    a("--dataset", help=f"{listing('dataset')} (default {default['dataset']}, embedded)")
    a("--data-dir", help="directory holding the dataset files (default $DECENTLEARN_DATA, "
                         "Debian's /usr/share/datasets, ~/.cache/decentlearn)")
    a("--partition", help=f"how the training set is split over the peers: {listing('partition')} "
                          f"{d('partition')}")

    a = p.add_argument_group("model").add_argument
    a("--model", help=f"{listing('model')}, with arguments: mlp:H1,H2, cnn:gn {d('model')}; "
                      "with the torch extra: torch:resnet20, torch:vgg11, torch:gn-lenet, "
                      "torch:char-lstm, torch:PKG.MODULE:FACTORY")
    a("--torch-mode", metavar="MODE",
      help="torch models: how peers are split into forward/backward passes: batched (one "
           "vmapped pass over all peers), grouped:G (passes of G peers; 1 = a plain pass per "
           "peer) or auto (the fastest, timed on the first batch; see docs/torch.md) "
           f"{d('torch_mode')}")
    a("--device", metavar="DEVICE",
      help="torch models: where the forward/backward passes run: cpu, cuda or cuda:N (the "
           "matrix and the batch are copied there each step, gradients back; optimizer and "
           "gossip stay on the host; on MPI, cuda gives rank r the GPU r %% count). Default: "
           "torch views of the host matrix (docs/torch.md, GPU)")
    a("--precision", choices=["fp32", "int8"],
      help="arithmetic of the layers' matrix products: fp32 or int8 (int8 GEMMs, stochastic "
           f"rounding of gradients, float32 master weights) {d('precision')}")
    a("--cocofl", metavar="SPEC",
      help="CoCoFL partial freezing: FRACTION:K[,FRACTION:K...] — a fraction of the peers "
           "(drawn from --seed) freezes its first K layers with parameters, which run int8 and "
           "are not trained; K=drop: those peers do not train at all (default: none)")

    a = p.add_argument_group("algorithm").add_argument
    a("--algorithm", help=f"{listing('algorithm')} {d('algorithm')}; dpsgd with --compress "
                          "sends compressed differences, DCD-PSGD; docs/algorithms.md")
    a("--compress", help=f"what peers send: {listing('compress')}, with arguments after ':' "
                         f"(docs/compression.md; default {default['compress']}: float32); "
                         "ef:SPEC adds error feedback")
    a("--error-feedback", action="store_true",
      help="wrap the --compress compressor in error feedback (same as --compress ef:SPEC)")
    a("--mixing", help="gossip (one exchange of W per round), finite-time (the exact average "
                       "each round through W's minimal polynomial: K exchanges) or "
                       "nonlinear[:ALPHA[:ETA]] (NGO nonlinear gossip: x_i += ETA sum_j w_ij "
                       "sign(x_j-x_i)|x_j-x_i|^ALPHA, default 0.5:0.5) " + d("mixing"))
    a("--variant", help=f"atc (adapt then combine) or cta (combine then adapt) {d('variant')}")
    a("--clique-averaging", action=argparse.BooleanOptionalAction, default=None,
      help="D-Cliques Clique Averaging: each peer's gradient is replaced by its clique's average "
           "before the optimizer step (needs --topology d-cliques[:SIZE[:INTER]]) "
           + d("clique_averaging"))
    add_algorithm_options(p)

    a = p.add_argument_group("training").add_argument
    a("--rounds", type=int, help=f"communication rounds {d('rounds')}")
    a("--local-steps", type=int,
      help=f"SGD steps per peer between communications {d('local_steps')}")
    a("--batch-size", type=int, help=f"minibatch size per peer and step {d('batch_size')}")
    a("--lr", type=float, help=f"learning rate {d('lr')}")
    a("--optimizer", help=f"{listing('optimizer')} {d('optimizer')}; --momentum is beta1 for "
                          "adam/adamw/lamb (docs/algorithms.md)")
    a("--momentum", type=float, help=f"SGD momentum (beta1 of adam/adamw/lamb) {d('momentum')}")
    a("--nesterov", action=argparse.BooleanOptionalAction, default=None,
      help=f"Nesterov momentum {d('nesterov')}")
    a("--weight-decay", type=float, help="weight decay (L2 for sgd/adam/lars; decoupled for "
                                         f"adamw/lamb) {d('weight_decay')}")
    a("--beta2", type=float, help=f"adam, adamw, lamb: second-moment decay in [0, 1) "
                                  f"{d('beta2')}")
    a("--eps", type=float, help="adam/adamw/lamb/lars denominator epsilon (default 1e-8 adam, "
                                "1e-6 lamb, 1e-9 lars)")
    a("--trust-coefficient", type=float,
      help=f"lars: trust coefficient eta {d('trust_coefficient')}")
    a("--lr-schedule", help="learning rate per round: constant, step:EVERY:GAMMA, "
                            f"cosine[:FLOOR] {d('lr_schedule')}")
    a("--warmup", type=int, help=f"rounds of linear learning-rate warmup {d('warmup')}")
    a("--lr-scaling", help="scale --lr with the global batch B = peers x batch size: "
                           "linear:REF (lr B/REF, Goyal et al.) or sqrt:REF (default: none)")
    a("--seed", type=int, help=f"seed of every random choice in the run {d('seed')}")
    a("--threads", type=optional_int, help="threads for the C kernels and for torch models' "
                                            "intra-op pool (default: all allowed)")

    a = p.add_argument_group("topology").add_argument
    a("--peers", type=int, help=f"number of peers {d('peers')}")
    a("--topology", help=f"communication graph: {listing('topology')}, with arguments after "
                         f"':' (docs/topology.md) {d('topology')}")
    a("--weights", help=f"mixing weights: {', '.join(available_weights())} (clique: equal "
                        f"weights within cliques, d-cliques) {d('weights')}")

    a = p.add_argument_group("network").add_argument
    a("--network", metavar="PRESET|FILE.toml",
      help="simulate time on a network: datacenter, wan, edge, mobile, or a TOML file "
           "(docs/network.md); adds sim_seconds to the metrics (default: none)")
    a("--async", dest="asynchronous", action="store_true", default=None,
      help="event-driven asynchronous gossip (dpsgd -> AD-PSGD); needs --network")

    a = p.add_argument_group("evaluation").add_argument
    a("--eval-every", type=int, help=f"evaluate every N rounds {d('eval_every')}")
    a("--eval-samples", type=optional_int,
      help="evaluate the average model on N test samples (default: all)")
    a("--eval-peer-samples", type=optional_int, help="evaluate each peer on a fixed stratified "
      "subsample of N test samples (default: sized to keep evaluation near 10%% of the run)")

    a = p.add_argument_group("output").add_argument
    a("--out", help="output directory (default runs/<timestamp>, never an existing one)")
    a("--overwrite", action="store_true",
      help="let --out name a directory that already holds a run (its files are replaced)")
    a("--checkpoint-every", type=int, metavar="N",
      help="write RUN_DIR/checkpoint.npz every N rounds, after the last round, on SIGINT at a "
           "round boundary, and on SIGTERM after the round in progress (docs/checkpoints.md; "
           "default: none)")
    a("--resume", metavar="RUN_DIR",
      help="continue the run in RUN_DIR from its checkpoint, with its config.toml (only "
           "--rounds, --threads, --data-dir, --checkpoint-every and --quiet may be given)")
    a("--quiet", action="store_true", help="no progress bar")
    a("--log-to", action="append", choices=["tensorboard", "mlflow"], metavar="DASHBOARD",
      help="also send the metrics to tensorboard (RUN_DIR/tensorboard) or mlflow (MLflow's "
           "tracking URI: $MLFLOW_TRACKING_URI, else ./mlflow.db); repeatable; needs the extra "
           "of that name (docs/experiments.md)")
    a("--dry-run", action="store_true",
      help="print the memory the run needs (per peer and in total, by part) and whether it "
           "fits, then exit without running (docs/experiments.md)")

    a = p.add_argument_group("MPI").add_argument
    a("--backend", choices=["inprocess", "mpi"], default=None,
      help="inprocess: every peer in this process; mpi: real processes, started with "
           "mpiexec -n RANKS decentlearn run --backend mpi ... (docs/mpi.md) "
           "(default inprocess)")
    a("--mpi-timeout", type=float, default=None, metavar="SECONDS",
      help="with --backend mpi: seconds a rank waits for another before ending the job with an "
           "error (default 60)")
    return p


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``decentlearn`` and all its subcommands."""
    parser = Parser(prog="decentlearn",
                    description="Simulate decentralized learning with C kernels.")
    parser.add_argument("--version", action="version", version=f"decentlearn {__version__}")
    parser.add_argument("--import", metavar="MODULE", dest="imports", action="append",
                        help="import MODULE first (repeatable; before the command): its own "
                             "algorithms, topologies, compressors, models or data sets register "
                             "themselves and the command lists them "
                             "(docs/write-your-own-algorithm.md)")
    sub = parser.add_subparsers(dest="command", parser_class=Parser)
    add_run_parser(sub)
    b = sub.add_parser("bench", help="measure the C kernels against NumPy/SciPy baselines")
    b.add_argument("what", nargs="?", default="gossip",
                   choices=["gossip", "compress", "natural", "topk", "stc", "quant", "gemm", "all"],
                   help="which kernels (all: every benchmark and the acceptance figures)")
    b.add_argument("--n", type=int, default=25_000_000,
                   help="values (compress, natural, topk, stc)")
    b.add_argument("--peers", type=int, default=1000,
                   help="rows of the state matrix (gossip, quant, all)")
    b.add_argument("--dim", type=int, default=25_600,
                   help="values per row (gossip, quant, all)")
    b.add_argument("--repeat", type=int, default=5,
                   help="timed repetitions per case; the best one is reported")
    b.add_argument("--threads", type=optional_int, default=None,
                   help="threads for the C kernels (default: all allowed)")
    b.add_argument("--shapes", default="default",
                   help="bench gemm/all: MxKxN[,MxKxN...] (default: 1024^3, 256x784x256 and "
                        "the MLP layer's three products for gemm, 1024^3 for all)")
    b.add_argument("--graphs", default="ring,exponential",
                   help="comma-separated topology specs")
    b.add_argument("--json", help="also write the report to this JSON file")
    b.add_argument("--cpu-time", action="store_true",
                   help="time with CPU seconds instead of wall time (with --threads 1: a loaded "
                        "machine's ratios; BLAS limited to one thread too)")
    d = sub.add_parser("download", help="download a dataset (mnist, fashion-mnist, cifar10)")
    d.add_argument("name", choices=["mnist", "fashion-mnist", "cifar10"],
                   help="the dataset to fetch (checked against its published checksums)")
    d.add_argument("--data-dir", help="directory to download into (else $DECENTLEARN_DATA/NAME or "
                                      "~/.cache/decentlearn/NAME)")
    d.add_argument("--mirror", metavar="URL",
                   help="base URL to fetch the files from instead of the official ones")
    sub.add_parser("info", help="print the build configuration (show_config)")
    pl = sub.add_parser("plot", help="overlay several runs' curves in one PNG",
                        description="Overlay runs (accuracy vs round, vs bytes sent, vs simulated "
                                    "time when present; consensus distance) in one PNG, with a "
                                    "legend built from the config fields that differ.")
    pl.add_argument("runs", nargs="+", metavar="RUN_DIR",
                    help="run directories, or folders of runs (a sweep's --out: all its runs)")
    pl.add_argument("--out", default="runs.png", help="PNG to write (default runs.png)")
    pl.add_argument("--title", help="figure title (default: what the runs share)")
    cp = sub.add_parser("compare", help="print a table of several runs' summaries")
    cp.add_argument("runs", nargs="+", metavar="RUN_DIR",
                    help="run directories, or folders of runs (a sweep's --out: all its runs)")
    cp.add_argument("--format", choices=["table", "csv", "json"], default="table",
                    help="output format (default: an aligned table; csv and json: raw numbers, "
                         "one column per summary key, empty/null when absent)")
    sw = sub.add_parser("sweep", help="run a grid of experiments from a TOML file",
                        description="Run every combination of the list-valued options of "
                                    "CONFIG's [run] table (one run directory each, resumable), "
                                    "then summarize mean ± std over seeds.")
    sw.add_argument("config", metavar="CONFIG.toml",
                    help="the [run] table that run --config reads, where options may be lists")
    sw.add_argument("--out", required=True, help="directory of the sweep's runs and summary")
    sw.add_argument("--jobs", type=int, default=1,
                    help="runs in parallel processes (default 1; each gets cores/jobs threads)")
    sw.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser
