"""Baselines with a server or an exact all-reduce: the references of the decentralized ones.

* ``allreduce``: every peer trains, then the peers' models are averaged exactly (ring all-reduce),
  or, with a compressor, by a compressed all-reduce of their changes (Bagua's "centralized,
  low-precision" corner).
* ``fedavg``: FedAvg (McMahan et al. 2017) with partial participation: each round the server draws a
  seeded sample of clients, they download the model, run ``local_steps`` SGD steps on their own data
  and upload their model change (optionally compressed); the server averages the changes.
* ``stc-fl``: Sparse Ternary Compression in federated mode (Sattler et al., "Robust and
  Communication-Efficient Federated Learning from Non-IID Data", 2019): upstream and downstream STC
  with error feedback on the clients and on the server; clients that skipped rounds download the
  sum of the updates they missed (sparse, counted exactly).
* ``fedhisyn``: FedHiSyn (Li et al. 2022): devices grouped into categories by compute speed;
  inside a category, devices pass their models along a ring, training on each, as many hops as
  the round's time budget allows the category's slowest device; the server then averages every
  device's model.

The algorithms' rows of ``params`` hold the server model after each round (the model a client
downloads when it is next selected); bytes sent by clients go to ``comm.bytes_sent`` and bytes sent
by the server to ``comm.server_bytes_sent``.

The communicator may host a block of the peers (the MPI backend): client samples are drawn over
all ``comm.n_global`` peers, each process trains and uploads its own clients, and the server's
state (its model, STC's server residual, the counters) is replicated, identical on every
process, because ``comm.upload`` returns every client's decoded row everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from decentlearn import compress
from decentlearn.algorithms import Algorithm, Sampler, register
from decentlearn.comm import FLOAT32_BYTES

#: Bytes of one sparse entry of an accumulated server update sent to a client that missed
#: rounds (uint32 index + float32 value), and of the uint32 count in front of the message.
_SPARSE_ENTRY_BYTES = 8
_SPARSE_HEADER_BYTES = 4


#: RunConfig fields that each algorithm of this module and of decentlearn.heterogeneity takes as
#: keyword arguments of the same name (the simulator passes them; see ``config_options``).
ALGORITHM_OPTIONS: dict[str, tuple[str, ...]] = {}


def options(*fields: str):
    """Class decorator (below ``@register``): the RunConfig fields the algorithm takes."""
    def deco(cls):
        ALGORITHM_OPTIONS[cls.name] = fields
        return cls
    return deco


def config_options(name: str, config) -> dict:
    """The keyword arguments the simulator passes to algorithm ``name`` from a RunConfig."""
    return {f: getattr(config, f) for f in ALGORITHM_OPTIONS.get(name, ())}


def _check_fraction(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(f"{name} must be a number in (0, 1], got {value!r}")
    return float(value)


def _none_if_identity(compressor):
    return None if compressor is None or compressor.spec == "none" else compressor


class _ServerAlgorithm(Algorithm):
    """Shared machinery: the server model, seeded client sampling, local steps of a subset."""

    #: Algorithms that take a compressor for the upload; others reject one.
    takes_compressor = True
    state_attrs = ("server",)
    #: State that is the same on every process (not one row per peer) when peers are split.
    replicated_attrs = ("server",)

    def __init__(self, *, participation: float = 1.0, variant: str = "atc", **kwargs) -> None:
        super().__init__(**kwargs)
        if variant != "atc":
            raise ValueError(f"{self.name} trains before communicating: variant must be 'atc', "
                             f"got {variant!r}")
        if self.frozen is not None:
            raise ValueError(f"{self.name} does not support frozen layers (cocofl)")
        self.participation = _check_fraction(participation, "participation")
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

    def stats(self) -> dict:
        """Counters for the run's summary."""
        return {"clients_per_round": self.n_clients,
                "server_bytes_sent": int(self.comm.server_bytes_sent)}


