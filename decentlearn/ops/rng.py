"""The counter-based generators of csrc/rng.c (``dl_rng_u32``, ``dl_rng_fast_u32`` of csrc/dl.h):
the exact numbers a stochastic kernel draws for row r (peer ``peer0 + r``), element j.

NumPy twin: decentlearn/_reference/rng.py.
"""

from __future__ import annotations

import numpy as np

from decentlearn._core import rng_fast_u32 as _core_rng_fast_u32, rng_u32 as _core_rng_u32
from decentlearn.ops.args import check_seed
from decentlearn.ops.threads import resolve_threads

__all__ = ["rng_u32", "rng_fast_u32"]


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
