"""The core of :mod:`decentlearn.topology`: the one registry of topology builders, the
:class:`Graph` a builder returns, the two kinds of topology and the checks they share.

* :class:`Topology`: the mixing matrices W_t of every round of a graph's period, built by
  :func:`make` from a registered builder's :class:`Graph` and a weight rule, by
  :func:`from_edges` or :func:`from_matrix`; checked once (nonnegative, doubly stochastic within
  :data:`TOLERANCE`, the union over one period connected) and stored as float64 sparse matrices;
  the dense matrix, the CSR triple the C gossip kernel consumes, neighbour lists, degrees and the
  spectral gap are computed lazily, cached per round ``t % period`` and returned read-only.
* :class:`RoundTopology`: W_t computed on demand (random graphs drawn per round, fault-masked
  views), with the same read API; each W_t is checked to be ``doubly``, ``column`` or ``row``
  stochastic (:data:`STOCHASTIC_KINDS`). A registered builder may return one directly.

Builders register with :func:`register` (the leaves :mod:`~decentlearn.topology.static`,
:mod:`~decentlearn.topology.dynamic`, :mod:`~decentlearn.topology.dcliques`,
:mod:`~decentlearn.topology.clumping`, :mod:`~decentlearn.topology.moshpit`) and weight rules with
:func:`register_weights` (:mod:`~decentlearn.topology.weights`); the package imports every leaf,
so :func:`available` lists every name whatever was imported before.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from decentlearn.registry import Registry
from decentlearn.topology.spectral import second_singular_value

__all__ = [
    "STOCHASTIC_KINDS",
    "Graph",
    "RoundTopology",
    "Topology",
    "available",
    "check_mixing",
    "check_stochastic",
    "edges_of",
    "from_edges",
    "from_matrix",
    "make",
    "register",
    "register_weights",
    "round_matrix",
    "stochastic_kind",
]

#: Tolerance on row and column sums of every W_t (float64).
TOLERANCE = 1e-12

#: Largest n for which repr() computes the spectral gap (beyond it, only a cached gap is shown).
REPR_GAP_MAX_N = 1024

#: What a mixing matrix preserves: "doubly" (rows and columns sum to 1: the mean), "column"
#: (columns sum to 1: the sum, as push-sum needs), "row" (rows sum to 1: a weighted average).
STOCHASTIC_KINDS = ("doubly", "column", "row")

#: How many rounds a RoundTopology keeps cached (an algorithm reads W_t a few times per round).
ROUND_CACHE = 4

#: A builder: ``(n, *spec_params, [seed=], [labels=], [mixing=]) -> Graph | RoundTopology``.
GraphBuilder = Callable[..., "Graph | RoundTopology"]
#: A weight rule: ``(adjacency, label for errors, groups or None) -> W`` (canonical CSR).
WeightRule = Callable[[sp.csr_array, str, "np.ndarray | None"], sp.csr_array]

#: The one registry of topologies: static graphs, data-aware ones and per-round graphs.
_BUILDERS: Registry[GraphBuilder] = Registry("topology")
_WEIGHT_RULES: Registry[WeightRule] = Registry("weight rule")


# --------------------------------------------------------------------------------------------------
# Argument checking


def check_int(value: Any, name: str, *, minimum: int | None = None) -> int:
    """``value`` as an int (TypeError for a non-int, ValueError below ``minimum``)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def parse_int(text: str, name: str, *, minimum: int | None = None) -> int:
    """A spec parameter ``text`` as an int (ValueError naming ``name`` otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {text!r}") from None
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def parse_probability(text: str, name: str) -> float:
    """A spec parameter ``text`` as a number in [0, 1] (ValueError naming ``name`` otherwise)."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name} must be a number in [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a number in [0, 1], got {text!r}")
    return value


def _check_weights(weights: Any) -> str:
    if not isinstance(weights, str):
        raise TypeError(f"weights must be a str, got {type(weights).__name__} {weights!r}")
    if weights not in _WEIGHT_RULES:
        raise ValueError(f"weights must be one of {_WEIGHT_RULES.available()}, got {weights!r}")
    return weights