@register("allreduce")
class AllReduce(Algorithm):
    """Local steps, then exact averaging of all peers' models (ring all-reduce).

    With a compressor: the peers all-reduce their changes Δ_i = x_i - x_bar_prev compressed
    (``comm.allreduce_compressed``: compressed scatter-reduce, the chunk averages compressed again
    and all-gathered) and set x <- x_bar_prev + that estimate, so all peers stay identical.
    Bytes per round and peer: 2(n-1)/n · 4·dim (float32) or 2(n-1)/n of a compressed row.
    """

    state_attrs = ("anchor",)
    replicated_attrs = ("anchor",)

    def __init__(self, *, variant: str = "atc", **kwargs) -> None:
        super().__init__(**kwargs)
        if variant != "atc":
            raise ValueError(f"allreduce trains before communicating: variant must be 'atc', "
                             f"got {variant!r}")
        self.compressor = _none_if_identity(self.compressor)
        self._buf = np.empty_like(self.params)
        #: The last average (1, dim): the reference of compressed changes.
        self.anchor = self.params.mean(axis=0, dtype=np.float64, keepdims=True).astype(np.float32)

    def round(self, sample: Sampler, t: int) -> np.ndarray:
        losses = np.zeros(self.comm.n_peers)
        for _ in range(self.local_steps):
            losses += self.local_step(sample)
        if self.compressor is None:
            out = self.comm.allreduce(self.params, t, out=self._buf)
            self._buf, self.params = self.params, out
        else:
            delta = np.subtract(self.params, self.anchor, out=self._buf)
            mean = self.comm.allreduce_compressed(self.compressor, delta, t, seed=self.seed)
            self.anchor += mean
            self.params[...] = self.anchor
        return losses / self.local_steps


@options("participation")
@register("fedavg")
class FedAvg(_ServerAlgorithm):
    """FedAvg with partial participation.

    Round t: the server samples ``round(participation·n)`` clients (seeded by (seed, t)); each
    downloads the server model x (4·dim bytes), runs ``local_steps`` SGD steps on its own data, and
    uploads Δ_i = x_i - x, compressed when a compressor is given (no error feedback: ``stc-fl`` is
    the error-feedback variant); the server sets x <- x + mean_i decompress(C(Δ_i)).
    Non-sampled clients neither compute nor communicate.
    """

    #: Its server rounds / point-to-point replies are not timed by decentlearn.network yet.
    simulated_time = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.compressor = _none_if_identity(self.compressor)
        self._up = self.compressor or self._identity

    def round(self, sample: Sampler, t: int) -> np.ndarray:
        clients = self.clients(t)
        active, rows, first = self.mine(clients)
        self.comm.broadcast(self._identity, self._identity.compress(self.server), t, clients)
        losses = self.train(sample, active, self.local_steps, first)
        delta = self.params[rows] - self.server
        payload = self._up.compress(delta, seed=self.seed, step=t, peer0=first,
                                    n_threads=self.comm.n_threads)
        decoded = self.comm.upload(self._up, payload, t, clients)
        self.set_server(self.server + decoded.mean(axis=0, dtype=np.float64).astype(np.float32))
        return _fill_inactive(self.comm, losses / self.local_steps, active, clients)


def _fill_inactive(comm, losses: np.ndarray, active: np.ndarray,
                   clients: np.ndarray) -> np.ndarray:
    """Losses of the peers that trained; the others get the mean over all ``clients`` (they did
    not train), so the simulator's mean training loss is the participants' mean."""
    everyone = comm.allgather_peers(losses)
    losses[~active] = everyone[clients].mean()
    return losses


