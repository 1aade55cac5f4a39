"""The consensus distance over the peers' rows (csrc/consensus.c): its two sums in one pass (the
per-round divergence check) and the exact centred distance (what evaluations report); and the
exact column means alone and weighted column sums (the all-reduce's average, a server's
weighted average).

NumPy twin: decentlearn/_reference/consensus.py.
"""

from __future__ import annotations

import numpy as np

from decentlearn._core import consensus_distance as _core_consensus_distance
from decentlearn._core import column_mean as _core_column_mean
from decentlearn._core import consensus_sums as _core_consensus_sums
from decentlearn._core import row_sums as _core_row_sums
from decentlearn._core import weighted_column_sum as _core_weighted_column_sum
from decentlearn.ops.threads import resolve_threads

__all__ = ["column_mean", "consensus_sums", "consensus_distance", "row_sums",
           "weighted_column_sum"]


def consensus_sums(X: np.ndarray, out: np.ndarray | None = None,
                   n_threads: int | None = None) -> np.ndarray:
    """``(sum_ic X_ic^2, sum_c (sum_i X_ic)^2)`` as a (2,) float64 array, in one pass over the
    C-contiguous (P, D) float32 ``X`` (float64 accumulation in fixed column chunks: the result
    does not depend on ``n_threads``). The consensus distance is ``out[0] / P - out[1] / P^2``
    up to cancellation. NumPy reference: decentlearn._reference.consensus.consensus_sums."""
    if not isinstance(X, np.ndarray):
        raise TypeError(f"consensus_sums: X must be a numpy array, got {type(X).__name__}")
    if out is None:
        out = np.empty(2, dtype=np.float64)
    return _core_consensus_sums(X, out, resolve_threads(n_threads, X.size))


def consensus_distance(X: np.ndarray, out: np.ndarray | None = None,
                       mean: np.ndarray | None = None,
                       n_threads: int | None = None) -> np.ndarray:
    """``(1/P) sum_ic (X_ic - m_c)^2`` with ``m`` the column means, as a (1,) float64 array, for
    the C-contiguous (P, D) float32 ``X``: per chunk of 256 columns the column sums over the rows
    in row order, the means, each column's sum of squared deviations in row order, then the
    columns in order and the chunks in order, every operation in float64 and not contracted, so
    the result is the same at any ``n_threads`` and equals the NumPy twin's bit for bit. ``mean``
    (a (D,) float64 array, or None) gets the column means, equal to NumPy's
    ``X.mean(axis=0, dtype=np.float64)``. NumPy reference:
    decentlearn._reference.consensus.consensus_distance."""
    if not isinstance(X, np.ndarray):
        raise TypeError(f"consensus_distance: X must be a numpy array, got {type(X).__name__}")
    if out is None:
        out = np.empty(1, dtype=np.float64)
    return _core_consensus_distance(X, out, mean, resolve_threads(n_threads, 2 * X.size))


def column_mean(X: np.ndarray, out: np.ndarray | None = None,
                n_threads: int | None = None) -> np.ndarray:
    """The column means of the C-contiguous (P, D) float32 ``X`` as a (D,) float64 array, each
    column summed over the rows in row order and divided by P: NumPy's
    ``X.mean(axis=0, dtype=np.float64)`` bit for bit, on ``n_threads`` threads (blocks of
    columns). NumPy reference: decentlearn._reference.consensus.column_mean."""
    if not isinstance(X, np.ndarray):
        raise TypeError(f"column_mean: X must be a numpy array, got {type(X).__name__}")
    if out is None:
        out = np.empty(X.shape[1] if X.ndim == 2 else 0, dtype=np.float64)
    return _core_column_mean(X, out, resolve_threads(n_threads, X.size))


def weighted_column_sum(X: np.ndarray, w: np.ndarray, out: np.ndarray | None = None,
                        n_threads: int | None = None) -> np.ndarray:
    """``sum_k w[k] X[k]`` as a (D,) float64 array for the C-contiguous (P, D) float32 ``X`` and
    (P,) float64 ``w``: each column's products ``w[k] X[k, c]`` (float64) added in row order,
    NumPy's ``np.add.reduce(w[:, None] * X.astype(np.float64), axis=0)`` bit for bit, on
    ``n_threads`` threads (blocks of columns). NumPy reference:
    decentlearn._reference.consensus.weighted_column_sum."""
    if not isinstance(X, np.ndarray):
        raise TypeError(f"weighted_column_sum: X must be a numpy array, got {type(X).__name__}")
    if out is None:
        out = np.empty(X.shape[1] if X.ndim == 2 else 0, dtype=np.float64)
    return _core_weighted_column_sum(X, w, out, resolve_threads(n_threads, X.size))


def row_sums(x: np.ndarray, out: np.ndarray | None = None,
             n_threads: int | None = None) -> np.ndarray:
    """Each row's sum of the C-contiguous (R, n) float32 ``x``, in float32 with NumPy's pairwise
    summation: ``np.sum(x, axis=1)`` bit for bit (what ``np.sum`` over the contiguous trailing
    axes of an array gives), rows on the run's threads. ``out`` (R,) float32, new when None.
    NumPy reference: decentlearn._reference.consensus.row_sums."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"row_sums: x must be a numpy array, got {type(x).__name__}")
    if out is None:
        out = np.empty(x.shape[0] if x.ndim == 2 else 0, dtype=np.float32)
    return _core_row_sums(x, out, resolve_threads(n_threads, x.size))
