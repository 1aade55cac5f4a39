"""``decentlearn run``: simulate a run in this process, with the run directory, progress bar,
checkpoints and the final table. ``--backend mpi`` runs :mod:`decentlearn.cli.run_mpi` instead,
which shares the checks and the report of this module.
"""

from __future__ import annotations

import signal
import sys
import warnings
from pathlib import Path

from decentlearn import __version__
from decentlearn.cli.config import load_toml, resolve_run_config
from decentlearn.cli.parser import EXIT_DIVERGED, WARNING_PREFIX, UsageError, error_line


def check_out(args) -> Path | None:
    """--out checked before the (slow) simulator is built; None means a fresh runs/<timestamp>."""
    from decentlearn.outputs.rundir import RUN_FILES, is_run_dir
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


def check_model(config) -> None:
    """An unknown ``--model`` name is refused before anything is built (with the torch extra's
    install hint for ``torch:`` models)."""
    from decentlearn.nn import available_models
    from decentlearn.registry import unknown_message
    name = config.model.partition(":")[0]
    if name == "torch":  # decentlearn.torch needs the torch extra: say how to install it
        try:
            import decentlearn.torch  # noqa: F401
        except ImportError as e:
            raise UsageError(f"--model {config.model}: {' '.join(str(e).split())}") from None
        if config.device is not None and config.device != "cpu":  # fail before data loads
            from decentlearn.torch.device import resolve_device
            try:
                resolve_device(config.device)
            except ValueError as e:
                msg = str(e).removeprefix(f"device={config.device!r}: ")
                raise UsageError(f"--device {config.device}: {msg}") from None
        return
    if name not in available_models():
        raise UsageError(unknown_message("model", name, available_models(), spec=config.model))


def check_memory(config, dry_run: bool) -> bool:
    """--dry-run: prints the memory estimate and returns True. Otherwise refuses (UsageError
    with the figure) a run that would not fit in the available memory; returns False."""
    from decentlearn.runner import memory
    from decentlearn.units import format_bytes
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
            print(f"  available: {format_bytes(room)} ({source}); "
                  + ("fits" if fits else f"does NOT fit (a run may plan "
                     f"{memory.HEADROOM:.0%} of it)"))
            if not fits:
                raise MemoryError("see above")
            return True
        memory.check(config)
    except MemoryError as e:
        raise UsageError(f"refused: {e}") from None
    except (FileNotFoundError, ValueError) as e:  # the data set, the model spec
        raise UsageError(str(e)) from None
    return False


def build(config):
    """The Simulator, with its setup warnings printed one line each on stderr."""
    from decentlearn.sim import Simulator
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            sim = Simulator(config)
        except (FileNotFoundError, TypeError, ValueError) as e:
            raise UsageError(str(e)) from None
    for w in caught:
        print(f"{WARNING_PREFIX}{str(w.message).splitlines()[0]}", file=sys.stderr)
    return sim


#: Flags ``--resume`` accepts besides the run directory (the rest comes from its config.toml).
RESUME_FLAGS = ("rounds", "threads", "data_dir", "checkpoint_every", "quiet", "resume", "log_to")


def _check_extension(args, config, toml: Path, run_dir: Path) -> None:
    """A cosine learning-rate schedule depends on the planned number of rounds: extending such a
    run with --rounds would not give a run of the new length, so it is refused (UsageError)."""
    if args.rounds is None or not config.lr_schedule.startswith("cosine"):
        return
    planned = load_toml(toml, f"--resume {run_dir}").get("rounds", config.rounds)
    if planned != config.rounds:
        raise UsageError(f"--resume {run_dir}: lr_schedule {config.lr_schedule!r} depends on "
                         f"the number of rounds: the run planned {planned}, so it cannot be "
                         f"extended to {config.rounds} (the first rounds used the old schedule)")


