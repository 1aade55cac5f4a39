"""Optimizers that update every peer's parameters at once. The state of an optimizer for P peers is
one ``(P, dim)`` array (the momentum buffer), so it can be averaged or reset by the simulator like
the parameters themselves. For float32 one ``step`` is one pass of a C kernel over the whole matrix
(``ops.sgd_step``, rows split over threads, frozen prefixes honoured, bit-identical to its NumPy
reference in decentlearn/_reference/nn.py for any thread count); float64 runs a handful of in-place
whole-matrix NumPy operations with a single reusable scratch array.
``SGD`` follows PyTorch's ``torch.optim.SGD`` (dampening 0): ``g = grad + wd * params``;
``buf = momentum * buf + g``; ``g = g + momentum * buf`` with Nesterov, else ``g = buf``;
``params -= lr * g``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from decentlearn import ops

__all__ = ["SGD", "SGDConfig"]

_FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _check_real(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return value


@dataclass(frozen=True)
class SGDConfig:
    """Hyperparameters of SGD with optional (Nesterov) momentum and L2 weight decay."""

    lr: float
    momentum: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        if _check_real(self.lr, "lr") <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if not 0.0 <= _check_real(self.momentum, "momentum") < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum}")
        if not isinstance(self.nesterov, (bool, np.bool_)):
            raise TypeError(f"nesterov must be a bool, got {type(self.nesterov).__name__}")
        if self.nesterov and self.momentum == 0:
            raise ValueError("nesterov=True requires momentum > 0, got momentum=0")
        if _check_real(self.weight_decay, "weight_decay") < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")


class SGD:
    """SGD over a ``(P, D)`` parameter matrix, one row per peer.

    ``momentum_buffer`` is the ``(P, D)`` buffer (zeros until the first step, as in PyTorch where
    the first step sets it to the gradient); the simulator may average or reset it in place. It
    is allocated lazily by NumPy (``np.zeros``), so with ``momentum=0`` it never takes memory
    unless written to.
    """

    def __init__(self, config: SGDConfig, shape: tuple[int, int], dtype: Any = np.float32,
                 n_threads: int | None = None) -> None:
        if not isinstance(config, SGDConfig):
            raise TypeError(f"config must be an SGDConfig, got {type(config).__name__}")
        if (
            not isinstance(shape, tuple)
            or len(shape) != 2
            or not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in shape)
            or min(shape) < 0
        ):
            raise ValueError(f"shape must be a tuple (n_peers, dim) of ints >= 0, got {shape!r}")
        try:
            dt = np.dtype(dtype)
        except TypeError as exc:
            raise TypeError(f"dtype must be float32 or float64, got {dtype!r}") from exc
        if dt not in _FLOAT_DTYPES:
            raise TypeError(f"dtype must be float32 or float64, got {dt}")
        self.config = config
        self.shape: tuple[int, int] = (int(shape[0]), int(shape[1]))
        self.dtype: np.dtype = dt
        self._buf = np.zeros(self.shape, dtype=dt)
        self._scratch: np.ndarray | None = None
        #: Threads of the float32 step kernel (None: decentlearn's default).
        self.n_threads = ops.resolve_threads(n_threads) if n_threads is not None else None

    @property
    def momentum_buffer(self) -> np.ndarray:
        """The (P, D) momentum buffer (modify it in place; it cannot be rebound)."""
        return self._buf

    def reset(self) -> None:
        """Zero the momentum buffer (as if no step had been taken)."""
        self._buf.fill(0)

    def state_dict(self) -> dict:
        """The momentum buffer, for checkpoints (decentlearn.checkpoint)."""
        return {"momentum": self._buf.copy()}

    def load_state_dict(self, state: dict) -> None:
        from decentlearn.checkpoint import CheckpointError
        buf = state.get("momentum")
        if not isinstance(buf, np.ndarray) or buf.shape != self.shape or buf.dtype != self.dtype:
            raise CheckpointError(f"checkpoint's optimizer momentum must be {self.dtype} "
                                  f"{self.shape}, got {getattr(buf, 'dtype', type(buf).__name__)} "
                                  f"{getattr(buf, 'shape', '')}")
        self._buf[...] = buf

    def __repr__(self) -> str:
        return f"SGD({self.config!r}, shape={self.shape}, dtype={self.dtype})"

    def _check(self, a: object, name: str) -> np.ndarray:
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{name} must be a numpy array, got {type(a).__name__}")
        if a.dtype != self.dtype:
            raise TypeError(f"{name} must have dtype {self.dtype}, got {a.dtype}")
        if a.shape != self.shape:
            raise ValueError(f"{name} must have shape {self.shape}, got {a.shape}")
        return a

    def step(self, params: np.ndarray, grad: np.ndarray, lr: float | None = None,
             frozen: np.ndarray | None = None) -> None:
        """One SGD step in place on ``params``; ``grad`` is read only. ``lr`` overrides the
        configured learning rate for this step (schedules). ``frozen`` (P,) ints: the leading
        ``frozen[p]`` entries of row p do not move and keep a zero momentum buffer (frozen
        layers, decentlearn.cocofl); masked per distinct value, not per peer."""
        self._check(params, "params")
        self._check(grad, "grad")
        if not params.flags.writeable:
            raise ValueError("params must be writable")
        cfg = self.config
        if lr is None:
            lr = cfg.lr
        elif _check_real(lr, "lr") <= 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        if (self.dtype == np.float32 and params.flags.c_contiguous and grad.flags.c_contiguous
                and not np.may_share_memory(params, grad)):
            cut = None
            if frozen is not None:
                _frozen_groups(frozen, self.shape)  # validates
                cut = np.asarray(frozen, dtype=np.int64)
            ops.sgd_step(params, grad, self._buf, lr, cfg.momentum, cfg.weight_decay,
                         cfg.nesterov, cut, n_threads=self.n_threads)
            return
        mask = None
        if frozen is not None:
            mask = _frozen_groups(frozen, self.shape)
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


def _frozen_groups(frozen: object, shape: tuple[int, int]) -> list[tuple[np.ndarray, int]]:
    """(rows, cut) for every distinct non-zero value of a (P,) array of frozen prefixes."""
    f = np.asarray(frozen)
    if f.dtype.kind not in "iu" or f.shape != (shape[0],):
        raise ValueError(f"frozen must be a ({shape[0]},) int array, got {f.dtype} {f.shape}")
    if f.size and (f.min() < 0 or f.max() > shape[1]):
        raise ValueError(f"frozen must hold prefix lengths in [0, {shape[1]}], got values in "
                         f"[{f.min()}, {f.max()}]")
    return [(np.flatnonzero(f == c), int(c)) for c in np.unique(f) if c]
