"""The run directory: its layout, the writer that fills it as a run goes, and the reader.

A run directory holds ``config.toml`` (the resolved configuration, replayable with ``--config``),
``metrics.csv`` (one row per evaluation), ``peers.csv`` (every peer's accuracy and loss at every
evaluation, :mod:`decentlearn.outputs.peers`), ``summary.json``, ``run.log`` (the run's log
records, :mod:`decentlearn.outputs.runlog`), ``curves.png`` and, with ``--checkpoint-every``,
``checkpoint.npz``. :class:`RunWriter` writes them as the run goes:

* at the start, ``config.toml`` and a ``summary.json`` with ``"status": "running"`` and the
  process record that tells a live run from a dead one (:mod:`decentlearn.outputs.liveness`:
  a reader shows a ``running`` run whose process is gone as ``stale``);
* every evaluation row is appended to ``metrics.csv`` and flushed at once (header once), so a killed
  process (even SIGKILL) leaves every finished row on disk; a row that cannot be written whole is
  cut off again, so the file only ever holds complete lines; the peers' rows go to ``peers.csv``
  just before;
* at the end, ``summary.json`` with ``"status"`` ``"completed"``, ``"interrupted"`` (SIGINT, or
  SIGTERM through ``decentlearn.interrupts.signals_as_interrupts``), ``"diverged"``
  (``sim.DivergenceError``) or ``"failed"`` (any other exception, with its one-line message), and
  ``"last_round"``.

Whole files are written by ``decentlearn.atomic.atomic_write``: a reader sees the old file or the
new one, never a partial or empty one; every ``OSError`` while writing becomes an
``atomic.OutputError`` whose message is one line naming the path. :func:`load_run` reads a run
directory back (``decentlearn plot``, ``decentlearn compare``, sweeps). Library code never prints;
the CLI reports errors.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from decentlearn import atomic
from decentlearn.atomic import OutputError, atomic_write
from decentlearn.outputs.liveness import HEARTBEAT_SECONDS, Heartbeat, process_record, status_of
from decentlearn.outputs.peers import PEERS_FILE, PeersWriter
from decentlearn.outputs.runlog import RunLog

_log = logging.getLogger("decentlearn.outputs")

#: The files a run directory holds; a directory with any of them is an existing run.
RUN_FILES = ("config.toml", "metrics.csv", "peers.csv", "summary.json", "run.log", "curves.png",
             "checkpoint.npz")

#: Statuses summary.json can report.
STATUSES = ("running", "completed", "interrupted", "diverged", "failed")


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _json_clean(value: Any) -> Any:
    """Non-finite floats as strings ("inf", "nan"): JSON has no such numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_clean(v) for v in value]
    return value


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))  # a JSON string is a valid TOML basic string


