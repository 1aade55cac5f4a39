/* copy.c: a streaming copy and a read-only pass, the in-process measures of the memory limits.
 *
 * Benchmarks compare memory-bound kernels with the fastest copy this machine does, measured in the
 * same process: np.copyto (cached stores: the destination's lines are read before they are
 * written) and this kernel, which stores with non-temporal SSE2 stores (part of x86-64, so one
 * build serves every ISA path) and moves only the 2 n * 4 bytes a copy must move. The array is
 * split into fixed chunks of DL_COPY_CHUNK floats, contiguous runs of which go to each thread.
 * Off x86-64 it falls back to memcpy per chunk. dl_read_f32 reads an array once (an XOR of its
 * words, so nothing is optimized away): the floor of a kernel that must read its input, such as
 * natural compression (4 bytes read per value, 1 written). dl_take_rows gathers rows by index (the
 * minibatches of every peer, each round), split over threads.
 */
#include <stdlib.h>
#include <string.h>

#include "dl.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define DL_COPY_X86 1
#endif

#define DL_COPY_CHUNK (1 << 16) /* floats per chunk (256 KiB) */

/* dst[i] = src[i] for i < n floats within one chunk: aligned head, 64-byte non-temporal body. */
static void copy_chunk(const float *src, float *dst, int64_t n) {
#ifdef DL_COPY_X86
    int64_t i = dl_min_i64((int64_t)(((-(uintptr_t)dst) & 15) / 4), n);
    memcpy(dst, src, (size_t)i * sizeof(float));
    for (; i + 16 <= n; i += 16) {
        const __m128 a = _mm_loadu_ps(src + i), b = _mm_loadu_ps(src + i + 4);
        const __m128 c = _mm_loadu_ps(src + i + 8), d = _mm_loadu_ps(src + i + 12);
        _mm_stream_ps(dst + i, a);
        _mm_stream_ps(dst + i + 4, b);
        _mm_stream_ps(dst + i + 8, c);
        _mm_stream_ps(dst + i + 12, d);
    }
    memcpy(dst + i, src + i, (size_t)(n - i) * sizeof(float));
#else
    memcpy(dst, src, (size_t)n * sizeof(float));
#endif
}

/* dst[0:n) = src[0:n) (float32, must not overlap; dst need not be aligned, but a dst that is not
 * 4-byte aligned is the caller's error). Non-temporal stores, then a store fence per thread. */
int dl_copy_f32(int64_t n, const float *src, float *dst, int n_threads) {
    if (n < 0 || n_threads < 1) return DL_E_ARG;
    const int64_t nc = dl_cdiv_i64(n, DL_COPY_CHUNK);
    if (nc == 0) return DL_OK;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads((int)dl_min_i64(n_threads, nc))
#else
    (void)n_threads;
#endif
    for (int64_t c = 0; c < nc; c++) {
        const int64_t i0 = c * DL_COPY_CHUNK;
        copy_chunk(src + i0, dst + i0, dl_min_i64(DL_COPY_CHUNK, n - i0));
#ifdef DL_COPY_X86
        _mm_sfence();
#endif
    }
    return DL_OK;
}

/* *out = XOR of the n 32-bit words of src (any thread count gives the same value: XOR of per-chunk
 * partials). Reads src once; writes nothing else. */
int dl_read_f32(int64_t n, const float *src, uint32_t *out, int n_threads) {
    if (n < 0 || n_threads < 1) return DL_E_ARG;
    const int64_t nc = dl_cdiv_i64(n, DL_COPY_CHUNK);
    const int nt = (int)dl_max_i64(1, dl_min_i64(n_threads, nc));
    uint32_t acc = 0;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) reduction(^ : acc)
#else
    (void)nt;
#endif
    for (int64_t c = 0; c < nc; c++) {
        const int64_t i0 = c * DL_COPY_CHUNK, len = dl_min_i64(DL_COPY_CHUNK, n - i0);
        const uint32_t *w = (const uint32_t *)(const void *)(src + i0);
        uint32_t a[16] = {0};
        int64_t i = 0;
        for (; i + 16 <= len; i += 16)
            for (int l = 0; l < 16; l++) a[l] ^= w[i + l];
        for (; i < len; i++) a[0] ^= w[i];
        for (int l = 0; l < 16; l++) acc ^= a[l];
    }
    *out = acc;
    return DL_OK;
}

/* Rows r < n_idx of dst (row_bytes bytes each) = rows idx[r] of src (n_src rows), or zeros where
 * idx[r] == -1 when `zero_missing`. The indices are checked first (DL_E_INDEX and nothing written
 * if one is outside [0, n_src), or [-1, n_src) with zero_missing); then the rows are copied in
 * contiguous runs per thread, one thread for under 128 KiB. take_rows and place_rows. */
