/* loss.c: the softmax cross-entropy of the models' logits (decentlearn.nn.Model), batched over
 * peers.
 *
 * For each peer p and sample b, with z the row of C logits and y its label:
 *   m = max_c z_c (NaN propagates, as np.maximum), z_c -= m (float32),
 *   e_c = exp(z_c) (float32, see xent_exp8), s = e_0 + e_1 + ... (float32, in class order),
 *   loss[p] = (sum over b, in order, of (log(double(s)) - double(z_y))) / B (float64),
 * and, when the gradient is wanted, z_c = e_c * (1 / (s * B)) (float32) and then
 * z_y -= float32(1 / B): the gradient of loss[p] with respect to the logits. Without the gradient
 * the logits are left as e_c. The NumPy reference (decentlearn/_reference/loss.py) does the same
 * float operations in the same order, so the logits (gradient) match it bit for bit; the loss
 * matches to the last bit or two (libm's log against NumPy's).
 *
 * exp (xent_exp8): float32 in, float32 out, computed in float64 with a degree-8 Taylor polynomial on
 * |r| <= ln(2)/2 after x = n ln(2) + r; its error before the final rounding is below 0.01 of a
 * float32 ulp, so the result is the correctly rounded exp but for rare near-ties (within one ulp
 * always). Plain C with no FMA contraction (the portable build's -std=c11) and no per-ISA build:
 * the same operations whatever the CPU's instruction set.
 *
 * Threads split the peers; each peer is computed by one thread with the same operations
 * whatever the count, so results do not depend on it.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dl.h"

#pragma GCC diagnostic ignored "-Wpsabi" /* vector arguments of always-inline helpers only */

/* Work below this many logits runs on one thread. */
#define DL_XENT_SERIAL (1 << 14)
/* Rows (samples) per block: the three passes over a block stay in L1. */
#define DL_XENT_ROWS 256

/* exp(x) rounded to float32 (see the header) on 8 lanes (GCC vector extensions: SSE2 pairs in the
 * portable build): x below -104 gives 0, above 89 gives inf, NaN stays NaN (the clamps select
 * bits with comparison masks, false for NaN). n = round(x / ln 2) comes from the 1.5 * 2^52
 * shifter, 2^n from its low bits. */
typedef float xent_v8f __attribute__((vector_size(32)));
typedef double xent_v8d __attribute__((vector_size(64)));
typedef int64_t xent_v8l __attribute__((vector_size(64)));
typedef int32_t xent_v8i __attribute__((vector_size(32)));

static inline __attribute__((always_inline)) xent_v8f xent_select(xent_v8i mask, xent_v8f a,
                                                                  xent_v8f b) { /* mask ? a : b */
    xent_v8i ai, bi;
    memcpy(&ai, &a, sizeof ai);
    memcpy(&bi, &b, sizeof bi);
    ai = (ai & mask) | (bi & ~mask);
    memcpy(&a, &ai, sizeof a);
    return a;
}

static inline __attribute__((always_inline)) xent_v8f xent_exp8(xent_v8f xf) {
    /* the clamps in float32 (the bounds are exact there), on 32-bit compare masks */
    const xent_v8f lo = {-104.0f, -104.0f, -104.0f, -104.0f, -104.0f, -104.0f, -104.0f, -104.0f};
    const xent_v8f hi = {89.0f, 89.0f, 89.0f, 89.0f, 89.0f, 89.0f, 89.0f, 89.0f};
    xf = xent_select(xf < lo, lo, xf);
    xf = xent_select(xf > hi, hi, xf);
    const xent_v8d x = __builtin_convertvector(xf, xent_v8d);
    const double shifter = 0x1.8p52;
    const xent_v8d t = x * 0x1.71547652b82fep0 + shifter;
    const xent_v8d n = t - shifter;
    const xent_v8d r = x - n * 0x1.62e42fefa39efp-1;
    xent_v8d p = r * (1.0 / 40320.0) + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    xent_v8l bits;
    memcpy(&bits, &t, sizeof bits);
    bits = (bits + 1023) << 52;
    xent_v8d scale;
    memcpy(&scale, &bits, sizeof scale);
    return __builtin_convertvector(p * scale, xent_v8f);
}

