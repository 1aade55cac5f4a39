/* natural_impl.h: natural compression and natural dithering (Horvath et al., "Natural Compression
 * for Distributed Deep Learning"), compiled once per ISA.
 *
 * Included by natural.c (baseline flags), natural_avx2.c and natural_avx512.c (their own -m flags),
 * each defining DL_SUFFIX. The arithmetic is written with GCC vector extensions on uint32 lanes;
 * the few operations C cannot spell portably (saturating clamp, "any lane set", narrowing to bytes)
 * are small per-ISA helpers. Everything that decides a code is integer arithmetic or an exact
 * float operation (scaling by a power of two, a correctly rounded division), so every ISA path,
 * thread count and vector/tail split gives the same bits as decentlearn/_reference/natural.py.
 *
 * Natural compression rounds |x| = 2^e (1 + m) to 2^(e+1) with probability m, else 2^e, by adding
 * the low 23 bits of the counter RNG's word to the float's bits (the mantissa carry bumps the
 * exponent exactly when u >= 2^23 (1 - m)) and keeping the exponent. Code (one byte): bit 7 sign,
 * bits 0-6 c, c = 0 -> 0, c in 1..127 -> 2^(c - 64). |x| < 2^-63 ("tiny") goes to 2^-63 with
 * probability floor(|x| 2^94) / 2^31 (the low 31 RNG bits compared with it), else to 0: unbiased
 * up to an absolute error below 2^-94, and subnormals (probability below 2^-31) always give 0.
 * Results above 2^63 saturate to 2^63, the one biased case. Natural dithering applies the same
 * rounding to r = |x| / ||x||_p in [0, 1] with levels 0, 2^(1-S), ..., 1/2, 1.
 *
 * Work is split into (row, chunk of DL_NAT_CHUNK elements) tiles; within a tile, blocks of
 * DL_NAT_BLK elements starting at row indices that are multiples of DL_NAT_BLK are vectorized and
 * the rest of a row goes through the scalar twin of the same arithmetic. AVX-512 encodes blocks of
 * 64 with the code formed on bytes (nat_codes64; blocks with rare values take the exact path) and
 * streams whole cache lines of codes itself. Tiles are handed out
 * dynamically: a tile's output depends on its indices only, so the bits do not depend on which
 * thread takes it, and a thread the OS deschedules (a loaded machine) does not hold the others up.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dl.h"

#ifndef DL_SUFFIX
#error "define DL_SUFFIX before including natural_impl.h"
#endif
#define DL_CAT2(a, b) a##_##b
#define DL_CAT(a, b) DL_CAT2(a, b)

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define NAT_X86 1
#endif

#if defined(__AVX512F__)
#define NAT_LANES 16
#elif defined(__AVX2__)
#define NAT_LANES 8
#else
#define NAT_LANES 4
#endif
#define DL_NAT_BLK 32                    /* elements per vector block (multiple of 16) */
#define NAT_NV (DL_NAT_BLK / NAT_LANES)  /* vectors per block */
#define DL_NAT_CHUNK 16384               /* elements per tile (a multiple of DL_NAT_BLK) */
#define DL_NAT_STREAM_BYTES (4 << 20)    /* code outputs this large bypass the caches */

typedef uint32_t nat_vu __attribute__((vector_size(NAT_LANES * 4)));
typedef int32_t nat_vi __attribute__((vector_size(NAT_LANES * 4)));
typedef float nat_vf __attribute__((vector_size(NAT_LANES * 4)));
typedef uint8_t nat_vb __attribute__((vector_size(NAT_LANES)));
typedef double nat_vd16 __attribute__((vector_size(128)));
typedef float nat_vf16 __attribute__((vector_size(64)));

#define NAT_H1 0x21f0aaadu /* lowbias32's multipliers (dl_hash32) */
#define NAT_H2 0x735a2d97u

