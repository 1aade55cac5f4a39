"""Experiment grids: every combination of the list-valued options of a ``[run]`` table.

A sweep file is the ``[run]`` table that ``decentlearn run --config`` reads, where any option may
be a list: ``topology = ["ring", "exponential"]``, ``seed = [0, 1, 2]``. :class:`Grid` holds the
base options and the axes (in file order, ``seed`` last); every point is one run directory under
the sweep's output directory, named from the varying options (``topology-ring__seed-0``), so the
same file always maps a point to the same directory.

:func:`run_grid` runs the points that are not finished yet: a run whose summary.json says
``completed`` with the point's exact configuration is skipped; an interrupted, failed or
half-written one (or one made with other options) is run again from scratch. With ``jobs > 1``
points run in parallel worker processes (spawned, each with cores/jobs OpenMP threads unless the
file sets ``threads``). :func:`aggregate` reduces the finished runs to mean ± standard deviation
over seeds per point (``summary.csv``, ``summary.json``), and :func:`plot_grid` draws each point's
accuracy curve with a band of ± one standard deviation over seeds (``summary.png``).
Library code never prints: progress goes through the ``progress`` callback (``decentlearn sweep``,
in ``decentlearn.cli.sweep``, draws the progress bar and prints the table).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import logging
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_log = logging.getLogger("decentlearn.experiments")

#: The summary metrics aggregated over seeds (final evaluation of each run), in table order.
METRICS = ("test_accuracy_mean", "test_accuracy_min", "test_accuracy_avg_model",
           "consensus_distance", "bytes_sent_total", "sim_seconds")

#: Files the sweep writes into its output directory next to the run directories.
SUMMARY_FILES = ("summary.csv", "summary.json", "summary.png")


def _run_fields() -> dict[str, dataclasses.Field]:
    from decentlearn.runner.config import config_keys
    return config_keys()


def _slug(value: Any) -> str:
    """A file-name-safe rendering of an option value (``dirichlet:0.1`` -> ``dirichlet_0.1``)."""
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", text).strip("_") or "_"


@dataclass(frozen=True)
class Point:
    """One run of the grid: its directory name, the values of the varying options, and the full
    options (base + varying) that make its RunConfig."""

    name: str
    values: dict = field(repr=True)
    options: dict = field(repr=False)

    @property
    def group(self) -> tuple:
        """The varying values other than the seed: the point's row in the summary table."""
        return tuple((k, v) for k, v in self.values.items() if k != "seed")

    def config(self):
        from decentlearn.sim import RunConfig
        return RunConfig.from_dict(self.options)


@dataclass(frozen=True)
class Grid:
    """Base options and axes of a sweep (see the module docstring). Build with
    :meth:`from_options`, which validates every point's configuration before anything runs."""

    base: dict
    axes: dict

    @classmethod
    def from_options(cls, options: dict) -> Grid:
        """``options``: a ``[run]`` table (names with ``_``). A list value is an axis; it must be
        non-empty and hold distinct scalar values. Raises ValueError (one line, naming the option
        and, for an invalid combination, the point) for an unknown option, a bad list, or a point
        RunConfig refuses."""
        from decentlearn.registry import closest

        if not isinstance(options, dict):
            raise TypeError(f"options must be a dict, got {type(options).__name__}")
        fields = _run_fields()
        base, axes = {}, {}
        for key, value in options.items():
            if key not in fields:
                guess = closest(key, fields)
                hint = f"; did you mean {guess!r}?" if guess else ""
                raise ValueError(f"unknown option {key!r}{hint}")
            if isinstance(value, list):
                if not value:
                    raise ValueError(f"option {key!r} is an empty list; give at least one value")
                if any(isinstance(v, (list, dict)) for v in value):
                    raise ValueError(f"option {key!r}: a list of values must hold scalars, got "
                                     f"{value!r}")
                if len({json.dumps(v) for v in value}) < len(value):
                    raise ValueError(f"option {key!r} lists a value twice: {value!r}")
                axes[key] = list(value)
            elif isinstance(value, dict):
                raise ValueError(f"option {key!r} must be a value or a list of values, got a "
                                 "table")
            else:
                base[key] = value
        if "seed" in axes:  # seeds last: the summary groups the runs that differ only in seed
            axes["seed"] = axes.pop("seed")
        grid = cls(base, axes)
        from decentlearn.nn import available_models
        for point in grid.points():
            try:
                config = point.config()
            except (TypeError, ValueError) as e:
                where = ", ".join(f"{k}={v!r}" for k, v in point.values.items())
                raise ValueError(f"point {where or '(the only one)'}: "
                                 f"{str(e).splitlines()[0]}") from None
            try:
                _check_specs(config, available_models())
            except ValueError as e:
                where = ", ".join(f"{k}={v!r}" for k, v in point.values.items())
                raise ValueError(f"point {where or '(the only one)'}: "
                                 f"{str(e).splitlines()[0]}") from None
        return grid

    def __len__(self) -> int:
        return math.prod(len(v) for v in self.axes.values())

    def points(self) -> list[Point]:
        """Every combination of the axes, the last axis (seed) varying fastest."""
        keys = list(self.axes)
        points = []
        for combo in itertools.product(*(self.axes[k] for k in keys)):
            values = dict(zip(keys, combo))
            name = "__".join(f"{k}-{_slug(v)}" for k, v in values.items()) or "run"
            points.append(Point(name, values, {**self.base, **values}))
        names = [p.name for p in points]
        if len(set(names)) < len(names):  # two values with the same slug: add a stable hash
            points = [dataclasses.replace(p, name=p.name + "__" + hashlib.sha1(
                json.dumps(p.values, sort_keys=True).encode()).hexdigest()[:8]) for p in points]
        return points


