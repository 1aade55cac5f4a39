/* topk.c: exact top-k by magnitude, random-k and magnitude thresholding of each row of a matrix.
 *
 * Top-k never sorts a row. A fixed strided sample of the magnitudes gives a threshold a little
 * below the k-th largest (a quantile plus a safety margin of ~4 standard deviations); one
 * vectorized pass (topk_impl.h, chosen through dl_dispatch) collects the few elements at or above
 * it, and an exact radix select on the candidates' magnitude bits (a 16-bit histogram of each
 * thread's candidates, built by the filter itself for magnitudes, the integer counts summed in a
 * fixed order, then the few candidates in the chosen bin) finds the k-th largest value T. The
 * output is every candidate above T plus the lowest-indexed ones equal to T, which the candidates'
 * index order yields already ascending; each thread packs its own candidates at a prefix offset
 * (dl_topk_compact_u32). Candidate buffers are kept per thread between calls. Too few
 * candidates lower the threshold and filter again; too many (heavy ties, adversarial rows) fall
 * back to the same radix select over the whole row. Either way the result is a pure
 * function of the row: the k largest |x|, ties at the threshold going to the lowest indices, so it
 * cannot depend on the thread count or path. Random-k is the same selection on the score
 * ~dl_rng_u32(key, i) (the k smallest random numbers: a uniform k-subset), with an analytic
 * threshold instead of a sample. A long row is split into fixed chunks of DL_TK_CHUNK elements,
 * contiguous runs of which go to each thread; many shorter rows are spread over threads whole.
 */
#define DL_SUFFIX generic
#include "topk_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DL_TK_CHUNK (1 << 14)  /* elements per fixed chunk of a row */
#define DL_TK_SAMPLE (1 << 14) /* strided sample for the threshold guess */
#define DL_TK_SMALL (1 << 16)  /* rows up to this long are selected directly on one thread */
#define DL_TK_ROWPAR (1 << 20) /* rows shorter than this go to threads whole */
#define DL_TK_NAN 0x7f800000u  /* magnitude scores above this are NaN */
#define DL_TK_RETRY 1          /* internal: too few candidates, lower the threshold */
#define DL_TK_FALLBACK 2       /* internal: too many candidates, select on the whole row */

enum { TK_MAG = 0, TK_RAND = 1 };

/* Where a row's scores come from: |x| bits, or ~rng for random-k (x then only supplies values). */
typedef struct {
    int mode;
    const float *x;
    uint64_t key;
} tk_src_t;

static inline uint32_t tk_score(const tk_src_t *s, int64_t i) {
    if (s->mode == TK_RAND) return ~dl_rng_u32(s->key, (uint64_t)i);
    uint32_t b;
    memcpy(&b, s->x + i, 4);
    return b & 0x7fffffffu;
}

static inline int tk_tid(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}
static inline int tk_nteam(void) {
#ifdef _OPENMP
    return omp_get_num_threads();
#else
    return 1;
#endif
}

/* Thread `tid` of `nteam` takes a contiguous run of fixed chunks of [0, n). */
static inline void tk_range(int64_t n, int tid, int nteam, int64_t *i0, int64_t *i1) {
    const int64_t nc = dl_cdiv_i64(n, DL_TK_CHUNK);
    *i0 = dl_min_i64(n, nc * tid / nteam * DL_TK_CHUNK);
    *i1 = dl_min_i64(n, nc * (tid + 1) / nteam * DL_TK_CHUNK);
}

/* Radix digits of a 32-bit score: bits 31..21, 20..10, 9..0. */
static const int tk_shift[3] = {21, 10, 0};
static const uint32_t tk_bins[3] = {2048, 2048, 1024};

/* The bin holding the k-th largest (1 <= k <= sum h); *above += the count in higher bins. */
static uint32_t tk_find_bin(const int64_t *h, uint32_t nb, int64_t k, int64_t *above) {
    int64_t cum = 0;
    uint32_t b = nb - 1;
    for (; b > 0; b--) {
        if (cum + h[b] >= k) break;
        cum += h[b];
    }
    *above += cum;
    return b;
}

/* *T = the k-th largest of (s & mask) over the segments (1 <= k <= their total length), *n_gt =
 * how many are strictly larger. With check_nan, DL_E_NONFINITE if any exceeds DL_TK_NAN. */
static int tk_kth_segs(uint32_t *const *seg, const int64_t *len, int nseg, uint32_t mask,
                       int check_nan, int64_t k, uint32_t *T, int64_t *n_gt) {
    int64_t h[2048] = {0}, above = 0;
    uint32_t mx = 0;
    for (int g = 0; g < nseg; g++)
        for (int64_t j = 0; j < len[g]; j++) {
            const uint32_t s = seg[g][j] & mask;
            h[s >> 21]++;
            mx = s > mx ? s : mx;
        }
    if (check_nan && mx > DL_TK_NAN) return DL_E_NONFINITE;
    const uint32_t b0 = tk_find_bin(h, 2048, k, &above);
    uint32_t *sc = malloc((size_t)dl_max_i64(h[b0], 1) * sizeof(uint32_t));
    if (sc == NULL) return DL_E_NOMEM;
    int64_t m = 0;
    for (int g = 0; g < nseg; g++)
        for (int64_t j = 0; j < len[g]; j++) {
            const uint32_t s = seg[g][j] & mask;
            if ((s >> 21) == b0) sc[m++] = s;
        }
    uint32_t t = b0 << 21;
    for (int lv = 1; lv < 3; lv++) {
        const int sh = tk_shift[lv];
        const uint32_t nb = tk_bins[lv];
        memset(h, 0, sizeof h);
        for (int64_t j = 0; j < m; j++) h[(sc[j] >> sh) & (nb - 1)]++;
        const uint32_t b = tk_find_bin(h, nb, k - above, &above);
        t |= b << sh;
        int64_t m2 = 0;
        for (int64_t j = 0; j < m; j++)
            if (((sc[j] >> sh) & (nb - 1)) == b) sc[m2++] = sc[j];
        m = m2;
    }
    free(sc);
    *T = t;
    *n_gt = above;
    return DL_OK;
}

