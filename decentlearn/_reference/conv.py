"""NumPy references (the spec) of Conv2d's im2col / col2im kernels in csrc/conv.c and of its
forward product without im2col (csrc/nn_impl.h), with the signatures of decentlearn.ops.conv_*.

Images are "wide rows" (see decentlearn.nn.Conv2d): xp (..., C, B, L), each (c, b) row a padded
Hp x Wp image flattened with k - 1 trailing zeros; the im2col row (c, i, j) of sample b is the run
of ``run`` elements of image (c, b) starting at i * wp + j. A missing leading axis means one
group (the input shared by all peers). Both are pure copies / float32 additions done in the
kernel's order, so the C kernels must match them bit for bit.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided


def conv_unfold(xp, b0, b1, cols, k, wp, run, n_threads=None) -> np.ndarray:
    """Writes rows [0, C*k*k) of ``cols`` (..., R, ld) for samples [b0, b1) of ``xp``; returns the
    ``cols[..., :(b1 - b0) * run]`` view."""
    *lead, c, _, _ = xp.shape
    nb = b1 - b0
    *ls, sc, sb, it = xp.strides
    shifted = as_strided(xp[..., b0:b1, :], (*lead, c, k, k, nb, run),
                         (*ls, sc, wp * it, it, sb, it), writeable=False)
    view = cols[..., : nb * run]
    np.copyto(np.reshape(view[..., : c * k * k, :], shifted.shape), shifted)
    return view


def conv_fold(dcols, dxp, b0, b1, k, wp, run, n_threads=None) -> np.ndarray:
    """Adds rows [0, C*k*k) of ``dcols`` (..., R, ld) into samples [b0, b1) of ``dxp``
    (..., C, B, L), kernel offset (i, j) after (i, j - 1); returns ``dxp``."""
    *lead, c, _, _ = dxp.shape
    nb = b1 - b0
    dc = np.reshape(dcols[..., : c * k * k, : nb * run], (*lead, c, k, k, nb, run))
    for i in range(k):
        for j in range(k):
            off = i * wp + j
            dxp[..., b0:b1, off : off + run] += dc[..., i, j, :, :]
    return dxp


def conv_forward(wb, xp, y, k, wp, run, n_threads=None) -> np.ndarray:
    """y (P, Cout, B*run) = wb (P, Cout, C*k*k + 1) @ [conv_unfold(xp, 0, B); ones] per peer, the
    unfolded columns of xp (P or 1, C, B, L) (no leading axis: shared) with a last row of ones;
    float64 products of the float32 values, rounded once to float32 (the C kernel's chains of
    float32 multiply-adds are within float32 rounding of it). Returns y."""
    x4 = xp if xp.ndim == 4 else xp[None]
    g, c, b, _ = x4.shape
    kk = c * k * k
    cols = np.ones((g, kk + 1, b * run), np.float64)
    conv_unfold(x4.astype(np.float64), 0, b, cols, k, wp, run)
    out = np.matmul(wb.astype(np.float64), cols).astype(np.float32)
    if y is None:
        return out
    y[...] = out
    return y


def conv_weight_grad(xp, dy, g, k, wp, run, chunk, n_threads=None) -> np.ndarray:
    """g (P, C*k*k + 1, Cout) = [conv_unfold(xp, 0, B); ones] @ dy^T per peer, dy (P, Cout, B*run),
    xp (P or 1, C, B, L) (no leading axis: shared): float64 products of the float32 values,
    rounded once to float32 (the C kernel's blocked float32 sums are within float32 rounding of
    it; ``chunk`` only sets their blocking). Returns g."""
    x4 = xp if xp.ndim == 4 else xp[None]
    gr, c, b, _ = x4.shape
    cols = np.ones((gr, c * k * k + 1, b * run), np.float64)
    conv_unfold(x4.astype(np.float64), 0, b, cols, k, wp, run)
    out = np.matmul(cols, dy.astype(np.float64).swapaxes(-1, -2)).astype(np.float32)
    if g is None:
        return out
    g[...] = out
    return g


def conv_forward_params(w, bias, xp, y, k, wp, run, n_threads=None) -> np.ndarray:
    """conv_forward with wb = [w | bias]."""
    wb = np.concatenate([w, np.asarray(bias)[..., None]], axis=-1).astype(np.float32)
    return conv_forward(wb, xp, y, k, wp, run)


def conv_param_grad(xp, dy, gw, gb, k, wp, run, chunk, n_threads=None) -> None:
    """conv_weight_grad's g in the layer's layout: gw (P, Cout, C*k*k) = g[:, :C*k*k]
    transposed, gb (P, Cout) = g[:, C*k*k]."""
    g = conv_weight_grad(xp, dy, None, k, wp, run, chunk)
    gw[...] = g[:, :-1].swapaxes(-1, -2)
    gb[...] = g[:, -1]


def conv_input_grad(w, dy, dxp, k, wp, run, n_threads=None) -> np.ndarray:
    """dxp (P, C, B, L) = conv_fold of w^T @ dy (P, C*k*k, B*run) into zeros, w (P, Cout, C*k*k),
    dy (P, Cout, B*run): float64 products of the float32 values and float64 adds, rounded once
    to float32 (the C kernel's float32 chains and adds are within float32 rounding of it).
    Returns dxp."""
    _, c, b, _ = dxp.shape
    dcols = np.matmul(w.astype(np.float64).swapaxes(-1, -2), dy.astype(np.float64))
    out = np.zeros(dxp.shape, np.float64)
    conv_fold(dcols, out, 0, b, k, wp, run)
    dxp[...] = out.astype(np.float32)
    return dxp


def conv_forward_s8(wq, sw, xq, sx, bias, y, k, wp, run, n_threads=None) -> np.ndarray:
    """y (P, Cout, B*run) = float32(wq @ cols) * float32(sw * sx), then + bias[:, :, None]: exact
    integer products of the int8 codes wq (P, Cout, C*k*k) and the im2col rows of xq ((P,) C, B,
    L), each sum converted to float32, multiplied by the float32 product of the peer's scales and
    the bias added (two float32 roundings). Returns y."""
    *lead, c, b, _ = xq.shape
    cols = conv_unfold(xq, 0, b, np.empty((*lead, c * k * k, b * run), np.int8), k, wp, run)
    acc = np.matmul(wq.astype(np.int64), cols.astype(np.int64))
    s = (np.asarray(sw, np.float32) * np.asarray(sx, np.float32))[:, None, None]
    y[...] = acc.astype(np.float32) * s
    y += bias[:, :, None]
    return y


def conv_weight_grad_s8(dq, sdy, xq, sx, gw, k, wp, run, chunk, n_threads=None) -> np.ndarray:
    """gw (P, Cout, C*k*k) = the sum in chunk order of, per chunk of ``chunk`` samples,
    float32(dq_chunk @ cols_chunk^T) * float32(sdy * sx): exact integer products of the int8
    codes dq (P, Cout, B*run) and the im2col rows of xq ((P,) C, B, L), converted to float32 and
    scaled once per chunk, the chunks' parts added in float32. Returns gw."""
    *lead, c, b, _ = xq.shape
    s = (np.asarray(sdy, np.float32) * np.asarray(sx, np.float32))[:, None, None]
    for b0 in range(0, b, chunk):
        b1 = min(b, b0 + chunk)
        cols = conv_unfold(xq, b0, b1, np.empty((*lead, c * k * k, (b1 - b0) * run), np.int8),
                           k, wp, run)
        acc = np.matmul(dq[..., b0 * run : b1 * run].astype(np.int64),
                        cols.astype(np.int64).swapaxes(-1, -2))
        part = acc.astype(np.float32) * s
        if b0:
            gw += part
        else:
            gw[...] = part
    return gw


def conv_input_grad_s8(wq, sw, dq, sdy, dxp, k, wp, run, n_threads=None) -> np.ndarray:
    """dxp (P, C, B, L) = conv_fold of the columns float32(wq^T @ dq) * float32(sw * sdy) into
    zeros: exact integer products of the int8 codes wq (P, Cout, C*k*k) and dq (P, Cout, B*run),
    each sum converted to float32 and multiplied by the float32 product of the peer's scales
    (rounded once), then the float32 adds of conv_fold. Returns dxp."""
    _, c, b, _ = dxp.shape
    acc = np.matmul(wq.astype(np.int64).swapaxes(-1, -2), dq.astype(np.int64))
    s = (np.asarray(sw, np.float32) * np.asarray(sdy, np.float32))[:, None, None]
    dcols = acc.astype(np.float32) * s
    dxp[...] = 0
    conv_fold(dcols, dxp, 0, b, k, wp, run)
    return dxp


def conv_pad(src, w, dst, pad, wp, n_threads=None) -> np.ndarray:
    """Row n of ``dst`` (N, L): zeros, with the first ``w`` columns of image n of ``src``
    (N, h, ld) placed row r at ``(pad + r) * wp + pad``; returns ``dst``."""
    n, h, _ = src.shape
    dst[...] = 0
    grid = np.reshape(dst[:, : (h + 2 * pad) * wp], (n, h + 2 * pad, wp))
    grid[:, pad : pad + h, pad : pad + w] = src[:, :, :w]
    return dst


def conv_crop(src, pad, wp, dst, n_threads=None) -> np.ndarray:
    """Image n of ``dst`` (N, h, w) = the interior of row n of ``src`` (N, L), row r at
    ``(pad + r) * wp + pad``; returns ``dst``."""
    n, h, w = dst.shape
    grid = np.reshape(src[:, : (h + 2 * pad) * wp], (n, h + 2 * pad, wp))
    dst[...] = grid[:, pad : pad + h, pad : pad + w]
    return dst
