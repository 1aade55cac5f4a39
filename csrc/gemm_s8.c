/* gemm_s8.c: the portable exact int8 GEMM (layout "s16") and the int8 quantization kernels.
 *
 * The "s16" layout stores A and B as int16 pairs along k, a 6 x 16 register tile: the AVX2 build
 * (gemm_s8_avx2.c, vpmaddwd) uses the same layout, so a B packed on one of generic/avx2/avx512 is
 * valid on the others. The portable microkernel accumulates in uint32 (wrapping, never undefined;
 * the exact sum fits in int32 for k <= DL_GEMM_S8_MAX_K anyway). Quantization is elementwise with
 * a per-tensor, per-row or per-column scale; values are computed with the same float32 operations
 * as decentlearn/_reference/gemm_s8.py (x times the float32 reciprocal of the scale, clamp, round half to even or stochastic floor with
 * the counter RNG), no contracted multiply-adds, so the codes are bit-identical to the reference
 * for any thread count.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dl.h"

#define DL_SUFFIX generic
#define DL_GEMM_MR 6
#define DL_GEMM_NR 16
#define DL_GEMM_KG 2
typedef int16_t dl_gemm_a_t;
typedef int16_t dl_gemm_b_t;
static inline dl_gemm_a_t dl_gemm_a_conv(int8_t v) { return v; }

/* The first mr (1..6) rows of tile (6 x 16) = packed A tile @ packed B panel over kgn pairs of
 * k (a partial row tile costs its rows only). */
#define DL_GEMM_HAVE_UKERNEL_ROWS 1
static inline void dl_gemm_ukernel_rows(int mr, int64_t kgn, const int16_t *ap, const int16_t *bp,
                                        const int32_t *colsum, int32_t *tile) {
    uint32_t acc[DL_GEMM_MR][DL_GEMM_NR];
    (void)colsum;
    memset(acc, 0, sizeof acc);
    for (int64_t g = 0; g < kgn; g++) {
        for (int r = 0; r < mr; r++) {
            const int32_t a0 = ap[2 * r], a1 = ap[2 * r + 1];
            for (int j = 0; j < DL_GEMM_NR; j++)
                acc[r][j] += (uint32_t)(a0 * bp[2 * j]) + (uint32_t)(a1 * bp[2 * j + 1]);
        }
        ap += DL_GEMM_MR * 2;
        bp += DL_GEMM_NR * 2;
    }
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < DL_GEMM_NR; j++) tile[r * DL_GEMM_NR + j] = (int32_t)acc[r][j];
}

/* tile (6 x 16) = packed A tile @ packed B panel over kgn pairs of k. */
static inline void dl_gemm_ukernel(int64_t kgn, const int16_t *ap, const int16_t *bp,
                                   const int32_t *colsum, int32_t *tile) {
    dl_gemm_ukernel_rows(DL_GEMM_MR, kgn, ap, bp, colsum, tile);
}

#include "gemm_s8_impl.h"

const dl_gemm_s8_layout_t dl_gemm_s8_layout_s16 = {"s16", DL_GEMM_MR, DL_GEMM_NR, DL_GEMM_KG, 2};

int64_t dl_gemm_s8_packed_bytes(const dl_gemm_s8_layout_t *layout, int64_t k, int64_t n) {
    if (layout == NULL || k < 0 || n < 0 || k > DL_GEMM_S8_MAX_K || n > (INT64_C(1) << 40))
        return -1;
    return dl_cdiv_i64(n, layout->nr) * layout->nr * dl_cdiv_i64(k, layout->kg) * layout->kg *
           layout->b_elem;
}

/* ---- quantization -------------------------------------------------------------------------- */

#define DL_GEMM_QCHUNK 16384 /* columns per work item */

