"""Layers of the peer-batched models (see decentlearn.nn): every layer works on all peers at once,
reading its parameters as views into the ``(n_peers, dim)`` matrix and writing its gradients into
views of a gradient matrix with the same layout.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.lib.array_utils import byte_bounds
from numpy.lib.stride_tricks import as_strided

from decentlearn import ops
from decentlearn._reference import pool as pool_reference
from decentlearn.nn.lowp import (
    check_f32,
    check_precision,
    dense_backward,
    dense_forward,
    quantize_weights,
)

_FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


# im2col elements per peer unfolded at a time by Conv2d (2**16 float32 = 256 KiB per peer).
_CONV_CHUNK = 1 << 16

Params = tuple[np.ndarray, ...]


def _check_positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return int(value)


def _check_float_dtype(dtype: object, name: str) -> np.dtype:
    try:
        dt = np.dtype(dtype)  # type: ignore[call-overload]
    except TypeError as exc:
        raise TypeError(f"{name} must be float32 or float64, got {dtype!r}") from exc
    if dt not in _FLOAT_DTYPES:
        raise TypeError(f"{name} must be float32 or float64, got {dt}")
    return dt


def _view(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Reshape that must not copy (a copy would make gradient writes vanish)."""
    return a.reshape(shape, copy=False)


# --------------------------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------------------------


