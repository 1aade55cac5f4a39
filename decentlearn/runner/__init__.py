"""Running an experiment: ``RunConfig`` (config), the peer sampler and evaluation subsets
(sampler), ``Runner`` and its round loop, evaluation, summary and checkpoints (loop), the
checkpoint file format (checkpoint), the memory estimate (memory), and the in-process backend
(backend). A backend is composed with the runner: ``Runner(config, backend=MPIBackend(...))``.
"""

from decentlearn.runner.backend import LocalBackend
from decentlearn.runner.config import (DivergenceError, Result, RunConfig, SetupWarning,
                                       setup_problems)
from decentlearn.runner.loop import Callback, Runner
from decentlearn.runner.sampler import PeerSampler, eval_sizes, stratified_order

__all__ = ["Callback", "DivergenceError", "LocalBackend", "PeerSampler", "Result", "RunConfig",
           "Runner", "SetupWarning", "eval_sizes", "run", "setup_problems", "stratified_order"]


def run(config: RunConfig | None = None, callbacks=(), *, backend=None, **overrides) -> Result:
    """Runs one experiment: ``run(RunConfig(...))`` or ``run(peers=8, rounds=50)``."""
    config = config or RunConfig()
    if overrides:
        config = config.replace(**overrides)
    return Runner(config, backend=backend).run(callbacks)
