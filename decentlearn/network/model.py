"""The network and device model: per-link latency and bandwidth, per-peer compute speed, and the
per-round faults (link drops, stragglers, churn), all drawn from the run's seed.

A :class:`NetworkConfig` describes a network (a preset such as ``datacenter``, ``wan``, ``edge``
or ``mobile``, or a TOML table); :class:`NetworkModel` binds it to ``n`` peers and a seed. Every
random quantity is a pure function of (seed, stream, round, peer or link) through a counter-based
hash (splitmix64, :mod:`decentlearn.seeds`), so it does not depend on the order in which it is
asked for, on the thread count, or on which other quantities were drawn. Link quantities are
symmetric: the link {i, j} has one latency, one bandwidth, and is up or down in both directions
together.

Units: latency in milliseconds, bandwidth in Mbit/s (10^6 bit/s), compute in samples/s.
A message of ``b`` bytes on link (j -> i) takes ``latency + 8 b / bandwidth`` seconds (times the
NIC share, see :mod:`decentlearn.network.clock`).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import ndtri

from decentlearn.seeds import (STREAM_BANDWIDTH, STREAM_COMPUTE, STREAM_DROP, STREAM_JOIN,
                               STREAM_LATENCY, STREAM_LEAVE, STREAM_STRAGGLER, hash_uniform)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["Dist", "NetworkConfig", "NetworkModel", "PRESETS", "load_network", "preset"]

# --------------------------------------------------------------------------------------------------
# Distributions


def _number(text: Any, name: str) -> float:
    if isinstance(text, bool):
        raise ValueError(f"{name} must be a number, got {text!r}")
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {text!r}")
    return value


_DIST_KINDS = ("constant", "uniform", "lognormal", "tiers")


@dataclass(frozen=True)
class Dist:
    """A distribution of a positive quantity, written as a spec:

    * ``5`` or ``"5"``: the constant 5;
    * ``"uniform:LO:HI"``: uniform on [LO, HI];
    * ``"lognormal:MEDIAN:SIGMA"``: exp(N(log MEDIAN, SIGMA^2));
    * ``"tiers:V1@P1,V2@P2,..."``: V_k with probability P_k (the P_k sum to 1).

    ``name`` is the quantity it describes (used in error messages); with ``positive`` every value
    must be > 0 (bandwidths, speeds), else >= 0 (latencies).
    """

    spec: Any
    name: str = "value"
    positive: bool = True
    kind: str = field(init=False)
    params: tuple = field(init=False)

    def __post_init__(self) -> None:
        spec, name = self.spec, self.name
        if isinstance(spec, (int, float)) and not isinstance(spec, bool):
            kind, params = "constant", (_number(spec, name),)
        elif isinstance(spec, str):
            head, *rest = spec.strip().split(":")
            if not rest:
                kind, params = "constant", (_number(head, name),)
            elif head == "uniform" and len(rest) == 2:
                lo, hi = (_number(v, f"{name} ({spec!r})") for v in rest)
                if hi < lo:
                    raise ValueError(f"{name}: uniform:LO:HI needs LO <= HI, got {spec!r}")
                kind, params = "uniform", (lo, hi)
            elif head == "lognormal" and len(rest) == 2:
                median, sigma = (_number(v, f"{name} ({spec!r})") for v in rest)
                if median <= 0 or sigma < 0:
                    raise ValueError(f"{name}: lognormal:MEDIAN:SIGMA needs MEDIAN > 0 and "
                                     f"SIGMA >= 0, got {spec!r}")
                kind, params = "lognormal", (median, sigma)
            elif head == "tiers" and len(rest) == 1:
                values, probs = [], []
                for part in rest[0].split(","):
                    v, sep, p = part.partition("@")
                    if not sep:
                        raise ValueError(f"{name}: tiers are written V1@P1,V2@P2,..., got {spec!r}")
                    values.append(_number(v, f"{name} ({spec!r})"))
                    probs.append(_number(p, f"{name} ({spec!r})"))
                if min(probs) < 0 or abs(sum(probs) - 1.0) > 1e-9:
                    raise ValueError(f"{name}: tier probabilities must be >= 0 and sum to 1, "
                                     f"got {spec!r}")
                kind, params = "tiers", (tuple(values), tuple(probs))
            else:
                raise ValueError(
                    f"{name} must be a number or one of uniform:LO:HI, lognormal:MEDIAN:SIGMA, "
                    f"tiers:V1@P1,V2@P2,...; got {spec!r}")
        else:
            raise ValueError(f"{name} must be a number or a distribution spec string, "
                             f"got {type(spec).__name__} {spec!r}")
        lowest = {"constant": lambda p: p[0], "uniform": lambda p: p[0],
                  "lognormal": lambda p: p[0], "tiers": lambda p: min(p[0])}[kind](params)
        if (self.positive and lowest <= 0) or lowest < 0:
            bound = "> 0" if self.positive else ">= 0"
            raise ValueError(f"{name} must be {bound}, got {spec!r}")
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "params", params)

    def __repr__(self) -> str:
        return f"Dist({self.spec!r})"

    @property
    def constant(self) -> bool:
        return self.kind == "constant" or (self.kind == "uniform"
                                           and self.params[0] == self.params[1])

    def mean(self) -> float:
        p = self.params
        if self.kind == "constant":
            return p[0]
        if self.kind == "uniform":
            return 0.5 * (p[0] + p[1])
        if self.kind == "lognormal":
            return p[0] * math.exp(0.5 * p[1] ** 2)
        return float(np.dot(p[0], p[1]))

    def quantile(self, u: np.ndarray) -> np.ndarray:
        """Values at the uniform numbers ``u`` in [0, 1) (inverse CDF), float64."""
        u = np.asarray(u, dtype=np.float64)
        p = self.params
        if self.kind == "constant":
            return np.full(u.shape, p[0])
        if self.kind == "uniform":
            return p[0] + (p[1] - p[0]) * u
        if self.kind == "lognormal":
            # Keep u strictly inside (0, 1): ndtri(0) is -inf.
            return p[0] * np.exp(p[1] * ndtri(np.clip(u, 2.0 ** -54, 1.0 - 2.0 ** -53)))
        values, probs = np.asarray(p[0]), np.cumsum(p[1])
        k = np.searchsorted(probs, u, side="right")
        return values[np.minimum(k, len(values) - 1)]


# --------------------------------------------------------------------------------------------------
# Configuration


def _probability(value: Any, name: str) -> float:
    v = _number(value, name)
    if not 0.0 <= v <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
    return v


@dataclass(frozen=True)
class NetworkConfig:
    """A network and its devices. Distribution fields take a :class:`Dist` spec.

    latency_ms: one-way latency of a link (ms). bandwidth_mbps: a link's bandwidth (Mbit/s).
    compute_sps: a peer's training speed (samples/s; one local step costs batch_size samples),
    drawn once per peer. straggler_prob / straggler_slowdown: each round each peer is, with that
    probability, that many times slower; straggler_mode "wait" (its neighbours wait for it) or
    "skip" (it misses the round's exchange: its links are down for that round). link_drop: each
    link is down in a round with that probability. churn_leave / churn_join: an online peer goes
    offline, an offline one comes back, with these probabilities per round (a Markov chain;
    churn_join = 1 - churn_leave gives i.i.d. availability 1 - churn_leave); churn_state "keep"
    (a returning peer resumes from the state it left with) or "reset" (it restarts from the initial
    model with zero momentum). nic "shared": a peer's messages in one exchange share its NIC, so a
    message (j -> i) moves at bandwidth / max(out-degree of j, in-degree of i); "dedicated": every
    link has its full bandwidth.
    """

    name: str = "custom"
    latency_ms: Any = 0.0
    bandwidth_mbps: Any = 10_000.0
    compute_sps: Any = 1_000.0
    straggler_prob: float = 0.0
    straggler_slowdown: float = 1.0
    straggler_mode: str = "wait"
    link_drop: float = 0.0
    churn_leave: float = 0.0
    churn_join: float = 1.0
    churn_state: str = "keep"
    nic: str = "shared"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be a non-empty str, got {self.name!r}")
        for fname, positive in (("latency_ms", False), ("bandwidth_mbps", True),
                                ("compute_sps", True)):
            value = getattr(self, fname)
            if not isinstance(value, Dist):
                value = Dist(value, name=fname, positive=positive)
            object.__setattr__(self, fname, value)
        for fname in ("straggler_prob", "link_drop", "churn_leave", "churn_join"):
            object.__setattr__(self, fname, _probability(getattr(self, fname), fname))
        slow = _number(self.straggler_slowdown, "straggler_slowdown")
        if slow < 1.0:
            raise ValueError(f"straggler_slowdown must be >= 1, got {self.straggler_slowdown!r}")
        object.__setattr__(self, "straggler_slowdown", slow)
        for fname, allowed in (("straggler_mode", ("wait", "skip")),
                               ("churn_state", ("keep", "reset")),
                               ("nic", ("shared", "dedicated"))):
            if getattr(self, fname) not in allowed:
                raise ValueError(f"{fname} must be one of {allowed}, got {getattr(self, fname)!r}")
        if self.churn_leave > 0 and self.churn_join == 0:
            raise ValueError("churn_join must be > 0 when churn_leave > 0 (else peers leave for "
                             "good), got churn_join=0")

    @property
    def has_faults(self) -> bool:
        """True when some round can lose a link (drops, churn, or skipping stragglers)."""
        return (self.link_drop > 0 or self.churn_leave > 0
                or (self.straggler_mode == "skip" and self.straggler_prob > 0))

    def replace(self, **changes) -> NetworkConfig:
        return replace(self, **changes)

    def to_dict(self) -> dict:
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name] = v.spec if isinstance(v, Dist) else v
        return out


#: Presets. Figures are orders of magnitude from public measurements; docs/network.md gives the
#: sources. Compute speeds are per device for a small model; override them for yours.
PRESETS: dict[str, NetworkConfig] = {
    "datacenter": NetworkConfig(name="datacenter", latency_ms=0.25, bandwidth_mbps=10_000,
                                compute_sps=2_000),
    "wan": NetworkConfig(name="wan", latency_ms="lognormal:40:0.5",
                         bandwidth_mbps="lognormal:100:0.7", compute_sps=2_000),
    "edge": NetworkConfig(name="edge", latency_ms="uniform:5:20",
                          bandwidth_mbps="lognormal:100:0.5",
                          compute_sps="tiers:200@0.5,500@0.3,1000@0.2", straggler_prob=0.05,
                          straggler_slowdown=3.0, link_drop=0.01),
    "mobile": NetworkConfig(name="mobile", latency_ms="lognormal:50:0.4",
                            bandwidth_mbps="lognormal:10:0.8",
                            compute_sps="tiers:50@0.3,150@0.5,400@0.2", straggler_prob=0.1,
                            straggler_slowdown=4.0, straggler_mode="skip", link_drop=0.02,
                            churn_leave=0.05, churn_join=0.5),
}


def preset(name: str) -> NetworkConfig:
    """The preset ``name`` (see :data:`PRESETS`)."""
    if name not in PRESETS:
        raise ValueError(f"unknown network preset {name!r}; expected one of {sorted(PRESETS)} "
                         "or a .toml file")
    return PRESETS[name]


def load_network(spec: str | NetworkConfig) -> NetworkConfig:
    """A preset name, or a TOML file whose ``[network]`` table (or top level) holds
    :class:`NetworkConfig` fields; ``preset = "NAME"`` in the table starts from that preset."""
    if isinstance(spec, NetworkConfig):
        return spec
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"network must be a preset name or a .toml file, got {spec!r}")
    if not spec.endswith(".toml"):
        return preset(spec)
    path = Path(spec)
    if not path.is_file():
        raise ValueError(f"network file {spec!r} does not exist")
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"network file {spec!r} is not valid TOML ({e})") from None
    except UnicodeDecodeError:
        raise ValueError(f"network file {spec!r} is not valid TOML: not UTF-8 text") from None
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise ValueError(f"network file {spec!r} is not valid TOML: arrays or tables nested "
                         "too deeply") from None
    table = dict(table.get("network", table))
    base = preset(table.pop("preset")) if "preset" in table else NetworkConfig(name=path.stem)
    known = {f.name for f in fields(NetworkConfig)}
    for key in table:
        if key.replace("-", "_") not in known:
            raise ValueError(f"network file {spec!r}: unknown key {key!r}; expected one of "
                             f"{sorted(known | {'preset'})}")
    changes = {k.replace("-", "_"): v for k, v in table.items()}
    changes.setdefault("name", path.stem if "preset" not in table else base.name)
    return base.replace(**changes)


# --------------------------------------------------------------------------------------------------
# The model bound to n peers and a seed


class NetworkModel:
    """A :class:`NetworkConfig` drawn for ``n`` peers from ``seed``.

    ``compute_sps`` (n,) holds each peer's speed. Links, faults and churn are drawn on demand
    from (seed, round, peer or link) — see the module docstring — so any subset can be asked
    for in any order with the same answer.
    """

    def __init__(self, config: NetworkConfig | str, n: int, seed: int = 0) -> None:
        self.config = load_network(config)
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n must be an int >= 1, got {n!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be an int >= 0, got {seed!r}")
        self.n, self.seed = int(n), int(seed)
        peers = np.arange(self.n)
        self.compute_sps = self.config.compute_sps.quantile(
            hash_uniform(self.seed, STREAM_COMPUTE, peers))
        self._online = np.ones(self.n, dtype=bool)  # churn state after round self._online_t
        self._online_t = -1
        self._joined = np.zeros(self.n, dtype=bool)

    def __repr__(self) -> str:
        return f"NetworkModel({self.config.name!r}, n={self.n}, seed={self.seed})"

    # Links ---------------------------------------------------------------------------------------

    def _pair(self, src, dst) -> tuple[np.ndarray, np.ndarray]:
        src, dst = np.broadcast_arrays(np.asarray(src, dtype=np.int64),
                                       np.asarray(dst, dtype=np.int64))
        return np.minimum(src, dst), np.maximum(src, dst)

    def latency(self, src, dst) -> np.ndarray:
        """One-way latency in seconds of the links (src -> dst), float64, symmetric."""
        a, b = self._pair(src, dst)
        return self.config.latency_ms.quantile(hash_uniform(self.seed, STREAM_LATENCY, a, b)) * 1e-3

    def bandwidth(self, src, dst) -> np.ndarray:
        """Bandwidth in bytes/s of the links (src -> dst), float64, symmetric."""
        a, b = self._pair(src, dst)
        mbps = self.config.bandwidth_mbps.quantile(hash_uniform(self.seed, STREAM_BANDWIDTH, a, b))
        return mbps * (1e6 / 8.0)

    def message_time(self, src, dst, nbytes, share=1) -> np.ndarray:
        """Seconds for ``nbytes`` on links (src -> dst): latency + share * nbytes / bandwidth."""
        return self.latency(src, dst) + np.asarray(share) * np.asarray(nbytes, dtype=np.float64) \
            / self.bandwidth(src, dst)

    def link_down(self, t: int, src, dst) -> np.ndarray:
        """bool: the links (src -> dst) are down in round t (both directions together)."""
        a, b = self._pair(src, dst)
        if self.config.link_drop == 0:
            return np.zeros(a.shape, dtype=bool)
        return hash_uniform(self.seed, STREAM_DROP, t, a, b) < self.config.link_drop

    # Peers ---------------------------------------------------------------------------------------

    def stragglers(self, t: int) -> np.ndarray:
        """bool (n,): the peers that are slow in round t."""
        if self.config.straggler_prob == 0:
            return np.zeros(self.n, dtype=bool)
        return hash_uniform(self.seed, STREAM_STRAGGLER, t, np.arange(self.n)) \
            < self.config.straggler_prob

    def compute_time(self, t: int, samples) -> np.ndarray:
        """Seconds (n,) each peer needs for ``samples`` training samples in round t."""
        slow = np.where(self.stragglers(t), self.config.straggler_slowdown, 1.0)
        return np.asarray(samples, dtype=np.float64) / self.compute_sps * slow

    def online(self, t: int) -> np.ndarray:
        """bool (n,): the peers online in round t. Every peer is online in round 0; afterwards an
        online peer leaves with probability churn_leave and an offline one returns with
        probability churn_join, per round (read-only copy)."""
        c = self.config
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 0:
            raise ValueError(f"t must be an int >= 0, got {t!r}")
        if c.churn_leave == 0:
            return np.ones(self.n, dtype=bool)
        if t < self._online_t:
            self._online[:], self._online_t = True, -1
        peers = np.arange(self.n)
        while self._online_t < t:
            s = self._online_t + 1
            before = self._online.copy()
            if s > 0:
                leave = hash_uniform(self.seed, STREAM_LEAVE, s, peers) < c.churn_leave
                join = hash_uniform(self.seed, STREAM_JOIN, s, peers) < c.churn_join
                self._online = np.where(before, ~leave, join)
            self._joined = self._online & ~before
            self._online_t = s
        out = self._online.copy()
        out.setflags(write=False)
        return out

    def joined(self, t: int) -> np.ndarray:
        """bool (n,): the peers that come back online in round t (offline in round t - 1)."""
        self.online(t)
        out = self._joined.copy()
        out.setflags(write=False)
        return out
