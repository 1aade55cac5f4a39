"""Tests of decentlearn.data.download against a local HTTP server on 127.0.0.1 (no other network)."""

from __future__ import annotations

import errno
import functools
import gzip
import hashlib
import http.server
import importlib
import io
import os
import pathlib
import socket
import struct
import tarfile
import threading
import time

import numpy as np
import pytest

from decentlearn.data import ChecksumError, DownloadError, RemoteFile, download, load_dataset
from decentlearn.data import datasets as ds_mod

# The package's `download` attribute is the function; the module is reached through importlib.
dl_mod = importlib.import_module("decentlearn.data.download")


def idx_bytes(array: np.ndarray) -> bytes:
    """An uint8 IDX file: magic 00 00 08 NDIM, big-endian uint32 sizes, then the bytes."""
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(struct.pack(">I", s) for s in array.shape)
    return header + array.astype(np.uint8).tobytes()


def write_fake_cifar(folder: pathlib.Path, per_batch: int = 4, n_test: int = 3) -> None:
    """Five training batches of ``per_batch`` records and a test batch of ``n_test`` records."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name, n in [(f"data_batch_{i}.bin", per_batch) for i in range(1, 6)] + [("test_batch.bin", n_test)]:
        records = rng.integers(0, 256, (n, 3073), dtype=np.uint8)
        records[:, 0] = np.arange(n) % 10
        (folder / name).write_bytes(records.tobytes())


class _Handler(http.server.SimpleHTTPRequestHandler):
    requests: list[str]

    def log_message(self, format: str, *args: object) -> None:  # keep the test output clean
        pass

    def do_GET(self) -> None:
        self.requests.append(self.path)
        super().do_GET()


@pytest.fixture
def server(tmp_path):
    """Serves tmp_path/'srv'; yields (base_url, folder, list of requested paths)."""
    folder = tmp_path / "srv"
    folder.mkdir()
    requests: list[str] = []
    handler = type("Handler", (_Handler,), {"requests": requests})
    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(handler, directory=str(folder))
    )
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", folder, requests
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def md5(data: bytes) -> str:
    return "md5:" + hashlib.md5(data).hexdigest()


def serve_fake_mnist(
    folder: pathlib.Path, base: str, n_train: int = 30, n_test: int = 10
) -> tuple[RemoteFile, ...]:
    rng = np.random.default_rng(0)
    arrays = {
        "train-images-idx3-ubyte.gz": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte.gz": (np.arange(n_train) % 10).astype(np.uint8),
        "t10k-images-idx3-ubyte.gz": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte.gz": (np.arange(n_test) % 10).astype(np.uint8),
    }
    entries = []
    for name, arr in arrays.items():
        data = gzip.compress(idx_bytes(arr))
        (folder / name).write_bytes(data)
        entries.append(RemoteFile(name, f"{base}/{name}", md5(data)))
    return tuple(entries)


def test_download_and_load(server, tmp_path):
    base, folder, requests = server
    entries = serve_fake_mnist(folder, base)
    root = tmp_path / "data" / "mnist"
    seen: list[tuple[str, int, int | None]] = []
    out = download(
        "mnist", root, files=entries, progress=lambda f, done, total: seen.append((f, done, total))
    )
    assert out == root
    for e in entries:
        assert (root / e.filename).read_bytes() == (folder / e.filename).read_bytes()
    assert sorted(p.name for p in root.iterdir()) == sorted(e.filename for e in entries)  # no temp files
    assert {s[0] for s in seen} == {e.filename for e in entries}
    assert all(done == total for _, done, total in seen)
    d = load_dataset("mnist", root)
    assert (d.n_train, d.n_test) == (30, 10)
    assert len(requests) == 4


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_downloaded_files_respect_the_umask(server, tmp_path, umask):
    base, folder, _ = server
    entries = serve_fake_mnist(folder, base)
    old = os.umask(umask)
    try:
        root = download("mnist", tmp_path / "mnist", files=entries)
    finally:
        os.umask(old)
    for e in entries:
        assert (root / e.filename).stat().st_mode & 0o777 == 0o666 & ~umask, e.filename


def test_skip_present_and_replace_corrupt(server, tmp_path):
    base, folder, requests = server
    entries = serve_fake_mnist(folder, base)
    root = tmp_path / "m"
    download("mnist", root, files=entries)
    assert len(requests) == 4
    download("mnist", root, files=entries)
    assert len(requests) == 4  # every file present with a valid checksum: nothing fetched
    (root / entries[0].filename).write_bytes(b"garbage")
    (root / entries[1].filename).unlink()
    download("mnist", root, files=entries)
    assert sorted(requests[4:]) == sorted(f"/{e.filename}" for e in entries[:2])
    assert (root / entries[0].filename).read_bytes() == (folder / entries[0].filename).read_bytes()


def test_base_url_overrides_host(server, tmp_path):
    base, folder, requests = server
    entries = serve_fake_mnist(folder, base)
    moved = tuple(
        RemoteFile(e.filename, "http://example.invalid/x/" + e.filename, e.checksum) for e in entries
    )
    download("mnist", tmp_path / "m", files=moved, base_url=base + "/")
    assert len(requests) == 4


def test_checksum_mismatch_leaves_nothing(server, tmp_path):
    base, folder, _ = server
    (folder / "f.gz").write_bytes(b"hello")
    wrong = "md5:" + "0" * 32
    root = tmp_path / "out"
    with pytest.raises(ValueError) as info:
        download("x", root, files=[RemoteFile("f.gz", f"{base}/f.gz", wrong)])
    msg = str(info.value)
    assert "f.gz" in msg and "0" * 32 in msg and hashlib.md5(b"hello").hexdigest() in msg
    assert list(root.iterdir()) == []
    # Also a DownloadError (an OSError) naming the URL, in one line.
    assert isinstance(info.value, ChecksumError) and isinstance(info.value, DownloadError)
    assert isinstance(info.value, OSError) and info.value.url == f"{base}/f.gz"
    assert msg.startswith(f"cannot download {base}/f.gz: checksum mismatch") and "\n" not in msg


def test_sha256(server, tmp_path):
    base, folder, _ = server
    (folder / "a.bin").write_bytes(b"abc" * 1000)
    digest = "sha256:" + hashlib.sha256(b"abc" * 1000).hexdigest()
    download("x", tmp_path / "o", files=[RemoteFile("a.bin", f"{base}/a.bin", digest)])
    assert (tmp_path / "o" / "a.bin").read_bytes() == b"abc" * 1000


def test_http_error_leaves_nothing(server, tmp_path):
    base, _, _ = server
    with pytest.raises(OSError, match="missing.gz"):
        download(
            "x", tmp_path / "o", files=[RemoteFile("missing.gz", f"{base}/missing.gz", "md5:" + "1" * 32)]
        )
    assert list((tmp_path / "o").iterdir()) == []


def test_timeout_bounds_request(tmp_path):
    # A listening socket that never answers: the connection is accepted by the kernel, the
    # response never comes, and the read must give up after `timeout`.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/f"
        start = time.monotonic()
        with pytest.raises(OSError, match="timed out"):
            download("x", tmp_path / "o", files=[RemoteFile("f", url, "md5:" + "1" * 32)], timeout=0.5)
        assert time.monotonic() - start < 10
    assert list((tmp_path / "o").iterdir()) == []


def make_tarball(
    members: dict[str, bytes | None], links: dict[str, tuple[bytes, str]] | None = None
) -> bytes:
    """A .tar.gz holding regular files (bytes) and folders (None), plus optional links."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        for name, (kind, target) in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, target
            tar.addfile(info)
    return buf.getvalue()


