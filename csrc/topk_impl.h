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
 * AVX2 does the same with a permutation from a 256-entry table (vpermd), the portable build walks
 * the mask's set bits. The AVX2 magnitude filter instead takes runs of 2048 elements: 64-bit masks
 * first, then one scalar store per candidate (see there). dl_topk_compact_u32 is the final step of
 * the select: it keeps the candidates at or above a score with the same packing. The row drivers
 * (selection, threads, fallbacks) are in topk.c.
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
#define DL_TK_RUN 2048                /* elements per two-phase run (AVX2 magnitude filter) */

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
#elif defined(__AVX2__)
/* Byte j of tk_lut[m]: the lane of the j-th set bit of m (0 past popcount(m)). */
static const uint64_t tk_lut[256] = {
    0x0000000000000000u, 0x0000000000000000u, 0x0000000000000001u, 0x0000000000000100u,
    0x0000000000000002u, 0x0000000000000200u, 0x0000000000000201u, 0x0000000000020100u,
    0x0000000000000003u, 0x0000000000000300u, 0x0000000000000301u, 0x0000000000030100u,
    0x0000000000000302u, 0x0000000000030200u, 0x0000000000030201u, 0x0000000003020100u,
    0x0000000000000004u, 0x0000000000000400u, 0x0000000000000401u, 0x0000000000040100u,
    0x0000000000000402u, 0x0000000000040200u, 0x0000000000040201u, 0x0000000004020100u,
    0x0000000000000403u, 0x0000000000040300u, 0x0000000000040301u, 0x0000000004030100u,
    0x0000000000040302u, 0x0000000004030200u, 0x0000000004030201u, 0x0000000403020100u,
    0x0000000000000005u, 0x0000000000000500u, 0x0000000000000501u, 0x0000000000050100u,
    0x0000000000000502u, 0x0000000000050200u, 0x0000000000050201u, 0x0000000005020100u,
    0x0000000000000503u, 0x0000000000050300u, 0x0000000000050301u, 0x0000000005030100u,
    0x0000000000050302u, 0x0000000005030200u, 0x0000000005030201u, 0x0000000503020100u,
    0x0000000000000504u, 0x0000000000050400u, 0x0000000000050401u, 0x0000000005040100u,
    0x0000000000050402u, 0x0000000005040200u, 0x0000000005040201u, 0x0000000504020100u,
    0x0000000000050403u, 0x0000000005040300u, 0x0000000005040301u, 0x0000000504030100u,
    0x0000000005040302u, 0x0000000504030200u, 0x0000000504030201u, 0x0000050403020100u,
    0x0000000000000006u, 0x0000000000000600u, 0x0000000000000601u, 0x0000000000060100u,
    0x0000000000000602u, 0x0000000000060200u, 0x0000000000060201u, 0x0000000006020100u,
    0x0000000000000603u, 0x0000000000060300u, 0x0000000000060301u, 0x0000000006030100u,
    0x0000000000060302u, 0x0000000006030200u, 0x0000000006030201u, 0x0000000603020100u,
    0x0000000000000604u, 0x0000000000060400u, 0x0000000000060401u, 0x0000000006040100u,
    0x0000000000060402u, 0x0000000006040200u, 0x0000000006040201u, 0x0000000604020100u,
    0x0000000000060403u, 0x0000000006040300u, 0x0000000006040301u, 0x0000000604030100u,
    0x0000000006040302u, 0x0000000604030200u, 0x0000000604030201u, 0x0000060403020100u,
    0x0000000000000605u, 0x0000000000060500u, 0x0000000000060501u, 0x0000000006050100u,
    0x0000000000060502u, 0x0000000006050200u, 0x0000000006050201u, 0x0000000605020100u,
    0x0000000000060503u, 0x0000000006050300u, 0x0000000006050301u, 0x0000000605030100u,
    0x0000000006050302u, 0x0000000605030200u, 0x0000000605030201u, 0x0000060503020100u,
    0x0000000000060504u, 0x0000000006050400u, 0x0000000006050401u, 0x0000000605040100u,
    0x0000000006050402u, 0x0000000605040200u, 0x0000000605040201u, 0x0000060504020100u,
    0x0000000006050403u, 0x0000000605040300u, 0x0000000605040301u, 0x0000060504030100u,
    0x0000000605040302u, 0x0000060504030200u, 0x0000060504030201u, 0x0006050403020100u,
    0x0000000000000007u, 0x0000000000000700u, 0x0000000000000701u, 0x0000000000070100u,
    0x0000000000000702u, 0x0000000000070200u, 0x0000000000070201u, 0x0000000007020100u,
    0x0000000000000703u, 0x0000000000070300u, 0x0000000000070301u, 0x0000000007030100u,
    0x0000000000070302u, 0x0000000007030200u, 0x0000000007030201u, 0x0000000703020100u,
    0x0000000000000704u, 0x0000000000070400u, 0x0000000000070401u, 0x0000000007040100u,
    0x0000000000070402u, 0x0000000007040200u, 0x0000000007040201u, 0x0000000704020100u,
    0x0000000000070403u, 0x0000000007040300u, 0x0000000007040301u, 0x0000000704030100u,
    0x0000000007040302u, 0x0000000704030200u, 0x0000000704030201u, 0x0000070403020100u,
    0x0000000000000705u, 0x0000000000070500u, 0x0000000000070501u, 0x0000000007050100u,
    0x0000000000070502u, 0x0000000007050200u, 0x0000000007050201u, 0x0000000705020100u,
    0x0000000000070503u, 0x0000000007050300u, 0x0000000007050301u, 0x0000000705030100u,
    0x0000000007050302u, 0x0000000705030200u, 0x0000000705030201u, 0x0000070503020100u,
    0x0000000000070504u, 0x0000000007050400u, 0x0000000007050401u, 0x0000000705040100u,
    0x0000000007050402u, 0x0000000705040200u, 0x0000000705040201u, 0x0000070504020100u,
    0x0000000007050403u, 0x0000000705040300u, 0x0000000705040301u, 0x0000070504030100u,
    0x0000000705040302u, 0x0000070504030200u, 0x0000070504030201u, 0x0007050403020100u,
    0x0000000000000706u, 0x0000000000070600u, 0x0000000000070601u, 0x0000000007060100u,
    0x0000000000070602u, 0x0000000007060200u, 0x0000000007060201u, 0x0000000706020100u,
    0x0000000000070603u, 0x0000000007060300u, 0x0000000007060301u, 0x0000000706030100u,
    0x0000000007060302u, 0x0000000706030200u, 0x0000000706030201u, 0x0000070603020100u,
    0x0000000000070604u, 0x0000000007060400u, 0x0000000007060401u, 0x0000000706040100u,
    0x0000000007060402u, 0x0000000706040200u, 0x0000000706040201u, 0x0000070604020100u,
    0x0000000007060403u, 0x0000000706040300u, 0x0000000706040301u, 0x0000070604030100u,
    0x0000000706040302u, 0x0000070604030200u, 0x0000070604030201u, 0x0007060403020100u,
    0x0000000000070605u, 0x0000000007060500u, 0x0000000007060501u, 0x0000000706050100u,
    0x0000000007060502u, 0x0000000706050200u, 0x0000000706050201u, 0x0000070605020100u,
    0x0000000007060503u, 0x0000000706050300u, 0x0000000706050301u, 0x0000070605030100u,
    0x0000000706050302u, 0x0000070605030200u, 0x0000070605030201u, 0x0007060503020100u,
    0x0000000007060504u, 0x0000000706050400u, 0x0000000706050401u, 0x0000070605040100u,
    0x0000000706050402u, 0x0000070605040200u, 0x0000070605040201u, 0x0007060504020100u,
    0x0000000706050403u, 0x0000070605040300u, 0x0000070605040301u, 0x0007060504030100u,
    0x0000070605040302u, 0x0007060504030200u, 0x0007060504030201u, 0x0706050403020100u,
};

