"""Tests of decentlearn.data: IDX and CIFAR readers, the dataset loaders and the synthetic generator."""

from __future__ import annotations

import dataclasses
import gzip
import io
import os
import pathlib
import re
import struct
import tracemalloc
import zipfile
import zlib

import numpy as np
import pytest

from decentlearn.data import Dataset, load_dataset, make_partition, make_synthetic, read_idx
from decentlearn.data import datasets as ds_mod
from decentlearn.data.cifar import read_cifar10_batch
from decentlearn.data.digits import read_digits

DEBIAN_FASHION = pathlib.Path("/usr/share/datasets/fashion-mnist")

# IDX type codes and big-endian dtypes, from the format's definition (written here independently
# of decentlearn.data.idx).
IDX_CODES = {
    "uint8": (0x08, ">u1"),
    "int8": (0x09, ">i1"),
    "int16": (0x0B, ">i2"),
    "int32": (0x0C, ">i4"),
    "float32": (0x0D, ">f4"),
    "float64": (0x0E, ">f8"),
}


def idx_bytes(array: np.ndarray) -> bytes:
    code, be = IDX_CODES[array.dtype.name]
    header = bytes([0, 0, code, array.ndim]) + b"".join(struct.pack(">I", s) for s in array.shape)
    return header + array.astype(be).tobytes()


def write_idx(path: pathlib.Path, array: np.ndarray) -> pathlib.Path:
    data = idx_bytes(array)
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def write_fake_mnist(
    folder: pathlib.Path,
    n_train: int = 60,
    n_test: int = 20,
    gz: bool = True,
    seed: int = 0,
    spelling: str = "-idx",
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = {
        "train-images": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train-labels": (np.arange(n_train) % 10).astype(np.uint8),
        "t10k-images": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "t10k-labels": (np.arange(n_test) % 10).astype(np.uint8),
    }
    folder.mkdir(parents=True, exist_ok=True)
    for stem, arr in arrays.items():
        name = f"{stem}{spelling}{arr.ndim}-ubyte" + (".gz" if gz else "")
        write_idx(folder / name, arr)
    return arrays


# ------------------------------------------------------------------------------------- IDX


@pytest.mark.parametrize("dtype", list(IDX_CODES))
@pytest.mark.parametrize("shape", [(0,), (7,), (3, 4), (2, 3, 5)])
@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_idx_round_trip(tmp_path, dtype, shape, suffix):
    rng = np.random.default_rng(1)
    a = (rng.standard_normal(shape) * 50).astype(dtype)
    b = read_idx(write_idx(tmp_path / f"a{suffix}", a))
    assert b.dtype == np.dtype(dtype) and b.dtype.isnative
    assert b.shape == shape
    np.testing.assert_array_equal(a, b)


def test_idx_known_bytes(tmp_path):
    # A hand-written 2x3 int16 file: magic 00 00 0B 02, dims 2 and 3, then big-endian values.
    raw = bytes.fromhex("00000b020000000200000003") + struct.pack(">6h", 1, -2, 3, 256, -32768, 7)
    (tmp_path / "f").write_bytes(raw)
    np.testing.assert_array_equal(read_idx(tmp_path / "f"), [[1, -2, 3], [256, -32768, 7]])


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda b: b[:-1], "truncated"),
        (lambda b: b + b"\x00", "trailing"),
        (lambda b: b[:6], "truncated IDX header"),
        (lambda b: b[:3], "shorter than"),
        (lambda b: b"\x01" + b[1:], "magic"),
        (lambda b: b[:2] + b"\x0a" + b[3:], "type code"),
        (lambda b: b[:3] + b"\x00", "0 dimensions"),
        (lambda b: b[:3] + b"\x03" + b[4:], "IDX"),
        (lambda b: b[:4] + struct.pack(">I", 10**6) + b[8:], "truncated"),
    ],
)
def test_idx_corrupt_raises(tmp_path, mutate, message):
    good = idx_bytes(np.arange(24, dtype=np.uint8).reshape(4, 6))
    (tmp_path / "bad").write_bytes(mutate(good))
    with pytest.raises(ValueError, match=message):
        read_idx(tmp_path / "bad")


