/* nn_impl.h: the float32 GEMMs of the peer-batched layers, compiled once per ISA.
 *
 * Included by nn.c (portable flags, 4-lane vectors) and nn_avx2.c (-mavx2 -mfma, 8 lanes); each
 * defines DL_SUFFIX first. One register-blocked GEMM, C = A B with any element strides for A and B
 * (so A^T and B^T need no copies), packs A in MR-row and B in NR-column panels (KC x NC blocks) and
 * runs an MR x NR microkernel of 2 * MR vector accumulators; an epilogue applied while the tile is
 * stored adds a bias, applies ReLU or a ReLU mask, or accumulates into C. On top of it:
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

#if defined(__AVX2__)
#define DL_NN_LANES 8
#else
#define DL_NN_LANES 4
#endif
typedef float dl_nn_vf __attribute__((vector_size(DL_NN_LANES * 4)));
typedef int32_t dl_nn_vi __attribute__((vector_size(DL_NN_LANES * 4)));

#define DL_NN_MR 6
#define DL_NN_NR (2 * DL_NN_LANES)
#define DL_NN_KC 256
#define DL_NN_NC 512

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

/* A panel of MR rows x kc of A (strides rs, cs) into ap[k * MR + r]; rows past m are zero. */
static void nn_pack_a(int64_t m, int64_t kc, const float *a, int64_t rs, int64_t cs, float *ap) {
    if (cs == 1 && m == DL_NN_MR) {
        for (int64_t k = 0; k < kc; k++)
            for (int r = 0; r < DL_NN_MR; r++) ap[k * DL_NN_MR + r] = a[r * rs + k];
        return;
    }
    for (int64_t k = 0; k < kc; k++) {
        int r = 0;
        for (; r < m; r++) ap[k * DL_NN_MR + r] = a[r * rs + k * cs];
        for (; r < DL_NN_MR; r++) ap[k * DL_NN_MR + r] = 0.0f;
    }
}

/* kc x nc of B (strides rs, cs) into panels of NR columns, bp[panel][k * NR + c]; zero-padded. */
static void nn_pack_b(int64_t kc, int64_t nc, const float *b, int64_t rs, int64_t cs, float *bp) {
    for (int64_t j0 = 0; j0 < nc; j0 += DL_NN_NR) {
        const int64_t w = dl_min_i64(DL_NN_NR, nc - j0);
        float *dst = bp + j0 * kc;
        if (cs == 1 && w == DL_NN_NR) {
            for (int64_t k = 0; k < kc; k++) memcpy(dst + k * DL_NN_NR, b + k * rs + j0, DL_NN_NR * 4);
        } else if (cs == 1) { /* a narrow last panel: plain loops beat memcpy calls here */
            for (int64_t k = 0; k < kc; k++) {
                const float *src = b + k * rs + j0;
                float *d = dst + k * DL_NN_NR;
                for (int64_t c = 0; c < DL_NN_NR; c++) d[c] = c < w ? src[c] : 0.0f;
            }
        } else {
            for (int64_t k = 0; k < kc; k++) {
                int64_t c = 0;
                for (; c < w; c++) dst[k * DL_NN_NR + c] = b[k * rs + (j0 + c) * cs];
                for (; c < DL_NN_NR; c++) dst[k * DL_NN_NR + c] = 0.0f;
            }
        }
    }
}

/* tile[MR][NR] = packed A panel @ packed B panel over kc. */
static inline void nn_ukernel(int64_t kc, const float *restrict ap, const float *restrict bp,
                              float *restrict tile) {
    dl_nn_vf c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0};
    dl_nn_vf c30 = {0}, c31 = {0}, c40 = {0}, c41 = {0}, c50 = {0}, c51 = {0};
    for (int64_t k = 0; k < kc; k++) {
        const dl_nn_vf b0 = nn_ld(bp), b1 = nn_ld(bp + DL_NN_LANES);
        c00 += ap[0] * b0;
        c01 += ap[0] * b1;
        c10 += ap[1] * b0;
        c11 += ap[1] * b1;
        c20 += ap[2] * b0;
        c21 += ap[2] * b1;
        c30 += ap[3] * b0;
        c31 += ap[3] * b1;
        c40 += ap[4] * b0;
        c41 += ap[4] * b1;
        c50 += ap[5] * b0;
        c51 += ap[5] * b1;
        ap += DL_NN_MR;
        bp += DL_NN_NR;
    }
    const int L = DL_NN_LANES;
    nn_st(tile + 0 * DL_NN_NR, c00), nn_st(tile + 0 * DL_NN_NR + L, c01);
    nn_st(tile + 1 * DL_NN_NR, c10), nn_st(tile + 1 * DL_NN_NR + L, c11);
    nn_st(tile + 2 * DL_NN_NR, c20), nn_st(tile + 2 * DL_NN_NR + L, c21);
    nn_st(tile + 3 * DL_NN_NR, c30), nn_st(tile + 3 * DL_NN_NR + L, c31);
    nn_st(tile + 4 * DL_NN_NR, c40), nn_st(tile + 4 * DL_NN_NR + L, c41);
    nn_st(tile + 5 * DL_NN_NR, c50), nn_st(tile + 5 * DL_NN_NR + L, c51);
}

