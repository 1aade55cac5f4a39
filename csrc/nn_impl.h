/* nn_impl.h: the float32 GEMMs of the peer-batched layers, compiled once per ISA.
 *
 * Included by nn.c (portable flags, 4-lane vectors), nn_avx2.c (-mavx2 -mfma, 8 lanes) and
 * nn_avx512.c (-mavx512f -mfma, 16 lanes); each defines DL_SUFFIX first. One register-blocked
 * GEMM, C = A B with any element strides for A and B (so A^T and B^T need no copies): B is packed
 * once per KC x NC block into NR-column panels (the last one narrower when it fits: 12 columns on
 * AVX2, 16 on AVX-512, for N = 10 logits) and reused by every row block; A is read in place; an
 * MR x NR microkernel keeps 2 * MR vector accumulators in registers and applies the epilogue
 * (accumulate into C, bias, ReLU or a ReLU mask) on its way straight into C, edge columns through
 * one out-of-line call per tile (AVX-512: masked loads and stores). On top of it:
 * - dl_nn_gemm_f32: C_p (+)= A_p B_p for P peers (convolutions);
 * - dl_nn_dense_forward_f32: Y_p = act(X_p W_p + b_p);
 * - dl_nn_dense_backward_f32: db_p = sum_b dY_p, dW_p = X_p^T dY_p, dX_p = (dY_p W_p^T) * [M_p > 0].
 * Threads take whole peers (or row blocks of one peer when peers are fewer than threads); every
 * output element is the same sequence of operations whichever thread computes it (k runs in the
 * same KC blocks in the same order), so results do not depend on the thread count.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dl.h"

#ifndef DL_SUFFIX
#error "define DL_SUFFIX before including nn_impl.h"
#endif
#define DL_CAT2(a, b) a##_##b
#define DL_CAT(a, b) DL_CAT2(a, b)

#if defined(__AVX512F__)
#define DL_NN_LANES 16
#elif defined(__AVX2__)
#define DL_NN_LANES 8
#else
#define DL_NN_LANES 4
#endif
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif
typedef float dl_nn_vf __attribute__((vector_size(DL_NN_LANES * 4)));
typedef int32_t dl_nn_vi __attribute__((vector_size(DL_NN_LANES * 4)));

/* Whatever the ISA files' -ffp-contract=fast says: every multiply-add here is explicit (nn_fma),
 * so each kernel instance (any row count mr, B in place or packed, which a thread's share of the
 * rows decides) computes an element alike on any compiler (see gossip_impl.h). */
#pragma GCC optimize("fp-contract=off")

/* acc + a * b per lane: one fused multiply-add in the FMA builds, a product and a sum in the
 * portable one. nn_fma4 is the same on 4 lanes (the AVX2 narrow kernel's last 4 columns). */
#if defined(__FMA__) && (defined(__x86_64__) || defined(_M_X64))
static inline dl_nn_vf nn_fma(dl_nn_vf acc, dl_nn_vf a, dl_nn_vf b) {
#if DL_NN_LANES == 16
    return (dl_nn_vf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)acc);
#else
    return (dl_nn_vf)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)acc);
#endif
}
#else
static inline dl_nn_vf nn_fma(dl_nn_vf acc, dl_nn_vf a, dl_nn_vf b) { return acc + a * b; }
#endif
/* s in every lane */
static inline dl_nn_vf nn_splat(float s) {
#if DL_NN_LANES == 16
    return (dl_nn_vf)_mm512_set1_ps(s);
#elif DL_NN_LANES == 8
    return (dl_nn_vf)_mm256_set1_ps(s);
#else
    const dl_nn_vf v = {s, s, s, s};
    return v;
#endif
}

#define DL_NN_MR 6
#define DL_NN_NR (2 * DL_NN_LANES)
#define DL_NN_KC 256
#define DL_NN_NC 512
/* At most this many rows of C read B in place (nn_gemm_rows): 32 rows (the batch of a dense
 * layer's forward, a convolution's output channels) take 0.83-0.65x the time with packing
 * (Xeon family 6 model 207, AVX-512 build, 2 threads: the Fashion-MNIST CNN's convolutions and
 * the 64-128-10 MLP's first layer; 16 and 64 rows measured too, 32 best) */
#define DL_NN_INPLACE_ROWS 32

static inline dl_nn_vf nn_ld(const float *p) {
    dl_nn_vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void nn_st(float *p, dl_nn_vf v) { memcpy(p, &v, sizeof v); }

/* Per-thread packing buffers, grown on demand and kept for the thread's life (OpenMP reuses its
 * threads), so a call allocates nothing in the steady state. */
static _Thread_local float *nn_buf = NULL;
static _Thread_local size_t nn_buf_n = 0;

static float *nn_scratch(size_t n) {
    if (n > nn_buf_n) {
        float *p = (float *)realloc(nn_buf, n * sizeof(float));
        if (p == NULL) return NULL;
        nn_buf = p;
        nn_buf_n = n;
    }
    return nn_buf;
}

/* What happens to a tile on its way into C. */
typedef struct {
    int accumulate;      /* C += result instead of C = result */
    const float *bias;   /* per column, or NULL */
    int relu;            /* max(., 0) (NaN kept) */
    const float *mask;   /* keep where mask > 0, else 0; same row/column layout as C, or NULL */
    int64_t mask_rs;
} nn_epi_t;

#define DL_NN_INLINE static inline __attribute__((always_inline))

/* The epilogue of one vector of accumulators v headed for C: acc: add the old C; last (the final
 * k block): add the bias, apply ReLU, zero where the mask is <= 0. Both vector widths (the ISA's
 * and 4 lanes) get one, and an edge version (NAME_tail) doing the same per element. */
#define DL_NN_DEFINE_PUT(NAME, VT, VI)                                                            \
    DL_NN_INLINE void NAME##_full(float *c, VT v, const float *bias, const float *mrow, int relu, \
                                  int acc, int last) {                                            \
        const VT zero = {0};                                                                      \
        VT t;                                                                                     \
        if (acc) {                                                                                \
            memcpy(&t, c, sizeof t);                                                              \
            v = t + v;                                                                            \
        }                                                                                         \
        if (last) {                                                                               \
            if (bias) {                                                                           \
                memcpy(&t, bias, sizeof t);                                                       \
                v += t;                                                                           \
            }                                                                                     \
            if (relu) v = (VT)((VI)v & ~(VI)(v <= zero));                                         \
            if (mrow) {                                                                           \
                memcpy(&t, mrow, sizeof t);                                                       \
                v = (VT)((VI)v & (VI)(t > zero));                                                 \
            }                                                                                     \
        }                                                                                         \
        memcpy(c, &v, sizeof v);                                                                  \
    }                                                                                             \
    DL_NN_INLINE void NAME(float *crow, VT v, int64_t j, const nn_epi_t *e, int acc, int last,   \
                           const float *mrow) {                                                   \
        NAME##_full(crow + j, v, e->bias ? e->bias + j : NULL, mrow ? mrow + j : NULL, e->relu,   \
                    acc, last);                                                                   \
    }                                                                                             \
    /* The edge: the first n (< lanes) lanes of one vector per row for mr rows, element by      \
     * element with the same operations; out of line (inlined, it makes GCC spill the           \
     * microkernel's accumulators), one call per tile, the vectors passed in registers. */      \
    static __attribute__((noinline, unused)) void NAME##_tail(                                    \
        int mr, float *c, int64_t ldc, int64_t j, int n, const nn_epi_t *e, int acc, int last,    \
        const float *mask, VT v0, VT v1, VT v2, VT v3, VT v4, VT v5) {                            \
        enum { LN = sizeof(VT) / 4 };                                                             \
        float v[6][LN];                                                                           \
        memcpy(v[0], &v0, sizeof v0), memcpy(v[1], &v1, sizeof v1);                               \
        memcpy(v[2], &v2, sizeof v2), memcpy(v[3], &v3, sizeof v3);                               \
        memcpy(v[4], &v4, sizeof v4), memcpy(v[5], &v5, sizeof v5);                               \
        for (int r = 0; r < mr; r++) {                                                            \
            float *crow = c + r * ldc + j;                                                        \
            const float *mrow = mask ? mask + r * e->mask_rs + j : NULL;                          \
            for (int q = 0; q < n; q++) {                                                         \
                float x = v[r][q];                                                                \
                if (acc) x = crow[q] + x;                                                         \
                if (last) {                                                                       \
                    if (e->bias) x += e->bias[j + q];                                             \
                    if (e->relu && x <= 0.0f) x = 0.0f;                                           \
                    if (mrow && !(mrow[q] > 0.0f)) x = 0.0f;                                      \
                }                                                                                 \
                crow[q] = x;                                                                      \
            }                                                                                     \
        }                                                                                         \
    }

