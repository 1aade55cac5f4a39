"""The two sums of the consensus distance in one pass over the peers' rows
(csrc/consensus.c).

NumPy twin: decentlearn/_reference/consensus.py.
"""

from __future__ import annotations

import numpy as np

from decentlearn._core import consensus_sums as _core_consensus_sums
from decentlearn.ops.threads import resolve_threads

__all__ = ["consensus_sums"]


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
