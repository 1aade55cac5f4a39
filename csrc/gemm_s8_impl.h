/* gemm_s8_impl.h: packing and the blocked driver of the exact int8 GEMM, compiled once per layout.
 *
 * Included by gemm_s8.c (portable), gemm_s8_avx2.c and gemm_s8_avx512vnni.c after each defines
 * DL_SUFFIX, the register tile (DL_GEMM_MR rows x DL_GEMM_NR columns, k in groups of DL_GEMM_KG),
 * the packed element types dl_gemm_a_t / dl_gemm_b_t, dl_gemm_a_conv() (how an A value is stored)
 * and the microkernel dl_gemm_ukernel(). Packed B: panels of NR columns (n zero-padded to a
 * multiple of NR), each panel ceil(k / KG) groups of NR columns x KG consecutive k values, so one
 * group of one panel is what the microkernel loads per step; colsum[j] = sum_k B[k, j] (needed by
 * the VNNI kernel, which computes (A + 128) B - 128 colsum). A is packed inside each call the same
 * way in tiles of MR rows. C is cut into tasks of whole register tiles, handed to threads
 * dynamically; every element of C is one exact integer sum over all of k computed by one
 * microkernel call, so the result does not depend on the thread count or the partition.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dl.h"

#ifndef DL_SUFFIX
#error "define DL_SUFFIX before including gemm_s8_impl.h"
#endif
#define DL_CAT2(a, b) a##_##b
#define DL_CAT(a, b) DL_CAT2(a, b)

#define DL_GEMM_TASK_COLS 256 /* columns of C per task (B panels reused across its row tiles) */
#define DL_GEMM_TASK_TILES 16 /* most register-tile rows per task */

/* Packs rows t * MR .. of A (zero rows and k values past the end) into one tile of KG-groups;
 * A[i, kk] = a[i * rs + kk * cs] (rs = k, cs = 1 for a C-order A; rs = 1, cs = lda for a stored
 * transpose). */
static void gemm_pack_a(int64_t m, int64_t k, const int8_t *a, int64_t rs, int64_t cs, int64_t t,
                        dl_gemm_a_t *dst) {
    const int64_t kgn = dl_cdiv_i64(k, DL_GEMM_KG), kfull = k / DL_GEMM_KG, i0 = t * DL_GEMM_MR;
    const dl_gemm_a_t pad = dl_gemm_a_conv(0);
    for (int r = 0; r < DL_GEMM_MR; r++) {
        dl_gemm_a_t *d = dst + r * DL_GEMM_KG;
        if (i0 + r >= m) {
            for (int64_t g = 0; g < kgn; g++)
                for (int kk = 0; kk < DL_GEMM_KG; kk++) d[g * DL_GEMM_MR * DL_GEMM_KG + kk] = pad;
            continue;
        }
        const int8_t *row = a + (i0 + r) * rs;
        for (int64_t g = 0; g < kfull; g++)
            for (int kk = 0; kk < DL_GEMM_KG; kk++)
                d[g * DL_GEMM_MR * DL_GEMM_KG + kk] =
                    dl_gemm_a_conv(row[(g * DL_GEMM_KG + kk) * cs]);
        if (kfull < kgn)
            for (int kk = 0; kk < DL_GEMM_KG; kk++) {
                const int64_t kr = kfull * DL_GEMM_KG + kk;
                d[kfull * DL_GEMM_MR * DL_GEMM_KG + kk] =
                    kr < k ? dl_gemm_a_conv(row[kr * cs]) : pad;
            }
    }
}

/* Packs panel p (columns p * NR ..) of B (k, n), B[kk, j] = b[kk * rs + j * cs], and its colsum. */
static void gemm_pack_b_panel(int64_t k, int64_t n, const int8_t *b, int64_t rs, int64_t cs,
                              int64_t p, dl_gemm_b_t *dst, int32_t *colsum) {
    const int64_t kgn = dl_cdiv_i64(k, DL_GEMM_KG), j0 = p * DL_GEMM_NR;
    const int nv = (int)dl_min_i64(DL_GEMM_NR, n - j0);
    int32_t cs_[DL_GEMM_NR] = {0};
    for (int64_t g = 0; g < kgn; g++)
        for (int kk = 0; kk < DL_GEMM_KG; kk++) {
            const int64_t kr = g * DL_GEMM_KG + kk;
            const int8_t *row = kr < k ? b + kr * rs + j0 * cs : NULL;
            for (int j = 0; j < DL_GEMM_NR; j++) {
                const int8_t v = (row != NULL && j < nv) ? row[j * cs] : 0;
                dst[(g * DL_GEMM_NR + j) * DL_GEMM_KG + kk] = (dl_gemm_b_t)v;
                cs_[j] += v;
            }
        }
    memcpy(colsum + j0, cs_, sizeof cs_);
}

