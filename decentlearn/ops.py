"""The one door to the C kernels: resolves defaults (threads, out=, topology rounds) and calls
decentlearn._core.

Thread counts follow scikit-learn's convention: None means min(OpenMP's maximum, CPU count), which
honours OMP_NUM_THREADS; -1 means every CPU; positive values are capped at the CPU count (more
threads than CPUs only add overhead; the C glue caps them the same way); 0 is an error. Seeds and
steps are integers in [0, 2**64 - 1] and peer0 in [0, 2**63 - 1]: out-of-range values raise a
ValueError naming the argument, they are never wrapped.
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


#: The process-wide default set by set_num_threads (None: OpenMP's maximum and the CPU count).
_NUM_THREADS: int | None = None


def set_num_threads(n_threads: int | None) -> None:
    """Sets the threads every kernel uses when given ``n_threads=None`` (the layers, the optimizer,
    int8 GEMMs, gossip and compressors), and limits numpy's BLAS to the same count through
    threadpoolctl so that the two never oversubscribe the CPUs. None restores the default."""
    global _NUM_THREADS
    if n_threads is None:
        _NUM_THREADS = None
    else:
        _NUM_THREADS = resolve_threads(n_threads)
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=resolve_threads(None), user_api="blas")


def get_num_threads() -> int:
    """The threads a kernel given ``n_threads=None`` uses."""
    return resolve_threads(None)


def resolve_threads(n_threads: int | None, work: int | None = None) -> int:
    """Turns a user's ``n_threads`` into a positive count (see the module docstring); a count
    above the CPUs this process may use is capped at that number."""
    if n_threads is None and _NUM_THREADS is not None:
        n = _NUM_THREADS
    elif n_threads is None:
        n = min(_core.config()["omp_max_threads"], cpu_count())
    elif isinstance(n_threads, (bool, np.bool_)) or not isinstance(n_threads, (int, np.integer)):
        raise TypeError(f"n_threads must be an int or None, got {type(n_threads).__name__}")
    elif n_threads == -1:
        n = cpu_count()
    elif n_threads < 1:
        raise ValueError(f"n_threads must be None, -1 or >= 1, got {n_threads}")
    else:
        n = min(int(n_threads), cpu_count())
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


#: Largest seed and step (the generator keys on 64-bit words; larger values are refused, never
#: wrapped) and largest peer0 (peers are signed 64-bit).
SEED_MAX = 2**64 - 1
PEER_MAX = 2**63 - 1


def _check_seed(seed, step, peer0) -> tuple[int, int, int]:
    """(seed, step, peer0) as ints, each range-checked: ValueError naming the argument."""
    for name, v, hi, text in (("seed", seed, SEED_MAX, "2**64 - 1"),
                              ("step", step, SEED_MAX, "2**64 - 1"),
                              ("peer0", peer0, PEER_MAX, "2**63 - 1")):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) \
                or not 0 <= v <= hi:
            raise ValueError(f"{name} must be an integer >= 0 and <= {text}, got {v!r}")
    return int(seed), int(step), int(peer0)


def rng_u32(seed: int, step: int, peer0: int, n_rows: int, dim: int,
            n_threads: int | None = None) -> np.ndarray:
    """The counter-based generator's uint32 numbers: row r is peer ``peer0 + r`` at ``step``."""
    seed, step, peer0 = _check_seed(seed, step, peer0)
    out = np.empty((n_rows, dim), dtype=np.uint32)
    return _core.rng_u32(seed, step, peer0, out, resolve_threads(n_threads, out.size))


def rng_fast_u32(seed: int, step: int, peer0: int, n_rows: int, dim: int,
                 n_threads: int | None = None) -> np.ndarray:
    """The compressors' generator (``dl_rng_fast_u32``: natural compression and dithering, the
    quantizer encoders): row r is peer ``peer0 + r`` at ``step``."""
    seed, step, peer0 = _check_seed(seed, step, peer0)
    out = np.empty((n_rows, dim), dtype=np.uint32)
    return _core.rng_fast_u32(seed, step, peer0, out, resolve_threads(n_threads, out.size))


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
    x2 = _as_rows("x", x, np.float32)
    seed, step, peer0 = _check_seed(seed, step, peer0)
    out2 = _nat_out(out, x.shape, np.uint8, x2.shape)
    _core.natural_encode(x2, seed, step, peer0, out2, resolve_threads(n_threads, x2.size))
    return out2.reshape(x.shape) if out is None else out


def natural_decode(codes: np.ndarray, out: np.ndarray | None = None,
                   n_threads: int | None = None) -> np.ndarray:
    """float32 values of natural-compression codes (any byte decodes; 0 and 0x80 are 0)."""
    c2 = _as_rows("codes", codes, np.uint8)
    out2 = _nat_out(out, codes.shape, np.float32, c2.shape)
    _core.natural_decode(c2, out2, resolve_threads(n_threads, c2.size))
    return out2.reshape(codes.shape) if out is None else out


def _dither_p(p) -> float:
    if isinstance(p, (bool, np.bool_)) or not isinstance(p, (int, float, np.integer, np.floating)):
        raise TypeError(f"p must be a number (1, 2 or inf), got {type(p).__name__}")
    if not (p == 1 or p == 2 or (np.isinf(p) and p > 0)):
        raise ValueError(f"p must be 1, 2 or inf, got {p!r}")
    return float(p)


def _dither_s(s) -> int:
    if isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer)) or not 1 <= s <= 31:
        raise ValueError(f"s must be an integer in [1, 31], got {s!r}")
    return int(s)


def dither_encode(x: np.ndarray, s: int, p: float = 2.0, seed: int = 0, step: int = 0,
                  peer0: int = 0, n_threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Natural dithering with s levels (0, 2^(1-s), ..., 1/2, 1 of |x_i| / ||x||_p) per row:
    (norms float32 (n_rows,), codes uint8 (n_rows, dim)), code = (level << 1) | sign with level in
    0..s. p is 1, 2 or inf. Unbiased; ValueError for NaN/Inf."""
    x2 = _as_rows("x", x, np.float32)
    s, p = _dither_s(s), _dither_p(p)
    seed, step, peer0 = _check_seed(seed, step, peer0)
    norms = np.empty(x2.shape[0], np.float32)
    codes = np.empty(x2.shape, np.uint8)
    return _core.dither_encode(x2, s, p, seed, step, peer0, norms, codes,
                               resolve_threads(n_threads, x2.size))


def dither_decode(norms: np.ndarray, codes: np.ndarray, s: int, out: np.ndarray | None = None,
                  n_threads: int | None = None) -> np.ndarray:
    """(n_rows, dim) float32 from dithering norms and codes (untrusted: ValueError for a
    negative/non-finite norm or a level above s)."""
    if not isinstance(norms, np.ndarray):
        raise TypeError(f"norms must be a numpy.ndarray, got {type(norms).__name__}")
    c2 = _as_rows("codes", codes, np.uint8)
    s = _dither_s(s)
    out2 = _nat_out(out, c2.shape, np.float32, c2.shape)
    return _core.dither_decode(norms, c2, s, out2, resolve_threads(n_threads, c2.size))
# <<< ops natural

# >>> ops topk
def _k_out(name: str, out, rows: np.ndarray, k: int, dtype) -> np.ndarray:
    """A caller's out array as (n_rows, k) (a 1-D (k,) one for a 1-D x), or a new one."""
    if out is None:
        return np.empty((rows.shape[0], k), dtype=dtype)
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(out).__name__}")
    if out.ndim == 1 and rows.shape[0] == 1 and out.flags.c_contiguous:
        return out.reshape(1, -1)
    return out


