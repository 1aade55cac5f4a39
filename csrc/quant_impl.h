/* quant_impl.h: the encoders of the quantizers (QSGD, CGX-style buckets, scaled sign, int8),
 * compiled once per ISA.
 *
 * Included by quant.c (baseline flags), quant_avx2.c and quant_avx512.c (their own -m flags); each
 * defines DL_SUFFIX first. The loops are plain C that GCC auto-vectorizes: the cost of an encoder
 * is the compressors' counter-based RNG (dl_rng_fast_u32: one 32-bit avalanche hash, two
 * multiplies, per value), which SSE2 lacks a 32-bit multiply for, so the wider builds matter.
 * Results are bit-identical across ISAs and thread counts: float multiply-adds are never
 * contracted (the pragma below overrides the ISA files' -ffp-contract=fast), sums are taken in
 * float64 over fixed chunks of DL_QUANT_CHUNK values in DL_QUANT_LANES lanes and combined in a
 * fixed order, and value j of row r draws u = dl_rng_fast_unit(key(seed, step, peer0 + r), j).
 * Stochastic rounding is q = floor(t) + (u < t - floor(t)) for t >= 0 (int8 rounds |t| and keeps
 * the sign), so E[q] = t up to the 2^-24 grid of u. Decoders and validation live in quant.c (ISA
 * independent). */
#pragma GCC optimize("fp-contract=off")
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dl.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define Q_X86 1
#endif

#ifndef DL_SUFFIX
#error "define DL_SUFFIX before including quant_impl.h"
#endif
#define DL_QCAT2(a, b) a##_##b
#define DL_QCAT(a, b) DL_QCAT2(a, b)

/* dl_rng_fast_unit(key, j0 + k) from the hash input s = dl_rng_fast_base(key, j0) + k w, which
 * the loops carry as s += w (a vector induction variable once vectorized): valid while j0 + k stays
 * below the next multiple of 2^32, true within any aligned chunk and any row of dim <= 2^32. */
static inline float q_unit(uint32_t s) { return (float)(dl_hash32(s) >> 8) * 0x1.0p-24f; }
static inline uint32_t q_step(uint64_t key) { return (uint32_t)(key >> 32) | 1u; }

/* min(a, b) of two non-negative, non-NaN floats, through their bit patterns (which order like the
 * values): an integer min vectorizes where GCC will not if-convert a float compare-and-select
 * followed by more float compares. */
static inline float q_minpos(float a, float b) {
    uint32_t x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    x = x < y ? x : y;
    memcpy(&a, &x, 4);
    return a;
}

/* Packs n codes (< 2^bits, 1 <= bits <= 8) little-endian into ceil(n * bits / 8) bytes, the layout
 * of dl_bitpack_u8. Reads codes[n .. n + 7] (which must be 0) only in the final group. */
static inline void q_pack(const uint8_t *restrict codes, int64_t n, int bits,
                          uint8_t *restrict dst) {
    if (bits == 8) {
        memcpy(dst, codes, (size_t)n);
        return;
    }
    int64_t g = 0;
    if (bits == 4) {
        for (; g + 2 <= n; g += 2) *dst++ = (uint8_t)(codes[g] | (codes[g + 1] << 4));
        if (g < n) *dst = codes[g];
        return;
    }
    for (; g + 8 <= n; g += 8) {
        uint64_t w = 0;
        for (int k = 0; k < 8; k++) w |= (uint64_t)codes[g + k] << (k * bits);
        for (int b = 0; b < bits; b++) dst[b] = (uint8_t)(w >> (8 * b));
        dst += bits;
    }
    if (g < n) {
        uint64_t w = 0;
        for (int k = 0; k < n - g; k++) w |= (uint64_t)codes[g + k] << (k * bits);
        const int nb = (int)(((n - g) * bits + 7) / 8);
        for (int b = 0; b < nb; b++) dst[b] = (uint8_t)(w >> (8 * b));
    }
}

/* Sum of x[k]^2 (squares of floats are exact in float64) in DL_QUANT_LANES lanes, lane l taking
 * k = l mod DL_QUANT_LANES in order, then lanes added 0, 1, ... : the reference's order. With
 * `absolute`, sums |x[k]| instead. Non-finite input makes the result non-finite. */