/* The same selection over a whole row, three histogram passes split over nt threads (per-thread
 * histograms summed in thread order: integer counts, so exact). Checks NaN in magnitude mode. */
static int tk_kth_direct(const tk_src_t *src, int64_t n, int64_t k, int nt, uint32_t *T,
                         int64_t *n_gt) {
    int64_t *h = calloc((size_t)nt * 2048, sizeof(int64_t));
    if (h == NULL) return DL_E_NOMEM;
    uint32_t P = 0, PM = 0;
    int64_t above = 0;
    for (int lv = 0; lv < 3; lv++) {
        const int sh = tk_shift[lv];
        const uint32_t nb = tk_bins[lv];
        uint32_t mx = 0;
        memset(h, 0, (size_t)nt * 2048 * sizeof(int64_t));
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1) reduction(max : mx)
#endif
        {
            int64_t i0, i1, *ht = h + (int64_t)tk_tid() * 2048;
            tk_range(n, tk_tid(), tk_nteam(), &i0, &i1);
            for (int64_t i = i0; i < i1; i++) {
                const uint32_t s = tk_score(src, i);
                mx = s > mx ? s : mx;
                if ((s & PM) == P) ht[(s >> sh) & (nb - 1)]++;
            }
        }
        if (lv == 0 && src->mode == TK_MAG && mx > DL_TK_NAN) {
            free(h);
            return DL_E_NONFINITE;
        }
        for (int t = 1; t < nt; t++)
            for (uint32_t b = 0; b < nb; b++) h[b] += h[(int64_t)t * 2048 + b];
        const uint32_t b = tk_find_bin(h, nb, k - above, &above);
        P |= b << sh;
        PM |= (nb - 1) << sh;
    }
    free(h);
    *T = P;
    *n_gt = above;
    return DL_OK;
}

/* Writes, in index order, every i with score > T and the first need_eq with score == T. */
static int tk_emit_direct(const tk_src_t *src, int64_t n, uint32_t T, int64_t need_eq, int nt,
                          int32_t *idx, float *val) {
    if (nt == 1) {
        int64_t o = 0;
        for (int64_t i = 0; i < n; i++) {
            const uint32_t s = tk_score(src, i);
            if (s > T || (s == T && need_eq > 0)) {
                need_eq -= s == T;
                idx[o] = (int32_t)i;
                val[o++] = src->x[i];
            }
        }
        return DL_OK;
    }
    /* Two passes over fixed chunks: count (> T, == T) per chunk, then write at prefix offsets. */
    const int64_t nc = dl_cdiv_i64(n, DL_TK_CHUNK);
    int64_t *cnt = malloc((size_t)nc * 4 * sizeof(int64_t));
    if (cnt == NULL) return DL_E_NOMEM;
    int64_t *gt = cnt, *eq = cnt + nc, *off = cnt + 2 * nc, *take = cnt + 3 * nc;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
    for (int64_t c = 0; c < nc; c++) {
        int64_t a = 0, e = 0;
        for (int64_t i = c * DL_TK_CHUNK; i < dl_min_i64(n, (c + 1) * DL_TK_CHUNK); i++) {
            const uint32_t s = tk_score(src, i);
            a += s > T;
            e += s == T;
        }
        gt[c] = a;
        eq[c] = e;
    }
    int64_t o = 0, eq_before = 0;
    for (int64_t c = 0; c < nc; c++) {
        take[c] = dl_max_i64(0, dl_min_i64(eq[c], need_eq - eq_before));
        off[c] = o;
        o += gt[c] + take[c];
        eq_before += eq[c];
    }
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
    for (int64_t c = 0; c < nc; c++) {
        int64_t p = off[c], left = take[c];
        for (int64_t i = c * DL_TK_CHUNK; i < dl_min_i64(n, (c + 1) * DL_TK_CHUNK); i++) {
            const uint32_t s = tk_score(src, i);
            if (s > T || (s == T && left > 0)) {
                left -= s == T;
                idx[p] = (int32_t)i;
                val[p++] = src->x[i];
            }
        }
    }
    free(cnt);
    return DL_OK;
}

/* The exact selection over candidate segments (each in ascending index order, segment g before
 * g + 1; every score >= t), in parallel. Level 0: every segment counts the high halves of its
 * scores in bins [t >> 16, 65535] (hpre, nseg x nb, when the filter counted them already: then
 * the top bin stands for the maximum, checked exactly only where NaN starts); the counts, summed
 * in segment order (integers: exact, so the
 * same for any thread count), give the high half H of the k-th largest score. Level 1: each
 * segment copies out the low halves of its scores whose high half is H (few: one bin of 2^16),
 * and one thread finds the low half L of the k-th largest among them (two 8-bit histograms), so
 * T = H L. Each segment's counts above and equal to T follow, it takes its share of the ties in
 * segment order and packs its selected candidates at its prefix offset in one more pass. Writes
 * the k selected (ascending indices) to idx/val. DL_E_NONFINITE for a NaN magnitude. */
