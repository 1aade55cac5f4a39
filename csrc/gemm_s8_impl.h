/* gemm_s8_impl.h: packing and the blocked driver of the exact int8 GEMM, compiled once per layout.
 *
 * Included by gemm_s8.c (portable), gemm_s8_avx2.c, gemm_s8_avx512vnni.c and gemm_s8_amx.c after
 * each defines DL_SUFFIX (and optionally DL_GEMM_HAVE_PACK_B_ROWS with dl_gemm_pack_b_rows(), a
 * SIMD packing of the full groups of a row-major B panel, and DL_GEMM_HAVE_PACK_B_COLS with
 * dl_gemm_pack_b_cols(), the same from a stored transpose), the register tile (DL_GEMM_MR rows x
 * DL_GEMM_NR columns, k in groups of DL_GEMM_KG), the packed element types dl_gemm_a_t /
 * dl_gemm_b_t, dl_gemm_a_conv() (how an A value is stored) and the microkernel dl_gemm_ukernel()
 * (optionally DL_GEMM_HAVE_UKERNEL_ROWS with dl_gemm_ukernel_rows(), the first mr rows only).
 * Packed B: panels of NR columns (n zero-padded to a multiple of NR), each panel ceil(k / KG)
 * groups of NR columns x KG consecutive k values, so one group of one panel is what the microkernel
 * loads per step; colsum[j] = sum_k B[k, j] (needed by the VNNI kernel, which computes (A + 128) B
 * - 128 colsum). A is packed inside each call in tiles of MR rows, groups of DL_GEMM_AKG (default
 * KG) k values. C is cut into tasks
 * of whole register tiles, handed to threads dynamically; every element of C is one exact integer
 * sum over all of k computed by one microkernel call, so the result does not depend on the thread
 * count or the partition. The fused int8 dense layer (dl_gemm_s8_dense_forward/backward) instead
 * gives each peer to one thread, which quantizes, packs into its own buffers, multiplies and
 * dequantizes that peer's three products (whole row tiles through dl_gemm_ukernel_epi() when the
 * ISA file defines DL_GEMM_HAVE_UKERNEL_EPI: the epilogue fused, A packed or read in place); so do
 * Conv2d's int8 products on padded codes (dl_gemm_s8_conv_fwd/_wgrad/_dgrad, at the end; an ISA
 * file that routes them to another build defines DL_GEMM_NO_CONV, and one with masked vectors
 * DL_GEMM_HAVE_COPY_LE64 with gemm_copy_le64() for their im2col gathers).
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

/* Hooks with defaults: k values per group of a packed A tile (an ISA file whose A tiles are read
 * as rows of many consecutive k values sets it larger; k is zero-padded to a multiple of it), and
 * the per-thread set-up and tear-down around every use of the microkernel (AMX: load and release
 * the tile configuration, which is per thread). */
#ifndef DL_GEMM_AKG
#define DL_GEMM_AKG DL_GEMM_KG
#endif
/* What k must be a multiple of for dl_gemm_ukernel_epi() to read A in place (AMX: a k block). */
#ifndef DL_GEMM_EPI_KALIGN
#define DL_GEMM_EPI_KALIGN DL_GEMM_KG
#endif
#ifndef DL_GEMM_THREAD_BEGIN
#define DL_GEMM_THREAD_BEGIN() ((void)0)
#define DL_GEMM_THREAD_END() ((void)0)
#endif
/* Register tiles of consecutive rows one microkernel call computes against one B panel in the
 * drivers of gemm_s8 and the batched GEMM (AMX: B stays in L1 across them); with more than one
 * the ISA file defines dl_gemm_ukernel_multi(nt, kgn, ap, a_tile, bp, colsum, tiles), tile u at
 * tiles + u * MR * NR from the A tile at ap + u * a_tile. DL_GEMM_HAVE_UKERNEL_STORE: the ISA
 * file's dl_gemm_ukernel_store() may compute and store such a call itself (returning 1), e.g.
 * with stores that overlap its multiplies. */
#ifndef DL_GEMM_UK_TILES
#define DL_GEMM_UK_TILES 1
#define dl_gemm_ukernel_multi(nt, kgn, ap, a_tile, bp, colsum, tiles)                             \
    ((void)(nt), (void)(a_tile), dl_gemm_ukernel((kgn), (ap), (bp), (colsum), (tiles)))
#endif
/* Elements of one packed A tile (MR rows, k zero-padded to a multiple of DL_GEMM_AKG). */
#define DL_GEMM_A_TILE(k) (dl_cdiv_i64((k), DL_GEMM_AKG) * DL_GEMM_MR * DL_GEMM_AKG)

#define DL_GEMM_TASK_COLS 256 /* columns of C per task (B panels reused across its row tiles) */
#define DL_GEMM_TASK_TILES 16 /* most register-tile rows per task */
#define DL_GEMM_TASKS_PER_THREAD 8 /* for dynamic scheduling to balance (4: 7% slower at 2) */

/* The task grid of one GEMM, *mb row tiles by *nb column panels per task: about
 * DL_GEMM_TASKS_PER_THREAD tasks per thread, each as square as the tiles allow, within
 * DL_GEMM_TASK_TILES x DL_GEMM_TASK_COLS. A task of R rows and C columns reads k (R + C) bytes of
 * packed A and B for R C k multiply-adds, so square tasks read the least. (Until 27 Nov 2026 the
 * columns were fixed at 256 and only the rows cut to give 8 tasks per thread: at 16 threads one
 * 32-row AMX tile per task, which read B from L3 eight times as often as at 2 threads, and the
 * 1024^3 GEMM ran slower on 16 cores of the lent Xeon than on 2. Up to 4 threads the grid is the
 * old one for 1024^3; at 16, 64 x 128 AMX tasks instead of 32 x 256.) Any grid gives the same
 * bits. */
static void gemm_task_grid(int64_t mt, int64_t np, int n_threads, int64_t *mb, int64_t *nb) {
    const int64_t tasks = DL_GEMM_TASKS_PER_THREAD * (int64_t)n_threads;
    const int64_t area = dl_max_i64(1, mt * DL_GEMM_MR * np * DL_GEMM_NR / tasks); /* C per task */
    int64_t lo = 1, hi = 1 << 20; /* side = floor(sqrt(area)) by bisection */
    while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (mid * mid <= area) lo = mid;
        else hi = mid - 1;
    }
    *nb = dl_max_i64(1, dl_min_i64(dl_min_i64(np, DL_GEMM_TASK_COLS / DL_GEMM_NR),
                                   dl_cdiv_i64(lo, DL_GEMM_NR)));
    *mb = dl_max_i64(1, dl_min_i64(dl_min_i64(mt, DL_GEMM_TASK_TILES),
                                   dl_cdiv_i64(area / (*nb * DL_GEMM_NR), DL_GEMM_MR)));
}

/* Packs rows t * MR .. of A (zero rows and k values past the end) into one tile of AKG-groups;
 * A[i, kk] = a[i * rs + kk * cs] (rs = k, cs = 1 for a C-order A; rs = 1, cs = lda for a stored
 * transpose). Whole groups of a whole tile take loops of constant trip counts (a stored transpose
 * read along its contiguous rows); the rest copies the valid values of each row, then pads. */