/* The copy of n_idx rows of row_bytes bytes, on the threads: a gather (scatter = 0: dst row r =
 * src row idx[r], zeros where idx[r] < 0) or a scatter (dst row idx[r] = src row r * src_step).
 * Indices checked by the callers; each destination row is written once. */
static void copy_rows(int64_t n_idx, int64_t row_bytes, const int64_t *idx, int scatter,
                      int64_t src_step, const void *src, void *dst, int n_threads) {
    if (row_bytes == 0) return;
    const int nt = n_idx * row_bytes < (1 << 17) ? 1 : (int)dl_min_i64(n_threads, n_idx);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#else
    (void)nt;
#endif
    for (int64_t r = 0; r < n_idx; r++) {
        if (scatter)
            memcpy((char *)dst + idx[r] * row_bytes, (const char *)src + r * src_step * row_bytes,
                   (size_t)row_bytes);
        else if (idx[r] < 0)
            memset((char *)dst + r * row_bytes, 0, (size_t)row_bytes);
        else
            memcpy((char *)dst + r * row_bytes, (const char *)src + idx[r] * row_bytes,
                   (size_t)row_bytes);
    }
}

static int gather_rows(int64_t n_src, int64_t row_bytes, const void *src, int64_t n_idx,
                       const int64_t *idx, void *dst, int zero_missing, int n_threads) {
    if (n_src < 0 || row_bytes < 0 || n_idx < 0 || n_threads < 1) return DL_E_ARG;
    int bad = 0;
    const int64_t lo = zero_missing ? -1 : 0;
    for (int64_t r = 0; r < n_idx; r++) bad |= idx[r] < lo || idx[r] >= n_src;
    if (bad) return DL_E_INDEX;
    copy_rows(n_idx, row_bytes, idx, 0, 0, src, dst, n_threads);
    return DL_OK;
}

/* The gather of every peer's minibatch: dst row r = src row idx[r] (gather_rows). */
int dl_take_rows(int64_t n_src, int64_t row_bytes, const void *src, int64_t n_idx,
                 const int64_t *idx, void *dst, int n_threads) {
    return gather_rows(n_src, row_bytes, src, n_idx, idx, dst, 0, n_threads);
}

/* dst row idx[r] = src row r (src_step 1) or src row 0 (src_step 0: one row into every listed
 * row), rows of row_bytes bytes; idx strictly increasing in [0, n_dst) (each row written once, so
 * the result does not depend on the order), else DL_E_INDEX and nothing written. */
int dl_put_rows(int64_t n_dst, int64_t row_bytes, void *dst, int64_t n_idx, const int64_t *idx,
                const void *src, int src_step, int n_threads) {
    if (n_dst < 0 || row_bytes < 0 || n_idx < 0 || n_threads < 1 || (src_step & ~1)) return DL_E_ARG;
    int bad = 0;
    for (int64_t r = 0; r < n_idx; r++)
        bad |= idx[r] < 0 || idx[r] >= n_dst || (r > 0 && idx[r] <= idx[r - 1]);
    if (bad) return DL_E_INDEX;
    copy_rows(n_idx, row_bytes, idx, 1, src_step, src, dst, n_threads);
    return DL_OK;
}

/* counts[r] = how many j have a[idx[r], j] != b[j] (IEEE: NaN differs from everything, -0 equals
 * +0; NumPy's count_nonzero(a[idx] != b, axis=1)), a (n_rows, dim) float32; idx in [0, n_rows),
 * else DL_E_INDEX and nothing written. */
int dl_count_ne_rows(int64_t n_rows, int64_t dim, const float *a, int64_t n_idx,
                     const int64_t *idx, const float *b, int64_t *counts, int n_threads) {
    if (n_rows < 0 || dim < 0 || n_idx < 0 || n_threads < 1) return DL_E_ARG;
    int bad = 0;
    for (int64_t r = 0; r < n_idx; r++) bad |= idx[r] < 0 || idx[r] >= n_rows;
    if (bad) return DL_E_INDEX;
    const int nt = n_idx * dim < (1 << 15) ? 1 : (int)dl_min_i64(n_threads, n_idx);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#else
    (void)nt;
#endif
    for (int64_t r = 0; r < n_idx; r++) {
        const float *restrict ar = a + idx[r] * dim;
        int64_t c = 0;
        for (int64_t j = 0; j < dim; j++) c += ar[j] != b[j];
        counts[r] = c;
    }
    return DL_OK;
}