static int tk_select_segs(const dl_dispatch_t *d, const tk_src_t *src, int32_t *const *ci,
                          uint32_t *const *cs, const int64_t *len, int32_t *hpre, int nseg,
                          int64_t k, uint32_t t, int nt, int32_t *idx, float *val) {
    const uint32_t mask = src->mode == TK_MAG ? 0x7fffffffu : 0xffffffffu;
    const uint32_t b_lo = t >> 16, nb = (mask >> 16) + 1 - b_lo; /* level-0 bins */
    int32_t *h = hpre != NULL ? hpre : malloc((size_t)nseg * nb * sizeof(int32_t));
    int64_t *tot = malloc((nb + 6 * (size_t)nseg + 1) * sizeof(int64_t));
    uint16_t **low = calloc((size_t)nseg, sizeof(uint16_t *));
    uint32_t *mxs = calloc((size_t)nseg, sizeof(uint32_t));
    int bad = h == NULL || tot == NULL || low == NULL || mxs == NULL ? DL_E_NOMEM : DL_OK;
    if (bad) goto done;
    int64_t *gt = tot + nb, *eq = gt + nseg, *off = eq + nseg, *take = off + nseg;
    int64_t *nlow = take + nseg, *lpos = nlow + nseg;
    uint32_t T = 0;
    int64_t total = 0;
    for (int g = 0; g < nseg; g++) total += len[g];
    nt = total < DL_TK_SMALL ? 1 : nt;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
    {
        const int tid = tk_tid(), team = tk_nteam();
        for (int g = tid; g < nseg; g += team) {
            int32_t *hg = h + (int64_t)g * nb;
            const uint32_t *sg = cs[g];
            const int64_t ng = len[g];
            uint32_t mx = 0;
            if (hpre == NULL) {
                memset(hg, 0, nb * sizeof(int32_t));
                for (int64_t j = 0; j < ng; j++) {
                    const uint32_t sc = sg[j] & mask;
                    mx = sc > mx ? sc : mx;
                    hg[(sc >> 16) - b_lo]++;
                }
            } else if (ng > 0) { /* the filter's histogram: its top bin, the exact max near NaN */
                uint32_t b = nb - 1;
                while (b > 0 && hg[b] == 0) b--;
                mx = (b + b_lo) << 16;
                if (mx >= DL_TK_NAN)
                    for (int64_t j = 0; j < ng; j++) mx = (sg[j] & mask) > mx ? sg[j] & mask : mx;
            }
            mxs[g] = mx;
        }
#ifdef _OPENMP
#pragma omp barrier
#pragma omp single
#endif
        {
            uint32_t top = 0; /* highest used level-0 bin */
            for (int g = 0; g < nseg; g++) {
                if (src->mode == TK_MAG && mxs[g] > DL_TK_NAN) bad = DL_E_NONFINITE;
                if (len[g] > 0) top = dl_max_i64(top, (mxs[g] >> 16) - b_lo);
            }
            memset(tot, 0, (top + 1) * sizeof(int64_t));
            for (int g = 0; g < nseg; g++)
                for (uint32_t b = 0; b <= top; b++) tot[b] += h[(int64_t)g * nb + b];
            int64_t above = 0;
            const uint32_t hb = tk_find_bin(tot, top + 1, k, &above);
            for (int g = 0; g < nseg; g++) {
                int64_t a = 0;
                for (uint32_t b = hb + 1; b <= top; b++) a += h[(int64_t)g * nb + b];
                gt[g] = a;
                nlow[g] = h[(int64_t)g * nb + hb];
                low[g] = malloc((size_t)(nlow[g] + 1) * sizeof(uint16_t));
                if (low[g] == NULL) bad = DL_E_NOMEM;
            }
            T = (hb + b_lo) << 16;
            lpos[0] = k - above; /* rank of the k-th largest within bin hb */
        } /* the single's implied barrier publishes everything above */
        if (!bad) {
            const uint32_t H = T >> 16;
            for (int g = tid; g < nseg; g += team) {
                const uint32_t *sg = cs[g];
                uint16_t *lg = low[g];
                const int64_t ng = len[g];
                int64_t m = 0;
                for (int64_t j = 0; j < ng; j++) { /* branch-free: lg has room for nlow[g] + 1 */
                    const uint32_t sc = sg[j] & mask;
                    lg[m] = (uint16_t)sc;
                    m += (sc >> 16) == H;
                }
            }
#ifdef _OPENMP
#pragma omp barrier
#pragma omp single
#endif
            {
                int64_t hist[256], above = 0, rank = lpos[0];
                uint32_t lo = 0;
                for (int lv = 0; lv < 2; lv++) { /* high byte, then low byte of the low half */
                    const int sh = lv == 0 ? 8 : 0;
                    memset(hist, 0, sizeof hist);
                    for (int g = 0; g < nseg; g++)
                        for (int64_t j = 0; j < nlow[g]; j++)
                            if (lv == 0 || (low[g][j] >> 8) == (lo >> 8))
                                hist[(low[g][j] >> sh) & 0xff]++;
                    lo |= tk_find_bin(hist, 256, rank - above, &above) << sh;
                }
                T |= lo;
                int64_t o = 0, eq_before = 0;
                const int64_t need_eq = rank - above;
                for (int g = 0; g < nseg; g++) {
                    int64_t a = 0, e = 0;
                    for (int64_t j = 0; j < nlow[g]; j++) {
                        a += low[g][j] > lo;
                        e += low[g][j] == lo;
                    }
                    gt[g] += a;
                    eq[g] = e;
                    take[g] = dl_max_i64(0, dl_min_i64(eq[g], need_eq - eq_before));
                    off[g] = o;
                    o += gt[g] + take[g];
                    eq_before += eq[g];
                }
            }
            /* Segment g selects score >= T up to just past its take[g]-th tie (all of them when
             * it takes every tie, none when it takes none), score > T after: two compactions. */
            const uint32_t TT = T;
            for (int g = tid; g < nseg; g += team) {
                const int32_t *ig = ci[g];
                const uint32_t *sg = cs[g];
                const int64_t ng = len[g], want = gt[g] + take[g];
                int32_t *oi = idx + off[g];
                uint32_t *ob = (uint32_t *)(val + off[g]);
                int64_t p = take[g] == eq[g] ? ng : 0;
                if (take[g] > 0 && take[g] < eq[g]) { /* blocks of 64 counted, then one walked */
                    int64_t e = 0, j = 0;
                    for (; j + 64 <= ng; j += 64) {
                        int64_t eb = 0;
                        for (int u = 0; u < 64; u++) eb += (sg[j + u] & mask) == TT;
                        if (e + eb >= take[g]) break;
                        e += eb;
                    }
                    for (; j < ng; j++)
                        if ((sg[j] & mask) == TT && ++e == take[g]) break;
                    p = j + 1;
                }
                int64_t o = d->topk_compact_u32(ig, sg, p, mask, TT, want, oi, ob);
                if (TT < mask)
                    o += d->topk_compact_u32(ig + p, sg + p, ng - p, mask, TT + 1, want - o,
                                             oi + o, ob + o);
                if (src->mode != TK_MAG) /* ob holds scores: the values are x[idx] */
                    for (int64_t j = 0; j < o; j++) val[off[g] + j] = src->x[oi[j]];
            }
        }
    }
done:
    if (low != NULL)
        for (int g = 0; g < nseg; g++) free(low[g]);
    free(low);
    if (hpre == NULL) free(h);
    free(tot);
    free(mxs);
    return bad;
}

