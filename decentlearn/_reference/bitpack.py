"""Reference b-bit packing (little-endian bit order, rows padded to whole bytes)."""

from __future__ import annotations

import numpy as np


def row_bytes(dim: int, bits: int) -> int:
    return (dim * bits + 7) // 8


def bitpack(codes: np.ndarray, bits: int, out=None, n_threads=None) -> np.ndarray:
    rows, dim = codes.shape
    bit_matrix = ((codes[:, :, None].astype(np.uint16) >> np.arange(bits)) & 1).astype(np.uint8)
    flat = bit_matrix.reshape(rows, dim * bits)
    pad = row_bytes(dim, bits) * 8 - dim * bits
    flat = np.concatenate([flat, np.zeros((rows, pad), np.uint8)], axis=1)
    packed = np.packbits(flat, axis=1, bitorder="little")
    if out is None:
        return packed
    out[...] = packed
    return out


def bitunpack(packed: np.ndarray, bits: int, dim: int, out=None, n_threads=None) -> np.ndarray:
    rows = packed.shape[0]
    flat = np.unpackbits(packed, axis=1, bitorder="little")[:, :dim * bits]
    codes = (flat.reshape(rows, dim, bits).astype(np.uint16) << np.arange(bits)).sum(axis=2)
    codes = codes.astype(np.uint8)
    if out is None:
        return codes
    out[...] = codes
    return out
