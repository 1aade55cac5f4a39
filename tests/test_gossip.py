"""ops.gossip against the NumPy reference: shapes, graphs, ISA paths, threads, bad input."""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from decentlearn import _core, ops, topology
from decentlearn._reference import gossip as ref


def random_csr(n, density, seed, diag=True):
    """A random row-stochastic (n, n) CSR matrix, sorted indices, neighbours anywhere in the graph."""
    rng = np.random.default_rng(seed)
    A = sp.random(n, n, density=density, random_state=rng, format="csr", dtype=np.float64)
    if diag:
        A = A + sp.identity(n, format="csr")
    A = sp.diags(1 / np.maximum(np.asarray(A.sum(axis=1)).ravel(), 1e-300)) @ A
    A = A.astype(np.float32).tocsr()
    A.sort_indices()
    return A


def rel_err(y, y_ref):
    """Frobenius-norm relative error, the measure of the 1e-6 criterion."""
    return np.linalg.norm(y - y_ref) / max(np.linalg.norm(y_ref), 1e-30)


def ring_csr(n):
    rows = np.repeat(np.arange(n), 3)
    cols = (rows + np.tile([-1, 0, 1], n)) % n
    A = sp.csr_matrix((np.full(3 * n, 1 / 3, np.float32), (rows, cols)), shape=(n, n))
    A.sum_duplicates()
    A.sort_indices()
    return A


def rand_x(n, dim, seed=0):
    return np.random.default_rng(seed).standard_normal((n, dim), dtype=np.float32)


@pytest.fixture(params=[0, 1 << 40], ids=["streamed", "cached"])
def llc(request):
    """The last-level cache size the kernels assume: 0 (large outputs bypass the caches, as on a
    machine whose cache is unknown or small) or 1 TiB (every output stays in the caches)."""
    before = _core.set_llc_bytes(request.param)
    yield request.param
    _core.set_llc_bytes(before)


