"""The one door to the C kernels: resolves defaults (threads, out=, topology rounds) and calls
decentlearn._core.

Thread counts follow scikit-learn's convention: None means min(OpenMP's maximum, CPU count), which
honours OMP_NUM_THREADS; -1 means every CPU; positive values are taken as given; 0 is an error.
Work too small to pay for a thread team runs on one thread. Results never depend on the thread
count.
"""

from __future__ import annotations

import os

import numpy as np

from decentlearn import _core

#: Below this many float32 elements a kernel runs on one thread.
SMALL_WORK = 1 << 15


def cpu_count() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def resolve_threads(n_threads: int | None, work: int | None = None) -> int:
    """Turns a user's ``n_threads`` into a positive count (see the module docstring)."""
    if n_threads is None:
        n = min(_core.config()["omp_max_threads"], cpu_count())
    elif isinstance(n_threads, (bool, np.bool_)) or not isinstance(n_threads, (int, np.integer)):
        raise TypeError(f"n_threads must be an int or None, got {type(n_threads).__name__}")
    elif n_threads == -1:
        n = cpu_count()
    elif n_threads < 1:
        raise ValueError(f"n_threads must be None, -1 or >= 1, got {n_threads}")
    else:
        n = int(n_threads)
    if work is not None and work < SMALL_WORK:
        return 1
    return max(1, n)


def as_csr(W, t: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(indptr int64, indices int32, data float32, n_cols) from a Topology (round t), a scipy.sparse
    matrix, or an (indptr, indices, data) tuple of a square matrix."""
    if hasattr(W, "csr") and hasattr(W, "n"):
        indptr, indices, data = W.csr(t)
        return indptr, indices, data, int(W.n)
    if hasattr(W, "tocsr"):
        S = W.tocsr()
        if S.shape[0] != S.shape[1]:
            raise ValueError(f"W must be square, got shape {S.shape}")
        S.sort_indices()
        return (S.indptr.astype(np.int64), S.indices.astype(np.int32),
                S.data.astype(np.float32), int(S.shape[1]))
    if isinstance(W, tuple) and len(W) == 3:
        indptr, indices, data = (np.asarray(a) for a in W)
        return indptr, indices, data, len(indptr) - 1
    raise TypeError("W must be a Topology, a scipy.sparse matrix or an (indptr, indices, data) "
                    f"tuple, got {type(W).__name__}")


def gossip(W, X: np.ndarray, out: np.ndarray | None = None, n_threads: int | None = None,
           t: int = 0) -> np.ndarray:
    """Mixes the peers' rows: returns ``W_t @ X``.

    W: a Topology (its mixing matrix for round ``t``), a scipy.sparse matrix, or CSR arrays
    ``(indptr int64, indices int32, data float32)`` of an (n, n) matrix.
    X: (n_peers, dim) float32, C-contiguous. out: optional (n_peers, dim) float32 array that must
    not overlap X. Bit-identical for every thread count.
    """
    indptr, indices, data, n_cols = as_csr(W, t)
    if not isinstance(X, np.ndarray):
        raise TypeError(f"X must be a numpy.ndarray, got {type(X).__name__}")
    if out is None:
        if X.ndim != 2:
            raise ValueError(f"X must be 2-dimensional (n_peers, dim), got shape {X.shape}")
        out = np.empty((len(indptr) - 1, X.shape[1]), dtype=np.float32)
    elif not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy.ndarray, got {type(out).__name__}")
    threads = resolve_threads(n_threads, X.size)
    return _core.gossip(indptr, indices, data, n_cols, X, out, threads)


def _as_rows(name: str, x: np.ndarray, dtype) -> np.ndarray:
    """A 1-D vector as one row, a 2-D matrix as is; checks type and dtype (no silent copies)."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(x).__name__}")
    if x.dtype != dtype:
        raise TypeError(f"{name} must have dtype {np.dtype(dtype).name}, got {x.dtype}")
    if x.ndim == 1:
        return x.reshape(1, -1)
    if x.ndim != 2:
        raise ValueError(f"{name} must be 1-D (dim,) or 2-D (n_peers, dim), got shape {x.shape}")
    return x


def _check_seed(seed, step, peer0) -> tuple[int, int, int]:
    for name, v in (("seed", seed), ("step", step), ("peer0", peer0)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {v!r}")
    return int(seed), int(step), int(peer0)


def rng_u32(seed: int, step: int, peer0: int, n_rows: int, dim: int,
            n_threads: int | None = None) -> np.ndarray:
    """The counter-based generator's uint32 numbers: row r is peer ``peer0 + r`` at ``step``."""
    seed, step, peer0 = _check_seed(seed, step, peer0)
    out = np.empty((n_rows, dim), dtype=np.uint32)
    return _core.rng_u32(seed, step, peer0, out, resolve_threads(n_threads, out.size))


def bitpack(codes: np.ndarray, bits: int, out: np.ndarray | None = None,
            n_threads: int | None = None) -> np.ndarray:
    """Packs b-bit codes (uint8 < 2^bits), row by row, little-endian bit order."""
    codes2 = _as_rows("codes", codes, np.uint8)
    if out is None:
        out = np.empty((codes2.shape[0], (codes2.shape[1] * bits + 7) // 8), dtype=np.uint8)
    return _core.bitpack(codes2, bits, out, resolve_threads(n_threads, codes2.size))


def bitunpack(packed: np.ndarray, bits: int, dim: int, out: np.ndarray | None = None,
              n_threads: int | None = None) -> np.ndarray:
    """Inverse of bitpack: (n_rows, dim) uint8 codes from (n_rows, row_bytes) packed bytes."""
    packed2 = _as_rows("packed", packed, np.uint8)
    if out is None:
        out = np.empty((packed2.shape[0], dim), dtype=np.uint8)
    return _core.bitunpack(packed2, bits, out, resolve_threads(n_threads, out.size))


# >>> ops natural
# <<< ops natural

# >>> ops topk
# <<< ops topk

# >>> ops stc
# <<< ops stc

# >>> ops quant
# <<< ops quant