static inline nat_vu nat_ld(const void *p) {
    nat_vu v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Selects a where m is all ones, b where m is zero (m from a vector comparison). */
static inline nat_vu nat_sel(nat_vi m, nat_vu a, nat_vu b) {
    return (a & (nat_vu)m) | (b & ~(nat_vu)m);
}

/* min(sat(e - lo), hi) per lane, for 0 <= e < 2^15, lo, hi < 2^15: unsigned saturating subtract
 * and signed min on 16-bit halves (the upper half of every lane is 0 and stays 0). */
static inline nat_vu nat_clamp(nat_vu e, uint32_t lo, uint32_t hi) {
#if defined(__AVX512F__)
    return (nat_vu)_mm512_min_epi16(_mm512_subs_epu16((__m512i)e, _mm512_set1_epi32((int)lo)),
                                    _mm512_set1_epi32((int)hi));
#elif defined(__AVX2__)
    return (nat_vu)_mm256_min_epi16(_mm256_subs_epu16((__m256i)e, _mm256_set1_epi32((int)lo)),
                                    _mm256_set1_epi32((int)hi));
#elif defined(NAT_X86)
    return (nat_vu)_mm_min_epi16(_mm_subs_epu16((__m128i)e, _mm_set1_epi32((int)lo)),
                                 _mm_set1_epi32((int)hi));
#else
    for (int i = 0; i < NAT_LANES; i++) {
        uint32_t c = e[i] > lo ? e[i] - lo : 0;
        e[i] = c < hi ? c : hi;
    }
    return e;
#endif
}

/* Whether any lane of v exceeds c (signed). */
static inline int nat_any_gt(nat_vi v, int32_t c) {
#if defined(__AVX512F__)
    return _mm512_cmpgt_epi32_mask((__m512i)v, _mm512_set1_epi32(c)) != 0;
#elif defined(__AVX2__)
    return !_mm256_testz_si256(_mm256_cmpgt_epi32((__m256i)v, _mm256_set1_epi32(c)),
                               _mm256_set1_epi32(-1));
#elif defined(NAT_X86)
    return _mm_movemask_epi8(_mm_cmpgt_epi32((__m128i)v, _mm_set1_epi32(c))) != 0;
#else
    int any = 0;
    for (int i = 0; i < NAT_LANES; i++) any |= v[i] > c;
    return any;
#endif
}

/* Running check for NaN/Inf: folds |x| bits a into acc; nat_bad_lane(acc lane) has bit 31 set iff
 * some a >= 0x7f800000. (max where the ISA has an unsigned max, else an add and an or.) */
static inline nat_vu nat_bad_acc(nat_vu acc, nat_vu a) {
#if defined(__AVX512F__)
    return (nat_vu)_mm512_max_epu32((__m512i)acc, (__m512i)a);
#elif defined(__AVX2__)
    return (nat_vu)_mm256_max_epu32((__m256i)acc, (__m256i)a);
#else
    return acc | (a + 0x00800000u);
#endif
}
static inline uint32_t nat_bad_lane(uint32_t v) {
#if defined(__AVX512F__) || defined(__AVX2__)
    return v + 0x00800000u;
#else
    return v;
#endif
}

/* out[0:32] = the low bytes of the NAT_NV vectors' lanes (every lane < 256), in order. */
static inline void nat_store_bytes(uint8_t *out, const nat_vu *v) {
#if defined(__AVX512F__)
    __m256i lo = _mm256_castsi128_si256(_mm512_cvtepi32_epi8((__m512i)v[0]));
    __m256i both = _mm256_inserti128_si256(lo, _mm512_cvtepi32_epi8((__m512i)v[1]), 1);
    _mm256_storeu_si256((__m256i *)out, both);
#elif defined(__AVX2__)
    /* lanes (128-bit halves) of the packs interleave; one cross-lane permute restores order */
    __m256i p0 = _mm256_packs_epi32((__m256i)v[0], (__m256i)v[1]);
    __m256i p1 = _mm256_packs_epi32((__m256i)v[2], (__m256i)v[3]);
    __m256i q = _mm256_packus_epi16(p0, p1);
    q = _mm256_permutevar8x32_epi32(q, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)out, q);
#elif defined(NAT_X86)
    for (int h = 0; h < 2; h++) {
        __m128i p0 = _mm_packs_epi32((__m128i)v[4 * h], (__m128i)v[4 * h + 1]);
        __m128i p1 = _mm_packs_epi32((__m128i)v[4 * h + 2], (__m128i)v[4 * h + 3]);
        _mm_storeu_si128((__m128i *)(out + 16 * h), _mm_packus_epi16(p0, p1));
    }
#else
    for (int u = 0; u < NAT_NV; u++)
        for (int i = 0; i < NAT_LANES; i++) out[u * NAT_LANES + i] = (uint8_t)v[u][i];
#endif
}

/* Copies n bytes from an L1-resident buffer to dst, storing whole aligned 16-byte (64-byte under
 * AVX-512) pieces non-temporally (the write-allocate read of dst is skipped). Plain memcpy off
 * x86. */
static inline void nat_stream_copy(uint8_t *dst, const uint8_t *src, int64_t n) {
#ifdef NAT_X86
#if defined(__AVX512F__)
    enum { W = 64 };
#else
    enum { W = 16 };
#endif
    int64_t head = dl_min_i64((int64_t)((-(uintptr_t)dst) & (W - 1)), n);
    memcpy(dst, src, (size_t)head);
    int64_t i = head;
    for (; i + W <= n; i += W)
#if defined(__AVX512F__)
        _mm512_stream_si512((void *)(dst + i), _mm512_loadu_si512((const void *)(src + i)));
#else
        _mm_stream_si128((__m128i *)(dst + i), _mm_loadu_si128((const __m128i *)(src + i)));
#endif
    memcpy(dst + i, src + i, (size_t)(n - i));
#else
    memcpy(dst, src, (size_t)n);
#endif
}

static inline void nat_fence(void) {
#ifdef NAT_X86
    _mm_sfence();
#endif
}

/* ---- the counter RNG on vectors -------------------------------------------------------------
 * dl_rng_fast_u32(key, j) for the DL_NAT_BLK indices j0 + i, j0 a multiple of DL_NAT_BLK: the hash
 * input of j0 + i is base(j0) + i w (the block never crosses a multiple of 2^32), so a block costs
 * one scalar base, one vector add per vector and one lowbias32 round (two multiplies) per lane. */
typedef struct {
    uint64_t key;
    nat_vu lane; /* i w for lane i */
    uint32_t vstep; /* NAT_LANES w */
} nat_key_t;

static inline nat_key_t nat_key(uint64_t seed, uint64_t step, uint64_t peer) {
    nat_key_t k;
    k.key = dl_rng_key(seed, step, peer);
    const uint32_t w = (uint32_t)(k.key >> 32) | 1u;
    for (int i = 0; i < NAT_LANES; i++) k.lane[i] = (uint32_t)i * w;
    k.vstep = (uint32_t)NAT_LANES * w;
    return k;
}

static inline nat_vu nat_hash(nat_vu x) { /* lowbias32 (dl_hash32) on every lane */
    x ^= x >> 16;
    x *= NAT_H1;
    x ^= x >> 15;
    x *= NAT_H2;
    x ^= x >> 15;
    return x;
}

