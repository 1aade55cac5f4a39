"""Argument checks shared by the kernel families: rows of a matrix, seeds, integers in a range,
float32 operands. Each raises TypeError or ValueError naming the argument, before any kernel runs.

Seeds and steps are integers in [0, 2**64 - 1] and peer0 in [0, 2**63 - 1]: out-of-range values
raise a ValueError naming the argument, they are never wrapped.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SEED_MAX", "PEER_MAX", "as_rows", "check_seed", "check_int", "empty_aligned",
           "f32_operand"]


def as_rows(name: str, x: np.ndarray, dtype) -> np.ndarray:
    """A 1-D vector as one row, a 2-D matrix as is; checks type and dtype (no silent copies)."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(x).__name__}")
    if x.dtype != dtype:
        raise TypeError(f"{name} must have dtype {np.dtype(dtype).name}, got {x.dtype}")
    if x.ndim == 1:
        return x.reshape(1, -1)
    if x.ndim != 2:
        raise ValueError(f"{name} must be 1-D (dim,) or 2-D (n_peers, dim), got shape {x.shape}")
    return x


#: Largest seed and step (the generator keys on 64-bit words; larger values are refused, never
#: wrapped) and largest peer0 (peers are signed 64-bit).
SEED_MAX = 2**64 - 1
PEER_MAX = 2**63 - 1


def check_seed(seed, step, peer0) -> tuple[int, int, int]:
    """(seed, step, peer0) as ints, each range-checked: ValueError naming the argument."""
    for name, v, hi, text in (("seed", seed, SEED_MAX, "2**64 - 1"),
                              ("step", step, SEED_MAX, "2**64 - 1"),
                              ("peer0", peer0, PEER_MAX, "2**63 - 1")):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) \
                or not 0 <= v <= hi:
            raise ValueError(f"{name} must be an integer >= 0 and <= {text}, got {v!r}")
    return int(seed), int(step), int(peer0)


def check_int(name: str, value, lo: int, hi: int) -> int:
    """``value`` as an int, checked to be an integer (not a bool) in [lo, hi]: ValueError naming
    ``name`` otherwise."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
            or not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")
    return int(value)


def f32_operand(name: str, a: object, ndim: int) -> np.ndarray:
    """``a`` checked to be a float32 numpy array of ``ndim`` dimensions (any strides: the kernel
    checks those): TypeError or ValueError naming ``name`` otherwise."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(a).__name__}")
    if a.dtype != np.float32:
        raise TypeError(f"{name} must have dtype float32, got {a.dtype}")
    if a.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-dimensional, got shape {a.shape}")
    return a


def empty_aligned(shape, dtype, align: int = 64) -> np.ndarray:
    """An uninitialized C-contiguous array whose data starts on an ``align``-byte boundary (a view
    of a slightly larger buffer): the int8 GEMMs stream whole 64-byte lines of a wide output
    (numpy's own large arrays start 16 bytes into a page)."""
    dt = np.dtype(dtype)
    size = int(np.prod(shape, dtype=np.int64))
    buf = np.empty(size * dt.itemsize + align, dtype=np.uint8)
    off = (-buf.ctypes.data) % align
    return buf[off:off + size * dt.itemsize].view(dt).reshape(shape)
