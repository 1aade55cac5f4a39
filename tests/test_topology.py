"""Tests for decentlearn.topology: every graph and weight rule yields a valid mixing matrix whose
CSR form, neighbour lists, degrees and spectral gap agree with the dense matrix."""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from decentlearn import topology as T
from decentlearn.topology import base, static

SIZES = (1, 2, 3, 7, 16, 33, 64)
RULES = ("metropolis", "max-degree", "uniform")
NAMES = (
    "ring",
    "torus",
    "exponential",
    "one-peer-exponential",
    "complete",
    "star",
    "hypercube",
    "random-regular",
    "small-world",
)


def spec_for(name: str, n: int) -> str | None:
    """A valid spec of topology ``name`` on n peers, or None when the family has none."""
    if name == "hypercube":
        return name if n & (n - 1) == 0 else None
    if name == "random-regular":
        degree = {1: 0, 2: 1, 3: 2}.get(n, 3 if n % 2 == 0 else 4)
        return f"random-regular:{degree}"
    if name == "small-world":
        return None if n < 3 else f"small-world:{2 if n < 5 else 4}:0.3"
    return name


CASES = [(spec, n) for name in NAMES for n in SIZES if (spec := spec_for(name, n)) is not None]


@functools.cache
def build(spec: str, n: int, weights: str = "metropolis", seed: int = 0) -> T.Topology:
    return T.make(spec, n, weights=weights, seed=seed)


def independent_gap(w: np.ndarray) -> float:
    if w.shape[0] == 1:
        return 1.0
    if np.array_equal(w, w.T):
        magnitudes = np.sort(np.abs(np.linalg.eigvalsh(w)))[::-1]
        return 1.0 - magnitudes[1]
    return 1.0 - np.linalg.svd(w, compute_uv=False)[1]


def check_topology(top: T.Topology) -> None:
    n = top.n
    assert top.period >= 1
    asymmetric = []
    for t in range(top.period + 1):
        w = top.mixing_matrix(t)
        assert w.shape == (n, n) and w.dtype == np.float64 and not w.flags.writeable
        assert w is top.mixing_matrix(t + top.period)
        assert np.all(w >= 0)
        np.testing.assert_allclose(w.sum(axis=1), 1.0, rtol=0, atol=1e-12)
        np.testing.assert_allclose(w.sum(axis=0), 1.0, rtol=0, atol=1e-12)
        asymmetric.append(not np.array_equal(w, w.T))
        nonzero = w != 0
        assert np.all(np.diag(nonzero)), "every rule keeps a positive self weight"

        indptr, indices, data = top.csr(t)
        assert top.csr(t) is top.csr(t + top.period)
        assert (indptr.dtype, indices.dtype, data.dtype) == (np.int64, np.int32, np.float32)
        for a in (indptr, indices, data):
            assert a.flags.c_contiguous and not a.flags.writeable
        assert indptr.shape == (n + 1,) and indptr[0] == 0 and indptr[-1] == indices.size == data.size
        assert np.all(np.diff(indptr) >= 0)
        rows = np.repeat(np.arange(n), np.diff(indptr))
        assert np.all((np.diff(indices) > 0) | (np.diff(rows) > 0)), "columns ascending per row"
        dense = np.zeros((n, n), dtype=np.float32)
        dense[rows, indices] = data
        np.testing.assert_array_equal(dense, w.astype(np.float32))
        np.testing.assert_array_equal(dense != 0, nonzero)

        off = nonzero & ~np.eye(n, dtype=bool)
        for i in range(n):
            got = top.neighbors(i, t)
            assert got.dtype == np.int64
            np.testing.assert_array_equal(got, np.flatnonzero(off[i]))
        degree, sends = top.degree(t), top.send_counts(t)
        assert degree.dtype == sends.dtype == np.int64
        np.testing.assert_array_equal(degree, off.sum(axis=1))
        np.testing.assert_array_equal(sends, off.sum(axis=0))
    assert top.directed == any(asymmetric)


