/* gemm_s8_avx2.c: the exact int8 GEMM on AVX2 (also the AVX-512 path without VNNI), layout "s16".
 *
 * A and B are packed as int16 pairs along k (the layout of gemm_s8.c), so vpmaddwd forms
 * a0 * b0 + a1 * b1 exactly in int32 (|sum| <= 2^15 for int8 inputs); vpaddd accumulates. Unlike
 * vpmaddubsw nothing saturates. Register tile: 6 rows x 16 columns = 12 ymm accumulators, 2 for B,
 * 1 for the broadcast pair of A. Compiled to an empty unit off x86-64.
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <stdint.h>

#define DL_SUFFIX avx2
#define DL_GEMM_MR 6
#define DL_GEMM_NR 16
#define DL_GEMM_KG 2
typedef int16_t dl_gemm_a_t;
typedef int16_t dl_gemm_b_t;
static inline dl_gemm_a_t dl_gemm_a_conv(int8_t v) { return v; }

/* tile (6 x 16) = packed A tile @ packed B panel over kgn pairs of k. */
static inline void dl_gemm_ukernel(int64_t kgn, const int16_t *ap, const int16_t *bp,
                                   const int32_t *colsum, int32_t *tile) {
    __m256i c[DL_GEMM_MR][2];
    (void)colsum;
#pragma GCC unroll 6
    for (int r = 0; r < DL_GEMM_MR; r++) c[r][0] = c[r][1] = _mm256_setzero_si256();
    for (int64_t g = 0; g < kgn; g++) {
        const __m256i b0 = _mm256_loadu_si256((const __m256i *)bp);
        const __m256i b1 = _mm256_loadu_si256((const __m256i *)(bp + 16));
#pragma GCC unroll 6
        for (int r = 0; r < DL_GEMM_MR; r++) {
            int32_t pair;
            __builtin_memcpy(&pair, ap + 2 * r, 4);
            const __m256i a = _mm256_set1_epi32(pair);
            c[r][0] = _mm256_add_epi32(c[r][0], _mm256_madd_epi16(a, b0));
            c[r][1] = _mm256_add_epi32(c[r][1], _mm256_madd_epi16(a, b1));
        }
        ap += DL_GEMM_MR * 2;
        bp += DL_GEMM_NR * 2;
    }
#pragma GCC unroll 6
    for (int r = 0; r < DL_GEMM_MR; r++) {
        _mm256_store_si256((__m256i *)(tile + r * 16), c[r][0]);
        _mm256_store_si256((__m256i *)(tile + r * 16 + 8), c[r][1]);
    }
}

#include "gemm_s8_impl.h"
#else
typedef int dl_gemm_s8_avx2_unused;
#endif
