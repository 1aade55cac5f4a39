"""The operation count of the int8 peak loop of csrc/peak.c (peak_impl.h), the first value that
decentlearn.ops.peak_s8 returns: ``peak_ops(isa, reps, threads)`` is reps x 8 unrolled steps x 12
accumulators x the operations of one instruction (2 per multiply-add) x threads; the amx loop
(csrc/peak_amx.c) issues the same 96 tdpbssd per iteration (16 unrolled x 6 C tiles), each
16 x 16 x 64 multiply-adds. (The loop's checksum is a by-product of its registers and has no
reference.)
"""

from __future__ import annotations

#: Operations (2 per multiply-add) of one step of the peak loop, per ISA path.
OPS_PER_INSTRUCTION = {"generic": 16, "avx2": 32, "avx512": 32, "avx512vnni": 128,
                       "amx": 2 * 16 * 16 * 64}


def peak_ops(isa: str, reps: int, threads: int) -> int:
    return reps * 8 * 12 * OPS_PER_INSTRUCTION[isa] * threads
