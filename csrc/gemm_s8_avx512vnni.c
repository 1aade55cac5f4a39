/* gemm_s8_avx512vnni.c: the exact int8 GEMM on AVX-512 VNNI (vpdpbusd), layout "vnni".
 *
 * vpdpbusd multiplies unsigned by signed bytes, so A is packed as A + 128 (u8) and the tile starts
 * from -128 colsum(B) (colsum computed when B is packed): (A + 128) B - 128 colsum = A B. The
 * accumulation wraps modulo 2^32 (vpdpbusd, not the saturating vpdpbusds), and since the exact
 * result fits in int32 for k <= DL_GEMM_S8_MAX_K, the wrapped value is the exact one.
 * Register tile: 6 rows x 64 columns = 24 zmm accumulators, 4 zmm of B per group of 4 k values
 * (one 256-byte group of the packed panel), A broadcast 4 bytes at a time. Compiled to an empty
 * unit off x86-64.
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <stdint.h>

#include "dl.h"

#define DL_SUFFIX avx512vnni
#define DL_GEMM_MR 6
#define DL_GEMM_NR 64
#define DL_GEMM_KG 4
#define DL_GEMM_EPI_LANES 16 /* the dense epilogue in zmm registers */
typedef uint8_t dl_gemm_a_t;
typedef int8_t dl_gemm_b_t;
static inline dl_gemm_a_t dl_gemm_a_conv(int8_t v) { return (uint8_t)(v ^ 0x80); }

#include "gemm_s8_vnni_pack.h"

/* The 6 x 64 accumulators of A @ B over kgn groups of 4 k values, from -128 colsum(B): row r's
 * quad of group g at a + r * r_step + g * g_step (the packed tile: 4, 24; codes read in place:
 * the row stride, 4), xored with flip (0 for a packed tile, whose bytes are already + 128). */
static inline __attribute__((always_inline)) void vnni_acc(int64_t kgn, const uint8_t *a,
                                                           int64_t r_step, int64_t g_step,
                                                           __m512i flip, const int8_t *bp,
                                                           const int32_t *colsum,
                                                           __m512i acc[DL_GEMM_MR][4]) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        const __m512i cs = _mm512_loadu_si512((const void *)(colsum + 16 * j));
        const __m512i z = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(cs, 7));
#pragma GCC unroll 6
        for (int r = 0; r < DL_GEMM_MR; r++) acc[r][j] = z;
    }
    for (int64_t g = 0; g < kgn; g++) {
        const __m512i b0 = _mm512_loadu_si512((const void *)bp);
        const __m512i b1 = _mm512_loadu_si512((const void *)(bp + 64));
        const __m512i b2 = _mm512_loadu_si512((const void *)(bp + 128));
        const __m512i b3 = _mm512_loadu_si512((const void *)(bp + 192));
#pragma GCC unroll 6
        for (int r = 0; r < DL_GEMM_MR; r++) {
            int32_t quad;
            __builtin_memcpy(&quad, a + r * r_step + g * g_step, 4);
            const __m512i av = _mm512_xor_si512(_mm512_set1_epi32(quad), flip);
            acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], av, b0);
            acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], av, b1);
            acc[r][2] = _mm512_dpbusd_epi32(acc[r][2], av, b2);
            acc[r][3] = _mm512_dpbusd_epi32(acc[r][3], av, b3);
        }
        bp += DL_GEMM_NR * 4;
    }
}

/* tile (6 x 64) = packed A tile @ packed B panel over kgn groups of 4 k values. */
static inline void dl_gemm_ukernel(int64_t kgn, const uint8_t *ap, const int8_t *bp,
                                   const int32_t *colsum, int32_t *tile) {
    __m512i c[DL_GEMM_MR][4];
    vnni_acc(kgn, ap, 4, 4 * DL_GEMM_MR, _mm512_setzero_si512(), bp, colsum, c);
#pragma GCC unroll 6
    for (int r = 0; r < DL_GEMM_MR; r++)
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) _mm512_store_si512((void *)(tile + r * 64 + 16 * j), c[r][j]);
}

