"""The in-process backend: every peer in this process, one communicator over all of them.

A backend is what ``Runner`` is composed with (never subclassed): it checks that it can run a
configuration, says how many threads the kernels get, builds the communicator of the peers this
process hosts (and the event communicator of asynchronous runs), and adds its own figures to the
summary. ``decentlearn.mpi.MPIBackend`` implements the same methods over MPI ranks.
"""

from __future__ import annotations

import warnings

from decentlearn.comm import CliqueAveraging, SimComm
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

    def device(self, config) -> str | None:
        """The device of a torch model in this process: the configuration's."""
        return config.device

    def make_comm(self, topology, *, n_threads, network, samples_per_round: float, mixing_kind):
        """The communicator of every peer (the runner wraps it in the run's mixing rule)."""
        return SimComm(topology, n_threads=n_threads, network=network,
                       samples_per_round=samples_per_round, mixing_kind=mixing_kind)

    def wrap_compressor(self, compressor, comm):
        return compressor

    def clique_averaging(self, groups, comm):
        return CliqueAveraging(groups, comm)

    def report_problems(self, problems: list[str]) -> None:
        """Each setup problem as a SetupWarning (the summary lists them too)."""
        for problem in problems:
            warnings.warn(problem, SetupWarning, stacklevel=3)

    def summary(self, runner) -> dict:
        """The backend's own fields of summary.json (none in process)."""
        return {}