def test_idx_corrupt_gzip_raises(tmp_path):
    data = gzip.compress(idx_bytes(np.arange(1000, dtype=np.int32)))
    (tmp_path / "x.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="gzip"):
        read_idx(tmp_path / "x.gz")
    # A valid gzip stream holding a truncated IDX file.
    (tmp_path / "y.gz").write_bytes(gzip.compress(idx_bytes(np.arange(10, dtype=np.uint8))[:-3]))
    with pytest.raises(ValueError, match="truncated"):
        read_idx(tmp_path / "y.gz")


# ------------------------------------------------------------------------------------- hostile IDX files
# Issue 7 point 7: the reader must never decompress or allocate more than the header declares,
# must check the declared size before reading, and must raise ValueError naming the file.


def idx_header(code: int, shape: tuple[int, ...]) -> bytes:
    return bytes([0, 0, code, len(shape)]) + b"".join(struct.pack(">I", s) for s in shape)


def gzip_stream(head: bytes, zeros: int) -> bytes:
    """A gzip file holding ``head`` then ``zeros`` zero bytes, compressed chunk by chunk (a bomb)."""
    comp = zlib.compressobj(1, zlib.DEFLATED, 31)
    parts = [comp.compress(head)]
    chunk = bytes(1 << 20)
    left = zeros
    while left:
        n = min(left, len(chunk))
        parts.append(comp.compress(chunk[:n]))
        left -= n
    parts.append(comp.flush())
    return b"".join(parts)


def peak_traced_bytes(fn) -> tuple[int, BaseException | None]:
    """Peak Python/NumPy heap allocation (tracemalloc) while ``fn()`` runs, and what it raised."""
    tracemalloc.start()
    try:
        fn()
        raised = None
    except BaseException as exc:  # noqa: BLE001 - returned to the caller
        raised = exc
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak, raised


def test_idx_gzip_bomb_bounded(tmp_path):
    # The header claims 60,000 MNIST images (47 MB); the stream holds twice that in zeros,
    # a few hundred kB compressed. The reader must stop one byte past the declared length, keeping nothing.
    declared = 60_000 * 28 * 28
    f = tmp_path / "train-images-idx3-ubyte.gz"
    f.write_bytes(gzip_stream(idx_header(0x08, (60_000, 28, 28)), 2 * declared))
    assert f.stat().st_size < 1_000_000
    peak, raised = peak_traced_bytes(lambda: read_idx(f))
    assert isinstance(raised, ValueError), raised
    assert str(f) in str(raised) and "trailing" in str(raised)
    assert peak < 8 << 20, f"peak {peak / 2**20:.1f} MiB for a refused file"


@pytest.mark.parametrize(
    "shape, match",
    [
        ((10**9, 10**9, 10**9), "max_bytes"),   # 1e27 bytes: over the limit, refused from the header
        ((65536, 65536, 65536, 65536), "max_bytes"),  # 2**64 elements: wraps to 0 in int64
        ((2**32 - 1,) * 8, "max_bytes"),
        ((1_000_000, 28, 28), "can hold"),    # 784 MB under the limit, but not in a 1 kB gzip file
    ],
)
def test_idx_gzip_huge_header_refused_before_decompressing(tmp_path, shape, match):
    f = tmp_path / "x.gz"
    f.write_bytes(gzip_stream(idx_header(0x08, shape), 1000))
    peak, raised = peak_traced_bytes(lambda: read_idx(f))
    assert isinstance(raised, ValueError), raised
    assert str(f) in str(raised) and re.search(match, str(raised))
    assert peak < 4 << 20


@pytest.mark.parametrize("shape", [(65536, 65536, 65536, 65536), (2**32 - 1, 2**32 - 1, 2**32 - 1, 2**32 - 1)])
def test_idx_raw_overflowing_dims(tmp_path, shape):
    # 65536**4 == 2**64: a product in int64 wraps to 0 and the empty payload would "match".
    f = tmp_path / "x"
    f.write_bytes(idx_header(0x0C, shape))
    with pytest.raises(ValueError, match=re.escape(str(f)) + ".*max_bytes"):
        read_idx(f)


def test_idx_raw_size_checked_before_reading(tmp_path):
    # A 200 MB (sparse) uncompressed file whose header declares 100 MB: refused from its size,
    # without reading it.
    f = tmp_path / "sparse-idx1-ubyte"
    with open(f, "wb") as out:
        out.write(idx_header(0x08, (100_000_000,)))
        out.truncate(200_000_000)
    peak, raised = peak_traced_bytes(lambda: read_idx(f))
    assert isinstance(raised, ValueError) and "trailing" in str(raised) and str(f) in str(raised), raised
    assert peak < 4 << 20


def test_idx_max_bytes(tmp_path):
    f = write_idx(tmp_path / "a.gz", np.arange(100, dtype=np.int32))
    np.testing.assert_array_equal(read_idx(f, max_bytes=400), np.arange(100))
    with pytest.raises(ValueError, match="400 bytes, more than the limit of 399"):
        read_idx(f, max_bytes=399)
    with pytest.raises(ValueError, match="max_bytes"):
        read_idx(f, max_bytes=-1)


def test_idx_multi_member_gzip(tmp_path):
    # Two concatenated gzip members (a valid gzip file): the trailer's ISIZE covers only the last
    # member, so the reader measures the stream first, then reads it.
    a = np.arange(5000, dtype=np.int16).reshape(50, 100)
    raw = idx_bytes(a)
    f = tmp_path / "m.gz"
    f.write_bytes(gzip.compress(raw[:3001]) + gzip.compress(raw[3001:]))
    np.testing.assert_array_equal(read_idx(f), a)
    f.write_bytes(gzip.compress(raw[:3001]) + gzip.compress(raw[3001:] + b"\x07"))
    with pytest.raises(ValueError, match="trailing"):
        read_idx(f)
    f.write_bytes(gzip.compress(raw[:3001]) + gzip.compress(raw[3001:-1]))
    with pytest.raises(ValueError, match="truncated"):
        read_idx(f)


def _flip(data: bytes, pos: int) -> bytes:
    b = bytearray(data)
    b[pos] ^= 0xFF
    return bytes(b)


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda g: g[:10], id="gzip-header-only"),
        pytest.param(lambda g: g[:-4], id="no-isize"),
        pytest.param(lambda g: g[:-9], id="cut-in-stream"),
        pytest.param(lambda g: _flip(g, len(g) - 6), id="bad-crc"),
        pytest.param(lambda g: _flip(g, 20), id="bad-deflate"),
        pytest.param(lambda g: _flip(g, 3), id="bad-flags"),
        pytest.param(lambda g: g + b"garbage", id="trailing-garbage"),
        pytest.param(lambda g: g[:2] + b"\x07" + g[3:], id="bad-method"),
        pytest.param(lambda g: b"\x1f\x8b", id="magic-only"),
        pytest.param(lambda g: gzip.compress(b"\x00\x00\x08"), id="short-idx-header"),
        pytest.param(lambda g: gzip.compress(b""), id="empty-stream"),
        pytest.param(lambda g: b"", id="empty-file"),
    ],
)
def test_idx_damaged_files_raise_valueerror_naming_file(tmp_path, mutate):
    good = gzip.compress(idx_bytes(np.arange(3000, dtype=np.int32).reshape(30, 100)))
    f = tmp_path / "damaged.gz"
    f.write_bytes(mutate(good))
    with pytest.raises(ValueError) as info:  # never EOFError, zlib.error, BadGzipFile (OSError)
        read_idx(f)
    assert type(info.value) is ValueError and str(f) in str(info.value)


