"""The in-process backend: every peer in this process, one communicator over all of them.

A backend is what ``Runner`` is composed with (never subclassed): it checks that it can run a
configuration, says how many threads the kernels get, builds the communicator of the peers this
process hosts (and the event communicator of asynchronous runs), and adds its own figures to the
summary. ``decentlearn.mpi.MPIBackend`` implements the same methods over MPI ranks.
"""

from __future__ import annotations

import warnings

from decentlearn.comm import (CliqueAveraging, EventComm, FiniteTimeComm, NonlinearGossipComm,
                              SimComm)
from decentlearn.runner.config import SetupWarning

__all__ = ["LocalBackend"]


class LocalBackend:
    """All peers in one process (the simulator)."""

    name = "inprocess"

    def __repr__(self) -> str:
        return "LocalBackend()"

    def check(self, config) -> None:
        """Every configuration runs in process."""

    def threads(self, config) -> int | None:
        """Threads of this process's kernels: the configuration's (None: the default)."""
        return config.threads

    def make_comm(self, topology, *, kind: str, alpha, eta, n_threads, network,
                  samples_per_round: float, mixing_kind):
        """The communicator of mixing rule ``kind`` ("linear", "finite-time", "nonlinear")."""
        if kind == "finite-time":
            return FiniteTimeComm(topology, n_threads=n_threads)
        kwargs = dict(n_threads=n_threads, network=network, samples_per_round=samples_per_round)
        if kind == "nonlinear":
            return NonlinearGossipComm(topology, alpha=alpha, eta=eta, **kwargs)
        return SimComm(topology, mixing_kind=mixing_kind, **kwargs)

    def make_event_comm(self, topology, *, n_threads, network):
        """The communicator of event-driven asynchronous gossip."""
        return EventComm(topology, n_threads, network)

    def async_class(self, cls):
        """The class that runs the asynchronous form ``cls`` here (itself)."""
        return cls

    def wrap_compressor(self, compressor, comm):
        return compressor

    def clique_averaging(self, groups, comm):
        return CliqueAveraging(groups)

    def report_problems(self, problems: list[str]) -> None:
        """Each setup problem as a SetupWarning (the summary lists them too)."""
        for problem in problems:
            warnings.warn(problem, SetupWarning, stacklevel=3)

    def summary(self, runner) -> dict:
        """The backend's own fields of summary.json (none in process)."""
        return {}
