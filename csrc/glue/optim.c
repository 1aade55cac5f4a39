/* optim.c: glue of the optimizers' steps (csrc/optim.c): sgd_step, adam_step, lamb_step and
 * lars_step, one glue_op_t row each updating params (and the optimizer state) in place. decentlearn/ops/optim.py is the Python side.
 */
#include "glue.h"

/* sgd_step is a table row: one SGD step in place on params (and buf); all (P, dim)
 * C-contiguous float32, frozen (P,) int64 prefix lengths in [0, dim]; buf needed when
 * momentum != 0. */
static int check_sgd_overlap(glue_call_t *c) { /* before the generic check: its own messages */
    PyArrayObject *params = c->arr[0], *grad = c->arr[1], *buf = c->arr[2];
    if (overlaps(params, grad)) {
        PyErr_SetString(PyExc_ValueError, "sgd_step: grad must not overlap params");
        return -1;
    }
    if (buf != NULL && (overlaps(buf, params) || overlaps(buf, grad))) {
        PyErr_SetString(PyExc_ValueError, "sgd_step: buf must not overlap params or grad");
        return -1;
    }
    return 0;
}
static int post_sgd_step(glue_call_t *c) {
    if (c->arr[2] == NULL && c->flt[1] != 0.0f) {
        PyErr_SetString(PyExc_ValueError, "sgd_step: buf is required when momentum != 0");
        return -1;
    }
    const int64_t *fz = G_DATA_OR_NULL(c, 3);
    for (npy_intp r = 0; fz != NULL && r < c->rows; r++)
        if (fz[r] < 0 || fz[r] > c->dim) {
            PyErr_Format(PyExc_ValueError, "sgd_step: frozen must hold prefix lengths in [0, %zd], "
                         "got %lld", (Py_ssize_t)c->dim, (long long)fz[r]);
            return -1;
        }
    return 0;
}
static int call_sgd_step(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_optim_sgd_f32(c->rows, c->dim, G_DATA(c, 0), G_DATA(c, 1), G_DATA_OR_NULL(c, 2),
                            c->flt[0], c->flt[1], c->flt[2], c->ints[0], G_DATA_OR_NULL(c, 3),
                            c->n_threads);
}

/* The float64 coefficients (per row: rowc (P, 2); per call: coef) of adam/lamb/lars. */
static int check_coef(glue_call_t *c, int slot, npy_intp want) {
    if (PyArray_DIM(c->arr[slot], 0) != want) {
        PyErr_Format(PyExc_ValueError, "%s: coef must hold %zd values, got %zd", c->fn,
                     (Py_ssize_t)want, (Py_ssize_t)PyArray_DIM(c->arr[slot], 0));
        return -1;
    }
    c->ext[0] = 2;
    return 0;
}
/* frozen (P,) prefix lengths in [0, dim] (slot i, optional). */
static int check_frozen(glue_call_t *c, int slot) {
    const int64_t *fz = G_DATA_OR_NULL(c, slot);
    for (npy_intp r = 0; fz != NULL && r < c->rows; r++)
        if (fz[r] < 0 || fz[r] > c->dim) {
            PyErr_Format(PyExc_ValueError, "%s: frozen must hold prefix lengths in [0, %zd], got %lld",
                         c->fn, (Py_ssize_t)c->dim, (long long)fz[r]);
            return -1;
        }
    return 0;
}
/* bounds: 0 = b[0] < b[1] < ... < b[S] = dim (the layers' column ranges). */
static int check_bounds(glue_call_t *c, int slot) {
    const npy_intp n = PyArray_DIM(c->arr[slot], 0);
    const int64_t *b = G_DATA(c, slot);
    int ok = n >= 1 && b[0] == 0 && b[n - 1] == c->dim && (n >= 2 || c->dim == 0);
    for (npy_intp i = 1; ok && i < n; i++) ok = b[i] > b[i - 1];
    if (!ok) {
        PyErr_Format(PyExc_ValueError, "%s: bounds must rise strictly from 0 to dim = %zd",
                     c->fn, (Py_ssize_t)c->dim);
        return -1;
    }
    return 0;
}

