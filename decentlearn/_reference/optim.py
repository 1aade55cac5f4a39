"""NumPy references (the spec) of the optimizer steps in csrc/optim.c, with the signatures of
decentlearn.ops.optim. They do the kernels' floating-point operations in their order, in the
parameters' dtype (float32 for the kernels: the same bits), and sum the layers' squares as the
kernels do: each layer cut into chunks of CHUNK columns, a chunk's squares (float64) summed in
LANES lanes (column c0 + j into lane j mod LANES, in column order), the lanes added in lane order,
the chunks in chunk order. decentlearn.optim runs these for float64 and for operands the kernels
do not take (not C-contiguous, or sharing memory).
"""

from __future__ import annotations

import numpy as np

CHUNK = 4096  # csrc/optim.c's DL_TRUST_CHUNK
LANES = 16  # the lanes of csrc/optim_impl.h's dl_optim_sumsq


def sgd_step(params, grad, buf, lr, momentum=0.0, weight_decay=0.0, nesterov=False, frozen=None,
             n_threads=None) -> None:
    f32 = np.float32
    lr, mu, wd = f32(lr), f32(momentum), f32(weight_decay)
    p0 = params.copy()
    g = grad.astype(f32, copy=True)
    if wd != 0:
        g = g + wd * params
    if mu != 0:
        m = mu * buf + g
        buf[...] = m
        u = g + mu * m if nesterov else m
    else:
        u = g
    params -= lr * u
    if frozen is not None:
        for r, cut in enumerate(np.asarray(frozen)):
            params[r, :cut] = p0[r, :cut]
            if mu != 0:
                buf[r, :cut] = 0


def _bias(beta, steps) -> np.ndarray:
    """1 - beta**t per peer, float64, as a (P, 1) column."""
    return (1.0 - np.power(float(beta), np.asarray(steps).astype(np.float64)))[:, None]


def _prefix(shape, frozen) -> np.ndarray | None:
    """(P, D) bool: the frozen prefixes (None when nothing is frozen)."""
    if frozen is None:
        return None
    return np.arange(shape[1])[None, :] < np.asarray(frozen, dtype=np.int64)[:, None]


def _sumsq(a: np.ndarray, bounds) -> np.ndarray:
    """(P, S) float64: each row's sum of squares over every layer, in the kernels' order."""
    P = a.shape[0]
    out = np.zeros((P, len(bounds) - 1))
    for s, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        for c0 in range(lo, hi, CHUNK):
            c1 = min(hi, c0 + CHUNK)
            sq = np.zeros((P, -(-(c1 - c0) // LANES) * LANES))
            sq[:, :c1 - c0] = a[:, c0:c1].astype(np.float64) ** 2
            # axis 1 of (P, n, LANES): each lane summed over n in order (not pairwise)
            lanes = np.add.reduce(sq.reshape(P, -1, LANES), axis=1)
            out[:, s] += np.cumsum(lanes, axis=1)[:, -1]  # lanes in order; chunks in order
    return out


def _scales(xs: np.ndarray, ys: np.ndarray, lr: float, ratio) -> np.ndarray:
    xn, yn = np.sqrt(xs), np.sqrt(ys)
    ok = (xn > 0) & (yn > 0)
    with np.errstate(all="ignore"):
        return lr * np.where(ok, ratio(xn, np.where(ok, yn, 1.0)), 1.0)


def adam_step(params, grad, exp_avg, exp_avg_sq, steps, lr, beta1, beta2, eps, weight_decay=0.0,
              decoupled=False, frozen=None, n_threads=None) -> None:
    dt = params.dtype.type
    m, v = exp_avg, exp_avg_sq
    g = grad
    if weight_decay != 0 and not decoupled:
        g = params * dt(weight_decay) + grad
    m *= dt(beta1)
    m += g * dt(1.0 - beta1)
    v *= dt(beta2)
    v += g * g * dt(1.0 - beta2)
    d = np.sqrt(v) / np.sqrt(_bias(beta2, steps)).astype(dt) + dt(eps)
    d = m / d * (float(lr) / _bias(beta1, steps)).astype(dt)
    if weight_decay != 0 and decoupled:
        d += params * dt(float(lr) * float(weight_decay))
    cut = _prefix(params.shape, frozen)
    if cut is not None:
        d[cut] = 0
        m[cut] = 0
        v[cut] = 0
    params -= d


def lamb_step(params, grad, exp_avg, exp_avg_sq, work, steps, lr, beta1, beta2, eps, weight_decay,
              bounds, frozen=None, n_threads=None) -> None:
    dt = params.dtype.type
    m, v = exp_avg, exp_avg_sq
    m *= dt(beta1)
    m += grad * dt(1.0 - beta1)
    v *= dt(beta2)
    v += grad * grad * dt(1.0 - beta2)
    u = np.sqrt(v / _bias(beta2, steps).astype(dt)) + dt(eps)
    u = m / u / _bias(beta1, steps).astype(dt)
    if weight_decay != 0:
        u += params * dt(weight_decay)
    cut = _prefix(params.shape, frozen)
    if cut is not None:
        u[cut] = 0
        m[cut] = 0
        v[cut] = 0
    work[...] = u
    bounds = [int(b) for b in bounds]
    scale = _scales(_sumsq(params, bounds), _sumsq(u, bounds), float(lr),
                    lambda wn, un: wn / un).astype(dt)
    for s, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        u[:, lo:hi] *= scale[:, s:s + 1]
    if cut is not None:
        u[cut] = 0
    params -= u


def lars_step(params, grad, buf, lr, momentum, weight_decay, trust_coefficient, eps, bounds,
              frozen=None, n_threads=None) -> None:
    dt = params.dtype.type
    bounds = [int(b) for b in bounds]
    wd = float(weight_decay)
    scale = _scales(_sumsq(params, bounds), _sumsq(grad, bounds), float(lr),
                    lambda wn, gn: trust_coefficient * wn / (gn + wd * wn + eps)).astype(dt)
    d = params * dt(wd) + grad
    for s, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        d[:, lo:hi] *= scale[:, s:s + 1]
    cut = _prefix(params.shape, frozen)
    if momentum != 0:
        buf *= dt(momentum)
        buf += d
        if cut is not None:
            buf[cut] = 0
        d = buf.copy()
    if cut is not None:
        d[cut] = 0
    params -= d