@pytest.mark.parametrize("weights", RULES)
@pytest.mark.parametrize(("spec", "n"), CASES, ids=[f"{s}-{n}" for s, n in CASES])
def test_every_spec_and_rule_gives_a_valid_mixing_matrix(spec: str, n: int, weights: str) -> None:
    base = build(spec, n)
    regular = all(np.ptp(base.degree(t)) == 0 for t in range(base.period))
    if weights == "uniform" and not regular:
        with pytest.raises(ValueError, match="degrees differ"):
            build(spec, n, weights)
        return
    top = build(spec, n, weights)
    assert (top.name, top.n, top.weights) == (spec, n, weights)
    assert top.period == (max(1, math.ceil(math.log2(n))) if spec == "one-peer-exponential" else 1)
    check_topology(top)
    assert top.directed == (spec == "one-peer-exponential" and n > 2)
    for t in range(top.period):
        w = top.mixing_matrix(t)
        assert top.spectral_gap(t) == pytest.approx(independent_gap(w), abs=1e-10)
        assert 0.0 <= top.spectral_gap(t) <= 1.0


@pytest.mark.parametrize("n", SIZES)
def test_static_graphs_have_their_textbook_neighbours(n: int) -> None:
    i = n // 2
    expected = {
        "ring": {(i + 1) % n, (i - 1) % n},
        "complete": set(range(n)),
        "star": set(range(1, n)) if i == 0 else {0},
        "exponential": {(i + s * (1 << k)) % n for k in range(max(0, n - 1).bit_length()) for s in (1, -1)},
    }
    for spec, peers in expected.items():
        assert set(build(spec, n).neighbors(i).tolist()) == peers - {i}, spec
    if n & (n - 1) == 0:
        bits = {i ^ (1 << b) for b in range(n.bit_length() - 1)}
        assert set(build("hypercube", n).neighbors(i).tolist()) == bits


def test_torus_shapes() -> None:
    # 16 = 4 x 4 and 33 = 3 x 11: every peer has 4 distinct neighbours; 2 x 8 has 3 (up == down).
    assert build("torus", 16).degree().tolist() == [4] * 16
    assert build("torus", 33).degree().tolist() == [4] * 33
    assert T.make("torus:2:8", 16).degree().tolist() == [3] * 16
    assert T.make("torus:1:16", 16).degree().tolist() == [2] * 16
    assert T.make("torus:4", 16).spectral_gap() == pytest.approx(build("torus", 16).spectral_gap())
    grid = np.arange(12).reshape(3, 4)
    got = set(T.make("torus:3:4", 12).neighbors(5).tolist())  # row 1, column 1
    assert got == {grid[0, 1], grid[2, 1], grid[1, 0], grid[1, 2]}


@pytest.mark.parametrize("n", (1, 2, 3, 7, 16, 33, 64))
def test_metropolis_and_max_degree_formulas(n: int) -> None:
    for spec in ("star", "small-world:2:0.5" if n >= 3 else "ring"):
        a = build(spec, n).mixing_matrix() != 0
        np.fill_diagonal(a, False)
        d = a.sum(axis=1)
        metropolis = np.where(a, 1.0 / (1.0 + np.maximum(d[:, None], d[None, :])), 0.0)
        np.fill_diagonal(metropolis, 1.0 - metropolis.sum(axis=1))
        np.testing.assert_allclose(build(spec, n).mixing_matrix(), metropolis, rtol=0, atol=1e-15)
        max_degree = np.where(a, 1.0 / (1.0 + d.max()), 0.0)
        np.fill_diagonal(max_degree, 1.0 - d / (1.0 + d.max()))
        np.testing.assert_allclose(build(spec, n, "max-degree").mixing_matrix(), max_degree, rtol=0, atol=1e-15)


@pytest.mark.parametrize("n", (3, 7, 16, 33, 64))
def test_ring_uniform_eigenvalues_closed_form(n: int) -> None:
    top = build("ring", n, "uniform")
    np.testing.assert_allclose(np.diag(top.mixing_matrix()), 1 / 3)
    closed = 1 / 3 + 2 / 3 * np.cos(2 * np.pi * np.arange(n) / n)
    np.testing.assert_allclose(np.linalg.eigvalsh(top.mixing_matrix()), np.sort(closed), atol=1e-12)
    assert top.spectral_gap() == pytest.approx(1.0 - np.sort(np.abs(closed))[-2], abs=1e-12)


