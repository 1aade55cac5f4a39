"""What the server baselines share: the server's model, seeded client sampling, local steps of a
subset of the peers, and the losses of the peers that did not train."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from decentlearn import compress
from decentlearn.algorithms.base import (Algorithm, Sampler, check_fraction, option,
                                         require_unfrozen)
from decentlearn.state import replicated

__all__ = ["ServerAlgorithm", "fill_inactive"]


class ServerAlgorithm(Algorithm):
    """Shared machinery: the server model, seeded client sampling, local steps of a subset."""

    state = replicated("server")
    #: Its messages go through a server: bytes the server sends are counted apart
    #: (``comm.server_bytes_sent``) and added to the run's byte totals.
    has_server = True

    @dataclass(frozen=True)
    class Options:
        participation: float = option(1.0, "fraction of the peers in (0, 1] that the server "
                                      "samples as clients each round")

        def __post_init__(self) -> None:
            check_fraction(self.participation, "participation")

    def __init__(self, *, participation: float = 1.0, variant: str = "atc", **kwargs) -> None:
        super().__init__(**kwargs)
        if variant != "atc":
            raise ValueError(f"{self.name} trains before communicating: variant must be 'atc', "
                             f"got {variant!r}")
        require_unfrozen(self)
        self.participation = check_fraction(participation, "participation")
        n = self.comm.n_peers
        self.n_clients = max(1, int(round(self.participation * self.comm.n_global)))
        #: The server's model (1, dim) float32; every row of ``params`` equals it between rounds.
        self.server = self.params[:1].copy()
        self._identity = compress.make("none")
        self._cut_all = np.full(n, self.model.dim, dtype=np.int64)

    def clients(self, t: int) -> np.ndarray:
        """The clients of round t (global ids): a uniform sample without replacement keyed by
        (seed, t)."""
        n = self.comm.n_global
        if self.n_clients == n:
            return np.arange(n, dtype=np.int64)
        rng = np.random.default_rng([self.seed, t])
        return np.sort(rng.choice(n, self.n_clients, replace=False)).astype(np.int64)

    def mine(self, clients: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """This process's share of the sorted global ``clients``: (active, a bool mask of its
        rows; their row indices; the position of its first client in ``clients``, the row
        offset of its messages' random keys)."""
        lo, n = self.comm.peer0, self.comm.n_peers
        a, b = np.searchsorted(clients, [lo, lo + n])
        rows = clients[a:b] - lo
        active = np.zeros(n, dtype=bool)
        active[rows] = True
        return active, rows, int(a)

    def train(self, sample: Sampler, active: np.ndarray, steps: int,
              first: int = 0) -> np.ndarray:
        """``steps`` SGD steps on the rows ``active`` (bool (P,)) of params; other rows and their
        optimizer state do not move. Gradients are computed for the active rows only. Returns the
        active peers' summed losses (0 elsewhere). Every process draws its minibatches even
        without active rows (the sampler's draws are shared by all peers). ``first``: the
        position of this process's first active row among the active rows of all processes
        (0 in one process): the int8 layers key the rounding noise of the r-th active row by
        ``first + r``, the row's position among all active rows, whichever process trains it."""
        losses = np.zeros(self.comm.n_peers)
        rows = np.flatnonzero(active)
        cut = np.where(active, 0, self._cut_all)
        # Positions and peer ids coincide when every row up to this process's last is active.
        whole = rows.size == self.comm.n_peers and first == getattr(self.comm, "peer0", 0)
        for _ in range(steps):
            x, y = sample()
            if whole:
                step_losses, grad = self.gradient(self.params, x, y)
                losses += step_losses
            else:
                grad = self._grad
                grad[~active] = 0
                if rows.size:
                    peer0 = self.model.peer0
                    self.model.peer0 = first
                    try:
                        step_losses, g = self.model.loss_and_grad(self.params[rows], x[rows],
                                                                  y[rows])
                    finally:
                        self.model.peer0 = peer0
                    grad[rows] = g
                    losses[rows] += step_losses
                else:  # no client here: step as a process whose peers train would
                    self.model.steps += 1
            # Inactive rows are frozen: they keep their values and a zero momentum buffer.
            self.optimizer.step(self.params, grad, frozen=cut)
        return losses

    def set_server(self, model: np.ndarray) -> None:
        self.server[...] = model
        self.params[...] = self.server

    def report(self) -> dict:
        """Clients per round and the bytes the server sent (to the clients, all rounds)."""
        return {"clients_per_round": self.n_clients,
                "server_bytes_sent": int(self.comm.server_bytes_sent)}


def fill_inactive(comm, losses: np.ndarray, active: np.ndarray,
                   clients: np.ndarray) -> np.ndarray:
    """Losses of the peers that trained; the others get the mean over all ``clients`` (they did
    not train), so the simulator's mean training loss is the participants' mean."""
    everyone = comm.allgather_peers(losses)
    losses[~active] = everyone[clients].mean()
    return losses
