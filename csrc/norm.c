/* norm.c: GroupNorm (decentlearn.nn.GroupNorm) forward and backward, batched over peers.
 *
 * Shapes: P peers, C channels in G groups of cg = C / G, B samples, images of H x W. The input x
 * and the output gradient dy are N = P*C*B images (row r of image i at i*H*ld + r*ld, ld >= W:
 * Conv2d's wide rows are read in place), peer-major, then channel, then sample. gamma, beta and
 * their gradients are (P, C); xc, y and dx are (N, H*W) contiguous; rstd is (P, G, B).
 *
 * Every sum over pixels is a "run sum" of one (channel, sample) image in float64: eight
 * accumulators, the element in column j going to accumulator j % 8, rows in order (and within a
 * row, columns in order), then the accumulators added in order 0..7; products (x * x, dy * xc)
 * are exact in float64. Sums over the channels of a group and over the samples are
 * float64, in order. Rounding to float32 happens where the NumPy reference
 * (decentlearn/_reference/norm.py) rounds, and it does the same operations in the same order, so
 * the results match it bit for bit:
 *
 * forward, per (p, g, b) with n = cg*H*W:
 *   mean = f32(sum_c run(x) / n), xc = x - mean (float32),
 *   rstd = f32(1 / sqrt(sum_c run(xc * xc) / n + eps)) (the squares exact in float64),
 *   y = xc * f32(gamma_c * rstd) + beta_c (float32, two roundings);
 * backward, with s_dy[c, b] = run(dy) and s_dyx[c, b] = run(dy * xc):
 *   g_beta[c] = f32(sum_b s_dy[c, b]), g_gamma[c] = f32(sum_b s_dyx[c, b] * rstd[b]),
 *   m1 = f32(sum_c s_dy[c, b] * gamma_c / n * rstd), m2 = f32(sum_c s_dyx * gamma_c / n * rstd^3),
 *   dx = (dy * f32(gamma_c * rstd) - xc * m2) - m1 (float32),
 * which is dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = gamma * dy.
 *
 * Threads split the (peer, group, sample) triples in the forward pass and the peers in the
 * backward one, or with fewer peers than threads its three stages' items (norm_backward_split);
 * every reduction is one thread's, in a fixed order, so results do not depend on the thread
 * count. The portable build (no FMA contraction) is used on every CPU.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "dl.h"

/* Work below this many elements runs on one thread. */
#define DL_NORM_SERIAL (1 << 15)

/* Run sums of one h x w image (rows ld apart): of x, and of x * z (z: h rows of w, contiguous). */
static double norm_lanes(const double a[8]) {
    double s = a[0];
    for (int l = 1; l < 8; l++) s += a[l];
    return s;
}
static double norm_run(const float *x, int64_t h, int64_t w, int64_t ld) {
    double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t r = 0; r < h; r++) {
        const float *row = x + r * ld;
        int64_t j = 0;
        for (; j + 8 <= w; j += 8)
            for (int l = 0; l < 8; l++) a[l] += (double)row[j + l];
        for (; j < w; j++) a[j & 7] += (double)row[j];
    }
    return norm_lanes(a);
}
static double norm_run_dot(const float *x, int64_t h, int64_t w, int64_t ld, const float *z) {
    double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t r = 0; r < h; r++) {
        const float *row = x + r * ld, *zr = z + r * w;
        int64_t j = 0;
        for (; j + 8 <= w; j += 8)
            for (int l = 0; l < 8; l++) a[l] += (double)row[j + l] * (double)zr[j + l];
        for (; j < w; j++) a[j & 7] += (double)row[j] * (double)zr[j];
    }
    return norm_lanes(a);
}

static int norm_check(int64_t P, int64_t C, int64_t G, int64_t B, int64_t H, int64_t W,
                      int64_t ld, int n_threads) {
    return P >= 0 && C >= 1 && G >= 1 && C % G == 0 && B >= 0 && H >= 0 && W >= 0 && ld >= W &&
           n_threads >= 1;
}