@pytest.mark.parametrize("n", (1, 2, 3, 16, 64))
def test_complete_metropolis_has_gap_one(n: int) -> None:
    top = build("complete", n)
    np.testing.assert_allclose(top.mixing_matrix(), np.full((n, n), 1.0 / n), atol=1e-15)
    assert top.spectral_gap() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("n", (1, 2, 4, 16, 64))
def test_hypercube_uniform_eigenvalues_closed_form(n: int) -> None:
    d = n.bit_length() - 1
    top = build("hypercube", n, "uniform")
    closed = np.repeat([1 - 2 * m / (d + 1) for m in range(d + 1)], [math.comb(d, m) for m in range(d + 1)])
    np.testing.assert_allclose(np.linalg.eigvalsh(top.mixing_matrix()), np.sort(closed), atol=1e-12)
    assert top.spectral_gap() == pytest.approx(2 / (d + 1) if d else 1.0, abs=1e-12)


@pytest.mark.parametrize("n", (8, 16, 64))
def test_one_peer_exponential_period_product_is_exact_average(n: int) -> None:
    top = build("one-peer-exponential", n)
    assert top.period == n.bit_length() - 1 and top.directed
    product = np.eye(n)
    for t in range(top.period):
        shift = np.roll(np.eye(n), 1 << t, axis=1)  # row i has its 1 at column i + 2^t ...
        np.testing.assert_array_equal(top.mixing_matrix(t), (np.eye(n) + shift.T) / 2)  # ... receive from i - 2^t
        np.testing.assert_array_equal(top.neighbors(0, t), [(-(1 << t)) % n])
        np.testing.assert_array_equal(top.send_counts(t), np.ones(n))
        product = top.mixing_matrix(t) @ product
    np.testing.assert_allclose(product, np.full((n, n), 1.0 / n), rtol=0, atol=1e-15)


def test_one_peer_exponential_same_for_every_rule() -> None:
    # Every in- and out-degree is 1, so the three rules all give W_t = (I + P_k) / 2.
    for t in range(4):
        w = build("one-peer-exponential", 16).mixing_matrix(t)
        for weights in RULES[1:]:
            np.testing.assert_array_equal(build("one-peer-exponential", 16, weights).mixing_matrix(t), w)


MIX = [(s, n) for s, n in CASES if n >= 2] + [("hypercube", 64)]


@settings(max_examples=60, deadline=None)
@given(
    case=st.sampled_from(MIX),
    t=st.integers(0, 20),
    dim=st.integers(1, 5),
    data=st.data(),
)
def test_doubly_stochastic_w_preserves_the_mean(case: tuple[str, int], t: int, dim: int, data: st.DataObject) -> None:
    top = build(*case)
    x = data.draw(
        hnp.arrays(np.float64, (top.n, dim), elements=st.floats(-1e3, 1e3, allow_nan=False, allow_subnormal=False))
    )
    before = x.copy()
    y = top.mixing_matrix(t) @ x
    np.testing.assert_array_equal(x, before)
    np.testing.assert_allclose(y.mean(axis=0), x.mean(axis=0), rtol=0, atol=1e-9)
    indptr, indices, values = top.csr(t)
    y32 = sp.csr_array((values, indices, indptr), shape=(top.n, top.n)) @ x.astype(np.float32)
    np.testing.assert_allclose(y32.mean(axis=0), x.mean(axis=0), rtol=0, atol=1e-2)


@pytest.mark.parametrize("spec", ("random-regular:4", "small-world:4:0.3"))
def test_random_graphs_are_determined_by_seed(spec: str) -> None:
    a, b, c = (T.make(spec, 64, seed=s) for s in (7, 7, 8))
    for x, y in zip(a.csr(), b.csr(), strict=True):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a.mixing_matrix(), c.mixing_matrix())


