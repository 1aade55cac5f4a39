"""The mixing rules other than one linear gossip step: finite-time consensus and nonlinear gossip.

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

:class:`NonlinearGossipComm` (``--mixing nonlinear[:ALPHA[:ETA]]``) is the NGO seed's nonlinear
gossip in its classic finite-time form (Wang & Xiao 2010; Chen et al. 2021 build on it): each
peer moves towards every neighbour by a signed power of their difference,

    x_i <- x_i + eta * sum_{j != i} w_ij * sign(x_j - x_i) * |x_j - x_i| ** alpha,

elementwise, with W_t's off-diagonal weights (one exchange of the float32 rows, the bytes of a
gossip step). ``alpha = 1, eta = 1`` is linear gossip W x. With 0 < alpha < 1 the continuous-time
flow reaches consensus in finite time; the discrete rule with a fixed eta closes the large gaps
faster than linear gossip and then dithers at a floor of order eta^(1 / (1 - alpha)) (where the
step eta |z|^alpha stops being smaller than the gap |z|). The update is antisymmetric over every
edge with w_ij = w_ji, so the average of the rows is preserved (to float32 rounding).
"""

from __future__ import annotations

import numpy as np

from decentlearn.comm.local import FLOAT32_BYTES
from decentlearn.comm.wrapper import Layer
from decentlearn.topology import Topology, edges_of, round_matrix

__all__ = ["FiniteTimeComm", "MAX_PEERS", "NonlinearGossipComm", "check_nonlinear",
           "minimal_polynomial_schedule", "nonlinear_gossip", "nonlinear_step", "parse_mixing"]

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


def apply_schedule(comm, X: np.ndarray, gossip) -> np.ndarray:
    """y_K from y_0 = X by y_{k+1} = (W y_k - lam_k y_k) / (1 - lam_k) over ``comm.schedule``, in
    float32, where ``gossip(k, y, out)`` writes W y into out (and counts its bytes); two work
    arrays are kept on ``comm._work`` between calls. Returns a new array."""
    work = comm._work
    if not work or work[0].shape != X.shape:
        work = comm._work = [np.empty_like(X), np.empty_like(X)]
    y = X
    for k, lam in enumerate(comm.schedule):
        out = work[k % 2]
        gossip(k, y, out)
        out -= np.float32(lam) * y
        out *= np.float32(1.0 / (1.0 - lam))
        y = out
    return y.copy()


class _Rule(Layer):
    """A mixing rule over any communicator: it replaces ``mix`` and delegates every other
    operation to ``comm``. Compressed exchanges and replica ``combine`` have no counterpart in
    the rule: they raise."""

    #: What the error of a refused operation says.
    refusal = ""

    def combine(self, X: np.ndarray, t: int, out: np.ndarray | None = None) -> np.ndarray:
        raise ValueError(self.refusal)

    def exchange(self, compressor, payload, t: int) -> np.ndarray:
        raise ValueError(self.refusal)


class FiniteTimeComm(_Rule):
    """A communicator whose ``mix`` returns the exact average of the rows (to rounding) through the
    minimal-polynomial schedule of the topology's W: K gossip exchanges per call (halo exchanges
    on MPI), each counted, then the same float32 arithmetic on every backend."""

    refusal = ("mixing='finite-time' supports uncompressed D-PSGD only (it needs several "
               "exchanges per round); use mixing='gossip' with compression")

    #: The schedule's buffers (a list of arrays), kept between rounds.
    scratch = ("_work",)

    def __init__(self, comm) -> None:
        super().__init__(comm)
        self.__dict__["schedule"] = minimal_polynomial_schedule(comm.topology)
        self.__dict__["_work"] = []  # apply_schedule's buffers, kept between rounds

    @property
    def steps(self) -> int:
        """K: gossip exchanges per ``mix``."""
        return int(self.schedule.size)

    def mix(self, X: np.ndarray, t: int) -> np.ndarray:
        """The K-step schedule applied to X (not modified); returns a new array."""
        comm = self.comm
        plan = comm.plan(0)

        def gossip(k: int, y: np.ndarray, out: np.ndarray) -> None:
            halo = comm.halo_rows(y, plan, f"finite-time step {k} of round {t}")
            plan.gossip(halo, out, comm.n_threads)
            comm.count(0, X.shape[1] * FLOAT32_BYTES)

        return apply_schedule(self, X, gossip)


def parse_mixing(spec: str) -> tuple[str, float, float]:
    """``gossip``, ``finite-time`` or ``nonlinear[:ALPHA[:ETA]]`` -> (kind, alpha, eta); ALPHA in
    (0, 1] (default 0.5), ETA in (0, 1] (default 0.5)."""
    if not isinstance(spec, str):
        raise ValueError(f"mixing must be a string, got {spec!r}")
    if spec in ("gossip", "finite-time"):
        return spec, 1.0, 1.0
    kind, *args = spec.split(":")
    if kind == "nonlinear" and len(args) <= 2:
        try:
            alpha = float(args[0]) if args else 0.5
            eta = float(args[1]) if len(args) > 1 else 0.5
        except ValueError:
            alpha = eta = -1.0
        if 0 < alpha <= 1 and 0 < eta <= 1:
            return "nonlinear", alpha, eta
    raise ValueError("mixing must be gossip, finite-time or nonlinear[:ALPHA[:ETA]] with ALPHA "
                     f"and ETA in (0, 1], got {spec!r}")


#: Bytes of the (edges, chunk) float32 work array of one block of rows.
_CHUNK_BYTES = 32 << 20


