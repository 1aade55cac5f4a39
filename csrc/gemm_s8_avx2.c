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

#include "dl.h"

#define DL_SUFFIX avx2
#define DL_GEMM_MR 6
#define DL_GEMM_NR 16
#define DL_GEMM_KG 2
typedef int16_t dl_gemm_a_t;
typedef int16_t dl_gemm_b_t;
static inline dl_gemm_a_t dl_gemm_a_conv(int8_t v) { return v; }

/* The first mr rows (mr constant after inlining) of tile (6 x 16) = packed A tile @ packed B
 * panel over kgn pairs of k. */
static inline __attribute__((always_inline)) void
gemm_ukernel_mr(const int mr, int64_t kgn, const int16_t *ap, const int16_t *bp, int32_t *tile) {
    __m256i c[DL_GEMM_MR][2];
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++) c[r][0] = c[r][1] = _mm256_setzero_si256();
    for (int64_t g = 0; g < kgn; g++) {
        const __m256i b0 = _mm256_loadu_si256((const __m256i *)bp);
        const __m256i b1 = _mm256_loadu_si256((const __m256i *)(bp + 16));
#pragma GCC unroll 6
        for (int r = 0; r < mr; r++) {
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
    for (int r = 0; r < mr; r++) {
        _mm256_store_si256((__m256i *)(tile + r * 16), c[r][0]);
        _mm256_store_si256((__m256i *)(tile + r * 16 + 8), c[r][1]);
    }
}

/* tile (6 x 16) = packed A tile @ packed B panel over kgn pairs of k. */
static inline void dl_gemm_ukernel(int64_t kgn, const int16_t *ap, const int16_t *bp,
                                   const int32_t *colsum, int32_t *tile) {
    (void)colsum;
    gemm_ukernel_mr(DL_GEMM_MR, kgn, ap, bp, tile);
}

/* Only the first mr (1..6) rows of the tile: a partial row tile costs its rows, not six. */
#define DL_GEMM_HAVE_UKERNEL_ROWS 1
static void dl_gemm_ukernel_rows(int mr, int64_t kgn, const int16_t *ap, const int16_t *bp,
                                 const int32_t *colsum, int32_t *tile) {
    (void)colsum;
    switch (mr) {
    case 1:
        gemm_ukernel_mr(1, kgn, ap, bp, tile);
        break;
    case 2:
        gemm_ukernel_mr(2, kgn, ap, bp, tile);
        break;
    case 3:
        gemm_ukernel_mr(3, kgn, ap, bp, tile);
        break;
    case 4:
        gemm_ukernel_mr(4, kgn, ap, bp, tile);
        break;
    case 5:
        gemm_ukernel_mr(5, kgn, ap, bp, tile);
        break;
    default:
        gemm_ukernel_mr(6, kgn, ap, bp, tile);
        break;
    }
}

/* The full groups (pairs of rows) of one 16-column panel of a row-major B: each pair of rows
 * sign-extended to int16 and interleaved into (b0, b1) pairs; colsum[j] += b0[j] + b1[j]. */
#define DL_GEMM_HAVE_PACK_B_ROWS 1
static inline void dl_gemm_pack_b_rows(int64_t kfull, const int8_t *b, int64_t rs, int16_t *dst,
                                       int32_t *colsum) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i c0 = _mm256_setzero_si256(), c1 = c0;
    for (int64_t g = 0; g < kfull; g++) {
        const __m256i x0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 2 * g * rs)));
        const __m256i x1 =
            _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + (2 * g + 1) * rs)));
        const __m256i lo = _mm256_unpacklo_epi16(x0, x1), hi = _mm256_unpackhi_epi16(x0, x1);
        const __m256i p0 = _mm256_permute2x128_si256(lo, hi, 0x20);
        const __m256i p1 = _mm256_permute2x128_si256(lo, hi, 0x31);
        _mm256_storeu_si256((__m256i *)(dst + 32 * g), p0);
        _mm256_storeu_si256((__m256i *)(dst + 32 * g + 16), p1);
        c0 = _mm256_add_epi32(c0, _mm256_madd_epi16(p0, ones));
        c1 = _mm256_add_epi32(c1, _mm256_madd_epi16(p1, ones));
    }
    int32_t t[16];
    _mm256_storeu_si256((__m256i *)t, c0);
    _mm256_storeu_si256((__m256i *)(t + 8), c1);
    for (int j = 0; j < 16; j++) colsum[j] += t[j];
}

#include "gemm_s8_impl.h"

/* Nearest-rounding and absmax cores (see dl.h), 8 lanes: the operations of the portable SSE2 code
 * (product with the reciprocal, maxps/minps clamp with NaN -> -127, round half to even through
 * 1.5 * 2^23, truncation), so the codes are bit-identical; tails take the portable code. */