DL_NN_DEFINE_PUT(nn_put, dl_nn_vf, dl_nn_vi)
#if DL_NN_LANES == 8
typedef float dl_nn_v4 __attribute__((vector_size(16)));
typedef int32_t dl_nn_v4i __attribute__((vector_size(16)));
DL_NN_DEFINE_PUT(nn_put4, dl_nn_v4, dl_nn_v4i)
typedef float dl_nn_v2 __attribute__((vector_size(8)));
static inline dl_nn_v4 nn_ld2(const float *p) {
    dl_nn_v2 t;
    memcpy(&t, p, sizeof t);
    return __builtin_shufflevector(t, (dl_nn_v2){0}, 0, 1, 2, 3);
}
/* nn_put4 for the first two lanes only (the same operations on those lanes). */
DL_NN_INLINE void nn_put2(float *crow, dl_nn_v4 v, int64_t j, const nn_epi_t *e, int acc, int last,
                          const float *mrow) {
    const dl_nn_v4 zero = {0};
    if (acc) v = nn_ld2(crow + j) + v;
    if (last) {
        if (e->bias) v += nn_ld2(e->bias + j);
        if (e->relu) v = (dl_nn_v4)((dl_nn_v4i)v & ~(dl_nn_v4i)(v <= zero));
        if (mrow) v = (dl_nn_v4)((dl_nn_v4i)v & (dl_nn_v4i)(nn_ld2(mrow + j) > zero));
    }
    const dl_nn_v2 lo = __builtin_shufflevector(v, v, 0, 1);
    memcpy(crow + j, &lo, sizeof lo);
}
/* A narrow panel of 12 columns (one 8-lane and one 4-lane vector per row) for the last < 13
 * columns: N = 10 outputs waste 2 of 12 lanes instead of 6 of 16, and a 4-lane FMA is half the
 * work of an 8-lane one on CPUs with 128-bit FMA units (Zen 1). */
#define DL_NN_NRN 12
#elif DL_NN_LANES == 16
/* The edge columns of a tile through masked loads and stores (the same operations per element as
 * the scalar tail, lanes past n neither read nor written); a narrow last panel is one zmm wide
 * (N = 10 logits: 6 of 16 lanes idle, against 22 of 32 in a full panel). */
DL_NN_INLINE void nn_putm(float *crow, dl_nn_vf v, int64_t j, int n, const nn_epi_t *e, int acc,
                          int last, const float *mrow) {
    const __mmask16 k = (__mmask16)((1u << n) - 1u);
    const dl_nn_vf zero = {0};
    dl_nn_vf t;
    if (acc) {
        t = (dl_nn_vf)_mm512_maskz_loadu_ps(k, crow + j);
        v = t + v;
    }
    if (last) {
        if (e->bias) v += (dl_nn_vf)_mm512_maskz_loadu_ps(k, e->bias + j);
        if (e->relu) v = (dl_nn_vf)((dl_nn_vi)v & ~(dl_nn_vi)(v <= zero));
        if (mrow) {
            t = (dl_nn_vf)_mm512_maskz_loadu_ps(k, mrow + j);
            v = (dl_nn_vf)((dl_nn_vi)v & (dl_nn_vi)(t > zero));
        }
    }
    _mm512_mask_storeu_ps(crow + j, k, (__m512)v);
}
/* The first n (< 16) lanes of one vector per row for mr rows (the wide kernel's edge). */
DL_NN_INLINE void nn_putm_rows(int mr, float *c, int64_t ldc, int64_t j, int n, const nn_epi_t *e,
                               int acc, int last, const float *mask, dl_nn_vf v0, dl_nn_vf v1,
                               dl_nn_vf v2, dl_nn_vf v3, dl_nn_vf v4, dl_nn_vf v5) {
    const dl_nn_vf v[6] = {v0, v1, v2, v3, v4, v5};
    for (int r = 0; r < 6; r++)
        if (mr > r)
            nn_putm(c + r * ldc, v[r], j, n, e, acc, last, mask ? mask + r * e->mask_rs : NULL);
}
#define nn_put_tail nn_putm_rows
#define DL_NN_NRN 16
#else
#define DL_NN_NRN DL_NN_NR
#endif

/* Width of the packed panel holding w (<= NR) columns. */
static inline int64_t nn_panel_width(int64_t w) { return w <= DL_NN_NRN ? DL_NN_NRN : DL_NN_NR; }

/* kc x nc of B (strides rs, cs) into panels of NR columns (the last one NRN wide when it fits),
 * panel j0 at bp + j0 * kc holding bp[k * width + c]; zero-padded. */
static void nn_pack_b(int64_t kc, int64_t nc, const float *b, int64_t rs, int64_t cs, float *bp) {
    const int64_t nfull = nc / DL_NN_NR * DL_NN_NR;
    if (cs == 1 && nfull > 0) {
        /* row by row across the full panels: B is read in address order (the prefetcher's
         * pattern; a panel at a time reads one line per row, rs apart) */
        for (int64_t k = 0; k < kc; k++) {
            const float *src = b + k * rs;
            for (int64_t j0 = 0; j0 < nfull; j0 += DL_NN_NR)
                memcpy(bp + j0 * kc + k * DL_NN_NR, src + j0, DL_NN_NR * 4);
        }
    }
    for (int64_t j0 = cs == 1 ? nfull : 0; j0 < nc; j0 += DL_NN_NR) {
        const int64_t w = dl_min_i64(DL_NN_NR, nc - j0), pw = nn_panel_width(w);
        float *dst = bp + j0 * kc;
        if (cs == 1) { /* a narrow last panel: one vector, then plain loops */
            const int64_t wv = w >= DL_NN_LANES ? DL_NN_LANES : 0;
            for (int64_t k = 0; k < kc; k++) {
                const float *src = b + k * rs + j0;
                float *d = dst + k * pw;
                if (wv) nn_st(d, nn_ld(src));
                for (int64_t c = wv; c < w; c++) d[c] = src[c];
                for (int64_t c = w; c < pw; c++) d[c] = 0.0f;
            }
        } else {
            /* row by row: each packed row (pw floats, a line or two) written whole, zeros
             * included; with rs == 1 (B = W^T, dy^T) the w columns are read as w sequential
             * streams (column by column, every row's lines were written pw times). AVX-512: 16
             * columns of a row per masked gather (lanes past w neither read nor nonzero). */
            int64_t k = 0;
#if DL_NN_LANES == 16
            if (cs <= INT32_MAX / (4 * DL_NN_LANES)) {
                const __m512i idx = _mm512_mullo_epi32(
                    _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                    _mm512_set1_epi32((int)cs));
                for (; k < kc; k++) {
                    const float *src = b + j0 * cs + k * rs;
                    for (int64_t c0 = 0; c0 < pw; c0 += 16) {
                        const int64_t nv = dl_min_i64(16, dl_max_i64(0, w - c0));
                        const __mmask16 m = (__mmask16)((1u << nv) - 1u);
                        const __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx,
                                                                  src + c0 * cs, 4);
                        _mm512_storeu_ps(dst + k * pw + c0, v);
                    }
                }
            }
#endif
            for (; k < kc; k++) {
                const float *src = b + j0 * cs + k * rs;
                float *d = dst + k * pw;
                for (int64_t c = 0; c < w; c++) d[c] = src[c * cs];
                for (int64_t c = w; c < pw; c++) d[c] = 0.0f;
            }
        }
    }
}

