"""NumPy references (the spec) of GroupNorm's kernels in csrc/norm.c, with the signatures of
decentlearn.ops.groupnorm_forward / groupnorm_backward.

Every sum over the pixels of one (channel, sample) image is a float64 "run sum": eight
accumulators, the element in column j added to accumulator j % 8, rows in order, then the
accumulators added in order; sums over channels and samples are float64 in order, starting
from 0. Each float32 rounding is written out where the kernel rounds, so the two agree bit for bit.
"""

from __future__ import annotations

import numpy as np


def _runs(a: np.ndarray) -> np.ndarray:
    """Run sums of images a (N, H, W) float64: (N,)."""
    n, h, w = a.shape
    w8 = -(-w // 8) * 8
    pad = np.zeros((n, h, w8))
    pad[:, :, :w] = a
    blocks = pad.reshape(n, h * (w8 // 8), 8)
    acc = np.zeros((n, 8))
    for k in range(blocks.shape[1]):
        acc += blocks[:, k, :]
    s = acc[:, 0].copy()
    for lane in range(1, 8):
        s += acc[:, lane]
    return s


def _in_order(a: np.ndarray, axis: int) -> np.ndarray:
    """float64 sum of a along axis, element after element from 0."""
    a = np.moveaxis(a, axis, 0)
    s = np.zeros(a.shape[1:])
    for part in a:
        s = s + part
    return s


def groupnorm_forward(x, w, gamma, beta, groups, eps, xc, rstd, y, n_threads=None) -> np.ndarray:
    """xc, rstd and y of GroupNorm (see the module docstring); returns y."""
    p, c = gamma.shape
    n_img, h, _ = x.shape
    b = n_img // (p * c) if p else 0
    cg = c // groups
    n = float(cg * h * w)
    img = x[:, :, :w].astype(np.float32)
    sums = _runs(img.astype(np.float64)).reshape(p, groups, cg, b)
    mean = (_in_order(sums, 2) / n).astype(np.float32)  # (P, G, B)
    x6 = img.reshape(p, groups, cg, b, h, w)
    c6 = x6 - mean[:, :, None, :, None, None]  # float32
    sq = _runs((c6.astype(np.float64) ** 2).reshape(-1, h, w)).reshape(p, groups, cg, b)
    r = (1.0 / np.sqrt(_in_order(sq, 2) / n + float(np.float32(eps)))).astype(np.float32)
    scale = gamma.reshape(p, groups, cg, 1).astype(np.float32) * r[:, :, None, :]  # float32
    t = c6 * scale[..., None, None]
    out = t + beta.reshape(p, groups, cg, 1, 1, 1).astype(np.float32)
    xc[...] = c6.reshape(xc.shape)
    rstd[...] = r
    y[...] = out.reshape(y.shape)
    return y


def groupnorm_backward(dy, w, xc, rstd, gamma, g_gamma, g_beta, dx=None, n_threads=None) -> None:
    """g_gamma, g_beta and dx of GroupNorm from the forward's xc and rstd."""
    p, c = gamma.shape
    n_img, h, _ = dy.shape
    b = n_img // (p * c) if p else 0
    groups = rstd.shape[1]
    cg = c // groups
    n = float(cg * h * w)
    d = dy[:, :, :w].astype(np.float32)
    xc3 = xc.reshape(n_img, h, w)
    s_dy = _runs(d.astype(np.float64)).reshape(p, c, b)
    s_dyx = _runs(d.astype(np.float64) * xc3.astype(np.float64)).reshape(p, c, b)
    r64 = np.repeat(rstd.astype(np.float64), cg, axis=1)  # (P, C, B)
    g_beta[...] = _in_order(s_dy, 2).astype(np.float32)
    g_gamma[...] = _in_order(s_dyx * r64, 2).astype(np.float32)
    if dx is None:
        return
    g64 = gamma.astype(np.float64).reshape(p, groups, cg, 1)
    rs = rstd.astype(np.float64)  # (P, G, B)
    a1 = _in_order(s_dy.reshape(p, groups, cg, b) * g64, 2)
    a2 = _in_order(s_dyx.reshape(p, groups, cg, b) * g64, 2)
    m1 = (a1 / n * rs).astype(np.float32)
    m2 = (a2 / n * rs * rs * rs).astype(np.float32)
    a = gamma.reshape(p, groups, cg, 1).astype(np.float32) * rstd[:, :, None, :]  # float32
    d6 = d.reshape(p, groups, cg, b, h, w)
    x6 = xc3.reshape(p, groups, cg, b, h, w)
    t1 = d6 * a[..., None, None]
    t2 = x6 * m2[:, :, None, :, None, None]
    dx[...] = ((t1 - t2) - m1[:, :, None, :, None, None]).reshape(dx.shape)
