"""``LRSchedule``: the learning rate of every round (linear or square-root scaling with the global
batch, warmup, step or cosine decay)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from decentlearn.optim.base import check_real

__all__ = ["LRSchedule"]

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
        if check_real(self.lr, "lr") <= 0:
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
