"""Simulated wall-clock: per-peer clocks for synchronous rounds, and the closed-form cost models of
ring all-reduce and of a parameter server.

Synchronous rounds (``SyncClock``). Each peer keeps its own clock; there is no global barrier.
In round t peer i, whose clock reads c_i (the end of its round t - 1), first trains: it is ready at
r_i = c_i + samples / speed_i (times the straggler slow-down; 0 if it is offline). Every exchange
of the round (``send``) then delivers peer j's message to each out-neighbour i at

    a_ij = r_j + latency(j, i) + share_ij * bytes_j / bandwidth(j, i),

with share_ij = max(out-degree of j, in-degree of i) in the exchange when the NIC is shared (a
peer's concurrent messages split its link equally) and 1 when every link is dedicated, and peer
i's clock becomes max(r_i, max_j a_ij): a peer finishes when it has computed and heard from all
its in-neighbours. A second exchange in the same round starts from those clocks. Peers start round
t + 1 as soon as their own round t ends, so a fast region of the graph can run ahead of a slow one
by as much as the graph's distances allow. The simulated time of the run after round t is the
largest clock, and ``round_seconds[t]`` is how much it grew in round t.

Ring all-reduce (``allreduce_time``): reduce-scatter then all-gather around a ring of the n peers,
2(n - 1) steps, each moving bytes / n over every ring link at once; a step ends when its slowest
link is done, so on a uniform network the time is 2(n - 1)/n * bytes / bandwidth + 2(n - 1) *
latency. Parameter server (``server_round_time``): the server sends the model to the k selected
clients over its one link (k messages share it), every client trains, then the k uploads share
the server's link again; the round ends when the slowest client's upload has arrived.
"""

from __future__ import annotations

import numpy as np

from decentlearn.network.model import NetworkModel

__all__ = ["SyncClock", "allreduce_time", "ring_allreduce_closed_form", "server_round_time"]


def ring_allreduce_closed_form(nbytes: float, n: int, latency_s: float,
                               bandwidth_bytes_per_s: float) -> float:
    """2(n - 1)/n * bytes / bandwidth + 2(n - 1) * latency (0 for one peer)."""
    if n <= 1:
        return 0.0
    return 2.0 * (n - 1) / n * nbytes / bandwidth_bytes_per_s + 2.0 * (n - 1) * latency_s


def allreduce_time(model: NetworkModel, nbytes: float, peers=None) -> float:
    """Seconds for a ring all-reduce of ``nbytes`` per peer among ``peers`` (default all, in index
    order around the ring): 2(k - 1) steps of bytes / k, each as long as its slowest ring link."""
    peers = np.arange(model.n) if peers is None else np.asarray(peers, dtype=np.int64)
    k = peers.size
    if k <= 1:
        return 0.0
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes!r}")
    nxt = np.roll(peers, -1)
    step = model.latency(peers, nxt) + (nbytes / k) / model.bandwidth(peers, nxt)
    return float(2 * (k - 1) * step.max())


def server_round_time(model: NetworkModel, down_bytes: float, up_bytes: float, clients=None,
                      samples: float = 0.0, t: int = 0, server: int | None = None) -> float:
    """Seconds of one parameter-server round: broadcast ``down_bytes`` to the selected
    ``clients`` (default all peers), each trains ``samples`` samples (its speed and round-t
    straggler state), uploads ``up_bytes``. The server is node ``server`` (default n, a node
    outside the peers, with its own links drawn like the others); its link is shared by the k
    clients in each direction. Ends with the slowest client."""
    clients = np.arange(model.n) if clients is None else np.asarray(clients, dtype=np.int64)
    k = clients.size
    if k == 0:
        return 0.0
    s = model.n if server is None else int(server)
    share = k if model.config.nic == "shared" else 1
    lat, bw = model.latency(s, clients), model.bandwidth(s, clients)
    compute = model.compute_time(t, samples)[clients] if samples else 0.0
    per_client = 2 * lat + share * (down_bytes + up_bytes) / bw + compute
    return float(np.max(per_client))


