"""Communication graphs and the mixing matrices that drive gossip, X_{t+1} = W_t X_t.

A :class:`Topology` holds the mixing matrix W_t of every round of a (possibly time-varying) graph,
where W_t[i, j] is the weight peer i gives to the vector it receives from peer j. Graphs come from
ONE registry of builders by spec string (``make("small-world:4:0.1", 64)``, see
:func:`available`), from an undirected edge list (:func:`from_edges`) or as a given matrix
(:func:`from_matrix`); builders return a :class:`Graph` (who talks to whom in each round) and a
weight rule (``metropolis``, ``max-degree``, ``uniform`` or ``clique``) turns it into W_t. Every
W_t is checked once at construction (nonnegative, rows and columns summing to 1 within 1e-12,
symmetric for undirected graphs, and the union over one period connected) and stored as a float64
sparse matrix; the dense matrix, the CSR triple the C gossip kernel consumes, neighbour lists,
degrees and the spectral gap are computed lazily, cached per round ``t % period`` and returned
read-only. Per-round graphs drawn from the seed (``random-matching``, ``epidemic:S``,
``directed-ring``) are :class:`RoundTopology` objects with the same read API, built by the same
:func:`make`.

The package, one module per family, each registering its builders when imported (below, all of
them, so the registry is complete whatever the import order):

* :mod:`~decentlearn.topology.base`: the registry, :class:`Graph`, :class:`Topology`,
  :class:`RoundTopology`, :func:`make` and the stochastic-kind checks;
* :mod:`~decentlearn.topology.static`: ring, torus, exponential, one-peer-exponential, complete,
  star, hypercube, random-regular, small-world, edges (from a file);
* :mod:`~decentlearn.topology.dynamic`: random-matching, epidemic, directed-ring (per round);
* :mod:`~decentlearn.topology.dcliques`, :mod:`~decentlearn.topology.clumping`: data-aware
  graphs built from per-peer label histograms (d-cliques, clumped);
* :mod:`~decentlearn.topology.moshpit`: Moshpit averaging on a virtual grid (time-varying);
* :mod:`~decentlearn.topology.weights`: the weight rules;
* :mod:`~decentlearn.topology.spectral`: the spectral gap solvers.
"""

# Every leaf, imported here so that each registers its builders and weight rules.
from decentlearn.topology import (  # noqa: F401
    base,
    clumping,
    dcliques,
    dynamic,
    moshpit,
    spectral,
    static,
    weights,
)
from decentlearn.topology.base import (
    REPR_GAP_MAX_N,
    ROUND_CACHE,
    STOCHASTIC_KINDS,
    TOLERANCE,
    Graph,
    RoundTopology,
    Topology,
    available,
    available_weights,
    check_mixing,
    check_stochastic,
    edges_of,
    from_edges,
    from_matrix,
    make,
    register,
    register_weights,
    round_matrix,
    stochastic_kind,
)
from decentlearn.topology.spectral import DENSE_GAP_MAX_N
from decentlearn.topology.weights import clique_weights, column_weights, row_weights

__all__ = [
    "DENSE_GAP_MAX_N",
    "REPR_GAP_MAX_N",
    "ROUND_CACHE",
    "STOCHASTIC_KINDS",
    "TOLERANCE",
    "Graph",
    "RoundTopology",
    "Topology",
    "available",
    "available_weights",
    "check_mixing",
    "check_stochastic",
    "clique_weights",
    "column_weights",
    "edges_of",
    "from_edges",
    "from_matrix",
    "make",
    "register",
    "register_weights",
    "round_matrix",
    "row_weights",
    "stochastic_kind",
]