/* Random words of block j0 (NAT_NV vectors). */
static inline void nat_rng_block(const nat_key_t *k, uint64_t j0, nat_vu *r) {
    nat_vu s = k->lane + dl_rng_fast_base(k->key, j0);
    for (int u = 0; u < NAT_NV; u++) {
        r[u] = nat_hash(s);
        s += k->vstep;
    }
}

/* ---- natural compression ------------------------------------------------------------------ */

/* The code of one value from its bits b and its random word rnd: the scalar spec. */
static inline uint8_t nat_code1(uint32_t b, uint32_t rnd) {
    const uint32_t a = b & 0x7fffffffu;
    uint32_t c;
    if (a - 1u < 0x1fffffffu) { /* 0 < |x| < 2^-63 */
        float f;
        memcpy(&f, &a, sizeof f);
        c = (int32_t)(rnd & 0x7fffffffu) < (int32_t)(f * 0x1p94f);
    } else {
        uint32_t e = (a + (rnd & 0x7fffffu)) >> 23;
        e = e < 63 ? 63 : (e > 190 ? 190 : e);
        c = e - 63;
    }
    return (uint8_t)(c | ((b >> 24) & (c + 127) & 0x80));
}

/* Codes of DL_NAT_BLK values; bad accumulates nat_bad_acc. */
static inline void nat_encode_block(const float *x, uint8_t *out, const nat_key_t *k, uint64_t j0,
                                    nat_vu *bad) {
    nat_vu r[NAT_NV], code[NAT_NV];
    nat_rng_block(k, j0, r);
    for (int u = 0; u < NAT_NV; u++) {
        const nat_vu b = nat_ld(x + u * NAT_LANES);
        const nat_vu a = b & 0x7fffffffu;
        *bad = nat_bad_acc(*bad, a);
        nat_vu c = nat_clamp((a + (r[u] & 0x7fffffu)) >> 23, 63, 127);
        /* 0 < a < 0x20000000 (0 < |x| < 2^-63) <=> (int32)(a + 0x60000000) > 0x60000000 */
        const nat_vi ta = (nat_vi)(a + 0x60000000u);
        if (__builtin_expect(nat_any_gt(ta, 0x60000000), 0)) {
            const nat_vi tiny = ta > 0x60000000;
            const nat_vf f = (nat_vf)(a & (nat_vu)tiny) * 0x1p94f;
            const nat_vi kk = __builtin_convertvector(f, nat_vi);
            const nat_vu bump = (nat_vu)((nat_vi)(r[u] & 0x7fffffffu) < kk) & 1u;
            c = nat_sel(tiny, bump, c);
        }
        code[u] = c | ((b >> 24) & (c + 127) & 0x80u);
    }
    nat_store_bytes(out, code);
}

#if defined(__AVX2__) && !defined(__AVX512F__)
/* The AVX2 fast path of nat_encode_block, same bits: the code is formed on bytes. With
 * t = 2 (|x| bits + the word's low 23 bits), the top byte of t is the rounded biased exponent E
 * (|x| has no sign bit, so nothing carries out for finite x), c = min(sat(E - 63), 127) is a
 * saturating byte subtract and a byte min, the sign is or-ed into bit 31, and one vpshufb per
 * vector gathers the top bytes (no 32-bit shifts: Zen 1 runs those on one pipe only). Sign on a
 * zero code is cleared on the 32 gathered bytes. The block is correct as is unless some code has
 * c <= 1 or c = 127 (zero, |x| < 2^-62, NaN/Inf: 2t wraps to c = 0 or tops at c = 127, |x| >=
 * 2^63): those blocks return 1 and the caller checks them exactly. */
#define NAT_G(u, i) (char)((i) / 4 == (u) ? 3 + 4 * ((i) % 4) : -1)
#define NAT_G16(u)                                                                                 \
    NAT_G(u, 0), NAT_G(u, 1), NAT_G(u, 2), NAT_G(u, 3), NAT_G(u, 4), NAT_G(u, 5), NAT_G(u, 6),     \
        NAT_G(u, 7), NAT_G(u, 8), NAT_G(u, 9), NAT_G(u, 10), NAT_G(u, 11), NAT_G(u, 12),          \
        NAT_G(u, 13), NAT_G(u, 14), NAT_G(u, 15)
static inline __m256i nat_gather_mask(int u) {
    switch (u) {
    case 0: return _mm256_setr_epi8(NAT_G16(0), NAT_G16(0));
    case 1: return _mm256_setr_epi8(NAT_G16(1), NAT_G16(1));
    case 2: return _mm256_setr_epi8(NAT_G16(2), NAT_G16(2));
    default: return _mm256_setr_epi8(NAT_G16(3), NAT_G16(3));
    }
}