def read_resume(args, extra_flags: tuple[str, ...] = ()) -> tuple:
    """(run directory, config, checkpoint state, metadata) of ``--resume RUN_DIR``: only the
    flags of ``RESUME_FLAGS`` (and ``extra_flags``) may be given; the run directory's
    config.toml and checkpoint are read and checked (UsageError, one line). Shared by the
    in-process and the MPI backends."""
    from decentlearn.runner import checkpoint as ck
    run_dir = Path(args.resume)
    allowed = (*RESUME_FLAGS, *extra_flags, "command")
    given = [k for k, v in vars(args).items() if k not in allowed and v not in (None, False)]
    if given:
        names = ["--rounds", "--threads", "--data-dir", "--checkpoint-every", "--quiet", "--log-to",
                 *("--" + f.replace("_", "-") for f in extra_flags if f != "backend")]
        raise UsageError(f"--resume continues the run configured in {run_dir}/config.toml; "
                         f"only {', '.join(names[:-1])} and {names[-1]} may be given, got "
                         f"--{given[0].replace('_', '-')}")
    toml = run_dir / "config.toml"
    if not toml.is_file():
        raise UsageError(f"--resume {run_dir}: not a run directory (no config.toml)")
    args.config = str(toml)
    config = resolve_run_config(args)
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
    run_dir, config, state, meta = read_resume(args)
    check_model(config)
    check_memory(config, dry_run=False)  # refuses a run that no longer fits
    sim = build(config)
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
    """``decentlearn run`` in this process (``--backend inprocess``, the default)."""
    if args.mpi_timeout is not None:
        raise UsageError("--mpi-timeout needs --backend mpi")
    from decentlearn.atomic import OutputError
    from decentlearn.runner.checkpoint import FILENAME, CheckpointCallback, CheckpointError
    from decentlearn.interrupts import signals_as_interrupts
    from decentlearn.outputs.rundir import RunWriter, new_run_dir, prepare_run_dir
    from decentlearn.sim import Callback, DivergenceError

    if args.checkpoint_every is not None and args.checkpoint_every < 1:
        raise UsageError(f"--checkpoint-every must be an integer >= 1, got "
                         f"{args.checkpoint_every}")
    check_dashboards(args)
    if args.resume:
        config, out, sim, every = _resume(args)
    else:
        config = resolve_run_config(args)
        out = check_out(args)
        check_model(config)
        if check_memory(config, args.dry_run):
            return 0
        sim = build(config)
        every = args.checkpoint_every
        try:
            out = new_run_dir("runs") if out is None else prepare_run_dir(
                out, overwrite=args.overwrite)
        except FileExistsError as e:  # another process took it since check_out
            raise UsageError(f"--out {e.strerror}") from None

    callbacks = []
    saver = None
    reason = getattr(sim.algorithm, "checkpoint_unsupported", None)
    if every is not None and reason:
        raise UsageError(f"--checkpoint-every: algorithm {config.algorithm!r} cannot be "
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
    dashboards = make_dashboards(args, out, config)
    callbacks += dashboards
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
        print(f"decentlearn: interrupted ({signal.Signals(signum).name}): stopped after "
              f"round {writer.last_round} of "
              f"{config.rounds}; {writer.rows} evaluation rows in {out}/metrics.csv, "
              f"summary.json status '{writer.status}'{saved}", file=sys.stderr)
        return 128 + signum
    except DivergenceError as e:  # one line, exit 3; the files say the rest
        print(error_line(f"{e} (results so far in {out}/: metrics.csv, summary.json)"),
              file=sys.stderr)
        return EXIT_DIVERGED
    except ValueError as e:
        raise UsageError(f"{e} (results so far in {out}/)") from None
    finally:
        if bar is not None:
            bar.close()
        for d in dashboards:
            d.close(writer.status)
    report(config, result, out)
    return 0


def check_dashboards(args) -> None:
    """``--log-to``: each dashboard's package is installed (UsageError, one line, saying what to
    install), checked before anything is built."""
    from decentlearn.outputs.dashboards import check_dashboard
    for name in getattr(args, "log_to", None) or ():
        try:
            check_dashboard(name)
        except (ImportError, ValueError) as e:
            raise UsageError(f"--log-to {name}: {e}") from None


def make_dashboards(args, out: Path, config) -> list:
    """The ``--log-to`` callbacks of the run in ``out`` (decentlearn.outputs.dashboards)."""
    from decentlearn.outputs.dashboards import make_dashboard
    made = []
    for name in dict.fromkeys(getattr(args, "log_to", None) or ()):
        try:
            made.append(make_dashboard(name, out, config))
        except ImportError as e:
            raise UsageError(f"--log-to {name}: {e}") from None
        except Exception as e:  # noqa: BLE001 - the dashboard's own refusal (a bad URI, ...)
            text = str(e).strip().splitlines()
            raise UsageError(f"--log-to {name}: cannot start: "
                             f"{text[0] if text else type(e).__name__}") from None
    return made


def report(config, result, out: Path, backend: str = "") -> None:
    """After a completed run: curves.png, then the title line, the summary table and where the
    files are, on stdout. ``backend`` is appended to the title (", MPI 4 ranks")."""
    from decentlearn.outputs.format import format_summary
    title = (f"{config.dataset}, {config.peers} peers, {config.topology}, {config.partition}, "
             f"{config.algorithm}" + (f", {config.compress}" if config.compress != "none" else "")
             + backend)
    plotted = plot_curves(result.history, out / "curves.png", title)
    print(f"decentlearn {__version__}: {title}, {config.rounds} rounds")
    print(format_summary(result.summary))
    print(f"  results in {out}/ (metrics.csv, peers.csv, summary.json, config.toml, run.log"
          + (", curves.png)" if plotted else ")"))


def plot_curves(history, path: Path, title: str) -> bool:
    """curves.png; a failure to plot is a warning line, never a lost run."""
    from decentlearn.outputs import plot
    try:
        plotted = plot.plot_curves(history, path, title)
    except Exception as e:  # noqa: BLE001 - the results are already on disk
        print(f"{WARNING_PREFIX}{path} not written: {str(e).splitlines()[0]}",
              file=sys.stderr)
        return False
    if not plotted:
        print(f"{WARNING_PREFIX}install matplotlib for curves.png", file=sys.stderr)
    return plotted
