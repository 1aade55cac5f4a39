"""Communication backends: how peers exchange vectors, and how many bytes that costs.

Algorithms talk to a communicator and never to the transport, so the simulator and the MPI runner
share the algorithm code. ``SimComm`` holds every peer's rows in one process and mixes them with
the C gossip kernel; an MPI backend holds a rank's rows and exchanges them with its neighbours
behind the same methods:

* ``mix(X, t)``: every peer sends its float32 row to its out-neighbours and gets W_t X back;
* ``exchange(compressor, payload, t)``: every peer sends its compressed message; the decoded rows;
* ``combine(X, t)``: W_t applied to replicas every peer already holds (no traffic);
* ``count(t, nbytes)``: bytes of one send per out-neighbour.

Bytes are counted per sending peer, from ``Payload.nbytes`` for compressed messages.
"""

from __future__ import annotations

import numpy as np

from decentlearn import ops
from decentlearn.topology import Topology

FLOAT32_BYTES = 4


class SimComm:
    """All peers in one process; ``mix`` is one call of the C gossip kernel on the whole matrix."""

    def __init__(self, topology: Topology, n_threads: int | None = None) -> None:
        if not isinstance(topology, Topology):
            raise TypeError(f"topology must be a Topology, got {type(topology).__name__}")
        self.topology = topology
        self.n_threads = ops.resolve_threads(n_threads)
        self.bytes_sent = np.zeros(topology.n, dtype=np.int64)
        self._spare: np.ndarray | None = None

    @property
    def n_peers(self) -> int:
        return self.topology.n

    def mix(self, X: np.ndarray, t: int) -> np.ndarray:
        """Returns W_t X, each peer having sent its row (dim float32 values) to its out-neighbours.

        The result lives in a buffer owned by the communicator; the array passed in becomes the
        buffer of the next call, so a caller that keeps ``X = comm.mix(X, t)`` allocates nothing.
        """
        if self._spare is None or self._spare.shape != X.shape:
            self._spare = np.empty_like(X)
        out = ops.gossip(self.topology, X, out=self._spare, n_threads=self.n_threads, t=t)
        self._spare = X
        self.count(t, X.shape[1] * FLOAT32_BYTES)
        return out

    def combine(self, X: np.ndarray, t: int, out: np.ndarray | None = None) -> np.ndarray:
        """W_t X over values every peer already holds (replicas kept from earlier exchanges):
        local computation, no bytes on the wire."""
        return ops.gossip(self.topology, X, out=out, n_threads=self.n_threads, t=t)

    def exchange(self, compressor, payload, t: int) -> np.ndarray:
        """Each peer sends its row's message to its out-neighbours; returns the decoded rows that
        the receivers reconstruct. Bytes counted from ``payload.row_nbytes``."""
        self.count(t, payload.row_nbytes)
        return compressor.decompress(payload, n_threads=self.n_threads)

    def count(self, t: int, payload_nbytes) -> None:
        """Adds one send of ``payload_nbytes`` (scalar or per peer) to every out-neighbour."""
        self.bytes_sent += self.topology.send_counts(t) * np.asarray(payload_nbytes, dtype=np.int64)
