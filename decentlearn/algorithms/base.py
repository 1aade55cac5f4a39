"""The algorithm base class, its registry and what every algorithm declares about itself.

An algorithm owns the peers' parameter matrix (n_peers, dim) and their optimizer state, and runs one
communication round at a time: local steps on each peer's own minibatches (batched over peers by the
model) and exchanges through a communicator (``decentlearn.comm``). The in-process and MPI backends
differ only in the communicator they pass in.

Each algorithm says once, on its class, everything the rest of the package needs to know:

* ``Options``: a frozen dataclass of its own hyperparameters (validated in ``__post_init__``);
  ``RunConfig.options``, the CLI flags and their help group, and config files read it;
* ``state``: its state between rounds as :class:`~decentlearn.state.StateSpec` entries (per-peer
  rows, per-edge rows, replicated values), which checkpoints, the MPI backend, churn and the memory
  estimate read; ``state_objects`` names attributes whose objects have their own state;
* its constraints: ``mixing`` (the stochastic kinds of W it handles), ``simulated_time`` (the
  network model can time its messages), ``async_form`` (its event-driven form, if any);
* ``report()``: its own figures for summary.json (server bytes, bytes saved, ...), and
  ``columns()``: those that join every metrics.csv row.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from decentlearn.registry import Registry
from decentlearn.state import (StateSpec, declared_scratch, load_attrs, nest, row, state_of,
                               subtree)

__all__ = ["Algorithm", "NoOptions", "Sampler", "available", "get", "make", "mixing_hints",
           "option_fields", "register"]

#: A function returning one minibatch per peer: x (P, B, *input_shape), y (P, B).
Sampler = Callable[[], tuple[np.ndarray, np.ndarray]]

REGISTRY: Registry[type[Algorithm]] = Registry("algorithm")


def register(name: str):
    """Class decorator adding an algorithm to the registry under ``name``."""
    add = REGISTRY.register(name)

    def deco(cls):
        cls.name = name
        return add(cls)
    return deco


def available() -> list[str]:
    """The registered algorithm names, sorted."""
    return REGISTRY.available()


def get(name: str) -> type[Algorithm]:
    """The registered algorithm class ``name`` (ValueError naming the closest name if unknown)."""
    return REGISTRY.get(name)


def option_fields() -> dict[str, tuple[dataclasses.Field, list[str]]]:
    """Every option of every registered algorithm: name -> (its ``Options`` field, the
    algorithms that take it), in registry order. Config keys, CLI flags and the error naming an
    option's owner all read this."""
    found: dict[str, tuple[dataclasses.Field, list[str]]] = {}
    for name in available():
        for f in dataclasses.fields(get(name).Options):
            found.setdefault(f.name, (f, []))[1].append(name)
    return found


def mixing_hints() -> dict[str, str]:
    """For each kind of mixing matrix other than "doubly" ("column", "row"), the algorithms to use
    on a topology of that kind: those that declare the kind first, then the others that handle
    some kind of non-doubly-stochastic W (a per-round graph builds the weights its algorithm
    declares, e.g. ``epidemic:S`` row weights for epidemic, column weights for pushsum)."""
    kinds: dict[str, list[str]] = {}
    for name in available():
        for kind in get(name).mixing:
            kinds.setdefault(kind, []).append(name)
    other = sorted({n for k, names in kinds.items() if k != "doubly" for n in names})
    return {k: " or ".join(f"--algorithm {n}" for n in names + [n for n in other
                                                                 if n not in names])
            for k, names in kinds.items() if k != "doubly"}


def make(name: str, **kwargs) -> Algorithm:
    """Builds a registered algorithm, e.g. ``make("dpsgd", model=..., comm=..., ...)``."""
    return REGISTRY.get(name)(**kwargs)


@dataclass(frozen=True)
class NoOptions:
    """An algorithm without hyperparameters of its own."""


def option(default: Any, help: str, *, metavar: str | None = None) -> Any:
    """A field of an algorithm's ``Options``: its default and its one-line CLI help (the flag is
    ``--`` + the field name with ``-`` for ``_``)."""
    return dataclasses.field(default=default, metadata={"help": help, "metavar": metavar})


