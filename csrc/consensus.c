/* consensus.c: one pass over the peers' (P, D) float32 rows for the consensus distance.
 *
 * The simulator checks every round that the peers are not drifting apart (sim.check_divergence):
 * (1/P) sum_i ||x_i||^2 - ||mean_i x_i||^2 needs sum_{i,c} x_ic^2 and, per column, sum_i x_ic.
 * NumPy does that in two float64 passes that convert the float32 matrix on the way (15-17 % of a
 * 1000-peer round). This kernel reads X once. Columns are cut into fixed chunks of
 * DL_CONS_CHUNK; a chunk accumulates its column sums and squares in float64 over the rows in
 * row order, then reduces them in column order; the chunks' partial results are added in chunk
 * order after the parallel loop. Threads take whole chunks, so the result does not depend on
 * the thread count.
 *
 * dl_consensus_distance_f32 is the exact (centred) distance the simulator reports at every
 * evaluation, (1/P) sum_{i,c} (x_ic - m_c)^2 with m_c = (sum_i x_ic) / P, in float64: per chunk
 * of DL_CONS_EXACT_CHUNK columns, the column sums over the rows in row order, the means, then
 * each column's sum of squared deviations over the rows in row order (8 columns at a time, their
 * sums in registers; the 8 columns' rows read again from cache), then the chunk's columns added
 * in column order; the chunks in chunk order. Every step is one IEEE operation in a fixed order
 * (products and sums not contracted), so the NumPy twin (decentlearn/_reference/consensus.py)
 * gives the same bits. It replaced NumPy's astype/mean/einsum (serial: 15 ms for 1024 x 9610 on
 * one core, at any thread count).
 */
#include <stdlib.h>

#include "dl.h"

#define DL_CONS_CHUNK 512
#define DL_CONS_EXACT_CHUNK 256

/* out[0] = sum_{i,c} x_ic^2, out[1] = sum_c (sum_i x_ic)^2, both float64 (see above). */
int dl_consensus_sums_f32(int64_t P, int64_t D, const float *X, double *out, int n_threads) {
    if (P < 0 || D < 0 || n_threads < 1) return DL_E_ARG;
    out[0] = 0.0;
    out[1] = 0.0;
    const int64_t nc = dl_cdiv_i64(D, DL_CONS_CHUNK);
    if (nc == 0 || P == 0) return DL_OK;
    double *part = (double *)malloc((size_t)nc * 2 * sizeof(double));
    if (part == NULL) return DL_E_NOMEM;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads((int)dl_min_i64(n_threads, nc))
#else
    (void)n_threads;
#endif
    for (int64_t k = 0; k < nc; k++) {
        const int64_t c0 = k * DL_CONS_CHUNK;
        const int64_t w = dl_min_i64(DL_CONS_CHUNK, D - c0);
        double s[DL_CONS_CHUNK], q[DL_CONS_CHUNK];
        for (int64_t c = 0; c < w; c++) s[c] = q[c] = 0.0;
        for (int64_t i = 0; i < P; i++) {
            const float *row = X + i * D + c0;
            for (int64_t c = 0; c < w; c++) {
                const double v = (double)row[c];
                s[c] += v;
                q[c] += v * v;
            }
        }
        double sq = 0.0, ss = 0.0;
        for (int64_t c = 0; c < w; c++) {
            sq += q[c];
            ss += s[c] * s[c];
        }
        part[2 * k] = sq;
        part[2 * k + 1] = ss;
    }
    for (int64_t k = 0; k < nc; k++) {
        out[0] += part[2 * k];
        out[1] += part[2 * k + 1];
    }
    free(part);
    return DL_OK;
}

/* *out = (1/P) sum_{i,c} (X_ic - m_c)^2 in float64 (see above); 0 for P == 0 or D == 0. mean
 * (D values, or NULL): the column means m_c, (sum_i X_ic in row order) / P, as NumPy's
 * X.mean(axis=0, dtype=float64) gives them. */