static void gemm_pack_a(int64_t m, int64_t k, const int8_t *a, int64_t rs, int64_t cs, int64_t t,
                        dl_gemm_a_t *dst) {
    const int64_t kgn = dl_cdiv_i64(k, DL_GEMM_AKG), i0 = t * DL_GEMM_MR;
    const int mv = (int)dl_min_i64(DL_GEMM_MR, m - i0);
    const dl_gemm_a_t pad = dl_gemm_a_conv(0);
    const int8_t *a0 = a + i0 * rs;
    for (int64_t g = 0; g < kgn; g++) {
        dl_gemm_a_t *d = dst + g * DL_GEMM_MR * DL_GEMM_AKG;
        const int8_t *ag = a0 + g * DL_GEMM_AKG * cs;
        const int kv = (int)dl_min_i64(DL_GEMM_AKG, k - g * DL_GEMM_AKG);
        if (kv == DL_GEMM_AKG && mv == DL_GEMM_MR && cs == 1) {
            for (int r = 0; r < DL_GEMM_MR; r++)
                for (int kk = 0; kk < DL_GEMM_AKG; kk++)
                    d[r * DL_GEMM_AKG + kk] = dl_gemm_a_conv(ag[r * rs + kk]);
        } else if (kv == DL_GEMM_AKG && mv == DL_GEMM_MR && rs == 1) {
            for (int kk = 0; kk < DL_GEMM_AKG; kk++)
                for (int r = 0; r < DL_GEMM_MR; r++)
                    d[r * DL_GEMM_AKG + kk] = dl_gemm_a_conv(ag[kk * cs + r]);
        } else {
            for (int r = 0; r < mv; r++) {
                const int8_t *row = ag + r * rs;
                dl_gemm_a_t *dr = d + r * DL_GEMM_AKG;
                for (int kk = 0; kk < kv; kk++) dr[kk] = dl_gemm_a_conv(row[kk * cs]);
                for (int kk = kv; kk < DL_GEMM_AKG; kk++) dr[kk] = pad;
            }
            for (int r = mv; r < DL_GEMM_MR; r++)
                for (int kk = 0; kk < DL_GEMM_AKG; kk++) d[r * DL_GEMM_AKG + kk] = pad;
        }
    }
}

/* Packs panel p (columns p * NR ..) of B (k, n), B[kk, j] = b[kk * rs + j * cs], and its colsum.
 * Full panels of a row-major B (cs == 1) or of a stored transpose (rs == 1) take loops without
 * bounds tests that GCC vectorizes; the rest (edge panel, last group) the general loop. */
static void gemm_pack_b_panel(int64_t k, int64_t n, const int8_t *b, int64_t rs, int64_t cs,
                              int64_t p, dl_gemm_b_t *dst, int32_t *colsum) {
    const int64_t kgn = dl_cdiv_i64(k, DL_GEMM_KG), kfull = k / DL_GEMM_KG, j0 = p * DL_GEMM_NR;
    const int nv = (int)dl_min_i64(DL_GEMM_NR, n - j0);
    int32_t cs_[DL_GEMM_NR] = {0};
    int64_t g = 0;
#ifdef DL_GEMM_HAVE_PACK_B_ROWS
    if (nv < DL_GEMM_NR && cs == 1) { /* edge panel: rows copied zero-padded, then SIMD-packed */
        int8_t tmp[64 * DL_GEMM_KG * DL_GEMM_NR];
        memset(tmp, 0, sizeof tmp);
        for (; g < kfull; g += 64) {
            const int64_t ng = dl_min_i64(64, kfull - g);
            for (int64_t kk = 0; kk < ng * DL_GEMM_KG; kk++)
                memcpy(tmp + kk * DL_GEMM_NR, b + (g * DL_GEMM_KG + kk) * rs + j0, (size_t)nv);
            dl_gemm_pack_b_rows(ng, tmp, DL_GEMM_NR, dst + g * DL_GEMM_NR * DL_GEMM_KG, cs_);
        }
        g = kfull;
    }
#endif
    if (nv == DL_GEMM_NR && cs == 1) {
#ifdef DL_GEMM_HAVE_PACK_B_ROWS /* the ISA file's packing of whole groups */
        dl_gemm_pack_b_rows(kfull, b + j0, rs, dst, cs_);
        g = kfull;
#endif
        for (; g < kfull; g++) {
            const int8_t *r0 = b + g * DL_GEMM_KG * rs + j0;
            dl_gemm_b_t *d = dst + g * DL_GEMM_NR * DL_GEMM_KG;
            for (int j = 0; j < DL_GEMM_NR; j++)
                for (int kk = 0; kk < DL_GEMM_KG; kk++) {
                    const int8_t v = r0[kk * rs + j];
                    d[j * DL_GEMM_KG + kk] = (dl_gemm_b_t)v;
                    cs_[j] += v;
                }
        }
    } else if (rs == 1) { /* stored transpose (any panel): column j's k values are one run; in
                           * blocks of 16 groups (4 KiB of the panel, kept in L1) every column's
                           * run is read in order and its KG-groups written down the panel */
#ifdef DL_GEMM_HAVE_PACK_B_COLS /* the ISA file's packing of whole groups of a full panel */
        if (nv == DL_GEMM_NR && cs <= INT32_MAX / DL_GEMM_NR) {
            dl_gemm_pack_b_cols(kfull, b + j0 * cs, cs, dst, cs_);
            g = kfull;
        }
#endif
        if (g < kfull) {
            for (int j = 0; j < nv; j++) {
                const int8_t *src = b + (j0 + j) * cs;
                int32_t sum = 0;
                for (int64_t kr = 0; kr < kfull * DL_GEMM_KG; kr++) sum += src[kr];
                cs_[j] = sum;
            }
            for (int64_t g0 = 0; g0 < kfull; g0 += 16) {
                const int64_t g1 = dl_min_i64(kfull, g0 + 16);
                for (int j = 0; j < nv; j++) {
                    const int8_t *src = b + (j0 + j) * cs;
                    dl_gemm_b_t *d = dst + j * DL_GEMM_KG;
                    for (int64_t gg = g0; gg < g1; gg++) {
                        if (sizeof(dl_gemm_b_t) == 1) /* int8 layouts: one word move per group */
                            memcpy(d + gg * DL_GEMM_NR * DL_GEMM_KG, src + gg * DL_GEMM_KG,
                                   DL_GEMM_KG);
                        else
                            for (int kk = 0; kk < DL_GEMM_KG; kk++)
                                d[gg * DL_GEMM_NR * DL_GEMM_KG + kk] =
                                    (dl_gemm_b_t)src[gg * DL_GEMM_KG + kk];
                    }
                }
                if (nv < DL_GEMM_NR)
                    for (int64_t gg = g0; gg < g1; gg++)
                        memset(dst + (gg * DL_GEMM_NR + nv) * DL_GEMM_KG, 0,
                               (size_t)((DL_GEMM_NR - nv) * DL_GEMM_KG) * sizeof(dl_gemm_b_t));
            }
            g = kfull;
        }
    }
    for (; g < kgn; g++)
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
    const int64_t a_tile = DL_GEMM_A_TILE(k); /* elements of one packed A tile */
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
    const int64_t macs = m * n * (k + 1);
    const int nt = macs < (1 << 18) ? 1 : n_threads;
    int64_t mb, nb;
    gemm_task_grid(mt, np, nt, &mb, &nb);
    const int64_t n_cb = dl_cdiv_i64(np, nb), n_rb = dl_cdiv_i64(mt, mb), n_tasks = n_rb * n_cb;
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
        DL_GEMM_THREAD_BEGIN();
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
        for (int64_t task = 0; task < n_tasks; task++) {
            int32_t tile[DL_GEMM_UK_TILES * DL_GEMM_MR * DL_GEMM_NR] __attribute__((aligned(64)));
            const int64_t rb = task / n_cb, cb = task % n_cb;
            const int64_t t0 = rb * mb, t1 = dl_min_i64(mt, t0 + mb);
            const int64_t p0 = cb * nb, p1 = dl_min_i64(np, p0 + nb);
            for (int64_t p = p0; p < p1; p++) {
                const int64_t j0 = p * DL_GEMM_NR;
                const int nv = (int)dl_min_i64(DL_GEMM_NR, n - j0);
                const dl_gemm_b_t *bp = (const dl_gemm_b_t *)packed + p * b_panel;
                for (int64_t t = t0; t < t1; t += DL_GEMM_UK_TILES) {
                    const int nt = (int)dl_min_i64(DL_GEMM_UK_TILES, t1 - t);
#ifdef DL_GEMM_HAVE_UKERNEL_STORE
                    if (dl_gemm_ukernel_store(nt, kgn, ap + t * a_tile, a_tile, bp,
                                              t * DL_GEMM_MR, m, j0, nv, n, out, sc, bias, tile))
                        continue;
#endif
                    dl_gemm_ukernel_multi(nt, kgn, ap + t * a_tile, a_tile, bp, colsum + j0, tile);
                    for (int u = 0; u < nt; u++) {
                        const int64_t i0 = (t + u) * DL_GEMM_MR;
                        gemm_store(tile + u * DL_GEMM_MR * DL_GEMM_NR, i0,
                                   (int)dl_min_i64(DL_GEMM_MR, m - i0), j0, nv, n, out, sc, bias);
                    }
                }
            }
        }
        DL_GEMM_THREAD_END();
    }
    free(ap);
    free(sc);
    return DL_OK;
}

