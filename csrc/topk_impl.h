/* topk_impl.h: the vectorized filter passes of the top-k family, compiled once per ISA.
 *
 * Included by topk.c (portable build), topk_avx2.c and topk_avx512.c, each defining DL_SUFFIX.
 * Every function here is one streaming pass over a range of a row: it compares a 32-bit score per
 * element with a threshold and appends the indices (and raw bits) of the elements at or above it,
 * in ascending index order. The score of element i is |x[i]| as float bits (bits & 0x7fffffff,
 * which orders finite magnitudes exactly, with NaN above infinity) or, for random-k,
 * ~dl_rng_u32(key, i). Scores are compared as unsigned integers. Candidates are rare, so a block of
 * four vectors is tested at once and skipped when none passes; AVX-512 compacts a passing vector in
 * a register (vpcompressd with a memory operand is microcoded on AMD Zen 4) and stores it whole,
 * the other builds walk the mask's set bits. The row drivers (selection, threads, fallbacks) are in
 * topk.c.
 */
#include <stdint.h>
#include <string.h>

#include "dl.h"

#ifndef DL_SUFFIX
#error "define DL_SUFFIX before including topk_impl.h"
#endif
#define DL_TK_CAT2(a, b) a##_##b
#define DL_TK_CAT(a, b) DL_TK_CAT2(a, b)

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

#if defined(__AVX512F__)
#define DL_TK_LANES 16
#elif defined(__AVX2__)
#define DL_TK_LANES 8
#elif defined(__SSE2__)
#define DL_TK_LANES 4
#else
#define DL_TK_LANES 1
#endif
#define DL_TK_BLOCK (4 * DL_TK_LANES) /* elements tested per mask */

#if DL_TK_LANES > 1
typedef uint32_t dl_tk_vu __attribute__((vector_size(DL_TK_LANES * 4)));
typedef int32_t dl_tk_vi __attribute__((vector_size(DL_TK_LANES * 4)));

