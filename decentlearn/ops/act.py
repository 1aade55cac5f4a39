"""ReLU's forward (in place) and backward passes (csrc/act.c).

NumPy twin: decentlearn/_reference/act.py.
"""

from __future__ import annotations

import numpy as np

from decentlearn._core import (
    relu_backward as _core_relu_backward,
    relu_forward as _core_relu_forward,
)
from decentlearn.ops.threads import resolve_threads

__all__ = ["relu_backward", "relu_forward"]


def relu_backward(dy: np.ndarray, y: np.ndarray, out: np.ndarray | None = None,
                  n_threads: int | None = None) -> np.ndarray:
    """``dy * (y > 0)`` for float32 ``dy`` and the ReLU's output ``y`` (C-contiguous, one size),
    into ``out`` (new when None; it must not overlap dy or y): the bits of np.multiply(dy, y > 0),
    elements split over threads. Returns out."""
    if out is None:
        out = np.empty_like(dy)
    return _core_relu_backward(dy, y, out, resolve_threads(n_threads, dy.size))


def relu_forward(x: np.ndarray, n_threads: int | None = None) -> np.ndarray:
    """``np.maximum(x, 0, out=x)`` on the run's threads, for a C-contiguous float32 ``x``: x where
    x > 0 or NaN, else +0.0 (the bits NumPy gives). Returns x."""
    return _core_relu_forward(x, resolve_threads(n_threads, x.size))