# ------------------------------------------------------------------------------------- hostile digits.npz / CIFAR


def _npz(path: pathlib.Path, **arrays: np.ndarray) -> pathlib.Path:
    np.savez_compressed(path, **arrays)
    return path


def _digits_arrays(n: int = 20) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "images": rng.integers(0, 17, (n, 8, 8), dtype=np.uint8),
        "labels": (np.arange(n) % 10).astype(np.uint8),
        "test": np.arange(n) % 5 == 0,
    }


def test_read_digits_valid_and_embedded(tmp_path):
    arrays = _digits_arrays()
    images, labels, test = read_digits(_npz(tmp_path / "d.npz", **arrays))
    for got, key in ((images, "images"), (labels, "labels"), (test, "test")):
        np.testing.assert_array_equal(got, arrays[key])
        assert got.dtype == arrays[key].dtype
    with np.load(ds_mod._DIGITS_FILE) as ref:
        for got, key in zip(read_digits(ds_mod._DIGITS_FILE), ("images", "labels", "test")):
            np.testing.assert_array_equal(got, ref[key])


def _npz_bomb(path: pathlib.Path) -> pathlib.Path:
    # A valid .npy header claiming 10**9 images, with 64 bytes of data: must not be allocated.
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "|u1", "fortran_order": False, "shape": (10**9, 8, 8)}
    )
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("images.npy", header.getvalue() + bytes(64))  # the header includes the magic
        zf.writestr("labels.npy", _npy(np.zeros(1, np.uint8)))
        zf.writestr("test.npy", _npy(np.zeros(1, bool)))
    return path


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def _foreign_method(path: pathlib.Path) -> pathlib.Path:
    """A digits .npz whose members claim compression method 99, which zipfile does not support
    (it raises NotImplementedError on reading them)."""
    data = bytearray(_npz(path, **_digits_arrays()).read_bytes())
    for sig, at in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):  # local and central headers
        i = data.find(sig)
        while i >= 0:
            data[i + at : i + at + 2] = (99).to_bytes(2, "little")
            i = data.find(sig, i + 4)
    path.write_bytes(bytes(data))
    return path