/* Per-thread candidate buffers, grown on demand and kept for the thread's life (OpenMP reuses its
 * threads) up to DL_TK_KEEP bytes: a fresh buffer costs a page fault per 4 KiB written, which at
 * k = 1% of a long row was a third of the select. Larger requests are allocated per call. */
#define DL_TK_KEEP ((size_t)64 << 20)
static _Thread_local uint32_t *tk_buf = NULL;
static _Thread_local size_t tk_buf_n = 0;

/* n uint32 of scratch for the calling thread: the kept buffer (*own = 0) or a new one (*own = 1,
 * the caller frees it). NULL when out of memory. */
static uint32_t *tk_scratch(size_t n, int *own) {
    *own = 0;
    if (n <= tk_buf_n) return tk_buf;
    if (n * sizeof(uint32_t) > DL_TK_KEEP) {
        *own = 1;
        return malloc(n * sizeof(uint32_t));
    }
    free(tk_buf); /* no realloc: the old contents are not needed */
    tk_buf = malloc(n * sizeof(uint32_t));
    tk_buf_n = tk_buf == NULL ? 0 : n;
    return tk_buf;
}

/* One filter pass with threshold t and at most cap candidates per thread, then the exact select
 * on the candidates. DL_OK, DL_TK_RETRY (fewer than k candidates), DL_TK_FALLBACK (a buffer
 * overflowed) or an error. */
static int tk_filter_pass(const dl_dispatch_t *d, const tk_src_t *src, int64_t n, int64_t k,
                          uint32_t t, int64_t cap, int nt, int32_t *idx, float *val) {
    int32_t **ci = calloc((size_t)nt, sizeof(int32_t *));
    uint32_t **cs = calloc((size_t)nt, sizeof(uint32_t *));
    int64_t *cnt = calloc((size_t)nt * 2, sizeof(int64_t));
    int *own = calloc((size_t)nt, sizeof(int));
    /* Magnitudes: the filter builds each thread's level-0 histogram of the select. */
    const uint32_t nb = 0x8000u - (t >> 16);
    int32_t *hist = src->mode == TK_MAG ? malloc((size_t)nt * nb * sizeof(int32_t)) : NULL;
    int nteam = 1, nomem = ci == NULL || cs == NULL || cnt == NULL || own == NULL ||
                           (src->mode == TK_MAG && hist == NULL);
    int status = DL_OK;
    if (nomem) goto done;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1) reduction(| : nomem)
#endif
    {
        const int tid = tk_tid();
        int64_t i0, i1;
        if (tid == 0) nteam = tk_nteam();
        tk_range(n, tid, tk_nteam(), &i0, &i1);
        const int64_t ct = dl_max_i64(dl_min_i64(cap, i1 - i0), 1);
        uint32_t *buf = tk_scratch(2 * (size_t)ct, &own[tid]);
        if (buf == NULL) {
            nomem = 1;
        } else {
            ci[tid] = (int32_t *)buf;
            cs[tid] = buf + ct;
            if (src->mode == TK_MAG) {
                int32_t *ht = hist + (int64_t)tid * nb;
                memset(ht, 0, nb * sizeof(int32_t));
                cnt[tid] = d->topk_filter_f32(src->x, i0, i1, t, ct, ci[tid], cs[tid], ht);
            }
            else
                cnt[tid] = d->topk_randfilter_u32(src->key, i0, i1, t, ct, ci[tid], cs[tid]);
        }
        cnt[nt + tid] = ct;
    }
    if (nomem) goto done;
    int64_t total = 0;
    for (int g = 0; g < nteam; g++) {
        if (cnt[g] > cnt[nt + g]) {
            status = DL_TK_FALLBACK;
            goto done;
        }
        total += cnt[g];
    }
    if (total < k) {
        status = DL_TK_RETRY;
        goto done;
    }
    status = tk_select_segs(d, src, ci, cs, cnt, hist, nteam, k, t, nt, idx, val);