/* dst[p, j, i, :] = src[p, i, j, :] for src (P, A, B, K) and dst (P, B, A, K), both C-contiguous
 * (Flatten's channel-major <-> sample-major reorder): rows of K floats copied whole, threads
 * split (p, j). Copies only: any split gives the same bits. */
int dl_swap_axes12_f32(int64_t P, int64_t A, int64_t B, int64_t K, const float *src, float *dst,
                       int n_threads) {
    if (P < 0 || A < 0 || B < 0 || K < 0 || n_threads < 1) return DL_E_ARG;
    const int nt = (double)P * A * B * K < (1 << 16) ? 1 : n_threads;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t pj = 0; pj < P * B; pj++) {
        const int64_t p = pj / B, j = pj % B;
        for (int64_t i = 0; i < A; i++)
            memcpy(dst + (pj * A + i) * K, src + ((p * A + i) * B + j) * K,
                   (size_t)K * sizeof(float));
    }
    return DL_OK;
}

/* Every peer's minibatch indices: idx[p * B + j] = perm[start[p] + (cursor[p] + j) % size[p]].
 * Checks first (nothing written on failure): DL_E_ARG unless every size >= 1 and cursor >= 0,
 * DL_E_INDEX unless every segment [start, start + size) lies in [0, n_perm). Peers split over
 * threads; an index is a copy, so any split gives the same result. */
int dl_batch_indices(int64_t P, int64_t B, const int64_t *perm, int64_t n_perm, const int64_t *start,
                     const int64_t *size, const int64_t *cursor, int64_t *idx, int n_threads) {
    if (P < 0 || B < 0 || n_perm < 0 || n_threads < 1) return DL_E_ARG;
    int bad_arg = 0, bad_index = 0;
    for (int64_t p = 0; p < P; p++) {
        bad_arg |= size[p] < 1 || cursor[p] < 0;
        bad_index |= start[p] < 0 || start[p] > n_perm || size[p] > n_perm - start[p];
    }
    if (bad_arg) return DL_E_ARG;
    if (bad_index) return DL_E_INDEX;
    const int nt = P * B < (1 << 14) ? 1 : (int)dl_min_i64(n_threads, P);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#else
    (void)nt;
#endif
    for (int64_t p = 0; p < P; p++) {
        const int64_t *seg = perm + start[p], n = size[p];
        int64_t at = cursor[p] % n;
        for (int64_t j = 0; j < B; j++) {
            idx[p * B + j] = seg[at];
            if (++at == n) at = 0;
        }
    }
    return DL_OK;
}

/* Stable ascending order of key[0:n) into ord (tmp: n more entries): an insertion sort up to 32
 * keys, else a merge sort of indices; equal keys in index order either way (one order). */
static void stable_order(const double *key, int64_t n, int64_t *ord, int64_t *tmp) {
    for (int64_t i = 0; i < n; i++) ord[i] = i;
    if (n <= 32) { /* a short segment (the usual one): insertion sort, equal keys stay in order */
        for (int64_t i = 1; i < n; i++) {
            const double k = key[i];
            int64_t j = i;
            for (; j > 0 && key[ord[j - 1]] > k; j--) ord[j] = ord[j - 1];
            ord[j] = i;
        }
        return;
    }
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            const int64_t mid = dl_min_i64(lo + w, n), hi = dl_min_i64(lo + 2 * w, n);
            int64_t a = lo, b = mid, o = lo;
            while (a < mid && b < hi) tmp[o++] = key[ord[b]] < key[ord[a]] ? ord[b++] : ord[a++];
            while (a < mid) tmp[o++] = ord[a++];
            while (b < hi) tmp[o++] = ord[b++];
        }
        memcpy(ord, tmp, (size_t)n * sizeof(int64_t));
    }
}

/* Reshuffles the segments of the listed peers in place: the q-th listed peer's segment
 * perm[start[p] : start[p] + size[p]] (p = peers[q]) becomes old[ord], ord the stable ascending
 * order of the keys q + u[o_q + i] (float64 sums; o_q = the sizes of the peers listed before q).
 * That is the order one stable argsort of all listed samples by (q + u) gives, segment by segment
 * (a key of segment q never exceeds q + 1, where segment q + 1 begins), so the result equals
 * decentlearn/_reference/copy.py's. Checks first: DL_E_ARG unless the peers ascend strictly in
 * [0, n_peers), every listed size >= 1 and n_u is their sum; DL_E_INDEX unless every listed
 * segment lies in [0, n_perm). Peers split over threads. */