/* Batched over peers: for p < P, C_p (m, n) = A_p (m, k) @ B_p (k, n), each an exact int32 sum,
 * stored as int32 or dequantized with per-peer scales (see dl_gemm_s8_batch_t). Every B_p and
 * A_p (once when shared by every peer: peer stride 0) is packed inside the call; then the
 * (peer, row block, column block) tasks are split statically between threads. Operands may be
 * strided views (row stride, peer stride) or stored transposes; C must not overlap A, B, scales or
 * bias. */
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
    const int64_t a_tile = DL_GEMM_A_TILE(k), b_panel = kgn * DL_GEMM_NR * DL_GEMM_KG;
    const int64_t pa = bt->a_ps == 0 ? 1 : P; /* distinct A matrices */
    const int64_t pb = bt->b_ps == 0 ? 1 : P; /* distinct B matrices (a shared B is packed once) */
    /* element strides of A[i, kk] and B[kk, j] for plain or stored-transposed operands */
    const int64_t a_rs = bt->a_trans ? 1 : bt->a_rs, a_cs = bt->a_trans ? bt->a_rs : 1;
    const int64_t b_rs = bt->b_trans ? 1 : bt->b_rs, b_cs = bt->b_trans ? bt->b_rs : 1;
    size_t a_bytes = (size_t)(pa * mt * a_tile) * sizeof(dl_gemm_a_t);
    size_t b_bytes = (size_t)(pb * np * b_panel) * sizeof(dl_gemm_b_t);
    a_bytes = (a_bytes + 63) / 64 * 64 + 64;
    b_bytes = (b_bytes + 63) / 64 * 64 + 64;
    dl_gemm_a_t *ap = aligned_alloc(64, a_bytes);
    dl_gemm_b_t *bp = aligned_alloc(64, b_bytes);
    int32_t *colsum = malloc((size_t)(pb * n_pad) * sizeof(int32_t));
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
        for (int64_t it = 0; it < pb * np; it++) {
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
        DL_GEMM_THREAD_BEGIN();
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t task = 0; task < n_tasks; task++) {
            int32_t tile[DL_GEMM_UK_TILES * DL_GEMM_MR * DL_GEMM_NR] __attribute__((aligned(64)));
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
                const int64_t pq = bt->b_ps == 0 ? 0 : p;
                const dl_gemm_b_t *bq = bp + (pq * np + q) * b_panel;
                for (int64_t t = t0; t < t1; t += DL_GEMM_UK_TILES) {
                    const int nt = (int)dl_min_i64(DL_GEMM_UK_TILES, t1 - t);
#ifdef DL_GEMM_HAVE_UKERNEL_STORE
                    if (dl_gemm_ukernel_store(nt, kgn, apk + t * a_tile, a_tile, bq, t * DL_GEMM_MR,
                                              m, j0, nv, bt->c_rs, &o,
                                              sc != NULL ? sc + p * n_pad : NULL,
                                              bias != NULL ? bias + p * n_pad : NULL, tile))
                        continue;
#endif
                    dl_gemm_ukernel_multi(nt, kgn, apk + t * a_tile, a_tile, bq,
                                          colsum + pq * n_pad + j0, tile);
                    for (int u = 0; u < nt; u++) {
                        const int64_t i0 = (t + u) * DL_GEMM_MR;
                        gemm_store(tile + u * DL_GEMM_MR * DL_GEMM_NR, i0,
                                   (int)dl_min_i64(DL_GEMM_MR, m - i0), j0, nv, bt->c_rs, &o,
                                   sc != NULL ? sc + p * n_pad : NULL,
                                   bias != NULL ? bias + p * n_pad : NULL);
                    }
                }
            }
        }
        DL_GEMM_THREAD_END();
    }
    free(ap);
    free(bp);
    free(colsum);
    free(sc);
    return DL_OK;
}

/* ---- fused int8 dense layer (see dl_gemm_s8_dense_t) -------------------------------------- */

/* One thread's buffers for a per-peer kernel (the fused dense layer, Conv2d's int8 products):
 * packed A tiles and B panels, a byte buffer (a gathered im2col block, dY's codes), row offsets,
 * column sums, int32 sums and a float row buffer (NULL where a kernel asks for none). */
typedef struct {
    dl_gemm_a_t *ap;
    dl_gemm_b_t *bp;
    int8_t *blk;
    int64_t *roff;
    int32_t *colsum, *acc;
    float *f;
} DL_CAT(gemm_ws, DL_SUFFIX);
#define gemm_ws_t DL_CAT(gemm_ws, DL_SUFFIX)

/* The element counts of gemm_ws_t's buffers (0: none). */
typedef struct {
    int64_t na, nb, nblk, nroff, ncs, nacc, nf;
} gemm_plan_t;

static void *gemm_alloc64(int64_t n, size_t size) { /* NULL for n == 0 */
    return n > 0 ? aligned_alloc(64, ((size_t)n * size + 63) / 64 * 64 + 64) : NULL;
}
/* Allocates the planned buffers; 1 when every one asked for was allocated. */
static int gemm_ws_init(gemm_ws_t *w, const gemm_plan_t *pl) {
    w->ap = gemm_alloc64(pl->na, sizeof(dl_gemm_a_t));
    w->bp = gemm_alloc64(pl->nb, sizeof(dl_gemm_b_t));
    w->blk = gemm_alloc64(pl->nblk, 1);
    w->roff = gemm_alloc64(pl->nroff, sizeof(int64_t));
    w->colsum = gemm_alloc64(pl->ncs, sizeof(int32_t));
    w->acc = gemm_alloc64(pl->nacc, sizeof(int32_t));
    w->f = gemm_alloc64(pl->nf, sizeof(float));
    return (pl->na == 0 || w->ap) && (pl->nb == 0 || w->bp) && (pl->nblk == 0 || w->blk) &&
           (pl->nroff == 0 || w->roff) && (pl->ncs == 0 || w->colsum) &&
           (pl->nacc == 0 || w->acc) && (pl->nf == 0 || w->f);
}
static void gemm_ws_free(gemm_ws_t *w) {
    free(w->ap);
    free(w->bp);
    free(w->blk);
    free(w->roff);
    free(w->colsum);
    free(w->acc);
    free(w->f);
}
typedef int (*DL_CAT(gemm_peer_fn, DL_SUFFIX))(const void *d, int64_t p, gemm_ws_t *w);