/* The microkernels: C[0:mr, j:j+n] (ldc) <- epilogue(A[0:mr, 0:kc] Bpanel), A read in place with
 * any strides (ars, acs) (row-major X, X^T as a column-major view, W^T ...), the accumulators
 * kept in registers from the first product to the store into C. Every element is one chain
 * acc = acc + a * b over k in order, whatever mr and the panel, so how rows are blocked (and
 * split over threads) never changes a result. */
#define DL_NN_ROW(R, S) (mr > (R) ? (S) : 0)
/* Row R's offset from row 0 in A: R ars, or from the row-offset table aro. The kernels keep
 * one pointer stepped by acs and rows 1-5 at fixed offsets o1..o5 (an index multiplied by acs
 * makes GCC spill the accumulators under -fwrapv, which Python's build flags add). */
#define DL_NN_AOFF(R) (aro != NULL ? aro[R] - aro[0] : (R) * ars)
#define DL_NN_A_OFFSETS                                                                           \
    const int64_t o1 = DL_NN_ROW(1, DL_NN_AOFF(1)), o2 = DL_NN_ROW(2, DL_NN_AOFF(2)),             \
                  o3 = DL_NN_ROW(3, DL_NN_AOFF(3)), o4 = DL_NN_ROW(4, DL_NN_AOFF(4)),             \
                  o5 = DL_NN_ROW(5, DL_NN_AOFF(5));
/* nn_kern_wide: B's rows bs apart from bp (a packed panel, or B in place), or, when brow is not
 * NULL, row k at brow[k] + bs (bs then the panel's first column). A (also for nn_kern_narrow):
 * element (r, k) at a[r ars + k acs], or, with the tables, at a[aro[r] - aro[0] + acol[k]]
 * (acs 0): a convolution's im2col rows read in place (nn_conv_wgrad). */
DL_NN_INLINE void nn_kern_wide(const int mr, int64_t kc, const float *a, int64_t ars, int64_t acs,
                               const int64_t *restrict aro, const int64_t *restrict acol,
                               const float *restrict bp, int64_t bs,
                               const float *const *restrict brow, float *c, int64_t ldc,
                               int64_t j, int n, const nn_epi_t *e, int acc, int last,
                               const float *mask) {
    const int L = DL_NN_LANES;
    DL_NN_A_OFFSETS
    dl_nn_vf c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0};
    dl_nn_vf c30 = {0}, c31 = {0}, c40 = {0}, c41 = {0}, c50 = {0}, c51 = {0};
    for (int64_t k = 0; k < kc; k++, a += acs) {
        const float *ak = acol != NULL ? a + acol[k] : a;
        const float *bk = brow != NULL ? brow[k] + bs : bp;
        const dl_nn_vf b0 = nn_ld(bk), b1 = nn_ld(bk + L);
#define DL_NN_WIDE_ROW(R, OFF, C0, C1)                                                            \
    if (mr > (R)) {                                                                               \
        const dl_nn_vf x = nn_splat(ak[OFF]);                                                     \
        C0 = nn_fma(C0, x, b0);                                                                   \
        C1 = nn_fma(C1, x, b1);                                                                   \
    }
        DL_NN_WIDE_ROW(0, 0, c00, c01)
        DL_NN_WIDE_ROW(1, o1, c10, c11)
        DL_NN_WIDE_ROW(2, o2, c20, c21)
        DL_NN_WIDE_ROW(3, o3, c30, c31)
        DL_NN_WIDE_ROW(4, o4, c40, c41)
        DL_NN_WIDE_ROW(5, o5, c50, c51)
#undef DL_NN_WIDE_ROW
        if (brow == NULL) bp += bs;
    }
    /* full vectors straight into C; the edge vectors of all rows in one tail call */
#define DL_NN_PUT_ROW(R, V, J)                                                                    \
    if (mr > (R)) nn_put(c + (R) * ldc, V, J, e, acc, last, mask ? mask + (R) * e->mask_rs : NULL);
    if (n >= L) {
        DL_NN_PUT_ROW(0, c00, j)
        DL_NN_PUT_ROW(1, c10, j)
        DL_NN_PUT_ROW(2, c20, j)
        DL_NN_PUT_ROW(3, c30, j)
        DL_NN_PUT_ROW(4, c40, j)
        DL_NN_PUT_ROW(5, c50, j)
        if (n == 2 * L) {
            DL_NN_PUT_ROW(0, c01, j + L)
            DL_NN_PUT_ROW(1, c11, j + L)
            DL_NN_PUT_ROW(2, c21, j + L)
            DL_NN_PUT_ROW(3, c31, j + L)
            DL_NN_PUT_ROW(4, c41, j + L)
            DL_NN_PUT_ROW(5, c51, j + L)
        } else if (n > L) {
            nn_put_tail(mr, c, ldc, j + L, n - L, e, acc, last, mask, c01, c11, c21, c31, c41, c51);
        }
    } else {
        nn_put_tail(mr, c, ldc, j, n, e, acc, last, mask, c00, c10, c20, c30, c40, c50);
    }
#undef DL_NN_PUT_ROW
}

#if DL_NN_LANES == 8
DL_NN_INLINE void nn_kern_narrow(const int mr, int64_t kc, const float *a, int64_t ars,
                                 int64_t acs, const int64_t *restrict aro,
                                 const int64_t *restrict acol, const float *restrict bp, float *c,
                                 int64_t ldc, int64_t j, int n, const nn_epi_t *e, int acc,
                                 int last, const float *mask) {
    DL_NN_A_OFFSETS
    dl_nn_vf c00 = {0}, c10 = {0}, c20 = {0}, c30 = {0}, c40 = {0}, c50 = {0};
    dl_nn_v4 c01 = {0}, c11 = {0}, c21 = {0}, c31 = {0}, c41 = {0}, c51 = {0};
    for (int64_t k = 0; k < kc; k++, a += acs) {
        const float *ak = acol != NULL ? a + acol[k] : a;
        const dl_nn_vf b0 = nn_ld(bp);
        dl_nn_v4 b1;
        memcpy(&b1, bp + 8, sizeof b1);
        /* one broadcast per row; the 4-lane product takes its low half (a free register alias,
         * where two broadcasts would cost as much as the FMAs on Zen 1) */
#define DL_NN_NARROW_ROW(R, OFF, C0, C1)                                                          \
    if (mr > (R)) {                                                                               \
        const float s = ak[OFF];                                                                   \
        const dl_nn_vf x = {s, s, s, s, s, s, s, s};                                              \
        C0 = nn_fma(C0, x, b0);                                                                   \
        C1 = (dl_nn_v4)_mm_fmadd_ps((__m128)__builtin_shufflevector(x, x, 0, 1, 2, 3),            \
                                    (__m128)b1, (__m128)C1);                                      \
    }
        DL_NN_NARROW_ROW(0, 0, c00, c01)
        DL_NN_NARROW_ROW(1, o1, c10, c11)
        DL_NN_NARROW_ROW(2, o2, c20, c21)
        DL_NN_NARROW_ROW(3, o3, c30, c31)
        DL_NN_NARROW_ROW(4, o4, c40, c41)
        DL_NN_NARROW_ROW(5, o5, c50, c51)
#undef DL_NN_NARROW_ROW
        bp += DL_NN_NRN;
    }
#define DL_NN_PUT_ROW(R, PUT, V, J)                                                               \
    if (mr > (R)) PUT(c + (R) * ldc, V, J, e, acc, last, mask ? mask + (R) * e->mask_rs : NULL);
    if (n >= 8) {
        DL_NN_PUT_ROW(0, nn_put, c00, j)
        DL_NN_PUT_ROW(1, nn_put, c10, j)
        DL_NN_PUT_ROW(2, nn_put, c20, j)
        DL_NN_PUT_ROW(3, nn_put, c30, j)
        DL_NN_PUT_ROW(4, nn_put, c40, j)
        DL_NN_PUT_ROW(5, nn_put, c50, j)
        if (n == 12) {
            DL_NN_PUT_ROW(0, nn_put4, c01, j + 8)
            DL_NN_PUT_ROW(1, nn_put4, c11, j + 8)
            DL_NN_PUT_ROW(2, nn_put4, c21, j + 8)
            DL_NN_PUT_ROW(3, nn_put4, c31, j + 8)
            DL_NN_PUT_ROW(4, nn_put4, c41, j + 8)
            DL_NN_PUT_ROW(5, nn_put4, c51, j + 8)
        } else if (n == 10) { /* N = 10 classes: two lanes, through 64-bit loads and stores */
            DL_NN_PUT_ROW(0, nn_put2, c01, j + 8)
            DL_NN_PUT_ROW(1, nn_put2, c11, j + 8)
            DL_NN_PUT_ROW(2, nn_put2, c21, j + 8)
            DL_NN_PUT_ROW(3, nn_put2, c31, j + 8)
            DL_NN_PUT_ROW(4, nn_put2, c41, j + 8)
            DL_NN_PUT_ROW(5, nn_put2, c51, j + 8)
        } else if (n > 8) {
            nn_put4_tail(mr, c, ldc, j + 8, n - 8, e, acc, last, mask, c01, c11, c21, c31, c41,
                         c51);
        }
    } else {
        nn_put_tail(mr, c, ldc, j, n, e, acc, last, mask, c00, c10, c20, c30, c40, c50);
    }
#undef DL_NN_PUT_ROW
}
#endif