def _llc_from_sys():
    """The highest cache level's size under /sys/devices/system/cpu/cpu0/cache, 0 if none."""
    from pathlib import Path

    best_level, best = 0, 0
    for d in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level = int((d / "level").read_text())
            text = (d / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        value = int(text.rstrip("KMG"))
        if level > best_level:
            best_level, best = level, value * scale
    return best


def test_llc_bytes_is_the_last_level_cache_in_sys():
    """config()'s llc_bytes is the highest cache level's size that /sys lists (0 when none);
    set_llc_bytes overrides it, returns the value before, re-reads with -1 and refuses < -1."""
    assert _core.config()["llc_bytes"] == _llc_from_sys()
    before = _core.set_llc_bytes(12345)
    try:
        assert before == _llc_from_sys() and _core.config()["llc_bytes"] == 12345
        assert _core.set_llc_bytes(-1) == 12345 and _core.config()["llc_bytes"] == before
        with pytest.raises(ValueError, match="n must be >= 0 or -1"):
            _core.set_llc_bytes(-2)
    finally:
        _core.set_llc_bytes(-1)


@pytest.mark.parametrize("n,dim", [(1, 1), (1, 7), (2, 33), (7, 0), (7, 1), (7, 63), (33, 65),
                                   (33, 1000), (3, 100_000), (64, 5000)])
@pytest.mark.parametrize("graph", ["ring", "random"])
def test_matches_reference(isa, n, dim, graph):
    W = ring_csr(n) if graph == "ring" else random_csr(n, 0.3, seed=n + dim)
    X = rand_x(n, dim)
    X_before = X.copy()
    Y = ops.gossip(W, X)
    Y_ref = ref.gossip(W, X)
    assert rel_err(Y, Y_ref) <= 1e-6
    np.testing.assert_allclose(Y, Y_ref, rtol=1e-5, atol=2e-6)
    np.testing.assert_array_equal(X, X_before)


@pytest.mark.parametrize("n,dim", [(300, 1000), (1000, 300), (64, 100_003), (257, 4099)])
def test_thread_count_does_not_change_bits(isa, n, dim):
    """Both the whole-row and the packed-slab paths: same bits for 1, 2 and 3 threads."""
    for W in (ring_csr(n), random_csr(n, 0.05, seed=1)):
        X = rand_x(n, dim, seed=2)
        y1 = ops.gossip(W, X, n_threads=1)
        for threads in (2, 3):
            np.testing.assert_array_equal(ops.gossip(W, X, n_threads=threads), y1)
        assert rel_err(y1, ref.gossip(W, X)) <= 1e-6


@pytest.mark.parametrize("graph", ["ring", "random", "exponential"])
def test_a_column_does_not_depend_on_where_its_piece_starts(isa, graph):
    """A column of Y gets the same bits whether a vector, a peeled head or a scalar tail computes
    it: gossip over X[:, s:] equals the last columns of gossip over X for every shift s. A thread's
    range of columns may begin anywhere, so this is what keeps results independent of the thread
    count (in a GCC 13 build a row's loops did not all fuse their multiply-adds alike: 1 and 2
    threads then differed in the last bit of a few columns)."""
    n, dim = 40, 211
    W = {"ring": ring_csr(n), "random": random_csr(n, 0.3, seed=5),
         "exponential": topology.make("exponential", n)}[graph]
    X = rand_x(n, dim, seed=3)
    Y = ops.gossip(W, X, n_threads=1)
    for s in range(1, 2 * 16 + 3):
        np.testing.assert_array_equal(ops.gossip(W, np.ascontiguousarray(X[:, s:]), n_threads=1),
                                      Y[:, s:], err_msg=f"shift {s}")


@pytest.mark.parametrize("offset", [0, 1, 3])
def test_streaming_path_with_misaligned_out(isa, llc, offset):
    """A 20 MB output on a ring takes the non-temporal whole-row path where the last-level cache
    is under 80 MB (llc 0), the cached one where it is larger; an out= that starts 4 or 12 bytes
    past a vector boundary exercises the peeled head. Same bits as 1 thread, and as ref."""
    n, dim = 200, 25_600
    W, X = ring_csr(n), rand_x(n, dim, seed=offset)
    raw = np.empty(n * dim + 16, dtype=np.float32)
    out = raw[offset:offset + n * dim].reshape(n, dim)
    ops.gossip(W, X, out=out, n_threads=2)
    np.testing.assert_array_equal(out, ops.gossip(W, X, n_threads=1))
    assert rel_err(out, ref.gossip(W, X)) <= 1e-6


def _out_at(n, dim, offset):
    """An (n, dim) float32 array that starts `offset` floats past a 64-byte boundary."""
    raw = np.empty(n * dim + 32, dtype=np.float32)
    base = (-raw.ctypes.data % 64) // 4
    return raw[base + offset:base + offset + n * dim].reshape(n, dim)


@pytest.mark.parametrize("graph", ["exponential", "random"])
@pytest.mark.parametrize("dim,offset", [(16384, 0), (16384, 1), (16384, 4), (16383, 1)])
def test_packed_slabs(isa, llc, graph, dim, offset):
    """Far neighbours and a 19.7 MB output take the packed-slab path. Rows a multiple of 16 floats
    apart are streamed from slab boundaries shifted to out's cache lines (offset 0, 1 and 4 floats
    past one: no head, a 15- and a 12-column head); other widths are stored plainly. Same bits for
    1 and 2 threads, same bits as the whole-row path on the first 200 columns, and the
    reference's values."""
    n = 300
    W = topology.make(graph, n) if graph == "exponential" else random_csr(n, 0.05, seed=4)
    X = rand_x(n, dim, seed=offset)
    X_before = X.copy()
    out = _out_at(n, dim, offset)
    assert ops.gossip(W, X, out=out, n_threads=2) is out
    np.testing.assert_array_equal(out, ops.gossip(W, X, n_threads=1))
    narrow = np.ascontiguousarray(X[:, :200])  # 240 KB: the whole-row path
    np.testing.assert_array_equal(out[:, :200], ops.gossip(W, narrow, n_threads=2))
    assert rel_err(out, ref.gossip(W, X)) <= 1e-6
    np.testing.assert_array_equal(X, X_before)


def test_packed_slabs_rectangular_block():
    """A block of rows over more columns (the MPI backend's rows over its halo) on the packed path:
    equal to scipy's product, same bits for 1 and 2 threads."""
    W = random_csr(400, 0.05, seed=5)[:150]
    X = rand_x(400, 4096, seed=6)
    t = (W.indptr.astype(np.int64), W.indices.astype(np.int32), W.data.astype(np.float32))
    y1 = ops.gossip(t, X, n_threads=1, n_cols=400)
    np.testing.assert_array_equal(ops.gossip(t, X, n_threads=2, n_cols=400), y1)
    y_ref = (W.astype(np.float64) @ X.astype(np.float64)).astype(np.float32)
    assert rel_err(y1, y_ref) <= 1e-6


def test_out_is_used_and_returned():
    W, X = ring_csr(16), rand_x(16, 100)
    out = np.full((16, 100), np.nan, dtype=np.float32)
    assert ops.gossip(W, X, out=out) is out
    np.testing.assert_allclose(out, ref.gossip(W, X), rtol=1e-6, atol=1e-6)


def test_empty_rows_give_zero():
    W = sp.csr_matrix((4, 4), dtype=np.float32)
    Y = ops.gossip(W, rand_x(4, 10))
    np.testing.assert_array_equal(Y, 0)


def test_csr_tuple_and_scipy_agree():
    W = random_csr(20, 0.2, seed=3)
    X = rand_x(20, 77)
    t = (W.indptr.astype(np.int64), W.indices.astype(np.int32), W.data.astype(np.float32))
    np.testing.assert_array_equal(ops.gossip(t, X), ops.gossip(W, X))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 40), dim=st.integers(0, 300), density=st.floats(0.0, 1.0),
       seed=st.integers(0, 2**31 - 1))
