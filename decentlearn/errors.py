"""The package's own exception types (argument mistakes raise TypeError/ValueError naming the
argument; these are for failures of a run's files and state)."""

from __future__ import annotations

__all__ = ["CheckpointError"]


class CheckpointError(ValueError):
    """A checkpoint cannot be written or used: missing, truncated, corrupted, of another format
    version or of another run (config fingerprint, n_peers, dim). ``str()`` is one line."""
