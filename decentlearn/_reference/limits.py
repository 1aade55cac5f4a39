"""NumPy references of the limit kernels that decentlearn.bench measures the machine with.

``copy_f32(src, dst)`` is ``np.copyto``; ``read_f32(src)`` the XOR of src's 32-bit words.
``peak_ops(isa, reps, threads)`` is the operation count the int8 peak loop (csrc/peak_impl.h)
reports: reps x 8 unrolled steps x 12 accumulators x the operations of one instruction (2 per
multiply-add) x threads.
"""

from __future__ import annotations

import numpy as np

#: Operations (2 per multiply-add) of one step of the peak loop, per ISA path.
OPS_PER_INSTRUCTION = {"generic": 16, "avx2": 32, "avx512": 32, "avx512vnni": 128}


def copy_f32(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    np.copyto(dst, src)
    return dst


def read_f32(src: np.ndarray) -> int:
    return int(np.bitwise_xor.reduce(np.ascontiguousarray(src).view(np.uint32).ravel(),
                                     initial=np.uint32(0)))


def peak_ops(isa: str, reps: int, threads: int) -> int:
    return reps * 8 * 12 * OPS_PER_INSTRUCTION[isa] * threads