def _check_mixing_kinds(mixing: Any) -> tuple[str, ...]:
    if isinstance(mixing, str) or not isinstance(mixing, Iterable):
        raise TypeError(f"mixing must be a tuple of kinds from {STOCHASTIC_KINDS}, "
                        f"got {type(mixing).__name__} {mixing!r}")
    mixing = tuple(mixing)
    bad = [k for k in mixing if k not in STOCHASTIC_KINDS]
    if bad or not mixing:
        raise ValueError(f"mixing must be a non-empty tuple of kinds from {STOCHASTIC_KINDS}, "
                         f"got {mixing!r}")
    return mixing


def edge_array(edges: Any, n: int, name: str) -> np.ndarray:
    """Returns ``edges`` as a C-contiguous (m, 2) int64 array of peer indices in [0, n)."""
    if isinstance(edges, np.ndarray):
        arr = edges
    elif isinstance(edges, Iterable) and not isinstance(edges, (str, bytes)):
        arr = np.asarray(list(edges))
    else:
        raise TypeError(
            f"{name} must be an iterable of (i, j) pairs or an (m, 2) int array, "
            f"got {type(edges).__name__}"
        )
    if arr.size == 0:
        return np.zeros((0, 2), dtype=np.int64)
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must hold integer peer indices, got dtype {arr.dtype}")
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ValueError(f"{name} must be (i, j) pairs with shape (m, 2), got shape {arr.shape}")
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= n:
        bad = lo if lo < 0 else hi
        raise ValueError(
            f"{name} holds peer index {bad}, out of range for n={n} (expected 0 <= i < n)"
        )
    return np.ascontiguousarray(arr, dtype=np.int64)


# --------------------------------------------------------------------------------------------------
# Graphs and builders


@dataclass(frozen=True)
class Graph:
    """Who talks to whom in each round of a communication graph, before weights are chosen.

    ``rounds`` holds one (m, 2) int array per round of the period. Row (i, j) means peer i
    receives peer j's vector; when ``directed`` is False the pair is an undirected edge and j also
    receives from i. Self loops are ignored and duplicates merged when weights are applied (every
    peer always keeps its own vector through the diagonal of W_t).
    """

    n: int
    rounds: tuple[np.ndarray, ...]
    directed: bool = False
    #: Optional group (clique) id of every peer, int64 (n,): kept by the Topology, used by the
    #: "clique" weight rule and by Clique Averaging.
    groups: np.ndarray | None = field(default=None, compare=False)
    #: Optional facts about the construction that a run summary reports (JSON-serializable).
    info: dict | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        n = check_int(self.n, "n", minimum=1)
        if self.groups is not None:
            groups = np.asarray(self.groups)
            if groups.shape != (n,) or not np.issubdtype(groups.dtype, np.integer):
                raise ValueError(f"groups must be an int array of shape ({n},), got "
                                 f"{groups.dtype} {groups.shape}")
            if groups.min() < 0:
                raise ValueError("groups must hold group ids >= 0")
            object.__setattr__(self, "groups", _read_only(groups.astype(np.int64)))
        if not isinstance(self.directed, bool):
            raise TypeError(f"directed must be a bool, got {type(self.directed).__name__}")
        if isinstance(self.rounds, np.ndarray) or not isinstance(self.rounds, (tuple, list)):
            raise TypeError(
                "rounds must be a tuple of (m, 2) edge arrays, one per round, "
                f"got {type(self.rounds).__name__}; wrap a static graph's edges as (edges,)"
            )
        if len(self.rounds) == 0:
            raise ValueError("rounds must hold at least one round, got an empty tuple")
        rounds = tuple(edge_array(e, n, f"rounds[{k}]") for k, e in enumerate(self.rounds))
        object.__setattr__(self, "n", n)
        object.__setattr__(self, "rounds", rounds)

    def adjacency(self, k: int = 0) -> sp.csr_array:
        """The 0/1 float64 adjacency of round ``k``, self loops dropped: A[i, j] = 1 if i receives
        from j."""
        edges = self.rounds[check_int(k, "k", minimum=0) % len(self.rounds)]
        i, j = edges[:, 0], edges[:, 1]
        keep = i != j
        i, j = i[keep], j[keep]
        if not self.directed:
            i, j = np.concatenate((i, j)), np.concatenate((j, i))
        adj = sp.csr_array((np.ones(i.size), (i, j)), shape=(self.n, self.n))
        adj.sum_duplicates()
        adj.sort_indices()
        adj.data[:] = 1.0
        return adj