/* packed (dl_gemm_s8_packed_bytes) and colsum (ceil(n / NR) * NR) from B (k, n) int8, C order. */
int DL_CAT(dl_gemm_s8_pack_b, DL_SUFFIX)(int64_t k, int64_t n, const int8_t *b, uint8_t *packed,
                                          int32_t *colsum, int n_threads) {
    if (k < 0 || n < 0 || k > DL_GEMM_S8_MAX_K || n_threads < 1) return DL_E_ARG;
    const int64_t np = dl_cdiv_i64(n, DL_GEMM_NR), kgn = dl_cdiv_i64(k, DL_GEMM_KG);
    dl_gemm_b_t *pb = (dl_gemm_b_t *)packed;
#ifndef _OPENMP
    (void)n_threads;
#endif
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(n_threads) if (k * n > (1 << 16))
#endif
    for (int64_t p = 0; p < np; p++)
        gemm_pack_b_panel(k, n, b, n, 1, p, pb + p * kgn * DL_GEMM_NR * DL_GEMM_KG, colsum);
    return DL_OK;
}

/* Stores the valid mv x nv corner of a register tile: int32 as is, or dequantized. */
static inline void gemm_store(const int32_t *tile, int64_t i0, int mv, int64_t j0, int nv,
                              int64_t n, const dl_gemm_s8_out_t *o, const float *sc,
                              const float *bias) {
    if (o->c != NULL) {
        for (int r = 0; r < mv; r++)
            memcpy(o->c + (i0 + r) * n + j0, tile + r * DL_GEMM_NR, (size_t)nv * sizeof(int32_t));
        return;
    }
    for (int r = 0; r < mv; r++) {
        float *dst = o->c_f32 + (i0 + r) * n + j0;
        const int32_t *t = tile + r * DL_GEMM_NR;
        for (int j = 0; j < nv; j++) dst[j] = (float)t[j] * sc[j0 + j] + bias[j0 + j];
    }
}

/* out = A (m, k) int8 @ B (packed by the pack_b of the same layout); see dl_gemm_s8_out_t.
 * A and the outputs must not overlap. Exact for k <= DL_GEMM_S8_MAX_K (else DL_E_ARG). */
int DL_CAT(dl_gemm_s8, DL_SUFFIX)(int64_t m, int64_t k, int64_t n, const int8_t *a,
                                   const uint8_t *packed, const int32_t *colsum,
                                   const dl_gemm_s8_out_t *out, int n_threads) {
    if (m < 0 || k < 0 || n < 0 || k > DL_GEMM_S8_MAX_K || n_threads < 1 || out == NULL ||
        (out->c == NULL) == (out->c_f32 == NULL))
        return DL_E_ARG;
    if (out->c_f32 != NULL && (out->b_scale == NULL || (out->b_scale_n != 1 && out->b_scale_n != n)))
        return DL_E_ARG;
    if (m == 0 || n == 0) return DL_OK;
    const int64_t mt = dl_cdiv_i64(m, DL_GEMM_MR), np = dl_cdiv_i64(n, DL_GEMM_NR);
    const int64_t kgn = dl_cdiv_i64(k, DL_GEMM_KG);
    const int64_t a_tile = kgn * DL_GEMM_MR * DL_GEMM_KG; /* elements of one packed A tile */
    const int64_t b_panel = kgn * DL_GEMM_NR * DL_GEMM_KG;
    size_t a_bytes = (size_t)(mt * a_tile) * sizeof(dl_gemm_a_t);
    a_bytes = (a_bytes + 63) / 64 * 64 + 64;
    dl_gemm_a_t *ap = aligned_alloc(64, a_bytes);
    float *sc = NULL, *bias = NULL;
    if (out->c_f32 != NULL) {
        sc = malloc((size_t)(2 * np * DL_GEMM_NR) * sizeof(float));
        if (sc != NULL) {
            bias = sc + np * DL_GEMM_NR;
            for (int64_t j = 0; j < np * DL_GEMM_NR; j++) {
                const int in = j < n;
                sc[j] = out->a_scale * out->b_scale[out->b_scale_n == 1 ? 0 : (in ? j : 0)];
                bias[j] = (in && out->bias != NULL) ? out->bias[j] : 0.0f;
            }
        }
    }
    if (ap == NULL || (out->c_f32 != NULL && sc == NULL)) {
        free(ap);
        free(sc);
        return DL_E_NOMEM;
    }
    /* Task grid: up to DL_GEMM_TASK_COLS columns by up to DL_GEMM_TASK_TILES row tiles, with at
     * least ~8 tasks per thread so dynamic scheduling balances small problems. */
    const int64_t nb = dl_min_i64(np, dl_max_i64(1, DL_GEMM_TASK_COLS / DL_GEMM_NR));
    const int64_t n_cb = dl_cdiv_i64(np, nb);
    const int64_t mb = dl_max_i64(1, dl_min_i64(DL_GEMM_TASK_TILES, mt * n_cb / (8 * n_threads)));
    const int64_t n_rb = dl_cdiv_i64(mt, mb), n_tasks = n_rb * n_cb;
    const int64_t macs = m * n * (k + 1);
    const int nt = macs < (1 << 18) ? 1 : n_threads;
#ifndef _OPENMP
    (void)nt;
#endif
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
#endif
    {
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t t = 0; t < mt; t++) gemm_pack_a(m, k, a, k, 1, t, ap + t * a_tile);
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
        for (int64_t task = 0; task < n_tasks; task++) {
            int32_t tile[DL_GEMM_MR * DL_GEMM_NR] __attribute__((aligned(64)));
            const int64_t rb = task / n_cb, cb = task % n_cb;
            const int64_t t0 = rb * mb, t1 = dl_min_i64(mt, t0 + mb);
            const int64_t p0 = cb * nb, p1 = dl_min_i64(np, p0 + nb);
            for (int64_t p = p0; p < p1; p++) {
                const int64_t j0 = p * DL_GEMM_NR;
                const int nv = (int)dl_min_i64(DL_GEMM_NR, n - j0);
                const dl_gemm_b_t *bp = (const dl_gemm_b_t *)packed + p * b_panel;
                for (int64_t t = t0; t < t1; t++) {
                    const int64_t i0 = t * DL_GEMM_MR;
                    dl_gemm_ukernel(kgn, ap + t * a_tile, bp, colsum + j0, tile);
                    gemm_store(tile, i0, (int)dl_min_i64(DL_GEMM_MR, m - i0), j0, nv, n, out, sc,
                               bias);
                }
            }
        }
    }
    free(ap);
    free(sc);
    return DL_OK;
}

