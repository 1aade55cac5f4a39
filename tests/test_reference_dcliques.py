"""D-Cliques as its authors build it: decentlearn's construction against dense ports, written here,
of the authors' simulator (``elavoie/non-iid-topology-simulator``, ``tools/setup/topology/``):
the pooled skew metric (``d_cliques/metrics.py``), Greedy Swap and its last-clique rule
(``d_cliques/greedy_swap.py``), the inter-clique links (``d_cliques/interclique.py``) and the
Metropolis-Hastings weights (``weights.py``); and Moshpit's groups against the paper's grid rule."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest

from decentlearn import topology as T
from decentlearn.sim import RunConfig, Simulator
from decentlearn.topology import dcliques


def one_class_uneven(n: int, seed: int = 0) -> np.ndarray:
    """One class per peer (peer i holds class i mod 10), 20 to 199 samples per peer."""
    h = np.zeros((n, 10), dtype=np.int64)
    h[np.arange(n), np.arange(n) % 10] = np.random.default_rng(seed).integers(20, 200, n)
    return h


def dirichlet_uneven(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(10, 0.5), size=n)
    return np.stack([rng.multinomial(k, q) for k, q in zip(rng.integers(20, 200, n), p)])


# --- ports of the reference -------------------------------------------------------------------

def ref_dist(h: np.ndarray, ranks) -> list[float]:
    """metrics.dist: the label counts of the peers summed, divided by their total."""
    nbs = [0] * h.shape[1]
    for r in ranks:
        for label in range(h.shape[1]):
            nbs[label] += int(h[r, label])
    total = sum(nbs)
    return [x / total for x in nbs]


def ref_skew(d1: list[float], d2: list[float]) -> float:
    """metrics.skew: sum of |d1 - d2| (the 'total_variation_distance' metric)."""
    return sum(abs(x - y) for x, y in zip(d1, d2))


def ref_greedy_swap(h: np.ndarray, size: int, seed: int, steps: int = 1000) -> list[list[int]]:
    """greedy_swap.cliques: random cliques of max-clique-size peers while more are left, the rest
    in the last one; then max-steps times: two distinct cliques, every member swap that lowers
    their summed skew, one drawn at random (densely: every swap of the pair at once)."""
    rand = random.Random(seed)
    ranks = set(range(h.shape[0]))
    cliques = []
    while len(ranks) > size:
        c = rand.sample(sorted(ranks), size)
        ranks.difference_update(c)
        cliques.append(list(c))
    cliques.append(sorted(ranks))
    if len(cliques) < 2:  # the reference stops here with an error; one clique is all there is
        return cliques
    glob = h.sum(axis=0) / h.sum()

    def skews(pooled: np.ndarray) -> np.ndarray:
        return np.abs(pooled / pooled.sum(axis=-1, keepdims=True) - glob).sum(axis=-1)

    for _ in range(steps):
        c1, c2 = rand.sample(cliques, 2)
        h1, h2 = h[c1], h[c2]
        base = skews(h1.sum(axis=0)) + skews(h2.sum(axis=0))
        # Every swap (a, b) at once: the pooled counts of c1 - a + b and of c2 - b + a.
        s1 = h1.sum(axis=0) - h1[:, None, :] + h2[None, :, :]
        s2 = h2.sum(axis=0) - h2[None, :, :] + h1[:, None, :]
        change = skews(s1) + skews(s2) - base
        improving = [tuple(ab) for ab in np.argwhere(change < -1e-12).tolist()]
        if improving:
            a, b = rand.choice(improving)
            c1[a], c2[b] = c2[b], c1[a]
    return cliques


class RefLinks:
    """interclique.py's bookkeeping: per clique a dict member -> inter-clique links so far (in
    member order), edges as a dict of sets."""

    def __init__(self, cliques, seed: int) -> None:
        self.cliques = [{int(m): 0 for m in c} for c in cliques]
        self.edges = {int(m): set() for c in cliques for m in c}
        self.rand = random.Random(seed)

    def least_connected_rand(self, clique: dict) -> list[int]:
        low = min(clique.values())
        lc = [m for m in clique if clique[m] <= low]
        self.rand.shuffle(lc)
        return lc

    def connect(self, x: int, y: int) -> None:
        self.edges[x].add(y)
        self.edges[y].add(x)


def ref_smallworld(cliques, seed: int) -> dict:
    """interclique.smallworld: for every clique, every offset 2^s (s < ceil(log2 m)) and k in
    {0, 1}, one link towards start - offset - k and one towards start + offset + k."""
    ref = RefLinks(cliques, seed)
    cl = ref.cliques
    offsets = [2 ** s for s in range(0, math.ceil(math.log(len(cl)) / math.log(2)))]
    for start in range(len(cl)):
        for offset in offsets:
            for k in range(2):
                for c in ((start - offset - k) % len(cl), (start + offset + k) % len(cl)):
                    x = ref.least_connected_rand(cl[start]).pop()
                    cl[start][x] += 1
                    y = ref.least_connected_rand(cl[c]).pop()
                    cl[c][y] += 1
                    ref.connect(x, y)
    return ref.edges


def ref_fractal(cliques, n_classes: int, seed: int) -> dict:
    """interclique.fractal: groups of nb-classes units fully linked, merged, recursively."""
    ref = RefLinks(cliques, seed)

    def connect(units):
        for i in range(len(units) - 1):
            for j in range(i + 1, len(units)):
                x = ref.least_connected_rand(units[i]).pop()
                units[i][x] += 1
                y = ref.least_connected_rand(units[j]).pop()
                units[j][y] += 1
                ref.connect(x, y)
        merged = {}
        for u in units:
            merged.update(u)
        return merged

    units = ref.cliques
    while len(units) > 1:
        units = [connect(units[i:i + n_classes]) for i in range(0, len(units), n_classes)]
    return ref.edges


def ref_fully_connected(cliques) -> dict:
    """interclique.fully_connected: every pair, the last least-connected member of each."""
    ref = RefLinks(cliques, 0)
    cl = ref.cliques
    for i in range(len(cl) - 1):
        for j in range(i + 1, len(cl)):
            x = [m for m in cl[i] if cl[i][m] <= min(cl[i].values())].pop()
            cl[i][x] += 1
            y = [m for m in cl[j] if cl[j][m] <= min(cl[j].values())].pop()
            cl[j][y] += 1
            ref.connect(x, y)
    return ref.edges


def inter_pairs(edges: dict, cliques) -> set[tuple[int, int]]:
    """The reference's edge sets, as the set of links between two different cliques."""
    clique_of = {int(m): c for c, members in enumerate(cliques) for m in members}
    return {(min(x, y), max(x, y)) for x, ys in edges.items() for y in ys
            if clique_of[x] != clique_of[y]}


