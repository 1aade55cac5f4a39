"""Download of the public data sets, each file checked against a published checksum.

Every file is streamed into a temporary file beside its target, its digest checked, and only then
renamed into place, so an interrupted or corrupt download never leaves a file with the final name.
Files already present with a valid checksum are skipped. Archives (CIFAR-10) are extracted after
every member has been checked to stay inside the target folder. Every failure to fetch a file
(offline, HTTP error, timeout, truncated transfer, checksum mismatch) raises ``DownloadError``, an
OSError whose message is one line naming the URL and the reason.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import logging
import os
import pathlib
import re
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from decentlearn.atomic import default_mode

__all__ = [
    "DATASET_FILES",
    "ChecksumError",
    "DownloadError",
    "ProgressCallback",
    "RemoteFile",
    "download",
    "verify_checksum",
]

_log = logging.getLogger("decentlearn.data")

#: ``callback(filename, bytes_done, bytes_total_or_None)``, called as a download goes.
ProgressCallback = Callable[[str, int, int | None], None]

_CHECKSUM = re.compile(r"^(md5|sha1|sha256|sha512):([0-9a-f]+)$")
_DIGEST_LENGTHS = {"md5": 32, "sha1": 40, "sha256": 64, "sha512": 128}
_CHUNK = 1 << 20


class DownloadError(OSError):
    """A file could not be downloaded: ``url`` and a one-line ``reason`` (offline, HTTP status,
    timeout, truncated transfer, checksum mismatch, unwritable folder). ``str()`` is one line."""

    def __init__(self, url: str, reason: str) -> None:
        reason = " ".join(str(reason).split())
        super().__init__(f"cannot download {url}: {reason}")
        self.url = url
        self.reason = reason

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return type(self), (self.url, self.reason)


class ChecksumError(DownloadError, ValueError):
    """The downloaded bytes do not match the published checksum (also a ValueError)."""


@dataclass(frozen=True)
class RemoteFile:
    """One file of a data set: its name on disk, where to get it and its expected digest.

    ``checksum`` is ``"ALGO:HEX"`` with ALGO one of md5, sha1, sha256, sha512. With ``extract``
    the file is a tar archive unpacked into the target folder after it has been checked.
    """

    filename: str
    url: str
    checksum: str
    extract: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.filename, str) or not self.filename:
            raise TypeError(f"filename must be a non-empty str, got {self.filename!r}")
        if "/" in self.filename or "\\" in self.filename or self.filename in (".", ".."):
            raise ValueError(f"filename must be a plain file name without folders, got {self.filename!r}")
        if not isinstance(self.url, str):
            raise TypeError(f"url must be a str, got {type(self.url).__name__}")
        if not isinstance(self.checksum, str):
            raise TypeError(f"checksum must be a str, got {type(self.checksum).__name__}")
        match = _CHECKSUM.match(self.checksum)
        if match is None or len(match.group(2)) != _DIGEST_LENGTHS[match.group(1)]:
            raise ValueError(
                f"checksum of {self.filename!r} must look like 'md5:<32 hex>' or 'sha256:<64 hex>' "
                f"(lower case), got {self.checksum!r}"
            )

    @property
    def algorithm(self) -> str:
        return self.checksum.split(":", 1)[0]

    @property
    def digest(self) -> str:
        return self.checksum.split(":", 1)[1]


def _files(base: str, entries: dict[str, str], extract: bool = False) -> tuple[RemoteFile, ...]:
    return tuple(RemoteFile(name, base + name, checksum, extract) for name, checksum in entries.items())


# Only md5 digests are published for these files (by the mirrors' maintainers / torchvision).
DATASET_FILES: dict[str, tuple[RemoteFile, ...]] = {
    "mnist": _files(
        "https://ossci-datasets.s3.amazonaws.com/mnist/",
        {
            "train-images-idx3-ubyte.gz": "md5:f68b3c2dcbeaaa9fbdd348bbdeb94873",
            "train-labels-idx1-ubyte.gz": "md5:d53e105ee54ea40749a09fcbcd1e9432",
            "t10k-images-idx3-ubyte.gz": "md5:9fb629c4189551a2d022fa330f9573f3",
            "t10k-labels-idx1-ubyte.gz": "md5:ec29112dd5afa0611ce80d1b7f02629c",
        },
    ),
    "fashion-mnist": _files(
        # The bucket's website endpoint, as linked from the Fashion-MNIST README; http only,
        # integrity comes from the md5 published in that README.
        "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
        {
            "train-images-idx3-ubyte.gz": "md5:8d4fb7e6c68d591d4c3dfef9ec88bf0d",
            "train-labels-idx1-ubyte.gz": "md5:25c81989df183df01b3e8a0aad5dffbe",
            "t10k-images-idx3-ubyte.gz": "md5:bef4ecab320f06d8554ea6380940ec79",
            "t10k-labels-idx1-ubyte.gz": "md5:bb300cfdad3c16e7a12a480ee83cd310",
        },
    ),
    "cifar10": _files(
        "https://www.cs.toronto.edu/~kriz/",
        {"cifar-10-binary.tar.gz": "md5:c32a1d4ab5d03f1284b67883e8d87530"},
        extract=True,
    ),
}


def verify_checksum(path: str | os.PathLike[str], checksum: str) -> tuple[bool, str]:
    """Hash ``path`` with the algorithm of ``checksum`` (``"ALGO:HEX"``); return (match, actual digest)."""
    algorithm, expected = checksum.split(":", 1)
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    actual = h.hexdigest()
    return actual == expected, actual


def _reporter(progress: bool | ProgressCallback) -> ProgressCallback | None:
    if callable(progress):
        return progress
    if isinstance(progress, bool):
        if not progress:
            return None

        def log(filename: str, done: int, total: int | None) -> None:
            of = f" of {total}" if total is not None else ""
            _log.info("downloading %s: %d%s bytes", filename, done, of)

        return log
    raise TypeError(
        f"progress must be a bool or a callable(filename, done, total), got {type(progress).__name__}"
    )


def _describe(exc: BaseException) -> str:
    """A one-line reason for a network or file error (``[Errno 111] Connection refused`` -> text)."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}".strip()
    if isinstance(exc, urllib.error.URLError):
        inner = exc.reason
        return _describe(inner) if isinstance(inner, BaseException) else str(inner)
    if isinstance(exc, http.client.IncompleteRead):
        return f"truncated transfer: the connection closed after {len(exc.partial)} more bytes"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())