def test_random_regular_retries_until_connected(monkeypatch: pytest.MonkeyPatch) -> None:
    # A random 2-regular graph is a union of cycles; on 32 peers it is usually disconnected.
    for seed in range(20):
        assert T.make("random-regular:2", 32, seed=seed).degree().tolist() == [2] * 32
    monkeypatch.setattr(static, "MAX_TRIES", 1)
    failures = 0
    for seed in range(20):
        try:
            T.make("random-regular:2", 32, seed=seed)
        except ValueError as exc:
            assert "no connected 2-regular graph on n=32 peers in 1 tries" in str(exc)
            failures += 1
    assert failures > 0


def test_large_graphs_build_without_dense_matrices() -> None:
    for spec in ("ring", "torus", "exponential", "one-peer-exponential", "star", "hypercube", "random-regular:4", "small-world:4:0.1"):
        top = T.make(spec, 4096)
        for t in range(top.period):
            indptr, indices, data = top.csr(t)
            w = sp.csr_array((data.astype(np.float64), indices, indptr), shape=(4096, 4096))
            np.testing.assert_allclose(w.sum(axis=0), 1.0, atol=1e-6)
            np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-6)
        assert not top._cache.get(("dense", 0)), spec
    assert repr(top) == "Topology('small-world:4:0.1', n=4096, weights='metropolis')"


def test_repr() -> None:
    assert re.fullmatch(r"Topology\('ring', n=16, weights='metropolis', gap=0\.0\d+\)", repr(build("ring", 16)))
    assert repr(build("one-peer-exponential", 16)).startswith(
        "Topology('one-peer-exponential', n=16, weights='metropolis', period=4, gap="
    )
    assert repr(T.from_matrix(np.eye(1))) == "Topology('matrix', n=1, weights='given', gap=1)"


# ------------------------------------------------------------------------------------------------
# Edge lists, given matrices and registration


def test_from_edges_deduplicates_and_ignores_self_loops() -> None:
    messy = T.from_edges([(0, 1), (1, 0), (0, 1), (2, 2), (1, 2), (2, 3)], 4)
    clean = T.from_edges(np.array([[0, 1], [1, 2], [2, 3]]), 4, name="path")
    np.testing.assert_array_equal(messy.mixing_matrix(), clean.mixing_matrix())
    assert (messy.name, clean.name) == ("edges", "path")
    check_topology(messy)
    assert T.from_edges(iter([(0, 1)]), 2, weights="uniform").mixing_matrix().tolist() == [[0.5, 0.5], [0.5, 0.5]]
    assert T.from_edges([], 1).mixing_matrix().tolist() == [[1.0]]


def test_edges_file(tmp_path: Path) -> None:
    path = tmp_path / "graph.txt"
    path.write_text("# a path with a chord\n0 1\n\n1 2  # middle\n2 3\n3 1\n1 1\n")
    top = T.make(f"edges:{path}", 4)
    expected = T.from_edges([(0, 1), (1, 2), (2, 3), (3, 1)], 4)
    np.testing.assert_array_equal(top.mixing_matrix(), expected.mixing_matrix())
    assert top.name == f"edges:{path}"
    path.write_text("0 1\n1 two\n")
    with pytest.raises(ValueError, match="line 2: expected two integers"):
        T.make(f"edges:{path}", 4)
    path.write_text("0 1\n1 4\n")
    with pytest.raises(ValueError, match="peer index 4, out of range for n=4"):
        T.make(f"edges:{path}", 4)
    with pytest.raises(ValueError, match="cannot read edge file"):
        T.make(f"edges:{tmp_path / 'missing.txt'}", 4)
    with pytest.raises(ValueError, match="PATH is missing"):
        T.make("edges", 4)