def _zip_members(path: pathlib.Path, members: dict[str, bytes]) -> pathlib.Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda p: p.write_bytes(b"not a zip at all") and p, "not a valid .npz"),
        (lambda p: p.write_bytes(b"") or p, "not a valid .npz"),
        (lambda p: p.write_bytes(_npz(p, **_digits_arrays()).read_bytes()[:-30]) and p, "not a valid .npz"),
        (lambda p: _npz(p, images=_digits_arrays()["images"], labels=_digits_arrays()["labels"]), "missing arrays \\['test'\\]"),
        (lambda p: _npz(p, **{**_digits_arrays(), "images": _digits_arrays()["images"].astype(np.float64)}), "'images' must have dtype uint8"),
        (lambda p: _npz(p, **{**_digits_arrays(), "labels": _digits_arrays()["labels"].astype(np.int64)}), "'labels' must have dtype uint8"),
        (lambda p: _npz(p, **{**_digits_arrays(), "test": np.array(["a"] * 20, dtype=object)}), "'test' must have dtype bool"),
        (lambda p: _npz(p, **{**_digits_arrays(), "images": np.zeros((20, 8, 7), np.uint8)}), "shape \\(n, 8, 8\\)"),
        (lambda p: _npz(p, **{**_digits_arrays(), "labels": np.zeros((20, 1), np.uint8)}), "shape \\(n,\\)"),
        (lambda p: _npz(p, **{**_digits_arrays(), "labels": np.zeros(19, np.uint8)}), "same length"),
        (lambda p: _npz(p, **{**_digits_arrays(), "labels": np.full(20, 10, np.uint8)}), "label 10"),
        (lambda p: _npz(p, **{**_digits_arrays(), "images": np.full((20, 8, 8), 17, np.uint8)}), "pixel value 17"),
        (lambda p: _npz(p, **{**_digits_arrays(), "test": np.ones(20, bool)}), "no training images"),
        (lambda p: _foreign_method(p), "not a valid .npz .*compression method"),
        (lambda p: _npz_bomb(p), "declares shape \\(1000000000, 8, 8\\) \\(64000000000 bytes\\) but holds"),
        (lambda p: _zip_members(p, {"images.npy": b"\x93NUMPY garbage", "labels.npy": b"", "test.npy": b""}), "not a valid .npy"),
        (lambda p: _zip_members(p, {"images.npy": _npy(np.zeros((2, 8, 8), np.uint8))[:-5], "labels.npy": b"", "test.npy": b""}), "holds fewer bytes|but holds"),
    ],
)
def test_read_digits_malformed(tmp_path, make, match):
    path = tmp_path / "digits.npz"
    make(path)
    peak, raised = peak_traced_bytes(lambda: read_digits(path))
    assert type(raised) is ValueError, repr(raised)
    assert str(path) in str(raised) and re.search(match, str(raised)), str(raised)
    assert peak < 4 << 20


def test_cifar_wrong_length_refused_before_reading(tmp_path):
    # A 100 MB (sparse) batch that is not a whole number of records: refused from its size.
    f = tmp_path / "data_batch_1.bin"
    with open(f, "wb") as out:
        out.truncate(100_000_000)
    peak, raised = peak_traced_bytes(lambda: read_cifar10_batch(f))
    assert type(raised) is ValueError and str(f) in str(raised) and "3073" in str(raised), raised
    assert peak < 4 << 20
    f.write_bytes(bytes(3073 * 3))
    with pytest.raises(ValueError, match=re.escape(str(f)) + ".*3 records, expected 2"):
        read_cifar10_batch(f, expected_records=2)
    f.write_bytes(b"")
    with pytest.raises(ValueError, match="0 bytes"):
        read_cifar10_batch(f)


# ------------------------------------------------------------------------------------- digits