class SyncClock:
    """Per-peer clocks of synchronous rounds (see the module docstring).

    ``begin(t)`` starts round t (training time), ``send(t, dst, src, nbytes)`` delivers one
    exchange's messages, ``barrier(t, seconds)`` is a collective every online peer joins (all
    wait for the last, then ``seconds`` pass), ``allreduce(t, nbytes)`` and
    ``server_round(t, down, up, clients)`` apply the two cost models (the hooks for all-reduce
    and server-based communicators), ``finish(t)`` closes the round.
    """

    def __init__(self, model: NetworkModel, samples_per_round: float) -> None:
        if samples_per_round < 0:
            raise ValueError(f"samples_per_round must be >= 0, got {samples_per_round!r}")
        self.model = model
        self.samples_per_round = float(samples_per_round)
        self.clock = np.zeros(model.n)  # end of each peer's last finished round
        self.sim_seconds = 0.0
        self.round_seconds: list[float] = []
        self._ready: np.ndarray | None = None
        self._round = -1

    _state = ("clock", "sim_seconds", "round_seconds", "_ready", "_round")

    def state_dict(self) -> dict:
        from decentlearn.state import state_of
        return state_of(self, self._state)

    def load_state_dict(self, state: dict) -> None:
        from decentlearn.state import load_attrs
        load_attrs(self, self._state, state, "comm.clock.")

    def begin(self, t: int) -> np.ndarray:
        if t == self._round:
            if self._ready is None:
                raise ValueError(f"round {t} is already finished on the simulated clock")
            return self._ready
        if self._round >= 0 and self._ready is not None:
            self.finish(self._round)
        online = self.model.online(t)
        compute = self.model.compute_time(t, self.samples_per_round)
        self._ready = self.clock + np.where(online, compute, 0.0)
        self._round = t
        return self._ready

    def send(self, t: int, dst: np.ndarray, src: np.ndarray, nbytes) -> None:
        ready = self.begin(t)
        if dst.size == 0:
            return
        nbytes = np.broadcast_to(np.asarray(nbytes, dtype=np.float64), (self.model.n,))
        if self.model.config.nic == "shared":
            out_deg = np.bincount(src, minlength=self.model.n)
            in_deg = np.bincount(dst, minlength=self.model.n)
            share = np.maximum(out_deg[src], in_deg[dst])
        else:
            share = 1
        arrival = ready[src] + self.model.message_time(src, dst, nbytes[src], share)
        end = ready.copy()
        np.maximum.at(end, dst, arrival)
        self._ready = end

    def barrier(self, t: int, seconds: float) -> None:
        ready = self.begin(t)
        online = self.model.online(t)
        if online.any():
            ready[online] = ready[online].max() + seconds

    def allreduce(self, t: int, nbytes: float, peers=None) -> None:
        """Round t's ring all-reduce of ``nbytes`` per peer: once every online peer has trained,
        the collective takes :func:`allreduce_time` (all peers wait for the slowest)."""
        self.barrier(t, allreduce_time(self.model, nbytes, peers))

    def server_round(self, t: int, down_bytes: float, up_bytes: float, clients=None) -> None:
        """Round t as a parameter-server round: it starts when the previous round has ended for
        every peer (the server waits for it), lasts :func:`server_round_time` with each selected
        client training ``samples_per_round`` samples, and ends for every peer at once."""
        self.begin(t)
        start = float(self.clock.max())
        seconds = server_round_time(self.model, down_bytes, up_bytes, clients,
                                    samples=self.samples_per_round, t=t)
        self._ready[:] = start + seconds

    def finish(self, t: int) -> None:
        if self._round != t or self._ready is None:
            self.begin(t)
        self.clock = self._ready
        self._ready = None
        now = float(self.clock.max())
        self.round_seconds.append(now - self.sim_seconds)
        self.sim_seconds = now
        self._round = t
