/* dispatch.c: chooses each kernel's instruction-set path once, at import.
 *
 * avx512vnni runs every kernel's AVX-512 build except those with a VNNI build of their own.
 * The best path the CPU supports is taken (asked with __builtin_cpu_supports, which also checks
 * that the OS saves the wider registers); DECENTLEARN_ISA=generic|avx2|avx512 or dl_set_isa()
 * forces one, so tests can cover every path on one machine.
 */
#include <string.h>

#include "dl.h"

#if defined(__x86_64__) || defined(_M_X64)
#define DL_X86 1
#endif

static const char *const isa_names[DL_ISA_COUNT] = {"generic", "avx2", "avx512", "avx512vnni"};

/* Each ISA's table lists its kernels with designated initializers; a family adds its members to
 * all three tables in its own sections (X86 builds only for the avx2/avx512 symbols). */
#ifdef DL_X86
#define DL_X86_ONLY(sym) sym
#else
#define DL_X86_ONLY(sym) NULL
#endif

static const dl_dispatch_t tables[DL_ISA_COUNT] = {
    {
        .isa = DL_ISA_GENERIC,
        .name = "generic",
        .gossip_csr_f32 = dl_gossip_csr_f32_generic,
        /* >>> table-generic natural */
        .natural_encode_f32 = dl_natural_encode_f32_generic,
        .natural_decode_f32 = dl_natural_decode_f32_generic,
        .natural_dither_encode_f32 = dl_natural_dither_encode_f32_generic,
        .natural_dither_decode_f32 = dl_natural_dither_decode_f32_generic,
        /* <<< table-generic natural */
        /* >>> table-generic topk */
        .topk_filter_f32 = dl_topk_filter_f32_generic,
        .topk_randfilter_u32 = dl_topk_randfilter_u32_generic,
        .topk_count_f32 = dl_topk_count_f32_generic,
        /* <<< table-generic topk */
        /* >>> table-generic quant */
        .qsgd_encode_f32 = dl_qsgd_encode_f32_generic,
        .bucket_encode_f32 = dl_bucket_encode_f32_generic,
        .sign_encode_f32 = dl_sign_encode_f32_generic,
        .int8_encode_f32 = dl_int8_encode_f32_generic,
        /* <<< table-generic quant */
        /* >>> table-generic gemm */
        .gemm_s8_layout = &dl_gemm_s8_layout_s16,
        .gemm_s8_pack_b = dl_gemm_s8_pack_b_generic,
        .gemm_s8 = dl_gemm_s8_generic,
        .gemm_qnearest_f32 = dl_gemm_qnearest_f32_generic,
        .gemm_absmax_bits_f32 = dl_gemm_absmax_bits_f32_generic,
        .gemm_s8_batched = dl_gemm_s8_batched_generic,
        /* <<< table-generic gemm */
    },
    {
        .isa = DL_ISA_AVX2,
        .name = "avx2",
        .gossip_csr_f32 = DL_X86_ONLY(dl_gossip_csr_f32_avx2),
        /* >>> table-avx2 natural */
        .natural_encode_f32 = DL_X86_ONLY(dl_natural_encode_f32_avx2),
        .natural_decode_f32 = DL_X86_ONLY(dl_natural_decode_f32_avx2),
        .natural_dither_encode_f32 = DL_X86_ONLY(dl_natural_dither_encode_f32_avx2),
        .natural_dither_decode_f32 = DL_X86_ONLY(dl_natural_dither_decode_f32_avx2),
        /* <<< table-avx2 natural */
        /* >>> table-avx2 topk */
        .topk_filter_f32 = DL_X86_ONLY(dl_topk_filter_f32_avx2),
        .topk_randfilter_u32 = DL_X86_ONLY(dl_topk_randfilter_u32_avx2),
        .topk_count_f32 = DL_X86_ONLY(dl_topk_count_f32_avx2),
        /* <<< table-avx2 topk */
        /* >>> table-avx2 quant */
        .qsgd_encode_f32 = DL_X86_ONLY(dl_qsgd_encode_f32_avx2),
        .bucket_encode_f32 = DL_X86_ONLY(dl_bucket_encode_f32_avx2),
        .sign_encode_f32 = DL_X86_ONLY(dl_sign_encode_f32_avx2),
        .int8_encode_f32 = DL_X86_ONLY(dl_int8_encode_f32_avx2),
        /* <<< table-avx2 quant */
        /* >>> table-avx2 gemm */
        .gemm_s8_layout = &dl_gemm_s8_layout_s16,
        .gemm_s8_pack_b = DL_X86_ONLY(dl_gemm_s8_pack_b_avx2),
        .gemm_s8 = DL_X86_ONLY(dl_gemm_s8_avx2),
        .gemm_qnearest_f32 = dl_gemm_qnearest_f32_generic,
        .gemm_absmax_bits_f32 = dl_gemm_absmax_bits_f32_generic,
        .gemm_s8_batched = DL_X86_ONLY(dl_gemm_s8_batched_avx2),
        /* <<< table-avx2 gemm */
    },
    {
        .isa = DL_ISA_AVX512,
        .name = "avx512",
        .gossip_csr_f32 = DL_X86_ONLY(dl_gossip_csr_f32_avx512),
        /* >>> table-avx512 natural */
        .natural_encode_f32 = DL_X86_ONLY(dl_natural_encode_f32_avx512),
        .natural_decode_f32 = DL_X86_ONLY(dl_natural_decode_f32_avx512),
        .natural_dither_encode_f32 = DL_X86_ONLY(dl_natural_dither_encode_f32_avx512),
        .natural_dither_decode_f32 = DL_X86_ONLY(dl_natural_dither_decode_f32_avx512),
        /* <<< table-avx512 natural */
        /* >>> table-avx512 topk */
        .topk_filter_f32 = DL_X86_ONLY(dl_topk_filter_f32_avx512),
        .topk_randfilter_u32 = DL_X86_ONLY(dl_topk_randfilter_u32_avx512),
        .topk_count_f32 = DL_X86_ONLY(dl_topk_count_f32_avx512),
        /* <<< table-avx512 topk */
        /* >>> table-avx512 quant */
        .qsgd_encode_f32 = DL_X86_ONLY(dl_qsgd_encode_f32_avx512),
        .bucket_encode_f32 = DL_X86_ONLY(dl_bucket_encode_f32_avx512),
        .sign_encode_f32 = DL_X86_ONLY(dl_sign_encode_f32_avx512),
        .int8_encode_f32 = DL_X86_ONLY(dl_int8_encode_f32_avx512),
        /* <<< table-avx512 quant */
        /* >>> table-avx512 gemm */
        /* no VNNI: the AVX2 build (vpmaddwd on int16) is the exact int8 GEMM here */
        .gemm_s8_layout = &dl_gemm_s8_layout_s16,
        .gemm_s8_pack_b = DL_X86_ONLY(dl_gemm_s8_pack_b_avx2),
        .gemm_s8 = DL_X86_ONLY(dl_gemm_s8_avx2),
        .gemm_qnearest_f32 = dl_gemm_qnearest_f32_generic,
        .gemm_absmax_bits_f32 = dl_gemm_absmax_bits_f32_generic,
        .gemm_s8_batched = DL_X86_ONLY(dl_gemm_s8_batched_avx2),
        /* <<< table-avx512 gemm */
    },
    {
        .isa = DL_ISA_AVX512VNNI,
        .name = "avx512vnni",
        .gossip_csr_f32 = DL_X86_ONLY(dl_gossip_csr_f32_avx512),
        /* >>> table-avx512vnni-reuses-avx512 natural */
        .natural_encode_f32 = DL_X86_ONLY(dl_natural_encode_f32_avx512),
        .natural_decode_f32 = DL_X86_ONLY(dl_natural_decode_f32_avx512),
        .natural_dither_encode_f32 = DL_X86_ONLY(dl_natural_dither_encode_f32_avx512),
        .natural_dither_decode_f32 = DL_X86_ONLY(dl_natural_dither_decode_f32_avx512),
        /* <<< table-avx512vnni-reuses-avx512 natural */
        /* >>> table-avx512vnni-reuses-avx512 topk */
        .topk_filter_f32 = DL_X86_ONLY(dl_topk_filter_f32_avx512),
        .topk_randfilter_u32 = DL_X86_ONLY(dl_topk_randfilter_u32_avx512),
        .topk_count_f32 = DL_X86_ONLY(dl_topk_count_f32_avx512),
        /* <<< table-avx512vnni-reuses-avx512 topk */
        /* >>> table-avx512vnni-reuses-avx512 quant */
        .qsgd_encode_f32 = DL_X86_ONLY(dl_qsgd_encode_f32_avx512),
        .bucket_encode_f32 = DL_X86_ONLY(dl_bucket_encode_f32_avx512),
        .sign_encode_f32 = DL_X86_ONLY(dl_sign_encode_f32_avx512),
        .int8_encode_f32 = DL_X86_ONLY(dl_int8_encode_f32_avx512),
        /* <<< table-avx512vnni-reuses-avx512 quant */
        /* >>> table-avx512vnni gemm */
        .gemm_s8_layout = DL_X86_ONLY(&dl_gemm_s8_layout_vnni),
        .gemm_s8_pack_b = DL_X86_ONLY(dl_gemm_s8_pack_b_avx512vnni),
        .gemm_s8 = DL_X86_ONLY(dl_gemm_s8_avx512vnni),
        .gemm_qnearest_f32 = DL_X86_ONLY(dl_gemm_qnearest_f32_avx512vnni),
        .gemm_absmax_bits_f32 = DL_X86_ONLY(dl_gemm_absmax_bits_f32_avx512vnni),
        .gemm_s8_batched = DL_X86_ONLY(dl_gemm_s8_batched_avx512vnni),
        /* <<< table-avx512vnni gemm */
    },
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
