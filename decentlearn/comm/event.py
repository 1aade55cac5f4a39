"""The event clock of asynchronous gossip (AD-PSGD, ``decentlearn.algorithms.adpsgd``), layered over
any communicator: the simulated time is the event simulation's, not a synchronous clock's."""

from __future__ import annotations

from decentlearn.comm.wrapper import Layer
from decentlearn.state import load_attrs, state_of

__all__ = ["EventComm"]

#: The clock's state, the same on every process (each replays the whole event schedule).
_CLOCK = ("event_seconds", "round_seconds", "_last")


class EventComm(Layer):
    """A communicator (in process or on MPI) whose clock is the event simulation's: it counts
    bytes of pairwise exchanges through ``comm`` and reports the time of the last processed update
    as ``sim_seconds``. ``network`` is the run's network model (the peers' speeds and links)."""

    def __init__(self, comm, network) -> None:
        super().__init__(comm)
        self.__dict__.update(network=network, event_seconds=0.0, round_seconds=[], _last=0.0)

    def round_done(self, t: int) -> None:
        self.round_seconds.append(self.event_seconds - self._last)
        self._last = self.event_seconds

    @property
    def sim_seconds(self) -> float:
        return self.event_seconds

    def network_metrics(self) -> dict:
        return {"sim_seconds": self.event_seconds}

    def network_summary(self) -> dict:
        return {"sim_seconds": self.event_seconds, "sim_round_seconds": list(self.round_seconds)}

    def state_dict(self) -> dict:
        return {**self.comm.state_dict(), **state_of(self, _CLOCK)}

    def state_kinds(self) -> dict[str, str]:
        return {**self.comm.state_kinds(), **dict.fromkeys(_CLOCK, "replicated")}

    def load_state_dict(self, state: dict) -> None:
        self.comm.load_state_dict({k: v for k, v in state.items() if k not in _CLOCK})
        load_attrs(self, _CLOCK, state, "comm.")