done:
    if (ci != NULL && own != NULL)
        for (int g = 0; g < nt; g++)
            if (own[g]) free(ci[g]);
    free(ci);
    free(cs);
    free(cnt);
    free(own);
    free(hist);
    return nomem ? DL_E_NOMEM : status;
}

/* The threshold guesses for a long row: sample quantiles (magnitudes) or analytic (random-k),
 * lowered 4x in rank on each retry. DL_TK_FALLBACK when no guess works. */
static int tk_filter_path(const dl_dispatch_t *d, const tk_src_t *src, int64_t n, int64_t k,
                          int nt, int32_t *idx, float *val) {
    uint32_t *sample = NULL;
    int64_t r = 0;
    double p = 0;
    if (src->mode == TK_MAG) {
        sample = malloc(DL_TK_SAMPLE * sizeof(uint32_t));
        if (sample == NULL) return DL_E_NOMEM;
        uint32_t mx = 0; /* the gather is one cache miss per element: split over the threads */
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1) reduction(max : mx)
#endif
        for (int64_t j = 0; j < DL_TK_SAMPLE; j++) {
            sample[j] = tk_score(src, j * n / DL_TK_SAMPLE);
            mx = sample[j] > mx ? sample[j] : mx;
        }
        if (mx > DL_TK_NAN) {
            free(sample);
            return DL_E_NONFINITE;
        }
        const double mu = (double)k * DL_TK_SAMPLE / (double)n;
        r = (int64_t)ceil(mu + 4.0 * sqrt(mu) + 4.0);
    } else {
        p = ((double)k + 4.0 * sqrt((double)k) + 16.0) / (double)n;
    }
    int status = DL_TK_FALLBACK;
    for (int attempt = 0; attempt < 4; attempt++, r *= 4, p *= 4) {
        uint32_t t;
        double expect;
        if (src->mode == TK_MAG) {
            if (r > DL_TK_SAMPLE) break;
            int64_t len = DL_TK_SAMPLE, n_gt;
            status = tk_kth_segs(&sample, &len, 1, 0xffffffffu, 0, r, &t, &n_gt);
            if (status != DL_OK) break;
            status = DL_TK_FALLBACK;
            if (t == 0) break; /* every element would pass: select on the row itself */
            expect = (double)n * (double)r / DL_TK_SAMPLE;
        } else {
            if (p >= 1.0) break;
            const double tt = ldexp(1.0 - p, 32);
            t = tt >= 4294967295.0 ? 0xffffffffu : (uint32_t)tt;
            expect = p * (double)n;
        }
        status = tk_filter_pass(d, src, n, k, t, (int64_t)(1.5 * expect) + 4096, nt, idx, val);
        if (status != DL_TK_RETRY) break;
        status = DL_TK_FALLBACK;
    }
    free(sample);
    return status;
}

/* Any NaN in x[0:n)? Split over nt threads by fixed chunks. */
static int tk_has_nan(const dl_dispatch_t *d, const float *x, int64_t n, int nt) {
    int64_t nan = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1 && n > DL_TK_SMALL) reduction(+ : nan)
#endif
    {
        int64_t i0, i1, c;
        tk_range(n, tk_tid(), tk_nteam(), &i0, &i1);
        d->topk_count_f32(x + i0, i1 - i0, 0xffffffffu, &c);
        nan += c;
    }
    return nan > 0;
}

/* The r-th largest (1 <= r <= n) of a[0, n), reordering a: a radix select, three levels of
 * 11, 11 and 10 bits (tk_shift, tk_bins), each a histogram of the survivors (the values whose
 * higher bits match the chosen prefix, compacted to the front of a) and a walk from the top bin.
 * Integer counts: exact, O(n) with small histograms. Always DL_OK (the status keeps the callers'
 * shape). */
static int tk_nth_largest(uint32_t *a, int64_t n, int64_t r, uint32_t *out) {
    uint32_t h[2048];
    uint32_t prefix = 0;
    int64_t above = 0; /* values above the prefix's bin at the previous levels */
    for (int lv = 0; lv < 3; lv++) {
        const int sh = tk_shift[lv];
        const uint32_t nb = tk_bins[lv];
        memset(h, 0, nb * sizeof(uint32_t));
        uint32_t top = 0; /* the highest bin used: the walk starts there */
        for (int64_t j = 0; j < n; j++) {
            const uint32_t bin = (a[j] >> sh) & (nb - 1);
            h[bin]++;
            top = bin > top ? bin : top;
        }
        uint32_t b = top;
        while (above + h[b] < r) above += h[b--];
        prefix |= b << sh;
        int64_t m = 0; /* keep the values of bin b */
        for (int64_t j = 0; j < n; j++) {
            const uint32_t v = a[j];
            a[m] = v;
            m += ((v >> sh) & (nb - 1)) == b;
        }
        n = m;
    }
    *out = prefix;
    return DL_OK;
}

