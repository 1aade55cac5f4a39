/* gossip_impl.h: the body of the CSR gossip kernel Y = W X, compiled once per ISA.
 *
 * Included by gossip.c (baseline flags), gossip_avx2.c and gossip_avx512.c (their own -m flags);
 * each defines DL_SUFFIX before including it, so one readable C loop nest becomes three
 * auto-vectorized builds that the dispatch table chooses between at run time.
 *
 * Two paths, chosen from W and the shape (never from the thread count):
 * - whole rows, when the rows a row-ordered sweep keeps live fit the slab budget (a ring keeps 3):
 *   tiles of DL_GOSSIP_RB rows by a column range (about 4 tiles per thread where the rows are
 *   long enough: 64 peers are one row tile) handed out dynamically; outputs of 16 MiB or more are
 *   stored non-temporally, skipping the write-allocate read of Y.
 * - packed column slabs, when neighbours are far apart (exponential, random graphs): a thread
 *   copies X[:, c0:c1] (a slab of about DL_GOSSIP_SLAB bytes, 128 columns at 1000 peers) into a
 *   private buffer laid out as sub-slabs of DL_GOSSIP_VW columns, each n_cols rows of
 *   DL_GOSSIP_SS floats (the piece and one cache line of padding), then sweeps every row of Y over
 *   one sub-slab at a time, so each element of X leaves DRAM once. A narrow sub-slab (192 KiB at
 *   1000 peers) sits in L2 and keeps the rows of small offsets (i +- 1, 2, 4, ...) in L1 between
 *   the output rows that reuse them; the padding keeps far offsets out of each other's L1 sets; the
 *   copy prefetches the rows ahead (short pieces at a stride of a whole row defeat the hardware
 *   prefetchers). When rows of Y are whole cache lines apart, slab boundaries are shifted so that
 *   every piece of Y starts on a cache line and large outputs are stored non-temporally, skipping
 *   the write-allocate read. Consecutive rows of equal degree are swept four (AVX-512) or two at a
 *   time (independent FMA chains). Slabs are handed out dynamically (200 of them at 1000 x 25600:
 *   enough for 16-64 threads, and a thread the OS deschedules does not hold the others up);
 *   a slab's output depends on its columns only.
 * Each output element is one sum over its row's CSR entries in stored order, computed with the same
 * operations whichever vector, head or tail piece it falls in, hence bit-identical for any thread
 * count. The multiply-adds are written out (dl_madd, dl_vmadd: fused in the FMA builds, a product
 * and a sum in the portable one) and the compiler contracts nothing here: left to -ffp-contract,
 * GCC 12 fused every loop of a row alike (32-column main loop, one-vector remainder, scalar tail),
 * but in a GCC 13 build two of them computed a column differently, and its bits depended on where
 * a thread's columns began.
 */
#if defined(__linux__) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE 1 /* madvise under -std=c11 */
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

#include "dl.h"

#ifndef DL_SUFFIX
#error "define DL_SUFFIX before including gossip_impl.h"
#endif
#define DL_CAT2(a, b) a##_##b
#define DL_CAT(a, b) DL_CAT2(a, b)

/* Whatever the ISA files' -ffp-contract=fast says: every multiply-add here is explicit. */
#pragma GCC optimize("fp-contract=off")

#define DL_GOSSIP_RB 64        /* rows per tile */
#define DL_GOSSIP_CW 1024      /* fewest columns per tile of the whole-row path */
#define DL_GOSSIP_STREAM_BYTES (16 << 20) /* smaller outputs never bypass the caches */
#ifndef DL_GOSSIP_SLAB
#define DL_GOSSIP_SLAB (1 << 19) /* bytes of X a column block may span */
#endif
#define DL_GOSSIP_PREFETCH 4 /* rows ahead that the slab copy prefetches */

