"""GroupNorm's forward and backward passes (csrc/norm.c).

NumPy twin: decentlearn/_reference/norm.py.
"""

from __future__ import annotations

import numpy as np

from decentlearn._core import (
    groupnorm_backward as _core_groupnorm_backward,
    groupnorm_forward as _core_groupnorm_forward,
)
from decentlearn.ops.args import check_int
from decentlearn.ops.threads import resolve_threads

__all__ = ["groupnorm_forward", "groupnorm_backward"]


def groupnorm_forward(x: np.ndarray, w: int, gamma: np.ndarray, beta: np.ndarray, groups: int,
                      eps: float, xc: np.ndarray, rstd: np.ndarray, y: np.ndarray,
                      n_threads: int | None = None) -> np.ndarray:
    """GroupNorm of P*C*B images: ``x`` (N, H, ld) float32, C-contiguous, of which the first ``w``
    columns are the image (Conv2d's wide rows are read in place), peer-major then channel then
    sample; ``gamma`` and ``beta`` (P, C); ``groups`` divides C. Writes ``xc`` (N, H*w) = x minus
    its group mean, ``rstd`` (P, groups, B) = 1 / sqrt(group variance + eps) and ``y`` (N, H*w) =
    xc * (gamma * rstd) + beta; returns y. The sums are float64 in a fixed order (csrc/norm.c),
    (peer, group, sample) triples split over threads: the same bits at any thread count."""
    w, groups = check_int("w", w, 0, 1 << 62), check_int("groups", groups, 1, 1 << 62)
    return _core_groupnorm_forward(x, w, gamma, beta, groups, float(eps), xc, rstd, y,
                                   resolve_threads(n_threads, xc.size * 4))


def groupnorm_backward(dy: np.ndarray, w: int, xc: np.ndarray, rstd: np.ndarray,
                       gamma: np.ndarray, g_gamma: np.ndarray, g_beta: np.ndarray,
                       dx: np.ndarray | None = None, n_threads: int | None = None) -> None:
    """The gradients of :func:`groupnorm_forward` from its ``xc`` and ``rstd``: ``dy`` (N, H, ld)
    as x; writes ``g_gamma`` and ``g_beta`` (P, C) and, when given, ``dx`` (N, H*w)."""
    w = check_int("w", w, 0, 1 << 62)
    _core_groupnorm_backward(dy, w, xc, rstd, gamma, g_gamma, g_beta, dx,
                             resolve_threads(n_threads, xc.size * 4))
