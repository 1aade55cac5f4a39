"""NumPy references of the memory-limit kernels of csrc/copy.c that decentlearn.bench measures the
machine with, with the signatures of decentlearn.ops.copy: ``copy_f32(src, dst)`` is
``np.copyto``; ``read_f32(src)`` the XOR of src's 32-bit words; ``take_rows(src, idx)`` is
``np.take(src, idx, axis=0)``. ``n_threads`` is accepted and
ignored.
"""

from __future__ import annotations

import numpy as np


def copy_f32(src: np.ndarray, dst: np.ndarray, n_threads: int | None = None) -> np.ndarray:
    np.copyto(dst, src)
    return dst


def read_f32(src: np.ndarray, n_threads: int | None = None) -> int:
    return int(np.bitwise_xor.reduce(np.ascontiguousarray(src).view(np.uint32).ravel(),
                                     initial=np.uint32(0)))


def take_rows(src: np.ndarray, idx: np.ndarray, out: np.ndarray | None = None,
              n_threads: int | None = None) -> np.ndarray:
    return np.take(src, idx, axis=0, out=out)
