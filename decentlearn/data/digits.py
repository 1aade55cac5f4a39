"""Strict reader for ``digits.npz``, the embedded copy of the UCI 8x8 digits.

The file is a NumPy ``.npz`` (a zip of ``.npy`` members) holding ``images`` (uint8
``(n, 8, 8)``, values 0..16), ``labels`` (uint8 ``(n,)``, 0..9) and ``test`` (bool ``(n,)``, the
fixed test split). It is read member by member without ``numpy.load``: each ``.npy`` header is
checked (dtype, shape, size) before any array is allocated, and every way the file can be broken
— not a zip, a damaged member, a missing key, a wrong dtype or shape, out-of-range values —
raises ValueError naming the file.
"""

from __future__ import annotations

import os
import pathlib
import struct
import zipfile
import zlib

import numpy as np

__all__ = ["read_digits"]

_FIELDS: dict[str, tuple[np.dtype, tuple[int, ...]]] = {
    "images": (np.dtype(np.uint8), (8, 8)),
    "labels": (np.dtype(np.uint8), ()),
    "test": (np.dtype(np.bool_), ()),
}
# Errors zipfile/zlib raise on a damaged archive or member. RuntimeError includes the
# NotImplementedError zipfile raises for a compression method it does not support (a foreign
# file, reported as damaged).
_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, RuntimeError, struct.error)
_MAX_HEADER = 10_000


def _read_member(zf: zipfile.ZipFile, key: str, source: str) -> np.ndarray:
    dtype, trailing = _FIELDS[key]
    with zf.open(key + ".npy") as f:
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                header = np.lib.format.read_array_header_1_0(f, max_header_size=_MAX_HEADER)
            elif version == (2, 0):
                header = np.lib.format.read_array_header_2_0(f, max_header_size=_MAX_HEADER)
            else:
                raise ValueError(f"unsupported .npy version {version}")
        except ValueError as exc:
            raise ValueError(f"{source}: member {key!r} is not a valid .npy array: {exc}") from None
        shape, fortran, found = header
        if found != dtype:
            raise ValueError(f"{source}: {key!r} must have dtype {dtype.name}, got {found}")
        if len(shape) != 1 + len(trailing) or tuple(shape[1:]) != trailing:
            want = "(n, " + ", ".join(map(str, trailing)) + ")" if trailing else "(n,)"
            raise ValueError(f"{source}: {key!r} must have shape {want}, got {tuple(shape)}")
        nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
        member_size = zf.getinfo(key + ".npy").file_size
        if nbytes > member_size:  # checked before anything is allocated
            raise ValueError(
                f"{source}: member {key!r} declares shape {tuple(shape)} ({nbytes} bytes) but "
                f"holds {member_size} bytes"
            )
        data = f.read(nbytes)
        if len(data) != nbytes or f.read(1):  # reading to the end also checks the member's CRC
            raise ValueError(
                f"{source}: member {key!r} holds {'fewer' if len(data) < nbytes else 'more'} bytes "
                f"than the {nbytes} its header declares for shape {tuple(shape)}"
            )
    array = np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C")
    return np.ascontiguousarray(array).copy()


def read_digits(path: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Read ``(images uint8 (n, 8, 8), labels uint8 (n,), test bool (n,))`` from a digits file."""
    path = pathlib.Path(path)
    source = str(path)
    arrays: dict[str, np.ndarray] = {}
    try:
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
            missing = [k for k in _FIELDS if k + ".npy" not in names]
            if missing:
                raise ValueError(
                    f"{source}: missing arrays {missing}; expected the keys {list(_FIELDS)}"
                )
            for key in _FIELDS:
                arrays[key] = _read_member(zf, key, source)
    except _ZIP_ERRORS as exc:
        if isinstance(exc, FileNotFoundError | PermissionError | IsADirectoryError):
            raise
        raise ValueError(f"{source}: not a valid .npz (zip) file: {exc}") from exc
    images, labels, test = arrays["images"], arrays["labels"], arrays["test"]
    n = len(images)
    if len(labels) != n or len(test) != n:
        raise ValueError(
            f"{source}: 'images', 'labels' and 'test' must have the same length, got "
            f"{n}, {len(labels)} and {len(test)}"
        )
    if n == 0 or test.all():
        raise ValueError(
            f"{source}: no training images ({n} images, {int(test.sum())} in the test split)"
        )
    if images.max() > 16:
        raise ValueError(f"{source}: pixel value {int(images.max())} outside 0..16")
    if labels.max() > 9:
        raise ValueError(f"{source}: label {int(labels.max())} outside 0..9")
    return images, labels, test
