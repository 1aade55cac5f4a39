"""A communicator layered over another: it overrides a few operations (a mixing rule's ``mix``,
the event clock of asynchronous gossip) and delegates every other one to the communicator it
wraps, whatever its transport (all peers in one process, or a block of peers on an MPI rank).
This is how a rule is written once for every backend."""

from __future__ import annotations

from decentlearn.state import declared_scratch

__all__ = ["Layer"]


class Layer:
    """Delegates every attribute it does not define to ``comm``; attributes it sets in its own
    ``__dict__`` (in ``__init__``) stay its own, every other assignment goes to ``comm``."""

    def __init__(self, comm) -> None:
        self.__dict__["comm"] = comm

    def __getattr__(self, name: str):
        return getattr(self.__dict__["comm"], name)

    def scratch_arrays(self) -> dict:
        """The work arrays of this layer (its class's ``scratch`` names) and of ``comm``."""
        return {**self.__dict__["comm"].scratch_arrays(), **declared_scratch(self)}

    def __setattr__(self, name: str, value) -> None:
        if name in self.__dict__:
            self.__dict__[name] = value
        else:
            setattr(self.__dict__["comm"], name, value)
