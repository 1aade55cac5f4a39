"""The ``decentlearn`` command: ``run`` (the main job, in this process or on MPI ranks), ``sweep``
(grids of runs), ``plot`` and ``compare`` (several runs), ``bench``, ``download`` and ``info``.

A user's mistake (a bad flag, a bad value, a missing data directory) is reported on one line on
stderr, ``decentlearn: error: ...``, with exit code 2 and no traceback; a diverged run exits with
3, a failed MPI job with 4, an interrupted one with 128 + the signal (``parser.EXIT_*``).
Progress goes to stderr through tqdm; results go to the run directory (metrics.csv, summary.json,
config.toml, curves.png) and a table on stdout.

One module per command: :mod:`~decentlearn.cli.run` and :mod:`~decentlearn.cli.run_mpi`
(``run``), :mod:`~decentlearn.cli.sweep`, :mod:`~decentlearn.cli.runs` (``plot``, ``compare``),
:mod:`~decentlearn.cli.bench`, :mod:`~decentlearn.cli.data` (``download``),
:mod:`~decentlearn.cli.info`; :mod:`~decentlearn.cli.parser` builds the parser of them all and
:mod:`~decentlearn.cli.config` reads ``--config`` files.
"""

from __future__ import annotations

import os
import signal
import sys

from decentlearn.cli import bench, data, info, run, run_mpi, runs, sweep
from decentlearn.cli.parser import EXIT_USAGE, UsageError, build_parser, error_line

__all__ = ["main", "build_parser", "UsageError"]


def _run(args) -> int:
    """``run`` on the backend asked for: this process, or MPI ranks started by mpiexec."""
    return (run_mpi.cmd_run_mpi if args.backend == "mpi" else run.cmd_run)(args)


#: Subcommand -> its function (args -> exit code).
COMMANDS = {"run": _run, "bench": bench.cmd_bench, "download": data.cmd_download,
            "info": info.cmd_info, "plot": runs.cmd_plot, "compare": runs.cmd_compare,
            "sweep": sweep.cmd_sweep}


def main(argv: list[str] | None = None) -> int:
    """Runs ``decentlearn`` with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
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


def import_modules(argv: list[str]) -> list[str]:
    """Imports the modules named by leading ``--import MODULE`` options (a user's algorithm,
    topology, compressor, model or data set registers itself on import, so the parser built next
    lists it) and returns the rest of ``argv``. UsageError for a module that cannot be imported."""
    import importlib

    rest = list(argv)
    while rest and (rest[0] == "--import" or rest[0].startswith("--import=")):
        if rest[0] == "--import":
            if len(rest) < 2:
                raise UsageError("--import needs a module name")
            name, rest = rest[1], rest[2:]
        else:
            name, rest = rest[0].split("=", 1)[1], rest[1:]
        # The current folder is searched too, last: a module there is found, and it never
        # shadows an installed package (decentlearn itself, when run from a checkout).
        added = os.getcwd() not in sys.path and "" not in sys.path
        if added:
            sys.path.append(os.getcwd())
        try:
            importlib.import_module(name)
        except ImportError as e:
            if added:
                sys.path.remove(os.getcwd())
            raise UsageError(f"--import {name}: {e}") from None
    return rest


def _main(argv: list[str] | None) -> int:
    from decentlearn.atomic import OutputError

    argv = sys.argv[1:] if argv is None else argv
    args = None
    try:
        argv = import_modules(argv)
        parser = build_parser()
        args = parser.parse_args(argv or ["run"])
        if args.command is None:
            args = parser.parse_args(["run", *argv])
        return COMMANDS[args.command](args)
    except (UsageError, OutputError) as e:  # OutputError: a full disk, a read-only directory
        print(error_line(e), file=sys.stderr)
        return EXIT_USAGE
    except (FileNotFoundError, ValueError, TypeError) as e:
        print(error_line(e), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("decentlearn: interrupted", file=sys.stderr)
        return 130
