/* optim.c: the optimizers' steps over the whole (P, dim) float32 parameter matrix, the kernels of
 * decentlearn.optim for float32: SGD (momentum, Nesterov, L2 weight decay) and Adam/AdamW in one
 * pass, LARS and LAMB in two (their per-peer, per-layer trust ratios need the layers' norms).
 *
 * SGD, per element, in float32 and in this order (PyTorch's torch.optim.SGD with dampening 0):
 *   g = grad + wd * p (wd != 0);  buf = mu * buf + g (mu != 0);  g = g + mu * buf (Nesterov) or
 *   g = buf (mu != 0);  p = p - lr * g.
 * Adam/AdamW, LARS and LAMB do the float32 operations of their NumPy forms (decentlearn/optim) in
 * the same order, the per-row bias corrections coming in as float64 and rounded to float32 as
 * NumPy's astype does. The layers' sums of squares (LARS, LAMB) are float64 in a fixed order:
 * every layer cut into chunks of DL_TRUST_CHUNK columns, a chunk's squares summed in 16 lanes
 * (column c0 + j into lane j mod 16, in column order) and its lanes added in lane order, the
 * chunks of a layer in chunk order. Entries j < frozen[r] of row r (CoCoFL's frozen layers) keep
 * p and get a zero optimizer state. Elementwise or per fixed chunk, so any split over threads
 * gives the same bits (rows, and column blocks when the rows are fewer than the threads). The
 * elementwise spans of Adam and LAMB and the sums of squares are optim_impl.h's, built per ISA
 * (this file holds the portable build) without FMA contraction, like everything here, so
 * decentlearn/_reference/optim.py reproduces every kernel exactly on every path.
 */
#define DL_SUFFIX generic
#include "optim_impl.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

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

/* Rows, or with fewer rows than threads blocks of DL_SGD_BLOCK columns of every row too. */
static int64_t column_blocks(int64_t n_peers, int64_t dim, int nt) {
    return n_peers >= nt ? 1 : dl_max_i64(1, dl_cdiv_i64(dim, DL_SGD_BLOCK));
}

static int frozen_ok(int64_t n_peers, int64_t dim, const int64_t *frozen) {
    for (int64_t r = 0; frozen != NULL && r < n_peers; r++)
        if (frozen[r] < 0 || frozen[r] > dim) return 0;
    return 1;
}

/* The float32 constants of coef[7] = b1, 1 - b1, b2, 1 - b2, eps, wd, decay. */
static dl_optim_coef_t optim_coef(const double *coef) {
    dl_optim_coef_t c = {(float)coef[0], (float)coef[1], (float)coef[2], (float)coef[3],
                         (float)coef[4], (float)coef[5], (float)coef[6], coef[5] != 0.0,
                         coef[6] != 0.0};
    return c;
}

int dl_optim_adam_f32(int64_t n_peers, int64_t dim, float *params, const float *grad, float *m,
                      float *v, const double *rowc, const double *coef, const int64_t *frozen,
                      int n_threads) {
    if (n_peers < 0 || dim < 0 || n_threads < 1 || !frozen_ok(n_peers, dim, frozen))
        return DL_E_ARG;
    const dl_optim_coef_t oc = optim_coef(coef);
    const dl_optim_adam_span_fn span = dl_dispatch()->optim_adam_span;
    const int nt = (double)n_peers * dim < (double)(1 << 16) ? 1 : n_threads;
    const int64_t n_cb = column_blocks(n_peers, dim, nt);
    const int64_t cbw = n_cb == 1 ? dim : DL_SGD_BLOCK;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t it = 0; it < n_peers * n_cb; it++) {
        const int64_t r = it / n_cb, c0 = (it % n_cb) * cbw, c1 = dl_min_i64(dim, c0 + cbw);
        const int64_t fr = frozen ? frozen[r] : 0;
        const int64_t j0 = fr > c0 ? dl_min_i64(fr, c1) : c0; /* first updated entry */
        float *mr = m + r * dim, *vr = v + r * dim;
        for (int64_t j = c0; j < j0; j++) mr[j] = vr[j] = 0.0f;
        span(c1 - j0, params + r * dim + j0, grad + r * dim + j0, mr + j0, vr + j0, &oc,
             (float)rowc[2 * r], (float)rowc[2 * r + 1]);
    }
    return DL_OK;
}

#define DL_TRUST_CHUNK 4096 /* columns per chunk of a layer's sum of squares */

/* The chunks of a row: layer s = [bounds[s], bounds[s + 1]) cut every DL_TRUST_CHUNK columns;
 * chunk k starts at start[k] and belongs to layer seg[k]. NULL when bounds do not tile [0, dim)
 * (*n = -1) or on allocation failure (*n = 0). */