/* The smallest of peer(d, p, w) over p < P (DL_OK when every peer succeeds), peers split
 * statically between nt threads, each peer computed by one thread (so the results do not depend
 * on the count) with that thread's planned buffers; DL_E_NOMEM when a thread's buffers fail
 * (every thread still meets the omp for). */
static int gemm_run_peers(int64_t P, int nt, const gemm_plan_t *pl,
                          DL_CAT(gemm_peer_fn, DL_SUFFIX) peer, const void *d) {
    int status = DL_OK;
#ifndef _OPENMP
    (void)nt;
#endif
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) reduction(min : status)
#endif
    {
        gemm_ws_t w;
        const int ok = gemm_ws_init(&w, pl);
        if (!ok) status = DL_E_NOMEM;
        DL_GEMM_THREAD_BEGIN();
        {
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
            for (int64_t p = 0; p < P; p++) {
                const int s = ok ? peer(d, p, &w) : DL_E_NOMEM;
                if (s < status) status = s;
            }
        }
        DL_GEMM_THREAD_END();
        gemm_ws_free(&w);
    }
    return status;
}

static size_t gemm_dense_a_elems(int64_t m, int64_t k) {
    return (size_t)(dl_cdiv_i64(m, DL_GEMM_MR) * DL_GEMM_A_TILE(k));
}
static size_t gemm_dense_b_elems(int64_t k, int64_t n) {
    return (size_t)(dl_cdiv_i64(n, DL_GEMM_NR) * dl_cdiv_i64(k, DL_GEMM_KG) * DL_GEMM_NR *
                    DL_GEMM_KG);
}
static size_t gemm_max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* The buffers of one thread of the dense layer, sized for the largest of its products (bwd: the
 * backward's, and dY's codes). */
static gemm_plan_t gemm_dense_plan(int64_t B, int64_t I, int64_t O, int bwd) {
    /* forward: Y = Xq Wq, or Y^T = Wq^T Xq^T (gemm_dense_trans) */
    size_t na = gemm_max_sz(gemm_dense_a_elems(B, I), gemm_dense_a_elems(O, I));
    size_t nb = gemm_max_sz(gemm_dense_b_elems(I, O), gemm_dense_b_elems(I, B));
    if (bwd) { /* dW in either orientation (gemm_dense_trans), dX */
        na = gemm_max_sz(gemm_max_sz(gemm_dense_a_elems(I, B), gemm_dense_a_elems(O, B)),
                         gemm_dense_a_elems(B, O));
        nb = gemm_max_sz(gemm_max_sz(gemm_dense_b_elems(B, O), gemm_dense_b_elems(B, I)),
                         gemm_dense_b_elems(O, I));
    }
    const gemm_plan_t pl = {
        .na = (int64_t)na, .nb = (int64_t)nb, .nblk = bwd ? B * O : 0,
        .ncs = dl_cdiv_i64(dl_max_i64(dl_max_i64(I, O), B), DL_GEMM_NR) * DL_GEMM_NR + 1};
    return pl;
}

/* EPI float lanes (8: two SSE registers in the portable build, one ymm with AVX2; 16 in the VNNI
 * build, one zmm like the microkernel's tile stores, so a load is never half of a wider store): the
 * epilogue works on whole vectors so that its loads never wait on scalar stores. */
#ifndef DL_GEMM_EPI_LANES /* an ISA file may widen it to its register (the VNNI build: 16) */
#define DL_GEMM_EPI_LANES 8
#endif
#define EPI DL_GEMM_EPI_LANES
typedef float gemm_v8f __attribute__((vector_size(4 * EPI)));
typedef int32_t gemm_v8i __attribute__((vector_size(4 * EPI)));

/* Epilogue of one register tile row: c[0..nv) = act(float(t) * s + bv) (relu: np.maximum(v, 0);
 * mask mr (may be NULL): times (mr > 0 ? 1 : 0)). The same operations per element as the scalar
 * form (the AVX2 build contracts the multiply-add there as here). */
static inline void gemm_dense_row(const int32_t *t, int nv, gemm_v8f sv, const float *bv, int relu,
                                  const float *mr, float *c) {
    for (int h = 0; h < DL_GEMM_NR; h += EPI) {
        if (h >= nv) break;
        const int w = nv - h < EPI ? nv - h : EPI;
        gemm_v8i ti;
        gemm_v8f b, v;
        memcpy(&ti, t + h, sizeof ti);
        memcpy(&b, bv + h, sizeof b);
        v = __builtin_convertvector(ti, gemm_v8f) * sv + b;
        if (mr != NULL) {
            gemm_v8f mk = {0};
            if (w == EPI) /* constant sizes: no library memcpy calls */
                memcpy(&mk, mr + h, sizeof mk);
            else
                for (int j = 0; j < w; j++) mk[j] = mr[h + j];
            const gemm_v8i one = (mk > 0.0f) & 0x3f800000; /* bits of 1.0f or 0.0f */
            gemm_v8f f;
            memcpy(&f, &one, sizeof f);
            v *= f;
        } else if (relu) { /* !(v <= 0): v > 0 or NaN stays, as np.maximum(v, 0) */
            gemm_v8i vi;
            memcpy(&vi, &v, sizeof vi);
            vi &= ~(v <= 0.0f);
            memcpy(&v, &vi, sizeof v);
        }
        if (w == EPI)
            memcpy(c + h, &v, sizeof v);
        else
            for (int j = 0; j < w; j++) c[h + j] = v[j];
    }
}

/* c (m, n; row stride c_rs) = epilogue(float(A B) * s + bias) for
 * A[i, kk] = a[i * a_rs + kk * a_cs], B[kk, j] = b[kk * b_rs + j * b_cs]; bias NULL adds 0;
 * relu as np.maximum(v, 0); mask (row stride m_rs) multiplies by (mask > 0 ? 1 : 0). The same
 * store arithmetic as gemm_store, so results match the batched kernel's bit for bit.
 * c_trans: C^T is stored instead (element (i, j) at c[j * c_rs + i]) and bias is per row i;
 * neither relu nor mask then (callers use it to put a narrow n on the tile's rows). */
