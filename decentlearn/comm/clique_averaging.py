"""Clique Averaging (Bellet, Kermarrec and Lavoie, D-Cliques, 2022): every peer's gradient replaced
by the average of its clique's gradients before the optimizer step, written once for any
communicator (all peers in one process, or blocks of peers on MPI ranks)."""

from __future__ import annotations

import numpy as np

__all__ = ["CliqueAveraging"]


class CliqueAveraging:
    """Clique Averaging (Bellet, Kermarrec and Lavoie, D-Cliques, 2022): every peer's gradient is
    replaced, in place, by the average of the gradients of its clique, g_i <- (1/|C|) sum_{j in C}
    g_j, before the optimizer step, so momentum is applied on top of the clique's unbiased
    gradient. Set it as an algorithm's ``gradient_transform``; ``groups`` is the clique id of every
    peer (``Topology.groups`` of a d-cliques topology); ``comm`` the communicator of the peers
    this process hosts (None: every peer, in this process).

    Each process receives the gradient rows of the other members of its peers' cliques through
    ``comm.swap`` (one message per pair of processes that share a clique, sizes known in
    advance; nothing in one process), then averages each clique: the members' rows in increasing
    peer order, one ``add.reduceat``, times 1/|C| in float32. Results therefore depend neither on
    the threads nor on how peers are split between processes. The exchange is part of the local
    step and, as in the paper, not counted in the byte counts.
    """

    def __init__(self, groups: np.ndarray, comm=None) -> None:
        groups = np.asarray(groups)
        if groups.ndim != 1 or groups.size == 0 or not np.issubdtype(groups.dtype, np.integer):
            raise ValueError(f"groups must be a non-empty 1-D int array (a clique id per peer), "
                             f"got {groups.dtype} {groups.shape}")
        if groups.min() < 0:
            raise ValueError("groups must hold clique ids >= 0")
        self.groups = groups.astype(np.int64)
        n_global = self.groups.size
        if comm is not None and comm.n_global != n_global:
            raise ValueError(f"groups must have one clique id per peer ({comm.n_global}), got "
                             f"{n_global}")
        self.comm = comm
        bounds = (np.array([0, n_global], dtype=np.int64) if comm is None
                  else np.asarray(comm.bounds, dtype=np.int64))
        rank = 0 if comm is None else comm.rank
        lo, hi = int(bounds[rank]), int(bounds[rank + 1])
        self._n = n = hi - lo
        owner = np.searchsorted(bounds, np.arange(n_global), side="right") - 1
        mine = np.unique(self.groups[lo:hi])  # the cliques of this process's peers
        members = np.flatnonzero(np.isin(self.groups, mine))  # increasing peer order
        foreign = members[(members < lo) | (members >= hi)]
        #: Where the received rows go: [own rows, foreign members in increasing peer order].
        self._recv = {int(r): int(np.count_nonzero(owner[foreign] == r))
                      for r in np.unique(owner[foreign])}
        # What this process sends: its peers in a clique of another process's peers.
        self._send = {}
        for r in range(len(bounds) - 1):
            if r == rank:
                continue
            a, b = int(bounds[r]), int(bounds[r + 1])
            theirs = np.flatnonzero(np.isin(self.groups[lo:hi], np.unique(self.groups[a:b])))
            if theirs.size:
                self._send[r] = theirs
        where = np.where((members >= lo) & (members < hi), members - lo,
                         n + np.searchsorted(foreign, members))
        order = np.argsort(self.groups[members], kind="stable")  # by clique, then peer
        self._rows = where[order]
        counts = np.bincount(self.groups[members[order]])
        ids = np.flatnonzero(counts)
        self._starts = np.concatenate(([0], np.cumsum(counts[ids])[:-1]))
        self._inv_sizes = (1.0 / np.bincount(self.groups)[ids]).astype(np.float32)[:, None]
        self._slot = np.searchsorted(ids, self.groups[lo:hi])
        self._n_foreign = foreign.size

    def __repr__(self) -> str:
        cliques = np.unique(self.groups).size
        return f"CliqueAveraging(cliques={cliques}, peers={self._n} of {self.groups.size})"

    def __call__(self, grad: np.ndarray) -> None:
        n = self._n
        if grad.ndim != 2 or grad.shape[0] != n:
            raise ValueError(f"grad must have shape ({n}, dim), got {grad.shape}")
        if self._n_foreign == 0 and not self._send:  # every member here: nothing to exchange
            buf = grad
        else:
            buf = np.empty((n + self._n_foreign, grad.shape[1]), dtype=grad.dtype)
            buf[:n] = grad
            recvs, start = {}, n
            for r, k in self._recv.items():  # owners in increasing order = buffer order
                recvs[r] = buf[start:start + k]
                start += k
            sends = {r: np.ascontiguousarray(grad[rows]) for r, rows in self._send.items()}
            self.comm.swap(sends, recvs, "clique averaging")
        means = np.add.reduceat(buf[self._rows], self._starts, axis=0)
        means *= self._inv_sizes
        grad[...] = means[self._slot]
