"""D-Cliques: Greedy Swap cliques, inter-clique layouts, the two weightings, Clique Averaging, and
the errors a user can hit. References: the skew formula and the clique average written densely."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from decentlearn import comm, topology as T
from decentlearn.topology import dcliques
from decentlearn.cli import main
from decentlearn.data import make_partition
from decentlearn.sim import RunConfig, Simulator


def one_class(n: int, classes: int = 10) -> np.ndarray:
    h = np.zeros((n, classes), dtype=np.int64)
    h[np.arange(n), np.arange(n) % classes] = 60
    return h


def dirichlet(n: int, seed: int = 0) -> np.ndarray:
    y = np.random.default_rng(seed).integers(0, 10, 50 * n)
    return make_partition("dirichlet:0.5", y, n, seed=seed).histogram(y, 10)


def dense_skews(h: np.ndarray, cliques) -> np.ndarray:
    """The paper's skew with pooled counts: sum_l |sum_C h(l) / sum_C |h| - sum h(l) / sum |h||."""
    glob = h.sum(axis=0) / h.sum()
    return np.array([sum(abs(h[c].sum(axis=0)[l] / h[c].sum() - glob[l])
                         for l in range(h.shape[1])) for c in cliques])


def test_greedy_swap_makes_balanced_cliques_under_one_class_skew() -> None:
    h = one_class(100)
    top = T.make("d-cliques:10", 100, labels=h)
    cliques = [np.flatnonzero(top.groups == g) for g in range(10)]
    assert sorted(np.concatenate(cliques).tolist()) == list(range(100))
    for c in cliques:  # every clique holds the 10 classes once
        assert sorted((np.arange(100) % 10)[c].tolist()) == list(range(10))
    assert top.info["clique_skew_max"] == pytest.approx(0.0, abs=1e-12)


def test_greedy_swap_lowers_skew_and_reports_it_exactly() -> None:
    h = dirichlet(200)
    start = dcliques.greedy_swap(h, 10, seed=3, steps=0)
    final = dcliques.greedy_swap(h, 10, seed=3)
    assert sorted(np.concatenate(final).tolist()) == list(range(200))
    np.testing.assert_allclose(dcliques.clique_skews(h, final), dense_skews(h, final),
                               atol=1e-12)
    assert dense_skews(h, final).sum() < 0.5 * dense_skews(h, start).sum()
    random_split = np.random.default_rng(0).permutation(200).reshape(20, 10)
    assert dense_skews(h, final).mean() < 0.5 * dense_skews(h, random_split).mean()