static inline double q_sum_chunk(const float *restrict x, int64_t len, int absolute) {
    double acc[DL_QUANT_LANES] = {0};
    int64_t k = 0;
    if (absolute)
        for (; k + DL_QUANT_LANES <= len; k += DL_QUANT_LANES)
            for (int l = 0; l < DL_QUANT_LANES; l++) acc[l] += fabs((double)x[k + l]);
    else
        for (; k + DL_QUANT_LANES <= len; k += DL_QUANT_LANES)
            for (int l = 0; l < DL_QUANT_LANES; l++) acc[l] += (double)x[k + l] * (double)x[k + l];
    for (int l = 0; k < len; k++, l++)
        acc[l] += absolute ? fabs((double)x[k]) : (double)x[k] * (double)x[k];
    double s = acc[0];
    for (int l = 1; l < DL_QUANT_LANES; l++) s += acc[l];
    return s;
}

/* Largest |x[k]| as float bits; >= 0x7f800000 exactly when some x[k] is NaN or infinite (for
 * non-negative floats the bit patterns order like the values). */
static inline uint32_t q_absmax_bits(const float *restrict x, int64_t len) {
    uint32_t m = 0;
    for (int64_t k = 0; k < len; k++) {
        uint32_t b;
        memcpy(&b, x + k, 4);
        b &= 0x7fffffffu;
        m = b > m ? b : m;
    }
    return m;
}

/* A chunk's statistic for the row scale: QSGD's sum of squares, int8's max |x| (infinite when the
 * chunk holds a non-finite value), sign's sum of |x|. */
enum { Q_STAT_SUMSQ, Q_STAT_ABSMAX, Q_STAT_ABSSUM };
static inline double q_stat(int kind, const float *x, int64_t len) {
    if (kind == Q_STAT_ABSMAX) {
        const uint32_t m = q_absmax_bits(x, len);
        float f;
        memcpy(&f, &m, 4);
        return m >= 0x7f800000u ? INFINITY : (double)f;
    }
    return q_sum_chunk(x, len, kind == Q_STAT_ABSSUM);
}

/* QSGD codes of one chunk (j0 = index of x[0] in its row): level l = floor(t) + (u < frac t),
 * t = min(|x| * inv, S), code = l << 1 | (x < 0); packed at bits per code into dst. */
static void qsgd_chunk(const float *restrict x, int64_t len, int64_t j0, uint64_t key, float inv,
                       int levels, int bits, uint8_t *restrict dst) {
    uint8_t buf[DL_QUANT_CHUNK + 8];
    uint8_t *restrict codes = bits == 8 ? dst : buf;
    const uint32_t w = q_step(key);
    uint32_t sr = dl_rng_fast_base(key, (uint64_t)j0);
    const float smax = (float)levels;
    for (int64_t k = 0; k < len; k++, sr += w) {
        const float u = q_unit(sr);
        const float t = q_minpos(fabsf(x[k]) * inv, smax);
        const int32_t i = (int32_t)t;
        const int32_t l = i + (u < t - (float)i);
        codes[k] = (uint8_t)((l << 1) | (x[k] < 0.0f));
    }
    if (bits != 8) {
        memset(buf + len, 0, 8);
        q_pack(buf, len, bits, dst);
    }
}

/* int8 codes of one chunk: t = clamp(x * inv, -127, 127), q = sign(t) (floor|t| + (u < frac|t|)):
 * stochastic rounding of the magnitude, the same distribution as floor(t + u) (and it vectorizes,
 * where floor of a negative t does not). */
static void int8_chunk(const float *restrict x, int64_t len, int64_t j0, uint64_t key, float inv,
                       int8_t *restrict q) {
    const uint32_t w = q_step(key);
    uint32_t sr = dl_rng_fast_base(key, (uint64_t)j0);
    for (int64_t k = 0; k < len; k++, sr += w) {
        const float u = q_unit(sr);
        const float a = q_minpos(fabsf(x[k] * inv), 127.0f);
        const int32_t i = (int32_t)a;
        const int32_t m = i + (u < a - (float)i);
        const int32_t neg = -(int32_t)(x[k] < 0.0f); /* 0 or -1: branch-free negation */
        q[k] = (int8_t)((m ^ neg) - neg);
    }
}

/* Whether the largest value a decoder makes of a row, top * step in float32, is finite: the
 * decoders (quant.c) refuse a message where it is not, so the encoders never make one. */
static inline int q_decodable(float top, float step) { return top * step <= FLT_MAX; }

