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
"""

from __future__ import annotations

import heapq

import numpy as np

from decentlearn.algorithms.base import Algorithm, Sampler
from decentlearn.state import replicated, row
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
        self._optimizers: dict[int, object] = {}
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
        opt = self._optimizers.get(k)
        if opt is None:
            opt = self._optimizers[k] = make_optimizer(self.sgd, (k, self.params.shape[1]),
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

    def round(self, sample: Sampler, t: int) -> np.ndarray:
        n = self.comm.n_peers
        loss_sum, loss_count = np.zeros(n), np.zeros(n)
        target = (t + 1) * n
        X = self.params
        row_bytes = self.params.shape[1] * FLOAT32_BYTES
        while self._done < target:
            wave = self._wave(target - self._done)
            times = np.array([w[0] for w in wave])
            peers = np.array([w[1] for w in wave], dtype=np.int64)
            partners = np.array([w[2] for w in wave], dtype=np.int64)
            losses, delta = self._train(peers)
            counts = self.updates[peers]
            paired = (partners != peers) & ~self._down(counts, peers, partners)
            a, b = peers[paired], partners[paired]
            avg = 0.5 * (X[a] + X[b])
            X[a], X[b] = avg, avg
            X[peers] += delta
            self.snapshot[peers] = X[peers]
            np.add.at(self.comm.bytes_sent, a, row_bytes)
            np.add.at(self.comm.bytes_sent, b, row_bytes)
            exchange = np.zeros(peers.size)
            exchange[paired] = self.network.message_time(a, b, row_bytes)
            self.updates[peers] += 1
            nxt = times + exchange + self._update_time(peers, self.updates[peers])
            for k in range(peers.size):
                heapq.heappush(self._heap, (float(nxt[k]), int(peers[k])))
            np.add.at(loss_sum, peers, losses)
            np.add.at(loss_count, peers, 1)
            self.comm.event_seconds = float(times[-1])
            self._done += peers.size
        seen = loss_count > 0
        out = np.full(n, loss_sum[seen].sum() / loss_count[seen].sum())
        out[seen] = loss_sum[seen] / loss_count[seen]
        return out

    def _down(self, counts: np.ndarray, peers: np.ndarray, partners: np.ndarray) -> np.ndarray:
        if self.network.config.link_drop == 0:
            return np.zeros(peers.size, dtype=bool)
        lo, hi = np.minimum(peers, partners), np.maximum(peers, partners)
        return hash_uniform(self.network.seed, STREAM_DROP, counts, lo, hi) \
            < self.network.config.link_drop
