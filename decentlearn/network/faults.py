"""Per-round faults at the communicator seam: a view of a topology with the round's dropped links
removed, and the hook that freezes (or resets) the state of peers that are offline.

A message that does not arrive (its link is down, its sender or receiver is offline, or its sender
is a straggler that skips the round) leaves its weight where push-sum conservation needs it:

* doubly and column-stochastic W: with the sender, W'_jj += W_ij. Column sums stay 1; on a
  symmetric W, where links drop in both directions together, W' stays symmetric and therefore
  doubly stochastic (Metropolis-like re-normalisation on the surviving edges);
* row-stochastic W (averaging what arrives): with the receiver, W'_ii += W_ij. Row sums stay 1.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from decentlearn.network.model import NetworkModel
from decentlearn.topology import RoundTopology, round_matrix, stochastic_kind

__all__ = ["FaultyTopology", "OfflineHook"]


class FaultyTopology(RoundTopology):
    """``base`` with the links that ``model`` drops in round t removed (see the module
    docstring). Counts scheduled and dropped messages, offline and straggling peers per round."""

    def __init__(self, base, model: NetworkModel, kind: str | None = None) -> None:
        # ``kind``: what the algorithm needs kept ("column" for push-sum), default the base's own.
        kind = kind or stochastic_kind(base)
        if model.n != base.n:
            raise ValueError(f"network has {model.n} peers but the topology {base.n}")
        if kind == "doubly" and base.directed:
            raise ValueError(
                f"link drops or churn on the directed topology {base.name!r} cannot keep W doubly "
                "stochastic: use a push-sum algorithm (--algorithm pushsum) or an undirected graph")
        super().__init__(f"{base.name}+faults", base.n, self._faulty, weights=base.weights,
                         stochastic=kind, period=None, directed=base.directed)
        self.base, self.model = base, model
        self.scheduled = self.dropped = 0
        self.peer_rounds = self.offline = self.straggling = 0
        self._counted = -1

    def _faulty(self, t: int) -> sp.csr_array:
        w = round_matrix(self.base, t)
        n = self.n
        rows = np.repeat(np.arange(n), np.diff(w.indptr))
        cols = w.indices.astype(np.int64)
        off = rows != cols
        online = self.model.online(t)
        absent = ~online
        straggler = self.model.stragglers(t)
        if self.model.config.straggler_mode == "skip":
            absent = absent | straggler
        down = off & (self.model.link_down(t, rows, cols) | absent[rows] | absent[cols])
        data = w.data.copy()
        moved = data[down]
        data[down] = 0.0
        keeper = cols[down] if self.stochastic != "row" else rows[down]
        diag = np.flatnonzero(~off)  # every W_t here stores its diagonal
        if diag.size != n:
            raise ValueError(f"W_{t} of {self.base.name!r} must store all {n} diagonal entries")
        data[diag] += np.bincount(keeper, weights=moved, minlength=n)
        if t > self._counted:
            self._counted = t
            self.scheduled += int(off.sum())
            self.dropped += int(down.sum())
            self.peer_rounds += n
            self.offline += int((~online).sum())
            self.straggling += int(straggler.sum())
        out = sp.csr_array((data, w.indices.copy(), w.indptr.copy()), shape=(n, n))
        out.has_canonical_format = True
        return out

    _state = ("scheduled", "dropped", "peer_rounds", "offline", "straggling", "_counted")

    def state_dict(self) -> dict:
        from decentlearn.state import state_of
        return state_of(self, self._state)

    def load_state_dict(self, state: dict) -> None:
        from decentlearn.state import load_attrs
        load_attrs(self, self._state, state, "comm.mixing.")

    def stats(self) -> dict:
        return {
            "link_drop_rate": self.dropped / self.scheduled if self.scheduled else 0.0,
            "offline_rate": self.offline / self.peer_rounds if self.peer_rounds else 0.0,
            "straggler_rate": self.straggling / self.peer_rounds if self.peer_rounds else 0.0,
        }


class OfflineHook:
    """Keeps offline peers out of training: before round t it saves the offline peers' rows of the
    algorithm's per-peer (n, dim) state, as the algorithm declares it (``state_kinds()``:
    parameters, replicas, trackers), and of the optimizer's momentum, and after the round it writes them back, so an offline peer's
    state does not move. With churn_state "reset", a peer that comes back in round t restarts from
    ``init`` (the initial model) with zero momentum; with "keep" it resumes where it left."""

    def __init__(self, model: NetworkModel, algorithm, init: np.ndarray,
                 peers: slice | None = None) -> None:
        self.model, self.algorithm = model, algorithm
        self.init = np.asarray(init, dtype=np.float32)
        #: The peers whose rows the algorithm holds (a process's block; default all).
        self.peers = slice(0, model.n) if peers is None else peers
        self._saved: dict[str, np.ndarray] = {}
        self._rows: np.ndarray | None = None

    def _arrays(self) -> dict[str, np.ndarray]:
        alg = self.algorithm
        n = self.peers.stop - self.peers.start
        found = {}
        for name, kind in alg.state_kinds().items():
            # The algorithm's own rows; its objects' state is the optimizer's, below.
            value = getattr(alg, name, None) if kind == "row" and "." not in name else None
            if isinstance(value, np.ndarray) and value.ndim == 2 and value.shape[0] == n:
                found[name] = value
        for name, a in _optimizer_state(alg).items():
            found[f"optimizer.{name}"] = a
        return found

    def before_round(self, t: int) -> None:
        if self.model.config.churn_leave == 0:
            return
        if self.model.config.churn_state == "reset":
            back = np.flatnonzero(self.model.joined(t)[self.peers])
            if back.size:
                self.algorithm.params[back] = self.init
                numerators = getattr(self.algorithm, "numerators", None)  # push-sum: x = z w
                if isinstance(numerators, np.ndarray):
                    weights = self.algorithm.weights[back].astype(np.float32)
                    numerators[back] = self.init * weights[:, None]
                for a in _optimizer_state(self.algorithm).values():
                    a[back] = 0
        rows = np.flatnonzero(~self.model.online(t)[self.peers])
        self._rows = rows
        self._saved = {k: a[rows].copy() for k, a in self._arrays().items()} if rows.size else {}

    def after_round(self, t: int) -> None:
        if self._rows is None or self._rows.size == 0:
            return
        arrays = self._arrays()
        for name, rows in self._saved.items():
            if name in arrays:
                arrays[name][self._rows] = rows
        self._rows, self._saved = None, {}


def _optimizer_state(alg) -> dict[str, np.ndarray]:
    """The optimizer's per-peer state arrays (momentum, Adam's moments and step counts, ...)."""
    opt = getattr(alg, "optimizer", None)
    return opt.state_arrays() if hasattr(opt, "state_arrays") else {}
