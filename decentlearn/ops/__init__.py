"""The one door to the C kernels of ``decentlearn._core``: each function resolves defaults
(threads, ``out=``, topology rounds), checks its arguments and calls one kernel.

One module per kernel family, named like its C file in ``csrc/`` and its NumPy twin in
``decentlearn/_reference/`` (the twin has the same function names and signatures, and is the
spec the tests compare against): ``gossip``, ``rng``, ``bitpack``, ``natural``, ``topk``,
``stc``, ``quant``, ``gemm_s8``, ``nn``, ``optim``, ``conv``, ``pool``, ``loss``, ``norm``, ``act``, ``copy``,
``consensus``, ``peak``. ``threads`` resolves thread counts, ``args`` holds the argument
checks (and the aligned allocation) the families share and ``isa`` names and forces the kernels'
instruction-set path. Every public name is re-exported here, so callers write
``ops.gossip(W, X)``; note that ``ops.gossip``, ``ops.bitpack``, ``ops.topk`` and ``ops.gemm_s8``
are the functions, which shadow the modules of the same name.

Thread counts follow scikit-learn's convention: None means min(OpenMP's maximum, CPU count), which
honours OMP_NUM_THREADS; -1 means every CPU; positive values are capped at the CPU count (more
threads than CPUs only add overhead; the C glue caps them the same way); 0 is an error. Seeds and
steps are integers in [0, 2**64 - 1] and peer0 in [0, 2**63 - 1]: out-of-range values raise a
ValueError naming the argument, they are never wrapped.
Work too small to pay for a thread team runs on one thread. Results never depend on the thread
count.
"""

from decentlearn.ops.threads import (
    SMALL_WORK, cpu_count, get_num_threads, resolve_threads, set_num_threads,
)
from decentlearn.ops.args import (
    PEER_MAX, SEED_MAX, as_rows, check_int, check_seed, empty_aligned, f32_operand,
)
from decentlearn.ops.gossip import as_csr, gossip, spmm
from decentlearn.ops.rng import hash_smallest, rng_fast_u32, rng_u32
from decentlearn.ops.bitpack import bitpack, bitunpack
from decentlearn.ops.natural import (
    check_dither_p, check_dither_s, dither_decode, dither_encode, natural_decode, natural_encode,
)
from decentlearn.ops.topk import randk, scatter, threshold, topk
from decentlearn.ops.stc import (
    GOLOMB_MAX_B, golomb_decode, golomb_encode, golomb_max_bytes, golomb_param, stc_ternary,
)
from decentlearn.ops.quant import (
    bucket_decode, bucket_encode, int8_decode, int8_encode, qsgd_bits, qsgd_decode, qsgd_encode,
    sign_decode, sign_encode,
)
from decentlearn.ops.gemm_s8 import (
    GEMM_S8_MAX_K, absmax_scale, DenseCodes, dequantize_s8, gemm_s8, gemm_s8_batched,
    gemm_s8_batched_f32, gemm_s8_dense_backward, gemm_s8_dense_forward, gemm_s8_f32, pack_b_s8,
    PackedB, quantize_s8,
)
from decentlearn.ops.nn import dense_backward, dense_forward, nn_gemm
from decentlearn.ops.optim import adam_step, lamb_step, lars_step, sgd_step
from decentlearn.ops.conv import (conv_crop, conv_fold, conv_forward, conv_forward_params,
                                  conv_forward_s8,
                                  conv_input_grad, conv_input_grad_s8, conv_pad, conv_param_grad,
                                  conv_unfold, conv_weight_grad, conv_weight_grad_s8)
from decentlearn.ops.pool import maxpool2_backward, maxpool2_forward
from decentlearn.ops.loss import exp_f32, softmax_xent
from decentlearn.ops.norm import groupnorm_backward, groupnorm_forward
from decentlearn.ops.act import relu_backward, relu_forward
from decentlearn.ops.copy import (axpby, batch_indices, copy2d, copy_f32, count_ne_rows,
                                  place_rows, put_rows, read_f32, scale_rows, shuffle_segments,
                                  swap_axes12, take_rows)
from decentlearn.ops.consensus import (column_mean, consensus_distance, consensus_sums,
                                       row_sums, weighted_column_sum)
from decentlearn.ops.peak import peak_s8, peak_s8_window
from decentlearn.ops.isa import active_isa, supported_isas, using_isa

__all__ = [
    "SMALL_WORK", "cpu_count", "get_num_threads", "resolve_threads", "set_num_threads", "PEER_MAX",
    "SEED_MAX", "as_rows", "check_int", "check_seed", "empty_aligned", "f32_operand", "as_csr",
    "gossip", "spmm",
    "hash_smallest", "rng_fast_u32", "rng_u32", "bitpack", "bitunpack", "check_dither_p",
    "check_dither_s",
    "dither_decode", "dither_encode", "natural_decode", "natural_encode", "randk", "scatter", "threshold",
    "topk", "GOLOMB_MAX_B", "golomb_decode", "golomb_encode", "golomb_max_bytes", "golomb_param",
    "stc_ternary", "bucket_decode", "bucket_encode", "int8_decode", "int8_encode", "qsgd_bits", "qsgd_decode",
    "qsgd_encode", "sign_decode", "sign_encode", "GEMM_S8_MAX_K", "absmax_scale", "DenseCodes",
    "dequantize_s8", "gemm_s8", "gemm_s8_batched", "gemm_s8_batched_f32", "gemm_s8_dense_backward",
    "gemm_s8_dense_forward", "gemm_s8_f32", "pack_b_s8", "PackedB", "quantize_s8",
    "dense_backward", "dense_forward", "nn_gemm", "sgd_step", "adam_step", "lamb_step", "lars_step", "conv_crop", "conv_fold", "conv_forward", "conv_forward_params", "conv_pad", "conv_param_grad", "conv_unfold", "conv_weight_grad",
    "conv_input_grad",
    "conv_input_grad_s8",
    "conv_forward_s8",
    "conv_weight_grad_s8",
    "maxpool2_backward", "maxpool2_forward", "exp_f32", "softmax_xent", "groupnorm_backward", "groupnorm_forward", "relu_backward", "relu_forward", "axpby", "scale_rows", "copy2d", "count_ne_rows", "place_rows", "put_rows", "copy_f32", "read_f32", "swap_axes12", "take_rows", "batch_indices", "shuffle_segments", "consensus_sums", "consensus_distance", "column_mean", "weighted_column_sum", "row_sums",
    "peak_s8", "peak_s8_window", "active_isa", "supported_isas", "using_isa",
]
