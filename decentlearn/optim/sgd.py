"""SGD with optional (Nesterov) momentum and L2 weight decay, as PyTorch's ``torch.optim.SGD``
(dampening 0): ``g = grad + wd * params``; ``buf = momentum * buf + g``; ``g = g + momentum * buf``
with Nesterov, else ``g = buf``; ``params -= lr * g``.

For float32 one ``step`` is one pass of a C kernel over the whole matrix (``ops.sgd_step``, rows
split over threads, frozen prefixes honoured, bit-identical to its NumPy reference in
decentlearn/_reference/nn.py for any thread count); float64 runs a handful of in-place
whole-matrix NumPy operations with a single reusable scratch array.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from decentlearn import ops
from decentlearn.optim.base import (
    Optimizer,
    OptimizerConfig,
    check_dtype,
    check_real,
    check_shape,
    frozen_groups,
    register,
)

__all__ = ["SGD", "SGDConfig"]


@dataclass(frozen=True)
class SGDConfig:
    """Hyperparameters of SGD with optional (Nesterov) momentum and L2 weight decay."""

    lr: float
    momentum: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        if check_real(self.lr, "lr") <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if not 0.0 <= check_real(self.momentum, "momentum") < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum}")
        if not isinstance(self.nesterov, (bool, np.bool_)):
            raise TypeError(f"nesterov must be a bool, got {type(self.nesterov).__name__}")
        if self.nesterov and self.momentum == 0:
            raise ValueError("nesterov=True requires momentum > 0, got momentum=0")
        if check_real(self.weight_decay, "weight_decay") < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")

    @classmethod
    def from_config(cls, config: OptimizerConfig) -> SGDConfig:
        """SGD's hyperparameters among an ``OptimizerConfig``'s."""
        return cls(lr=config.lr, momentum=config.momentum, nesterov=config.nesterov,
                   weight_decay=config.weight_decay)


@register("sgd")
class SGD(Optimizer):
    """SGD over a ``(P, D)`` parameter matrix, one row per peer.

    ``momentum_buffer`` is the ``(P, D)`` buffer (zeros until the first step, as in PyTorch where
    the first step sets it to the gradient); the simulator may average or reset it in place. It
    is allocated lazily by NumPy (``np.zeros``), so with ``momentum=0`` it never takes memory
    unless written to.
    """

    #: Work array of the non-fused paths (made on first use).
    scratch = ("_scratch",)

    @classmethod
    def check_config(cls, config: OptimizerConfig) -> None:
        SGDConfig.from_config(config)  # validates

    @classmethod
    def from_config(cls, config: OptimizerConfig, shape: tuple[int, int], *,
                    dtype: Any = np.float32, n_threads: int | None = None,
                    segments=None) -> SGD:
        return cls(SGDConfig.from_config(config), shape, dtype=dtype, n_threads=n_threads)

    def __init__(self, config: SGDConfig, shape: tuple[int, int], dtype: Any = np.float32,
                 n_threads: int | None = None) -> None:
        if not isinstance(config, SGDConfig):
            raise TypeError(f"config must be an SGDConfig, got {type(config).__name__}")
        self.shape: tuple[int, int] = check_shape(shape)
        self.dtype: np.dtype = check_dtype(dtype)
        self.config = config
        self._buf = np.zeros(self.shape, dtype=self.dtype)
        self._scratch: np.ndarray | None = None
        #: Threads of the float32 step kernel (None: decentlearn's default).
        self.n_threads = ops.resolve_threads(n_threads) if n_threads is not None else None
        #: Learning rate of the next steps (a schedule sets it each round; ``step(lr=)`` overrides).
        self.lr = float(config.lr)

    def state_arrays(self) -> dict[str, np.ndarray]:
        """The per-peer state, each array with one row (or entry) per peer: what churn resets,
        offline peers keep, and asynchronous gossip slices by peer."""
        return {"momentum": self._buf}

    @property
    def momentum_buffer(self) -> np.ndarray:
        """The (P, D) momentum buffer (modify it in place; it cannot be rebound)."""
        return self._buf

    def reset(self) -> None:
        """Zero the momentum buffer (as if no step had been taken)."""
        self._buf.fill(0)

    def state_dict(self) -> dict:
        """The momentum buffer, for checkpoints (decentlearn.runner.checkpoint)."""
        return {"momentum": self._buf.copy()}

    def load_state_dict(self, state: dict) -> None:
        from decentlearn.errors import CheckpointError
        buf = state.get("momentum")
        if not isinstance(buf, np.ndarray) or buf.shape != self.shape or buf.dtype != self.dtype:
            raise CheckpointError(f"checkpoint's optimizer momentum must be {self.dtype} "
                                  f"{self.shape}, got {getattr(buf, 'dtype', type(buf).__name__)} "
                                  f"{getattr(buf, 'shape', '')}")
        self._buf[...] = buf

    def __repr__(self) -> str:
        return f"SGD({self.config!r}, shape={self.shape}, dtype={self.dtype})"

    def step(self, params: np.ndarray, grad: np.ndarray, lr: float | None = None,
             frozen: np.ndarray | None = None) -> None:
        """One SGD step in place on ``params``; ``grad`` is read only. ``lr`` overrides the
        configured learning rate for this step (schedules). ``frozen`` (P,) ints: the leading
        ``frozen[p]`` entries of row p do not move and keep a zero momentum buffer (frozen
        layers, decentlearn.nn.cocofl); masked per distinct value, not per peer."""
        self._check(params, "params")
        self._check(grad, "grad")
        if not params.flags.writeable:
            raise ValueError("params must be writable")
        cfg = self.config
        if lr is None:
            lr = self.lr
        elif check_real(lr, "lr") <= 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        if (self.dtype == np.float32 and params.flags.c_contiguous and grad.flags.c_contiguous
                and not np.may_share_memory(params, grad)):
            cut = None
            if frozen is not None:
                frozen_groups(frozen, self.shape)  # validates
                cut = np.asarray(frozen, dtype=np.int64)
            ops.sgd_step(params, grad, self._buf, lr, cfg.momentum, cfg.weight_decay,
                         cfg.nesterov, cut, n_threads=self.n_threads)
            return
        mask = None
        if frozen is not None:
            mask = frozen_groups(frozen, self.shape)
        if self._scratch is None:
            self._scratch = np.empty(self.shape, dtype=self.dtype)
        s = self._scratch
        mu, wd = cfg.momentum, cfg.weight_decay

        def zero_frozen(a: np.ndarray) -> None:
            for rows, cut in mask or ():
                a[rows, :cut] = 0

        g = grad
        if wd != 0:
            g = np.multiply(params, wd, out=s)
            g += grad
        if mu != 0:
            buf = self._buf
            buf *= mu
            buf += g
            zero_frozen(buf)
            if cfg.nesterov:
                if g is s:
                    zero_frozen(s)
                    # s holds g, so g + mu * buf would need a second (P, D) scratch array;
                    # apply lr * g and lr * mu * buf as two updates instead (same sum, rounded
                    # once more).
                    s *= lr
                    params -= s
                    np.multiply(buf, lr * mu, out=s)
                    params -= s
                    return
                np.multiply(buf, mu, out=s)
                s += g
                g = s
            else:
                g = buf
        np.multiply(g, lr, out=s)
        zero_frozen(s)
        params -= s
