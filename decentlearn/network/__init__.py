"""Real networks in the simulator: a seeded network and device model, simulated wall-clock at the
communicator seam, faults and churn, push-sum and Epidemic Learning, and asynchronous gossip
(AD-PSGD). The time-varying and directed graphs they run on are in :mod:`decentlearn.topology`
(``random-matching``, ``epidemic:S``, ``directed-ring``). See docs/network.md.

* :mod:`~decentlearn.network.model`: :class:`NetworkConfig` (presets, TOML), :class:`NetworkModel`;
* :mod:`~decentlearn.network.clock`: per-peer synchronous clocks and the all-reduce and
  parameter-server cost models;
* :mod:`~decentlearn.network.faults`: the per-round faulty view of W_t and the offline hook;
* :mod:`~decentlearn.network.pushsum`: push-sum (SGP) and Epidemic Learning algorithms;
* :mod:`~decentlearn.network.asynchronous`: event-driven AD-PSGD.
"""

from decentlearn.network.clock import (SyncClock, allreduce_time, ring_allreduce_closed_form,
                                       server_round_time)
from decentlearn.network.faults import FaultyTopology, OfflineHook
from decentlearn.network import pushsum  # noqa: F401 - registers pushsum, epidemic
from decentlearn.network.model import (PRESETS, Dist, NetworkConfig, NetworkModel, load_network,
                                       preset)

__all__ = [
    "MIXING_HINTS", "PRESETS", "Dist", "FaultyTopology", "NetworkConfig", "NetworkModel",
    "OfflineHook", "SyncClock", "allreduce_time", "load_network", "preset",
    "ring_allreduce_closed_form", "server_round_time",
]

#: What to use instead when a topology's matrices are of a kind the algorithm does not handle
#: (the ``hints`` of :func:`decentlearn.topology.check_mixing`).
MIXING_HINTS = {"column": "push-sum (--algorithm pushsum)",
                "row": "Epidemic Learning (--algorithm epidemic) or pushsum"}


def accepted_mixing(algorithm: str) -> tuple[str, ...]:
    """The kinds of mixing matrix ("doubly", "column", "row") the registered ``algorithm``
    declares it handles (its class attribute ``mixing``; "doubly" when it declares none)."""
    from decentlearn import algorithms
    return tuple(getattr(algorithms.get(algorithm), "mixing", ("doubly",)))


def validate_run(config) -> None:
    """Checks a RunConfig's network fields: the preset or file loads, asynchronous mode has a
    network and an algorithm with an asynchronous form. Raises ValueError naming the field."""
    if config.network is not None:
        if not isinstance(config.network, str):
            raise ValueError("network must be a preset name or a .toml file path (str), got "
                             f"{type(config.network).__name__}")
        try:
            load_network(config.network)
        except ValueError as e:
            raise ValueError(f"network: {e}") from None
        from decentlearn import algorithms
        if not getattr(algorithms.get(config.algorithm), "simulated_time", True):
            raise ValueError(f"network: algorithm {config.algorithm!r} sends messages (server "
                             "rounds, point-to-point replies) that the network model does not "
                             "time yet; run it without --network")
    if not isinstance(config.asynchronous, bool):
        raise ValueError(f"asynchronous must be true or false, got {config.asynchronous!r}")
    if config.asynchronous:
        from decentlearn.network.asynchronous import ASYNC_FORMS
        if config.algorithm not in ASYNC_FORMS:
            raise ValueError(f"asynchronous mode: algorithm {config.algorithm!r} has no "
                             f"asynchronous form; expected one of {sorted(ASYNC_FORMS)}")
        if config.network is None:
            raise ValueError("asynchronous mode needs a network model for the peers' speeds and "
                             "message times: add --network PRESET (e.g. datacenter)")
