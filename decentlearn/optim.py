"""Optimizers that update every peer's parameters at once. The state of an optimizer for P peers is
one ``(P, dim)`` array (the momentum buffer), so it can be averaged or reset by the simulator like
the parameters themselves. For float32 one ``step`` is one pass of a C kernel over the whole matrix
(``ops.sgd_step``, rows split over threads, frozen prefixes honoured, bit-identical to its NumPy
reference in decentlearn/_reference/nn.py for any thread count); float64 runs a handful of in-place
whole-matrix NumPy operations with a single reusable scratch array.
``SGD`` follows PyTorch's ``torch.optim.SGD`` (dampening 0): ``g = grad + wd * params``;
``buf = momentum * buf + g``; ``g = g + momentum * buf`` with Nesterov, else ``g = buf``;
``params -= lr * g``.

Beside SGD, ``Adam``/``AdamW`` (Kingma & Ba; Loshchilov & Hutter), ``LARS`` (You et al. 2017) and
``LAMB`` (You et al. 2019), the optimizers of large-batch training, update every peer's row at
once with whole-matrix NumPy operations; their state is per peer — ``(P, D)`` moment arrays and a
``(P,)`` step count (bias corrections are per row, so peers that step at different times under
asynchrony or churn stay exact). LARS and LAMB scale each layer's update by a trust ratio computed
per peer and per layer (``segments``: the parameter tensors of the model's layout). ``make``
builds any of them from an ``OptimizerConfig``; ``LRSchedule`` gives the learning rate of every
round (linear scaling, warmup, step or cosine decay). docs/algorithms.md has the formulas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from decentlearn import ops
from decentlearn.nn.checks import check_array

__all__ = ["SGD", "SGDConfig", "Adam", "LARS", "LAMB", "OptimizerConfig", "LRSchedule", "make",
           "OPTIMIZERS"]

#: Names accepted by ``OptimizerConfig.name`` / ``--optimizer``.
OPTIMIZERS = ("sgd", "adam", "adamw", "lars", "lamb")

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
        #: Learning rate of the next steps (a schedule sets it each round; ``step(lr=)`` overrides).
        self.lr = float(config.lr)

    def state_arrays(self) -> dict[str, np.ndarray]:
        """The per-peer state, each array with one row (or entry) per peer: what churn resets,
        offline peers keep, and asynchronous gossip slices by peer."""
        return {"momentum": self._buf}

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
        return check_array(a, name, self.dtype, self.shape)

    def step(self, params: np.ndarray, grad: np.ndarray, lr: float | None = None,
             frozen: np.ndarray | None = None) -> None:
        """One SGD step in place on ``params``; ``grad`` is read only. ``lr`` overrides the
        configured learning rate for this step (schedules). ``frozen`` (P,) ints: the leading
        ``frozen[p]`` entries of row p do not move and keep a zero momentum buffer (frozen
        layers, decentlearn.nn.cocofl); masked per distinct value, not per peer."""
        self._check(params, "params")
        self._check(grad, "grad")
        if not params.flags.writeable:
            raise ValueError("params must be writable")
        cfg = self.config
        if lr is None:
            lr = self.lr
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
        if self.name not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.name!r}")
        if self.name == "sgd":
            self.sgd()  # validates
            return
        if _check_real(self.lr, "lr") <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if _check_real(self.weight_decay, "weight_decay") < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        if self.nesterov:
            raise ValueError(f"nesterov applies to sgd only, not optimizer {self.name!r}")
        if not 0.0 <= _check_real(self.momentum, "momentum") < 1.0:
            what = "beta1 (--momentum)" if self.name != "lars" else "momentum"
            raise ValueError(f"{what} must be in [0, 1), got {self.momentum}")
        if not 0.0 <= _check_real(self.beta2, "beta2") < 1.0:
            raise ValueError(f"beta2 must be in [0, 1), got {self.beta2}")
        if self.eps is not None and _check_real(self.eps, "eps") <= 0:
            raise ValueError(f"eps must be > 0, got {self.eps}")
        if _check_real(self.trust_coefficient, "trust_coefficient") <= 0:
            raise ValueError(f"trust_coefficient must be > 0, got {self.trust_coefficient}")

    @property
    def eps_value(self) -> float:
        if self.eps is not None:
            return float(self.eps)
        return {"lamb": 1e-6, "lars": 1e-9}.get(self.name, 1e-8)

    def sgd(self) -> SGDConfig:
        return SGDConfig(lr=self.lr, momentum=self.momentum, nesterov=self.nesterov,
                         weight_decay=self.weight_decay)


def make(config: OptimizerConfig, shape: tuple[int, int], *, dtype: Any = np.float32,
         n_threads: int | None = None, segments=None):
    """The optimizer of ``config`` for a ``(P, D)`` parameter matrix. ``segments``: the
    ``(start, stop)`` column ranges of the layers (LARS/LAMB trust ratios; default one segment)."""
    if not isinstance(config, OptimizerConfig):
        raise TypeError(f"config must be an OptimizerConfig, got {type(config).__name__}")
    if config.name == "sgd":
        return SGD(config.sgd(), shape, dtype=dtype, n_threads=n_threads)
    cls = {"adam": Adam, "adamw": Adam, "lars": LARS, "lamb": LAMB}[config.name]
    return cls(config, shape, dtype=dtype, segments=segments)


def _check_segments(segments, dim: int) -> tuple[tuple[int, int], ...]:
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


def _row_norms(a: np.ndarray) -> np.ndarray:
    """Euclidean norm of each row, accumulated in float64."""
    return np.sqrt(np.einsum("ij,ij->i", a, a, dtype=np.float64))


class _Adaptive:
    """Shared machinery of Adam, LARS and LAMB: shape/dtype checks, per-peer state, frozen
    prefixes (their update and state stay zero, as in SGD)."""

    name = ""
    _check = SGD._check

    def __init__(self, config: OptimizerConfig, shape: tuple[int, int], dtype: Any = np.float32,
                 segments=None) -> None:
        if not isinstance(config, OptimizerConfig):
            raise TypeError(f"config must be an OptimizerConfig, got {type(config).__name__}")
        probe = SGD(SGDConfig(lr=1.0), (0, 0), dtype=dtype)  # validates dtype the same way
        if (not isinstance(shape, tuple) or len(shape) != 2
                or not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool)
                           for s in shape) or min(shape) < 0):
            raise ValueError(f"shape must be a tuple (n_peers, dim) of ints >= 0, got {shape!r}")
        self.config = config
        self.name = config.name
        self.shape: tuple[int, int] = (int(shape[0]), int(shape[1]))
        self.dtype: np.dtype = probe.dtype
        self.segments = _check_segments(segments, self.shape[1])
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
        """Moments and step counts, for checkpoints (decentlearn.checkpoint)."""
        return {name: a.copy() for name, a in self.state_arrays().items()}

    def load_state_dict(self, state: dict) -> None:
        from decentlearn.checkpoint import CheckpointError
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
        elif _check_real(lr, "lr") <= 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        mask = _frozen_groups(frozen, self.shape) if frozen is not None else []
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


class Adam(_Adaptive):
    """Adam (``name='adam'``, torch.optim.Adam: L2 ``weight_decay`` added to the gradient) and
    AdamW (``name='adamw'``, torch.optim.AdamW: decoupled ``params *= 1 - lr * wd`` first):

        m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
        params -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
    """

    def __init__(self, config: OptimizerConfig, shape, dtype: Any = np.float32,
                 segments=None) -> None:
        super().__init__(config, shape, dtype, segments)
        if config.name not in ("adam", "adamw"):
            raise ValueError(f"Adam needs optimizer 'adam' or 'adamw', got {config.name!r}")
        self._state = {"exp_avg": np.zeros(self.shape, self.dtype),
                       "exp_avg_sq": np.zeros(self.shape, self.dtype)}

    def step(self, params: np.ndarray, grad: np.ndarray, lr: float | None = None,
             frozen: np.ndarray | None = None) -> None:
        lr, mask = self._begin(params, grad, lr, frozen)
        c = self.config
        g = grad
        if c.weight_decay != 0 and c.name == "adam":
            g = np.multiply(params, c.weight_decay, out=self._scratch)
            g += grad
        m, v = self._moments(g, c.momentum, c.beta2)
        denom = np.sqrt(v, out=self._scratch)
        denom /= np.sqrt(self._bias(c.beta2)).astype(self.dtype)
        denom += self.dtype.type(c.eps_value)
        np.divide(m, denom, out=denom)
        denom *= (lr / self._bias(c.momentum)).astype(self.dtype)
        if c.weight_decay != 0 and c.name == "adamw":  # decoupled: params *= 1 - lr wd
            denom += np.multiply(params, self.dtype.type(lr * c.weight_decay), out=self._work())
        self._finish(params, denom, mask)


class LARS(_Adaptive):
    """LARS (You, Gitman & Ginsburg 2017), per peer and per layer l:

        trust_l = eta ||x_l|| / (||g_l|| + wd ||x_l|| + eps)   (1 where ||x_l|| or ||g_l|| is 0)
        buf = momentum buf + lr trust_l (g + wd x);  x -= buf
    """

    def __init__(self, config: OptimizerConfig, shape, dtype: Any = np.float32,
                 segments=None) -> None:
        super().__init__(config, shape, dtype, segments)
        if config.name != "lars":
            raise ValueError(f"LARS needs optimizer 'lars', got {config.name!r}")
        self._state = {"momentum": np.zeros(self.shape, self.dtype)}

    def step(self, params: np.ndarray, grad: np.ndarray, lr: float | None = None,
             frozen: np.ndarray | None = None) -> None:
        lr, mask = self._begin(params, grad, lr, frozen)
        c = self.config
        u = np.multiply(params, c.weight_decay, out=self._scratch)
        u += grad
        for a, b in self.segments:
            wn, gn = _row_norms(params[:, a:b]), _row_norms(grad[:, a:b])
            ok = (wn > 0) & (gn > 0)
            trust = np.where(ok, c.trust_coefficient * wn
                             / np.where(ok, gn + c.weight_decay * wn + c.eps_value, 1.0), 1.0)
            u[:, a:b] *= (lr * trust).astype(self.dtype)[:, None]
        if c.momentum != 0:
            buf = self._state["momentum"]
            buf *= self.dtype.type(c.momentum)
            buf += u
            for rows, cut in mask:
                buf[rows, :cut] = 0
            u[...] = buf
        self._finish(params, u, mask)


class LAMB(_Adaptive):
    """LAMB (You et al. 2019, Algorithm 2 with phi the identity), per peer and per layer l:

        m, v as Adam (raw gradient);  r = m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps)
        u = r + wd x;  x_l -= lr ||x_l|| / ||u_l|| u_l   (ratio 1 where either norm is 0)
    """

    def __init__(self, config: OptimizerConfig, shape, dtype: Any = np.float32,
                 segments=None) -> None:
        super().__init__(config, shape, dtype, segments)
        if config.name != "lamb":
            raise ValueError(f"LAMB needs optimizer 'lamb', got {config.name!r}")
        self._state = {"exp_avg": np.zeros(self.shape, self.dtype),
                       "exp_avg_sq": np.zeros(self.shape, self.dtype)}

    def step(self, params: np.ndarray, grad: np.ndarray, lr: float | None = None,
             frozen: np.ndarray | None = None) -> None:
        lr, mask = self._begin(params, grad, lr, frozen)
        c = self.config
        m, v = self._moments(grad, c.momentum, c.beta2)
        u = np.divide(v, self._bias(c.beta2).astype(self.dtype), out=self._scratch)
        np.sqrt(u, out=u)
        u += self.dtype.type(c.eps_value)
        np.divide(m, u, out=u)
        u /= self._bias(c.momentum).astype(self.dtype)
        if c.weight_decay != 0:
            u += np.multiply(params, self.dtype.type(c.weight_decay), out=self._work())
        for rows, cut in mask:
            u[rows, :cut] = 0
        for a, b in self.segments:
            wn, un = _row_norms(params[:, a:b]), _row_norms(u[:, a:b])
            ok = (wn > 0) & (un > 0)
            ratio = np.where(ok, wn / np.where(ok, un, 1.0), 1.0)
            u[:, a:b] *= (lr * ratio).astype(self.dtype)[:, None]
        self._finish(params, u, mask)


_DECAYS = ("constant", "step", "cosine")


@dataclass(frozen=True)
class LRSchedule:
    """The learning rate of round t (0-based), three factors multiplied:

    * scaling (Goyal et al. 2017): ``linear:REF`` multiplies ``lr`` by B / REF, ``sqrt:REF`` by
      sqrt(B / REF), where B = peers x batch size is the global minibatch of one step;
    * warmup: ``min(1, (t + 1) / warmup)`` (a linear ramp over the first ``warmup`` rounds);
    * decay: ``constant``; ``step:EVERY:GAMMA`` multiplies by GAMMA every EVERY rounds;
      ``cosine`` is ``0.5 (1 + cos(pi t / rounds))`` (``cosine:FLOOR`` never below FLOOR x lr).
    """

    lr: float
    rounds: int
    decay: str = "constant"
    warmup: int = 0
    scaling: str | None = None
    global_batch: int = 1

    def __post_init__(self) -> None:
        if _check_real(self.lr, "lr") <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        for name in ("rounds", "global_batch"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise ValueError(f"warmup must be an integer >= 0 (rounds), got {self.warmup!r}")
        self._parse_decay()
        self.scale  # validates

    def _parse_decay(self) -> tuple:
        spec = self.decay
        if not isinstance(spec, str):
            raise TypeError(f"lr_schedule must be a string, got {type(spec).__name__}")
        kind, *args = spec.split(":")
        bad = ValueError(f"lr_schedule must be constant, step:EVERY:GAMMA or cosine[:FLOOR], "
                         f"got {spec!r}")
        try:
            if kind == "constant" and not args:
                return ("constant",)
            if kind == "step" and len(args) == 2:
                every, gamma = int(args[0]), float(args[1])
                if every >= 1 and 0 < gamma <= 1:
                    return ("step", every, gamma)
            if kind == "cosine" and len(args) <= 1:
                floor = float(args[0]) if args else 0.0
                if 0 <= floor < 1:
                    return ("cosine", floor)
        except ValueError:
            pass
        raise bad

    @property
    def scale(self) -> float:
        if self.scaling is None or self.scaling == "none":
            return 1.0
        kind, _, ref = str(self.scaling).partition(":")
        try:
            r = int(ref)
        except ValueError:
            r = 0
        if kind not in ("linear", "sqrt") or r < 1:
            raise ValueError(f"lr_scaling must be none, linear:REF_BATCH or sqrt:REF_BATCH with "
                             f"REF_BATCH >= 1, got {self.scaling!r}")
        f = self.global_batch / r
        return f if kind == "linear" else math.sqrt(f)

    @property
    def constant(self) -> bool:
        return self.decay == "constant" and self.warmup == 0 and self.scale == 1.0

    def __call__(self, t: int) -> float:
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 0:
            raise ValueError(f"t must be an integer round >= 0, got {t!r}")
        lr = self.lr * self.scale
        if self.warmup:
            lr *= min(1.0, (t + 1) / self.warmup)
        d = self._parse_decay()
        if d[0] == "step":
            lr *= d[2] ** (t // d[1])
        elif d[0] == "cosine":
            floor = d[1]
            lr *= floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(t, self.rounds)
                                                            / self.rounds))
        return lr