/* As nn_ukernel, reading A unpacked from MR rows with unit column stride (row stride rs): when
 * B has few column panels, packing A would cost as much as the products. */
static inline void nn_ukernel_rows(int64_t kc, const float *restrict a, int64_t rs,
                                   const float *restrict bp, float *restrict tile) {
    const float *a0 = a, *a1 = a + rs, *a2 = a + 2 * rs, *a3 = a + 3 * rs, *a4 = a + 4 * rs,
                *a5 = a + 5 * rs;
    dl_nn_vf c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0};
    dl_nn_vf c30 = {0}, c31 = {0}, c40 = {0}, c41 = {0}, c50 = {0}, c51 = {0};
    for (int64_t k = 0; k < kc; k++) {
        const dl_nn_vf b0 = nn_ld(bp), b1 = nn_ld(bp + DL_NN_LANES);
        c00 += a0[k] * b0;
        c01 += a0[k] * b1;
        c10 += a1[k] * b0;
        c11 += a1[k] * b1;
        c20 += a2[k] * b0;
        c21 += a2[k] * b1;
        c30 += a3[k] * b0;
        c31 += a3[k] * b1;
        c40 += a4[k] * b0;
        c41 += a4[k] * b1;
        c50 += a5[k] * b0;
        c51 += a5[k] * b1;
        bp += DL_NN_NR;
    }
    const int L = DL_NN_LANES;
    nn_st(tile + 0 * DL_NN_NR, c00), nn_st(tile + 0 * DL_NN_NR + L, c01);
    nn_st(tile + 1 * DL_NN_NR, c10), nn_st(tile + 1 * DL_NN_NR + L, c11);
    nn_st(tile + 2 * DL_NN_NR, c20), nn_st(tile + 2 * DL_NN_NR + L, c21);
    nn_st(tile + 3 * DL_NN_NR, c30), nn_st(tile + 3 * DL_NN_NR + L, c31);
    nn_st(tile + 4 * DL_NN_NR, c40), nn_st(tile + 4 * DL_NN_NR + L, c41);
    nn_st(tile + 5 * DL_NN_NR, c50), nn_st(tile + 5 * DL_NN_NR + L, c51);
}

static inline float nn_epi1(float v, float old, int64_t j, const nn_epi_t *e, int acc, int last,
                            const float *mrow) {
    if (acc) v = old + v;
    if (last) {
        if (e->bias) v += e->bias[j];
        if (e->relu && v <= 0.0f) v = 0.0f;
        if (mrow && !(mrow[j] > 0.0f)) v = 0.0f;
    }
    return v;
}

static inline dl_nn_vf nn_epiv(dl_nn_vf v, const float *old, int64_t j, const nn_epi_t *e, int acc,
                               int last, const float *mrow) {
    const dl_nn_vf zero = {0};
    if (acc) v = nn_ld(old) + v;
    if (last) {
        if (e->bias) v += nn_ld(e->bias + j);
        if (e->relu) v = (dl_nn_vf)((dl_nn_vi)v & ~(dl_nn_vi)(v <= zero));
        if (mrow) v = (dl_nn_vf)((dl_nn_vi)v & (dl_nn_vi)(nn_ld(mrow + j) > zero));
    }
    return v;
}

