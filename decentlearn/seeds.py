"""Counter-based random numbers: every random choice of the network model and of the per-round
graphs is a pure function of (seed, stream, keys) through splitmix64's finaliser, so it does not
depend on the order in which it is asked for, on the thread count, or on which other quantities
were drawn. Each independent random quantity has its own stream number (``STREAM_*``); the
numbers are part of the results (changing one changes every run that draws from it). Pure numpy,
the bottom layer: :mod:`decentlearn.network` and :mod:`decentlearn.topology` both draw from here.
"""

from __future__ import annotations

import numpy as np

__all__ = ["hash_u64", "hash_uniform"]

# Streams of the counter-based hash (independent random quantities).
(STREAM_LATENCY, STREAM_BANDWIDTH, STREAM_COMPUTE, STREAM_DROP, STREAM_STRAGGLER, STREAM_LEAVE,
 STREAM_JOIN, STREAM_MATCH, STREAM_ASYNC, STREAM_PARTNER, STREAM_BATCH) = range(11)

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix64(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on a uint64 array (wraps modulo 2^64, as intended)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def hash_u64(seed: int, stream: int, *keys) -> np.ndarray:
    """A uint64 per element of the broadcast ``keys`` (non-negative ints), a pure function of
    (seed, stream, keys): the counter-based generator behind every random choice here."""
    arrays = np.broadcast_arrays(*(np.atleast_1d(np.asarray(k, dtype=np.int64)) for k in keys))
    h = _mix64(np.atleast_1d(np.uint64(seed & 0xFFFFFFFFFFFFFFFF)) + _GOLDEN
               * np.atleast_1d(np.uint64(stream + 1)))
    for a in arrays:
        h = _mix64(h + _GOLDEN + a.astype(np.uint64))
    return h


def hash_uniform(seed: int, stream: int, *keys) -> np.ndarray:
    """Uniform float64 numbers in [0, 1), 53 random bits each, keyed like :func:`hash_u64`."""
    return (hash_u64(seed, stream, *keys) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
