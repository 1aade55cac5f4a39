"""The fixed graphs: ring, torus, exponential, one-peer exponential (time-varying, directed),
complete, star, hypercube, random regular, small world (Watts-Strogatz) and an edge list read
from a file.

Each builder takes the number of peers and the spec's own parameters as strings
(``make("torus:4:8", 32)`` calls ``_torus(32, "4", "8")``) and returns a
:class:`~decentlearn.topology.Graph`; the weight rule chosen in
:func:`~decentlearn.topology.make` turns it into the mixing matrices. Random graphs take ``seed``
and are redrawn in a fixed seed order until connected.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np

from decentlearn.topology.base import Graph, edge_array, parse_int, parse_probability, register

__all__: list[str] = []

#: How many seeds random builders try, in a fixed order, before giving up on a connected graph.
MAX_TRIES = 100


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
        rows = parse_int(r, "R", minimum=1)
        if c is None:
            if n % rows:
                raise ValueError(f"R={rows} must divide n={n}")
            cols = n // rows
        else:
            cols = parse_int(c, "C", minimum=1)
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
    degree = parse_int(d, "D", minimum=0)
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
    neighbours = parse_int(k, "K", minimum=2)
    if neighbours % 2 or neighbours >= n:
        raise ValueError(f"K must be even and < n={n}, got K={neighbours}")
    rewire = parse_probability(p, "P")
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
    return Graph(n, (edge_array(pairs, n, f"edges in {str(filename)!r}"),))

