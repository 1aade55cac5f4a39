"""NumPy references of the memory-limit kernels of csrc/copy.c that decentlearn.bench measures the
machine with, with the signatures of decentlearn.ops.copy: ``copy_f32(src, dst)`` is
``np.copyto``; ``read_f32(src)`` the XOR of src's 32-bit words; ``take_rows(src, idx)`` is
``np.take(src, idx, axis=0)``; ``swap_axes12(src)`` is ``src.transpose(0, 2, 1, 3)``
copied; ``batch_indices`` and ``shuffle_segments`` are the peer sampler's NumPy code before its
C kernels. ``n_threads`` is accepted and
ignored.
"""

from __future__ import annotations

import numpy as np


def axpby(a: float, x: np.ndarray, b: float, y: np.ndarray, out: np.ndarray | None = None,
          n_threads: int | None = None) -> np.ndarray:
    res = np.float32(a) * x + np.float32(b) * y
    if out is None:
        return res
    out[...] = res.reshape(out.shape)
    return out


def scale_rows(x: np.ndarray, s: np.ndarray, divide: bool = False, out: np.ndarray | None = None,
               n_threads: int | None = None) -> np.ndarray:
    res = x / s[:, None] if divide else x * s[:, None]
    if out is None:
        return res
    out[...] = res
    return out


def copy2d(src: np.ndarray, dst: np.ndarray | None = None, n_threads: int | None = None):
    if dst is None:
        return np.array(src, dtype=np.float32)
    np.copyto(dst, src)
    return dst


def place_rows(src: np.ndarray, rows: np.ndarray, n_rows: int, out: np.ndarray | None = None,
               n_threads: int | None = None) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    if rows.size and (rows.min() < 0 or rows.max() >= n_rows or np.unique(rows).size != rows.size):
        raise ValueError("place_rows: rows must be distinct and lie in [0, n_rows)")
    res = np.zeros((n_rows,) + src.shape[1:], dtype=src.dtype)
    res[rows] = src
    if out is None:
        return res
    out[...] = res
    return out


def copy_f32(src: np.ndarray, dst: np.ndarray, n_threads: int | None = None) -> np.ndarray:
    np.copyto(dst, src)
    return dst


def read_f32(src: np.ndarray, n_threads: int | None = None) -> int:
    return int(np.bitwise_xor.reduce(np.ascontiguousarray(src).view(np.uint32).ravel(),
                                     initial=np.uint32(0)))


def put_rows(dst: np.ndarray, idx: np.ndarray, src: np.ndarray,
             n_threads: int | None = None) -> np.ndarray:
    idx = np.asarray(idx, dtype=np.int64).reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= len(dst) or (np.diff(idx) <= 0).any()):
        raise IndexError("put_rows: idx must be strictly increasing in [0, len(dst))")
    dst[idx] = src
    return dst


def count_ne_rows(a: np.ndarray, idx: np.ndarray, b: np.ndarray,
                  n_threads: int | None = None) -> np.ndarray:
    return np.count_nonzero(a[np.asarray(idx, dtype=np.int64)] != b, axis=1).astype(np.int64)


def take_rows(src: np.ndarray, idx: np.ndarray, out: np.ndarray | None = None,
              n_threads: int | None = None) -> np.ndarray:
    return np.take(src, idx, axis=0, out=out)


def swap_axes12(src: np.ndarray, out: np.ndarray | None = None,
                n_threads: int | None = None) -> np.ndarray:
    if out is None:
        out = np.empty((src.shape[0], src.shape[2], src.shape[1], src.shape[3]), src.dtype)
    np.copyto(out, src.transpose(0, 2, 1, 3))
    return out


def batch_indices(perm: np.ndarray, start: np.ndarray, size: np.ndarray, cursor: np.ndarray,
                  batch: int, out: np.ndarray | None = None,
                  n_threads: int | None = None) -> np.ndarray:
    pos = cursor[:, None] + np.arange(batch, dtype=np.int64)[None, :]
    idx = perm[start[:, None] + pos % size[:, None]]
    if out is None:
        return idx
    out[...] = idx
    return out


def shuffle_segments(perm: np.ndarray, start: np.ndarray, size: np.ndarray, peers: np.ndarray,
                     u: np.ndarray, n_threads: int | None = None) -> None:
    """One stable argsort of (segment number + uniform) over all listed samples."""
    sizes = size[peers]
    seg = np.repeat(np.arange(peers.size, dtype=np.float64), sizes)
    pos = np.arange(sizes.sum(), dtype=np.int64) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    pos += np.repeat(start[peers], sizes)
    order = np.argsort(seg + u, kind="stable")
    perm[pos] = perm[pos[order]]
