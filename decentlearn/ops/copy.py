"""A streaming copy and a read-only pass (csrc/copy.c): the memory limits decentlearn.experiments.bench
measures the machine with.

NumPy twin: decentlearn/_reference/copy.py.
"""

from __future__ import annotations

import numpy as np

from decentlearn._core import copy_f32 as _core_copy_f32, read_f32 as _core_read_f32
from decentlearn.ops.threads import resolve_threads

__all__ = ["copy_f32", "read_f32"]


def copy_f32(src: np.ndarray, dst: np.ndarray, n_threads: int | None = None) -> np.ndarray:
    """``dst[...] = src`` with non-temporal (streaming) stores: the copy bandwidth limit of
    decentlearn.experiments.bench. Both C-contiguous float32 arrays of the same size, not overlapping.
    NumPy reference: ``np.copyto(dst, src)``."""
    if not isinstance(src, np.ndarray) or not isinstance(dst, np.ndarray):
        raise TypeError("copy_f32: src and dst must be numpy arrays")
    return _core_copy_f32(src, dst, resolve_threads(n_threads, src.size))


def read_f32(src: np.ndarray, n_threads: int | None = None) -> int:
    """XOR of the 32-bit words of the C-contiguous float32 array ``src``, read once: the read-only
    bandwidth limit of decentlearn.experiments.bench (the floor of kernels that must read their input).
    NumPy reference: ``np.bitwise_xor.reduce(src.view(np.uint32).ravel())``."""
    if not isinstance(src, np.ndarray):
        raise TypeError("read_f32: src must be a numpy array")
    out = np.zeros(1, np.uint32)
    _core_read_f32(src, out, resolve_threads(n_threads, src.size))
    return int(out[0])