uint32_t dl_gemm_qnearest_f32_avx2(const float *x, const float *inv, float inv0, int64_t n,
                                   int8_t *q) {
    const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    const __m256 mg = _mm256_set1_ps(0x1.8p23f), s8 = _mm256_set1_ps(inv0);
    const __m256i absm = _mm256_set1_epi32(0x7fffffff);
    __m256i mx = _mm256_setzero_si256();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m256i iv[2];
        for (int h = 0; h < 2; h++) {
            const __m256 xv = _mm256_loadu_ps(x + j + 8 * h);
            const __m256 sc = inv != NULL ? _mm256_loadu_ps(inv + j + 8 * h) : s8;
            mx = _mm256_max_epu32(mx, _mm256_and_si256(_mm256_castps_si256(xv), absm));
            __m256 v = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(xv, sc), lo), hi);
            v = _mm256_sub_ps(_mm256_add_ps(v, mg), mg);
            iv[h] = _mm256_cvttps_epi32(v);
        }
        /* packs work per 128-bit lane: (a0 b0 | a1 b1) -> bytes a0 b0 a0 b0 | a1 b1 a1 b1 */
        const __m256i w = _mm256_packs_epi32(iv[0], iv[1]);
        const __m256i bb = _mm256_permute4x64_epi64(_mm256_packs_epi16(w, w), 0x88);
        const __m128i o = _mm256_castsi256_si128(bb);
        _mm_storeu_si128((__m128i *)(q + j), _mm_shuffle_epi32(o, 0xd8));
    }
    uint32_t l[8], m = 0;
    _mm256_storeu_si256((__m256i *)l, mx);
    for (int i = 0; i < 8; i++) m = l[i] > m ? l[i] : m;
    if (j < n) {
        const uint32_t t =
            dl_gemm_qnearest_f32_generic(x + j, inv != NULL ? inv + j : NULL, inv0, n - j, q + j);
        m = t > m ? t : m;
    }
    return m;
}

uint32_t dl_gemm_absmax_bits_f32_avx2(const float *x, int64_t n) {
    const __m256i absm = _mm256_set1_epi32(0x7fffffff);
    __m256i m0 = _mm256_setzero_si256(), m1 = m0;
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        const __m256i x0 = _mm256_loadu_si256((const __m256i *)(x + j));
        const __m256i x1 = _mm256_loadu_si256((const __m256i *)(x + j + 8));
        m0 = _mm256_max_epu32(m0, _mm256_and_si256(x0, absm));
        m1 = _mm256_max_epu32(m1, _mm256_and_si256(x1, absm));
    }
    uint32_t l[8], m = 0;
    _mm256_storeu_si256((__m256i *)l, _mm256_max_epu32(m0, m1));
    for (int i = 0; i < 8; i++) m = l[i] > m ? l[i] : m;
    if (j < n) {
        const uint32_t t = dl_gemm_absmax_bits_f32_generic(x + j, n - j);
        m = t > m ? t : m;
    }
    return m;
}

/* 8 lanes of dl_hash32 (lowbias32). */
static inline __m256i gemm_hash8(__m256i x) {
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x21f0aaad));
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x735a2d97));
    return _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
}

/* Stochastic rounding core (see dl.h), 8 lanes: the same IEEE operations as the portable code
 * (product, vmaxps/vminps clamp with NaN -> -127, floor, u < v - f with u = dl_rng_unit of the
 * lane's index), so the codes are bit-identical. Indices past 2^32 take the portable code (the
 * RNG's high index word is then not 0). */
uint32_t dl_gemm_qstoch_f32_avx2(const float *x, const float *inv, float inv0, int64_t n,
                                 uint64_t key, uint64_t j0, int8_t *q) {
    if (n <= 0) return 0;
    if (((j0 + (uint64_t)n) >> 32) != 0)
        return dl_gemm_qstoch_f32_generic(x, inv, inv0, n, key, j0, q);
    const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    const __m256 one = _mm256_set1_ps(1.0f), s8 = _mm256_set1_ps(inv0);
    const __m256 ulp = _mm256_set1_ps(0x1.0p-24f);
    const __m256i absm = _mm256_set1_epi32(0x7fffffff);
    const __m256i klo = _mm256_set1_epi32((int32_t)(uint32_t)key);
    const __m256i khi = _mm256_set1_epi32((int32_t)(uint32_t)(key >> 32));
    __m256i idx = _mm256_add_epi32(_mm256_set1_epi32((int32_t)(uint32_t)j0),
                                   _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256i mx = _mm256_setzero_si256();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 xv = _mm256_loadu_ps(x + j);
        const __m256 sc = inv != NULL ? _mm256_loadu_ps(inv + j) : s8;
        mx = _mm256_max_epu32(mx, _mm256_and_si256(_mm256_castps_si256(xv), absm));
        const __m256 v = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(xv, sc), lo), hi);
        const __m256 f = _mm256_floor_ps(v);
        const __m256i h = gemm_hash8(_mm256_xor_si256(gemm_hash8(_mm256_xor_si256(idx, klo)), khi));
        const __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(h, 8)), ulp);
        const __m256 up = _mm256_and_ps(_mm256_cmp_ps(u, _mm256_sub_ps(v, f), _CMP_LT_OQ), one);
        const __m256i iv = _mm256_cvttps_epi32(_mm256_add_ps(f, up));
        const __m128i w =
            _mm_packs_epi32(_mm256_castsi256_si128(iv), _mm256_extracti128_si256(iv, 1));
        _mm_storel_epi64((__m128i *)(q + j), _mm_packs_epi16(w, w));
        idx = _mm256_add_epi32(idx, _mm256_set1_epi32(8));
    }
    uint32_t l[8], m = 0;
    _mm256_storeu_si256((__m256i *)l, mx);
    for (int i = 0; i < 8; i++) m = l[i] > m ? l[i] : m;
    if (j < n) {
        const uint32_t t = dl_gemm_qstoch_f32_generic(x + j, inv != NULL ? inv + j : NULL, inv0,
                                                      n - j, key, j0 + (uint64_t)j, q + j);
        m = t > m ? t : m;
    }
    return m;
}
#else
typedef int dl_gemm_s8_avx2_unused;
#endif
