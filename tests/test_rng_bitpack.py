"""The C counter-based generator equals its NumPy twin bit for bit; bit packing round-trips."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decentlearn import ops
from decentlearn._reference import bitpack as ref_bp
from decentlearn._reference import rng as ref_rng


@pytest.mark.parametrize("seed,step,peer0,rows,dim", [
    (0, 0, 0, 1, 1), (1, 2, 3, 4, 100), (2**63 + 5, 2**40, 7, 3, 1000), (42, 7, 1000, 2, 33)])
def test_c_rng_equals_numpy_twin(seed, step, peer0, rows, dim):
    np.testing.assert_array_equal(ops.rng_u32(seed, step, peer0, rows, dim),
                                  ref_rng.rng_u32(seed, step, peer0, rows, dim))


def test_rng_indices_beyond_32_bits():
    key = ref_rng.rng_key(3, 1, 0)
    idx = np.array([0, 1, 2**32, 2**32 + 1, 2**40 + 7], dtype=np.uint64)
    vals = ref_rng.rng_u32_keyed(key, idx)
    assert len(set(vals.tolist())) == 5  # the high half of the index changes the value


def test_rng_rows_are_peers_and_threads_do_not_matter():
    a = ops.rng_u32(9, 4, 10, 5, 3000, n_threads=1)
    b = ops.rng_u32(9, 4, 12, 3, 3000, n_threads=2)
    np.testing.assert_array_equal(a[2:], b)  # row r of a block is peer peer0 + r


def test_rng_is_uniform_enough():
    u = ops.rng_u32(1, 0, 0, 4, 250_000).ravel()
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
    g = ops.rng_u32(2, 0, 0, 4, 250_000).ravel().astype(np.float64) / 2**32 - 0.5
    assert abs(np.corrcoef(f, g)[0, 1]) < 0.005


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