def config_toml(config: Any) -> str:
    """The text of config.toml for a RunConfig (unset options as comments), replayable with
    ``decentlearn run --config``."""
    lines = ["# decentlearn run configuration (replay with: decentlearn run --config THIS_FILE)"]
    values = config.to_dict()
    values.update(values.pop("options", {}))  # the algorithm's options, as keys of their own
    for key, value in values.items():
        lines.append(f"# {key} = (default: unset)" if value is None
                     else f"{key} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def is_run_dir(path: str | os.PathLike) -> bool:
    """True when ``path`` is a directory holding any of the run files."""
    path = Path(path)
    return path.is_dir() and any((path / name).exists() for name in RUN_FILES)


def new_run_dir(root: str | os.PathLike = "runs", stamp: str | None = None) -> Path:
    """Creates and returns a fresh directory ``root/<timestamp>``; when that exists (two runs in the
    same second), ``root/<timestamp>-2``, ``-3``, ... (created with ``exist_ok=False``, so two
    processes never get the same one)."""
    root = Path(root)
    stamp = stamp or time.strftime("%Y%m%d-%H%M%S")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(root, e) from None
    for n in range(1, 10_000):
        path = root / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            path.mkdir(exist_ok=False)
            return path
        except FileExistsError:
            continue
        except OSError as e:
            raise OutputError(path, e) from None
    raise OutputError(root, OSError(errno.EEXIST, "too many runs with the same timestamp"))


def prepare_run_dir(path: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Makes ``path`` ready to receive a run: created if missing; an existing run directory is
    refused (FileExistsError) unless ``overwrite``, which removes its run files first."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, f"{path}: exists and is not a directory")
    if is_run_dir(path):
        if not overwrite:
            raise FileExistsError(errno.EEXIST, f"{path} already holds a run "
                                  f"({', '.join(n for n in RUN_FILES if (path / n).exists())}); "
                                  "choose another directory or pass --overwrite")
        for name in RUN_FILES:
            try:
                (path / name).unlink(missing_ok=True)
            except OSError as e:
                raise OutputError(path / name, e) from None
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(path, e) from None
    return path


class RunWriter:
    """Streams a run's results into a directory (see the module's docstring).

    Use it as a context manager around the run and pass it as a callback to ``Simulator.run``::

        with RunWriter(out, config) as writer:
            result = sim.run([writer])
            writer.finish(result.summary)

    Leaving the block with an exception writes summary.json with the status it implies
    (``interrupted``, ``diverged`` or ``failed``) and the last round, and lets the exception go on.

    ``peers``: write peers.csv (each evaluation's per-peer accuracy and loss, read from the
    simulator's ``last_accuracy`` and ``last_loss``); ``log_level``: the level of run.log's
    records (None: no run.log); ``heartbeat``: seconds between two heartbeats of the running
    summary (decentlearn.outputs.liveness).
    """

    def __init__(self, directory: str | os.PathLike, config: Any = None, *, peers: bool = True,
                 log_level: int | None = logging.INFO,
                 heartbeat: float = HEARTBEAT_SECONDS) -> None:
        self.dir = Path(directory)
        self.config = config
        self._peers = PeersWriter(self.dir / PEERS_FILE) if peers else None
        self._runlog = RunLog(self.dir / "run.log", log_level) if log_level is not None else None
        self._heartbeat = Heartbeat(self.dir / "summary.json", heartbeat)
        self.status = "running"
        self.last_round = 0
        self.rows = 0
        self.last_row: dict | None = None
        self.summary: dict = {}
        self._csv: IO[bytes] | None = None
        self._columns: list[str] | None = None
        self._size = 0
        #: A row being appended: (row, file size, rows, last round) once it is on disk. A signal
        #: (KeyboardInterrupt, SIGTERM) can land between the write and the bookkeeping; the
        #: summary then trusts the file (see _settle).
        self._pending: tuple | None = None

    @property
    def metrics_path(self) -> Path:
        return self.dir / "metrics.csv"

    @property
    def summary_path(self) -> Path:
        return self.dir / "summary.json"

    # --- lifecycle ----------------------------------------------------------------------------
    def __enter__(self) -> RunWriter:
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if exc is None:
                if self.status == "running":
                    self.write_summary("completed")
                return False
            if self.status == "completed":
                # finish() already wrote the whole run: a signal landing after it (Ctrl-C while
                # the writer closes) must not turn a complete result into an interrupted one.
                return False
            from decentlearn.sim import DivergenceError

            if isinstance(exc, KeyboardInterrupt):
                status = "interrupted"
            elif isinstance(exc, DivergenceError):
                status = "diverged"
            else:
                status = "failed"
            message = str(exc).strip().splitlines()
            error = message[0] if message else type(exc).__name__
            _log.log(logging.WARNING if status == "interrupted" else logging.ERROR,
                     "run %s: %s (rounds finished: %d)", status, error, self.last_round)
            try:
                self.write_summary(status, error=error)
            except OutputError:
                pass  # the original exception matters more; summary.json keeps its last version
            return False
        finally:
            self.close()

    def start(self) -> None:
        """Writes config.toml and a summary.json with status "running", starts run.log and the
        heartbeat. On an error nothing stays attached (run.log's handler, the heartbeat)."""
        try:
            if self._runlog is not None:
                try:
                    self._runlog.attach()
                except OSError as e:
                    raise OutputError(self._runlog.path, e) from None
            if self.config is not None:
                atomic_write(self.dir / "config.toml", config_toml(self.config))
            self.write_summary("running")
            self._heartbeat.start()
        except BaseException:
            self.close()
            raise
        _log.info("run directory %s", self.dir)

    def close(self) -> None:
        self._heartbeat.stop()
        if self._csv is not None:
            with contextlib.suppress(OSError):
                self._csv.close()
            self._csv = None
        if self._peers is not None:
            self._peers.close()
        if self._runlog is not None:
            self._runlog.detach()

    # --- callback hooks (see sim.Callback) ----------------------------------------------------
    def on_round_end(self, sim: Any, t: int) -> None:
        self.last_round = t + 1

    def on_eval(self, sim: Any, row: dict) -> None:
        acc, loss = getattr(sim, "last_accuracy", None), getattr(sim, "last_loss", None)
        if self._peers is not None and acc is not None and loss is not None:
            self._peers.append(row["round"], acc, loss)
        self.append(row)

    def resume(self, rows: list[dict], last_round: int) -> None:
        """Continues the run directory from a checkpoint (decentlearn.runner.checkpoint):
        metrics.csv is rewritten atomically with ``rows`` (the checkpoint's; rows written after
        it are dropped) and later rows are appended; peers.csv is cut back to the same round.
        ``last_round`` is the checkpoint's finished rounds."""
        if self._csv is not None:
            with contextlib.suppress(OSError):
                self._csv.close()
            self._csv = None
        if self._peers is not None:
            self._peers.resume(int(last_round))
        self._columns = None
        data = b""
        if rows:
            from decentlearn.metrics import COLUMNS
            first = rows[0]
            self._columns = ([c for c in COLUMNS if c in first]
                             + [k for k in first if k not in COLUMNS])
            text = io.StringIO()
            writer = csv.DictWriter(text, fieldnames=self._columns, lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)
            data = text.getvalue().encode()
            atomic_write(self.metrics_path, data)
            try:
                self._csv = open(self.metrics_path, "ab", buffering=0)
            except OSError as e:
                raise OutputError(self.metrics_path, e) from None
        else:
            try:
                self.metrics_path.unlink(missing_ok=True)
            except OSError as e:
                raise OutputError(self.metrics_path, e) from None
        self._size, self.rows = len(data), len(rows)
        self.last_row = dict(rows[-1]) if rows else None
        self.last_round = int(last_round)

    # --- writing ------------------------------------------------------------------------------
    def append(self, row: dict) -> None:
        """Appends one evaluation row to metrics.csv and flushes it (header before the first).
        The columns are fixed by the first row (``metrics.COLUMNS`` first); a row with other keys
        is a ValueError. On a write error the file is cut back to its last complete row."""
        from decentlearn.metrics import COLUMNS

        if self._columns is None:
            self._columns = [c for c in COLUMNS if c in row] + [k for k in row if k not in COLUMNS]
        extra = [k for k in row if k not in self._columns]
        if extra:
            raise ValueError(f"row has keys {extra} not in metrics.csv's columns {self._columns}")
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=self._columns, lineterminator="\n")
        if self._csv is None:
            writer.writeheader()
        writer.writerow(row)
        data = text.getvalue().encode()
        try:
            if self._csv is None:
                self._csv = open(self.metrics_path, "wb", buffering=0)
                self._size = 0
            self._pending = (dict(row), self._size + len(data), self.rows + 1,
                             max(self.last_round, int(row.get("round", 0))))
            atomic.write_all(self._csv.fileno(), data)
        except OSError as e:
            self._pending = None
            if self._csv is not None:
                with contextlib.suppress(OSError):
                    os.ftruncate(self._csv.fileno(), self._size)
            raise OutputError(self.metrics_path, e) from None
        self._settle()

    def _settle(self) -> None:
        """Books the pending row if it reached the file whole (idempotent: absolute values)."""
        if self._pending is None or self._csv is None:
            return
        row, size, rows, last_round = self._pending
        with contextlib.suppress(OSError):
            if os.fstat(self._csv.fileno()).st_size >= size:
                self.last_row, self._size, self.rows = row, size, rows
                self.last_round = max(self.last_round, last_round)
            else:  # cut off mid-row: back to the last complete row
                os.ftruncate(self._csv.fileno(), self._size)
        self._pending = None

    def write_summary(self, status: str, *, summary: dict | None = None,
                      error: str | None = None) -> None:
        """Writes summary.json atomically with ``status`` and the last round; ``summary`` (the
        simulator's) is included when given, else the last evaluation row's metrics."""
        if status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
        self._settle()  # a row a signal cut off from its bookkeeping, if it is on disk
        out: dict = {"status": status, "last_round": self.last_round}
        if summary is not None:
            out.update(summary)
        elif self.last_row is not None:
            out["last_eval_round"] = self.last_row.get("round")
            out.update({k: v for k, v in self.last_row.items() if k != "round"})
        if error is not None:
            out["error"] = error
        if self.config is not None and "config" not in out:
            out["config"] = self.config.to_dict()
        if status == "running":
            out["process"] = process_record(self._heartbeat.seconds)
        out["status"] = status
        text = json.dumps(_json_clean(out), indent=2, default=_json_default) + "\n"
        atomic_write(self.summary_path, text)
        self.status = status
        self.summary = out

    def finish(self, summary: dict) -> None:
        """Marks the run completed: summary.json gets the simulator's ``summary``."""
        self.last_round = max(self.last_round, int(summary.get("rounds", self.last_round)))
        self.write_summary("completed", summary=summary)
        _log.info("run completed: %d rounds, results in %s", self.last_round, self.dir)


# --- reading a run directory back ------------------------------------------------------------

class RunDirError(ValueError):
    """A directory given as a run is not one, or its files cannot be read; ``str()`` is one line."""


@dataclass(frozen=True)
class Run:
    """One run directory as read back from disk: its configuration (config.toml, else the copy in
    summary.json), its summary.json (empty when missing) and its metrics.csv rows (floats; an
    empty cell is None)."""

    path: Path
    config: dict = field(repr=False)
    summary: dict = field(repr=False)
    rows: list[dict] = field(repr=False)

    @property
    def name(self) -> str:
        return self.path.name or str(self.path)

    @property
    def status(self) -> str:
        """summary.json's status, ``stale`` for a ``running`` run whose process is gone
        (decentlearn.outputs.liveness), ``unknown`` without summary.json."""
        return status_of(self.summary, self.path / "summary.json")

    def column(self, name: str) -> list[float] | None:
        """The values of metrics.csv column ``name``, or None when no row has it."""
        values = [r.get(name) for r in self.rows]
        return None if all(v is None for v in values) else values


def _number(text: str) -> float | None:
    if text is None or text == "":
        return None
    try:
        return float(text)
    except ValueError:
        return None


def holds_run(path: str | os.PathLike) -> bool:
    """True when ``path`` is a run directory: it holds config.toml or metrics.csv, or a
    summary.json with a ``status`` (a sweep's own summary.json has none)."""
    path = Path(path)
    if not path.is_dir():
        return False
    if (path / "config.toml").is_file() or (path / "metrics.csv").is_file():
        return True
    try:
        summary = json.loads((path / "summary.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(summary, dict) and "status" in summary


def find_runs(paths: list[str | os.PathLike]) -> list[Path]:
    """The run directories named by ``paths``, in order: a path that is a run directory
    (:func:`holds_run`) stands for itself; any other folder (a sweep's output, ``runs/``) for
    every run directory below it, in sorted order (a run's own subfolders are not searched).
    RunDirError (one line) for a missing path, a file, or a folder with no run in it."""
    found: list[Path] = []
    for p in paths:
        p = Path(p)
        if not p.is_dir():
            raise RunDirError(f"{p}: not a directory" if p.exists() else f"{p}: no such directory")
        if holds_run(p) or (p / "summary.json").is_file() and not _is_sweep_summary(p):
            found.append(p)
            continue
        below = []
        for root, dirs, _ in os.walk(p):
            dirs.sort()
            keep = []
            for d in dirs:
                if holds_run(Path(root) / d):
                    below.append(Path(root) / d)
                else:
                    keep.append(d)
            dirs[:] = keep
        if not below:
            raise RunDirError(f"{p}: no runs in this folder (no run directory in it or below: "
                              "none holds config.toml, metrics.csv or a run's summary.json)")
        found += sorted(below)
    return found


def _is_sweep_summary(path: Path) -> bool:
    try:
        summary = json.loads((path / "summary.json").read_text())
    except (OSError, ValueError):
        return False  # unreadable: load_run reports it
    return isinstance(summary, dict) and "status" not in summary


def load_run(path: str | os.PathLike) -> Run:
    """Reads a run directory written by ``decentlearn run`` (:class:`RunWriter`). Raises
    RunDirError (one line naming the path) when it is not a directory, holds neither
    summary.json nor metrics.csv, or a file is unreadable or malformed."""
    import tomllib

    path = Path(path)
    if not path.is_dir():
        raise RunDirError(f"{path}: not a directory" if path.exists()
                          else f"{path}: no such directory")
    summary_path, metrics_path, config_path = (path / "summary.json", path / "metrics.csv",
                                               path / "config.toml")
    if not summary_path.is_file() and not metrics_path.is_file():
        raise RunDirError(f"{path}: not a run directory (no summary.json or metrics.csv)")
    try:
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
        if not isinstance(summary, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        raise RunDirError(f"{summary_path}: unreadable ({str(e).splitlines()[0]})") from None
    config: dict = {}
    try:
        if config_path.is_file():
            with open(config_path, "rb") as f:
                config = tomllib.load(f)
            config = config.get("run", config) if isinstance(config.get("run"), dict) else config
        elif isinstance(summary.get("config"), dict):
            config = dict(summary["config"])
    except (OSError, ValueError) as e:
        raise RunDirError(f"{config_path}: unreadable ({str(e).splitlines()[0]})") from None
    rows: list[dict] = []
    if metrics_path.is_file():
        try:
            with open(metrics_path, newline="") as f:
                rows = [{k: _number(v) for k, v in row.items() if k is not None}
                        for row in csv.DictReader(f)]
        except (OSError, csv.Error, UnicodeDecodeError) as e:
            raise RunDirError(f"{metrics_path}: unreadable ({str(e).splitlines()[0]})") from None
    return Run(path, config, summary, rows)