static inline int nat_encode_block_fast(const float *x, uint8_t *out, const nat_key_t *k,
                                        uint64_t j0) {
    nat_vu r[NAT_NV];
    nat_rng_block(k, j0, r);
    const __m256i m23 = _mm256_set1_epi32(0x7fffff), ab = _mm256_set1_epi32(0x7fffffff);
    const __m256i sgn = _mm256_set1_epi32((int)0x80000000u);
    const __m256i c63 = _mm256_set1_epi8(63), c127 = _mm256_set1_epi8(127);
    __m256i g = _mm256_setzero_si256();
    for (int u = 0; u < NAT_NV; u++) {
        const __m256i b = _mm256_loadu_si256((const __m256i *)(x + u * NAT_LANES));
        __m256i t = _mm256_and_si256((__m256i)r[u], m23);
        t = _mm256_add_epi32(_mm256_and_si256(b, ab), t);
        t = _mm256_add_epi32(t, t);
        t = _mm256_min_epu8(_mm256_subs_epu8(t, c63), c127);
        t = _mm256_or_si256(t, _mm256_and_si256(b, sgn));
        /* byte 3 of each 32-bit lane to bytes 4u..4u+3 of its 128-bit half, the others zero */
        g = _mm256_or_si256(g, _mm256_shuffle_epi8(t, nat_gather_mask(u)));
    }
    g = _mm256_permutevar8x32_epi32(g, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    const __m256i c2 = _mm256_add_epi8(g, g); /* 2c: the sign bit shifted out */
    g = _mm256_andnot_si256(_mm256_cmpeq_epi8(c2, _mm256_setzero_si256()), g);
    _mm256_storeu_si256((__m256i *)out, g);
    /* 2c + 2 (mod 256) <= 4 exactly when c is 0, 1 or 127 */
    const __m256i f = _mm256_add_epi8(c2, _mm256_set1_epi8(2));
    return !_mm256_testz_si256(_mm256_cmpeq_epi8(_mm256_min_epu8(f, _mm256_set1_epi8(4)), f),
                               _mm256_set1_epi8(-1));
}

/* Whether DL_NAT_BLK values hold 0 < |x| < 2^-63 or NaN/Inf (the cases nat_encode_block_fast
 * may get wrong or must report). */
static inline int nat_block_special(const float *x) {
    nat_vu any = {0};
    for (int u = 0; u < NAT_NV; u++) {
        const nat_vu a = nat_ld(x + u * NAT_LANES) & 0x7fffffffu;
        any |= (nat_vu)((nat_vi)(a + 0x60000000u) > 0x60000000);
        any |= (nat_vu)((nat_vi)a >= 0x7f800000);
    }
    return !_mm256_testz_si256((__m256i)any, (__m256i)any);
}
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__)
/* The AVX-512 fast path of two nat_encode_block calls (64 values, j0 a multiple of 64), same bits,
 * about 2/3 of the vector operations: per vector only the hash, t = |x| bits + the word's low 23
 * bits and E = t >> 23 (the rounded biased exponent; 255 or 256 for NaN/Inf and results above
 * 2^127); the four E vectors are narrowed to 64 bytes by two packs and one dword transpose,
 * c = min(sat(E - 63), 127) is formed on bytes, and the sign goes in from the four sign masks where
 * c != 0. The codes are right unless some E is in [1, 64] (0 < |x| < 2^-62, the tiny rule) or
 * >= 255: then the block is coded exactly (nat_encode_block, which also reports NaN/Inf in bad).
 * E = 0 (zero, or a subnormal that did not carry) is code 0 under both rules. */
static inline __m512i nat_codes64(const float *x, const nat_key_t *k, uint64_t j0, nat_vu *bad) {
    nat_vu s = k->lane + dl_rng_fast_base(k->key, j0);
    const __m512i ab = _mm512_set1_epi32(0x7fffffff);
    __m512i e[4];
    __mmask16 sg[4];
    for (int u = 0; u < 4; u++) {
        const nat_vu r = nat_hash(s) & 0x7fffffu;
        s += k->vstep;
        const __m512i b = _mm512_loadu_si512((const void *)(x + 16 * u));
        sg[u] = _mm512_movepi32_mask(b);
        e[u] = _mm512_srli_epi32(_mm512_add_epi32(_mm512_and_si512(b, ab), (__m512i)r), 23);
    }
    /* packs interleave 128-bit lanes: lane L holds dwords L of vectors 0..3 in that order */
    __m512i E = _mm512_packus_epi16(_mm512_packus_epi32(e[0], e[1]),
                                    _mm512_packus_epi32(e[2], e[3]));
    E = _mm512_permutexvar_epi32(
        _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), E);
    const __mmask64 odd =
        _mm512_cmplt_epu8_mask(_mm512_sub_epi8(E, _mm512_set1_epi8(1)), _mm512_set1_epi8(64)) |
        _mm512_cmpeq_epi8_mask(E, _mm512_set1_epi8(-1));
    if (__builtin_expect(odd != 0, 0)) {
        uint8_t tmp[64] __attribute__((aligned(64)));
        nat_encode_block(x, tmp, k, j0, bad);
        nat_encode_block(x + 32, tmp + 32, k, j0 + 32, bad);
        return _mm512_load_si512((const void *)tmp);
    }
    const __m512i c =
        _mm512_min_epu8(_mm512_subs_epu8(E, _mm512_set1_epi8(63)), _mm512_set1_epi8(127));
    __mmask64 neg = _mm512_kunpackd(_mm512_kunpackw(sg[3], sg[2]), _mm512_kunpackw(sg[1], sg[0]));
    neg = _mm512_mask_test_epi8_mask(neg, c, c);
    return _mm512_mask_add_epi8(c, neg, c, _mm512_set1_epi8((char)0x80));
}

/* Codes of the whole 64-blocks of [j0, j1) of one row (j0 a multiple of 64) into cr (the row's
 * codes), cr + j0 a multiple of 4 bytes past a cache line (numpy's large arrays are 16 bytes
 * past one): every cache line of codes that lies in the tile is stored non-temporally, from two
 * consecutive blocks joined by one dword permute; the partial lines at both ends are stored
 * plainly (byte masks). Returns the index after the last whole block. */
