"""Event-driven AD-PSGD (``--async``, :mod:`decentlearn.algorithms.adpsgd`) on MPI ranks.

The event schedule does not depend on the models: an update's duration comes from the peer's
speed and the straggler hash, the partner from a hash of (seed, peer, update count), a dropped
link from a hash, a message's time from the network model. So every rank replays the whole
schedule (the heap, the waves of commuting events, the clock) exactly as one process does, and
does the numerical work of its own peers only: a wave's training of its peers (one batched call;
each row depends on its own peer only), and the pairwise averages x_i = x_j = (x_i + x_j) / 2,
for which the two ends of a pair hosted by different ranks swap their rows (one message per pair
of ranks per wave, rows in wave order). The float32 arithmetic is the simulator's, row by row, so
the parameters are bit-identical; the losses of the peers without an update in a round are
filled from the all-gathered per-peer sums, as in one process.

Cost: one exchange per wave (a round of n updates takes a few waves), where one process needs
none; the ranks train their share of each wave in parallel.
"""

from __future__ import annotations

import heapq

import numpy as np

from decentlearn.comm import FLOAT32_BYTES
from decentlearn.algorithms.adpsgd import ADPSGD

__all__ = ["MPIADPSGD"]


class MPIADPSGD(ADPSGD):
    """``ADPSGD`` with the peers split over ranks (module docstring): ``params``, ``snapshot``
    and the per-peer optimizer state hold this rank's rows; ``updates`` and the event heap are
    global and the same on every rank."""

    def _train_rows(self, peers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``ADPSGD._train`` for this rank's ``peers`` (global ids) of a wave."""
        if peers.size == 0:  # as a process whose peers train: the same count of gradient calls
            self.model.steps += self.local_steps
            return np.zeros(0), np.zeros((0, self.params.shape[1]), dtype=np.float32)
        return self._train(peers)

    def _swap_pairs(self, a: np.ndarray, b: np.ndarray, t: int) -> tuple[np.ndarray, np.ndarray]:
        """For every pair (a[k], b[k]) with one end here and the other on another rank, this
        rank's row goes there (rows in wave order). Returns the far ends' global ids and their
        rows, received."""
        comm, X = self.comm, self.params
        lo, hi = comm.peer0, comm.peer0 + comm.n_peers
        k = np.arange(a.size)
        ends = np.concatenate([np.stack([a, b, k], axis=1), np.stack([b, a, k], axis=1)])
        ends = ends[np.argsort(ends[:, 2], kind="stable")]  # wave order
        other = comm._owner(ends[:, 1])
        cross = (ends[:, 0] >= lo) & (ends[:, 0] < hi) & (other != comm.rank)
        here, far, where = ends[cross, 0], ends[cross, 1], other[cross]
        ranks = [int(r) for r in np.unique(where)]
        sends = {r: np.ascontiguousarray(X[here[where == r] - lo]) for r in ranks}
        recvs = {r: np.empty((int(np.count_nonzero(where == r)), X.shape[1]), dtype=X.dtype)
                 for r in ranks}
        comm.swap(sends, recvs, f"asynchronous averaging of round {t}")
        ids = [far[where == r] for r in ranks]
        rows = [recvs[r] for r in ranks]
        return (np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64),
                np.concatenate(rows) if rows else np.zeros((0, X.shape[1]), dtype=X.dtype))

    def _average(self, a: np.ndarray, b: np.ndarray, t: int) -> None:
        """x_i = x_j = (x_i + x_j) / 2 for the wave's pairs (a, b) with an end on this rank, in
        the simulator's float32 arithmetic: 0.5 * (x_a + x_b)."""
        lo, n = self.comm.peer0, self.comm.n_peers
        X = self.params
        far_ids, far_rows = self._swap_pairs(a, b, t)
        in_a, in_b = (a >= lo) & (a < lo + n), (b >= lo) & (b < lo + n)
        sel = in_a | in_b
        if not sel.any():
            return
        H = np.concatenate([X, far_rows])  # [own rows, the far ends' rows]
        order = np.argsort(far_ids)

        def col(p: np.ndarray) -> np.ndarray:
            local = (p >= lo) & (p < lo + n)
            pos = np.searchsorted(far_ids[order], p).clip(max=max(0, far_ids.size - 1))
            return np.where(local, p - lo, n + (order[pos] if far_ids.size else 0))
        avg = 0.5 * (H[col(a[sel])] + H[col(b[sel])])
        X[a[sel & in_a] - lo] = avg[in_a[sel]]
        X[b[sel & in_b] - lo] = avg[in_b[sel]]

    def round(self, sample, t: int) -> np.ndarray:
        comm = self.comm
        N, n, lo = comm.n_global, comm.n_peers, comm.peer0
        loss_sum, loss_count = np.zeros(n), np.zeros(n)
        target = (t + 1) * N
        X = self.params
        row_bytes = X.shape[1] * FLOAT32_BYTES
        while self._done < target:
            wave = self._wave(target - self._done)
            times = np.array([w[0] for w in wave])
            peers = np.array([w[1] for w in wave], dtype=np.int64)
            partners = np.array([w[2] for w in wave], dtype=np.int64)
            here = (peers >= lo) & (peers < lo + n)
            losses, delta = self._train_rows(peers[here])
            counts = self.updates[peers]
            paired = (partners != peers) & ~self._down(counts, peers, partners)
            a, b = peers[paired], partners[paired]
            self._average(a, b, t)
            mine = peers[here] - lo
            X[mine] += delta
            self.snapshot[mine] = X[mine]
            for ends in (a, b):
                loc = ends[(ends >= lo) & (ends < lo + n)] - lo
                np.add.at(comm.bytes_sent, loc, row_bytes)
            exchange = np.zeros(peers.size)
            exchange[paired] = self.network.message_time(a, b, row_bytes)
            self.updates[peers] += 1
            nxt = times + exchange + self._update_time(peers, self.updates[peers])
            for k in range(peers.size):  # the schedule, as ADPSGD.round
                heapq.heappush(self._heap, (float(nxt[k]), int(peers[k])))
            np.add.at(loss_sum, mine, losses)
            np.add.at(loss_count, mine, 1)
            comm.event_seconds = float(times[-1])
            self._done += peers.size
        loss_sum = comm.allgather_peers(loss_sum)
        loss_count = comm.allgather_peers(loss_count)
        seen = loss_count > 0
        out = np.full(N, loss_sum[seen].sum() / loss_count[seen].sum())
        out[seen] = loss_sum[seen] / loss_count[seen]
        return out[lo:lo + n]
