"""The compressor base class, its ``Payload``, the compressor registry and ``make``.

Each compressor lives in its own module of this package and registers itself with
``@register(name)``; decentlearn.compress imports them all.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from decentlearn import ops
from decentlearn.compress.wire import Reader
from decentlearn.registry import Registry

_REGISTRY: Registry[type[Compressor]] = Registry("compressor")
#: Wrappers named by a spec prefix (``ef:``): ``wrap(inner compressor, spec)``.
_WRAPPERS: Registry[Callable[[Compressor, str], Any]] = Registry("compressor wrapper")

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


def register_wrapper(name: str):
    """Function decorator: ``@register_wrapper("ef")`` makes ``make("ef:SPEC")`` return
    ``wrap(make("SPEC"), "ef:SPEC")`` (decentlearn.compress.error_feedback registers ``ef``)."""
    return _WRAPPERS.register(name)


def make(spec: str) -> Any:
    """Builds a compressor from a spec such as "none", "natural", "topk:0.01", "bucket:8:512";
    ``"ef:SPEC"`` wraps the compressor of SPEC in error feedback (:class:`ErrorFeedback`)."""
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"compressor spec must be a non-empty string, got {spec!r}")
    prefix, sep, inner = spec.partition(":")
    if sep and prefix in _WRAPPERS:
        return _WRAPPERS.get(prefix)(make(inner), spec)
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


def _describe(a: object) -> str:
    if not isinstance(a, np.ndarray):
        return type(a).__name__
    layout = "C-contiguous" if a.flags.c_contiguous else "not C-contiguous"
    ro = "" if a.flags.writeable else ", read-only"
    return f"{a.dtype} array of shape {a.shape} ({layout}{ro})"


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
        rows = ops.as_rows("x", x, np.float32)
        if not rows.flags.c_contiguous:
            raise ValueError("x must be C-contiguous (use np.ascontiguousarray)")
        seed, step, peer0 = ops.check_seed(seed, step, peer0)
        arrays, row_nbytes = self._compress(rows, seed, step, peer0, n_threads)
        return Payload(self, x.shape, arrays, np.asarray(row_nbytes, dtype=np.int64))

    def decompress(self, payload: Payload, n_threads: int | None = None,
                   out: np.ndarray | None = None) -> np.ndarray:
        """The decoded float32 array, of the shape that was compressed. ``out``: a C-contiguous
        float32 array of that shape to decode into (and return), so that code decoding every
        round reuses its buffer rather than faulting in the pages of a fresh one."""
        if not isinstance(payload, Payload) or payload.compressor.spec != self.spec:
            raise ValueError(f"payload was not made by {self.spec!r}")
        if out is None:
            out = np.empty(payload.shape, dtype=np.float32)
        elif not (isinstance(out, np.ndarray) and out.dtype == np.float32
                  and out.shape == tuple(payload.shape) and out.flags.c_contiguous
                  and out.flags.writeable):
            raise ValueError(f"out must be a writeable C-contiguous float32 array of the "
                             f"payload's shape {tuple(payload.shape)}, got "
                             f"{_describe(out)}")
        self._decompress(payload, n_threads, out.reshape(payload.n_rows, payload.dim))
        return out

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
    def _decompress(self, payload: Payload, n_threads: int | None, out: np.ndarray) -> None:
        """Writes the decoded rows into ``out``, a C-contiguous (n_rows, dim) float32 array
        (every value: it is not zeroed)."""

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