def exponential_links(m: int) -> int:
    """Pairs of cliques at ring distance 1, 2, 4, ... (mod m), counted densely."""
    dist = {min(d % m, -d % m) for d in (2 ** k for k in range(m.bit_length()))} - {0}
    return sum(m if 2 * d != m else m // 2 for d in dist)


@pytest.mark.parametrize(("inter", "links"), [("ring", lambda m: m),
                                              ("fully-connected", lambda m: m * (m - 1) // 2),
                                              ("exponential", exponential_links),
                                              ("small-world", None), ("fractal", None)])
@pytest.mark.parametrize("weights", ["metropolis", "clique"])
@pytest.mark.parametrize("n", [120, 125])
def test_layouts_and_weights_give_valid_sparse_graphs(inter, links, weights, n) -> None:
    size = 10
    top = T.make(f"d-cliques:{size}:{inter}", n, labels=dirichlet(n), weights=weights)
    w = top.mixing_matrix()
    np.testing.assert_allclose(w.sum(axis=0), 1.0, atol=1e-12)
    np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-12)
    assert w.min() >= 0 and np.array_equal(w, w.T)
    adj = (w > 0) & ~np.eye(n, dtype=bool)
    same = top.groups[:, None] == top.groups[None, :]
    assert adj[same & ~np.eye(n, dtype=bool)].all()  # every clique is complete
    inter_edges = int(np.triu(adj & ~same).sum())
    m = -(-n // size)
    if links is not None:
        assert inter_edges == links(m)
    assert connected_components(sp.csr_array(adj))[0] == 1
    sizes = np.bincount(top.groups)
    assert sizes.tolist() == [size] * (n // size) + ([n % size] if n % size else [])
    intra = int((sizes * (sizes - 1) // 2).sum())
    assert top.edge_count() == top.info["edges"] == intra + inter_edges
    assert top.info["edges_inter_clique"] == inter_edges
    if inter in ("ring", "fully-connected", "exponential"):  # the others: test_reference_dcliques
        inter_deg = (adj & ~same).sum(axis=1)
        for g in range(m):  # inter-clique edges spread over a clique's members
            members = inter_deg[top.groups == g]
            assert members.max() - members.min() <= 1


def test_clique_weights_match_their_formula() -> None:
    n, size = 40, 8
    top = T.make(f"d-cliques:{size}:ring", n, labels=one_class(n), weights="clique")
    w = top.mixing_matrix()
    same = top.groups[:, None] == top.groups[None, :]
    adj = (w > 0) & ~np.eye(n, dtype=bool)
    e = (adj & ~same).sum(axis=1)
    expected = np.where(same, 1.0 / size, 0.0)
    inter = adj & ~same
    expected[inter] = (1.0 / (size * (1 + np.maximum(e[:, None], e[None, :]))))[inter]
    np.fill_diagonal(expected, 0.0)
    np.fill_diagonal(expected, 1.0 - expected.sum(axis=1))
    np.testing.assert_allclose(w, expected, atol=1e-15)
    single = T.make("d-cliques:10", 10, labels=one_class(10), weights="clique")
    np.testing.assert_allclose(single.mixing_matrix(), np.full((10, 10), 0.1), atol=1e-15)


def test_clique_weights_with_a_smaller_last_clique() -> None:
    # 16 peers in cliques of 10 and 6: every member still gives 1/SIZE = 1/10 to each member of
    # its clique, so W stays symmetric, doubly stochastic and nonnegative.
    top = T.make("d-cliques:10:ring", 16, labels=one_class(16), weights="clique")
    w = top.mixing_matrix()
    same = top.groups[:, None] == top.groups[None, :]
    adj = (w > 0) & ~np.eye(16, dtype=bool)
    e = (adj & ~same).sum(axis=1)
    expected = np.where(same, 0.1, 0.0)
    inter = adj & ~same
    expected[inter] = (1.0 / (10 * (1 + np.maximum(e[:, None], e[None, :]))))[inter]
    np.fill_diagonal(expected, 0.0)
    np.fill_diagonal(expected, 1.0 - expected.sum(axis=1))
    np.testing.assert_allclose(w, expected, atol=1e-15)
    assert expected.min() >= 0 and sorted(np.bincount(top.groups).tolist()) == [6, 10]


def test_thousand_peers_build_and_pass_the_doubly_stochastic_check() -> None:
    top = T.make("d-cliques:10:ring", 1000, labels=one_class(1000))
    w = top.rounds[0]
    np.testing.assert_allclose(w.sum(axis=0), 1.0, atol=1e-12)
    np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-12)
    assert top.info["edges_fraction_of_complete"] < 0.01


@pytest.mark.parametrize(("spec", "labels", "weights", "needle"), [
    ("d-cliques:0", one_class(20), "metropolis", "SIZE must be >= 1, got 0"),
    ("d-cliques:10:ring:-1", one_class(20), "metropolis", "STEPS must be >= 0, got -1"),
    ("d-cliques:10:ring:many", one_class(20), "metropolis", "STEPS must be an integer"),
    ("d-cliques:10", None, "metropolis", "labels is None"),
    ("d-cliques:10", np.zeros((20, 10)), "metropolis", "labels row 0 is all zero"),
    ("d-cliques:10", one_class(19), "metropolis", r"labels must have shape \(n_peers=20"),
    ("d-cliques:10:star", one_class(20), "metropolis", "INTER must be one of"),
    ("ring", None, "clique", "weights='clique'"),
])
def test_bad_input_names_the_argument(spec, labels, weights, needle) -> None:
    with pytest.raises(ValueError, match=needle):
        T.make(spec, 20, labels=labels, weights=weights)


@pytest.mark.parametrize("sizes", [[5] * 6, [10, 6], [4, 4, 4, 1]])
def test_clique_averaging_matches_dense_reference(sizes) -> None:
    rng = np.random.default_rng(0)
    groups = rng.permutation(np.repeat(np.arange(len(sizes)), sizes))
    n = groups.size
    grad = rng.standard_normal((n, 17)).astype(np.float32)
    a = np.array([[float(groups[i] == groups[j]) / sizes[groups[i]] for j in range(n)]
                  for i in range(n)])
    expected = a @ grad.astype(np.float64)
    comm.CliqueAveraging(groups)(grad)
    np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-6)


def test_one_clique_with_clique_averaging_keeps_peers_identical() -> None:
    # One clique of every peer: the averaged gradient and momentum are the same everywhere.
    sim = Simulator(RunConfig(peers=10, topology="d-cliques:10", partition="classes:1",
                              clique_averaging=True, rounds=3, eval_every=3))
    res = sim.run()
    assert np.ptp(res.params, axis=0).max() == 0.0
    assert res.summary["topology_info"]["clique_skew"] == [0.0]
    assert res.summary["edges"] == 45 and res.summary["edges_fraction_of_complete"] == 1.0


@pytest.mark.parametrize(("args", "needle"), [
    (["--topology", "d-cliques:0"], "SIZE must be >= 1"),
    (["--topology", "d-cliques:10:star"], "INTER must be one of"),
    (["--topology", "ring", "--clique-averaging"], "clique_averaging needs"),
])
def test_cli_errors_are_one_line_exit_2(args, needle, capsys, tmp_path) -> None:
    code = main(["run", "--peers", "20", "--rounds", "1", "--quiet", *args,
                 "--out", str(tmp_path / "x")])
    _, err = capsys.readouterr()
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1
