"""Real networks in the simulator: a seeded network and device model, simulated wall-clock at the
communicator seam, faults and churn. See docs/network.md.

* :mod:`~decentlearn.network.model`: :class:`NetworkConfig` (presets, TOML), :class:`NetworkModel`;
* :mod:`~decentlearn.network.clock`: per-peer synchronous clocks and the all-reduce and
  parameter-server cost models;
* :mod:`~decentlearn.network.faults`: the per-round faulty view of W_t and the offline hook.

The time-varying and directed graphs are in :mod:`decentlearn.topology` (``random-matching``,
``epidemic:S``, ``directed-ring``); the algorithms that need them (push-sum, Epidemic Learning,
AD-PSGD) in :mod:`decentlearn.algorithms`; the event clock of asynchronous gossip in
:mod:`decentlearn.comm`.
"""

from decentlearn.network.clock import (SyncClock, allreduce_time, ring_allreduce_closed_form,
                                       server_round_time)
from decentlearn.network.faults import FaultyTopology, OfflineHook
from decentlearn.network.model import (PRESETS, Dist, NetworkConfig, NetworkModel, load_network,
                                       preset)

__all__ = [
    "PRESETS", "Dist", "FaultyTopology", "NetworkConfig", "NetworkModel", "OfflineHook",
    "SyncClock", "allreduce_time", "load_network", "preset", "ring_allreduce_closed_form",
    "server_round_time",
]