/* The fused dense layer's full row tiles (gemm_dense_mm): 6 rows of A against one packed panel,
 * the epilogue in registers: c[r, j] = act(float(t) * s + bv[j]) for the nv <= 64 valid columns
 * (masked stores), act the ReLU (v <= 0 -> +0, NaN kept) or the mask factor ((mask[r, j] > 0) ?
 * 1 : 0, NULL: none). A is its packed tile (packed: a is the tile, a_rs unused) or signed codes
 * read in place (row r at a + r * a_rs, k = 4 kgn values each; the + 128 applied to each
 * broadcast quad). The same integer sums and the same FMA and compares as the tile route
 * (dl_gemm_ukernel + gemm_dense_row), so the same bits. */
#define DL_GEMM_HAVE_UKERNEL_EPI 1
static inline void dl_gemm_ukernel_epi(int64_t kgn, const int8_t *a, int64_t a_rs, int packed,
                                       const int8_t *bp, const int32_t *colsum, float s,
                                       const float *bv, int relu, const float *mask, int64_t m_rs,
                                       float *c, int64_t c_rs, int nv) {
    __m512i acc[DL_GEMM_MR][4];
    if (packed) /* quads at 4 r of each 24-byte group, already + 128 */
        vnni_acc(kgn, (const uint8_t *)a, 4, 4 * DL_GEMM_MR, _mm512_setzero_si512(), bp, colsum,
                 acc);
    else /* in place: + 128 by the xor */
        vnni_acc(kgn, (const uint8_t *)a, a_rs, 4, _mm512_set1_epi32((int32_t)0x80808080u), bp,
                 colsum, acc);
    const __m512 sv = _mm512_set1_ps(s);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        if (16 * j >= nv) break;
        const __mmask16 k = dl_epi_mask(nv - 16 * j);
        const __m512 b = _mm512_loadu_ps(bv + 16 * j);
#pragma GCC unroll 6
        for (int r = 0; r < DL_GEMM_MR; r++)
            dl_epi16(acc[r][j], sv, b, relu, mask != NULL ? mask + r * m_rs + 16 * j : NULL, k,
                     c + r * c_rs + 16 * j);
    }
}

#include "gemm_s8_impl.h"

/* Quantizer cores (see dl.h), 16 lanes with masked tails; the same IEEE operations as the
 * portable code: product with the reciprocal, vmaxps/vminps clamp (NaN -> -127), round half to even
 * through 1.5 * 2^23, truncation of the now integral value. */
/* The lanes of x[j..) under mask k (the tail) times their reciprocal scale (inv[j..), or inv0 when
 * inv is NULL), clamped to [-127, 127] with vmaxps/vminps (NaN -> -127); *mx keeps the largest
 * |x| bit pattern. */
static inline __m512 gemm_scaled16(const float *x, const float *inv, __m512 s16, int64_t j,
                                   __mmask16 k, __m512i *mx) {
    const __m512 xv = _mm512_maskz_loadu_ps(k, x + j);
    const __m512 sc = inv != NULL ? _mm512_maskz_loadu_ps(k, inv + j) : s16;
    *mx = _mm512_max_epu32(*mx, _mm512_and_si512(_mm512_castps_si512(xv),
                                                 _mm512_set1_epi32(0x7fffffff)));
    return _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(xv, sc), _mm512_set1_ps(-127.0f)),
                         _mm512_set1_ps(127.0f));
}

uint32_t dl_gemm_qnearest_f32_avx512vnni(const float *x, const float *inv, float inv0, int64_t n,
                                         int8_t *q) {
    const __m512 mg = _mm512_set1_ps(0x1.8p23f), s16 = _mm512_set1_ps(inv0);
    __m512i mx = _mm512_setzero_si512();
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 k = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1);
        __m512 v = gemm_scaled16(x, inv, s16, j, k, &mx);
        v = _mm512_sub_ps(_mm512_add_ps(v, mg), mg);
        _mm_mask_storeu_epi8(q + j, k, _mm512_cvtsepi32_epi8(_mm512_cvttps_epi32(v)));
    }
    return (uint32_t)_mm512_reduce_max_epu32(mx);
}

