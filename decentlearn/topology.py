"""Communication graphs and the mixing matrices that drive gossip, X_{t+1} = W_t X_t.

A :class:`Topology` holds the mixing matrix W_t of every round of a (possibly time-varying) graph,
where W_t[i, j] is the weight peer i gives to the vector it receives from peer j. Graphs come from a
registry of builders by spec string (``make("small-world:4:0.1", 64)``, see :func:`available`), from
an undirected edge list (:func:`from_edges`) or as a given matrix (:func:`from_matrix`); builders
return a :class:`Graph` (who talks to whom in each round) and a weight rule (``metropolis``,
``max-degree`` or ``uniform``) turns it into W_t. Every W_t is checked once at construction
(nonnegative, rows and columns summing to 1 within 1e-12, symmetric for undirected graphs, and the
union over one period connected) and stored as a float64 sparse matrix; the dense matrix, the CSR
triple the C gossip kernel consumes, neighbour lists, degrees and the spectral gap are computed
lazily, cached per round ``t % period`` and returned read-only.
"""

from __future__ import annotations

import inspect
import math
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from scipy.sparse.csgraph import connected_components

from decentlearn import clumping, dcliques, moshpit
from decentlearn.dcliques import clique_weights
from decentlearn.registry import Registry

__all__ = [
    "Graph",
    "Topology",
    "available",
    "from_edges",
    "from_matrix",
    "make",
    "register",
]

#: Tolerance on row and column sums of every W_t (float64).
TOLERANCE = 1e-12

#: How many seeds random builders try, in a fixed order, before giving up on a connected graph.
MAX_TRIES = 100

#: Largest n for which repr() computes the spectral gap (beyond it, only a cached gap is shown).
REPR_GAP_MAX_N = 1024

GraphBuilder = Callable[..., "Graph"]
WeightRule = Callable[[sp.csr_array, str], sp.csr_array]

_BUILDERS: Registry[GraphBuilder] = Registry("topology")
_WEIGHT_RULES: dict[str, WeightRule] = {}


# --------------------------------------------------------------------------------------------------
# Argument checking


def _check_int(value: Any, name: str, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _parse_int(text: str, name: str, *, minimum: int | None = None) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {text!r}") from None
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _parse_probability(text: str, name: str) -> float:
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
        raise ValueError(f"weights must be one of {sorted(_WEIGHT_RULES)}, got {weights!r}")
    return weights


def _edge_array(edges: Any, n: int, name: str) -> np.ndarray:
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
        n = _check_int(self.n, "n", minimum=1)
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
        rounds = tuple(_edge_array(e, n, f"rounds[{k}]") for k, e in enumerate(self.rounds))
        object.__setattr__(self, "n", n)
        object.__setattr__(self, "rounds", rounds)

    def adjacency(self, k: int = 0) -> sp.csr_array:
        """The 0/1 float64 adjacency of round ``k``, self loops dropped: A[i, j] = 1 if i receives
        from j."""
        edges = self.rounds[_check_int(k, "k", minimum=0) % len(self.rounds)]
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
    """Registers a graph builder under ``name`` for :func:`make`.

    The builder is called as ``builder(n, *params, seed=seed)`` with the spec's colon-separated
    parameters as strings (``make("small-world:4:0.1", n)`` passes ``"4", "0.1"``); ``seed`` is
    passed only when the builder has such a parameter. It returns a :class:`Graph` with ``n`` peers
    and raises ValueError, naming the parameter, for values it cannot use.
    """
    add = _BUILDERS.register(name)

    def decorator(builder: GraphBuilder) -> GraphBuilder:
        if not callable(builder):
            raise TypeError(f"builder for {name!r} must be callable, got {type(builder).__name__}")
        return add(builder)

    return decorator


def available() -> list[str]:
    """Names of the registered graph builders, sorted."""
    return _BUILDERS.available()


def _usage(name: str, builder: GraphBuilder) -> str:
    """The spec form of a builder, e.g. ``small-world[:K][:P]``, from its signature."""
    parts = [name]
    for p in list(inspect.signature(builder).parameters.values())[1:]:
        if p.kind is p.VAR_POSITIONAL:
            parts.append(f":{p.name.upper()}")
        elif p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            parts.append(f":{p.name.upper()}" if p.default is p.empty else f"[:{p.name.upper()}]")
    return "".join(parts)


@register("ring")
def _ring(n: int) -> Graph:
    """Cycle 0-1-...-(n-1)-0; a single edge for n = 2, no edge for n = 1. Degree 2."""
    i = np.arange(n)
    return Graph(n, (np.column_stack((i, (i + 1) % n)),))


@register("torus")
def _torus(n: int, r: str | None = None, c: str | None = None) -> Graph:
    """2-D torus, R x C = n; R is the largest divisor of n not above sqrt(n) unless given."""
    if r is None:
        rows = max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)
        cols = n // rows
    else:
        rows = _parse_int(r, "R", minimum=1)
        if c is None:
            if n % rows:
                raise ValueError(f"R={rows} must divide n={n}")
            cols = n // rows
        else:
            cols = _parse_int(c, "C", minimum=1)
            if rows * cols != n:
                raise ValueError(
                    f"R*C must equal n={n}, got R={rows}, C={cols} ({rows * cols} peers)"
                )
    grid = np.arange(n).reshape(rows, cols)
    right = np.roll(grid, -1, axis=1)
    down = np.roll(grid, -1, axis=0)
    edges = np.concatenate(
        (
            np.column_stack((grid.ravel(), right.ravel())),
            np.column_stack((grid.ravel(), down.ravel())),
        )
    )
    return Graph(n, (edges,))


