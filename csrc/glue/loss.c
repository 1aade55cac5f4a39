/* loss.c: glue of the softmax cross-entropy (csrc/loss.c): softmax_xent and exp_f32, two
 * glue_op_t rows. decentlearn/ops/loss.py is the Python side.
 */
#include "glue.h"

/* softmax_xent(logits, labels, loss, correct, want_grad, n_threads) -> loss: logits (P, B, C)
 * float32 (written: the gradient or the softmax numerators), labels (P, B) int64 or (1, B) shared
 * by all peers, loss (P,) float64, correct (P,) int64 or None. */
static int check_softmax_xent(glue_call_t *c) {
    const npy_intp n_peers = PyArray_DIM(c->arr[0], 0), lp = PyArray_DIM(c->arr[1], 0);
    if (lp != n_peers && lp != 1) {
        PyErr_Format(PyExc_ValueError, "%s: labels must have %zd rows (one per peer) or 1 (shared), "
                     "got %zd", c->fn, (Py_ssize_t)n_peers, (Py_ssize_t)lp);
        return -1;
    }
    if (PyArray_DIM(c->arr[0], 2) < 1) {
        PyErr_Format(PyExc_ValueError, "%s: logits must have at least one class (axis 2), got 0",
                     c->fn);
        return -1;
    }
    return 0;
}
/* Every label in [0, C): the first one outside is named (the kernel would refuse it too). */
static int post_softmax_xent(glue_call_t *c) {
    const npy_intp n = PyArray_SIZE(c->arr[1]), n_classes = PyArray_DIM(c->arr[0], 2);
    const npy_int64 *y = PyArray_DATA(c->arr[1]);
    for (npy_intp i = 0; i < n; i++)
        if (y[i] < 0 || y[i] >= n_classes) {
            const npy_intp b = PyArray_DIM(c->arr[1], 1);
            PyErr_Format(PyExc_ValueError,
                         "%s: labels must be class indices in [0, %zd), got %lld at (%zd, %zd)",
                         c->fn, (Py_ssize_t)n_classes, (long long)y[i], (Py_ssize_t)(i / b),
                         (Py_ssize_t)(i % b));
            return -1;
        }
    return 0;
}
static int call_softmax_xent(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    PyArrayObject *z = c->arr[0];
    const int64_t b = PyArray_DIM(z, 1);
    return dl_softmax_xent_f32(PyArray_DIM(z, 0), b, PyArray_DIM(z, 2), G_DATA(c, 0),
                               G_DATA(c, 1), PyArray_DIM(c->arr[1], 0) == 1 ? 0 : b, G_DATA(c, 2),
                               G_DATA_OR_NULL(c, 3), c->ints[0], c->n_threads);
}

/* exp_f32(x, y, n_threads) -> y: y = exp(x) rounded to float32, arrays of one size (any
 * shapes). */
static int check_exp_size(glue_call_t *c) {
    if (PyArray_SIZE(c->arr[0]) != PyArray_SIZE(c->arr[1])) {
        PyErr_Format(PyExc_ValueError, "%s: y must have x's size %zd, got %zd", c->fn,
                     (Py_ssize_t)PyArray_SIZE(c->arr[0]), (Py_ssize_t)PyArray_SIZE(c->arr[1]));
        return -1;
    }
    return 0;
}
static int call_exp_f32(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_exp_f32((int64_t)PyArray_SIZE(c->arr[0]), G_DATA(c, 0), G_DATA(c, 1),
                      c->n_threads);
}

static const glue_op_t ops[] = {
    {"softmax_xent", "softmax_xent(logits, labels, loss, correct, want_grad, n_threads) -> loss: "
     "mean softmax cross-entropy per peer; logits become its gradient (want_grad); correct (P,) "
     "int64 or None gets the rows whose argmax is the label.",
     {G_OUT("logits", NPY_FLOAT32, 3, X_ANY, X_ANY), G_IN("labels", NPY_INT64, 2, X_ANY, X_D),
      G_OUT("loss", NPY_FLOAT64, 1, X_R, X_ANY), G_OPT_OUT("correct", NPY_INT64, 1, X_R, X_ANY),
      G_BOOL_ARG("want_grad"), G_THREADS_ARG},
     0, 0, check_softmax_xent, post_softmax_xent, call_softmax_xent,
     {DL_E_RANGE, &PyExc_ValueError, "%s: labels must be class indices", E_NONE}, 1, {2}},
    {"exp_f32", "exp_f32(x, y, n_threads) -> y: exp of float32 values, rounded to float32.",
     {G_IN("x", NPY_FLOAT32, G_NDIM_ANY, X_ANY, X_ANY),
      G_OUT("y", NPY_FLOAT32, G_NDIM_ANY, X_ANY, X_ANY), G_THREADS_ARG},
     0, 0, check_exp_size, NULL, call_exp_f32, {0}, 1, {1}},
};

GLUE_FAMILY(loss, ops, NULL);
