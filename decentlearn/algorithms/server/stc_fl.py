"""Sparse Ternary Compression in federated mode (Sattler et al., "Robust and Communication-Efficient
Federated Learning from Non-IID Data", 2019): upstream and downstream STC with error feedback on
the clients and on the server."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from decentlearn import compress, ops
from decentlearn.algorithms.base import Sampler, none_if_identity, option, register
from decentlearn.algorithms.server.base import ServerAlgorithm, fill_inactive
from decentlearn.comm import FLOAT32_BYTES
from decentlearn.state import replicated, row

__all__ = ["STCFL"]


#: Bytes of one sparse entry of an accumulated server update sent to a client that missed
#: rounds (uint32 index + float32 value), and of the uint32 count in front of the message.
_SPARSE_ENTRY_BYTES = 8


_SPARSE_HEADER_BYTES = 4


@register("stc-fl")
class STCFL(ServerAlgorithm):
    """Sparse Ternary Compression in federated mode (Sattler et al. 2019, Algorithm 2).

    Client i in the round's sample: downloads what it misses of the server model, trains
    ``local_steps`` steps from x, then A_i = e_i + (x_i - x); sends C_up(A_i); e_i <- A_i -
    decompress(C_up(A_i)). Server: A = e + sum_i w_i decompress(C_up(A_i)); broadcasts
    C_down(A); e <- A - decompress(C_down(A)); x <- x + decompress(C_down(A)).
    The weights w_i are FedAvg's n_i / sum_j n_j over the round's clients by default
    (``weighting="samples"``); the paper's Algorithm 2 and the authors' code
    (``felisat/federated-learning``, ``aggregation="mean"`` for STC) average uniformly,
    ``weighting="uniform"``; both agree when the clients hold equal sample counts.
    The clients are sampled as FedAvg's (a fraction ``participation``, floor(C·K) of them).
    Download bytes of a client: nothing if it is up to date, the last C_down message if it missed
    exactly one update, else the sum of the missed updates as a sparse message
    (4 + 8·nonzeros bytes, at most 4·dim dense). Upload bytes: each client's C_up message
    (``Payload.nbytes``). ``report()`` gives both directions (``bytes_client_to_server``,
    ``bytes_server_to_client``).
    ``compressor`` is C_up (default ``stc:0.01``), ``server_compress`` the spec of C_down
    (default: C_up).
    """

    #: Its server rounds / point-to-point replies are not timed by decentlearn.network yet.
    simulated_time = False
    state = (row("client_error", "synced", "synced_round")
             + replicated("server_error", "_last_down_nbytes"))
    state_objects = ("server_compressor",)
    #: The round's clients' A_i, kept from round to round (no fresh pages; x_i - x is the base's).
    scratch = ("_acc",)

    @dataclass(frozen=True)
    class Options(ServerAlgorithm.Options):
        server_compress: str | None = option(
            None, "stc-fl: the server's compressor for its downstream update (default: the "
            "--compress compressor)", metavar="SPEC")

        def __post_init__(self) -> None:
            super().__post_init__()
            if self.server_compress is not None:
                try:
                    compress.make(self.server_compress)
                except ValueError as e:
                    raise ValueError(f"server_compress: {e}") from None

    @classmethod
    def check_run(cls, options: Options, compress: str) -> None:
        """STC-FL keeps its own error feedback on both sides (``client_error``,
        ``server_error``): an ``ef:`` compressor would feed the residuals back twice (and one
        wrapper shared by the clients' rows and the server's row would reset at every call)."""
        for name, spec in (("compress", compress), ("server_compress", options.server_compress)):
            if spec is not None and spec.startswith("ef:"):
                raise ValueError(f"algorithm 'stc-fl' keeps its own error feedback on the "
                                 f"clients and the server: {name} must be a compressor without "
                                 f"'ef:' (e.g. {spec[3:]!r}), got {spec!r}")

    def __init__(self, *, server_compress: str | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.compressor = none_if_identity(self.compressor) or compress.make("stc:0.01")
        down = None if server_compress is None else compress.make(server_compress)
        self.server_compressor = none_if_identity(down) or self.compressor
        n, dim = self.params.shape
        self.client_error = np.zeros((n, dim), dtype=np.float32)
        self.server_error = np.zeros((1, dim), dtype=np.float32)
        #: Each client's copy of the server model and the round it was downloaded.
        self.synced = self.params.copy()
        self.synced_round = np.zeros(n, dtype=np.int64)
        self._last_down_nbytes = 0
        self._acc: np.ndarray | None = None

    def state_kinds(self) -> dict[str, str]:
        """The server's compressor compresses the server's (1, dim) update: its state (an error
        feedback residual) is the same on every process."""
        return {k: ("replicated" if k.startswith("server_compressor.") else kind)
                for k, kind in super().state_kinds().items()}

    def _download(self, clients: np.ndarray, t: int) -> None:
        """Counts the server's messages to this process's ``clients`` (local rows), summed over
        all processes, and records the clients as up to date."""
        missed = t - self.synced_round[clients]
        nbytes = np.zeros(clients.size, dtype=np.int64)
        nbytes[missed == 1] = self._last_down_nbytes
        older = np.flatnonzero(missed > 1)
        nt = self.comm.n_threads
        if older.size:  # the entries where a client's copy differs from the server's model
            nnz = ops.count_ne_rows(self.synced, clients[older], self.server[0], n_threads=nt)
            nbytes[older] = np.minimum(_SPARSE_HEADER_BYTES + _SPARSE_ENTRY_BYTES * nnz,
                                       FLOAT32_BYTES * self.model.dim)
        self.comm.count_server(t, self.comm.total(int(nbytes.sum())))
        self.put_rows(self.synced, clients, self.server)
        self.synced_round[clients] = t

    def round(self, sample: Sampler, t: int) -> np.ndarray:
        clients = self.clients(t)
        active, rows, first = self.mine(clients)
        self._download(rows, t)
        losses = self.train(sample, active, self.local_steps, first)
        nt = self.comm.n_threads
        # the clients' rows gathered, updated and put back on the run's threads, NumPy's roundings:
        # A_i = e_i + (x_i - x), then e_i = A_i - decompress(C_up(A_i))
        delta = self.client_deltas(rows)
        acc = self.rows_into("_acc", self.client_error, rows)
        ops.axpby(1, acc, 1, delta, out=acc, n_threads=nt)
        up = self.compressor.compress(acc, seed=self.seed, step=t, peer0=first, n_threads=nt)
        decoded = self.upload(self.compressor, up, t, clients)
        ops.axpby(1, acc, -1, decoded[first:first + rows.size], out=acc, n_threads=nt)
        self.put_rows(self.client_error, rows, acc)
        server_acc = self.server_error + self.aggregate(decoded, clients)
        down = self.server_compressor.compress(server_acc, seed=self.seed, step=t,
                                               peer0=self.comm.n_global,
                                               n_threads=self.comm.n_threads)
        update = self.server_compressor.decompress(down, n_threads=self.comm.n_threads)
        self.server_error[...] = server_acc - update
        self._last_down_nbytes = down.nbytes
        self.set_server(self.server + update)
        return fill_inactive(self.comm, losses / self.local_steps, active, clients)
