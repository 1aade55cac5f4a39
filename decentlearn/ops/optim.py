"""One SGD step over the whole (P, dim) parameter matrix (csrc/optim.c).

NumPy twin: decentlearn/_reference/optim.py.
"""

from __future__ import annotations

import numpy as np

from decentlearn._core import sgd_step as _core_sgd_step
from decentlearn.ops.threads import resolve_threads

__all__ = ["sgd_step"]


def sgd_step(params: np.ndarray, grad: np.ndarray, buf: np.ndarray | None, lr: float,
             momentum: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
             frozen: np.ndarray | None = None, n_threads: int | None = None) -> None:
    """One SGD step in place over the (P, dim) float32 ``params`` (and momentum ``buf``), in one
    pass: ``g = grad + wd p; buf = mu buf + g; g = g + mu buf`` (Nesterov) or ``g = buf``;
    ``p -= lr g``. ``frozen`` (P,) int64: row r keeps its first frozen[r] entries (buf zeroed)."""
    if frozen is not None:
        frozen = np.ascontiguousarray(frozen, dtype=np.int64)
    _core_sgd_step(params, grad, buf, float(lr), float(momentum), float(weight_decay),
                   bool(nesterov), frozen, resolve_threads(n_threads, params.size))
