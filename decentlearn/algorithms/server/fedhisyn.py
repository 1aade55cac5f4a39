"""FedHiSyn (Li et al. 2022): devices grouped into categories by compute speed pass their models
along a ring inside their category, then the server averages every device's model."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from decentlearn.algorithms.base import (Sampler, check_positive_int, none_if_identity, option,
                                         register)
from decentlearn.algorithms.server.base import ServerAlgorithm, fill_inactive
from decentlearn.state import replicated

__all__ = ["SpeedDistribution", "FedHiSyn"]


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


@register("fedhisyn")
class FedHiSyn(ServerAlgorithm):
    """FedHiSyn (Li et al. 2022): hierarchical synchronous FL for heterogeneous devices.

    Devices get speeds s_i from ``speeds`` and are split into ``categories`` groups of similar
    speed (quantiles). A round lasts as long as the slowest participant needs for ``local_steps``
    steps; in that time a category whose slowest participant has speed s_c makes
    h_c = min(hops_max, floor(s_c / s_min)) hops: every member trains ``local_steps`` steps on its
    own data and (between hops) passes its model to the next member of the category's ring
    (members ordered by speed). Then every participant uploads its model (4·dim bytes) and the
    server takes their average weighted as FedAvg's, x = sum_k w_k x_k with w_k = n_k / sum_j
    n_j (n_k: the uploading device's training samples; ``weighting="uniform"``: 1/m), which the
    next round's participants download (4·dim bytes). Bytes per round and participant: 4·dim
    down, 4·dim up, 4·dim · (hops - 1) to peers: only ring passes within a category are
    peer-to-peer (``comm.shift``).
    """

    #: Its server rounds / point-to-point replies are not timed by decentlearn.network yet.
    simulated_time = False

    state = replicated("hops_done")
    #: The clients' rows as uploaded, and the parameter matrix a ring hop shifts into, kept from
    #: round to round.
    scratch = ("_upload", "_spare")

    @dataclass(frozen=True)
    class Options(ServerAlgorithm.Options):
        categories: int = option(4, "number of device categories by compute speed")
        speeds: str = option("lognormal:1.0", "device speeds, lognormal:SIGMA or "
                             "uniform:LO:HI (drawn once from the seed)", metavar="DIST")
        hops_max: int = option(8, "most ring hops of a category per round")

        def __post_init__(self) -> None:
            super().__post_init__()
            check_positive_int(self.categories, "categories")
            check_positive_int(self.hops_max, "hops_max")
            SpeedDistribution(self.speeds)

    def __init__(self, *, categories: int = 4, speeds: str = "lognormal:1.0", hops_max: int = 8,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        if none_if_identity(self.compressor) is not None:
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
        self._upload: np.ndarray | None = None
        self._spare: np.ndarray | None = None

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
                # into the matrix before the last shift: no fresh pages a hop
                shifted = self.comm.shift(self.params, t, src, out=self._spare_for(self.params))
                self.params, self._spare = shifted, self.params
        self.hops_done += int(hops[clients].sum())
        local, rows, _ = self.mine(clients)
        payload = self._identity.compress(self.rows_into("_upload", self.params, rows))
        uploaded = self.upload(self._identity, payload, t, clients)
        self.set_server(self.aggregate(uploaded, clients))
        per_step = losses / np.maximum(hops[mine], 1) / self.local_steps
        return fill_inactive(self.comm, per_step, local, clients)
