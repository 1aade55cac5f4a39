"""``MPIComm``: the communicator of :mod:`decentlearn.comm` over MPI processes (mpi4py).

Each rank hosts a contiguous block of peers (``block_bounds``: ``numpy.array_split`` of the peers
over the ranks) and holds only their rows. The algorithms run unchanged on those rows: ``n_peers``
is the rank's peer count and ``peer0`` its first peer, so the counter-based generators of the
compressors draw the same numbers as in one process.

Every exchange is nonblocking point-to-point (Isend/Irecv) between the ranks that host a peer and
its neighbours, polled against a deadline: a rank that dies or stops answering makes the others
raise :class:`MPITimeoutError` after ``timeout`` seconds instead of hanging (the runner then calls
``Abort``). ``mix`` receives the neighbours' rows into a halo buffer behind the local rows and runs
the same C gossip kernel on the rank's rows of W_t, its columns renumbered into that buffer; the
kernel sums each row's CSR entries in stored order, so every output row is bit-identical to the
in-process ``SimComm.mix``. Compressed messages travel as ``Payload.to_bytes()`` and are parsed
with the bounds-checked ``from_bytes`` on the receiver. Global reductions (``allreduce``, the
runner's consensus distance and average model) add rows in peer order, never with MPI_SUM.

Every operation of ``SimComm`` is here: ``mix``, ``exchange``, ``combine``, ``count``,
``allreduce``, ``allreduce_compressed``; for the server baselines ``upload`` (every rank gets
every client's message: the server's state is replicated, identical on all ranks),
``broadcast`` and ``count_server`` (counting only); for the cross-gradient and point-to-point
algorithms ``edges`` (global), ``self_weights``, ``neighbor_rows`` (from the halo), ``reply``
and ``shift``; ``allgather_peers`` and ``total`` for global vectors and counts. Plus
``gather_rows`` / ``scatter_rows`` / ``bcast_json`` for the runner and checkpoints.

With a network model (``network=``), every rank keeps the whole simulated clock and the whole
faulty W_t, as ``SimComm`` does, and feeds the clock every peer's message sizes (all-gathered
when they differ per peer), so ``sim_seconds`` and the fault rates are the same on every rank
and equal to the in-process run's.
"""

from __future__ import annotations

import json
import time

import numpy as np

from decentlearn import ops
from decentlearn.comm import FLOAT32_BYTES, attach_network
from decentlearn.comm.local import CommState
from decentlearn.comm.plan import RoundPlan
from decentlearn.topology import RoundTopology, Topology, edges_of

#: Default seconds a rank waits for any message before declaring its sender dead.
DEFAULT_TIMEOUT = 60.0

#: Transports of the row exchange (docs/mpi.md has their measured speeds).
TRANSPORTS = ("p2p", "neighbor")

_TAG_MOD = 30000  # tags cycle below MPI's guaranteed minimum MPI_TAG_UB (32767)


class MPITimeoutError(RuntimeError):
    """A rank waited more than the timeout for a message: a peer rank died or stopped answering."""


def import_mpi():
    """mpi4py's ``MPI`` module, or ImportError with the install command."""
    try:
        from mpi4py import MPI
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("the MPI backend needs mpi4py and an MPI library: "
                          "pip install 'decentlearn[mpi]' (see docs/mpi.md)") from e
    return MPI


