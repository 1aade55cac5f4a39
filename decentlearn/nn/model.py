"""``Model``: a sequence of peer-batched layers with one flat parameter row per peer, its
softmax cross-entropy loss, gradient and evaluation (see decentlearn.nn)."""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from decentlearn import ops
from decentlearn.checks import (
    check_frozen,
    check_grad,
    check_inputs,
    check_labels,
    check_step,
)
from decentlearn.nn.layers import (
    Conv2d,
    Dense,
    Layer,
    Params,
    ReLU,
    Scratch,
    _check_float_dtype,
    _check_positive_int,
)
from decentlearn.nn.lowp import layer_seed

# Upper bound on the elements of one activation tensor in `Model.evaluate` (P * chunk * widest
# layer); 2**24 float32 elements is 64 MiB, which keeps the working set near the caches.
_EVAL_BUDGET_ELEMENTS = 1 << 24


# --------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------


class Model:
    """A sequence of layers with one flat parameter vector of ``dim`` floats per peer.

    Parameters of P peers are a ``(P, dim)`` array; ``layout()`` says which slice of a row holds
    which tensor. A model holds no parameters. Its state is per-thread scratch buffers (the
    largest intermediates of the last call, kept to avoid page faults) and, for int8 layers, a step
    counter that keys the stochastic rounding of gradients (``loss_and_grad(..., step=)`` sets it
    explicitly), so one instance serves any number of peers and threads.
    """

    def __init__(
        self,
        layers: Sequence[Layer],
        input_shape: tuple[int, ...],
        n_classes: int,
        spec: str = "custom",
        seed: int = 0,
    ) -> None:
        if not isinstance(input_shape, tuple):
            raise TypeError(f"input_shape must be a tuple of ints, got {input_shape!r}")
        if not input_shape:
            raise ValueError("input_shape must have at least one dimension, got ()")
        for s in input_shape:
            _check_positive_int(s, "input_shape entries")
        n_classes = _check_positive_int(n_classes, "n_classes")
        if n_classes < 2:
            raise ValueError(f"n_classes must be >= 2, got {n_classes}")
        layers = tuple(layers)
        if not layers or not all(isinstance(layer, Layer) for layer in layers):
            raise TypeError("layers must be a non-empty sequence of Layer instances")
        self.input_shape: tuple[int, ...] = tuple(int(s) for s in input_shape)
        self.n_classes: int = n_classes
        self.spec: str = spec
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        #: Seeds the stochastic rounding of int8 layers; ``steps`` counts loss_and_grad calls.
        self.seed: int = int(seed)
        self.steps: int = 0
        #: The peer of row 0 of every batch (0; a rank's first peer on MPI): the rounding noise
        #: of row r is keyed by peer peer0 + r, so it does not depend on the batch's peers.
        self.peer0: int = 0
        self._spatial_input = layers[0].spatial
        shape = self.input_shape if self._spatial_input else (math.prod(self.input_shape),)
        names: list[str] = []
        shapes: list[tuple[int, ...]] = []
        counts: dict[str, int] = {}
        layout: list[tuple[str, slice, tuple[int, ...]]] = []
        self._slices: list[tuple[tuple[slice, tuple[int, ...]], ...]] = []
        offset = 0
        for layer in layers:
            shape = layer.out_shape(shape)
            shapes.append(shape)
            kind = layer.kind or type(layer).__name__.lower()
            counts[kind] = counts.get(kind, 0) + 1
            name = f"{kind}{counts[kind]}"
            names.append(name)
            entries = []
            for pname, pshape in layer.param_shapes():
                size = math.prod(pshape)
                sl = slice(offset, offset + size)
                layout.append((f"{name}.{pname}", sl, pshape))
                entries.append((sl, pshape))
                offset += size
            self._slices.append(tuple(entries))
        if shape != (n_classes,) or layers[-1].spatial:
            raise ValueError(f"the last layer must output ({n_classes},) logits, got {shape}")
        self.dim: int = offset
        self._layers = layers
        self._names = tuple(names)
        self._shapes = tuple(shapes)
        self._layout = tuple(layout)
        # Elements per sample and peer of the widest activation (Conv2d's wide rows included).
        widest = math.prod(self.input_shape)
        for layer, s in zip(layers, shapes):
            widest = max(widest, math.prod(s))
            if isinstance(layer, Conv2d):
                widest = max(widest, s[0] * s[1] * (s[2] + layer.kernel_size - 1))
        self._widest = widest
        # The same without a shared input's size: evaluate() broadcasts x over peers (stride 0),
        # so a Dense first layer reads it once; a Conv2d first layer unfolds it per peer.
        self._widest_eval = widest if layers[0].spatial else max(
            [math.prod(s) for s in shapes] + [1])
        self._local = threading.local()  # per-thread Scratch of every layer
        #: Threads of the layers' C kernels (None: decentlearn's default, ops.resolve_threads).
        self.n_threads: int | None = None
        # A Dense layer followed by a ReLU runs both in one C call (forward), and the ReLU's
        # backward rides in the dx of the Dense above it: _fused[i] says layer i is such a ReLU.
        self._fused = tuple(
            i > 0 and isinstance(ly, ReLU) and isinstance(layers[i - 1], Dense)
            for i, ly in enumerate(layers)
        )
        # Indices of the layers with parameters, in layout() order (what CoCoFL freezes).
        self._param_layers = tuple(i for i, e in enumerate(self._slices) if e)
        in_shapes = [self.input_shape if self._spatial_input else (math.prod(self.input_shape),)]
        self._in_shapes = tuple(in_shapes + list(shapes[:-1]))
        self._layer_seeds = tuple(layer_seed(self.seed, i) for i in range(len(layers)))
        # What frozen layers run (CoCoFL): Dense and Conv2d forward passes in int8.
        self._frozen_layers = tuple(
            dataclasses.replace(ly, precision="int8") if isinstance(ly, (Dense, Conv2d)) else ly
            for ly in layers
        )

    @property
    def precision(self) -> str:
        """"int8" when any layer computes its products in int8, else "fp32"."""
        return "int8" if any(getattr(ly, "precision", "fp32") == "int8" for ly in self._layers) \
            else "fp32"

    def _scratch(self, params: np.ndarray | None = None) -> list[Scratch]:
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = [Scratch() for _ in self._layers]
        for sc in scratch:
            sc.n_threads = self.n_threads
        return scratch

    @property
    def layers(self) -> tuple[tuple[str, Layer], ...]:
        return tuple(zip(self._names, self._layers))

    @property
    def param_layers(self) -> tuple[str, ...]:
        """Names of the layers that have parameters, in ``layout()`` order."""
        return tuple(self._names[i] for i in self._param_layers)

    @property
    def io_shapes(self) -> tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]:
        """(input shape, output shape) per sample of every layer (channel-major for spatial ones)."""
        return tuple(zip(self._in_shapes, self._shapes))

    def frozen_cut(self, n_frozen: int) -> int:
        """Parameters per row in the first ``n_frozen`` layers with parameters: they are the
        leading ``frozen_cut(n_frozen)`` entries of a row, since layout() follows layer order."""
        n = len(self._param_layers)
        if isinstance(n_frozen, bool) or not isinstance(n_frozen, (int, np.integer)) \
                or not 0 <= n_frozen <= n:
            raise ValueError(f"n_frozen must be an int in [0, {n}], got {n_frozen!r}")
        if n_frozen == n:
            return self.dim
        return self._slices[self._param_layers[n_frozen]][0][0].start

    def _first_trained(self, n_frozen: int) -> int:
        """Index of the lowest layer that trains when the first n_frozen parametrized layers are
        frozen (len(layers) when all are)."""
        if n_frozen == 0:
            return 0
        if n_frozen >= len(self._param_layers):
            return len(self._layers)
        return self._param_layers[n_frozen]

    def layout(self) -> list[tuple[str, slice, tuple[int, ...]]]:
        """(name, slice of a parameter row, per-peer shape) for every parameter tensor."""
        return list(self._layout)

    def __repr__(self) -> str:
        head = (
            f"Model(spec={self.spec!r}, input_shape={self.input_shape}, "
            f"n_classes={self.n_classes}, dim={self.dim:,}"
        )
        lines = [head]
        for name, layer, shape, entries in zip(
            self._names, self._layers, self._shapes, self._slices
        ):
            n = sum(sl.stop - sl.start for sl, _ in entries)
            extra = f", {n:,} params" if n else ""
            lines.append(f"  {name}: {layer!r} -> {shape}{extra}")
        return "\n".join(lines) + "\n)"

    # ---- parameters and inputs -------------------------------------------------------------

    def init(self, seed: int, dtype: Any = np.float32) -> np.ndarray:
        """One initial parameter vector (dim,): weights by each layer's ``init`` (He-normal, and
        PyTorch's uniform for the logits layer of the registered specs), zero biases, GroupNorm
        scale 1 and shift 0.

        Deterministic by ``seed``; the float32 vector is the float64 one rounded.
        """
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        dt = _check_float_dtype(dtype, "dtype")
        rng = np.random.default_rng(int(seed))
        out = np.empty(self.dim, dtype=dt)
        for layer, entries in zip(self._layers, self._slices):
            for arr, (sl, shape) in zip(layer.init_params(rng), entries):
                out[sl] = arr.reshape(-1)
        return out

    def _check_params(self, params: object) -> np.ndarray:
        if not isinstance(params, np.ndarray):
            raise TypeError(f"params must be a numpy array, got {type(params).__name__}")
        _check_float_dtype(params.dtype, "params dtype")
        if params.ndim != 2 or params.shape[1] != self.dim or params.shape[0] < 1:
            raise ValueError(f"params must have shape (n_peers, {self.dim}), got {params.shape}")
        if params.strides[1] != params.itemsize:
            params = np.ascontiguousarray(params)
        return params

    def _views(self, arr: np.ndarray) -> list[Params]:
        n = arr.shape[0]
        return [tuple(arr[:, sl].reshape((n, *shape), copy=False) for sl, shape in entries)
                for entries in self._slices]

    def _check_x(self, x: object, n_peers: int, dtype: np.dtype) -> tuple[np.ndarray, bool]:
        """Returns x as (P, B, *input_shape) in ``dtype`` (stride 0 over P when shared)."""
        x, shared = check_inputs(x, n_peers, self.input_shape)
        x = x.astype(dtype, copy=False)
        if shared:
            # Contiguous samples, so no later reshape can materialise the broadcast.
            x = np.ascontiguousarray(x)
            x = np.broadcast_to(x, (n_peers, *x.shape))  # read-only, stride 0 over peers
        else:
            x = x.view()
            x.flags.writeable = False  # layers may work in place on everything but the input
        return x, shared

    def _check_y(self, y: object, shape: tuple[int, ...]) -> np.ndarray:
        return check_labels(y, shape, self.n_classes).astype(np.intp, copy=False)

    # ---- passes ----------------------------------------------------------------------------

    def _forward(
        self, params: np.ndarray, x: np.ndarray, train: bool, first_trained: int = 0,
        views: list[Params] | None = None,
    ) -> tuple[np.ndarray, list]:
        """Layers below ``first_trained`` are frozen: they keep no context, and frozen Dense and
        Conv2d layers compute in int8 (round-to-nearest activations and weights, lowp).
        ``views``: ``self._views(params)`` when the caller has them already."""
        n_peers, batch = x.shape[0], x.shape[1]
        if self._spatial_input:
            h = x.transpose(0, 2, 1, 3, 4)  # channel-major (P, C, B, H, W), a view
        else:
            h = np.reshape(x, (n_peers, batch, -1))
        ctxs: list = []
        layers, fused = self._layers, self._fused
        if views is None:
            views = self._views(params)
        for i, (w, scratch) in enumerate(zip(views, self._scratch(params))):
            if fused[i]:  # done by the Dense below; its output is this ReLU's context
                ctxs.append(h if train and i >= first_trained else None)
                continue
            layer = layers[i] if i >= first_trained else self._frozen_layers[i]
            train_i = train and i >= first_trained
            if i + 1 < len(layers) and fused[i + 1]:
                h, ctx = layer.forward(w, h, train_i, scratch, relu=True)
            else:
                h, ctx = layer.forward(w, h, train_i, scratch)
            ctxs.append(ctx)
        return h, ctxs

    def forward(self, params: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Logits (P, B, n_classes) for per-peer batches (P, B, ...) or a shared batch (B, ...)."""
        params = self._check_params(params)
        xb, _ = self._check_x(x, params.shape[0], params.dtype)
        logits, _ = self._forward(params, xb, train=False)
        return logits

    def loss_and_grad(
        self,
        params: np.ndarray,
        x: np.ndarray,
        y: np.ndarray,
        grad: np.ndarray | None = None,
        step: int | None = None,
        frozen: int | np.ndarray = 0,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Mean softmax cross-entropy of each peer's batch and its gradient.

        ``x`` is (P, B, *input_shape) (or (B, *input_shape) shared by all peers) and ``y`` is
        (P, B) (or (B,) with a shared x). Returns ``loss`` (P,) float64 and ``grad`` (P, dim) in
        ``params.dtype``, written into ``grad`` when given (C-contiguous, fully overwritten).
        ``step`` keys the stochastic rounding of int8 layers (with the model's seed and the
        peer); None takes the model's call counter ``steps`` (which is then incremented).

        ``frozen`` (an int, or one int per peer) is how many of the first layers with parameters
        (``param_layers``) each peer freezes, as in CoCoFL: those layers run their forward pass in
        int8 (Dense and Conv2d; other layers in float32) without keeping activations,
        backpropagation stops at the lowest trained layer, and their gradient (the leading
        ``frozen_cut(k)`` entries of the row) is zero. ``len(param_layers)`` freezes everything:
        the loss is a forward pass in float32 and the gradient is zero. Peers with different
        counts are run as groups, one batched pass per distinct count.
        """
        params = self._check_params(params)
        n_peers = params.shape[0]
        xb, shared = self._check_x(x, n_peers, params.dtype)
        batch = xb.shape[1]
        if shared and np.ndim(y) == 1:
            y = np.broadcast_to(self._check_y(y, (batch,)), (n_peers, batch))
        else:
            y = self._check_y(y, (n_peers, batch))
        if batch == 0:
            raise ValueError("x must hold at least one sample per peer, got batch size 0")
        grad = check_grad(grad, params)
        check_step(step)
        if step is None:
            step, self.steps = self.steps, self.steps + 1
        counts = check_frozen(frozen, n_peers, len(self._param_layers))
        if counts is None or (counts == counts[0]).all():
            k = 0 if counts is None else int(counts[0])
            return self._loss_and_grad(params, xb, y, grad, int(step), k), grad
        loss = np.empty(n_peers)
        for k in np.unique(counts):  # one batched pass per group of peers freezing k layers
            rows = np.flatnonzero(counts == k)
            g_rows = np.empty((rows.size, self.dim), dtype=params.dtype)
            x_rows = xb[rows]
            x_rows.flags.writeable = False  # layers may work in place on all but the input
            loss[rows] = self._loss_and_grad(params[rows], x_rows, y[rows], g_rows, int(step),
                                             int(k))
            grad[rows] = g_rows
        return loss, grad

    def _loss_and_grad(self, params: np.ndarray, xb: np.ndarray, y: np.ndarray, grad: np.ndarray,
                       step: int, n_frozen: int) -> np.ndarray:
        first = self._first_trained(n_frozen)
        if first == len(self._layers):  # nothing trains
            logits, _ = self._forward(params, xb, train=False)
            grad.fill(0)
            return _cross_entropy(logits, y, False, self.n_threads)[0]
        w_views = self._views(params)
        logits, ctxs = self._forward(params, xb, train=True, first_trained=first, views=w_views)
        loss, dlogits = _cross_entropy(logits, y, True, self.n_threads)
        g_views, scratch = self._views(grad), self._scratch()
        for sc, seed_of_layer in zip(scratch, self._layer_seeds):
            sc.rng = (seed_of_layer, step)
            sc.peer0 = self.peer0
        h: np.ndarray | None = dlogits
        layers, fused = self._layers, self._fused
        i = len(layers) - 1
        while i >= first:
            if i > first and fused[i - 1]:  # the ReLU below: its mask is fused into dx
                h = layers[i].backward(w_views[i], g_views[i], h, ctxs[i], True, scratch[i],
                                       mask=ctxs[i - 1])
                i -= 2
            else:
                h = layers[i].backward(w_views[i], g_views[i], h, ctxs[i], i > first, scratch[i])
                i -= 1
        cut = self.frozen_cut(n_frozen)
        if cut:
            grad[:, :cut] = 0
        return loss

    def evaluate(
        self,
        params: np.ndarray,
        x: np.ndarray,
        y: np.ndarray,
        batch_size: int = 1024,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Accuracy (P,) and mean loss (P,) of every peer's model on a shared dataset.

        ``x`` is (N, *input_shape) and ``y`` (N,). Samples are processed in chunks of at most
        ``batch_size``, fewer when P * chunk * (widest layer output; the shared input counts only
        when the first layer unfolds it per peer, i.e. is a convolution) would exceed about 2**24
        elements, so memory stays bounded whatever the number of peers. Both results are float64.
        """
        params = self._check_params(params)
        batch_size = _check_positive_int(batch_size, "batch_size")
        n_peers = params.shape[0]
        x = np.asarray(x)
        if x.ndim != len(self.input_shape) + 1 or x.shape[1:] != self.input_shape:
            raise ValueError(f"x must have shape (n_samples, *{self.input_shape}), got {x.shape}")
        n = x.shape[0]
        y = self._check_y(y, (n,))
        if n == 0:
            raise ValueError("x must hold at least one sample, got 0")
        chunk = max(1, min(batch_size, _EVAL_BUDGET_ELEMENTS // (n_peers * self._widest_eval)))
        correct = np.zeros(n_peers, dtype=np.int64)
        loss_sum = np.zeros(n_peers, dtype=np.float64)
        for start in range(0, n, chunk):
            xc, _ = self._check_x(x[start : start + chunk], n_peers, params.dtype)
            yc = y[start : start + chunk]
            logits, _ = self._forward(params, xc, train=False)
            hits = np.empty(n_peers, dtype=np.int64)  # np.argmax == yc per peer, counted in C
            loss, _ = _cross_entropy(logits, np.broadcast_to(yc, logits.shape[:2]), False,
                                     self.n_threads, correct=hits)
            correct += hits
            loss_sum += loss * yc.shape[0]
        return correct / n, loss_sum / n


def _cross_entropy(
    logits: np.ndarray, y: np.ndarray, want_grad: bool, n_threads: int | None = None,
    correct: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Mean cross-entropy per peer (float64) and, optionally, its gradient w.r.t. the logits.

    Works in place on ``logits`` (which the caller owns) with a max-shifted log-sum-exp: float32
    logits in one C pass over the peers (ops.softmax_xent, threaded, portable C without FMA),
    float64 ones with NumPy (_cross_entropy_f64). ``correct`` ((P,) int64, or None) gets per
    peer the rows whose ``np.argmax`` is the label, from the logits before they are overwritten.
    """
    if logits.dtype != np.float32:
        if correct is not None:
            correct[...] = np.count_nonzero(np.argmax(logits, axis=-1) == y, axis=1)
        return _cross_entropy_f64(logits, y, want_grad)
    if not (logits.flags.c_contiguous and logits.flags.writeable):
        logits = np.array(logits, dtype=np.float32, order="C")
    loss = ops.softmax_xent(logits, y, want_grad=want_grad, n_threads=n_threads,
                            correct=correct)
    return loss, (logits if want_grad else None)


def _cross_entropy_f64(
    logits: np.ndarray, y: np.ndarray, want_grad: bool
) -> tuple[np.ndarray, np.ndarray | None]:
    """_cross_entropy of float64 logits in NumPy, in place."""
    n_peers, batch, _ = logits.shape
    z = logits
    # The row maxima column by column: a reduction over a short last axis costs more per element
    # than these few elementwise passes, and a maximum is exact in any order (NaN propagates).
    m = z[..., 0].copy()
    for c in range(1, z.shape[-1]):
        np.maximum(m, z[..., c], out=m)
    z -= m[..., None]
    z_y = np.take_along_axis(z, y[..., None], axis=-1)[..., 0]
    e = np.exp(z, out=z)
    s = e.sum(axis=-1)
    loss = np.mean(np.log(s) - z_y, axis=1, dtype=np.float64)
    if not want_grad:
        return loss, None
    # softmax / B, minus 1/B at the label.
    np.multiply(s, batch, out=s)
    np.divide(1, s, out=s)
    e *= s[..., None]
    rows = np.arange(n_peers)[:, None]
    cols = np.arange(batch)[None, :]
    e[rows, cols, y] -= 1.0 / batch
    return loss, e