static inline uint32_t gemm_abs_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u & 0x7fffffffu;
}
static inline uint32_t gemm_max_u32(uint32_t a, uint32_t b) { return a > b ? a : b; }
/* clamp to [-127, 127]; NaN (flagged by the caller) becomes -127, never an undefined cast */
static inline float gemm_clamp127(float v) {
    v = v >= -127.0f ? v : -127.0f;
    return v <= 127.0f ? v : 127.0f;
}
/* round half to even for |v| < 2^22, as np.rint (no SSE4.1 roundps in the portable build) */
static inline float gemm_round_even(float v) { return (v + 0x1.8p23f) - 0x1.8p23f; }

static int gemm_scale_ok(int64_t n_rows, int64_t dim, const float *scale, int64_t scale_n,
                         int axis) {
    const int64_t want = axis < 0 ? 1 : axis == 0 ? n_rows : dim;
    if (axis < -1 || axis > 1 || scale_n != want) return 0;
    for (int64_t i = 0; i < scale_n; i++) /* >= FLT_MIN: 1 / scale must be finite */
        if (!(scale[i] >= FLT_MIN && scale[i] <= FLT_MAX)) return 0;
    return 1;
}

#if defined(__SSE2__)
#include <emmintrin.h>
/* Running max of |x| bit patterns, 4 lanes (signed compare: the patterns are < 2^31). */
static inline __m128i gemm_max_bits4(__m128i mx, __m128 x) {
    const __m128i b = _mm_and_si128(_mm_castps_si128(x), _mm_set1_epi32(0x7fffffff));
    const __m128i gt = _mm_cmpgt_epi32(b, mx);
    return _mm_or_si128(_mm_and_si128(gt, b), _mm_andnot_si128(gt, mx));
}
static inline uint32_t gemm_hmax_bits4(__m128i mx) {
    uint32_t l[4], m = 0;
    _mm_storeu_si128((__m128i *)l, mx);
    for (int i = 0; i < 4; i++) m = gemm_max_u32(m, l[i]);
    return m;
}
#endif

/* Nearest-even codes of x[0..n) * (sv ? sv[j] : s0) (reciprocal scales); returns the largest |x| bit pattern. The
 * SSE2 body (x86-64 baseline; the GCC vectorizer leaves the float clamps scalar) computes the
 * same IEEE product, clamp (maxps/minps, NaN -> -127 as the scalar code) and rounding. */
uint32_t dl_gemm_qnearest_f32_generic(const float *x, const float *sv, float s0, int64_t n,
                                      int8_t *q) {
    uint32_t mx = 0;
    int64_t j = 0;
#if defined(__SSE2__)
    const __m128 lo = _mm_set1_ps(-127.0f), hi = _mm_set1_ps(127.0f), mg = _mm_set1_ps(0x1.8p23f);
    const __m128 s4 = _mm_set1_ps(s0);
    __m128i m4 = _mm_setzero_si128();
    for (; j + 16 <= n; j += 16) {
        __m128i iv[4];
        for (int i = 0; i < 4; i++) {
            const __m128 xv = _mm_loadu_ps(x + j + 4 * i);
            const __m128 sc = sv != NULL ? _mm_loadu_ps(sv + j + 4 * i) : s4;
            m4 = gemm_max_bits4(m4, xv);
            __m128 v = _mm_min_ps(_mm_max_ps(_mm_mul_ps(xv, sc), lo), hi);
            v = _mm_sub_ps(_mm_add_ps(v, mg), mg);
            iv[i] = _mm_cvttps_epi32(v);
        }
        const __m128i p = _mm_packs_epi16(_mm_packs_epi32(iv[0], iv[1]),
                                          _mm_packs_epi32(iv[2], iv[3]));
        _mm_storeu_si128((__m128i *)(q + j), p);
    }
    mx = gemm_hmax_bits4(m4);
#endif
    for (; j < n; j++) {
        mx = gemm_max_u32(mx, gemm_abs_bits(x[j]));
        q[j] = (int8_t)(int32_t)gemm_round_even(gemm_clamp127(x[j] * (sv != NULL ? sv[j] : s0)));
    }
    return mx;
}

/* Stochastically rounded codes of x[0..n) * (sv ? sv[j] : s0): floor(v) + (u < v - floor(v)), u
 * the counter RNG's unit float for (key, j0 + j); returns the largest |x| bit pattern. */