/* Row scale from the combined statistic; DL_E_NONFINITE when the row held NaN or infinity.
 * QSGD: norm = ||x||_2 (clamped to FLT_MAX), inv = S / norm. int8: scale = max|x| / 127,
 * inv = 1 / scale. Sign: scale = ||x||_1 / dim. inv is clamped to FLT_MAX, 0 for a zero scale.
 * Near FLT_MAX the float32 rounding of norm / S (or max|x| / 127) may round up so that S times it
 * overflows: the norm (scale) is then stepped down to the largest float32 whose message decodes
 * (a few ulps, rows within a factor S of FLT_MAX only). */
static inline int q_row_scale(int kind, double stat, int64_t dim, int levels, float *scale,
                              float *inv) {
    if (!isfinite(stat)) return DL_E_NONFINITE;
    double s;
    if (kind == Q_STAT_SUMSQ) {
        float n = (float)sqrt(stat);
        n = isinf(n) ? FLT_MAX : n;
        while (!q_decodable((float)levels, (float)((double)n / levels))) n = nextafterf(n, 0.0f);
        *scale = n;
        s = (double)*scale / levels;
    } else if (kind == Q_STAT_ABSMAX) {
        float sc = (float)(stat / 127.0);
        while (!q_decodable(127.0f, sc)) sc = nextafterf(sc, 0.0f);
        *scale = sc;
        s = *scale;
    } else {
        *scale = dim > 0 ? (float)(stat / (double)dim) : 0.0f;
        s = *scale;
    }
    *inv = s > 0 ? (float)fmin(1.0 / s, (double)FLT_MAX) : 0.0f;
    return DL_OK;
}

/* Shared driver of QSGD and int8: a per-row statistic over fixed chunks, then per-chunk codes.
 * Many rows: each thread takes whole rows (the row is still in cache for the second pass). Few
 * long rows: all (row, chunk) statistics in parallel, combined per row in chunk order, then all
 * (row, chunk) codes in parallel. Both orders give the same bits. Work items are handed out
 * dynamically (an item's result depends on its indices only), which keeps both threads busy when
 * the machine is loaded. */
static int q_encode_rows(int kind, int64_t n_rows, int64_t dim, int levels, int bits,
                         const float *x, uint64_t seed, uint64_t step, int64_t peer0, float *scale,
                         void *codes, int n_threads) {
    const int64_t n_ch = dl_cdiv_i64(dim, DL_QUANT_CHUNK);
    const int64_t rb = kind == Q_STAT_SUMSQ ? dl_bitpack_row_bytes(dim, bits) : dim;
    const int64_t cb = kind == Q_STAT_SUMSQ ? (int64_t)DL_QUANT_CHUNK * bits / 8 : DL_QUANT_CHUNK;
    int status = DL_OK;
#ifndef _OPENMP
    (void)n_threads;
#endif
#define Q_CHUNK_CODES(r, c, inv)                                                                   \
    do {                                                                                           \
        const int64_t j0 = (c) * DL_QUANT_CHUNK, len = dl_min_i64(DL_QUANT_CHUNK, dim - j0);       \
        const uint64_t key = dl_rng_key(seed, step, (uint64_t)(peer0 + (r)));                      \
        uint8_t *dst = (uint8_t *)codes + (r) * rb + (c) * cb;                                     \
        if (kind == Q_STAT_SUMSQ)                                                                  \
            qsgd_chunk(x + (r) * dim + j0, len, j0, key, inv, levels, bits, dst);                  \
        else                                                                                       \
            int8_chunk(x + (r) * dim + j0, len, j0, key, inv, (int8_t *)dst);                      \
    } while (0)

    if (n_rows >= 2 * (int64_t)n_threads || n_ch <= 1) {
        int bad = 0;
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic) num_threads(n_threads) reduction(| : bad)               \
    if (n_rows * dim > (1 << 15))
#endif
        for (int64_t r = 0; r < n_rows; r++) {
            double stat = 0;
            for (int64_t c = 0; c < n_ch; c++) {
                const int64_t j0 = c * DL_QUANT_CHUNK;
                const int64_t len = dl_min_i64(DL_QUANT_CHUNK, dim - j0);
                const double p = q_stat(kind, x + r * dim + j0, len);
                stat = c == 0 ? p : kind == Q_STAT_ABSMAX ? fmax(stat, p) : stat + p;
            }
            float inv;
            if (q_row_scale(kind, stat, dim, levels, scale + r, &inv) != DL_OK) {
                bad = 1;
                continue;
            }
            for (int64_t c = 0; c < n_ch; c++) Q_CHUNK_CODES(r, c, inv);
        }
        return bad ? DL_E_NONFINITE : DL_OK;
    }

    const int64_t n_items = n_rows * n_ch;
    double *part = malloc((size_t)n_items * sizeof(double));
    float *inv = malloc((size_t)n_rows * sizeof(float));
    if (part == NULL || inv == NULL) {
        free(part);
        free(inv);
        return DL_E_NOMEM;
    }
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic) num_threads(n_threads)
#endif
    for (int64_t it = 0; it < n_items; it++) {
        const int64_t r = it / n_ch, j0 = (it % n_ch) * DL_QUANT_CHUNK;
        part[it] = q_stat(kind, x + r * dim + j0, dl_min_i64(DL_QUANT_CHUNK, dim - j0));
    }
    for (int64_t r = 0; r < n_rows && status == DL_OK; r++) {
        double stat = part[r * n_ch];
        for (int64_t c = 1; c < n_ch; c++)
            stat = kind == Q_STAT_ABSMAX ? fmax(stat, part[r * n_ch + c])
                                         : stat + part[r * n_ch + c];
        status = q_row_scale(kind, stat, dim, levels, scale + r, inv + r);
    }
    if (status == DL_OK) {
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic) num_threads(n_threads)
#endif
        for (int64_t it = 0; it < n_items; it++)
            Q_CHUNK_CODES(it / n_ch, it % n_ch, inv[it / n_ch]);
    }