@register("exponential")
def _exponential(n: int) -> Graph:
    """Static exponential graph: i -- i + 2^k mod n for k = 0..floor(log2(n - 1)), undirected."""
    if n == 1:
        return Graph(n, (np.zeros((0, 2), dtype=np.int64),))
    offsets = 1 << np.arange((n - 1).bit_length())  # 2^0 .. 2^floor(log2(n - 1))
    i = np.arange(n)
    edges = np.column_stack((np.repeat(i, offsets.size), ((i[:, None] + offsets) % n).ravel()))
    return Graph(n, (edges,))


@register("one-peer-exponential")
def _one_peer_exponential(n: int) -> Graph:
    """Ying et al. (2021): in round k = t mod ceil(log2 n), peer i receives from i - 2^k mod n."""
    period = max(1, (n - 1).bit_length())  # ceil(log2 n), at least one round
    i = np.arange(n)
    rounds = tuple(np.column_stack((i, (i - (1 << k)) % n)) for k in range(period))
    return Graph(n, rounds, directed=True)


@register("complete")
def _complete(n: int) -> Graph:
    """Every pair of peers is connected. Degree n - 1."""
    i, j = np.triu_indices(n, k=1)
    return Graph(n, (np.column_stack((i, j)),))


@register("star")
def _star(n: int) -> Graph:
    """Peer 0 is connected to every other peer, and they only to it."""
    leaves = np.arange(1, n)
    return Graph(n, (np.column_stack((np.zeros_like(leaves), leaves)),))


@register("hypercube")
def _hypercube(n: int) -> Graph:
    """Peers are the bit strings of length log2 n, connected when they differ in one bit."""
    if n & (n - 1):
        raise ValueError(f"n must be a power of two for a hypercube, got n={n}")
    bits = 1 << np.arange(n.bit_length() - 1)
    i = np.arange(n)
    edges = np.column_stack((np.repeat(i, bits.size), (i[:, None] ^ bits).ravel()))
    return Graph(n, (edges,))


