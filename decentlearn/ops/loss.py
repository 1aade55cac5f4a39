"""The softmax cross-entropy of the models' logits (csrc/loss.c).

NumPy twin: decentlearn/_reference/loss.py.
"""

from __future__ import annotations

import numpy as np

from decentlearn._core import exp_f32 as _core_exp_f32, softmax_xent as _core_softmax_xent
from decentlearn.ops.threads import resolve_threads

__all__ = ["exp_f32", "softmax_xent"]


def softmax_xent(logits: np.ndarray, labels: np.ndarray, loss: np.ndarray | None = None,
                 want_grad: bool = True, n_threads: int | None = None,
                 correct: np.ndarray | None = None) -> np.ndarray:
    """Mean softmax cross-entropy of each peer's batch: ``logits`` (P, B, C) float32, C-contiguous,
    is overwritten with the gradient of ``loss[p]`` with respect to it (``want_grad``; else with
    the softmax numerators exp(z - max z)); ``labels`` (P, B) int64 class indices in [0, C);
    ``loss`` (P,) float64 (new when None). Returns loss. Peers are split between threads; the
    results do not depend on the count. The arithmetic (a max-shifted log-sum-exp, exp as
    :func:`exp_f32`) is spelled out in csrc/loss.c and in the reference. ``correct`` ((P,) int64,
    or None): per peer, how many rows' ``np.argmax`` (the first maximum, or the first NaN) is
    the label, counted before the logits are overwritten (an evaluation's accuracy)."""
    if not isinstance(logits, np.ndarray) or logits.ndim != 3:
        raise ValueError(f"softmax_xent: logits must be a 3-D numpy array (P, B, C), got "
                         f"{getattr(logits, 'shape', type(logits).__name__)}")
    labels = np.asarray(labels)
    if labels.ndim == 2 and labels.shape[0] > 1 and labels.strides[0] == 0:
        labels = labels[:1]  # one row broadcast to every peer: passed once
    labels = np.ascontiguousarray(labels, dtype=np.int64)
    if loss is None:
        loss = np.empty(logits.shape[0], np.float64)
    return _core_softmax_xent(logits, labels, loss, correct, bool(want_grad),
                              resolve_threads(n_threads, logits.size * 16))


def exp_f32(x: np.ndarray, out: np.ndarray | None = None,
            n_threads: int | None = None) -> np.ndarray:
    """exp of float32 ``x`` rounded to float32, the exp of :func:`softmax_xent`: computed in
    float64 (within one ulp of the exact value, nearly always the correctly rounded one), portable
    C without FMA contraction or a per-ISA build. Returns ``out`` (new when None)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if out is None:
        out = np.empty_like(x)
    return _core_exp_f32(x, out, resolve_threads(n_threads, x.size * 16))
