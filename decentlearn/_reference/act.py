"""NumPy references (the spec) of ReLU's kernels in csrc/act.c, with the signatures of
decentlearn.ops.relu_backward (dy times the boolean y > 0, cast to 1.0 or 0.0) and relu_forward
(np.maximum(x, 0) in place: NaN stays, -0.0 becomes +0.0)."""

from __future__ import annotations

import numpy as np


def relu_backward(dy, y, out=None, n_threads=None) -> np.ndarray:
    """dy * (y > 0), into out when given. Returns out."""
    with np.errstate(invalid="ignore"):
        return np.multiply(dy, np.asarray(y) > 0, out=out)


def relu_forward(x, n_threads=None) -> np.ndarray:
    """max(x, 0) in place (x where x > 0 or NaN, else +0.0). Returns x."""
    np.copyto(x, np.float32(0), where=~((x > 0) | np.isnan(x)))
    return x