/* Packs the passing lanes to the front with one permute and stores whole vectors (the lanes past
 * the popcount are overwritten by the next store, or lie below cap); near cap, lane by lane. */
static inline int64_t tk_emit(uint32_t m, dl_tk_vu v, int64_t i0, int32_t *idx, uint32_t *bits,
                              int64_t cap, int64_t c) {
    if (c + 8 <= cap) {
        const __m256i perm = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)tk_lut[m]));
        _mm256_storeu_si256((__m256i *)(idx + c),
                            _mm256_add_epi32(_mm256_set1_epi32((int32_t)i0), perm));
        _mm256_storeu_si256((__m256i *)(bits + c), _mm256_permutevar8x32_epi32((__m256i)v, perm));
        return c + __builtin_popcount(m);
    }
    uint32_t lane[8];
    memcpy(lane, &v, sizeof lane);
    while (m) {
        const int j = __builtin_ctz(m);
        tk_put(idx, bits, cap, c++, i0 + j, lane[j]);
        m &= m - 1;
    }
    return c;
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

/* AVX-512 and AVX2 compact every vector of a block with a hit without testing each (a branch per
 * vector mispredicts at ~1% density); the portable build walks the set bits of the vectors that
 * have any. */
#if defined(__AVX512F__) || defined(__AVX2__)
#define DL_TK_EMIT_BLOCK(m, v, i)                                                                  \
    for (int q = 0; q < 4; q++) c = tk_emit(m[q], v[q], (i) + q * DL_TK_LANES, idx, out, cap, c)
