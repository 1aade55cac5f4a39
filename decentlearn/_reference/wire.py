"""Reference decoders of every compressor's wire format, written from the documented formats alone.

``decode(spec, data, shape)`` parses untrusted bytes with NumPy and ``struct`` only (no
``decentlearn.compress`` code, no C kernel) and returns the decoded float32 ``(n_rows, dim)``
array, or raises ValueError when the bytes are not exactly ``n_rows`` valid messages. The decoding
arithmetic is that of the kernels' NumPy references (``_reference.quant``, ``_reference.natural``,
``_reference.stc``), which are the spec. ``parse_sparse`` gives the same verdict for the sparse
formats as ``(row, index, value)`` triples without building the dense array, so rows declared
near 2^31 elements can be checked too.

benchmarks/fuzz_decoders.py compares the library against these functions: a decoded vector must
equal the reference's bit for bit, or both must refuse the input.
"""

from __future__ import annotations

import struct

import numpy as np

from decentlearn._reference import bitpack as ref_bp
from decentlearn._reference import natural as ref_nat
from decentlearn._reference import quant as ref_q
from decentlearn._reference import stc as ref_stc

#: Rows with empty messages (dim 0) a payload may declare (compress.MAX_EMPTY_ROWS).
MAX_EMPTY_ROWS = 1 << 16
#: Longest row of the sparse formats (int32 indices in the kernels).
SPARSE_MAX_DIM = 2**31 - 1
#: Longest row of the dense formats.
DENSE_MAX_DIM = 2**62
SPARSE = ("topk", "randk", "threshold", "stc")