uint32_t dl_gemm_qstoch_f32_generic(const float *x, const float *sv, float s0, int64_t n,
                                    uint64_t key, uint64_t j0, int8_t *q) {
    uint32_t mx = 0;
    for (int64_t j = 0; j < n; j++) {
        mx = gemm_max_u32(mx, gemm_abs_bits(x[j]));
        const float v = gemm_clamp127(x[j] * (sv != NULL ? sv[j] : s0));
        const float f = floorf(v);
        const float u = dl_rng_unit(key, j0 + (uint64_t)j);
        q[j] = (int8_t)(int32_t)(f + (u < v - f ? 1.0f : 0.0f));
    }
    return mx;
}

/* Largest |x| bit pattern of x[0..n). */
uint32_t dl_gemm_absmax_bits_f32_generic(const float *x, int64_t n) {
    uint32_t mx = 0;
    int64_t j = 0;
#if defined(__SSE2__)
    __m128i m0 = _mm_setzero_si128(), m1 = m0;
    for (; j + 8 <= n; j += 8) {
        m0 = gemm_max_bits4(m0, _mm_loadu_ps(x + j));
        m1 = gemm_max_bits4(m1, _mm_loadu_ps(x + j + 4));
    }
    mx = gemm_max_u32(gemm_hmax_bits4(m0), gemm_hmax_bits4(m1));
#endif
    for (; j < n; j++) mx = gemm_max_u32(mx, gemm_abs_bits(x[j]));
    return mx;
}

/* q (n_rows, dim) int8 from x (n_rows, dim, row stride ldx) float32; see dl.h. q and x must not
 * overlap. */
int dl_gemm_quantize_s8(int64_t n_rows, int64_t dim, const float *x, int64_t ldx,
                        const float *scale, int64_t scale_n, int axis, int rounding, uint64_t seed,
                        uint64_t step, int64_t peer0, int8_t *q, int n_threads) {
    if (n_rows < 0 || dim < 0 || ldx < dim || peer0 < 0 || n_threads < 1 ||
        (rounding != 0 && rounding != 1))
        return DL_E_ARG;
    if (!gemm_scale_ok(n_rows, dim, scale, scale_n, axis)) return DL_E_ARG;
    const int64_t n_ch = dl_cdiv_i64(dim, DL_GEMM_QCHUNK), n_items = n_rows * n_ch;
    const dl_gemm_qnearest_f32_fn qn = dl_dispatch()->gemm_qnearest_f32;
    const dl_gemm_qstoch_f32_fn qs = dl_dispatch()->gemm_qstoch_f32;
    float *inv = NULL; /* 1 / scale per column (axis 1) */
    if (axis == 1) {
        inv = malloc((size_t)(dim > 0 ? dim : 1) * sizeof(float));
        if (inv == NULL) return DL_E_NOMEM;
        for (int64_t j = 0; j < dim; j++) inv[j] = 1.0f / scale[j];
    }
    int bad = 0;
#ifndef _OPENMP
    (void)n_threads;
#endif
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(n_threads) reduction(| : bad)               \
    if (n_rows * dim > (1 << 15))
#endif
    for (int64_t it = 0; it < n_items; it++) {
        const int64_t r = it / n_ch, c0 = (it % n_ch) * DL_GEMM_QCHUNK;
        const int64_t c1 = dl_min_i64(dim, c0 + DL_GEMM_QCHUNK);
        const float *xr = x + r * ldx;
        int8_t *qr = q + r * dim;
        const float *sv = axis == 1 ? inv : NULL;
        const float s0 = 1.0f / (axis == 0 ? scale[r] : scale[0]);
        uint32_t mx = 0; /* largest |x| bit pattern: >= 0x7f800000 means NaN or infinity */
        if (rounding == 0) {
            mx = qn(xr + c0, sv != NULL ? sv + c0 : NULL, s0, c1 - c0, qr + c0);
        } else {
            const uint64_t key = dl_rng_key(seed, step, (uint64_t)(peer0 + r));
            mx = qs(xr + c0, sv != NULL ? sv + c0 : NULL, s0, c1 - c0, key, (uint64_t)c0, qr + c0);
        }
        const int b = mx >= 0x7f800000u;
        bad |= b;
    }
    free(inv);
    return bad ? DL_E_NONFINITE : DL_OK;
}