/* Stores an m x n corner of tile into C at (i0, j0); acc: add to C; last: apply the epilogue. */
static void nn_store(const float *tile, int64_t m, int64_t n, float *c, int64_t ldc, int64_t i0,
                     int64_t j0, const nn_epi_t *e, int acc, int last) {
    for (int64_t r = 0; r < m; r++) {
        float *crow = c + (i0 + r) * ldc;
        const float *mrow = e->mask ? e->mask + (i0 + r) * e->mask_rs : NULL;
        const float *t = tile + r * DL_NN_NR;
        if (n == DL_NN_NR) {
            for (int h = 0; h < 2; h++) {
                const int64_t j = j0 + h * DL_NN_LANES;
                nn_st(crow + j, nn_epiv(nn_ld(t + h * DL_NN_LANES), crow + j, j, e, acc, last, mrow));
            }
        } else {
            for (int64_t q = 0; q < n; q++)
                crow[j0 + q] = nn_epi1(t[q], acc ? crow[j0 + q] : 0.0f, j0 + q, e, acc, last, mrow);
        }
    }
}

/* Stores an m x n corner of tile TRANSPOSED into C at (j0, i0) (tile row r is C column i0 + r):
 * the epilogue's bias is indexed by C's column, its mask by C's position. */
static void nn_store_t(const float *tile, int64_t m, int64_t n, float *c, int64_t ldc, int64_t i0,
                       int64_t j0, const nn_epi_t *e, int acc, int last) {
    for (int64_t q = 0; q < n; q++) {
        float *crow = c + (j0 + q) * ldc;
        const float *mrow = e->mask ? e->mask + (j0 + q) * e->mask_rs : NULL;
        for (int64_t r = 0; r < m; r++)
            crow[i0 + r] = nn_epi1(tile[r * DL_NN_NR + q], acc ? crow[i0 + r] : 0.0f, i0 + r, e, acc,
                                   last, mrow);
    }
}

/* Rows [m0, m1) of C (ldc) (+)= A B, A m x k (strides ars, acs), B k x n (brs, bcs), C's rows
 * contiguous; trans: compute C^T = B^T A^T with the tiles stored transposed (for n < NR, where
 * C's narrow rows would waste most of each tile, when A is column-major, e.g. X^T in dW). Returns DL_E_NOMEM if the packing buffer
 * cannot grow. */
static int nn_gemm_rows_impl(int64_t m0, int64_t m1, int64_t n, int64_t k, const float *a, int64_t ars,
                        int64_t acs, const float *b, int64_t brs, int64_t bcs, float *c,
                        int64_t ldc, const nn_epi_t *e, int trans) {
    const int64_t kcmax = dl_min_i64(DL_NN_KC, k);
    const int64_t ncmax = dl_min_i64(DL_NN_NC, (n + DL_NN_NR - 1) / DL_NN_NR * DL_NN_NR);
    float *buf = nn_scratch((size_t)(kcmax * ncmax + kcmax * DL_NN_MR + DL_NN_MR * DL_NN_NR));
    if (buf == NULL) return DL_E_NOMEM;
    float *bp = buf, *ap = buf + kcmax * ncmax, *tile = ap + kcmax * DL_NN_MR;
    if (k == 0) { /* C = 0 (+ epilogue) */
        memset(tile, 0, sizeof(float) * DL_NN_MR * DL_NN_NR);
        for (int64_t i = m0; i < m1; i += DL_NN_MR)
            for (int64_t j = 0; j < n; j += DL_NN_NR)
                nn_store(tile, dl_min_i64(DL_NN_MR, m1 - i), dl_min_i64(DL_NN_NR, n - j), c, ldc, i,
                         j, e, e->accumulate, 1);
        return DL_OK;
    }
    for (int64_t jc = 0; jc < n; jc += DL_NN_NC) {
        const int64_t nc = dl_min_i64(DL_NN_NC, n - jc);
        for (int64_t pc = 0; pc < k; pc += DL_NN_KC) {
            const int64_t kc = dl_min_i64(DL_NN_KC, k - pc);
            const int acc = e->accumulate || pc > 0, last = pc + kc == k;
            nn_pack_b(kc, nc, b + pc * brs + jc * bcs, brs, bcs, bp);
            for (int64_t i = m0; i < m1; i += DL_NN_MR) {
                const int64_t mr = dl_min_i64(DL_NN_MR, m1 - i);
                /* row-major A under few column panels: read in place (same sums, same order) */
                const int direct = acs == 1 && mr == DL_NN_MR && nc <= 4 * DL_NN_NR;
                if (!direct) nn_pack_a(mr, kc, a + i * ars + pc * acs, ars, acs, ap);
                for (int64_t j = 0; j < nc; j += DL_NN_NR) {
                    if (direct)
                        nn_ukernel_rows(kc, a + i * ars + pc, ars, bp + j * kc, tile);
                    else
                        nn_ukernel(kc, ap, bp + j * kc, tile);
                    if (trans)
                        nn_store_t(tile, mr, dl_min_i64(DL_NN_NR, nc - j), c, ldc, i, jc + j, e,
                                   acc, last);
                    else
                        nn_store(tile, mr, dl_min_i64(DL_NN_NR, nc - j), c, ldc, i, jc + j, e, acc,
                                 last);
                }
            }
        }
    }
    return DL_OK;
}