#undef Q_CHUNK_CODES
    free(part);
    free(inv);
    return status;
}

/* QSGD: x (n_rows x dim) -> norm[n_rows] (float32 ||row||_2) and packed (n_rows x
 * dl_bitpack_row_bytes(dim, dl_qsgd_bits(levels))) codes l << 1 | sign. 1 <= levels <= 127. */
int DL_QCAT(dl_qsgd_encode_f32, DL_SUFFIX)(int64_t n_rows, int64_t dim, int levels, const float *x,
                                           uint64_t seed, uint64_t step, int64_t peer0,
                                           float *norm, uint8_t *packed, int n_threads) {
    if (n_rows < 0 || dim < 0 || levels < 1 || levels > 127 || n_threads < 1) return DL_E_ARG;
    return q_encode_rows(Q_STAT_SUMSQ, n_rows, dim, levels, dl_qsgd_bits(levels), x, seed, step,
                         peer0, norm, packed, n_threads);
}

/* int8: x (n_rows x dim) -> scale[n_rows] = max|row| / 127 and q (n_rows x dim) in [-127, 127]. */
int DL_QCAT(dl_int8_encode_f32, DL_SUFFIX)(int64_t n_rows, int64_t dim, const float *x,
                                           uint64_t seed, uint64_t step, int64_t peer0,
                                           float *scale, int8_t *q, int n_threads) {
    if (n_rows < 0 || dim < 0 || n_threads < 1) return DL_E_ARG;
    return q_encode_rows(Q_STAT_ABSMAX, n_rows, dim, 127, 8, x, seed, step, peer0, scale, q,
                         n_threads);
}

/* dst[k / 8] bit k % 8 = (x[k] < 0) for the whole bytes of x[0:len) (-0.0 and NaN give 0, as the
 * reference's x < 0); returns how many values it packed (a multiple of 8). A compare and a
 * movemask per vector where the ISA has them. */
static inline int64_t q_sign_bytes(const float *restrict x, int64_t len, uint8_t *restrict dst) {
    int64_t k = 0;
#if defined(__AVX512F__)
    for (; k + 16 <= len; k += 16) {
        const uint16_t m = (uint16_t)_mm512_cmp_ps_mask(_mm512_loadu_ps(x + k),
                                                        _mm512_setzero_ps(), _CMP_LT_OQ);
        memcpy(dst + k / 8, &m, 2);
    }
#elif defined(__AVX2__)
    for (; k + 8 <= len; k += 8)
        dst[k / 8] = (uint8_t)_mm256_movemask_ps(
            _mm256_cmp_ps(_mm256_loadu_ps(x + k), _mm256_setzero_ps(), _CMP_LT_OQ));
#elif defined(Q_X86)
    for (; k + 8 <= len; k += 8) {
        const __m128 z = _mm_setzero_ps();
        dst[k / 8] = (uint8_t)(_mm_movemask_ps(_mm_cmplt_ps(_mm_loadu_ps(x + k), z)) |
                               (_mm_movemask_ps(_mm_cmplt_ps(_mm_loadu_ps(x + k + 4), z)) << 4));
    }
#endif
    for (; k + 8 <= len; k += 8) {
        uint32_t byte = 0;
        for (int b = 0; b < 8; b++) byte |= (uint32_t)(x[k + b] < 0.0f) << b;
        dst[k / 8] = (uint8_t)byte;
    }
    return k;
}