def test_cifar_tarball(server, tmp_path, monkeypatch):
    base, folder, requests = server
    src = tmp_path / "src" / "cifar-10-batches-bin"
    write_fake_cifar(src)
    members: dict[str, bytes | None] = {"cifar-10-batches-bin": None}
    for f in sorted(src.iterdir()):
        members[f"cifar-10-batches-bin/{f.name}"] = f.read_bytes()
    tarball = make_tarball(members)
    (folder / "cifar-10-binary.tar.gz").write_bytes(tarball)
    entry = RemoteFile("cifar-10-binary.tar.gz", f"{base}/cifar-10-binary.tar.gz", md5(tarball), extract=True)
    # load_dataset(download=True) goes through the module-level table.
    monkeypatch.setitem(dl_mod.DATASET_FILES, "cifar10", (entry,))
    monkeypatch.delenv("DECENTLEARN_DATA", raising=False)
    monkeypatch.setattr(ds_mod, "SYSTEM_DIRS", {})
    root = tmp_path / "c"
    root.mkdir()
    with pytest.raises(FileNotFoundError):
        load_dataset("cifar10", root)
    d = load_dataset("cifar10", root, download=True)
    assert (d.n_train, d.n_test) == (20, 3)
    assert (root / "cifar-10-batches-bin" / "test_batch.bin").read_bytes() == (
        src / "test_batch.bin"
    ).read_bytes()
    assert len(requests) == 1
    load_dataset("cifar10", root, download=True)
    assert len(requests) == 1
    fresh = tmp_path / "new" / "folder"  # a data_dir that does not exist yet is created
    assert load_dataset("cifar10", fresh, download=True).n_train == 20
    assert len(requests) == 2