static inline dl_tk_vu tk_ld(const float *p) {
    dl_tk_vu v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Bit j set when lane j of u is >= t (unsigned). */
static inline uint32_t tk_mask_ge(dl_tk_vu u, dl_tk_vu t) {
#if defined(__AVX512F__)
    return (uint32_t)_mm512_cmpge_epu32_mask((__m512i)u, (__m512i)t);
#elif defined(__AVX2__)
    const __m256i m = _mm256_cmpeq_epi32(_mm256_max_epu32((__m256i)u, (__m256i)t), (__m256i)u);
    return (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(m));
#else
    const dl_tk_vi ge = (dl_tk_vi)(u >= t);
    return (uint32_t)_mm_movemask_ps((__m128)ge);
#endif
}

static inline dl_tk_vu tk_iota(void) {
    dl_tk_vu v;
    for (int j = 0; j < DL_TK_LANES; j++) v[j] = (uint32_t)j;
    return v;
}

/* lowbias32 on every lane, as dl_hash32. */
static inline dl_tk_vu tk_hash(dl_tk_vu x) {
    x ^= x >> 16;
    x *= 0x21f0aaadu;
    x ^= x >> 15;
    x *= 0x735a2d97u;
    x ^= x >> 15;
    return x;
}
#endif

/* Appends (index, bits) of one passing element unless the buffer is full. */
static inline void tk_put(int32_t *idx, uint32_t *bits, int64_t cap, int64_t c, int64_t i,
                          uint32_t b) {
    if (c < cap) {
        idx[c] = (int32_t)i;
        memcpy(&bits[c], &b, 4);
    }
}

/* Appends the passing lanes of one vector: set bits of m, element indices i0 + lane. */
#if defined(__AVX512F__)
static inline int64_t tk_emit(uint32_t m, dl_tk_vu v, int64_t i0, int32_t *idx, uint32_t *bits,
                              int64_t cap, int64_t c) {
    const __m512i id = _mm512_add_epi32(_mm512_set1_epi32((int32_t)i0), (__m512i)tk_iota());
    const __m512i ci = _mm512_maskz_compress_epi32((__mmask16)m, id);
    const __m512i cb = _mm512_maskz_compress_epi32((__mmask16)m, (__m512i)v);
    const int pop = __builtin_popcount(m);
    if (c + 16 <= cap) { /* whole-register stores: the lanes past pop are overwritten later */
        _mm512_storeu_si512(idx + c, ci);
        _mm512_storeu_si512(bits + c, cb);
    } else if (c < cap) {
        int32_t ti[16];
        uint32_t tb[16];
        _mm512_storeu_si512(ti, ci);
        _mm512_storeu_si512(tb, cb);
        const int64_t w = dl_min_i64(pop, cap - c);
        memcpy(idx + c, ti, (size_t)w * 4);
        memcpy(bits + c, tb, (size_t)w * 4);
    }
    return c + pop;
}
#elif DL_TK_LANES > 1
static inline int64_t tk_emit(uint32_t m, dl_tk_vu v, int64_t i0, int32_t *idx, uint32_t *bits,
                              int64_t cap, int64_t c) {
    uint32_t lane[DL_TK_LANES];
    memcpy(lane, &v, sizeof lane);
    while (m) {
        const int j = __builtin_ctz(m);
        tk_put(idx, bits, cap, c++, i0 + j, lane[j]);
        m &= m - 1;
    }
    return c;
}
#endif

/* AVX-512 compacts every vector of a block with a hit without testing each (a branch per vector
 * mispredicts at ~1% density); the other builds walk the set bits of the vectors that have any. */
#if defined(__AVX512F__)
#define DL_TK_EMIT_BLOCK(m, v, i)                                                                  \
    for (int q = 0; q < 4; q++) c = tk_emit(m[q], v[q], (i) + q * DL_TK_LANES, idx, out, cap, c)
#else
#define DL_TK_EMIT_BLOCK(m, v, i)                                                                  \
    for (int q = 0; q < 4; q++)                                                                    \
        if (m[q]) c = tk_emit(m[q], v[q], (i) + q * DL_TK_LANES, idx, out, cap, c)
#endif

/* Magnitude filter: returns how many i in [i0, i1) have (bits(x[i]) & 0x7fffffff) >= t and writes
 * the first min(count, cap) of them (index, raw float bits) to idx/bits in ascending order. Writes
 * nothing past cap. Single-threaded. */
int64_t DL_TK_CAT(dl_topk_filter_f32, DL_SUFFIX)(const float *x, int64_t i0, int64_t i1,
                                                 uint32_t t, int64_t cap, int32_t *idx,
                                                 uint32_t *bits) {
    int64_t c = 0, i = i0;
#if DL_TK_LANES > 1
    const dl_tk_vu tv = (dl_tk_vu){0} + t, am = (dl_tk_vu){0} + 0x7fffffffu;
    for (; i + DL_TK_BLOCK <= i1; i += DL_TK_BLOCK) {
        dl_tk_vu v[4];
        uint32_t m[4];
        for (int q = 0; q < 4; q++) {
            v[q] = tk_ld(x + i + q * DL_TK_LANES);
            m[q] = tk_mask_ge(v[q] & am, tv);
        }
        if ((m[0] | m[1] | m[2] | m[3]) == 0) continue;
        uint32_t *out = bits;
        DL_TK_EMIT_BLOCK(m, v, i);
    }
#endif
    for (; i < i1; i++) {
        uint32_t b;
        memcpy(&b, x + i, 4);
        if ((b & 0x7fffffffu) >= t) tk_put(idx, bits, cap, c++, i, b);
    }
    return c;
}

/* Random-k filter: as dl_topk_filter_f32 with score(i) = ~dl_rng_u32(key, i), writing the scores.
 * Requires i1 <= 2^32 (the index's high word is then 0). */
int64_t DL_TK_CAT(dl_topk_randfilter_u32, DL_SUFFIX)(uint64_t key, int64_t i0, int64_t i1,
                                                     uint32_t t, int64_t cap, int32_t *idx,
                                                     uint32_t *score) {
    int64_t c = 0, i = i0;
    const uint32_t klo = (uint32_t)key, khi = (uint32_t)(key >> 32);
#if DL_TK_LANES > 1
    const dl_tk_vu tv = (dl_tk_vu){0} + t, iota = tk_iota();
    for (; i + DL_TK_BLOCK <= i1; i += DL_TK_BLOCK) {
        dl_tk_vu v[4];
        uint32_t m[4];
        for (int q = 0; q < 4; q++) {
            const dl_tk_vu iv = iota + (uint32_t)(i + q * DL_TK_LANES);
            v[q] = ~tk_hash(tk_hash(iv ^ klo) ^ khi);
            m[q] = tk_mask_ge(v[q], tv);
        }
        if ((m[0] | m[1] | m[2] | m[3]) == 0) continue;
        uint32_t *out = score;
        DL_TK_EMIT_BLOCK(m, v, i);
    }
#endif
    for (; i < i1; i++) {
        const uint32_t s = ~dl_hash32(dl_hash32((uint32_t)i ^ klo) ^ khi);
        if (s >= t) tk_put(idx, score, cap, c++, i, s);
    }
    return c;
}

/* Counts i in [0, n) with (bits(x[i]) & 0x7fffffff) >= t; *n_nan gets the number of NaNs. */
int64_t DL_TK_CAT(dl_topk_count_f32, DL_SUFFIX)(const float *x, int64_t n, uint32_t t,
                                                int64_t *n_nan) {
    int64_t c = 0, nan = 0, i = 0;
#if DL_TK_LANES > 1
    const dl_tk_vu tv = (dl_tk_vu){0} + t, am = (dl_tk_vu){0} + 0x7fffffffu;
    const dl_tk_vu inf1 = (dl_tk_vu){0} + 0x7f800001u;
    for (; i + DL_TK_BLOCK <= n; i += DL_TK_BLOCK) {
        uint64_t m = 0, mn = 0;
        for (int q = 0; q < 4; q++) {
            const dl_tk_vu u = tk_ld(x + i + q * DL_TK_LANES) & am;
            m |= (uint64_t)tk_mask_ge(u, tv) << (q * DL_TK_LANES);
            mn |= (uint64_t)tk_mask_ge(u, inf1) << (q * DL_TK_LANES);
        }
        c += __builtin_popcountll(m);
        nan += __builtin_popcountll(mn);
    }
#endif
    for (; i < n; i++) {
        uint32_t b;
        memcpy(&b, x + i, 4);
        b &= 0x7fffffffu;
        c += b >= t;
        nan += b > 0x7f800000u;
    }
    *n_nan = nan;
    return c;
}