int dl_groupnorm_forward_f32(int64_t P, int64_t C, int64_t G, int64_t B, int64_t H, int64_t W,
                             const float *x, int64_t ld, const float *gamma, const float *beta,
                             float eps, float *xc, float *rstd, float *y, int n_threads) {
    if (!norm_check(P, C, G, B, H, W, ld, n_threads)) return DL_E_ARG;
    const int64_t cg = C / G, hw = H * W;
    const double n = (double)(cg * hw);
    const int nt = (double)P * C * B * hw < DL_NORM_SERIAL ? 1 : n_threads;
#pragma omp parallel for collapse(3) schedule(static) num_threads(nt)
    for (int64_t p = 0; p < P; p++) {
        for (int64_t g = 0; g < G; g++) {
            for (int64_t b = 0; b < B; b++) {
                double s = 0.0;
                for (int64_t c = g * cg; c < (g + 1) * cg; c++)
                    s += norm_run(x + ((p * C + c) * B + b) * H * ld, H, W, ld);
                const float mean = (float)(s / n);
                double v = 0.0;
                for (int64_t c = g * cg; c < (g + 1) * cg; c++) {
                    const float *xi = x + ((p * C + c) * B + b) * H * ld;
                    float *o = xc + ((p * C + c) * B + b) * hw;
                    for (int64_t r = 0; r < H; r++)
                        for (int64_t j = 0; j < W; j++) o[r * W + j] = xi[r * ld + j] - mean;
                    v += norm_run_dot(o, H, W, W, o);
                }
                const float rs = (float)(1.0 / sqrt(v / n + (double)eps));
                rstd[(p * G + g) * B + b] = rs;
                for (int64_t c = g * cg; c < (g + 1) * cg; c++) {
                    const float scale = gamma[p * C + c] * rs, shift = beta[p * C + c];
                    const float *o = xc + ((p * C + c) * B + b) * hw;
                    float *yo = y + ((p * C + c) * B + b) * hw;
                    for (int64_t i = 0; i < hw; i++) {
                        const float t = o[i] * scale;
                        yo[i] = t + shift;
                    }
                }
            }
        }
    }
    return DL_OK;
}

/* dx of sample b of group g of peer p from the sums s_dy, s_dyx of that peer ((C, B) each): the
 * group's m1, m2, then its channels' rows (the same operations in every thread split). */
static void norm_dx_group(int64_t p, int64_t g, int64_t b, int64_t C, int64_t G, int64_t B,
                          int64_t H, int64_t W, int64_t cg, double n, const float *dy, int64_t ld,
                          const float *xc, const float *rstd, const float *gamma,
                          const double *s_dy, const double *s_dyx, float *dx) {
    const int64_t hw = H * W;
    const double rs = (double)rstd[(p * G + g) * B + b];
    double a1 = 0.0, a2 = 0.0;
    for (int64_t c = g * cg; c < (g + 1) * cg; c++) {
        a1 += s_dy[c * B + b] * (double)gamma[p * C + c];
        a2 += s_dyx[c * B + b] * (double)gamma[p * C + c];
    }
    const float m1 = (float)(a1 / n * rs), m2 = (float)(a2 / n * rs * rs * rs);
    const float rsf = (float)rs;
    for (int64_t c = g * cg; c < (g + 1) * cg; c++) {
        const int64_t i = (p * C + c) * B + b;
        const float a = gamma[p * C + c] * rsf;
        const float *d = dy + i * H * ld, *o = xc + i * hw;
        float *out = dx + i * hw;
        for (int64_t r = 0; r < H; r++)
            for (int64_t j = 0; j < W; j++) {
                const float t1 = d[r * ld + j] * a, t2 = o[r * W + j] * m2;
                out[r * W + j] = (t1 - t2) - m1;
            }
    }
}

/* The backward with fewer peers than threads: three parallel passes over every peer's sums
 * (per (peer, channel, sample), then per (peer, channel), then per (peer, group, sample)), each
 * value computed as in the per-peer loop below. */
