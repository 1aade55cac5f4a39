"""SkewScout (Hsieh et al., "The Non-IID Data Quagmire of Decentralized Machine Learning", ICML
2020): D-PSGD whose communication period is adapted by a control loop."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from decentlearn.algorithms.base import (Algorithm, Sampler, check_fraction, check_positive_int,
                                         option, register, require_atc, require_one_step,
                                         require_uncompressed)
from decentlearn.state import replicated

__all__ = ["SkewScout"]


#: SkewScout doubles the period when the estimated loss is below this fraction of the target.
_GROW_BELOW = 0.8


@register("skewscout")
class SkewScout(Algorithm):
    """D-PSGD whose communication period is set by SkewScout's control loop (Hsieh et al. 2020).

    A round is one local SGD step on every peer; the peers gossip (x <- W_t x) once every
    ``period`` rounds. Every ``skew_probe_every`` rounds the control loop estimates the accuracy
    loss between partitions by model traveling: each peer sends its model to the next peer
    (p -> p + 1 mod n, 4·dim bytes, ``comm.shift``), which measures on a minibatch of its own
    training data the accuracy of its own model, a_own, and of the traveled one, a_remote. With
    the estimated loss L = mean(a_own - a_remote):
      L > skew_target         -> period = max(1, period // 2)   (communicate more)
      L < 0.8 · skew_target   -> period = min(skew_period_max, 2 · period)
    (the band between them damps oscillation). The period starts at 1. ``report()`` gives the
    communications made, the period history and the bytes saved against gossiping every round
    (gossip bytes avoided minus the probes' bytes). Time-varying graphs: yes (W_t of the round
    in which the peers communicate).
    """

    #: Its server rounds / point-to-point replies are not timed by decentlearn.network yet.
    simulated_time = False

    @dataclass(frozen=True)
    class Options:
        skew_target: float = option(0.05, "accuracy loss between partitions in (0, 1] that the "
                                    "communication period is steered to")
        skew_probe_every: int = option(20, "rounds between two probes of the accuracy loss")
        skew_period_max: int = option(16, "longest communication period, in rounds")

        def __post_init__(self) -> None:
            check_fraction(self.skew_target, "skew_target")
            check_positive_int(self.skew_probe_every, "skew_probe_every")
            check_positive_int(self.skew_period_max, "skew_period_max")

    def __init__(self, *, skew_target: float = 0.05, skew_probe_every: int = 20,
                 skew_period_max: int = 16, variant: str = "atc", **kwargs) -> None:
        super().__init__(**kwargs)
        require_atc("skewscout", variant)
        require_uncompressed(self)
        require_one_step(self)
        self.Options(skew_target, skew_probe_every, skew_period_max)
        self.target = float(skew_target)
        self.probe_every = skew_probe_every
        self.period_max = skew_period_max
        self.period = 1
        self._since = 0
        self.communications = 0
        self.skipped_bytes = 0
        self.probe_bytes = 0
        #: (round, estimated accuracy loss, period after the decision) of every probe.
        self.history: list[tuple[int, float, int]] = []
        self._travel = np.roll(np.arange(self.comm.n_global), 1)  # p receives from p - 1
        self._mix_bytes = 0  # bytes of the last gossip

    state = replicated("period", "_since", "communications", "skipped_bytes", "probe_bytes",
                       "history", "_mix_bytes")

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.history = [tuple(h) for h in self.history]  # JSON keeps them as lists

    def _bytes_now(self) -> int:
        """Bytes sent so far by all peers (summed over processes)."""
        return self.comm.total(int(self.comm.bytes_sent.sum()))

    def _probe(self, sample: Sampler, t: int) -> None:
        before = self._bytes_now()
        remote = self.comm.shift(self.params, t, self._travel)
        self.probe_bytes += self._bytes_now() - before
        x, y = sample()
        own = np.argmax(self.model.forward(self.params, x), axis=-1) == y
        other = np.argmax(self.model.forward(remote, x), axis=-1) == y
        # Accuracies over all peers' samples: exact counts summed over processes.
        size = self.comm.n_global * own[0].size  # every process hosts >= 1 peer
        a_own = np.float64(self.comm.total(int(own.sum()))) / size
        a_other = np.float64(self.comm.total(int(other.sum()))) / size
        loss = float(a_own - a_other)
        if loss > self.target:
            self.period = max(1, self.period // 2)
        elif loss < _GROW_BELOW * self.target:
            self.period = min(self.period_max, 2 * self.period)
        self.history.append((t, loss, self.period))

    def round(self, sample: Sampler, t: int) -> np.ndarray:
        losses = self.local_step(sample)
        self._since += 1
        before = self._bytes_now()
        if self._since >= self.period:
            self.params = self.comm.mix(self.params, t)
            self._since = 0
            self.communications += 1
            self._mix_bytes = self._bytes_now() - before
        else:
            self.skipped_bytes += self._mix_bytes or self._gossip_bytes(t)
        if (t + 1) % self.probe_every == 0:
            self._probe(sample, t)
        return losses

    def _gossip_bytes(self, t: int) -> int:
        """Bytes one gossip of float32 rows would cost in round t (for the bytes-saved count)."""
        _, senders, _ = self.comm.edges(t)
        return int(senders.size) * 4 * self.model.dim

    def columns(self) -> dict:
        """The period, the probes' bytes and the bytes saved so far, in every metrics.csv row."""
        return {"comm_period": self.period, "probe_bytes": self.probe_bytes,
                "bytes_saved_vs_every_round": self.skipped_bytes - self.probe_bytes}

    def report(self) -> dict:
        return {"communications": self.communications, "period": self.period,
                "probe_bytes": self.probe_bytes,
                "bytes_saved_vs_every_round": self.skipped_bytes - self.probe_bytes,
                "probes": self.history}