#else
#define DL_TK_EMIT_BLOCK(m, v, i)                                                                  \
    for (int q = 0; q < 4; q++)                                                                    \
        if (m[q]) c = tk_emit(m[q], v[q], (i) + q * DL_TK_LANES, idx, out, cap, c)
#endif

/* Magnitude filter: returns how many i in [i0, i1) have (bits(x[i]) & 0x7fffffff) >= t and writes
 * the first min(count, cap) of them (index, raw float bits) to idx/bits in ascending order. Writes
 * nothing past cap. With hist (else NULL), also adds 1 to hist[(s >> 16) - (t >> 16)] for the
 * score s of each candidate written: the first level of the select, here while the candidate is
 * in a register rather than in a later pass over the candidates from DRAM. Single-threaded. */
int64_t DL_TK_CAT(dl_topk_filter_f32, DL_SUFFIX)(const float *x, int64_t i0, int64_t i1,
                                                 uint32_t t, int64_t cap, int32_t *idx,
                                                 uint32_t *bits, int32_t *hist) {
    int64_t c = 0, i = i0, cf = 0; /* cf: candidates already in hist */
    const uint32_t hlo = t >> 16;
#if DL_TK_LANES > 1
    const dl_tk_vu tv = (dl_tk_vu){0} + t, am = (dl_tk_vu){0} + 0x7fffffffu;
#if defined(__AVX2__) && !defined(__AVX512F__)
    /* AVX2: runs of DL_TK_RUN elements in two phases. First one 64-bit mask per 64 elements, with
     * no store and no branch (a signed compare: the magnitudes are below 2^31, and t - 1 wraps to
     * -1 for t = 0, which every magnitude passes); then the set bits are walked, one scalar
     * (index, bits) pair per candidate from the run still in L1. Per candidate rather than per
     * vector: the cost follows the candidates, and the first phase stays at the memory rate.
     * (A branch per vector or a store per vector in the first phase cost ~40% more at ~1%.) */
    if (t > 0x7fffffffu) return 0; /* no magnitude reaches it */
    const __m256i tm1 = _mm256_set1_epi32((int32_t)(t - 1u));
    const __m256i am8 = _mm256_set1_epi32(0x7fffffff);
    const int dense = cap > (i1 - i0) / 128; /* buffer sized for > ~0.5% candidates */
    for (; i + DL_TK_RUN <= i1; i += DL_TK_RUN) {
        uint64_t w[DL_TK_RUN / 64];
        for (int q = 0; q < DL_TK_RUN / 64; q++) {
            uint64_t m = 0;
            for (int u = 0; u < 8; u++) {
                const __m256i v = _mm256_and_si256(
                    _mm256_loadu_si256((const __m256i *)(x + i + q * 64 + u * 8)), am8);
                const __m256i ge = _mm256_cmpgt_epi32(v, tm1);
                m |= (uint64_t)(uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(ge)) << (u * 8);
            }
            w[q] = m;
        }
        const uint32_t *xb = (const uint32_t *)(const void *)(x + i);
        if (dense && c + DL_TK_RUN <= cap) {
            /* Two candidates per word written without a branch (a word without one writes a
             * slot that the next write overwrites), a loop for the rest; then the run's
             * candidates, still in L1, go to the histogram. */
            const int64_t c0 = c;
            for (int q = 0; q < DL_TK_RUN / 64; q++) {
                uint64_t m = w[q];
                for (int r = 0; r < 2; r++) {
                    const int j = q * 64 + __builtin_ctzll(m | (1ull << 63));
                    idx[c] = (int32_t)(i + j);
                    memcpy(&bits[c], xb + j, 4);
                    c += m != 0;
                    m &= m - 1;
                }
                for (; m; m &= m - 1) {
                    const int j = q * 64 + __builtin_ctzll(m);
                    idx[c] = (int32_t)(i + j);
                    memcpy(&bits[c], xb + j, 4);
                    c++;
                }
            }
            if (hist != NULL && cf == c0) {
                for (int64_t j = c0; j < c; j++) hist[((bits[j] & 0x7fffffffu) >> 16) - hlo]++;
                cf = c;
            }
        } else if (c + DL_TK_RUN <= cap) {
            for (int q = 0; q < DL_TK_RUN / 64; q++)
                for (uint64_t m = w[q]; m; m &= m - 1) {
                    const int j = q * 64 + __builtin_ctzll(m);
                    idx[c] = (int32_t)(i + j);
                    memcpy(&bits[c], xb + j, 4);
                    c++;
                }
        } else {
            for (int q = 0; q < DL_TK_RUN / 64; q++)
                for (uint64_t m = w[q]; m; m &= m - 1) {
                    const int j = q * 64 + __builtin_ctzll(m);
                    uint32_t b;
                    memcpy(&b, xb + j, 4);
                    tk_put(idx, bits, cap, c++, i + j, b);
                }
        }
    }
#endif
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
    if (hist != NULL)
        for (int64_t j = cf; j < dl_min_i64(c, cap); j++)
            hist[((bits[j] & 0x7fffffffu) >> 16) - hlo]++;
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

/* Appends the passing lanes of one vector pair: the set bits of m, lanes of vi and vb. */
#if defined(__AVX512F__)
static inline int64_t tk_emit2(uint32_t m, dl_tk_vu vi, dl_tk_vu vb, int32_t *oi, uint32_t *ob,
                               int64_t cap, int64_t c) {
    const __m512i ci = _mm512_maskz_compress_epi32((__mmask16)m, (__m512i)vi);
    const __m512i cb = _mm512_maskz_compress_epi32((__mmask16)m, (__m512i)vb);
    const int pop = __builtin_popcount(m);
    if (c + 16 <= cap) {
        _mm512_storeu_si512(oi + c, ci);
        _mm512_storeu_si512(ob + c, cb);
    } else if (c < cap) {
        int32_t ti[16];
        uint32_t tb[16];
        _mm512_storeu_si512(ti, ci);
        _mm512_storeu_si512(tb, cb);
        const int64_t w = dl_min_i64(pop, cap - c);
        memcpy(oi + c, ti, (size_t)w * 4);
        memcpy(ob + c, tb, (size_t)w * 4);
    }
    return c + pop;
}
#elif defined(__AVX2__)
static inline int64_t tk_emit2(uint32_t m, dl_tk_vu vi, dl_tk_vu vb, int32_t *oi, uint32_t *ob,
                               int64_t cap, int64_t c) {
    if (c + 8 <= cap) {
        const __m256i perm = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)tk_lut[m]));
        _mm256_storeu_si256((__m256i *)(oi + c), _mm256_permutevar8x32_epi32((__m256i)vi, perm));
        _mm256_storeu_si256((__m256i *)(ob + c), _mm256_permutevar8x32_epi32((__m256i)vb, perm));
        return c + __builtin_popcount(m);
    }
    uint32_t li[8], lb[8];
    memcpy(li, &vi, sizeof li);
    memcpy(lb, &vb, sizeof lb);
    while (m) {
        const int j = __builtin_ctz(m);
        tk_put(oi, ob, cap, c++, (int32_t)li[j], lb[j]);
        m &= m - 1;
    }
    return c;
}
#elif DL_TK_LANES > 1
static inline int64_t tk_emit2(uint32_t m, dl_tk_vu vi, dl_tk_vu vb, int32_t *oi, uint32_t *ob,
                               int64_t cap, int64_t c) {
    uint32_t li[DL_TK_LANES], lb[DL_TK_LANES];
    memcpy(li, &vi, sizeof li);
    memcpy(lb, &vb, sizeof lb);
    while (m) {
        const int j = __builtin_ctz(m);
        tk_put(oi, ob, cap, c++, (int32_t)li[j], lb[j]);
        m &= m - 1;
    }
    return c;
}
#endif

