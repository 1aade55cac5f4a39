"""The optimizers' steps over the whole (P, dim) float32 parameter matrix (csrc/optim.c): SGD and
Adam/AdamW in one pass, LAMB and LARS with their per-peer, per-layer trust ratios in two.

NumPy twins: decentlearn/_reference/optim.py (the same float32 operations in the same order, the
layers' sums of squares in the kernels' fixed order: the same bits).
"""

from __future__ import annotations

import numpy as np

from decentlearn._core import adam_step as _core_adam_step
from decentlearn._core import lamb_step as _core_lamb_step
from decentlearn._core import lars_step as _core_lars_step
from decentlearn._core import sgd_step as _core_sgd_step
from decentlearn.ops.threads import resolve_threads

__all__ = ["adam_step", "lamb_step", "lars_step", "sgd_step"]


def sgd_step(params: np.ndarray, grad: np.ndarray, buf: np.ndarray | None, lr: float,
             momentum: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
             frozen: np.ndarray | None = None, n_threads: int | None = None) -> None:
    """One SGD step in place over the (P, dim) float32 ``params`` (and momentum ``buf``), in one
    pass: ``g = grad + wd p; buf = mu buf + g; g = g + mu buf`` (Nesterov) or ``g = buf``;
    ``p -= lr g``. ``frozen`` (P,) int64: row r keeps its first frozen[r] entries (buf zeroed)."""
    _core_sgd_step(params, grad, buf, float(lr), float(momentum), float(weight_decay),
                   bool(nesterov), _frozen(frozen), resolve_threads(n_threads, params.size))


def _bias(beta: float, steps: np.ndarray) -> np.ndarray:
    """``1 - beta**t`` per peer in float64 (t: the (P,) step counts, after this step's)."""
    return 1.0 - np.power(float(beta), np.asarray(steps).astype(np.float64))


def _check_steps(steps, params) -> np.ndarray:
    """The (P,) step counts, integers >= 1 (a count of 0 would divide by 1 - beta**0 = 0)."""
    steps = np.asarray(steps)
    n = params.shape[0] if isinstance(params, np.ndarray) and params.ndim == 2 else None
    if steps.dtype.kind not in "iu" or steps.ndim != 1 or (n is not None and steps.size != n):
        raise ValueError(f"steps must be a ({n},) integer array of per-peer step counts, got "
                         f"{steps.dtype} of shape {steps.shape}")
    if steps.size and steps.min() < 1:
        raise ValueError(f"steps must be >= 1 (counts including this step), got {steps.min()}")
    return steps


def adam_step(params: np.ndarray, grad: np.ndarray, exp_avg: np.ndarray, exp_avg_sq: np.ndarray,
              steps: np.ndarray, lr: float, beta1: float, beta2: float, eps: float,
              weight_decay: float = 0.0, decoupled: bool = False,
              frozen: np.ndarray | None = None, n_threads: int | None = None) -> None:
    """One Adam step (``decoupled``: AdamW) in place over the (P, dim) float32 ``params`` and the
    moments, in one pass, as torch.optim.Adam/AdamW: ``g = grad + wd p`` (Adam);
    ``m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2``;
    ``p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)`` ``+ lr wd p`` (AdamW), with
    t = ``steps`` (P,), each peer's count including this step. ``frozen`` as in sgd_step (the
    moments zeroed there)."""
    steps = _check_steps(steps, params)
    rowc = np.empty((params.shape[0], 2))
    rowc[:, 0] = float(lr) / _bias(beta1, steps)
    rowc[:, 1] = np.sqrt(_bias(beta2, steps))
    wd = float(weight_decay)
    coef = np.array([beta1, 1.0 - beta1, beta2, 1.0 - beta2, eps,
                     0.0 if decoupled else wd, float(lr) * wd if decoupled else 0.0], np.float64)
    _core_adam_step(params, grad, exp_avg, exp_avg_sq, rowc, coef, _frozen(frozen),
                    resolve_threads(n_threads, params.size))


def lamb_step(params: np.ndarray, grad: np.ndarray, exp_avg: np.ndarray, exp_avg_sq: np.ndarray,
              work: np.ndarray, steps: np.ndarray, lr: float, beta1: float, beta2: float,
              eps: float, weight_decay: float, bounds: np.ndarray,
              frozen: np.ndarray | None = None, n_threads: int | None = None) -> None:
    """One LAMB step in place (You et al. 2019, Algorithm 2): the moments as Adam's;
    ``u = m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd p`` (into ``work``, zero in frozen
    prefixes); per peer and layer l = [bounds[l], bounds[l + 1]),
    ``p_l -= lr ||p_l|| / ||u_l|| u_l`` (ratio 1 where a norm is 0)."""
    steps = _check_steps(steps, params)
    rowc = np.empty((params.shape[0], 2))
    rowc[:, 0] = _bias(beta1, steps)
    rowc[:, 1] = _bias(beta2, steps)
    coef = np.array([beta1, 1.0 - beta1, beta2, 1.0 - beta2, eps, weight_decay, lr], np.float64)
    _core_lamb_step(params, grad, exp_avg, exp_avg_sq, work, rowc, coef,
                    np.ascontiguousarray(bounds, dtype=np.int64), _frozen(frozen),
                    resolve_threads(n_threads, params.size))


def lars_step(params: np.ndarray, grad: np.ndarray, buf: np.ndarray | None, lr: float,
              momentum: float, weight_decay: float, trust_coefficient: float, eps: float,
              bounds: np.ndarray, frozen: np.ndarray | None = None,
              n_threads: int | None = None) -> None:
    """One LARS step in place (You, Gitman & Ginsburg 2017): per peer and layer l,
    ``trust = eta ||p_l|| / (||g_l|| + wd ||p_l|| + eps)`` (1 where a norm is 0);
    ``buf = mu buf + lr trust (g + wd p)`` (``buf`` may be None when mu is 0); ``p -= buf``."""
    coef = np.array([lr, momentum, weight_decay, trust_coefficient, eps], np.float64)
    _core_lars_step(params, grad, buf, coef, np.ascontiguousarray(bounds, dtype=np.int64),
                    _frozen(frozen), resolve_threads(n_threads, params.size))


def _frozen(frozen):
    return None if frozen is None else np.ascontiguousarray(frozen, dtype=np.int64)
