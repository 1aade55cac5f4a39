"""The optimizer base class, ``OptimizerConfig``, the optimizer registry and ``make``.

Each optimizer lives in its own module of this package and registers itself with
``@register(name)``; decentlearn.optim imports them all. An optimizer class declares what belongs
to it: the checks of its hyperparameters (``check_config``), how it is built from an
``OptimizerConfig`` (``from_config``) and its customary ``eps`` (``default_eps``).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from decentlearn.checks import check_array
from decentlearn.registry import Registry
from decentlearn.state import declared_scratch

__all__ = ["Optimizer", "OptimizerConfig", "available", "check_dtype", "check_real",
           "check_shape", "frozen_groups", "make", "register"]

_REGISTRY: Registry[type[Optimizer]] = Registry("optimizer")

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def register(name: str):
    """Class decorator: ``@register("adam")`` makes ``OptimizerConfig(name="adam")`` valid and
    ``make`` build the class with its ``from_config``. A class may register several names."""
    return _REGISTRY.register(name)


def available() -> list[str]:
    """The registered optimizer names, sorted (``OptimizerConfig.name``, ``--optimizer``)."""
    return _REGISTRY.available()


def check_real(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return value


def check_shape(shape: object) -> tuple[int, int]:
    """``(n_peers, dim)`` as a tuple of two ints >= 0 (ValueError otherwise)."""
    if (
        not isinstance(shape, tuple)
        or len(shape) != 2
        or not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in shape)
        or min(shape) < 0
    ):
        raise ValueError(f"shape must be a tuple (n_peers, dim) of ints >= 0, got {shape!r}")
    return (int(shape[0]), int(shape[1]))


def check_dtype(dtype: Any) -> np.dtype:
    """float32 or float64 as a numpy dtype (TypeError otherwise)."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"dtype must be float32 or float64, got {dtype!r}") from exc
    if dt not in FLOAT_DTYPES:
        raise TypeError(f"dtype must be float32 or float64, got {dt}")
    return dt


def frozen_groups(frozen: object, shape: tuple[int, int]) -> list[tuple[np.ndarray, int]]:
    """(rows, cut) for every distinct non-zero value of a (P,) array of frozen prefixes."""
    f = np.asarray(frozen)
    if f.dtype.kind not in "iu" or f.shape != (shape[0],):
        raise ValueError(f"frozen must be a ({shape[0]},) int array, got {f.dtype} {f.shape}")
    if f.size and (f.min() < 0 or f.max() > shape[1]):
        raise ValueError(f"frozen must hold prefix lengths in [0, {shape[1]}], got values in "
                         f"[{f.min()}, {f.max()}]")
    return [(np.flatnonzero(f == c), int(c)) for c in np.unique(f) if c]