def ref_metropolis(edges: dict, n: int) -> np.ndarray:
    """weights.compute_weights('metropolis-hasting'): w_ij = 1 / (max(|E_i|, |E_j|) + 1) on
    every edge, the diagonal what is left of the row."""
    w = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            if i != j and j in edges[i]:
                w[i, j] = 1.0 / (max(len(edges[i]), len(edges[j])) + 1)
    for i in range(n):
        w[i, i] = 1.0 - w[i].sum()
    return w


# --- the tests --------------------------------------------------------------------------------

@pytest.mark.parametrize("labels", [one_class_uneven(100), dirichlet_uneven(120)])
def test_clique_skew_is_the_pooled_metric(labels) -> None:
    """metrics.py: dist pools the members' label counts; skew is the L1 distance to the pooled
    global distribution. The skew decentlearn reports is that number, clique by clique."""
    n = labels.shape[0]
    top = T.make("d-cliques:10:fully-connected", n, labels=labels, seed=4)
    cliques = [np.flatnonzero(top.groups == g) for g in range(top.info["cliques"])]
    glob = ref_dist(labels, range(n))
    expected = [ref_skew(ref_dist(labels, c), glob) for c in cliques]
    np.testing.assert_allclose(dcliques.clique_skews(labels, cliques), expected, atol=1e-12)
    np.testing.assert_allclose(top.info["clique_skew"], expected, atol=1e-6)
    assert top.info["clique_skew_max"] == pytest.approx(max(expected), abs=1e-12)
    # Weighing peers equally (the old metric) is a different number when sizes differ.
    p = labels / labels.sum(axis=1, keepdims=True)
    equal = [np.abs(p[c].mean(axis=0) - p.mean(axis=0)).sum() for c in cliques]
    assert np.abs(np.array(equal) - expected).max() > 1e-3


