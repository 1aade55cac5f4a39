"""``TorchModel``: any ``torch.nn.Module`` behind decentlearn's model interface (the one of
``decentlearn.nn.Model``: ``dim``, ``init``, ``loss_and_grad``, ``forward``, ``evaluate``,
``layout``, ``param_layers``/``frozen_cut`` for CoCoFL), trained by all peers at once.

Every peer's parameters are one row of the ``(n_peers, dim)`` float32 array the algorithm owns.
Each tensor of the module is seen by torch as a strided view of its columns of that array
(``torch.from_numpy``, no copy), the forward pass of all peers is one ``torch.func.vmap`` of
``torch.func.functional_call`` over the peer axis (convolutions become one grouped convolution,
linear layers one batched matmul), the backward pass is one autograd call, and each parameter's
gradient is written by one ``copy_`` straight into its view of the algorithm's gradient buffer.

``mode`` chooses how the peers are split into passes (docs/torch.md, "Execution modes"):
``"batched"`` is the one vmapped pass above; ``"grouped:G"`` runs the same pass on groups of G
consecutive peers (rows ``[s, s + G)``), G = 1 being a plain ``functional_call`` per peer on
contiguous row views (a convolution then runs as an ordinary, not a grouped, convolution);
``"auto"`` times the candidates on a scratch copy of the first batch of each shape and keeps the
fastest. Every mode computes each peer's loss, gradient and statistics from that peer's row and
batch alone, so the modes agree to float32 rounding (not bit for bit: the kernels differ).

Floating-point buffers (BatchNorm's running mean and variance) are per-peer state kept in the row
after all parameters: training passes update them in place, their gradient is zero, and every
algorithm exchanges and averages them exactly like the weights (the policy of decentlearn's own
BatchNorm, decentlearn.nn.batchnorm; the average model gets the peers' average statistics).

``device`` (None, "cpu", "cuda", "cuda:N"; docs/torch.md, "GPU") chooses where the passes run.
None (the default) is the path above: torch tensors are views of the host matrix. A device
copies the ``(P, dim)`` matrix and the batch to that device once per call (through pinned host
buffers on CUDA), runs the same passes there on column views of the device copy, gathers every
gradient into one device ``(P, dim)`` buffer and copies it back once into the algorithm's host
buffer (and the updated BatchNorm statistics into their rows), so optimizers, gossip,
compressors, checkpoints and MPI work on host rows as before. ``"cpu"`` runs that same path on
the CPU (what CI tests): it gives the host path's numbers bit for bit.
"""

from __future__ import annotations

import math
import re
import time
from typing import Any

import numpy as np
import torch
from torch.func import functional_call, vmap

from decentlearn import ops
from decentlearn import checks
from decentlearn.torch.device import make_deterministic, resolve_device

# Upper bound on P * chunk samples of one evaluation pass (keeps activations near 100 MB for the
# zoo's models at 32x32).
_EVAL_BUDGET_SAMPLES = 4096

#: The same bound on a CUDA device (16 GB-class GPUs hold ResNet-20's evaluation activations of
#: this many 32x32 samples several times over; fewer, larger passes keep the GPU busy).
_EVAL_BUDGET_SAMPLES_CUDA = 16384

#: Where the passes run (``TorchModel.device_report()["path"]``): views of the host matrix, or a
#: copy of it on ``device`` made once per call.
PATH_HOST_VIEWS, PATH_DEVICE_COPY = "host-views", "device-copy"


#: Execution modes (``TorchModel.mode``); ``grouped:G`` takes a positive group size G.
MODES = ("batched", "grouped:G", "auto")


def parse_mode(mode: object, name: str = "mode") -> int | str:
    """``"batched"`` / ``"auto"`` as they are, ``"grouped:G"`` as the int G; anything else is a
    ValueError naming ``name``."""
    if mode in ("batched", "auto"):
        return mode  # type: ignore[return-value]
    if isinstance(mode, str) and re.fullmatch(r"grouped:0*[1-9][0-9]*", mode):
        return int(mode[len("grouped:"):])
    raise ValueError(f"{name} must be 'batched', 'grouped:G' (G a positive int: peers per "
                     f"pass, 1 = one plain pass per peer) or 'auto', got {mode!r}")


def _mode_name(group: int, n_peers: int) -> str:
    return "batched" if group >= n_peers else f"grouped:{group}"


def _positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


