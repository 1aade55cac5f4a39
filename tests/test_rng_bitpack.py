"""The C counter-based generators (dl_rng_u32 and the compressors' dl_rng_fast_u32) equal their
NumPy twins bit for bit and pass the same statistical checks; bit packing round-trips."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decentlearn import ops
from decentlearn._reference import bitpack as ref_bp
from decentlearn._reference import rng as ref_rng


#: (C generator, NumPy twin, NumPy twin for one key and an index array)
GENERATORS = {"rng_u32": (ops.rng_u32, ref_rng.rng_u32, ref_rng.rng_u32_keyed),
              "rng_fast_u32": (ops.rng_fast_u32, ref_rng.rng_fast_u32,
                               ref_rng.rng_fast_u32_keyed)}
gens = pytest.mark.parametrize("gen", sorted(GENERATORS))


@gens
@pytest.mark.parametrize("seed,step,peer0,rows,dim", [
    (0, 0, 0, 1, 1), (1, 2, 3, 4, 100), (2**63 + 5, 2**40, 7, 3, 1000), (42, 7, 1000, 2, 33)])
def test_c_rng_equals_numpy_twin(gen, seed, step, peer0, rows, dim):
    c_fn, ref_fn, _ = GENERATORS[gen]
    np.testing.assert_array_equal(c_fn(seed, step, peer0, rows, dim),
                                  ref_fn(seed, step, peer0, rows, dim))


@gens
def test_rng_indices_beyond_32_bits(gen):
    key = ref_rng.rng_key(3, 1, 0)
    idx = np.array([0, 1, 2**32, 2**32 + 1, 2**40 + 7], dtype=np.uint64)
    vals = GENERATORS[gen][2](key, idx)
    assert len(set(vals.tolist())) == 5  # the high half of the index changes the value


def test_rng_fast_is_a_hashed_weyl_sequence():
    """dl_rng_fast_u32(key, j) = lowbias32(klo + j (khi | 1) + (j >> 32) 0x9e3779b9) mod 2^32,
    checked against a plain-integer evaluation of that formula."""
    key = ref_rng.rng_key(5, 6, 7)
    klo, w = key & 0xFFFFFFFF, (key >> 32) | 1

    def lowbias32(x):
        x ^= x >> 16
        x = (x * 0x21F0AAAD) & 0xFFFFFFFF
        x ^= x >> 15
        x = (x * 0x735A2D97) & 0xFFFFFFFF
        return x ^ (x >> 15)

    for j in (0, 1, 2, 31, 32, 12345, 2**32 - 1, 2**32, 2**40 + 3):
        want = lowbias32((klo + (j & 0xFFFFFFFF) * w + (j >> 32) * 0x9E3779B9) & 0xFFFFFFFF)
        got = ref_rng.rng_fast_u32_keyed(key, np.array([j], np.uint64))[0]
        assert int(got) == want, j


@gens
def test_rng_rows_are_peers_and_threads_do_not_matter(gen):
    c_fn = GENERATORS[gen][0]
    a = c_fn(9, 4, 10, 5, 3000, n_threads=1)
    b = c_fn(9, 4, 12, 3, 3000, n_threads=2)
    np.testing.assert_array_equal(a[2:], b)  # row r of a block is peer peer0 + r


@gens
def test_rng_is_uniform_enough(gen):
    c_fn = GENERATORS[gen][0]
    u = c_fn(1, 0, 0, 4, 250_000).ravel()
    # Each of the 32 bits is set with probability 1/2: 1e6 draws, 6 sigma = 0.003.
    bits = (u[:, None] >> np.arange(32, dtype=np.uint32)) & 1
    assert np.abs(bits.mean(axis=0) - 0.5).max() < 0.003
    # 16 equal bins of the top 4 bits: chi-square with 15 dof below its 99.99% point (44.3).
    counts = np.bincount(u >> 28, minlength=16)
    chi2 = ((counts - u.size / 16) ** 2 / (u.size / 16)).sum()
    assert chi2 < 44.3
    # Adjacent indices and adjacent seeds are uncorrelated.
    f = u.astype(np.float64) / 2**32 - 0.5
    assert abs(np.corrcoef(f[:-1], f[1:])[0, 1]) < 0.005
    g = c_fn(2, 0, 0, 4, 250_000).ravel().astype(np.float64) / 2**32 - 0.5
    assert abs(np.corrcoef(f, g)[0, 1]) < 0.005
    # Adjacent peers (rows) are uncorrelated too.
    rows = u.reshape(4, -1).astype(np.float64) / 2**32 - 0.5
    assert abs(np.corrcoef(rows[0], rows[1])[0, 1]) < 0.01
    # Pairs of adjacent values: 16 x 16 bins of their top 4 bits, chi-square with 255 dof below
    # its 99.99% point (341.4); the low 23 bits (natural compression's) in 64 bins (dof 63: 116.1).
    pairs = np.bincount((u[:-1:2] >> 28) * 16 + (u[1::2] >> 28), minlength=256)
    exp = (u.size // 2) / 256
    assert ((pairs - exp) ** 2 / exp).sum() < 341.4
    low = np.bincount((u & 0x7FFFFF) >> 17, minlength=64)
    assert ((low - u.size / 64) ** 2 / (u.size / 64)).sum() < 116.1


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(0, 4), dim=st.integers(0, 70), bits=st.integers(1, 8),
       seed=st.integers(0, 2**32))
def test_bitpack_round_trip_and_matches_reference(rows, dim, bits, seed):
    codes = np.random.default_rng(seed).integers(0, 2**bits, (rows, dim), dtype=np.uint8)
    packed = ops.bitpack(codes, bits)
    assert packed.shape == (rows, (dim * bits + 7) // 8)
    np.testing.assert_array_equal(packed, ref_bp.bitpack(codes, bits))
    np.testing.assert_array_equal(ops.bitunpack(packed, bits, dim), codes)
    np.testing.assert_array_equal(ref_bp.bitunpack(packed, bits, dim), codes)


def test_bitpack_errors():
    with pytest.raises(ValueError, match=r"bits must be in \[1, 8\]"):
        ops.bitpack(np.zeros((1, 4), np.uint8), 9)
    with pytest.raises(TypeError, match="codes must have dtype uint8"):
        ops.bitpack(np.zeros((1, 4), np.int32), 4)
    with pytest.raises(ValueError, match=r"packed must have shape \(1, 2\)"):
        ops.bitunpack(np.zeros((1, 3), np.uint8), 4, 4)
    with pytest.raises(ValueError, match="seed must be an integer >= 0"):
        ops.rng_u32(-1, 0, 0, 1, 1)


@pytest.mark.parametrize("n,s", [(2, 1), (3, 2), (10, 3), (257, 1), (300, 20), (64, 63)])
@pytest.mark.parametrize("seed,t", [(0, 0), (7, 123), (2**63 + 1, 2**40)])
def test_hash_smallest_is_its_twin_and_the_old_matrix_pick(n, s, seed, t):
    """Epidemic Learning's out-neighbours: the C heap over each row's keys equals the twin (a
    stable sort of the n x n key matrix, diagonal excluded) at every thread count, in increasing
    key order, and as sets the argpartition of hash_uniform's matrix the topology used before."""
    from decentlearn.seeds import STREAM_MATCH, hash_u64, hash_uniform
    base = int(hash_u64(seed, STREAM_MATCH, t)[0])
    want = ref_rng.hash_smallest(base, n, s)
    for threads in (1, 3):
        assert ops.hash_smallest(base, n, s, n_threads=threads).tobytes() == want.tobytes()
    peers = np.arange(n)
    assert not (want == peers[:, None]).any()  # never itself
    keys = hash_uniform(seed, STREAM_MATCH, t, peers[:, None], peers[None, :]).reshape(n, n)
    picked = np.take_along_axis(keys, want, axis=1)
    assert (np.diff(picked, axis=1) >= 0).all()  # increasing keys
    keys[peers, peers] = 2.0
    old = np.argpartition(keys, s - 1, axis=1)[:, :s]
    np.testing.assert_array_equal(np.sort(want, axis=1), np.sort(old, axis=1))


def test_hash_smallest_bad_arguments():
    with pytest.raises(ValueError, match=r"1 <= s <= n - 1, got n=5, s=5"):
        ops.hash_smallest(0, 5, 5)
    with pytest.raises(ValueError, match="n >= 2"):
        ops.hash_smallest(0, 1, 1)
    with pytest.raises(TypeError, match="n_threads"):
        ops.hash_smallest(0, 5, 2, n_threads="x")
