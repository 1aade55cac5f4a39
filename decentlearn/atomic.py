"""Whole files or nothing: atomic writes and the one error type for failed writes.

:func:`atomic_write` / :func:`atomic_writer` write a file through a temporary file in the same
directory (flush, fsync, ``os.replace``, then fsync of the directory): a reader sees the old file
or the new one, never a partial or empty one, whatever interrupts the writer. Every ``OSError``
while writing becomes an :class:`OutputError` whose message is one line naming the path ("no space
left on device" for ENOSPC). Run directories (``decentlearn.outputs``), checkpoints and sweep
summaries are all written through here.

:func:`write_all` is the one place where bytes reach the disk (the streamed ``metrics.csv`` rows
use it too): tests inject faults (a full disk, a signal mid-write) by replacing it.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO


class OutputError(OSError):
    """Writing a file failed; ``str()`` is one line naming the path and the reason."""

    def __init__(self, path: str | os.PathLike, error: OSError) -> None:
        reason = ("no space left on device" if error.errno == errno.ENOSPC
                  else (error.strerror or str(error)).lower())
        super().__init__(error.errno, f"cannot write {os.fspath(path)}: {reason}")
        self.path = os.fspath(path)

    def __str__(self) -> str:
        return self.strerror


def write_all(fd: int, data: bytes) -> None:
    """Writes all of ``data`` to the file descriptor ``fd`` (the one place bytes reach the disk:
    tests inject faults here)."""
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


def default_mode() -> int:
    """The mode ``open()`` gives a new file: 0o666 less the process's umask. (``mkstemp`` creates
    its file 0o600 whatever the umask; a result others on a shared machine may read must not
    keep that.) Read from /proc where Linux shows it, else by setting the umask and back."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike) -> Iterator[IO[bytes]]:
    """A binary file to write ``path``'s new content into; on success it replaces ``path``
    atomically (temp file in the same directory, flush, fsync, ``os.replace``). The file gets the
    mode ``open()`` would give it (0o666 less the umask). On any error the temporary file is
    removed, ``path`` is left as it was, and OSErrors become OutputError."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise OutputError(path, e) from None
    try:
        os.fchmod(fd, default_mode())  # as open() would create it, not mkstemp's 0o600
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
    """A raw file over ``fd`` whose writes go through :func:`write_all` (closes the fd)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        data = bytes(data)
        write_all(self.fd, data)
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
