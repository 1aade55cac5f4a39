"""Thread counts of every kernel, resolved once here.

Thread counts follow scikit-learn's convention: None means min(OpenMP's maximum, CPU count), which
honours OMP_NUM_THREADS; -1 means every CPU; positive values are capped at the CPU count (more
threads than CPUs only add overhead; the C glue caps them the same way), or at
DECENTLEARN_THREAD_CAP when that holds an integer in [1, 4096] (the test suite sets it, so that a
test asking for 3 or 16 threads runs that many on a 2-core machine); 0 is an error.
Work too small to pay for a thread team runs on one thread. Results never depend on the thread
count.
"""

from __future__ import annotations

import os

import numpy as np

from decentlearn._core import config as _core_config

__all__ = ["SMALL_WORK", "cpu_count", "set_num_threads", "get_num_threads", "resolve_threads"]


#: Below this many float32 elements a kernel runs on one thread.
SMALL_WORK = 1 << 15


def cpu_count() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _thread_cap() -> int:
    """The most threads an explicit count gets: DECENTLEARN_THREAD_CAP if it is an integer in
    [1, 4096], else the CPU count (the C glue's cpu_limit reads the same variable)."""
    env = os.environ.get("DECENTLEARN_THREAD_CAP")
    if env is not None and env.strip().isdigit() and 1 <= int(env) <= 4096:
        return int(env)
    return cpu_count()


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
    if work is not None and work < SMALL_WORK and (
            n_threads is None or (type(n_threads) is int and (n_threads >= 1 or n_threads == -1))):
        return 1  # checked enough: None, -1 or a positive int all give one thread here
    if n_threads is None and _NUM_THREADS is not None:
        n = _NUM_THREADS
    elif n_threads is None:
        n = min(_core_config()["omp_max_threads"], cpu_count())
    elif isinstance(n_threads, (bool, np.bool_)) or not isinstance(n_threads, (int, np.integer)):
        raise TypeError(f"n_threads must be an int or None, got {type(n_threads).__name__}")
    elif n_threads == -1:
        n = cpu_count()
    elif n_threads < 1:
        raise ValueError(f"n_threads must be None, -1 or >= 1, got {n_threads}")
    else:
        n = min(int(n_threads), _thread_cap())
    if work is not None and work < SMALL_WORK:
        return 1
    return max(1, n)