uint32_t dl_gemm_absmax_bits_f32_avx512vnni(const float *x, int64_t n) {
    const __m512i absm = _mm512_set1_epi32(0x7fffffff);
    __m512i m0 = _mm512_setzero_si512(), m1 = m0;
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
        m0 = _mm512_max_epu32(m0, _mm512_and_si512(_mm512_loadu_si512(x + j), absm));
        m1 = _mm512_max_epu32(m1, _mm512_and_si512(_mm512_loadu_si512(x + j + 16), absm));
    }
    for (; j < n; j += 16) {
        const __mmask16 k = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1);
        m0 = _mm512_max_epu32(m0, _mm512_and_si512(_mm512_maskz_loadu_epi32(k, x + j), absm));
    }
    return (uint32_t)_mm512_reduce_max_epu32(_mm512_max_epu32(m0, m1));
}

/* 16 lanes of dl_hash32 (lowbias32). */
static inline __m512i gemm_hash16(__m512i x) {
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32(0x21f0aaad));
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32(0x735a2d97));
    return _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
}

/* Stochastic rounding core (see dl.h), 16 lanes with a masked tail: the same IEEE operations as
 * the portable and AVX2 code (product, vmaxps/vminps clamp with NaN -> -127, floor, u < v - f with
 * u = dl_rng_unit of the lane's index), so the codes are bit-identical. Indices past 2^32 take the
 * portable code (the RNG's high index word is then not 0). */
uint32_t dl_gemm_qstoch_f32_avx512vnni(const float *x, const float *inv, float inv0, int64_t n,
                                       uint64_t key, uint64_t j0, int8_t *q) {
    if (n <= 0) return 0;
    if (((j0 + (uint64_t)n) >> 32) != 0)
        return dl_gemm_qstoch_f32_generic(x, inv, inv0, n, key, j0, q);
    const __m512 one = _mm512_set1_ps(1.0f), s16 = _mm512_set1_ps(inv0);
    const __m512 ulp = _mm512_set1_ps(0x1.0p-24f);
    const __m512i klo = _mm512_set1_epi32((int32_t)(uint32_t)key);
    const __m512i khi = _mm512_set1_epi32((int32_t)(uint32_t)(key >> 32));
    __m512i idx = _mm512_add_epi32(_mm512_set1_epi32((int32_t)(uint32_t)j0),
                                   _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13,
                                                     14, 15));
    __m512i mx = _mm512_setzero_si512();
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 k = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1);
        const __m512 v = gemm_scaled16(x, inv, s16, j, k, &mx);
        const __m512 f = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
        const __m512i h =
            gemm_hash16(_mm512_xor_si512(gemm_hash16(_mm512_xor_si512(idx, klo)), khi));
        const __m512 u = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(h, 8)), ulp);
        const __mmask16 up = _mm512_cmp_ps_mask(u, _mm512_sub_ps(v, f), _CMP_LT_OQ);
        const __m512i iv = _mm512_cvttps_epi32(_mm512_mask_add_ps(f, up, f, one));
        _mm_mask_storeu_epi8(q + j, k, _mm512_cvtsepi32_epi8(iv));
        idx = _mm512_add_epi32(idx, _mm512_set1_epi32(16));
    }
    return (uint32_t)_mm512_reduce_max_epu32(mx);
}

const dl_gemm_s8_layout_t dl_gemm_s8_layout_vnni = {"vnni", DL_GEMM_MR, DL_GEMM_NR, DL_GEMM_KG,
                                                    1};
#else
typedef int dl_gemm_s8_avx512vnni_unused;
#endif