int dl_shuffle_segments(int64_t n_list, const int64_t *peers, int64_t n_peers, const int64_t *start,
                        const int64_t *size, int64_t *perm, int64_t n_perm, const double *u,
                        int64_t n_u, int n_threads) {
    if (n_list < 0 || n_peers < 0 || n_perm < 0 || n_u < 0 || n_threads < 1) return DL_E_ARG;
    int64_t total = 0, longest = 0;
    int bad_arg = 0, bad_index = 0;
    for (int64_t q = 0; q < n_list && !bad_arg; q++) {
        const int64_t p = peers[q];
        bad_arg |= p < 0 || p >= n_peers || (q > 0 && p <= peers[q - 1]);
        if (bad_arg) break;
        bad_arg |= size[p] < 1 || size[p] > n_u - total;
        if (bad_arg) break;
        bad_index |= start[p] < 0 || start[p] > n_perm || size[p] > n_perm - start[p];
        total += size[p];
        longest = size[p] > longest ? size[p] : longest;
    }
    if (bad_arg || total != n_u) return DL_E_ARG;
    if (bad_index) return DL_E_INDEX;
    if (n_list == 0) return DL_OK;
    int64_t *uoff = malloc((size_t)n_list * sizeof(int64_t));
    if (uoff == NULL) return DL_E_NOMEM;
    for (int64_t q = 0, o = 0; q < n_list; q++) uoff[q] = o, o += size[peers[q]];
    const int nt = n_u < (1 << 12) ? 1 : (int)dl_min_i64(n_threads, n_list);
    int status = DL_OK;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) reduction(min : status)
#else
    (void)nt;
#endif
    {
        /* per thread: keys, the order, merge space and the old segment, for the longest one */
        char *buf = malloc((size_t)longest * (sizeof(double) + 3 * sizeof(int64_t)));
        if (buf == NULL) status = DL_E_NOMEM;
        double *key = (double *)buf;
        int64_t *ord = (int64_t *)(buf + (size_t)longest * sizeof(double));
        int64_t *tmp = ord + longest, *old = tmp + longest;
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 16)
#endif
        for (int64_t q = 0; q < n_list; q++) {
            if (buf == NULL) continue;
            const int64_t p = peers[q], n = size[p];
            int64_t *seg = perm + start[p];
            for (int64_t i = 0; i < n; i++) key[i] = (double)q + u[uoff[q] + i];
            stable_order(key, n, ord, tmp);
            memcpy(old, seg, (size_t)n * sizeof(int64_t));
            for (int64_t i = 0; i < n; i++) seg[i] = old[ord[i]];
        }
        free(buf);
    }
    free(uoff);
    return status;
}

/* out = a x + b y, n float32 values: each product rounded, then their sum (no contraction), so
 * with a = 1 or b = +-1 the products are exact and this is NumPy's x + b * y, x - y, ... bit for
 * bit. out may be x or y itself (in place) but must not overlap them otherwise (the glue checks);
 * elementwise, so any split over threads gives the same bits. */
static void axpby_chunk(int64_t n, float a, const float *restrict x, float b,
                        const float *restrict y, float *restrict out) {
    for (int64_t i = 0; i < n; i++) out[i] = a * x[i] + b * y[i];
}
static void axpby_chunk_inplace(int64_t n, float a, float *restrict io, float b,
                                const float *restrict y) { /* io = a io + b y */
    for (int64_t i = 0; i < n; i++) io[i] = a * io[i] + b * y[i];
}
static void axpby_chunk_any(int64_t n, float a, const float *x, float b, const float *y,
                            float *out) { /* x == y */
    for (int64_t i = 0; i < n; i++) out[i] = a * x[i] + b * y[i];
}

int dl_axpby_f32(int64_t n, float a, const float *x, float b, const float *y, float *out,
                 int n_threads) {
    if (n < 0 || n_threads < 1) return DL_E_ARG;
    const int64_t nc = dl_cdiv_i64(n, DL_COPY_CHUNK);
    if (nc == 0) return DL_OK;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads((int)dl_min_i64(n_threads, nc))
#else
    (void)n_threads;
#endif
    for (int64_t c = 0; c < nc; c++) {
        const int64_t i0 = c * DL_COPY_CHUNK, len = dl_min_i64(DL_COPY_CHUNK, n - i0);
        if (x == y)
            axpby_chunk_any(len, a, x + i0, b, y + i0, out + i0);
        else if (out == x)
            axpby_chunk_inplace(len, a, out + i0, b, y + i0);
        else if (out == y) /* b y + a x: the same sum */
            axpby_chunk_inplace(len, b, out + i0, a, x + i0);
        else
            axpby_chunk(len, a, x + i0, b, y + i0, out + i0);
    }
    return DL_OK;
}

