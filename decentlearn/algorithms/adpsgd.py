"""Asynchronous gossip, event-driven: AD-PSGD (Lian et al., ICML 2018) with pairwise averaging.

Every peer trains at its own speed on the simulated clock of :mod:`decentlearn.network`. Peer i
reads its model into a snapshot, trains ``local_steps`` SGD steps on it (samples / speed_i
seconds, times the straggler slow-down of that update), and when done it picks a neighbour j
uniformly (keyed by (seed, i, its update count)), the two average atomically, x_i = x_j =
(x_i + x_j) / 2, and i adds its update: x_i += snapshot_after - snapshot_before. j is not
interrupted: its own update was computed on its older snapshot (AD-PSGD's staleness). The
exchange costs i one message each way (latency + bytes / bandwidth, in parallel); i then starts
its next update. If the link {i, j} is down for that update, i applies its update alone.

Events sit in a heap ordered by (time, peer). Events that touch disjoint peers commute, so the
simulator takes them in waves: among the earliest events that all end before any event a wave can
create (time < first time + the shortest possible update), every event whose peer pair is disjoint
from those of all events before it, and runs each wave's training as one batched call over its
peers.
The result equals a one-event-at-a-time simulation, bit for bit, at any thread count. A
"round" of the simulator is n_peers updates; ``sim_seconds`` is the time of the last update.
Churn is simulated in synchronous mode only.

With the peers split over processes (the MPI backend), the event schedule does not depend on the
models: an update's duration comes from the peer's speed and the straggler hash, the partner from
a hash of (seed, peer, update count), a dropped link from a hash, a message's time from the network
model. So every process replays the whole schedule (the heap, the waves, the clock) exactly as one
process does, and does the numerical work of its own peers only: a wave's training of its peers,
and the pairwise averages, for which the two ends of a pair hosted by different processes swap
their rows (``comm.swap``: one message per pair of processes per wave, rows in wave order). The
float32 arithmetic is the same row by row, so the parameters are bit-identical; the losses of the
peers without an update in a round are filled from the all-gathered per-peer sums.
"""

from __future__ import annotations

import heapq

import numpy as np

from decentlearn.algorithms.base import Algorithm, Sampler
from decentlearn.state import nest, replicated, row
from decentlearn.comm import FLOAT32_BYTES
from decentlearn.network.model import NetworkModel
from decentlearn.seeds import (STREAM_BATCH, STREAM_DROP, STREAM_PARTNER, STREAM_STRAGGLER,
                               hash_u64, hash_uniform)
from decentlearn.errors import CheckpointError
from decentlearn.optim import OptimizerConfig, SGDConfig
from decentlearn.optim import make as make_optimizer
from decentlearn.topology import Topology, edges_of

__all__ = ["ADPSGD"]