static inline int64_t nat_encode_stream64(const float *xr, uint8_t *cr, const nat_key_t *k,
                                          int64_t j0, int64_t j1, nat_vu *bad) {
    const int64_t h = (int64_t)((-(uintptr_t)(cr + j0)) & 63); /* bytes before a line starts */
    const __m512i idx = _mm512_add_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32((int)(h / 4)));
    int64_t j = j0;
    if (j + 64 > j1) return j;
    __m512i prev = nat_codes64(xr + j, k, (uint64_t)j, bad);
    _mm512_mask_storeu_epi8(cr + j, h ? ((__mmask64)1 << h) - 1 : 0, prev);
    for (j += 64; j + 64 <= j1; j += 64) {
        const __m512i cur = nat_codes64(xr + j, k, (uint64_t)j, bad);
        _mm512_stream_si512((void *)(cr + j - 64 + h), _mm512_permutex2var_epi32(prev, idx, cur));
        prev = cur;
    }
    _mm512_mask_storeu_epi8(cr + j - 64 + h, ~(__mmask64)0 >> h,
                            _mm512_permutex2var_epi32(prev, idx, prev));
    return j;
}
#endif

/* codes (n_rows x dim) uint8 from x (n_rows x dim) float32; row r draws from peer peer0 + r.
 * DL_E_NONFINITE if x holds NaN/Inf (codes then unspecified). Any n_threads gives the same bits. */
int DL_CAT(dl_natural_encode_f32, DL_SUFFIX)(int64_t n_rows, int64_t dim, const float *x,
                                              uint64_t seed, uint64_t step, int64_t peer0,
                                              uint8_t *codes, int n_threads) {
    if (n_rows < 0 || dim < 0 || n_threads < 1) return DL_E_ARG;
    if (n_rows == 0 || dim == 0) return DL_OK;
    const int64_t cpr = dl_cdiv_i64(dim, DL_NAT_CHUNK), n_tiles = n_rows * cpr;
    const int stream = n_rows * dim >= DL_NAT_STREAM_BYTES;
    uint32_t bad_all = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads((int)dl_min_i64(n_threads, n_tiles)) reduction(| : bad_all)
#else
    (void)n_threads;
#endif
    {
        uint8_t stage[DL_NAT_CHUNK] __attribute__((aligned(64)));
        nat_vu bad = {0};
        uint32_t bad1 = 0;
#ifdef _OPENMP
#pragma omp for schedule(dynamic)
#endif
        for (int64_t t = 0; t < n_tiles; t++) {
            const int64_t r = t / cpr, j0 = (t % cpr) * DL_NAT_CHUNK;
            const int64_t j1 = dl_min_i64(dim, j0 + DL_NAT_CHUNK);
            const nat_key_t k = nat_key(seed, step, (uint64_t)(peer0 + r));
            const float *xr = x + r * dim;
            /* Large outputs: staged in L1, then streamed to codes, except on the AVX-512 path
             * when codes is a whole number of dwords past a cache line (it streams itself). */
            uint8_t *cr = codes + r * dim;
#if defined(__AVX512F__) && defined(__AVX512BW__)
            const int direct = !stream || ((uintptr_t)(cr + j0) & 3) == 0;
#else
            const int direct = !stream;
#endif
            uint8_t *dst = direct ? cr : stage - j0;
            int64_t j = j0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
            if (stream && direct)
                j = nat_encode_stream64(xr, cr, &k, j0, j1, &bad);
            else
                for (; j + 64 <= j1; j += 64) {
                    const __m512i c = nat_codes64(xr + j, &k, (uint64_t)j, &bad);
                    _mm512_storeu_si512((void *)(dst + j), c);
                }
#endif
            for (; j + DL_NAT_BLK <= j1; j += DL_NAT_BLK) {
#if defined(__AVX2__) && !defined(__AVX512F__)
                if (__builtin_expect(!nat_encode_block_fast(xr + j, dst + j, &k, (uint64_t)j), 1) ||
                    !nat_block_special(xr + j))
                    continue;
#endif
                nat_encode_block(xr + j, dst + j, &k, (uint64_t)j, &bad);
            }
            if (j < j1) {
                for (; j < j1; j++) {
                    uint32_t b;
                    memcpy(&b, xr + j, sizeof b);
                    bad1 |= (b & 0x7fffffffu) + 0x00800000u;
                    dst[j] = nat_code1(b, dl_rng_fast_u32(k.key, (uint64_t)j));
                }
            }
            if (!direct) nat_stream_copy(cr + j0, stage, j1 - j0);
        }
        if (stream) nat_fence();
        for (int i = 0; i < NAT_LANES; i++) bad1 |= nat_bad_lane(bad[i]);
        bad_all |= bad1;
    }
    return (bad_all & 0x80000000u) ? DL_E_NONFINITE : DL_OK;
}

/* Stores one vector of floats at y, non-temporally when `stream` (y then vector-aligned). */
static inline void nat_st_f(float *y, nat_vu v, int stream) {
#ifdef NAT_X86
    if (stream) {
#if defined(__AVX512F__)
        _mm512_stream_si512((void *)y, (__m512i)v);
#elif defined(__AVX2__)
        _mm256_stream_si256((__m256i *)y, (__m256i)v);
#else
        _mm_stream_si128((__m128i *)y, (__m128i)v);
#endif
        return;
    }
#else
    (void)stream;
#endif
    memcpy(y, &v, sizeof v);
}

/* Elements before y + i is vector-aligned (at most n). */
static inline int64_t nat_head(const float *y, int64_t n) {
    return dl_min_i64((int64_t)((-(uintptr_t)y) & (sizeof(nat_vu) - 1)) / 4, n);
}

static inline uint32_t nat_decode1(uint32_t v) {
    const uint32_t c = v & 0x7fu;
    return c ? ((v >> 7) << 31) | ((c + 63) << 23) : 0;
}

/* Decodes 2 NAT_LANES codes into y (vector-aligned when `stream`) on 16-bit lanes: the upper
 * half of a decoded float is sign << 15 | (c + 63) << 7 (0 for c = 0), its lower half 0; the
 * halves are interleaved with zeros after a quadword permute that puts them back in order.
 * Returns 0 where the ISA has no such path (the caller's loop then does the work). */