class Scratch:
    """Reusable arrays of one layer, keyed by role.

    Large activations (im2col matrices reach tens of MiB) would otherwise be fresh ``mmap``
    allocations on every call, and their page faults cost as much as the copies themselves. An
    array taken from here is valid until the same role is taken again, i.e. until the next pass.
    """

    __slots__ = ("_bufs", "_last", "n_threads", "rng", "peer0")

    def __init__(self) -> None:
        self._bufs: dict[str, np.ndarray] = {}
        #: The view each role handed out last: a pass asking for the same shape again (every
        #: round) gets it back without the slicing and reshaping.
        self._last: dict[str, np.ndarray] = {}
        #: (seed, step) of the counter RNG for stochastic layers (int8 rounding of gradients), set
        #: by the model before each backward pass.
        self.rng: tuple[int, int] = (0, 0)
        #: The peer of row 0 of the batch (the counter RNG is keyed by peer0 + row), so a block
        #: of peers draws what those peers draw in the whole batch (the MPI backend's ranks).
        self.peer0: int = 0
        #: Threads of the C kernels the layer calls (None: decentlearn's default), set by the model.
        self.n_threads: int | None = None

    def empty(self, role: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        last = self._last.get(role)
        if last is not None and last.shape == shape and last.dtype == dtype:
            return last
        n = math.prod(shape)
        buf = self._bufs.get(role)
        if buf is None or buf.dtype != dtype or buf.size < n:
            buf = np.empty(n, dtype=dtype)
            self._bufs[role] = buf
        view = self._last[role] = _view(buf[:n], shape)
        return view

    def zeros(self, role: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        out = self.empty(role, shape, dtype)
        out.fill(0)
        return out


class Layer(ABC):
    """One layer of a peer-batched model.

    Hyperparameters live in frozen dataclass fields. ``forward`` gets the layer's parameter views,
    each of shape ``(P, *per_peer_shape)``, and an input with a leading peer axis (stride 0 when the
    input is shared by all peers); it returns the output and a context for ``backward`` (``None``
    when ``train`` is false). ``backward`` writes parameter gradients into the views ``g`` (every
    element, so the gradient array may start uninitialised), may overwrite ``dy``, and returns the
    input gradient when ``need_dx``. A layer never modifies a read-only input. Outputs may live in
    the layer's ``scratch``, so only layers whose output is never the model's output (spatial
    layers) take their outputs from it.
    """

    kind: ClassVar[str] = ""  # name prefix: layers are named fc1, relu2, ... in a model
    spatial: ClassVar[bool] = False  # True: works on channel-major (P, C, B, H, W) activations

    def param_shapes(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        return ()

    def init_params(self, rng: np.random.Generator) -> list[np.ndarray]:
        return []

    @abstractmethod
    def out_shape(self, in_shape: tuple[int, ...]) -> tuple[int, ...]:
        """See the class docstring."""

    @abstractmethod
    def forward(
        self, w: Params, x: np.ndarray, train: bool, scratch: Scratch
    ) -> tuple[np.ndarray, Any]:
        """See the class docstring."""

    @abstractmethod
    def backward(
        self, w: Params, g: Params, dy: np.ndarray, ctx: Any, need_dx: bool, scratch: Scratch
    ) -> np.ndarray | None:
        """See the class docstring."""


Initializer = Callable[[np.random.Generator, tuple[int, ...], int], np.ndarray]

# Weight initializers by name: (rng, shape, fan_in) -> float64 array.
INITIALIZERS: dict[str, Initializer] = {
    # He et al. (2015), for layers followed by a ReLU: N(0, 2 / fan_in).
    "he_normal": lambda rng, shape, fan_in: rng.standard_normal(shape) * math.sqrt(2.0 / fan_in),
    # PyTorch's default for Linear/Conv2d weights: U(-1/sqrt(fan_in), 1/sqrt(fan_in)). Used for
    # the logits layer so that the initial loss is close to log(n_classes).
    "torch_uniform": lambda rng, shape, fan_in: rng.uniform(-1.0, 1.0, shape) / math.sqrt(fan_in),
}


def _check_init(init: object) -> None:
    if init not in INITIALIZERS:
        raise ValueError(f"init must be one of {sorted(INITIALIZERS)}, got {init!r}")


def _matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray, n_threads: int | None,
            accumulate: bool = False) -> np.ndarray:
    """out (P, M, N) (+)= a @ b over peers; a and b may lack the peer axis (shared by all peers).
    float32 runs the C kernel (peers split over decentlearn's threads, BLAS not involved), other
    dtypes np.matmul."""
    if out.dtype == np.float32 and a.dtype == np.float32 and b.dtype == np.float32:
        return ops.nn_gemm(a if a.ndim == 3 else a[None], b if b.ndim == 3 else b[None], out,
                           accumulate, n_threads)
    if accumulate:
        out += np.matmul(a, b)
        return out
    return np.matmul(a, b, out=out)


def _threads(scratch: Scratch | None) -> int | None:
    return None if scratch is None else scratch.n_threads


def _is_shared(x: np.ndarray) -> bool:
    return x.shape[0] == 1 or x.strides[0] == 0


@dataclass(frozen=True)
class Dense(Layer):
    """Fully connected layer on (P, B, in_features); weight per peer is (in_features, out_features).

    ``precision="int8"`` runs the forward and both backward products as int8 GEMMs (see
    decentlearn.nn.lowp) on float32 master weights."""

    in_features: int
    out_features: int
    init: str = "he_normal"
    precision: str = "fp32"
    kind: ClassVar[str] = "fc"

    def __post_init__(self) -> None:
        _check_positive_int(self.in_features, "in_features")
        _check_positive_int(self.out_features, "out_features")
        _check_init(self.init)
        check_precision(self.precision)

    def param_shapes(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        return (("weight", (self.in_features, self.out_features)), ("bias", (self.out_features,)))

    def init_params(self, rng: np.random.Generator) -> list[np.ndarray]:
        w = INITIALIZERS[self.init](rng, (self.in_features, self.out_features), self.in_features)
        return [w, np.zeros(self.out_features)]

    def out_shape(self, in_shape: tuple[int, ...]) -> tuple[int, ...]:
        if in_shape != (self.in_features,):
            raise ValueError(f"Dense expects inputs of shape ({self.in_features},), got {in_shape}")
        return (self.out_features,)

    def forward(
        self, w: Params, x: np.ndarray, train: bool, scratch: Scratch, relu: bool = False
    ) -> tuple[np.ndarray, Any]:
        """``relu=True`` fuses the ReLU that follows (the model's call; the output is then the
        ReLU's)."""
        weight, bias = w
        if self.precision == "int8":
            return dense_forward(x, weight, bias, train, _is_shared(x),
                                      n_threads=_threads(scratch), relu=relu, scratch=scratch)
        if weight.dtype == np.float32 and x.dtype == np.float32:
            # One C call: every peer's gemm, bias and ReLU, peers split over threads. In training
            # the output is the layer's reused array (valid until its next pass: no fresh pages).
            out = (scratch.empty("y", (weight.shape[0], x.shape[1], self.out_features),
                                 np.float32) if train else None)
            y = ops.dense_forward(x, weight, bias, relu, out=out, n_threads=_threads(scratch))
            return y, (x if train else None)
        y = np.matmul(x, weight)  # (P, B, out); a stride-0 shared x is not copied
        y += bias[:, None, :]
        if relu:
            np.maximum(y, 0, out=y)
        return y, (x if train else None)

    def backward(
        self, w: Params, g: Params, dy: np.ndarray, ctx: Any, need_dx: bool, scratch: Scratch,
        mask: np.ndarray | None = None,
    ) -> np.ndarray | None:
        """``mask``: the output of a ReLU below whose backward is fused (dx is zeroed where
        mask <= 0)."""
        weight, _ = w
        g_weight, g_bias = g
        if self.precision == "int8":  # the ReLU mask is fused
            return dense_backward(dy, ctx, g_weight, g_bias, need_dx, *scratch.rng,
                                       n_threads=_threads(scratch), peer0=scratch.peer0,
                                       mask=mask, scratch=scratch)
        if weight.dtype == np.float32 and dy.dtype == np.float32:
            dx = (scratch.empty("dx", dy.shape[:2] + (self.in_features,), np.float32)
                  if need_dx else None)
            ops.dense_backward(ctx, weight, np.ascontiguousarray(dy), g_weight, g_bias, dx, mask,
                               n_threads=_threads(scratch))
            return dx
        else:
            np.matmul(ctx.transpose(0, 2, 1), dy, out=g_weight)
            np.sum(dy, axis=1, out=g_bias)
            dx = np.matmul(dy, weight.transpose(0, 2, 1)) if need_dx else None
        if dx is not None and mask is not None:
            np.multiply(dx, mask > 0, out=dx)
        return dx


@dataclass(frozen=True)
class Conv2d(Layer):
    """2-D convolution, stride 1, zero padding; weight per peer is (out, in, k, k) as in PyTorch.

    im2col works on "wide rows": every image is zero-padded to (Hp, Wp) = (H+2p, W+2p) and
    flattened, and the output is computed at all Wp columns of each output row, so row (c, i, j)
    of the im2col matrix is the padded image shifted by i*Wp + j. The copy that builds it moves
    runs of Ho*Wp contiguous floats instead of runs of Wo, and col2im adds equally long runs; the
    price is Wp/Wo more gemm work (1.14x at 28x28, 1.29x at 14x14). The extra output columns are
    dropped by a strided view, and their gradient is zero. The im2col matrix gets a row of ones
    so the bias rides in the gemm (and its gradient comes out of the weight-gradient gemm).

    The float32 forward and backward build no im2col matrix and no column gradient:
    ops.conv_forward and ops.conv_weight_grad read the rows (c, i, j) in place from the padded
    images (pointer and offset tables, and a row of ones for the bias), and ops.conv_input_grad
    forms each chain over the output channels of W^T dy and adds it into the padded input
    gradient in col2im's order; the same operations in the same order as the gemms on the
    unfolded columns and the fold, so the same bits. float64 goes a few samples at a time (about
    ``_CONV_CHUNK`` im2col elements per peer), so each block stays in cache between its copy and
    its gemm: a strided NumPy copy and NumPy's col2im adds (the specs of ops.conv_unfold and
    ops.conv_fold); the backward unfolds the kept padded input again rather than keeping the
    whole matrix. The chunk depends only on the
    layer's geometry, never on the number of peers, so a peer's results are the same whichever
    peers it is batched with; it also sets the float32 and int8 weight gradients' summation
    blocks.

    ``precision="int8"`` quantizes the padded input once per peer (absmax, round to nearest) and
    runs the forward and both backward products as exact int8 products on its codes, with
    stochastically rounded dY (see decentlearn.nn.lowp), on float32 master weights; the bias is
    added in float32. The codes are read in place too (ops.conv_forward_s8,
    ops.conv_weight_grad_s8, ops.conv_input_grad_s8: blocks of at most 64 positions gathered
    into L1 and packed for the int8 microkernel, one peer per thread, and no column gradient),
    with the bits of the int8 GEMMs on unfolded chunks they replace.
    """

    in_channels: int
    out_channels: int
    kernel_size: int = 5
    padding: int = 2
    init: str = "he_normal"
    precision: str = "fp32"
    kind: ClassVar[str] = "conv"
    spatial: ClassVar[bool] = True

    def __post_init__(self) -> None:
        _check_positive_int(self.in_channels, "in_channels")
        _check_positive_int(self.out_channels, "out_channels")
        _check_positive_int(self.kernel_size, "kernel_size")
        if isinstance(self.padding, bool) or not isinstance(self.padding, (int, np.integer)):
            raise TypeError(f"padding must be an int, got {type(self.padding).__name__}")
        if self.padding < 0:
            raise ValueError(f"padding must be >= 0, got {self.padding}")
        _check_init(self.init)
        check_precision(self.precision)

    @property
    def _k(self) -> int:  # rows of the im2col matrix (without the row of ones)
        return self.in_channels * self.kernel_size * self.kernel_size

    def param_shapes(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        k = self.kernel_size
        return (
            ("weight", (self.out_channels, self.in_channels, k, k)),
            ("bias", (self.out_channels,)),
        )

    def init_params(self, rng: np.random.Generator) -> list[np.ndarray]:
        w = INITIALIZERS[self.init](rng, self.param_shapes()[0][1], self._k)
        return [w, np.zeros(self.out_channels)]

    def out_shape(self, in_shape: tuple[int, ...]) -> tuple[int, ...]:
        if len(in_shape) != 3 or in_shape[0] != self.in_channels:
            raise ValueError(
                f"Conv2d expects inputs of shape ({self.in_channels}, H, W), got {in_shape}"
            )
        _, h, w = in_shape
        ho = h + 2 * self.padding - self.kernel_size + 1
        wo = w + 2 * self.padding - self.kernel_size + 1
        if ho < 1 or wo < 1:
            raise ValueError(
                f"Conv2d input {in_shape} is smaller than its {self.kernel_size}x"
                f"{self.kernel_size} kernel with padding {self.padding}"
            )
        return (self.out_channels, ho, wo)

    def _geometry(self, h: int, w: int) -> tuple[int, int, int, int, int]:
        """(Hp, Wp, Ho, Wo, samples per chunk) for an H x W input."""
        k, p = self.kernel_size, self.padding
        hp, wp = h + 2 * p, w + 2 * p
        ho, wo = hp - k + 1, wp - k + 1
        return hp, wp, ho, wo, max(1, _CONV_CHUNK // ((self._k + 1) * ho * wp))

    def _unfold(
        self, xp: np.ndarray, b0: int, b1: int, cols: np.ndarray, ho: int, wp: int
    ) -> np.ndarray:
        """im2col of samples [b0, b1) of the float64 padded input xp (..., C, B, Hp*Wp + k - 1)
        into the first K rows of ``cols`` (..., K or K + 1, >= n) (a last row of ones carries the
        bias); returns the (..., K or K + 1, n) view. A strided NumPy copy (ops.conv_unfold's
        spec): float32 and int8 read the padded images in place instead."""
        k, c = self.kernel_size, self.in_channels
        nb, run = b1 - b0, ho * wp
        *lead, _, _, _ = xp.shape
        *ls, sc, sb, it = xp.strides
        shifted = as_strided(
            xp[..., b0:b1, :],
            (*lead, c, k, k, nb, run),
            (*ls, sc, wp * it, it, sb, it),
            writeable=False,
        )
        view = cols[..., : nb * run]
        np.copyto(np.reshape(view[..., : self._k, :], shifted.shape, copy=False), shifted)
        return view

    def forward(
        self, w: Params, x: np.ndarray, train: bool, scratch: Scratch
    ) -> tuple[np.ndarray, Any]:
        weight, bias = w
        k, p, cout, kk = self.kernel_size, self.padding, self.out_channels, self._k
        n_peers = weight.shape[0]
        # A shared input is unfolded once and broadcast against the P weight matrices.
        src = x[0] if _is_shared(x) else x
        *lead, c, b, h, wd = src.shape
        hp, wp, ho, wo, chunk = self._geometry(h, wd)
        run, dt = ho * wp, src.dtype
        # Padded images, flattened, with k-1 trailing zeros so the last shifted run fits.
        if dt == np.float32:  # one C pass writes every element (ops.conv_pad)
            xp = scratch.empty("xp", (*lead, c, b, hp * wp + k - 1), dt)
            imgs, _ = _image_rows(src)
            ops.conv_pad(imgs, wd, np.reshape(xp, (-1, xp.shape[-1]), copy=False), p, wp,
                         n_threads=scratch.n_threads)
        else:
            xp = scratch.zeros("xp", (*lead, c, b, hp * wp + k - 1), dt)
            np.reshape(xp[..., : hp * wp], (*lead, c, b, hp, wp), copy=False)[
                ..., p : p + h, p : p + wd
            ] = src
        if self.precision == "int8":
            return self._forward_int8(weight, bias, xp, (h, wd), train, scratch)
        y = scratch.empty("y", (n_peers, cout, b * run), dt)
        if dt == np.float32:  # the product on the padded images, no im2col, the parameters read
            # in place ([weight | bias] formed in the kernel: ops.conv_forward_params)
            ops.conv_forward_params(_view(weight, (n_peers, cout, kk)), bias, xp, y, k, wp, run,
                                    n_threads=scratch.n_threads)
            out = _view(y, (n_peers, cout, b, ho, wp))[..., :wo]
            return out, ((xp, (h, wd)) if train else None)
        wb = scratch.empty("wb", (n_peers, cout, kk + 1), dt)  # [weight | bias]
        wb[..., :kk] = _view(weight, (n_peers, cout, kk))
        wb[..., kk] = bias
        cols = scratch.empty("cols", (*lead, kk + 1, min(b, chunk) * run), dt)
        cols[..., kk, :] = 1
        for b0 in range(0, b, chunk):
            b1 = min(b, b0 + chunk)
            _matmul(wb, self._unfold(xp, b0, b1, cols, ho, wp),
                    y[..., b0 * run : b1 * run],
                    scratch.n_threads)
        out = _view(y, (n_peers, cout, b, ho, wp))[..., :wo]
        return out, ((xp, (h, wd)) if train else None)

    def backward(
        self, w: Params, g: Params, dy: np.ndarray, ctx: Any, need_dx: bool, scratch: Scratch
    ) -> np.ndarray | None:
        weight, _ = w
        g_weight, g_bias = g
        if self.precision == "int8":
            return self._backward_int8(g_weight, g_bias, dy, ctx, need_dx, scratch)
        xp, (h, wd) = ctx
        k, c, kk = self.kernel_size, self.in_channels, self._k
        n_peers, cout, b, ho, wo = dy.shape
        hp, wp, _, _, chunk = self._geometry(h, wd)
        run, dt = ho * wp, dy.dtype
        dyw = self._wide_dy(dy, wp, scratch)
        # [dW | db] transposed, (kk + 1, Cout) per peer: cols @ dy^T, and dX = fold(W^T dy).
        # float32 reads the im2col rows in place from the padded images, forms no column
        # gradient and writes [dW | db] straight into the gradient rows (ops.conv_param_grad,
        # ops.conv_input_grad: the same bits as the gemms on unfolded chunks, the transposing
        # copy and the fold); float64 unfolds each chunk and runs np.matmul.
        if dt == np.float32:  # [dW | db] into the gradient rows in the layer's own layout
            ops.conv_param_grad(xp, dyw, _view(g_weight, (n_peers, cout, kk)), g_bias, k, wp, run,
                                chunk, n_threads=scratch.n_threads)
            if need_dx:  # the weights read in place from the parameter rows
                dxp = scratch.empty("dxp", (n_peers, c, b, hp * wp + k - 1), dt)
                ops.conv_input_grad(_view(weight, (n_peers, cout, kk)), dyw, dxp, k, wp, run,
                                    n_threads=scratch.n_threads)
        else:
            g_wb = scratch.empty("g_wb", (n_peers, kk + 1, cout), dt)
            cols = scratch.empty("cols", (*xp.shape[:-3], kk + 1, min(b, chunk) * run), dt)
            cols[..., kk, :] = 1
            part = scratch.empty("g_wb_part", g_wb.shape, dt)
            if need_dx:
                w_t = _view(weight, (n_peers, cout, kk)).transpose(0, 2, 1)
                dcols = scratch.empty("dcols", (n_peers, kk, min(b, chunk) * run), dt)
                dxp = scratch.zeros("dxp", (n_peers, c, b, hp * wp + k - 1), dt)
            for b0 in range(0, b, chunk):
                b1 = min(b, b0 + chunk)
                dy_c = dyw[..., b0 * run : b1 * run]
                cols_c = self._unfold(xp, b0, b1, cols, ho, wp)
                np.matmul(cols_c, dy_c.swapaxes(-1, -2), out=part if b0 else g_wb)
                if b0:
                    g_wb += part
                if need_dx:
                    _matmul(w_t, dy_c, dcols[..., : (b1 - b0) * run], scratch.n_threads)
                    self._fold(dcols, dxp, b0, b1, ho, wp)
            np.copyto(_view(g_weight, (n_peers, cout, kk)), g_wb[:, :kk].transpose(0, 2, 1))
            g_bias[...] = g_wb[:, kk]
        return self._crop(dxp, h, wd, scratch) if need_dx else None

    def _wide_dy(self, dy: np.ndarray, wp: int, scratch: Scratch) -> np.ndarray:
        """The output gradient dy (P, Cout, B, Ho, Wo) on wide rows, (P, Cout, B * Ho * Wp) with
        zeros in the wide columns (a reused array): ops.conv_pad for float32."""
        n_peers, cout, b, ho, wo = dy.shape
        dyw = scratch.empty("dyw", (n_peers, cout, b, ho, wp), dy.dtype)
        if dy.dtype == np.float32:
            imgs, _ = _image_rows(dy)
            ops.conv_pad(imgs, wo, np.reshape(dyw, (-1, ho * wp), copy=False), 0, wp,
                         n_threads=scratch.n_threads)
        else:
            dyw[..., wo:] = 0
            dyw[..., :wo] = dy
        return _view(dyw, (n_peers, cout, b * ho * wp))

    def _fold(self, dcols: np.ndarray, dxp: np.ndarray, b0: int, b1: int, ho: int,
              wp: int) -> None:
        """col2im for float64: adds the column gradient in the first (b1 - b0) * Ho*Wp columns of
        ``dcols`` (P, K, >= n) into samples [b0, b1) of ``dxp`` (P, C, B, Hp*Wp + k - 1), one
        shifted run per kernel offset in (i, j) order (ops.conv_fold's adds, in NumPy)."""
        k, run = self.kernel_size, ho * wp
        n_peers, c, _, _ = dxp.shape
        nb = b1 - b0
        dc = np.reshape(dcols[..., : nb * run], (n_peers, c, k, k, nb, run))
        for i in range(k):
            for j in range(k):
                off = i * wp + j
                dxp[..., b0:b1, off : off + run] += dc[:, :, i, j]

    def _crop(self, dxp: np.ndarray, h: int, wd: int, scratch: Scratch) -> np.ndarray:
        """The (P, C, B, H, W) interior of padded flattened images (P, C, B, Hp*Wp + k - 1): a
        contiguous reused array for float32 (ops.conv_crop), a view for float64."""
        p = self.padding
        hp, wp = h + 2 * p, wd + 2 * p
        n_peers, c, b, _ = dxp.shape
        if dxp.dtype == np.float32:
            dx = scratch.empty("dx", (n_peers, c, b, h, wd), np.float32)
            ops.conv_crop(np.reshape(dxp, (-1, dxp.shape[-1]), copy=False), p, wp,
                          np.reshape(dx, (-1, h, wd), copy=False), n_threads=scratch.n_threads)
            return dx
        dxp = np.reshape(dxp[..., : hp * wp], (n_peers, c, b, hp, wp), copy=False)
        return dxp[..., p : p + h, p : p + wd]

    def _forward_int8(self, weight: np.ndarray, bias: np.ndarray, xp: np.ndarray,
                      hw: tuple[int, int], train: bool, scratch: Scratch) -> tuple[np.ndarray, Any]:
        """y = Q(W) Q(patches) + b from the padded input xp (..., C, B, Hp*Wp + k - 1), whose
        leading peer axis is absent when the input is shared by all peers."""
        check_f32("inputs", xp)
        check_f32("parameters", weight)
        k, cout, kk = self.kernel_size, self.out_channels, self._k
        n_peers = weight.shape[0]
        *lead, _, b, _ = xp.shape
        hp, wp, ho, wo, _ = self._geometry(*hw)
        run = ho * wp
        # The padding zeros change no absmax scale and quantize to 0, so the padded input is
        # quantized once (per peer); the product reads its codes in place.
        rows = xp.shape[0] if lead else 1
        flat = np.reshape(xp, (rows, -1), copy=False)
        sx = ops.absmax_scale(flat, axis=0, n_threads=scratch.n_threads)
        xq = scratch.empty("xq", xp.shape, np.int8)
        ops.quantize_s8(flat, sx, axis=0, out=np.reshape(xq, flat.shape, copy=False),
                        n_threads=scratch.n_threads)
        wq, sw = quantize_weights(weight, n_threads=scratch.n_threads)
        wq = _view(wq, (n_peers, cout, kk))
        # the int8 product on the padded codes, no im2col (ops.conv_forward_s8: the same bits as
        # the int8 GEMM on unfolded codes, then the bias add)
        y = scratch.empty("y", (n_peers, cout, b * run), np.float32)
        ops.conv_forward_s8(wq, sw, xq, sx, np.ascontiguousarray(bias), y, k, wp, run,
                            n_threads=scratch.n_threads)
        out = _view(y, (n_peers, cout, b, ho, wp))[..., :wo]
        return out, ((xq, sx, wq, sw, hw) if train else None)

    def _backward_int8(self, g_weight: np.ndarray, g_bias: np.ndarray, dy: np.ndarray, ctx: Any,
                       need_dx: bool, scratch: Scratch) -> np.ndarray | None:
        """dW = Q_s(dY) Q(patches)^T, db = sum dY, dX = col2im(Q(W)^T Q_s(dY)); Q_s rounds
        stochastically, keyed by (scratch.rng, peer)."""
        xq, sx, wq, sw, (h, wd) = ctx
        k, c, kk = self.kernel_size, self.in_channels, self._k
        n_peers, cout, b, ho, wo = dy.shape
        hp, wp, _, _, chunk = self._geometry(h, wd)
        run = ho * wp
        if dy.flags.c_contiguous:  # db = np.sum(dy, axis=(2, 3, 4)), its bits, on the threads
            sums = scratch.empty("g_b", (n_peers * cout,), np.float32)
            ops.row_sums(_view(dy, (n_peers * cout, b * ho * wo)), sums,
                         n_threads=scratch.n_threads)
            g_bias[...] = _view(sums, (n_peers, cout))
        else:
            np.sum(dy, axis=(2, 3, 4), out=g_bias)
        # the wide columns' gradient is 0: it quantizes to 0 in any rounding
        flat = np.reshape(self._wide_dy(dy, wp, scratch), (n_peers, -1), copy=False)
        seed, step = scratch.rng
        sdy = ops.absmax_scale(flat, axis=0, n_threads=scratch.n_threads)
        dyq = scratch.empty("dyq", (n_peers, cout, b * run), np.int8)
        ops.quantize_s8(flat, sdy, axis=0, rounding="stochastic", seed=seed, step=step,
                        peer0=scratch.peer0, out=np.reshape(dyq, flat.shape, copy=False),
                        n_threads=scratch.n_threads)
        # dW on the padded codes, no im2col: the same chunks and float adds as the int8 GEMMs on
        # unfolded chunks (ops.conv_weight_grad_s8), into a reused array copied into g_weight
        g_w = scratch.empty("g_w", (n_peers, cout, kk), np.float32)
        ops.conv_weight_grad_s8(dyq, sdy, xq, sx, g_w, k, wp, run, chunk,
                                n_threads=scratch.n_threads)
        np.copyto(_view(g_weight, (n_peers, cout, kk)), g_w)
        if not need_dx:
            return None
        # dX = col2im(Q(W)^T Q_s(dY)) without the column gradient: the same bits as the int8
        # GEMM on the columns followed by the fold (ops.conv_input_grad_s8)
        dxp = scratch.empty("dxp", (n_peers, c, b, hp * wp + k - 1), np.float32)
        ops.conv_input_grad_s8(wq, sw, dyq, sdy, dxp, k, wp, run, n_threads=scratch.n_threads)
        return self._crop(dxp, h, wd, scratch)


def _image_rows(x: np.ndarray) -> tuple[np.ndarray, int]:
    """x (..., H, W) as a C-contiguous (N, H, LD) array whose rows start with x's rows (LD >= W),
    and W: a view when x is C-contiguous or a column crop of a C-contiguous buffer (Conv2d's wide
    rows), else a copy."""
    *lead, h, w = x.shape
    n, it = math.prod(lead), x.itemsize
    ld = x.strides[-2] // it if x.ndim >= 2 and x.strides[-2] % it == 0 else -1
    if x.strides[-1] == it and ld >= w and n * h > 0:
        step, ok = h * ld * it, True
        for extent, stride in zip(reversed(lead), reversed(x.strides[:-2])):
            ok = ok and (extent == 1 or stride == step)
            step *= extent
        base = x
        while isinstance(base.base, np.ndarray):
            base = base.base
        lo = base.__array_interface__["data"][0]
        hi = lo + base.nbytes if base.flags.c_contiguous else byte_bounds(base)[1]
        start = x.__array_interface__["data"][0]
        if ok and lo <= start and start + n * h * ld * it <= hi:
            if base.flags.c_contiguous:  # a view of the contiguous buffer (cheaper than as_strided)
                rows = np.ndarray((n, h, ld), x.dtype, buffer=base, offset=start - lo,
                                  strides=(h * ld * it, ld * it, it))
                rows.flags.writeable = False
                return rows, w
            return as_strided(x, (n, h, ld), (h * ld * it, ld * it, it), writeable=False), w
    return np.ascontiguousarray(x).reshape(n, h, w), w


@dataclass(frozen=True)
class MaxPool2d(Layer):
    """2x2 max pooling, stride 2. The gradient goes to one maximum per window: ties go to the
    left column of the window, then to its top row. float32 runs the C kernels
    (ops.maxpool2_forward / maxpool2_backward, images split over threads), other dtypes their
    NumPy reference (decentlearn/_reference/pool.py)."""

    kind: ClassVar[str] = "pool"
    spatial: ClassVar[bool] = True

    def out_shape(self, in_shape: tuple[int, ...]) -> tuple[int, ...]:
        if len(in_shape) != 3 or in_shape[1] % 2 or in_shape[2] % 2:
            raise ValueError(
                f"MaxPool2d expects inputs (C, H, W) with even H and W, got {in_shape}"
            )
        c, h, w = in_shape
        return (c, h // 2, w // 2)

    def forward(
        self, w: Params, x: np.ndarray, train: bool, scratch: Scratch
    ) -> tuple[np.ndarray, Any]:
        *lead, h, wd = x.shape
        rows, _ = _image_rows(x)
        y = scratch.empty("y", (*lead, h // 2, wd // 2), x.dtype)
        y3 = np.reshape(y, (rows.shape[0], h // 2, wd // 2), copy=False)
        code = scratch.empty("code", y3.shape, np.dtype(np.uint8)) if train else None
        kernels = ops if x.dtype == np.float32 else pool_reference
        kernels.maxpool2_forward(rows, wd, y3, code, n_threads=scratch.n_threads)
        return y, code

    def backward(
        self, w: Params, g: Params, dy: np.ndarray, ctx: Any, need_dx: bool, scratch: Scratch
    ) -> np.ndarray | None:
        if not need_dx:
            return None
        *lead, h2, w2 = dy.shape
        dy3 = np.ascontiguousarray(dy).reshape(ctx.shape)
        dx = scratch.empty("dx", (*lead, 2 * h2, 2 * w2), dy.dtype)
        kernels = ops if dy.dtype == np.float32 else pool_reference
        kernels.maxpool2_backward(dy3, ctx, np.reshape(dx, (ctx.shape[0], 2 * h2, 2 * w2),
                                                       copy=False), n_threads=scratch.n_threads)
        return dx


@dataclass(frozen=True)
class ReLU(Layer):
    """max(x, 0), in place when the input is writable (every activation the model owns)."""

    kind: ClassVar[str] = "relu"

    def out_shape(self, in_shape: tuple[int, ...]) -> tuple[int, ...]:
        return in_shape

    def forward(
        self, w: Params, x: np.ndarray, train: bool, scratch: Scratch
    ) -> tuple[np.ndarray, Any]:
        if x.dtype == np.float32 and x.flags.c_contiguous and x.flags.writeable:
            y = ops.relu_forward(x, n_threads=scratch.n_threads)  # in place, threaded
        else:
            y = np.maximum(x, 0, out=x if x.flags.writeable else None)
        return y, (y if train else None)

    def backward(
        self, w: Params, g: Params, dy: np.ndarray, ctx: Any, need_dx: bool, scratch: Scratch
    ) -> np.ndarray | None:
        if not need_dx:
            return None
        if dy.dtype == np.float32 and ctx.dtype == np.float32 and dy.shape == ctx.shape:
            # elementwise on the run's threads (ops.relu_backward: the same bits as NumPy's)
            dy_c, y_c = np.ascontiguousarray(dy), np.ascontiguousarray(ctx)
            dx = scratch.empty("dx", dy.shape, np.float32)
            return ops.relu_backward(dy_c, y_c, dx, n_threads=scratch.n_threads)
        return np.multiply(dy, ctx > 0, out=dy if dy.flags.writeable else None)


@dataclass(frozen=True)
class GroupNorm(Layer):
    """Group normalisation over (channels of a group, H, W) per sample, with per-channel affine.

    float32 runs the C kernels (ops.groupnorm_forward / groupnorm_backward: float64 sums in a
    fixed order, peers over threads); float64 the NumPy form below."""

    num_groups: int
    num_channels: int
    eps: float = 1e-5
    kind: ClassVar[str] = "gn"
    spatial: ClassVar[bool] = True

    def __post_init__(self) -> None:
        _check_positive_int(self.num_groups, "num_groups")
        _check_positive_int(self.num_channels, "num_channels")
        if self.num_channels % self.num_groups:
            raise ValueError(
                f"num_groups must divide num_channels={self.num_channels}, got {self.num_groups}"
            )
        if isinstance(self.eps, bool) or not isinstance(self.eps, (int, float)) or self.eps <= 0:
            raise ValueError(f"eps must be a float > 0, got {self.eps!r}")

    def param_shapes(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        return (("weight", (self.num_channels,)), ("bias", (self.num_channels,)))

    def init_params(self, rng: np.random.Generator) -> list[np.ndarray]:
        return [np.ones(self.num_channels), np.zeros(self.num_channels)]

    def out_shape(self, in_shape: tuple[int, ...]) -> tuple[int, ...]:
        if len(in_shape) != 3 or in_shape[0] != self.num_channels:
            raise ValueError(
                f"GroupNorm expects inputs of shape ({self.num_channels}, H, W), got {in_shape}"
            )
        return in_shape

    def forward(
        self, w: Params, x: np.ndarray, train: bool, scratch: Scratch
    ) -> tuple[np.ndarray, Any]:
        gamma, beta = w
        n_peers, c, b, h, wd = x.shape
        grp, cg = self.num_groups, c // self.num_groups
        n = cg * h * wd
        if x.dtype == np.float32 and gamma.dtype == np.float32:
            # One C pass per peer (ops.groupnorm_forward), peers over threads; Conv2d's wide
            # rows are read in place.
            imgs, _ = _image_rows(x)
            xc32 = scratch.empty("xc", (n_peers * c * b, h * wd), np.float32)
            rstd32 = scratch.empty("rstd", (n_peers, grp, b), np.float32)
            y32 = scratch.empty("y", (n_peers * c * b, h * wd), np.float32)
            ops.groupnorm_forward(imgs, wd, np.ascontiguousarray(gamma),
                                  np.ascontiguousarray(beta), grp, self.eps, xc32, rstd32, y32,
                                  n_threads=scratch.n_threads)
            return _view(y32, x.shape), ((xc32, rstd32) if train else None)
        # A group of one sample is (its cg channels) x (all pixels). x is first copied to a
        # contiguous array (it may be a strided view) so later passes have long inner loops;
        # reductions are einsums, which never materialise a product.
        xc = scratch.empty("xc", (n_peers, grp, cg, b, h, wd), x.dtype)
        np.copyto(xc, np.reshape(x, xc.shape))  # the reshape splits C: a view even of strided x
        xc = _view(xc, (n_peers, grp, cg, b, h * wd))
        mean = np.einsum("pgcbi->pgb", xc)
        mean /= n
        xc -= mean[:, :, None, :, None]
        var = np.einsum("pgcbi,pgcbi->pgb", xc, xc)
        var /= n
        var += self.eps
        rstd = np.divide(1, np.sqrt(var, out=var), out=var)  # (P, G, B)
        # y = xc * (gamma * rstd) + beta
        scale = _view(gamma, (n_peers, grp, cg, 1)) * rstd[:, :, None, :]  # (P, G, cg, B)
        y = scratch.empty("y", xc.shape, x.dtype)
        np.multiply(xc, scale[..., None], out=y)
        y += _view(beta, (n_peers, grp, cg, 1, 1))
        return _view(y, x.shape), ((xc, rstd) if train else None)

    def backward(
        self, w: Params, g: Params, dy: np.ndarray, ctx: Any, need_dx: bool, scratch: Scratch
    ) -> np.ndarray | None:
        gamma, _ = w
        g_gamma, g_beta = g
        if dy.dtype == np.float32 and ctx[0].ndim == 2:  # the C forward's context
            xc32, rstd32 = ctx
            n_peers, c, b, h, wd = dy.shape
            imgs, _ = _image_rows(dy)
            gg = np.empty((n_peers, c), np.float32)
            gb = np.empty((n_peers, c), np.float32)
            dx = scratch.empty("dx", xc32.shape, np.float32) if need_dx else None
            ops.groupnorm_backward(imgs, wd, xc32, rstd32, np.ascontiguousarray(gamma), gg, gb,
                                   dx, n_threads=scratch.n_threads)
            g_gamma[...] = gg
            g_beta[...] = gb
            return _view(dx, dy.shape) if need_dx else None
        xc, rstd = ctx  # x - mean, (P, G, cg, B, H*W); 1 / std, (P, G, B)
        n_peers, grp, cg, _, hw = xc.shape
        n = cg * hw
        dyv = np.reshape(dy, xc.shape)
        s_dy = np.einsum("pgcbi->pgcb", dyv)  # (P, G, cg, B)
        s_dyx = np.einsum("pgcbi,pgcbi->pgcb", dyv, xc)
        s_dyx *= rstd[:, :, None, :]  # sum of dy * xhat
        np.sum(s_dy, axis=3, out=_view(g_beta, (n_peers, grp, cg)))
        np.sum(s_dyx, axis=3, out=_view(g_gamma, (n_peers, grp, cg)))
        if not need_dx:
            return None
        # dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = gamma * dy,
        # means over the group: dx = dy * (gamma rstd) - xc * (rstd^2 m2) - rstd m1.
        gam = _view(gamma, (n_peers, grp, cg, 1))
        m1 = np.einsum("pgcb,pgcb->pgb", s_dy, np.broadcast_to(gam, s_dy.shape)) / n
        m2 = np.einsum("pgcb,pgcb->pgb", s_dyx, np.broadcast_to(gam, s_dy.shape)) / n
        m1 *= rstd
        m2 *= rstd
        m2 *= rstd
        dx = scratch.empty("dx", xc.shape, dy.dtype)
        np.multiply(dyv, (gam * rstd[:, :, None, :])[..., None], out=dx)
        t = np.multiply(xc, m2[:, :, None, :, None], out=scratch.empty("t", xc.shape, dy.dtype))
        dx -= t
        dx -= m1[:, :, None, :, None]
        return _view(dx, dy.shape)


@dataclass(frozen=True)
class Flatten(Layer):
    """Channel-major (P, C, B, H, W) -> (P, B, C*H*W), features in (C, H, W) order as in PyTorch."""

    kind: ClassVar[str] = "flatten"
    spatial: ClassVar[bool] = True  # its input is spatial; its output is flat

    def out_shape(self, in_shape: tuple[int, ...]) -> tuple[int, ...]:
        return (math.prod(in_shape),)

    def forward(
        self, w: Params, x: np.ndarray, train: bool, scratch: Scratch
    ) -> tuple[np.ndarray, Any]:
        n_peers, c, b, h, wd = x.shape
        y = scratch.empty("y", (n_peers, b, c, h, wd), x.dtype)
        if x.dtype == np.float32 and x.flags.c_contiguous:  # threaded (ops.swap_axes12)
            ops.swap_axes12(_view(x, (n_peers, c, b, h * wd)), _view(y, (n_peers, b, c, h * wd)),
                            n_threads=scratch.n_threads)
        else:
            np.copyto(y, x.transpose(0, 2, 1, 3, 4))
        return _view(y, (n_peers, b, c * h * wd)), (x.shape if train else None)

    def backward(
        self, w: Params, g: Params, dy: np.ndarray, ctx: Any, need_dx: bool, scratch: Scratch
    ) -> np.ndarray | None:
        if not need_dx:
            return None
        n_peers, c, b, h, wd = ctx
        if dy.dtype == np.float32 and dy.flags.c_contiguous:  # a contiguous dx, threaded
            dx = scratch.empty("dx", (n_peers, c, b, h, wd), np.float32)
            ops.swap_axes12(_view(dy, (n_peers, b, c, h * wd)), _view(dx, (n_peers, c, b, h * wd)),
                            n_threads=scratch.n_threads)
            return dx
        return _view(dy, (n_peers, b, c, h, wd)).transpose(0, 2, 1, 3, 4)
