"""Run outputs that survive interruptions, crashes and full disks.

A run directory holds ``config.toml`` (the resolved configuration, replayable with ``--config``),
``metrics.csv`` (one row per evaluation), ``summary.json`` and ``curves.png``. :class:`RunWriter`
writes them as the run goes:

* at the start, ``config.toml`` and a ``summary.json`` with ``"status": "running"``;
* every evaluation row is appended to ``metrics.csv`` and flushed at once (header once), so a killed
  process (even SIGKILL) leaves every finished row on disk; a row that cannot be written whole is
  cut off again, so the file only ever holds complete lines;
* at the end, ``summary.json`` with ``"status"`` ``"completed"``, ``"interrupted"`` (SIGINT, or
  SIGTERM through :func:`signals_as_interrupts`), ``"diverged"`` (``sim.DivergenceError``) or
  ``"failed"`` (any other exception, with its one-line message), and ``"last_round"``.

Whole files are written by :func:`atomic_write` (temporary file in the same directory, fsync,
``os.replace``): a reader sees the old file or the new one, never a partial or empty one. Every
``OSError`` while writing becomes an :class:`OutputError` whose message is one line naming the path
("no space left on device" for ENOSPC). Library code never prints; the CLI reports these.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import math
import os
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

#: The files a run directory holds; a directory with any of them is an existing run.
RUN_FILES = ("config.toml", "metrics.csv", "summary.json", "curves.png", "checkpoint.npz")

#: Statuses summary.json can report.
STATUSES = ("running", "completed", "interrupted", "diverged", "failed")


class OutputError(OSError):
    """Writing a run's output failed; ``str()`` is one line naming the path and the reason."""

    def __init__(self, path: str | os.PathLike, error: OSError) -> None:
        reason = ("no space left on device" if error.errno == errno.ENOSPC
                  else (error.strerror or str(error)).lower())
        super().__init__(error.errno, f"cannot write {os.fspath(path)}: {reason}")
        self.path = os.fspath(path)

    def __str__(self) -> str:
        return self.strerror


class Interrupted(KeyboardInterrupt):
    """A termination signal (SIGTERM, ...) raised as an exception by signals_as_interrupts."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"received {signal.Signals(signum).name}")
        self.signum = signum


@contextlib.contextmanager
def signals_as_interrupts(signums: tuple[int, ...] = (signal.SIGTERM,)) -> Iterator[None]:
    """Within the block, the given signals raise :class:`Interrupted` in the main thread (like
    SIGINT raises KeyboardInterrupt), so ``finally``/``__exit__`` code runs; the previous handlers
    are restored afterwards. Outside the main thread it does nothing (Python delivers signals to
    the main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Interrupted(signum)

    previous = {s: signal.signal(s, handler) for s in signums}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _write(fd: int, data: bytes) -> None:
    """Writes all of ``data`` to ``fd`` (the one place bytes reach the disk: tests inject faults
    here)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # some platforms and file systems cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike) -> Iterator[IO[bytes]]:
    """A binary file to write ``path``'s new content into; on success it replaces ``path``
    atomically (temp file in the same directory, flush, fsync, ``os.replace``). On any error the
    temporary file is removed, ``path`` is left as it was, and OSErrors become OutputError."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise OutputError(path, e) from None
    try:
        with io.BufferedWriter(_FdWriter(fd), buffer_size=1 << 16) as f:
            yield f
            f.flush()
            os.fsync(fd)
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError) and not isinstance(e, OutputError):
            raise OutputError(path, e) from None
        raise
    _fsync_dir(path.parent)


class _FdWriter(io.RawIOBase):
    """A raw file over ``fd`` whose writes go through :func:`_write` (closes the fd)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        data = bytes(data)
        _write(self.fd, data)
        return len(data)

    def close(self) -> None:
        if not self.closed:
            try:
                os.close(self.fd)
            finally:
                super().close()


def atomic_write(path: str | os.PathLike, data: bytes | str) -> None:
    """Writes ``data`` (str as UTF-8) to ``path`` atomically: readers see the old file or the new
    one, never a partial or empty file. Raises OutputError (one line naming the path)."""
    with atomic_writer(path) as f:
        f.write(data.encode() if isinstance(data, str) else data)


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
    """

    def __init__(self, directory: str | os.PathLike, config: Any = None) -> None:
        self.dir = Path(directory)
        self.config = config
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
            try:
                self.write_summary(status, error=error)
            except OutputError:
                pass  # the original exception matters more; summary.json keeps its last version
            return False
        finally:
            self.close()

    def start(self) -> None:
        """Writes config.toml and a summary.json with status "running"."""
        if self.config is not None:
            atomic_write(self.dir / "config.toml", config_toml(self.config))
        self.write_summary("running")

    def close(self) -> None:
        if self._csv is not None:
            with contextlib.suppress(OSError):
                self._csv.close()
            self._csv = None

    # --- callback hooks (see sim.Callback) ----------------------------------------------------
    def on_round_end(self, sim: Any, t: int) -> None:
        self.last_round = t + 1

    def on_eval(self, sim: Any, row: dict) -> None:
        self.append(row)

    def resume(self, rows: list[dict], last_round: int) -> None:
        """Continues the run directory from a checkpoint (decentlearn.runner.checkpoint): metrics.csv is
        rewritten atomically with ``rows`` (the checkpoint's; rows written after it are dropped)
        and later rows are appended. ``last_round`` is the checkpoint's finished rounds."""
        self.close()
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
            _write(self._csv.fileno(), data)
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
        out["status"] = status
        text = json.dumps(_json_clean(out), indent=2, default=_json_default) + "\n"
        atomic_write(self.summary_path, text)
        self.status = status
        self.summary = out

    def finish(self, summary: dict) -> None:
        """Marks the run completed: summary.json gets the simulator's ``summary``."""
        self.last_round = max(self.last_round, int(summary.get("rounds", self.last_round)))
        self.write_summary("completed", summary=summary)