/* The selection from c candidates in index order (their indices ci, or 0..c-1 when ci is NULL, and
 * scores sc[j] & mask) given the k-th largest score T: every candidate above T and the first ones
 * equal to T, written to idx and val = x[index] without a branch. */
static void tk_emit_above(const int32_t *ci, const uint32_t *sc, uint32_t mask, int64_t c,
                          uint32_t T, int64_t k, const float *x, int32_t *idx, float *val) {
    int64_t n_gt = 0;
    for (int64_t j = 0; j < c; j++) n_gt += (sc[j] & mask) > T;
    int64_t need_eq = k - n_gt, o = 0;
    for (int64_t j = 0; j < c && o < k; j++) { /* write, then keep or not */
        const uint32_t s = sc[j] & mask;
        const int eq = s == T, take = (s > T) | (eq & (need_eq > 0));
        const int32_t i = ci != NULL ? ci[j] : (int32_t)j;
        idx[o] = i;
        val[o] = x[i];
        o += take;
        need_eq -= take & eq;
    }
}

#define DL_TK_SMALL_SAMPLE_LOG2 9
#define DL_TK_SMALL_SAMPLE (1 << DL_TK_SMALL_SAMPLE_LOG2) /* strided sample of a short row */
#define DL_TK_SMALL_MIN 512    /* shorter rows take the direct select */

/* Top-k by magnitude of a row of DL_TK_SMALL_MIN .. DL_TK_SMALL elements on the calling thread:
 * the r-th largest of a strided sample (r a little above the sample's expected share of k) as
 * the threshold t, one vectorized filter pass collecting the candidates >= t in index order
 * (dl_topk_filter_f32, per-thread buffers), the k-th largest candidate T by quickselect on a copy
 * of their scores, then every candidate above T and the first ones equal to T. All elements >= T
 * are candidates (at least k are >= t), so this is the exact selection of tk_kth_direct; NaN
 * always passes the filter (its score is the highest) and is refused. DL_TK_FALLBACK when the
 * guess fails (fewer than k or too many candidates). */
static int tk_small_row(const dl_dispatch_t *d, const float *x, int64_t n, int64_t k, int32_t *idx,
                        float *val) {
    uint32_t sample[DL_TK_SMALL_SAMPLE];
    const int64_t m = DL_TK_SMALL_SAMPLE;
    for (int64_t j = 0; j < m; j++) { /* element j n / m (m a power of two) */
        uint32_t b;
        memcpy(&b, x + ((j * n) >> DL_TK_SMALL_SAMPLE_LOG2), 4);
        sample[j] = b & 0x7fffffffu;
    }
    const double mu = (double)k * (double)m / (double)n;
    const int64_t r = (int64_t)ceil(mu + 4.0 * sqrt(mu) + 4.0);
    if (r > m) return DL_TK_FALLBACK;
    uint32_t t;
    if (tk_nth_largest(sample, m, r, &t) != DL_OK) return DL_TK_FALLBACK;
    if (t == 0) return DL_TK_FALLBACK; /* every element would pass */
    if (t > DL_TK_NAN) return DL_E_NONFINITE; /* the sample holds a NaN */
    const int64_t cap = dl_min_i64(n, (int64_t)(2.0 * (double)n * (double)r / (double)m) + 64);
    int own;
    uint32_t *buf = tk_scratch(3 * (size_t)cap, &own);
    if (buf == NULL) return DL_E_NOMEM;
    int32_t *ci = (int32_t *)buf;
    uint32_t *cs = buf + cap, *work = buf + 2 * cap;
    const int64_t c = d->topk_filter_f32(x, 0, n, t, cap, ci, cs, NULL);
    int status = DL_OK;
    if (c > cap || c < k) {
        status = DL_TK_FALLBACK;
        goto done;
    }
    for (int64_t j = 0; j < c; j++) {
        work[j] = cs[j] & 0x7fffffffu;
        if (work[j] > DL_TK_NAN) {
            status = DL_E_NONFINITE;
            goto done;
        }
    }
    uint32_t T;
    if (tk_nth_largest(work, c, k, &T) != DL_OK) {
        status = DL_TK_FALLBACK;
        goto done;
    }
    tk_emit_above(ci, cs, 0x7fffffffu, c, T, k, x, idx, val);
done:
    if (own) free(buf);
    return status;
}

/* Random-k of a row of at most DL_TK_SMALL elements on the calling thread: the scores are uniform,
 * so an analytic threshold t keeps about k + 4 sqrt(k) + 16 of them; one vectorized pass
 * (dl_topk_randfilter_u32) writes those candidates and their scores in index order, then the k-th
 * largest score T by tk_nth_largest on a copy, and every candidate above T plus the first ones
 * equal to T: the selection of tk_kth_direct with each score computed once, not four times.
 * DL_TK_FALLBACK when fewer than k or too many candidates pass. */
