"""The ``decentlearn`` command: ``run`` (the main job), ``sweep`` (grids of runs), ``plot`` and
``compare`` (several runs), ``bench``, ``download`` and ``info``.

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
import re
import signal
import sys
import warnings
from pathlib import Path

from decentlearn import __version__

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


class UsageError(Exception):
    """A mistake of the user's, reported in one line with exit code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports errors in one line (no usage dump) with exit code 2, takes no
    abbreviations (``--peer`` is not ``--peers``) and suggests the closest option or choice."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
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
        raise UsageError(f"{self.prog}: error: {message}")


def _run_fields() -> dict[str, dataclasses.Field]:
    """RunConfig's fields and every algorithm's options (flags and config-file keys)."""
    from decentlearn.runner.config import config_keys
    return config_keys()


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
    a("--model", help="linear, mlp, mlp:H1,H2, cnn, cnn:gn; with the torch extra: torch:resnet20, "
                      "torch:vgg11, torch:gn-lenet, torch:char-lstm, torch:PKG.MODULE:FACTORY")
    a("--torch-mode", metavar="MODE",
      help="torch models: how peers are split into forward/backward passes: batched (default, "
           "one vmapped pass over all peers), grouped:G (passes of G peers; 1 = a plain pass "
           "per peer) or auto (the fastest, timed on the first batch; see docs/torch.md)")
    a("--precision", choices=["fp32", "int8"],
      help="arithmetic of the layers' matrix products: fp32 (default) or int8 (int8 GEMMs, "
           "stochastic rounding of gradients, float32 master weights)")
    a("--cocofl", metavar="SPEC",
      help="CoCoFL partial freezing: FRACTION:K[,FRACTION:K...] — a fraction of the peers "
           "(drawn from --seed) freezes its first K layers with parameters, which run int8 and "
           "are not trained; K=drop: those peers do not train at all (baseline)")
    a("--algorithm", help="dpsgd (D-PSGD; with --compress: compressed differences, DCD-PSGD), "
                           "choco (CHOCO-SGD), dsgt, d2, dacfl, ngc, compngc, skewscout, "
                           "allreduce, fedavg, stc-fl, fedhisyn (docs/algorithms.md)")
    a("--clique-averaging", action=argparse.BooleanOptionalAction, default=None,
      help="D-Cliques Clique Averaging: each peer's gradient is replaced by its clique's average "
           "before the optimizer step (needs --topology d-cliques[:SIZE[:INTER]])")
    a("--mixing", help="gossip (one exchange of W per round, default), finite-time (the "
                       "exact average each round through W's minimal polynomial: K exchanges) "
                       "or nonlinear[:ALPHA[:ETA]] (NGO nonlinear gossip: x_i += ETA sum_j w_ij "
                       "sign(x_j-x_i)|x_j-x_i|^ALPHA, default 0.5:0.5)")
    a("--compress", help="what peers send: none (float32, default), natural, dither:S, topk:R, "
                         "randk:R, stc:R, qsgd:S, bucket:BITS:SIZE, sign, int8; ef:SPEC adds "
                         "error feedback")
    a("--error-feedback", action="store_true",
      help="wrap the --compress compressor in error feedback (same as --compress ef:SPEC)")
    a("--gamma", type=float, help="CHOCO consensus step size in (0, 1]; required with a "
                                  "compressor (no default fits all), 1 without")
    a("--variant", help="atc (adapt then combine, default) or cta (combine then adapt)")
    a("--participation", type=float,
      help="fedavg, stc-fl, fedhisyn: fraction of clients sampled per round, in (0, 1] (default 1)")
    a("--server-compress", help="stc-fl: downstream (server) compressor spec (default: --compress)")
    a("--categories", type=int, help="fedhisyn: speed categories (default 4)")
    a("--speeds", help="fedhisyn: device speeds, lognormal:SIGMA (default lognormal:1.0) or "
                       "uniform:LO:HI")
    a("--hops-max", type=int, help="fedhisyn: most ring hops of a category per round (default 8)")
    a("--ngc-alpha", type=float,
      help="ngc, compngc: weight of data-variant vs model-variant cross-gradients, in [0, 1] "
           "(default 0.5)")
    a("--skew-target", type=float,
      help="skewscout: target accuracy loss between partitions, in (0, 1] (default 0.05)")
    a("--skew-probe-every", type=int, help="skewscout: rounds between probes (default 20)")
    a("--skew-period-max", type=int,
      help="skewscout: longest communication period in rounds (default 16)")
    a("--rounds", type=int, help="communication rounds")
    a("--local-steps", type=int, help="SGD steps per peer between communications")
    a("--batch-size", type=int, help="minibatch size per peer and step")
    a("--lr", type=float, help="learning rate")
    a("--momentum", type=float, help="SGD momentum")
    a("--nesterov", action=argparse.BooleanOptionalAction, default=None, help="Nesterov momentum")
    a("--weight-decay", type=float, help="weight decay (L2 for sgd/adam/lars; decoupled for "
                                         "adamw/lamb)")
    a("--optimizer", help="sgd (default), adam, adamw, lars, lamb; --momentum is beta1 for "
                          "adam/adamw/lamb (docs/algorithms.md)")
    a("--beta2", type=float, help="adam, adamw, lamb: second-moment decay in [0, 1) "
                                  "(default 0.999)")
    a("--eps", type=float, help="adam/adamw/lamb/lars denominator epsilon (default 1e-8 adam, "
                                "1e-6 lamb, 1e-9 lars)")
    a("--trust-coefficient", type=float, help="lars: trust coefficient eta (default 0.001)")
    a("--lr-schedule", help="learning rate per round: constant (default), step:EVERY:GAMMA, "
                            "cosine[:FLOOR]")
    a("--warmup", type=int, help="rounds of linear learning-rate warmup (default 0)")
    a("--lr-scaling", help="scale --lr with the global batch B = peers x batch size: "
                           "linear:REF (lr B/REF, Goyal et al.) or sqrt:REF")
    a("--seed", type=int, help="seed of every random choice in the run")
    a("--threads", type=_optional_int, help="threads for the C kernels and for torch models' "
                                             "intra-op pool (default: all allowed)")
    a("--eval-every", type=int, help="evaluate every N rounds")
    a("--eval-samples", type=_optional_int, help="evaluate on N test samples (default all)")
    a("--eval-peer-samples", type=_optional_int, help="evaluate each peer on a fixed stratified "
      "subsample of N test samples (default: sized to keep evaluation near 10%% of the run)")
    a("--network", metavar="PRESET|FILE.toml",
      help="simulate time on a network: datacenter, wan, edge, mobile, or a TOML file "
           "(docs/network.md); adds sim_seconds to the metrics")
    a("--async", dest="asynchronous", action="store_true", default=None,
      help="event-driven asynchronous gossip (dpsgd -> AD-PSGD); needs --network")
    a("--checkpoint-every", type=int, metavar="N",
      help="write RUN_DIR/checkpoint.npz every N rounds, after the last round, on SIGINT at a "
           "round boundary, and on SIGTERM after the round in progress (docs/checkpoints.md)")
    a("--resume", metavar="RUN_DIR",
      help="continue the run in RUN_DIR from its checkpoint, with its config.toml (only "
           "--rounds, --threads, --data-dir, --checkpoint-every and --quiet may be given)")
    a("--out", help="output directory (default runs/<timestamp>, never an existing one)")
    a("--overwrite", action="store_true",
      help="let --out name a directory that already holds a run (its files are replaced)")
    a("--quiet", action="store_true", help="no progress bar")
    a("--dry-run", action="store_true",
      help="print the memory the run needs (per peer and in total, by part) and whether it "
           "fits, then exit without running (docs/experiments.md)")
    a("--backend", choices=["inprocess", "mpi"], default=None,
      help="inprocess (default): every peer in this process; mpi: real processes, started with "
           "mpiexec -n RANKS decentlearn run --backend mpi ... (docs/mpi.md)")
    a("--mpi-timeout", type=float, default=None, metavar="SECONDS",
      help="with --backend mpi: seconds a rank waits for another before ending the job with an "
           "error (default 60)")


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
        for key, value in _config_options(loaded, args.config).items():
            name = key.replace("-", "_")
            if name == "options" and isinstance(value, dict):
                values.update(value)
                continue
            if name not in fields:
                from decentlearn.registry import closest
                guess = closest(name, fields)
                hint = f"; did you mean {guess!r}?" if guess else ";"
                raise UsageError(f"--config {args.config}: unknown option {key!r}{hint} expected "
                                 f"one of {', '.join(sorted(fields))}")
            values[name] = value
    for name in fields:
        value = getattr(args, name, None)
        if value is not None:
            values[name] = value
    if getattr(args, "error_feedback", False):
        spec = values.get("compress", "none")
        if spec == "none":
            raise UsageError("run: --error-feedback needs a compressor: pass --compress SPEC")
        if not str(spec).startswith("ef:"):
            values["compress"] = f"ef:{spec}"
    try:
        return RunConfig.from_dict(values)
    except (TypeError, ValueError) as e:
        raise UsageError(f"run: {e}") from None