def _fetch(
    url: str, entry: RemoteFile, target: pathlib.Path, timeout: float, report: ProgressCallback | None
) -> None:
    h = hashlib.new(entry.algorithm)
    try:
        fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    except OSError as exc:
        raise DownloadError(url, f"cannot create a file in {target.parent}: {_describe(exc)}") from exc
    tmp = pathlib.Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            try:
                response = urllib.request.urlopen(url, timeout=timeout)
            except (OSError, http.client.HTTPException) as exc:  # URLError, HTTPError, timeouts
                if isinstance(exc, urllib.error.HTTPError):
                    exc.close()  # it holds the open response
                raise DownloadError(url, _describe(exc)) from exc
            except ValueError as exc:  # "unknown url type", http.client.InvalidURL
                raise DownloadError(url, f"not a valid URL: {exc}") from exc
            with response:
                length = response.headers.get("Content-Length")
                total = int(length) if length is not None and length.isdigit() else None
                done = 0
                while True:
                    try:
                        chunk = response.read(_CHUNK)
                    except (OSError, http.client.HTTPException) as exc:
                        raise DownloadError(url, _describe(exc)) from exc
                    if not chunk:
                        break
                    h.update(chunk)
                    try:
                        out.write(chunk)
                    except OSError as exc:
                        raise DownloadError(url, f"cannot write {tmp}: {_describe(exc)}") from exc
                    done += len(chunk)
                    if report is not None:
                        report(entry.filename, done, total)
            if total is not None and done != total:
                # http.client returns a short body without error when the server closes early.
                raise DownloadError(url, f"truncated transfer: received {done} of {total} bytes")
        actual = h.hexdigest()
        if actual != entry.digest:
            raise ChecksumError(
                url,
                f"checksum mismatch for {entry.filename}: expected {entry.algorithm} "
                f"{entry.digest}, got {actual}; the download was deleted",
            )
        os.chmod(tmp, default_mode())  # as open() would make it: 0o666 less the umask
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def _check_members(tar: tarfile.TarFile, archive: pathlib.Path) -> list[tarfile.TarInfo]:
    members = tar.getmembers()
    for m in members:
        parts = pathlib.PurePosixPath(m.name.replace("\\", "/")).parts
        if m.name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", m.name) or ".." in parts:
            raise ValueError(f"{archive}: unsafe archive member {m.name!r}: absolute path or '..' component")
        if not (m.isfile() or m.isdir()):
            raise ValueError(
                f"{archive}: unsafe archive member {m.name!r}: only regular files and folders are "
                f"accepted, not links or device files"
            )
    return members


