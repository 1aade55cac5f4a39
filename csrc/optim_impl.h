/* optim_impl.h: the elementwise spans of the optimizer steps (csrc/optim.c), compiled once per ISA.
 *
 * Included by optim.c (baseline flags), optim_avx2.c and optim_avx512.c (their own -m flags), each
 * defining DL_SUFFIX. Every function is built without FMA contraction (the ISA files' flags allow
 * it; the optimize attribute turns it off here), so each multiply and add rounds on its own as in
 * NumPy and every ISA path gives decentlearn/_reference/optim.py's bits: sqrt and division are
 * correctly rounded on every path, and the float64 sums of squares keep their 16 lanes in order
 * (two AVX-512 registers, four AVX2 ones, eight SSE2 ones; the same additions). The wider paths
 * do the divisions and square roots of Adam and LAMB several lanes at a time, which the portable
 * build's 4-wide SSE2 cannot.
 */
#include <math.h>
#include <stdint.h>

#include "dl.h"

#ifndef DL_SUFFIX
#error "define DL_SUFFIX before including optim_impl.h"
#endif
#define DL_OPT_CAT2(a, b) a##_##b
#define DL_OPT_CAT(a, b) DL_OPT_CAT2(a, b)
#define DL_OPT_NOFMA __attribute__((optimize("fp-contract=off")))

/* Adam on n entries: g = p l2 + grad (use_l2); m = m b1 + g (1 - b1); v = v b2 + g g (1 - b2);
 * d = (sqrt(v) / root2 + eps) ; d = m / d * lr_t; d = d + p decay (use_decay); p = p - d. */
DL_OPT_NOFMA void DL_OPT_CAT(dl_optim_adam_span, DL_SUFFIX)(int64_t n, float *restrict p,
                                                            const float *restrict g,
                                                            float *restrict m, float *restrict v,
                                                            const dl_optim_coef_t *c, float lr_t,
                                                            float root2) {
    const float b1 = c->b1, ob1 = c->ob1, b2 = c->b2, ob2 = c->ob2, eps = c->eps, l2 = c->wd;
    const float decay = c->decay;
    const int use_l2 = c->use_wd, use_decay = c->use_decay;
    for (int64_t j = 0; j < n; j++) {
        float gj = g[j];
        if (use_l2) gj = p[j] * l2 + gj;
        const float mj = m[j] * b1 + gj * ob1;
        const float vj = v[j] * b2 + gj * gj * ob2;
        m[j] = mj;
        v[j] = vj;
        float d = sqrtf(vj) / root2 + eps;
        d = mj / d * lr_t;
        if (use_decay) d = d + p[j] * decay;
        p[j] = p[j] - d;
    }
}

/* LAMB's direction on n entries: m, v as Adam (raw gradient); u = m / (sqrt(v / bias2) + eps)
 * / bias1, plus p wd (use_wd). */
DL_OPT_NOFMA void DL_OPT_CAT(dl_optim_lamb_span, DL_SUFFIX)(int64_t n, const float *restrict p,
                                                            const float *restrict g,
                                                            float *restrict m, float *restrict v,
                                                            float *restrict u,
                                                            const dl_optim_coef_t *c, float bias1,
                                                            float bias2) {
    const float b1 = c->b1, ob1 = c->ob1, b2 = c->b2, ob2 = c->ob2, eps = c->eps, wd = c->wd;
    const int use_wd = c->use_wd;
    for (int64_t j = 0; j < n; j++) {
        const float gj = g[j];
        const float mj = m[j] * b1 + gj * ob1;
        const float vj = v[j] * b2 + gj * gj * ob2;
        m[j] = mj;
        v[j] = vj;
        float d = sqrtf(vj / bias2) + eps;
        d = mj / d / bias1;
        if (use_wd) d = d + p[j] * wd;
        u[j] = d;
    }
}

/* sum_j x[j]^2 in float64: x[j] into lane j mod 16 in order, the lanes added in order. */
DL_OPT_NOFMA double DL_OPT_CAT(dl_optim_sumsq, DL_SUFFIX)(const float *x, int64_t n) {
    double acc[16] = {0};
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int l = 0; l < 16; l++) {
            const double t = x[j + l];
            acc[l] += t * t;
        }
    for (int l = 0; j + l < n; l++) {
        const double t = x[j + l];
        acc[l] += t * t;
    }
    double s = 0.0;
    for (int l = 0; l < 16; l++) s += acc[l];
    return s;
}
