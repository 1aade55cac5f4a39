"""b-bit codes packed into bytes and back, row by row (csrc/bitpack.c).

NumPy twin: decentlearn/_reference/bitpack.py.
"""

from __future__ import annotations

import numpy as np

from decentlearn._core import bitpack as _core_bitpack, bitunpack as _core_bitunpack
from decentlearn.ops.args import as_rows
from decentlearn.ops.threads import resolve_threads

__all__ = ["bitpack", "bitunpack"]


def bitpack(codes: np.ndarray, bits: int, out: np.ndarray | None = None,
            n_threads: int | None = None) -> np.ndarray:
    """Packs b-bit codes (uint8 < 2^bits), row by row, little-endian bit order."""
    codes2 = as_rows("codes", codes, np.uint8)
    if out is None:
        out = np.empty((codes2.shape[0], (codes2.shape[1] * bits + 7) // 8), dtype=np.uint8)
    return _core_bitpack(codes2, bits, out, resolve_threads(n_threads, codes2.size))


def bitunpack(packed: np.ndarray, bits: int, dim: int, out: np.ndarray | None = None,
              n_threads: int | None = None) -> np.ndarray:
    """Inverse of bitpack: (n_rows, dim) uint8 codes from (n_rows, row_bytes) packed bytes."""
    packed2 = as_rows("packed", packed, np.uint8)
    if out is None:
        out = np.empty((packed2.shape[0], dim), dtype=np.uint8)
    return _core_bitunpack(packed2, bits, out, resolve_threads(n_threads, out.size))
