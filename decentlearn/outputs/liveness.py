"""Is a ``running`` run still running? The process record of summary.json and the heartbeat.

A run killed with SIGKILL (or whose machine died) cannot write its final status: its summary.json
says ``running`` forever. So while a run goes, :class:`~decentlearn.outputs.rundir.RunWriter`
records who runs it, under ``"process"`` in summary.json (:func:`process_record`)::

    "process": {"host": "node17", "boot_id": "5f0c...", "pid": 41233, "pid_start": 8712331,
                "heartbeat_seconds": 30.0}

and touches summary.json's modification time every ``heartbeat_seconds`` from a daemon thread
(:class:`Heartbeat`). :func:`status_of` reads a summary back:

* on the host that runs it (same host name and, where Linux tells it, the same boot): ``running``
  while the process ``pid`` exists, is not a zombie and started at ``pid_start`` (so a recycled pid
  does not count), else ``stale``;
* on another host (a shared file system): ``running`` while the heartbeat is younger than
  ``STALE_AFTER_SECONDS`` (and ten heartbeats), else ``stale`` — the clocks of the two hosts are
  assumed to agree within minutes (NTP);
* a summary without the record (written before it existed) keeps its ``running``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from pathlib import Path

__all__ = ["HEARTBEAT_SECONDS", "STALE_AFTER_SECONDS", "Heartbeat", "boot_id", "pid_alive",
           "process_record", "process_start", "status_of"]

#: Seconds between two heartbeats of a running run (summary.json's modification time is touched).
HEARTBEAT_SECONDS = 30.0

#: A ``running`` summary written on another host is ``stale`` once its heartbeat is this old.
STALE_AFTER_SECONDS = 300.0


def boot_id() -> str | None:
    """This boot of this machine (Linux's /proc/sys/kernel/random/boot_id), or None."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state first), or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2:].split()


def process_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, /proc/PID/stat), or None."""
    fields = _stat_fields(pid)
    try:
        return int(fields[19]) if fields else None
    except (IndexError, ValueError):
        return None


def pid_alive(pid: int, start: int | None = None) -> bool:
    """True when process ``pid`` runs on this host (not a zombie) and, if ``start`` is given and
    /proc tells it, started at ``start``."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    fields = _stat_fields(pid)
    if fields is not None:
        if fields[0] in ("Z", "X"):  # killed, not yet reaped: dead
            return False
        return start is None or process_start(pid) in (None, start)
    if Path("/proc/self/stat").exists():  # /proc works and has no such process
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    except OSError:
        return False
    return True


def process_record(heartbeat_seconds: float) -> dict:
    """The ``"process"`` entry of a running run's summary.json (see the module docstring)."""
    return {"host": socket.gethostname(), "boot_id": boot_id(), "pid": os.getpid(),
            "pid_start": process_start(os.getpid()), "heartbeat_seconds": heartbeat_seconds}


def status_of(summary: dict, summary_path: str | os.PathLike, *,
              stale_after: float | None = None, now: float | None = None) -> str:
    """The status of a run from its summary.json (``summary``, read from ``summary_path``):
    its ``status``, except ``stale`` for a ``running`` run whose process is gone (see the module
    docstring). ``stale_after`` (seconds) defaults to ``max(STALE_AFTER_SECONDS, 10
    heartbeats)``; ``now`` to ``time.time()``."""
    status = str(summary.get("status", "unknown"))
    record = summary.get("process")
    if status != "running" or not isinstance(record, dict):
        return status
    same_host = record.get("host") == socket.gethostname()
    recorded_boot, this_boot = record.get("boot_id"), boot_id()
    if same_host and recorded_boot and this_boot and recorded_boot != this_boot:
        return "stale"  # the machine rebooted since
    pid = record.get("pid")
    if same_host and isinstance(pid, int):
        start = record.get("pid_start")
        return "running" if pid_alive(pid, start if isinstance(start, int) else None) else "stale"
    if stale_after is None:
        beat = record.get("heartbeat_seconds")
        beat = float(beat) if isinstance(beat, (int, float)) and not isinstance(beat, bool) else 0
        stale_after = max(STALE_AFTER_SECONDS, 10 * beat)
    try:
        age = (time.time() if now is None else now) - os.stat(summary_path).st_mtime
    except OSError:
        return status
    return "stale" if age > stale_after else "running"


class Heartbeat:
    """Touches ``path``'s modification time every ``seconds`` from a daemon thread, between
    ``start()`` and ``stop()`` (a missing file is skipped: the writer replaces it atomically)."""

    def __init__(self, path: str | os.PathLike, seconds: float) -> None:
        if not (isinstance(seconds, (int, float)) and seconds > 0):
            raise ValueError(f"seconds must be a number > 0, got {seconds!r}")
        self.path, self.seconds = Path(path), float(seconds)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            thread = threading.Thread(target=self._beat, name="decentlearn-heartbeat",
                                      daemon=True)
            try:
                thread.start()
            finally:  # Ctrl-C inside start() may come before or after the thread began
                if thread.ident is not None:
                    self._thread = thread

    def _beat(self) -> None:
        while not self._stop.wait(self.seconds):
            with contextlib.suppress(OSError):
                os.utime(self.path)

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join()