@register("random-regular")
def _random_regular(n: int, d: str = "4", *, seed: int) -> Graph:
    """Uniform random D-regular graph (networkx), redrawn in a fixed seed order until connected."""
    degree = _parse_int(d, "D", minimum=0)
    if degree >= n:
        raise ValueError(f"D must be < n={n}, got D={degree}")
    if (n * degree) % 2:
        raise ValueError(f"n*D must be even, got n={n}, D={degree}")
    if n > 1 and degree == 0:
        raise ValueError(f"D=0 leaves the {n} peers isolated; use D >= 2")
    if n > 2 and degree == 1:
        raise ValueError(
            f"a 1-regular graph on n={n} peers is a matching, never connected; use D >= 2"
        )
    import networkx as nx  # only these two builders need it; keeps `import decentlearn` light

    rng = random.Random(seed)  # one stream: every retry draws a new, reproducible graph
    for _ in range(MAX_TRIES):
        g = nx.random_regular_graph(degree, n, seed=rng)
        if nx.is_connected(g):
            return Graph(n, (np.array(g.edges(), dtype=np.int64).reshape(-1, 2),))
    raise ValueError(
        f"no connected {degree}-regular graph on n={n} peers in {MAX_TRIES} tries; use a larger D"
    )


@register("small-world")
def _small_world(n: int, k: str = "4", p: str = "0.1", *, seed: int) -> Graph:
    """Connected Watts-Strogatz graph (networkx): K-neighbour ring lattice, rewired with prob. P."""
    neighbours = _parse_int(k, "K", minimum=2)
    if neighbours % 2 or neighbours >= n:
        raise ValueError(f"K must be even and < n={n}, got K={neighbours}")
    rewire = _parse_probability(p, "P")
    import networkx as nx

    try:
        g = nx.connected_watts_strogatz_graph(n, neighbours, rewire, tries=MAX_TRIES, seed=seed)
    except nx.NetworkXException as exc:
        raise ValueError(f"no connected small-world graph in {MAX_TRIES} tries: {exc}") from exc
    return Graph(n, (np.array(g.edges(), dtype=np.int64).reshape(-1, 2),))