static int norm_backward_split(int64_t P, int64_t C, int64_t G, int64_t B, int64_t H, int64_t W,
                               const float *dy, int64_t ld, const float *xc, const float *rstd,
                               const float *gamma, float *g_gamma, float *g_beta, float *dx,
                               int nt) {
    const int64_t cg = C / G, hw = H * W, cb = C * B;
    const double n = (double)(cg * hw);
    double *sums = malloc((size_t)(2 * P * (cb > 0 ? cb : 1)) * sizeof(double));
    if (sums == NULL) return DL_E_NOMEM;
#pragma omp parallel num_threads(nt)
    {
#pragma omp for schedule(static)
        for (int64_t i = 0; i < P * cb; i++) { /* i = (p C + c) B + b */
            double *s = sums + 2 * (i / cb) * cb;
            s[i % cb] = norm_run(dy + i * H * ld, H, W, ld);
            s[cb + i % cb] = norm_run_dot(dy + i * H * ld, H, W, ld, xc + i * hw);
        }
#pragma omp for schedule(static)
        for (int64_t pc = 0; pc < P * C; pc++) {
            const int64_t p = pc / C, c = pc % C, g = c / cg;
            const double *s_dy = sums + 2 * p * cb, *s_dyx = s_dy + cb;
            double sb = 0.0, sg = 0.0;
            for (int64_t b = 0; b < B; b++) {
                sb += s_dy[c * B + b];
                sg += s_dyx[c * B + b] * (double)rstd[(p * G + g) * B + b];
            }
            g_beta[pc] = (float)sb;
            g_gamma[pc] = (float)sg;
        }
        if (dx != NULL) {
#pragma omp for schedule(static)
            for (int64_t t = 0; t < P * G * B; t++) {
                const int64_t p = t / (G * B), g = t / B % G, b = t % B;
                norm_dx_group(p, g, b, C, G, B, H, W, cg, n, dy, ld, xc, rstd, gamma,
                              sums + 2 * p * cb, sums + 2 * p * cb + cb, dx);
            }
        }
    }
    free(sums);
    return DL_OK;
}

int dl_groupnorm_backward_f32(int64_t P, int64_t C, int64_t G, int64_t B, int64_t H, int64_t W,
                              const float *dy, int64_t ld, const float *xc, const float *rstd,
                              const float *gamma, float *g_gamma, float *g_beta, float *dx,
                              int n_threads) {
    if (!norm_check(P, C, G, B, H, W, ld, n_threads)) return DL_E_ARG;
    const int64_t cg = C / G, hw = H * W;
    const double n = (double)(cg * hw);
    int status = DL_OK;
    const int nt = (double)P * C * B * hw < DL_NORM_SERIAL ? 1 : n_threads;
    if (P < nt)
        return norm_backward_split(P, C, G, B, H, W, dy, ld, xc, rstd, gamma, g_gamma, g_beta, dx,
                                   nt);
#pragma omp parallel num_threads(nt) reduction(min : status)
    {
        /* s_dy and s_dyx of one peer, (C, B) each */
        double *sums = malloc((size_t)(2 * C * (B > 0 ? B : 1)) * sizeof(double));
        if (sums == NULL) status = DL_E_NOMEM;
#pragma omp for schedule(static)
        for (int64_t p = 0; p < P; p++) {
            if (sums == NULL) continue;
            double *s_dy = sums, *s_dyx = sums + C * B;
            for (int64_t c = 0; c < C; c++)
                for (int64_t b = 0; b < B; b++) {
                    const int64_t i = (p * C + c) * B + b;
                    s_dy[c * B + b] = norm_run(dy + i * H * ld, H, W, ld);
                    s_dyx[c * B + b] = norm_run_dot(dy + i * H * ld, H, W, ld, xc + i * hw);
                }
            for (int64_t c = 0; c < C; c++) {
                const int64_t g = c / cg;
                double sb = 0.0, sg = 0.0;
                for (int64_t b = 0; b < B; b++) {
                    sb += s_dy[c * B + b];
                    sg += s_dyx[c * B + b] * (double)rstd[(p * G + g) * B + b];
                }
                g_beta[p * C + c] = (float)sb;
                g_gamma[p * C + c] = (float)sg;
            }
            if (dx == NULL) continue;
            for (int64_t g = 0; g < G; g++)
                for (int64_t b = 0; b < B; b++)
                    norm_dx_group(p, g, b, C, G, B, H, W, cg, n, dy, ld, xc, rstd, gamma, s_dy,
                                  s_dyx, dx);
        }
        free(sums);
    }
    return status;
}
