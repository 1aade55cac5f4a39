/* optim.c: glue of the optimizers' step (csrc/optim.c): sgd_step, one glue_op_t row updating
 * params (and the momentum buffer) in place. decentlearn/ops/optim.py is the Python side.
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

static const glue_op_t ops[] = {
    {"sgd_step",
     "sgd_step(params, grad, buf, lr, momentum, weight_decay, nesterov, frozen, n_threads).",
     {G_OUT("params", NPY_FLOAT32, 2, X_R, X_D), G_IN("grad", NPY_FLOAT32, 2, X_R, X_D),
      G_OPT_OUT("buf", NPY_FLOAT32, 2, X_R, X_D), G_F("lr"), G_F("momentum"), G_F("weight_decay"),
      G_BOOL_ARG("nesterov"), G_OPT_IN("frozen", NPY_INT64, 1, X_R, X_ANY), G_THREADS_ARG},
     0, 0, check_sgd_overlap, post_sgd_step, call_sgd_step, {0}, 0, {0}},
};

GLUE_FAMILY(optim, ops, NULL);