static int nn_gemm_rows(int64_t m0, int64_t m1, int64_t n, int64_t k, const float *a, int64_t ars,
                        int64_t acs, const float *b, int64_t brs, int64_t bcs, float *c,
                        int64_t ldc, const nn_epi_t *e) {
    /* transposed only where its packing stays contiguous: B^T's rows are A's columns (ars == 1) */
    if (k == 0 || n >= DL_NN_NR || m1 - m0 <= n || ars != 1)
        return nn_gemm_rows_impl(m0, m1, n, k, a, ars, acs, b, brs, bcs, c, ldc, e, 0);
    /* C[m0:m1]^T (n x (m1 - m0)) = B^T A[m0:m1]^T; the tile's (row, column) is C's (column, row) */
    nn_epi_t et = *e;
    if (et.mask) et.mask += m0 * et.mask_rs;
    return nn_gemm_rows_impl(0, n, m1 - m0, k, b, bcs, brs, a + m0 * ars, acs, ars, c + m0 * ldc,
                             ldc, &et, 1);
}

/* Work items: (peer, block of rows). Whole peers when there are at least as many peers as
 * threads, else each peer's rows are split into MR-aligned blocks (the split never changes a
 * result, only who computes it). */
static int64_t nn_row_block(int64_t n_peers, int64_t m, int n_threads) {
    if (n_peers >= n_threads || m <= DL_NN_MR) return dl_max_i64(m, 1);
    const int64_t per = (m * n_peers + 2 * n_threads - 1) / (2 * n_threads);
    return dl_max_i64(DL_NN_MR, (per + DL_NN_MR - 1) / DL_NN_MR * DL_NN_MR);
}

/* Small work on one thread: below ~2^22 flops (about 0.1 ms on one core) a thread team costs more
 * than it saves, and far more when the machine is oversubscribed (a barrier then waits for a
 * descheduled thread). */
static int nn_threads(int n_threads, int64_t items, double flops) {
    if (flops < (double)(1 << 22)) return 1;
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
                                   g->b + p * g->b_ps, g->b_rs, g->b_cs, g->c + p * g->c_ps,
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
                                   d->w + p * d->w_ps, d->n_out, 1, d->y + p * d->y_ps, d->y_rs,
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
    const int nt = nn_threads(n_threads, P, (double)P * B * I * O * (d->dx ? 2 : 1));
    int status = DL_OK;
#pragma omp parallel for schedule(static) num_threads(nt) reduction(min : status)
    for (int64_t p = 0; p < P; p++) {
        const float *x = d->x + p * d->x_ps, *dy = d->dy + p * d->dy_ps;
        float *gb = d->gb + p * d->gb_ps;
        /* db = sum over the batch, in batch order */
        if (B == 0) {
            memset(gb, 0, sizeof(float) * (size_t)O);
        } else {
            memcpy(gb, dy, sizeof(float) * (size_t)O);
            for (int64_t b = 1; b < B; b++) {
                const float *row = dy + b * d->dy_rs;
                for (int64_t o = 0; o < O; o++) gb[o] += row[o];
            }
        }
        const nn_epi_t plain = {0};
        /* dW (I x O) = X^T (I x B) dY (B x O) */
        int s = nn_gemm_rows(0, I, O, B, x, 1, d->x_rs, dy, d->dy_rs, 1, d->gw + p * d->gw_ps, O,
                             &plain);
        if (s == DL_OK && d->dx != NULL) {
            /* dX (B x I) = dY (B x O) W^T (O x I), masked */
            const nn_epi_t em = {.mask = d->mask ? d->mask + p * d->m_ps : NULL,
                                 .mask_rs = d->m_rs};
            s = nn_gemm_rows(0, B, I, O, dy, d->dy_rs, 1, d->w + p * d->w_ps, 1, O,
                             d->dx + p * d->dx_ps, d->dx_rs, &em);
        }
        if (s < status) status = s;
    }
    return status;
}
