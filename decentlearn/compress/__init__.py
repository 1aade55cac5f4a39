"""Compressors: what peers send instead of their float32 vectors, and exactly how many bytes.

A compressor works on a (n_peers, dim) float32 matrix, one message per row (a 1-D vector is one
row). ``compress(x, seed=, step=, peer0=)`` returns a ``Payload``; ``decompress(payload)`` returns
the decoded float32 array of the input's shape. ``Payload.nbytes`` is the exact size of the wire
messages and the only source of communication cost in the project; ``Payload.to_bytes()`` writes
them, and ``compressor.from_bytes(data, shape)`` parses them back, treating the bytes as untrusted:
any truncated, oversized or inconsistent message raises ValueError.

Stochastic compressors draw from a counter-based generator keyed by (seed, step, peer, index)
(natural, dither, qsgd, bucket and int8 from the compressors' one-round generator, random-k from
the two-round one; docs/compression.md#randomness), so results are bit-identical for any thread
count and any split of rows between processes.
Error feedback is a wrapper (``ErrorFeedback(compressor)``), not a flag. Specs such as
``"topk:0.01"`` are parsed by the registry: ``make("topk:0.01")``.
"""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from decentlearn.registry import Registry

_REGISTRY: Registry[type[Compressor]] = Registry("compressor")

#: Most rows ``from_bytes`` accepts when a row's message is empty (dim 0): rows of empty messages
#: carry no bytes that could bound the work, so their count is capped instead.
MAX_EMPTY_ROWS = 1 << 16


def register(name: str):
    """Class decorator: ``@register("topk")`` makes ``make("topk:…")`` build the class from its
    ``from_args(args)`` classmethod."""
    add = _REGISTRY.register(name)

    def deco(cls):
        cls.kind = name
        return add(cls)
    return deco


def available() -> list[str]:
    return _REGISTRY.available()


def make(spec: str) -> Compressor | ErrorFeedback:
    """Builds a compressor from a spec such as "none", "natural", "topk:0.01", "bucket:8:512";
    ``"ef:SPEC"`` wraps the compressor of SPEC in error feedback (:class:`ErrorFeedback`)."""
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"compressor spec must be a non-empty string, got {spec!r}")
    if spec.startswith("ef:"):
        inner = make(spec[3:])
        if isinstance(inner, ErrorFeedback):
            raise ValueError(f"{spec!r}: error feedback is applied once ('ef:' twice)")
        return ErrorFeedback(inner)
    name, args = _REGISTRY.split(spec)
    return _REGISTRY.get(name, spec).from_args(tuple(args))


