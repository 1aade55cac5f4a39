"""Strict reader for the IDX format of MNIST and Fashion-MNIST, gzipped or raw.

An IDX file is a 4-byte magic number ``00 00 TT NN`` (TT the element type, NN the number of
dimensions), NN big-endian uint32 sizes, then the elements in row-major order, big-endian. The
reader checks every part and the exact length, so a truncated or corrupt file raises ValueError
instead of yielding a silently wrong array.
"""

from __future__ import annotations

import gzip
import os
import pathlib
import zlib

import numpy as np

__all__ = ["IDX_DTYPES", "parse_idx", "read_idx"]

#: IDX type code -> big-endian NumPy dtype.
IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

_GZIP_MAGIC = b"\x1f\x8b"


def parse_idx(data: bytes, source: str = "<bytes>") -> np.ndarray:
    """Decode the bytes of an (uncompressed) IDX file into an array in native byte order.

    ``source`` names the data in error messages.
    """
    if len(data) < 4:
        raise ValueError(f"{source}: not an IDX file: {len(data)} bytes, shorter than the 4-byte header")
    if data[0] != 0 or data[1] != 0:
        raise ValueError(
            f"{source}: not an IDX file: magic number starts with {data[:2].hex()}, expected 0000"
        )
    code, ndim = data[2], data[3]
    if code not in IDX_DTYPES:
        valid = ", ".join(f"0x{c:02X}" for c in IDX_DTYPES)
        raise ValueError(f"{source}: unknown IDX type code 0x{code:02X}, expected one of {valid}")
    if ndim == 0:
        raise ValueError(f"{source}: IDX header declares 0 dimensions, expected at least 1")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(
            f"{source}: truncated IDX header: {len(data)} bytes, expected {header} for {ndim} dimensions"
        )
    shape = tuple(int(s) for s in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    dtype = IDX_DTYPES[code]
    expected = header + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(data) != expected:
        kind = "truncated" if len(data) < expected else "trailing bytes in"
        raise ValueError(
            f"{source}: {kind} IDX file: {len(data)} bytes, expected exactly {expected} "
            f"for shape {shape} of {dtype.name}"
        )
    array = np.frombuffer(data, dtype=dtype, offset=header).reshape(shape)
    return array.astype(dtype.newbyteorder("="), copy=True)


def read_idx(path: str | os.PathLike[str]) -> np.ndarray:
    """Read an IDX file (gzip-compressed or not; detected from the content) into a new array."""
    path = pathlib.Path(path)
    data = path.read_bytes()
    if data[:2] == _GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise ValueError(f"{path}: corrupt gzip data: {exc}") from exc
    return parse_idx(data, str(path))