__attribute__((optimize("fp-contract=off"))) int dl_consensus_distance_f32(int64_t P, int64_t D,
                                                                           const float *X,
                                                                           double *out,
                                                                           double *mean,
                                                                           int n_threads) {
    if (P < 0 || D < 0 || n_threads < 1) return DL_E_ARG;
    *out = 0.0;
    const int64_t nc = dl_cdiv_i64(D, DL_CONS_EXACT_CHUNK);
    if (P == 0 && mean != NULL) /* NumPy's mean of no rows: 0 / 0 */
        for (int64_t c = 0; c < D; c++) mean[c] = 0.0 / (double)P;
    if (nc == 0 || P == 0) return DL_OK;
    double *part = (double *)malloc((size_t)nc * sizeof(double));
    if (part == NULL) return DL_E_NOMEM;
    const double n = (double)P;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads((int)dl_min_i64(n_threads, nc))
#else
    (void)n_threads;
#endif
    for (int64_t k = 0; k < nc; k++) {
        const int64_t c0 = k * DL_CONS_EXACT_CHUNK;
        const int64_t w = dl_min_i64(DL_CONS_EXACT_CHUNK, D - c0);
        double q[DL_CONS_EXACT_CHUNK];
        /* groups of 8 columns, their sums in registers over all rows (same order per column) */
        for (int64_t g = 0; g < w; g += 8) {
            const int64_t gw = dl_min_i64(8, w - g);
            const float *col = X + c0 + g;
            if (gw == 8) {
                double m[8] = {0}, r[8] = {0};
                for (int64_t i = 0; i < P; i++)
                    for (int j = 0; j < 8; j++) m[j] += (double)col[i * D + j];
                for (int j = 0; j < 8; j++) m[j] /= n;
                if (mean != NULL)
                    for (int j = 0; j < 8; j++) mean[c0 + g + j] = m[j];
                for (int64_t i = 0; i < P; i++)
                    for (int j = 0; j < 8; j++) {
                        const double d = (double)col[i * D + j] - m[j];
                        r[j] += d * d;
                    }
                for (int j = 0; j < 8; j++) q[g + j] = r[j];
            } else {
                for (int64_t j = 0; j < gw; j++) {
                    double m = 0.0, r = 0.0;
                    for (int64_t i = 0; i < P; i++) m += (double)col[i * D + j];
                    m /= n;
                    if (mean != NULL) mean[c0 + g + j] = m;
                    for (int64_t i = 0; i < P; i++) {
                        const double d = (double)col[i * D + j] - m;
                        r += d * d;
                    }
                    q[g + j] = r;
                }
            }
        }
        double t = 0.0;
        for (int64_t c = 0; c < w; c++) t += q[c];
        part[k] = t;
    }
    double total = 0.0;
    for (int64_t k = 0; k < nc; k++) total += part[k];
    free(part);
    *out = total / n;
    return DL_OK;
}

/* mean[c] = (sum_i X_ic in row order) / P in float64, NumPy's X.mean(axis=0, dtype=float64) bit
 * for bit (0 / 0 for P == 0): the column means of dl_consensus_distance_f32 without the distance
 * (the exact all-reduce, FedAvg's server average). Chunks of DL_CONS_EXACT_CHUNK columns on the
 * threads, 8 columns' sums in registers over the rows. */
int dl_column_mean_f32(int64_t P, int64_t D, const float *X, double *mean, int n_threads) {
    if (P < 0 || D < 0 || n_threads < 1) return DL_E_ARG;
    const double n = (double)P;
    if (P == 0) {
        for (int64_t c = 0; c < D; c++) mean[c] = 0.0 / n;
        return DL_OK;
    }
    const int64_t nc = dl_cdiv_i64(D, DL_CONS_EXACT_CHUNK);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads((int)dl_max_i64(1, dl_min_i64(n_threads, nc)))
#else
    (void)n_threads;
#endif
    for (int64_t k = 0; k < nc; k++) {
        const int64_t c0 = k * DL_CONS_EXACT_CHUNK;
        const int64_t w = dl_min_i64(DL_CONS_EXACT_CHUNK, D - c0);
        for (int64_t g = 0; g < w; g += 8) {
            const int64_t gw = dl_min_i64(8, w - g);
            const float *col = X + c0 + g;
            double m[8] = {0};
            if (gw == 8) {
                for (int64_t i = 0; i < P; i++)
                    for (int j = 0; j < 8; j++) m[j] += (double)col[i * D + j];
            } else {
                for (int64_t i = 0; i < P; i++)
                    for (int64_t j = 0; j < gw; j++) m[j] += (double)col[i * D + j];
            }
            for (int64_t j = 0; j < gw; j++) mean[c0 + g + j] = m[j] / n;
        }
    }
    return DL_OK;
}

