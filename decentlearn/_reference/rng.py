"""Bit-exact NumPy twins of the counter-based generators in csrc/dl.h.

``rng_u32(seed, step, peer0, n_rows, dim)[r, j]`` is the 32-bit number a stochastic C kernel
draws for element j of peer ``peer0 + r`` at ``step`` (``dl_rng_u32``: two lowbias32 rounds).
``rng_fast_u32`` is the compressors' generator (``dl_rng_fast_u32``: natural compression and
dithering, the quantizer encoders): one lowbias32 round of the Weyl sequence klo + j w (mod 2^32),
w = khi | 1, plus (j >> 32) 0x9e3779b9, with (klo, khi) the key's halves. Written with wrapping
uint32/uint64 array arithmetic, exactly as the C code.
"""

from __future__ import annotations

import numpy as np

_M64 = (1 << 64) - 1


def mix64(z: int) -> int:
    """splitmix64's finalizer on a Python int (mod 2^64)."""
    z &= _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def rng_key(seed: int, step: int, peer: int) -> int:
    return mix64(mix64(mix64((seed + 0x9E3779B97F4A7C15) & _M64) ^ (step & _M64)) ^ (peer & _M64))


def hash32(x: np.ndarray) -> np.ndarray:
    """lowbias32 on a uint32 array (wrapping multiplication)."""
    x = x.astype(np.uint32, copy=True)
    x ^= x >> np.uint32(16)
    x *= np.uint32(0x21F0AAAD)
    x ^= x >> np.uint32(15)
    x *= np.uint32(0x735A2D97)
    x ^= x >> np.uint32(15)
    return x


def rng_u32_keyed(key: int, index: np.ndarray) -> np.ndarray:
    """dl_rng_u32(key, index) for an array of int64 indices."""
    index = np.asarray(index, dtype=np.uint64)
    lo = (index & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    hi = (index >> np.uint64(32)).astype(np.uint32)
    x = hash32(lo ^ np.uint32(key & 0xFFFFFFFF))
    return hash32(x ^ np.uint32(key >> 32) ^ (hi * np.uint32(0x9E3779B9)))


def rng_u32(seed: int, step: int, peer0: int, n_rows: int, dim: int,
            n_threads: int | None = None) -> np.ndarray:
    """(n_rows, dim) uint32: row r uses key rng_key(seed, step, peer0 + r), index j.
    ``n_threads`` is accepted and ignored."""
    out = np.empty((n_rows, dim), dtype=np.uint32)
    idx = np.arange(dim, dtype=np.uint64)
    for r in range(n_rows):
        out[r] = rng_u32_keyed(rng_key(seed, step, peer0 + r), idx)
    return out


def rng_unit(seed: int, step: int, peer0: int, n_rows: int, dim: int) -> np.ndarray:
    """Uniform float32 in [0, 1) with 24 random bits: (u32 >> 8) * 2^-24, as dl_rng_unit."""
    u = rng_u32(seed, step, peer0, n_rows, dim) >> np.uint32(8)
    return u.astype(np.float32) * np.float32(2.0 ** -24)


def rng_fast_u32_keyed(key: int, index: np.ndarray) -> np.ndarray:
    """dl_rng_fast_u32(key, index) for an array of int64 indices."""
    index = np.asarray(index, dtype=np.uint64)
    lo = (index & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    hi = (index >> np.uint64(32)).astype(np.uint32)
    w = np.uint32((key >> 32) | 1)
    base = np.uint32(key & 0xFFFFFFFF) + lo * w + hi * np.uint32(0x9E3779B9)
    return hash32(base)


def rng_fast_u32(seed: int, step: int, peer0: int, n_rows: int, dim: int,
                 n_threads: int | None = None) -> np.ndarray:
    """(n_rows, dim) uint32 of the compressors' generator: row r uses rng_key(seed, step,
    peer0 + r), index j. ``n_threads`` is accepted and ignored."""
    out = np.empty((n_rows, dim), dtype=np.uint32)
    idx = np.arange(dim, dtype=np.uint64)
    for r in range(n_rows):
        out[r] = rng_fast_u32_keyed(rng_key(seed, step, peer0 + r), idx)
    return out


def rng_fast_unit(seed: int, step: int, peer0: int, n_rows: int, dim: int) -> np.ndarray:
    """Uniform float32 in [0, 1) with 24 random bits of rng_fast_u32, as dl_rng_fast_unit."""
    u = rng_fast_u32(seed, step, peer0, n_rows, dim) >> np.uint32(8)
    return u.astype(np.float32) * np.float32(2.0 ** -24)


def hash_smallest(base: int, n: int, s: int, n_threads: int | None = None) -> np.ndarray:
    """Same contract as ``decentlearn.ops.hash_smallest``, from the n x n matrix of keys: the
    53-bit keys of hash_u64's chain (base, j, k), the diagonal excluded, a stable sort of each
    row (ties to the smaller k), its first s columns."""
    golden = np.uint64(0x9E3779B97F4A7C15)
    peers = np.arange(n, dtype=np.uint64)

    def mix(z):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))

    with np.errstate(over="ignore"):
        rows = mix(np.uint64(base) + golden + peers)
        keys = mix(rows[:, None] + golden + peers[None, :]) >> np.uint64(11)
    keys[np.arange(n), np.arange(n)] = np.uint64(1 << 53)  # above every key: never picked
    return np.argsort(keys, axis=1, kind="stable")[:, :s].astype(np.int64)
