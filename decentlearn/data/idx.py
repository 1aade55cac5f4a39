"""Strict, bounded reader for the IDX format of MNIST and Fashion-MNIST, gzipped or raw.

An IDX file is a 4-byte magic number ``00 00 TT NN`` (TT the element type, NN the number of
dimensions), NN big-endian uint32 sizes, then the elements in row-major order, big-endian. The
reader checks every part and the exact length, so a truncated or corrupt file raises ValueError
instead of yielding a silently wrong array.

Files are not trusted: the header is read first (from the decompressed stream for a gzip file),
its size (an exact integer product, never a wrapped one) is checked against ``max_bytes`` and
against what the file on disk can hold, and only then is the payload read, in chunks, never more
than the header declares plus one byte. A gzip file whose trailer disagrees with the header is
first decompressed without being stored, so a gzip bomb costs bounded time and little memory.
"""

from __future__ import annotations

import gzip
import io
import os
import pathlib
import struct
import zlib
from typing import BinaryIO

import numpy as np

__all__ = ["IDX_DTYPES", "IDX_MAX_BYTES", "parse_idx", "read_idx"]

#: IDX type code -> big-endian NumPy dtype.
IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

#: Default largest payload ``read_idx`` accepts (4 GiB; the MNIST training images are 47 MB).
IDX_MAX_BYTES = 1 << 32

_GZIP_MAGIC = b"\x1f\x8b"
# Deflate expands at most ~1032:1 (a 258-byte match per 2 bits); a gzip file cannot hold more.
_DEFLATE_MAX_RATIO = 1032
_CHUNK = 1 << 20
# Exceptions a damaged gzip stream raises (BadGzipFile is an OSError).
_GZIP_ERRORS = (OSError, EOFError, zlib.error)


_Header = tuple[tuple[int, ...], np.dtype, int]  # shape, big-endian dtype, header length


def _parse_header(head: bytes, source: str, max_bytes: int) -> _Header:
    """Check the magic number and the sizes in ``head`` (at least the first 4 bytes).

    Returns (shape, big-endian dtype, header length); the payload length is
    prod(shape) * itemsize, checked to be at most ``max_bytes``. When ``head`` holds only the
    4-byte magic, the shape is empty and the header length tells how many bytes to read.
    """
    if len(head) < 4:
        raise ValueError(
            f"{source}: not an IDX file: {len(head)} bytes, shorter than the 4-byte header"
        )
    if head[0] != 0 or head[1] != 0:
        raise ValueError(
            f"{source}: not an IDX file: magic number starts with {head[:2].hex()}, expected 0000"
        )
    code, ndim = head[2], head[3]
    if code not in IDX_DTYPES:
        valid = ", ".join(f"0x{c:02X}" for c in IDX_DTYPES)
        raise ValueError(f"{source}: unknown IDX type code 0x{code:02X}, expected one of {valid}")
    if ndim == 0:
        raise ValueError(f"{source}: IDX header declares 0 dimensions, expected at least 1")
    header = 4 + 4 * ndim
    if len(head) == 4:
        return (), IDX_DTYPES[code], header
    if len(head) < header:
        raise ValueError(
            f"{source}: truncated IDX header: {len(head)} bytes, expected {header} "
            f"for {ndim} dimensions"
        )
    shape = struct.unpack(f">{ndim}I", head[4:header])
    dtype = IDX_DTYPES[code]
    payload = _payload_bytes(shape, dtype)  # Python ints: the product is exact, it cannot wrap
    if payload > max_bytes:
        raise ValueError(
            f"{source}: IDX header declares shape {shape} of {dtype.name}, {payload} bytes, "
            f"more than the limit of {max_bytes} bytes (max_bytes)"
        )
    return shape, dtype, header


def _payload_bytes(shape: tuple[int, ...], dtype: np.dtype) -> int:
    n = dtype.itemsize
    for s in shape:
        n *= s
    return n