def test_digits_embedded():
    d = load_dataset("digits")
    assert isinstance(d, Dataset)
    assert d.name == "digits" and d.n_classes == 10 and d.input_shape == (1, 8, 8)
    assert d.n_train + d.n_test == 1797
    assert abs(d.n_test - 360) <= 2
    assert d.x_train.shape == (d.n_train, 1, 8, 8) and d.x_test.shape == (d.n_test, 1, 8, 8)
    for x in (d.x_train, d.x_test):
        assert x.dtype == np.float32 and x.flags.c_contiguous
    for y in (d.y_train, d.y_test):
        assert y.dtype == np.int64
    np.testing.assert_array_equal(np.unique(d.y_train), np.arange(10))
    # Class totals of the UCI 8x8 digits (as in scikit-learn's copy).
    counts = np.bincount(d.y_train, minlength=10) + np.bincount(d.y_test, minlength=10)
    np.testing.assert_array_equal(counts, [178, 182, 177, 183, 181, 182, 181, 179, 174, 180])
    # Stratified: each class has 20% (rounded) of its samples in the test set.
    np.testing.assert_array_equal(np.bincount(d.y_test, minlength=10), np.rint(counts * 0.2))
    r = repr(d)
    assert "digits" in r and str(d.n_train) in r and len(r) < 200


def test_digits_standardized_and_invertible():
    d = load_dataset("digits")
    assert abs(float(d.x_train.mean(dtype=np.float64))) < 1e-5
    assert abs(float(d.x_train.std(dtype=np.float64)) - 1) < 1e-5
    # Undo the standardization with the (unknown) affine map fitted on two distinct pixel values:
    # the result must be the raw 0..16 pixel values of the shipped file.
    with np.load(ds_mod._DIGITS_FILE) as f:
        images, labels, test = f["images"], f["labels"], f["test"]
    raw = images[~test].astype(np.float64).ravel()
    x = d.x_train.astype(np.float64).ravel()
    i, j = int(np.argmin(raw)), int(np.argmax(raw))
    slope = (raw[j] - raw[i]) / (x[j] - x[i])
    np.testing.assert_allclose(raw[i] + (x - x[i]) * slope, raw, atol=1e-4)
    np.testing.assert_array_equal(d.y_train, labels[~test])


def test_digits_file_content():
    # First sample of the UCI optical digits test file (optdigits.tes), a 0.
    with np.load(ds_mod._DIGITS_FILE) as f:
        images, labels = f["images"], f["labels"]
    assert images.shape == (1797, 8, 8) and images.dtype == np.uint8 and images.max() == 16
    np.testing.assert_array_equal(images[0, :2], [[0, 0, 5, 13, 9, 1, 0, 0], [0, 0, 13, 15, 10, 15, 5, 0]])
    assert labels[0] == 0 and labels[1] == 1
    assert (ds_mod._PACKAGE_DIR / "DIGITS_LICENSE.txt").read_text().count("CC BY 4.0") == 1


def test_digits_split_does_not_depend_on_seed():
    a, b = load_dataset("digits", seed=0), load_dataset("digits", seed=123)
    np.testing.assert_array_equal(a.y_test, b.y_test)
    np.testing.assert_array_equal(a.x_test, b.x_test)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"name": "nope"}, ValueError, "digits"),
        ({"name": "digits:3"}, ValueError, "no ':' arguments"),
        ({"name": 3}, TypeError, "name"),
        ({"name": "digits", "seed": -1}, ValueError, "seed"),
        ({"name": "digits", "seed": 1.5}, TypeError, "seed"),
        ({"name": "digits", "n_peers": 0}, ValueError, "n_peers"),
        ({"name": "digits", "download": "yes"}, TypeError, "download"),
        ({"name": "digits", "data_dir": 3}, TypeError, "data_dir"),
    ],
)
def test_load_dataset_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        load_dataset(**kwargs)


def test_dataset_validation():
    x = np.zeros((4, 3), np.float32)
    y = np.zeros(4, np.int64)
    Dataset("t", x, y, x, y, 2, (3,))
    with pytest.raises(TypeError, match="x_train"):
        Dataset("t", x.astype(np.float64), y, x, y, 2, (3,))
    with pytest.raises(TypeError, match="y_test"):
        Dataset("t", x, y, x, y.astype(np.int32), 2, (3,))
    with pytest.raises(ValueError, match="input_shape"):
        Dataset("t", x, y, x, y, 2, (4,))
    with pytest.raises(ValueError, match="y_train"):
        Dataset("t", x, y + 2, x, y, 2, (3,))
    with pytest.raises(ValueError, match="C-contiguous"):
        Dataset("t", np.zeros((3, 4), np.float32).T, y, x, y, 2, (3,))
    with pytest.raises(ValueError, match="groups"):
        Dataset("t", x, y, x, y, 2, (3,), groups=np.zeros(3, np.int64))
    with pytest.raises(dataclasses.FrozenInstanceError):
        Dataset("t", x, y, x, y, 2, (3,)).name = "u"  # type: ignore[misc]