@register("edges")
def _edges_file(n: int, *path: str) -> Graph:
    """Undirected edges read from a text file: one "i j" pair per line, '#' starts a comment."""
    if not path or not ":".join(path):
        raise ValueError("PATH is missing: write the spec as 'edges:PATH'")
    filename = Path(":".join(path))
    try:
        text = filename.read_text()
    except OSError as exc:
        raise ValueError(f"cannot read edge file {str(filename)!r}: {exc.strerror}") from exc
    pairs: list[tuple[int, int]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        try:
            i, j = (int(f) for f in fields)
        except ValueError:
            got = line.strip()
            raise ValueError(
                f"{str(filename)!r} line {lineno}: expected two integers 'i j', got {got!r}"
            ) from None
        pairs.append((i, j))
    return Graph(n, (_edge_array(pairs, n, f"edges in {str(filename)!r}"),))


@register("d-cliques")
def _d_cliques(n: int, size: str = "10", inter: str = "ring", *, seed: int, labels: Any) -> Graph:
    """D-Cliques (Bellet et al. 2022): Greedy Swap cliques of SIZE peers whose label mix
    approaches the global one, linked by INTER (ring, fractal, small-world, fully-connected)."""
    clique_size = _parse_int(size, "SIZE", minimum=1)
    dcliques.check_size(clique_size, n)
    if inter not in dcliques.INTER:
        raise ValueError(f"INTER must be one of {', '.join(dcliques.INTER)}, got {inter!r}")
    dist = dcliques.label_distributions(labels, n)
    cliques = dcliques.greedy_swap(dist, clique_size, seed=seed)
    edges = np.concatenate(
        (dcliques.intra_clique_edges(cliques), dcliques.inter_clique_edges(cliques, inter))
    )
    groups = np.empty(n, dtype=np.int64)
    groups[cliques] = np.arange(cliques.shape[0])[:, None]
    info = dcliques.summary(dist, cliques, len(edges), inter)
    return Graph(n, (edges,), groups=groups, info=info)


@register("clumped")
def _clumped(n: int, k: str = "4", order: str = "heterogeneous", *, seed: int,
             labels: Any) -> Graph:
    """Peer clumping (proxy-based locally heterogeneous topology): peers clustered by label proxy,
    dealt round-robin from the clumps, laid on a circulant graph of even degree K. ORDER:
    heterogeneous (the method) or homogeneous (same graph on clumps in sequence, baseline)."""
    degree = _parse_int(k, "K", minimum=2)
    if degree % 2 or degree >= n:
        raise ValueError(f"K must be even and < n={n}, got K={degree}")
    dist = dcliques.label_distributions(labels, n)
    seq = clumping.clump_order(dist, seed=seed, order=order)
    edges = clumping.circulant_edges(seq, degree)
    graph = Graph(n, (edges,))
    skew = clumping.local_skew(graph.adjacency(), dist)
    return Graph(n, (edges,), info={"order": order, "degree": degree, "local_skew": skew})


@register("moshpit")
def _moshpit(n: int, grid: str, placement: str = "full", *, seed: int) -> Graph:
    """Moshpit averaging (Ryabinin et al. 2021): peers on a virtual GRID (4x4x4, or a number of
    axes D of equal side); round t averages within the groups along axis t mod d. PLACEMENT: full
    (n equals the cells) or sparse (n <= cells, peers on a seeded random subset of cells)."""
    if placement not in ("full", "sparse"):
        raise ValueError(f"PLACEMENT must be 'full' or 'sparse', got {placement!r}")
    shape = moshpit.parse_grid(grid, n)
    return Graph(n, moshpit.grid_rounds(shape, n, sparse=placement == "sparse", seed=seed))


# --------------------------------------------------------------------------------------------------
# Weight rules


def _weight_rule(name: str) -> Callable[[WeightRule], WeightRule]:
    def decorator(rule: WeightRule) -> WeightRule:
        _WEIGHT_RULES[name] = rule
        return rule

    return decorator


def _assemble(adj: sp.csr_array, off: np.ndarray, diag: np.ndarray | None = None) -> sp.csr_array:
    """W with off-diagonal values ``off`` on the (canonical) pattern of ``adj`` and diagonal
    ``diag`` (1 - row sum of ``off`` when not given), in canonical CSR form."""
    n = adj.shape[0]
    rows = np.repeat(np.arange(n), np.diff(adj.indptr))
    if diag is None:
        diag = 1.0 - np.bincount(rows, weights=off, minlength=n)
    # Insert each row's diagonal entry in place, keeping columns sorted, without a COO round trip.
    after = adj.indices > rows
    indptr = adj.indptr.astype(np.int64) + np.arange(n + 1)
    slot = indptr[:-1] + np.bincount(rows[~after], minlength=n)
    data = np.empty(adj.nnz + n)
    indices = np.empty(adj.nnz + n, dtype=np.int64)
    moved = np.arange(adj.nnz) + rows + after
    data[moved], indices[moved] = off, adj.indices
    data[slot], indices[slot] = diag, np.arange(n)
    w = sp.csr_array((data, indices, indptr), shape=(n, n))
    w.has_canonical_format = True
    return w


@_weight_rule("metropolis")
def _metropolis(adj: sp.csr_array, label: str) -> sp.csr_array:
    degree = np.diff(adj.indptr)
    rows = np.repeat(np.arange(adj.shape[0]), degree)
    return _assemble(adj, 1.0 / (1.0 + np.maximum(degree[rows], degree[adj.indices])))


@_weight_rule("max-degree")
def _max_degree(adj: sp.csr_array, label: str) -> sp.csr_array:
    degree = np.diff(adj.indptr)
    return _assemble(adj, np.full(adj.nnz, 1.0 / (1.0 + degree.max())))


@_weight_rule("uniform")
def _uniform(adj: sp.csr_array, label: str) -> sp.csr_array:
    degree = np.diff(adj.indptr)
    if degree.min() != degree.max():
        raise ValueError(
            f"weights='uniform' on {label} gives a mixing matrix that is not doubly stochastic: "
            f"peer degrees differ (from {degree.min()} to {degree.max()}) and w_ij = 1/(d_i + 1) "
            "is doubly stochastic only on regular graphs; use weights='metropolis' or 'max-degree'"
        )
    rows = np.repeat(np.arange(adj.shape[0]), degree)
    return _assemble(adj, 1.0 / (1.0 + degree[rows]), 1.0 / (1.0 + degree))


@_weight_rule("clique")
def _clique(adj: sp.csr_array, label: str) -> sp.csr_array:
    # Reached only for graphs without groups: _from_graph handles graphs made of cliques.
    raise ValueError(f"weights='clique' needs a topology made of cliques (d-cliques), got {label}")


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
        return _check_int(t, "t", minimum=0) % self.period

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
        i = _check_int(i, "i", minimum=0)
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
            "gap", r, lambda: 1.0 - _second_singular_value((w,), self.n, _is_symmetric(w))
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
            "period-gap", 0, lambda: 1.0 - _second_singular_value(self.rounds, self.n, False)
        )


