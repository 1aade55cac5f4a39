"""NumPy reference (the spec) of ReLU's backward kernel in csrc/act.c, with the signature of
decentlearn.ops.relu_backward: dy times the boolean y > 0 (cast to 1.0 or 0.0)."""

from __future__ import annotations

import numpy as np


def relu_backward(dy, y, out=None, n_threads=None) -> np.ndarray:
    """dy * (y > 0), into out when given. Returns out."""
    with np.errstate(invalid="ignore"):
        return np.multiply(dy, np.asarray(y) > 0, out=out)