static int64_t *trust_chunks(const int64_t *bounds, int64_t n_seg, int64_t dim, int64_t *n) {
    *n = -1;
    if (n_seg < 0 || (n_seg == 0 && dim != 0) || (n_seg > 0 && bounds[0] != 0) ||
        (n_seg > 0 && bounds[n_seg] != dim))
        return NULL;
    int64_t count = 0;
    for (int64_t s = 0; s < n_seg; s++) {
        if (bounds[s + 1] <= bounds[s]) return NULL;
        count += dl_cdiv_i64(bounds[s + 1] - bounds[s], DL_TRUST_CHUNK);
    }
    *n = 0;
    int64_t *ck = (int64_t *)malloc(((size_t)count * 2 + 1) * sizeof(int64_t));
    if (ck == NULL) return NULL;
    int64_t k = 0;
    for (int64_t s = 0; s < n_seg; s++)
        for (int64_t c = bounds[s]; c < bounds[s + 1]; c += DL_TRUST_CHUNK, k++) {
            ck[2 * k] = c;
            ck[2 * k + 1] = s;
        }
    *n = count;
    return ck;
}

/* The work of a trust-ratio step: the chunks of a row, their sums of squares per (row, chunk)
 * (two values each), and the (row, layer) scales. */
typedef struct {
    int64_t n_ck, *ck;
    double *part;
    float *scale;
} trust_plan_t;

static void trust_plan_free(trust_plan_t *t) {
    free(t->ck), free(t->part), free(t->scale);
}

static int trust_plan(trust_plan_t *t, int64_t n_peers, int64_t dim, const int64_t *bounds,
                      int64_t n_seg) {
    t->ck = trust_chunks(bounds, n_seg, dim, &t->n_ck);
    t->part = NULL, t->scale = NULL;
    if (t->ck == NULL) return t->n_ck < 0 ? DL_E_ARG : DL_E_NOMEM;
    t->part = (double *)malloc(((size_t)(n_peers * t->n_ck) * 2 + 1) * sizeof(double));
    t->scale = (float *)malloc(((size_t)(n_peers * n_seg) + 1) * sizeof(float));
    if (t->part == NULL || t->scale == NULL) {
        trust_plan_free(t);
        return DL_E_NOMEM;
    }
    return DL_OK;
}

/* Item it of a pass over (row, chunk): its row, layer and columns [*c0, *c1). */
static inline void trust_item(const trust_plan_t *t, const int64_t *bounds, int64_t it,
                              int64_t *r, int64_t *s, int64_t *c0, int64_t *c1) {
    const int64_t k = it % t->n_ck;
    *r = it / t->n_ck, *s = t->ck[2 * k + 1], *c0 = t->ck[2 * k];
    *c1 = dl_min_i64(bounds[*s + 1], *c0 + DL_TRUST_CHUNK);
}

/* scale[r, s] = (float)(lr * ratio) from the chunks' sums part[(r, k), 0..1] (x and y of the
 * layer): ratio = num(||x||, ||y||) when both norms are > 0, else 1. */
typedef double (*trust_fn)(double xn, double yn, const double *coef);

static void trust_scales(int64_t r, int64_t n_seg, int64_t n_ck, const int64_t *ck,
                         const double *part, float *scale, double lr, trust_fn ratio,
                         const double *coef) {
    int64_t k = 0;
    for (int64_t s = 0; s < n_seg; s++) {
        double xs = 0.0, ys = 0.0;
        for (; k < n_ck && ck[2 * k + 1] == s; k++) {
            xs += part[2 * (r * n_ck + k)];
            ys += part[2 * (r * n_ck + k) + 1];
        }
        const double xn = sqrt(xs), yn = sqrt(ys);
        scale[r * n_seg + s] = (float)(lr * (xn > 0.0 && yn > 0.0 ? ratio(xn, yn, coef) : 1.0));
    }
}

static double lamb_ratio(double wn, double un, const double *coef) {
    (void)coef;
    return wn / un;
}

static double lars_ratio(double wn, double gn, const double *coef) {
    return coef[3] * wn / (gn + coef[2] * wn + coef[4]); /* eta ||x|| / (||g|| + wd ||x|| + eps) */
}

