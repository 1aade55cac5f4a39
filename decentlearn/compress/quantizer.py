"""The base of the quantizers (qsgd, bucket, sign, int8): every row's message has the same length,
fixed by dim.

Every message is one row, little-endian, self-delimiting given dim: a fixed float32 header, then
codes of a length fixed by dim. Decoding treats the bytes as untrusted: ``from_bytes`` checks
every length, and ``decompress`` raises ValueError on a non-finite or negative norm/scale, an
out-of-range code, or a message whose values would overflow float32. Kernels in csrc/quant.c
(decentlearn.ops.*_encode / *_decode); the NumPy references in decentlearn/_reference/quant.py are
the spec.
"""

from __future__ import annotations

from abc import abstractmethod

import numpy as np

from decentlearn.compress.base import Compressor

__all__ = ["Quantizer"]


class Quantizer(Compressor):
    """Shared plumbing: every row's message has the same length, ``row_nbytes(dim)``."""

    @abstractmethod
    def row_nbytes(self, dim: int) -> int:
        """Exact bytes of one row's message for rows of length dim."""

    def _min_row_nbytes(self, dim: int) -> int:
        return self.row_nbytes(dim)

    def _sizes(self, n_rows: int, dim: int) -> np.ndarray:
        return np.full(n_rows, self.row_nbytes(dim), dtype=np.int64)

    def _join_rows(self, rows, n_rows, dim):
        return self._join(rows, dim), self._sizes(n_rows, dim)