#if DL_NN_LANES == 16
/* A narrow panel (n <= 16 columns): one zmm accumulator per row. */
DL_NN_INLINE void nn_kern_narrow(const int mr, int64_t kc, const float *a, int64_t ars,
                                 int64_t acs, const int64_t *restrict aro,
                                 const int64_t *restrict acol, const float *restrict bp, float *c,
                                 int64_t ldc, int64_t j, int n, const nn_epi_t *e, int acc,
                                 int last, const float *mask) {
    DL_NN_A_OFFSETS
    dl_nn_vf c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0}, c4 = {0}, c5 = {0};
    for (int64_t k = 0; k < kc; k++, a += acs) {
        const float *ak = acol != NULL ? a + acol[k] : a;
        const dl_nn_vf b0 = nn_ld(bp);
        c0 = nn_fma(c0, nn_splat(ak[0]), b0);
        if (mr > 1) c1 = nn_fma(c1, nn_splat(ak[o1]), b0);
        if (mr > 2) c2 = nn_fma(c2, nn_splat(ak[o2]), b0);
        if (mr > 3) c3 = nn_fma(c3, nn_splat(ak[o3]), b0);
        if (mr > 4) c4 = nn_fma(c4, nn_splat(ak[o4]), b0);
        if (mr > 5) c5 = nn_fma(c5, nn_splat(ak[o5]), b0);
        bp += DL_NN_NRN;
    }
    if (n == DL_NN_LANES) {
#define DL_NN_PUT_ROW(R, V)                                                                       \
    if (mr > (R)) nn_put(c + (R) * ldc, V, j, e, acc, last, mask ? mask + (R) * e->mask_rs : NULL);
        DL_NN_PUT_ROW(0, c0)
        DL_NN_PUT_ROW(1, c1)
        DL_NN_PUT_ROW(2, c2)
        DL_NN_PUT_ROW(3, c3)
        DL_NN_PUT_ROW(4, c4)
        DL_NN_PUT_ROW(5, c5)
#undef DL_NN_PUT_ROW
    } else {
        nn_putm_rows(mr, c, ldc, j, n, e, acc, last, mask, c0, c1, c2, c3, c4, c5);
    }
}
#endif
#undef DL_NN_ROW
#undef DL_NN_AOFF
#undef DL_NN_A_OFFSETS

/* One mr x (panel) tile: a switch to the kernels compiled for each row count. */
static void nn_tile(int mr, int narrow, int64_t kc, const float *a, int64_t ars, int64_t acs,
                    const int64_t *aro, const int64_t *acol, const float *bp, int64_t bs,
                    const float *const *brow, float *c, int64_t ldc, int64_t j, int n,
                    const nn_epi_t *e, int acc, int last, const float *mask) {
#define DL_NN_WIDE(R)                                                                             \
    if (acol != NULL)                                                                             \
        nn_kern_wide(R, kc, a, ars, 0, aro, acol, bp, bs, NULL, c, ldc, j, n, e, acc, last, mask); \
    else if (brow != NULL)                                                                        \
        nn_kern_wide(R, kc, a, ars, acs, NULL, NULL, bp, bs, brow, c, ldc, j, n, e, acc, last,    \
                     mask);                                                                       \
    else                                                                                          \
        nn_kern_wide(R, kc, a, ars, acs, NULL, NULL, bp, bs, NULL, c, ldc, j, n, e, acc, last,    \
                     mask);
#if DL_NN_LANES >= 8
#define DL_NN_CASE(R)                                                                             \
    case R:                                                                                       \
        if (narrow && acol != NULL)                                                               \
            nn_kern_narrow(R, kc, a, ars, 0, aro, acol, bp, c, ldc, j, n, e, acc, last, mask);    \
        else if (narrow)                                                                          \
            nn_kern_narrow(R, kc, a, ars, acs, NULL, NULL, bp, c, ldc, j, n, e, acc, last, mask); \
        else {                                                                                    \
            DL_NN_WIDE(R)                                                                         \
        }                                                                                         \
        break;
#else
    (void)narrow;
#define DL_NN_CASE(R)                                                                             \
    case R:                                                                                       \
        DL_NN_WIDE(R)                                                                             \
        break;
#endif
    switch (mr) {
        DL_NN_CASE(6)
        DL_NN_CASE(5)
        DL_NN_CASE(4)
        DL_NN_CASE(3)
        DL_NN_CASE(2)
        DL_NN_CASE(1)
    default:
        break;
    }
#undef DL_NN_CASE
#undef DL_NN_WIDE
}

/* Rows of the next row block when rem rows are left: MR, but a remainder of MR + 1 .. 2 MR - 1
 * is split in two near-halves (8 rows: 4 + 4, not 6 + 2), so no block is too short to hide the
 * FMA latency. */
static inline int nn_block_rows(int64_t rem) {
    if (rem >= 2 * DL_NN_MR || rem == DL_NN_MR) return DL_NN_MR;
    if (rem > DL_NN_MR) return (int)((rem + 1) / 2);
    return (int)rem;
}

/* Columns [j0, j0 + nc) of rows[0 .. kc) (B given by row pointers) into panels as nn_pack_b. */
static void nn_pack_b_rows(int64_t kc, int64_t nc, const float *const *rows, int64_t j0,
                           float *bp) {
    for (int64_t jp = 0; jp < nc; jp += DL_NN_NR) {
        const int64_t w = dl_min_i64(DL_NN_NR, nc - jp), pw = nn_panel_width(w);
        float *dst = bp + jp * kc;
        for (int64_t k = 0; k < kc; k++) {
            memcpy(dst + k * pw, rows[k] + j0 + jp, (size_t)w * sizeof(float));
            for (int64_t q = w; q < pw; q++) dst[k * pw + q] = 0.0f;
        }
    }
}