def parse_ratio(text: str, spec: str) -> float:
    """A sparsity ratio in (0, 1] from a spec argument."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{spec!r}: ratio must be a number in (0, 1], got {text!r}") from None
    if not 0 < value <= 1:
        raise ValueError(f"{spec!r}: ratio must be in (0, 1], got {value}")
    return value


def parse_int(text: str, spec: str, name: str, lo: int, hi: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{spec!r}: {name} must be an integer in [{lo}, {hi}], got {text!r}") \
            from None
    if not lo <= value <= hi:
        raise ValueError(f"{spec!r}: {name} must be an integer in [{lo}, {hi}], got {value}")
    return value


class Reader:
    """Bounds-checked reading of untrusted little-endian bytes: every read that would run past the
    end raises ValueError, and nothing is read from outside the buffer."""

    def __init__(self, data: bytes | bytearray | memoryview, what: str) -> None:
        self.view = memoryview(data).cast("B")
        self.pos = 0
        self.what = what

    @property
    def remaining(self) -> int:
        return len(self.view) - self.pos

    def take(self, n: int) -> memoryview:
        if n < 0 or n > self.remaining:
            raise ValueError(f"{self.what}: truncated message (needs {n} more bytes at offset "
                             f"{self.pos}, {self.remaining} left)")
        out = self.view[self.pos:self.pos + n]
        self.pos += n
        return out

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def f32(self) -> float:
        return struct.unpack("<f", self.take(4))[0]

    def array(self, dtype, count: int) -> np.ndarray:
        dt = np.dtype(dtype).newbyteorder("<")
        return np.frombuffer(self.take(count * dt.itemsize), dtype=dt).astype(dt.newbyteorder("="))

    def done(self) -> None:
        if self.remaining:
            raise ValueError(f"{self.what}: {self.remaining} unexpected bytes after the message")


@dataclass(frozen=True, eq=False)
class Payload:
    """The compressed form of a (n_rows, dim) matrix: one wire message per row.

    ``arrays`` holds the compressor's batched data (layout is the compressor's business);
    ``row_nbytes[r]`` is the exact length of row r's message, so ``nbytes`` is the wire size.
    """

    compressor: Compressor
    shape: tuple[int, ...]
    arrays: dict = field(repr=False)
    row_nbytes: np.ndarray = field(repr=False)

    @property
    def n_rows(self) -> int:
        return 1 if len(self.shape) == 1 else self.shape[0]

    @property
    def dim(self) -> int:
        return self.shape[-1]

    @property
    def nbytes(self) -> int:
        return int(self.row_nbytes.sum())

    def to_bytes(self, row: int | None = None) -> bytes:
        """Row ``row``'s message, or every row's message in order when ``row`` is None."""
        if row is not None:
            if not 0 <= row < self.n_rows:
                raise ValueError(f"row must be in [0, {self.n_rows}), got {row}")
            return self.compressor._row_to_bytes(self, row)
        return b"".join(self.compressor._row_to_bytes(self, r) for r in range(self.n_rows))

    def __repr__(self) -> str:
        return (f"Payload({self.compressor.spec!r}, shape={self.shape}, nbytes={self.nbytes}, "
                f"{self.nbytes / max(1, 4 * self.n_rows * self.dim):.4f} of float32)")


def _shape_rows(shape) -> tuple[tuple[int, ...], int, int]:
    shape = tuple(int(s) for s in np.atleast_1d(shape))
    if len(shape) not in (1, 2) or any(s < 0 for s in shape):
        raise ValueError(f"shape must be (dim,) or (n_rows, dim) with sizes >= 0, got {shape}")
    return shape, (1 if len(shape) == 1 else shape[0]), shape[-1]


class Compressor(ABC):
    """Base class. Subclasses are frozen dataclasses registered with ``@register(name)``."""

    kind = "base"
    #: E[decompress(compress(x))] == x
    unbiased: bool = False
    #: Longest row the encoder accepts; from_bytes refuses a longer declared dim.
    max_dim: int = 2**62

    @property
    def spec(self) -> str:
        return self.kind

    @property
    def biased(self) -> bool:
        """True when E[decompress(compress(x))] != x (top-k, sign, STC, ...)."""
        return not self.unbiased

    def variance_factor(self, dim: int) -> float | None:
        """omega such that E||C(x) - x||^2 <= omega ||x||^2 for rows of length ``dim``, for
        unbiased compressors whose bound is known; None otherwise (biased ones: see ``biased``).
        Compressed D-PSGD needs omega small; CHOCO-SGD needs C to be a contraction (omega < 1)
        or the compressor scaled by 1 / (1 + omega)."""
        return None

    @classmethod
    def from_args(cls, args: tuple[str, ...]) -> Compressor:
        if args:
            raise ValueError(f"{cls.kind!r} takes no parameters, got {':'.join(args)!r}")
        return cls()

    def compress(self, x: np.ndarray, *, seed: int = 0, step: int = 0, peer0: int = 0,
                 n_threads: int | None = None) -> Payload:
        """Compresses each row of x (float32, (dim,) or (n_rows, dim), C-contiguous)."""
        from decentlearn import ops

        rows = ops.as_rows("x", x, np.float32)
        if not rows.flags.c_contiguous:
            raise ValueError("x must be C-contiguous (use np.ascontiguousarray)")
        seed, step, peer0 = ops.check_seed(seed, step, peer0)
        arrays, row_nbytes = self._compress(rows, seed, step, peer0, n_threads)
        return Payload(self, x.shape, arrays, np.asarray(row_nbytes, dtype=np.int64))

    def decompress(self, payload: Payload, n_threads: int | None = None) -> np.ndarray:
        """The decoded float32 array, of the shape that was compressed."""
        if not isinstance(payload, Payload) or payload.compressor.spec != self.spec:
            raise ValueError(f"payload was not made by {self.spec!r}")
        out = self._decompress(payload, n_threads)
        return out.reshape(payload.shape)

    def from_bytes(self, data: bytes | bytearray | memoryview, shape) -> Payload:
        """Parses ``n_rows`` consecutive messages (untrusted) into a Payload; ValueError if the
        bytes are not exactly such messages for rows of length ``dim``.

        The work is bounded by the payload's length: a ``dim`` above the encoder's limit
        (``max_dim``), or more rows than ``len(data)`` can hold at ``_min_row_nbytes(dim)`` bytes
        each (at most ``MAX_EMPTY_ROWS`` rows when a row's message is empty), is refused before
        anything is parsed or allocated."""
        shape, n_rows, dim = _shape_rows(shape)
        if dim > self.max_dim:
            raise ValueError(f"{self.spec}: dim must be <= {self.max_dim} (the encoder's limit), "
                             f"got shape {shape}")
        reader = Reader(data, f"{self.spec} message")
        per_row = self._min_row_nbytes(dim)
        if per_row == 0:
            if n_rows > MAX_EMPTY_ROWS:
                raise ValueError(f"{reader.what}: rows of dim={dim} have empty messages; at most "
                                 f"{MAX_EMPTY_ROWS} such rows are accepted, got shape {shape}")
        elif n_rows > reader.remaining // per_row:
            raise ValueError(f"{reader.what}: truncated message ({n_rows} rows of dim={dim} "
                             f"need at least {n_rows * per_row} bytes, {per_row} per row; got "
                             f"{reader.remaining})")
        rows = [self._parse_row(reader, dim) for _ in range(n_rows)]
        reader.done()
        arrays, row_nbytes = self._join_rows(rows, n_rows, dim)
        return Payload(self, shape, arrays, np.asarray(row_nbytes, dtype=np.int64))

    # --- what a compressor implements ---------------------------------------------------------
    @abstractmethod
    def _compress(self, x: np.ndarray, seed: int, step: int, peer0: int,
                  n_threads: int | None) -> tuple[dict, np.ndarray]:
        """(arrays, row_nbytes) for the (n_rows, dim) float32 matrix x."""

    @abstractmethod
    def _decompress(self, payload: Payload, n_threads: int | None) -> np.ndarray:
        """(n_rows, dim) float32."""

    @abstractmethod
    def _row_to_bytes(self, payload: Payload, row: int) -> bytes:
        """Row ``row``'s wire message; its length must equal payload.row_nbytes[row]."""

    def _min_row_nbytes(self, dim: int) -> int:
        """The fewest bytes a valid message for a row of length dim can have (from_bytes bounds
        the row count with it). 0 means rows may have empty messages."""
        return 0

    @abstractmethod
    def _parse_row(self, reader: Reader, dim: int) -> dict:
        """Reads one message for a row of length dim; validates every length and index."""

    @abstractmethod
    def _join_rows(self, rows: list[dict], n_rows: int, dim: int) -> tuple[dict, np.ndarray]:
        """(arrays, row_nbytes) of a Payload from parsed rows."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec!r})"


@register("none")
@dataclass(frozen=True, repr=False)
class Identity(Compressor):
    """No compression: dim float32 values, 4 bytes each. Decoding refuses NaN and infinity, as
    every other decoder does."""

    unbiased = True

    def variance_factor(self, dim: int) -> float:
        return 0.0

    def _compress(self, x, seed, step, peer0, n_threads):
        return {"values": x.copy()}, np.full(x.shape[0], 4 * x.shape[1])

    def _decompress(self, payload, n_threads):
        return payload.arrays["values"].copy()

    def _row_to_bytes(self, payload, row):
        return payload.arrays["values"][row].astype("<f4").tobytes()

    def _min_row_nbytes(self, dim):
        return 4 * dim

    def _parse_row(self, reader, dim):
        values = reader.array(np.float32, dim)
        if not np.isfinite(values).all():
            raise ValueError(f"{reader.what}: values must be finite (NaN or infinity found)")
        return {"values": values}

    def _join_rows(self, rows, n_rows, dim):
        values = (np.stack([r["values"] for r in rows]) if rows
                  else np.zeros((0, dim), np.float32))
        return {"values": values}, np.full(n_rows, 4 * dim)


class ErrorFeedback:
    """Error feedback (Seide et al. 2014; Karimireddy et al. 2019) around any compressor.

    Keeps each row's residual e: sends C(x + e) and keeps e <- (x + e) - decompress(C(x + e)), so
    what a biased compressor drops is sent later instead of lost.
    """

    def __init__(self, compressor: Compressor) -> None:
        if not isinstance(compressor, Compressor):
            raise TypeError(f"compressor must be a Compressor, got {type(compressor).__name__}")
        self.compressor = compressor
        self.error: np.ndarray | None = None

    @property
    def spec(self) -> str:
        return f"ef:{self.compressor.spec}"

    #: Error feedback makes no compressor unbiased, but it keeps what a biased one drops.
    @property
    def unbiased(self) -> bool:
        return self.compressor.unbiased

    @property
    def biased(self) -> bool:
        return self.compressor.biased

    def variance_factor(self, dim: int) -> float | None:
        return self.compressor.variance_factor(dim)

    def compress(self, x: np.ndarray, **kwargs) -> Payload:
        if self.error is None or self.error.shape != x.shape:
            self.error = np.zeros_like(x)
        corrected = x + self.error
        payload = self.compressor.compress(corrected, **kwargs)
        np.subtract(corrected, self.compressor.decompress(payload), out=self.error)
        return payload

    def decompress(self, payload: Payload, **kwargs) -> np.ndarray:
        return self.compressor.decompress(payload, **kwargs)

    def reset(self) -> None:
        self.error = None

    def state_dict(self) -> dict:
        """The residuals (None before the first message), for checkpoints."""
        return {"error": None if self.error is None else self.error.copy()}

    def load_state_dict(self, state: dict) -> None:
        from decentlearn.checkpoint import load_attrs
        load_attrs(self, ("error",), state, "error_feedback.")

    def __repr__(self) -> str:
        return f"ErrorFeedback({self.compressor!r})"


# Compressor families register themselves on import.
# >>> families
from decentlearn.compress import stc  # noqa: E402,F401
from decentlearn.compress import quant  # noqa: E402,F401
from decentlearn.compress import sparse  # noqa: E402,F401
from decentlearn.compress import natural  # noqa: E402,F401
# <<< families
