/* conv.c: im2col ("unfold") and col2im ("fold") of decentlearn.nn.Conv2d, batched over peers.
 *
 * Conv2d works on "wide rows" (see its docstring): each image is zero-padded to Hp x Wp, flattened
 * and followed by k - 1 zeros, so an input is xp (G, C, B, L) with L >= Hp*Wp + k - 1 and G the
 * peers (1 when all peers share the input). Row (c, i, j) of the im2col matrix of samples
 * [b0, b1) is, for each sample b, the run of `run` = Ho*Wp elements of image (c, b) starting at
 * offset i*Wp + j: unfold copies these runs into the first C*k*k rows of cols (G, R, ld), sample b
 * at column (b - b0)*run; fold adds them back into dxp (G, C, B, L). Stride 1; padding is done by
 * the caller when it builds xp, so every run is in bounds and needs no test per element.
 *
 * Threads split (peer, channel, image) triples. Unfold only copies; fold gives each output image
 * to one thread, which adds the k*k runs in (i, j) order, so every element of dxp receives its
 * terms in the same order as the NumPy reference (decentlearn/_reference/conv.py) whatever the
 * thread count, and the results match it bit for bit.
 */
#include <stdint.h>
#include <string.h>

#include "dl.h"

/* Work below this many elements runs on one thread. */
#define DL_CONV_SERIAL (1 << 15)

static int conv_check(int64_t n_groups, int64_t channels, int64_t batch, int64_t len, int64_t b0,
                      int64_t b1, int64_t k, int64_t wp, int64_t run, int64_t rows, int64_t ld,
                      int n_threads) {
    if (n_groups < 0 || channels < 0 || batch < 0 || len < 0 || k < 1 || wp < k || run < 0 ||
        n_threads < 1)
        return DL_E_ARG;
    if (b0 < 0 || b1 < b0 || b1 > batch) return DL_E_ARG;
    if ((k - 1) * wp + (k - 1) + run > len) return DL_E_ARG;
    if (rows < channels * k * k || ld < (b1 - b0) * run) return DL_E_SPACE;
    return DL_OK;
}

/* cols[g, (c*k + i)*k + j, (b - b0)*run + t] = xp[g, c, b, i*wp + j + t] for t < run, b in
 * [b0, b1); xp (G, C, B, len) and cols (G, rows, ld) C-contiguous, not overlapping; rows of cols
 * past C*k*k and columns past (b1 - b0)*run are left alone. */
#define DL_CONV_UNFOLD(NAME, T)                                                                   \
    int NAME(int64_t n_groups, int64_t channels, int64_t batch, int64_t len, int64_t b0,          \
             int64_t b1, int64_t k, int64_t wp, int64_t run, const T *xp, T *cols, int64_t rows,  \
             int64_t ld, int n_threads) {                                                         \
        int st = conv_check(n_groups, channels, batch, len, b0, b1, k, wp, run, rows, ld,         \
                            n_threads);                                                           \
        if (st != DL_OK) return st;                                                               \
        const int64_t nb = b1 - b0, n_task = n_groups * channels * nb;                            \
        const int nt = (double)n_task * k * k * run < DL_CONV_SERIAL ? 1 : n_threads;             \
        _Pragma("omp parallel for schedule(static) num_threads(nt)")                              \
        for (int64_t task = 0; task < n_task; task++) {                                           \
            const int64_t bi = task % nb, gc = task / nb, c = gc % channels, g = gc / channels;   \
            const T *src = xp + (gc * batch + b0 + bi) * len;                                     \
            T *dst = cols + (g * rows + c * k * k) * ld + bi * run;                               \
            for (int64_t i = 0; i < k; i++)                                                       \
                for (int64_t j = 0; j < k; j++)                                                   \
                    memcpy(dst + (i * k + j) * ld, src + i * wp + j, (size_t)run * sizeof(T));    \
        }                                                                                         \
        return DL_OK;                                                                             \
    }

DL_CONV_UNFOLD(dl_conv_unfold_f32, float)
DL_CONV_UNFOLD(dl_conv_unfold_s8, int8_t)

