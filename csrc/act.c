/* act.c: ReLU (decentlearn.nn.ReLU) forward, in place, and backward, elementwise over all peers'
 * arrays. The forward is np.maximum(x, 0)'s result: x where x > 0 or NaN, else +0.0.
 *
 * dx[i] = dy[i] * (y[i] > 0 ? 1 : 0), with y the ReLU's output: the product NumPy computes for
 * np.multiply(dy, y > 0) (the boolean cast to 1.0 or 0.0), so the results match it bit for bit
 * (dy * 0 is -0 for negative dy and NaN for infinite dy, as there). dx must not overlap dy or y.
 * Threads split the elements (static schedule); each element is one operation.
 */
#include <stdint.h>
#include <string.h>

#include "dl.h"

/* Work below this many elements runs on one thread. */
#define DL_ACT_SERIAL (1 << 16)

int dl_relu_backward_f32(int64_t n, const float *dy, const float *y, float *dx, int n_threads) {
    if (n < 0 || n_threads < 1) return DL_E_ARG;
    /* The factor 1.0f or 0.0f is made from y's bits (y > 0: bits in [1, 0x7f800000], +inf
     * included, NaN and -0 not), so the compiler multiplies unconditionally and vectorizes; with
     * `y > 0 ? 1.0f : 0.0f` it branched around the product (a mispredicted branch per element). */
#pragma omp parallel for schedule(static) num_threads(n < DL_ACT_SERIAL ? 1 : n_threads)
    for (int64_t i = 0; i < n; i++) {
        uint32_t yb, mb;
        memcpy(&yb, y + i, sizeof yb);
        mb = (uint32_t)-(int32_t)(yb - 1u < 0x7f800000u) & 0x3f800000u; /* 1.0f or +0.0f */
        float m;
        memcpy(&m, &mb, sizeof m);
        dx[i] = dy[i] * m;
    }
    return DL_OK;
}

/* x[i] = max(x[i], 0) in place, as np.maximum(x, 0): NaN stays, -0.0 and negatives become +0.0. */
int dl_relu_forward_f32(int64_t n, float *x, int n_threads) {
    if (n < 0 || n_threads < 1) return DL_E_ARG;
#pragma omp parallel for schedule(static) num_threads(n < DL_ACT_SERIAL ? 1 : n_threads)
    for (int64_t i = 0; i < n; i++) x[i] = x[i] <= 0.0f ? 0.0f : x[i];
    return DL_OK;
}