/* Rows [m0, m1) of C (ldc) (+)= A B, A m x k (strides ars, acs), B k x n (brs, bcs; or, when
 * brows is not NULL, row kk of B at brows[kk], contiguous), C's rows contiguous. B is packed once
 * per (KC x NC) block and reused by every row block, or read in place; A is read in place.
 * Returns DL_E_NOMEM if the packing buffer cannot grow. */
static int nn_gemm_rows_t(int64_t m0, int64_t m1, int64_t n, int64_t k, const float *a,
                          int64_t ars, int64_t acs, const int64_t *arow, const int64_t *acol,
                          const float *b, int64_t brs, int64_t bcs, const float *const *brows,
                          float *c, int64_t ldc, const nn_epi_t *e) {
    if (k == 0) { /* C = 0 (+ epilogue), one element at a time */
        for (int64_t i = m0; i < m1; i++) {
            const float *mrow = e->mask ? e->mask + i * e->mask_rs : NULL;
            for (int64_t j = 0; j < n; j++) {
                float v = e->accumulate ? c[i * ldc + j] + 0.0f : 0.0f;
                if (e->bias) v += e->bias[j];
                if (e->relu && v <= 0.0f) v = 0.0f;
                if (mrow && !(mrow[j] > 0.0f)) v = 0.0f;
                c[i * ldc + j] = v;
            }
        }
        return DL_OK;
    }
    const int64_t kcmax = dl_min_i64(DL_NN_KC, k);
    const int64_t ncmax = dl_min_i64(DL_NN_NC, (n + DL_NN_NR - 1) / DL_NN_NR * DL_NN_NR);
    float *bp = nn_scratch((size_t)(kcmax * ncmax));
    if (bp == NULL) return DL_E_NOMEM;
    /* Few rows against a B with contiguous rows (a dense layer's forward: M = the batch), or B
     * given by row pointers (a convolution's forward, nn_conv_forward): the full panels are read
     * in place, as packing them would cost about as much as the product; the last, narrower panel
     * is packed (zero-padded) as always. */
    const int inplace = brows != NULL || (bcs == 1 && m1 - m0 <= DL_NN_INPLACE_ROWS);
    for (int64_t jc = 0; jc < n; jc += DL_NN_NC) {
        const int64_t nc = dl_min_i64(DL_NN_NC, n - jc);
        const int64_t nfull = inplace ? nc / DL_NN_NR * DL_NN_NR : 0;
        for (int64_t pc = 0; pc < k; pc += DL_NN_KC) {
            const int64_t kc = dl_min_i64(DL_NN_KC, k - pc);
            const int acc = e->accumulate || pc > 0, last = pc + kc == k;
            const float *bk = brows != NULL ? NULL : b + pc * brs + jc * bcs;
            if (nfull < nc) {
                if (brows != NULL)
                    nn_pack_b_rows(kc, nc - nfull, brows + pc, jc + nfull, bp + nfull * kc);
                else
                    nn_pack_b(kc, nc - nfull, bk + nfull * bcs, brs, bcs, bp + nfull * kc);
            }
            for (int64_t i = m0; i < m1;) {
                const int mr = nn_block_rows(m1 - i);
                const float *ai = arow != NULL ? a + arow[i] : a + i * ars + pc * acs;
                const int64_t *aro = arow != NULL ? arow + i : NULL;
                const int64_t *aco = acol != NULL ? acol + pc : NULL;
                const float *mask = e->mask ? e->mask + i * e->mask_rs : NULL;
                for (int64_t j = 0; j < nc; j += DL_NN_NR) {
                    const int64_t w = dl_min_i64(DL_NN_NR, nc - j);
                    if (j < nfull && brows != NULL)
                        nn_tile(mr, 0, kc, ai, ars, acs, aro, aco, NULL, jc + j, brows + pc,
                                c + i * ldc, ldc, jc + j, (int)w, e, acc, last, mask);
                    else if (j < nfull)
                        nn_tile(mr, 0, kc, ai, ars, acs, aro, aco, bk + j, brs, NULL,
                                c + i * ldc, ldc, jc + j, (int)w, e, acc, last, mask);
                    else
                        nn_tile(mr, nn_panel_width(w) != DL_NN_NR, kc, ai, ars, acs, aro, aco,
                                bp + j * kc, DL_NN_NR, NULL, c + i * ldc, ldc, jc + j, (int)w, e,
                                acc, last, mask);
                }
                i += mr;
            }
        }
    }
    return DL_OK;
}

/* nn_gemm_rows_t with A strided (no tables). */
static int nn_gemm_rows(int64_t m0, int64_t m1, int64_t n, int64_t k, const float *a, int64_t ars,
                        int64_t acs, const float *b, int64_t brs, int64_t bcs,
                        const float *const *brows, float *c, int64_t ldc, const nn_epi_t *e) {
    return nn_gemm_rows_t(m0, m1, n, k, a, ars, acs, NULL, NULL, b, brs, bcs, brows, c, ldc, e);
}

/* Work items: (peer, block of rows). Whole peers when there are at least as many peers as
 * threads, else each peer's rows are split into MR-aligned blocks (the split never changes a
 * result, only who computes it). */
static int64_t nn_row_block(int64_t n_peers, int64_t m, int n_threads) {
    if (n_peers >= n_threads || m <= DL_NN_MR) return dl_max_i64(m, 1);
    const int64_t per = (m * n_peers + 2 * n_threads - 1) / (2 * n_threads);
    return dl_max_i64(DL_NN_MR, (per + DL_NN_MR - 1) / DL_NN_MR * DL_NN_MR);
}

/* Small work on one thread: below 2^18 multiply-adds (about 10 us on one core) a thread team
 * costs more than it saves, and far more when the machine is oversubscribed (a barrier then waits
 * for a descheduled thread). It was 2^22 until 27 Nov 2026: the digits CNN's classifier (84 -> 10,
 * 1.7M multiply-adds at 64 peers, 0.22 + 0.40 ms on one core of the 16-core Xeon) then ran on
 * one thread whatever the count, 11% of the 16-thread loss_and_grad; on 2 cores 2 threads now
 * take 35 and 63 us where one took 65 and 135. */
static int nn_threads(int n_threads, int64_t items, double flops) {
    if (flops < (double)(1 << 18)) return 1;
    return (int)dl_min_i64(n_threads, items);
}

/* C_p (+)= A_p B_p for p < P; see dl.h (dl_nn_gemm_t) for shapes and strides. */
int DL_CAT(dl_nn_gemm_f32, DL_SUFFIX)(const dl_nn_gemm_t *g, int n_threads) {
    if (g->n_peers < 0 || g->m < 0 || g->n < 0 || g->k < 0 || n_threads < 1) return DL_E_ARG;
    if (g->n_peers == 0 || g->m == 0 || g->n == 0) return DL_OK;
    const int64_t mb = nn_row_block(g->n_peers, g->m, n_threads);
    const int64_t nrb = (g->m + mb - 1) / mb, items = g->n_peers * nrb;
    const int nt = nn_threads(n_threads, items, (double)g->n_peers * g->m * g->n * g->k);
    const nn_epi_t e = {.accumulate = g->accumulate};
    int status = DL_OK;
#pragma omp parallel for schedule(static) num_threads(nt) reduction(min : status)
    for (int64_t it = 0; it < items; it++) {
        const int64_t p = it / nrb, m0 = (it % nrb) * mb, m1 = dl_min_i64(g->m, m0 + mb);
        const int s = nn_gemm_rows(m0, m1, g->n, g->k, g->a + p * g->a_ps, g->a_rs, g->a_cs,
                                   g->b + p * g->b_ps, g->b_rs, g->b_cs, NULL, g->c + p * g->c_ps,
                                   g->c_rs, &e);
        if (s < status) status = s;
    }
    return status;
}

