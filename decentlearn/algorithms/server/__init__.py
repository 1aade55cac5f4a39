"""Baselines with a server or an exact all-reduce, the references of the decentralized methods:
``allreduce``, ``fedavg``, ``stc-fl``, ``fedhisyn`` (one file each).

The algorithms' rows of ``params`` hold the server model after each round (the model a client
downloads when it is next selected); bytes sent by clients go to ``comm.bytes_sent`` and bytes sent
by the server to ``comm.server_bytes_sent``, and both are in the run's byte totals.

The communicator may host a block of the peers (the MPI backend): client samples are drawn over
all ``comm.n_global`` peers, each process trains and uploads its own clients, and the server's
state (its model, STC's server residual, the counters) is replicated, identical on every
process, because ``comm.upload`` returns every client's decoded row everywhere.
"""
