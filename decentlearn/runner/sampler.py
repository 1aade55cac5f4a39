"""Each peer's minibatches and the evaluation subsets: the peer sampler, the stratified evaluation
order, and the evaluation budget."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from decentlearn.data import Partition
from decentlearn.ops import copy as ops_copy
from decentlearn.errors import CheckpointError
from decentlearn.state import load_attrs, state_of

if TYPE_CHECKING:
    from decentlearn.runner.config import RunConfig

__all__ = ["EVAL_BUDGET", "EVAL_PEER_BUDGET", "PeerSampler", "eval_sizes", "stratified_order"]


#: Evaluation budget: test-sample forward passes per evaluation, as a fraction of the forward-pass
#: equivalents of the training since the previous one (a training step costs about 3 forwards).
#: EVAL_BUDGET is the total; the peers' models get EVAL_PEER_BUDGET of it (or more, when the
#: floor of 10 samples per class binds) and the average model the rest.
EVAL_BUDGET = 0.10


EVAL_PEER_BUDGET = 0.05


def eval_sizes(config: RunConfig, n_test: int, n_classes: int) -> tuple[int, int]:
    """(samples per peer, samples for the average model) of an intermediate evaluation.

    With ``F = eval_every * local_steps * batch_size * 3`` forward passes of training per peer
    since the last evaluation: ``eval_peer_samples`` when set, else the largest count within
    EVAL_PEER_BUDGET of F, but at least 10 per class. The average model (one model, not P) gets
    what is left of the total EVAL_BUDGET of all peers' training, ``EVAL_BUDGET * F * peers -
    peers * S_peer``, and at least S_peer: when the per-class floor makes the peers' share exceed
    EVAL_PEER_BUDGET, the average model's share shrinks instead of the total growing. Both at most
    ``n_test``; the final evaluation runs the average model on the whole evaluation set. This
    keeps evaluation near 10% of a run's compute (measured: docs/performance.md, "Round time")."""
    c = config
    train_fwd = c.eval_every * c.local_steps * c.batch_size * 3  # per peer
    if c.eval_peer_samples is not None:
        peer = c.eval_peer_samples
    else:
        peer = max(10 * n_classes, int(EVAL_PEER_BUDGET * train_fwd))
    peer = min(n_test, peer)
    avg = min(n_test, max(peer, int(EVAL_BUDGET * train_fwd * c.peers) - c.peers * peer))
    return peer, avg


def stratified_order(y: np.ndarray, n_classes: int, seed: int = 0) -> np.ndarray:
    """A fixed order of the indices of ``y`` whose every prefix is stratified: each class appears
    in proportion to its frequency (within one sample), in a random order fixed by ``seed``."""
    y = np.asarray(y)
    rng = np.random.default_rng(seed)
    key = np.empty(len(y))
    for k in range(n_classes):
        idx = np.flatnonzero(y == k)
        if idx.size:
            # the r-th sample of class k (random order) goes to position (r + u) / n_k
            key[idx] = (rng.permutation(idx.size) + rng.random(idx.size)) / idx.size
    return np.argsort(key, kind="stable")


class PeerSampler:
    """Draws each peer's minibatch indices from its own partition, all peers at once.

    Each peer walks through its own shuffled order of its samples, B at a time, and reshuffles when
    it passes the end (a batch that straddles the end wraps to the start of the old order; a peer
    with fewer than B samples repeats them). ``next()`` returns (P, B) indices
    into the training set; the draw and the reshuffles of the peers whose epoch ended are C
    kernels over peers (``ops.batch_indices``, ``ops.shuffle_segments``), no loop over peers.
    """

    def __init__(self, partition: Partition, batch_size: int, seed: int,
                 n_threads: int | None = None) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        empty = np.flatnonzero(np.asarray(partition.sizes) < 1)
        if empty.size:
            raise ValueError(f"partition: every peer needs at least one sample to draw batches "
                             f"from; peers {empty[:8].tolist()}{' ...' if empty.size > 8 else ''} "
                             f"have none")
        self.partition = partition
        self.batch_size = batch_size
        #: threads of the index draw and the reshuffles (None: the process default)
        self.n_threads = n_threads
        self._rng = np.random.default_rng(seed)
        self._perm = np.ascontiguousarray(partition.indices, dtype=np.int64).copy()
        self._starts = np.ascontiguousarray(partition.offsets[:-1], dtype=np.int64)
        self._sizes = np.ascontiguousarray(partition.sizes, dtype=np.int64)
        self._shuffle_many(np.arange(partition.n_peers))
        self._cursor = np.zeros(partition.n_peers, dtype=np.int64)

    def state_dict(self) -> dict:
        """Every peer's shuffled order, cursor and the shuffling generator (checkpoints)."""
        return state_of(self, ("_perm", "_cursor", "_rng"))

    def load_state_dict(self, state: dict) -> None:
        load_attrs(self, ("_perm", "_cursor", "_rng"), state, "sampler.")
        self._perm = np.ascontiguousarray(self._perm, dtype=np.int64)  # the kernels' layout
        self._cursor = np.ascontiguousarray(self._cursor, dtype=np.int64)
        p = self.partition
        if (np.any(self._cursor < 0) or np.any(self._cursor >= self._sizes)
                or not np.array_equal(np.sort(self._perm), np.sort(p.indices))):
            raise CheckpointError("checkpoint's sampler state does not fit this run's partition")

    def next(self) -> np.ndarray:
        idx = ops_copy.batch_indices(self._perm, self._starts, self._sizes, self._cursor,
                                     self.batch_size, n_threads=self.n_threads)
        self._cursor += self.batch_size
        ended = np.flatnonzero(self._cursor >= self._sizes)
        if ended.size:
            self._shuffle_many(ended)
            np.remainder(self._cursor, self._sizes, out=self._cursor)  # the others are < size
        return idx

    def _shuffle_many(self, peers: np.ndarray) -> None:
        """Reshuffles the segments of ``peers`` (ascending): one uniform draw for all their
        samples, then each segment ordered by (segment, draw) as one stable sort of them all would
        — a uniform random permutation of each segment, the segments on the run's threads."""
        u = self._rng.random(int(self._sizes[peers].sum()))
        ops_copy.shuffle_segments(self._perm, self._starts, self._sizes, peers, u,
                                  n_threads=self.n_threads)