@pytest.mark.parametrize(("n", "size"), [(16, 10), (100, 10), (95, 10), (11, 10), (7, 10),
                                         (30, 7), (12, 4)])
def test_clique_sizes_follow_the_last_clique_rule(n: int, size: int) -> None:
    """greedy_swap.py: cliques of max-clique-size peers while more than that are left, the rest
    in the last clique; swaps keep the sizes."""
    labels = one_class_uneven(n)
    ref = ref_greedy_swap(labels, size, seed=1, steps=50)
    mine = dcliques.greedy_swap(labels, size, seed=1, steps=50)
    assert [len(c) for c in mine] == [len(c) for c in ref]
    assert sorted(np.concatenate(mine).tolist()) == list(range(n))
    top = T.make(f"d-cliques:{size}", n, labels=labels, seed=1)
    assert np.bincount(top.groups).tolist() == [len(c) for c in ref]
    assert top.info["last_clique_size"] == len(ref[-1])


@pytest.mark.parametrize("make_labels", [one_class_uneven, dirichlet_uneven])
def test_greedy_swap_reaches_the_reference_skew(make_labels) -> None:
    """greedy_swap.py with its defaults (1000 steps, total variation on pooled counts), 8 seeds
    each on the same 100 peers: decentlearn's final clique skews are the reference's in
    distribution. Across seeds the mean skew varies by sd <= 0.007 and the max by sd <= 0.04, so
    the averages over 8 seeds differ by sd <= 0.0035 and <= 0.02: bounds 0.02 and 0.1 are ~5 sd
    (the old equal-weight construction's mean, 0.35 under one-class skew, is far outside)."""
    labels = make_labels(100)
    glob = labels.sum(axis=0) / labels.sum()

    def stats(cliques):
        s = [np.abs(labels[c].sum(axis=0) / labels[c].sum() - glob).sum() for c in cliques]
        return np.mean(s), np.max(s)

    ref = np.array([stats(ref_greedy_swap(labels, 10, seed)) for seed in range(8)]).mean(axis=0)
    mine = np.array([stats(dcliques.greedy_swap(labels, 10, seed=seed))
                     for seed in range(8)]).mean(axis=0)
    assert abs(mine[0] - ref[0]) <= 0.02 and abs(mine[1] - ref[1]) <= 0.1, (mine, ref)
    random_split = stats(np.random.default_rng(0).permutation(100).reshape(10, 10))
    assert mine[0] < 0.5 * random_split[0]


@pytest.mark.parametrize(("n", "expected"), [(100, 157), (200, 396), (400, 955)])
def test_small_world_links_equal_the_reference(n: int, expected: int) -> None:
    """interclique.smallworld on the same cliques and seed: the same inter-clique edges. At most
    4 m ceil(log2 m) links (4 per clique and offset), fewer where a draw repeats an edge; with
    seed 1 the issue's counts, 157, 396 and 955 for 10, 20 and 40 cliques of 10."""
    labels = one_class_uneven(n)
    cliques = dcliques.greedy_swap(labels, 10, seed=1)
    mine = dcliques.inter_clique_edges(cliques, "small-world", n_classes=10, seed=1)
    ref = inter_pairs(ref_smallworld(cliques, seed=1), cliques)
    assert set(map(tuple, mine.tolist())) == ref
    m = n // 10
    assert len(mine) == len(ref) == expected <= 4 * m * math.ceil(math.log2(m))
    top = T.make("d-cliques:10:small-world", n, labels=labels, seed=1)
    assert top.info["edges_inter_clique"] == expected
    assert top.edge_count() == n * 9 // 2 + expected


