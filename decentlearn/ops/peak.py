"""The int8 multiply-add peak loop of the active ISA path (csrc/peak.c, peak_impl.h), timed by
decentlearn.experiments.bench.

NumPy twin (the operation count it reports): decentlearn/_reference/peak.py.
"""

from __future__ import annotations

from decentlearn._core import peak_s8 as _core_peak_s8
from decentlearn.ops.args import check_int
from decentlearn.ops.threads import resolve_threads

__all__ = ["peak_s8"]


def peak_s8(reps: int, n_threads: int | None = None) -> tuple[int, int]:
    """Runs the active ISA path's in-register int8 multiply-add loop (SSE2/AVX2 ``pmaddwd`` or
    AVX-512 VNNI ``vpdpbusd``, the instruction its ``gemm_s8`` uses) ``reps`` times on each thread;
    returns (operations done, 2 per multiply-add; a checksum). Time it to get the int8 peak."""
    return _core_peak_s8(check_int("reps", reps, 0, 1 << 40), resolve_threads(n_threads))
