"""``decentlearn plot`` and ``decentlearn compare``: several run directories read back, overlaid
in one PNG or tabulated. A folder that is not a run directory (a sweep's output, ``runs/``) stands
for every run below it; one with none is refused in one line (exit code 2)."""

from __future__ import annotations

import json
import math
import sys

from decentlearn.cli.parser import UsageError


def load_runs(paths: list[str]) -> list:
    """The run directories ``paths`` (or every run below a folder that is not one) read back
    (UsageError, one line, for a path that holds no run)."""
    from decentlearn.outputs.rundir import RunDirError, find_runs, load_run
    try:
        return [load_run(p) for p in find_runs(paths)]
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


def _csv_cell(value) -> str:
    """A raw value in a CSV cell: empty when absent, numbers in full (repr), tables as JSON."""
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def _json_value(value):
    """A raw value in JSON: non-finite floats (not JSON numbers) as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def cmd_compare(args) -> int:
    """``table`` for people (rounded, bytes with prefixes, '-' when absent); ``csv`` and
    ``json`` for programs (outputs.format.compare_records: unique column names, raw numbers,
    absent values empty / null)."""
    from decentlearn.outputs.format import compare_records, compare_rows, format_table
    runs = load_runs(args.runs)
    if args.format == "table":
        header, rows = compare_rows(runs)
        print(format_table(header, rows))
        return 0
    columns, records = compare_records(runs)
    if args.format == "csv":
        import csv
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(columns)
        w.writerows([[_csv_cell(rec[c]) for c in columns] for rec in records])
    else:
        print(json.dumps([{c: _json_value(rec[c]) for c in columns} for rec in records],
                         indent=2))
    return 0