static void gemm_dense_mm(int64_t m, int64_t k, int64_t n, const int8_t *a, int64_t a_rs,
                          int64_t a_cs, const int8_t *b, int64_t b_rs, int64_t b_cs, float s,
                          const float *bias, int relu, const float *mask, int64_t m_rs, float *c,
                          int64_t c_rs, int c_trans, gemm_ws_t *wb) {
    if (m == 0 || n == 0) return;
    const int64_t mt = dl_cdiv_i64(m, DL_GEMM_MR), np = dl_cdiv_i64(n, DL_GEMM_NR);
    const int64_t kgn = dl_cdiv_i64(k, DL_GEMM_KG);
    const int64_t a_tile = DL_GEMM_A_TILE(k), b_panel = kgn * DL_GEMM_NR * DL_GEMM_KG;
#ifdef DL_GEMM_HAVE_UKERNEL_EPI /* full row tiles of a row-major A read in place (no A tile) */
    const int64_t t_direct =
        (!c_trans && a_cs == 1 && k % DL_GEMM_EPI_KALIGN == 0) ? m / DL_GEMM_MR : 0;
#else
    const int64_t t_direct = 0;
#endif
    for (int64_t t = t_direct; t < mt; t++)
        gemm_pack_a(m, k, a, a_rs, a_cs, t, wb->ap + t * a_tile);
    for (int64_t q = 0; q < np; q++)
        gemm_pack_b_panel(k, n, b, b_rs, b_cs, q, wb->bp + q * b_panel, wb->colsum);
    int32_t tile[DL_GEMM_MR * DL_GEMM_NR] __attribute__((aligned(64)));
    gemm_v8f sv;
    for (int j = 0; j < EPI; j++) sv[j] = s;
    for (int64_t q = 0; q < np; q++) {
        const int64_t j0 = q * DL_GEMM_NR;
        const int nv = (int)dl_min_i64(DL_GEMM_NR, n - j0);
        float bv[DL_GEMM_NR];
        for (int j = 0; j < DL_GEMM_NR; j++)
            bv[j] = (!c_trans && bias != NULL && j < nv) ? bias[j0 + j] : 0.0f;
        for (int64_t t = 0; t < mt; t++) {
            const int64_t i0 = t * DL_GEMM_MR;
            const int mv = (int)dl_min_i64(DL_GEMM_MR, m - i0);
#ifdef DL_GEMM_HAVE_UKERNEL_EPI /* full row tiles: the epilogue in the microkernel */
            if (!c_trans && mv == DL_GEMM_MR) {
                const float *mt0 = mask != NULL ? mask + i0 * m_rs + j0 : NULL;
                if (t < t_direct)
                    dl_gemm_ukernel_epi(kgn, a + i0 * a_rs, a_rs, 0, wb->bp + q * b_panel,
                                        wb->colsum + j0, s, bv, relu, mt0, m_rs,
                                        c + i0 * c_rs + j0, c_rs, nv);
                else
                    dl_gemm_ukernel_epi(kgn, (const int8_t *)(wb->ap + t * a_tile), 0, 1,
                                        wb->bp + q * b_panel, wb->colsum + j0, s, bv, relu, mt0,
                                        m_rs, c + i0 * c_rs + j0, c_rs, nv);
                continue;
            }
#endif
#ifdef DL_GEMM_HAVE_UKERNEL_ROWS
            if (mv < DL_GEMM_MR)
                dl_gemm_ukernel_rows(mv, kgn, wb->ap + t * a_tile, wb->bp + q * b_panel,
                                     wb->colsum + j0, tile);
            else
#endif
                dl_gemm_ukernel(kgn, wb->ap + t * a_tile, wb->bp + q * b_panel, wb->colsum + j0,
                                tile);
            if (c_trans) { /* small: scalar stores down the columns of C^T */
                for (int r = 0; r < mv; r++) {
                    const float br = bias != NULL ? bias[i0 + r] : 0.0f;
                    for (int j = 0; j < nv; j++)
                        c[(j0 + j) * c_rs + i0 + r] = (float)tile[r * DL_GEMM_NR + j] * s + br;
                }
                continue;
            }
            for (int r = 0; r < mv; r++)
                gemm_dense_row(tile + r * DL_GEMM_NR, nv, sv, bv, relu,
                               mask != NULL ? mask + (i0 + r) * m_rs + j0 : NULL,
                               c + (i0 + r) * c_rs + j0);
        }
    }
}

/* Whether C = A B (m x n) costs fewer padded tile elements computed as C^T = B^T A^T. */
static int gemm_dense_trans(int64_t m, int64_t n) {
    const int64_t plain = dl_cdiv_i64(m, DL_GEMM_MR) * DL_GEMM_MR * dl_cdiv_i64(n, DL_GEMM_NR) *
                          DL_GEMM_NR;
    const int64_t trans = dl_cdiv_i64(n, DL_GEMM_MR) * DL_GEMM_MR * dl_cdiv_i64(m, DL_GEMM_NR) *
                          DL_GEMM_NR;
    return 10 * trans < 9 * plain;
}

/* Threads for P peers of `macs` multiply-adds in all: one for small layers. */
static int gemm_dense_threads(int n_threads, int64_t P, double macs) {
    if (macs < (double)(1 << 18)) return 1;
    return (int)dl_min_i64(n_threads, P);
}

static int gemm_dense_check(const dl_gemm_s8_dense_t *d, int n_threads) {
    return d != NULL && n_threads >= 1 && d->n_peers >= 0 && d->batch >= 0 && d->n_in >= 0 &&
           d->n_out >= 0 && d->n_in <= DL_GEMM_S8_MAX_K && d->n_out <= DL_GEMM_S8_MAX_K &&
           d->batch <= DL_GEMM_S8_MAX_K;
}

/* gb[o] = sum over the batch of dy[b * rs + o], in batch order (restrict: vectorized over o). */
static void gemm_dense_bias_grad(int64_t B, int64_t O, const float *restrict dy, int64_t rs,
                                 float *restrict gb) {
    if (B == 0) {
        for (int64_t o = 0; o < O; o++) gb[o] = 0.0f;
        return;
    }
    for (int64_t o = 0; o < O; o++) gb[o] = dy[o];
    for (int64_t b = 1; b < B; b++)
        for (int64_t o = 0; o < O; o++) gb[o] += dy[b * rs + o];
}

/* Forward of the fused int8 dense layer for peer p: quantization, packing and product by one
 * thread (gemm_run_peers). */
static int DL_CAT(gemm_dense_fwd_peer, DL_SUFFIX)(const void *vd, int64_t p, gemm_ws_t *w) {
    const dl_gemm_s8_dense_t *d = vd;
    const int64_t B = d->batch, I = d->n_in, O = d->n_out;
    const int shared = d->x_ps == 0; /* x quantized once, before */
    const int8_t *xq = d->xq + (shared ? 0 : p * B * I);
    if (!shared) {
        const int s = dl_gemm_quantize_tensor_s8(B, I, d->x + p * d->x_ps, d->x_rs, 0, 0,
                                                 d->xq + p * B * I, &d->sx[p]);
        if (s != DL_OK) return s;
    }
    const float sx = d->sx[shared ? 0 : p];
    const int s = dl_gemm_quantize_tensor_s8(1, I * O, d->w + p * d->w_ps, I * O, 0, 0,
                                             d->wq + p * I * O, &d->sw[p]);
    if (s != DL_OK) return s;
    const int8_t *wq = d->wq + p * I * O;
    const float *bias = d->bias != NULL ? d->bias + p * d->b_ps : NULL;
    if (!d->relu && gemm_dense_trans(B, O)) /* Y^T = Wq^T Xq^T: narrow O */
        gemm_dense_mm(O, I, B, wq, 1, O, xq, 1, I, sx * d->sw[p], bias, 0, NULL, 0,
                      d->y + p * d->y_ps, d->y_rs, 1, w);
    else
        gemm_dense_mm(B, I, O, xq, I, 1, wq, O, 1, sx * d->sw[p], bias, d->relu, NULL, 0,
                      d->y + p * d->y_ps, d->y_rs, 0, w);
    return DL_OK;
}

/* Forward of the fused int8 dense layer; peers split statically between threads, each peer's
 * quantization, packing and product done by one thread (results independent of the count). */
