"""The counter-based generators of csrc/rng.c (``dl_rng_u32``, ``dl_rng_fast_u32`` of csrc/dl.h):
the exact numbers a stochastic kernel draws for row r (peer ``peer0 + r``), element j; and
``hash_smallest``, every peer's s hashed picks among the others (Epidemic Learning's graph).

NumPy twin: decentlearn/_reference/rng.py.
"""

from __future__ import annotations

import numpy as np

from decentlearn._core import hash_smallest as _core_hash_smallest
from decentlearn._core import rng_fast_u32 as _core_rng_fast_u32, rng_u32 as _core_rng_u32
from decentlearn.ops.args import check_seed
from decentlearn.ops.threads import resolve_threads

__all__ = ["hash_smallest", "rng_u32", "rng_fast_u32"]


def rng_u32(seed: int, step: int, peer0: int, n_rows: int, dim: int,
            n_threads: int | None = None) -> np.ndarray:
    """The counter-based generator's uint32 numbers: row r is peer ``peer0 + r`` at ``step``."""
    seed, step, peer0 = check_seed(seed, step, peer0)
    out = np.empty((n_rows, dim), dtype=np.uint32)
    return _core_rng_u32(seed, step, peer0, out, resolve_threads(n_threads, out.size))


def rng_fast_u32(seed: int, step: int, peer0: int, n_rows: int, dim: int,
                 n_threads: int | None = None) -> np.ndarray:
    """The compressors' generator (``dl_rng_fast_u32``: natural compression and dithering, the
    quantizer encoders): row r is peer ``peer0 + r`` at ``step``."""
    seed, step, peer0 = check_seed(seed, step, peer0)
    out = np.empty((n_rows, dim), dtype=np.uint32)
    return _core_rng_fast_u32(seed, step, peer0, out, resolve_threads(n_threads, out.size))


def hash_smallest(base: int, n: int, s: int, n_threads: int | None = None) -> np.ndarray:
    """(n, s) int64: row j holds the s columns k != j whose keys ``hash_uniform(seed, stream, t,
    j, k)`` are smallest (``base`` = ``decentlearn.seeds.hash_u64(seed, stream, t)``; the keys
    compared as their 53-bit integers, ties to the smaller k), in increasing key order. The same
    set as ``np.argpartition`` of the n x n matrix of keys with its diagonal excluded, without
    forming it: O(n^2) hashes but O(n s) memory, rows on the run's threads."""
    n, s = int(n), int(s)
    if n < 2 or not 1 <= s <= n - 1:
        raise ValueError(f"hash_smallest: need n >= 2 and 1 <= s <= n - 1, got n={n}, s={s}")
    out = np.empty((n, s), dtype=np.int64)
    return _core_hash_smallest(int(base), out, resolve_threads(n_threads, n * n))
