"""A streaming copy and a read-only pass (csrc/copy.c): the memory limits
decentlearn.experiments.bench measures the machine with; ``axpby``, the threaded ``a x + b y`` the
algorithms' whole-matrix updates use; ``take_rows``, the threaded gather of
every peer's minibatch; ``batch_indices`` and ``shuffle_segments``, the peer sampler's index draw
and reshuffle; and ``swap_axes12``, Flatten's threaded reorder between channel-major and
sample-major.

NumPy twin: decentlearn/_reference/copy.py.
"""

from __future__ import annotations

import numpy as np

from decentlearn._core import axpby as _core_axpby
from decentlearn._core import axpby_rows as _core_axpby_rows
from decentlearn._core import copy2d as _core_copy2d
from decentlearn._core import count_ne_rows as _core_count_ne_rows
from decentlearn._core import place_rows as _core_place_rows
from decentlearn._core import put_rows as _core_put_rows
from decentlearn._core import scale_rows as _core_scale_rows
from decentlearn._core import (batch_indices as _core_batch_indices, copy_f32 as _core_copy_f32,
                               read_f32 as _core_read_f32,
                               shuffle_segments as _core_shuffle_segments,
                               swap_axes12 as _core_swap_axes12, take_rows as _core_take_rows)
from decentlearn.ops.threads import resolve_threads

__all__ = ["axpby", "batch_indices", "copy2d", "copy_f32", "count_ne_rows", "place_rows",
           "put_rows", "read_f32", "scale_rows", "shuffle_segments", "swap_axes12", "take_rows"]


def axpby(a: float, x: np.ndarray, b: float, y: np.ndarray, out: np.ndarray | None = None,
          n_threads: int | None = None) -> np.ndarray:
    """``out = a * x + b * y`` on the run's threads: float32 arrays of one size, C-contiguous,
    or 2-D arrays of one shape whose rows are each contiguous (column blocks ``X[:, a:b]`` of
    wider matrices, in or out); ``a``, ``b`` rounded to float32; each product rounded, then the
    sum, so with a = 1 and b = 1 or -1 it is NumPy's ``x + y`` or ``x - y`` bit for bit, with
    a = 1 ``x + b * y``. ``out`` (default: a new C-contiguous array shaped as x) may be x or y
    itself (in place)."""
    if not isinstance(x, np.ndarray) or not isinstance(y, np.ndarray):
        raise TypeError("axpby: x and y must be numpy arrays")
    if out is None:
        out = np.empty(x.shape, dtype=x.dtype)
    elif not isinstance(out, np.ndarray):
        raise TypeError(f"axpby: out must be a numpy array, got {type(out).__name__}")
    if not (x.flags.c_contiguous and y.flags.c_contiguous and out.flags.c_contiguous) and (
            x.ndim == y.ndim == out.ndim == 2):
        _core_axpby_rows(float(a), x, float(b), y, out, resolve_threads(n_threads, x.size))
        return out
    flat = [a_.reshape(-1) if a_.flags.c_contiguous else a_ for a_ in (x, y, out)]
    _core_axpby(float(a), flat[0], float(b), flat[1], flat[2], resolve_threads(n_threads, x.size))
    return out


