"""The simulator, the package's public face: ``simulate``, ``RunConfig`` and ``Simulator``.

``RunConfig`` is the whole description of a run (the CLI's flags and config files map onto it);
``simulate(config)`` builds the pieces (data, partition, topology, model, optimizer, communicator,
algorithm), runs every peer in this process, and returns a ``Result`` with the evaluation history
and a summary. Callbacks see every round and every evaluation; the library itself never prints.
The machinery lives in :mod:`decentlearn.runner`; ``Simulator`` is its ``Runner`` in process.
"""

from __future__ import annotations

from decentlearn.runner import (Callback, DivergenceError, PeerSampler, Result, RunConfig,
                                SetupWarning, eval_sizes, setup_problems, stratified_order)
from decentlearn.runner.config import (DIVERGENCE_CONSENSUS_FACTOR, DIVERGENCE_LOSS_FACTOR,
                                       DPSGD_MAX_VARIANCE, SUMMARY_GAP_MAX_N)
from decentlearn.runner.loop import Runner
from decentlearn.runner.sampler import EVAL_BUDGET, EVAL_PEER_BUDGET

__all__ = [
    "DIVERGENCE_CONSENSUS_FACTOR", "DIVERGENCE_LOSS_FACTOR", "DPSGD_MAX_VARIANCE", "EVAL_BUDGET",
    "EVAL_PEER_BUDGET", "SUMMARY_GAP_MAX_N", "Callback", "DivergenceError", "PeerSampler",
    "Result", "RunConfig", "SetupWarning", "Simulator", "eval_sizes", "setup_problems",
    "simulate", "stratified_order",
]

#: The in-process simulator: a Runner with the default (local) backend.
Simulator = Runner


def simulate(config: RunConfig | None = None, callbacks: list[Callback] | tuple = (),
             **overrides) -> Result:
    """Runs one simulation: ``simulate(RunConfig(...))`` or ``simulate(peers=8, rounds=50)``."""
    config = (config or RunConfig()).replace(**overrides) if overrides else (config or RunConfig())
    return Simulator(config).run(callbacks)
