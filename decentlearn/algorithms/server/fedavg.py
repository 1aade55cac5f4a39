"""FedAvg (McMahan et al. 2017): sampled clients, local steps, the server's weighted average."""

from __future__ import annotations

import numpy as np

from decentlearn.algorithms.base import Sampler, none_if_identity, register
from decentlearn.algorithms.server.base import ServerAlgorithm, fill_inactive

__all__ = ["FedAvg"]


@register("fedavg")
class FedAvg(ServerAlgorithm):
    """FedAvg (McMahan et al. 2017, Algorithm 1) with partial participation.

    Round t: the server samples m = max(1, floor(C·K)) of the K peers as clients, uniformly
    without replacement (C = ``participation``; the sample is keyed by (seed, t)); each
    downloads the server model x (4·dim bytes), runs ``local_steps`` SGD steps on its own data
    (ClientUpdate), and uploads Δ_k = x_k - x, compressed when a compressor is given (no error
    feedback: ``stc-fl`` is the error-feedback variant); the server sets
    x <- x + sum_k w_k decompress(C(Δ_k)), with w_k = n_k / sum_{j in S_t} n_j (n_k: client k's
    training samples; ``weighting="uniform"``: w_k = 1/m). Without compression this is the
    paper's w_{t+1} = sum_k (n_k / m_t) w^k_{t+1} (Flower's ``aggregate``).
    Non-sampled clients neither compute nor communicate.
    """

    #: Its server rounds / point-to-point replies are not timed by decentlearn.network yet.
    simulated_time = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.compressor = none_if_identity(self.compressor)
        self._up = self.compressor or self._identity

    def round(self, sample: Sampler, t: int) -> np.ndarray:
        clients = self.clients(t)
        active, rows, first = self.mine(clients)
        self.comm.broadcast(self._identity, self._identity.compress(self.server), t, clients)
        losses = self.train(sample, active, self.local_steps, first)
        delta = self.client_deltas(rows)
        payload = self._up.compress(delta, seed=self.seed, step=t, peer0=first,
                                    n_threads=self.comm.n_threads)
        decoded = self.upload(self._up, payload, t, clients)
        self.set_server(self.server + self.aggregate(decoded, clients))
        return fill_inactive(self.comm, losses / self.local_steps, active, clients)
