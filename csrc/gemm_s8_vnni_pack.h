/* gemm_s8_vnni_pack.h: the AVX-512 packing of whole groups of a row-major B into the "vnni"
 * layout, and the fused dense layer's 16-lane epilogue, shared by gemm_s8_avx512vnni.c and
 * gemm_s8_amx.c (included before gemm_s8_impl.h, compiled with AVX-512 BW and VNNI).
 *
 * One group is 4 rows of the panel's 64 columns; its 256 packed bytes hold column j's 4 values at
 * byte 4 j. Bytes are interleaved within 128-bit lanes (rows 0/1 and 2/3, then the pairs), which
 * leaves lane L of the four results holding columns 16 L + 4 i .. + 3 of result i: a 4 x 4
 * transpose of 128-bit lanes puts the columns in order. colsum[j] += the group's 4 values of
 * column j, by vpdpbusd of the packed quads with ones.
 */
#ifndef DL_GEMM_S8_VNNI_PACK_H
#define DL_GEMM_S8_VNNI_PACK_H
#include <immintrin.h>
#include <stdint.h>

/* The lanes below n (n >= 1) of a 16-lane piece. */
static inline __mmask16 dl_epi_mask(int n) {
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
}
/* One 16-lane piece of the fused dense layer's epilogue (gemm_s8_impl.h's gemm_dense_row, the
 * same operations): v = float(t) * s + b as one FMA, then the ReLU (v <= 0 -> +0, NaN kept) or,
 * with a mask row (NULL: none), times (mask > 0 ? 1 : 0); stored to the k lanes of c. */
static inline void dl_epi16(__m512i t, __m512 sv, __m512 b, int relu, const float *mrow,
                            __mmask16 k, float *c) {
    const __m512 zero = _mm512_setzero_ps();
    __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), sv, b);
    if (mrow != NULL) {
        const __m512 mk = _mm512_maskz_loadu_ps(k, mrow);
        v = _mm512_mul_ps(v, _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(mk, zero, _CMP_GT_OQ),
                                                 _mm512_set1_ps(1.0f)));
    } else if (relu) {
        v = _mm512_maskz_mov_ps((__mmask16)~_mm512_cmp_ps_mask(v, zero, _CMP_LE_OQ), v);
    }
    _mm512_mask_storeu_ps(c, k, v);
}

/* d[0:n) = s[0:n) for n <= 64: one masked load and store (gemm_s8_impl.h's im2col panels). */
#define DL_GEMM_HAVE_COPY_LE64 1
static inline void gemm_copy_le64(int8_t *d, const int8_t *s, int n) {
    const __mmask64 m = n >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << n) - 1);
    _mm512_mask_storeu_epi8(d, m, _mm512_maskz_loadu_epi8(m, s));
}

#define DL_GEMM_HAVE_PACK_B_ROWS 1
static inline void dl_gemm_pack_b_rows(int64_t kfull, const int8_t *b, int64_t rs, int8_t *dst,
                                       int32_t *colsum) {
    const __m512i ones = _mm512_set1_epi8(1);
    __m512i cs0 = _mm512_setzero_si512(), cs1 = cs0, cs2 = cs0, cs3 = cs0;
    for (int64_t g = 0; g < kfull; g++) {
        const int8_t *r = b + 4 * g * rs;
        const __m512i r0 = _mm512_loadu_si512((const void *)r);
        const __m512i r1 = _mm512_loadu_si512((const void *)(r + rs));
        const __m512i r2 = _mm512_loadu_si512((const void *)(r + 2 * rs));
        const __m512i r3 = _mm512_loadu_si512((const void *)(r + 3 * rs));
        const __m512i t01l = _mm512_unpacklo_epi8(r0, r1), t01h = _mm512_unpackhi_epi8(r0, r1);
        const __m512i t23l = _mm512_unpacklo_epi8(r2, r3), t23h = _mm512_unpackhi_epi8(r2, r3);
        const __m512i q0 = _mm512_unpacklo_epi16(t01l, t23l);
        const __m512i q1 = _mm512_unpackhi_epi16(t01l, t23l);
        const __m512i q2 = _mm512_unpacklo_epi16(t01h, t23h);
        const __m512i q3 = _mm512_unpackhi_epi16(t01h, t23h);
        const __m512i a = _mm512_shuffle_i64x2(q0, q1, 0x44); /* lanes q0.0 q0.1 q1.0 q1.1 */
        const __m512i bb = _mm512_shuffle_i64x2(q0, q1, 0xEE); /* q0.2 q0.3 q1.2 q1.3 */
        const __m512i c = _mm512_shuffle_i64x2(q2, q3, 0x44);
        const __m512i d = _mm512_shuffle_i64x2(q2, q3, 0xEE);
        const __m512i o0 = _mm512_shuffle_i64x2(a, c, 0x88); /* lanes 0 of q0..q3 */
        const __m512i o1 = _mm512_shuffle_i64x2(a, c, 0xDD);
        const __m512i o2 = _mm512_shuffle_i64x2(bb, d, 0x88);
        const __m512i o3 = _mm512_shuffle_i64x2(bb, d, 0xDD);
        int8_t *o = dst + 256 * g;
        _mm512_storeu_si512((void *)o, o0);
        _mm512_storeu_si512((void *)(o + 64), o1);
        _mm512_storeu_si512((void *)(o + 128), o2);
        _mm512_storeu_si512((void *)(o + 192), o3);
        cs0 = _mm512_dpbusd_epi32(cs0, ones, o0);
        cs1 = _mm512_dpbusd_epi32(cs1, ones, o1);
        cs2 = _mm512_dpbusd_epi32(cs2, ones, o2);
        cs3 = _mm512_dpbusd_epi32(cs3, ones, o3);
    }
    int32_t t[64] __attribute__((aligned(64)));
    _mm512_store_si512((void *)t, cs0);
    _mm512_store_si512((void *)(t + 16), cs1);
    _mm512_store_si512((void *)(t + 32), cs2);
    _mm512_store_si512((void *)(t + 48), cs3);
    for (int j = 0; j < 64; j++) colsum[j] += t[j];
}

/* The same from a stored transpose: B[kk, j] = b[kk + j * cs] (cs < 2^31 / 64), so a group's 4
 * values of column j are 4 consecutive bytes: gathered 16 columns at a time. */
#define DL_GEMM_HAVE_PACK_B_COLS 1
static inline void dl_gemm_pack_b_cols(int64_t kfull, const int8_t *b, int64_t cs, int8_t *dst,
                                       int32_t *colsum) {
    const __m512i ones = _mm512_set1_epi8(1);
    const __m512i idx = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32((int)cs));
    __m512i acc[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                      _mm512_setzero_si512()};
    for (int64_t g = 0; g < kfull; g++)
        for (int h = 0; h < 4; h++) {
            const int8_t *base = b + 4 * g + 16 * h * cs;
            const __m512i v = _mm512_i32gather_epi32(idx, (const void *)base, 1);
            _mm512_storeu_si512((void *)(dst + 256 * g + 64 * h), v);
            acc[h] = _mm512_dpbusd_epi32(acc[h], ones, v);
        }
    int32_t t[64] __attribute__((aligned(64)));
    for (int h = 0; h < 4; h++) _mm512_store_si512((void *)(t + 16 * h), acc[h]);
    for (int j = 0; j < 64; j++) colsum[j] += t[j];
}
#endif