/* Y_p = act(X_p W_p + b_p); see dl.h (dl_nn_dense_t). */
int DL_CAT(dl_nn_dense_forward_f32, DL_SUFFIX)(const dl_nn_dense_t *d, int n_threads) {
    if (d->n_peers < 0 || d->batch < 0 || d->n_in < 0 || d->n_out < 0 || n_threads < 1)
        return DL_E_ARG;
    if (d->n_peers == 0 || d->batch == 0 || d->n_out == 0) return DL_OK;
    const int64_t mb = nn_row_block(d->n_peers, d->batch, n_threads);
    const int64_t nrb = (d->batch + mb - 1) / mb, items = d->n_peers * nrb;
    const int nt =
        nn_threads(n_threads, items, (double)d->n_peers * d->batch * d->n_in * d->n_out);
    int status = DL_OK;
#pragma omp parallel for schedule(static) num_threads(nt) reduction(min : status)
    for (int64_t it = 0; it < items; it++) {
        const int64_t p = it / nrb, m0 = (it % nrb) * mb, m1 = dl_min_i64(d->batch, m0 + mb);
        const nn_epi_t e = {.bias = d->bias ? d->bias + p * d->b_ps : NULL, .relu = d->relu};
        const int s = nn_gemm_rows(m0, m1, d->n_out, d->n_in, d->x + p * d->x_ps, d->x_rs, 1,
                                   d->w + p * d->w_ps, d->n_out, 1, NULL, d->y + p * d->y_ps,
                                   d->y_rs,
                                   &e);
        if (s < status) status = s;
    }
    return status;
}

/* db_p, dW_p and (optionally) dX_p of one peer-batched dense layer; see dl.h (dl_nn_dense_t). */
int DL_CAT(dl_nn_dense_backward_f32, DL_SUFFIX)(const dl_nn_dense_t *d, int n_threads) {
    if (d->n_peers < 0 || d->batch < 0 || d->n_in < 0 || d->n_out < 0 || n_threads < 1)
        return DL_E_ARG;
    if (d->n_peers == 0) return DL_OK;
    const int64_t P = d->n_peers, B = d->batch, I = d->n_in, O = d->n_out;
    /* Work items: a peer's db, dW and dX together, or, with fewer peers than threads, blocks of
     * dW's rows (the first also db) and blocks of dX's rows apart (nn_row_block: a row never
     * depends on its block, so the split changes no result) */
    const int split = P < n_threads;
    const int64_t mbw = split ? nn_row_block(P, I, n_threads) : dl_max_i64(I, 1);
    const int64_t mbx = split ? nn_row_block(P, B, n_threads) : dl_max_i64(B, 1);
    const int64_t nbw = split ? dl_max_i64(1, dl_cdiv_i64(I, mbw)) : 1;
    const int64_t nbx = split && d->dx != NULL ? dl_cdiv_i64(B, mbx) : 0;
    const int64_t per = nbw + nbx, items = P * per;
    const int nt = nn_threads(n_threads, items, (double)P * B * I * O * (d->dx ? 2 : 1));
    int status = DL_OK;
#pragma omp parallel for schedule(static) num_threads(nt) reduction(min : status)
    for (int64_t it = 0; it < items; it++) {
        const int64_t p = it / per, q = it % per;
        const float *x = d->x + p * d->x_ps, *dy = d->dy + p * d->dy_ps;
        int s = DL_OK;
        if (q == 0) { /* db = sum over the batch, in batch order */
            float *gb = d->gb + p * d->gb_ps;
            if (B == 0) {
                memset(gb, 0, sizeof(float) * (size_t)O);
            } else {
                memcpy(gb, dy, sizeof(float) * (size_t)O);
                for (int64_t b = 1; b < B; b++) {
                    const float *row = dy + b * d->dy_rs;
                    for (int64_t o = 0; o < O; o++) gb[o] += row[o];
                }
            }
        }
        if (q < nbw) { /* dW (I x O) = X^T (I x B) dY (B x O), rows q mbw .. */
            const nn_epi_t plain = {0};
            const int64_t r0 = dl_min_i64(I, q * mbw), r1 = dl_min_i64(I, r0 + mbw);
            s = nn_gemm_rows(r0, r1, O, B, x, 1, d->x_rs, dy, d->dy_rs, 1, NULL,
                             d->gw + p * d->gw_ps, O, &plain);
        }
        if (d->dx != NULL && s == DL_OK && (split ? q >= nbw : 1)) {
            /* dX (B x I) = dY (B x O) W^T (O x I), masked: all rows, or block q - nbw */
            const nn_epi_t em = {.mask = d->mask ? d->mask + p * d->m_ps : NULL,
                                 .mask_rs = d->m_rs};
            const int64_t r0 = split ? (q - nbw) * mbx : 0;
            const int64_t r1 = split ? dl_min_i64(B, r0 + mbx) : B;
            s = nn_gemm_rows(r0, r1, I, O, dy, d->dy_rs, 1, d->w + p * d->w_ps, 1, O, NULL,
                             d->dx + p * d->dx_ps, d->dx_rs, &em);
        }
        if (s < status) status = s;
    }
    return status;
}

/* A convolution's forward without im2col (see dl.h, dl_nn_conv_t): one item per (peer, sample),
 * each a GEMM of cout rows whose B rows are pointers into the padded image (row (ci, i, j) at
 * i wp + j of image (ci, b)) and a row of ones; threads take items. */
int DL_CAT(dl_nn_conv_forward_f32, DL_SUFFIX)(const dl_nn_conv_t *cv, int n_threads) {
    if (cv->n_peers < 0 || cv->cout < 0 || cv->c < 0 || cv->batch < 0 || cv->k < 1 ||
        cv->wp < cv->k || cv->run < 0 || cv->len < (cv->k - 1) * cv->wp + cv->k - 1 + cv->run ||
        n_threads < 1)
        return DL_E_ARG;
    const int64_t P = cv->n_peers, B = cv->batch, k = cv->k, kk = cv->c * k * k, K = kk + 1;
    const int split = cv->w != NULL; /* [weight | bias] assembled here from the layer's views */
    if (split && (cv->bias == NULL || cv->w_rs < kk)) return DL_E_ARG;
    if (P == 0 || B == 0 || cv->cout == 0 || cv->run == 0) return DL_OK;
    const int64_t items = P * B;
    const int nt = nn_threads(n_threads, items, (double)items * cv->cout * K * cv->run);
    int status = DL_OK;
#pragma omp parallel num_threads(nt) reduction(min : status)
    {
        const float **rows = (const float **)malloc((size_t)K * sizeof(*rows));
        float *ones = (float *)malloc((size_t)cv->run * sizeof(float));
        float *wbuf = split ? (float *)malloc((size_t)(cv->cout * K) * sizeof(float)) : NULL;
        int64_t held = -1; /* the peer whose [weight | bias] wbuf holds */
        /* every thread still meets the omp for */
        const int ok = rows != NULL && ones != NULL && (!split || wbuf != NULL);
        if (!ok) {
            status = DL_E_NOMEM;
        } else {
            for (int64_t q = 0; q < cv->run; q++) ones[q] = 1.0f;
            rows[kk] = ones;
        }
        const nn_epi_t plain = {0};
#pragma omp for schedule(static)
        for (int64_t it = 0; it < items; it++) {
            if (!ok) continue;
            const int64_t p = it / B, b = it % B;
            const float *img = cv->xp + p * cv->xp_ps + b * cv->len;
            for (int64_t ci = 0, r = 0; ci < cv->c; ci++)
                for (int64_t i = 0; i < k; i++)
                    for (int64_t j = 0; j < k; j++, r++)
                        rows[r] = img + ci * B * cv->len + i * cv->wp + j;
            const float *a = cv->wb + p * cv->wb_ps;
            if (split) {
                if (held != p) {
                    for (int64_t o = 0; o < cv->cout; o++) {
                        memcpy(wbuf + o * K, cv->w + p * cv->w_ps + o * cv->w_rs,
                               sizeof(float) * (size_t)kk);
                        wbuf[o * K + kk] = cv->bias[p * cv->bias_ps + o];
                    }
                    held = p;
                }
                a = wbuf;
            }
            const int s = nn_gemm_rows(0, cv->cout, cv->run, K, a, K, 1, NULL, 0, 1, rows,
                                       cv->y + p * cv->y_ps + b * cv->run, B * cv->run, &plain);
            if (s < status) status = s;
        }
        free(wbuf);
        free(rows);
        free(ones);
    }
    return status;
}