/* y (n_rows, dim) float32 = q * scale; y and q must not overlap. */
int dl_gemm_dequantize_s8(int64_t n_rows, int64_t dim, const int8_t *q, const float *scale,
                          int64_t scale_n, int axis, float *y, int n_threads) {
    if (n_rows < 0 || dim < 0 || n_threads < 1 || axis < -1 || axis > 1) return DL_E_ARG;
    if (scale_n != (axis < 0 ? 1 : axis == 0 ? n_rows : dim)) return DL_E_ARG;
    const int64_t n_ch = dl_cdiv_i64(dim, DL_GEMM_QCHUNK), n_items = n_rows * n_ch;
#ifndef _OPENMP
    (void)n_threads;
#endif
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(n_threads) if (n_rows * dim > (1 << 15))
#endif
    for (int64_t it = 0; it < n_items; it++) {
        const int64_t r = it / n_ch, c0 = (it % n_ch) * DL_GEMM_QCHUNK;
        const int64_t c1 = dl_min_i64(dim, c0 + DL_GEMM_QCHUNK);
        if (axis == 1) {
            for (int64_t j = c0; j < c1; j++) y[r * dim + j] = (float)q[r * dim + j] * scale[j];
        } else {
            const float s = scale[axis == 0 ? r : 0];
            for (int64_t j = c0; j < c1; j++) y[r * dim + j] = (float)q[r * dim + j] * s;
        }
    }
    return DL_OK;
}

static inline float gemm_bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* max|x| / 127, but at least FLT_MIN (so that 1 / scale is finite and quantize_s8 accepts it: a
 * max below 127 * FLT_MIN, subnormal or not, would give a subnormal or zero scale); 1 for 0. */
static inline float gemm_scale_of(float m) {
    if (!(m > 0.0f)) return 1.0f;
    const float s = m / 127.0f;
    return s < FLT_MIN ? FLT_MIN : s;
}

/* scale (1, n_rows or dim values) = max|x| / 127 over the whole x (row stride ldx), each row or
 * each column. */