static inline int nat_decode_wide(const uint8_t *codes, float *y, int stream) {
#if defined(__AVX512F__) && defined(__AVX512BW__)
    const __m512i h = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)codes));
    const __m512i c = _mm512_and_si512(h, _mm512_set1_epi16(0x7f));
    const __m512i sgn = _mm512_slli_epi16(_mm512_and_si512(h, _mm512_set1_epi16(0x80)), 8);
    __m512i hi = _mm512_or_si512(
        sgn, _mm512_add_epi16(_mm512_slli_epi16(c, 7), _mm512_set1_epi16(0x1f80)));
    hi = _mm512_maskz_mov_epi16(_mm512_test_epi16_mask(c, c), hi);
    hi = _mm512_permutexvar_epi64(_mm512_set_epi64(7, 3, 6, 2, 5, 1, 4, 0), hi);
    const __m512i z = _mm512_setzero_si512();
    nat_st_f(y, (nat_vu)_mm512_unpacklo_epi16(z, hi), stream);
    nat_st_f(y + NAT_LANES, (nat_vu)_mm512_unpackhi_epi16(z, hi), stream);
    return 1;
#elif defined(__AVX2__)
    const __m256i h = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)codes));
    const __m256i c = _mm256_and_si256(h, _mm256_set1_epi16(0x7f));
    const __m256i sgn = _mm256_slli_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x80)), 8);
    __m256i hi = _mm256_or_si256(
        sgn, _mm256_add_epi16(_mm256_slli_epi16(c, 7), _mm256_set1_epi16(0x1f80)));
    hi = _mm256_andnot_si256(_mm256_cmpeq_epi16(c, _mm256_setzero_si256()), hi);
    hi = _mm256_permute4x64_epi64(hi, 0xd8); /* quadwords 0, 2, 1, 3 */
    const __m256i z = _mm256_setzero_si256();
    nat_st_f(y, (nat_vu)_mm256_unpacklo_epi16(z, hi), stream);
    nat_st_f(y + NAT_LANES, (nat_vu)_mm256_unpackhi_epi16(z, hi), stream);
    return 1;
#else
    (void)codes, (void)y, (void)stream;
    return 0;
#endif
}

/* y (n_rows x dim) float32 from natural codes (n_rows x dim); never fails on any byte value.
 * Outputs of DL_NAT_STREAM_BYTES floats or more are stored non-temporally. */
int DL_CAT(dl_natural_decode_f32, DL_SUFFIX)(int64_t n_rows, int64_t dim, const uint8_t *codes,
                                              float *y, int n_threads) {
    if (n_rows < 0 || dim < 0 || n_threads < 1) return DL_E_ARG;
    const int64_t n = n_rows * dim, n_tiles = dl_cdiv_i64(n, DL_NAT_CHUNK);
    if (n == 0) return DL_OK;
    const int stream = n >= DL_NAT_STREAM_BYTES;
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic) num_threads((int)dl_min_i64(n_threads, n_tiles))
#else
    (void)n_threads;
#endif
    for (int64_t t = 0; t < n_tiles; t++) {
        const int64_t i1 = dl_min_i64(n, (t + 1) * DL_NAT_CHUNK);
        int64_t i = t * DL_NAT_CHUNK;
        if (stream)
            for (const int64_t h = i + nat_head(y + i, i1 - i); i < h; i++) {
                const uint32_t bits = nat_decode1(codes[i]);
                memcpy(y + i, &bits, sizeof bits);
            }
        while (i + 2 * NAT_LANES <= i1 && nat_decode_wide(codes + i, y + i, stream))
            i += 2 * NAT_LANES;
        for (; i + NAT_LANES <= i1; i += NAT_LANES) {
            nat_vb v8;
            memcpy(&v8, codes + i, sizeof v8);
            const nat_vu v = __builtin_convertvector(v8, nat_vu), c = v & 0x7fu;
            const nat_vu bits = ((v >> 7) << 31) | ((c + 63) << 23);
            nat_st_f(y + i, bits & (nat_vu)(c != 0), stream);
        }
        for (; i < i1; i++) {
            const uint32_t bits = nat_decode1(codes[i]);
            memcpy(y + i, &bits, sizeof bits);
        }
        if (stream) nat_fence();
    }
    return DL_OK;
}

/* ---- natural dithering -------------------------------------------------------------------- */

typedef uint32_t nat_vu16 __attribute__((vector_size(64)));

/* Level of one ratio r in [0, 1] (bits ar) with random word rnd: 0..s, level l > 0 meaning
 * 2^(l - s). Ratios below 2^(1-s) go to 2^(1-s) with probability floor(r 2^(s+30)) / 2^31. */
static inline uint32_t dith_level1(uint32_t ar, uint32_t rnd, int s) {
    const uint32_t lo = 127u - (uint32_t)s; /* biased exponent of level 0's upper neighbour - 1 */
    if (ar < (lo + 1) << 23) {
        float f, scale;
        const uint32_t sb = (uint32_t)(127 + s + 30) << 23; /* 2^(s+30) */
        memcpy(&f, &ar, sizeof f);
        memcpy(&scale, &sb, sizeof scale);
        return (int32_t)(rnd & 0x7fffffffu) < (int32_t)(f * scale);
    }
    const uint32_t e = (ar + (rnd & 0x7fffffu)) >> 23;
    return (e > 127 ? 127 : e) - lo;
}

