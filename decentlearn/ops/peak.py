"""The int8 multiply-add peak loop of the active ISA path (csrc/peak.c, peak_impl.h), timed by
decentlearn.experiments.bench.

NumPy twin (the operation count it reports): decentlearn/_reference/peak.py.
"""

from __future__ import annotations

from decentlearn._core import peak_s8 as _core_peak_s8
from decentlearn._core import peak_s8_window as _core_peak_s8_window
from decentlearn.ops.args import check_int
from decentlearn.ops.threads import resolve_threads

__all__ = ["peak_s8", "peak_s8_window"]


def peak_s8(reps: int, n_threads: int | None = None) -> tuple[int, int]:
    """Runs the active ISA path's in-register int8 multiply-add loop (SSE2/AVX2 ``pmaddwd``,
    AVX-512 VNNI ``vpdpbusd`` or AMX ``tdpbssd`` on resident tiles, the instruction its
    ``gemm_s8`` uses) ``reps`` times on each thread;
    returns (operations done, 2 per multiply-add; a checksum). Time it to get the int8 peak."""
    return _core_peak_s8(check_int("reps", reps, 0, 1 << 40), resolve_threads(n_threads))


def peak_s8_window(chunk: int, seconds: float, n_threads: int | None = None
                   ) -> tuple[int, float, int]:
    """Runs the active path's peak loop on every thread at once over one time window: each thread
    repeats ``chunk`` iterations (as ``peak_s8(chunk, 1)``) until ``seconds`` after a common start
    taken after a barrier; returns (operations done by all threads, seconds from the start to
    the last thread's end, a checksum). ops / seconds is the team's int8 rate, not held back by
    a thread that shared its core (a fixed amount of work per thread is timed by the slowest)."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
            or not 0 <= seconds <= 3600:
        raise ValueError(f"seconds must be a number in [0, 3600], got {seconds!r}")
    return _core_peak_s8_window(check_int("chunk", chunk, 1, 1 << 40), float(seconds),
                                resolve_threads(n_threads))