/* Row kk of a weight gradient (the bias's, from the row of ones): for each output, the blocked
 * sums nn_gemm_rows forms there (1 * dy chained per block of 256 positions from 0, blocks and
 * chunks added in order), as plain float adds (an FMA by 1 rounds as the add). */
static void nn_wgrad_bias_row(const dl_nn_wgrad_t *w, const float *dy, float *g) {
    enum { CB = 16 }; /* outputs summed side by side: independent chains, not one long one */
    for (int64_t c0 = 0; c0 < w->cout; c0 += CB) {
        const int64_t nc = dl_min_i64(CB, w->cout - c0);
        const float *d = dy + c0 * w->dy_rs;
        float acc[CB] = {0}, part[CB];
        for (int64_t b0 = 0; b0 < w->batch; b0 += w->chunk) {
            const int64_t K = (dl_min_i64(w->batch, b0 + w->chunk) - b0) * w->run;
            for (int64_t pc = 0; pc < K; pc += DL_NN_KC) {
                const int64_t kc = dl_min_i64(DL_NN_KC, K - pc), q0 = b0 * w->run + pc;
                for (int64_t co = 0; co < nc; co++) part[co] = 0.0f;
                for (int64_t q = q0; q < q0 + kc; q++)
                    for (int64_t co = 0; co < nc; co++) part[co] += d[co * w->dy_rs + q];
                for (int64_t co = 0; co < nc; co++)
                    acc[co] = (b0 == 0 && pc == 0) ? part[co] : acc[co] + part[co];
            }
        }
        for (int64_t co = 0; co < nc; co++) g[c0 + co] = acc[co];
    }
}

/* A convolution's weight gradient without im2col (see dl.h, dl_nn_wgrad_t): items (peer, block
 * of rows) as nn_gemm; per chunk, A's rows (ci, i, j) are read in place from the padded images
 * through a row-offset table (ci batch len + i wp + j) and a column-offset table (sample and
 * position of each of the chunk's columns); the bias's row is nn_wgrad_bias_row. */
int DL_CAT(dl_nn_conv_wgrad_f32, DL_SUFFIX)(const dl_nn_wgrad_t *w, int n_threads) {
    if (w->n_peers < 0 || w->cout < 0 || w->c < 0 || w->batch < 0 || w->k < 1 || w->wp < w->k ||
        w->run < 0 || w->chunk < 1 || w->len < (w->k - 1) * w->wp + w->k - 1 + w->run ||
        w->dy_rs < w->batch * w->run || n_threads < 1)
        return DL_E_ARG;
    const int64_t P = w->n_peers, k = w->k, kk = w->c * k * k, M = kk + 1;
    const int direct = w->gw != NULL; /* into the layer's layout (gw, gb), not g */
    if (P == 0 || w->cout == 0) return DL_OK;
    if (direct && (w->gb == NULL || w->gw_rs < kk)) return DL_E_ARG;
    if (w->batch == 0 || w->run == 0) {
        for (int64_t p = 0; p < P; p++) {
            if (!direct) {
                memset(w->g + p * w->g_ps, 0, sizeof(float) * M * w->cout);
                continue;
            }
            for (int64_t o = 0; o < w->cout; o++)
                memset(w->gw + p * w->gw_ps + o * w->gw_rs, 0, sizeof(float) * kk);
            memset(w->gb + p * w->gb_ps, 0, sizeof(float) * w->cout);
        }
        return DL_OK;
    }
    int64_t *arow = (int64_t *)malloc((size_t)(kk + 1) * sizeof(int64_t));
    if (arow == NULL) return DL_E_NOMEM;
    for (int64_t ci = 0, r = 0; ci < w->c; ci++)
        for (int64_t i = 0; i < k; i++)
            for (int64_t j = 0; j < k; j++, r++) arow[r] = ci * w->batch * w->len + i * w->wp + j;
    const int64_t mb = nn_row_block(P, M, n_threads), nrb = (M + mb - 1) / mb, items = P * nrb;
    const int64_t kmax = dl_min_i64(w->chunk, w->batch) * w->run;
    const int nt = nn_threads(n_threads, items, (double)P * M * w->cout * w->batch * w->run);
    int status = DL_OK;
#pragma omp parallel num_threads(nt) reduction(min : status)
    {
        int64_t *acol = (int64_t *)malloc((size_t)kmax * sizeof(int64_t));
        float *tile = direct ? (float *)malloc((size_t)(M * w->cout) * sizeof(float)) : NULL;
        const int ok = acol != NULL && (!direct || tile != NULL);
        if (!ok) status = DL_E_NOMEM; /* every thread still meets the omp for */
#pragma omp for schedule(static)
        for (int64_t it = 0; it < items; it++) {
            if (!ok) continue;
            const int64_t p = it / nrb, m0 = (it % nrb) * mb, m1 = dl_min_i64(M, m0 + mb);
            const float *x = w->xp + p * w->xp_ps, *dy = w->dy + p * w->dy_ps;
            float *g = direct ? tile : w->g + p * w->g_ps;
            const int64_t r1 = dl_min_i64(m1, kk);
            for (int64_t b0 = 0; m0 < r1 && b0 < w->batch; b0 += w->chunk) {
                const int64_t nb = dl_min_i64(w->batch, b0 + w->chunk) - b0, K = nb * w->run;
                for (int64_t s = 0, q = 0; s < nb; s++)
                    for (int64_t t = 0; t < w->run; t++, q++) acol[q] = (b0 + s) * w->len + t;
                const nn_epi_t e = {.accumulate = b0 > 0};
                const int st = nn_gemm_rows_t(m0, r1, w->cout, K, x, 0, 0, arow, acol,
                                              dy + b0 * w->run, 1, w->dy_rs, NULL, g, w->cout, &e);
                if (st < status) status = st;
            }
            if (m1 > kk) nn_wgrad_bias_row(w, dy, g + kk * w->cout);
            if (direct) { /* the item's rows of g_p, transposed into the layer's layout */
                float *gw = w->gw + p * w->gw_ps;
                for (int64_t r = m0; r < r1; r++)
                    for (int64_t o = 0; o < w->cout; o++) gw[o * w->gw_rs + r] = g[r * w->cout + o];
                if (m1 > kk)
                    memcpy(w->gb + p * w->gb_ps, g + kk * w->cout, sizeof(float) * w->cout);
            }
        }
        free(tile);
        free(acol);
    }
    free(arow);
    return status;
}

/* ---- A convolution's input gradient without the column gradient (dl_nn_dgrad_t) ------------
 * Positions t of the padded images in blocks of 2 vectors, DL_NN_DG_CB input channels at a time
 * (each dY vector load serves them all): per kernel offset (i, j), in order, the chain over co of
 * w[co, (ci, i, j)] dY[co, t - off] (nn_gemm's column-gradient element, bit for bit) is added to
 * the block's running sums where off <= t < off + run (conv_fold's adds, in its order). dY is
 * read from a zero-padded copy of the sample's rows, so every load is in bounds; lanes outside
 * the run add +0.0 (the chain ANDed with the lane mask: a NaN from an infinite weight times a
 * padding zero never reaches the sum), which leaves a sum unchanged, as a running sum that starts
 * at +0.0 is never -0.0. */
