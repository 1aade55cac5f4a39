"""Argument checks shared by packages of different layers (the model interface in decentlearn.nn,
the optimizers in decentlearn.optim): one wording for one mistake. Depends on numpy only."""

from __future__ import annotations

import numpy as np

__all__ = ["check_array"]


def check_array(a: object, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """``a`` itself, once it is a numpy array of ``dtype`` (TypeError) and ``shape``
    (ValueError)."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(a).__name__}")
    if a.dtype != dtype:
        raise TypeError(f"{name} must have dtype {dtype}, got {a.dtype}")
    if a.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {a.shape}")
    return a