def check_fraction(value: Any, name: str, *, closed: bool = False) -> float:
    """``value`` as a float in (0, 1] ([0, 1] when ``closed``), else ValueError naming ``name``."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and value <= 1 and (
        value >= 0 if closed else value > 0)
    if not ok:
        raise ValueError(f"{name} must be a number in {'[0, 1]' if closed else '(0, 1]'}, "
                         f"got {value!r}")
    return float(value)


def check_positive_int(value: Any, name: str) -> int:
    """``value`` as an int >= 1, else ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return value


class Algorithm(ABC):
    """Base class: holds params (n_peers, dim) float32, the optimizer and a gradient buffer."""

    name = "base"

    #: The algorithm's own hyperparameters (a frozen dataclass); the constructor takes its fields
    #: as keyword arguments of the same names.
    Options: ClassVar[type] = NoOptions
    #: The kinds of mixing matrix it handles: "doubly" (doubly stochastic), "column", "row".
    mixing: ClassVar[tuple[str, ...]] = ("doubly",)
    #: False when it sends messages the network model does not time (server rounds, replies).
    simulated_time: ClassVar[bool] = True
    #: Its event-driven asynchronous form (``--async``), if it has one.
    async_form: ClassVar[type[Algorithm] | None] = None
    #: RunConfig fields of the smallest run that suits it (the common tests and examples start
    #: from it): e.g. ``{"momentum": 0.0}`` for an algorithm that takes plain gradient steps.
    example: ClassVar[dict[str, Any]] = {}
    #: The backends that run it ("inprocess", "mpi"); others refuse it in one line.
    backends: ClassVar[tuple[str, ...]] = ("inprocess", "mpi")
    #: True when its messages go through a server, whose bytes (``comm.server_bytes_sent``) are
    #: then reported apart and added to the run's byte totals.
    has_server: ClassVar[bool] = False
    #: State kept between rounds, added to that of the base classes (scratch buffers overwritten
    #: before use are not state).
    state: ClassVar[tuple[StateSpec, ...]] = row("params")
    #: Attributes holding objects with their own ``state_dict()`` and ``state_kinds()`` (None or
    #: stateless ones skip).
    state_objects: ClassVar[tuple[str, ...]] = ("optimizer", "compressor")
    #: Work arrays kept between rounds but overwritten before use: not state, but memory (the
    #: memory estimate counts them; see decentlearn.state.declared_scratch).
    scratch: ClassVar[tuple[str, ...]] = ("_grad",)

    def __init__(self, *, model, comm, optimizer, params: np.ndarray,
                 local_steps: int = 1, compressor=None, seed: int = 0,
                 frozen: np.ndarray | None = None,
                 sample_counts: np.ndarray | None = None) -> None:
        if not isinstance(local_steps, int) or local_steps < 1:
            raise ValueError(f"local_steps must be an int >= 1, got {local_steps!r}")
        if params.ndim != 2 or params.shape != (comm.n_peers, model.dim):
            raise ValueError(f"params must have shape ({comm.n_peers}, {model.dim}), "
                             f"got {params.shape}")
        if params.dtype != np.float32 or not params.flags.c_contiguous:
            raise ValueError("params must be a C-contiguous float32 array")
        self.model = model
        self.comm = comm
        self.optimizer = optimizer
        self.params = params
        self.local_steps = local_steps
        self.compressor = compressor
        self.seed = seed
        self._grad = np.empty_like(params)
        #: Layers with parameters that each peer freezes (CoCoFL, decentlearn.nn.cocofl), and the
        #: matching prefix of its parameter row that the optimizer must not move.
        self.frozen: np.ndarray | None = None
        self._frozen_cut: np.ndarray | None = None
        if frozen is not None:
            frozen = np.asarray(frozen, dtype=np.int64)
            if frozen.shape != (comm.n_peers,):
                raise ValueError(f"frozen must have shape ({comm.n_peers},), got {frozen.shape}")
            cuts = {int(k): model.frozen_cut(int(k)) for k in np.unique(frozen)}
            self.frozen = frozen
            self._frozen_cut = np.array([cuts[int(k)] for k in frozen], dtype=np.int64)
        #: Training samples held by every peer of the run (global ids, int64 (n_global,)), as the
        #: data partition gives them; None when unknown (every peer then counts the same). The
        #: server baselines weight their clients by them (FedAvg's n_k / n).
        self.sample_counts: np.ndarray | None = None
        if sample_counts is not None:
            counts = np.asarray(sample_counts)
            n_global = getattr(comm, "n_global", comm.n_peers)
            if (counts.shape != (n_global,) or not np.issubdtype(counts.dtype, np.integer)
                    or (counts < 0).any()):
                raise ValueError(f"sample_counts must be {n_global} non-negative ints (one per "
                                 f"peer of the run), got {counts.dtype} of shape {counts.shape}")
            self.sample_counts = counts.astype(np.int64)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(peers={self.comm.n_peers}, dim={self.model.dim})"

    def compress(self, X: np.ndarray, t: int):
        """Every peer's message for round t (row r is peer ``comm.peer0 + r``: 0 in one process,
        the rank's first peer on MPI), keyed by the run's seed."""
        return self.compressor.compress(X, seed=self.seed, step=t,
                                        peer0=getattr(self.comm, "peer0", 0),
                                        n_threads=self.comm.n_threads)

    @property
    def compressed(self) -> bool:
        return self.compressor is not None and self.compressor.spec != "none"

    #: Optional map applied in place to every (n_peers, dim) gradient before the optimizer step,
    #: e.g. :class:`decentlearn.comm.CliqueAveraging`; None leaves gradients as they are.
    gradient_transform: Callable[[np.ndarray], None] | None = None

    def gradient(self, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple:
        """(losses, grad) of every peer at ``params``; frozen layers get no gradient."""
        frozen = 0 if self.frozen is None else self.frozen
        losses, grad = self.model.loss_and_grad(params, x, y, grad=self._grad, frozen=frozen)
        if self.gradient_transform is not None:
            self.gradient_transform(grad)
        return losses, grad

    def apply(self, params: np.ndarray, grad: np.ndarray) -> None:
        """The optimizer's step in place on ``params``, frozen prefixes left untouched."""
        self.optimizer.step(params, grad, frozen=self._frozen_cut)

    def local_step(self, sample: Sampler) -> np.ndarray:
        """One SGD step on every peer's next minibatch; returns the peers' losses (P,)."""
        x, y = sample()
        losses, grad = self.gradient(self.params, x, y)
        self.apply(self.params, grad)
        return losses

    @abstractmethod
    def round(self, sample: Sampler, t: int) -> np.ndarray:
        """Runs communication round ``t``; returns the mean loss of each peer over its steps."""

    def report(self) -> dict:
        """The algorithm's own figures for summary.json (empty by default): bytes sent by a server,
        bytes saved, counters. Values are JSON; byte counts are totals over all peers."""
        return {}

    def columns(self) -> dict:
        """The algorithm's own columns of every metrics.csv row (empty by default): numbers that
        change during the run, such as SkewScout's bytes saved. Called on the process that
        writes the results only, so the values must be replicated state (no collective)."""
        return {}

    # ---- state (checkpoints, MPI gather/scatter, churn) -----------------------------------------

    @classmethod
    def declared_state(cls) -> tuple[StateSpec, ...]:
        """``state`` of the class and its bases, each name once (the most derived kind wins)."""
        specs: dict[str, StateSpec] = {}
        for klass in reversed(cls.__mro__):
            for spec in vars(klass).get("state", ()):
                specs[spec.name] = spec
        return tuple(specs.values())

    @classmethod
    def declared_objects(cls) -> tuple[str, ...]:
        names: list[str] = []
        for klass in reversed(cls.__mro__):
            for name in vars(klass).get("state_objects", ()):
                if name not in names:
                    names.append(name)
        return tuple(names)

    def state_kinds(self) -> dict[str, str]:
        """Every entry of ``state_dict()`` -> its kind ("row", "edge" or "replicated"): the
        declared attributes, and the entries of the state objects as each object declares them
        (its ``state_kinds()``; an algorithm that holds an object in another role, such as a
        server's compressor, overrides this to say so)."""
        kinds = {s.name: s.kind for s in self.declared_state()}
        for name in self.declared_objects():
            obj = getattr(self, name, None)
            if hasattr(obj, "state_dict"):
                if not hasattr(obj, "state_kinds"):
                    raise TypeError(f"{type(self).__name__}.{name} ({type(obj).__name__}) has "
                                    "state but does not declare its kinds (state_kinds())")
                own = obj.state_kinds()
                missing = set(obj.state_dict()) - set(own)
                if missing:
                    raise TypeError(f"{type(self).__name__}.{name} ({type(obj).__name__}) does "
                                    f"not declare the kind of its state {sorted(missing)}")
                kinds.update({f"{name}.{key}": own[key] for key in obj.state_dict()})
        return kinds

    def _kept(self, name: str, shape: tuple[int, ...], k: int | None = None,
              dtype=np.float32) -> np.ndarray:
        """The work array ``self.<name>`` (its entry ``k`` when it is a list) of ``shape`` and
        ``dtype``, made on first use and reused from round to round, so that no round faults in
        the pages of fresh arrays (declare ``name`` in ``scratch``)."""
        held = getattr(self, name, None)
        buf = held if k is None else held[k]
        if buf is None or buf.shape != shape or buf.dtype != dtype:
            buf = np.empty(shape, dtype=dtype)
            if k is None:
                setattr(self, name, buf)
            else:
                held[k] = buf
        return buf

    def _spare_for(self, X: np.ndarray) -> np.ndarray:
        """A matrix of X's shape and dtype, not X, to write X's successor into: the one kept in
        ``self._spare`` (the matrix the last swap replaced; declare ``_spare`` in ``scratch``)
        when it fits, else a new one."""
        spare = getattr(self, "_spare", None)
        if spare is None or spare.shape != X.shape or spare.dtype != X.dtype or spare is X:
            spare = np.empty_like(X)
        return spare

    def scratch_arrays(self) -> dict[str, np.ndarray]:
        """The work arrays of the algorithm and of its state objects (``scratch``), by name."""
        out = declared_scratch(self)
        for name in self.declared_objects():
            obj = getattr(self, name, None)
            if hasattr(obj, "scratch_arrays"):
                out.update(nest(name, obj.scratch_arrays()))
        return out

    def state_dict(self) -> dict:
        """The algorithm's state at a round boundary: its declared ``state`` and the state of its
        ``state_objects`` (optimizer momentum, error-feedback residuals), as a flat dict."""
        out = state_of(self, [s.name for s in self.declared_state()])
        for name in self.declared_objects():
            obj = getattr(self, name, None)
            if hasattr(obj, "state_dict"):
                out.update(nest(name, obj.state_dict()))
        return out

    def load_state_dict(self, state: dict) -> None:
        """Restores what ``state_dict`` returned (CheckpointError on a mismatch)."""
        load_attrs(self, [s.name for s in self.declared_state()], state, "algorithm.")
        for name in self.declared_objects():
            obj = getattr(self, name, None)
            if hasattr(obj, "load_state_dict"):
                obj.load_state_dict(subtree(name, state))


def require_atc(name: str, variant: str) -> None:
    """ValueError unless ``variant`` is "atc" (algorithms with one fixed order of steps)."""
    if variant != "atc":
        raise ValueError(f"{name} has one fixed order of steps and exchanges: variant must be "
                         f"'atc', got {variant!r}")


def require_uncompressed(alg: Algorithm) -> None:
    """ValueError if ``alg`` was given a compressor (it exchanges float32 vectors)."""
    if alg.compressor is not None and alg.compressor.spec != "none":
        raise ValueError(f"{alg.name} exchanges float32 vectors: compress must be 'none', got "
                         f"{alg.compressor.spec!r}")


def require_one_step(alg: Algorithm) -> None:
    """ValueError unless ``alg`` takes one local step per round."""
    if alg.local_steps != 1:
        raise ValueError(f"{alg.name} takes one gradient step per exchange: local_steps must be "
                         f"1, got {alg.local_steps}")


def require_unfrozen(alg: Algorithm) -> None:
    """ValueError if ``alg`` was given frozen layers (CoCoFL)."""
    if alg.frozen is not None:
        raise ValueError(f"{alg.name} does not support frozen layers (cocofl)")


def none_if_identity(compressor):
    """None for no compressor or the identity ("none"), else the compressor."""
    return None if compressor is None or compressor.spec == "none" else compressor