int dl_gemm_absmax_scale_f32(int64_t n_rows, int64_t dim, const float *x, int64_t ldx, int axis,
                             float *scale, int n_threads) {
    if (n_rows < 0 || dim < 0 || ldx < dim || n_threads < 1 || axis < -1 || axis > 1)
        return DL_E_ARG;
    int bad = 0;
#ifndef _OPENMP
    (void)n_threads;
#endif
    if (axis == 1) { /* per column: blocks of 1024 columns x a share of the rows, then the
                      * blocks' maxima per column (a maximum is exact in any order, so any
                      * split gives the same scales; until 27 Nov 2026 one block took every row,
                      * and a 1024-column weight ran on one thread whatever the count) */
        const int64_t n_cb = dl_cdiv_i64(dim, 1024);
        const int64_t n_rb = n_rows * dim > (1 << 15) && n_threads > 1
            ? dl_max_i64(1, dl_min_i64(n_rows, dl_cdiv_i64(4 * (int64_t)n_threads, n_cb)))
            : 1;
        const int64_t rows_per = dl_cdiv_i64(n_rows, n_rb);
        uint32_t *mb = calloc((size_t)(n_rb * dim > 0 ? n_rb * dim : 1), sizeof(uint32_t));
        if (mb == NULL) return DL_E_NOMEM;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(n_threads) if (n_rb * n_cb > 1)
#endif
        for (int64_t it = 0; it < n_rb * n_cb; it++) {
            const int64_t rb = it / n_cb, cb = it % n_cb;
            const int64_t c0 = cb * 1024, c1 = dl_min_i64(dim, c0 + 1024);
            const int64_t r0 = rb * rows_per, r1 = dl_min_i64(n_rows, r0 + rows_per);
            uint32_t *m = mb + rb * dim; /* |x| bit patterns order like |x| (non-negative) */
            for (int64_t r = r0; r < r1; r++)
                for (int64_t j = c0; j < c1; j++)
                    m[j] = gemm_max_u32(m[j], gemm_abs_bits(x[r * ldx + j]));
        }
        for (int64_t j = 0; j < dim; j++) {
            uint32_t m = mb[j];
            for (int64_t rb = 1; rb < n_rb; rb++) m = gemm_max_u32(m, mb[rb * dim + j]);
            bad |= m >= 0x7f800000u;
            scale[j] = gemm_scale_of(gemm_bits_float(m));
        }
        free(mb);
        return bad ? DL_E_NONFINITE : DL_OK;
    }
    /* whole tensor or per row: partial maxima per (row, chunk), combined after (max is exact) */
    const int64_t n_ch = dl_cdiv_i64(dim, DL_GEMM_QCHUNK), n_items = n_rows * n_ch;
    const dl_gemm_absmax_bits_f32_fn amb = dl_dispatch()->gemm_absmax_bits_f32;
    float *part = malloc((size_t)(n_items > 0 ? n_items : 1) * sizeof(float));
    if (part == NULL) return DL_E_NOMEM;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(n_threads) reduction(| : bad)               \
    if (n_rows * dim > (1 << 15))
#endif
    for (int64_t it = 0; it < n_items; it++) {
        const int64_t r = it / n_ch, c0 = (it % n_ch) * DL_GEMM_QCHUNK;
        const int64_t c1 = dl_min_i64(dim, c0 + DL_GEMM_QCHUNK);
        const float *xr = x + r * ldx;
        const uint32_t mb = amb(xr + c0, c1 - c0);
        part[it] = gemm_bits_float(mb);
        bad |= mb >= 0x7f800000u;
    }
    if (axis == 0) {
        for (int64_t r = 0; r < n_rows; r++) {
            float m = 0.0f;
            for (int64_t c = 0; c < n_ch; c++) m = part[r * n_ch + c] > m ? part[r * n_ch + c] : m;
            scale[r] = gemm_scale_of(m);
        }
    } else {
        float m = 0.0f;
        for (int64_t it = 0; it < n_items; it++) m = part[it] > m ? part[it] : m;
        scale[0] = gemm_scale_of(m);
    }
    free(part);
    return bad ? DL_E_NONFINITE : DL_OK;
}

/* One tensor's absmax quantization, single-threaded (the fused layer kernels call it once per
 * peer inside their parallel loop): *scale = max|x| / 127 over the rows x rows of cols values (row
 * r at x + r * ldx), q (rows, cols) contiguous = nearest (rounding 0) or stochastic codes (1, the
 * RNG keyed by key at index r * cols + c). The same operations as dl_gemm_absmax_scale_f32 and
 * dl_gemm_quantize_s8 on the flattened tensor, so the codes and scale are bit-identical. */
int dl_gemm_quantize_tensor_s8(int64_t rows, int64_t cols, const float *x, int64_t ldx,
                               int rounding, uint64_t key, int8_t *q, float *scale) {
    const dl_dispatch_t *d = dl_dispatch();
    if (ldx == cols && rows > 1) { /* contiguous rows: one row (the same codes, longer vectors) */
        cols *= rows;
        rows = 1;
    }
    uint32_t mb = 0;
    for (int64_t r = 0; r < rows; r++)
        mb = gemm_max_u32(mb, d->gemm_absmax_bits_f32(x + r * ldx, cols));
    if (mb >= 0x7f800000u) return DL_E_NONFINITE;
    const float s = gemm_scale_of(gemm_bits_float(mb)), inv = 1.0f / s;
    *scale = s;
    for (int64_t r = 0; r < rows; r++) {
        if (rounding == 0)
            d->gemm_qnearest_f32(x + r * ldx, NULL, inv, cols, q + r * cols);
        else
            d->gemm_qstoch_f32(x + r * ldx, NULL, inv, cols, key, (uint64_t)(r * cols),
                               q + r * cols);
    }
    return DL_OK;
}
