"""What Adam, LARS and LAMB share: the ``Adaptive`` base (shape and dtype checks, per-peer state
with a ``(P,)`` step count, frozen prefixes), layer ``segments`` and per-row norms.

Their state is per peer — ``(P, D)`` moment arrays and a ``(P,)`` step count (bias corrections are
per row, so peers that step at different times under asynchrony or churn stay exact) — and every
step is a few whole-matrix NumPy operations over all peers' rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from decentlearn.optim.base import (
    Optimizer,
    OptimizerConfig,
    check_dtype,
    check_real,
    check_shape,
    frozen_groups,
)

__all__ = ["Adaptive", "check_segments", "row_norms"]


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


def row_norms(a: np.ndarray) -> np.ndarray:
    """Euclidean norm of each row, accumulated in float64."""
    return np.sqrt(np.einsum("ij,ij->i", a, a, dtype=np.float64))


class Adaptive(Optimizer):
    """Shared machinery of Adam, LARS and LAMB: shape/dtype checks, per-peer state, frozen
    prefixes (their update and state stay zero, as in SGD)."""

    name = ""
    #: Work arrays (``_tmp`` made on first use).
    scratch = ("_scratch", "_tmp")

    def __init__(self, config: OptimizerConfig, shape: tuple[int, int], dtype: Any = np.float32,
                 segments=None) -> None:
        if not isinstance(config, OptimizerConfig):
            raise TypeError(f"config must be an OptimizerConfig, got {type(config).__name__}")
        dtype = check_dtype(dtype)
        self.shape: tuple[int, int] = check_shape(shape)
        self.config = config
        self.name = config.name
        self.dtype: np.dtype = dtype
        self.segments = check_segments(segments, self.shape[1])
        self.lr = float(config.lr)
        #: Steps taken by each peer (bias corrections of Adam and LAMB are per row).
        self.steps = np.zeros(self.shape[0], dtype=np.int64)
        self._state: dict[str, np.ndarray] = {}
        self._scratch = np.empty(self.shape, dtype=self.dtype)
        self._tmp: np.ndarray | None = None  # a second (P, D) work array, made on first use

    def _work(self) -> np.ndarray:
        if self._tmp is None:
            self._tmp = np.empty(self.shape, dtype=self.dtype)
        return self._tmp

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

    def _begin(self, params, grad, lr, frozen):
        self._check(params, "params")
        self._check(grad, "grad")
        if not params.flags.writeable:
            raise ValueError("params must be writable")
        if lr is None:
            lr = self.lr
        elif check_real(lr, "lr") <= 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        mask = frozen_groups(frozen, self.shape) if frozen is not None else []
        self.steps += 1
        return float(lr), mask

    def _finish(self, params: np.ndarray, update: np.ndarray, mask) -> None:
        """params -= update, frozen prefixes (and their state) left at rest."""
        for rows, cut in mask:
            update[rows, :cut] = 0
            for name, a in self._state.items():
                a[rows, :cut] = 0
        params -= update

    def _moments(self, g: np.ndarray, beta1: float, beta2: float) -> tuple[np.ndarray, np.ndarray]:
        """m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2 (in place); returns (m, v)."""
        m, v = self._state["exp_avg"], self._state["exp_avg_sq"]
        tmp = self._work()  # no (P, D) temporaries per step
        m *= beta1
        m += np.multiply(g, 1.0 - beta1, out=tmp)
        v *= beta2
        np.square(g, out=tmp)
        tmp *= 1.0 - beta2
        v += tmp
        return m, v

    def _bias(self, beta: float) -> np.ndarray:
        """1 - beta^t per peer, as a (P, 1) column (t = that peer's step count)."""
        return (1.0 - np.power(beta, self.steps.astype(np.float64)))[:, None]
