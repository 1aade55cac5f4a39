"""Strict reader for the binary version of CIFAR-10 (``cifar-10-batches-bin``).

Each batch file is a sequence of 3073-byte records: one label byte (0..9) then 3072 pixel bytes,
the 1024 red, 1024 green and 1024 blue values of a 32x32 image in row-major order. The reader
checks the length (from the file's size, before reading) and the labels, so a truncated or corrupt
file raises ValueError naming it.
"""

from __future__ import annotations

import os
import pathlib

import numpy as np

__all__ = [
    "CIFAR10_DIRNAME",
    "CIFAR10_TEST_FILE",
    "CIFAR10_TRAIN_FILES",
    "RECORD_BYTES",
    "find_cifar10_dir",
    "read_cifar10",
    "read_cifar10_batch",
]

CIFAR10_DIRNAME = "cifar-10-batches-bin"
CIFAR10_TRAIN_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
CIFAR10_TEST_FILE = "test_batch.bin"
RECORD_BYTES = 1 + 3 * 32 * 32


def read_cifar10_batch(
    path: str | os.PathLike[str], *, expected_records: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Read one batch file into ``(images uint8 (n, 3, 32, 32), labels uint8 (n,))``."""
    path = pathlib.Path(path)
    with open(path, "rb") as f:
        # The length is checked on the file's size, before anything is read.
        size = os.fstat(f.fileno()).st_size
        if size == 0 or size % RECORD_BYTES != 0:
            raise ValueError(
                f"{path}: corrupt CIFAR-10 batch: {size} bytes is not a positive multiple of "
                f"the {RECORD_BYTES}-byte record"
            )
        n = size // RECORD_BYTES
        if expected_records is not None and n != expected_records:
            raise ValueError(f"{path}: corrupt CIFAR-10 batch: {n} records, expected {expected_records}")
        records = np.empty((n, RECORD_BYTES), dtype=np.uint8)
        got = f.readinto(memoryview(records).cast("B"))
        if got != size or f.read(1):
            raise ValueError(f"{path}: CIFAR-10 batch changed while being read ({got} of {size} bytes)")
    labels = records[:, 0].copy()
    if labels.max() > 9:
        raise ValueError(f"{path}: corrupt CIFAR-10 batch: label {int(labels.max())} outside 0..9")
    images = records[:, 1:].reshape(n, 3, 32, 32).copy()
    return images, labels


def find_cifar10_dir(directory: pathlib.Path) -> pathlib.Path | None:
    """Return the folder holding the batch files: ``directory`` or its ``cifar-10-batches-bin``."""
    for candidate in (directory / CIFAR10_DIRNAME, directory):
        if all((candidate / name).is_file() for name in (*CIFAR10_TRAIN_FILES, CIFAR10_TEST_FILE)):
            return candidate
    return None


def read_cifar10(directory: pathlib.Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Read the five training batches and the test batch of a ``cifar-10-batches-bin`` folder.

    The five training batches must hold the same number of records (10,000 in the official
    files), which catches a file cut at a record boundary.
    """
    parts = [read_cifar10_batch(directory / name) for name in CIFAR10_TRAIN_FILES]
    counts = [len(p[1]) for p in parts]
    if len(set(counts)) != 1:
        raise ValueError(
            f"{directory}: corrupt CIFAR-10 folder: the training batches hold {counts} records, "
            f"expected the same number in each (10000 in the official files)"
        )
    x_test, y_test = read_cifar10_batch(directory / CIFAR10_TEST_FILE)
    x_train = np.concatenate([p[0] for p in parts])
    y_train = np.concatenate([p[1] for p in parts])
    return x_train, y_train, x_test, y_test