/* Sign: x (n_rows x dim) -> scale[n_rows] = ||row||_1 / dim and packed (n_rows x ceil(dim / 8))
 * bits, 1 for x < 0. One pass: the bits do not depend on the scale; chunk sums are combined
 * after. */
int DL_QCAT(dl_sign_encode_f32, DL_SUFFIX)(int64_t n_rows, int64_t dim, const float *x,
                                           float *scale, uint8_t *packed, int n_threads) {
    if (n_rows < 0 || dim < 0 || n_threads < 1) return DL_E_ARG;
    const int64_t n_ch = dl_cdiv_i64(dim, DL_QUANT_CHUNK), n_items = n_rows * n_ch;
    const int64_t rb = dl_cdiv_i64(dim, 8);
    double *part = malloc((size_t)dl_max_i64(n_items, 1) * sizeof(double));
    if (part == NULL) return DL_E_NOMEM;
#ifndef _OPENMP
    (void)n_threads;
#endif
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic) num_threads(n_threads) if (n_rows * dim > (1 << 15))
#endif
    for (int64_t it = 0; it < n_items; it++) {
        const int64_t r = it / n_ch, j0 = (it % n_ch) * DL_QUANT_CHUNK;
        const int64_t len = dl_min_i64(DL_QUANT_CHUNK, dim - j0);
        const float *xc = x + r * dim + j0;
        uint8_t *dst = packed + r * rb + j0 / 8;
        part[it] = q_sum_chunk(xc, len, 1);
        int64_t k = q_sign_bytes(xc, len, dst);
        if (k < len) {
            uint32_t byte = 0;
            for (int b = 0; k + b < len; b++) byte |= (uint32_t)(xc[k + b] < 0.0f) << b;
            dst[k / 8] = (uint8_t)byte;
        }
    }
    int status = DL_OK;
    for (int64_t r = 0; r < n_rows && status == DL_OK; r++) {
        double stat = n_ch > 0 ? part[r * n_ch] : 0.0;
        for (int64_t c = 1; c < n_ch; c++) stat += part[r * n_ch + c];
        float inv;
        status = q_row_scale(Q_STAT_ABSSUM, stat, dim, 1, scale + r, &inv);
    }
    free(part);
    return status;
}

/* The float whose order-preserving int32 key (bits ^ ((bits >> 31) & 0x7fffffff)) is k. */
static inline float q_from_key(int32_t k) {
    const int32_t b = k ^ ((k >> 31) & 0x7fffffff);
    float v;
    memcpy(&v, &b, 4);
    return v;
}

/* One bucket: lo = min, scale = (max - lo) / qmax (float64, rounded to float32; lowered to keep
 * lo + qmax * scale finite), codes
 * q = floor(t) + (u < frac t), t = min((x - lo) * inv, qmax), inv = 1 / scale (0 when scale is 0).
 * Returns 0, or 1 when the bucket holds a non-finite value. */
static int bucket_one(const float *restrict x, int64_t len, uint64_t key, int64_t j0, int qmax,
                      float *lo_out, float *scale_out, uint8_t *restrict codes) {
    int32_t kmin = INT32_MAX, kmax = INT32_MIN;
    uint32_t amax = 0;
    for (int64_t k = 0; k < len; k++) {
        int32_t b;
        memcpy(&b, x + k, 4);
        const uint32_t a = (uint32_t)b & 0x7fffffffu;
        amax = a > amax ? a : amax;
        const int32_t key = b ^ ((b >> 31) & 0x7fffffff);
        kmin = key < kmin ? key : kmin;
        kmax = key > kmax ? key : kmax;
    }
    if (amax >= 0x7f800000u) return 1;
    const float lo = q_from_key(kmin), hi_v = q_from_key(kmax);
    float scale = (float)(((double)hi_v - (double)lo) / qmax);
    /* A bucket spanning (about) FLT_MAX or more: qmax * scale and lo + qmax * scale must stay
     * finite (the decoder refuses the message otherwise), so the step is lowered to the largest
     * that keeps them: from min(FLT_MAX - lo, FLT_MAX) / qmax, then a few ulps down. */
    if (!(fabsf(lo + (float)qmax * scale) <= FLT_MAX)) {
        scale = (float)(fmin((double)FLT_MAX - (double)lo, (double)FLT_MAX) / qmax);
        while (!(fabsf(lo + (float)qmax * scale) <= FLT_MAX)) scale = nextafterf(scale, 0.0f);
    }
    const float inv = scale > 0 ? (float)fmin(1.0 / (double)scale, (double)FLT_MAX) : 0.0f;
    const float tmax = (float)qmax;
    *lo_out = lo;
    *scale_out = scale;
    const uint32_t w = q_step(key);
    uint32_t sr = dl_rng_fast_base(key, (uint64_t)j0);
    for (int64_t k = 0; k < len; k++, sr += w) {
        const float u = q_unit(sr);
        const float t = q_minpos((x[k] - lo) * inv, tmax); /* x - lo >= +0 */
        const int32_t i = (int32_t)t;
        codes[k] = (uint8_t)(i + (u < t - (float)i));
    }
    return 0;
}