def block_bounds(n_peers: int, n_ranks: int) -> np.ndarray:
    """int64 (n_ranks + 1,): rank r hosts peers [bounds[r], bounds[r + 1]) (numpy.array_split)."""
    if n_peers < n_ranks:
        raise ValueError(f"peers must be >= the number of MPI ranks ({n_ranks}), got {n_peers}")
    sizes = np.full(n_ranks, n_peers // n_ranks, dtype=np.int64)
    sizes[:n_peers % n_ranks] += 1
    return np.concatenate(([0], np.cumsum(sizes)))


class MPIComm(CommState):
    """The peers ``[peer0, peer0 + n_peers)`` of one MPI rank; same operations as ``SimComm``.

    ``topology``: the whole graph (every rank builds it from the seed). ``world``: an mpi4py
    communicator (default ``MPI.COMM_WORLD``). ``timeout``: seconds any wait may last.
    """

    #: The gossip output buffer and the received halo rows.
    scratch = ("_spare", "_halo")

    def __init__(self, topology: Topology | RoundTopology, world=None,
                 n_threads: int | None = None, *, timeout: float = DEFAULT_TIMEOUT,
                 transport: str = "p2p", network=None, samples_per_round: float = 0.0,
                 mixing_kind: str | None = None) -> None:
        MPI = import_mpi()
        if not isinstance(topology, (Topology, RoundTopology)):
            raise TypeError(f"topology must be a Topology, got {type(topology).__name__}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
        #: How ``mix`` and ``combine`` move rows: "p2p" (Isend/Irecv) or "neighbor"
        #: (Ineighbor_alltoallv on a distributed-graph communicator per round of the period).
        self.transport = transport
        self._MPI = MPI
        self.world = MPI.COMM_WORLD if world is None else world
        self.rank, self.n_ranks = self.world.Get_rank(), self.world.Get_size()
        self.topology = self.mixing = topology
        self.n_global = topology.n
        self.bounds = block_bounds(self.n_global, self.n_ranks)
        #: First peer of this rank and its number of peers.
        self.peer0 = int(self.bounds[self.rank])
        self._n_local = int(self.bounds[self.rank + 1]) - self.peer0
        self.n_threads = ops.resolve_threads(n_threads)
        self.timeout = float(timeout)
        self.bytes_sent = np.zeros(self._n_local, dtype=np.int64)
        self.upload_bytes = np.zeros(self._n_local, dtype=np.int64)
        self.server_bytes_sent = 0
        #: The network model (decentlearn.network.NetworkModel) or None, as in ``SimComm``: its
        #: clock and faulty W_t are computed whole, identically, on every rank.
        self.network = network
        self.clock, self.mixing = attach_network(topology, network, samples_per_round, mixing_kind)
        self._plans: dict[int, RoundPlan] = {}
        self._seq = 0
        self._halo: np.ndarray | None = None
        self._spare: np.ndarray | None = None
        #: Seconds in packing, posting and parsing messages ("communicate"), in waiting for them
        #: ("wait"), and in compressing/decoding (added by the runner's timed compressor).
        self.seconds = {"communicate": 0.0, "wait": 0.0, "compress": 0.0}
        #: Decoded neighbour rows of the last ``exchange`` (halo peers in increasing order).
        self.received: np.ndarray | None = None

    # ---- the shape of the rank's share ---------------------------------------------------------

    @property
    def n_peers(self) -> int:
        """Peers hosted by this rank (the row count of every state array the algorithm holds)."""
        return self._n_local

    @property
    def peers(self) -> slice:
        """This rank's peers as a slice of the global peer range."""
        return slice(self.peer0, self.peer0 + self._n_local)

    @property
    def static(self) -> bool:
        return self.mixing.period == 1

    def plan(self, t: int) -> RoundPlan:
        """The exchange plan of round t (cached over the topology's period)."""
        period = self.mixing.period
        key = t % period if period is not None else t
        plan = self._plans.get(key)
        if plan is None:
            if period is None:  # aperiodic: keep only the current round's plan
                self.close()
            plan = RoundPlan(*self.mixing.csr(t), self.bounds, self.rank)
            plan.send_counts = np.array(self.mixing.send_counts(t)[self.peers])
            if self.transport == "neighbor":
                plan.graph_comm = self.world.Create_dist_graph_adjacent(
                    sorted(plan.recv), sorted(plan.send), reorder=False)
            self._plans[key] = plan
        return plan

    # ---- transport -----------------------------------------------------------------------------

    def _free(self, plan: RoundPlan) -> None:
        if plan.graph_comm is not None:
            plan.graph_comm.Free()
            plan.graph_comm = None

    def close(self) -> None:
        """Frees the distributed-graph communicators (transport "neighbor")."""
        for plan in self._plans.values():
            self._free(plan)
        self._plans.clear()

    def _tag(self) -> int:
        self._seq += 1
        return self._seq % _TAG_MOD

    def _wait(self, requests: list, sources: list[int], what: str) -> None:
        """Waits for every request (``sources``: the other rank of each), polling so that a dead
        rank ends in MPITimeoutError naming the ranks still owing an answer."""
        t0 = time.perf_counter()
        deadline = t0 + self.timeout
        pause, polls = 0.0, 0
        MPI = self._MPI
        try:
            while not MPI.Request.Testall(requests):
                polls += 1
                if polls < 2000:  # the first ~ms: poll, yielding the core between polls
                    time.sleep(0)
                    continue
                now = time.perf_counter()
                if now > deadline:
                    pending = sorted({s for r, s in zip(requests, sources)
                                      if s >= 0 and not r.Test()})
                    who = f" from rank(s) {pending}" if pending else ""
                    raise MPITimeoutError(
                        f"rank {self.rank}: no answer{who} within "
                        f"{self.timeout:g} s during {what} (a rank died or stopped answering)")
                # Then back off to sleeps of up to 1 ms: ranks often share cores.
                pause = min(1e-3, pause * 2 + 2e-5)
                time.sleep(pause)
        finally:
            self.seconds["wait"] += time.perf_counter() - t0

    def swap(self, sends: dict[int, np.ndarray], recvs: dict[int, np.ndarray], what: str,
              tag: int | None = None) -> None:
        """Sends every ``sends[rank]`` buffer and fills every ``recvs[rank]`` buffer (known sizes).
        Every rank must make the same sequence of swap calls, or pass one ``tag`` for all the
        calls of an operation."""
        t0 = time.perf_counter()
        tag = self._tag() if tag is None else tag
        reqs, srcs = [], []
        for src, buf in recvs.items():
            reqs.append(self.world.Irecv(buf, source=src, tag=tag))
            srcs.append(src)
        for dst, buf in sends.items():
            reqs.append(self.world.Isend(buf, dest=dst, tag=tag))
            srcs.append(dst)
        self.seconds["communicate"] += time.perf_counter() - t0
        self._wait(reqs, srcs, what)

    def _swap_bytes(self, sends: dict[int, bytes], sources: list[int],
                    what: str) -> dict[int, bytes]:
        """Sends byte strings of any length; returns what each rank in ``sources`` sent (sizes
        first, then the bytes: two messages per pair)."""
        sizes = {s: np.zeros(1, dtype=np.int64) for s in sources}
        self.swap({d: np.array([len(b)], dtype=np.int64) for d, b in sends.items()}, sizes,
                   what)
        bufs = {s: bytearray(int(sizes[s][0])) for s in sources}
        self.swap({d: np.frombuffer(b, dtype=np.uint8) if b else np.zeros(0, np.uint8)
                    for d, b in sends.items()}, bufs, what)
        return {s: bytes(b) for s, b in bufs.items()}

    def halo_rows(self, X: np.ndarray, plan: RoundPlan, what: str) -> np.ndarray:
        """The halo buffer [X's rows, the neighbour rows plan.halo_peers] (float32, C order)."""
        n, dim = X.shape
        if n != self._n_local:
            raise ValueError(f"X must have one row per peer of this rank ({self._n_local}), "
                             f"got shape {X.shape}")
        shape = (plan.n_cols, dim)
        if self._halo is None or self._halo.shape != shape:
            self._halo = np.empty(shape, dtype=np.float32)
        halo = self._halo
        t0 = time.perf_counter()
        halo[:n] = X
        sends = {d: np.ascontiguousarray(X[rows]) for d, rows in plan.send.items()}
        recvs, start = {}, n
        for s, peers in plan.recv.items():  # owners in increasing order = halo order
            recvs[s] = halo[start:start + peers.size]
            start += peers.size
        self.seconds["communicate"] += time.perf_counter() - t0
        if plan.graph_comm is None:
            self.swap(sends, recvs, what)
            return halo
        t0 = time.perf_counter()
        MPI = self._MPI
        scounts = [sends[d].size for d in sorted(sends)]
        rcounts = [recvs[r].size for r in sorted(recvs)]
        sbuf = (np.concatenate([sends[d].reshape(-1) for d in sorted(sends)]) if sends
                else np.zeros(0, np.float32))
        req = plan.graph_comm.Ineighbor_alltoallv(
            [sbuf, (scounts, np.concatenate(([0], np.cumsum(scounts)[:-1])).tolist()),
             MPI.FLOAT],
            [halo[n:], (rcounts, np.concatenate(([0], np.cumsum(rcounts)[:-1])).tolist()),
             MPI.FLOAT])
        self.seconds["communicate"] += time.perf_counter() - t0
        self._wait([req], [-1], what + f" (neighbours {sorted(recvs)})")
        return halo

    # ---- the operations of SimComm -------------------------------------------------------------

    def mix(self, X: np.ndarray, t: int) -> np.ndarray:
        """W_t X on this rank's rows; the result buffer is recycled as in ``SimComm.mix``."""
        plan = self.plan(t)
        halo = self.halo_rows(X, plan, f"mix of round {t}")
        if self._spare is None or self._spare.shape != X.shape:
            self._spare = np.empty_like(X)
        out = plan.gossip(halo, self._spare, self.n_threads)
        self._spare = X
        self.count(t, X.shape[1] * FLOAT32_BYTES)
        return out

    def combine(self, X: np.ndarray, t: int, out: np.ndarray | None = None) -> np.ndarray:
        """W_t X over replicas the peers already hold: no bytes counted. The rank fetches its
        neighbours' rows of X (equal to the replicas a deployment would keep) to apply W_t."""
        plan = self.plan(t)
        halo = self.halo_rows(X, plan, f"combine of round {t}")
        return plan.gossip(halo, out, self.n_threads)

    def exchange(self, compressor, payload, t: int) -> np.ndarray:
        """Sends each local peer's message, as wire bytes, to the ranks of its out-neighbours;
        receivers parse them with ``from_bytes`` (bounds-checked) and decode them into
        ``received``. Returns the local peers' decoded rows. Bytes as ``SimComm.exchange``."""
        plan = self.plan(t)
        if payload.n_rows != self._n_local:
            raise ValueError(f"payload must have one row per peer of this rank "
                             f"({self._n_local}), got {payload.n_rows}")
        self.count(t, payload.row_nbytes)
        t0 = time.perf_counter()
        sends = {d: b"".join(payload.to_bytes(int(r)) for r in rows)
                 for d, rows in plan.send.items()}
        got = self._swap_bytes(sends, list(plan.recv), f"exchange of round {t}")
        t0 = time.perf_counter()
        dim = payload.dim
        wire = payload.compressor  # the codec itself (an error-feedback wrapper has no parser)
        received = {s: wire.from_bytes(got[s], (peers.size, dim))
                    for s, peers in plan.recv.items()}
        self.seconds["communicate"] += time.perf_counter() - t0
        parts = [compressor.decompress(received[s], n_threads=self.n_threads)
                 .reshape(peers.size, dim) for s, peers in plan.recv.items()]
        self.received = (np.concatenate(parts) if parts
                         else np.zeros((0, dim), dtype=np.float32))
        return compressor.decompress(payload, n_threads=self.n_threads)

    def count(self, t: int, payload_nbytes) -> None:
        """Adds one send of ``payload_nbytes`` (scalar or per local peer) per out-neighbour;
        with a network model, delivers every peer's messages on the (replicated) clock."""
        nbytes = np.asarray(payload_nbytes, dtype=np.int64)
        self.bytes_sent += self.plan(t).send_counts * nbytes
        if self.clock is not None:
            if nbytes.ndim:  # per-peer sizes: the clock needs every peer's
                nbytes = self.allgather_peers(np.ascontiguousarray(nbytes))
            dst, src = edges_of(self.mixing, t)
            self.clock.send(t, dst, src, nbytes)

    def allreduce(self, X: np.ndarray, t: int, out: np.ndarray | None = None) -> np.ndarray:
        """The exact mean of all peers' rows in every local row, bit-identical to
        ``SimComm.allreduce``: the float64 sum runs through the ranks in peer order (rank r adds
        its rows to rank r-1's partial sum), the last rank divides and sends the float32 mean to
        all. Bytes counted as the ring all-reduce of ``SimComm``."""
        n, dim = X.shape
        N = self.n_global
        what = f"allreduce of round {t}"
        tag = self._tag()  # ranks make one or two swap calls here: one tag for all
        if self.rank == 0:
            acc = np.add.reduce(X, axis=0, dtype=np.float64)
        else:
            prev = np.empty(dim, dtype=np.float64)
            self.swap({}, {self.rank - 1: prev}, what, tag)
            acc = np.add.reduce(np.concatenate([prev[None], X.astype(np.float64)]), axis=0)
        mean = np.empty(dim, dtype=np.float32)
        last = self.n_ranks - 1
        if self.rank < last:
            self.swap({self.rank + 1: acc}, {last: mean}, what, tag)
        else:
            np.divide(acc, N, out=acc)
            mean[...] = acc.astype(np.float32)
            self.swap({r: mean for r in range(last)}, {}, what, tag)
        if out is None:
            out = np.empty_like(X)
        out[...] = mean
        if N > 1:
            chunk = np.array([len(c) for c in np.array_split(np.empty(dim, np.int8), N)],
                             dtype=np.int64)
            p = np.arange(self.peer0, self.peer0 + n)
            self.bytes_sent += FLOAT32_BYTES * (2 * dim - chunk[(p + 1) % N] - chunk[p])
            if self.clock is not None:
                self.clock.allreduce(t, FLOAT32_BYTES * dim)
        return out

    def allreduce_compressed(self, compressor, X: np.ndarray, t: int, seed: int = 0) -> np.ndarray:
        """``SimComm.allreduce_compressed`` on ranks: the same messages (row i·n + j of the first
        compress call is peer i's chunk j, keyed by peer0 = i·n; the chunk means are keyed by
        n·n + j), sent as wire bytes. Rank r receives every peer's messages for its chunks
        j in [peer0, peer0 + n_peers), decodes them in peer order and averages them as the
        simulator does; the compressed means are all-gathered. Returns the (1, dim) estimate."""
        n_local, dim = X.shape
        n = self.n_global
        if n == 1:
            return X.copy()
        lo, hi = self.peer0, self.peer0 + n_local
        c = -(-dim // n)
        padded = np.zeros((n_local, n * c), dtype=np.float32)
        padded[:, :dim] = X
        chunks = padded.reshape(n_local * n, c)  # row (i - lo)·n + j: peer i's chunk j
        first = compressor.compress(chunks, seed=seed, step=t, peer0=lo * n,
                                    n_threads=self.n_threads)
        sizes = np.asarray(first.row_nbytes, dtype=np.int64).reshape(n_local, n)
        self.bytes_sent += sizes.sum(axis=1) - sizes[np.arange(n_local), np.arange(lo, hi)]
        if self.clock is not None:  # as SimComm: the mean of all n·n first messages
            every = self.allgather_peers(sizes).reshape(-1)
            self.clock.allreduce(t, float(np.mean(every)) * n)
        wire = first.compressor
        what = f"compressed allreduce of round {t}"
        # Scatter: rank r gets, from every rank, the rows of its peers' chunks j in its block.
        t0 = time.perf_counter()
        blocks = {r: [(i * n + j) for i in range(n_local)
                      for j in range(int(self.bounds[r]), int(self.bounds[r + 1]))]
                  for r in range(self.n_ranks)}
        msgs = {r: b"".join(first.to_bytes(k) for k in rows) for r, rows in blocks.items()}
        self.seconds["communicate"] += time.perf_counter() - t0
        own = msgs.pop(self.rank)
        others = [r for r in range(self.n_ranks) if r != self.rank]
        got = self._swap_bytes(msgs, others, what)
        got[self.rank] = own
        parts = []
        for r in range(self.n_ranks):  # senders in rank order: peers i in increasing order
            k = int(self.bounds[r + 1] - self.bounds[r])
            payload = wire.from_bytes(got[r], (k * n_local, c))
            parts.append(compressor.decompress(payload, n_threads=self.n_threads)
                         .reshape(k, n_local, c))
        decoded = np.concatenate(parts)  # (n, n_local, c): peer i's chunk j at [i, j - lo]
        means = decoded.mean(axis=0, dtype=np.float64).astype(np.float32)
        second = compressor.compress(means, seed=seed, step=t, peer0=n * n + lo,
                                     n_threads=self.n_threads)
        self.bytes_sent += (n - 1) * np.asarray(second.row_nbytes, dtype=np.int64)
        mine = second.to_bytes()
        got = self._swap_bytes({r: mine for r in others}, others, what)
        got[self.rank] = mine
        rows = []
        for r in range(self.n_ranks):
            k = int(self.bounds[r + 1] - self.bounds[r])
            rows.append(compressor.decompress(second.compressor.from_bytes(got[r], (k, c)),
                                              n_threads=self.n_threads).reshape(k, c))
        out = np.concatenate(rows).reshape(1, n * c)
        return np.ascontiguousarray(out[:, :dim])


    # ---- operations of the server baselines and the non-IID algorithms -------------------------
    # Peers named in arguments (clients, permutations) and ``edges`` are global; row arrays are
    # this rank's. The server's state is replicated: every rank receives every client's upload.

    def _owner(self, peers: np.ndarray) -> np.ndarray:
        """The rank hosting each of ``peers`` (global ids)."""
        return np.searchsorted(self.bounds, peers, side="right") - 1

    def total(self, value):
        """The sum over ranks of a per-rank integer, in rank order, on every rank (exact)."""
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"value must be an int (a byte count or tally), got "
                            f"{type(value).__name__}")
        mine = np.array([int(value)], dtype=np.int64)
        parts = {r: np.zeros(1, dtype=np.int64) for r in range(self.n_ranks) if r != self.rank}
        self.swap({r: mine for r in parts}, parts, "total")
        parts[self.rank] = mine
        return int(sum(int(parts[r][0]) for r in range(self.n_ranks)))

    def upload(self, compressor, payload, t: int, clients: np.ndarray,
               out: np.ndarray | None = None) -> np.ndarray:
        """``SimComm.upload`` with the server replicated on every rank: each rank sends the wire
        bytes of its clients' rows (``payload``) to every other rank, and every rank decodes all
        clients' rows in client order. Bytes: each client's row_nbytes, in ``upload_bytes``
        (client to server)."""
        clients = np.asarray(clients, dtype=np.int64)
        cut = np.searchsorted(clients, self.bounds)  # clients of rank r: cut[r]:cut[r + 1]
        if payload.n_rows != cut[self.rank + 1] - cut[self.rank]:
            raise ValueError(f"payload must have one row per client of this rank "
                             f"({cut[self.rank + 1] - cut[self.rank]}), got {payload.n_rows}")
        mine = clients[cut[self.rank]:cut[self.rank + 1]]
        np.add.at(self.upload_bytes, mine - self.peer0,
                  np.asarray(payload.row_nbytes, dtype=np.int64))
        t0 = time.perf_counter()
        wire, dim = payload.compressor, payload.dim
        data = payload.to_bytes()
        others = [r for r in range(self.n_ranks) if r != self.rank and cut[r + 1] > cut[r]]
        targets = [r for r in range(self.n_ranks) if r != self.rank]
        self.seconds["communicate"] += time.perf_counter() - t0
        got = self._swap_bytes({r: data for r in targets} if payload.n_rows else {}, others,
                               f"upload of round {t}")
        if out is None:
            out = np.empty((clients.size, dim), dtype=np.float32)
        elif out.shape != (clients.size, dim):
            raise ValueError(f"out must have shape ({clients.size}, {dim}), got {out.shape}")
        for r in range(self.n_ranks):  # each rank's clients' rows decoded into their rows of out
            k = int(cut[r + 1] - cut[r])
            if k:
                part = payload if r == self.rank else wire.from_bytes(got[r], (k, dim))
                compressor.decompress(part, n_threads=self.n_threads, out=out[cut[r]:cut[r + 1]])
        return out

    def self_weights(self, t: int) -> np.ndarray:
        """w_ii of round t for this rank's peers, float32 (n_peers,)."""
        return self.mixing.mixing_matrix(t).diagonal()[self.peers].astype(np.float32)

    def _in_edges(self, recv: np.ndarray) -> tuple[int, int]:
        """The range [e0, e1) of the CSR-ordered edges whose receiver this rank hosts."""
        lo, hi = self.peer0, self.peer0 + self._n_local
        return int(np.searchsorted(recv, lo)), int(np.searchsorted(recv, hi))

    def neighbor_rows(self, X: np.ndarray, t: int, out: np.ndarray | None = None) -> np.ndarray:
        """The rows X[sender(e)] of this rank's in-edges e (``_in_edges``), from the halo
        exchange of ``mix`` (into ``out`` when given). Bytes as ``mix``."""
        plan = self.plan(t)
        halo = self.halo_rows(X, plan, f"neighbor_rows of round {t}")
        recv, send, _ = self.edges(t)
        e0, e1 = self._in_edges(recv)
        lo, n = self.peer0, self._n_local
        s = send[e0:e1]
        inside = (s >= lo) & (s < lo + n)
        col = np.where(inside, s - lo, n + np.searchsorted(plan.halo_peers, s))
        self.count(t, X.shape[1] * FLOAT32_BYTES)
        if out is None:
            return halo[col]
        return ops.take_rows(halo, col, out=out, n_threads=self.n_threads)

    def reply(self, compressor, payload, t: int, out: np.ndarray | None = None) -> np.ndarray:
        """``SimComm.reply`` on ranks: ``payload`` holds the rows of this rank's in-edges; each
        goes, as wire bytes, to the rank of the edge's sender. Returns the decoded rows of the
        edges whose sender this rank hosts (its peers' out-edges), in edge order (into ``out``
        when given)."""
        recv, send, _ = self.edges(t)
        e0, e1 = self._in_edges(recv)
        if payload.n_rows != e1 - e0:
            raise ValueError(f"payload must have one row per in-edge of this rank's peers "
                             f"({e1 - e0}), got {payload.n_rows}")
        lo, n = self.peer0, self._n_local
        self.bytes_sent += np.bincount(recv[e0:e1] - lo, weights=payload.row_nbytes,
                                       minlength=n).astype(np.int64)
        t0 = time.perf_counter()
        to = self._owner(send[e0:e1])  # rank of each in-edge's sender
        sends = {int(r): b"".join(payload.to_bytes(int(k)) for k in np.flatnonzero(to == r))
                 for r in np.unique(to) if r != self.rank}
        mine = np.flatnonzero(self._owner(send) == self.rank)  # this rank's peers' out-edges
        frm = self._owner(recv[mine])  # nondecreasing: edges are sorted by receiver
        sources = [int(r) for r in np.unique(frm)]
        self.seconds["communicate"] += time.perf_counter() - t0
        got = self._swap_bytes(sends, [r for r in sources if r != self.rank],
                               f"reply of round {t}")
        wire, dim = payload.compressor, payload.dim
        parts = []
        for r in sources:
            k = int(np.count_nonzero(frm == r))
            if r == self.rank:
                own = compressor.decompress(payload, n_threads=self.n_threads).reshape(-1, dim)
                parts.append(own[to == r])
            else:
                parts.append(compressor.decompress(wire.from_bytes(got[r], (k, dim)),
                                                   n_threads=self.n_threads).reshape(k, dim))
        rows = np.concatenate(parts) if parts else np.zeros((0, dim), dtype=np.float32)
        if out is None:
            return rows
        if not (isinstance(out, np.ndarray) and out.dtype == np.float32
                and out.shape == rows.shape and out.flags.c_contiguous):
            raise ValueError(f"out must be a C-contiguous float32 array of shape {rows.shape}")
        np.copyto(out, rows)
        return out

    def shift(self, X: np.ndarray, t: int, source: np.ndarray,
              out: np.ndarray | None = None) -> np.ndarray:
        """``SimComm.shift`` on ranks: ``source`` is the global permutation; every row that
        moves to a peer of another rank travels there (one message per pair of ranks); into
        ``out`` (X's shape and dtype, not X) when given."""
        N = self.n_global
        source = np.asarray(source, dtype=np.int64)
        if source.shape != (N,) or not np.array_equal(np.sort(source), np.arange(N)):
            raise ValueError(f"source must be a permutation of range({N})")
        n, lo = self._n_local, self.peer0
        if X.shape[0] != n:
            raise ValueError(f"X must have one row per peer of this rank ({n}), "
                             f"got shape {X.shape}")
        src_owner = self._owner(source)
        if out is None:
            out = np.empty_like(X)
        elif out.shape != X.shape or out.dtype != X.dtype or np.may_share_memory(out, X):
            raise ValueError(f"out must be an array of X's shape {X.shape} and dtype {X.dtype} "
                             "that shares no memory with X")
        mine = src_owner[lo:lo + n]
        here = np.flatnonzero(mine == self.rank)
        out[here] = X[source[lo + here] - lo]
        recvs, places = {}, {}
        for s in np.unique(mine):
            if s != self.rank:
                places[int(s)] = np.flatnonzero(mine == s)
                recvs[int(s)] = np.empty((places[int(s)].size, *X.shape[1:]), dtype=X.dtype)
        sends = {}
        for r in range(self.n_ranks):
            if r == self.rank:
                continue
            d = np.arange(self.bounds[r], self.bounds[r + 1])
            sel = d[src_owner[d] == self.rank]
            if sel.size:
                sends[r] = np.ascontiguousarray(X[source[sel] - lo])
        self.swap(sends, recvs, f"shift of round {t}")
        for s, rows in places.items():
            out[rows] = recvs[s]
        moved = source[source != np.arange(N)]
        moved = moved[(moved >= lo) & (moved < lo + n)]
        self.bytes_sent[moved - lo] += X.shape[1] * FLOAT32_BYTES
        return out

    # ---- gathers for the runner, evaluation and checkpoints ------------------------------------

    def gather_rows(self, X: np.ndarray, root: int = 0) -> np.ndarray | None:
        """The (n_global, *X.shape[1:]) stack of every rank's rows on ``root`` (None elsewhere),
        in peer order: how rank 0 collects a full state array (parameters, optimizer state,
        replicas) for evaluation or a checkpoint."""
        X = np.ascontiguousarray(X)
        if X.shape[0] != self._n_local:
            raise ValueError(f"X must have one row per peer of this rank ({self._n_local}), "
                             f"got shape {X.shape}")
        what = "gather_rows"
        if self.rank != root:
            self.swap({root: X}, {}, what)
            return None
        full = np.empty((self.n_global, *X.shape[1:]), dtype=X.dtype)
        recvs = {r: full[self.bounds[r]:self.bounds[r + 1]] for r in range(self.n_ranks)
                 if r != root}
        full[self.peers] = X
        self.swap({}, recvs, what)
        return full

    def gather_blocks(self, X: np.ndarray, root: int = 0) -> np.ndarray | None:
        """Every rank's rows of ``X`` (any number per rank, e.g. the rows of its peers' in-edges)
        joined in rank order on ``root`` (None elsewhere): sizes first, then the rows."""
        X = np.ascontiguousarray(X)
        what = "gather_blocks"
        if self.rank != root:
            self.swap({root: np.array([X.shape[0]], dtype=np.int64)}, {}, what)
            self.swap({root: X}, {}, what)
            return None
        sizes = {r: np.zeros(1, dtype=np.int64) for r in range(self.n_ranks) if r != root}
        self.swap({}, sizes, what)
        counts = [X.shape[0] if r == root else int(sizes[r][0]) for r in range(self.n_ranks)]
        cuts = np.concatenate(([0], np.cumsum(counts)))
        full = np.empty((int(cuts[-1]), *X.shape[1:]), dtype=X.dtype)
        full[cuts[root]:cuts[root + 1]] = X
        self.swap({}, {r: full[cuts[r]:cuts[r + 1]] for r in sizes}, what)
        return full

    def scatter_rows(self, full: np.ndarray | None, root: int = 0) -> np.ndarray:
        """The inverse of ``gather_rows``: ``root`` holds the (n_global, ...) array (other ranks
        pass None) and every rank gets its own rows, e.g. to resume from a checkpoint."""
        what = "scatter_rows"
        if self.rank == root:
            full = np.ascontiguousarray(full)
            if full.shape[:1] != (self.n_global,):
                raise ValueError(f"full must have one row per peer ({self.n_global}), "
                                 f"got shape {full.shape}")
            meta = [full.dtype.str, list(full.shape[1:])]
        else:
            meta = None
        dtype, tail = self.bcast_json(meta, root)
        mine = np.empty((self._n_local, *tail), dtype=np.dtype(dtype))
        if self.rank == root:
            mine[...] = full[self.peers]
            self.swap({r: full[self.bounds[r]:self.bounds[r + 1]] for r in range(self.n_ranks)
                        if r != root}, {}, what)
        else:
            self.swap({}, {root: mine}, what)
        return mine

    def allgather_peers(self, v: np.ndarray) -> np.ndarray:
        """A per-peer vector (n_peers,) of every rank joined in peer order, on every rank."""
        v = np.ascontiguousarray(v)
        full = self.gather_rows(v, root=0)
        if self.rank != 0:
            full = np.empty((self.n_global, *v.shape[1:]), dtype=v.dtype)
            self.swap({}, {0: full}, "allgather_peers")
        else:
            self.swap({r: full for r in range(1, self.n_ranks)}, {}, "allgather_peers")
        return full

    def bcast_json(self, obj=None, root: int = 0):
        """``obj`` (JSON-serialisable) from ``root`` to every rank."""
        sends = ({r: json.dumps(obj).encode() for r in range(self.n_ranks) if r != root}
                 if self.rank == root else {})
        got = self._swap_bytes(sends, [] if self.rank == root else [root], "bcast")
        return obj if self.rank == root else json.loads(got[root])

    def barrier(self) -> None:
        """Every rank reaches this point (deadline-polled)."""
        self.bcast_json(None)

    def abort(self, code: int = 1) -> None:
        """Ends every rank of the job (MPI_Abort)."""
        self.world.Abort(code)