def test_download_into_cache_by_default(server, tmp_path, monkeypatch):
    base, folder, _ = server
    entries = serve_fake_mnist(folder, base, n_train=12, n_test=4)
    monkeypatch.setitem(dl_mod.DATASET_FILES, "mnist", entries)
    monkeypatch.delenv("DECENTLEARN_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(ds_mod, "SYSTEM_DIRS", {})
    assert load_dataset("mnist", download=True).n_train == 12
    assert (tmp_path / "home" / ".cache" / "decentlearn" / "mnist" / "train-images-idx3-ubyte.gz").is_file()
    monkeypatch.setenv("DECENTLEARN_DATA", str(tmp_path / "env"))
    assert load_dataset("mnist", download=True).n_train == 12  # found in the cache: no download
    assert not (tmp_path / "env").exists()


@pytest.mark.parametrize(
    "members, links, match",
    [
        ({"../evil.txt": b"x"}, None, "unsafe archive member '../evil.txt'"),
        ({"ok/../../evil.txt": b"x"}, None, "unsafe"),
        ({"/tmp/evil.txt": b"x"}, None, "unsafe"),
        ({"a.txt": b"x"}, {"link": (tarfile.SYMTYPE, "/etc/passwd")}, "links"),
        ({"a.txt": b"x"}, {"hard": (tarfile.LNKTYPE, "a.txt")}, "links"),
    ],
)
def test_unsafe_tar_rejected(server, tmp_path, members, links, match):
    base, folder, _ = server
    tarball = make_tarball(members, links)
    (folder / "t.tar.gz").write_bytes(tarball)
    root = tmp_path / "deep" / "root"
    with pytest.raises(ValueError, match=match):
        download("x", root, files=[RemoteFile("t.tar.gz", f"{base}/t.tar.gz", md5(tarball), extract=True)])
    assert [p.name for p in root.iterdir()] == ["t.tar.gz"]  # nothing extracted
    assert not (tmp_path / "deep" / "evil.txt").exists() and not (tmp_path / "evil.txt").exists()


def test_table_and_arguments(tmp_path):
    assert set(dl_mod.DATASET_FILES) == {"mnist", "fashion-mnist", "cifar10"}
    assert next(e.checksum for e in dl_mod.DATASET_FILES["mnist"]) == "md5:f68b3c2dcbeaaa9fbdd348bbdeb94873"
    assert dl_mod.DATASET_FILES["cifar10"][0].extract
    for entries in dl_mod.DATASET_FILES.values():
        assert all(e.url.endswith("/" + e.filename) for e in entries)
    with pytest.raises(ValueError, match="to download"):
        download("digits", tmp_path)
    with pytest.raises(ValueError, match="checksum"):
        RemoteFile("a", "http://x/a", "md5:123")
    with pytest.raises(ValueError, match="checksum"):
        RemoteFile("a", "http://x/a", "crc:" + "0" * 32)
    with pytest.raises(ValueError, match="plain file name"):
        RemoteFile("../a", "http://x/a", "md5:" + "0" * 32)
    with pytest.raises(TypeError, match="files"):
        download("x", tmp_path, files=["a"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="timeout"):
        download("x", tmp_path, files=[], timeout=0)
    with pytest.raises(TypeError, match="progress"):
        download("x", tmp_path, files=[], progress="yes")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------
# Failures are one DownloadError (an OSError) with the URL and a one-line reason, and never leave a
# file behind (issue 7: `decentlearn download` offline or on HTTP 404 printed a 68-line traceback).


class _Scripted(http.server.BaseHTTPRequestHandler):
    """Answers each path from ``script``: path -> (status, body, declared Content-Length or None)."""

    script: dict[str, tuple[int, bytes, int | None]]
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        status, body, declared = self.script[self.path]
        self.send_response(status)
        if declared is not None:
            self.send_header("Content-Length", str(declared))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()
        self.close_connection = True


@pytest.fixture
def scripted(tmp_path):
    """A server answering from a dict the test fills in; yields (base_url, script)."""
    script: dict[str, tuple[int, bytes, int | None]] = {}
    handler = type("Handler", (_Scripted,), {"script": script})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", script
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def _fails(root: pathlib.Path, url: str, checksum: str, timeout: float = 10.0) -> DownloadError:
    with pytest.raises(DownloadError) as info:
        download("x", root, files=[RemoteFile("f.gz", url, checksum)], timeout=timeout)
    err = info.value
    assert isinstance(err, OSError) and err.url == url
    assert str(err) == f"cannot download {url}: {err.reason}" and "\n" not in str(err)
    assert [p.name for p in root.iterdir()] == []  # no partial file, no temp file
    return err


def test_offline_connection_refused(tmp_path):
    # A port nothing listens on: what an offline machine (or a dead mirror) gives.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    err = _fails(tmp_path / "o", f"http://127.0.0.1:{port}/f.gz", md5(b""))
    assert "refused" in err.reason.lower()


@pytest.mark.parametrize("status, words", [(404, "HTTP 404 Not Found"), (500, "HTTP 500"), (403, "HTTP 403")])
def test_http_error_status(scripted, tmp_path, status, words):
    base, script = scripted
    script["/f.gz"] = (status, b"nope", 4)
    err = _fails(tmp_path / "o", f"{base}/f.gz", md5(b"nope"))
    assert err.reason.startswith(words)


def test_http_404_from_file_server(server, tmp_path):
    base, _, _ = server
    err = _fails(tmp_path / "o", f"{base}/missing.gz", md5(b""))
    assert err.reason.startswith("HTTP 404")


def test_truncated_transfer(scripted, tmp_path):
    # The server declares 1000 bytes and closes after 600: http.client returns the short body
    # silently, and the checksum of the whole file would be the only other clue.
    base, script = scripted
    body = bytes(range(256)) * 4
    script["/f.gz"] = (200, body[:600], 1000)
    err = _fails(tmp_path / "o", f"{base}/f.gz", md5(body[:1000]))
    assert err.reason == "truncated transfer: received 600 of 1000 bytes"
    assert not isinstance(err, ValueError)  # not reported as a checksum mismatch
    # The same file whole is accepted and lands under its final name only.
    script["/f.gz"] = (200, body[:1000], 1000)
    download("x", tmp_path / "o", files=[RemoteFile("f.gz", f"{base}/f.gz", md5(body[:1000]))])
    assert [p.name for p in (tmp_path / "o").iterdir()] == ["f.gz"]


def test_truncated_transfer_keeps_previous_file(scripted, tmp_path):
    # A damaged file already under the final name is replaced only by a complete, checked one.
    base, script = scripted
    root = tmp_path / "o"
    root.mkdir()
    (root / "f.gz").write_bytes(b"old")
    script["/f.gz"] = (200, b"x" * 10, 20)
    with pytest.raises(DownloadError, match="truncated"):
        download("x", root, files=[RemoteFile("f.gz", f"{base}/f.gz", md5(b"x" * 20))])
    assert sorted(p.name for p in root.iterdir()) == ["f.gz"] and (root / "f.gz").read_bytes() == b"old"


def test_unwritable_folder_and_full_disk(server, tmp_path, monkeypatch):
    # Fault injection (the tests may run as root, who can write anywhere): the temp file cannot be
    # created, then the disk fills up during the transfer.
    base, folder, _ = server
    (folder / "a").write_bytes(b"abc" * 1000)
    entry = RemoteFile("a", f"{base}/a", md5(b"abc" * 1000))
    root = tmp_path / "o"
    root.mkdir()

    def no_create(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(root))

    with monkeypatch.context() as m:
        m.setattr(dl_mod.tempfile, "mkstemp", no_create)
        with pytest.raises(DownloadError, match=f"cannot create a file in {root}: Permission denied$"):
            download("x", root, files=[entry])

    real_fdopen = os.fdopen

    class FullDisk(io.RawIOBase):
        def __init__(self, fd):
            self.inner = real_fdopen(fd, "wb")

        def writable(self):
            return True

        def write(self, b):
            raise OSError(errno.ENOSPC, "No space left on device")

        def close(self):
            self.inner.close()
            super().close()

    with monkeypatch.context() as m:
        m.setattr(dl_mod.os, "fdopen", lambda fd, mode: FullDisk(fd))
        with pytest.raises(DownloadError, match="No space left on device$") as info:
            download("x", root, files=[entry])
    assert "\n" not in str(info.value)
    assert list(root.iterdir()) == []


def test_invalid_url(tmp_path):
    err = _fails(tmp_path / "o", "nonsense/f.gz", md5(b""))
    assert err.reason.startswith("not a valid URL")
    with pytest.raises(DownloadError, match="^cannot download ftp:/x y/f.gz: "):
        download("x", tmp_path / "o", files=[RemoteFile("f.gz", "http://h/f.gz", md5(b""))], base_url="ftp:/x y")


def test_download_error_pickles():
    import pickle

    err = pickle.loads(pickle.dumps(ChecksumError("http://h/f", "checksum mismatch")))
    assert isinstance(err, ChecksumError) and err.url == "http://h/f" and err.reason == "checksum mismatch"