@options("participation", "server_compress")
@register("stc-fl")
class STCFL(_ServerAlgorithm):
    """Sparse Ternary Compression in federated mode (Sattler et al. 2019, Algorithm 2).

    Client i in the round's sample: downloads what it misses of the server model, trains
    ``local_steps`` steps from x, then A_i = e_i + (x_i - x); sends C_up(A_i); e_i <- A_i -
    decompress(C_up(A_i)). Server: A = e + mean_i decompress(C_up(A_i)); broadcasts C_down(A);
    e <- A - decompress(C_down(A)); x <- x + decompress(C_down(A)).
    Download bytes of a client: nothing if it is up to date, the last C_down message if it missed
    exactly one update, else the sum of the missed updates as a sparse message
    (4 + 8·nonzeros bytes, at most 4·dim dense).
    ``compressor`` is C_up (default ``stc:0.01``), ``server_compress`` the spec of C_down
    (default: C_up).
    """

    #: Its server rounds / point-to-point replies are not timed by decentlearn.network yet.
    simulated_time = False
    state_attrs = ("client_error", "server_error", "synced", "synced_round",
                   "_last_down_nbytes")
    replicated_attrs = ("server_error",)
    state_objects = ("server_compressor",)

    def __init__(self, *, server_compress: str | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.compressor = _none_if_identity(self.compressor) or compress.make("stc:0.01")
        down = None if server_compress is None else compress.make(server_compress)
        self.server_compressor = _none_if_identity(down) or self.compressor
        n, dim = self.params.shape
        self.client_error = np.zeros((n, dim), dtype=np.float32)
        self.server_error = np.zeros((1, dim), dtype=np.float32)
        #: Each client's copy of the server model and the round it was downloaded.
        self.synced = self.params.copy()
        self.synced_round = np.zeros(n, dtype=np.int64)
        self._last_down_nbytes = 0

    def _download(self, clients: np.ndarray, t: int) -> None:
        """Counts the server's messages to this process's ``clients`` (local rows), summed over
        all processes, and records the clients as up to date."""
        missed = t - self.synced_round[clients]
        nbytes = np.zeros(clients.size, dtype=np.int64)
        nbytes[missed == 1] = self._last_down_nbytes
        older = np.flatnonzero(missed > 1)
        if older.size:
            diff = self.synced[clients[older]] != self.server
            nnz = np.count_nonzero(diff, axis=1)
            nbytes[older] = np.minimum(_SPARSE_HEADER_BYTES + _SPARSE_ENTRY_BYTES * nnz,
                                       FLOAT32_BYTES * self.model.dim)
        self.comm.count_server(t, self.comm.total(int(nbytes.sum())))
        self.synced[clients] = self.server
        self.synced_round[clients] = t

    def round(self, sample: Sampler, t: int) -> np.ndarray:
        clients = self.clients(t)
        active, rows, first = self.mine(clients)
        self._download(rows, t)
        losses = self.train(sample, active, self.local_steps, first)
        acc = self.client_error[rows] + (self.params[rows] - self.server)
        up = self.compressor.compress(acc, seed=self.seed, step=t, peer0=first,
                                      n_threads=self.comm.n_threads)
        decoded = self.comm.upload(self.compressor, up, t, clients)
        self.client_error[rows] = acc - decoded[first:first + rows.size]
        server_acc = self.server_error + decoded.mean(axis=0, dtype=np.float64,
                                                      keepdims=True).astype(np.float32)
        down = self.server_compressor.compress(server_acc, seed=self.seed, step=t,
                                               peer0=self.comm.n_global,
                                               n_threads=self.comm.n_threads)
        update = self.server_compressor.decompress(down, n_threads=self.comm.n_threads)
        self.server_error[...] = server_acc - update
        self._last_down_nbytes = down.nbytes
        self.set_server(self.server + update)
        return _fill_inactive(self.comm, losses / self.local_steps, active, clients)


@dataclass(frozen=True)
class SpeedDistribution:
    """Per-device compute speeds (steps per unit of time), drawn once from a seeded distribution:
    ``lognormal:SIGMA`` (median 1) or ``uniform:LO:HI`` (0 < LO <= HI)."""

    spec: str

    def __post_init__(self) -> None:
        self.parse()

    def parse(self) -> tuple[str, tuple[float, ...]]:
        name, *args = self.spec.split(":")
        try:
            values = tuple(float(a) for a in args)
        except ValueError:
            values = ()
        if name == "lognormal" and len(values) == 1 and values[0] >= 0:
            return name, values
        if name == "uniform" and len(values) == 2 and 0 < values[0] <= values[1]:
            return name, values
        raise ValueError(f"speeds must be 'lognormal:SIGMA' (SIGMA >= 0) or 'uniform:LO:HI' "
                         f"(0 < LO <= HI), got {self.spec!r}")

    def draw(self, n: int, seed: int) -> np.ndarray:
        name, args = self.parse()
        rng = np.random.default_rng([seed, 0x5EED])
        if name == "lognormal":
            return rng.lognormal(0.0, args[0], n)
        return rng.uniform(args[0], args[1], n)


@options("participation", "categories", "speeds", "hops_max")
@register("fedhisyn")
class FedHiSyn(_ServerAlgorithm):
    """FedHiSyn (Li et al. 2022): hierarchical synchronous FL for heterogeneous devices.

    Devices get speeds s_i from ``speeds`` and are split into ``categories`` groups of similar
    speed (quantiles). A round lasts as long as the slowest participant needs for ``local_steps``
    steps; in that time a category whose slowest participant has speed s_c makes
    h_c = min(hops_max, floor(s_c / s_min)) hops: every member trains ``local_steps`` steps on its
    own data and (between hops) passes its model to the next member of the category's ring
    (members ordered by speed). Then every participant uploads its model (4·dim bytes) and
    downloads the average (4·dim bytes). Bytes per round: participants · 4·dim · (2 + hops - 1)
    at most. Only ring passes within a category are peer-to-peer (``comm.shift``).
    """

    #: Its server rounds / point-to-point replies are not timed by decentlearn.network yet.
    simulated_time = False

    takes_compressor = False
    state_attrs = ("hops_done",)

    def __init__(self, *, categories: int = 4, speeds: str = "lognormal:1.0", hops_max: int = 8,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        if _none_if_identity(self.compressor) is not None:
            raise ValueError("fedhisyn sends float32 models: compress must be 'none', got "
                             f"{self.compressor.spec!r}")
        n = self.comm.n_global
        for name, v in (("categories", categories), ("hops_max", hops_max)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        if categories > n:
            raise ValueError(f"categories must be <= peers ({n}), got {categories}")
        self.categories = categories
        self.hops_max = hops_max
        #: Speeds and categories of all peers (global ids), the same on every process.
        self.speeds = SpeedDistribution(speeds).draw(n, self.seed)
        order = np.argsort(self.speeds, kind="stable")
        #: Category of every device: 0 = slowest.
        self.category = np.empty(n, dtype=np.int64)
        for c, members in enumerate(np.array_split(order, categories)):
            self.category[members] = c
        self._order = order
        self.hops_done = 0

    def round(self, sample: Sampler, t: int) -> np.ndarray:
        n = self.comm.n_global
        clients = self.clients(t)
        active = np.zeros(n, dtype=bool)  # global; the process's rows are peers[lo:lo + P]
        active[clients] = True
        self.comm.broadcast(self._identity, self._identity.compress(self.server), t, clients)
        # Hops per category from its slowest participant; a ring per category (speed order).
        s_min = self.speeds[clients].min()
        hops = np.zeros(n, dtype=np.int64)
        source = np.arange(n, dtype=np.int64)
        ordered = self._order[active[self._order]]
        for c in range(self.categories):  # a few categories, not peers
            members = ordered[self.category[ordered] == c]
            if members.size == 0:
                continue
            h = min(self.hops_max, int(np.floor(self.speeds[members].min() / s_min + 1e-9)))
            hops[members] = max(1, h)
            source[members] = np.roll(members, 1)  # member k receives from member k - 1
        mine = slice(self.comm.peer0, self.comm.peer0 + self.comm.n_peers)
        losses = np.zeros(self.comm.n_peers)
        for hop in range(int(hops.max())):
            busy = hops[mine] > hop
            losses += self.train(sample, busy, self.local_steps,
                                 int(np.count_nonzero(hops[:mine.start] > hop)))
            passing = hops > hop + 1
            if passing.any():
                src = np.where(passing, source, np.arange(n))
                self.params[...] = self.comm.shift(self.params, t, src)
        self.hops_done += int(hops[clients].sum())
        local, rows, _ = self.mine(clients)
        uploaded = self.comm.upload(self._identity, self._identity.compress(self.params[rows]),
                                    t, clients)
        self.set_server(uploaded.mean(axis=0, dtype=np.float64).astype(np.float32))
        per_step = losses / np.maximum(hops[mine], 1) / self.local_steps
        return _fill_inactive(self.comm, per_step, local, clients)
