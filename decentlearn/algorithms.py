"""Decentralized learning algorithms, written once for every communication backend.

An algorithm owns the peers' parameter matrix (n_peers, dim) and their optimizer state, and runs one
communication round at a time: local steps on each peer's own minibatches (batched over peers by the
model) and exchanges through a communicator (``decentlearn.comm``). The simulator and the MPI runner
differ only in the communicator they pass in.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from decentlearn.optim import SGD
from decentlearn.registry import Registry

#: A function returning one minibatch per peer: x (P, B, *input_shape), y (P, B).
Sampler = Callable[[], tuple[np.ndarray, np.ndarray]]

_REGISTRY: Registry[type[Algorithm]] = Registry("algorithm")


def register(name: str):
    """Class decorator adding an algorithm to the registry under ``name``."""
    add = _REGISTRY.register(name)

    def deco(cls):
        cls.name = name
        return add(cls)
    return deco


def available() -> list[str]:
    return _REGISTRY.available()


def get(name: str) -> type[Algorithm]:
    """The registered algorithm class ``name`` (ValueError naming the closest name if unknown)."""
    return _REGISTRY.get(name)


def make(name: str, **kwargs) -> Algorithm:
    """Builds a registered algorithm, e.g. ``make("dpsgd", model=..., comm=..., ...)``."""
    return _REGISTRY.get(name)(**kwargs)


class Algorithm(ABC):
    """Base class: holds params (n_peers, dim) float32, the optimizer and a gradient buffer."""

    name = "base"

    def __init__(self, *, model, comm, optimizer: SGD, params: np.ndarray,
                 local_steps: int = 1, compressor=None, seed: int = 0,
                 frozen: np.ndarray | None = None) -> None:
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
    #: e.g. :class:`CliqueAveraging`; None leaves gradients as they are.
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

    # ---- checkpoints (decentlearn.checkpoint) ---------------------------------------------------

    #: Attributes that hold state between rounds (saved in checkpoints), added to those of the
    #: base classes; scratch buffers overwritten before use are not state.
    state_attrs: tuple[str, ...] = ("params",)
    #: State attributes that are the same on every process when a backend splits the peers
    #: (a server's model): never cut into per-peer rows, whatever their shape.
    replicated_attrs: tuple[str, ...] = ()
    #: Attributes holding objects with their own ``state_dict()`` (None or stateless ones skip).
    state_objects: tuple[str, ...] = ("optimizer", "compressor")

    @classmethod
    def _declared(cls, attr: str) -> tuple[str, ...]:
        names: list[str] = []
        for klass in reversed(cls.__mro__):
            for name in vars(klass).get(attr, ()):
                if name not in names:
                    names.append(name)
        return tuple(names)

    def state_dict(self) -> dict:
        """The algorithm's state at a round boundary: its ``state_attrs`` and the state of its
        ``state_objects`` (optimizer momentum, error-feedback residuals), as a flat dict."""
        from decentlearn import checkpoint
        out = checkpoint.state_of(self, self._declared("state_attrs"))
        for name in self._declared("state_objects"):
            obj = getattr(self, name, None)
            if hasattr(obj, "state_dict"):
                out.update(checkpoint.nest(name, obj.state_dict()))
        return out

    def load_state_dict(self, state: dict) -> None:
        """Restores what ``state_dict`` returned (CheckpointError on a mismatch)."""
        from decentlearn import checkpoint
        checkpoint.load_attrs(self, self._declared("state_attrs"), state, "algorithm.")
        for name in self._declared("state_objects"):
            obj = getattr(self, name, None)
            if hasattr(obj, "load_state_dict"):
                obj.load_state_dict(checkpoint.subtree(name, state))


@dataclass(frozen=True)
class _Variant:
    value: str

    def __post_init__(self):
        if self.value not in ("atc", "cta"):
            raise ValueError(f"variant must be 'atc' or 'cta', got {self.value!r}")


@register("dpsgd")
class DPSGD(Algorithm):
    """D-PSGD (Lian et al., NeurIPS 2017) with local steps.

    ``atc`` (adapt-then-combine, default): H local steps, then x <- W_t x.
    ``cta`` (combine-then-adapt, the paper's form): the gradient is taken at x_t, the peers mix
    x_t, and the step is applied to the mixed point, x_{t+1} = W_t x_t - lr * update(g(x_t));
    further local steps (H > 1) follow from there.

    With a compressor (other than "none"), peers send compressed model differences instead of
    models (DCD-PSGD, Tang et al., NeurIPS 2018). That scheme exists only in the combine-then-adapt
    form, which is then used whatever ``variant`` says: every peer keeps exact replicas of its
    neighbours' models x_t, computes x_half = W_t x_t - lr * update(g(x_t)) (then H - 1 more local
    steps), sends z = C(x_half - x_t), and every peer, itself included, applies x_{t+1} = x_t +
    decompress(z), so the replicas stay exact. It needs an unbiased, low-variance compressor;
    CHOCO-SGD handles aggressive ones.
    """

    def __init__(self, *, variant: str = "atc", **kwargs) -> None:
        super().__init__(**kwargs)
        self.variant = _Variant(variant).value
        self._half = np.empty_like(self.params) if self.compressed else None

    def round(self, sample: Sampler, t: int) -> np.ndarray:
        if self.compressed:
            return self._round_compressed(sample, t)
        losses = np.zeros(self.comm.n_peers)
        steps = self.local_steps
        if self.variant == "atc":
            for _ in range(steps):
                losses += self.local_step(sample)
            self.params = self.comm.mix(self.params, t)
        else:
            x, y = sample()
            step_losses, grad = self.gradient(self.params, x, y)
            losses += step_losses
            self.params = self.comm.mix(self.params, t)
            self.apply(self.params, grad)
            for _ in range(steps - 1):
                losses += self.local_step(sample)
        return losses / steps

    def _round_compressed(self, sample: Sampler, t: int) -> np.ndarray:
        x = self.params  # x_t, of which every neighbour holds an exact replica
        losses = np.zeros(self.comm.n_peers)
        inputs, labels = sample()
        step_losses, grad = self.gradient(x, inputs, labels)
        losses += step_losses
        self.params = half = self.comm.combine(x, t, out=self._half)
        self.apply(half, grad)
        for _ in range(self.local_steps - 1):
            losses += self.local_step(sample)
        self.params = x
        payload = self.compress(np.subtract(half, x, out=half), t)
        x += self.comm.exchange(self.compressor, payload, t)
        return losses / self.local_steps


@register("choco")
class CHOCO(Algorithm):
    """CHOCO-SGD (Koloskova, Stich and Jaggi, ICML 2019): compressed gossip with public estimates.

    Every peer keeps the public estimate x_hat_j of itself and its neighbours (identical copies,
    updated only from messages). Round t: H local steps give x_half; each peer sends
    q = C(x_half - x_hat) and everyone applies x_hat <- x_hat + q; then
    x <- x_half + gamma * sum_j w_ij (x_hat_j - x_hat_i), i.e. X <- X_half + gamma (W - I) X_hat.
    Works with any compressor, biased ones included; gamma (the consensus step size) must shrink
    as compression gets more aggressive. With "none" and gamma = 1 it is exactly D-PSGD (ATC).
    """

    state_attrs = ("x_hat",)

    def __init__(self, *, gamma: float = 1.0, variant: str = "atc", **kwargs) -> None:
        super().__init__(**kwargs)
        if not (isinstance(gamma, (int, float)) and 0 < gamma <= 1):
            raise ValueError(f"gamma must be a number in (0, 1], got {gamma!r}")
        if variant != "atc":
            raise ValueError("choco takes its local steps before communicating: variant must be "
                             f"'atc', got {variant!r}")
        if self.compressor is None:
            from decentlearn.compress import make
            self.compressor = make("none")
        self.gamma = float(gamma)
        self.x_hat = np.zeros_like(self.params)
        self._buf = np.empty_like(self.params)

    def round(self, sample: Sampler, t: int) -> np.ndarray:
        losses = np.zeros(self.comm.n_peers)
        for _ in range(self.local_steps):
            losses += self.local_step(sample)
        payload = self.compress(np.subtract(self.params, self.x_hat, out=self._buf), t)
        self.x_hat += self.comm.exchange(self.compressor, payload, t)
        mixed = self.comm.combine(self.x_hat, t, out=self._buf)
        mixed -= self.x_hat
        mixed *= np.float32(self.gamma)
        self.params += mixed
        return losses / self.local_steps


class CliqueAveraging:
    """Clique Averaging (Bellet, Kermarrec and Lavoie, D-Cliques, 2022): every peer's gradient is
    replaced, in place, by the average of the gradients of its clique, g_i <- (1/|C|) sum_{j in C}
    g_j, before the optimizer step, so momentum is applied on top of the clique's unbiased
    gradient. Set it as an algorithm's ``gradient_transform``; ``groups`` is the clique id of every
    peer (``Topology.groups`` of a d-cliques topology). Sums run in a fixed order (sorted peers),
    so results do not depend on threads.
    """

    def __init__(self, groups: np.ndarray) -> None:
        groups = np.asarray(groups)
        if groups.ndim != 1 or groups.size == 0 or not np.issubdtype(groups.dtype, np.integer):
            raise ValueError(f"groups must be a non-empty 1-D int array (a clique id per peer), "
                             f"got {groups.dtype} {groups.shape}")
        if groups.min() < 0:
            raise ValueError("groups must hold clique ids >= 0")
        self.groups = groups.astype(np.int64)
        self._order = np.argsort(self.groups, kind="stable")
        counts = np.bincount(self.groups)
        self._ids = np.flatnonzero(counts)
        self._starts = np.concatenate(([0], np.cumsum(counts[self._ids])[:-1]))
        self._inv_sizes = (1.0 / counts[self._ids]).astype(np.float32)[:, None]
        self._slot = np.searchsorted(self._ids, self.groups)

    def __repr__(self) -> str:
        return f"CliqueAveraging(cliques={self._ids.size}, peers={self.groups.size})"

    def __call__(self, grad: np.ndarray) -> None:
        if grad.ndim != 2 or grad.shape[0] != self.groups.size:
            raise ValueError(f"grad must have shape ({self.groups.size}, dim), got {grad.shape}")
        means = np.add.reduceat(grad[self._order], self._starts, axis=0)
        means *= self._inv_sizes
        grad[...] = means[self._slot]


# Algorithms in other modules register themselves on import (they import this module's base class).
from decentlearn import baselines, heterogeneity  # noqa: E402,F401
