"""The communicator seam: how peers exchange vectors, and how many bytes that costs.

Algorithms talk to a communicator (the members of :class:`Communicator`, ``protocol``) and never to
the transport, so the in-process simulator and the
MPI backend share the algorithm code. :class:`SimComm` (``local``) holds every peer's rows in one
process and mixes them with the C gossip kernel; ``decentlearn.mpi.MPIComm`` holds a rank's rows
behind the same operations. The other mixing rules (finite-time consensus, nonlinear gossip:
``mixing``), the event-driven clock of asynchronous gossip (``event``) and Clique Averaging
(``clique_averaging``) build on them.
"""

from decentlearn.comm.clique_averaging import CliqueAveraging
from decentlearn.comm.event import EventComm
from decentlearn.comm.local import FLOAT32_BYTES, SimComm, attach_network
from decentlearn.comm.protocol import Communicator, EventCommunicator
from decentlearn.comm.mixing import (FiniteTimeComm, NonlinearGossipComm, apply_schedule,
                                     check_nonlinear, minimal_polynomial_schedule,
                                     nonlinear_gossip, nonlinear_step, parse_mixing)

__all__ = [
    "FLOAT32_BYTES", "CliqueAveraging", "Communicator", "EventComm", "EventCommunicator", "FiniteTimeComm", "NonlinearGossipComm",
    "SimComm", "apply_schedule", "attach_network", "check_nonlinear",
    "minimal_polynomial_schedule", "nonlinear_gossip", "nonlinear_step", "parse_mixing",
]
