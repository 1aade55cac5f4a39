"""Run state, declared once: which arrays an object keeps between rounds and how they are split
when a backend spreads the peers over processes.

An algorithm (or any stateful part of a run) declares its state as a tuple of :class:`StateSpec`:
``row`` arrays hold one row per peer (a process holding a block of peers keeps its rows),
``edge`` arrays one row per directed edge of a static graph in CSR order (a process keeps its
peers' in-edges), and ``replicated`` values are the same on every process (a server's model).
Checkpoints, the MPI backend's gather and scatter, churn (an offline peer's rows are frozen) and
the memory estimate all read that declaration, never the arrays' shapes. Work arrays that are
not state (overwritten before use) are declared apart, in a class's ``scratch`` names
(:func:`declared_scratch`), so that the memory estimate counts them too.

The state itself is a flat dict ``name -> value``: NumPy arrays and NumPy scalars (kept with their
dtype), or JSON values (None, bool, int, float, str, lists/dicts of those; a
``numpy.random.Generator`` is stored as its bit generator's state). Nested objects are flattened
with dotted prefixes (``algorithm.optimizer.momentum``): :func:`nest` and :func:`subtree`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from decentlearn.errors import CheckpointError

__all__ = ["CheckpointError", "StateSpec", "check_json", "declared_scratch", "edge",
           "is_array", "join_rows", "load_attrs",
           "nest", "replicated", "row", "state_of", "subtree", "take_rows"]

#: How a state entry is split between processes (see the module docstring).
Kind = Literal["row", "edge", "replicated"]


@dataclass(frozen=True)
class StateSpec:
    """One attribute of an object's state: its ``name`` and its ``kind`` ("row": one row per
    peer; "edge": one row per edge of the static graph, CSR order; "replicated": the same on
    every process, whatever its shape)."""

    name: str
    kind: Kind = "row"

    def __post_init__(self) -> None:
        if self.kind not in ("row", "edge", "replicated"):
            raise ValueError(f"kind must be 'row', 'edge' or 'replicated', got {self.kind!r}")


def row(*names: str) -> tuple[StateSpec, ...]:
    """Per-peer state: ``row("x_hat", "tracker")``."""
    return tuple(StateSpec(n, "row") for n in names)


def edge(*names: str) -> tuple[StateSpec, ...]:
    """Per-edge state (one row per directed edge of a static graph, CSR order)."""
    return tuple(StateSpec(n, "edge") for n in names)


def replicated(*names: str) -> tuple[StateSpec, ...]:
    """State that is the same on every process (a server's model, counters, scalars)."""
    return tuple(StateSpec(n, "replicated") for n in names)


def declared_scratch(obj: Any) -> dict[str, np.ndarray]:
    """The work arrays ``obj`` declares in the ``scratch`` attribute of its classes: buffers it
    keeps between rounds but overwrites before use, so they are not state (not checkpointed, not
    split between processes), yet they take memory, which the memory estimate counts. An
    attribute may hold an array, None (not made yet) or a list of arrays (``name.0``, ...)."""
    out: dict[str, np.ndarray] = {}
    for klass in type(obj).__mro__:
        for name in vars(klass).get("scratch", ()):
            value = obj.__dict__.get(name) if hasattr(obj, "__dict__") else None
            if isinstance(value, np.ndarray):
                out[name] = value
            elif isinstance(value, (list, tuple)):
                out.update({f"{name}.{i}": a for i, a in enumerate(value)
                            if isinstance(a, np.ndarray)})
    return out


# ---- state of objects ------------------------------------------------------------------------

def is_array(value: Any) -> bool:
    return isinstance(value, (np.ndarray, np.generic))


def check_json(value: Any, name: str) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value
    if isinstance(value, (list, tuple)):
        return [check_json(v, name) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: check_json(v, name) for k, v in value.items()}
    raise TypeError(f"state {name!r}: cannot checkpoint a {type(value).__name__} (expected an "
                    "array, a numpy scalar or a JSON value)")


def _capture(value: Any, name: str) -> Any:
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise TypeError(f"state {name!r}: object arrays cannot be checkpointed")
        return np.array(value, copy=True, order="C")
    if isinstance(value, np.generic):
        return value
    if isinstance(value, np.random.Generator):
        return {"__generator__": value.bit_generator.state}
    return check_json(value, name)


def state_of(obj: Any, names: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """The values of ``obj``'s attributes ``names`` (arrays copied), for ``state_dict()``."""
    return {name: _capture(getattr(obj, name), name) for name in names}


def load_attrs(obj: Any, names: tuple[str, ...] | list[str], state: dict[str, Any],
               where: str = "") -> None:
    """Sets ``obj``'s attributes ``names`` from ``state`` (the inverse of :func:`state_of`).

    An attribute that currently holds an array only takes an array of the same shape and dtype
    (CheckpointError otherwise, naming it); a Generator gets its bit generator's state back."""
    for name in names:
        label = f"{where}{name}"
        if name not in state:
            raise CheckpointError(f"checkpoint has no state {label!r}: it was written by another "
                                  "configuration or version")
        new, cur = state[name], getattr(obj, name)
        if isinstance(cur, np.random.Generator):
            if not (isinstance(new, dict) and "__generator__" in new):
                raise CheckpointError(f"checkpoint state {label!r} is not a generator state")
            try:
                cur.bit_generator.state = new["__generator__"]
            except (TypeError, ValueError, KeyError) as e:
                raise CheckpointError(f"checkpoint state {label!r}: {e}") from None
            continue
        if isinstance(cur, np.ndarray):
            if not isinstance(new, np.ndarray) and new is not None:
                raise CheckpointError(f"checkpoint state {label!r} must be an array, got "
                                      f"{type(new).__name__}")
            if isinstance(new, np.ndarray) and (new.shape != cur.shape or new.dtype != cur.dtype):
                raise CheckpointError(f"checkpoint state {label!r} has {new.dtype} {new.shape}, "
                                      f"this run expects {cur.dtype} {cur.shape}: the checkpoint "
                                      "belongs to another run")
        elif not _same_kind(cur, new):
            raise CheckpointError(f"checkpoint state {label!r} is a {type(new).__name__}, this "
                                  f"run holds a {type(cur).__name__} there")
        if isinstance(new, np.ndarray):
            new = np.array(new, copy=True, order="C")
        setattr(obj, name, new)


def _same_kind(cur: Any, new: Any) -> bool:
    """A JSON or scalar value fits the attribute's current one (None fits anything: state that
    is set lazily, such as gradient tracking's first tracker)."""
    if cur is None or new is None:
        return True
    if isinstance(cur, (bool, np.bool_)):
        return isinstance(new, (bool, np.bool_))
    if isinstance(cur, (int, float, np.number)):
        return isinstance(new, (int, float, np.number)) and not isinstance(new, (bool, np.bool_))
    if isinstance(cur, (list, tuple)):
        return isinstance(new, list)
    if isinstance(cur, (str, dict)):
        return isinstance(new, type(cur))
    return True


def nest(prefix: str, state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with every name prefixed by ``prefix.``."""
    return {f"{prefix}.{k}": v for k, v in state.items()}


def subtree(prefix: str, state: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``state`` under ``prefix.``, without the prefix (the inverse of nest)."""
    p = prefix + "."
    return {k[len(p):]: v for k, v in state.items() if k.startswith(p)}


# ---- per-peer rows (multi-process backends) ----------------------------------------------------

def take_rows(state: dict[str, Any], names: list[str], lo: int, hi: int) -> dict[str, Any]:
    """``state`` with the per-peer arrays ``names`` cut to rows ``lo:hi`` (a process's block)."""
    return {k: (np.ascontiguousarray(v[lo:hi]) if k in names else v) for k, v in state.items()}


def join_rows(parts: list[dict[str, Any]], names: list[str]) -> dict[str, Any]:
    """The inverse of :func:`take_rows`: the blocks' per-peer arrays ``names`` concatenated in
    the order of ``parts`` (peer order), every other entry from the first part."""
    out = dict(parts[0])
    for k in names:
        out[k] = np.concatenate([p[k] for p in parts], axis=0)
    return out