def test_property_matches_reference(n, dim, density, seed):
    W = random_csr(n, density, seed)
    X = rand_x(n, dim, seed)
    Y, Y_ref = ops.gossip(W, X), ref.gossip(W, X)
    assert rel_err(Y, Y_ref) <= 1e-6
    np.testing.assert_allclose(Y, Y_ref, rtol=1e-5, atol=2e-6)


# --- bad input: a clear exception naming the argument, never a crash -------------------------

def _csr(n):
    W = ring_csr(n)
    return W.indptr.astype(np.int64), W.indices.astype(np.int32), W.data.astype(np.float32)


def test_float64_x_is_a_type_error():
    with pytest.raises(TypeError, match="X must have dtype float32, got float64"):
        ops.gossip(ring_csr(4), np.zeros((4, 3)))


def test_non_contiguous_x():
    X = rand_x(4, 10)[:, ::2]
    with pytest.raises(ValueError, match="X must be C-contiguous"):
        ops.gossip(ring_csr(4), X)


def test_wrong_number_of_rows():
    with pytest.raises(ValueError, match=r"W is 5 x 5 but X has shape \(4, 3\)"):
        ops.gossip(ring_csr(5), rand_x(4, 3))


def test_out_checks():
    W, X = ring_csr(4), rand_x(4, 3)
    with pytest.raises(ValueError, match=r"out must have shape \(4, 3\)"):
        ops.gossip(W, X, out=np.empty((4, 4), np.float32))
    with pytest.raises(TypeError, match="out must have dtype float32"):
        ops.gossip(W, X, out=np.empty((4, 3)))
    with pytest.raises(ValueError, match="out must not share memory with X"):
        ops.gossip(W, X, out=X)
    ro = np.empty((4, 3), np.float32)
    ro.setflags(write=False)
    with pytest.raises(ValueError, match="out must be writeable"):
        ops.gossip(W, X, out=ro)


def test_corrupt_csr():
    indptr, indices, data = _csr(4)
    X = rand_x(4, 3)
    bad = indices.copy()
    bad[2] = 4
    with pytest.raises(ValueError, match=r"W.indices must lie in \[0, 4\)"):
        ops.gossip((indptr, bad, data), X)
    bad = indices.copy()
    bad[0] = -1
    with pytest.raises(ValueError, match="W.indices must lie"):
        ops.gossip((indptr, bad, data), X)
    bp = indptr.copy()
    bp[1], bp[2] = bp[2], bp[1]
    with pytest.raises(ValueError, match="non-decreasing"):
        ops.gossip((bp, indices, data), X)
    with pytest.raises(ValueError, match="indptr"):
        ops.gossip((indptr, indices[:-1], data), X)
    with pytest.raises(TypeError, match="W.indices must have dtype int32"):
        ops.gossip((indptr, indices.astype(np.int64), data), X)


def test_bad_threads_and_types():
    W, X = ring_csr(4), rand_x(4, 3)
    with pytest.raises(ValueError, match="n_threads must be None, -1 or >= 1, got 0"):
        ops.gossip(W, X, n_threads=0)
    with pytest.raises(TypeError, match="n_threads must be an int"):
        ops.gossip(W, X, n_threads=1.5)
    with pytest.raises(TypeError, match="X must be a numpy.ndarray"):
        ops.gossip(W, [[1.0]])
    with pytest.raises(TypeError, match="W must be a Topology"):
        ops.gossip("ring", X)


def test_set_isa_rejects_unknown():
    with pytest.raises(ValueError, match="isa must be one of"):
        _core.set_isa("sse9")