/* dxp[g, c, b, i*wp + j + t] += dcols[g, (c*k + i)*k + j, (b - b0)*run + t] for t < run, b in
 * [b0, b1), adding the (i, j) runs in order; dcols (G, rows, ld) and dxp (G, C, B, len)
 * C-contiguous float32, not overlapping. */
int dl_conv_fold_f32(int64_t n_groups, int64_t channels, int64_t batch, int64_t len, int64_t b0,
                     int64_t b1, int64_t k, int64_t wp, int64_t run, const float *dcols,
                     int64_t rows, int64_t ld, float *dxp, int n_threads) {
    int st = conv_check(n_groups, channels, batch, len, b0, b1, k, wp, run, rows, ld, n_threads);
    if (st != DL_OK) return st;
    const int64_t nb = b1 - b0, n_task = n_groups * channels * nb;
    const int nt = (double)n_task * k * k * run < DL_CONV_SERIAL ? 1 : n_threads;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t task = 0; task < n_task; task++) {
        const int64_t bi = task % nb, gc = task / nb, c = gc % channels, g = gc / channels;
        float *dst = dxp + (gc * batch + b0 + bi) * len;
        const float *src = dcols + (g * rows + c * k * k) * ld + bi * run;
        for (int64_t i = 0; i < k; i++)
            for (int64_t j = 0; j < k; j++) {
                float *d = dst + i * wp + j;
                const float *s = src + (i * k + j) * ld;
                for (int64_t t = 0; t < run; t++) d[t] += s[t];
            }
    }
    return DL_OK;
}

/* Wide rows from images: dst image n (a row of len elements) gets src image n (h rows of w
 * values, row r at src + n * h * ld + r * ld) at offset (pad + r) * wp + pad, row by row, and zeros
 * everywhere else (the padding, the columns past w + pad of each wide row, the tail). Threads
 * split the images; only copies, so any split gives the same bits. */
int dl_conv_pad_f32(int64_t n, int64_t h, int64_t ld, int64_t w, const float *src, int64_t pad,
                    int64_t wp, int64_t len, float *dst, int n_threads) {
    if (n < 0 || h < 0 || w < 0 || ld < w || pad < 0 || pad > INT32_MAX || h > INT32_MAX ||
        wp > INT32_MAX || wp < w + 2 * pad || (h + 2 * pad) * wp > len || n_threads < 1)
        return DL_E_ARG; /* (the bounds keep (h + 2*pad)*wp inside int64) */
    const int nt = (double)n * len < DL_CONV_SERIAL ? 1 : n_threads;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t i = 0; i < n; i++) {
        const float *s = src + i * h * ld;
        float *d = dst + i * len;
        int64_t at = 0; /* elements of the wide row written so far */
        for (int64_t r = 0; r < h; r++) {
            const int64_t start = (pad + r) * wp + pad;
            memset(d + at, 0, (size_t)(start - at) * sizeof(float));
            memcpy(d + start, s + r * ld, (size_t)w * sizeof(float));
            at = start + w;
        }
        memset(d + at, 0, (size_t)(len - at) * sizeof(float));
    }
    return DL_OK;
}

/* The inverse of dl_conv_pad_f32: dst image n (h rows of w, contiguous) = the h x w interior of
 * wide row n of src (len elements), row r at (pad + r) * wp + pad. Copies only. */
int dl_conv_crop_f32(int64_t n, int64_t len, const float *src, int64_t pad, int64_t wp, int64_t h,
                     int64_t w, float *dst, int n_threads) {
    if (n < 0 || h < 0 || w < 0 || pad < 0 || pad > INT32_MAX || h > INT32_MAX ||
        wp > INT32_MAX || wp < w + 2 * pad || (h + 2 * pad) * wp > len || n_threads < 1)
        return DL_E_ARG;
    const int nt = (double)n * h * w < DL_CONV_SERIAL ? 1 : n_threads;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t i = 0; i < n; i++)
        for (int64_t r = 0; r < h; r++)
            memcpy(dst + (i * h + r) * w, src + i * len + (pad + r) * wp + pad,
                   (size_t)w * sizeof(float));
    return DL_OK;
}