@pytest.mark.parametrize(("n", "size"), [(33, 4), (90, 10), (16, 10), (20, 2)])
def test_small_world_links_on_awkward_clique_counts(n: int, size: int) -> None:
    """interclique.smallworld where m = 2^s + 1 (a clique's link to itself collapses) and with a
    smaller last clique: still the reference's inter-clique edges."""
    labels = dirichlet_uneven(n)
    cliques = dcliques.greedy_swap(labels, size, seed=3, steps=100)
    mine = dcliques.inter_clique_edges(cliques, "small-world", n_classes=10, seed=3)
    assert set(map(tuple, mine.tolist())) == inter_pairs(ref_smallworld(cliques, 3), cliques)


@pytest.mark.parametrize(("n", "size", "classes"), [(100, 10, 10), (1000, 10, 10),
                                                    (96, 4, 10), (150, 10, 3), (16, 10, 10),
                                                    (90, 10, 10)])
def test_fractal_links_equal_the_reference(n: int, size: int, classes: int) -> None:
    """interclique.fractal: groups of nb-classes cliques (not max-clique-size), one link per pair
    of units per level, endpoints drawn among a unit's least-connected members."""
    labels = np.random.default_rng(n).integers(1, 30, size=(n, classes))
    cliques = dcliques.greedy_swap(labels, size, seed=5, steps=20)
    mine = dcliques.inter_clique_edges(cliques, "fractal", n_classes=classes, seed=5)
    ref = inter_pairs(ref_fractal(cliques, classes, seed=5), cliques)
    assert set(map(tuple, mine.tolist())) == ref
    # The count in closed form: sum over levels of the pairs inside each group of units.
    units, count = len(cliques), 0
    while units > 1:
        full, rest = divmod(units, classes)
        count += full * classes * (classes - 1) // 2 + rest * (rest - 1) // 2
        units = full + (rest > 0)
    assert len(mine) == count


@pytest.mark.parametrize("n", [16, 100, 95])
def test_fully_connected_and_ring_links_equal_the_reference(n: int) -> None:
    """interclique.fully_connected (deterministic: the last least-connected member) gives the
    same edges; interclique.ring one link between consecutive cliques, m of them."""
    labels = one_class_uneven(n)
    cliques = dcliques.greedy_swap(labels, 10, seed=0)
    mine = dcliques.inter_clique_edges(cliques, "fully-connected", n_classes=10, seed=0)
    assert set(map(tuple, mine.tolist())) == inter_pairs(ref_fully_connected(cliques), cliques)
    ring = dcliques.inter_clique_edges(cliques, "ring", n_classes=10, seed=0)
    m = len(cliques)
    groups = dcliques.cliques_to_groups(cliques, n)
    linked = {tuple(sorted((groups[x], groups[y]))) for x, y in ring}
    assert len(ring) == m and linked == {tuple(sorted((c, (c + 1) % m))) for c in range(m)}


@pytest.mark.parametrize(("n", "inter"), [(100, "small-world"), (16, "ring"), (95, "fractal"),
                                          (33, "small-world")])
def test_metropolis_weights_equal_the_reference(n: int, inter: str) -> None:
    """weights.py ('metropolis-hasting', the reference's default) on the reference's edge sets
    of the same cliques: the mixing matrix decentlearn runs with."""
    labels = dirichlet_uneven(n)
    top = T.make(f"d-cliques:10:{inter}", n, labels=labels, seed=7)
    cliques = dcliques.greedy_swap(labels, 10, seed=7)
    edges = {m: set() for m in range(n)}
    for c in cliques:
        for x, y in itertools.permutations(c.tolist(), 2):
            edges[x].add(y)
    ports = {"small-world": lambda: ref_smallworld(cliques, 7),
             "fractal": lambda: ref_fractal(cliques, 10, 7)}
    if inter in ports:
        for x, y in inter_pairs(ports[inter](), cliques):
            edges[x].add(y)
            edges[y].add(x)
    else:  # ring: decentlearn's links, checked above
        for x, y in dcliques.inter_clique_edges(cliques, inter, n_classes=10, seed=7).tolist():
            edges[x].add(y)
            edges[y].add(x)
    np.testing.assert_allclose(top.mixing_matrix(), ref_metropolis(edges, n), atol=1e-15)