static void xent_exp_run(int64_t n, const float *x, float *y) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        xent_v8f v;
        memcpy(&v, x + i, sizeof v);
        v = xent_exp8(v);
        memcpy(y + i, &v, sizeof v);
    }
    if (i < n) { /* the last n - i < 8 values, padded: the same operations per lane */
        xent_v8f v = {0};
        memcpy(&v, x + i, (size_t)(n - i) * sizeof(float));
        v = xent_exp8(v);
        memcpy(y + i, &v, (size_t)(n - i) * sizeof(float));
    }
}

int dl_exp_f32(int64_t n, const float *x, float *y, int n_threads) {
    if (n < 0 || n_threads < 1) return DL_E_ARG;
    const int64_t chunk = 1 << 14, nc = (n + chunk - 1) / chunk;
    const int nt = n < DL_XENT_SERIAL ? 1 : n_threads;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t i = 0; i < nc; i++) {
        const int64_t i0 = i * chunk, m = n - i0 < chunk ? n - i0 : chunk;
        xent_exp_run(m, x + i0, y + i0);
    }
    return DL_OK;
}

/* np.argmax of one row of C values: the first maximum, or the first NaN if there is one. */
static int64_t xent_argmax(const float *row, int64_t C) {
    int64_t a = 0;
    float best = row[0];
    if (best != best) return 0;
    for (int64_t c = 1; c < C; c++) {
        const float v = row[c];
        if (v != v) return c;
        if (v > best) {
            best = v;
            a = c;
        }
    }
    return a;
}

/* One peer's B rows of C logits z (in place) with labels y (each in [0, C)); *hits (NULL: not
 * counted) gets the number of rows whose argmax (xent_argmax) is the label. */
static double xent_peer(int64_t B, int64_t C, float *z, const int64_t *y, int want_grad,
                        int64_t *hits) {
    double acc = 0.0;
    int64_t n_hit = 0;
    float zy[DL_XENT_ROWS];
    const float inv_b = (float)(1.0 / (double)B), fb = (float)B;
    for (int64_t b0 = 0; b0 < B; b0 += DL_XENT_ROWS) {
        const int64_t nb = B - b0 < DL_XENT_ROWS ? B - b0 : DL_XENT_ROWS;
        float *zb = z + b0 * C;
        for (int64_t b = 0; b < nb; b++) {
            float *row = zb + b * C;
            if (hits != NULL) n_hit += xent_argmax(row, C) == y[b0 + b];
            /* max without branches (maxss: v > m ? v : m), then NaN if any value is NaN, as
             * np.maximum would give */
            float m = row[0];
            int nan = row[0] != row[0];
            for (int64_t c = 1; c < C; c++) {
                m = row[c] > m ? row[c] : m;
                nan |= row[c] != row[c];
            }
            if (nan) m = NAN;
            for (int64_t c = 0; c < C; c++) row[c] -= m;
            zy[b] = row[y[b0 + b]];
        }
        xent_exp_run(nb * C, zb, zb);
        for (int64_t b = 0; b < nb; b++) {
            float *row = zb + b * C;
            float s = row[0];
            for (int64_t c = 1; c < C; c++) s += row[c];
            acc += log((double)s) - (double)zy[b];
            if (want_grad) {
                const float inv = 1.0f / (s * fb);
                for (int64_t c = 0; c < C; c++) row[c] *= inv;
                row[y[b0 + b]] -= inv_b;
            }
        }
    }
    if (hits != NULL) *hits = n_hit;
    return acc / (double)B;
}

int dl_softmax_xent_f32(int64_t P, int64_t B, int64_t C, float *z, const int64_t *y, int64_t y_ps,
                        double *loss, int64_t *correct, int want_grad, int n_threads) {
    if (P < 0 || B < 0 || C < 1 || (y_ps != 0 && y_ps != B) || n_threads < 1) return DL_E_ARG;
    for (int64_t i = 0; i < (y_ps ? P : 1) * B; i++)
        if (y[i] < 0 || y[i] >= C) return DL_E_RANGE;
    const int nt = (double)P * B * C < DL_XENT_SERIAL ? 1 : n_threads;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t p = 0; p < P; p++)
        loss[p] = xent_peer(B, C, z + p * B * C, y + p * y_ps, want_grad,
                            correct != NULL ? correct + p : NULL);
    return DL_OK;
}