def nonlinear_gossip(topology, X: np.ndarray, alpha: float, eta: float, t: int = 0,
                     out: np.ndarray | None = None) -> np.ndarray:
    """One nonlinear gossip step (module docstring) on the (n, d) float32 rows X: ``out[i] = X[i]
    + eta * sum_j w_ij sign(X[j] - X[i]) |X[j] - X[i]|^alpha``. Each output row depends on its
    own and its in-neighbours' rows only; edges are summed in ascending sender order."""
    X = np.asarray(X)
    if X.dtype != np.float32 or X.ndim != 2 or X.shape[0] != topology.n:
        raise ValueError(f"X must be a ({topology.n}, dim) float32 array, got {X.dtype} "
                         f"{X.shape}")
    if out is None:
        out = np.empty_like(X)
    elif out.shape != X.shape or out.dtype != X.dtype or np.may_share_memory(out, X):
        raise ValueError("out must be a separate array of X's shape and dtype")
    dst, src = edges_of(topology, t)
    w = np.asarray(round_matrix(topology, t)[dst, src]).ravel().astype(np.float32)
    order = np.lexsort((src, dst))
    return nonlinear_step(X, dst[order], src[order], w[order], alpha, eta, out)


def nonlinear_step(H: np.ndarray, dst: np.ndarray, src: np.ndarray, w: np.ndarray, alpha: float,
                   eta: float, out: np.ndarray) -> np.ndarray:
    """The arithmetic of :func:`nonlinear_gossip` on the edges (dst, src, w), sorted by (dst,
    src): ``out`` (n, d) holds rows ``H[:n]`` plus their updates from the rows ``H[src]``. An
    MPI rank passes its halo buffer (its rows first, then the neighbours' rows), ``dst`` and
    ``src`` renumbered into it: each output row sees the same values in the same order as in
    one process, so the result is bit-identical."""
    n, d = out.shape
    out[...] = H[:n]
    if dst.size == 0 or d == 0:
        return out
    starts = np.flatnonzero(np.r_[True, dst[1:] != dst[:-1]])
    rows = dst[starts]
    cols = max(1, min(d, _CHUNK_BYTES // (4 * dst.size)))
    a, e = np.float32(alpha), np.float32(eta)
    for c0 in range(0, d, cols):  # columns are independent: the chunking changes no value
        c1 = min(d, c0 + cols)
        z = H[src, c0:c1] - H[dst, c0:c1]  # (edges, chunk)
        phi = np.abs(z)
        if alpha != 1.0:
            np.power(phi, a, out=phi)
        np.copysign(phi, z, out=phi)
        phi *= w[:, None]
        acc = np.add.reduceat(phi, starts, axis=0)
        acc *= e
        out[rows, c0:c1] += acc
    return out


def check_nonlinear(topology, alpha: float, eta: float) -> tuple[float, float]:
    """(alpha, eta) as floats after checking them and that ``topology`` is undirected (the
    nonlinear step keeps the average only for symmetric weights); both backends' communicators."""
    if not (0 < alpha <= 1 and 0 < eta <= 1):
        raise ValueError(f"alpha and eta must be in (0, 1], got alpha={alpha}, eta={eta}")
    if getattr(topology, "directed", False):
        raise ValueError("nonlinear gossip needs symmetric weights (w_ij = w_ji) to keep the "
                         f"average; {topology.name!r} is directed")
    return float(alpha), float(eta)


class NonlinearGossipComm(_Rule):
    """A communicator whose ``mix`` is one nonlinear gossip step (:func:`nonlinear_gossip`): one
    exchange of the float32 rows per round (a halo exchange on MPI), counted like a gossip step.
    The step runs on the process's rows with the edges of W_t (the faulty W_t with a network
    model) renumbered into its halo, in (receiver, sender) order: the same result on any
    backend."""

    refusal = ("mixing='nonlinear' supports uncompressed D-PSGD only; use mixing='gossip' with "
               "compression")

    #: The previous result's rows, reused as the next result's buffer.
    scratch = ("_spare_rows",)

    def __init__(self, comm, *, alpha: float = 0.5, eta: float = 0.5) -> None:
        super().__init__(comm)
        self.__dict__["alpha"], self.__dict__["eta"] = check_nonlinear(comm.topology, alpha, eta)
        self.__dict__["_spare_rows"] = None

    def mix(self, X: np.ndarray, t: int) -> np.ndarray:
        comm = self.comm
        plan = comm.plan(t)
        halo = comm.halo_rows(X, plan, f"nonlinear mix of round {t}")
        dst, src = edges_of(comm.mixing, t)
        lo, n = comm.peer0, comm.n_peers
        keep = (dst >= lo) & (dst < lo + n)
        dst, src = dst[keep], src[keep]
        w = (np.asarray(round_matrix(comm.mixing, t)[dst, src]).ravel().astype(np.float32)
             if dst.size else np.zeros(0, dtype=np.float32))  # every link of the block dropped
        order = np.lexsort((src, dst))
        dst, src, w = dst[order], src[order], w[order]
        inside = (src >= lo) & (src < lo + n)
        col = np.where(inside, src - lo, n + np.searchsorted(plan.halo_peers, src))
        spare = self._spare_rows
        if spare is None or spare.shape != X.shape:
            spare = np.empty_like(X)
        out = nonlinear_step(halo, dst - lo, col, w, self.alpha, self.eta, spare)
        self._spare_rows = X  # the caller's old rows become the next result's buffer
        comm.count(t, X.shape[1] * FLOAT32_BYTES)
        return out
