/* pool.c: 2x2 max pooling with stride 2 (decentlearn.nn.MaxPool2d), batched over images.
 *
 * Images are rows of a C-contiguous (n, h, ld) float32 array, of which the first w columns are
 * pooled (Conv2d hands over its "wide rows", ld >= w, without a copy). The forward pass writes the
 * maxima y (n, h/2, w/2) and, for the backward pass, one code byte per output: bit 0 "the right
 * column wins" (its column maximum is strictly greater), bits 1 and 2 "the lower row wins" in the
 * left and the right column (strictly greater). So ties go to the left column, then to the top row,
 * and NaN propagates as np.maximum does: max(a, b) = a if a >= b or a is NaN, else b.
 *
 * The backward pass computes exactly what the NumPy reference (decentlearn/_reference/pool.py)
 * computes, product by product, so the results match it bit for bit (non-finite dy included):
 * dcol1 = dy * right, dcol0 = dy - dcol1, dx[lower row] = dcol * lower, dx[upper row] = dcol -
 * dx[lower row]. Threads split the images; every element is computed by one thread with the
 * same operations whatever the thread count.
 */
#include <stdint.h>

#include "dl.h"

/* Work below this many input elements runs on one thread. */
#define DL_POOL_SERIAL (1 << 15)

static inline float pool_max(float a, float b) { return (a >= b || a != a) ? a : b; }

/* One row of windows: y[j] and (with code) code[j] for j < w2, from rows top and bot. */
static void pool_row(const float *restrict top, const float *restrict bot, int64_t w2,
                     float *restrict y, uint8_t *restrict code) {
    if (code == NULL) {
        for (int64_t j = 0; j < w2; j++)
            y[j] = pool_max(pool_max(top[2 * j], bot[2 * j]),
                            pool_max(top[2 * j + 1], bot[2 * j + 1]));
        return;
    }
    /* Codes in 32-bit lanes first, then narrowed: one loop mixing float and byte lanes does not
     * vectorize. */
    uint32_t wide[64];
    for (int64_t j0 = 0; j0 < w2; j0 += 64) {
        const int64_t m = w2 - j0 < 64 ? w2 - j0 : 64;
        const float *t = top + 2 * j0, *b = bot + 2 * j0;
        for (int64_t j = 0; j < m; j++) {
            const float t0 = t[2 * j], t1 = t[2 * j + 1], b0 = b[2 * j], b1 = b[2 * j + 1];
            const float c0 = pool_max(t0, b0), c1 = pool_max(t1, b1);
            y[j0 + j] = pool_max(c0, c1);
            wide[j] = (uint32_t)(c1 > c0) | (uint32_t)(b0 > t0) << 1 | (uint32_t)(b1 > t1) << 2;
        }
        for (int64_t j = 0; j < m; j++) code[j0 + j] = (uint8_t)wide[j];
    }
}

int dl_maxpool2_forward_f32(int64_t n, int64_t h, int64_t ld, int64_t w, const float *x, float *y,
                            uint8_t *code, int n_threads) {
    if (n < 0 || h < 0 || w < 0 || ld < w || (h | w) & 1 || n_threads < 1) return DL_E_ARG;
    const int64_t h2 = h / 2, w2 = w / 2, rows = n * h2;
    const int nt = (double)n * h * w < DL_POOL_SERIAL ? 1 : n_threads;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t r = 0; r < rows; r++) {
        const float *top = x + 2 * r * ld;
        pool_row(top, top + ld, w2, y + r * w2, code ? code + r * w2 : NULL);
    }
    return DL_OK;
}

int dl_maxpool2_backward_f32(int64_t n, int64_t h2, int64_t w2, const float *dy,
                             const uint8_t *code, float *dx, int n_threads) {
    if (n < 0 || h2 < 0 || w2 < 0 || n_threads < 1) return DL_E_ARG;
    const int64_t w = 2 * w2;
    const int nt = (double)n * h2 * w2 * 4 < DL_POOL_SERIAL ? 1 : n_threads;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t i = 0; i < n; i++) {
        for (int64_t r = 0; r < h2; r++) {
            const float *dyr = dy + (i * h2 + r) * w2;
            const uint8_t *cr = code + (i * h2 + r) * w2;
            float *up = dx + (i * 2 * h2 + 2 * r) * w, *lo = up + w;
            for (int64_t j = 0; j < w2; j++) {
                const unsigned c = cr[j];
                const float d1 = dyr[j] * (float)(c & 1u), d0 = dyr[j] - d1;
                const float l0 = d0 * (float)((c >> 1) & 1u), l1 = d1 * (float)((c >> 2) & 1u);
                lo[2 * j] = l0, lo[2 * j + 1] = l1;
                up[2 * j] = d0 - l0, up[2 * j + 1] = d1 - l1;
            }
        }
    }
    return DL_OK;
}