#: Up to this many peers the spectral gap comes from a dense eigendecomposition (exact, fast);
#: above it from ARPACK on a sparse operator.
DENSE_GAP_MAX_N = 64


def _second_singular_value(mats: Sequence[sp.csr_array], n: int, symmetric: bool) -> float:
    """sigma_2 of M = mats[-1] @ ... @ mats[0], all doubly stochastic: ||M - J/n||_2 in [0, 1]."""
    if n == 1:
        return 0.0
    if n <= DENSE_GAP_MAX_N:
        m = np.eye(n)
        for w in mats:
            m = w @ m
        if symmetric:
            eig = np.linalg.eigvalsh(m)  # ascending; eig[-1] == 1
            second = max(abs(eig[-2]), abs(eig[0]))
        else:
            second = np.linalg.svd(m, compute_uv=False)[1]
        return float(min(1.0, max(0.0, second)))
    transposed = [w.T.tocsr() for w in reversed(mats)]

    def forward(x: np.ndarray) -> np.ndarray:  # (M - J/n) x = M (x - mean(x))
        y = x.reshape(n) - x.mean()
        for w in mats:
            y = w @ y
        return y

    def backward(x: np.ndarray) -> np.ndarray:  # (M - J/n)^T x = M^T x - mean(M^T x)
        y = x.reshape(n)
        for w in transposed:
            y = w @ y
        return y - y.mean()

    # A fixed start vector makes the result independent of global random state.
    v0 = np.random.default_rng(0).standard_normal(n)
    ncv = min(n, 40)
    if symmetric and len(mats) == 1:
        second = _second_symmetric(mats[0], n, forward, v0, ncv)
    elif symmetric:
        op = spla.LinearOperator((n, n), matvec=forward, dtype=np.float64)
        second = abs(_largest(op, v0, ncv))
    else:
        gram = spla.LinearOperator((n, n), matvec=lambda x: backward(forward(x)),
                                   dtype=np.float64)
        second = math.sqrt(max(_largest(gram, v0, ncv), 0.0))
    return float(min(1.0, max(0.0, second)))


def _largest(op: spla.LinearOperator, v0: np.ndarray, ncv: int,
             maxiter: int | None = None) -> float:
    """The eigenvalue of largest magnitude of a symmetric operator (ARPACK, machine tolerance).
    With ``maxiter``, ARPACK's ArpackNoConvergence propagates (the caller has a fallback)."""
    # An operator that maps a random vector to (numerically) zero is zero: ARPACK would stop on a
    # zero Krylov vector (a period that averages exactly, such as Moshpit on a full grid).
    if np.linalg.norm(op.matvec(v0)) <= 1e-13 * np.linalg.norm(v0):
        return 0.0
    try:
        return float(spla.eigsh(op, k=1, which="LM", v0=v0, ncv=ncv,
                                maxiter=maxiter or 100 * op.shape[0],
                                return_eigenvectors=False)[0])
    except spla.ArpackNoConvergence as exc:
        if maxiter is not None:
            raise
        raise ValueError(  # pragma: no cover - ARPACK rarely gives up
            f"the spectral gap did not converge in ARPACK: {exc}") from exc


#: Restarts of plain ARPACK on a static symmetric W before the shift-invert solver takes over.
_PLAIN_ARPACK_RESTARTS = 40