# ------------------------------------------------------------------------------------- MNIST-style IDX folders


@pytest.fixture
def isolated_env(tmp_path, monkeypatch):
    """No $DECENTLEARN_DATA, an empty HOME, and no system folders."""
    monkeypatch.delenv("DECENTLEARN_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(ds_mod, "SYSTEM_DIRS", {})
    return tmp_path


@pytest.mark.parametrize("gz", [True, False])
@pytest.mark.parametrize("spelling", ["-idx", ".idx"])
def test_mnist_from_fake_dir(isolated_env, gz, spelling):
    folder = isolated_env / "m"
    arrays = write_fake_mnist(folder, gz=gz, spelling=spelling)
    d = load_dataset("mnist", folder)
    assert d.name == "mnist" and d.input_shape == (1, 28, 28) and d.n_classes == 10
    assert (d.n_train, d.n_test) == (60, 20)
    np.testing.assert_array_equal(d.y_train, arrays["train-labels"])
    raw = arrays["train-images"].astype(np.float64) / 255
    expected = (raw - raw.mean()) / raw.std()
    np.testing.assert_allclose(d.x_train[:, 0], expected, atol=1e-5)
    raw_test = arrays["t10k-images"].astype(np.float64) / 255
    np.testing.assert_allclose(d.x_test[:, 0], (raw_test - raw.mean()) / raw.std(), atol=1e-5)


def test_fashion_mnist_fake_dir_and_subfolder(isolated_env):
    write_fake_mnist(isolated_env / "root" / "fashion-mnist", n_train=30, n_test=10)
    d = load_dataset("fashion-mnist", isolated_env / "root")  # data_dir/<name> is looked at too
    assert (d.name, d.n_train, d.n_test) == ("fashion-mnist", 30, 10)


def test_dir_resolution_order(isolated_env, monkeypatch):
    env_root = isolated_env / "env"
    write_fake_mnist(env_root, n_train=11, n_test=5)
    write_fake_mnist(env_root / "mnist", n_train=12, n_test=5)
    write_fake_mnist(isolated_env / "home" / ".cache" / "decentlearn" / "mnist", n_train=13, n_test=5)
    system = isolated_env / "system"
    write_fake_mnist(system, n_train=14, n_test=5)
    monkeypatch.setattr(ds_mod, "SYSTEM_DIRS", {"mnist": (system,)})
    assert load_dataset("mnist").n_train == 14  # system folder before the cache
    monkeypatch.setenv("DECENTLEARN_DATA", str(env_root))
    assert load_dataset("mnist").n_train == 12  # $DECENTLEARN_DATA/<name> first
    for p in (env_root / "mnist").iterdir():
        p.unlink()
    assert load_dataset("mnist").n_train == 11  # then $DECENTLEARN_DATA itself
    monkeypatch.delenv("DECENTLEARN_DATA")
    monkeypatch.setattr(ds_mod, "SYSTEM_DIRS", {})
    assert load_dataset("mnist").n_train == 13  # ~/.cache/decentlearn/<name>


def test_missing_data(isolated_env):
    missing = isolated_env / "does-not-exist"
    with pytest.raises(FileNotFoundError, match="does-not-exist"):
        load_dataset("mnist", missing)
    empty = isolated_env / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="download=True"):
        load_dataset("mnist", empty)
    with pytest.raises(FileNotFoundError) as info:
        load_dataset("fashion-mnist")
    msg = str(info.value)
    assert "\n" not in msg  # one line, for the CLI
    assert "apt-get install dataset-fashion-mnist" in msg
    assert str(isolated_env / "home" / ".cache" / "decentlearn" / "fashion-mnist") in msg
    assert "decentlearn download fashion-mnist" in msg


def test_download_dir(isolated_env, monkeypatch):
    home = isolated_env / "home"
    assert ds_mod.download_dir("mnist") == home / ".cache" / "decentlearn" / "mnist"
    assert ds_mod.download_dir("mnist", isolated_env / "x") == isolated_env / "x"
    monkeypatch.setenv("DECENTLEARN_DATA", str(isolated_env / "env"))
    assert ds_mod.download_dir("fashion-mnist") == isolated_env / "env" / "fashion-mnist"