/* out[c] = sum_k w[k] X_kc in float64, the rows in order (from 0, each product added in turn; no
 * contraction): NumPy's np.add.reduce(w[:, None] * X.astype(float64), axis=0)
 * bit for bit (0 for P == 0). FedAvg-style servers' weighted average. */
__attribute__((optimize("fp-contract=off"))) int dl_weighted_column_sum_f32(
    int64_t P, int64_t D, const float *X, const double *w, double *out, int n_threads) {
    if (P < 0 || D < 0 || n_threads < 1) return DL_E_ARG;
    if (P == 0) {
        for (int64_t c = 0; c < D; c++) out[c] = 0.0;
        return DL_OK;
    }
    const int64_t nc = dl_cdiv_i64(D, DL_CONS_EXACT_CHUNK);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads((int)dl_max_i64(1, dl_min_i64(n_threads, nc)))
#else
    (void)n_threads;
#endif
    for (int64_t k = 0; k < nc; k++) {
        const int64_t c0 = k * DL_CONS_EXACT_CHUNK;
        const int64_t wd = dl_min_i64(DL_CONS_EXACT_CHUNK, D - c0);
        double acc[DL_CONS_EXACT_CHUNK];
        for (int64_t c = 0; c < wd; c++) acc[c] = 0.0;
        for (int64_t i = 0; i < P; i++) {
            const float *row = X + i * D + c0;
            const double wi = w[i];
            for (int64_t c = 0; c < wd; c++) acc[c] += wi * (double)row[c];
        }
        for (int64_t c = 0; c < wd; c++) out[c0 + c] = acc[c];
    }
    return DL_OK;
}

/* NumPy's pairwise summation of n float32 values (numpy/_core/src/umath/loops_utils.h.src,
 * pairwise_sum): under 8 values a plain sum from 0; up to 128, eight running sums combined as
 * ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)), then the leftovers in order; above, the two
 * halves (the first a multiple of 8 long) summed that way and added. Every step one float32
 * operation in that order (nothing contracted: no products here), so np.sum's bits. */
static float dl_pairwise_sum_f32(const float *a, int64_t n) {
    if (n < 8) {
        float res = 0.0f;
        for (int64_t i = 0; i < n; i++) res += a[i];
        return res;
    }
    if (n <= 128) {
        float r[8];
        for (int j = 0; j < 8; j++) r[j] = a[j];
        int64_t i = 8;
        for (; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++) r[j] += a[i + j];
        float res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i];
        return res;
    }
    int64_t n2 = n / 2;
    n2 -= n2 % 8;
    return dl_pairwise_sum_f32(a, n2) + dl_pairwise_sum_f32(a + n2, n - n2);
}

/* out[r] = NumPy's np.sum of row r of the C-contiguous (R, n) float32 x (pairwise, above), rows on
 * the threads (each row one thread's, so any thread count gives the same bits). */
int dl_row_sums_f32(int64_t R, int64_t n, const float *x, float *out, int n_threads) {
    if (R < 0 || n < 0 || n_threads < 1) return DL_E_ARG;
#pragma omp parallel for schedule(static) num_threads(n_threads) if (n_threads > 1 && R > 1)
    for (int64_t r = 0; r < R; r++) out[r] = dl_pairwise_sum_f32(x + r * n, n);
    return DL_OK;
}