static inline uint8_t dith_code1(float xj, float norm, uint32_t rnd, int s) {
    uint32_t b, ar;
    memcpy(&b, &xj, sizeof b);
    const uint32_t a = b & 0x7fffffffu;
    float r;
    memcpy(&r, &a, sizeof r);
    r = r / norm;
    r = r > 1.0f ? 1.0f : r;
    memcpy(&ar, &r, sizeof ar);
    const uint32_t l = dith_level1(ar, rnd, s);
    return (uint8_t)((l << 1) | ((b >> 31) & ((l + 31) >> 5)));
}

/* Norm partial of elements [j0, j1) of a row, j0 a multiple of 16. pk = 1 or 2: sum of |x|^pk in
 * double, element j added to accumulator (j - j0) % 16 in index order, the 16 accumulators then
 * combined by halves (a[i] += a[i + h], h = 8, 4, 2, 1). pk = 0 (p = inf): the largest |x| bit
 * pattern, as a double. NaN/Inf make the sums non-finite and the pattern >= 0x7f800000. */
static inline double dith_partial(const float *x, int64_t j0, int64_t j1, int pk) {
    if (pk == 0) {
        uint32_t m = 0;
        for (int64_t j = j0; j < j1; j++) {
            uint32_t b;
            memcpy(&b, x + j, sizeof b);
            b &= 0x7fffffffu;
            m = b > m ? b : m;
        }
        return (double)m;
    }
    nat_vd16 acc = {0};
    int64_t j = j0;
    if (pk == 2) {
        for (; j + 16 <= j1; j += 16) {
            nat_vf16 v;
            memcpy(&v, x + j, sizeof v);
            const nat_vd16 d = __builtin_convertvector(v, nat_vd16);
            acc += d * d; /* exact products: a fused multiply-add gives the same sums */
        }
    } else {
        for (; j + 16 <= j1; j += 16) {
            nat_vu16 v;
            memcpy(&v, x + j, sizeof v);
            acc += __builtin_convertvector((nat_vf16)(v & 0x7fffffffu), nat_vd16);
        }
    }
    double a[16];
    memcpy(a, &acc, sizeof a);
    for (int i = 0; j < j1; j++, i++) {
        const double d = x[j];
        a[i] += pk == 2 ? d * d : (d < 0 ? -d : d);
    }
    for (int h = 8; h >= 1; h /= 2)
        for (int i = 0; i < h; i++) a[i] += a[i + h];
    return a[0];
}

/* Codes of DL_NAT_BLK values of a row whose norm is norm > 0. */
static inline void dith_encode_block(const float *x, uint8_t *out, const nat_key_t *k, uint64_t j0,
                                     float norm, int s) {
    nat_vu r[NAT_NV], code[NAT_NV];
    nat_rng_block(k, j0, r);
    const uint32_t lo = 127u - (uint32_t)s;
    const uint32_t sb = (uint32_t)(127 + s + 30) << 23;
    float scale;
    memcpy(&scale, &sb, sizeof scale);
    const nat_vf one = (nat_vf){0} + 1.0f;
    for (int u = 0; u < NAT_NV; u++) {
        const nat_vu b = nat_ld(x + u * NAT_LANES);
        nat_vf rf = (nat_vf)(b & 0x7fffffffu) / norm;
        rf = (nat_vf)nat_sel((nat_vi)(rf > 1.0f), (nat_vu)one, (nat_vu)rf);
        const nat_vu ar = (nat_vu)rf;
        const nat_vu l = nat_clamp((ar + (r[u] & 0x7fffffu)) >> 23, lo, (uint32_t)s);
        const nat_vi tiny = (nat_vi)ar < (int32_t)((lo + 1) << 23); /* ar < 2^31 */
        const nat_vi kk = __builtin_convertvector((nat_vf)(ar & (nat_vu)tiny) * scale, nat_vi);
        const nat_vu bump = (nat_vu)((nat_vi)(r[u] & 0x7fffffffu) < kk) & 1u;
        const nat_vu lv = nat_sel(tiny, bump, l);
        code[u] = (lv << 1) | ((b >> 31) & ((lv + 31) >> 5));
    }
    nat_store_bytes(out, code);
}

/* Natural dithering of each row of x (n_rows x dim): norms[r] = ||x_r||_p as float32 (p = 1, 2 or
 * inf; above FLT_MAX sent as FLT_MAX), codes[r, j] = (level << 1) | sign, level in 0..s.
 * DL_E_NONFINITE for NaN/Inf in x, DL_E_NOMEM; any n_threads gives the same bits. */