def _check_specs(config, models) -> None:
    """The specs RunConfig does not parse itself and that cost nothing to check (model, data
    set, partition and compressor names): a typo is refused before any run starts."""
    from decentlearn import compress
    from decentlearn.data import check_dataset_spec, check_partition_spec
    from decentlearn.registry import unknown_message

    name = config.model.partition(":")[0]
    if name not in models:
        raise ValueError(unknown_message("model", name, models, spec=config.model))
    check_dataset_spec(config.dataset)
    check_partition_spec(config.partition)
    compress.make(config.compress)


def is_finished(directory: Path, point: Point) -> bool:
    """True when ``directory`` holds a completed run of exactly this point's configuration."""
    try:
        summary = json.loads((directory / "summary.json").read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(summary, dict) or summary.get("status") != "completed":
        return False
    if not (directory / "metrics.csv").is_file():
        return False
    return _jsonable(summary.get("config")) == _jsonable(point.config().to_dict())


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def run_point(options: dict, directory: str) -> dict:
    """Runs one point into ``directory`` (config.toml, metrics.csv, summary.json; no curves.png:
    ``decentlearn plot`` draws any of them) replacing any earlier attempt, and returns
    ``{"status", "error", "warnings"}``. Exceptions other than KeyboardInterrupt become status
    ``failed`` (written to summary.json by RunWriter too); KeyboardInterrupt propagates after
    the run directory is marked ``interrupted``. Top-level so worker processes can run it."""
    import warnings

    from decentlearn.outputs.rundir import RunWriter, prepare_run_dir
    from decentlearn.sim import RunConfig, Simulator

    config = RunConfig.from_dict(options)
    out = prepare_run_dir(directory, overwrite=True)
    writer = RunWriter(out, config)
    caught: list = []
    try:
        with writer, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = Simulator(config).run([writer])
            writer.finish(result.summary)
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001 - recorded in summary.json and reported by the caller
        text = str(e).strip().splitlines()
        return {"status": writer.status, "error": text[0] if text else type(e).__name__,
                "warnings": [str(w.message).splitlines()[0] for w in caught]}
    return {"status": "completed", "error": None,
            "warnings": [str(w.message).splitlines()[0] for w in caught]}


def _worker_init() -> None:
    import signal
    # Ctrl-C reaches the whole process group: workers stop their run (marked interrupted) and
    # the parent stops the pool.
    signal.signal(signal.SIGINT, signal.default_int_handler)


@dataclass
class SweepReport:
    """What :func:`run_grid` did: names of the points skipped (already finished), run now, and
    failed (with their one-line errors)."""

    skipped: list[str] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    warnings: dict[str, list[str]] = field(default_factory=dict)


def run_grid(grid: Grid, out: str | os.PathLike, *, jobs: int = 1,
             progress: Callable[[str, str], None] | None = None) -> SweepReport:
    """Runs every unfinished point of ``grid`` into ``out/<point name>`` (see the module
    docstring). ``progress(name, status)`` is called once per point as it is skipped
    ("skipped") or ends (its status). KeyboardInterrupt propagates (finished runs stay
    finished; the interrupted ones are marked so and rerun next time)."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be an integer >= 1, got {jobs!r}")
    from decentlearn.atomic import OutputError
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(out, e) from None
    report = SweepReport()
    todo = []
    for p in grid.points():
        if is_finished(out / p.name, p):
            report.skipped.append(p.name)
            if progress:
                progress(p.name, "skipped")
        else:
            todo.append(p)

    _log.info("sweep into %s: %d points, %d finished already, %d to run (jobs=%d)", out,
              len(grid), len(report.skipped), len(todo), jobs)

    def done(p: Point, r: dict) -> None:
        _log.log(logging.INFO if r["status"] == "completed" else logging.WARNING,
                 "point %s: %s%s", p.name, r["status"], f" ({r['error']})" if r["error"] else "")
        report.ran.append(p.name)
        if r["warnings"]:
            report.warnings[p.name] = r["warnings"]
        if r["status"] != "completed":
            report.failed[p.name] = f"{r['status']}: {r['error']}"
        if progress:
            progress(p.name, r["status"])

    if jobs == 1 or len(todo) <= 1:
        for p in todo:
            done(p, run_point(p.options, str(out / p.name)))
        return report
    import concurrent.futures as cf
    import multiprocessing as mp

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    saved = os.environ.get("OMP_NUM_THREADS")
    if "threads" not in grid.base and "threads" not in grid.axes:
        os.environ["OMP_NUM_THREADS"] = str(max(1, (cpus or 1) // jobs))
    try:
        pool = cf.ProcessPoolExecutor(max_workers=min(jobs, len(todo)),
                                      mp_context=mp.get_context("spawn"),
                                      initializer=_worker_init)
    finally:
        if saved is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = saved
    try:
        futures = {pool.submit(run_point, p.options, str(out / p.name)): p for p in todo}
        for f in cf.as_completed(futures):
            try:
                r = f.result()
            except (KeyboardInterrupt, cf.process.BrokenProcessPool):
                raise KeyboardInterrupt from None
            done(futures[f], r)
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return report


def _mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1; 0 for a single value)."""
    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return mean, 0.0
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))


