"""Exact top-k by magnitude, random-k and magnitude thresholding of each row, and the scatter that
decodes such (index, value) pairs into dense rows (csrc/topk.c).

NumPy twin: decentlearn/_reference/topk.py.
"""

from __future__ import annotations

import numpy as np

from decentlearn._core import randk as _core_randk, threshold as _core_threshold, topk as _core_topk
from decentlearn._core import scatter as _core_scatter
from decentlearn.ops.args import as_rows, check_seed
from decentlearn.ops.threads import resolve_threads

__all__ = ["topk", "randk", "threshold", "scatter"]


def _k_out(name: str, out, rows: np.ndarray, k: int, dtype) -> np.ndarray:
    """A caller's out array as (n_rows, k) (a 1-D (k,) one for a 1-D x), or a new one."""
    if out is None:
        return np.empty((rows.shape[0], k), dtype=dtype)
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(out).__name__}")
    if out.ndim == 1 and rows.shape[0] == 1 and out.flags.c_contiguous:
        return out.reshape(1, -1)
    return out


def _check_k(k, dim: int) -> int:
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an int, got {type(k).__name__}")
    if not 0 <= k <= dim:
        raise ValueError(f"k must be in [0, dim={dim}], got {k}")
    return int(k)


def topk(x: np.ndarray, k: int, out_idx: np.ndarray | None = None,
         out_val: np.ndarray | None = None,
         n_threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The k largest magnitudes of each row: ``(idx int32 (n_rows, k), val float32 (n_rows, k))``.

    Indices ascend within a row and ``val = x[row, idx]``. Exact and deterministic: among equal
    magnitudes at the k-th place, the lowest indices are kept. ``0 <= k <= dim``; a row holding NaN
    raises ValueError (infinities are ordinary magnitudes). A 1-D x is one row. Never sorts the
    row: a sampled threshold, one vectorized filter pass, and a radix select on the candidates.
    Bit-identical for every thread count.
    """
    rows = as_rows("x", x, np.float32)
    k = _check_k(k, rows.shape[1])
    oi = _k_out("out_idx", out_idx, rows, k, np.int32)
    ov = _k_out("out_val", out_val, rows, k, np.float32)
    _core_topk(rows, k, oi, ov, resolve_threads(n_threads, rows.size))
    return (oi if out_idx is None else out_idx), (ov if out_val is None else out_val)


def randk(x: np.ndarray, k: int, seed: int = 0, step: int = 0, peer0: int = 0,
          n_threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """k distinct uniformly random indices of each row and their values, ``(idx, val)`` as topk.

    Row r keeps the k indices i with the smallest counter-RNG numbers
    ``dl_rng_u32(rng_key(seed, step, peer0 + r), i)`` (ties to the lowest index): a uniform random
    k-subset, ascending, reproducible from (seed, step, peer), bit-identical for every thread
    count. Values are copied as they are (no NaN check).
    """
    rows = as_rows("x", x, np.float32)
    k = _check_k(k, rows.shape[1])
    seed, step, peer0 = check_seed(seed, step, peer0)
    oi = np.empty((rows.shape[0], k), dtype=np.int32)
    ov = np.empty((rows.shape[0], k), dtype=np.float32)
    return _core_randk(rows, k, seed, step, peer0, oi, ov, resolve_threads(n_threads, rows.size))


def threshold(x: np.ndarray, v: float,
              n_threads: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every element with ``|x| >= v`` (v rounded to float32, v >= 0):
    ``(counts int64 (n_rows,), idx int32 (sum,), val float32 (sum,))``, indices ascending within
    a row, rows concatenated. NaN in x raises ValueError. Bit-identical for every thread count."""
    rows = as_rows("x", x, np.float32)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(f"v must be a real number, got {type(v).__name__}")
    if not v >= 0:
        raise ValueError(f"v must be a number >= 0, got {v!r}")
    with np.errstate(over="ignore"):  # beyond float32's range: infinity, as documented
        v32 = float(np.float32(v))
    return _core_threshold(rows, v32, resolve_threads(n_threads, rows.size))


def scatter(idx: np.ndarray, val: np.ndarray, dim: int, out: np.ndarray | None = None,
            n_threads: int | None = None) -> np.ndarray:
    """Dense rows from (index, value) pairs: ``out`` (n_rows, dim) float32 zeros with
    ``out[r, idx[r, j]] = val[r, j]`` in order of j (a repeated index keeps its last value), as
    ``np.put_along_axis``; idx (n_rows, k) int32, val (n_rows, k) float32. ValueError (nothing
    written) unless every index is in [0, dim)."""
    if isinstance(dim, (bool, np.bool_)) or not isinstance(dim, (int, np.integer)) or dim < 0:
        raise ValueError(f"dim must be an int >= 0, got {dim!r}")
    if out is None:
        out = np.empty((np.shape(idx)[0] if np.ndim(idx) else 0, int(dim)), np.float32)
    return _core_scatter(idx, val, out, resolve_threads(n_threads, out.size))