static int tk_small_rand_row(const dl_dispatch_t *d, const tk_src_t *src, int64_t n, int64_t k,
                             int32_t *idx, float *val) {
    const double p = ((double)k + 4.0 * sqrt((double)k) + 16.0) / (double)n;
    uint32_t t = 0;
    if (p < 1.0) {
        const double tt = ldexp(1.0 - p, 32);
        t = tt >= 4294967295.0 ? 0xffffffffu : (uint32_t)tt;
    }
    const int64_t cap = dl_min_i64(n, (int64_t)(2.0 * p * (double)n) + 64);
    int own;
    uint32_t *buf = tk_scratch(3 * (size_t)cap, &own);
    if (buf == NULL) return DL_E_NOMEM;
    int32_t *ci = (int32_t *)buf;
    uint32_t *cs = buf + cap, *work = buf + 2 * cap;
    const int64_t c = d->topk_randfilter_u32(src->key, 0, n, t, cap, ci, cs);
    int status = DL_OK;
    if (c > cap || c < k) {
        status = DL_TK_FALLBACK;
        goto done;
    }
    memcpy(work, cs, (size_t)c * sizeof(uint32_t));
    uint32_t T;
    tk_nth_largest(work, c, k, &T);
    tk_emit_above(ci, cs, 0xffffffffu, c, T, k, src->x, idx, val);
done:
    if (own) free(buf);
    return status;
}

/* Top-k by magnitude of a row shorter than DL_TK_SMALL_MIN: its scores on the stack, the k-th
 * largest T by tk_nth_largest on a copy, then every element above T and the first ones equal to
 * T (the selection of tk_kth_direct without its per-row histograms). */
static int tk_tiny_row(const float *x, int64_t n, int64_t k, int32_t *idx, float *val) {
    uint32_t sc[DL_TK_SMALL_MIN], work[DL_TK_SMALL_MIN];
    uint32_t mx = 0;
    for (int64_t j = 0; j < n; j++) {
        uint32_t b;
        memcpy(&b, x + j, 4);
        sc[j] = work[j] = b & 0x7fffffffu;
        mx = sc[j] > mx ? sc[j] : mx;
    }
    if (mx > DL_TK_NAN) return DL_E_NONFINITE;
    uint32_t T;
    tk_nth_largest(work, n, k, &T);
    tk_emit_above(NULL, sc, 0xffffffffu, n, T, k, x, idx, val);
    return DL_OK;
}

/* The k highest scores of one row (ties to the lowest indices), ascending indices, val = x[idx]. */
static int tk_select_row(const tk_src_t *src, int64_t n, int64_t k, int nt, int32_t *idx,
                         float *val) {
    const dl_dispatch_t *d = dl_dispatch();
    if (k == 0 || k == n) {
        if (src->mode == TK_MAG && tk_has_nan(d, src->x, n, nt)) return DL_E_NONFINITE;
        for (int64_t i = 0; i < k; i++) idx[i] = (int32_t)i;
        if (k > 0) memcpy(val, src->x, (size_t)k * sizeof(float));
        return DL_OK;
    }
    if (n > DL_TK_SMALL) {
        const int status = tk_filter_path(d, src, n, k, nt, idx, val);
        if (status != DL_TK_FALLBACK) return status;
    } else {
        nt = 1;
        if (src->mode == TK_MAG && n < DL_TK_SMALL_MIN) return tk_tiny_row(src->x, n, k, idx, val);
        const int status = src->mode == TK_MAG ? tk_small_row(d, src->x, n, k, idx, val)
                                               : tk_small_rand_row(d, src, n, k, idx, val);
        if (status != DL_TK_FALLBACK) return status;
    }
    uint32_t T;
    int64_t n_gt;
    const int status = tk_kth_direct(src, n, k, nt, &T, &n_gt);
    if (status != DL_OK) return status;
    return tk_emit_direct(src, n, T, k - n_gt, nt, idx, val);
}

/* Every row: rows over threads when they are many and short, else threads within each row. */
static int tk_rows(int mode, int64_t n_rows, int64_t dim, int64_t k, const float *x,
                   uint64_t seed, uint64_t step, int64_t peer0, int32_t *idx, float *val,
                   int n_threads) {
    if (n_rows < 0 || dim < 0 || dim > INT32_MAX || k < 0 || k > dim || n_threads < 1 ||
        peer0 < 0)
        return DL_E_ARG;
    int status = DL_OK;
    if (n_rows > 1 && dim < DL_TK_ROWPAR) {
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(n_threads) reduction(min : status)  \
    if (n_threads > 1 && n_rows * dim > (1 << 15))
#endif
        for (int64_t r = 0; r < n_rows; r++) {
            const tk_src_t src = {mode, x + r * dim,
                                  mode == TK_RAND ? dl_rng_key(seed, step, (uint64_t)(peer0 + r))
                                                  : 0};
            const int s = tk_select_row(&src, dim, k, 1, idx + r * k, val + r * k);
            status = s < status ? s : status;
        }
        return status;
    }
    for (int64_t r = 0; r < n_rows && status == DL_OK; r++) {
        const tk_src_t src = {mode, x + r * dim,
                              mode == TK_RAND ? dl_rng_key(seed, step, (uint64_t)(peer0 + r)) : 0};
        status = tk_select_row(&src, dim, k, n_threads, idx + r * k, val + r * k);
    }
    return status;
}

/* idx/val (n_rows x k): per row of x (n_rows x dim, dim < 2^31), the indices (ascending) and
 * values of the k largest |x|, ties at the k-th magnitude going to the lowest indices. 0 <= k <=
 * dim. DL_E_NONFINITE if a row holds a NaN (infinities are ordinary magnitudes). Outputs must not
 * overlap x. Same result for any n_threads. */
int dl_topk_exact_f32(int64_t n_rows, int64_t dim, int64_t k, const float *x, int32_t *idx,
                      float *val, int n_threads) {
    return tk_rows(TK_MAG, n_rows, dim, k, x, 0, 0, 0, idx, val, n_threads);
}