int DL_CAT(dl_gemm_s8_dense_forward, DL_SUFFIX)(const dl_gemm_s8_dense_t *d, int n_threads) {
    if (!gemm_dense_check(d, n_threads) || d->x_ps < 0 || d->w_ps < 0 || d->y_rs < d->n_out ||
        d->x_rs < d->n_in)
        return DL_E_ARG;
    const int64_t P = d->n_peers, B = d->batch, I = d->n_in, O = d->n_out;
    if (P == 0) return DL_OK;
    if (d->x_ps == 0) { /* x quantized once for every peer */
        const int s = dl_gemm_quantize_tensor_s8(B, I, d->x, d->x_rs, 0, 0, d->xq, d->sx);
        if (s != DL_OK) return s;
    }
    const gemm_plan_t pl = gemm_dense_plan(B, I, O, 0);
    return gemm_run_peers(P, gemm_dense_threads(n_threads, P, (double)P * B * I * O), &pl,
                          DL_CAT(gemm_dense_fwd_peer, DL_SUFFIX), d);
}

/* Backward of the fused int8 dense layer for peer p (dY's codes in w->blk). */
static int DL_CAT(gemm_dense_bwd_peer, DL_SUFFIX)(const void *vd, int64_t p, gemm_ws_t *w) {
    const dl_gemm_s8_dense_t *d = vd;
    const int64_t B = d->batch, I = d->n_in, O = d->n_out;
    const float *dy = d->dy + p * d->dy_ps;
    gemm_dense_bias_grad(B, O, dy, d->dy_rs, d->gb + p * d->gb_ps);
    float sdy = 1.0f;
    const uint64_t key = dl_rng_key(d->seed, d->step, (uint64_t)(d->peer0 + p));
    const int s = dl_gemm_quantize_tensor_s8(B, O, dy, d->dy_rs, 1, key, w->blk, &sdy);
    if (s != DL_OK) return s;
    const int8_t *dyq = w->blk, *xq = d->xq + p * d->xq_ps;
    const float sx = d->sx[d->xq_ps == 0 ? 0 : p];
    /* dW (I x O) = Xq^T (I x B) dYq (B x O) */
    if (gemm_dense_trans(I, O)) /* dW^T = dYq^T Xq: narrow O */
        gemm_dense_mm(O, B, I, dyq, 1, O, xq, I, 1, sx * sdy, NULL, 0, NULL, 0,
                      d->gw + p * d->gw_ps, O, 1, w);
    else
        gemm_dense_mm(I, B, O, xq, 1, I, dyq, O, 1, sx * sdy, NULL, 0, NULL, 0,
                      d->gw + p * d->gw_ps, O, 0, w);
    if (d->dx != NULL) /* dX (B x I) = dYq (B x O) Wq^T (O x I), masked */
        gemm_dense_mm(B, O, I, dyq, O, 1, d->wq + p * I * O, 1, O, sdy * d->sw[p], NULL, 0,
                      d->mask != NULL ? d->mask + p * d->m_ps : NULL, d->m_rs,
                      d->dx + p * d->dx_ps, d->dx_rs, 0, w);
    return DL_OK;
}

/* Backward of the fused int8 dense layer (see dl_gemm_s8_dense_t); peers split as the forward. */
int DL_CAT(dl_gemm_s8_dense_backward, DL_SUFFIX)(const dl_gemm_s8_dense_t *d, int n_threads) {
    if (!gemm_dense_check(d, n_threads) || d->xq_ps < 0 || d->dy_rs < d->n_out ||
        (d->dx != NULL && d->dx_rs < d->n_in))
        return DL_E_ARG;
    const int64_t P = d->n_peers, B = d->batch, I = d->n_in, O = d->n_out;
    if (P == 0) return DL_OK;
    const gemm_plan_t pl = gemm_dense_plan(B, I, O, 1);
    return gemm_run_peers(P,
                          gemm_dense_threads(n_threads, P,
                                             (double)P * B * I * O * (d->dx ? 2 : 1)),
                          &pl, DL_CAT(gemm_dense_bwd_peer, DL_SUFFIX), d);
}

/* ---- Conv2d's int8 products (dl_gemm_s8_conv_fwd_t, _wgrad_t, _dgrad_t) ------------------ */
#ifndef DL_GEMM_NO_CONV /* an ISA file that routes them to another build defines it */

/* roff[kk] = c B len + i wp + j for row kk = (c, i, j) of the im2col matrix: where the row starts
 * in the padded codes (C, B, len) for sample 0. */
static void conv_roff_table(int64_t *roff, int64_t K, int64_t k, int64_t B, int64_t len,
                            int64_t wp) {
    for (int64_t kk = 0; kk < K; kk++)
        roff[kk] = kk / (k * k) * B * len + (kk / k % k) * wp + kk % k;
}

/* ---- Conv2d's int8 input gradient (see dl_gemm_s8_conv_dgrad_t) ------------------------- */

/* dst[0:n) += src[0:n), apart from the product that made src (not inlined: the compiler may not
 * fuse the two into one multiply-add, which would change the bits of the unfused col2im). */
__attribute__((noinline)) static void DL_CAT(conv_add_run, DL_SUFFIX)(float *restrict dst,
                                                                       const float *restrict src,
                                                                       int64_t n) {
    for (int64_t j = 0; j < n; j++) dst[j] += src[j];
}

/* v[0:n) = float(t[j]) * s: the GEMM's float store (gemm_store with a zero bias). */
static inline void conv_dequant_row(const int32_t *restrict t, int n, float s,
                                    float *restrict v) {
    for (int j = 0; j < n; j++) v[j] = (float)t[j] * s;
}

/* samples per group of the input gradient: short runs (small images) are grouped so that panels
 * are not mostly padding; a group's columns are the samples' runs side by side */
static int64_t conv_dgrad_group(int64_t B, int64_t run) {
    return dl_max_i64(1, dl_min_i64(B, 256 / dl_max_i64(run, 1)));
}
/* Per peer (one thread each): A = wq^T (C k k rows, k = Cout) packed once; per group of samples,
 * B = the group's dq columns packed in panels; per register-tile row block of A, every panel's
 * products dequantized into a row buffer (float(t) * s, as the GEMM's float store), then each
 * row's run of each sample added into its shifted run of dxp, rows in order (col2im's order: the
 * same adds as conv_fold's). */