class _Bytes:
    """Cursor over untrusted bytes: reading past the end raises ValueError."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = bytes(data), 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.at + n > len(self.data):
            raise ValueError("truncated")
        out = self.data[self.at:self.at + n]
        self.at += n
        return out

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def f32(self) -> np.float32:
        return np.frombuffer(self.take(4), "<f4")[0].astype(np.float32)


def _spec(spec: str) -> tuple[str, list[str]]:
    name, *args = spec.split(":")
    return name, args


def ratio_k(ratio_text: str, dim: int) -> int:
    """k of ``topk:R`` / ``randk:R`` / ``stc:R``: ceil(R dim) with R the decimal it prints as."""
    return ref_stc.stc_k(float(ratio_text), dim)


def _shape(shape) -> tuple[int, int]:
    shape = tuple(int(s) for s in shape)
    if len(shape) == 1:
        shape = (1,) + shape
    if len(shape) != 2 or min(shape) < 0:
        raise ValueError("bad shape")
    return shape


def _fixed_row_bytes(name: str, args: list[str], dim: int) -> int | None:
    """Length of every row's message for the fixed-length formats (None for the others)."""
    if name == "none":
        return 4 * dim
    if name == "natural":
        return dim
    if name == "dither":
        s = int(args[0])
        return 4 + (dim * (1 + s.bit_length()) + 7) // 8
    if name == "qsgd":
        return 4 + (dim * (1 + int(args[0]).bit_length()) + 7) // 8
    if name == "bucket":
        bits, bucket = int(args[0]), int(args[1])
        return 8 * -(-dim // bucket) + (dim * bits + 7) // 8
    if name == "sign":
        return 4 + (dim + 7) // 8
    if name == "int8":
        return 4 + dim
    if name in ("topk", "randk"):
        return 8 * ratio_k(args[0], dim)
    return None


def _check_rows(name: str, args: list[str], n_rows: int, dim: int) -> None:
    if dim > (SPARSE_MAX_DIM if name in SPARSE else DENSE_MAX_DIM):
        raise ValueError("dim above the encoder's limit")
    if _fixed_row_bytes(name, args, dim) == 0 and n_rows > MAX_EMPTY_ROWS:
        raise ValueError("too many rows of empty messages")


def _pairs(r: _Bytes, count: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    idx = np.frombuffer(r.take(4 * count), "<u4").astype(np.int64)
    val = np.frombuffer(r.take(4 * count), "<f4").astype(np.float32)
    if count and (idx.max() >= dim or np.any(idx[1:] <= idx[:-1])):
        raise ValueError("indices not strictly increasing below dim")
    if not np.all(np.isfinite(val)):
        raise ValueError("non-finite value")
    return idx, val


def _stc_row(r: _Bytes, ratio_text: str, dim: int) -> tuple[np.ndarray, np.ndarray]:
    k = ratio_k(ratio_text, dim)
    if r.u32() != k:
        raise ValueError("k")
    mu = r.f32()
    nbits = r.u32()
    if not (np.isfinite(mu) and mu >= 0):
        raise ValueError("mu")
    b = ref_stc.golomb_param(k, dim)
    if nbits > 8 * ref_stc.golomb_max_bytes(k, dim, b) or nbits < k * (b + 2):
        raise ValueError("nbits")
    code = np.frombuffer(r.take((nbits + 7) // 8), np.uint8)
    pos, neg = ref_stc._decode_row(code, nbits, k, dim, b)
    val = np.where(neg != 0, -mu, mu).astype(np.float32)
    return pos.astype(np.int64), val


def parse_sparse(spec: str, data: bytes, shape) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per row, (indices int64, values float32) of a top-k / random-k / threshold / STC message;
    ValueError when the bytes are refused."""
    name, args = _spec(spec)
    if name not in SPARSE:
        raise ValueError(f"{spec!r} is not a sparse format")
    n_rows, dim = _shape(shape)
    _check_rows(name, args, n_rows, dim)
    r = _Bytes(data)
    rows = []
    for _ in range(n_rows):
        if name in ("topk", "randk"):
            rows.append(_pairs(r, ratio_k(args[0], dim), dim))
        elif name == "threshold":
            count = r.u32()
            if count > dim:
                raise ValueError("count")
            rows.append(_pairs(r, count, dim))
        else:
            rows.append(_stc_row(r, args[0], dim))
    if r.at != len(r.data):
        raise ValueError("unexpected bytes")
    return rows


def decode(spec: str, data: bytes, shape) -> np.ndarray:
    """The decoded (n_rows, dim) float32 array; ValueError when the bytes are refused."""
    name, args = _spec(spec)
    n_rows, dim = _shape(shape)
    if name in SPARSE:
        out = np.zeros((n_rows, dim), np.float32)
        for row, (idx, val) in enumerate(parse_sparse(spec, data, shape)):
            out[row, idx] = val
        return out
    _check_rows(name, args, n_rows, dim)
    width = _fixed_row_bytes(name, args, dim)
    if width is None:
        raise ValueError(f"unknown format {spec!r}")
    if len(data) != n_rows * width:
        raise ValueError("length")
    raw = np.frombuffer(bytes(data), np.uint8).reshape(n_rows, width)
    head = lambda n: np.ascontiguousarray(raw[:, :4 * n]).view("<f4").astype(np.float32)
    if name == "none":
        out = head(dim).reshape(n_rows, dim)
        if not np.all(np.isfinite(out)):
            raise ValueError("non-finite value")
        return out
    if name == "natural":
        return ref_nat.natural_decode(np.ascontiguousarray(raw)).reshape(n_rows, dim)
    if name == "dither":
        s = int(args[0])
        norms = head(1).reshape(n_rows)
        if np.any(np.signbit(norms)) or not np.all(np.isfinite(norms)):
            raise ValueError("norm")
        codes = ref_bp.bitunpack(np.ascontiguousarray(raw[:, 4:]), 1 + s.bit_length(), dim)
        return ref_nat.dither_decode(norms, codes, s).reshape(n_rows, dim)
    if name == "qsgd":
        levels = int(args[0])
        return ref_q.qsgd_decode(head(1).reshape(n_rows), np.ascontiguousarray(raw[:, 4:]),
                                 levels, dim).reshape(n_rows, dim)
    if name == "bucket":
        bits, bucket = int(args[0]), int(args[1])
        nb = -(-dim // bucket)
        pairs = head(2 * nb).reshape(n_rows, nb, 2)
        return ref_q.bucket_decode(np.ascontiguousarray(pairs[:, :, 0]),
                                   np.ascontiguousarray(pairs[:, :, 1]),
                                   np.ascontiguousarray(raw[:, 8 * nb:]), bits, bucket,
                                   dim).reshape(n_rows, dim)
    if name == "sign":
        return ref_q.sign_decode(head(1).reshape(n_rows), np.ascontiguousarray(raw[:, 4:]),
                                 dim).reshape(n_rows, dim)
    if name == "int8":
        q = np.ascontiguousarray(raw[:, 4:]).view(np.int8)
        return ref_q.int8_decode(head(1).reshape(n_rows), q).reshape(n_rows, dim)
    raise ValueError(f"unknown format {spec!r}")


def dense_bytes(shape) -> int:
    """Bytes of the decoded float32 array (callers skip dense decoding of huge shapes)."""
    n_rows, dim = _shape(shape)
    return 4 * n_rows * dim


__all__ = ["decode", "parse_sparse", "ratio_k", "dense_bytes", "MAX_EMPTY_ROWS"]
