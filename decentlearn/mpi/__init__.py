"""Real multi-process runs on MPI (mpi4py): the communicator, the runner and BlueFog-like
primitives. See docs/mpi.md. Importing this package does not import mpi4py; the classes that
need it do, and say how to install it when it is missing."""

from decentlearn.mpi.comm import (DEFAULT_TIMEOUT, MPIComm, MPITimeoutError, block_bounds,
                                  import_mpi)
from decentlearn.mpi.primitives import (Context, allreduce, broadcast, init, neighbor_allgather,
                                        neighbor_allreduce)

__all__ = ["DEFAULT_TIMEOUT", "MPIComm", "MPITimeoutError", "block_bounds", "import_mpi",
           "Context", "init", "neighbor_allreduce", "neighbor_allgather", "allreduce",
           "broadcast"]