def _check_k(k, dim: int) -> int:
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an int, got {type(k).__name__}")
    if not 0 <= k <= dim:
        raise ValueError(f"k must be in [0, dim={dim}], got {k}")
    return int(k)


def topk(x: np.ndarray, k: int, out_idx: np.ndarray | None = None,
         out_val: np.ndarray | None = None,
         n_threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The k largest magnitudes of each row: ``(idx int32 (n_rows, k), val float32 (n_rows, k))``.

    Indices ascend within a row and ``val = x[row, idx]``. Exact and deterministic: among equal
    magnitudes at the k-th place, the lowest indices are kept. ``0 <= k <= dim``; a row holding NaN
    raises ValueError (infinities are ordinary magnitudes). A 1-D x is one row. Never sorts the
    row: a sampled threshold, one vectorized filter pass, and a radix select on the candidates.
    Bit-identical for every thread count.
    """
    rows = _as_rows("x", x, np.float32)
    k = _check_k(k, rows.shape[1])
    oi = _k_out("out_idx", out_idx, rows, k, np.int32)
    ov = _k_out("out_val", out_val, rows, k, np.float32)
    _core.topk(rows, k, oi, ov, resolve_threads(n_threads, rows.size))
    return (oi if out_idx is None else out_idx), (ov if out_val is None else out_val)


def randk(x: np.ndarray, k: int, seed: int = 0, step: int = 0, peer0: int = 0,
          n_threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """k distinct uniformly random indices of each row and their values, ``(idx, val)`` as topk.

    Row r keeps the k indices i with the smallest counter-RNG numbers
    ``dl_rng_u32(rng_key(seed, step, peer0 + r), i)`` (ties to the lowest index): a uniform random
    k-subset, ascending, reproducible from (seed, step, peer), bit-identical for every thread
    count. Values are copied as they are (no NaN check).
    """
    rows = _as_rows("x", x, np.float32)
    k = _check_k(k, rows.shape[1])
    seed, step, peer0 = _check_seed(seed, step, peer0)
    oi = np.empty((rows.shape[0], k), dtype=np.int32)
    ov = np.empty((rows.shape[0], k), dtype=np.float32)
    return _core.randk(rows, k, seed, step, peer0, oi, ov, resolve_threads(n_threads, rows.size))


def threshold(x: np.ndarray, v: float,
              n_threads: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every element with ``|x| >= v`` (v rounded to float32, v >= 0):
    ``(counts int64 (n_rows,), idx int32 (sum,), val float32 (sum,))``, indices ascending within
    a row, rows concatenated. NaN in x raises ValueError. Bit-identical for every thread count."""
    rows = _as_rows("x", x, np.float32)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(f"v must be a real number, got {type(v).__name__}")
    if not v >= 0:
        raise ValueError(f"v must be a number >= 0, got {v!r}")
    with np.errstate(over="ignore"):  # beyond float32's range: infinity, as documented
        v32 = float(np.float32(v))
    return _core.threshold(rows, v32, resolve_threads(n_threads, rows.size))
# <<< ops topk

# >>> ops stc
import math

#: Largest Rice parameter of the Golomb position coder (a remainder and its sign fit 32 bits).
GOLOMB_MAX_B = 31


def golomb_param(k: int, dim: int) -> int:
    """Sattler et al.'s Rice parameter for k of dim positions:
    b* = max(0, 1 + floor(log2(log(phi - 1) / log(1 - p)))), p = k / dim, capped at 31; 0 when
    k == 0 or k == dim."""
    if not 0 <= k <= dim:
        raise ValueError(f"k must be in [0, dim] = [0, {dim}], got {k}")
    if k == 0 or k == dim:
        return 0
    ratio = math.log((math.sqrt(5.0) - 1.0) / 2.0) / math.log1p(-k / dim)
    return min(GOLOMB_MAX_B, max(0, 1 + math.floor(math.log2(ratio))))


def golomb_max_bytes(k: int, dim: int, b: int) -> int:
    """Bytes that hold any row's Golomb code of k positions in [0, dim) with parameter b."""
    if not 0 <= k <= dim or not 0 <= b <= GOLOMB_MAX_B:
        raise ValueError(f"need 0 <= k <= dim and 0 <= b <= {GOLOMB_MAX_B}, got k={k}, "
                         f"dim={dim}, b={b}")
    return (((dim - k) >> b) + k * (b + 2) + 7) // 8


def _check_golomb(k, dim, b) -> tuple[int, int, int]:
    for name, v in (("k", k), ("dim", dim), ("b", b)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    if not 0 <= k <= dim <= 2**31 - 1:
        raise ValueError(f"need 0 <= k <= dim <= 2**31 - 1, got k={k}, dim={dim}")
    if not 0 <= b <= GOLOMB_MAX_B:
        raise ValueError(f"b must be in [0, {GOLOMB_MAX_B}], got {b}")
    return int(k), int(dim), int(b)


def golomb_encode(positions: np.ndarray, negative: np.ndarray, dim: int, b: int,
                  n_threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Golomb/Rice code of each row's kept positions and sign bits (see csrc/stc.c).

    positions: (n_rows, k) int32, strictly increasing within a row, in [0, dim); negative:
    (n_rows, k) bool or uint8 (non-zero = negative). Returns ``(data, nbits)``: data (n_rows,
    golomb_max_bytes(k, dim, b)) uint8, row r's code in its first ceil(nbits[r] / 8) bytes and
    zeros after; nbits (n_rows,) int64. A 1-D input is one row and gives data (max_bytes,) and a
    0-d nbits.
    """
    pos2 = _as_rows("positions", positions, np.int32)
    if isinstance(negative, np.ndarray) and negative.dtype == np.bool_:
        negative = negative.view(np.uint8)
    neg2 = _as_rows("negative", negative, np.uint8)
    k, dim, b = _check_golomb(pos2.shape[1], dim, b)
    data = np.empty((pos2.shape[0], golomb_max_bytes(k, dim, b)), dtype=np.uint8)
    nbits = np.empty(pos2.shape[0], dtype=np.int64)
    _core.golomb_encode(pos2, neg2, dim, b, data, nbits, resolve_threads(n_threads, pos2.size))
    if positions.ndim == 1:
        return data[0], nbits.reshape(())
    return data, nbits


def golomb_decode(data: np.ndarray, nbits, k: int, dim: int, b: int,
                  n_threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of golomb_encode on untrusted bytes: ``(positions (n_rows, k) int32, negative
    (n_rows, k) uint8 0/1)`` from data (n_rows, width) uint8 and nbits (n_rows,) int64. Raises
    ValueError unless each row holds exactly k positions in [0, dim) coded in exactly nbits[r]
    <= 8 * width bits with zero pad bits (bytes after the code are ignored)."""
    data2 = _as_rows("data", data, np.uint8)
    nbits2 = np.asarray(nbits)
    if nbits2.dtype != np.int64:
        raise TypeError(f"nbits must have dtype int64, got {nbits2.dtype}")
    nbits2 = np.ascontiguousarray(nbits2.reshape(-1))
    k, dim, b = _check_golomb(k, dim, b)
    positions = np.empty((data2.shape[0], k), dtype=np.int32)
    negative = np.empty((data2.shape[0], k), dtype=np.uint8)
    _core.golomb_decode(data2, nbits2, dim, b, positions, negative,
                        resolve_threads(n_threads, positions.size))
    if data.ndim == 1:
        return positions[0], negative[0]
    return positions, negative
# <<< ops stc

# >>> ops quant
def _check_int(name: str, value, lo: int, hi: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
            or not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")
    return int(value)


def qsgd_bits(levels: int) -> int:
    """Bits of one QSGD code: 1 sign bit + ceil(log2(levels + 1)) level bits."""
    levels = _check_int("levels", levels, 1, 127)
    return 1 + levels.bit_length()


def _out_tuple(out, shapes_dtypes: list[tuple[tuple[int, ...], type]]) -> tuple:
    if out is None:
        return tuple(np.empty(s, dtype=d) for s, d in shapes_dtypes)
    if not isinstance(out, tuple) or len(out) != len(shapes_dtypes):
        raise TypeError(f"out must be a tuple of {len(shapes_dtypes)} arrays or None")
    return out


def qsgd_encode(x: np.ndarray, levels: int, seed: int = 0, step: int = 0, peer0: int = 0,
                out: tuple | None = None, n_threads: int | None = None):
    """QSGD with ``levels`` = S in [1, 127] (Alistarh et al. 2017), each row of x on its own.

    Returns ``(norm, packed)``: norm (n_rows,) float32 = ||row||_2, and packed (n_rows,
    ceil(dim * qsgd_bits(S) / 8)) uint8, code j = level_j << 1 | (x_j < 0) at qsgd_bits(S) bits,
    little-endian (as ``bitpack``); level_j = floor(t) + (u_j < t - floor t), t = min(|x_j| * S /
    norm, S), u_j the counter RNG's unit float. A 1-D x is one row. NaN/inf -> ValueError.
    """
    x2 = _as_rows("x", x, np.float32)
    levels = _check_int("levels", levels, 1, 127)
    seed, step, peer0 = _check_seed(seed, step, peer0)
    rows, dim = x2.shape
    norm, packed = _out_tuple(out, [((rows,), np.float32),
                                    ((rows, (dim * qsgd_bits(levels) + 7) // 8), np.uint8)])
    _core.qsgd_encode(x2, levels, seed, step, peer0, norm, packed,
                      resolve_threads(n_threads, x2.size))
    return norm, packed


def qsgd_decode(norm: np.ndarray, packed: np.ndarray, levels: int, dim: int,
                out: np.ndarray | None = None, n_threads: int | None = None) -> np.ndarray:
    """(n_rows, dim) float32 from qsgd_encode's output: +-level * (norm / S). Untrusted input:
    ValueError unless every norm is finite and >= 0 and every level <= S."""
    levels = _check_int("levels", levels, 1, 127)
    packed2 = _as_rows("packed", packed, np.uint8)
    _check_int("dim", dim, 0, 2**62)
    if out is None:
        out = np.empty((packed2.shape[0], dim), dtype=np.float32)
    return _core.qsgd_decode(norm, packed2, levels, out, resolve_threads(n_threads, out.size))


def bucket_encode(x: np.ndarray, bits: int, bucket: int, seed: int = 0, step: int = 0,
                  peer0: int = 0, out: tuple | None = None, n_threads: int | None = None):
    """Bucketed min/max quantization (as in CGX): bits in {4, 8}, bucket values per scale.

    Returns ``(lo, scale, packed)``: lo and scale (n_rows, ceil(dim / bucket)) float32 (bucket
    min and (max - min) / (2^bits - 1); the last bucket may be short), packed (n_rows,
    ceil(dim * bits / 8)) uint8 codes q = floor(t) + (u < t - floor t), t = min((x - lo) / scale,
    2^bits - 1) (all 0 when scale is 0). NaN/inf -> ValueError.
    """
    x2 = _as_rows("x", x, np.float32)
    if bits not in (4, 8) or isinstance(bits, (bool, np.bool_)):
        raise ValueError(f"bits must be 4 or 8, got {bits!r}")
    bucket = _check_int("bucket", bucket, 1, 1 << 24)
    seed, step, peer0 = _check_seed(seed, step, peer0)
    rows, dim = x2.shape
    nb = -(-dim // bucket)
    lo, scale, packed = _out_tuple(out, [((rows, nb), np.float32), ((rows, nb), np.float32),
                                         ((rows, (dim * bits + 7) // 8), np.uint8)])
    _core.bucket_encode(x2, int(bits), bucket, seed, step, peer0, lo, scale, packed,
                        resolve_threads(n_threads, x2.size))
    return lo, scale, packed


def bucket_decode(lo: np.ndarray, scale: np.ndarray, packed: np.ndarray, bits: int, bucket: int,
                  dim: int, out: np.ndarray | None = None,
                  n_threads: int | None = None) -> np.ndarray:
    """(n_rows, dim) float32 = lo + q * scale per bucket. Untrusted input: ValueError unless lo is
    finite, scale finite and >= 0, and lo + (2^bits - 1) * scale finite."""
    if bits not in (4, 8) or isinstance(bits, (bool, np.bool_)):
        raise ValueError(f"bits must be 4 or 8, got {bits!r}")
    bucket = _check_int("bucket", bucket, 1, 1 << 24)
    _check_int("dim", dim, 0, 2**32)
    packed2 = _as_rows("packed", packed, np.uint8)
    if out is None:
        out = np.empty((packed2.shape[0], dim), dtype=np.float32)
    return _core.bucket_decode(_as_rows("lo", lo, np.float32), _as_rows("scale", scale, np.float32),
                               packed2, int(bits), bucket, out, resolve_threads(n_threads, out.size))


def sign_encode(x: np.ndarray, out: tuple | None = None, n_threads: int | None = None):
    """Scaled sign (EF-signSGD): returns ``(scale, packed)``, scale (n_rows,) float32 =
    ||row||_1 / dim (float64 sums), packed (n_rows, ceil(dim / 8)) uint8, bit j = x_j < 0,
    little-endian. NaN/inf -> ValueError."""
    x2 = _as_rows("x", x, np.float32)
    rows, dim = x2.shape
    scale, packed = _out_tuple(out, [((rows,), np.float32), ((rows, (dim + 7) // 8), np.uint8)])
    _core.sign_encode(x2, scale, packed, resolve_threads(n_threads, x2.size))
    return scale, packed


def sign_decode(scale: np.ndarray, packed: np.ndarray, dim: int, out: np.ndarray | None = None,
                n_threads: int | None = None) -> np.ndarray:
    """(n_rows, dim) float32 = -scale where the bit is set, +scale elsewhere; ValueError unless
    every scale is finite and >= 0."""
    packed2 = _as_rows("packed", packed, np.uint8)
    _check_int("dim", dim, 0, 2**62)
    if out is None:
        out = np.empty((packed2.shape[0], dim), dtype=np.float32)
    return _core.sign_decode(scale, packed2, out, resolve_threads(n_threads, out.size))


def int8_encode(x: np.ndarray, seed: int = 0, step: int = 0, peer0: int = 0,
                out: tuple | None = None, n_threads: int | None = None):
    """int8 with stochastic rounding: returns ``(scale, q)``, scale (n_rows,) float32 =
    max|row| / 127, q (n_rows, dim) int8 = sign(x) (floor a + (u < a - floor a)),
    a = min(|x| / scale, 127) (stochastic rounding of the magnitude). NaN/inf -> ValueError."""
    x2 = _as_rows("x", x, np.float32)
    seed, step, peer0 = _check_seed(seed, step, peer0)
    rows, dim = x2.shape
    scale, q = _out_tuple(out, [((rows,), np.float32), ((rows, dim), np.int8)])
    _core.int8_encode(x2, seed, step, peer0, scale, q, resolve_threads(n_threads, x2.size))
    return scale, q


def int8_decode(scale: np.ndarray, q: np.ndarray, out: np.ndarray | None = None,
                n_threads: int | None = None) -> np.ndarray:
    """(n_rows, dim) float32 = q * scale; ValueError unless every scale is finite and >= 0 and
    every q in [-127, 127]."""
    q2 = _as_rows("q", q, np.int8)
    if out is None:
        out = np.empty(q2.shape, dtype=np.float32)
    return _core.int8_decode(scale, q2, out, resolve_threads(n_threads, out.size))
# <<< ops quant

# >>> ops gemm
from dataclasses import dataclass

#: int32 accumulation of int8 products is exact while k * 128 * 128 <= 2^31 - 1.
GEMM_S8_MAX_K = (2**31 - 1) // (128 * 128)


@dataclass(frozen=True, eq=False)
class PackedB:
    """B (k, n) int8 packed once for the microkernel of one layout, reusable across calls.

    data: the packed panels (uint8 bytes, 64-byte aligned, read-only); colsum: int32 column sums
    of B (padded to whole panels; the VNNI kernel subtracts 128 * colsum). layout: "s16" (generic,
    avx2 and avx512 paths) or "vnni" (avx512vnni). A PackedB is rejected by a path of another
    layout: pack again with :func:`pack_b_s8`.
    """

    data: np.ndarray
    colsum: np.ndarray
    k: int
    n: int
    layout: str

    @property
    def shape(self) -> tuple[int, int]:
        return (self.k, self.n)

    def __repr__(self) -> str:
        return f"PackedB(k={self.k}, n={self.n}, layout={self.layout!r}, nbytes={self.data.nbytes})"


def _gemm_check_k(k: int, name: str) -> None:
    if k > GEMM_S8_MAX_K:
        raise ValueError(f"{name}: k={k} exceeds {GEMM_S8_MAX_K}, the largest k for which int32 "
                         "accumulation of int8 products is exact")


def _gemm_int8_matrix(name: str, x) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(x).__name__}")
    if x.dtype != np.int8:
        raise TypeError(f"{name} must have dtype int8, got {x.dtype}")
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-dimensional, got shape {x.shape}")
    return x


def pack_b_s8(b: np.ndarray, n_threads: int | None = None) -> PackedB:
    """Packs B (k, n) int8, C-contiguous, for the active path's microkernel (see PackedB)."""
    b = _gemm_int8_matrix("b", b)
    k, n = b.shape
    _gemm_check_k(k, "pack_b_s8")
    lay = _core.gemm_s8_layout()
    nbytes = -(-n // lay["nr"]) * lay["nr"] * -(-k // lay["kg"]) * lay["kg"] * lay["b_elem"]
    buf = np.empty(nbytes + 64, dtype=np.uint8)
    off = (-buf.ctypes.data) % 64
    data = buf[off:off + nbytes]
    colsum = np.empty(-(-n // lay["nr"]) * lay["nr"], dtype=np.int32)
    _core.gemm_s8_pack_b(b, data, colsum, resolve_threads(n_threads, b.size))
    data.flags.writeable = False
    colsum.flags.writeable = False
    return PackedB(data, colsum, int(k), int(n), lay["name"])


def _gemm_packed(b, n_threads) -> PackedB:
    if isinstance(b, PackedB):
        return b
    if isinstance(b, np.ndarray):
        return pack_b_s8(b, n_threads)
    raise TypeError(f"b must be a numpy.ndarray or a PackedB, got {type(b).__name__}")


def _gemm_a(a) -> tuple[np.ndarray, bool]:
    if not isinstance(a, np.ndarray):
        raise TypeError(f"a must be a numpy.ndarray, got {type(a).__name__}")
    if a.dtype != np.int8:
        raise TypeError(f"a must have dtype int8, got {a.dtype}")
    if a.ndim == 1:
        return a.reshape(1, -1), True
    if a.ndim != 2:
        raise ValueError(f"a must be 1-D (k,) or 2-D (m, k), got shape {a.shape}")
    return a, False


def gemm_s8(a: np.ndarray, b, out: np.ndarray | None = None,
            n_threads: int | None = None) -> np.ndarray:
    """Exact int8 GEMM: int32 (m, n) = a (m, k) int8 @ b, b a (k, n) int8 array (packed on the fly)
    or a :class:`PackedB`. Equal to ``a.astype(np.int64) @ b.astype(np.int64)`` for k <=
    GEMM_S8_MAX_K (131071; larger k -> ValueError). a: C-contiguous (a 1-D a is one row and gives
    a 1-D result). out: optional (m, n) int32, not overlapping a. Any thread count, same result."""
    a2, vec = _gemm_a(a)
    _gemm_check_k(a2.shape[1], "gemm_s8")
    pb = _gemm_packed(b, n_threads)
    if out is None:
        out = np.empty((pb.n,) if vec else (a2.shape[0], pb.n), dtype=np.int32)
    elif not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy.ndarray, got {type(out).__name__}")
    out2 = out.reshape(1, -1) if (vec and out.ndim == 1) else out
    _core.gemm_s8(a2, pb.data, pb.colsum, pb.layout, pb.k, pb.n, out2, resolve_threads(n_threads))
    return out


def gemm_s8_f32(a: np.ndarray, packed_b, a_scale: float, b_scale, bias: np.ndarray | None = None,
                out: np.ndarray | None = None, n_threads: int | None = None) -> np.ndarray:
    """Int8 GEMM with fused dequantization: float32 (m, n) = (a @ b as exact int32) * a_scale *
    b_scale[col] + bias[col]. b_scale: a float (per tensor) or an (n,) float32 array (per output
    column); bias: (n,) float32 or None. Applied to each int32 tile before it is stored. a_scale
    and b_scale must be finite (ValueError for NaN/inf)."""
    a2, vec = _gemm_a(a)
    _gemm_check_k(a2.shape[1], "gemm_s8_f32")
    pb = _gemm_packed(packed_b, n_threads)
    a_scale = float(a_scale)
    if not np.isfinite(a_scale):
        raise ValueError(f"a_scale must be finite, got {a_scale}")
    if isinstance(b_scale, np.ndarray):
        bs = b_scale
    elif isinstance(b_scale, (float, int, np.floating, np.integer)) and not isinstance(b_scale, bool):
        bs = np.array([b_scale], dtype=np.float32)
    else:
        raise TypeError(f"b_scale must be a float or a float32 array, got {type(b_scale).__name__}")
    if out is None:
        out = np.empty((pb.n,) if vec else (a2.shape[0], pb.n), dtype=np.float32)
    elif not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy.ndarray, got {type(out).__name__}")
    out2 = out.reshape(1, -1) if (vec and out.ndim == 1) else out
    _core.gemm_s8_f32(a2, pb.data, pb.colsum, pb.layout, pb.k, pb.n, a_scale, bs, bias, out2,
                      resolve_threads(n_threads))
    return out


_GEMM_ROUNDING = {"nearest": 0, "stochastic": 1}


def _gemm_axis(x: np.ndarray, axis) -> int:
    """The C axis (-1 per tensor, 0 per row, 1 per column) of the 2-D view of x."""
    if axis is None:
        return -1
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be None or an int, got {type(axis).__name__}")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis} is out of range for an array of shape {x.shape}")
    return 1 if x.ndim == 1 else int(axis) % 2


def _gemm_scale(scale, c_axis: int) -> np.ndarray:
    if c_axis < 0:
        if isinstance(scale, np.ndarray) and scale.size == 1:
            scale = scale.reshape(())
        if isinstance(scale, (np.ndarray, bool, np.bool_)) or \
                not isinstance(scale, (float, int, np.floating, np.integer)):
            raise TypeError("scale must be a float when axis is None, or a 1-D float32 array with "
                            f"axis set, got {type(scale).__name__}")
        return np.array([scale], dtype=np.float32)
    if not isinstance(scale, np.ndarray):
        raise TypeError(f"scale must be a float32 array when axis is set, got {type(scale).__name__}")
    return scale


def quantize_s8(x: np.ndarray, scale, axis: int | None = None, rounding: str = "nearest",
                seed: int = 0, step: int = 0, peer0: int = 0, out: np.ndarray | None = None,
                n_threads: int | None = None) -> np.ndarray:
    """int8 codes q = clamp(round(x * (1 / scale)), -127, 127) of float32 x (1-D or 2-D), in float32
    with the reciprocal rounded once.

    scale: a float (per tensor, axis None) or a float32 array of length x.shape[axis] (per channel:
    axis 0 one scale per row, axis 1 one per column), every value finite and >= FLT_MIN (2^-126,
    so that 1 / scale is finite). rounding:
    "nearest" (half to even) or "stochastic" (floor(v) + (u < v - floor(v)), u from the counter RNG
    keyed by (seed, step, peer0 + row, column); unbiased, thread-count independent). NaN/inf in x
    -> ValueError."""
    x2 = _as_rows("x", x, np.float32)
    c_axis = _gemm_axis(x, axis)
    sc = _gemm_scale(scale, c_axis)
    if rounding not in _GEMM_ROUNDING:
        raise ValueError(f"rounding must be 'nearest' or 'stochastic', got {rounding!r}")
    seed, step, peer0 = _check_seed(seed, step, peer0)
    if out is None:
        out = np.empty(x.shape, dtype=np.int8)
    elif not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy.ndarray, got {type(out).__name__}")
    out2 = out.reshape(x2.shape) if out.shape == x.shape and out.flags.c_contiguous else out
    _core.quantize_s8(x2, sc, c_axis, _GEMM_ROUNDING[rounding], seed, step, peer0, out2,
                      resolve_threads(n_threads, x2.size))
    return out


def dequantize_s8(q: np.ndarray, scale, axis: int | None = None, out: np.ndarray | None = None,
                  n_threads: int | None = None) -> np.ndarray:
    """float32 = q * scale, scale shaped as for :func:`quantize_s8` (every value finite:
    ValueError for NaN/inf)."""
    q2 = _as_rows("q", q, np.int8)
    c_axis = _gemm_axis(q, axis)
    sc = _gemm_scale(scale, c_axis)
    if out is None:
        out = np.empty(q.shape, dtype=np.float32)
    elif not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy.ndarray, got {type(out).__name__}")
    out2 = out.reshape(q2.shape) if out.shape == q.shape and out.flags.c_contiguous else out
    _core.dequantize_s8(q2, sc, c_axis, out2, resolve_threads(n_threads, q2.size))
    return out


def absmax_scale(x: np.ndarray, axis: int | None = None, n_threads: int | None = None):
    """max|x| / 127 (float32; at least FLT_MIN = 2^-126, so a channel whose max is tiny or
    subnormal still gets a scale quantize_s8 accepts; 1 where every |x| is 0): a np.float32 for
    the whole x (axis None), or
    an array of length x.shape[axis] with one scale per channel along axis, ready for
    :func:`quantize_s8` with the same axis. NaN/inf -> ValueError."""
    x2 = _as_rows("x", x, np.float32)
    c_axis = _gemm_axis(x, axis)
    n = 1 if c_axis < 0 else x2.shape[c_axis]
    out = np.empty(n, dtype=np.float32)
    _core.absmax_scale(x2, c_axis, out, resolve_threads(n_threads, x2.size))
    return out[0] if c_axis < 0 else out
def _gemm_batch_a(a, n_peers: int) -> np.ndarray:
    if not isinstance(a, np.ndarray):
        raise TypeError(f"a must be a numpy.ndarray, got {type(a).__name__}")
    if a.dtype != np.int8:
        raise TypeError(f"a must have dtype int8, got {a.dtype}")
    if a.ndim == 2:  # shared by every peer: a stride-0 view, never a copy
        return np.broadcast_to(a, (n_peers, *a.shape))
    if a.ndim != 3:
        raise ValueError(f"a must be 2-D (m, k) shared or 3-D (P, m, k), got shape {a.shape}")
    return a


def _gemm_batch_b(b) -> np.ndarray:
    if not isinstance(b, np.ndarray):
        raise TypeError(f"b must be a numpy.ndarray, got {type(b).__name__}")
    if b.dtype != np.int8:
        raise TypeError(f"b must have dtype int8, got {b.dtype}")
    if b.ndim != 3:
        raise ValueError(f"b must be 3-D (P, k, n), got shape {b.shape}")
    return b


def _gemm_batch_out(out, shape, dtype) -> np.ndarray:
    if out is None:
        return np.empty(shape, dtype=dtype)
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy.ndarray, got {type(out).__name__}")
    if out.dtype != dtype:
        raise TypeError(f"out must have dtype {np.dtype(dtype).name}, got {out.dtype}")
    if out.shape != shape:
        raise ValueError(f"out must have shape {shape}, got {out.shape}")
    return out


def gemm_s8_batched(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None,
                    n_threads: int | None = None, *, trans_a: bool = False,
                    trans_b: bool = False) -> np.ndarray:
    """Exact int8 GEMM per peer: int32 (P, m, n) with out[p] = a[p] @ b[p].

    a: (P, m, k) int8, or (m, k) shared by every peer (read once, never copied); b: (P, k, n) int8.
    trans_a / trans_b: a is stored (P, k, m) / b is stored (P, n, k) and read transposed (no copy).
    Every operand and out may be a strided view (peer and row strides >= 0) whose last axis is
    contiguous, e.g. a peer-batched slice of a parameter matrix. B is packed per peer inside the
    call. Bit-identical for every thread count and ISA path."""
    b = _gemm_batch_b(b)
    a = _gemm_batch_a(a, b.shape[0])
    m = a.shape[2] if trans_a else a.shape[1]
    n = b.shape[1] if trans_b else b.shape[2]
    out = _gemm_batch_out(out, (b.shape[0], m, n), np.int32)
    return _core.gemm_s8_batched(a, b, bool(trans_a), bool(trans_b), None, None, None, out,
                                 resolve_threads(n_threads))


def _gemm_peer_scale(name: str, s, n_peers: int, n: int | None) -> np.ndarray:
    arr = np.asarray(s)
    if arr.dtype.kind not in "fiu":
        raise TypeError(f"{name} must be a float or a float32 array, got dtype {arr.dtype}")
    if arr.ndim == 0:
        arr = np.full(n_peers, arr, dtype=np.float32)
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    shapes = [(n_peers,)] + ([(n_peers, n)] if n is not None else [])
    if arr.shape not in shapes:
        raise ValueError(f"{name} must have shape {' or '.join(map(str, shapes))}, got {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite")
    return arr


def gemm_s8_batched_f32(a: np.ndarray, b: np.ndarray, a_scale, b_scale,
                        out: np.ndarray | None = None, n_threads: int | None = None, *,
                        bias: np.ndarray | None = None, trans_a: bool = False,
                        trans_b: bool = False) -> np.ndarray:
    """Batched int8 GEMM with fused dequantization: float32 (P, m, n) with
    ``out[p] = float32(a[p] @ b[p] as exact int32) * (a_scale[p] * b_scale[p][col]) + bias[p][col]``.

    a_scale: (P,) per-peer scales of A (a float: the same for every peer); b_scale: (P,) per peer
    and tensor, or (P, n) per peer and output column; bias: (P, n) float32 or None. Operands as
    for :func:`gemm_s8_batched`; out may be a strided view (e.g. the gradient rows of a layer)."""
    b = _gemm_batch_b(b)
    n_peers = b.shape[0]
    a = _gemm_batch_a(a, n_peers)
    m = a.shape[2] if trans_a else a.shape[1]
    n = b.shape[1] if trans_b else b.shape[2]
    a_s = _gemm_peer_scale("a_scale", a_scale, n_peers, None)
    b_s = _gemm_peer_scale("b_scale", b_scale, n_peers, n)
    if bias is not None:
        if not isinstance(bias, np.ndarray):
            raise TypeError(f"bias must be a numpy.ndarray or None, got {type(bias).__name__}")
        if bias.dtype != np.float32:
            raise TypeError(f"bias must have dtype float32, got {bias.dtype}")
        bias = np.ascontiguousarray(bias)
    out = _gemm_batch_out(out, (n_peers, m, n), np.float32)
    return _core.gemm_s8_batched(a, b, bool(trans_a), bool(trans_b), a_s, b_s, bias, out,
                                 resolve_threads(n_threads))


@dataclass(frozen=True)
class DenseCodes:
    """The int8 codes a fused int8 dense forward keeps for its backward: xq (1 or P, B, I) and sx
    (1 or P,) of the inputs (1: an input shared by every peer), wq (P, I, O) and sw (P,) of the
    weights; per-peer, per-tensor absmax scales, nearest rounding."""

    xq: np.ndarray
    sx: np.ndarray
    wq: np.ndarray
    sw: np.ndarray


def gemm_s8_dense_forward(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None,
                          relu: bool = False, out: np.ndarray | None = None,
                          n_threads: int | None = None,
                          codes: DenseCodes | None = None) -> tuple[np.ndarray, DenseCodes]:
    """int8 dense layer forward in one C pass per peer: quantizes x[p] and w[p] (per tensor, absmax
    scale, nearest even), multiplies the codes exactly and dequantizes in the epilogue:
    ``y[p] = act(float32(xq[p] @ wq[p]) * (sx[p] * sw[p]) + bias[p])``, act the ReLU of
    ``np.maximum(v, 0)`` when ``relu``. x (P or 1, B, I) float32 (1: shared, quantized once), w
    (P, I, O) with each peer's matrix contiguous (rows of the parameter matrix are), bias (P, O) or
    None. Peers are split between threads; the result does not depend on their count. Returns y
    (P, B, O) and the codes for :func:`gemm_s8_dense_backward`, written into ``codes`` when
    given (arrays of the shapes and dtypes the kernel would allocate, C-contiguous, reused across
    calls by the int8 Dense layer: fresh ones are page faults every step). NumPy reference:
    decentlearn._reference.gemm.gemm_s8_dense_forward."""
    x = _f32_operand("x", x, 3)
    w = _f32_operand("w", w, 3)
    if bias is not None:
        bias = _f32_operand("bias", bias, 2)
    n_peers, n_in, n_out = w.shape
    if x.shape[0] == n_peers and n_peers > 1 and x.strides[0] == 0:
        x = x[:1]  # a stride-0 broadcast is one shared input
    px, batch = x.shape[0], x.shape[1]
    if out is None:
        out = np.empty((n_peers, batch, n_out), dtype=np.float32)
    if codes is None:
        codes = DenseCodes(np.empty((px, batch, n_in), np.int8), np.empty(px, np.float32),
                           np.empty((n_peers, n_in, n_out), np.int8),
                           np.empty(n_peers, np.float32))
    elif not isinstance(codes, DenseCodes):
        raise TypeError(f"codes must be a DenseCodes or None, got {type(codes).__name__}")
    _core.gemm_s8_dense_forward(x, w, bias, bool(relu), out, codes.xq, codes.sx, codes.wq,
                                codes.sw, resolve_threads(n_threads))
    return out, codes


def gemm_s8_dense_backward(dy: np.ndarray, codes: DenseCodes, gw: np.ndarray, gb: np.ndarray,
                           dx: np.ndarray | None = None, mask: np.ndarray | None = None,
                           seed: int = 0, step: int = 0, peer0: int = 0,
                           n_threads: int | None = None) -> None:
    """Backward of :func:`gemm_s8_dense_forward` from its codes, in one C pass per peer:
    ``gb[p] = sum_b dy[p]`` (in batch order), dyq = stochastic codes of dy[p] (per tensor, scale
    sdy, counter RNG keyed by (seed, step, peer0 + p) at index b * O + o),
    ``gw[p] = float32(xq[p]^T @ dyq) * (sx[p] * sdy) + 0`` and, when dx is given,
    ``dx[p] = (float32(dyq @ wq[p]^T) * (sdy * sw[p]) + 0) * (mask[p] > 0)`` (mask None: no
    factor). dy (P, B, O), dx and mask (P, B, I), gw (P, I, O) with each peer's matrix contiguous,
    gb (P, O): float32 views with contiguous rows. NumPy reference:
    decentlearn._reference.gemm.gemm_s8_dense_backward."""
    if not isinstance(codes, DenseCodes):
        raise TypeError(f"codes must be the DenseCodes of gemm_s8_dense_forward, got "
                        f"{type(codes).__name__}")
    dy = _f32_operand("dy", dy, 3)
    seed, step, peer0 = _check_seed(seed, step, peer0)
    _core.gemm_s8_dense_backward(dy, codes.xq, codes.sx, codes.wq, codes.sw, mask, gw, gb, dx,
                                 seed, step, peer0, resolve_threads(n_threads))
# <<< ops gemm


# >>> ops limits: the kernels decentlearn.bench measures the machine's limits with
def copy_f32(src: np.ndarray, dst: np.ndarray, n_threads: int | None = None) -> np.ndarray:
    """``dst[...] = src`` with non-temporal (streaming) stores: the copy bandwidth limit of
    decentlearn.bench. Both C-contiguous float32 arrays of the same size, not overlapping.
    NumPy reference: ``np.copyto(dst, src)``."""
    if not isinstance(src, np.ndarray) or not isinstance(dst, np.ndarray):
        raise TypeError("copy_f32: src and dst must be numpy arrays")
    return _core.copy_f32(src, dst, resolve_threads(n_threads, src.size))


def read_f32(src: np.ndarray, n_threads: int | None = None) -> int:
    """XOR of the 32-bit words of the C-contiguous float32 array ``src``, read once: the read-only
    bandwidth limit of decentlearn.bench (the floor of kernels that must read their input).
    NumPy reference: ``np.bitwise_xor.reduce(src.view(np.uint32).ravel())``."""
    if not isinstance(src, np.ndarray):
        raise TypeError("read_f32: src must be a numpy array")
    out = np.zeros(1, np.uint32)
    _core.read_f32(src, out, resolve_threads(n_threads, src.size))
    return int(out[0])


def consensus_sums(X: np.ndarray, out: np.ndarray | None = None,
                   n_threads: int | None = None) -> np.ndarray:
    """``(sum_ic X_ic^2, sum_c (sum_i X_ic)^2)`` as a (2,) float64 array, in one pass over the
    C-contiguous (P, D) float32 ``X`` (float64 accumulation in fixed column chunks: the result
    does not depend on ``n_threads``). The consensus distance is ``out[0] / P - out[1] / P^2``
    up to cancellation. NumPy reference: decentlearn._reference.metrics.consensus_sums."""
    if not isinstance(X, np.ndarray):
        raise TypeError(f"consensus_sums: X must be a numpy array, got {type(X).__name__}")
    if out is None:
        out = np.empty(2, dtype=np.float64)
    return _core.consensus_sums(X, out, resolve_threads(n_threads, X.size))


def peak_s8(reps: int, n_threads: int | None = None) -> tuple[int, int]:
    """Runs the active ISA path's in-register int8 multiply-add loop (SSE2/AVX2 ``pmaddwd`` or
    AVX-512 VNNI ``vpdpbusd``, the instruction its ``gemm_s8`` uses) ``reps`` times on each thread;
    returns (operations done, 2 per multiply-add; a checksum). Time it to get the int8 peak."""
    return _core.peak_s8(_check_int("reps", reps, 0, 1 << 40), resolve_threads(n_threads))
# <<< ops limits

# >>> ops nn: peer-batched float32 GEMMs of the layers and the SGD step (csrc/nn_impl.h, optim.c)


def _f32_operand(name: str, a: object, ndim: int) -> np.ndarray:
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(a).__name__}")
    if a.dtype != np.float32:
        raise TypeError(f"{name} must have dtype float32, got {a.dtype}")
    if a.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-dimensional, got shape {a.shape}")
    return a


def nn_gemm(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None, accumulate: bool = False,
            n_threads: int | None = None) -> np.ndarray:
    """float32 ``out[p] (+)= a[p] @ b[p]`` for P peers. ``a`` (P or 1, M, K) and ``b`` (P or 1, K,
    N) may be any views with non-negative strides (transposes, stride-0 broadcasts, rows of the
    parameter matrix); a leading 1 is shared by every peer. ``out`` (P, M, N) needs contiguous rows
    and must not overlap the inputs; ``accumulate`` adds to it instead of overwriting."""
    a = _f32_operand("a", a, 3)
    b = _f32_operand("b", b, 3)
    n_peers = max(a.shape[0], b.shape[0])
    if out is None:
        if accumulate:
            raise ValueError("accumulate=True needs out")
        out = np.empty((n_peers, a.shape[1], b.shape[2]), dtype=np.float32)
    out = _f32_operand("out", out, 3)
    return _core.nn_gemm(a, b, out, bool(accumulate), resolve_threads(n_threads))


def dense_forward(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, relu: bool = False,
                  out: np.ndarray | None = None, n_threads: int | None = None) -> np.ndarray:
    """``y[p] = x[p] @ w[p] + bias[p]`` (then ReLU when ``relu``) for a peer-batched dense layer:
    x (P or 1, B, I), w (P, I, O) with each peer's matrix contiguous, bias (P, O) or None; returns y
    (P, B, O) float32."""
    x = _f32_operand("x", x, 3)
    w = _f32_operand("w", w, 3)
    if out is None:
        out = np.empty((w.shape[0], x.shape[1], w.shape[2]), dtype=np.float32)
    return _core.nn_dense_forward(x, w, bias, bool(relu), out, resolve_threads(n_threads))


def dense_backward(x: np.ndarray, w: np.ndarray, dy: np.ndarray, gw: np.ndarray, gb: np.ndarray,
                   dx: np.ndarray | None = None, mask: np.ndarray | None = None,
                   n_threads: int | None = None) -> None:
    """Backward pass of :func:`dense_forward` (without its ReLU): writes ``gb[p] = dy[p].sum(0)``,
    ``gw[p] = x[p]^T dy[p]`` and, when ``dx`` is given, ``dx[p] = dy[p] @ w[p]^T``, zeroed where
    ``mask[p] <= 0`` (the ReLU of the layer below, fused; None: no mask)."""
    _core.nn_dense_backward(x, w, dy, mask, gw, gb, dx, resolve_threads(n_threads))


def sgd_step(params: np.ndarray, grad: np.ndarray, buf: np.ndarray | None, lr: float,
             momentum: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
             frozen: np.ndarray | None = None, n_threads: int | None = None) -> None:
    """One SGD step in place over the (P, dim) float32 ``params`` (and momentum ``buf``), in one
    pass: ``g = grad + wd p; buf = mu buf + g; g = g + mu buf`` (Nesterov) or ``g = buf``;
    ``p -= lr g``. ``frozen`` (P,) int64: row r keeps its first frozen[r] entries (buf zeroed)."""
    if frozen is not None:
        frozen = np.ascontiguousarray(frozen, dtype=np.int64)
    _core.sgd_step(params, grad, buf, float(lr), float(momentum), float(weight_decay),
                   bool(nesterov), frozen, resolve_threads(n_threads, params.size))


# <<< ops nn

# >>> ops conv: im2col / col2im of Conv2d on wide rows (csrc/conv.c)


def _conv_groups(name: str, a: object, ndim: int, dtypes: tuple) -> np.ndarray:
    """``a`` with a leading group axis (added when it has ndim - 1 axes: one shared group)."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(a).__name__}")
    if a.dtype not in dtypes:
        raise TypeError(f"{name} must have dtype {' or '.join(str(np.dtype(d)) for d in dtypes)}, "
                        f"got {a.dtype}")
    if a.ndim == ndim - 1:
        return a[None]
    if a.ndim != ndim:
        raise ValueError(f"{name} must be {ndim - 1}- or {ndim}-dimensional, got shape {a.shape}")
    return a


def _conv_ints(b0, b1, k, wp, run) -> tuple[int, ...]:
    big = 1 << 62
    return (_check_int("b0", b0, 0, big), _check_int("b1", b1, 0, big), _check_int("k", k, 1, big),
            _check_int("wp", wp, 1, big), _check_int("run", run, 0, big))


def conv_unfold(xp: np.ndarray, b0: int, b1: int, cols: np.ndarray, k: int, wp: int, run: int,
                n_threads: int | None = None) -> np.ndarray:
    """im2col on wide rows: row ``(c, i, j)`` of ``cols`` (G, R, ld) gets, for each sample b in
    [b0, b1), the ``run`` elements of image (c, b) of ``xp`` (G, C, B, L) starting at ``i * wp +
    j`` (columns ``(b - b0) * run`` on). G may be absent from both (one shared input). float32 or
    int8, both C-contiguous. Returns the ``cols[..., :(b1 - b0) * run]`` view; rows past C*k*k
    are left alone."""
    x4 = _conv_groups("xp", xp, 4, (np.float32, np.int8))
    c3 = _conv_groups("cols", cols, 3, (x4.dtype,))
    b0, b1, k, wp, run = _conv_ints(b0, b1, k, wp, run)
    nb = b1 - b0
    work = x4.shape[0] * x4.shape[1] * max(nb, 0) * k * k * run
    _core.conv_unfold(x4, b0, b1, c3, k, wp, run, resolve_threads(n_threads, work))
    return cols[..., : nb * run]


def conv_fold(dcols: np.ndarray, dxp: np.ndarray, b0: int, b1: int, k: int, wp: int, run: int,
              n_threads: int | None = None) -> np.ndarray:
    """col2im on wide rows, the adjoint of :func:`conv_unfold`: adds row ``(c, i, j)`` of the
    float32 ``dcols`` (G, R, ld) into image (c, b) of ``dxp`` (G, C, B, L) at ``i * wp + j``, for b
    in [b0, b1), kernel offsets in order (i, j) — the same order for every element whatever the
    thread count. Returns ``dxp``."""
    d3 = _conv_groups("dcols", dcols, 3, (np.float32,))
    x4 = _conv_groups("dxp", dxp, 4, (np.float32,))
    b0, b1, k, wp, run = _conv_ints(b0, b1, k, wp, run)
    nb = b1 - b0
    work = x4.shape[0] * x4.shape[1] * max(nb, 0) * k * k * run
    _core.conv_fold(d3, x4, b0, b1, k, wp, run, resolve_threads(n_threads, work))
    return dxp


# <<< ops conv

# >>> ops pool: 2x2 max pooling of MaxPool2d (csrc/pool.c)


def maxpool2_forward(x: np.ndarray, w: int, y: np.ndarray | None = None,
                     code: np.ndarray | None = None, n_threads: int | None = None) -> np.ndarray:
    """2x2 max pooling, stride 2, of the first ``w`` (even) columns of the rows of the C-contiguous
    float32 ``x`` (n, h, ld) (h even): ``y`` (n, h/2, w/2) gets the maxima (NaN propagates, as in
    np.maximum) and ``code`` (n, h/2, w/2) uint8, when given, which element won (bit 0 the right
    column, bits 1 and 2 the lower row in the left and right column; ties go left, then up), for
    :func:`maxpool2_backward`. Returns y. NumPy reference: decentlearn._reference.pool."""
    if not isinstance(x, np.ndarray) or x.ndim != 3:
        raise ValueError(f"maxpool2_forward: x must be a 3-D numpy array (n, h, ld), got "
                         f"{getattr(x, 'shape', type(x).__name__)}")
    w = _check_int("w", w, 0, x.shape[2])
    if y is None:
        y = np.empty((x.shape[0], x.shape[1] // 2, w // 2), np.float32)
    _core.maxpool2_forward(x, w, y, code, resolve_threads(n_threads, x.shape[0] * x.shape[1] * w))
    return y


def maxpool2_backward(dy: np.ndarray, code: np.ndarray, dx: np.ndarray | None = None,
                      n_threads: int | None = None) -> np.ndarray:
    """The gradient of :func:`maxpool2_forward`: ``dx`` (n, 2 h2, 2 w2) float32 from ``dy`` (n,
    h2, w2) float32 and the forward pass's ``code``; each window's gradient goes to the element
    that won, the other three get ``dy - dy`` or ``0 * dy`` (zero for finite dy). Returns dx."""
    if not isinstance(dy, np.ndarray) or dy.ndim != 3:
        raise ValueError(f"maxpool2_backward: dy must be a 3-D numpy array (n, h2, w2), got "
                         f"{getattr(dy, 'shape', type(dy).__name__)}")
    if dx is None:
        dx = np.empty((dy.shape[0], 2 * dy.shape[1], 2 * dy.shape[2]), np.float32)
    _core.maxpool2_backward(dy, code, dx, resolve_threads(n_threads, 4 * dy.size))
    return dx
# <<< ops pool
