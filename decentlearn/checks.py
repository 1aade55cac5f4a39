"""Argument checks shared by packages of different layers (the model interface in decentlearn.nn,
the optimizers in decentlearn.optim, the PyTorch adapter in decentlearn.torch): one wording for
one mistake. decentlearn.nn.Model and decentlearn.torch.TorchModel raise the same errors for the
same mistakes. Depends on numpy only."""

from __future__ import annotations

import numpy as np

__all__ = ["check_array", "check_frozen", "check_grad", "check_inputs", "check_labels", "check_step"]


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

def check_inputs(x: object, n_peers: int, input_shape: tuple[int, ...]) -> tuple[np.ndarray, bool]:
    """x as an array of real numbers shaped (n_peers, batch, *input_shape), or (batch,
    *input_shape) shared by all peers; returns it and whether it is shared."""
    x = np.asarray(x)
    if x.dtype.kind not in "biuf":
        raise TypeError(f"x must hold real numbers, got dtype {x.dtype}")
    k = len(input_shape)
    if x.ndim == k + 2 and x.shape[2:] == input_shape:
        if x.shape[0] != n_peers:
            raise ValueError(f"x has {x.shape[0]} peer batches but params has {n_peers} peers")
        return x, False
    if x.ndim == k + 1 and x.shape[1:] == input_shape:
        return x, True
    raise ValueError(f"x must have shape (n_peers, batch, *{input_shape}) or "
                     f"(batch, *{input_shape}), got {x.shape}")


def check_labels(y: object, shape: tuple[int, ...], n_classes: int) -> np.ndarray:
    """y as an integer array of ``shape`` with labels in [0, n_classes)."""
    y = np.asarray(y)
    if y.dtype.kind not in "iu":
        raise TypeError(f"y must have an integer dtype, got {y.dtype}")
    if y.shape != shape:
        raise ValueError(f"y must have shape {shape}, got {y.shape}")
    if y.size:
        lo, hi = int(y.min()), int(y.max())
        if lo < 0 or hi >= n_classes:
            raise ValueError(f"y must hold labels in [0, {n_classes}), got values in [{lo}, {hi}]")
    return y


def check_grad(grad: object, params: np.ndarray) -> np.ndarray:
    """The gradient buffer: a new array like ``params`` when ``grad`` is None, else ``grad``
    checked (same dtype and shape, writable, C-contiguous, not overlapping ``params``)."""
    if grad is None:
        return np.empty(params.shape, dtype=params.dtype)
    check_array(grad, "grad", params.dtype, params.shape)
    if not grad.flags.c_contiguous or not grad.flags.writeable:
        raise ValueError("grad must be a writable C-contiguous array")
    if np.may_share_memory(grad, params):
        raise ValueError("grad must not share memory with params")
    return grad


def check_step(step: object) -> None:
    """``step``: None or a non-negative int."""
    if step is not None and (isinstance(step, bool) or not isinstance(step, (int, np.integer))
                             or step < 0):
        raise ValueError(f"step must be None or a non-negative int, got {step!r}")


def check_frozen(frozen: object, n_peers: int, n_layers: int) -> np.ndarray | None:
    """CoCoFL's frozen-layer counts (an int or one per peer, each in [0, n_layers]) as an
    (n_peers,) array, or None when no peer freezes anything."""
    if type(frozen) is int and frozen == 0:  # the usual case, every round: nothing to check
        return None
    counts = np.asarray(frozen)
    if counts.dtype.kind not in "iu" or counts.ndim > 1:
        raise TypeError(f"frozen must be an int or a 1-D int array, got {frozen!r}")
    if counts.ndim == 1 and counts.shape != (n_peers,):
        raise ValueError(f"frozen must have shape ({n_peers},), got {counts.shape}")
    if counts.size and (counts.min() < 0 or counts.max() > n_layers):
        raise ValueError(f"frozen must hold layer counts in [0, {n_layers}], got values in "
                         f"[{counts.min()}, {counts.max()}]")
    return None if not counts.any() else np.broadcast_to(counts, (n_peers,))