class TorchModel:
    """A ``torch.nn.Module`` trained by every peer; parameters are rows of one float32 array.

    ``module`` maps a batch ``(B, *input_shape)`` to logits ``(B, n_classes)``; it must hold
    float32 CPU tensors. The row layout is every parameter in ``named_parameters()`` order, then
    every floating-point buffer in ``named_buffers()`` order. Integer buffers (BatchNorm's
    ``num_batches_tracked``) stay in the module, shared; a BatchNorm with ``momentum=None`` (which
    needs that counter per peer) is rejected. The loss is the mean softmax cross-entropy.
    ``mode``: ``"batched"`` (one vmapped pass over all peers), ``"grouped:G"`` (passes over
    groups of G peers; G = 1: a plain per-peer pass) or ``"auto"`` (the fastest of these,
    measured on first use of each batch shape; ``mode_report()`` says which).
    """

    precision = "fp32"

    def __init__(self, module: torch.nn.Module, input_shape: tuple[int, ...], n_classes: int,
                 spec: str = "custom", seed: int = 0, mode: str = "batched") -> None:
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
        if not isinstance(input_shape, tuple) or not input_shape or not all(
                isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s > 0
                for s in input_shape):
            raise ValueError(f"input_shape must be a non-empty tuple of positive ints, got "
                             f"{input_shape!r}")
        self.n_classes = _positive_int(n_classes, "n_classes")
        if self.n_classes < 2:
            raise ValueError(f"n_classes must be >= 2, got {n_classes}")
        self.input_shape = tuple(int(s) for s in input_shape)
        self.spec = spec
        self.seed = int(seed)
        self.steps = 0
        for name, m in module.named_modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.momentum is None:
                raise ValueError(f"module {name!r}: BatchNorm with momentum=None (a cumulative "
                                 "average over a per-peer batch count) is not supported; give it "
                                 "a momentum such as 0.1")
        layout: list[tuple[str, slice, tuple[int, ...]]] = []
        offset = 0
        for name, p in module.named_parameters():
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise TypeError(f"module parameter {name!r} must be a float32 CPU tensor, got "
                                f"{p.dtype} on {p.device}")
            layout.append((name, slice(offset, offset + p.numel()), tuple(p.shape)))
            offset += p.numel()
        self._n_params = len(layout)
        #: First entry of a row after the parameters: where the buffers start.
        self.params_dim = offset
        for name, b in module.named_buffers():
            if b.is_floating_point():
                if b.dtype != torch.float32:
                    raise TypeError(f"module buffer {name!r} must be float32, got {b.dtype}")
                layout.append((name, slice(offset, offset + b.numel()), tuple(b.shape)))
                offset += b.numel()
        if offset == 0:
            raise ValueError("module has no parameters")
        self.dim = offset
        self._layout = tuple(layout)
        # Layers with parameters (CoCoFL freezes the first k): the owning module of each
        # parameter, in order; a layer's parameters are consecutive in named_parameters().
        owners: list[str] = []
        starts: list[int] = []
        for name, sl, _ in layout[: self._n_params]:
            owner = name.rpartition(".")[0]
            if not owners or owners[-1] != owner:
                owners.append(owner)
                starts.append(sl.start)
        self.param_layers = tuple(owners)
        self._layer_starts = tuple(starts)
        self.module = module
        probe = torch.zeros((1, *self.input_shape))
        with torch.no_grad():
            module.eval()
            out = module(probe)
        if tuple(out.shape) != (1, self.n_classes):
            raise ValueError(f"module must map (B, *{self.input_shape}) inputs to (B, "
                             f"{self.n_classes}) logits, got {tuple(out.shape)} for B=1")
        self._n_threads: int | None = None
        self.n_threads = None
        self._mode = "batched"
        self._group: int | str = "batched"
        # auto's measurements: (n_peers, x shape, shared, first trained column) -> choice
        self._auto: dict[tuple, dict] = {}
        self.mode = mode
        self._device: torch.device | None = None
        self._device_name: str | None = None
        # Reusable buffers of the device path: key -> flat tensor (grown, never shrunk).
        self._staging: dict[tuple, torch.Tensor] = {}
        # CUDA: per upload key, an event recorded after the copy out of its pinned buffer.
        self._copied: dict[str, Any] = {}
        #: CUDA: copies go through pinned host buffers (True) or straight from and to the
        #: NumPy arrays' pageable memory (False; the benchmark compares the two).
        self.pin_memory = True

    @property
    def mode(self) -> str:
        """How peers are split into passes: "batched", "grouped:G" or "auto" (module docstring;
        docs/torch.md). Setting it forgets auto's earlier measurements."""
        return self._mode

    @mode.setter
    def mode(self, value: str) -> None:
        self._group = parse_mode(value)
        self._mode = value
        self._auto.clear()

    def mode_report(self) -> dict:
        """The mode and, under "auto", each measured case: peers, input shape, the mode chosen
        and the seconds of one forward/backward pass of every candidate (for the run summary:
        rerunning with the chosen mode reproduces the run's numbers)."""
        report: dict = {"mode": self._mode}
        if self._mode == "auto":
            report["chosen"] = [dict(v) for v in self._auto.values()]
        return report

    @property
    def device(self) -> str | None:
        """Where the passes run: None (the default: torch views of the host matrix), "cpu",
        "cuda" or "cuda:N" (a copy of the matrix on that device each call; module docstring).
        Setting a CUDA device checks it exists (ValueError naming ``device`` and what is
        missing) and turns on deterministic CUDA kernels process-wide
        (``decentlearn.torch.device.make_deterministic``)."""
        return self._device_name

    @device.setter
    def device(self, value: str | None) -> None:
        dev = resolve_device(value)
        if dev is not None and dev.type == "cuda":
            make_deterministic()
        self._device = dev
        self._device_name = None if dev is None else str(dev)
        self._staging.clear()
        self._copied.clear()
        self._auto.clear()  # auto's timings were measured on the previous device

    def device_report(self) -> dict:
        """For the run summary: the device, the path that ran and, on CUDA, the GPU's name, the
        CUDA version, whether deterministic kernels are on and whether TF32 is allowed (PyTorch's
        settings: convolutions through cuDNN by default, matrix products not)."""
        dev = self._device
        report: dict = {"device": "cpu" if dev is None else str(dev),
                        "path": PATH_HOST_VIEWS if dev is None else PATH_DEVICE_COPY,
                        "torch": torch.__version__}
        if dev is not None and dev.type == "cuda":
            report.update(name=torch.cuda.get_device_name(dev), cuda=torch.version.cuda,
                          deterministic=torch.are_deterministic_algorithms_enabled(),
                          tf32={"cudnn": torch.backends.cudnn.allow_tf32,
                                "matmul": torch.backends.cuda.matmul.allow_tf32})
        return report

    # ---- what decentlearn reads -----------------------------------------------------------

    @property
    def n_threads(self) -> int | None:
        """Threads of torch's intra-op pool (``torch.set_num_threads``, process-wide) and of
        decentlearn's kernels; None: decentlearn's default (ops.resolve_threads)."""
        return self._n_threads

    @n_threads.setter
    def n_threads(self, value: int | None) -> None:
        torch.set_num_threads(ops.resolve_threads(value))
        self._n_threads = value

    # CoCoFL's cost model (decentlearn.nn.cocofl.peer_costs) counts the MACs of native layers only:
    # a torch model reports its trained parameters and optimizer state, and zero MACs.
    layers: tuple = ()
    io_shapes: tuple = ()

    def layout(self) -> list[tuple[str, slice, tuple[int, ...]]]:
        """(name, slice of a row, per-peer shape) of every parameter, then every float buffer."""
        return list(self._layout)

    def frozen_cut(self, n_frozen: int) -> int:
        """Entries of a row in the first ``n_frozen`` layers with parameters (the whole row,
        buffers included, when all are frozen)."""
        n = len(self.param_layers)
        if isinstance(n_frozen, bool) or not isinstance(n_frozen, (int, np.integer)) \
                or not 0 <= n_frozen <= n:
            raise ValueError(f"n_frozen must be an int in [0, {n}], got {n_frozen!r}")
        return self.dim if n_frozen == n else self._layer_starts[n_frozen]

    def __repr__(self) -> str:
        return (f"TorchModel(spec={self.spec!r}, input_shape={self.input_shape}, "
                f"n_classes={self.n_classes}, dim={self.dim:,}, "
                f"module={type(self.module).__name__})")

    # ---- rows <-> module ------------------------------------------------------------------

    def init(self, seed: int, dtype: Any = np.float32) -> np.ndarray:
        """One initial row: every submodule's ``reset_parameters()`` (PyTorch's own
        initialisation) and ``reset_running_stats()`` under ``torch.manual_seed(seed)``, in a
        forked RNG state (the global torch RNG is left as it was). The module is reset too."""
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        if np.dtype(dtype) != np.float32:
            raise TypeError(f"dtype must be float32 for a torch model, got {np.dtype(dtype)}")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))
            for m in self.module.modules():
                if hasattr(m, "reset_parameters"):
                    m.reset_parameters()
                if hasattr(m, "reset_running_stats"):
                    m.reset_running_stats()
        return self.row_of_module()

    def row_of_module(self) -> np.ndarray:
        """The module's current parameters and float buffers as one row (dim,) float32 (e.g. to
        start every peer from pretrained weights)."""
        row = np.empty(self.dim, dtype=np.float32)
        tensors = self._module_tensors()
        for (_, sl, _), t in zip(self._layout, tensors):
            row[sl] = t.detach().reshape(-1).numpy()
        return row

    def load_row(self, row: np.ndarray) -> torch.nn.Module:
        """Copies one row (dim,) into the module's parameters and buffers; returns the module
        (e.g. to save the average model with ``torch.save(model.load_row(avg).state_dict())``)."""
        row = np.asarray(row, dtype=np.float32)
        if row.shape != (self.dim,):
            raise ValueError(f"row must have shape ({self.dim},), got {row.shape}")
        with torch.no_grad():
            for (_, sl, shape), t in zip(self._layout, self._module_tensors()):
                t.copy_(torch.from_numpy(row[sl].copy()).view(shape))
        return self.module

    def _module_tensors(self) -> list[torch.Tensor]:
        params = dict(self.module.named_parameters())
        buffers = dict(self.module.named_buffers())
        return [params[n] if i < self._n_params else buffers[n]
                for i, (n, _, _) in enumerate(self._layout)]

    # ---- checks ---------------------------------------------------------------------------

    def _check_params(self, params: object) -> np.ndarray:
        if not isinstance(params, np.ndarray):
            raise TypeError(f"params must be a numpy array, got {type(params).__name__}")
        if params.dtype != np.float32:
            raise TypeError(f"params must have dtype float32 (torch models), got {params.dtype}")
        if params.ndim != 2 or params.shape[1] != self.dim or params.shape[0] < 1:
            raise ValueError(f"params must have shape (n_peers, {self.dim}), got {params.shape}")
        if not params.flags.c_contiguous or not params.flags.writeable:
            params = np.array(params, order="C")  # torch.from_numpy needs a writable array
        return params

    def _check_x(self, x: object, n_peers: int) -> tuple[torch.Tensor, bool]:
        x, shared = checks.check_inputs(x, n_peers, self.input_shape)
        if x.shape[-len(self.input_shape) - 1] == 0:
            raise ValueError("x must hold at least one sample per peer, got batch size 0")
        x = np.require(x, dtype=np.float32, requirements=["C", "W"])
        return torch.from_numpy(x), shared

    def _check_y(self, y: object, shape: tuple[int, ...]) -> torch.Tensor:
        y = checks.check_labels(y, shape, self.n_classes)
        return torch.from_numpy(np.require(y, dtype=np.int64, requirements=["C", "W"]))

    # ---- passes ---------------------------------------------------------------------------

    def _views(self, arr: np.ndarray | torch.Tensor, trained_from: int | None,
               plain: bool = False) -> tuple[dict, dict, list]:
        """Per-tensor torch views of the columns of ``arr`` (G, dim): (params, buffers, the
        leaves to differentiate). Parameters starting at or after column ``trained_from``
        require grad. ``arr`` a host array: each view is its own ``from_numpy`` tensor, so an
        in-place update of a buffer never bumps the version counter of a parameter saved for
        backward; ``plain`` (G = 1): views of the one row without the peer axis, buffers
        included (a plain BatchNorm updates its statistics in place, straight into the row).
        ``arr`` a device tensor (the device path): parameters are detached column views of
        it; buffers are always contiguous copies, written back after the backward pass
        (``_store_buffers``), so nothing writes into ``arr`` while autograd holds its views."""
        n = arr.shape[0]
        host = isinstance(arr, np.ndarray)
        params: dict[str, torch.Tensor] = {}
        buffers: dict[str, torch.Tensor] = {}
        leaves: list[torch.Tensor] = []
        for i, (name, sl, shape) in enumerate(self._layout):
            if host:
                t = (torch.from_numpy(arr[0, sl]).view(shape) if plain
                     else torch.from_numpy(arr[:, sl]).view(n, *shape))
            else:
                t = arr[0, sl].view(shape) if plain else arr[:, sl].view(n, *shape)
            if i < self._n_params:
                if trained_from is not None and sl.start >= trained_from:
                    if not host:
                        t = t.detach()
                    t.requires_grad_(True)
                    leaves.append(t)
                params[name] = t
            else:
                # vmap's BatchNorm rule updates running statistics on a flattened (G * C) tensor,
                # which for a strided column view is a copy: the update would be lost. Buffers
                # (a few floats per channel) go through a contiguous copy, written back by
                # _store_buffers.
                buffers[name] = t if plain and host else t.clone()
        return params, buffers, leaves

    def _store_buffers(self, arr: np.ndarray | torch.Tensor, buffers: dict) -> None:
        for name, sl, _ in self._layout[self._n_params:]:
            if isinstance(arr, np.ndarray):
                arr[:, sl] = buffers[name].reshape(arr.shape[0], -1).numpy()
            else:
                arr[:, sl] = buffers[name].reshape(arr.shape[0], -1)

    # ---- the device path: buffers and copies ----------------------------------------------

    def _buffer(self, key: str, shape: tuple[int, ...], dtype: torch.dtype,
                pinned: bool = False) -> torch.Tensor:
        """A reusable tensor of ``shape`` on the model's device (``pinned``: in pinned host
        memory), a prefix of one flat buffer per key that grows to the largest size asked."""
        numel = math.prod(shape)
        k = (key, dtype, pinned)
        flat = self._staging.get(k)
        if flat is None or flat.numel() < numel:
            flat = (torch.empty(numel, dtype=dtype, pin_memory=True) if pinned
                    else torch.empty(numel, dtype=dtype, device=self._device))
            self._staging[k] = flat
        return flat[:numel].view(shape)

    def _upload(self, key: str, src: torch.Tensor) -> torch.Tensor:
        """``src`` (a host tensor) copied into the device buffer ``key``: through a pinned host
        buffer and an asynchronous copy on CUDA (the host copy is done when this returns, so
        ``src`` may change afterwards), else one copy (from pageable memory, which CUDA
        stages itself, when ``pin_memory`` is False)."""
        dst = self._buffer(key, tuple(src.shape), src.dtype)
        if self._device.type == "cuda" and self.pin_memory:
            done = self._copied.get(key)
            if done is not None:  # the previous asynchronous copy out of this pinned buffer
                done.synchronize()
            pin = self._buffer(key, tuple(src.shape), src.dtype, pinned=True)
            pin.copy_(src)
            dst.copy_(pin, non_blocking=True)
            if done is None:
                done = self._copied[key] = torch.cuda.Event()
            done.record(torch.cuda.current_stream(self._device))
        else:
            dst.copy_(src)
        return dst

    def _download(self, key: str, src: torch.Tensor, out: np.ndarray) -> None:
        """The device tensor ``src`` copied into the host array ``out`` (same shape), through a
        pinned buffer on CUDA; synchronous: ``out`` holds the values when this returns."""
        target = torch.from_numpy(out)
        if self._device.type == "cuda" and self.pin_memory:
            pin = self._buffer(key, tuple(src.shape), src.dtype, pinned=True)
            pin.copy_(src)
            target.copy_(pin)
        else:
            target.copy_(src)

    def _device_params(self, params: np.ndarray) -> torch.Tensor:
        return self._upload("params", torch.from_numpy(params))

    def _logits(self, params: dict, buffers: dict, x: torch.Tensor, shared: bool,
                plain: bool = False) -> torch.Tensor:
        """Logits (G, B, n_classes) of the peers whose views ``_views`` made; ``x`` is their
        (G, B, ...) batches, or one (B, ...) batch when ``shared`` or ``plain``."""
        module = self.module
        if plain:
            return functional_call(module, (params, buffers), (x,)).unsqueeze(0)

        def one_peer(p: dict, b: dict, xb: torch.Tensor) -> torch.Tensor:
            return functional_call(module, (p, b), (xb,))

        # randomness="different": a Dropout draws its own mask for every peer (from torch's
        # global generator, which decentlearn does not key by seed/step/peer).
        return vmap(one_peer, in_dims=(0, 0, None if shared else 0),
                    randomness="different")(params, buffers, x)

    @staticmethod
    def _spans(n_peers: int, group: int) -> list[tuple[int, int]]:
        return [(s, min(s + group, n_peers)) for s in range(0, n_peers, group)]

    def _eval_group(self, n_peers: int) -> int:
        """Group size of evaluation passes: the mode's, or under "auto" the one last chosen for a
        training pass of ``n_peers`` peers (all peers at once before any)."""
        if self._group == "batched":
            return n_peers
        if self._group == "auto":
            chosen = [v["group"] for v in self._auto.values() if v["peers"] == n_peers]
            return chosen[-1] if chosen else n_peers
        return int(self._group)

    def _eval_logits(self, params: np.ndarray, xt: torch.Tensor, shared: bool,
                     group: int) -> torch.Tensor:
        """Evaluation-mode logits (P, B, n_classes), no autograd, in passes of ``group`` peers."""
        out = []
        for s, e in self._spans(params.shape[0], group):
            plain = group == 1
            p, b, _ = self._views(params[s:e], None, plain)
            xs = xt if shared else (xt[s] if plain else xt[s:e])
            out.append(self._logits(p, b, xs, shared, plain))
        return out[0] if len(out) == 1 else torch.cat(out)

    def forward(self, params: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Logits (P, B, n_classes) float32 in evaluation mode, for per-peer batches (P, B, ...)
        or a shared batch (B, ...)."""
        params = self._check_params(params)
        xt, shared = self._check_x(x, params.shape[0])
        self.module.eval()
        group = self._eval_group(params.shape[0])
        with torch.no_grad():
            if self._device is None:
                return self._eval_logits(params, xt, shared, group).numpy()
            return self._eval_logits(self._device_params(params), self._upload("x", xt), shared,
                                     group).cpu().numpy()

    def loss_and_grad(self, params: np.ndarray, x: np.ndarray, y: np.ndarray,
                      grad: np.ndarray | None = None, step: int | None = None,
                      frozen: int | np.ndarray = 0) -> tuple[np.ndarray, np.ndarray]:
        """Mean softmax cross-entropy of each peer's batch (P,) float64 and its gradient (P, dim),
        written into ``grad`` when given (C-contiguous float32, fully overwritten; the buffers'
        entries are zero). The forward pass runs in training mode, so BatchNorm normalises with
        the batch statistics and updates each peer's running statistics in its row of
        ``params``. ``step`` is accepted for interface compatibility (torch models have no
        stochastic rounding). ``frozen`` (an int or one per peer): the first k layers with
        parameters get no gradient and autograd does not differentiate them (CoCoFL); unlike the
        native models they run in float32, not int8. All k frozen: a forward pass only."""
        params = self._check_params(params)
        n_peers = params.shape[0]
        xt, shared = self._check_x(x, n_peers)
        batch = xt.shape[0] if shared else xt.shape[1]
        yt = self._check_y(y, (batch,) if shared and np.ndim(y) == 1 else (n_peers, batch))
        if yt.ndim == 1:
            yt = yt.expand(n_peers, batch)
        grad = checks.check_grad(grad, params)
        checks.check_step(step)
        self.steps += 1
        counts = checks.check_frozen(frozen, n_peers, len(self.param_layers))
        if counts is None or (counts == counts[0]).all():
            k = 0 if counts is None else int(counts[0])
            return self._loss_and_grad(params, xt, shared, yt, grad, k), grad
        loss = np.empty(n_peers)
        for k in np.unique(counts):  # one batched pass per group of peers freezing k layers
            rows = np.flatnonzero(counts == k)
            sub = params[rows]
            g_rows = np.empty_like(sub)
            xs = xt if shared else xt[torch.from_numpy(rows)]
            loss[rows] = self._loss_and_grad(sub, xs, shared, yt[torch.from_numpy(rows)], g_rows,
                                             int(k))
            params[rows, self.params_dim:] = sub[:, self.params_dim:]  # updated statistics
            grad[rows] = g_rows
        return loss, grad

    def _loss_and_grad(self, params: np.ndarray, xt: torch.Tensor, shared: bool,
                       yt: torch.Tensor, grad: np.ndarray, n_frozen: int) -> np.ndarray:
        cut = self.frozen_cut(n_frozen)
        n_peers = params.shape[0]
        if n_frozen == len(self.param_layers):  # nothing trains: a forward pass
            self.module.eval()
            group = self._eval_group(n_peers)
            with torch.no_grad():
                if self._device is None:
                    logits = self._eval_logits(params, xt, shared, group)
                else:
                    logits = self._eval_logits(self._device_params(params),
                                               self._upload("x", xt), shared, group).cpu()
            grad.fill(0)
            return self._loss(logits, yt).double().numpy()
        if self._group == "batched":
            group = n_peers
        elif self._group == "auto":
            group = self._auto_group(params, xt, shared, yt, cut)
        else:
            group = min(int(self._group), n_peers)
        losses = self._train_passes(params, xt, shared, yt, grad, cut, group)
        grad[:, :cut] = 0
        grad[:, self.params_dim:] = 0
        return losses

    def _train_passes(self, params: np.ndarray, xt: torch.Tensor, shared: bool,
                      yt: torch.Tensor, grad: np.ndarray, cut: int, group: int) -> np.ndarray:
        """Training-mode forward and backward of peers ``[s, s + group)`` at a time (rows of
        ``params`` and ``grad`` are views, so buffers and gradients land in place); the
        gradients of columns >= ``cut`` are written into ``grad``, the others left alone."""
        if self._device is not None:
            return self._train_passes_device(params, xt, shared, yt, grad, cut, group)
        self.module.train()
        losses = np.empty(params.shape[0])
        trained = [(sl, shape) for _, sl, shape in self._layout[: self._n_params]
                   if sl.start >= cut]
        for s, e in self._spans(params.shape[0], group):
            plain = group == 1
            arr = params[s:e]
            p, b, leaves = self._views(arr, cut, plain)
            xs = xt if shared else (xt[s] if plain else xt[s:e])
            logits = self._logits(p, b, xs, shared, plain)
            if not plain:
                self._store_buffers(arr, b)  # the running statistics this pass updated
            loss = self._loss(logits, yt[s:e])
            grads = torch.autograd.grad(loss.sum(), leaves)  # peers independent: d(sum)/dx_i
            with torch.no_grad():
                for (sl, shape), g in zip(trained, grads):
                    gv = (torch.from_numpy(grad[s, sl]).view(shape) if plain
                          else torch.from_numpy(grad[s:e, sl]).view(e - s, *shape))
                    gv.copy_(g)
            losses[s:e] = loss.detach().double().numpy()
        return losses

    def _train_passes_device(self, params: np.ndarray, xt: torch.Tensor, shared: bool,
                             yt: torch.Tensor, grad: np.ndarray, cut: int,
                             group: int) -> np.ndarray:
        """``_train_passes`` on the model's device: the matrix, the batch and the labels are
        copied there once, each pass runs on column views of the copy, every gradient lands in
        one device (P, dim) buffer, and that buffer, the updated statistics and the losses
        come back in one copy each (the columns < ``cut`` of ``grad`` are overwritten too: the
        caller zeroes them)."""
        self.module.train()
        n_peers = params.shape[0]
        dparams = self._device_params(params)
        xd = self._upload("x", xt)
        yd = self._upload("y", yt)
        dgrad = self._buffer("grad", tuple(params.shape), torch.float32)
        losses = self._buffer("loss", (n_peers,), torch.float32)
        trained = [(sl, shape) for _, sl, shape in self._layout[: self._n_params]
                   if sl.start >= cut]
        for s, e in self._spans(n_peers, group):
            plain = group == 1
            arr = dparams[s:e]
            p, b, leaves = self._views(arr, cut, plain)
            xs = xd if shared else (xd[s] if plain else xd[s:e])
            loss = self._loss(self._logits(p, b, xs, shared, plain), yd[s:e])
            grads = torch.autograd.grad(loss.sum(), leaves)  # peers independent: d(sum)/dx_i
            with torch.no_grad():
                for (sl, shape), g in zip(trained, grads):
                    dgrad[s:e, sl].view(e - s, *shape).copy_(g.view(e - s, *shape))
                if b:  # the running statistics this pass updated, after autograd is done
                    self._store_buffers(arr, {k: v.view(e - s, -1) for k, v in b.items()})
                losses[s:e] = loss.detach()
        if cut < self.params_dim:
            self._download("grad", dgrad, grad)
        if self.params_dim < self.dim:
            stats = np.empty((n_peers, self.dim - self.params_dim), dtype=np.float32)
            self._download("stats", dparams[:, self.params_dim:], stats)
            params[:, self.params_dim:] = stats
        out = np.empty(n_peers, dtype=np.float32)
        self._download("loss", losses, out)
        return out.astype(np.float64)

    def _auto_group(self, params: np.ndarray, xt: torch.Tensor, shared: bool,
                    yt: torch.Tensor, cut: int) -> int:
        """The group size "auto" uses for this batch shape. On first use it times a training
        forward/backward of every candidate (P, ceil(P/2), ceil(P/4) and 1 peers per pass), all
        candidates in turn twice, keeping each one's best time (the first turn also warms up),
        on scratch copies of ``params`` and of the gradient with torch's RNG restored after: the
        measurement leaves no trace in the run's numbers. Ties go to the larger group."""
        n_peers = params.shape[0]
        key = (n_peers, tuple(xt.shape), shared, cut)
        if key not in self._auto:
            candidates = sorted({n_peers, math.ceil(n_peers / 2), math.ceil(n_peers / 4), 1},
                                reverse=True)
            seconds = {g: math.inf for g in candidates}
            scratch = params.copy()
            scratch_grad = np.empty_like(scratch)
            with torch.random.fork_rng(devices=[]):
                for _ in range(2):
                    for g in candidates:
                        t0 = time.perf_counter()
                        self._train_passes(scratch, xt, shared, yt, scratch_grad, cut, g)
                        seconds[g] = min(seconds[g], time.perf_counter() - t0)
            best = min(candidates, key=lambda g: (seconds[g], -g))
            self._auto[key] = {"peers": n_peers, "input_shape": list(xt.shape),
                               "shared_batch": shared, "group": best,
                               "chosen": _mode_name(best, n_peers),
                               "seconds": {_mode_name(g, n_peers): seconds[g]
                                           for g in candidates}}
        return self._auto[key]["group"]

    @staticmethod
    def _loss(logits: torch.Tensor, yt: torch.Tensor) -> torch.Tensor:
        n_peers, batch, n_classes = logits.shape
        ce = torch.nn.functional.cross_entropy(logits.reshape(-1, n_classes), yt.reshape(-1),
                                               reduction="none")
        return ce.view(n_peers, batch).mean(dim=1)

    def evaluate(self, params: np.ndarray, x: np.ndarray, y: np.ndarray,
                 batch_size: int = 1024) -> tuple[np.ndarray, np.ndarray]:
        """Accuracy (P,) and mean loss (P,) (float64) of every peer's model on a shared dataset
        ``x`` (N, *input_shape), ``y`` (N,), in evaluation mode (running statistics), in chunks
        of at most ``batch_size`` samples and ``4096 / P`` (``16384 / P`` on a CUDA device:
        memory stays bounded). On a device the counts and sums stay there until the end."""
        params = self._check_params(params)
        batch_size = _positive_int(batch_size, "batch_size")
        n_peers = params.shape[0]
        x = np.asarray(x)
        if x.ndim != len(self.input_shape) + 1 or x.shape[1:] != self.input_shape:
            raise ValueError(f"x must have shape (n_samples, *{self.input_shape}), got {x.shape}")
        n = x.shape[0]
        if n == 0:
            raise ValueError("x must hold at least one sample, got 0")
        yt = self._check_y(y, (n,))
        dev = self._device
        budget = (_EVAL_BUDGET_SAMPLES_CUDA if dev is not None and dev.type == "cuda"
                  else _EVAL_BUDGET_SAMPLES)
        chunk = max(1, min(batch_size, budget // n_peers))
        # Counts and sums stay where the logits are (no per-chunk copy back on a device).
        where = dev if dev is not None else torch.device("cpu")
        correct = torch.zeros(n_peers, dtype=torch.int64, device=where)
        loss_sum = torch.zeros(n_peers, dtype=torch.float64, device=where)
        self.module.eval()
        group = self._eval_group(n_peers)
        with torch.no_grad():
            src = params if dev is None else self._device_params(params)
            if dev is not None:
                yt = yt.to(dev)
            for start in range(0, n, chunk):
                xc, _ = self._check_x(x[start:start + chunk], n_peers)
                if dev is not None:
                    xc = self._upload("eval_x", xc)
                yc = yt[start:start + chunk]
                logits = self._eval_logits(src, xc, True, group)
                correct += (logits.argmax(dim=-1) == yc).sum(dim=1)
                loss_sum += self._loss(logits, yc.expand(n_peers, -1)).double() * yc.shape[0]
        return correct.cpu().numpy() / n, loss_sum.cpu().numpy() / n
