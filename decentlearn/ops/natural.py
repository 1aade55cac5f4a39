"""Natural compression and natural dithering (csrc/natural.c, natural_impl.h).

NumPy twin: decentlearn/_reference/natural.py.
"""

from __future__ import annotations

import numpy as np

from decentlearn._core import (
    dither_decode as _core_dither_decode,
    dither_encode as _core_dither_encode,
    natural_decode as _core_natural_decode,
    natural_encode as _core_natural_encode,
)
from decentlearn.ops.args import as_rows, check_seed
from decentlearn.ops.threads import resolve_threads

__all__ = [
    "natural_encode", "natural_decode", "check_dither_p", "check_dither_s", "dither_encode",
    "dither_decode"
]


def _nat_out(out, shape: tuple, dtype, rows_shape: tuple) -> np.ndarray:
    """A new array, or ``out`` checked to be a C-contiguous array of ``shape`` and ``dtype``, as
    rows (a view: results are never written to a silent copy)."""
    if out is None:
        return np.empty(rows_shape, dtype=dtype)
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy.ndarray, got {type(out).__name__}")
    if out.dtype != dtype:
        raise TypeError(f"out must have dtype {np.dtype(dtype).name}, got {out.dtype}")
    if out.shape != tuple(shape):
        raise ValueError(f"out must have shape {tuple(shape)}, got {out.shape}")
    if not out.flags.c_contiguous:
        raise ValueError("out must be C-contiguous")
    return out.reshape(rows_shape)


def natural_encode(x: np.ndarray, seed: int = 0, step: int = 0, peer0: int = 0,
                   out: np.ndarray | None = None, n_threads: int | None = None) -> np.ndarray:
    """Natural compression: uint8 codes of x's shape, each value rounded without bias to a signed
    power of two (bit 7 sign, bits 0-6 c: 0 -> 0, c -> 2^(c - 64)). Row r draws from peer
    ``peer0 + r`` at ``step``. ValueError for NaN/Inf. See decentlearn/_reference/natural.py."""
    x2 = as_rows("x", x, np.float32)
    seed, step, peer0 = check_seed(seed, step, peer0)
    out2 = _nat_out(out, x.shape, np.uint8, x2.shape)
    _core_natural_encode(x2, seed, step, peer0, out2, resolve_threads(n_threads, x2.size))
    return out2.reshape(x.shape) if out is None else out


def natural_decode(codes: np.ndarray, out: np.ndarray | None = None,
                   n_threads: int | None = None) -> np.ndarray:
    """float32 values of natural-compression codes (any byte decodes; 0 and 0x80 are 0)."""
    c2 = as_rows("codes", codes, np.uint8)
    out2 = _nat_out(out, codes.shape, np.float32, c2.shape)
    _core_natural_decode(c2, out2, resolve_threads(n_threads, c2.size))
    return out2.reshape(codes.shape) if out is None else out


def check_dither_p(p) -> float:
    """Natural dithering's norm ``p`` as a float: 1, 2 or inf (TypeError, ValueError otherwise)."""
    if isinstance(p, (bool, np.bool_)) or not isinstance(p, (int, float, np.integer, np.floating)):
        raise TypeError(f"p must be a number (1, 2 or inf), got {type(p).__name__}")
    if not (p == 1 or p == 2 or (np.isinf(p) and p > 0)):
        raise ValueError(f"p must be 1, 2 or inf, got {p!r}")
    return float(p)


def check_dither_s(s) -> int:
    """Natural dithering's level count ``s`` as an int in [1, 31] (ValueError otherwise)."""
    if isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer)) or not 1 <= s <= 31:
        raise ValueError(f"s must be an integer in [1, 31], got {s!r}")
    return int(s)


def dither_encode(x: np.ndarray, s: int, p: float = 2.0, seed: int = 0, step: int = 0,
                  peer0: int = 0, n_threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Natural dithering with s levels (0, 2^(1-s), ..., 1/2, 1 of |x_i| / ||x||_p) per row:
    (norms float32 (n_rows,), codes uint8 (n_rows, dim)), code = (level << 1) | sign with level in
    0..s. p is 1, 2 or inf. Unbiased; ValueError for NaN/Inf."""
    x2 = as_rows("x", x, np.float32)
    s, p = check_dither_s(s), check_dither_p(p)
    seed, step, peer0 = check_seed(seed, step, peer0)
    norms = np.empty(x2.shape[0], np.float32)
    codes = np.empty(x2.shape, np.uint8)
    return _core_dither_encode(x2, s, p, seed, step, peer0, norms, codes,
                               resolve_threads(n_threads, x2.size))


def dither_decode(norms: np.ndarray, codes: np.ndarray, s: int, out: np.ndarray | None = None,
                  n_threads: int | None = None) -> np.ndarray:
    """(n_rows, dim) float32 from dithering norms and codes (untrusted: ValueError for a
    negative/non-finite norm or a level above s)."""
    if not isinstance(norms, np.ndarray):
        raise TypeError(f"norms must be a numpy.ndarray, got {type(norms).__name__}")
    c2 = as_rows("codes", codes, np.uint8)
    s = check_dither_s(s)
    out2 = _nat_out(out, c2.shape, np.float32, c2.shape)
    return _core_dither_decode(norms, c2, s, out2, resolve_threads(n_threads, c2.size))