static int DL_CAT(conv_dgrad_peer, DL_SUFFIX)(const void *vd, int64_t p, gemm_ws_t *w) {
    const dl_gemm_s8_conv_dgrad_t *d = vd;
    const int64_t Co = d->cout, C = d->c, B = d->batch, L = d->len, k = d->k, run = d->run;
    const int64_t K = C * k * k, gs = conv_dgrad_group(B, run);
    const int64_t mt = dl_cdiv_i64(K, DL_GEMM_MR);
    const int64_t ldv = dl_cdiv_i64(gs * run, DL_GEMM_NR) * DL_GEMM_NR;
    const int64_t kgn = dl_cdiv_i64(Co, DL_GEMM_KG), a_tile = DL_GEMM_A_TILE(Co);
    const int64_t b_panel = kgn * DL_GEMM_NR * DL_GEMM_KG;
    const float s = d->sw[p] * d->sdy[p];
    const int8_t *wq = d->wq + p * d->wq_ps; /* A[kk, o] = wq[o * K + kk] */
    for (int64_t t = 0; t < mt; t++) gemm_pack_a(K, Co, wq, 1, K, t, w->ap + t * a_tile);
    float *dx = d->dxp + p * d->dxp_ps;
    memset(dx, 0, (size_t)(C * B * L) * sizeof(float));
    int32_t tile[DL_GEMM_MR * DL_GEMM_NR] __attribute__((aligned(64)));
    for (int64_t bg = 0; bg < B; bg += gs) {
        const int64_t nb = dl_min_i64(gs, B - bg), ncols = nb * run;
        const int64_t npg = dl_cdiv_i64(ncols, DL_GEMM_NR);
        const int8_t *dqb = d->dq + p * d->dq_ps + bg * run;
        for (int64_t q = 0; q < npg; q++)
            gemm_pack_b_panel(Co, ncols, dqb, d->dq_rs, 1, q, w->bp + q * b_panel, w->colsum);
        for (int64_t t = 0; t < mt; t++) {
            const int mv = (int)dl_min_i64(DL_GEMM_MR, K - t * DL_GEMM_MR);
            for (int64_t q = 0; q < npg; q++) {
                const int64_t j0 = q * DL_GEMM_NR;
                const int nv = (int)dl_min_i64(DL_GEMM_NR, ncols - j0);
                dl_gemm_ukernel(kgn, w->ap + t * a_tile, w->bp + q * b_panel, w->colsum + j0,
                                tile);
                for (int r = 0; r < mv; r++)
                    conv_dequant_row(tile + r * DL_GEMM_NR, nv, s, w->f + r * ldv + j0);
            }
            for (int r = 0; r < mv; r++) {
                const int64_t kk = t * DL_GEMM_MR + r, c = kk / (k * k);
                const int64_t off = (kk / k % k) * d->wp + kk % k;
                for (int64_t b = bg; b < bg + nb; b++)
                    DL_CAT(conv_add_run, DL_SUFFIX)(dx + (c * B + b) * L + off,
                                                    w->f + r * ldv + (b - bg) * run, run);
            }
        }
    }
    return DL_OK;
}
int DL_CAT(dl_gemm_s8_conv_dgrad, DL_SUFFIX)(const dl_gemm_s8_conv_dgrad_t *d, int n_threads) {
    if (d == NULL || n_threads < 1 || d->n_peers < 0 || d->cout < 0 || d->c < 0 ||
        d->batch < 0 || d->k < 1 || d->wp < d->k || d->run < 0 || d->cout > DL_GEMM_S8_MAX_K ||
        d->len < (d->k - 1) * d->wp + d->k - 1 + d->run || d->dq_rs < d->batch * d->run)
        return DL_E_ARG;
    if (d->n_peers == 0) return DL_OK;
    const int64_t K = d->c * d->k * d->k, gs = conv_dgrad_group(d->batch, d->run);
    const int64_t np = dl_cdiv_i64(gs * d->run, DL_GEMM_NR), ldv = np * DL_GEMM_NR;
    const int64_t kgn = dl_cdiv_i64(d->cout, DL_GEMM_KG);
    const gemm_plan_t pl = {.na = dl_cdiv_i64(K, DL_GEMM_MR) * DL_GEMM_A_TILE(d->cout),
                            .nb = np * kgn * DL_GEMM_NR * DL_GEMM_KG, .ncs = ldv,
                            .nf = DL_GEMM_MR * ldv};
    return gemm_run_peers(d->n_peers, (int)dl_min_i64(n_threads, d->n_peers), &pl,
                          DL_CAT(conv_dgrad_peer, DL_SUFFIX), d);
}

/* ---- Conv2d's int8 forward product (see dl_gemm_s8_conv_fwd_t) ---------------------------- */

#ifndef DL_GEMM_HAVE_COPY_LE64 /* an ISA file may copy with masked vectors */
static inline void gemm_copy_le64(int8_t *d, const int8_t *s, int n) {
    if (n == 64)
        memcpy(d, s, 64);
    else
        memcpy(d, s, (size_t)n);
}
#endif

/* Rows kk < K of the im2col block of columns [j0, j0 + nv) (nv <= 64; column j is position
 * j % run of sample j / run) into blk (row stride 64): per row, one copy per sample the block
 * touches, from the padded codes xq (rows of len per (c, b); row kk of sample b starts at
 * roff[kk] + b len). */
static void conv_gather_block(const int8_t *xq, const int64_t *roff, int64_t K, int64_t len,
                              int64_t run, int64_t j0, int nv, int8_t *blk) {
    for (int64_t j = j0; j < j0 + nv;) {
        const int64_t b = j / run, t = j % run;
        const int n = (int)dl_min_i64(j0 + nv - j, run - t);
        const int8_t *src = xq + b * len + t;
        int8_t *dst = blk + (j - j0);
        for (int64_t kk = 0; kk < K; kk++)
            gemm_copy_le64(dst + kk * DL_GEMM_NR, src + roff[kk], n);
        j += n;
    }
}

/* y[0:n) += b, apart from the product that made y (see conv_add_run). */
__attribute__((noinline)) static void DL_CAT(conv_add_scalar, DL_SUFFIX)(float *restrict y,
                                                                          int64_t n, float b) {
    for (int64_t j = 0; j < n; j++) y[j] += b;
}

/* Per peer (one thread each): A = wq packed once; panels of 64 output columns (positions of one
 * or more samples; the last one partial), each gathered from the padded codes into a (C k k) x
 * 64 block (conv_gather_block) and packed; per register tile of output channels the products
 * dequantized into y's rows (float(t) * s, the GEMM's float store), then the bias added to each
 * row's piece. */
static int DL_CAT(conv_fwd_peer, DL_SUFFIX)(const void *vd, int64_t p, gemm_ws_t *w) {
    const dl_gemm_s8_conv_fwd_t *d = vd;
    const int64_t Co = d->cout, B = d->batch, run = d->run, K = d->c * d->k * d->k;
    const int64_t mt = dl_cdiv_i64(Co, DL_GEMM_MR), kgn = dl_cdiv_i64(K, DL_GEMM_KG);
    const int64_t a_tile = DL_GEMM_A_TILE(K);
    conv_roff_table(w->roff, K, d->k, B, d->len, d->wp);
    const float s = d->sw[p] * d->sx[p * d->sx_ps];
    const int8_t *wq = d->wq + p * d->wq_ps, *xq = d->xq + p * d->xq_ps;
    for (int64_t t = 0; t < mt; t++) gemm_pack_a(Co, K, wq, K, 1, t, w->ap + t * a_tile);
    float *y = d->y + p * d->y_ps;
    const float *bias = d->bias + p * d->b_ps;
    int32_t tile[DL_GEMM_MR * DL_GEMM_NR] __attribute__((aligned(64)));
    for (int64_t j0 = 0; j0 < B * run; j0 += DL_GEMM_NR) {
        const int nv = (int)dl_min_i64(DL_GEMM_NR, B * run - j0);
        conv_gather_block(xq, w->roff, K, d->len, run, j0, nv, w->blk);
        gemm_pack_b_panel(K, nv, w->blk, DL_GEMM_NR, 1, 0, w->bp, w->colsum);
        for (int64_t t = 0; t < mt; t++) {
            const int mv = (int)dl_min_i64(DL_GEMM_MR, Co - t * DL_GEMM_MR);
            dl_gemm_ukernel(kgn, w->ap + t * a_tile, w->bp, w->colsum, tile);
            for (int r = 0; r < mv; r++) {
                const int64_t o = t * DL_GEMM_MR + r;
                float *yr = y + o * d->y_rs + j0;
                conv_dequant_row(tile + r * DL_GEMM_NR, nv, s, yr);
                DL_CAT(conv_add_scalar, DL_SUFFIX)(yr, nv, bias[o]);
            }
        }
    }
    return DL_OK;
}
int DL_CAT(dl_gemm_s8_conv_fwd, DL_SUFFIX)(const dl_gemm_s8_conv_fwd_t *d, int n_threads) {
    if (d == NULL || n_threads < 1 || d->n_peers < 0 || d->cout < 0 || d->c < 0 ||
        d->batch < 0 || d->k < 1 || d->wp < d->k || d->run < 0 || d->xq_ps < 0 || d->sx_ps < 0 ||
        d->c * d->k * d->k > DL_GEMM_S8_MAX_K ||
        d->len < (d->k - 1) * d->wp + d->k - 1 + d->run || d->y_rs < d->batch * d->run)
        return DL_E_ARG;
    const int64_t K = d->c * d->k * d->k;
    if (d->n_peers == 0 || d->cout == 0 || d->batch == 0 || d->run == 0) return DL_OK;
    const gemm_plan_t pl = {
        .na = dl_cdiv_i64(d->cout, DL_GEMM_MR) * DL_GEMM_A_TILE(K),
        .nb = dl_cdiv_i64(K, DL_GEMM_KG) * DL_GEMM_NR * DL_GEMM_KG, .nblk = K * DL_GEMM_NR,
        .nroff = K, .ncs = DL_GEMM_NR};
    return gemm_run_peers(d->n_peers, (int)dl_min_i64(n_threads, d->n_peers), &pl,
                          DL_CAT(conv_fwd_peer, DL_SUFFIX), d);
}

