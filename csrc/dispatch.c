/* dispatch.c: chooses each kernel's instruction-set path once, at import.
 *
 * avx512vnni runs every kernel's AVX-512 build except those with a VNNI build of their own.
 * The best path the CPU supports is taken (asked with __builtin_cpu_supports, which also checks
 * that the OS saves the wider registers); DECENTLEARN_ISA=generic|avx2|avx512|avx512vnni or
 * dl_set_isa() forces one, so tests can cover every path on one machine.
 */
#include <string.h>

#include "dl.h"

#if defined(__x86_64__) || defined(_M_X64)
#define DL_X86 1
#endif

static const char *const isa_names[DL_ISA_COUNT] = {"generic", "avx2", "avx512", "avx512vnni"};

/* The tables. Kernels with one build per ISA are listed once, in DL_ISA_KERNELS (a new kernel
 * family adds its members there); `W` keeps x86-only symbols out of other builds. AVX-512 without
 * VNNI uses the AVX2 int8 GEMM (vpmaddwd on int16); avx512vnni runs every AVX-512 build plus its
 * own VNNI GEMM. */
#ifdef DL_X86
#define DL_X86_ONLY(sym) sym
#else
#define DL_X86_ONLY(sym) NULL
#endif
#define DL_ANY(sym) sym

#define DL_ISA_KERNELS(isa, W)                                                                     \
    .gossip_csr_f32 = W(dl_gossip_csr_f32_##isa),                                                 \
    .natural_encode_f32 = W(dl_natural_encode_f32_##isa),                                         \
    .natural_decode_f32 = W(dl_natural_decode_f32_##isa),                                         \
    .natural_dither_encode_f32 = W(dl_natural_dither_encode_f32_##isa),                           \
    .natural_dither_decode_f32 = W(dl_natural_dither_decode_f32_##isa),                           \
    .topk_filter_f32 = W(dl_topk_filter_f32_##isa),                                               \
    .topk_randfilter_u32 = W(dl_topk_randfilter_u32_##isa),                                       \
    .topk_count_f32 = W(dl_topk_count_f32_##isa),                                                 \
    .topk_compact_u32 = W(dl_topk_compact_u32_##isa),                                             \
    .qsgd_encode_f32 = W(dl_qsgd_encode_f32_##isa),                                               \
    .bucket_encode_f32 = W(dl_bucket_encode_f32_##isa),                                           \
    .sign_encode_f32 = W(dl_sign_encode_f32_##isa),                                               \
    .int8_encode_f32 = W(dl_int8_encode_f32_##isa)

/* The float32 GEMMs of the layers (nn_impl.h): a portable and an AVX2 build; AVX-512 runs AVX2's. */
#define DL_NN_KERNELS(isa, W)                                                                      \
    .nn_gemm_f32 = W(dl_nn_gemm_f32_##isa), .nn_dense_forward_f32 = W(dl_nn_dense_forward_f32_##isa), \
    .nn_dense_backward_f32 = W(dl_nn_dense_backward_f32_##isa)

/* The exact int8 GEMM on the int16 layout (generic, AVX2) and its quantizer cores. */
#define DL_GEMM_S16_KERNELS(isa, W)                                                                \
    .gemm_s8_layout = &dl_gemm_s8_layout_s16, .gemm_s8_pack_b = W(dl_gemm_s8_pack_b_##isa),        \
    .gemm_s8 = W(dl_gemm_s8_##isa), .gemm_qnearest_f32 = W(dl_gemm_qnearest_f32_##isa),            \
    .gemm_absmax_bits_f32 = W(dl_gemm_absmax_bits_f32_##isa),                                     \
    .gemm_qstoch_f32 = W(dl_gemm_qstoch_f32_##isa),                                               \
    .gemm_s8_batched = W(dl_gemm_s8_batched_##isa),                                               \
    .gemm_s8_dense_forward = W(dl_gemm_s8_dense_forward_##isa),                                   \
    .gemm_s8_dense_backward = W(dl_gemm_s8_dense_backward_##isa), .peak_s8 = W(dl_peak_s8_##isa)

static const dl_dispatch_t tables[DL_ISA_COUNT] = {
    {.isa = DL_ISA_GENERIC, .name = "generic", DL_ISA_KERNELS(generic, DL_ANY),
     DL_GEMM_S16_KERNELS(generic, DL_ANY), DL_NN_KERNELS(generic, DL_ANY)},
    {.isa = DL_ISA_AVX2, .name = "avx2", DL_ISA_KERNELS(avx2, DL_X86_ONLY),
     DL_GEMM_S16_KERNELS(avx2, DL_X86_ONLY), DL_NN_KERNELS(avx2, DL_X86_ONLY)},
    {.isa = DL_ISA_AVX512, .name = "avx512", DL_ISA_KERNELS(avx512, DL_X86_ONLY),
     DL_GEMM_S16_KERNELS(avx2, DL_X86_ONLY), DL_NN_KERNELS(avx2, DL_X86_ONLY)},
    {.isa = DL_ISA_AVX512VNNI, .name = "avx512vnni", DL_ISA_KERNELS(avx512, DL_X86_ONLY),
     .gemm_s8_layout = DL_X86_ONLY(&dl_gemm_s8_layout_vnni),
     .gemm_s8_pack_b = DL_X86_ONLY(dl_gemm_s8_pack_b_avx512vnni),
     .gemm_s8 = DL_X86_ONLY(dl_gemm_s8_avx512vnni),
     .gemm_qnearest_f32 = DL_X86_ONLY(dl_gemm_qnearest_f32_avx512vnni),
     .gemm_absmax_bits_f32 = DL_X86_ONLY(dl_gemm_absmax_bits_f32_avx512vnni),
     .gemm_qstoch_f32 = DL_X86_ONLY(dl_gemm_qstoch_f32_avx512vnni),
     .gemm_s8_batched = DL_X86_ONLY(dl_gemm_s8_batched_avx512vnni),
     .gemm_s8_dense_forward = DL_X86_ONLY(dl_gemm_s8_dense_forward_avx512vnni),
     .gemm_s8_dense_backward = DL_X86_ONLY(dl_gemm_s8_dense_backward_avx512vnni),
     .peak_s8 = DL_X86_ONLY(dl_peak_s8_avx512vnni),
     DL_NN_KERNELS(avx2, DL_X86_ONLY)},
};

static const dl_dispatch_t *active = NULL;

const char *dl_isa_name(dl_isa_t isa) {
    return (isa >= 0 && isa < DL_ISA_COUNT) ? isa_names[isa] : "unknown";
}

int dl_isa_supported(dl_isa_t isa) {
    switch (isa) {
    case DL_ISA_GENERIC:
        return 1;
#ifdef DL_X86
    case DL_ISA_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case DL_ISA_AVX512:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("fma");
    case DL_ISA_AVX512VNNI:
        return dl_isa_supported(DL_ISA_AVX512) && __builtin_cpu_supports("avx512vnni");
#endif
    default:
        return 0;
    }
}

int dl_set_isa(dl_isa_t isa) {
    if (isa < 0 || isa >= DL_ISA_COUNT || !dl_isa_supported(isa)) return DL_E_ARG;
    active = &tables[isa];
    return DL_OK;
}

const dl_dispatch_t *dl_dispatch(void) {
    if (active == NULL) {
        dl_isa_t best = DL_ISA_GENERIC;
        for (int i = DL_ISA_COUNT - 1; i > 0; i--)
            if (dl_isa_supported((dl_isa_t)i)) {
                best = (dl_isa_t)i;
                break;
            }
        active = &tables[best];
    }
    return active;
}