def _extract(archive: pathlib.Path, root: pathlib.Path) -> None:
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = _check_members(tar, archive)
            missing = [
                m
                for m in members
                if m.isfile() and not ((root / m.name).is_file() and (root / m.name).stat().st_size == m.size)
            ]
            if not missing:
                return
            if hasattr(tarfile, "data_filter"):
                tar.extractall(root, members=members, filter="data")
            else:  # pragma: no cover - Python without PEP 706 filters
                tar.extractall(root, members=members)
    except tarfile.TarError as exc:
        raise ValueError(f"{archive}: corrupt tar archive: {exc}") from exc


def download(
    name: str,
    root: str | os.PathLike[str],
    *,
    base_url: str | None = None,
    progress: bool | ProgressCallback = False,
    files: Sequence[RemoteFile] | None = None,
    timeout: float = 60.0,
) -> pathlib.Path:
    """Download the files of data set ``name`` into the folder ``root`` and return ``root``.

    ``base_url`` replaces everything before the file name in each URL (a mirror, or a local test
    server). ``files`` replaces the table entry ``DATASET_FILES[name]``. ``progress`` is False,
    True (report through the ``logging`` logger ``decentlearn.data`` at INFO level) or a callback
    ``f(filename, bytes_done, bytes_total_or_None)``. ``timeout`` bounds each network operation,
    in seconds. Raises ``DownloadError`` (an OSError; one line naming the URL and the reason) when
    a file cannot be fetched: offline, HTTP error status, timeout, a transfer shorter than its
    Content-Length, or a checksum mismatch (``ChecksumError``, also a ValueError). No partial or
    unchecked file is ever left under a final name.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    key = name.strip().lower()
    if files is None:
        if key not in DATASET_FILES:
            raise ValueError(f"name must be one of {sorted(DATASET_FILES)} to download, got {name!r}")
        entries = tuple(DATASET_FILES[key])
    else:
        entries = tuple(files)
        for entry in entries:
            if not isinstance(entry, RemoteFile):
                raise TypeError(f"files must hold RemoteFile entries, got {type(entry).__name__}")
    if base_url is not None and not isinstance(base_url, str):
        raise TypeError(f"base_url must be a str or None, got {type(base_url).__name__}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
    report = _reporter(progress)
    if not isinstance(root, (str, os.PathLike)):
        raise TypeError(f"root must be a str or os.PathLike, got {type(root).__name__}")
    root = pathlib.Path(root).expanduser()
    root.mkdir(parents=True, exist_ok=True)

    for entry in entries:
        target = root / entry.filename
        if not (target.is_file() and verify_checksum(target, entry.checksum)[0]):
            url = entry.url if base_url is None else base_url.rstrip("/") + "/" + entry.filename
            _fetch(url, entry, target, float(timeout), report)
        if entry.extract:
            _extract(target, root)
    return root