int dl_optim_lamb_f32(int64_t n_peers, int64_t dim, float *params, const float *grad, float *m,
                      float *v, float *work, const double *rowc, const double *coef,
                      const int64_t *bounds, int64_t n_seg, const int64_t *frozen, int n_threads) {
    if (n_peers < 0 || dim < 0 || n_threads < 1 || !frozen_ok(n_peers, dim, frozen))
        return DL_E_ARG;
    trust_plan_t t;
    const int st = trust_plan(&t, n_peers, dim, bounds, n_seg);
    if (st != DL_OK) return st;
    const dl_optim_coef_t oc = optim_coef(coef); /* its decay (coef[6], lr) is unused */
    const double lr = coef[6];
    const dl_dispatch_t *d = dl_dispatch();
    const int nt = (double)n_peers * dim < (double)(1 << 16) ? 1 : n_threads;
    const int64_t n_it = n_peers * t.n_ck;
#pragma omp parallel num_threads(nt)
    {
        /* 1. m, v and the direction u (in work) with the layers' sums of squares of p and u */
#pragma omp for schedule(static)
        for (int64_t it = 0; it < n_it; it++) {
            int64_t r, s, c0, c1;
            trust_item(&t, bounds, it, &r, &s, &c0, &c1);
            const float *p = params + r * dim;
            float *mr = m + r * dim, *vr = v + r * dim, *u = work + r * dim;
            const int64_t fr = frozen ? frozen[r] : 0;
            const int64_t j0 = fr > c0 ? dl_min_i64(fr, c1) : c0;
            for (int64_t j = c0; j < j0; j++) mr[j] = vr[j] = u[j] = 0.0f;
            d->optim_lamb_span(c1 - j0, p + j0, grad + r * dim + j0, mr + j0, vr + j0, u + j0,
                               &oc, (float)rowc[2 * r], (float)rowc[2 * r + 1]);
            t.part[2 * it] = d->optim_sumsq(p + c0, c1 - c0);
            t.part[2 * it + 1] = d->optim_sumsq(u + c0, c1 - c0);
        }
        /* 2. per peer and layer lr ||p|| / ||u|| */
#pragma omp for schedule(static)
        for (int64_t r = 0; r < n_peers; r++)
            trust_scales(r, n_seg, t.n_ck, t.ck, t.part, t.scale, lr, lamb_ratio, coef);
        /* 3. p -= scale u */
#pragma omp for schedule(static)
        for (int64_t it = 0; it < n_it; it++) {
            int64_t r, s, c0, c1;
            trust_item(&t, bounds, it, &r, &s, &c0, &c1);
            float *restrict p = params + r * dim;
            const float *restrict u = work + r * dim;
            const float sc = t.scale[r * n_seg + s];
            const int64_t fr = frozen ? frozen[r] : 0;
            for (int64_t j = fr > c0 ? dl_min_i64(fr, c1) : c0; j < c1; j++) p[j] = p[j] - u[j] * sc;
        }
    }
    trust_plan_free(&t);
    return DL_OK;
}

int dl_optim_lars_f32(int64_t n_peers, int64_t dim, float *params, const float *grad, float *buf,
                      const double *coef, const int64_t *bounds, int64_t n_seg,
                      const int64_t *frozen, int n_threads) {
    if (n_peers < 0 || dim < 0 || n_threads < 1 || !frozen_ok(n_peers, dim, frozen))
        return DL_E_ARG;
    const float mu = (float)coef[1], wd = (float)coef[2];
    const int use_mu = coef[1] != 0.0; /* the guards test the float64 values, as NumPy */
    if (use_mu && buf == NULL) return DL_E_ARG;
    const dl_optim_sumsq_fn sumsq = dl_dispatch()->optim_sumsq;
    trust_plan_t t;
    const int st = trust_plan(&t, n_peers, dim, bounds, n_seg);
    if (st != DL_OK) return st;
    const int nt = (double)n_peers * dim < (double)(1 << 16) ? 1 : n_threads;
    const int64_t n_it = n_peers * t.n_ck;
#pragma omp parallel num_threads(nt)
    {
        /* 1. the layers' sums of squares of p and g */
#pragma omp for schedule(static)
        for (int64_t it = 0; it < n_it; it++) {
            int64_t r, s, c0, c1;
            trust_item(&t, bounds, it, &r, &s, &c0, &c1);
            t.part[2 * it] = sumsq(params + r * dim + c0, c1 - c0);
            t.part[2 * it + 1] = sumsq(grad + r * dim + c0, c1 - c0);
        }
        /* 2. per peer and layer lr eta ||p|| / (||g|| + wd ||p|| + eps) */
#pragma omp for schedule(static)
        for (int64_t r = 0; r < n_peers; r++)
            trust_scales(r, n_seg, t.n_ck, t.ck, t.part, t.scale, coef[0], lars_ratio, coef);
        /* 3. buf = mu buf + scale (g + wd p); p -= buf */
#pragma omp for schedule(static)
        for (int64_t it = 0; it < n_it; it++) {
            int64_t r, s, c0, c1;
            trust_item(&t, bounds, it, &r, &s, &c0, &c1);
            float *restrict p = params + r * dim, *restrict b = buf ? buf + r * dim : NULL;
            const float *restrict g = grad + r * dim;
            const float sc = t.scale[r * n_seg + s];
            const int64_t fr = frozen ? frozen[r] : 0;
            const int64_t j0 = fr > c0 ? dl_min_i64(fr, c1) : c0;
            if (use_mu)
                for (int64_t j = c0; j < j0; j++) b[j] = 0.0f;
            for (int64_t j = j0; j < c1; j++) {
                float d = (p[j] * wd + g[j]) * sc;
                if (use_mu) {
                    d = b[j] * mu + d;
                    b[j] = d;
                }
                p[j] = p[j] - d;
            }
        }
    }
    trust_plan_free(&t);
    return DL_OK;
}
