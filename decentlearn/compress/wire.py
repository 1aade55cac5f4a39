"""Wire-format helpers the compressors share: ``Reader`` reads untrusted little-endian bytes with a
bounds check on every read; ``f32_bytes`` and ``stack_rows`` write and gather fixed-layout rows."""

from __future__ import annotations

import struct

import numpy as np

__all__ = ["Reader", "f32_bytes", "stack_rows"]


class Reader:
    """Bounds-checked reading of untrusted little-endian bytes: every read that would run past the
    end raises ValueError, and nothing is read from outside the buffer."""

    def __init__(self, data: bytes | bytearray | memoryview, what: str) -> None:
        self.view = memoryview(data).cast("B")
        self.pos = 0
        self.what = what

    @property
    def remaining(self) -> int:
        return len(self.view) - self.pos

    def take(self, n: int) -> memoryview:
        if n < 0 or n > self.remaining:
            raise ValueError(f"{self.what}: truncated message (needs {n} more bytes at offset "
                             f"{self.pos}, {self.remaining} left)")
        out = self.view[self.pos:self.pos + n]
        self.pos += n
        return out

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def f32(self) -> float:
        return struct.unpack("<f", self.take(4))[0]

    def array(self, dtype, count: int) -> np.ndarray:
        dt = np.dtype(dtype).newbyteorder("<")
        return np.frombuffer(self.take(count * dt.itemsize), dtype=dt).astype(dt.newbyteorder("="))

    def done(self) -> None:
        if self.remaining:
            raise ValueError(f"{self.what}: {self.remaining} unexpected bytes after the message")


def stack_rows(rows: list[dict], key: str, shape: tuple[int, ...], dtype) -> np.ndarray:
    """The ``key`` arrays of parsed rows stacked into one (n_rows, *shape) array."""
    if not rows:
        return np.zeros((0,) + shape, dtype)
    return np.ascontiguousarray(np.stack([r[key] for r in rows]), dtype=dtype)


def f32_bytes(a: np.ndarray) -> bytes:
    """``a`` as little-endian float32 bytes."""
    return np.ascontiguousarray(a, dtype="<f4").tobytes()