/* Compaction of a candidate list: returns how many j in [0, n) have (bits[j] & mask) >= t and
 * writes the first min(count, cap) of them (idx[j], bits[j]) to oi/ob in order. Writes nothing
 * past cap. The selection of the final top-k from the filter's candidates: most pass, so every
 * vector is compacted without a test (no branch to mispredict). Single-threaded. */
int64_t DL_TK_CAT(dl_topk_compact_u32, DL_SUFFIX)(const int32_t *idx, const uint32_t *bits,
                                                  int64_t n, uint32_t mask, uint32_t t,
                                                  int64_t cap, int32_t *oi, uint32_t *ob) {
    int64_t c = 0, j = 0;
#if DL_TK_LANES > 1
    const dl_tk_vu tv = (dl_tk_vu){0} + t, mv = (dl_tk_vu){0} + mask;
    for (; j + DL_TK_LANES <= n; j += DL_TK_LANES) {
        const dl_tk_vu vb = tk_ld((const float *)(bits + j));
        const dl_tk_vu vi = tk_ld((const float *)(idx + j));
        c = tk_emit2(tk_mask_ge(vb & mv, tv), vi, vb, oi, ob, cap, c);
    }
#endif
    for (; j < n; j++)
        if ((bits[j] & mask) >= t) tk_put(oi, ob, cap, c++, idx[j], bits[j]);
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