/* One vector register of the build's widest type: 16 floats under AVX-512, 8 under AVX2, 4 in the
 * portable build (SSE2 on x86-64). Accessed through memcpy, so rows need no alignment. */
#if defined(__AVX512F__)
#define DL_LANES 16
#elif defined(__AVX2__)
#define DL_LANES 8
#else
#define DL_LANES 4
#endif
typedef float dl_vf __attribute__((vector_size(DL_LANES * 4)));

static inline dl_vf dl_ld(const float *p) {
    dl_vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void dl_st(float *p, dl_vf v) { memcpy(p, &v, sizeof v); }

/* acc + w * x: one fused multiply-add (one rounding) in the builds with FMA, else a product and a
 * sum, for a scalar (dl_madd) and for a vector (dl_vmadd) the same. */
#if defined(__FMA__) && (defined(__x86_64__) || defined(_M_X64))
static inline float dl_madd(float acc, float w, float x) { return __builtin_fmaf(w, x, acc); }
static inline dl_vf dl_vmadd(dl_vf acc, float w, dl_vf x) {
#if defined(__AVX512F__)
    return (dl_vf)_mm512_fmadd_ps(_mm512_set1_ps(w), (__m512)x, (__m512)acc);
#else
    return (dl_vf)_mm256_fmadd_ps(_mm256_set1_ps(w), (__m256)x, (__m256)acc);
#endif
}
#else
static inline float dl_madd(float acc, float w, float x) { return acc + w * x; }
static inline dl_vf dl_vmadd(dl_vf acc, float w, dl_vf x) { return acc + w * x; }
#endif

/* Non-temporal store of one aligned vector: the line goes to memory without first being read into
 * the cache (saves a third of the traffic of a streaming Y = W X). Plain store off x86. */
#if defined(__x86_64__) || defined(_M_X64)
static inline void dl_st_nt(float *p, dl_vf v) {
#if defined(__AVX512F__)
    _mm512_stream_ps(p, (__m512)v);
#elif defined(__AVX2__)
    _mm256_stream_ps(p, (__m256)v);
#else
    _mm_stream_ps(p, (__m128)v);
#endif
}
static inline void dl_fence(void) { _mm_sfence(); }
#else
static inline void dl_st_nt(float *p, dl_vf v) { dl_st(p, v); }
static inline void dl_fence(void) {}
#endif

/* Accumulators per row (registers in flight): a sub-slab is DL_GOSSIP_VW = 32 columns (two cache
 * lines of a row) under AVX-512 and AVX2, 16 in the portable build. */
#ifndef DL_NACC
#if defined(__AVX512F__)
#define DL_NACC 2
#else
#define DL_NACC 4
#endif
#endif
#define DL_GOSSIP_VW (DL_NACC * DL_LANES) /* columns accumulated at once */
/* Floats between the starts of consecutive rows of a packed sub-slab: one cache line of padding
 * after each row's piece, so that the rows a far neighbour list touches (i + 2^k at a stride of 2^k
 * rows) do not all fall into the same L1 sets (a power-of-two stride did: -30% at 1000 peers). */
#define DL_GOSSIP_SS (DL_GOSSIP_VW + 16)
/* Four rows of equal degree at once where their accumulators fit the registers (AVX-512). */
#define DL_GOSSIP_QUAD (DL_LANES == 16)

/* yr[c] for one column c: the same operations as the vector loop (first product, then dl_madd
 * per entry), so a column's value does not depend on whether it falls in a vector, a peeled head
 * or a tail. */
static inline float gossip_col(const int32_t *restrict indices, const float *restrict data,
                               int64_t p0, int64_t p1, const float *restrict x0, int64_t dim,
                               int64_t c) {
    float acc = data[p0] * x0[(int64_t)indices[p0] * dim + c];
    for (int64_t p = p0 + 1; p < p1; p++) acc = dl_madd(acc, data[p], x0[(int64_t)indices[p] * dim + c]);
    return acc;
}

/* One row of one tile: yr[0:w] = sum_p data[p] * x[indices[p], c0:c0+w], p in [p0, p1), with
 * DL_GOSSIP_VW columns accumulated in DL_NACC registers across the row's neighbours. With
 * `stream`, the head is peeled until yr is vector-aligned and whole vectors are stored
 * non-temporally. */
static inline void gossip_row(const int32_t *restrict indices, const float *restrict data,
                              int64_t p0, int64_t p1, const float *restrict x, int64_t dim,
                              int64_t c0, int64_t w, float *restrict yr, int stream) {
    if (p0 == p1) {
        memset(yr, 0, (size_t)w * sizeof(float));
        return;
    }
    const float *restrict x0 = x + c0;
    int64_t c = 0;
    if (stream) {
        const int64_t head = (int64_t)((-(uintptr_t)yr) & (sizeof(dl_vf) - 1)) / 4;
        for (; c < dl_min_i64(head, w); c++) yr[c] = gossip_col(indices, data, p0, p1, x0, dim, c);
    }
    for (; c + DL_GOSSIP_VW <= w; c += DL_GOSSIP_VW) {
        const float *xr = x0 + (int64_t)indices[p0] * dim + c;
        const float w0 = data[p0];
        dl_vf a[DL_NACC];
        for (int u = 0; u < DL_NACC; u++) a[u] = w0 * dl_ld(xr + u * DL_LANES);
        for (int64_t p = p0 + 1; p < p1; p++) {
            const float *xp = x0 + (int64_t)indices[p] * dim + c;
            const float wp = data[p];
            for (int u = 0; u < DL_NACC; u++) a[u] = dl_vmadd(a[u], wp, dl_ld(xp + u * DL_LANES));
        }
        if (stream)
            for (int u = 0; u < DL_NACC; u++) dl_st_nt(yr + c + u * DL_LANES, a[u]);
        else
            for (int u = 0; u < DL_NACC; u++) dl_st(yr + c + u * DL_LANES, a[u]);
    }
    for (; c + DL_LANES <= w; c += DL_LANES) { /* the remaining whole vectors, one at a time */
        const float *xr = x0 + (int64_t)indices[p0] * dim + c;
        dl_vf a = data[p0] * dl_ld(xr);
        for (int64_t p = p0 + 1; p < p1; p++)
            a = dl_vmadd(a, data[p], dl_ld(x0 + (int64_t)indices[p] * dim + c));
        if (stream)
            dl_st_nt(yr + c, a);
        else
            dl_st(yr + c, a);
    }
    for (; c < w; c++) yr[c] = gossip_col(indices, data, p0, p1, x0, dim, c);
}

/* Rows i and i + 1 of Y over one full-width sub-slab s (n_cols x DL_GOSSIP_VW, contiguous),
 * columns [c, c + DL_GOSSIP_VW) with y pointing at column c; both rows have k >= 1 entries. Two
 * rows at once give 2 * DL_NACC independent chains of multiply-adds. Same operations per element
 * as gossip_row. With `stream`, y + i * dim must be vector-aligned. */
static inline void gossip_sweep_pair(const int32_t *restrict off, const float *restrict data,
                                     int64_t p0, int64_t q0, int64_t k, const float *restrict s,
                                     float *restrict yr, float *restrict yq, int stream) {
    const int32_t *ir = off + p0, *iq = off + q0;
    const float *dr = data + p0, *dq = data + q0;
    const float *xr = s + ir[0], *xq = s + iq[0];
    const float w0 = dr[0], v0 = dq[0];
    dl_vf a[DL_NACC], b[DL_NACC];
    for (int u = 0; u < DL_NACC; u++) {
        a[u] = w0 * dl_ld(xr + u * DL_LANES);
        b[u] = v0 * dl_ld(xq + u * DL_LANES);
    }
    for (int64_t t = 1; t < k; t++) {
        const float *xp = s + ir[t], *xs = s + iq[t];
        const float wp = dr[t], vp = dq[t];
        for (int u = 0; u < DL_NACC; u++) {
            a[u] = dl_vmadd(a[u], wp, dl_ld(xp + u * DL_LANES));
            b[u] = dl_vmadd(b[u], vp, dl_ld(xs + u * DL_LANES));
        }
    }
    for (int u = 0; u < DL_NACC; u++) {
        if (stream) {
            dl_st_nt(yr + u * DL_LANES, a[u]);
            dl_st_nt(yq + u * DL_LANES, b[u]);
        } else {
            dl_st(yr + u * DL_LANES, a[u]);
            dl_st(yq + u * DL_LANES, b[u]);
        }
    }
}

/* Rows i .. i + 3 of Y over one full-width sub-slab, as gossip_sweep_pair with four rows of k >= 1
 * entries each: 4 * DL_NACC independent chains, enough to cover the multiply-add latency. */
static inline void gossip_sweep_quad(const int32_t *restrict off, const float *restrict data,
                                     const int64_t *restrict p0, int64_t k,
                                     const float *restrict s, float *restrict y, int64_t dim,
                                     int stream) {
    const int32_t *i0 = off + p0[0], *i1 = off + p0[1], *i2 = off + p0[2], *i3 = off + p0[3];
    const float *d0 = data + p0[0], *d1 = data + p0[1], *d2 = data + p0[2], *d3 = data + p0[3];
    dl_vf a[DL_NACC], b[DL_NACC], c[DL_NACC], e[DL_NACC];
    {
        const float *x0 = s + i0[0], *x1 = s + i1[0], *x2 = s + i2[0], *x3 = s + i3[0];
        for (int u = 0; u < DL_NACC; u++) {
            a[u] = d0[0] * dl_ld(x0 + u * DL_LANES);
            b[u] = d1[0] * dl_ld(x1 + u * DL_LANES);
            c[u] = d2[0] * dl_ld(x2 + u * DL_LANES);
            e[u] = d3[0] * dl_ld(x3 + u * DL_LANES);
        }
    }
    for (int64_t t = 1; t < k; t++) {
        const float *x0 = s + i0[t], *x1 = s + i1[t], *x2 = s + i2[t], *x3 = s + i3[t];
        const float w0 = d0[t], w1 = d1[t], w2 = d2[t], w3 = d3[t];
        for (int u = 0; u < DL_NACC; u++) {
            a[u] = dl_vmadd(a[u], w0, dl_ld(x0 + u * DL_LANES));
            b[u] = dl_vmadd(b[u], w1, dl_ld(x1 + u * DL_LANES));
            c[u] = dl_vmadd(c[u], w2, dl_ld(x2 + u * DL_LANES));
            e[u] = dl_vmadd(e[u], w3, dl_ld(x3 + u * DL_LANES));
        }
    }
    float *y0 = y, *y1 = y + dim, *y2 = y + 2 * dim, *y3 = y + 3 * dim;
    for (int u = 0; u < DL_NACC; u++) {
        if (stream) {
            dl_st_nt(y0 + u * DL_LANES, a[u]);
            dl_st_nt(y1 + u * DL_LANES, b[u]);
            dl_st_nt(y2 + u * DL_LANES, c[u]);
            dl_st_nt(y3 + u * DL_LANES, e[u]);
        } else {
            dl_st(y0 + u * DL_LANES, a[u]);
            dl_st(y1 + u * DL_LANES, b[u]);
            dl_st(y2 + u * DL_LANES, c[u]);
            dl_st(y3 + u * DL_LANES, e[u]);
        }
    }
}

/* Every row of Y over one full-width sub-slab: pairs of consecutive rows with the same number of
 * entries together, any other row alone (gossip_row). Not inlined: inside the slab loop GCC ran
 * out of registers and reloaded the pair's pointers from the stack in the inner loop. */
__attribute__((noinline)) static void gossip_sweep(const int64_t *restrict indptr,
                                                   const int32_t *restrict indices,
                                                   const int32_t *restrict off,
                                                   const float *restrict data, int64_t n_rows,
                                                   const float *restrict s, float *restrict y,
                                                   int64_t dim, int stream) {
    for (int64_t i = 0; i < n_rows;) {
        const int64_t k = indptr[i + 1] - indptr[i];
#if DL_GOSSIP_QUAD
        if (i + 3 < n_rows && k > 0 && indptr[i + 2] - indptr[i + 1] == k &&
            indptr[i + 3] - indptr[i + 2] == k && indptr[i + 4] - indptr[i + 3] == k) {
            gossip_sweep_quad(off, data, indptr + i, k, s, y + i * dim, dim, stream);
            i += 4;
            continue;
        }
#endif
        if (i + 1 < n_rows && k > 0 && indptr[i + 2] - indptr[i + 1] == k) {
            gossip_sweep_pair(off, data, indptr[i], indptr[i + 1], k, s, y + i * dim,
                              y + (i + 1) * dim, stream);
            i += 2;
        } else {
            gossip_row(indices, data, indptr[i], indptr[i + 1], s, DL_GOSSIP_SS, 0, DL_GOSSIP_VW,
                       y + i * dim, stream);
            i += 1;
        }
    }
}

/* A thread's slab buffer: on Linux, whole 2 MiB pages with a transparent-huge-page hint, so
 * that the buffer is physically contiguous and the sub-slabs' rows fall into L2 sets as their
 * addresses say (with 4 KiB pages the physical placement changed the kernel's time from process
 * to process). */
static float *gossip_buf_alloc(size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const size_t huge = (size_t)1 << 21, n = (bytes + huge - 1) & ~(huge - 1);
    void *p = aligned_alloc(huge, n);
    if (p != NULL) madvise(p, n, MADV_HUGEPAGE);
    return p;
#else
    return malloc(bytes);
#endif
}

/* Columns [c0, c1) of slab jb and its sub-slabs: with head > 0, slab 0 starts with the sub-slab
 * [0, head); the others are DL_GOSSIP_VW columns from a0 on, the last one possibly narrower. */
typedef struct {
    int64_t c0, c1, a0;
    int first, n; /* 1 when sub-slab 0 is [0, head); number of sub-slabs */
} dl_gossip_slab_t;

static inline dl_gossip_slab_t gossip_slab(int64_t jb, int64_t head, int64_t cb, int64_t dim) {
    dl_gossip_slab_t s;
    s.c0 = jb == 0 ? 0 : head + jb * cb;
    s.c1 = dl_min_i64(dim, head + (jb + 1) * cb);
    s.first = jb == 0 && head > 0;
    s.a0 = jb == 0 ? head : s.c0;
    s.n = s.first + (int)dl_cdiv_i64(s.c1 - s.a0, DL_GOSSIP_VW);
    return s;
}

/* First column of sub-slab t (t == s->n gives the slab's end). */
static inline int64_t gossip_sub_col(const dl_gossip_slab_t *s, int t) {
    if (t >= s->n) return s->c1;
    if (s->first && t == 0) return 0;
    return s->a0 + (t - s->first) * DL_GOSSIP_VW;
}

/* Y (n_rows x dim) = W (n_rows x n_cols, CSR) @ X (n_cols x dim); X and Y C-contiguous float32,
 * must not overlap. W is assumed valid (dl_csr_check). Any n_threads >= 1 gives the same bits. */
int DL_CAT(dl_gossip_csr_f32, DL_SUFFIX)(const dl_csr_f32_t *w, int64_t dim, const float *x,
                                          float *y, int n_threads) {
    if (dim < 0 || w->n_rows < 0 || n_threads < 1) return DL_E_ARG;
    if (dim == 0 || w->n_rows == 0) return DL_OK;
    const int64_t *indptr = w->indptr;
    const int32_t *indices = w->indices;
    const float *data = w->data;
    /* Rows a row-ordered sweep keeps live: twice the largest (cyclic) distance between a row and
     * its neighbours. A ring keeps 3 rows live and streams whole rows; an exponential or random
     * graph keeps all of them and works on packed column slabs instead. */
    int64_t reach = 0;
    for (int64_t i = 0; i < w->n_rows; i++)
        for (int64_t p = indptr[i]; p < indptr[i + 1]; p++) {
            int64_t d = indices[p] > i ? indices[p] - i : i - indices[p];
            if (w->n_rows == w->n_cols) d = dl_min_i64(d, w->n_cols - d);
            reach = dl_max_i64(reach, d);
        }
    const int64_t live = dl_min_i64(2 * reach + 1, dl_max_i64(w->n_cols, 1));
    /* Stream Y past the caches when it is too large to be read back from them soon: at least
     * DL_GOSSIP_STREAM_BYTES and over a quarter of the last-level cache (a D-PSGD round keeps four
     * such matrices, X, Y, the gradients and the momentum; a 16-core Xeon's 300 MB L3 holds the
     * 1024-peer MLP's 39 MB four times over, a 32 MB L3 does not). The packed
     * path streams only when its pieces of Y can start on cache lines (see below): short
     * unaligned pieces cost more streamed than the write-allocate reads they save. */
    const int64_t y_bytes = (int64_t)4 * w->n_rows * dim;
    const int stream = y_bytes >= DL_GOSSIP_STREAM_BYTES && y_bytes > dl_llc_bytes() / 4;
    /* (offsets into a sub-slab are int32: int64 ones measured slower) */
    const int packed = 4 * live * dim > DL_GOSSIP_SLAB && 4 * w->n_cols * dim > DL_GOSSIP_SLAB &&
                       w->n_cols <= INT32_MAX / DL_GOSSIP_SS;
#ifndef _OPENMP
    (void)n_threads;
#endif

    if (!packed) {
        /* Tiles of DL_GOSSIP_RB rows by cwid columns, handed out in row-major order:
         * a few peers with long rows (64 peers of a CNN: one row tile) still give every thread
         * work, and a tile reads its rows' neighbours over its columns only. */
        const int64_t n_rb = dl_cdiv_i64(w->n_rows, DL_GOSSIP_RB);
        /* Columns per tile: whole rows when there are 4 row tiles per thread (the 1000-peer ring
         * at 2 threads: splitting its rows measured 5% slower), else enough column ranges for 4
         * tiles per thread, each a multiple of 16 floats and at least DL_GOSSIP_CW of them. The
         * tiling never changes a bit (every element is computed alike). */
        const int64_t want = dl_cdiv_i64(dim, dl_cdiv_i64(4 * (int64_t)n_threads, n_rb));
        const int64_t cwid = dl_min_i64(dim, dl_max_i64(DL_GOSSIP_CW, dl_cdiv_i64(want, 16) * 16));
        const int64_t n_cc = dl_cdiv_i64(dim, cwid), n_t = n_rb * n_cc;
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic) num_threads((int)dl_min_i64(n_threads, n_t))
#endif
        for (int64_t t = 0; t < n_t; t++) {
            const int64_t ib = t / n_cc, c0 = (t % n_cc) * cwid;
            const int64_t cw = dl_min_i64(cwid, dim - c0);
            const int64_t i1 = dl_min_i64(w->n_rows, (ib + 1) * DL_GOSSIP_RB);
            for (int64_t i = ib * DL_GOSSIP_RB; i < i1; i++)
                gossip_row(indices, data, indptr[i], indptr[i + 1], x, dim, c0, cw,
                           y + i * dim + c0, stream);
            if (stream) dl_fence();
        }
        return DL_OK;
    }

    /* Packed column slabs of cb columns (a multiple of DL_GOSSIP_VW), split into sub-slabs of
     * DL_GOSSIP_VW columns. With rows of Y a multiple of 16 floats apart, the first `head` columns
     * form a sub-slab of their own so that every later piece of Y starts on a cache line and can
     * be streamed. Where a piece starts changes no bits: each element is computed alike. */
    const int64_t n_cols = w->n_cols, vw = DL_GOSSIP_VW;
    const int64_t cb = dl_max_i64(DL_GOSSIP_SLAB / (4 * n_cols) / vw * vw, vw);
    const int pstream = stream && dim % 16 == 0;
    const int64_t head = pstream ? (int64_t)((-(uintptr_t)y) & 63) / 4 : 0;
    const int64_t n_cb = dl_cdiv_i64(dim - head, cb);
    const int64_t n_sub = cb / vw + (head > 0); /* sub-slabs */
    const int64_t sub = n_cols * DL_GOSSIP_SS;  /* floats in one */
    /* off[p]: where entry p's row starts in a sub-slab, so the sweeps' inner loops load an offset
     * instead of computing index * DL_GOSSIP_SS (fewer instructions per multiply-add). */
    const int64_t nnz = indptr[w->n_rows];
    int32_t *off = malloc((size_t)dl_max_i64(nnz, 1) * sizeof(int32_t));
    if (off == NULL) return DL_E_NOMEM;
    for (int64_t p = 0; p < nnz; p++) off[p] = indices[p] * DL_GOSSIP_SS;
    int failed = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads((int)dl_min_i64(n_threads, n_cb)) reduction(| : failed)
#endif
    {
        float *buf = gossip_buf_alloc((size_t)(n_sub * sub) * sizeof(float));
        if (buf == NULL) failed = 1;
#ifdef _OPENMP
#pragma omp for schedule(dynamic)
#endif
        for (int64_t jb = 0; jb < n_cb; jb++) {
            if (buf == NULL) continue;
            const dl_gossip_slab_t sl = gossip_slab(jb, head, cb, dim);
            const float *xp = x + sl.c0;
            for (int64_t j = 0; j < n_cols; j++) {
                /* Into L1 (T0): the non-temporal and L2 hints measured 1.2-1.5x slower. */
                if (j + DL_GOSSIP_PREFETCH < n_cols)
                    for (int64_t l = 0; l < sl.c1 - sl.c0; l += 16)
                        __builtin_prefetch(xp + (j + DL_GOSSIP_PREFETCH) * dim + l, 0, 3);
                for (int t = 0; t < sl.n; t++) {
                    const int64_t c = gossip_sub_col(&sl, t), ws = gossip_sub_col(&sl, t + 1) - c;
                    float *b = buf + t * sub + j * DL_GOSSIP_SS;
                    if (ws == vw)
                        for (int u = 0; u < DL_NACC; u++)
                            dl_st(b + u * DL_LANES, dl_ld(x + j * dim + c + u * DL_LANES));
                    else
                        memcpy(b, x + j * dim + c, (size_t)ws * sizeof(float));
                }
            }
            for (int t = 0; t < sl.n; t++) {
                const int64_t c = gossip_sub_col(&sl, t), ws = gossip_sub_col(&sl, t + 1) - c;
                const float *bs = buf + t * sub;
                if (ws == vw)
                    gossip_sweep(indptr, indices, off, data, w->n_rows, bs, y + c, dim, pstream);
                else
                    for (int64_t i = 0; i < w->n_rows; i++)
                        gossip_row(indices, data, indptr[i], indptr[i + 1], bs, DL_GOSSIP_SS, 0, ws,
                                   y + i * dim + c, pstream);
            }
            if (pstream) dl_fence();
        }
        free(buf);
    }
    free(off);
    return failed ? DL_E_NOMEM : DL_OK;
}