def _to_array(payload: bytearray, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """The array over ``payload`` (taken over, not copied), byte-swapped in place to native
    order."""
    array = np.frombuffer(payload, dtype=dtype).reshape(shape)
    if not dtype.isnative:
        array = array.byteswap(inplace=True).view(dtype.newbyteorder())
    return array


def _read_header(f: BinaryIO, source: str, max_bytes: int) -> _Header:
    """Read and check the magic number, then the sizes; the stream is left at the payload."""
    head = _read_exact(f, 4)
    _, _, header = _parse_header(head, source, max_bytes)
    return _parse_header(head + _read_exact(f, header - 4), source, max_bytes)


def _length_error(
    source: str,
    got: int,
    expected: int,
    shape: tuple[int, ...],
    dtype: np.dtype,
    *,
    exact: bool = True,
) -> ValueError:
    """The error for a file of ``got`` bytes (``exact=False``: at least ``got``; reading
    stopped there)."""
    if got < expected:
        return ValueError(
            f"{source}: truncated IDX file: {got} bytes, expected exactly {expected} "
            f"for shape {shape} of {dtype.name}"
        )
    more = "" if exact else "at least "
    return ValueError(
        f"{source}: trailing bytes in IDX file: {more}{got} bytes, expected exactly {expected} "
        f"for shape {shape} of {dtype.name}"
    )


def parse_idx(
    data: bytes, source: str = "<bytes>", *, max_bytes: int = IDX_MAX_BYTES
) -> np.ndarray:
    """Decode the bytes of an (uncompressed) IDX file into an array in native byte order.

    ``source`` names the data in error messages. The length must be exact: no trailing bytes.
    """
    shape, dtype, header = _read_header(io.BytesIO(data), source, max_bytes)
    expected = header + _payload_bytes(shape, dtype)
    if len(data) != expected:
        raise _length_error(source, len(data), expected, shape, dtype)
    return _to_array(bytearray(memoryview(data)[header:]), shape, dtype)


def _read_exact(f: BinaryIO, n: int) -> bytes:
    """Up to ``n`` bytes from ``f`` (fewer only at the end of the stream)."""
    parts, got = [], 0
    while got < n:
        part = f.read(n - got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def _read_payload(
    f: BinaryIO, nbytes: int, source: str, header: int, shape: tuple[int, ...], dtype: np.dtype
) -> bytearray:
    """Read exactly ``nbytes`` into a new buffer in chunks, then check that the stream ends."""
    buf = bytearray(nbytes)
    view = memoryview(buf)
    got = 0
    while got < nbytes:
        n = f.readinto(view[got : got + _CHUNK])  # type: ignore[attr-defined]
        if not n:
            raise _length_error(source, header + got, header + nbytes, shape, dtype)
        got += n
    if f.read(1):
        raise _length_error(source, header + nbytes + 1, header + nbytes, shape, dtype, exact=False)
    return buf


def _count_stream(f: BinaryIO, limit: int) -> int:
    """Length of the rest of ``f``, counting no further than ``limit`` (nothing is kept)."""
    scratch = bytearray(_CHUNK)
    view = memoryview(scratch)
    total = 0
    while total <= limit:
        n = f.readinto(view)  # type: ignore[attr-defined]
        if not n:
            break
        total += n
    return total


def _gzip_isize(raw: BinaryIO, size: int) -> int | None:
    """The ISIZE field of the gzip trailer (uncompressed length mod 2**32 of the last member)."""
    if size < 18:  # 10-byte header + 8-byte trailer
        return None
    raw.seek(size - 4)
    (isize,) = struct.unpack("<I", raw.read(4))
    raw.seek(0)
    return isize


def read_idx(path: str | os.PathLike[str], *, max_bytes: int = IDX_MAX_BYTES) -> np.ndarray:
    """Read an IDX file (gzip-compressed or not; detected from the content) into a new array.

    ``max_bytes`` bounds the payload the header may declare (default ``IDX_MAX_BYTES``, 4 GiB).
    Any malformed file — wrong magic, unknown type, truncated, trailing bytes (none are accepted),
    a header declaring more than ``max_bytes`` or more than the file can hold, damaged gzip
    data — raises ValueError naming the file. Memory use is the declared array plus one chunk
    (1 MiB), whatever the file claims or holds.
    """
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
        raise ValueError(f"max_bytes must be an int >= 0, got {max_bytes!r}")
    path = pathlib.Path(path)
    source = str(path)
    with open(path, "rb") as raw:
        size = os.fstat(raw.fileno()).st_size
        compressed = raw.read(2) == _GZIP_MAGIC
        raw.seek(0)
        if not compressed:
            return _read_raw(raw, size, source, max_bytes)
        try:
            return _read_gzip(raw, size, source, max_bytes)
        except _GZIP_ERRORS as exc:
            raise ValueError(f"{source}: corrupt gzip data: {exc}") from exc


def _read_raw(raw: BinaryIO, size: int, source: str, max_bytes: int) -> np.ndarray:
    shape, dtype, header = _read_header(raw, source, max_bytes)
    nbytes = _payload_bytes(shape, dtype)
    if size != header + nbytes:  # checked against the file's size before reading the payload
        raise _length_error(source, size, header + nbytes, shape, dtype)
    return _to_array(_read_payload(raw, nbytes, source, header, shape, dtype), shape, dtype)


def _read_gzip(raw: BinaryIO, size: int, source: str, max_bytes: int) -> np.ndarray:
    isize = _gzip_isize(raw, size)
    with gzip.GzipFile(fileobj=raw, mode="rb") as f:
        shape, dtype, header = _read_header(f, source, max_bytes)
        nbytes = _payload_bytes(shape, dtype)
        expected = header + nbytes
        if expected > _DEFLATE_MAX_RATIO * size + _CHUNK:
            raise ValueError(
                f"{source}: IDX header declares shape {shape} of {dtype.name}, {expected} bytes, "
                f"more than a {size}-byte gzip file can hold"
            )
        if isize != expected % (1 << 32):
            # The trailer disagrees with the header (or the file has several gzip members):
            # measure the stream without keeping it before allocating the array.
            got = header + _count_stream(f, nbytes)
            if got != expected:
                raise _length_error(source, got, expected, shape, dtype, exact=got < expected)
            raw.seek(0)
            with gzip.GzipFile(fileobj=raw, mode="rb") as again:
                _read_exact(again, header)
                payload = _read_payload(again, nbytes, source, header, shape, dtype)
        else:
            payload = _read_payload(f, nbytes, source, header, shape, dtype)
    return _to_array(payload, shape, dtype)