def scale_rows(x: np.ndarray, s: np.ndarray, divide: bool = False, out: np.ndarray | None = None,
               n_threads: int | None = None) -> np.ndarray:
    """``out[r] = x[r] * s[r]`` (``divide``: ``x[r] / s[r]``) for the (R, D) float32 ``x`` and
    (R,) float32 ``s`` on the run's threads: NumPy's ``x * s[:, None]`` (``x / s[:, None]``) bit
    for bit. ``out`` (default: a new array) may be x itself."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"scale_rows: x must be a numpy array, got {type(x).__name__}")
    if out is None:
        out = np.empty_like(x)
    _core_scale_rows(x, s, bool(divide), out, resolve_threads(n_threads, x.size))
    return out


def copy2d(src: np.ndarray, dst: np.ndarray | None = None,
           n_threads: int | None = None) -> np.ndarray:
    """``dst[...] = src`` for 2-D float32 arrays whose rows are each contiguous but may lie apart
    (a column block ``X[:, a:b]`` of a wider matrix, on either side), rows on the run's threads;
    ``dst`` (default: a new C-contiguous array) must not overlap ``src``. NumPy reference:
    ``np.copyto(dst, src)``."""
    if not isinstance(src, np.ndarray):
        raise TypeError(f"copy2d: src must be a numpy array, got {type(src).__name__}")
    if dst is None:
        dst = np.empty(src.shape, np.float32)
    return _core_copy2d(src, dst, resolve_threads(n_threads, src.size))


def copy_f32(src: np.ndarray, dst: np.ndarray, n_threads: int | None = None) -> np.ndarray:
    """``dst[...] = src`` with non-temporal (streaming) stores: the copy bandwidth limit of
    decentlearn.experiments.bench. Both C-contiguous float32 arrays of the same size, not
    overlapping. NumPy reference: ``np.copyto(dst, src)``."""
    if not isinstance(src, np.ndarray) or not isinstance(dst, np.ndarray):
        raise TypeError("copy_f32: src and dst must be numpy arrays")
    return _core_copy_f32(src, dst, resolve_threads(n_threads, src.size))


def read_f32(src: np.ndarray, n_threads: int | None = None) -> int:
    """XOR of the 32-bit words of the C-contiguous float32 array ``src``, read once: the read-only
    bandwidth limit of decentlearn.experiments.bench (the floor of kernels that must read their
    input). NumPy reference: ``np.bitwise_xor.reduce(src.view(np.uint32).ravel())``."""
    if not isinstance(src, np.ndarray):
        raise TypeError("read_f32: src must be a numpy array")
    out = np.zeros(1, np.uint32)
    _core_read_f32(src, out, resolve_threads(n_threads, src.size))
    return int(out[0])


def _int64(name: str, x) -> np.ndarray:
    """``x`` as a C-contiguous int64 array (no copy when it is one); TypeError naming ``name``
    unless it holds integers."""
    x = np.asarray(x)
    if x.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers, got dtype {x.dtype}")
    return x.astype(np.int64, order="C", copy=False)


def take_rows(src: np.ndarray, idx: np.ndarray, out: np.ndarray | None = None,
              n_threads: int | None = None) -> np.ndarray:
    """``np.take(src, idx, axis=0)`` on threads: out (idx.shape + src.shape[1:]) gets row
    ``idx.flat[r]`` of the C-contiguous ``src`` (any plain dtype) at position r. Every index must
    lie in [0, len(src)) (IndexError otherwise, nothing written; no negative wrap-around). The
    simulator's minibatch gather. NumPy reference: ``np.take(src, idx, axis=0)``."""
    if not isinstance(src, np.ndarray):
        raise TypeError(f"take_rows: src must be a numpy.ndarray, got {type(src).__name__}")
    idx = _int64("take_rows: idx", idx)  # keeps a 0-d idx 0-d
    if out is None:
        out = np.empty(idx.shape + src.shape[1:], dtype=src.dtype)
    work = idx.size * (src.size // len(src) if src.ndim and len(src) else 0)
    return _core_take_rows(src, idx, out, resolve_threads(n_threads, work))


def put_rows(dst: np.ndarray, idx: np.ndarray, src: np.ndarray,
             n_threads: int | None = None) -> np.ndarray:
    """``dst[idx] = src`` on threads, in place: row ``idx[r]`` of the C-contiguous ``dst`` gets row
    r of ``src`` (len(idx) rows), or its only row when ``src`` has one (written into every listed
    row). ``idx`` must be strictly increasing in [0, len(dst)) (IndexError otherwise, nothing
    written). Returns dst. NumPy reference: ``dst[idx] = src``."""
    if not isinstance(dst, np.ndarray) or not isinstance(src, np.ndarray):
        raise TypeError("put_rows: dst and src must be numpy arrays")
    idx = _int64("put_rows: idx", idx).reshape(-1)
    work = idx.size * (dst.size // len(dst) if dst.ndim and len(dst) else 0)
    return _core_put_rows(dst, idx, src, resolve_threads(n_threads, work))


def count_ne_rows(a: np.ndarray, idx: np.ndarray, b: np.ndarray,
                  n_threads: int | None = None) -> np.ndarray:
    """int64 counts: ``counts[r]`` = how many entries of row ``idx[r]`` of the (n, dim) float32
    ``a`` differ from the (dim,) float32 ``b`` (IEEE: NaN differs from everything, -0 equals +0),
    rows on threads. NumPy reference: ``np.count_nonzero(a[idx] != b, axis=1)``."""
    idx = _int64("count_ne_rows: idx", idx).reshape(-1)
    counts = np.empty(idx.size, dtype=np.int64)
    work = idx.size * (a.shape[1] if getattr(a, "ndim", 0) == 2 else 0)
    return _core_count_ne_rows(a, idx, b, counts, resolve_threads(n_threads, work))


def place_rows(src: np.ndarray, rows: np.ndarray, n_rows: int, out: np.ndarray | None = None,
               n_threads: int | None = None) -> np.ndarray:
    """The inverse of take_rows with zeros elsewhere: ``out`` (n_rows,) + src.shape[1:] with
    ``out[rows[i]] = src[i]`` and zero rows where no i lands, on threads (the C-contiguous ``src``
    of any plain dtype). ``rows`` must be distinct and lie in [0, n_rows) (ValueError, nothing
    written). NumPy reference: ``out[...] = 0; out[rows] = src``."""
    if not isinstance(src, np.ndarray):
        raise TypeError(f"place_rows: src must be a numpy.ndarray, got {type(src).__name__}")
    rows = _int64("place_rows: rows", rows).reshape(-1)
    if rows.size != (len(src) if src.ndim else 0):
        raise ValueError(f"place_rows: rows must hold one row index per row of src ({len(src)}), "
                         f"got {rows.size}")
    if rows.size and (rows.min() < 0 or rows.max() >= n_rows):
        raise ValueError(f"place_rows: rows must lie in [0, {n_rows}), got {rows.min()}.."
                         f"{rows.max()}")
    inv = np.full(n_rows, -1, np.int64)
    inv[rows] = np.arange(rows.size)
    if rows.size and np.count_nonzero(inv >= 0) != rows.size:
        raise ValueError("place_rows: rows must be distinct")
    if out is None:
        out = np.empty((n_rows,) + src.shape[1:], dtype=src.dtype)
    work = n_rows * (src.size // len(src) if src.ndim and len(src) else 0)
    return _core_place_rows(src, inv, out, resolve_threads(n_threads, work))


def swap_axes12(src: np.ndarray, out: np.ndarray | None = None,
                n_threads: int | None = None) -> np.ndarray:
    """``src.transpose(0, 2, 1, 3)`` copied into the C-contiguous float32 ``out`` (P, B, A, K) (new
    when None) from the C-contiguous float32 ``src`` (P, A, B, K): rows of K values copied whole,
    on the run's threads. Returns out."""
    if not isinstance(src, np.ndarray) or src.ndim != 4:
        raise ValueError(f"swap_axes12: src must be a 4-D numpy array, got "
                         f"{getattr(src, 'shape', type(src).__name__)}")
    if out is None:
        out = np.empty((src.shape[0], src.shape[2], src.shape[1], src.shape[3]), src.dtype)
    return _core_swap_axes12(src, out, resolve_threads(n_threads, src.size))




def batch_indices(perm: np.ndarray, start: np.ndarray, size: np.ndarray, cursor: np.ndarray,
                  batch: int, out: np.ndarray | None = None,
                  n_threads: int | None = None) -> np.ndarray:
    """Every peer's minibatch indices: ``out[p, j] = perm[start[p] + (cursor[p] + j) % size[p]]``
    for P peers and ``j < batch``; ``out`` (P, batch) int64. Peer p's segment of ``perm`` is
    ``perm[start[p] : start[p] + size[p]]`` (ValueError unless every size >= 1 and cursor >= 0,
    IndexError unless every segment lies in ``perm``). The peer sampler's draw, split over threads.
    NumPy reference: decentlearn/_reference/copy.py."""
    perm = _int64("perm", perm)
    start, size, cursor = (_int64(n, v) for n, v in
                           (("start", start), ("size", size), ("cursor", cursor)))
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 0:
        raise ValueError(f"batch must be an int >= 0, got {batch!r}")
    if out is None:
        out = np.empty((start.shape[0] if start.ndim == 1 else 0, int(batch)), np.int64)
    elif out.shape[1:] != (batch,):
        raise ValueError(f"out must have shape (n_peers, {batch}), got {out.shape}")
    return _core_batch_indices(perm, start, size, cursor, out,
                               resolve_threads(n_threads, out.size))


def shuffle_segments(perm: np.ndarray, start: np.ndarray, size: np.ndarray, peers: np.ndarray,
                     u: np.ndarray, n_threads: int | None = None) -> None:
    """Reshuffles, in place, the segments ``perm[start[p] : start[p] + size[p]]`` of the listed
    ``peers`` (ascending) with the float64 uniforms ``u``, one per sample of those segments in
    order: the q-th listed peer's segment is reordered by the stable ascending order of ``q +
    u[its samples]``, exactly as one stable ``np.argsort`` of all of them would (the peer
    sampler's reshuffle at the end of an epoch). ``perm`` int64, C-contiguous. NumPy reference:
    decentlearn/_reference/copy.py."""
    if not isinstance(perm, np.ndarray) or perm.dtype != np.int64:
        raise TypeError("perm must be an int64 numpy array (it is shuffled in place)")
    start, size, peers = (_int64(n, v) for n, v in
                          (("start", start), ("size", size), ("peers", peers)))
    if not isinstance(u, np.ndarray) or u.dtype != np.float64:
        raise TypeError("u must be a float64 numpy array")
    u = np.ascontiguousarray(u)
    _core_shuffle_segments(perm, start, size, peers, u, resolve_threads(n_threads, u.size))
