"""The package's own exception and warning types (argument mistakes raise TypeError/ValueError
naming the argument; these are for failures of a run's files and state, and for runs set up in a
way known to work badly)."""

from __future__ import annotations

__all__ = ["CheckpointError", "SetupWarning"]


class CheckpointError(ValueError):
    """A checkpoint cannot be written or used: missing, truncated, corrupted, of another format
    version or of another run (config fingerprint, n_peers, dim). ``str()`` is one line."""


class SetupWarning(UserWarning):
    """A run is set up in a way known to work badly (see ``runner.setup_problems``); it still
    runs. Raised once per run, in process and on an MPI job's rank 0."""