def register(name: str) -> Callable[[GraphBuilder], GraphBuilder]:
    """Registers a topology builder under ``name`` for :func:`make`.

    The builder is called as ``builder(n, *params, seed=seed)`` with the spec's colon-separated
    parameters as strings (``make("small-world:4:0.1", n)`` passes ``"4", "0.1"``); ``seed``,
    ``labels`` (per-peer label histograms) and ``mixing`` (the matrix kinds the algorithm accepts)
    are passed only when the builder has such a keyword parameter. It returns a :class:`Graph`
    with ``n`` peers, which :func:`make` weighs with the chosen rule, or a :class:`RoundTopology`
    (per-round graphs that choose their own weights), and raises ValueError, naming the
    parameter, for values it cannot use.
    """
    add = _BUILDERS.register(name)

    def decorator(builder: GraphBuilder) -> GraphBuilder:
        if not callable(builder):
            raise TypeError(f"builder for {name!r} must be callable, got {type(builder).__name__}")
        return add(builder)

    return decorator


def available() -> list[str]:
    """Names of every registered topology (static, data-aware and per-round), sorted."""
    return _BUILDERS.available()


def available_weights() -> list[str]:
    """Names of every registered weight rule (``make(spec, n, weights=name)``), sorted."""
    return _WEIGHT_RULES.available()


def register_weights(name: str) -> Callable[[WeightRule], WeightRule]:
    """Registers a weight rule under ``name`` (``make(spec, n, weights=name)``): called as
    ``rule(adj, label, groups)`` on each round's symmetric 0/1 adjacency, with ``label`` naming
    the topology for errors and ``groups`` the graph's clique ids (or None); returns W in
    canonical CSR form with the diagonal stored."""
    return _WEIGHT_RULES.register(name)


def _usage(name: str, builder: GraphBuilder) -> str:
    """The spec form of a builder, e.g. ``small-world[:K][:P]``, from its signature."""
    parts = [name]
    for p in list(inspect.signature(builder).parameters.values())[1:]:
        if p.kind is p.VAR_POSITIONAL:
            parts.append(f":{p.name.upper()}")
        elif p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            parts.append(f":{p.name.upper()}" if p.default is p.empty else f"[:{p.name.upper()}]")
    return "".join(parts)


# --------------------------------------------------------------------------------------------------
# Topology


def _check_connected(patterns: Iterable[sp.csr_array], n: int, label: str, period: int) -> None:
    patterns = list(patterns)
    union = abs(patterns[0])
    for pattern in patterns[1:]:
        union = union + abs(pattern)
    count, _ = connected_components(union, directed=True, connection="strong")
    if count > 1:
        where = label if period == 1 else f"the union of the {period} rounds of {label}"
        raise ValueError(
            f"{where} is not connected ({count} components): consensus is impossible"
        )


def _canonical(matrix: Any, name: str) -> sp.csr_array:
    if sp.issparse(matrix):
        dtype = matrix.dtype
    else:
        matrix = np.asarray(matrix)
        dtype = matrix.dtype
    real = np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.floating)
    if dtype == np.bool_ or not real:
        raise TypeError(f"{name} must hold real numbers, got dtype {dtype}")
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1] or matrix.shape[0] < 1:
        raise ValueError(
            f"{name} must be a square (n, n) matrix with n >= 1, got shape {matrix.shape}"
        )
    w = sp.csr_array(matrix, dtype=np.float64)
    w.sum_duplicates()
    w.eliminate_zeros()
    w.sort_indices()
    return w


def _check_doubly_stochastic(w: sp.csr_array, name: str) -> None:
    if not np.all(np.isfinite(w.data)):
        raise ValueError(f"{name} must be finite, got NaN or infinity")
    if w.nnz and w.data.min() < 0.0:
        raise ValueError(f"{name} must be nonnegative, got an entry {float(w.data.min())!r}")
    for axis, what in ((1, "row"), (0, "column")):
        sums = np.asarray(w.sum(axis=axis)).ravel()
        worst = int(np.argmax(np.abs(sums - 1.0)))
        if abs(sums[worst] - 1.0) > TOLERANCE:
            raise ValueError(
                f"{name} is not doubly stochastic: {what} {worst} sums to {float(sums[worst])!r} "
                f"(every row and column must sum to 1 within {TOLERANCE})"
            )


