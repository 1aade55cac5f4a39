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

With a network model (``SimComm(topology, network=NetworkModel(...), samples_per_round=...)``,
see :mod:`decentlearn.network`) every ``count`` also advances the simulated clock
(``sim_seconds``), and W_t is the round's faulty view when links drop or peers churn: a dropped
link carries no bytes. Algorithms do not change; ``round_done(t)`` closes a round's clock (the
simulator calls it) and ``network_metrics()`` gives the columns that join metrics.csv.
"""

from __future__ import annotations

import numpy as np

from decentlearn import ops
from decentlearn.topology import RoundTopology, Topology, edges_of

FLOAT32_BYTES = 4


class SimComm:
    """All peers in one process; ``mix`` is one call of the C gossip kernel on the whole matrix."""

    def __init__(self, topology: Topology | RoundTopology, n_threads: int | None = None, *,
                 network=None, samples_per_round: float = 0.0,
                 mixing_kind: str | None = None) -> None:
        if not isinstance(topology, (Topology, RoundTopology)):
            raise TypeError(f"topology must be a Topology, got {type(topology).__name__}")
        self.topology = topology
        self.n_threads = ops.resolve_threads(n_threads)
        self.bytes_sent = np.zeros(topology.n, dtype=np.int64)
        self._spare: np.ndarray | None = None
        #: The network model (decentlearn.network.NetworkModel) or None; its clock.
        self.network = network
        self.clock = None
        #: The W_t actually used: the topology, or its per-round faulty view.
        self.mixing = topology
        if network is not None:
            from decentlearn.network.clock import SyncClock
            from decentlearn.network.faults import FaultyTopology
            if network.n != topology.n:
                raise ValueError(f"network has {network.n} peers but the topology {topology.n}")
            self.clock = SyncClock(network, samples_per_round)
            if network.config.has_faults:
                self.mixing = FaultyTopology(topology, network, kind=mixing_kind)

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
        out = ops.gossip(self.mixing, X, out=self._spare, n_threads=self.n_threads, t=t)
        self._spare = X
        self.count(t, X.shape[1] * FLOAT32_BYTES)
        return out

    def combine(self, X: np.ndarray, t: int, out: np.ndarray | None = None) -> np.ndarray:
        """W_t X over values every peer already holds (replicas kept from earlier exchanges):
        local computation, no bytes on the wire."""
        return ops.gossip(self.mixing, X, out=out, n_threads=self.n_threads, t=t)

    def exchange(self, compressor, payload, t: int) -> np.ndarray:
        """Each peer sends its row's message to its out-neighbours; returns the decoded rows that
        the receivers reconstruct. Bytes counted from ``payload.row_nbytes``."""
        self.count(t, payload.row_nbytes)
        return compressor.decompress(payload, n_threads=self.n_threads)

    def count(self, t: int, payload_nbytes) -> None:
        """Adds one send of ``payload_nbytes`` (scalar or per peer) to every out-neighbour, and
        with a network model delivers it on the simulated clock."""
        nbytes = np.asarray(payload_nbytes, dtype=np.int64)
        self.bytes_sent += self.mixing.send_counts(t) * nbytes
        if self.clock is not None:
            dst, src = edges_of(self.mixing, t)
            self.clock.send(t, dst, src, nbytes)

    # Simulated time (a network model) --------------------------------------------------------

    def round_done(self, t: int) -> None:
        """Closes round t on the simulated clock (training time counts even without traffic)."""
        if self.clock is not None:
            self.clock.finish(t)

    @property
    def sim_seconds(self) -> float | None:
        """Simulated seconds since the start (None without a network model)."""
        return None if self.clock is None else self.clock.sim_seconds

    def network_metrics(self) -> dict:
        """Columns for metrics.csv: sim_seconds and, under faults, the drop/offline/straggler
        rates so far (empty without a network model)."""
        if self.clock is None:
            return {}
        row = {"sim_seconds": self.clock.sim_seconds}
        if hasattr(self.mixing, "stats"):
            row.update(self.mixing.stats())
        return row

    def network_summary(self) -> dict:
        """``network_metrics()`` plus ``sim_round_seconds``, the simulated duration of every
        round, for summary.json (empty without a network model)."""
        if self.clock is None:
            return {}
        return {**self.network_metrics(), "sim_round_seconds": list(self.clock.round_seconds)}
