"""The consensus distance over the peers' rows (csrc/consensus.c): its two sums in one pass (the
per-round divergence check) and the exact centred distance (what evaluations report).

NumPy twin: decentlearn/_reference/consensus.py.
"""

from __future__ import annotations

import numpy as np

from decentlearn._core import consensus_distance as _core_consensus_distance
from decentlearn._core import consensus_sums as _core_consensus_sums
from decentlearn.ops.threads import resolve_threads

__all__ = ["consensus_sums", "consensus_distance"]


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