def test_mnist_corrupt_files(isolated_env):
    folder = isolated_env / "m"
    write_fake_mnist(folder)
    write_idx(folder / "train-labels-idx1-ubyte.gz", np.zeros(59, np.uint8))
    with pytest.raises(ValueError, match="59 labels"):
        load_dataset("mnist", folder)
    write_idx(folder / "train-labels-idx1-ubyte.gz", np.full(60, 10, np.uint8))
    with pytest.raises(ValueError, match="outside 0..9"):
        load_dataset("mnist", folder)
    write_fake_mnist(folder)
    write_idx(folder / "train-images-idx3-ubyte.gz", np.zeros((60, 28, 27), np.uint8))
    with pytest.raises(ValueError, match="28, 28"):
        load_dataset("mnist", folder)
    write_fake_mnist(folder)
    load_dataset("mnist", folder)
    data = (folder / "t10k-images-idx3-ubyte.gz").read_bytes()
    (folder / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(gzip.decompress(data)[:-1]))
    with pytest.raises(ValueError, match="truncated"):
        load_dataset("mnist", folder)


@pytest.mark.skipif(
    not DEBIAN_FASHION.is_dir(), reason=f"{DEBIAN_FASHION} absent (apt-get install dataset-fashion-mnist)"
)
def test_fashion_mnist_debian(monkeypatch):
    monkeypatch.delenv("DECENTLEARN_DATA", raising=False)
    d = load_dataset("fashion-mnist")
    assert (d.n_train, d.n_test, d.input_shape, d.n_classes) == (60000, 10000, (1, 28, 28), 10)
    np.testing.assert_array_equal(np.bincount(d.y_train), np.full(10, 6000))
    np.testing.assert_array_equal(np.bincount(d.y_test), np.full(10, 1000))
    assert abs(float(d.x_train.mean(dtype=np.float64))) < 1e-4
    assert abs(float(d.x_train.std(dtype=np.float64)) - 1) < 1e-4


# ------------------------------------------------------------------------------------- CIFAR-10