def aggregate(grid: Grid, out: str | os.PathLike) -> list[dict]:
    """One row per grid point without the seed: the varying values, ``runs`` (completed / all
    seeds) and, for each METRICS key some run reports, ``<key>_mean`` and ``<key>_std`` over the
    completed runs (final evaluation; sample std). Reads the run directories under ``out``."""
    out = Path(out)
    groups: dict[tuple, list[Point]] = {}
    for p in grid.points():
        groups.setdefault(p.group, []).append(p)
    rows = []
    for group, points in groups.items():
        summaries = []
        for p in points:
            try:
                s = json.loads((out / p.name / "summary.json").read_text())
            except (OSError, ValueError):
                continue
            if isinstance(s, dict) and s.get("status") == "completed":
                summaries.append(s)
        row: dict = dict(group)
        row["runs"] = f"{len(summaries)}/{len(points)}"
        for key in METRICS:
            values = [float(s[key]) for s in summaries
                      if isinstance(s.get(key), (int, float)) and not isinstance(s[key], bool)]
            if values and len(values) == len(summaries):
                row[f"{key}_mean"], row[f"{key}_std"] = _mean_std(values)
        rows.append(row)
    return rows


def format_rows(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """(header, cells) of the aggregated table, each metric as ``mean ± std``."""
    from decentlearn.units import format_bytes
    keys = [k for k in dict.fromkeys(k for r in rows for k in r)
            if not k.endswith(("_mean", "_std")) and k != "runs"]
    metrics = [m for m in METRICS if any(f"{m}_mean" in r for r in rows)]
    short = {"test_accuracy_mean": "acc mean", "test_accuracy_min": "acc min",
             "test_accuracy_avg_model": "avg model", "consensus_distance": "consensus",
             "bytes_sent_total": "bytes sent", "sim_seconds": "sim s"}
    header = [*keys, "runs", *(short[m] for m in metrics)]
    cells = []
    for r in rows:
        line = [str(r.get(k, "")) for k in keys] + [r["runs"]]
        for m in metrics:
            if f"{m}_mean" not in r:
                line.append("-")
                continue
            mean, std = r[f"{m}_mean"], r[f"{m}_std"]
            if m == "bytes_sent_total":
                line.append(f"{format_bytes(mean)} ± {format_bytes(std)}")
            elif m in ("consensus_distance", "sim_seconds"):
                line.append(f"{mean:.3g} ± {std:.2g}")
            else:
                line.append(f"{mean:.4f} ± {std:.4f}")
        cells.append(line)
    return header, cells


def write_summary(grid: Grid, out: str | os.PathLike, rows: list[dict]) -> list[Path]:
    """Writes summary.csv (numbers, one column per mean and std) and summary.json (the grid and
    the rows) into ``out``; returns their paths."""
    import csv
    import io

    from decentlearn.atomic import atomic_write
    out = Path(out)
    columns = list(dict.fromkeys(k for r in rows for k in r))
    text = io.StringIO()
    w = csv.DictWriter(text, fieldnames=columns, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    atomic_write(out / "summary.csv", text.getvalue())
    doc = {"base": grid.base, "axes": grid.axes, "points": len(grid), "rows": rows}
    atomic_write(out / "summary.json", json.dumps(doc, indent=2, default=str) + "\n")
    return [out / "summary.csv", out / "summary.json"]


def plot_grid(grid: Grid, out: str | os.PathLike, path: str | os.PathLike) -> bool:
    """summary.png: per grid point (seeds pooled), the peers' mean test accuracy and the
    consensus distance against round, mean over seeds with a ± one standard deviation band.
    Returns False (nothing written) when matplotlib is missing or no run has finished."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    import numpy as np

    from decentlearn.atomic import atomic_writer
    from decentlearn.outputs.plot import accuracy_limits
    from decentlearn.outputs.rundir import RunDirError, load_run
    out = Path(out)
    groups: dict[tuple, list[Point]] = {}
    for p in grid.points():
        groups.setdefault(p.group, []).append(p)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.6), constrained_layout=True)
    drawn = 0
    for k, (group, points) in enumerate(groups.items()):
        curves: list[tuple[list, list, list]] = []
        for p in points:
            try:
                run = load_run(out / p.name)
            except RunDirError:
                continue
            if run.status != "completed" or not run.rows:
                continue
            curves.append((run.column("round"), run.column("test_accuracy_mean"),
                           run.column("consensus_distance")))
        if not curves:
            continue
        n = min(len(c[0]) for c in curves)
        rounds = np.asarray(curves[0][0][:n], dtype=float)
        label = ", ".join(f"{a}={v}" for a, v in group) or "all runs"
        label += f" ({len(curves)} seed{'s' if len(curves) > 1 else ''})"
        for ax, j in ((ax1, 1), (ax2, 2)):
            y = np.asarray([c[j][:n] for c in curves], dtype=float)
            mean = y.mean(axis=0)
            std = y.std(axis=0, ddof=1) if len(curves) > 1 else np.zeros_like(mean)
            color = f"C{k % 10}"
            ax.plot(rounds, mean, color=color, lw=1.8, label=label)
            ax.fill_between(rounds, mean - std, mean + std, color=color, alpha=0.2, lw=0)
        drawn += 1
    if not drawn:
        plt.close(fig)
        return False
    ax1.set(xlabel="round", ylabel="test accuracy (peers' mean)",
            ylim=accuracy_limits(v for line in ax1.get_lines() for v in line.get_ydata()),
            title="accuracy, mean ± std over seeds")
    ax2.set(xlabel="round", ylabel="(1/n) Σ‖xᵢ − x̄‖²", yscale="symlog",
            title="consensus distance, mean ± std over seeds")
    ax2.set_yscale("symlog", linthresh=1e-6)
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    fig.legend(*ax1.get_legend_handles_labels(), loc="outside lower center",
               ncols=1 if drawn > 6 else 2, fontsize=9, frameon=False)
    shared = ", ".join(f"{k}={v}" for k, v in grid.base.items()
                       if k in ("dataset", "peers", "model", "algorithm", "rounds", "topology",
                                "partition", "compress"))
    fig.suptitle(shared, fontsize=10)
    try:
        with atomic_writer(path) as f:
            fig.savefig(f, format="png", dpi=110)
    finally:
        plt.close(fig)
    return True