/* Buckets: x (n_rows x dim) -> lo, scale (n_rows x n_buckets, n_buckets = ceil(dim / bucket); the
 * last bucket may be short) and packed (n_rows x dl_bitpack_row_bytes(dim, bits)) codes. bits is 4
 * or 8, 1 <= bucket <= 2^24, dim <= 2^32. Work items are blocks of an even number of buckets
 * (so every block starts on a byte of the packed row), about DL_QUANT_CHUNK values each. */
int DL_QCAT(dl_bucket_encode_f32, DL_SUFFIX)(int64_t n_rows, int64_t dim, int bits, int64_t bucket,
                                             const float *x, uint64_t seed, uint64_t step,
                                             int64_t peer0, float *lo, float *scale,
                                             uint8_t *packed, int n_threads) {
    /* dim <= 2^32: the high half of an index is then 0 inside every bucket (q_unit's premise). */
    if (n_rows < 0 || dim < 0 || dim > ((int64_t)1 << 32) || (bits != 4 && bits != 8) ||
        bucket < 1 || bucket > (1 << 24) || n_threads < 1)
        return DL_E_ARG;
    const int64_t nb = dl_cdiv_i64(dim, bucket), rb = dl_bitpack_row_bytes(dim, bits);
    const int64_t per = dl_max_i64(2, DL_QUANT_CHUNK / bucket / 2 * 2); /* buckets per item */
    const int64_t n_blk = dl_cdiv_i64(nb, per), n_items = n_rows * n_blk;
    const int qmax = (1 << bits) - 1;
    const int64_t buf_len = per * bucket + 8;
    int bad = 0, nomem = 0;
#ifndef _OPENMP
    (void)n_threads;
#endif
#ifdef _OPENMP
#pragma omp parallel num_threads(n_threads) reduction(| : bad, nomem) if (n_rows * dim > (1 << 15))
#endif
    {
        uint8_t *buf = bits == 8 ? NULL : malloc((size_t)buf_len);
        if (bits != 8 && buf == NULL) nomem = 1;
#ifdef _OPENMP
#pragma omp for schedule(dynamic)
#endif
        for (int64_t it = 0; it < n_items; it++) {
            if (bits != 8 && buf == NULL) continue;
            const int64_t r = it / n_blk, b0 = (it % n_blk) * per, b1 = dl_min_i64(nb, b0 + per);
            const uint64_t key = dl_rng_key(seed, step, (uint64_t)(peer0 + r));
            const int64_t j_start = b0 * bucket, j_end = dl_min_i64(dim, b1 * bucket);
            uint8_t *dst = packed + r * rb + j_start * bits / 8;
            uint8_t *codes = bits == 8 ? dst : buf;
            for (int64_t b = b0; b < b1; b++) {
                const int64_t j0 = b * bucket, len = dl_min_i64(bucket, dim - j0);
                float blo = 0, bscale = 0;
                bad |= bucket_one(x + r * dim + j0, len, key, j0, qmax, &blo, &bscale,
                                  codes + (j0 - j_start));
                lo[r * nb + b] = blo;
                scale[r * nb + b] = bscale;
            }
            if (bits == 4) {
                memset(buf + (j_end - j_start), 0, 8);
                q_pack(buf, j_end - j_start, 4, dst);
            }
        }
        free(buf);
    }
    if (nomem) return DL_E_NOMEM;
    return bad ? DL_E_NONFINITE : DL_OK;
}
