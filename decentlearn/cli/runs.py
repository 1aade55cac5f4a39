"""``decentlearn plot`` and ``decentlearn compare``: several run directories read back, overlaid
in one PNG or tabulated."""

from __future__ import annotations

import json
import sys

from decentlearn.cli.parser import UsageError


def load_runs(paths: list[str]) -> list:
    """The run directories ``paths`` read back (UsageError, one line, for one that is not)."""
    from decentlearn.outputs.rundir import RunDirError, load_run
    try:
        return [load_run(p) for p in paths]
    except RunDirError as e:
        raise UsageError(str(e)) from None


def cmd_plot(args) -> int:
    from decentlearn.outputs.plot import plot_runs
    from decentlearn.outputs.rundir import RunDirError
    runs = load_runs(args.runs)
    try:
        labels = plot_runs(runs, args.out, args.title)
    except RunDirError as e:
        raise UsageError(f"plot: {e}") from None
    except ImportError:
        raise UsageError("plot: needs matplotlib (pip install "
                         "'decentlearn[plot]')") from None
    print(f"{args.out}: {len(runs)} runs ({'; '.join(labels)})")
    return 0


def cmd_compare(args) -> int:
    from decentlearn.outputs.format import compare_rows, format_table
    header, rows = compare_rows(load_runs(args.runs))
    if args.format == "table":
        print(format_table(header, rows))
    elif args.format == "csv":
        import csv
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerows([header, *rows])
    else:
        print(json.dumps([dict(zip(header, r)) for r in rows], indent=2))
    return 0