def _second_symmetric(w: sp.csr_array, n: int, forward, v0: np.ndarray, ncv: int) -> float:
    """max(|lambda_2|, |lambda_n|) of a symmetric doubly stochastic W.

    Plain ARPACK on the deflated operator converges in a few hundred products when the
    eigenvalues are spread (expanders, exponential graphs). On rings and tori of 10^4 peers they
    cluster within ~1e-7 of 1 and ARPACK would need a minute, so after a few restarts:

    * lambda_2 = 1 - mu_2, mu_2 the smallest nonzero eigenvalue of A = I - W, from shift-invert
      (a sparse LU of A + delta I, the constant null vector projected out of every solve): exact;
    * lambda_n from a loose Lanczos estimate theta >= lambda_n (relative tolerance 1e-4). When
      |theta| is clearly below lambda_2 (a ring: -1/3 against 1 - 1e-7) lambda_2 is the answer;
      otherwise lambda_n comes from shift-invert at -1 (it is then close to -1).
    """
    op = spla.LinearOperator((n, n), matvec=forward, dtype=np.float64)
    try:
        return abs(_largest(op, v0, ncv, maxiter=_PLAIN_ARPACK_RESTARTS))
    except spla.ArpackNoConvergence:
        pass
    eye = sp.identity(n, format="csc")
    a = (eye - w.tocsc()).tocsc()
    delta = 1e-10
    lu = spla.splu((a + delta * eye).tocsc())

    def solve_deflated(b: np.ndarray) -> np.ndarray:
        b = b.reshape(n) - b.mean()
        x = lu.solve(b)
        return x - x.mean()

    inv = spla.LinearOperator((n, n), matvec=solve_deflated, dtype=np.float64)
    nu = spla.eigsh(inv, k=1, which="LA", v0=v0 - v0.mean(), ncv=ncv,
                    return_eigenvectors=False)[0]
    lam2 = 1.0 - (1.0 / nu - delta)
    tol = 1e-4
    try:
        theta = float(spla.eigsh(w, k=1, which="SA", v0=v0, ncv=ncv, tol=tol, maxiter=300,
                                 return_eigenvectors=False)[0])
        if abs(theta) * (1 + 10 * tol) + 10 * tol < abs(lam2):
            return abs(lam2)
    except spla.ArpackNoConvergence:
        pass
    lam_n = spla.eigsh(w.tocsc(), k=1, sigma=-1.0 - 1e-9, which="LM", v0=v0, ncv=ncv,
                       return_eigenvectors=False)[0]
    return max(abs(lam2), abs(float(lam_n)))


def _from_graph(name: str, graph: Graph, weights: str) -> Topology:
    label = f"{name!r} with n={graph.n}"
    period = len(graph.rounds)
    patterns = [graph.adjacency(k) for k in range(period)]
    _check_connected(patterns, graph.n, label, period)
    if weights == "clique":
        if graph.groups is None:
            raise ValueError(
                f"weights='clique' (equal-clique weighting) needs a topology made of cliques "
                f"(d-cliques), got {label}; use weights='metropolis'"
            )
        mats = tuple(clique_weights(adj, graph.groups) for adj in patterns)
    else:
        rule = _WEIGHT_RULES[weights]
        mats = tuple(rule(adj, label) for adj in patterns)
    topology = Topology(name, weights, mats, groups=graph.groups, info=graph.info)
    if topology.directed and not graph.directed:
        raise ValueError(f"weights={weights!r} on undirected {label} gives a non-symmetric matrix")
    return topology


