"""BlueFog-like communication primitives for hand-written training loops (any framework).

``ctx = init(topology, backend="mpi")`` (or ``"inprocess"``) picks the backend once; then

* ``neighbor_allreduce(x, t)``  -> W_t x: each peer's row replaced by its neighbours' weighted sum;
* ``neighbor_allgather(x, t)``  -> (senders, rows): the rows each peer received in round t;
* ``allreduce(x)``              -> the exact mean of all peers' rows, in every row;
* ``broadcast(x, root)``        -> peer ``root``'s row, in every row.

``x`` holds the rows of the peers the caller hosts: all ``n`` peers in-process, the rank's block
``ctx.peers`` on MPI (a 1-D vector when it hosts one peer). Anything NumPy can view as float32
(the buffer protocol, ``__array__``: NumPy arrays, PyTorch CPU tensors via ``.numpy()``) is
accepted; the results are new float32 NumPy arrays. Both backends give bit-identical results.

Compression (``compress="topk:0.1"`` etc.): every peer sends ``C(x_i)`` (keyed by ``seed``,
``t`` and the peer, so the message is the same whichever rank computes it) and the result is
W_t applied to the decoded rows, ``W_t decode(C(X))``, the peer's own row included.
"""

from __future__ import annotations

import numpy as np

from decentlearn import compress as _compress
from decentlearn.comm import SimComm
from decentlearn.topology import RoundTopology, Topology

_DEFAULT: Context | None = None


class Context:
    """A backend and a graph: a SimComm (all peers here) or an MPIComm (this rank's block)."""

    def __init__(self, topology: Topology | RoundTopology, backend: str = "inprocess", *,
                 timeout: float | None = None, n_threads: int | None = None) -> None:
        if backend == "inprocess":
            self.comm = SimComm(topology, n_threads=n_threads)
            self.peer0 = 0
        elif backend == "mpi":
            from decentlearn.mpi.comm import DEFAULT_TIMEOUT, MPIComm
            self.comm = MPIComm(topology, n_threads=n_threads,
                                timeout=DEFAULT_TIMEOUT if timeout is None else timeout)
            self.peer0 = self.comm.peer0
        else:
            raise ValueError(f"backend must be 'inprocess' or 'mpi', got {backend!r}")
        self.backend = backend
        self.topology = topology

    def __repr__(self) -> str:
        return (f"Context(backend={self.backend!r}, peers={self.peers.start}:{self.peers.stop} "
                f"of {self.topology.n})")

    @property
    def n_local(self) -> int:
        return self.comm.n_peers

    @property
    def peers(self) -> slice:
        """The peers whose rows this process holds."""
        return slice(self.peer0, self.peer0 + self.n_local)

    def rows(self, x) -> tuple[np.ndarray, bool]:
        """x as a C-contiguous float32 (n_local, dim) matrix, and whether it was 1-D."""
        a = np.asarray(x)
        if a.dtype != np.float32:
            if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
                raise TypeError(f"x must hold numbers, got dtype {a.dtype}")
            a = a.astype(np.float32)
        vector = a.ndim == 1
        if vector:
            a = a.reshape(1, -1)
        if a.ndim != 2 or a.shape[0] != self.n_local:
            raise ValueError(f"x must have shape ({self.n_local}, dim) (one row per peer held "
                             f"here){' or (dim,)' if self.n_local == 1 else ''}, got {a.shape}")
        return np.ascontiguousarray(a), vector


def init(topology: Topology | RoundTopology, backend: str = "inprocess", **kwargs) -> Context:
    """Makes the default context of the functions below and returns it."""
    global _DEFAULT
    _DEFAULT = Context(topology, backend, **kwargs)
    return _DEFAULT


def _ctx(ctx: Context | None) -> Context:
    if ctx is not None:
        return ctx
    if _DEFAULT is None:
        raise ValueError("no context: call decentlearn.mpi.init(topology, backend) first or "
                         "pass ctx=")
    return _DEFAULT


def _shape_back(out: np.ndarray, vector: bool) -> np.ndarray:
    return out.reshape(-1) if vector else out


def neighbor_allreduce(x, t: int = 0, *, compress: str | None = None, seed: int = 0,
                       ctx: Context | None = None) -> np.ndarray:
    """W_t x for the rows held here (see the module docstring for compression)."""
    c = _ctx(ctx)
    X, vector = c.rows(x)
    comm = c.comm
    if compress is None or compress == "none":
        out = comm.mix(X.copy(), t).copy()
        return _shape_back(out, vector)
    compressor = _compress.make(compress)
    payload = compressor.compress(X, seed=seed, step=t, peer0=c.peer0, n_threads=comm.n_threads)
    decoded = np.ascontiguousarray(comm.exchange(compressor, payload, t),
                                   dtype=np.float32).reshape(X.shape)
    if c.backend == "inprocess":
        return _shape_back(comm.combine(decoded, t), vector)
    # The neighbours' decoded messages arrived with the exchange: mix over them, no more traffic.
    plan = comm.plan(t)
    halo = np.concatenate([decoded, comm.received])
    return _shape_back(plan.gossip(halo, None, comm.n_threads), vector)


def neighbor_allgather(x, t: int = 0, *, ctx: Context | None = None
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(receivers, senders, rows): for every edge j -> i of round t whose receiver i is held
    here (self loops excluded, in CSR order), the row x_j that i received. Bytes as ``mix``."""
    c = _ctx(ctx)
    X, _ = c.rows(x)
    indptr, indices, _ = c.topology.csr(t)
    lo, hi = c.peers.start, c.peers.stop
    rows = np.repeat(np.arange(lo, hi, dtype=np.int64), np.diff(indptr[lo:hi + 1]))
    senders = indices[indptr[lo]:indptr[hi]].astype(np.int64)
    off = senders != rows
    rows, senders = rows[off], senders[off]
    comm = c.comm
    if c.backend == "inprocess":
        comm.count(t, X.shape[1] * 4)
        return rows, senders, X[senders]
    plan = comm.plan(t)
    halo = comm.halo_rows(X, plan, f"neighbor_allgather of round {t}")
    comm.count(t, X.shape[1] * 4)
    inside = (senders >= lo) & (senders < hi)
    where = np.where(inside, senders - lo, c.n_local + np.searchsorted(plan.halo_peers, senders))
    return rows, senders, halo[where]


def allreduce(x, *, ctx: Context | None = None) -> np.ndarray:
    """The mean of every peer's row (float64 sums in peer order, then float32), in each row."""
    c = _ctx(ctx)
    X, vector = c.rows(x)
    return _shape_back(c.comm.allreduce(X, 0), vector)


def broadcast(x, root: int = 0, *, ctx: Context | None = None) -> np.ndarray:
    """Peer ``root``'s row in every row held here."""
    c = _ctx(ctx)
    X, vector = c.rows(x)
    n = c.topology.n
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < n:
        raise ValueError(f"root must be a peer in [0, {n}), got {root!r}")
    if c.backend == "inprocess":
        row = X[root]
    else:
        comm = c.comm
        owner = int(np.searchsorted(comm.bounds, root, side="right") - 1)
        row = np.empty(X.shape[1], dtype=np.float32)
        if comm.rank == owner:
            row[...] = X[root - c.peer0]
            comm.swap({r: row for r in range(comm.n_ranks) if r != owner}, {}, "broadcast")
        else:
            comm.swap({}, {owner: row}, "broadcast")
    out = np.empty_like(X)
    out[...] = row
    return _shape_back(out, vector)


__all__ = ["Context", "init", "neighbor_allreduce", "neighbor_allgather", "allreduce",
           "broadcast"]