/* Threads for a pass over n_rows rows of w floats, one row per task: one below 32K values (a team
 * costs more than it saves), else at most one per row. */
static inline int row_team(int64_t n_rows, int64_t w, int n_threads) {
    return n_rows * w < (1 << 15) ? 1 : (int)dl_max_i64(1, dl_min_i64(n_threads, n_rows));
}

/* dl_axpby_f32 over n_rows rows of w values whose rows lie ldx, ldy, ldo floats apart (column
 * blocks of wider matrices; ldx or ldy 0: one row broadcast to every row): the same operations
 * per element, so the same bits. out may be x (or y) itself, with its row stride; rows on the
 * threads. */
int dl_axpby_rows_f32(int64_t n_rows, int64_t w, float a, const float *x, int64_t ldx, float b,
                      const float *y, int64_t ldy, float *out, int64_t ldo, int n_threads) {
    if (n_rows < 0 || w < 0 || (ldx < w && ldx != 0) || (ldy < w && ldy != 0) || ldo < w ||
        n_threads < 1)
        return DL_E_ARG;
    if (w == 0) return DL_OK;
    const int nt = row_team(n_rows, w, n_threads);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#else
    (void)nt;
#endif
    for (int64_t r = 0; r < n_rows; r++) {
        const float *xr = x + r * ldx, *yr = y + r * ldy;
        float *o = out + r * ldo;
        if (x == y)
            axpby_chunk_any(w, a, xr, b, yr, o);
        else if (out == x)
            axpby_chunk_inplace(w, a, o, b, yr);
        else if (out == y)
            axpby_chunk_inplace(w, b, o, a, xr);
        else
            axpby_chunk(w, a, xr, b, yr, o);
    }
    return DL_OK;
}

/* out[r, :] = x[r, :] * s[r] (divide: / s[r]) over rows of dim float32 values, each one IEEE
 * operation: NumPy's x * s[:, None] (x / s[:, None]) bit for bit. out may be x itself. Rows, or
 * with fewer rows than threads blocks of DL_COPY_CHUNK columns of each. */
int dl_scale_rows_f32(int64_t n_rows, int64_t dim, const float *x, const float *s, int divide,
                      float *out, int n_threads) {
    if (n_rows < 0 || dim < 0 || n_threads < 1) return DL_E_ARG;
    const int64_t n_cb = n_rows >= n_threads ? 1 : dl_max_i64(1, dl_cdiv_i64(dim, DL_COPY_CHUNK));
    const int64_t cbw = n_cb == 1 ? dim : DL_COPY_CHUNK, n_it = n_rows * n_cb;
    const int nt = (double)n_rows * dim < (double)(1 << 15) ? 1 : n_threads;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#else
    (void)nt;
#endif
    for (int64_t it = 0; it < n_it; it++) {
        const int64_t r = it / n_cb, c0 = (it % n_cb) * cbw, c1 = dl_min_i64(dim, c0 + cbw);
        const float f = s[r];
        const float *xr = x + r * dim;
        float *o = out + r * dim;
        if (divide)
            for (int64_t j = c0; j < c1; j++) o[j] = xr[j] / f;
        else
            for (int64_t j = c0; j < c1; j++) o[j] = xr[j] * f;
    }
    return DL_OK;
}

/* dst rows = src rows: n_rows rows of w float32 values, src's lying lds apart and dst's ldd apart
 * (column blocks of wider matrices), one memcpy per row, rows split over threads. */
int dl_copy2d_f32(int64_t n_rows, int64_t w, const float *src, int64_t lds, float *dst,
                  int64_t ldd, int n_threads) {
    if (n_rows < 0 || w < 0 || lds < w || ldd < w || n_threads < 1) return DL_E_ARG;
    if (w == 0) return DL_OK;
    const int nt = row_team(n_rows, w, n_threads);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#else
    (void)nt;
#endif
    for (int64_t r = 0; r < n_rows; r++)
        memcpy(dst + r * ldd, src + r * lds, (size_t)w * sizeof(float));
    return DL_OK;
}

/* dst row p = src row inv[p] (inv[p] in [0, n_src)), or zeros where inv[p] == -1 (gather_rows);
 * DL_E_INDEX (nothing written) for any other inv. */
int dl_place_rows(int64_t n_dst, int64_t row_bytes, void *dst, const int64_t *inv, int64_t n_src,
                  const void *src, int n_threads) {
    return gather_rows(n_src, row_bytes, src, n_dst, inv, dst, 1, n_threads);
}
