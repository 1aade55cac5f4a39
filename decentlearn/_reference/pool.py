"""NumPy references (the spec) of MaxPool2d's kernels in csrc/pool.c, with the signatures of
decentlearn.ops.maxpool2_forward / maxpool2_backward.

2x2 windows, stride 2, over the first ``w`` columns of the rows of x (n, h, ld). Ties go to the
left column of a window, then to its top row; NaN propagates as in np.maximum. ``code`` holds, per
output, bit 0 "right column", bits 1 and 2 "lower row" in the left and the right column. The
backward pass is written as products and differences of the gradient with those bits, so the C
kernel, doing the same float operations, matches it bit for bit.
"""

from __future__ import annotations

import numpy as np


def maxpool2_forward(x, w, y=None, code=None, n_threads=None) -> np.ndarray:
    """y (n, h/2, w/2) = the maxima (a new array of x's dtype when None); code (n, h/2, w/2) uint8
    when given. Returns y."""
    n, h, _ = x.shape
    if y is None:
        y = np.empty((n, h // 2, w // 2), x.dtype)
    v = np.reshape(x[..., :w], (n, h // 2, 2, w // 2, 2))
    top, bottom = v[:, :, 0], v[:, :, 1]  # (n, h/2, w/2, 2) each
    colmax = np.maximum(top, bottom)
    np.maximum(colmax[..., 0], colmax[..., 1], out=y)
    if code is not None:
        lower = bottom > top
        right = colmax[..., 1] > colmax[..., 0]
        code[...] = right | (lower[..., 0].astype(np.uint8) << 1) | (
            lower[..., 1].astype(np.uint8) << 2)
    return y


def maxpool2_backward(dy, code, dx=None, n_threads=None) -> np.ndarray:
    """dx (n, 2 h2, 2 w2) from dy and code (n, h2, w2) (a new array of dy's dtype when None).
    Returns dx."""
    n, h2, w2 = dy.shape
    if dx is None:
        dx = np.empty((n, 2 * h2, 2 * w2), dy.dtype)
    right = (code & 1).astype(bool)
    lower = np.stack([(code >> 1) & 1, (code >> 2) & 1], axis=-1).astype(bool)
    dcol = np.empty((n, h2, w2, 2), dy.dtype)
    np.multiply(dy, right, out=dcol[..., 1])
    np.subtract(dy, dcol[..., 1], out=dcol[..., 0])  # exact: dy - dy or dy - 0
    d = np.reshape(dx, (n, h2, 2, w2, 2))
    np.multiply(dcol, lower, out=d[:, :, 1])
    np.subtract(dcol, d[:, :, 1], out=d[:, :, 0])
    return dx