/* ---- Conv2d's int8 weight gradient (see dl_gemm_s8_conv_wgrad_t) ------------------------- */

/* Per peer (one thread each), per chunk of samples: int32 sums acc (Cout x C k k, padded to whole
 * tiles) over blocks of <= 64 of the chunk's positions: A = the block's dq columns (packed), B =
 * the block's im2col rows gathered from the padded codes (conv_gather_block) and packed as a
 * stored transpose; the tiles' exact sums added into acc. At the chunk's end, acc
 * dequantized (float(acc) * s, the GEMM's float store) into the first chunk's gw or a buffer
 * added into gw (float32 adds, not fused with the product). */
static int DL_CAT(conv_wgrad_peer, DL_SUFFIX)(const void *vd, int64_t p, gemm_ws_t *w) {
    const dl_gemm_s8_conv_wgrad_t *d = vd;
    const int64_t Co = d->cout, B = d->batch, run = d->run, K = d->c * d->k * d->k;
    const int64_t mt = dl_cdiv_i64(Co, DL_GEMM_MR), np = dl_cdiv_i64(K, DL_GEMM_NR);
    const int64_t b_panel = dl_cdiv_i64(DL_GEMM_NR, DL_GEMM_KG) * DL_GEMM_NR * DL_GEMM_KG;
    const int64_t lda = np * DL_GEMM_NR; /* acc's row stride */
    conv_roff_table(w->roff, K, d->k, B, d->len, d->wp);
    const float s = d->sdy[p] * d->sx[p * d->sx_ps];
    const int8_t *xq = d->xq + p * d->xq_ps, *dq = d->dq + p * d->dq_ps;
    float *gw = d->gw + p * d->gw_ps;
    int32_t tile[DL_GEMM_MR * DL_GEMM_NR] __attribute__((aligned(64)));
    for (int64_t b0 = 0; b0 < B; b0 += d->chunk) {
        const int64_t b1 = dl_min_i64(B, b0 + d->chunk);
        memset(w->acc, 0, (size_t)(mt * DL_GEMM_MR * lda) * sizeof(int32_t));
        for (int64_t j0 = b0 * run; j0 < b1 * run; j0 += DL_GEMM_NR) {
            const int nv = (int)dl_min_i64(DL_GEMM_NR, b1 * run - j0);
            conv_gather_block(xq, w->roff, K, d->len, run, j0, nv, w->blk);
            /* B (nv x K): B[j, kk] = blk[kk * 64 + j], a stored transpose */
            for (int64_t q = 0; q < np; q++)
                gemm_pack_b_panel(nv, K, w->blk, 1, DL_GEMM_NR, q, w->bp + q * b_panel,
                                  w->colsum);
            const int64_t kgv = dl_cdiv_i64(nv, DL_GEMM_KG), a_tv = DL_GEMM_A_TILE(nv);
            for (int64_t t = 0; t < mt; t++) /* A (Cout x nv): the block's dq columns */
                gemm_pack_a(Co, nv, dq + j0, d->dq_rs, 1, t, w->ap + t * a_tv);
            for (int64_t t = 0; t < mt; t++)
                for (int64_t q = 0; q < np; q++) {
                    dl_gemm_ukernel(kgv, w->ap + t * a_tv, w->bp + q * b_panel,
                                    w->colsum + q * DL_GEMM_NR, tile);
                    int32_t *ar = w->acc + t * DL_GEMM_MR * lda + q * DL_GEMM_NR;
                    for (int r = 0; r < DL_GEMM_MR; r++)
                        for (int j = 0; j < DL_GEMM_NR; j++)
                            ar[r * lda + j] += tile[r * DL_GEMM_NR + j];
                }
        }
        for (int64_t o = 0; o < Co; o++) { /* the first chunk's part, or + each later one's */
            if (b0 == 0) {
                conv_dequant_row(w->acc + o * lda, (int)K, s, gw + o * K);
            } else {
                conv_dequant_row(w->acc + o * lda, (int)K, s, w->f);
                DL_CAT(conv_add_run, DL_SUFFIX)(gw + o * K, w->f, K);
            }
        }
    }
    return DL_OK;
}
int DL_CAT(dl_gemm_s8_conv_wgrad, DL_SUFFIX)(const dl_gemm_s8_conv_wgrad_t *d, int n_threads) {
    if (d == NULL || n_threads < 1 || d->n_peers < 0 || d->cout < 0 || d->c < 0 ||
        d->batch < 0 || d->k < 1 || d->wp < d->k || d->run < 0 || d->chunk < 1 ||
        d->xq_ps < 0 || d->sx_ps < 0 || d->cout > (int64_t)1 << 24 ||
        d->c * d->k * d->k > (int64_t)1 << 24 || d->chunk * d->run > DL_GEMM_S8_MAX_K ||
        d->len < (d->k - 1) * d->wp + d->k - 1 + d->run || d->dq_rs < d->batch * d->run)
        return DL_E_ARG;
    const int64_t K = d->c * d->k * d->k;
    if (d->n_peers == 0 || d->cout == 0 || K == 0) return DL_OK;
    const int64_t mt = dl_cdiv_i64(d->cout, DL_GEMM_MR), np = dl_cdiv_i64(K, DL_GEMM_NR);
    const int64_t lda = np * DL_GEMM_NR; /* a block: <= 64 positions, k = 64 at most */
    const gemm_plan_t pl = {
        .na = mt * DL_GEMM_A_TILE(DL_GEMM_NR),
        .nb = np * dl_cdiv_i64(DL_GEMM_NR, DL_GEMM_KG) * DL_GEMM_NR * DL_GEMM_KG,
        .nblk = K * DL_GEMM_NR, .nroff = K, .ncs = lda, .nacc = mt * DL_GEMM_MR * lda,
        .nf = K};
    return gemm_run_peers(d->n_peers, (int)dl_min_i64(n_threads, d->n_peers), &pl,
                          DL_CAT(conv_wgrad_peer, DL_SUFFIX), d);
}

#endif /* DL_GEMM_NO_CONV */

#undef gemm_ws_t
#undef EPI