def make(
    spec: str, n: int, *, seed: int = 0, weights: str = "metropolis", labels: Any = None
) -> Topology:
    """Builds the topology named by ``spec`` ("ring", "torus:4:8", "small-world:4:0.1", ...; see
    :func:`available`) on ``n`` peers, with mixing weights from the rule ``weights``
    ("metropolis", "max-degree", "uniform", or "clique" for d-cliques). ``seed`` fixes random
    graphs. ``labels``, per-peer label histograms (n, n_classes), reaches only the builders that
    declare a keyword-only ``labels`` parameter (data-aware ones such as d-cliques), which raise
    ValueError when it is None; the others ignore it."""
    if not isinstance(spec, str):
        raise TypeError(f"spec must be a str, got {type(spec).__name__}")
    n = _check_int(n, "n", minimum=1)
    seed = _check_int(seed, "seed", minimum=0)
    weights = _check_weights(weights)
    spec = spec.strip()
    key, *params = spec.split(":")
    builder = _BUILDERS.get(key, spec)
    signature = inspect.signature(builder)
    kwargs: dict[str, Any] = {"seed": seed} if "seed" in signature.parameters else {}
    if "labels" in signature.parameters:
        kwargs["labels"] = labels
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
    if not isinstance(graph, Graph):
        raise TypeError(f"builder for {key!r} must return a Graph, got {type(graph).__name__}")
    if graph.n != n:
        raise ValueError(f"builder for {key!r} returned a graph on {graph.n} peers, expected n={n}")
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
    n = _check_int(n, "n", minimum=1)
    weights = _check_weights(weights)
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str, got {name!r}")
    return _from_graph(name, Graph(n, (_edge_array(edges, n, "edges"),)), weights)


def from_matrix(W: npt.ArrayLike | sp.sparray | sp.spmatrix, *, name: str = "matrix") -> Topology:
    """Wraps a given (n, n) mixing matrix (dense or scipy.sparse), checked nonnegative, doubly
    stochastic within 1e-12 and connected; ``weights`` is "given" and ``directed`` is True unless
    W equals its transpose exactly."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str, got {name!r}")
    return Topology(name, "given", (_canonical(W, "W"),))


# --------------------------------------------------------------------------------------------------
# Per-round topologies (decentlearn.network): W_t produced on demand, possibly only column- or
# row-stochastic. Additive to the Topology class above; the C gossip kernel reads either through
# ``csr(t)``.

#: What a mixing matrix preserves: "doubly" (rows and columns sum to 1: the mean), "column"
#: (columns sum to 1: the sum, as push-sum needs), "row" (rows sum to 1: a weighted average).
STOCHASTIC_KINDS = ("doubly", "column", "row")

#: How many rounds a RoundTopology keeps cached (an algorithm reads W_t a few times per round).
ROUND_CACHE = 4


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


def column_weights(adj: sp.csr_array) -> sp.csr_array:
    """Push-sum weights on a directed pattern (A[i, j] = 1: i receives from j): every sender j
    splits its value equally among itself and its out-neighbours, W[i, j] = 1 / (1 + outdeg j).
    Column-stochastic."""
    n = adj.shape[0]
    out_degree = np.bincount(adj.indices, minlength=n)
    share = 1.0 / (1.0 + out_degree)
    return _assemble(adj, share[adj.indices], share)


def row_weights(adj: sp.csr_array) -> sp.csr_array:
    """Averaging of what arrives (Epidemic Learning): W[i, j] = 1 / (1 + indeg i) for every
    in-neighbour j and for i itself. Row-stochastic."""
    degree = np.diff(adj.indptr)
    rows = np.repeat(np.arange(adj.shape[0]), degree)
    share = 1.0 / (1.0 + degree)
    return _assemble(adj, share[rows], share)


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
            period = _check_int(period, "period", minimum=1)
        self.name, self.n, self.weights = name, _check_int(n, "n", minimum=1), weights
        self.stochastic, self.period, self.directed = stochastic, period, bool(directed)
        self._matrix_of = matrix_of
        self._cache: dict[int, dict[str, Any]] = {}

    def __repr__(self) -> str:
        period = "aperiodic" if self.period is None else f"period={self.period}"
        return (f"RoundTopology({self.name!r}, n={self.n}, weights={self.weights!r}, "
                f"stochastic={self.stochastic!r}, {period})")

    def _entry(self, t: int) -> dict[str, Any]:
        t = _check_int(t, "t", minimum=0)
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
        return _read_only(np.sort(src[dst == _check_int(i, "i", minimum=0)]))

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
