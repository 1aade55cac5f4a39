"""``decentlearn run --backend mpi``: the run command on MPI ranks (started by mpiexec).

Every rank builds its share (a ``Runner`` with an ``MPIBackend``); rank 0 checks and prepares
``--out``, writes the same files as the in-process run (config.toml, metrics.csv, summary.json with
an ``mpi`` section holding every rank's timings, curves.png) and prints the table. Setup mistakes
are found alike on every rank: rank 0 prints the one-line error and every rank exits with status 2.
A failure during the run (a rank that died or stopped answering: ``MPITimeoutError`` after
``--mpi-timeout`` seconds) is printed in one line by one rank, which then aborts the whole job
(MPI_Abort, exit status 4), so no rank is left waiting: several ranks may give up on a silent one,
so rank 0 reports at once and any other rank only after a grace period in which a lower rank's
abort would have ended it (``_fail``). A divergence exits with status 3 on every rank.
``--checkpoint-every N`` saves collectively (rank 0 writes RUN_DIR/checkpoint.npz), and on SIGTERM
the ranks finish the round in progress, save it and exit with status 143
(``runner.checkpoint.stop_at_round_end``); ``--resume RUN_DIR`` is read by every rank.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

from decentlearn.cli.config import resolve_run_config
from decentlearn.cli.parser import (EXIT_DIVERGED, EXIT_FAILED, EXIT_MPI, EXIT_USAGE,
                                    WARNING_PREFIX, UsageError, error_line)
from decentlearn.cli.run import (check_dashboards, check_model, check_out, make_dashboards,
                                 read_resume, report)

#: Environment variables set by the launchers (Open MPI, MPICH/Hydra, PMIx, Slurm).
_LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")


#: Seconds (at most) a rank other than 0 waits, after giving up on another rank, for a lower
#: rank's report and abort to end it, before it reports and aborts itself (``_fail``).
REPORT_GRACE = 10.0


def _abort(world, message: str, code: int) -> int:
    print(error_line(message), file=sys.stderr, flush=True)
    world.Abort(code)
    return code  # pragma: no cover - Abort does not return


def _fail(world, message: str, timeout: float) -> int:
    """A rank gave up on another (MPITimeoutError): one line for the whole job, then MPI_Abort
    with status 4. The ranks that time out do so at about the same time, each on its own, so
    rank 0 reports at once and rank r > 0 first waits min(timeout, REPORT_GRACE) + 0.2 r
    seconds: the first report's abort ends the others before they print. A rank still alive then
    reports (rank 0 may be the silent one)."""
    import time
    rank = world.Get_rank()
    if rank:
        time.sleep(min(timeout, REPORT_GRACE) + 0.2 * rank)
    return _abort(world, message, EXIT_MPI)


def _stop_all(world, message: str | None, code: int = EXIT_USAGE) -> int:
    """A mistake (or a divergence) every rank saw: rank 0 prints it, then every rank exits with
    status ``code`` (the barrier keeps the launcher from killing rank 0 before it has
    printed)."""
    if world.Get_rank() == 0 and message:
        print(error_line(message), file=sys.stderr, flush=True)
    world.Barrier()
    return code


def _read_resume_mpi(args) -> tuple:
    """(config, checkpoint state, metadata) of ``--resume RUN_DIR``: the run directory's
    config.toml and checkpoint, checked as the in-process ``--resume`` checks them (UsageError).
    Every rank reads the file: the run directory must be on a file system all ranks see."""
    _, config, state, meta = read_resume(args, extra_flags=("backend", "mpi_timeout"))
    return config, state, meta


def cmd_run_mpi(args) -> int:
    from decentlearn.mpi.comm import DEFAULT_TIMEOUT, MPITimeoutError
    from decentlearn.sim import DivergenceError

    # Options of the in-process command this one does not implement (yet): refused, not ignored.
    if getattr(args, "dry_run", False):
        raise UsageError("--dry-run is not available with --backend mpi yet (docs/mpi.md)")
    if args.checkpoint_every is not None and args.checkpoint_every < 1:
        raise UsageError(f"--checkpoint-every must be an integer >= 1, got "
                         f"{args.checkpoint_every}")
    # --resume: the configuration comes from the run directory, read after MPI starts so that
    # rank 0 alone reports a mistake.
    config = None if args.resume else resolve_run_config(args)

    timeout = DEFAULT_TIMEOUT if args.mpi_timeout is None else args.mpi_timeout
    if not timeout > 0:
        raise UsageError(f"--mpi-timeout must be a number of seconds > 0, got {timeout!r}")
    import importlib.util
    if importlib.util.find_spec("mpi4py") is None:
        raise UsageError("--backend mpi needs mpi4py and an MPI library: "
                         "pip install 'decentlearn[mpi]' (docs/mpi.md)")
    # Checked before MPI starts: a process not started by a launcher would run alone.
    if not any(v in os.environ for v in _LAUNCHER_VARS):
        raise UsageError("--backend mpi runs one process per rank: start it with mpiexec, "
                         "e.g. mpiexec -n 4 decentlearn run --backend mpi ...")
    try:
        from decentlearn.mpi.comm import import_mpi
        MPI = import_mpi()
    except ImportError as e:
        raise UsageError(f"--backend mpi: {e}") from None
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()

    # Setup: every rank builds its share; rank 0 alone checks --out (it alone writes there).
    # The verdicts are gathered so that a mistake seen by any rank stops every rank at once.
    from decentlearn.mpi.backend import MPIBackend
    from decentlearn.runner import Runner
    from decentlearn.runner import checkpoint as ck
    error, sim, meta, out = None, None, None, None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if args.resume:
                config, state, meta = _read_resume_mpi(args)
                out = Path(args.resume)
            else:
                out = check_out(args) if rank == 0 else None
            check_model(config)
            check_dashboards(args)  # --log-to: the packages (each rank, the same verdict)
            sim = Runner(config, backend=MPIBackend(timeout=timeout))
            if args.resume:
                try:
                    if meta["dim"] != sim.model.dim:
                        raise ck.CheckpointError(f"checkpoint has dim={meta['dim']}, this run "
                                                 f"has dim={sim.model.dim}: it belongs to "
                                                 "another run")
                    sim.load_state_dict(sim.local_state(state))
                except ck.CheckpointError as e:
                    raise UsageError(f"--resume {args.resume}: {e}") from None
                del state
            every = args.checkpoint_every
            if every is None and meta is not None:
                every = (meta.get("extra") or {}).get("checkpoint_every")
            reason = getattr(sim.algorithm, "checkpoint_unsupported", None)
            if every is not None and reason:
                raise UsageError(f"--checkpoint-every: algorithm {config.algorithm!r} "
                                 f"cannot be checkpointed: {reason}")
        except UsageError as e:
            error = str(e)
        except (FileNotFoundError, TypeError, ValueError) as e:
            error = f"--backend mpi: {e}"
    errors = world.allgather(error)
    if any(errors):
        return _stop_all(world, next(e for e in errors if e))

    # Rank 0 prepares the run directory and tells every rank where checkpoints go (or why not).
    # Rank 0 alone writes the files and the --log-to dashboards (a dashboard that cannot start
    # stops every rank here, before the run).
    from decentlearn.outputs.rundir import RunWriter, new_run_dir, prepare_run_dir
    dashboards = []
    if rank == 0:
        try:
            if not args.resume:
                out = new_run_dir("runs") if out is None else prepare_run_dir(
                    out, overwrite=args.overwrite)
            dashboards = make_dashboards(args, Path(out), config)
            where = {"out": str(out)}
        except (FileExistsError, OSError) as e:
            where = {"error": f"--out {e}"}
        except UsageError as e:
            where = {"error": str(e)}
    else:
        where = None
    try:
        where = sim.comm.bcast_json(where)
    except MPITimeoutError as e:
        return _fail(world, str(e), timeout)
    if "error" in where:
        return _stop_all(world, where["error"])
    out = Path(where["out"])
    callbacks = []
    saver = None
    if every is not None:
        saver = ck.CheckpointCallback(out / ck.FILENAME, int(every))
        callbacks.append(saver)
    # SIGTERM (a scheduler ending the job, sent to every rank) with checkpoints: the ranks agree
    # at each round end, finish the round in progress, save it collectively and stop together.
    import contextlib
    stopping = ck.stop_at_round_end(saver) if saver is not None else contextlib.nullcontext()
    if rank != 0:
        try:
            with stopping:
                sim.run(callbacks)
        except KeyboardInterrupt as e:  # the agreed stop after a saved round (or a 2nd signal)
            world.Barrier()
            return 128 + getattr(e, "signum", 2)
        except MPITimeoutError as e:
            return _fail(world, str(e), timeout)
        except DivergenceError:  # every rank stops alike, rank 0 reports it
            return _stop_all(world, None, EXIT_DIVERGED)
        except ValueError:  # likewise
            return _stop_all(world, None)
        except Exception as e:  # anything else on one rank: end the job, never leave it waiting
            return _abort(world, f"error on rank {rank}: {type(e).__name__}: {e}", EXIT_FAILED)
        return 0

    for w in caught:
        print(f"{WARNING_PREFIX}{str(w.message).splitlines()[0]}", file=sys.stderr)
    writer = RunWriter(out, config)
    if args.resume:
        writer.resume(sim.history, sim.next_round)
    try:
        with stopping, writer:
            result = sim.run([writer, *callbacks, *dashboards])
            writer.finish(result.summary)
    except KeyboardInterrupt as e:
        import signal
        signum = getattr(e, "signum", signal.SIGINT)
        saved = (f"; checkpoint of round {saver.saved_round} in {out}/{ck.FILENAME} (continue "
                 f"with: mpiexec ... decentlearn run --backend mpi --resume {out})"
                 if saver is not None and saver.saved_round is not None else "")
        print(f"decentlearn: interrupted ({signal.Signals(signum).name}): stopped after "
              f"round {writer.last_round} of {config.rounds}; {writer.rows} evaluation rows in "
              f"{out}/metrics.csv, summary.json status '{writer.status}'{saved}",
              file=sys.stderr, flush=True)
        world.Barrier()
        return 128 + signum
    except MPITimeoutError as e:
        return _fail(world, f"{e} (results so far in {out}/)", timeout)
    except DivergenceError as e:  # every rank stops at the same round
        return _stop_all(world, f"{e} (results so far in {out}/: metrics.csv, summary.json)",
                         EXIT_DIVERGED)
    except ValueError as e:
        return _stop_all(world, f"{e} (results so far in {out}/)")
    except Exception as e:
        return _abort(world, f"error on rank 0: {type(e).__name__}: {e}", EXIT_FAILED)
    finally:
        for d in dashboards:
            d.close(writer.status)
    report(config, result, out, backend=f", MPI {size} ranks")
    return 0