def test_from_matrix() -> None:
    ring = build("ring", 7).mixing_matrix()
    top = T.from_matrix(ring)
    assert (top.name, top.weights, top.directed, top.period) == ("matrix", "given", False, 1)
    np.testing.assert_array_equal(top.mixing_matrix(), ring)
    shift = (np.eye(5) + np.roll(np.eye(5), 1, axis=1)) / 2
    directed = T.from_matrix(sp.csr_array(shift), name="shift")
    assert directed.directed and directed.name == "shift"
    check_topology(directed)
    assert directed.spectral_gap() == pytest.approx(independent_gap(shift), abs=1e-12)
    assert T.from_matrix([[0.5, 0.5], [0.5, 0.5]]).spectral_gap() == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("matrix", "error", "message"),
    [
        ([[1.5, -0.5], [-0.5, 1.5]], ValueError, "nonnegative, got an entry -0.5$"),
        ([[0.5, 0.5], [0.25, 0.75]], ValueError, "column 0 sums to 0.75"),
        ([[0.5, 0.4], [0.5, 0.7]], ValueError, "row 1 sums to 1.2"),
        (np.eye(2), ValueError, "not connected"),
        (np.ones((2, 3)) / 3, ValueError, r"square \(n, n\) matrix"),
        (np.zeros((0, 0)), ValueError, "n >= 1"),
        (np.eye(2, dtype=complex), TypeError, "real numbers"),
        ([[np.nan, 1.0], [1.0, 0.0]], ValueError, "finite"),
    ],
)
def test_from_matrix_rejects(matrix: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        T.from_matrix(matrix)


def test_register_custom_time_varying_builder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "_BUILDERS", base._BUILDERS.copy())

    @T.register("matchings")
    def matchings(n: int, rounds: str = "2") -> T.Graph:
        pairs = [np.array([[0, 1], [2, 3]]), np.array([[1, 2], [3, 0]])]
        return T.Graph(n, tuple(pairs[: int(rounds)]))

    assert "matchings" in T.available()
    top = T.make("matchings", 4, weights="uniform")
    assert (top.period, top.directed) == (2, False)
    check_topology(top)
    assert top.spectral_gap(0) == pytest.approx(0.0, abs=1e-12)  # each round alone is disconnected
    with pytest.raises(ValueError, match="union of the 1 rounds|is not connected"):
        T.make("matchings:1", 4)
    with pytest.raises(ValueError, match=r"expected matchings\[:ROUNDS\]"):
        T.make("matchings:1:2", 4)
    with pytest.raises(ValueError, match="already registered"):
        T.register("ring")
    with pytest.raises(ValueError, match="without ':'"):
        T.register("a:b")

    @T.register("broken")
    def broken(n: int) -> object:
        return np.zeros((0, 2))

    with pytest.raises(TypeError, match="must return a Graph"):
        T.make("broken", 4)


def test_time_varying_union_must_be_connected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "_BUILDERS", base._BUILDERS.copy())
    T.register("halves")(lambda n: T.Graph(n, (np.array([[0, 1]]), np.array([[1, 0]])), directed=True))
    with pytest.raises(ValueError, match="union of the 2 rounds of 'halves' with n=3 is not connected"):
        T.make("halves", 3)


