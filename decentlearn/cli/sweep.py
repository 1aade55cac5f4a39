"""``decentlearn sweep``: a grid of runs from one TOML file (:mod:`decentlearn.experiments.sweep`),
with a progress bar, the table of mean ± std over seeds, and the summary files."""

from __future__ import annotations

import sys
from pathlib import Path

from decentlearn.cli.config import config_options, load_toml
from decentlearn.cli.parser import WARNING_PREFIX, UsageError, error_line


def cmd_sweep(args) -> int:
    from decentlearn.runner import memory
    from decentlearn.experiments import sweep
    if args.jobs < 1:
        raise UsageError(f"sweep: --jobs must be >= 1, got {args.jobs}")
    loaded = load_toml(Path(args.config), f"sweep: {args.config}")
    options = {k.replace("-", "_"): v
               for k, v in config_options(loaded, args.config).items()}
    try:
        grid = sweep.Grid.from_options(options)
    except (TypeError, ValueError) as e:
        raise UsageError(f"sweep: {args.config}: {e}") from None
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
    return run_sweep(grid, Path(args.out), jobs=args.jobs, quiet=args.quiet)


def run_sweep(grid, out: Path, *, jobs: int = 1, quiet: bool = False) -> int:
    """Runs the grid with a progress bar on stderr, then prints the table of mean ± std over
    seeds and writes summary.csv/.json/.png into ``out``. Exit code 0 when every run completed,
    1 when some did not (their errors on stderr), 130 on Ctrl-C."""
    from tqdm import tqdm

    from decentlearn.experiments.sweep import (aggregate, format_rows, plot_grid, run_grid,
                                               write_summary)
    from decentlearn.outputs.format import format_table
    points = len(grid)
    bar = tqdm(total=points, desc="runs", unit="run", disable=quiet, dynamic_ncols=True,
               file=sys.stderr)

    def progress(name: str, status: str) -> None:
        bar.update(1)
        if status not in ("skipped", "completed"):
            bar.write(f"decentlearn: sweep: {name}: {status}", file=sys.stderr)

    try:
        report = run_grid(grid, out, jobs=jobs, progress=progress)
    except KeyboardInterrupt:
        bar.close()
        print(f"decentlearn: interrupted; finished runs are kept in {out}/ — run the same "
              "command again to resume", file=sys.stderr)
        return 130
    bar.close()
    for name, lines in report.warnings.items():
        for line in dict.fromkeys(lines):
            print(f"{WARNING_PREFIX}{name}: {line}", file=sys.stderr)
    for name, error in report.failed.items():
        print(error_line(f"{name}: {error}"), file=sys.stderr)
    rows = aggregate(grid, out)
    write_summary(grid, out, rows)
    plotted = plot_grid(grid, out, out / "summary.png")
    header, cells = format_rows(rows)
    print(f"decentlearn sweep: {points} runs ({len(report.skipped)} already finished, "
          f"{len(report.ran)} run now, {len(report.failed)} not completed); mean ± std over "
          "seeds:")
    print(format_table(header, cells))
    print(f"  results in {out}/ (one directory per run; summary.csv, summary.json"
          + (", summary.png)" if plotted else ")"))
    return 0 if not report.failed else 1