static int check_adam(glue_call_t *c) { return check_coef(c, 5, 7); }
static int post_adam(glue_call_t *c) { return check_frozen(c, 6); }
static int call_adam(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_optim_adam_f32(c->rows, c->dim, G_DATA(c, 0), G_DATA(c, 1), G_DATA(c, 2),
                             G_DATA(c, 3), G_DATA(c, 4), G_DATA(c, 5), G_DATA_OR_NULL(c, 6),
                             c->n_threads);
}
static int check_lamb(glue_call_t *c) { return check_coef(c, 6, 7); }
static int post_lamb(glue_call_t *c) { return check_bounds(c, 7) || check_frozen(c, 8); }
static int call_lamb(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_optim_lamb_f32(c->rows, c->dim, G_DATA(c, 0), G_DATA(c, 1), G_DATA(c, 2),
                             G_DATA(c, 3), G_DATA(c, 4), G_DATA(c, 5), G_DATA(c, 6), G_DATA(c, 7),
                             PyArray_DIM(c->arr[7], 0) - 1, G_DATA_OR_NULL(c, 8), c->n_threads);
}
static int check_lars(glue_call_t *c) { return check_coef(c, 3, 5); }
static int post_lars(glue_call_t *c) {
    if (c->arr[2] == NULL && ((const double *)G_DATA(c, 3))[1] != 0.0) {
        PyErr_SetString(PyExc_ValueError, "lars_step: buf is required when momentum != 0");
        return -1;
    }
    return check_bounds(c, 4) || check_frozen(c, 5);
}
static int call_lars(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_optim_lars_f32(c->rows, c->dim, G_DATA(c, 0), G_DATA(c, 1), G_DATA_OR_NULL(c, 2),
                             G_DATA(c, 3), G_DATA(c, 4), PyArray_DIM(c->arr[4], 0) - 1,
                             G_DATA_OR_NULL(c, 5), c->n_threads);
}

static const glue_op_t ops[] = {
    {"sgd_step",
     "sgd_step(params, grad, buf, lr, momentum, weight_decay, nesterov, frozen, n_threads).",
     {G_OUT("params", NPY_FLOAT32, 2, X_R, X_D), G_IN("grad", NPY_FLOAT32, 2, X_R, X_D),
      G_OPT_OUT("buf", NPY_FLOAT32, 2, X_R, X_D), G_F("lr"), G_F("momentum"), G_F("weight_decay"),
      G_BOOL_ARG("nesterov"), G_OPT_IN("frozen", NPY_INT64, 1, X_R, X_ANY), G_THREADS_ARG},
     0, 0, check_sgd_overlap, post_sgd_step, call_sgd_step, {0}, 0, {0}},
    {"adam_step",
     "adam_step(params, grad, exp_avg, exp_avg_sq, rowc, coef, frozen, n_threads).",
     {G_OUT("params", NPY_FLOAT32, 2, X_R, X_D), G_IN("grad", NPY_FLOAT32, 2, X_R, X_D),
      G_OUT("exp_avg", NPY_FLOAT32, 2, X_R, X_D), G_OUT("exp_avg_sq", NPY_FLOAT32, 2, X_R, X_D),
      G_IN("rowc", NPY_FLOAT64, 2, X_R, X_E0), G_IN("coef", NPY_FLOAT64, 1, X_ANY, X_ANY),
      G_OPT_IN("frozen", NPY_INT64, 1, X_R, X_ANY), G_THREADS_ARG},
     0, 0, check_adam, post_adam, call_adam, {0}, 0, {0}},
    {"lamb_step",
     "lamb_step(params, grad, exp_avg, exp_avg_sq, work, rowc, coef, bounds, frozen, n_threads).",
     {G_OUT("params", NPY_FLOAT32, 2, X_R, X_D), G_IN("grad", NPY_FLOAT32, 2, X_R, X_D),
      G_OUT("exp_avg", NPY_FLOAT32, 2, X_R, X_D), G_OUT("exp_avg_sq", NPY_FLOAT32, 2, X_R, X_D),
      G_OUT("work", NPY_FLOAT32, 2, X_R, X_D), G_IN("rowc", NPY_FLOAT64, 2, X_R, X_E0),
      G_IN("coef", NPY_FLOAT64, 1, X_ANY, X_ANY), G_IN("bounds", NPY_INT64, 1, X_ANY, X_ANY),
      G_OPT_IN("frozen", NPY_INT64, 1, X_R, X_ANY), G_THREADS_ARG},
     0, 0, check_lamb, post_lamb, call_lamb, {0}, 0, {0}},
    {"lars_step",
     "lars_step(params, grad, buf, coef, bounds, frozen, n_threads).",
     {G_OUT("params", NPY_FLOAT32, 2, X_R, X_D), G_IN("grad", NPY_FLOAT32, 2, X_R, X_D),
      G_OPT_OUT("buf", NPY_FLOAT32, 2, X_R, X_D), G_IN("coef", NPY_FLOAT64, 1, X_ANY, X_ANY),
      G_IN("bounds", NPY_INT64, 1, X_ANY, X_ANY), G_OPT_IN("frozen", NPY_INT64, 1, X_R, X_ANY),
      G_THREADS_ARG},
     0, 0, check_lars, post_lars, call_lars, {0}, 0, {0}},
};

GLUE_FAMILY(optim, ops, NULL);