# ------------------------------------------------------------------------------------------------
# Error messages


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: T.make("grid", 16), ValueError, r"unknown topology 'grid'.*expected one of .*complete, .*edges, .*ring"),
        (lambda: T.make("random-regular:3", 7), ValueError, r"'random-regular:3' with n=7: n\*D must be even"),
        (lambda: T.make("torus:3:5", 16), ValueError, r"R\*C must equal n=16, got R=3, C=5"),
        (lambda: T.make("torus:3", 16), ValueError, "R=3 must divide n=16"),
        (lambda: T.make("torus:0:4", 16), ValueError, "R must be >= 1"),
        (lambda: T.make("star", 7, weights="uniform"), ValueError,
         r"weights='uniform' on 'star' with n=7 .*not doubly stochastic.*degrees differ.*'metropolis' or 'max-degree'"),
        (lambda: T.from_edges([(0, 1), (2, 3)], 4), ValueError, r"'edges' with n=4 is not connected \(2 components\)"),
        (lambda: T.from_edges([(0, 1)], 3), ValueError, "not connected"),
        (lambda: T.make("ring", 0), ValueError, "n must be >= 1, got 0"),
        (lambda: T.from_edges([], 0), ValueError, "n must be >= 1, got 0"),
        (lambda: T.make("ring", 2.0), TypeError, "n must be an int"),
        (lambda: T.make(3, 4), TypeError, "spec must be a str"),
        (lambda: T.make("ring", 4, seed=-1), ValueError, "seed must be >= 0"),
        (lambda: T.make("ring", 4, weights="laplacian"), ValueError, r"weights must be one of \[.*'max-degree'"),
        (lambda: T.make("ring:3", 4), ValueError, "'ring:3' has 1 parameter.*expected ring$"),
        (lambda: T.make("hypercube", 12), ValueError, "power of two.*n=12"),
        (lambda: T.make("random-regular:x", 8), ValueError, "D must be an integer, got 'x'"),
        (lambda: T.make("random-regular:8", 8), ValueError, "D must be < n=8"),
        (lambda: T.make("random-regular:1", 8), ValueError, "matching, never connected"),
        (lambda: T.make("small-world:3:0.1", 16), ValueError, "K must be even and < n=16, got K=3"),
        (lambda: T.make("small-world:4:1.5", 16), ValueError, r"P must be a number in \[0, 1\]"),
        (lambda: T.make("small-world:4", 4), ValueError, "K must be even and < n=4"),
        (lambda: T.from_edges([(0, 4)], 4), ValueError, "peer index 4, out of range for n=4"),
        (lambda: T.from_edges([(0, -1)], 4), ValueError, "peer index -1"),
        (lambda: T.from_edges([(0.0, 1.0)], 2), TypeError, "integer peer indices"),
        (lambda: T.from_edges([(0, 1, 2)], 3), ValueError, r"shape \(m, 2\)"),
        (lambda: T.from_edges(5, 3), TypeError, "iterable of \\(i, j\\) pairs"),
        (lambda: build("ring", 4).mixing_matrix(-1), ValueError, "t must be >= 0"),
        (lambda: build("ring", 4).csr(1.0), TypeError, "t must be an int"),
        (lambda: build("ring", 4).neighbors(4), ValueError, "i must be < n=4"),
    ],
)
def test_errors_name_the_argument(call: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        call()  # type: ignore[operator]


def test_returned_arrays_are_read_only() -> None:
    top = build("ring", 8)
    for a in (*top.csr(), top.mixing_matrix(), top.neighbors(0), top.degree(), top.send_counts()):
        with pytest.raises(ValueError, match="read-only"):
            a[0] = 0


# ------------------------------------------------------------------------------------------------
# One registry, complete whatever the import order

#: Every topology name: static graphs, data-aware ones and the per-round (time-varying) graphs.
ALL_NAMES = sorted(NAMES + ("edges", "d-cliques", "clumped", "moshpit",
                            "random-matching", "epidemic", "directed-ring"))
PER_ROUND = ("random-matching", "epidemic:2", "directed-ring")

_FRESH = "import json, decentlearn.topology as t; print(json.dumps(t.available()))"
_EVERYTHING = """
import importlib, json, pkgutil, decentlearn
for m in pkgutil.walk_packages(decentlearn.__path__, "decentlearn.", onerror=lambda name: None):
    if m.name.endswith("__main__"):
        continue
    try:
        importlib.import_module(m.name)
    except ImportError:
        # Bridges to optional libraries (torch, mpi4py) may not import here.
        if not m.name.startswith(("decentlearn.torch", "decentlearn.mpi")):
            raise
import decentlearn.topology as t
print(json.dumps(t.available()))
"""


def _available_in_subprocess(code: str) -> list[str]:
    import json
    import subprocess
    import sys

    import tempfile
    with tempfile.TemporaryDirectory() as away:  # not the checkout: CI imports the installed package
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=300, cwd=away)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_registry_is_complete_whatever_the_import_order() -> None:
    """A fresh interpreter importing only decentlearn.topology lists every topology, per-round
    graphs included, and importing every other module of the package adds none."""
    fresh = _available_in_subprocess(_FRESH)
    assert fresh == ALL_NAMES
    assert _available_in_subprocess(_EVERYTHING) == fresh
    assert T.available() == fresh