#if DL_NN_LANES == 16
#define DL_NN_DG_CB 6
#else
#define DL_NN_DG_CB 3
#endif
DL_NN_INLINE void nn_dgrad_block(const int cb, int64_t t0, const dl_nn_dgrad_t *d, const float *w,
                                 int64_t c0, const float *dyb, int64_t dys, int64_t pre,
                                 float *out, int64_t out_rs) {
    const int L = DL_NN_LANES;
    const int64_t k = d->k, kq = k * k;
    dl_nn_vf s0[DL_NN_DG_CB], s1[DL_NN_DG_CB];
    for (int cc = 0; cc < cb; cc++) s0[cc] = s1[cc] = (dl_nn_vf){0};
    dl_nn_vi lane;
    for (int q = 0; q < L; q++) lane[q] = q;
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < k; j++) {
            const int64_t off = i * d->wp + j;
            if (t0 + 2 * L <= off || t0 >= off + d->run) continue; /* no lane in the run */
            const float *dp = dyb + pre + t0 - off;
            const float *wij = w + (c0 * kq + i * k + j);
            dl_nn_vf h0[DL_NN_DG_CB], h1[DL_NN_DG_CB];
            for (int cc = 0; cc < cb; cc++) h0[cc] = h1[cc] = (dl_nn_vf){0};
            const int64_t kc0 = dl_min_i64(DL_NN_KC, d->cout);
            for (int64_t co = 0; co < kc0; co++) { /* the first block of co: the chain itself */
                const dl_nn_vf b0 = nn_ld(dp + co * dys), b1 = nn_ld(dp + co * dys + L);
                for (int cc = 0; cc < cb; cc++) {
                    const float wv = wij[co * d->w_rs + cc * kq];
                    h0[cc] = nn_fma(h0[cc], nn_splat(wv), b0);
                    h1[cc] = nn_fma(h1[cc], nn_splat(wv), b1);
                }
            }
            for (int64_t cb0 = kc0; cb0 < d->cout; cb0 += DL_NN_KC) { /* later blocks: C += part */
                dl_nn_vf p0[DL_NN_DG_CB], p1[DL_NN_DG_CB];
                for (int cc = 0; cc < cb; cc++) p0[cc] = p1[cc] = (dl_nn_vf){0};
                for (int64_t co = cb0; co < dl_min_i64(cb0 + DL_NN_KC, d->cout); co++) {
                    const dl_nn_vf b0 = nn_ld(dp + co * dys), b1 = nn_ld(dp + co * dys + L);
                    for (int cc = 0; cc < cb; cc++) {
                        const float wv = wij[co * d->w_rs + cc * kq];
                        p0[cc] = nn_fma(p0[cc], nn_splat(wv), b0);
                        p1[cc] = nn_fma(p1[cc], nn_splat(wv), b1);
                    }
                }
                for (int cc = 0; cc < cb; cc++) h0[cc] = h0[cc] + p0[cc], h1[cc] = h1[cc] + p1[cc];
            }
            if (t0 >= off && t0 + 2 * L <= off + d->run) {
                for (int cc = 0; cc < cb; cc++) s0[cc] = s0[cc] + h0[cc], s1[cc] = s1[cc] + h1[cc];
            } else { /* lanes t with off <= t < off + run only */
                const dl_nn_vi u0 = lane + (int32_t)(t0 - off), u1 = u0 + L;
                const dl_nn_vi m0 = (u0 >= 0) & (u0 < (int32_t)d->run);
                const dl_nn_vi m1 = (u1 >= 0) & (u1 < (int32_t)d->run);
                for (int cc = 0; cc < cb; cc++) {
                    s0[cc] = s0[cc] + (dl_nn_vf)((dl_nn_vi)h0[cc] & m0);
                    s1[cc] = s1[cc] + (dl_nn_vf)((dl_nn_vi)h1[cc] & m1);
                }
            }
        }
    for (int cc = 0; cc < cb; cc++) {
        nn_st(out + cc * out_rs + t0, s0[cc]);
        nn_st(out + cc * out_rs + t0 + L, s1[cc]);
    }
}

/* See dl.h (dl_nn_dgrad_t): items (peer, sample); per item the sample's dY rows copied into a
 * zero-padded buffer, then channel blocks of DL_NN_DG_CB, position blocks of 2 vectors, into a row
 * buffer copied to dxp. */
int DL_CAT(dl_nn_conv_dgrad_f32, DL_SUFFIX)(const dl_nn_dgrad_t *d, int n_threads) {
    if (d->n_peers < 0 || d->cout < 0 || d->c < 0 || d->batch < 0 || d->k < 1 || d->wp < d->k ||
        d->run < 0 || d->len >= (1 << 30) || d->len < (d->k - 1) * d->wp + d->k - 1 + d->run ||
        d->w_rs < d->c * d->k * d->k || d->dy_rs < d->batch * d->run || n_threads < 1)
        return DL_E_ARG;
    const int64_t P = d->n_peers, B = d->batch, T = 2 * DL_NN_LANES;
    if (P == 0 || B == 0 || d->c == 0) return DL_OK;
    const int64_t tend = (d->len + T - 1) / T * T, pre = (d->k - 1) * d->wp + d->k - 1;
    const int64_t dys = pre + tend; /* a padded dY row: index t - off + pre, t < tend */
    const int64_t items = P * B;
    const int nt = nn_threads(n_threads, items,
                              (double)items * d->c * d->k * d->k * d->cout * d->run);
    int status = DL_OK;
#pragma omp parallel num_threads(nt) reduction(min : status)
    {
        float *dyb = (float *)malloc((size_t)((d->cout > 0 ? d->cout : 1) * dys) * sizeof(float));
        float *buf = (float *)malloc((size_t)(DL_NN_DG_CB * tend) * sizeof(float));
        const int ok = dyb != NULL && buf != NULL; /* every thread still meets the omp for */
        if (!ok) status = DL_E_NOMEM;
#pragma omp for schedule(static)
        for (int64_t it = 0; it < items; it++) {
            if (!ok) continue;
            const int64_t p = it / B, b = it % B;
            const float *w = d->w + p * d->w_ps, *dy = d->dy + p * d->dy_ps + b * d->run;
            for (int64_t co = 0; co < d->cout; co++) {
                float *row = dyb + co * dys;
                memset(row, 0, (size_t)pre * sizeof(float));
                memcpy(row + pre, dy + co * d->dy_rs, (size_t)d->run * sizeof(float));
                memset(row + pre + d->run, 0, (size_t)(dys - pre - d->run) * sizeof(float));
            }
            for (int64_t c0 = 0; c0 < d->c; c0 += DL_NN_DG_CB) {
                const int cb = (int)dl_min_i64(DL_NN_DG_CB, d->c - c0);
                for (int64_t t0 = 0; t0 < tend; t0 += T) {
                    switch (cb) {
#define DL_NN_DG_CASE(R)                                                                          \
    case R:                                                                                       \
        nn_dgrad_block(R, t0, d, w, c0, dyb, dys, pre, buf, tend);                                \
        break;
                        DL_NN_DG_CASE(1)
                        DL_NN_DG_CASE(2)
                        DL_NN_DG_CASE(3)
#if DL_NN_DG_CB > 3
                        DL_NN_DG_CASE(4)
                        DL_NN_DG_CASE(5)
                        DL_NN_DG_CASE(6)
#endif
#undef DL_NN_DG_CASE
                    default:
                        break;
                    }
                }
                for (int cc = 0; cc < cb; cc++)
                    memcpy(d->dxp + p * d->dxp_ps + ((c0 + cc) * B + b) * d->len, buf + cc * tend,
                           (size_t)d->len * sizeof(float));
            }
        }
        free(dyb);
        free(buf);
    }
    return status;
}
