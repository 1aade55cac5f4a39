"""Finite-time consensus: averaging rules that reach the exact average in a finite number of steps.

The NGO seed (nonlinear gossiping, "finite-time consensus learning") argues for averaging rules
that reach consensus in finitely many steps instead of only asymptotically. Its abstract does not
state the rule, so this module implements the well-defined finite-time schemes (see
docs/topology-data-aware.md for exactly how they relate to the seed):

* any static symmetric doubly stochastic W (ring, torus, exponential graph, ...): the
  minimal-polynomial rule. If W has the distinct eigenvalues 1, lambda_1, ..., lambda_K, then
  prod_k (W - lambda_k I) / (1 - lambda_k) = J / n (it kills every eigenvector but the constant
  one and fixes that one), so the K steps x <- (W x - lambda_k x) / (1 - lambda_k), one gossip
  exchange each, give the exact average after K steps (K = number of distinct eigenvalues of W
  other than 1: floor(n / 2) on a ring of n peers). Steps are taken in Leja order of the
  lambda_k, which keeps the intermediate values bounded in floating point;
* time-varying graphs that are exact over one period already: the one-peer exponential graph on
  2^k peers (k rounds, Ying et al. 2021) and hypercube pairing (``moshpit:2x2x...x2``), and any
  full Moshpit grid (d rounds): run them with plain gossip.

:class:`FiniteTimeComm` is the mixing option the algorithms use (``--mixing finite-time``): its
``mix`` runs the K steps of the schedule, K exchanges whose bytes are counted, so one round of
D-PSGD gives every peer the exact average of the models.
"""

from __future__ import annotations

import numpy as np

from decentlearn import ops
from decentlearn.comm import FLOAT32_BYTES, SimComm
from decentlearn.topology import Topology

__all__ = ["FiniteTimeComm", "MAX_PEERS", "minimal_polynomial_schedule"]

#: The schedule needs all eigenvalues of W (a dense eigendecomposition): at most this many peers.
MAX_PEERS = 4096

#: Eigenvalues closer than this are one eigenvalue of the minimal polynomial.
EIG_TOL = 1e-9


def _leja(values: np.ndarray) -> np.ndarray:
    """Leja ordering: start at the largest |value|, then repeatedly the value maximizing the
    product of distances to those already chosen."""
    left = list(values)
    order = [max(left, key=abs)]
    left.remove(order[0])
    while left:
        best = max(left, key=lambda v: np.prod([abs(v - u) for u in order]))
        order.append(best)
        left.remove(best)
    return np.array(order)


def minimal_polynomial_schedule(topology: Topology) -> np.ndarray:
    """The distinct eigenvalues lambda_k != 1 of a static symmetric W, in Leja order: step k of the
    finite-time rule is x <- (W x - lambda_k x) / (1 - lambda_k)."""
    if not isinstance(topology, Topology):
        raise TypeError(f"topology must be a Topology, got {type(topology).__name__}")
    if topology.period != 1 or topology.directed:
        raise ValueError(
            f"finite-time mixing needs a static symmetric W, got {topology.name!r} "
            f"(period {topology.period}, directed={topology.directed}); time-varying graphs that "
            "are exact over one period (moshpit:GRID, one-peer-exponential on 2^k peers) reach the "
            "average with plain gossip"
        )
    if topology.n > MAX_PEERS:
        raise ValueError(f"finite-time mixing computes every eigenvalue of W: at most "
                         f"{MAX_PEERS} peers, got n={topology.n}")
    eig = np.sort(np.linalg.eigvalsh(topology.mixing_matrix()))
    distinct: list[float] = []
    for v in eig:
        if not distinct or v - distinct[-1] > EIG_TOL:
            distinct.append(float(v))
    others = np.array([v for v in distinct if abs(v - 1.0) > EIG_TOL])
    if others.size < len(distinct) - 1:  # pragma: no cover - a connected W has 1 once
        raise ValueError("W has eigenvalue 1 more than once: the graph is not connected")
    return _leja(others) if others.size else others


class FiniteTimeComm(SimComm):
    """A communicator whose ``mix`` returns the exact average of the rows (to rounding) through the
    minimal-polynomial schedule of the topology's W: K gossip exchanges per call, each counted.
    Compressed exchanges and replica ``combine`` are not finite-time: they raise."""

    def __init__(self, topology: Topology, n_threads: int | None = None) -> None:
        super().__init__(topology, n_threads)
        self.schedule = minimal_polynomial_schedule(topology)
        self._work: list[np.ndarray] = []

    @property
    def steps(self) -> int:
        """K: gossip exchanges per ``mix``."""
        return int(self.schedule.size)

    def mix(self, X: np.ndarray, t: int) -> np.ndarray:
        """The K-step schedule applied to X (not modified); returns a new array."""
        if not self._work or self._work[0].shape != X.shape:
            self._work = [np.empty_like(X), np.empty_like(X)]
        y = X
        for k, lam in enumerate(self.schedule):
            out = self._work[k % 2]
            ops.gossip(self.topology, y, out=out, n_threads=self.n_threads, t=0)
            self.count(0, X.shape[1] * FLOAT32_BYTES)
            out -= np.float32(lam) * y  # (W y - lam y) / (1 - lam)
            out *= np.float32(1.0 / (1.0 - lam))
            y = out
        return y.copy()

    def combine(self, X: np.ndarray, t: int, out: np.ndarray | None = None) -> np.ndarray:
        raise ValueError("mixing='finite-time' supports uncompressed D-PSGD only (it needs "
                         "several exchanges per round); use mixing='gossip' with compression")

    def exchange(self, compressor, payload, t: int) -> np.ndarray:
        raise ValueError("mixing='finite-time' supports uncompressed D-PSGD only (it needs "
                         "several exchanges per round); use mixing='gossip' with compression")