@pytest.mark.parametrize("spec", PER_ROUND)
def test_make_builds_the_per_round_graphs(spec: str) -> None:
    top = T.make(spec, 8, seed=3)
    assert isinstance(top, T.RoundTopology) and top.n == 8
    for t in range(3):
        w = top.mixing_matrix(t)
        assert w.shape == (8, 8) and np.all(w >= 0)
        np.testing.assert_allclose(w.sum(axis=1 if top.stochastic == "row" else 0), 1.0,
                                   rtol=0, atol=1e-12)
    assert T.make(spec, 8, seed=3).mixing_matrix(1).tobytes() == top.mixing_matrix(1).tobytes()


#: A spec on 16 peers for the registered names that need parameters.
EXAMPLES = {"edges": "edges:{path}", "moshpit": "moshpit:4x4", "d-cliques": "d-cliques:4",
            "clumped": "clumped:4", "epidemic": "epidemic:3", "random-regular": "random-regular:3"}


@pytest.mark.parametrize("name", T.available())
def test_every_registered_topology_builds_a_valid_mixing_matrix(name: str, tmp_path: Path) -> None:
    """The common check over everything the registry lists: a name added without an example here
    is still built (with no parameters) and checked."""
    n = 16
    path = tmp_path / "ring.txt"
    path.write_text("".join(f"{i} {(i + 1) % n}\n" for i in range(n)))
    labels = np.zeros((n, 4), dtype=np.int64)
    labels[np.arange(n), np.arange(n) % 4] = 10
    spec = EXAMPLES.get(name, name).format(path=path)
    top = T.make(spec, n, seed=1, labels=labels, mixing=("column", "doubly"))
    assert top.n == n
    kind = T.stochastic_kind(top)
    for t in range(3):
        w = top.mixing_matrix(t)
        assert w.shape == (n, n) and np.all(w >= 0) and np.all(np.diag(w) > 0)
        if kind in ("doubly", "row"):
            np.testing.assert_allclose(w.sum(axis=1), 1.0, rtol=0, atol=1e-12)
        if kind in ("doubly", "column"):
            np.testing.assert_allclose(w.sum(axis=0), 1.0, rtol=0, atol=1e-12)
        indptr, indices, data = top.csr(t)
        dense = np.zeros((n, n), dtype=np.float32)
        dense[np.repeat(np.arange(n), np.diff(indptr)), indices] = data
        np.testing.assert_array_equal(dense, w.astype(np.float32))


@pytest.mark.parametrize("n,s,seed", [(7, 2, 0), (64, 3, 5), (300, 8, 123)])
@pytest.mark.parametrize("kind", ["row", "column"])
def test_epidemic_rounds_are_the_hashed_argpartition_graph(n, s, seed, kind):
    """Epidemic Learning's graph of round t: sender j sends to the S receivers k != j of the
    smallest hash_uniform(seed, STREAM_MATCH, t, j, k), the pick of the dense key matrix the
    topology drew from before ops.hash_smallest (written here as it was); weights row- or
    column-stochastic."""
    from decentlearn.seeds import STREAM_MATCH, hash_uniform
    from decentlearn.topology.dynamic import epidemic
    topo = epidemic(n, s, seed=seed, kind=kind)
    peers = np.arange(n)
    for t in (0, 1, 17):
        keys = hash_uniform(seed, STREAM_MATCH, t, peers[:, None], peers[None, :]).reshape(n, n)
        keys[peers, peers] = 2.0
        targets = np.argpartition(keys, s - 1, axis=1)[:, :s]
        want = np.zeros((n, n), bool)
        want[targets.ravel(), np.repeat(peers, s)] = True  # receiver row, sender column
        W = sp.csr_array(topo.mixing_matrix(t)).toarray()
        np.testing.assert_array_equal((W != 0) & ~np.eye(n, dtype=bool), want)
        sums = W.sum(axis=1) if kind == "row" else W.sum(axis=0)
        np.testing.assert_allclose(sums, 1.0, rtol=1e-6)