def write_fake_cifar(
    folder: pathlib.Path, per_batch: int = 4, n_test: int = 3
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Batches whose every pixel of channel c of image k is (k * 7 + c * 50) % 256."""
    folder.mkdir(parents=True, exist_ok=True)
    names = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]
    out, start = [], 0
    for name in names:
        n = n_test if name == "test_batch.bin" else per_batch
        k = np.arange(start, start + n)
        start += n
        labels = (k % 10).astype(np.uint8)
        pixels = ((k[:, None] * 7 + np.arange(3)[None, :] * 50) % 256).astype(np.uint8)  # (n, 3)
        images = np.repeat(pixels[:, :, None], 1024, axis=2)  # (n, 3, 1024): R plane, G plane, B plane
        records = np.concatenate([labels[:, None], images.reshape(n, 3072)], axis=1)
        (folder / name).write_bytes(records.astype(np.uint8).tobytes())
        out.append((images.reshape(n, 3, 32, 32), labels))
    return out


@pytest.mark.parametrize("layout", ["batches-bin", "flat"])
def test_cifar10_fake(isolated_env, layout):
    root = isolated_env / "c"
    folder = root / "cifar-10-batches-bin" if layout == "batches-bin" else root
    parts = write_fake_cifar(folder)
    d = load_dataset("cifar10", root)
    assert (d.n_train, d.n_test, d.input_shape) == (20, 3, (3, 32, 32))
    np.testing.assert_array_equal(d.y_train, np.concatenate([p[1] for p in parts[:5]]))
    raw = np.concatenate([p[0] for p in parts[:5]]).astype(np.float64) / 255
    for c in range(3):
        expected = (raw[:, c] - raw[:, c].mean()) / raw[:, c].std()
        np.testing.assert_allclose(d.x_train[:, c], expected, atol=1e-5)
        assert abs(float(d.x_train[:, c].mean())) < 1e-5


def test_cifar10_corrupt(isolated_env):
    folder = isolated_env / "c"
    write_fake_cifar(folder)
    f = folder / "data_batch_3.bin"
    f.write_bytes(f.read_bytes()[:-1])
    with pytest.raises(ValueError, match="3073"):
        load_dataset("cifar10", folder)
    write_fake_cifar(folder)
    f.write_bytes(f.read_bytes()[:-3073])
    with pytest.raises(ValueError, match="same number"):
        load_dataset("cifar10", folder)
    write_fake_cifar(folder)
    data = bytearray(f.read_bytes())
    data[0] = 10
    f.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="label 10"):
        load_dataset("cifar10", folder)
    (folder / "test_batch.bin").unlink()
    with pytest.raises(FileNotFoundError):
        load_dataset("cifar10", folder)


# ------------------------------------------------------------------------------------- synthetic


def test_synthetic_shapes_and_groups():
    d = load_dataset("synthetic:1:1", n_peers=12, seed=3)
    assert d.name == "synthetic:1:1" and d.input_shape == (60,) and d.n_classes == 10
    assert d.x_train.dtype == np.float32 and d.x_train.shape == (d.n_train, 60)
    assert d.groups is not None and d.groups.dtype == np.int64 and len(d.groups) == d.n_train
    train_sizes = np.bincount(d.groups, minlength=12)
    assert len(train_sizes) == 12 and np.all(train_sizes >= 40)
    # 80/20 split per device (at least 50 samples per device, so at least 40 train).
    assert 0.19 < d.n_test / (d.n_train + d.n_test) < 0.21
    p = make_partition("natural", d.y_train, 12, groups=d.groups)
    for i in range(12):
        np.testing.assert_array_equal(p.peer(i), np.flatnonzero(d.groups == i))
    assert "groups=12" in repr(d)


def test_synthetic_determinism():
    a = load_dataset("synthetic:0.5:0.5", n_peers=5, seed=7)
    b = load_dataset("synthetic:0.5:0.5", n_peers=5, seed=7)
    c = load_dataset("synthetic:0.5:0.5", n_peers=5, seed=8)
    np.testing.assert_array_equal(a.x_train, b.x_train)
    np.testing.assert_array_equal(a.y_test, b.y_test)
    assert a.x_train.shape != c.x_train.shape or not np.array_equal(a.x_train, c.x_train)


def test_synthetic_distribution():
    # Within a device x ~ N(v_k, Sigma) with Sigma_jj = j^-1.2.
    d = make_synthetic(40, 0.0, 0.0, seed=1, min_samples=400, max_samples=400)
    x = d.x_train.astype(np.float64)
    centred = x - np.stack([x[d.groups == k].mean(0) for k in range(40)])[d.groups]
    var = centred.var(axis=0) * len(x) / (len(x) - 40)
    np.testing.assert_allclose(var, np.arange(1, 61) ** -1.2, rtol=0.1)
    # beta = 0: device means v_k ~ N(0, 1), so they spread with standard deviation about 1.
    means = np.stack([x[d.groups == k].mean(0) for k in range(40)])
    assert 0.8 < means.std() < 1.2
    # Per device 400 samples -> 320 train + 80 test.
    np.testing.assert_array_equal(np.bincount(d.groups), np.full(40, 320))
    assert d.n_test == 40 * 80


def test_synthetic_iid_and_skew():
    iid = load_dataset("synthetic:iid", n_peers=10, seed=0)
    assert iid.name == "synthetic:iid"
    skewed = load_dataset("synthetic:1:1", n_peers=10, seed=0)
    from decentlearn.data import label_skew

    s_iid = label_skew(make_partition("natural", iid.y_train, 10, groups=iid.groups), iid.y_train, 10)
    s_non = label_skew(
        make_partition("natural", skewed.y_train, 10, groups=skewed.groups), skewed.y_train, 10
    )
    assert s_iid < 0.3 < s_non


@pytest.mark.parametrize(
    "name, n_peers, match",
    [
        ("synthetic:1:1", None, "n_peers is required"),
        ("synthetic", 5, "valid forms"),
        ("synthetic:1", 5, "valid forms"),
        ("synthetic:-1:1", 5, "ALPHA"),
        ("synthetic:1:x", 5, "BETA"),
        ("synthetic:nan:1", 5, "ALPHA"),
    ],
)
def test_synthetic_bad_spec(name, n_peers, match):
    with pytest.raises(ValueError, match=match):
        load_dataset(name, n_peers=n_peers)


def test_package_is_pure_python():
    # decentlearn.data must not need the C extension: import it in a fresh interpreter.
    import subprocess
    import sys

    code = "import sys, decentlearn.data; print('decentlearn._core' in sys.modules)"
    root = str(pathlib.Path(ds_mod.__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "False"
