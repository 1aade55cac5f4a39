"""A data set given as arrays: ``ArrayDataset(x_train, y_train, x_test, y_test)``.

``simulate(dataset=ArrayDataset(...))`` or ``RunConfig(dataset=ArrayDataset(...))`` runs on any
arrays: features of any shape ``(n, *input_shape)`` (flat vectors for ``mlp`` and ``linear``,
``(n, C, H, W)`` images for ``cnn``) and integer class labels. They are checked once (one-line
errors naming the argument), copied to float32 / int64 C-contiguous arrays that are then
read-only, and used as given (no standardization: scale them yourself).

A run's configuration is saved to config.toml, summary.json and checkpoints as text, so an
array data set is recorded by its :attr:`~ArrayDataset.spec`, ``arrays:NAME:DIGEST``, where
DIGEST is the first 16 hex digits of a SHA-256 over the four arrays' dtypes, shapes and bytes,
the number of classes and the groups. A checkpoint's fingerprint includes it: resuming
(``Simulator.from_checkpoint(path, config)``) needs the very same arrays. The CLI and config
files cannot load such a spec (the arrays live in Python); they say so in one line.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

from decentlearn.data.datasets import Dataset

__all__ = ["ARRAYS", "ArrayDataset"]

#: The spec prefix of an array data set (not a registered data set: nothing can load it by name).
ARRAYS = "arrays"


def _features(value: object, argname: str) -> np.ndarray:
    if not hasattr(value, "__array__") and not isinstance(value, (list, tuple)):
        raise TypeError(f"{argname} must be a numpy array of shape (n_samples, *features), got "
                        f"{type(value).__name__}")
    a = np.asarray(value)
    if a.dtype.kind not in "fiu":
        raise TypeError(f"{argname} must hold real numbers (float or int dtype), got dtype "
                        f"{a.dtype}")
    if a.ndim < 2:
        raise ValueError(f"{argname} must have shape (n_samples, *features) with at least 2 "
                         f"dimensions, got shape {a.shape}")
    if a.shape[0] == 0:
        raise ValueError(f"{argname} must hold at least one sample, got shape {a.shape}")
    if 0 in a.shape[1:]:
        raise ValueError(f"{argname} must have a non-empty sample shape, got shape {a.shape}")
    out = np.array(a, dtype=np.float32, order="C", copy=True)
    if not np.isfinite(out).all():
        raise ValueError(f"{argname} must hold finite values (in float32), found nan or inf")
    return out


def _labels(value: object, argname: str, n: int, xname: str) -> np.ndarray:
    if not hasattr(value, "__array__") and not isinstance(value, (list, tuple)):
        raise TypeError(f"{argname} must be a numpy array of integer class labels, got "
                        f"{type(value).__name__}")
    a = np.asarray(value)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{argname} must hold integer class labels (int dtype), got dtype "
                        f"{a.dtype}")
    if a.ndim != 1:
        raise ValueError(f"{argname} must be 1-D (one label per sample), got shape {a.shape}")
    if len(a) != n:
        raise ValueError(f"{argname} must have one label per row of {xname} ({n}), got {len(a)}")
    if a.min() < 0:
        raise ValueError(f"{argname} must hold labels >= 0, got {int(a.min())}")
    return np.array(a, dtype=np.int64, order="C", copy=True)


class ArrayDataset(Dataset):
    """A :class:`~decentlearn.data.Dataset` made from arrays (see the module docstring).

    ``x_train`` (n, *input_shape) and ``x_test`` (m, *input_shape): real numbers, finite;
    ``y_train`` (n,) and ``y_test`` (m,): integer labels in [0, n_classes); ``n_classes``: default
    ``max(label) + 1``, at least 2; ``name``: a label for reports (no ':'); ``groups``: optional
    int (n,), the natural owner of each training sample (the ``natural`` partition). TypeError or
    ValueError, one line naming the argument, for anything else."""

    def __init__(self, x_train, y_train, x_test, y_test, *, n_classes: int | None = None,
                 name: str = "arrays", groups=None) -> None:
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.+-]+", name):
            raise ValueError(f"name must be a non-empty str of letters, digits, '_', '.', '+' "
                             f"or '-', got {name!r}")
        xtr = _features(x_train, "x_train")
        xte = _features(x_test, "x_test")
        if xte.shape[1:] != xtr.shape[1:]:
            raise ValueError(f"x_test must have the sample shape of x_train {xtr.shape[1:]}, got "
                             f"{xte.shape[1:]}")
        ytr = _labels(y_train, "y_train", len(xtr), "x_train")
        yte = _labels(y_test, "y_test", len(xte), "x_test")
        top = int(max(ytr.max(), yte.max()))
        if n_classes is None:
            n_classes = max(2, top + 1)
        elif isinstance(n_classes, bool) or not isinstance(n_classes, (int, np.integer)) \
                or n_classes < 2:
            raise ValueError(f"n_classes must be an integer >= 2, got {n_classes!r}")
        n_classes = int(n_classes)
        for argname, y in (("y_train", ytr), ("y_test", yte)):
            if int(y.max()) >= n_classes:
                raise ValueError(f"{argname} must hold labels in [0, n_classes={n_classes}), "
                                 f"got {int(y.max())}")
        g = None
        if groups is not None:
            g = np.asarray(groups)
            if g.dtype.kind not in "iu" or g.ndim != 1:
                raise TypeError(f"groups must be a 1-D integer array, got dtype {g.dtype} and "
                                f"shape {g.shape}")
            if len(g) != len(ytr):
                raise ValueError(f"groups must have one entry per training sample "
                                 f"({len(ytr)}), got {len(g)}")
            g = np.array(g, dtype=np.int64, order="C", copy=True)
        arrays = [xtr, ytr, xte, yte] + ([g] if g is not None else [])
        for a in arrays:
            a.flags.writeable = False  # the digest names these very values
        super().__init__(name=name, x_train=xtr, y_train=ytr, x_test=xte, y_test=yte,
                         n_classes=n_classes, input_shape=tuple(int(s) for s in xtr.shape[1:]),
                         groups=g)
        h = hashlib.sha256()
        for a in arrays:
            h.update(f"{a.dtype.str}{a.shape};".encode())
            h.update(memoryview(a).cast("B"))
        h.update(f"n_classes={n_classes}".encode())
        object.__setattr__(self, "digest", h.hexdigest())

    @property
    def spec(self) -> str:
        """How configurations record it: ``arrays:NAME:DIGEST`` (16 hex digits of the SHA-256)."""
        return f"{ARRAYS}:{self.name}:{self.digest[:16]}"

    def __deepcopy__(self, memo) -> ArrayDataset:
        return self  # immutable (read-only arrays): copies of a RunConfig share it

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ArrayDataset) and other.digest == self.digest

    def __hash__(self) -> int:
        return hash(self.digest)

    def __repr__(self) -> str:
        return (f"ArrayDataset(name={self.name!r}, train={self.n_train}, test={self.n_test}, "
                f"input_shape={self.input_shape}, n_classes={self.n_classes}, "
                f"digest={self.digest[:16]!r})")
