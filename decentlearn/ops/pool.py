"""2x2 max pooling of MaxPool2d (csrc/pool.c).

NumPy twin: decentlearn/_reference/pool.py.
"""

from __future__ import annotations

import numpy as np

from decentlearn._core import (
    maxpool2_backward as _core_maxpool2_backward,
    maxpool2_forward as _core_maxpool2_forward,
)
from decentlearn.ops.args import check_int
from decentlearn.ops.threads import resolve_threads

__all__ = ["maxpool2_forward", "maxpool2_backward"]


def maxpool2_forward(x: np.ndarray, w: int, y: np.ndarray | None = None,
                     code: np.ndarray | None = None, n_threads: int | None = None) -> np.ndarray:
    """2x2 max pooling, stride 2, of the first ``w`` (even) columns of the rows of the C-contiguous
    float32 ``x`` (n, h, ld) (h even): ``y`` (n, h/2, w/2) gets the maxima (NaN propagates, as in
    np.maximum) and ``code`` (n, h/2, w/2) uint8, when given, which element won (bit 0 the right
    column, bits 1 and 2 the lower row in the left and right column; ties go left, then up), for
    :func:`maxpool2_backward`. Returns y. NumPy reference: decentlearn._reference.pool."""
    if not isinstance(x, np.ndarray) or x.ndim != 3:
        raise ValueError(f"maxpool2_forward: x must be a 3-D numpy array (n, h, ld), got "
                         f"{getattr(x, 'shape', type(x).__name__)}")
    w = check_int("w", w, 0, x.shape[2])
    if y is None:
        y = np.empty((x.shape[0], x.shape[1] // 2, w // 2), np.float32)
    _core_maxpool2_forward(x, w, y, code, resolve_threads(n_threads, x.shape[0] * x.shape[1] * w))
    return y


def maxpool2_backward(dy: np.ndarray, code: np.ndarray, dx: np.ndarray | None = None,
                      n_threads: int | None = None) -> np.ndarray:
    """The gradient of :func:`maxpool2_forward`: ``dx`` (n, 2 h2, 2 w2) float32 from ``dy`` (n,
    h2, w2) float32 and the forward pass's ``code``; each window's gradient goes to the element
    that won, the other three get ``dy - dy`` or ``0 * dy`` (zero for finite dy). Returns dx."""
    if not isinstance(dy, np.ndarray) or dy.ndim != 3:
        raise ValueError(f"maxpool2_backward: dy must be a 3-D numpy array (n, h2, w2), got "
                         f"{getattr(dy, 'shape', type(dy).__name__)}")
    if dx is None:
        dx = np.empty((dy.shape[0], 2 * dy.shape[1], 2 * dy.shape[2]), np.float32)
    _core_maxpool2_backward(dy, code, dx, resolve_threads(n_threads, 4 * dy.size))
    return dx