class Optimizer(ABC):
    """Base class: updates a ``(P, D)`` parameter matrix in place, one row per peer, with per-peer
    state (``state_arrays``: one row or entry per peer), checkpointed by ``state_dict``."""

    #: ``eps`` of an ``OptimizerConfig`` whose ``eps`` is None.
    default_eps: float = 1e-8
    #: How ``check_config``'s messages name ``OptimizerConfig.momentum``.
    momentum_name: str = "beta1 (--momentum)"

    config: Any
    shape: tuple[int, int]
    dtype: np.dtype
    #: Learning rate of the next steps (a schedule sets it each round; ``step(lr=)`` overrides).
    lr: float

    @classmethod
    def check_config(cls, config: OptimizerConfig) -> None:
        """Raises TypeError/ValueError when ``config``'s hyperparameters do not suit this
        optimizer (``OptimizerConfig`` calls it on construction)."""
        if check_real(config.lr, "lr") <= 0:
            raise ValueError(f"lr must be > 0, got {config.lr}")
        if check_real(config.weight_decay, "weight_decay") < 0:
            raise ValueError(f"weight_decay must be >= 0, got {config.weight_decay}")
        if config.nesterov:
            raise ValueError(f"nesterov applies to sgd only, not optimizer {config.name!r}")
        if not 0.0 <= check_real(config.momentum, "momentum") < 1.0:
            raise ValueError(f"{cls.momentum_name} must be in [0, 1), got {config.momentum}")
        if not 0.0 <= check_real(config.beta2, "beta2") < 1.0:
            raise ValueError(f"beta2 must be in [0, 1), got {config.beta2}")
        if config.eps is not None and check_real(config.eps, "eps") <= 0:
            raise ValueError(f"eps must be > 0, got {config.eps}")
        if check_real(config.trust_coefficient, "trust_coefficient") <= 0:
            raise ValueError(f"trust_coefficient must be > 0, got {config.trust_coefficient}")

    @classmethod
    def from_config(cls, config: OptimizerConfig, shape: tuple[int, int], *,
                    dtype: Any = np.float32, n_threads: int | None = None,
                    segments=None) -> Optimizer:
        """The optimizer of ``config`` for a ``(P, D)`` parameter matrix (see ``make``)."""
        return cls(config, shape, dtype=dtype, segments=segments)

    def _check(self, a: object, name: str) -> np.ndarray:
        return check_array(a, name, self.dtype, self.shape)

    @abstractmethod
    def state_arrays(self) -> dict[str, np.ndarray]:
        """The per-peer state, each array with one row (or entry) per peer: what churn resets,
        offline peers keep, and asynchronous gossip slices by peer."""

    def state_kinds(self) -> dict[str, str]:
        """``state_dict()``'s entries by kind: every entry holds one row per peer."""
        return dict.fromkeys(self.state_arrays(), "row")

    def scratch_arrays(self) -> dict[str, np.ndarray]:
        """The work arrays (the class's ``scratch`` names), for the memory estimate."""
        return declared_scratch(self)

    @property
    @abstractmethod
    def momentum_buffer(self) -> np.ndarray | None:
        """The ``(P, D)`` momentum (first moment) buffer, if the optimizer has one."""

    @abstractmethod
    def reset(self) -> None:
        """Zero the state (as if no step had been taken)."""

    @abstractmethod
    def state_dict(self) -> dict:
        """The state, for checkpoints (decentlearn.runner.checkpoint)."""

    @abstractmethod
    def load_state_dict(self, state: dict) -> None:
        """Restores ``state_dict()``'s output (CheckpointError if it does not fit)."""

    @abstractmethod
    def step(self, params: np.ndarray, grad: np.ndarray, lr: float | None = None,
             frozen: np.ndarray | None = None) -> None:
        """One step in place on ``params``; ``grad`` is read only. ``lr`` overrides the
        configured learning rate for this step (schedules). ``frozen`` (P,) ints: the leading
        ``frozen[p]`` entries of row p do not move and their state stays zero (frozen layers,
        decentlearn.nn.cocofl)."""


@dataclass(frozen=True)
class OptimizerConfig:
    """Which optimizer and its hyperparameters. ``momentum`` is SGD's and LARS's momentum and
    Adam's/LAMB's beta1; ``eps`` None takes the optimizer's customary value (1e-8 for Adam/AdamW,
    1e-6 for LAMB, 1e-9 for LARS); ``trust_coefficient`` is LARS's eta."""

    name: str = "sgd"
    lr: float = 0.05
    momentum: float = 0.9
    nesterov: bool = False
    weight_decay: float = 0.0
    beta2: float = 0.999
    eps: float | None = None
    trust_coefficient: float = 0.001

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or self.name not in _REGISTRY:
            raise ValueError(f"optimizer must be one of {', '.join(available())}, "
                             f"got {self.name!r}")
        _REGISTRY.get(self.name).check_config(self)

    @property
    def eps_value(self) -> float:
        if self.eps is not None:
            return float(self.eps)
        return _REGISTRY.get(self.name).default_eps


def make(config: OptimizerConfig, shape: tuple[int, int], *, dtype: Any = np.float32,
         n_threads: int | None = None, segments=None) -> Optimizer:
    """The optimizer of ``config`` for a ``(P, D)`` parameter matrix. ``segments``: the
    ``(start, stop)`` column ranges of the layers (LARS/LAMB trust ratios; default one segment)."""
    if not isinstance(config, OptimizerConfig):
        raise TypeError(f"config must be an OptimizerConfig, got {type(config).__name__}")
    return _REGISTRY.get(config.name).from_config(config, shape, dtype=dtype,
                                                  n_threads=n_threads, segments=segments)
