/* optim.c: one SGD step (momentum, Nesterov, L2 weight decay, frozen row prefixes) over the whole
 * (P, dim) parameter matrix in one pass, the kernel of decentlearn.optim.SGD for float32.
 *
 * Per element, in float32 and in this order (PyTorch's torch.optim.SGD with dampening 0):
 *   g = grad + wd * p (wd != 0);  buf = mu * buf + g (mu != 0);  g = g + mu * buf (Nesterov) or
 *   g = buf (mu != 0);  p = p - lr * g.
 * Entries j < frozen[r] of row r (CoCoFL's frozen layers) keep p and get buf = 0. Elementwise, so
 * any split over threads gives the same bits (rows, and column blocks when the rows are fewer than
 * the threads); built with the portable flags only (no FMA
 * contraction), so decentlearn/_reference/optim.py reproduces it exactly.
 */
#include <stdint.h>

#include "dl.h"

#define DL_SGD_BLOCK (1 << 14) /* columns per item when the rows are fewer than the threads */

int dl_optim_sgd_f32(int64_t n_peers, int64_t dim, float *params, const float *grad, float *buf,
                     float lr, float momentum, float weight_decay, int nesterov,
                     const int64_t *frozen, int n_threads) {
    if (n_peers < 0 || dim < 0 || n_threads < 1) return DL_E_ARG;
    if (momentum != 0.0f && buf == NULL) return DL_E_ARG;
    if (frozen != NULL)
        for (int64_t r = 0; r < n_peers; r++)
            if (frozen[r] < 0 || frozen[r] > dim) return DL_E_ARG;
    const int nt = (double)n_peers * dim < (double)(1 << 16) ? 1 : n_threads;
    /* rows, or with fewer rows than threads (a few peers with large models) blocks of
     * DL_SGD_BLOCK columns of every row too: elementwise, so the same bits */
    const int64_t n_cb = n_peers >= nt ? 1 : dl_max_i64(1, dl_cdiv_i64(dim, DL_SGD_BLOCK));
    const int64_t cbw = n_cb == 1 ? dim : DL_SGD_BLOCK;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t it = 0; it < n_peers * n_cb; it++) {
        const int64_t r = it / n_cb, c0 = (it % n_cb) * cbw, c1 = dl_min_i64(dim, c0 + cbw);
        float *p = params + r * dim, *m = buf ? buf + r * dim : NULL;
        const float *g = grad + r * dim;
        const int64_t fr = frozen ? frozen[r] : 0;
        const int64_t j0 = fr > c0 ? dl_min_i64(fr, c1) : c0; /* first updated entry */
        if (m != NULL && momentum != 0.0f)
            for (int64_t j = c0; j < j0; j++) m[j] = 0.0f;
        if (momentum == 0.0f) {
            for (int64_t j = j0; j < c1; j++) {
                float gj = g[j];
                if (weight_decay != 0.0f) gj = gj + weight_decay * p[j];
                p[j] = p[j] - lr * gj;
            }
        } else {
            for (int64_t j = j0; j < c1; j++) {
                float gj = g[j];
                if (weight_decay != 0.0f) gj = gj + weight_decay * p[j];
                const float mj = momentum * m[j] + gj;
                m[j] = mj;
                const float u = nesterov ? gj + momentum * mj : mj;
                p[j] = p[j] - lr * u;
            }
        }
    }
    return DL_OK;
}