/* Batched over peers: for p < P, C_p (m, n) = A_p (m, k) @ B_p (k, n), each an exact int32 sum,
 * stored as int32 or dequantized with per-peer scales (see dl_gemm_s8_batch_t). Every B_p (and
 * every A_p, once when A is shared: a_ps == 0) is packed inside the call; then the (peer, row
 * block, column block) tasks are split statically between threads. Operands may be strided views
 * (row stride, peer stride) or stored transposes; C must not overlap A, B, scales or bias. */
int DL_CAT(dl_gemm_s8_batched, DL_SUFFIX)(const dl_gemm_s8_batch_t *bt, int n_threads) {
    if (bt == NULL || n_threads < 1 || bt->p < 0 || bt->m < 0 || bt->k < 0 || bt->n < 0 ||
        bt->k > DL_GEMM_S8_MAX_K || (bt->c == NULL) == (bt->c_f32 == NULL) || bt->a_ps < 0 ||
        bt->b_ps < 0 || bt->a_rs < 0 || bt->b_rs < 0 || bt->c_rs < bt->n)
        return DL_E_ARG;
    if (bt->c_f32 != NULL &&
        (bt->a_scale == NULL || bt->b_scale == NULL || (bt->b_scale_n != 1 && bt->b_scale_n != bt->n)))
        return DL_E_ARG;
    const int64_t P = bt->p, m = bt->m, k = bt->k, n = bt->n;
    if (P == 0 || m == 0 || n == 0) return DL_OK;
    const int64_t mt = dl_cdiv_i64(m, DL_GEMM_MR), np = dl_cdiv_i64(n, DL_GEMM_NR);
    const int64_t kgn = dl_cdiv_i64(k, DL_GEMM_KG), n_pad = np * DL_GEMM_NR;
    const int64_t a_tile = kgn * DL_GEMM_MR * DL_GEMM_KG, b_panel = kgn * DL_GEMM_NR * DL_GEMM_KG;
    const int64_t pa = bt->a_ps == 0 ? 1 : P; /* distinct A matrices */
    /* element strides of A[i, kk] and B[kk, j] for plain or stored-transposed operands */
    const int64_t a_rs = bt->a_trans ? 1 : bt->a_rs, a_cs = bt->a_trans ? bt->a_rs : 1;
    const int64_t b_rs = bt->b_trans ? 1 : bt->b_rs, b_cs = bt->b_trans ? bt->b_rs : 1;
    size_t a_bytes = (size_t)(pa * mt * a_tile) * sizeof(dl_gemm_a_t);
    size_t b_bytes = (size_t)(P * np * b_panel) * sizeof(dl_gemm_b_t);
    a_bytes = (a_bytes + 63) / 64 * 64 + 64;
    b_bytes = (b_bytes + 63) / 64 * 64 + 64;
    dl_gemm_a_t *ap = aligned_alloc(64, a_bytes);
    dl_gemm_b_t *bp = aligned_alloc(64, b_bytes);
    int32_t *colsum = malloc((size_t)(P * n_pad) * sizeof(int32_t));
    float *sc = NULL, *bias = NULL; /* (P, n_pad) each: a_scale[p] * b_scale[p][j], bias[p][j] */
    if (bt->c_f32 != NULL) {
        sc = malloc((size_t)(2 * P * n_pad) * sizeof(float));
        if (sc != NULL) {
            bias = sc + P * n_pad;
            for (int64_t p = 0; p < P; p++)
                for (int64_t j = 0; j < n_pad; j++) {
                    const int in = j < n;
                    const float bs = bt->b_scale[p * bt->b_scale_n + (bt->b_scale_n == 1 ? 0 : (in ? j : 0))];
                    sc[p * n_pad + j] = bt->a_scale[p] * bs;
                    bias[p * n_pad + j] = (in && bt->bias != NULL) ? bt->bias[p * n + j] : 0.0f;
                }
        }
    }
    if (ap == NULL || bp == NULL || colsum == NULL || (bt->c_f32 != NULL && sc == NULL)) {
        free(ap);
        free(bp);
        free(colsum);
        free(sc);
        return DL_E_NOMEM;
    }
    const int64_t nb = dl_min_i64(np, dl_max_i64(1, DL_GEMM_TASK_COLS / DL_GEMM_NR));
    const int64_t n_cb = dl_cdiv_i64(np, nb);
    const int64_t mb =
        dl_max_i64(1, dl_min_i64(DL_GEMM_TASK_TILES, P * mt * n_cb / (8 * (int64_t)n_threads)));
    const int64_t n_rb = dl_cdiv_i64(mt, mb), per_peer = n_rb * n_cb, n_tasks = P * per_peer;
    const int nt = P * m * n * (k + 1) < (1 << 18) ? 1 : n_threads;
#ifndef _OPENMP
    (void)nt;
#endif
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
#endif
    {
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t it = 0; it < P * np; it++) {
            const int64_t p = it / np, q = it % np;
            gemm_pack_b_panel(k, n, bt->b + p * bt->b_ps, b_rs, b_cs, q,
                              bp + (p * np + q) * b_panel, colsum + p * n_pad);
        }
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t it = 0; it < pa * mt; it++) {
            const int64_t p = it / mt, t = it % mt;
            gemm_pack_a(m, k, bt->a + p * bt->a_ps, a_rs, a_cs, t, ap + it * a_tile);
        }
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t task = 0; task < n_tasks; task++) {
            int32_t tile[DL_GEMM_MR * DL_GEMM_NR] __attribute__((aligned(64)));
            const int64_t p = task / per_peer, rb = (task % per_peer) / n_cb, cb = task % n_cb;
            const int64_t t0 = rb * mb, t1 = dl_min_i64(mt, t0 + mb);
            const int64_t p0 = cb * nb, p1 = dl_min_i64(np, p0 + nb);
            const dl_gemm_a_t *apk = ap + (bt->a_ps == 0 ? 0 : p) * mt * a_tile;
            dl_gemm_s8_out_t o = {NULL, NULL, 0.0f, NULL, 0, NULL};
            if (bt->c != NULL)
                o.c = bt->c + p * bt->c_ps;
            else
                o.c_f32 = bt->c_f32 + p * bt->c_ps;
            for (int64_t q = p0; q < p1; q++) {
                const int64_t j0 = q * DL_GEMM_NR;
                const int nv = (int)dl_min_i64(DL_GEMM_NR, n - j0);
                const dl_gemm_b_t *bq = bp + (p * np + q) * b_panel;
                for (int64_t t = t0; t < t1; t++) {
                    const int64_t i0 = t * DL_GEMM_MR;
                    dl_gemm_ukernel(kgn, apk + t * a_tile, bq, colsum + p * n_pad + j0, tile);
                    gemm_store(tile, i0, (int)dl_min_i64(DL_GEMM_MR, m - i0), j0, nv, bt->c_rs, &o,
                               sc != NULL ? sc + p * n_pad : NULL,
                               bias != NULL ? bias + p * n_pad : NULL);
                }
            }
        }
    }
    free(ap);
    free(bp);
    free(colsum);
    free(sc);
    return DL_OK;
}
