"""What Adam, LARS and LAMB share: the ``Adaptive`` base (shape and dtype checks, per-peer state
with a ``(P,)`` step count, frozen prefixes) and layer ``segments``.

Their state is per peer — ``(P, D)`` moment arrays and a ``(P,)`` step count (bias corrections are
per row, so peers that step at different times under asynchrony or churn stay exact). For float32
one step is one C kernel over all peers' rows (``ops.adam_step``, ``ops.lamb_step``,
``ops.lars_step``: rows or blocks of columns split over threads, the same bits for any thread
count); float64, and operands the kernels do not take, run their NumPy twins
(decentlearn/_reference/optim.py), which do the same operations in the same order.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import numpy as np

from decentlearn import ops
from decentlearn._reference import optim as reference
from decentlearn.optim.base import (
    Optimizer,
    OptimizerConfig,
    check_dtype,
    check_real,
    check_shape,
    frozen_groups,
)

__all__ = ["Adaptive", "check_segments"]


def check_segments(segments, dim: int) -> tuple[tuple[int, int], ...]:
    if segments is None:
        return ((0, dim),) if dim else ()
    try:
        pairs = [(int(a), int(b)) for a, b in segments]
    except (TypeError, ValueError):
        raise TypeError(f"segments must be (start, stop) pairs of ints, got {segments!r}") from None
    end = 0
    for a, b in pairs:
        if a != end or b <= a:
            raise ValueError(f"segments must tile [0, {dim}) in order with non-empty ranges, got "
                             f"{pairs!r}")
        end = b
    if end != dim:
        raise ValueError(f"segments must tile [0, {dim}), they end at {end}")
    return tuple(pairs)


class Adaptive(Optimizer):
    """Shared machinery of Adam, LARS and LAMB: shape/dtype checks, per-peer state, frozen
    prefixes (their update and state stay zero, as in SGD), the choice of kernels."""

    name = ""

    @classmethod
    def from_config(cls, config: OptimizerConfig, shape: tuple[int, int], *,
                    dtype: Any = np.float32, n_threads: int | None = None,
                    segments=None) -> Adaptive:
        return cls(config, shape, dtype=dtype, segments=segments, n_threads=n_threads)

    def __init__(self, config: OptimizerConfig, shape: tuple[int, int], dtype: Any = np.float32,
                 segments=None, n_threads: int | None = None) -> None:
        if not isinstance(config, OptimizerConfig):
            raise TypeError(f"config must be an OptimizerConfig, got {type(config).__name__}")
        dtype = check_dtype(dtype)
        self.shape: tuple[int, int] = check_shape(shape)
        self.config = config
        self.name = config.name
        self.dtype: np.dtype = dtype
        self.segments = check_segments(segments, self.shape[1])
        #: The layers' column bounds 0 = b[0] < ... < b[S] = D (LARS's and LAMB's trust ratios).
        self.bounds = np.array([0] + [b for _, b in self.segments], dtype=np.int64)
        #: Threads of the float32 step kernels (None: decentlearn's default).
        self.n_threads = ops.resolve_threads(n_threads) if n_threads is not None else None
        self.lr = float(config.lr)
        #: Steps taken by each peer (bias corrections of Adam and LAMB are per row).
        self.steps = np.zeros(self.shape[0], dtype=np.int64)
        self._state: dict[str, np.ndarray] = {}

    def state_arrays(self) -> dict[str, np.ndarray]:
        return {**self._state, "steps": self.steps}

    @property
    def momentum_buffer(self) -> np.ndarray | None:
        """The first moment (Adam, LAMB) or momentum (LARS) buffer."""
        return self._state.get("exp_avg", self._state.get("momentum"))

    def reset(self) -> None:
        for a in self.state_arrays().values():
            a.fill(0)

    def state_dict(self) -> dict:
        """Moments and step counts, for checkpoints (decentlearn.runner.checkpoint)."""
        return {name: a.copy() for name, a in self.state_arrays().items()}

    def load_state_dict(self, state: dict) -> None:
        from decentlearn.errors import CheckpointError
        for name, a in self.state_arrays().items():
            v = state.get(name)
            if not isinstance(v, np.ndarray) or v.shape != a.shape or v.dtype != a.dtype:
                raise CheckpointError(
                    f"checkpoint's optimizer {name} must be {a.dtype} {a.shape}, got "
                    f"{getattr(v, 'dtype', type(v).__name__)} {getattr(v, 'shape', '')}")
            if name == "steps" and v.size and v.min() < 0:
                raise CheckpointError("checkpoint's optimizer step counts must be >= 0")
            a[...] = v

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config!r}, shape={self.shape}, dtype={self.dtype})"

    def step(self, params: np.ndarray, grad: np.ndarray, lr: float | None = None,
             frozen: np.ndarray | None = None) -> None:
        self._check(params, "params")
        self._check(grad, "grad")
        if not params.flags.writeable:
            raise ValueError("params must be writable")
        if lr is None:
            lr = self.lr
        elif check_real(lr, "lr") <= 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        if frozen is not None:
            frozen_groups(frozen, self.shape)  # validates
            frozen = np.asarray(frozen, dtype=np.int64)
        self.steps += 1
        fits = (self.dtype == np.float32 and not np.may_share_memory(params, grad)
                and all(a.flags.c_contiguous and a.flags.aligned for a in (params, grad)))
        self._step(ops if fits else reference, params, grad, float(lr), frozen)

    @abstractmethod
    def _step(self, kernels: Any, params: np.ndarray, grad: np.ndarray, lr: float,
              frozen: np.ndarray | None) -> None:
        """The step with ``kernels``: decentlearn.ops (float32) or its NumPy twins, which take
        the same arguments (each optimizer calls its own kernel)."""
