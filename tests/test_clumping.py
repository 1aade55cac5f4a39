"""Peer clumping: neighbourhoods of the clumped layout are locally heterogeneous (checked with a
dense neighbourhood-mix reference), the homogeneous baseline is not, both have the same degree,
and a network partition (links cut) is refused by the topology while each component's label skew
stays small for the clumped order."""

from __future__ import annotations

import numpy as np
import pytest

from decentlearn import topology as T
from decentlearn.topology import clumping, dcliques


def one_class(n: int, seed: int = 0) -> np.ndarray:
    h = np.zeros((n, 10), dtype=np.int64)
    h[np.arange(n), np.random.default_rng(seed).permutation(np.arange(n) % 10)] = 30
    return h


def dense_local_skew(w: np.ndarray, dist: np.ndarray) -> float:
    n = w.shape[0]
    glob = dist.mean(axis=0)
    out = []
    for i in range(n):
        nb = [j for j in range(n) if j == i or w[i, j] > 0]
        out.append(np.abs(dist[nb].mean(axis=0) - glob).sum())
    return float(np.mean(out))


@pytest.mark.parametrize("k", [2, 4, 8])
def test_clumped_neighbourhoods_are_heterogeneous(k: int) -> None:
    n = 100
    h = one_class(n)
    dist = dcliques.label_distributions(h, n)
    het = T.make(f"clumped:{k}", n, labels=h)
    hom = T.make(f"clumped:{k}:homogeneous", n, labels=h)
    assert np.all(het.degree() == k) and np.all(hom.degree() == k)
    for top in (het, hom):
        assert top.info["local_skew"] == pytest.approx(
            dense_local_skew(top.mixing_matrix(), dist), abs=1e-12)
    # k + 1 consecutive peers of the dealt sequence hold k + 1 different classes: the best a
    # neighbourhood of that size can do, versus one class in the homogeneous layout.
    best = (k + 1) * (1 / (k + 1) - 0.1) + (10 - k - 1) * 0.1
    assert het.info["local_skew"] == pytest.approx(best, abs=1e-9)
    assert hom.info["local_skew"] > 1.5


def test_network_partition_is_refused_and_components_stay_heterogeneous() -> None:
    n = 100
    h = one_class(n, seed=1)
    dist = dcliques.label_distributions(h, n)
    het = clumping.clump_order(dist, seed=0)
    hom = clumping.clump_order(dist, seed=0, order="homogeneous")
    for seq, bound in ((het, 0.25), (hom, 1.0)):
        edges = clumping.circulant_edges(seq, 2)
        # Cut the ring in two places: two arcs of 50 peers each.
        keep = ~(np.isin(edges, seq[[49, 99]]).any(axis=1) & np.isin(edges, seq[[50, 0]]).any(axis=1))
        cut = edges[keep]
        skews = clumping.component_skews(cut, n, dist)
        assert skews.size == 2
        if bound < 1.0:
            assert skews.max() <= bound  # each half trains on nearly the global label mix
        else:
            assert skews.max() >= bound  # the homogeneous halves hold 5 classes each
        with pytest.raises(ValueError, match=r"not connected \(2 components\)"):
            T.from_edges(cut, n)


@pytest.mark.parametrize(("spec", "labels", "needle"), [
    ("clumped:3", one_class(20), "K must be even"),
    ("clumped:4:random", one_class(20), "ORDER must be one of"),
    ("clumped:4", None, "labels is None"),
])
def test_bad_input(spec, labels, needle) -> None:
    with pytest.raises(ValueError, match=needle):
        T.make(spec, 20, labels=labels)