def _config_options(loaded: dict, path: str) -> dict:
    """The options of a config file: its ``[run]`` table, or its top-level keys when it has no
    table. Top-level keys beside ``[run]`` and any other table are errors naming the key."""
    tables = [k for k, v in loaded.items() if isinstance(v, dict)]
    unknown = [k for k in tables if k != "run"]
    if unknown:
        raise UsageError(f"--config {path}: unknown section [{unknown[0]}]; options go at the top "
                         "level or in a [run] table")
    if "run" not in loaded:
        return loaded
    outside = [k for k in loaded if k != "run"]
    if outside:
        raise UsageError(f"--config {path}: key {outside[0]!r} is outside the [run] table; put "
                         "every option in [run] (or use no table at all)")
    return loaded["run"]


def _format_table(summary: dict) -> str:
    rows = [
        ("test accuracy, peers mean", f"{summary['test_accuracy_mean']:.4f}"),
        ("test accuracy, peers min / max",
         f"{summary['test_accuracy_min']:.4f} / {summary['test_accuracy_max']:.4f}"),
        ("test accuracy, average model", f"{summary['test_accuracy_avg_model']:.4f}"),
        ("consensus distance", f"{summary['consensus_distance']:.4g}"),
        ("bytes sent, total", _human_bytes(summary["bytes_sent_total"])),
        ("bytes sent, busiest peer", _human_bytes(summary["bytes_sent_max_peer"])),
        ("spectral gap of W", "not computed (random graphs, n > 2048)"
         if summary["spectral_gap"] is None
         else f"{summary['spectral_gap']:.4g}"),
        ("precision", str(summary.get("precision", "fp32"))),
        ("rounds", str(summary["rounds"])),
        ("wall time", f"{summary['wall_seconds']:.1f} s"),
    ]
    if summary.get("sim_seconds") is not None:  # --network: the simulated clock
        rows.append(("simulated time", f"{summary['sim_seconds']:.4g} s"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)


def _human_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    exp = min(int(math.log(n, 1024)), 4)
    return f"{n / 1024 ** exp:.2f} {'BKMGT'[exp]}iB ({n:,} B)"


def _check_out(args) -> Path | None:
    """--out checked before the (slow) simulator is built; None means a fresh runs/<timestamp>."""
    from decentlearn.results import RUN_FILES, is_run_dir
    if not args.out:
        return None
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a directory")
    if not args.overwrite and is_run_dir(out):
        held = ", ".join(n for n in RUN_FILES if (out / n).exists())
        raise UsageError(f"--out {out}: already holds a run ({held}); choose another directory "
                         "or pass --overwrite")
    return out


def _check_model(config) -> None:
    from decentlearn.nn import available_models
    from decentlearn.registry import unknown_message
    name = config.model.partition(":")[0]
    if name == "torch":  # decentlearn.torch needs the torch extra: say how to install it
        try:
            import decentlearn.torch  # noqa: F401
        except ImportError as e:
            raise UsageError(f"run: --model {config.model}: {' '.join(str(e).split())}") from None
        return
    if name not in available_models():
        raise UsageError("run: " + unknown_message("model", name, available_models(),
                                                   spec=config.model))


def _check_memory(config, dry_run: bool) -> bool:
    """--dry-run: prints the memory estimate and returns True. Otherwise refuses (UsageError
    with the figure) a run that would not fit in the available memory; returns False."""
    from decentlearn.runner import memory
    from decentlearn.plot import human_bytes
    try:
        if dry_run:
            est = memory.estimate(config)
            room, source = memory.available()
            print(f"decentlearn {__version__}: memory of {config.peers} peers, model "
                  f"{config.model} ({est.dim:,} parameters), {config.algorithm}, "
                  f"{config.dataset}")
            print(est.table())
            print(f"  state arrays: {est.note}")
            fits = est.total <= memory.HEADROOM * room
            print(f"  available: {human_bytes(room)} ({source}); "
                  + ("fits" if fits else f"does NOT fit (a run may plan "
                     f"{memory.HEADROOM:.0%} of it)"))
            if not fits:
                raise MemoryError("see above")
            return True
        memory.check(config)
    except MemoryError as e:
        raise UsageError(f"run: refused: {e}") from None
    except (FileNotFoundError, ValueError) as e:  # the data set, the model spec
        raise UsageError(f"run: {e}") from None
    return False


def _build(config):
    """The Simulator, with its setup warnings printed one line each on stderr."""
    from decentlearn.sim import Simulator
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            sim = Simulator(config)
        except (FileNotFoundError, TypeError, ValueError) as e:
            raise UsageError(f"run: {e}") from None
    for w in caught:
        print(f"decentlearn run: warning: {str(w.message).splitlines()[0]}", file=sys.stderr)
    return sim


#: Flags ``--resume`` accepts besides the run directory (the rest comes from its config.toml).
_RESUME_FLAGS = ("rounds", "threads", "data_dir", "checkpoint_every", "quiet", "resume")


def _check_extension(args, config, toml: Path, run_dir: Path) -> None:
    """A cosine learning-rate schedule depends on the planned number of rounds: extending such a
    run with --rounds would not give a run of the new length, so it is refused (UsageError)."""
    if args.rounds is None or not config.lr_schedule.startswith("cosine"):
        return
    with open(toml, "rb") as f:
        planned = tomllib.load(f).get("rounds", config.rounds)
    if planned != config.rounds:
        raise UsageError(f"--resume {run_dir}: lr_schedule {config.lr_schedule!r} depends on "
                         f"the number of rounds: the run planned {planned}, so it cannot be "
                         f"extended to {config.rounds} (the first rounds used the old schedule)")


def _read_resume(args, extra_flags: tuple[str, ...] = ()) -> tuple:
    """(run directory, config, checkpoint state, metadata) of ``--resume RUN_DIR``: only the
    flags of ``_RESUME_FLAGS`` (and ``extra_flags``) may be given; the run directory's
    config.toml and checkpoint are read and checked (UsageError, one line). Shared by the
    in-process and the MPI backends."""
    from decentlearn.runner import checkpoint as ck
    run_dir = Path(args.resume)
    allowed = (*_RESUME_FLAGS, *extra_flags, "command")
    given = [k for k, v in vars(args).items() if k not in allowed and v not in (None, False)]
    if given:
        names = ["--rounds", "--threads", "--data-dir", "--checkpoint-every", "--quiet",
                 *("--" + f.replace("_", "-") for f in extra_flags if f != "backend")]
        raise UsageError(f"run: --resume continues the run configured in {run_dir}/config.toml; "
                         f"only {', '.join(names[:-1])} and {names[-1]} may be given, got "
                         f"--{given[0].replace('_', '-')}")
    toml = run_dir / "config.toml"
    if not toml.is_file():
        raise UsageError(f"--resume {run_dir}: not a run directory (no config.toml)")
    args.config = str(toml)
    config = _resolve_run_config(args)
    try:
        state, meta = ck.read(run_dir / ck.FILENAME, fingerprint=ck.fingerprint(config),
                              n_peers=config.peers)
    except ck.CheckpointError as e:
        raise UsageError(f"--resume {run_dir}: {e}") from None
    _check_extension(args, config, toml, run_dir)
    done = meta["round"]
    if not isinstance(done, int) or done >= config.rounds:
        raise UsageError(f"--resume {run_dir}: the checkpoint has all {done} of {config.rounds} "
                         f"rounds done; pass --rounds N with N > {done} to extend the run")
    return run_dir, config, state, meta


def _resume(args) -> tuple:
    """(config, run directory, restored simulator, checkpoint_every) of ``--resume RUN_DIR``."""
    from decentlearn.runner import checkpoint as ck
    run_dir, config, state, meta = _read_resume(args)
    _check_model(config)
    _check_memory(config, dry_run=False)  # refuses a run that no longer fits
    sim = _build(config)
    try:
        if meta["dim"] != sim.model.dim:
            raise ck.CheckpointError(f"checkpoint has dim={meta['dim']}, this run has "
                                     f"dim={sim.model.dim}: it belongs to another run")
        sim.load_state_dict(state)
    except ck.CheckpointError as e:
        raise UsageError(f"--resume {run_dir}: {e}") from None
    every = args.checkpoint_every
    if every is None:
        every = (meta.get("extra") or {}).get("checkpoint_every")
    return config, run_dir, sim, every


def cmd_run(args) -> int:
    if args.backend == "mpi":  # real processes: decentlearn/mpi/cli.py
        from decentlearn.mpi.cli import cmd_run_mpi
        return cmd_run_mpi(args)
    if args.mpi_timeout is not None:
        raise UsageError("run: --mpi-timeout needs --backend mpi")
    from decentlearn.runner.checkpoint import FILENAME, CheckpointCallback, CheckpointError
    from decentlearn.results import (OutputError, RunWriter, new_run_dir, prepare_run_dir,
                                     signals_as_interrupts)
    from decentlearn.sim import Callback

    if args.checkpoint_every is not None and args.checkpoint_every < 1:
        raise UsageError(f"run: --checkpoint-every must be an integer >= 1, got "
                         f"{args.checkpoint_every}")
    if args.resume:
        config, out, sim, every = _resume(args)
    else:
        config = _resolve_run_config(args)
        out = _check_out(args)
        _check_model(config)
        if _check_memory(config, args.dry_run):
            return 0
        sim = _build(config)
        every = args.checkpoint_every
        try:
            out = new_run_dir("runs") if out is None else prepare_run_dir(
                out, overwrite=args.overwrite)
        except FileExistsError as e:  # another process took it since _check_out
            raise UsageError(f"--out {e.strerror}") from None

    callbacks = []
    saver = None
    reason = getattr(sim.algorithm, "checkpoint_unsupported", None)
    if every is not None and reason:
        raise UsageError(f"run: --checkpoint-every: algorithm {config.algorithm!r} cannot be "
                         f"checkpointed: {reason}")
    if every is not None:
        saver = CheckpointCallback(out / FILENAME, int(every))
        if args.resume:
            saver.saved_round = sim.next_round  # the checkpoint resumed from
        callbacks.append(saver)
    bar = None
    if not args.quiet:
        from tqdm import tqdm

        bar = tqdm(total=config.rounds, initial=sim.next_round, desc="rounds", unit="round",
                   dynamic_ncols=True, mininterval=0.5)

        class Progress(Callback):
            def on_round_end(self, sim, t):
                bar.update(1)

            def on_eval(self, sim, row):
                bar.set_postfix(acc=f"{row['test_accuracy_mean']:.3f}",
                                consensus=f"{row['consensus_distance']:.3g}", refresh=False)

        callbacks.append(Progress())
    writer = RunWriter(out, config)
    if args.resume:
        writer.resume(sim.history, sim.next_round)
    # SIGTERM: with checkpoints, the round in progress ends and is saved before the run stops
    # (a second SIGTERM stops at once); without, it stops at once.
    from decentlearn.runner.checkpoint import stop_at_round_end
    stopping = (stop_at_round_end(saver) if saver is not None
                else signals_as_interrupts((signal.SIGTERM,)))
    try:
        with stopping, writer:
            result = sim.run([writer, *callbacks])
            writer.finish(result.summary)
    except KeyboardInterrupt as e:
        if bar is not None:
            bar.close()
        signum = getattr(e, "signum", signal.SIGINT)
        saved = ""
        if saver is not None:
            if sim.at_boundary and saver.saved_round != sim.next_round:
                try:  # the state between two rounds is whole: keep it
                    with signals_as_interrupts((signal.SIGTERM,)):
                        saver.save(sim)
                except (OutputError, CheckpointError, KeyboardInterrupt):
                    pass
            if saver.saved_round is not None:
                saved = (f"; checkpoint of round {saver.saved_round} in {out}/{FILENAME} "
                         f"(continue with: decentlearn run --resume {out})")
        print(f"decentlearn run: interrupted ({signal.Signals(signum).name}): stopped after "
              f"round {writer.last_round} of "
              f"{config.rounds}; {writer.rows} evaluation rows in {out}/metrics.csv, "
              f"summary.json status '{writer.status}'{saved}", file=sys.stderr)
        return 128 + signum
    except ValueError as e:  # DivergenceError and the like: one line, the files say the rest
        raise UsageError(f"decentlearn run: error: {e} (results so far in {out}/)") from None
    finally:
        if bar is not None:
            bar.close()
    title = (f"{config.dataset}, {config.peers} peers, {config.topology}, {config.partition}, "
             f"{config.algorithm}" + (f", {config.compress}" if config.compress != "none" else ""))
    plotted = _plot(result.history, out / "curves.png", title)
    print(f"decentlearn {__version__}: {title}, {config.rounds} rounds")
    print(_format_table(result.summary))
    print(f"  results in {out}/ (metrics.csv, summary.json, config.toml"
          + (", curves.png)" if plotted else ")"))
    return 0


def _plot(history, path: Path, title: str) -> bool:
    """curves.png; a failure to plot is a warning line, never a lost run."""
    from decentlearn.plot import plot_curves
    try:
        plotted = plot_curves(history, path, title)
    except Exception as e:  # noqa: BLE001 - the results are already on disk
        print(f"decentlearn run: warning: {path} not written: {str(e).splitlines()[0]}",
              file=sys.stderr)
        return False
    if not plotted:
        print("decentlearn run: warning: install matplotlib for curves.png", file=sys.stderr)
    return plotted


def cmd_bench(args) -> int:
    from decentlearn import bench
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
        print("acceptance figures (issue 8), same process:")
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
        path = download(args.name, download_dir(args.name, args.data_dir), progress=progress,
                        base_url=args.mirror)
    except (OSError, ValueError) as e:  # offline, HTTP errors, bad checksums, unwritable dir
        for bar in bars.values():
            bar.close()
        bars.clear()
        reason = " ".join(str(e).split()) or type(e).__name__
        raise UsageError(f"decentlearn download: error: {args.name}: {reason}") from None
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
    b.add_argument("--threads", type=_optional_int, default=None,
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
    pl.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories")
    pl.add_argument("--out", default="runs.png", help="PNG to write (default runs.png)")
    pl.add_argument("--title", help="figure title (default: what the runs share)")
    cp = sub.add_parser("compare", help="print a table of several runs' summaries")
    cp.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories")
    cp.add_argument("--format", choices=["table", "csv", "json"], default="table",
                    help="output format (default: an aligned table)")
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


def _load_runs(paths: list[str]) -> list:
    from decentlearn.plot import RunDirError, load_run
    try:
        return [load_run(p) for p in paths]
    except RunDirError as e:
        raise UsageError(f"decentlearn: error: {e}") from None


def cmd_plot(args) -> int:
    from decentlearn.plot import RunDirError, plot_runs
    runs = _load_runs(args.runs)
    try:
        labels = plot_runs(runs, args.out, args.title)
    except RunDirError as e:
        raise UsageError(f"decentlearn plot: error: {e}") from None
    except ImportError:
        raise UsageError("decentlearn plot: error: needs matplotlib (pip install "
                         "'decentlearn[plot]')") from None
    print(f"{args.out}: {len(runs)} runs ({'; '.join(labels)})")
    return 0


def cmd_compare(args) -> int:
    from decentlearn.plot import compare_rows, format_table
    header, rows = compare_rows(_load_runs(args.runs))
    if args.format == "table":
        print(format_table(header, rows))
    elif args.format == "csv":
        import csv
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerows([header, *rows])
    else:
        print(json.dumps([dict(zip(header, r)) for r in rows], indent=2))
    return 0


def cmd_sweep(args) -> int:
    from decentlearn import sweep
    if args.jobs < 1:
        raise UsageError(f"sweep: --jobs must be >= 1, got {args.jobs}")
    path = Path(args.config)
    if not path.is_file():
        raise UsageError(f"sweep: {args.config}: no such file")
    try:
        with open(path, "rb") as f:
            loaded = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"sweep: {args.config}: not valid TOML ({e})") from None
    options = {k.replace("-", "_"): v
               for k, v in _config_options(loaded, args.config).items()}
    try:
        grid = sweep.Grid.from_options(options)
    except (TypeError, ValueError) as e:
        raise UsageError(f"sweep: {args.config}: {e}") from None
    from decentlearn.runner import memory
    checked: set = set()
    for point in grid.points():  # the seed does not change the memory a run needs
        key = repr(sorted((k, v) for k, v in point.options.items() if k != "seed"))
        if key not in checked:
            checked.add(key)
            try:
                memory.check(point.config())
            except MemoryError as e:
                raise UsageError(f"sweep: point {point.name}: refused: {e}") from None
            except (FileNotFoundError, ValueError) as e:
                raise UsageError(f"sweep: point {point.name}: {e}") from None
    return sweep.run_cli(grid, Path(args.out), jobs=args.jobs, quiet=args.quiet)


COMMANDS = {"run": cmd_run, "bench": cmd_bench, "download": cmd_download, "info": cmd_info,
            "plot": cmd_plot, "compare": cmd_compare, "sweep": cmd_sweep}


def main(argv: list[str] | None = None) -> int:
    try:
        code = _main(argv)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # The reader went away (`decentlearn run ... | head -1`). As the Python docs recommend,
        # point stdout at devnull so that the flush at exit does not fail again, and exit quietly.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return 128 + signal.SIGPIPE


def _main(argv: list[str] | None) -> int:
    from decentlearn.results import OutputError

    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = None
    try:
        args = parser.parse_args(argv or ["run"])
        if args.command is None:
            args = parser.parse_args(["run", *argv])
        return COMMANDS[args.command](args)
    except UsageError as e:
        print(e, file=sys.stderr)
        return 2
    except OutputError as e:  # a full disk, a read-only or vanished directory
        print(f"decentlearn {args.command}: error: {e}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError, TypeError) as e:
        print(f"decentlearn {args.command if args else ''}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("decentlearn: interrupted", file=sys.stderr)
        return 130