def _is_symmetric(w: sp.csr_array) -> bool:
    t = w.T.tocsr()
    t.sort_indices()
    return (
        np.array_equal(w.indptr, t.indptr)
        and np.array_equal(w.indices, t.indices)
        and np.array_equal(w.data, t.data)
    )


def _read_only(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class Topology:
    """The mixing matrices W_t of a gossip graph, one per round of its period.

    Build one with :func:`make`, :func:`from_edges` or :func:`from_matrix`. ``rounds`` holds each
    W_t as a canonical float64 CSR matrix (sorted indices, no explicit zeros; treat as read-only);
    ``n``, ``period`` (W_t == W_{t mod period}) and ``directed`` (some W_t is not symmetric) follow
    from it. Construction checks that every W_t is nonnegative and doubly stochastic within
    :data:`TOLERANCE` and that the union of the rounds is connected. Every method takes the round
    ``t >= 0`` and caches its result for ``t % period``; arrays it returns are read-only.
    """

    name: str
    weights: str
    rounds: tuple[sp.csr_array, ...] = field(repr=False)
    #: Group (clique) id of every peer when the builder made groups (d-cliques), else None.
    groups: np.ndarray | None = field(default=None, repr=False)
    #: Facts about the construction for the run summary (d-cliques: clique skews, edges), or None.
    info: dict | None = field(default=None, repr=False)
    n: int = field(init=False)
    directed: bool = field(init=False)
    period: int = field(init=False)
    _cache: dict[tuple[str, int], Any] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"name must be a non-empty str, got {self.name!r}")
        if self.weights != "given":
            _check_weights(self.weights)
        if not isinstance(self.rounds, (tuple, list)) or len(self.rounds) == 0:
            raise TypeError(
                "rounds must be a non-empty tuple of (n, n) matrices, "
                f"got {type(self.rounds).__name__}"
            )
        period = len(self.rounds)
        names = [f"W_{k} of {self.name!r}" for k in range(period)]
        if period == 1:
            names = [f"W of {self.name!r}"]
        rounds = tuple(_canonical(w, names[k]) for k, w in enumerate(self.rounds))
        n = rounds[0].shape[0]
        for k, w in enumerate(rounds):
            if w.shape != (n, n):
                raise ValueError(f"rounds[{k}] must have shape ({n}, {n}), got {w.shape}")
            _check_doubly_stochastic(w, names[k])
        _check_connected(rounds, n, f"{self.name!r} with n={n}", period)
        object.__setattr__(self, "rounds", rounds)
        object.__setattr__(self, "n", n)
        object.__setattr__(self, "period", period)
        object.__setattr__(self, "directed", not all(_is_symmetric(w) for w in rounds))

    def __repr__(self) -> str:
        period = f", period={self.period}" if self.period > 1 else ""
        # The gap costs ARPACK iterations (seconds for a ring of 10^4): show it when cheap or known.
        known = self.n <= REPR_GAP_MAX_N or ("gap", 0) in self._cache
        gap = f", gap={self.spectral_gap():.3g}" if known else ""
        return f"Topology({self.name!r}, n={self.n}, weights={self.weights!r}{period}{gap})"

    def _round(self, t: int) -> int:
        return check_int(t, "t", minimum=0) % self.period

    def _cached(self, what: str, r: int, compute: Callable[[], Any]) -> Any:
        key = (what, r)
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    def mixing_matrix(self, t: int = 0) -> np.ndarray:
        """W_t as a dense (n, n) float64 array, read-only."""
        r = self._round(t)
        return self._cached("dense", r, lambda: _read_only(self.rounds[r].toarray()))

    def csr(self, t: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """W_t for the C gossip kernel Y = W X: (indptr int64 (n+1,), indices int32 (nnz,), data
        float32 (nnz,)). Row i lists every j with W_t[i, j] != 0, the diagonal included (it is
        positive under every weight rule), columns ascending. C-contiguous and read-only."""
        r = self._round(t)

        def compute() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            w = self.rounds[r]
            return (
                _read_only(np.array(w.indptr, dtype=np.int64, order="C")),
                _read_only(np.array(w.indices, dtype=np.int32, order="C")),
                _read_only(np.array(w.data, dtype=np.float32, order="C")),
            )

        return self._cached("csr", r, compute)

    def _off_diagonal(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        """(indptr, indices) int64 of W_t without its diagonal."""

        def compute() -> tuple[np.ndarray, np.ndarray]:
            w = self.rounds[r]
            rows = np.repeat(np.arange(self.n), np.diff(w.indptr))
            off = w.indices != rows
            indptr = np.zeros(self.n + 1, dtype=np.int64)
            np.cumsum(np.bincount(rows[off], minlength=self.n), out=indptr[1:])
            return _read_only(indptr), _read_only(w.indices[off].astype(np.int64))

        return self._cached("off", r, compute)

    def neighbors(self, i: int, t: int = 0) -> np.ndarray:
        """The peers whose vectors peer ``i`` receives in round t (W_t[i, j] != 0, j != i),
        ascending, int64, read-only."""
        i = check_int(i, "i", minimum=0)
        if i >= self.n:
            raise ValueError(f"i must be < n={self.n}, got {i}")
        indptr, indices = self._off_diagonal(self._round(t))
        return indices[indptr[i] : indptr[i + 1]]

    def degree(self, t: int = 0) -> np.ndarray:
        """int64 (n,): how many other peers each peer receives from in round t."""
        r = self._round(t)
        return self._cached("degree", r, lambda: _read_only(np.diff(self._off_diagonal(r)[0])))

    def send_counts(self, t: int = 0) -> np.ndarray:
        """int64 (n,): to how many other peers peer j sends its vector in round t (the off-diagonal
        nonzeros of column j of W_t); multiply by a payload's size to count bytes sent."""
        r = self._round(t)

        def compute() -> np.ndarray:
            counts = np.bincount(self._off_diagonal(r)[1], minlength=self.n)
            return _read_only(counts.astype(np.int64))

        return self._cached("send", r, compute)

    def edge_count(self) -> int:
        """Undirected links used in any round: pairs {i, j}, i != j, with W_t[i, j] or W_t[j, i]
        nonzero for some t (the complete graph has n (n - 1) / 2)."""

        def compute() -> int:
            union = abs(self.rounds[0])
            for w in self.rounds[1:]:
                union = union + abs(w)
            union = sp.triu(union + union.T, k=1)
            union.eliminate_zeros()
            return int(union.nnz)

        return self._cached("edges", 0, compute)

    def spectral_gap(self, t: int = 0) -> float:
        """1 - (second largest singular value of W_t), in [0, 1].

        W_t is doubly stochastic, so its largest singular value is 1 (vector of ones) and the
        second is ||W_t - J/n||_2 (J the all-ones matrix): the disagreement ||X - mean|| shrinks by
        at least that factor per round. For a symmetric W_t this is max(|lambda_2|, |lambda_n|).
        Up to :data:`DENSE_GAP_MAX_N` peers it comes from a dense eigendecomposition; above, from
        ARPACK (scipy.sparse.linalg.eigsh) on the deflated operator x -> W_t (x - mean(x)) (and
        on its Gram operator when W_t is not symmetric), so it costs a few hundred sparse
        products: milliseconds at 10^3 peers, about a second at 10^5. 1.0 for n = 1. Cached.
        """
        r = self._round(t)
        w = self.rounds[r]
        return self._cached(
            "gap", r, lambda: 1.0 - second_singular_value((w,), self.n, _is_symmetric(w))
        )

    def period_spectral_gap(self) -> float:
        """1 - sigma_2(W_{p-1} ... W_1 W_0), the gap of the product over one period p.

        Equal to :meth:`spectral_gap` for a static graph. For a time-varying graph it says how
        much one whole period contracts the disagreement: each W_t alone may have gap 0 (a
        disconnected round), while the product can even be exactly J/n (gap 1: Moshpit on a full
        grid, one-peer exponential graphs on 2^k peers). Same solvers as :meth:`spectral_gap`,
        applied to the product as an operator (it is never formed above DENSE_GAP_MAX_N peers).
        """
        if self.period == 1:
            return self.spectral_gap()
        return self._cached(
            "period-gap", 0, lambda: 1.0 - second_singular_value(self.rounds, self.n, False)
        )


def _from_graph(name: str, graph: Graph, weights: str) -> Topology:
    label = f"{name!r} with n={graph.n}"
    period = len(graph.rounds)
    patterns = [graph.adjacency(k) for k in range(period)]
    _check_connected(patterns, graph.n, label, period)
    rule = _WEIGHT_RULES.get(weights)
    mats = tuple(rule(adj, label, graph.groups) for adj in patterns)
    topology = Topology(name, weights, mats, groups=graph.groups, info=graph.info)
    if topology.directed and not graph.directed:
        raise ValueError(f"weights={weights!r} on undirected {label} gives a non-symmetric matrix")
    return topology


def make(
    spec: str,
    n: int,
    *,
    seed: int = 0,
    weights: str = "metropolis",
    mixing: tuple[str, ...] = ("doubly",),
    labels: Any = None,
) -> Topology | RoundTopology:
    """Builds the topology named by ``spec`` ("ring", "torus:4:8", "small-world:4:0.1",
    "random-matching", "epidemic:2", ...; see :func:`available`) on ``n`` peers.

    A graph builder's graph gets its mixing weights from the rule ``weights`` ("metropolis",
    "max-degree", "uniform", or "clique" for d-cliques) and becomes a :class:`Topology`; a
    per-round graph is a :class:`RoundTopology` that chooses its own weights. ``seed`` fixes
    random graphs. ``mixing``, the kinds of matrix the algorithm accepts (its ``mixing``
    attribute, e.g. ``("column", "doubly")`` for push-sum), reaches only the builders that
    declare a keyword-only ``mixing`` parameter (the directed per-round graphs, which take the
    first of "column" / "row" in it). ``labels``, per-peer label histograms (n, n_classes),
    reaches only the builders that declare a keyword-only ``labels`` parameter (data-aware ones
    such as d-cliques), which raise ValueError when it is None; the others ignore it. Whether the
    result suits an algorithm is :func:`check_mixing`'s question."""
    if not isinstance(spec, str):
        raise TypeError(f"spec must be a str, got {type(spec).__name__}")
    n = check_int(n, "n", minimum=1)
    seed = check_int(seed, "seed", minimum=0)
    weights = _check_weights(weights)
    mixing = _check_mixing_kinds(mixing)
    spec = spec.strip()
    key, *params = spec.split(":")
    builder = _BUILDERS.get(key, spec)
    signature = inspect.signature(builder)
    offered = {"seed": seed, "labels": labels, "mixing": mixing}
    kwargs = {k: v for k, v in offered.items() if k in signature.parameters}
    try:
        signature.bind(n, *params, **kwargs)
    except TypeError:
        raise ValueError(
            f"spec {spec!r} has {len(params)} parameter(s); expected {_usage(key, builder)}"
        ) from None
    try:
        graph = builder(n, *params, **kwargs)
    except ValueError as exc:
        raise ValueError(f"spec {spec!r} with n={n}: {exc}") from exc
    if not isinstance(graph, (Graph, RoundTopology)):
        raise TypeError(f"builder for {key!r} must return a Graph or a RoundTopology, "
                        f"got {type(graph).__name__}")
    if graph.n != n:
        raise ValueError(f"builder for {key!r} returned a graph on {graph.n} peers, expected n={n}")
    if isinstance(graph, RoundTopology):
        return graph
    return _from_graph(spec, graph, weights)


def from_edges(
    edges: Iterable[tuple[int, int]] | npt.ArrayLike,
    n: int,
    *,
    weights: str = "metropolis",
    name: str = "edges",
) -> Topology:
    """Builds a static topology from undirected edges, (i, j) pairs or an (m, 2) int array of peer
    indices in [0, n). Self loops are ignored and duplicate edges (either orientation) merged."""
    n = check_int(n, "n", minimum=1)
    weights = _check_weights(weights)
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str, got {name!r}")
    return _from_graph(name, Graph(n, (edge_array(edges, n, "edges"),)), weights)


def from_matrix(W: npt.ArrayLike | sp.sparray | sp.spmatrix, *, name: str = "matrix") -> Topology:
    """Wraps a given (n, n) mixing matrix (dense or scipy.sparse), checked nonnegative, doubly
    stochastic within 1e-12 and connected; ``weights`` is "given" and ``directed`` is True unless
    W equals its transpose exactly."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str, got {name!r}")
    return Topology(name, "given", (_canonical(W, "W"),))


# --------------------------------------------------------------------------------------------------
# Per-round topologies: W_t produced on demand, possibly only column- or row-stochastic. The C
# gossip kernel reads either kind through ``csr(t)``.


def check_stochastic(w: sp.csr_array, kind: str, name: str) -> None:
    """Raises ValueError unless ``w`` is nonnegative, finite and ``kind``-stochastic (rows and/or
    columns summing to 1 within :data:`TOLERANCE`)."""
    if kind not in STOCHASTIC_KINDS:
        raise ValueError(f"stochastic must be one of {STOCHASTIC_KINDS}, got {kind!r}")
    if kind == "doubly":
        _check_doubly_stochastic(w, name)
        return
    if not np.all(np.isfinite(w.data)):
        raise ValueError(f"{name} must be finite, got NaN or infinity")
    if w.nnz and w.data.min() < 0.0:
        raise ValueError(f"{name} must be nonnegative, got an entry {float(w.data.min())!r}")
    axis, what = (0, "column") if kind == "column" else (1, "row")
    sums = np.asarray(w.sum(axis=axis)).ravel()
    worst = int(np.argmax(np.abs(sums - 1.0)))
    if abs(sums[worst] - 1.0) > TOLERANCE:
        raise ValueError(f"{name} is not {kind}-stochastic: {what} {worst} sums to "
                         f"{float(sums[worst])!r} (every {what} must sum to 1 within {TOLERANCE})")


def stochastic_kind(topology: Any) -> str:
    """"doubly" for a :class:`Topology`, else the topology's ``stochastic`` attribute."""
    return getattr(topology, "stochastic", "doubly")


def round_matrix(topology: Any, t: int) -> sp.csr_array:
    """W_t of a :class:`Topology` or :class:`RoundTopology` as canonical float64 CSR (read-only
    by convention)."""
    if isinstance(topology, Topology):
        return topology.rounds[topology._round(t)]
    return topology.matrix(t)


class RoundTopology:
    """A topology whose W_t is computed on demand by ``matrix_of(t)`` (time-varying random graphs,
    fault-masked views): the read API of :class:`Topology` (``n``, ``csr(t)``, ``send_counts(t)``,
    ``degree(t)``, ``neighbors(i, t)``, ``mixing_matrix(t)``, ``spectral_gap(t)``), with
    ``stochastic`` saying what each W_t is checked to be ("doubly", "column" or "row") and
    ``period`` None for an aperiodic sequence. Every W_t is checked when first computed and the
    last :data:`ROUND_CACHE` rounds are cached; the diagonal is always stored (the C kernel and
    :meth:`csr` list it even when zero).
    """

    #: Not made of cliques and no builder information (see :class:`Topology`).
    groups = None
    info = None

    def __init__(self, name: str, n: int, matrix_of: Callable[[int], sp.csr_array], *,
                 weights: str = "given", stochastic: str = "doubly", period: int | None = None,
                 directed: bool = True) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"name must be a non-empty str, got {name!r}")
        if stochastic not in STOCHASTIC_KINDS:
            raise ValueError(f"stochastic must be one of {STOCHASTIC_KINDS}, got {stochastic!r}")
        if period is not None:
            period = check_int(period, "period", minimum=1)
        self.name, self.n, self.weights = name, check_int(n, "n", minimum=1), weights
        self.stochastic, self.period, self.directed = stochastic, period, bool(directed)
        self._matrix_of = matrix_of
        self._cache: dict[int, dict[str, Any]] = {}

    def __repr__(self) -> str:
        period = "aperiodic" if self.period is None else f"period={self.period}"
        return (f"RoundTopology({self.name!r}, n={self.n}, weights={self.weights!r}, "
                f"stochastic={self.stochastic!r}, {period})")

    def _entry(self, t: int) -> dict[str, Any]:
        t = check_int(t, "t", minimum=0)
        key = t if self.period is None else t % self.period
        entry = self._cache.get(key)
        if entry is None:
            w = self._matrix_of(key)
            if w.shape != (self.n, self.n):
                raise ValueError(f"W_{t} of {self.name!r} must have shape ({self.n}, {self.n}), "
                                 f"got {w.shape}")
            check_stochastic(w, self.stochastic, f"W_{t} of {self.name!r}")
            entry = {"w": w}
            if len(self._cache) >= ROUND_CACHE:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = entry
        return entry

    def matrix(self, t: int) -> sp.csr_array:
        return self._entry(t)["w"]

    def mixing_matrix(self, t: int = 0) -> np.ndarray:
        return _read_only(self.matrix(t).toarray())

    def csr(self, t: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        entry = self._entry(t)
        if "csr" not in entry:
            w = entry["w"]
            entry["csr"] = (_read_only(np.array(w.indptr, dtype=np.int64)),
                            _read_only(np.array(w.indices, dtype=np.int32)),
                            _read_only(np.array(w.data, dtype=np.float32)))
        return entry["csr"]

    def edges(self, t: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """(dst, src) int64 of the off-diagonal nonzeros of W_t: src sends to dst in round t."""
        entry = self._entry(t)
        if "edges" not in entry:
            w = entry["w"]
            rows = np.repeat(np.arange(self.n), np.diff(w.indptr))
            off = (w.indices != rows) & (w.data != 0)
            entry["edges"] = (_read_only(rows[off].astype(np.int64)),
                              _read_only(w.indices[off].astype(np.int64)))
        return entry["edges"]

    def degree(self, t: int = 0) -> np.ndarray:
        return _read_only(np.bincount(self.edges(t)[0], minlength=self.n).astype(np.int64))

    def send_counts(self, t: int = 0) -> np.ndarray:
        return _read_only(np.bincount(self.edges(t)[1], minlength=self.n).astype(np.int64))

    def neighbors(self, i: int, t: int = 0) -> np.ndarray:
        dst, src = self.edges(t)
        return _read_only(np.sort(src[dst == check_int(i, "i", minimum=0)]))

    def spectral_gap(self, t: int = 0) -> float:
        """1 - sigma_2(W_t) (as :meth:`Topology.spectral_gap`); dense, O(n^3)."""
        if self.n == 1:
            return 1.0
        w = self.matrix(t)
        if _is_symmetric(w):
            eig = np.linalg.eigvalsh(w.toarray())
            second = max(abs(eig[-2]), abs(eig[0]))
        else:
            eig = np.linalg.eigvalsh((w.T @ w).toarray())
            second = math.sqrt(max(eig[-2], 0.0))
        return float(min(1.0, max(0.0, 1.0 - second)))


def edges_of(topology: Any, t: int) -> tuple[np.ndarray, np.ndarray]:
    """(dst, src) of the messages of round t (off-diagonal nonzeros of W_t) for either kind of
    topology."""
    if isinstance(topology, RoundTopology):
        return topology.edges(t)
    w = round_matrix(topology, t)
    rows = np.repeat(np.arange(topology.n), np.diff(w.indptr))
    off = w.indices != rows
    return rows[off].astype(np.int64), w.indices[off].astype(np.int64)


def check_mixing(topology: Any, accepted: tuple[str, ...], name: str, *,
                 hints: Mapping[str, str] | None = None) -> None:
    """Raises ValueError when ``topology``'s matrices are not of a kind in ``accepted`` (e.g. an
    algorithm's ``mixing`` attribute). ``name`` says who needs them in the message ("algorithm
    'choco'"); ``hints`` maps a kind to what to use instead, appended as "; use ..."."""
    kind = stochastic_kind(topology)
    if kind in accepted:
        return
    hint = (hints or {}).get(kind, "")
    raise ValueError(f"topology {topology.name!r} mixes with {kind}-stochastic weights, which "
                     f"{name} does not handle (it needs {' or '.join(accepted)}-stochastic W)"
                     + (f"; use {hint}" if hint else ""))
