"""im2col / col2im of Conv2d on wide rows, and the padding that makes them (csrc/conv.c).

NumPy twin: decentlearn/_reference/conv.py.
"""

from __future__ import annotations

import numpy as np

from decentlearn._core import (
    conv_fold as _core_conv_fold,
    conv_forward as _core_conv_forward,
    conv_forward_params as _core_conv_forward_params,
    conv_weight_grad as _core_conv_weight_grad,
    conv_input_grad as _core_conv_input_grad,
    conv_param_grad as _core_conv_param_grad,
    conv_input_grad_s8 as _core_conv_input_grad_s8,
    conv_forward_s8 as _core_conv_forward_s8,
    conv_weight_grad_s8 as _core_conv_weight_grad_s8,
    conv_crop as _core_conv_crop,
    conv_pad as _core_conv_pad,
    conv_unfold as _core_conv_unfold,
)
from decentlearn.ops.args import check_int
from decentlearn.ops.threads import resolve_threads

__all__ = ["conv_unfold", "conv_fold", "conv_forward", "conv_forward_params", "conv_weight_grad",
           "conv_param_grad",
           "conv_input_grad",
           "conv_forward_s8", "conv_weight_grad_s8", "conv_input_grad_s8", "conv_pad",
           "conv_crop"]


def _conv_groups(name: str, a: object, ndim: int, dtypes: tuple) -> np.ndarray:
    """``a`` with a leading group axis (added when it has ndim - 1 axes: one shared group)."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(a).__name__}")
    if a.dtype not in dtypes:
        raise TypeError(f"{name} must have dtype {' or '.join(str(np.dtype(d)) for d in dtypes)}, "
                        f"got {a.dtype}")
    if a.ndim == ndim - 1:
        return a[None]
    if a.ndim != ndim:
        raise ValueError(f"{name} must be {ndim - 1}- or {ndim}-dimensional, got shape {a.shape}")
    return a


_BIG = 1 << 62


def _conv_geometry(k, wp, run) -> tuple[int, int, int]:
    """The kernel size, padded row width and output run, checked as Python ints."""
    return (check_int("k", k, 1, _BIG), check_int("wp", wp, 1, _BIG),
            check_int("run", run, 0, _BIG))


def _conv_ints(b0, b1, k, wp, run) -> tuple[int, ...]:
    return (check_int("b0", b0, 0, _BIG), check_int("b1", b1, 0, _BIG),
            *_conv_geometry(k, wp, run))


def _f32_3d(fn: str, name: str, a: object) -> None:
    """TypeError unless ``a`` is a 3-D float32 numpy array (its shape the glue checks)."""
    if not isinstance(a, np.ndarray) or a.dtype != np.float32 or a.ndim != 3:
        raise TypeError(f"{fn}: {name} must be a 3-D float32 numpy array, got "
                        f"{getattr(a, 'dtype', type(a).__name__)} {getattr(a, 'shape', '')}")


def conv_unfold(xp: np.ndarray, b0: int, b1: int, cols: np.ndarray, k: int, wp: int, run: int,
                n_threads: int | None = None) -> np.ndarray:
    """im2col on wide rows: row ``(c, i, j)`` of ``cols`` (G, R, ld) gets, for each sample b in
    [b0, b1), the ``run`` elements of image (c, b) of ``xp`` (G, C, B, L) starting at ``i * wp +
    j`` (columns ``(b - b0) * run`` on). G may be absent from both (one shared input). float32 or
    int8, both C-contiguous. Returns the ``cols[..., :(b1 - b0) * run]`` view; rows past C*k*k
    are left alone."""
    x4 = _conv_groups("xp", xp, 4, (np.float32, np.int8))
    c3 = _conv_groups("cols", cols, 3, (x4.dtype,))
    b0, b1, k, wp, run = _conv_ints(b0, b1, k, wp, run)
    nb = b1 - b0
    work = x4.shape[0] * x4.shape[1] * max(nb, 0) * k * k * run
    _core_conv_unfold(x4, b0, b1, c3, k, wp, run, resolve_threads(n_threads, work))
    return cols[..., : nb * run]


def conv_fold(dcols: np.ndarray, dxp: np.ndarray, b0: int, b1: int, k: int, wp: int, run: int,
              n_threads: int | None = None) -> np.ndarray:
    """col2im on wide rows, the adjoint of :func:`conv_unfold`: adds row ``(c, i, j)`` of the
    float32 ``dcols`` (G, R, ld) into image (c, b) of ``dxp`` (G, C, B, L) at ``i * wp + j``, for b
    in [b0, b1), kernel offsets in order (i, j) — the same order for every element whatever the
    thread count. Returns ``dxp``."""
    d3 = _conv_groups("dcols", dcols, 3, (np.float32,))
    x4 = _conv_groups("dxp", dxp, 4, (np.float32,))
    b0, b1, k, wp, run = _conv_ints(b0, b1, k, wp, run)
    nb = b1 - b0
    work = x4.shape[0] * x4.shape[1] * max(nb, 0) * k * k * run
    _core_conv_fold(d3, x4, b0, b1, k, wp, run, resolve_threads(n_threads, work))
    return dxp


def conv_forward(wb: np.ndarray, xp: np.ndarray, y: np.ndarray | None, k: int, wp: int, run: int,
                 n_threads: int | None = None) -> np.ndarray:
    """Conv2d's forward product without im2col: for each peer p and sample b,
    ``y[p, :, b*run:(b+1)*run] = wb[p] @ [conv_unfold(xp[p], b, b+1); ones(run)]`` with ``wb``
    (P, Cout, C*k*k + 1) float32 ([weight | bias]) and ``xp`` (P or 1, C, B, L) the padded images
    on wide rows (a leading axis of 1, or none, for one input shared by every peer), both
    C-contiguous. The im2col rows are read in place from the images (no unfolded copy); every
    output is the same chain of multiply-adds as :func:`nn_gemm` on conv_unfold's columns with a
    row of ones, so the two agree bit for bit. ``y`` (P, Cout, B*run), new when None. Returns y."""
    x4 = _conv_groups("xp", xp, 4, (np.float32,))
    _f32_3d("conv_forward", "wb", wb)
    k, wp, run = _conv_geometry(k, wp, run)
    if y is None:
        y = np.empty((wb.shape[0], wb.shape[1], x4.shape[2] * run), np.float32)
    work = wb.shape[0] * wb.shape[1] * wb.shape[2] * x4.shape[2] * run
    _core_conv_forward(wb, x4, y, k, wp, run, resolve_threads(n_threads, work))
    return y


def conv_forward_params(w: np.ndarray, bias: np.ndarray, xp: np.ndarray, y: np.ndarray | None,
                        k: int, wp: int, run: int, n_threads: int | None = None) -> np.ndarray:
    """:func:`conv_forward` with ``wb = [w | bias]`` formed inside the kernel (per thread, per
    peer), the same bits: ``w`` (P, Cout, C*k*k) and ``bias`` (P, Cout) float32 may be strided
    views (a contiguous last axis; any peer and row strides), such as a Conv2d's weight and bias
    columns of the (P, dim) parameter matrix, which are then read in place. ``xp`` and ``y`` as in
    :func:`conv_forward`. Returns y."""
    x4 = _conv_groups("xp", xp, 4, (np.float32,))
    _f32_3d("conv_forward_params", "w", w)
    k, wp, run = _conv_geometry(k, wp, run)
    if y is None:
        y = np.empty((w.shape[0], w.shape[1], x4.shape[2] * run), np.float32)
    work = w.shape[0] * w.shape[1] * (w.shape[2] + 1) * x4.shape[2] * run
    return _core_conv_forward_params(w, bias, x4, y, k, wp, run, resolve_threads(n_threads, work))


def conv_weight_grad(xp: np.ndarray, dy: np.ndarray, g: np.ndarray | None, k: int, wp: int,
                     run: int, chunk: int, n_threads: int | None = None) -> np.ndarray:
    """Conv2d's [weight | bias] gradient without im2col: ``g[p]`` (C*k*k + 1, Cout) = the sum over
    chunks [b0, b1) of ``chunk`` samples of ``[conv_unfold(xp[p], b0, b1); ones] @ dy[p][:,
    b0*run:b1*run].T``, the first chunk written and the later ones added, each in blocks of 256
    columns: the same operations in the same order as :func:`nn_gemm` on conv_unfold's columns
    (accumulating from the second chunk), so the same bits. ``xp`` (P or 1, C, B, L) as in
    :func:`conv_forward`; ``dy`` (P, Cout, B*run) the output gradient on wide rows; all float32,
    C-contiguous. ``g`` (P, C*k*k + 1, Cout), new when None. Returns g."""
    x4 = _conv_groups("xp", xp, 4, (np.float32,))
    _f32_3d("conv_weight_grad", "dy", dy)
    k, wp, run = _conv_geometry(k, wp, run)
    chunk = check_int("chunk", chunk, 1, _BIG)
    if g is None:
        g = np.empty((dy.shape[0], x4.shape[1] * k * k + 1, dy.shape[1]), np.float32)
    work = g.size * x4.shape[2] * run
    _core_conv_weight_grad(x4, dy, g, k, wp, run, chunk, resolve_threads(n_threads, work))
    return g


def conv_param_grad(xp: np.ndarray, dy: np.ndarray, gw: np.ndarray, gb: np.ndarray, k: int,
                    wp: int, run: int, chunk: int, n_threads: int | None = None) -> None:
    """:func:`conv_weight_grad`'s sums written in the layer's own layout instead of ``g``: ``gw``
    (P, Cout, C*k*k) gets the first C*k*k rows of each ``g[p]`` transposed and ``gb`` (P, Cout) its
    last row, the same bits. ``gw`` and ``gb`` may be strided views (a contiguous last axis; any
    peer and row strides), such as a Conv2d's weight and bias columns of the (P, dim) gradient
    matrix, so no transposing copy follows; they must not overlap each other, ``xp`` or ``dy``.
    ``xp`` and ``dy`` as in :func:`conv_weight_grad`."""
    x4 = _conv_groups("xp", xp, 4, (np.float32,))
    _f32_3d("conv_param_grad", "dy", dy)
    k, wp, run = _conv_geometry(k, wp, run)
    chunk = check_int("chunk", chunk, 1, _BIG)
    work = dy.shape[0] * dy.shape[1] * (x4.shape[1] * k * k + 1) * x4.shape[2] * run
    _core_conv_param_grad(x4, dy, gw, gb, k, wp, run, chunk, resolve_threads(n_threads, work))


def conv_input_grad(w: np.ndarray, dy: np.ndarray, dxp: np.ndarray, k: int, wp: int, run: int,
                    n_threads: int | None = None) -> np.ndarray:
    """Conv2d's input gradient on the padded images without a column gradient: ``dxp`` (P, C,
    B, L) gets, for every sample, ``conv_fold`` of ``w[p].T @ dy[p]`` (the column gradient,
    never written) into zeros: the same chains of multiply-adds over the output channels and the
    same adds in kernel-offset order, so the same bits. ``w`` (P, Cout, C*k*k) the weights (a
    contiguous last axis; its peer and row strides are free, so a view into the parameter matrix
    is read in place), ``dy`` (P, Cout, B*run) the output gradient on wide rows, C-contiguous;
    all float32; every element of dxp is written. Returns dxp."""
    _f32_3d("conv_input_grad", "w", w)
    _f32_3d("conv_input_grad", "dy", dy)
    x4 = _conv_groups("dxp", dxp, 4, (np.float32,))
    k, wp, run = _conv_geometry(k, wp, run)
    work = w.size * x4.shape[2] * run
    _core_conv_input_grad(w, dy, x4, k, wp, run, resolve_threads(n_threads, work))
    return dxp


def _typed(fn: str, arrays) -> None:
    """TypeError unless each (name, array, dtype, ndim) is a numpy array of that dtype and ndim."""
    for name, a, dt, nd in arrays:
        if not isinstance(a, np.ndarray) or a.dtype != dt or a.ndim != nd:
            raise TypeError(f"{fn}: {name} must be a {nd}-D {np.dtype(dt)} numpy array, got "
                            f"{getattr(a, 'dtype', type(a).__name__)} {getattr(a, 'shape', '')}")


def conv_forward_s8(wq: np.ndarray, sw: np.ndarray, xq: np.ndarray, sx: np.ndarray,
                    bias: np.ndarray, y: np.ndarray, k: int, wp: int, run: int,
                    n_threads: int | None = None) -> np.ndarray:
    """Conv2d's int8 forward product on the padded codes without im2col: ``y`` (P, Cout, B*run)
    gets ``float32(wq[p] @ cols[p]) * float32(sw[p] * sx[p])``, then ``+ bias[p][:, None]`` (a
    separate float32 add), ``cols`` the im2col rows of ``xq`` (conv_unfold): the same bits as
    gemm_s8_batched_f32 on the unfolded codes followed by the bias add. ``wq`` (P, Cout, C*k*k)
    and ``xq`` ((P,) C, B, L; no leading axis: one input shared by every peer) int8 codes, ``sw``
    (P,) and ``sx`` (P,) or (1,) their float32 scales, ``bias`` (P, Cout); all C-contiguous.
    Each peer is computed by one thread. Returns y."""
    x4 = _conv_groups("xq", xq, 4, (np.int8,))
    _typed("conv_forward_s8", (("wq", wq, np.int8, 3), ("sw", sw, np.float32, 1),
                               ("sx", sx, np.float32, 1), ("bias", bias, np.float32, 2),
                               ("y", y, np.float32, 3)))
    k, wp, run = _conv_geometry(k, wp, run)
    work = wq.size * x4.shape[2] * run
    _core_conv_forward_s8(wq, sw, x4, sx, bias, y, k, wp, run, resolve_threads(n_threads, work))
    return y


def conv_weight_grad_s8(dq: np.ndarray, sdy: np.ndarray, xq: np.ndarray, sx: np.ndarray,
                        gw: np.ndarray, k: int, wp: int, run: int, chunk: int,
                        n_threads: int | None = None) -> np.ndarray:
    """Conv2d's int8 weight gradient on the padded codes without im2col: per chunk of ``chunk``
    samples, ``part = float32(dq[p][:, chunk] @ cols[p][:, chunk].T) * float32(sdy[p] * sx[p])``
    (exact int32 sums over the chunk's positions, ``cols`` the im2col rows of ``xq``), and ``gw``
    (P, Cout, C*k*k) = the first part + each later one in order (float32 adds): the same bits as
    gemm_s8_batched_f32 on each chunk's unfolded codes followed by those adds. ``dq`` (P, Cout,
    B*run) and ``xq`` ((P,) C, B, L; no leading axis: shared) int8 codes, ``sdy`` (P,) and ``sx``
    (P,) or (1,) their float32 scales; all C-contiguous. Each peer is computed by one thread.
    Returns gw."""
    x4 = _conv_groups("xq", xq, 4, (np.int8,))
    _typed("conv_weight_grad_s8", (("dq", dq, np.int8, 3), ("sdy", sdy, np.float32, 1),
                                   ("sx", sx, np.float32, 1), ("gw", gw, np.float32, 3)))
    k, wp, run = _conv_geometry(k, wp, run)
    chunk = check_int("chunk", chunk, 1, _BIG)
    work = gw.size * x4.shape[2] * run
    _core_conv_weight_grad_s8(dq, sdy, x4, sx, gw, k, wp, run, chunk,
                              resolve_threads(n_threads, work))
    return gw


def conv_input_grad_s8(wq: np.ndarray, sw: np.ndarray, dq: np.ndarray, sdy: np.ndarray,
                       dxp: np.ndarray, k: int, wp: int, run: int,
                       n_threads: int | None = None) -> np.ndarray:
    """Conv2d's int8 input gradient on the padded images without a column gradient: ``dxp`` (P,
    C, B, L) gets, for every sample, ``conv_fold`` of the columns ``float32(wq[p].T @ dq[p]) *
    float32(sw[p] * sdy[p])`` (exact int32 sums, dequantized as gemm_s8_batched_f32 does) into
    zeros, in the same order, so the same bits as that GEMM followed by conv_fold. ``wq`` (P,
    Cout, C*k*k) the weight codes, ``dq`` (P, Cout, B*run) the output gradient's codes on wide
    rows (int8), ``sw`` and ``sdy`` (P,) their float32 scales; all C-contiguous; every element of
    dxp is written. Each peer is computed by one thread. Returns dxp."""
    _typed("conv_input_grad_s8", (("wq", wq, np.int8, 3), ("sw", sw, np.float32, 1),
                                  ("dq", dq, np.int8, 3), ("sdy", sdy, np.float32, 1),
                                  ("dxp", dxp, np.float32, 4)))
    k, wp, run = _conv_geometry(k, wp, run)
    work = wq.size * dxp.shape[2] * run
    _core_conv_input_grad_s8(wq, sw, dq, sdy, dxp, k, wp, run,
                             resolve_threads(n_threads, work))
    return dxp


def conv_pad(src: np.ndarray, w: int, dst: np.ndarray, pad: int, wp: int,
             n_threads: int | None = None) -> np.ndarray:
    """Wide rows from images: row n of the float32 ``dst`` (N, L) gets the first ``w`` columns of
    image n of ``src`` (N, h, ld) (C-contiguous: rows ld apart), row r at ``(pad + r) * wp + pad``,
    and zeros everywhere else: Conv2d's zero-padded input (``pad`` its padding) and, with pad 0,
    its output gradient on wide rows. Needs ``wp >= w + 2 * pad`` and ``L >= (h + 2 * pad) * wp``.
    Returns ``dst``."""
    big = (1 << 31) - 1
    w, pad, wp = check_int("w", w, 0, 1 << 62), check_int("pad", pad, 0, big), check_int(
        "wp", wp, 1, big)
    if not isinstance(src, np.ndarray) or src.ndim != 3:
        raise ValueError(f"conv_pad: src must be a 3-D numpy array (N, h, ld), got "
                         f"{getattr(src, 'shape', type(src).__name__)}")
    _core_conv_pad(src, w, dst, pad, wp, resolve_threads(n_threads, dst.size))
    return dst


def conv_crop(src: np.ndarray, pad: int, wp: int, dst: np.ndarray,
              n_threads: int | None = None) -> np.ndarray:
    """The inverse of :func:`conv_pad`: image n of the float32 ``dst`` (N, h, w) gets the interior
    of row n of ``src`` (N, L), its row r at ``(pad + r) * wp + pad`` (Conv2d's input gradient,
    cropped from the padded wide rows into a contiguous array). Returns ``dst``."""
    big = (1 << 31) - 1
    pad, wp = check_int("pad", pad, 0, big), check_int("wp", wp, 1, big)
    _core_conv_crop(src, pad, wp, dst, resolve_threads(n_threads, dst.size))
    return dst
