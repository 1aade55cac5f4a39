"""The communicator seam, declared: every operation an algorithm may ask of its communicator.

Algorithms hold a ``Communicator`` and nothing else of the transport: ``SimComm`` (every peer in
one process) and ``decentlearn.mpi.MPIComm`` (a block of peers per MPI rank) implement it, and the
mixing rules and the event clock (``Layer`` subclasses) wrap either one. tests/test_comm_protocol.py
checks that both implement every member with the same parameters, and that the algorithms use no
member that is not declared here. ``isinstance(x, Communicator)`` holds for ``SimComm`` and
``MPIComm`` on every Python; for a ``Layer`` only up to Python 3.11: from 3.12 isinstance() looks
members up with ``inspect.getattr_static``, which does not see what a layer delegates through
``__getattr__`` (``hasattr`` does, on every version).

Rows: a communicator *hosts* ``n_peers`` consecutive peers starting at global id ``peer0``; every
``X`` argument is the hosted peers' ``(n_peers, dim)`` float32 rows, and per-peer results have one
entry per hosted peer. Byte counts are those of the messages' encodings (``payload.nbytes``).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["Communicator", "EventCommunicator"]


@runtime_checkable
class Communicator(Protocol):
    """What an algorithm may call on ``self.comm`` (see the module docstring)."""

    # ---- where the rows are ----------------------------------------------------------------
    #: The graph of the run (the whole graph on every process).
    topology: Any
    #: The mixing matrices' source for round t: the topology, or its faulty view under a
    #: network model with faults.
    mixing: Any
    #: Threads the C kernels may use.
    n_threads: int | None
    #: Global id of the first hosted peer (0 in one process).
    peer0: int
    #: This process's index (0 in one process).
    rank: int
    #: Bytes each hosted peer has sent to other peers, (n_peers,) int64.
    bytes_sent: np.ndarray
    #: Bytes each hosted peer has sent to the server (server baselines), (n_peers,) int64.
    upload_bytes: np.ndarray
    #: Bytes the server has sent (server baselines), the same on every process.
    server_bytes_sent: int

    @property
    def n_peers(self) -> int:
        """Peers hosted by this process."""
        ...

    @property
    def n_global(self) -> int:
        """Peers of the whole run."""
        ...

    @property
    def peers(self) -> slice:
        """The global ids of the hosted peers."""
        ...

    @property
    def bounds(self) -> np.ndarray:
        """Process r hosts peers [bounds[r], bounds[r + 1])."""
        ...

    @property
    def static(self) -> bool:
        """True when W_t is the same in every round."""
        ...

    # ---- gossip over the graph -----------------------------------------------------------
    def mix(self, X: np.ndarray, t: int) -> np.ndarray:
        """W_t X, each peer having sent its row to its out-neighbours (bytes counted)."""
        ...

    def combine(self, X: np.ndarray, t: int, out: np.ndarray | None = None) -> np.ndarray:
        """W_t X over values every peer already holds (nothing sent, nothing counted)."""
        ...

    def exchange(self, compressor, payload, t: int) -> np.ndarray:
        """Each peer sends its row's message to its out-neighbours; the decoded rows."""
        ...

    def count(self, t: int, payload_nbytes) -> None:
        """Counts one send of ``payload_nbytes`` (scalar or per peer) to every out-neighbour."""
        ...

    def edges(self, t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Round t's directed edges in CSR order, self loops excluded: (receiver, sender, w)."""
        ...

    def self_weights(self, t: int) -> np.ndarray:
        """w_ii of round t for the hosted peers, float32 (n_peers,)."""
        ...

    def neighbor_rows(self, X: np.ndarray, t: int, out: np.ndarray | None = None) -> np.ndarray:
        """Each peer sends its row to its out-neighbours; one received row per in-edge (into
        ``out`` when given)."""
        ...

    def reply(self, compressor, payload, t: int, out: np.ndarray | None = None) -> np.ndarray:
        """The reverse of ``neighbor_rows``: one message per edge back to its sender (decoded
        into ``out`` when given)."""
        ...

    def shift(self, X: np.ndarray, t: int, source: np.ndarray,
              out: np.ndarray | None = None) -> np.ndarray:
        """Point-to-point: peer p receives the row of peer ``source[p]`` (a permutation); the
        new rows into ``out`` (X's shape and dtype, not X) when given."""
        ...

    def swap(self, sends: dict, recvs: dict, what: str) -> None:
        """Sends each ``sends[rank]`` buffer and fills each ``recvs[rank]`` buffer."""
        ...

    # ---- collectives and the server ------------------------------------------------------
    def allgather_peers(self, v: np.ndarray) -> np.ndarray:
        """A per-peer array of every process, joined in peer order."""
        ...

    def total(self, value):
        """The sum over processes of a per-process number."""
        ...

    def allreduce(self, X: np.ndarray, t: int, out: np.ndarray | None = None) -> np.ndarray:
        """The exact average of all rows, in every row (ring all-reduce, bytes counted)."""
        ...

    def allreduce_compressed(self, compressor, X: np.ndarray, t: int,
                             seed: int = 0) -> np.ndarray:
        """Compressed all-reduce (Bagua's centralized low-precision exchange)."""
        ...

    def upload(self, compressor, payload, t: int, clients: np.ndarray,
               out: np.ndarray | None = None) -> np.ndarray:
        """Clients ``clients`` send one message each to the server; the decoded rows there (into
        ``out``, a C-contiguous float32 (len(clients), dim) array, when given)."""
        ...

    def broadcast(self, compressor, payload, t: int, clients: np.ndarray) -> np.ndarray:
        """The server sends one message to each of ``clients``; the decoded row."""
        ...

    def count_server(self, t: int, nbytes: int) -> None:
        """Counts ``nbytes`` sent by the server."""
        ...


@runtime_checkable
class EventCommunicator(Communicator, Protocol):
    """A communicator with the event clock of asynchronous gossip (``decentlearn.comm.EventComm``)."""

    #: Simulated seconds of the last finished event.
    event_seconds: float