class ADPSGD(Algorithm):
    """Event-driven AD-PSGD (see the module docstring)."""

    name = "adpsgd"
    #: ``updates`` and the event heap are the global schedule, the same on every process.
    state = row("snapshot") + replicated("updates", "_done")
    #: ``peer_state``: every peer's optimizer state (momentum, Adam's moments, ...) between its
    #: updates, held in a full-size optimizer that never steps.
    state_objects = ("peer_state",)

    def state_dict(self) -> dict:
        out = super().state_dict()
        # The event heap as a list in its exact order (same pops after a restore).
        out["heap_times"] = np.array([e[0] for e in self._heap], dtype=np.float64)
        out["heap_peers"] = np.array([e[1] for e in self._heap], dtype=np.int64)
        return out

    def state_kinds(self) -> dict[str, str]:
        kinds = super().state_kinds()
        # The (1, 1) optimizer only carries the round's learning rate: the same everywhere.
        kinds.update({k: "replicated" for k in kinds if k.startswith("optimizer.")})
        return {**kinds, "heap_times": "replicated", "heap_peers": "replicated"}

    def scratch_arrays(self) -> dict[str, np.ndarray]:
        """The work arrays, and the arrays of the last wave's optimizer (work arrays too)."""
        out = super().scratch_arrays()
        opt = self._wave_optimizer
        if opt is not None:
            out.update(nest("_wave_optimizer", {**opt.state_arrays(), **opt.scratch_arrays()}))
        return out

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        times, peers = state.get("heap_times"), state.get("heap_peers")
        if not (isinstance(times, np.ndarray) and isinstance(peers, np.ndarray)
                and times.shape == peers.shape and times.ndim == 1
                and peers.dtype == np.int64 and times.dtype == np.float64
                and (peers.size == 0 or (peers.min() >= 0 and peers.max() < self.comm.n_global))):
            raise CheckpointError("checkpoint's asynchronous event heap is malformed")
        self._heap = [(float(a), int(b)) for a, b in zip(times, peers)]

    def __init__(self, *, network: NetworkModel, partition, x_train, y_train, batch_size: int,
                 sgd: SGDConfig | OptimizerConfig, segments=None, **kwargs) -> None:
        super().__init__(**kwargs)
        comm = self.comm
        topology = comm.topology
        if not isinstance(topology, Topology) or topology.period != 1 or topology.directed:
            raise ValueError("asynchronous mode needs a static undirected topology (ring, torus, "
                             f"...), got {topology.name!r}")
        if network.config.churn_leave > 0:
            raise ValueError("asynchronous mode does not simulate churn: set churn_leave = 0 "
                             f"(network {network.config.name!r} has {network.config.churn_leave})")
        if self.compressed:
            raise ValueError("asynchronous mode sends float32 models: compress must be 'none'")
        if self.frozen is not None:
            raise ValueError("asynchronous mode does not support --cocofl")
        n = comm.n_global  # all peers (a process of the MPI backend hosts rows of some)
        self.network = network
        self.partition, self.x_train, self.y_train = partition, x_train, y_train
        self.batch_size = batch_size
        self.snapshot = self.params.copy()
        if isinstance(sgd, SGDConfig):
            sgd = OptimizerConfig(name="sgd", lr=sgd.lr, momentum=sgd.momentum,
                                  nesterov=sgd.nesterov, weight_decay=sgd.weight_decay)
        self.sgd, self._segments = sgd, segments
        self.peer_state = make_optimizer(sgd, self.params.shape, segments=segments)
        self.updates = np.zeros(n, dtype=np.int64)  # finished updates per peer
        dst, src = edges_of(topology, 0)  # sorted by receiver, then sender
        self._indptr = np.concatenate(([0], np.cumsum(np.bincount(dst, minlength=n))))
        self._indices = src
        self._samples = float(self.local_steps * batch_size)
        fastest = float(self._samples / network.compute_sps.max())
        self._horizon = fastest  # no new event comes sooner than this after its parent
        self._heap: list[tuple[float, int]] = []
        first = self._update_time(np.arange(n), self.updates)
        for i in range(n):
            heapq.heappush(self._heap, (float(first[i]), i))
        #: The optimizer of the last wave's size (its state is copied in from ``peer_state`` and
        #: back, so a new one for another size changes nothing but memory).
        self._wave_optimizer = None
        self._done = 0
        #: Largest wave (None: unbounded); 1 runs one event at a time (the reference order).
        self.max_wave: int | None = None

    def _update_time(self, peers: np.ndarray, counts: np.ndarray) -> np.ndarray:
        c = self.network.config
        seconds = self._samples / self.network.compute_sps[peers]
        if c.straggler_prob > 0:
            slow = (hash_uniform(self.network.seed, STREAM_STRAGGLER, counts, peers)
                    < c.straggler_prob)
            seconds = np.where(slow, seconds * c.straggler_slowdown, seconds)
        return seconds

    def _partner(self, i: int, count: int) -> int:
        lo, hi = self._indptr[i], self._indptr[i + 1]
        if hi == lo:
            return i
        k = int(hash_u64(self.network.seed, STREAM_PARTNER, i, count)[0] % np.uint64(hi - lo))
        return int(self._indices[lo + k])

    def _wave(self, limit: int) -> list[tuple[float, int, int]]:
        """Pops the next wave (see the module docstring): [(time, peer, partner)], in time order.

        Scans the earliest ``limit`` events that start before any event a wave can create; an
        event joins the wave when its peers are disjoint from those of every event scanned before
        it (taken or not), so it commutes with all of them; the others go back to the heap."""
        wave: list[tuple[float, int, int]] = []
        skipped: list[tuple[float, int]] = []
        blocked: set[int] = set()
        start = self._heap[0][0]
        while self._heap and len(wave) + len(skipped) < limit:
            time, i = self._heap[0]
            if wave and time >= start + self._horizon:
                break
            heapq.heappop(self._heap)
            j = self._partner(i, int(self.updates[i]))
            if i in blocked or j in blocked:
                skipped.append((time, i))
            else:
                wave.append((time, i, j))
            blocked.update((i, j))
            if self.max_wave is not None and len(wave) >= self.max_wave:
                break
        for item in skipped:
            heapq.heappush(self._heap, item)
        return wave

    def _train(self, peers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """local_steps SGD steps from the peers' snapshots; (losses, delta = after - before).
        ``peers`` are global ids; their rows here are ``peers - comm.peer0`` (an MPI rank's
        block)."""
        k, rows = peers.size, peers - self.comm.peer0
        opt = self._wave_optimizer
        if opt is None or opt.shape[0] != k:
            opt = self._wave_optimizer = make_optimizer(self.sgd, (k, self.params.shape[1]),
                                                        segments=self._segments)
        full = self.peer_state.state_arrays()
        for name, a in opt.state_arrays().items():
            a[...] = full[name][rows]
        opt.lr = self.optimizer.lr  # this round's (a schedule sets it)
        before = self.snapshot[rows]
        local = before.copy()
        p = self.partition
        sizes = np.diff(p.offsets)[peers]
        losses = np.zeros(k)
        for s in range(self.local_steps):
            step = self.updates[peers] * self.local_steps + s
            u = hash_uniform(self.seed, STREAM_BATCH, peers[:, None], step[:, None],
                             np.arange(self.batch_size)[None, :])
            pick = p.indices[p.offsets[peers][:, None] + (u * sizes[:, None]).astype(np.int64)]
            step_losses, grad = self.model.loss_and_grad(local, self.x_train[pick],
                                                         self.y_train[pick])
            opt.step(local, grad)
            losses += step_losses
        for name, a in opt.state_arrays().items():
            full[name][rows] = a
        local -= before
        return losses / self.local_steps, local

    def _train_rows(self, peers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``_train`` for this process's ``peers`` (global ids) of a wave; with none, it counts
        the gradient calls a process whose peers train would make (int8 rounding keys)."""
        if peers.size == 0:
            self.model.steps += self.local_steps
            return np.zeros(0), np.zeros((0, self.params.shape[1]), dtype=np.float32)
        return self._train(peers)

    def _swap_pairs(self, a: np.ndarray, b: np.ndarray, t: int) -> tuple[np.ndarray, np.ndarray]:
        """For every pair (a[k], b[k]) with one end here and the other on another process, this
        process's row goes there (rows in wave order, ``comm.swap``). Returns the far ends'
        global ids and their rows, received (none in one process)."""
        comm, X = self.comm, self.params
        lo, hi = comm.peer0, comm.peer0 + comm.n_peers
        k = np.arange(a.size)
        ends = np.concatenate([np.stack([a, b, k], axis=1), np.stack([b, a, k], axis=1)])
        ends = ends[np.argsort(ends[:, 2], kind="stable")]  # wave order
        other = np.searchsorted(comm.bounds, ends[:, 1], side="right") - 1
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
        """x_i = x_j = (x_i + x_j) / 2 for the wave's pairs (a, b) with an end in this process, in
        float32: 0.5 * (x_a + x_b); a far end's row comes from its process."""
        lo, n = self.comm.peer0, self.comm.n_peers
        X = self.params
        far_ids, far_rows = self._swap_pairs(a, b, t)
        in_a, in_b = (a >= lo) & (a < lo + n), (b >= lo) & (b < lo + n)
        sel = in_a | in_b
        if not sel.any():
            return
        if far_ids.size:
            H = np.concatenate([X, far_rows])  # [own rows, the far ends' rows]
            order = np.argsort(far_ids)

            def col(p: np.ndarray) -> np.ndarray:
                local = (p >= lo) & (p < lo + n)
                pos = np.searchsorted(far_ids[order], p).clip(max=far_ids.size - 1)
                return np.where(local, p - lo, n + order[pos])
        else:  # every end here (one process): the rows themselves
            H = X

            def col(p: np.ndarray) -> np.ndarray:
                return p - lo
        avg = 0.5 * (H[col(a[sel])] + H[col(b[sel])])
        X[a[sel & in_a] - lo] = avg[in_a[sel]]
        X[b[sel & in_b] - lo] = avg[in_b[sel]]

    def round(self, sample: Sampler, t: int) -> np.ndarray:
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
            for k in range(peers.size):
                heapq.heappush(self._heap, (float(nxt[k]), int(peers[k])))
            np.add.at(loss_sum, mine, losses)
            np.add.at(loss_count, mine, 1)
            comm.event_seconds = float(times[-1])
            self._done += peers.size
        if n != N:  # every process's peers' losses
            loss_sum = comm.allgather_peers(loss_sum)
            loss_count = comm.allgather_peers(loss_count)
        seen = loss_count > 0
        out = np.full(N, loss_sum[seen].sum() / loss_count[seen].sum())
        out[seen] = loss_sum[seen] / loss_count[seen]
        return out[lo:lo + n]

    def _down(self, counts: np.ndarray, peers: np.ndarray, partners: np.ndarray) -> np.ndarray:
        if self.network.config.link_drop == 0:
            return np.zeros(peers.size, dtype=bool)
        lo, hi = np.minimum(peers, partners), np.maximum(peers, partners)
        return hash_uniform(self.network.seed, STREAM_DROP, counts, lo, hi) \
            < self.network.config.link_drop