/* idx/val (n_rows x k): per row r, the k indices with the smallest dl_rng_u32(dl_rng_key(seed,
 * step, peer0 + r), i) (ties to the lowest index): a uniform k-subset, ascending; val = x[idx]
 * (copied as is, NaN included). Same result for any n_threads. */
int dl_topk_random_f32(int64_t n_rows, int64_t dim, int64_t k, const float *x, uint64_t seed,
                       uint64_t step, int64_t peer0, int32_t *idx, float *val, int n_threads) {
    return tk_rows(TK_RAND, n_rows, dim, k, x, seed, step, peer0, idx, val, n_threads);
}

/* Float bits of the threshold |v| as a magnitude score; DL_E_ARG unless v >= 0 (NaN fails). */
static int tk_threshold_bits(float v, uint32_t *t) {
    if (!(v >= 0.0f)) return DL_E_ARG;
    memcpy(t, &v, 4);
    *t &= 0x7fffffffu;
    return DL_OK;
}

int64_t dl_topk_threshold_chunks(int64_t dim) { return dl_cdiv_i64(dim, DL_TK_CHUNK); }

/* chunk_counts (n_rows x dl_topk_threshold_chunks(dim)): how many |x| >= v in each fixed chunk of
 * each row. DL_E_NONFINITE if x holds a NaN, DL_E_ARG unless v >= 0. */
int dl_topk_threshold_count_f32(int64_t n_rows, int64_t dim, float v, const float *x,
                                int64_t *chunk_counts, int n_threads) {
    uint32_t t;
    if (n_rows < 0 || dim < 0 || dim > INT32_MAX || n_threads < 1 ||
        tk_threshold_bits(v, &t) != DL_OK)
        return DL_E_ARG;
    const dl_dispatch_t *d = dl_dispatch();
    const int64_t nc = dl_topk_threshold_chunks(dim), np = n_rows * nc;
    int64_t nan = 0;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(n_threads) reduction(+ : nan)              \
    if (n_threads > 1 && n_rows * dim > (1 << 15))
#endif
    for (int64_t p = 0; p < np; p++) {
        const int64_t r = p / nc, i0 = (p % nc) * DL_TK_CHUNK;
        int64_t c;
        chunk_counts[p] = d->topk_count_f32(x + r * dim + i0, dl_min_i64(DL_TK_CHUNK, dim - i0),
                                            t, &c);
        nan += c;
    }
    return nan > 0 ? DL_E_NONFINITE : DL_OK;
}

/* idx/val (sum of chunk_counts): for each row in turn, the indices (ascending) and values of its
 * |x| >= v, given chunk_counts from dl_topk_threshold_count_f32 on the same x and v (DL_E_ARG if
 * they do not match). */
int dl_topk_threshold_f32(int64_t n_rows, int64_t dim, float v, const float *x,
                          const int64_t *chunk_counts, int32_t *idx, float *val, int n_threads) {
    uint32_t t;
    if (n_rows < 0 || dim < 0 || dim > INT32_MAX || n_threads < 1 ||
        tk_threshold_bits(v, &t) != DL_OK)
        return DL_E_ARG;
    const dl_dispatch_t *d = dl_dispatch();
    const int64_t nc = dl_topk_threshold_chunks(dim), np = n_rows * nc;
    int64_t *off = malloc((size_t)dl_max_i64(np, 1) * sizeof(int64_t));
    if (off == NULL) return DL_E_NOMEM;
    int64_t o = 0, bad = 0;
    for (int64_t p = 0; p < np; p++) {
        if (chunk_counts[p] < 0 || chunk_counts[p] > DL_TK_CHUNK) {
            free(off);
            return DL_E_ARG;
        }
        off[p] = o;
        o += chunk_counts[p];
    }
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(n_threads) reduction(+ : bad)              \
    if (n_threads > 1 && n_rows * dim > (1 << 15))
#endif
    for (int64_t p = 0; p < np; p++) {
        const int64_t r = p / nc, i0 = (p % nc) * DL_TK_CHUNK;
        const int64_t got = d->topk_filter_f32(x + r * dim, i0, dl_min_i64(dim, i0 + DL_TK_CHUNK),
                                               t, chunk_counts[p], idx + off[p],
                                               (uint32_t *)(val + off[p]), NULL);
        bad += got != chunk_counts[p];
    }
    free(off);
    return bad ? DL_E_ARG : DL_OK;
}

int dl_topk_scatter_f32(int64_t n_rows, int64_t k, int64_t dim, const int32_t *idx,
                        const float *val, float *out, int n_threads) {
    if (n_rows < 0 || k < 0 || dim < 0 || n_threads < 1) return DL_E_ARG;
    const int nt = (double)n_rows * (dim + k) < (double)(1 << 15) ? 1 : n_threads;
    int bad = 0;
#pragma omp parallel num_threads(nt)
    {
#pragma omp for schedule(static) reduction(| : bad)
        for (int64_t i = 0; i < n_rows * k; i++) bad |= idx[i] < 0 || idx[i] >= dim;
        if (!bad) { /* every thread reads the reduced flag after the barrier */
#pragma omp for schedule(static)
            for (int64_t r = 0; r < n_rows; r++) {
                float *o = out + r * dim;
                const int32_t *ir = idx + r * k;
                const float *vr = val + r * k;
                memset(o, 0, (size_t)dim * sizeof(float));
                for (int64_t j = 0; j < k; j++) o[ir[j]] = vr[j];
            }
        }
    }
    return bad ? DL_E_INDEX : DL_OK;
}