def test_thousand_peers_small_world_has_98_percent_fewer_edges_than_complete() -> None:
    """The paper's claim at 1000 peers, cliques of 10, small-world links (interclique.py): about
    98 % fewer edges than the complete graph's 499 500."""
    labels = one_class_uneven(1000)
    top = T.make("d-cliques:10:small-world", 1000, labels=labels, seed=0)
    cliques = dcliques.greedy_swap(labels, 10, seed=0)
    ref = inter_pairs(ref_smallworld(cliques, seed=0), cliques)
    assert top.info["edges"] == 1000 * 9 // 2 + len(ref)
    assert top.info["edges_complete"] == 499500
    assert 1 - top.info["edges"] / 499500 >= 0.98


def test_sixteen_peers_cliques_of_ten_run_with_clique_averaging() -> None:
    """The README's `d-cliques:10 --clique-averaging` on the default 16 peers: cliques of 10 and
    6, each member's gradient the mean of its own clique's (tools/simulate/algorithm/d_sgd.py
    averages a clique's gradients over its members, |C| of them)."""
    sim = Simulator(RunConfig(peers=16, topology="d-cliques:10", clique_averaging=True,
                              partition="classes:1", rounds=2, eval_every=2))
    groups = sim.topology.groups
    assert sorted(np.bincount(groups).tolist()) == [6, 10]
    grad = np.random.default_rng(0).standard_normal((16, 7)).astype(np.float32)
    expected = np.stack([grad[groups == groups[i]].astype(np.float64).mean(axis=0)
                         for i in range(16)])
    sim.algorithm.gradient_transform(grad)
    np.testing.assert_allclose(grad, expected, rtol=1e-6, atol=1e-6)
    res = sim.run()
    assert np.isfinite(res.params).all()
    assert res.summary["topology_info"]["last_clique_size"] == 6


def moshpit_groups_dense(shape, cells, axis) -> list[set[int]]:
    """Moshpit SGD (Ryabinin et al. 2021, Algorithm 1): peers whose grid coordinates agree
    everywhere except along the round's axis form a group; written pairwise."""
    coords = [np.unravel_index(c, shape) for c in cells]
    groups: list[set[int]] = []
    for i in range(len(cells)):
        same = {j for j in range(len(cells))
                if all(coords[i][a] == coords[j][a] for a in range(len(shape)) if a != axis)}
        if same not in groups:
            groups.append(same)
    return groups


@pytest.mark.parametrize(("spec", "n", "shape"), [("moshpit:4x4x4", 64, (4, 4, 4)),
                                                  ("moshpit:3x5", 15, (3, 5)),
                                                  ("moshpit:4x4x4:sparse", 50, (4, 4, 4))])
def test_moshpit_groups_follow_the_grid_rule(spec: str, n: int, shape) -> None:
    """Moshpit's grid rule (the paper's Algorithm 1): in round t the groups are the peers sharing
    every coordinate but axis t mod d, and W_t averages each group (w_ij = 1/|group|)."""
    top = T.make(spec, n, seed=3)
    cells = (np.sort(np.random.default_rng(3).permutation(math.prod(shape))[:n])
             if spec.endswith("sparse") else np.arange(n))
    for t in range(len(shape)):
        w = top.mixing_matrix(t)
        expected = np.zeros((n, n))
        for g in moshpit_groups_dense(shape, cells, t % len(shape)):
            idx = sorted(g)
            expected[np.ix_(idx, idx)] = 1.0 / len(idx)
        np.testing.assert_allclose(w, expected, atol=1e-15)
