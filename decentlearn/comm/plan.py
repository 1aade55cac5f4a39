"""The plan of one round's exchange for a process hosting a block of peers: which rows it sends
and receives, and its rows of W_t renumbered into its halo buffer. The in-process communicator is
the one-process case (no halo), so a mixing rule written over ``plan``/``halo_rows`` runs on any
backend."""

from __future__ import annotations

import numpy as np

from decentlearn import ops

__all__ = ["RoundPlan"]


class RoundPlan:
    """Who sends which rows to whom in one round, and process ``rank``'s rows of W_t renumbered
    into its halo buffer [local rows, received rows in increasing peer order]. ``bounds``:
    process r hosts peers [bounds[r], bounds[r + 1]); with one process there is no halo and the
    local rows of W_t are W_t itself."""

    def __init__(self, indptr, indices, data, bounds: np.ndarray, rank: int) -> None:
        lo, hi = int(bounds[rank]), int(bounds[rank + 1])
        n = len(indptr) - 1
        owner = np.searchsorted(bounds, np.arange(n), side="right") - 1
        rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
        cols = indices.astype(np.int64)
        row_owner, col_owner = owner[rows], owner[cols]
        # What this rank receives: the foreign columns of its own rows.
        mine = row_owner == rank
        foreign = np.unique(cols[mine & (col_owner != rank)])
        self.halo_peers = foreign
        self.recv = {int(s): foreign[owner[foreign] == s] for s in np.unique(owner[foreign])}
        # What it sends: its peers that other ranks' rows reference.
        out = (col_owner == rank) & (row_owner != rank)
        pairs = np.unique(np.stack([row_owner[out], cols[out]], axis=1), axis=0) \
            if out.any() else np.empty((0, 2), dtype=np.int64)
        self.send = {int(d): pairs[pairs[:, 0] == d, 1] - lo for d in np.unique(pairs[:, 0])}
        # The local CSR (entries in stored order), columns renumbered into the halo buffer.
        a, b = int(indptr[lo]), int(indptr[hi])
        self.indptr = (indptr[lo:hi + 1] - indptr[lo]).astype(np.int64)
        local_cols = cols[a:b]
        inside = (local_cols >= lo) & (local_cols < hi)
        renum = np.where(inside, local_cols - lo,
                         (hi - lo) + np.searchsorted(foreign, local_cols))
        self.indices = renum.astype(np.int32)
        self.data = np.ascontiguousarray(data[a:b], dtype=np.float32)
        self.n_cols = (hi - lo) + foreign.size
        #: Out-neighbour counts of the local peers (bytes = counts · payload size).
        self.send_counts = None
        #: The distributed-graph communicator of this round's exchange (transport "neighbor").
        self.graph_comm = None

    def gossip(self, halo: np.ndarray, out: np.ndarray | None, n_threads: int) -> np.ndarray:
        """The local rows of W_t applied to the halo buffer (the C gossip kernel, each row's CSR
        entries summed in stored order: every output row equals the one-process result)."""
        return ops.gossip((self.indptr, self.indices, self.data), halo, out=out,
                          n_threads=n_threads, n_cols=self.n_cols)
