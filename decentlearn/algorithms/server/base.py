"""What the server baselines share: the server's model, seeded client sampling, the clients'
aggregation weights, local steps of a subset of the peers, and the losses of the peers that did
not train."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from decentlearn import compress, ops
from decentlearn.algorithms.base import (Algorithm, Sampler, check_fraction, option,
                                         require_unfrozen)
from decentlearn.state import replicated

__all__ = ["WEIGHTINGS", "ServerAlgorithm", "fill_inactive"]

#: How the server weights its clients' messages: "samples" (client k by n_k / sum of the round's
#: n_j, McMahan et al. 2017, Algorithm 1) or "uniform" (1 / the round's clients).
WEIGHTINGS = ("samples", "uniform")


class ServerAlgorithm(Algorithm):
    """Shared machinery: the server model, seeded client sampling, local steps of a subset."""

    state = replicated("server", "bytes_up")
    #: Its messages go through a server: bytes the server sends are counted apart
    #: (``comm.server_bytes_sent``) and added to the run's byte totals.
    has_server = True
    #: The round's clients' x_i - x (``client_deltas``), their parameter rows and minibatches
    #: (``train``) and their decoded messages (``upload``).
    scratch = ("_delta", "_train_params", "_train_x", "_uploaded")

    @dataclass(frozen=True)
    class Options:
        participation: float = option(1.0, "fraction of the peers in (0, 1] that the server "
                                      "samples as clients each round")
        weighting: str = option("samples", "how the server weights its clients: samples "
                                "(n_k / n, FedAvg's rule) or uniform", metavar="RULE")

        def __post_init__(self) -> None:
            check_fraction(self.participation, "participation")
            check_weighting(self.weighting)

    def __init__(self, *, participation: float = 1.0, weighting: str = "samples",
                 variant: str = "atc", **kwargs) -> None:
        super().__init__(**kwargs)
        if variant != "atc":
            raise ValueError(f"{self.name} trains before communicating: variant must be 'atc', "
                             f"got {variant!r}")
        require_unfrozen(self)
        self.participation = check_fraction(participation, "participation")
        self.weighting = check_weighting(weighting)
        n = self.comm.n_peers
        #: Clients per round: m = max(1, floor(C·K)) (McMahan et al. 2017, Algorithm 1; floored
        #: as Flower's ``fraction_fit`` and the STC authors' ``participation_rate`` do).
        self.n_clients = max(1, int(np.floor(self.participation * self.comm.n_global + 1e-9)))
        #: The server's model (1, dim) float32; every row of ``params`` equals it between rounds.
        self.server = self.params[:1].copy()
        #: Bytes the clients sent to the server so far (all clients, all processes).
        self.bytes_up = 0
        self._identity = compress.make("none")
        self._cut_all = np.full(n, self.model.dim, dtype=np.int64)
        self._delta = self._train_params = self._train_x = self._uploaded = None

    def clients(self, t: int) -> np.ndarray:
        """The clients of round t (global ids): a uniform sample without replacement keyed by
        (seed, t)."""
        n = self.comm.n_global
        if self.n_clients == n:
            return np.arange(n, dtype=np.int64)
        rng = np.random.default_rng([self.seed, t])
        return np.sort(rng.choice(n, self.n_clients, replace=False)).astype(np.int64)

    def client_weights(self, clients: np.ndarray) -> np.ndarray:
        """The server's weight of each of ``clients`` (global ids), float64, summing to 1:
        n_k / sum_j n_j over the round's clients with ``weighting="samples"`` (McMahan et al.
        2017, Algorithm 1; Flower's ``aggregate``), 1 / len(clients) with "uniform" or when the
        sample counts are unknown or all zero."""
        counts = self.sample_counts
        if self.weighting == "samples" and counts is not None:
            n_k = counts[clients].astype(np.float64)
            total = n_k.sum()
            if total > 0:
                return n_k / total
        return np.full(clients.size, 1.0 / clients.size)

    def aggregate(self, rows: np.ndarray, clients: np.ndarray) -> np.ndarray:
        """The weighted average (1, dim) float32 of ``rows`` (one per client of ``clients``, in
        order): sum_k w_k rows_k with ``client_weights``, accumulated in float64 in client order
        (whatever the thread count: ops.column_mean, ops.weighted_column_sum on the run's
        threads). Uniform weights give the plain mean."""
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        nt = self.comm.n_threads
        if self.weighting == "uniform" or self.sample_counts is None:
            avg = ops.column_mean(rows, n_threads=nt)
        else:
            avg = ops.weighted_column_sum(rows, self.client_weights(clients), n_threads=nt)
        return avg.reshape(1, -1).astype(np.float32)

    def upload(self, compressor, payload, t: int, clients: np.ndarray) -> np.ndarray:
        """``comm.upload`` of this process's clients' messages; every client's decoded row (in
        the work array ``_uploaded``, valid until the next upload). The bytes are counted by the
        communicator (``upload_bytes``) and in ``bytes_up``."""
        out = self._kept("_uploaded", (np.asarray(clients).size, self.model.dim))
        decoded = self.comm.upload(compressor, payload, t, clients, out=out)
        self.bytes_up += int(self.comm.total(int(np.sum(payload.row_nbytes, dtype=np.int64))))
        return decoded

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
                if rows.size:
                    peer0 = self.model.peer0
                    self.model.peer0 = first
                    try:
                        step_losses, g = self.model.loss_and_grad(
                            self.rows_into("_train_params", self.params, rows),
                            self.rows_into("_train_x", x, rows), y[rows])
                    finally:
                        self.model.peer0 = peer0
                    # the clients' rows in place, zeros elsewhere, on the run's threads
                    ops.place_rows(g, rows, grad.shape[0], out=grad, n_threads=self.comm.n_threads)
                    losses[rows] += step_losses
                else:  # no client here: step as a process whose peers train would
                    grad[...] = 0
                    self.model.steps += 1
            # Inactive rows are frozen: they keep their values and a zero momentum buffer.
            self.optimizer.step(self.params, grad, frozen=cut)
        return losses

    def rows_of(self, a: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """``a[rows]`` (rows of the hosted peers' matrices or minibatches), gathered on the run's
        threads when ``a`` is C-contiguous (ops.take_rows)."""
        if a.flags.c_contiguous and a.dtype != object:
            return ops.take_rows(a, rows, n_threads=self.comm.n_threads)
        return a[rows]

    def rows_into(self, name: str, a: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """``a[rows]``, gathered on the run's threads into the work array ``self.<name>`` (made on
        first use, reused while the round's client count stays: no fresh pages to fault in every
        round) when ``a`` is C-contiguous."""
        if not a.flags.c_contiguous or a.dtype == object:
            return a[rows]
        buf = self._kept(name, (rows.size,) + a.shape[1:], dtype=a.dtype)
        return ops.take_rows(a, rows, out=buf, n_threads=self.comm.n_threads)

    def put_rows(self, a: np.ndarray, rows: np.ndarray, src: np.ndarray) -> None:
        """``a[rows] = src`` (``rows`` sorted and distinct, as ``mine`` gives them; ``src`` one
        row per index or one row for all), on the run's threads when ``a`` is C-contiguous."""
        if a.flags.c_contiguous and a.dtype == src.dtype and a.dtype != object:
            ops.put_rows(a, rows, src, n_threads=self.comm.n_threads)
        else:
            a[rows] = src

    def client_deltas(self, rows: np.ndarray) -> np.ndarray:
        """x_i - x of the clients ``rows`` (their rows of params less the server's model), in the
        work array ``_delta``, on the run's threads with NumPy's roundings."""
        delta = self.rows_into("_delta", self.params, rows)
        return ops.axpby(1, delta, -1, np.broadcast_to(self.server, delta.shape), out=delta,
                         n_threads=self.comm.n_threads)

    def set_server(self, model: np.ndarray) -> None:
        self.server[...] = model
        # the server's row into every peer's, on the run's threads
        ops.take_rows(self.server, np.zeros(self.params.shape[0], np.int64), out=self.params,
                      n_threads=self.comm.n_threads)

    def report(self) -> dict:
        """Clients per round, the weighting, and the bytes the server sent to its clients and
        received from them (all rounds, all clients)."""
        return {"clients_per_round": self.n_clients, "weighting": self.weighting,
                "server_bytes_sent": int(self.comm.server_bytes_sent),
                "bytes_server_to_client": int(self.comm.server_bytes_sent),
                "bytes_client_to_server": int(self.bytes_up)}


def check_weighting(value) -> str:
    """``value`` if it is one of WEIGHTINGS, else ValueError naming ``weighting``."""
    if value not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {', '.join(map(repr, WEIGHTINGS))}, "
                         f"got {value!r}")
    return value


def fill_inactive(comm, losses: np.ndarray, active: np.ndarray,
                   clients: np.ndarray) -> np.ndarray:
    """Losses of the peers that trained; the others get the mean over all ``clients`` (they did
    not train), so the simulator's mean training loss is the participants' mean."""
    everyone = comm.allgather_peers(losses)
    losses[~active] = everyone[clients].mean()
    return losses
