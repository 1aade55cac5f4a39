/* act.c: glue of ReLU's passes (csrc/act.c): relu_backward and relu_forward, two glue_op_t rows.
 * decentlearn/ops/act.py is the Python side.
 */
#include "glue.h"

/* relu_backward(dy, y, dx, n_threads) -> dx: float32 arrays of one size (any shapes), C-contiguous,
 * dx sharing no memory with dy or y. */
static int check_relu_sizes(glue_call_t *c) {
    const npy_intp n = PyArray_SIZE(c->arr[0]);
    if (PyArray_SIZE(c->arr[1]) != n || PyArray_SIZE(c->arr[2]) != n) {
        PyErr_Format(PyExc_ValueError, "%s: dy, y and dx must have the same size, got %zd, %zd and "
                     "%zd", c->fn, (Py_ssize_t)n, (Py_ssize_t)PyArray_SIZE(c->arr[1]),
                     (Py_ssize_t)PyArray_SIZE(c->arr[2]));
        return -1;
    }
    return 0;
}
static int call_relu_backward(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_relu_backward_f32((int64_t)PyArray_SIZE(c->arr[0]), G_DATA(c, 0), G_DATA(c, 1),
                                G_DATA(c, 2), c->n_threads);
}

/* relu_forward(x, n_threads) -> x: in place on a C-contiguous float32 array of any shape. */
static int check_relu_any(glue_call_t *c) {
    (void)c; /* any shape: the kernel reads and writes x's own size */
    return 0;
}
static int call_relu_forward(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_relu_forward_f32((int64_t)PyArray_SIZE(c->arr[0]), G_DATA(c, 0), c->n_threads);
}

static const glue_op_t ops[] = {
    {"relu_backward", "relu_backward(dy, y, dx, n_threads) -> dx: dy * (y > 0), float32.",
     {G_IN("dy", NPY_FLOAT32, G_NDIM_ANY, X_ANY, X_ANY),
      G_IN("y", NPY_FLOAT32, G_NDIM_ANY, X_ANY, X_ANY),
      G_OUT("dx", NPY_FLOAT32, G_NDIM_ANY, X_ANY, X_ANY), G_THREADS_ARG},
     0, 0, check_relu_sizes, NULL, call_relu_backward, {0}, 1, {2}},
    {"relu_forward", "relu_forward(x, n_threads) -> x: max(x, 0) in place (NaN stays), float32.",
     {G_OUT("x", NPY_FLOAT32, G_NDIM_ANY, X_ANY, X_ANY), G_THREADS_ARG},
     0, 0, check_relu_any, NULL, call_relu_forward, {0}, 1, {0}},
};

GLUE_FAMILY(act, ops, NULL);