int DL_CAT(dl_natural_dither_encode_f32, DL_SUFFIX)(int64_t n_rows, int64_t dim, const float *x,
                                                     int s, float p, uint64_t seed, uint64_t step,
                                                     int64_t peer0, float *norms, uint8_t *codes,
                                                     int n_threads) {
    const int pk = p == 1.0f ? 1 : p == 2.0f ? 2 : (p > 3.4e38f && p == p) ? 0 : -1;
    if (n_rows < 0 || dim < 0 || n_threads < 1 || s < 1 || s > 31 || pk < 0) return DL_E_ARG;
    if (n_rows == 0) return DL_OK;
    if (dim == 0) {
        for (int64_t r = 0; r < n_rows; r++) norms[r] = 0.0f;
        return DL_OK;
    }
#ifndef _OPENMP
    (void)n_threads;
#endif
    const int64_t cpr = dl_cdiv_i64(dim, DL_NAT_CHUNK), n_tiles = n_rows * cpr;
    const int nt = (int)dl_min_i64(n_threads, n_tiles);
    double *part = malloc((size_t)n_tiles * sizeof(double));
    if (part == NULL) return DL_E_NOMEM;
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic) num_threads(nt)
#endif
    for (int64_t t = 0; t < n_tiles; t++) {
        const int64_t r = t / cpr, j0 = (t % cpr) * DL_NAT_CHUNK;
        part[t] = dith_partial(x + r * dim, j0, dl_min_i64(dim, j0 + DL_NAT_CHUNK), pk);
    }
    int bad = 0;
    for (int64_t r = 0; r < n_rows; r++) {
        double tot = 0.0;
        for (int64_t c = 0; c < cpr; c++)
            tot = pk == 0 ? (part[r * cpr + c] > tot ? part[r * cpr + c] : tot)
                          : tot + part[r * cpr + c];
        if (pk == 0) {
            const uint32_t m = (uint32_t)tot;
            bad |= m >= 0x7f800000u;
            memcpy(norms + r, &m, sizeof m);
        } else {
            bad |= !(tot <= 1.7976931348623157e308);
            const double nd = pk == 2 ? __builtin_sqrt(tot) : tot;
            norms[r] = nd > 3.4028234663852886e38 ? 3.4028234663852886e38f : (float)nd;
        }
    }
    free(part);
    if (bad) return DL_E_NONFINITE;
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic) num_threads(nt)
#endif
    for (int64_t t = 0; t < n_tiles; t++) {
        const int64_t r = t / cpr, j0 = (t % cpr) * DL_NAT_CHUNK;
        const int64_t j1 = dl_min_i64(dim, j0 + DL_NAT_CHUNK);
        const float *xr = x + r * dim, norm = norms[r];
        uint8_t *cr = codes + r * dim;
        if (norm == 0.0f) { /* only an all-zero row has norm 0 */
            memset(cr + j0, 0, (size_t)(j1 - j0));
            continue;
        }
        const nat_key_t k = nat_key(seed, step, (uint64_t)(peer0 + r));
        int64_t j = j0;
        for (; j + DL_NAT_BLK <= j1; j += DL_NAT_BLK)
            dith_encode_block(xr + j, cr + j, &k, (uint64_t)j, norm, s);
        for (; j < j1; j++)
            cr[j] = dith_code1(xr[j], norm, dl_rng_fast_u32(k.key, (uint64_t)j), s);
    }
    return DL_OK;
}

/* One decoded value into *y; returns 1 when the level exceeds s. */
static inline int dith_decode1(uint32_t v, float norm, uint32_t us, float *y) {
    const uint32_t l = v >> 1, sb = l ? (l + 127 - us) << 23 : 0;
    float scale;
    memcpy(&scale, &sb, sizeof scale);
    const float o = scale * norm;
    uint32_t ob;
    memcpy(&ob, &o, sizeof ob);
    ob ^= l ? (v & 1u) << 31 : 0;
    memcpy(y, &ob, sizeof ob);
    return l > us;
}

/* y (n_rows x dim) from dithering norms (n_rows) and codes (n_rows x dim), untrusted:
 * DL_E_FORMAT when a norm is negative, NaN or infinite or a level exceeds s (y then unspecified).
 * Code (level << 1) | sign decodes to +-norm 2^(level - s), level 0 to +0. */
int DL_CAT(dl_natural_dither_decode_f32, DL_SUFFIX)(int64_t n_rows, int64_t dim,
                                                     const float *norms, const uint8_t *codes,
                                                     int s, float *y, int n_threads) {
    if (n_rows < 0 || dim < 0 || n_threads < 1 || s < 1 || s > 31) return DL_E_ARG;
    for (int64_t r = 0; r < n_rows; r++) {
        uint32_t nb;
        memcpy(&nb, norms + r, sizeof nb);
        if (nb >= 0x7f800000u) return DL_E_FORMAT; /* NaN, Inf or sign bit set */
    }
    if (n_rows == 0 || dim == 0) return DL_OK;
#ifndef _OPENMP
    (void)n_threads;
#endif
    const int64_t cpr = dl_cdiv_i64(dim, DL_NAT_CHUNK), n_tiles = n_rows * cpr;
    const uint32_t us = (uint32_t)s;
    const int stream = n_rows * dim >= DL_NAT_STREAM_BYTES;
    int bad_all = 0;
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic) num_threads((int)dl_min_i64(n_threads, n_tiles)) \
    reduction(| : bad_all)
#endif
    for (int64_t t = 0; t < n_tiles; t++) {
        const int64_t r = t / cpr, j0 = (t % cpr) * DL_NAT_CHUNK;
        const int64_t j1 = dl_min_i64(dim, j0 + DL_NAT_CHUNK);
        const float norm = norms[r];
        const uint8_t *cr = codes + r * dim;
        float *yr = y + r * dim;
        nat_vi bad = {0};
        int bad1 = 0;
        int64_t j = j0;
        if (stream)
            for (const int64_t h = j + nat_head(yr + j, j1 - j); j < h; j++)
                bad1 |= dith_decode1(cr[j], norm, us, yr + j);
        for (; j + NAT_LANES <= j1; j += NAT_LANES) {
            nat_vb v8;
            memcpy(&v8, cr + j, sizeof v8);
            const nat_vu v = __builtin_convertvector(v8, nat_vu), l = v >> 1;
            bad |= (nat_vi)(l > us);
            const nat_vu nz = (nat_vu)(l != 0);
            const nat_vf scale = (nat_vf)(((l + 127 - us) << 23) & nz);
            nat_st_f(yr + j, (nat_vu)(scale * norm) ^ (((v & 1u) << 31) & nz), stream);
        }
        for (int i = 0; i < NAT_LANES; i++) bad1 |= bad[i];
        for (; j < j1; j++) bad1 |= dith_decode1(cr[j], norm, us, yr + j);
        if (stream) nat_fence();
        bad_all |= bad1;
    }
    return bad_all ? DL_E_FORMAT : DL_OK;
}
