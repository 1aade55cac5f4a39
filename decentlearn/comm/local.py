"""Communication backends: how peers exchange vectors, and how many bytes that costs.

Algorithms talk to a communicator and never to the transport, so the simulator and the MPI runner
share the algorithm code. ``SimComm`` holds every peer's rows in one process and mixes them with
the C gossip kernel; an MPI backend holds a rank's rows and exchanges them with its neighbours
behind the same methods:

* ``mix(X, t)``: every peer sends its float32 row to its out-neighbours and gets W_t X back;
* ``exchange(compressor, payload, t)``: every peer sends its compressed message; the decoded rows;
* ``combine(X, t)``: W_t applied to replicas every peer already holds (no traffic);
* ``count(t, nbytes)``: bytes of one send per out-neighbour.

The non-IID algorithms and server baselines add ``allreduce``, ``allreduce_compressed``,
``upload``, ``broadcast``, ``count_server``, ``edges``, ``self_weights``, ``neighbor_rows``,
``reply`` and ``shift`` (docs/algorithms.md lists what each sends and counts).

A communicator may host a block of the peers only (the MPI backend): ``n_peers`` rows starting
at peer ``peer0`` of ``n_global``. Arguments that name peers (the clients of ``upload``, the
permutation of ``shift``) and ``edges`` are global; arrays of rows are the block's. ``upload``
returns every client's decoded row, so a server's state is the same on every process;
``allgather_peers`` and ``total`` give an algorithm the global per-peer vector or sum it needs
for such replicated state. In ``SimComm`` the block is every peer.

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
from decentlearn.comm.plan import RoundPlan
from decentlearn.state import declared_scratch, load_attrs, nest, state_of, subtree
from decentlearn.topology import RoundTopology, Topology, edges_of

FLOAT32_BYTES = 4


def attach_network(topology, network, samples_per_round, mixing_kind=None):
    """(clock, W_t) of a communicator on ``topology`` under ``network`` (a NetworkModel or None):
    the synchronous clock and the faulty per-round view of W when the network has faults, else
    (None, topology). Both backends call it, so they time and fail the same rounds."""
    if network is None:
        return None, topology
    from decentlearn.network.clock import SyncClock
    from decentlearn.network.faults import FaultyTopology
    if network.n != topology.n:
        raise ValueError(f"network has {network.n} peers but the topology {topology.n}")
    mixing = (FaultyTopology(topology, network, kind=mixing_kind)
              if network.config.has_faults else topology)
    return SyncClock(network, samples_per_round), mixing


class CommState:
    """What every communicator (``SimComm`` here, ``decentlearn.mpi.MPIComm`` on MPI ranks) keeps
    between rounds and reports about the simulated clock, written once: the byte counters (this
    process's rows of the per-peer counters, the server's total), and with a network model the
    clock and the fault counters, which every process keeps whole. A subclass sets
    ``bytes_sent``, ``upload_bytes``, ``server_bytes_sent``, ``clock`` and ``mixing``.

    Three byte counters, one per direction of traffic, never overlapping: ``bytes_sent`` (per
    hosted peer) counts what a peer sends to other peers (gossip, all-reduce chunks, replies,
    point-to-point rows); ``upload_bytes`` (per hosted peer) what a client sends to the server
    (``upload``); ``server_bytes_sent`` (one number, the same on every process) what the
    server sends to its clients (``broadcast``, ``count_server``). The runner reports them as
    ``bytes_peer``, ``bytes_client_to_server`` and ``bytes_server_to_client``."""

    #: State kept between rounds (checkpoints, decentlearn.runner.checkpoint).
    state_attrs: tuple[str, ...] = ("bytes_sent", "upload_bytes", "server_bytes_sent")
    #: The per-peer byte counters (rows of the hosted peers).
    _ROW_COUNTERS = ("bytes_sent", "upload_bytes")

    def state_kinds(self) -> dict[str, str]:
        """``state_dict()``'s entries by kind: the bytes each hosted peer sent (to peers, to the
        server) are per-peer rows; the server's bytes, the clock and the fault counters are the
        same on every process."""
        return {k: ("row" if k in self._ROW_COUNTERS else "replicated")
                for k in self.state_dict()}

    def scratch_arrays(self) -> dict[str, np.ndarray]:
        """The work arrays (the class's ``scratch`` names), for the memory estimate."""
        return declared_scratch(self)

    def state_dict(self) -> dict:
        """Byte counters, and with a network model the clock and the fault counters."""
        out = state_of(self, self.state_attrs)
        for name in ("clock", "mixing"):
            obj = getattr(self, name)
            if hasattr(obj, "state_dict"):
                out.update(nest(name, obj.state_dict()))
        return out

    def load_state_dict(self, state: dict) -> None:
        load_attrs(self, self.state_attrs, state, "comm.")
        for name in ("clock", "mixing"):
            obj = getattr(self, name)
            if hasattr(obj, "load_state_dict"):
                obj.load_state_dict(subtree(name, state))

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

    # The server's messages and the edge list, as every communicator counts and gives them.

    def broadcast(self, compressor, payload, t: int, clients: np.ndarray) -> np.ndarray:
        """The server sends one message (a one-row payload) to each of ``clients``; returns the
        decoded (1, dim) row. Counted in ``server_bytes_sent``: len(clients) · payload.nbytes."""
        if payload.n_rows != 1:
            raise ValueError(f"a broadcast payload must have one row, got {payload.n_rows}")
        self.server_bytes_sent += int(np.asarray(clients).size) * payload.nbytes
        return compressor.decompress(payload, n_threads=self.n_threads).reshape(1, -1)

    def count_server(self, t: int, nbytes: int) -> None:
        """Adds ``nbytes`` sent by the server (messages whose size the caller computed; the same
        value on every process, e.g. a ``total``)."""
        self.server_bytes_sent += int(nbytes)

    def edges(self, t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The directed edges of round t in CSR order, self loops excluded: (receiver i, sender j,
        w_ij) as int64, int64, float32 arrays of length E. ``neighbor_rows`` and ``reply`` use
        this order; ``self_weights`` gives the diagonal."""
        indptr, indices, data = self.mixing.csr(t)
        rows = np.repeat(np.arange(self.n_global, dtype=np.int64), np.diff(indptr))
        off = indices != rows
        return rows[off], indices[off].astype(np.int64), data[off]


class SimComm(CommState):
    """All peers in one process; ``mix`` is one call of the C gossip kernel on the whole matrix."""

    #: The gossip output buffer (the caller's previous rows, reused).
    scratch = ("_spare",)

    def __init__(self, topology: Topology | RoundTopology, n_threads: int | None = None, *,
                 network=None, samples_per_round: float = 0.0,
                 mixing_kind: str | None = None) -> None:
        if not isinstance(topology, (Topology, RoundTopology)):
            raise TypeError(f"topology must be a Topology, got {type(topology).__name__}")
        self.topology = topology
        self.n_threads = ops.resolve_threads(n_threads)
        self.bytes_sent = np.zeros(topology.n, dtype=np.int64)
        #: Bytes each peer sent to the server (``upload``), apart from ``bytes_sent``.
        self.upload_bytes = np.zeros(topology.n, dtype=np.int64)
        self._spare: np.ndarray | None = None
        #: The network model (decentlearn.network.NetworkModel) or None; its clock.
        self.network = network
        #: The W_t actually used: the topology, or its per-round faulty view.
        self.clock, self.mixing = attach_network(topology, network, samples_per_round, mixing_kind)

    @property
    def n_peers(self) -> int:
        return self.topology.n

    #: First peer of the block this communicator hosts (every peer here: 0).
    peer0 = 0

    @property
    def n_global(self) -> int:
        """Peers of the whole run (``n_peers`` here)."""
        return self.topology.n

    #: This process's rank and the number of processes (one process here).
    rank = 0
    n_ranks = 1

    @property
    def peers(self) -> slice:
        """The global ids of the hosted peers."""
        return slice(self.peer0, self.peer0 + self.n_peers)

    @property
    def bounds(self) -> np.ndarray:
        """Process r hosts peers [bounds[r], bounds[r + 1]) (one process here: every peer)."""
        return np.array([0, self.n_peers], dtype=np.int64)

    def plan(self, t: int) -> RoundPlan:
        """The exchange plan of round t: in one process, W_t itself with no halo (cached over the
        topology's period; an aperiodic topology keeps the current round's only)."""
        period = self.mixing.period
        key = t % period if period is not None else t
        plans = self.__dict__.setdefault("_plans", {})
        if key not in plans:
            if period is None:
                plans.clear()
            plans[key] = RoundPlan(*self.mixing.csr(t), self.bounds, 0)
        return plans[key]

    def halo_rows(self, X: np.ndarray, plan: RoundPlan, what: str) -> np.ndarray:
        """The rows a plan's local W_t multiplies: in one process, X itself."""
        if X.shape[0] != self.n_peers:
            raise ValueError(f"{what}: X must have one row per peer ({self.n_peers}), got shape "
                             f"{X.shape}")
        return X

    def swap(self, sends: dict, recvs: dict, what: str) -> None:
        """Sends each ``sends[rank]`` buffer and fills each ``recvs[rank]`` buffer; in one process
        there is no other rank, so both are empty."""
        if sends or recvs:
            raise ValueError(f"{what}: one process has no other rank to exchange with")

    def gather_rows(self, X: np.ndarray, root: int = 0) -> np.ndarray:
        """Every process's rows joined in peer order (here ``X`` itself)."""
        return X

    def gather_blocks(self, X: np.ndarray, root: int = 0) -> np.ndarray:
        """Every process's block of rows of any length joined in process order (here ``X``)."""
        return X

    def bcast_json(self, obj=None, root: int = 0):
        """The root's JSON value on every process (here ``obj``)."""
        return obj

    def close(self) -> None:
        """Releases what the communicator holds (nothing here)."""

    def allgather_peers(self, v: np.ndarray) -> np.ndarray:
        """A per-peer array (first axis: the block's peers) of every process, joined in peer
        order (here a copy of ``v``)."""
        return np.array(v, copy=True)

    def total(self, value):
        """The sum over processes of a per-process number (here ``value``): global byte counts
        and tallies of replicated state."""
        return value

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

    # ---- operations of the non-IID algorithms and server baselines (decentlearn.algorithms and
    # decentlearn.algorithms.server). Each counts its bytes exactly; an MPI backend implements the
    # same signatures with collectives or point-to-point messages.

    #: Bytes sent by the parameter server (FedAvg-like baselines), summed over all its messages.
    server_bytes_sent: int = 0

    @property
    def static(self) -> bool:
        """True when W_t is the same in every round (algorithms that need a static graph check)."""
        return self.mixing.period == 1

    def allreduce(self, X: np.ndarray, t: int, out: np.ndarray | None = None) -> np.ndarray:
        """Exact average of the rows, returned in every row (ring all-reduce of float32 rows).

        The mean is accumulated in float64 in row order, so it does not depend on threads. Bytes:
        the row of ``dim`` values is cut into n chunks (``numpy.array_split``); in the
        reduce-scatter peer p sends every chunk but one and in the all-gather every chunk but
        another, 2(n-1)/n of the row on average, 2(n-1)·dim·4 bytes in all; nothing for n = 1.
        """
        n, dim = X.shape
        if out is None:
            out = np.empty_like(X)
        if X.dtype == np.float32 and X.flags.c_contiguous and out.flags.c_contiguous:
            # the mean (NumPy's, bit for bit) and its copy into every row, on the run's threads
            mean = ops.column_mean(X, n_threads=self.n_threads).astype(np.float32)
            ops.take_rows(mean.reshape(1, -1), np.zeros(n, np.int64), out=out,
                          n_threads=self.n_threads)
        else:
            out[...] = X.mean(axis=0, dtype=np.float64).astype(np.float32)
        if n > 1:
            chunk = np.array([len(c) for c in np.array_split(np.empty(dim, np.int8), n)],
                             dtype=np.int64)
            p = np.arange(n)
            self.bytes_sent += FLOAT32_BYTES * (2 * dim - chunk[(p + 1) % n] - chunk[p])
            if self.clock is not None:
                self.clock.allreduce(t, FLOAT32_BYTES * dim)
        return out

    def allreduce_compressed(self, compressor, X: np.ndarray, t: int, seed: int = 0) -> np.ndarray:
        """Compressed all-reduce (Bagua's centralized low-precision exchange, as its ByteGrad):
        returns the (1, dim) estimate of the rows' mean that every peer ends with.

        The row is zero-padded to n chunks of c = ceil(dim / n) values. Scatter-reduce: peer i
        compresses each of its chunks and sends chunk j to peer j; peer j decodes the n messages
        of its chunk, averages them, compresses the average and all-gathers it. Every message is
        one row of one compress call, (n·n, c) then (n, c) rows, keyed by (seed, t, row). Peer p
        sends the n - 1 messages of its chunks j != p, then its average to n - 1 peers: about
        2(n-1)/n of one compressed row. For n = 1 nothing is sent and the row is returned as is.
        """
        n, dim = X.shape
        if n == 1:
            return X.copy()
        c = -(-dim // n)
        padded = np.zeros((n, n * c), dtype=np.float32)
        padded[:, :dim] = X
        chunks = padded.reshape(n * n, c)  # row i·n + j: peer i's chunk j
        first = compressor.compress(chunks, seed=seed, step=t, peer0=0, n_threads=self.n_threads)
        sizes = np.asarray(first.row_nbytes, dtype=np.int64).reshape(n, n)
        self.bytes_sent += sizes.sum(axis=1) - np.diagonal(sizes)
        decoded = compressor.decompress(first, n_threads=self.n_threads).reshape(n, n, c)
        means = decoded.mean(axis=0, dtype=np.float64).astype(np.float32)  # (n, c): chunk j at j
        second = compressor.compress(means, seed=seed, step=t, peer0=n * n,
                                     n_threads=self.n_threads)
        self.bytes_sent += (n - 1) * np.asarray(second.row_nbytes, dtype=np.int64)
        if self.clock is not None:  # timed as a ring all-reduce of the mean compressed row
            self.clock.allreduce(t, float(np.mean(first.row_nbytes)) * n)
        out = compressor.decompress(second, n_threads=self.n_threads).reshape(1, n * c)
        return np.ascontiguousarray(out[:, :dim])

    def upload(self, compressor, payload, t: int, clients: np.ndarray,
               out: np.ndarray | None = None) -> np.ndarray:
        """Peers ``clients`` (sorted global ids; ``payload`` has one row per client this process
        hosts, in order) send their message to the server; returns the decoded rows
        (len(clients), dim) of every client, which the server reconstructs (into ``out`` when
        given). Each client's row_nbytes is counted in ``upload_bytes`` (client to server)."""
        clients = np.asarray(clients, dtype=np.int64)
        if payload.n_rows != clients.size:
            raise ValueError(f"payload must have one row per client ({clients.size}), "
                             f"got {payload.n_rows}")
        np.add.at(self.upload_bytes, clients, np.asarray(payload.row_nbytes, dtype=np.int64))
        return compressor.decompress(payload, n_threads=self.n_threads, out=out)

    def self_weights(self, t: int) -> np.ndarray:
        """w_ii of round t for the hosted peers, float32 (n_peers,)."""
        return self.mixing.mixing_matrix(t).diagonal().astype(np.float32)

    def neighbor_rows(self, X: np.ndarray, t: int, out: np.ndarray | None = None) -> np.ndarray:
        """Each peer sends its row to its out-neighbours and keeps what it receives: returns the
        (E, dim) matrix whose row e is X[sender(e)] for edge e of ``edges(t)`` (as ``mix``, but
        the received rows are kept apart), into ``out`` when given. Bytes as ``mix``. A block of
        peers gets the rows of its in-edges only (receivers hosted here: a contiguous range of
        the CSR order)."""
        _, senders, _ = self.edges(t)
        self.count(t, X.shape[1] * FLOAT32_BYTES)
        if X.dtype == np.float32 and X.flags.c_contiguous:
            return ops.take_rows(X, senders, out=out, n_threads=self.n_threads)  # X[senders]
        return X[senders] if out is None else np.take(X, senders, axis=0, out=out)

    def reply(self, compressor, payload, t: int, out: np.ndarray | None = None) -> np.ndarray:
        """The reverse of ``neighbor_rows``: for every edge e = (i, j) of ``edges(t)``, peer i
        sends payload row e back to peer j; returns the decoded (E, dim) rows (into ``out``, a
        C-contiguous float32 (E, dim) array, when given). Peer i's bytes are the sum of its
        edges' row_nbytes. A block of peers sends the rows of its in-edges and gets those of its
        out-edges (senders hosted here), in edge order."""
        receivers, _, _ = self.edges(t)
        if payload.n_rows != receivers.size:
            raise ValueError(f"payload must have one row per edge ({receivers.size}), "
                             f"got {payload.n_rows}")
        self.bytes_sent += np.bincount(receivers, weights=payload.row_nbytes,
                                       minlength=self.n_peers).astype(np.int64)
        return compressor.decompress(payload, n_threads=self.n_threads, out=out)

    def shift(self, X: np.ndarray, t: int, source: np.ndarray,
              out: np.ndarray | None = None) -> np.ndarray:
        """Point-to-point: peer p receives the row of peer ``source[p]`` (a permutation; source[p]
        == p means p keeps its own row and nothing is sent). Returns the new (n, dim) matrix
        (into ``out``, an array of X's shape and dtype that is not X, when given); every peer
        whose row goes elsewhere sends dim float32 values once. ``source`` is global; X and the
        result are the hosted rows."""
        source = np.asarray(source, dtype=np.int64)
        if source.shape != (self.n_peers,) or not np.array_equal(np.sort(source),
                                                                  np.arange(self.n_peers)):
            raise ValueError(f"source must be a permutation of range({self.n_peers})")
        moved = source != np.arange(self.n_peers)
        self.bytes_sent[source[moved]] += X.shape[1] * FLOAT32_BYTES
        if X.dtype == np.float32 and X.flags.c_contiguous:  # X[source], threaded
            return ops.take_rows(X, source, out=out, n_threads=self.n_threads)
        if out is None:
            return X[source]
        np.take(X, source, axis=0, out=out)
        return out
