"""The communicator of event-driven asynchronous gossip (AD-PSGD,
``decentlearn.algorithms.adpsgd``): its clock is the event simulation's."""

from __future__ import annotations

from decentlearn.comm.local import SimComm
from decentlearn.network.model import NetworkModel

__all__ = ["EventComm"]


class EventComm(SimComm):
    """A SimComm whose clock is the event simulation's: counts bytes of pairwise exchanges and
    reports the time of the last processed update as ``sim_seconds``."""

    def __init__(self, topology, n_threads, network: NetworkModel) -> None:
        super().__init__(topology, n_threads)
        self.network = network
        self.event_seconds = 0.0
        self.round_seconds: list[float] = []
        self._last = 0.0

    state_attrs = SimComm.state_attrs + ("event_seconds", "round_seconds", "_last")

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
