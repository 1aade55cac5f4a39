"""Gossip, the CSR mixing kernel of csrc/gossip.c: ``Y = W_t X`` over the peers' rows; and spmm,
a sparse-dense product in float32 arithmetic (scipy.sparse's bits).

NumPy twin: decentlearn/_reference/gossip.py.
"""

from __future__ import annotations

import numpy as np

from decentlearn._core import gossip as _core_gossip, spmm as _core_spmm
from decentlearn.ops.threads import resolve_threads

__all__ = ["as_csr", "gossip", "spmm"]


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


def _out_for(X: object, out: object, n_rows: int, fn: str, axes: str) -> np.ndarray:
    """``out``, or a new (n_rows, dim) float32 array for the 2-D X; TypeError / ValueError naming
    X or out (prefixed with ``fn``) otherwise (their shapes and dtypes the glue checks)."""
    if not isinstance(X, np.ndarray):
        raise TypeError(f"{fn}X must be a numpy.ndarray, got {type(X).__name__}")
    if n_rows < 0:
        raise ValueError(f"{fn}W.indptr must have n_rows + 1 >= 1 entries, got 0")
    if out is None:
        if X.ndim != 2:
            raise ValueError(f"{fn}X must be 2-dimensional ({axes}), got shape {X.shape}")
        return np.empty((n_rows, X.shape[1]), dtype=np.float32)
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{fn}out must be a numpy.ndarray, got {type(out).__name__}")
    return out


def gossip(W, X: np.ndarray, out: np.ndarray | None = None, n_threads: int | None = None,
           t: int = 0, n_cols: int | None = None) -> np.ndarray:
    """Mixes the peers' rows: returns ``W_t @ X``.

    W: a Topology (its mixing matrix for round ``t``), a scipy.sparse matrix, or CSR arrays
    ``(indptr int64, indices int32, data float32)`` of an (n, n) matrix.
    X: (n_peers, dim) float32, C-contiguous. out: optional (n_peers, dim) float32 array that must
    not overlap X. Bit-identical for every thread count. ``n_cols``: for CSR arrays of a
    rectangular (n_rows, n_cols) block of rows (the MPI backend's rows over its halo buffer).
    """
    indptr, indices, data, square = as_csr(W, t)
    if n_cols is None:
        n_cols = square
    elif not isinstance(W, tuple):
        raise ValueError("n_cols is only for W given as (indptr, indices, data) arrays")
    out = _out_for(X, out, len(indptr) - 1, "", "n_peers, dim")
    threads = resolve_threads(n_threads, X.size)
    return _core_gossip(indptr, indices, data, n_cols, X, out, threads)


def spmm(W, X: np.ndarray, out: np.ndarray | None = None,
         n_threads: int | None = None) -> np.ndarray:
    """``W @ X`` for a sparse (n_rows, n_cols) W with float32 values and an (n_cols, dim)
    float32 X, in float32 arithmetic as scipy.sparse computes it: each output
    element starts at 0 and adds its row's terms ``w * x`` in W's stored order, each product and
    each sum rounded to float32 (no fused multiply-add), rows and column blocks on the run's
    threads, so the same bits at every thread count and on every ISA path. (``gossip`` is the
    mixing kernel: its sums use fused multiply-adds where the CPU has them.)

    W: a scipy.sparse matrix or array (its CSR form, in the order scipy keeps) or CSR arrays
    ``(indptr int64, indices int32, data float32, n_cols)``. out: optional (n_rows, dim) float32
    array that must not overlap X. X and out may be column blocks ``M[:, a:b]`` of wider
    matrices (each row contiguous, the rows apart): NGC sums each tensor's received rows into
    that tensor's columns (each column is summed alone, so the bits are those of the whole
    rows)."""
    if isinstance(W, tuple) and len(W) == 4:
        indptr, indices, data, n_cols = W
    elif hasattr(W, "tocsr"):
        S = W.tocsr()
        if S.dtype != np.float32:
            raise TypeError(f"spmm: W must hold float32 values, got {S.dtype}")
        indptr, indices, data, n_cols = (S.indptr.astype(np.int64), S.indices.astype(np.int32),
                                         S.data, int(S.shape[1]))
    else:
        raise TypeError("spmm: W must be a scipy.sparse matrix or (indptr, indices, data, n_cols) "
                        f"arrays, got {type(W).__name__}")
    out = _out_for(X, out, len(indptr) - 1, "spmm: ", "n_cols, dim")
    threads = resolve_threads(n_threads, out.size * max(1, len(indices)) // max(1, len(out)))
    return _core_spmm(indptr, indices, data, int(n_cols), X, out, threads)
