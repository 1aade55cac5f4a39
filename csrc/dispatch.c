/* dispatch.c: chooses each kernel's instruction-set path once, at import.
 *
 * avx512vnni runs every kernel's AVX-512 build except those with a VNNI build of their own; amx
 * runs every avx512vnni kernel except the int8 GEMMs (gemm_s8, batched, the fused dense layer) and
 * the int8 peak loop, which have AMX tile builds on the same packed-B layout. The best path the
 * CPU and OS support is taken (asked with __builtin_cpu_supports, which also checks that the OS
 * saves the wider registers; for AMX, CPUID leaf 7 AMX-TILE/AMX-INT8, XCR0 bits 17-18 and, on
 * Linux, the per-process permission for the tile data, requested once with arch_prctl);
 * DECENTLEARN_ISA=generic|avx2|avx512|avx512vnni|amx or dl_set_isa() forces one, so tests can
 * cover every path on one machine.
 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* syscall() */
#endif
#include <stdio.h>
#include <string.h>

#include "dl.h"

#if defined(__x86_64__) || defined(_M_X64)
#define DL_X86 1
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif

static const char *const isa_names[DL_ISA_COUNT] = {"generic", "avx2", "avx512", "avx512vnni",
                                                           "amx"};

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
    .int8_encode_f32 = W(dl_int8_encode_f32_##isa),                                               \
    .optim_adam_span = W(dl_optim_adam_span_##isa),                                               \
    .optim_lamb_span = W(dl_optim_lamb_span_##isa), .optim_sumsq = W(dl_optim_sumsq_##isa)

/* The float32 GEMMs of the layers (nn_impl.h): a portable, an AVX2 and an AVX-512 build. */
#define DL_NN_KERNELS(isa, W)                                                                      \
    .nn_gemm_f32 = W(dl_nn_gemm_f32_##isa), .nn_dense_forward_f32 = W(dl_nn_dense_forward_f32_##isa), \
    .nn_dense_backward_f32 = W(dl_nn_dense_backward_f32_##isa),                                   \
    .nn_conv_forward_f32 = W(dl_nn_conv_forward_f32_##isa),                                       \
    .nn_conv_wgrad_f32 = W(dl_nn_conv_wgrad_f32_##isa),                                           \
    .nn_conv_dgrad_f32 = W(dl_nn_conv_dgrad_f32_##isa)

/* The exact int8 GEMM on the int16 layout (generic, AVX2) and its quantizer cores. */
#define DL_GEMM_S16_KERNELS(isa, W)                                                                \
    .gemm_s8_layout = &dl_gemm_s8_layout_s16, .gemm_s8_pack_b = W(dl_gemm_s8_pack_b_##isa),        \
    .gemm_s8 = W(dl_gemm_s8_##isa), .gemm_qnearest_f32 = W(dl_gemm_qnearest_f32_##isa),            \
    .gemm_absmax_bits_f32 = W(dl_gemm_absmax_bits_f32_##isa),                                     \
    .gemm_qstoch_f32 = W(dl_gemm_qstoch_f32_##isa),                                               \
    .gemm_s8_batched = W(dl_gemm_s8_batched_##isa),                                               \
    .gemm_s8_dense_forward = W(dl_gemm_s8_dense_forward_##isa),                                   \
    .gemm_s8_dense_backward = W(dl_gemm_s8_dense_backward_##isa),                                 \
    .gemm_s8_conv_dgrad = W(dl_gemm_s8_conv_dgrad_##isa),                                         \
    .gemm_s8_conv_fwd = W(dl_gemm_s8_conv_fwd_##isa),                                             \
    .gemm_s8_conv_wgrad = W(dl_gemm_s8_conv_wgrad_##isa), .peak_s8 = W(dl_peak_s8_##isa)

static const dl_dispatch_t tables[DL_ISA_COUNT] = {
    {.isa = DL_ISA_GENERIC, .name = "generic", DL_ISA_KERNELS(generic, DL_ANY),
     DL_GEMM_S16_KERNELS(generic, DL_ANY), DL_NN_KERNELS(generic, DL_ANY)},
    {.isa = DL_ISA_AVX2, .name = "avx2", DL_ISA_KERNELS(avx2, DL_X86_ONLY),
     DL_GEMM_S16_KERNELS(avx2, DL_X86_ONLY), DL_NN_KERNELS(avx2, DL_X86_ONLY)},
    {.isa = DL_ISA_AVX512, .name = "avx512", DL_ISA_KERNELS(avx512, DL_X86_ONLY),
     DL_GEMM_S16_KERNELS(avx2, DL_X86_ONLY), DL_NN_KERNELS(avx512, DL_X86_ONLY)},
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
     .gemm_s8_conv_dgrad = DL_X86_ONLY(dl_gemm_s8_conv_dgrad_avx512vnni),
     .gemm_s8_conv_fwd = DL_X86_ONLY(dl_gemm_s8_conv_fwd_avx512vnni),
     .gemm_s8_conv_wgrad = DL_X86_ONLY(dl_gemm_s8_conv_wgrad_avx512vnni),
     .peak_s8 = DL_X86_ONLY(dl_peak_s8_avx512vnni),
     DL_NN_KERNELS(avx512, DL_X86_ONLY)},
    {.isa = DL_ISA_AMX, .name = "amx", DL_ISA_KERNELS(avx512, DL_X86_ONLY),
     .gemm_s8_layout = DL_X86_ONLY(&dl_gemm_s8_layout_vnni),
     .gemm_s8_pack_b = DL_X86_ONLY(dl_gemm_s8_pack_b_avx512vnni),
     .gemm_s8 = DL_X86_ONLY(dl_gemm_s8_amx),
     .gemm_qnearest_f32 = DL_X86_ONLY(dl_gemm_qnearest_f32_avx512vnni),
     .gemm_absmax_bits_f32 = DL_X86_ONLY(dl_gemm_absmax_bits_f32_avx512vnni),
     .gemm_qstoch_f32 = DL_X86_ONLY(dl_gemm_qstoch_f32_avx512vnni),
     .gemm_s8_batched = DL_X86_ONLY(dl_gemm_s8_batched_amx),
     .gemm_s8_dense_forward = DL_X86_ONLY(dl_gemm_s8_dense_forward_amx),
     .gemm_s8_dense_backward = DL_X86_ONLY(dl_gemm_s8_dense_backward_amx),
     .gemm_s8_conv_dgrad = DL_X86_ONLY(dl_gemm_s8_conv_dgrad_amx),
     .gemm_s8_conv_fwd = DL_X86_ONLY(dl_gemm_s8_conv_fwd_amx),
     .gemm_s8_conv_wgrad = DL_X86_ONLY(dl_gemm_s8_conv_wgrad_amx),
     .peak_s8 = DL_X86_ONLY(dl_peak_s8_amx),
     DL_NN_KERNELS(avx512, DL_X86_ONLY)},
};

static const dl_dispatch_t *active = NULL;

const char *dl_isa_name(dl_isa_t isa) {
    return (isa >= 0 && isa < DL_ISA_COUNT) ? isa_names[isa] : "unknown";
}

#ifdef DL_X86
/* AMX-TILE and AMX-INT8 usable by this process: CPUID.(7,0):EDX bits 24 and 25, the OS enables
 * the tile state in XCR0 (bits 17 TILECFG and 18 TILEDATA), and on Linux the kernel grants this
 * process the tile data (ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA; without it the first tile
 * instruction faults). Asked once; the answer is kept. */
static int amx_usable(void) {
    static int known = -1;
    if (known >= 0) return known;
    unsigned a = 0, b = 0, c = 0, d = 0;
    int ok = dl_gemm_s8_amx_built && __get_cpuid(1, &a, &b, &c, &d) && (c >> 27 & 1) /* OSXSAVE */;
    if (ok) ok = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 24 & 1) && (d >> 25 & 1);
    if (ok) {
        unsigned lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        (void)hi;
        ok = (lo & (3u << 17)) == (3u << 17);
    }
#if defined(__linux__)
    if (ok) ok = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */,
                         18 /* XFEATURE_XTILEDATA */) == 0;
#endif
    known = ok;
    return known;
}
#endif

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
    case DL_ISA_AMX:
        return dl_isa_supported(DL_ISA_AVX512VNNI) && amx_usable();
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

/* The last-level cache's size in bytes: the highest level listed under
 * /sys/devices/system/cpu/cpu0/cache (its `level` and `size` files, sizes such as "32768K"), 0 when
 * unknown. Kernels keep outputs that fit in a part of it in the caches (gossip's stores). Read at
 * import; dl_set_llc_bytes overrides it (tests, benchmarks). */
static int64_t llc_bytes = -1;

static int64_t read_llc_bytes(void) {
    int64_t best = 0;
#if defined(__linux__)
    int best_level = 0;
    for (int i = 0; i < 16; i++) {
        char path[80];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (f == NULL) break;
        int level = 0;
        const int got_level = fscanf(f, "%d", &level) == 1;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        f = fopen(path, "r");
        if (f == NULL) continue;
        long long v = 0;
        char unit = 0;
        const int got = fscanf(f, "%lld%c", &v, &unit);
        fclose(f);
        if (!got_level || got < 1 || v <= 0 || v > (1LL << 30)) continue;
        const int64_t scale = unit == 'K' ? 1 << 10 : unit == 'M' ? 1 << 20 : unit == 'G' ? 1 << 30 : 1;
        if (level > best_level) best_level = level, best = (int64_t)v * scale;
    }
#endif
    return best;
}

int64_t dl_llc_bytes(void) {
    if (llc_bytes < 0) llc_bytes = read_llc_bytes();
    return llc_bytes;
}

int64_t dl_set_llc_bytes(int64_t n) {
    const int64_t before = dl_llc_bytes();
    llc_bytes = n < 0 ? read_llc_bytes() : n;
    return before;
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
