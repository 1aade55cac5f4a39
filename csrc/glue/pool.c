/* pool.c: glue of MaxPool2d's 2x2 max pooling (csrc/pool.c): maxpool2_forward and
 * maxpool2_backward, two glue_op_t rows. decentlearn/ops/pool.py is the Python side.
 */
#include "glue.h"

/* maxpool2_forward(x, w, y, code|None, n_threads): x (n, h, ld) float32 with even h, even w <= ld;
 * y (n, h/2, w/2) float32 and code (n, h/2, w/2) uint8. maxpool2_backward(dy, code, dx,
 * n_threads): dy and code (n, h2, w2), dx (n, 2*h2, 2*w2). */

/* A 3-D array of exactly the shape (n, h, w). */
static int pool_check_shape(const char *fn, const char *name, PyArrayObject *a, npy_intp n,
                            npy_intp h, npy_intp w) {
    if (PyArray_DIM(a, 0) != n || PyArray_DIM(a, 1) != h || PyArray_DIM(a, 2) != w) {
        PyErr_Format(PyExc_ValueError,
                     "%s: %s must have shape (%zd, %zd, %zd), got (%zd, %zd, %zd)", fn, name,
                     (Py_ssize_t)n, (Py_ssize_t)h, (Py_ssize_t)w, (Py_ssize_t)PyArray_DIM(a, 0),
                     (Py_ssize_t)PyArray_DIM(a, 1), (Py_ssize_t)PyArray_DIM(a, 2));
        return -1;
    }
    return 0;
}
static int check_maxpool2_forward(glue_call_t *c) {
    const char *fn = c->fn;
    PyArrayObject *x = c->arr[0];
    const npy_intp n = PyArray_DIM(x, 0), h = PyArray_DIM(x, 1), ld = PyArray_DIM(x, 2);
    const Py_ssize_t w = c->ssz[0];
    if (h % 2 || w < 0 || w % 2 || w > ld) {
        PyErr_Format(PyExc_ValueError, "%s: need an even number of rows and an even w <= %zd "
                     "(x's last axis), got %zd rows and w=%zd", fn, (Py_ssize_t)ld,
                     (Py_ssize_t)h, w);
        return -1;
    }
    if (pool_check_shape(fn, "y", c->arr[1], n, h / 2, w / 2)) return -1;
    if (c->arr[2] != NULL && pool_check_shape(fn, "code", c->arr[2], n, h / 2, w / 2)) return -1;
    return 0;
}
static int call_maxpool2_forward(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    PyArrayObject *x = c->arr[0];
    return dl_maxpool2_forward_f32(PyArray_DIM(x, 0), PyArray_DIM(x, 1), PyArray_DIM(x, 2),
                                   c->ssz[0], G_DATA(c, 0), G_DATA(c, 1), G_DATA_OR_NULL(c, 2),
                                   c->n_threads);
}
static int check_maxpool2_backward(glue_call_t *c) {
    const char *fn = c->fn;
    PyArrayObject *dy = c->arr[0];
    const npy_intp n = PyArray_DIM(dy, 0), h2 = PyArray_DIM(dy, 1), w2 = PyArray_DIM(dy, 2);
    if (pool_check_shape(fn, "code", c->arr[1], n, h2, w2)) return -1;
    return pool_check_shape(fn, "dx", c->arr[2], n, 2 * h2, 2 * w2);
}
static int call_maxpool2_backward(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    PyArrayObject *dy = c->arr[0];
    return dl_maxpool2_backward_f32(PyArray_DIM(dy, 0), PyArray_DIM(dy, 1), PyArray_DIM(dy, 2),
                                    G_DATA(c, 0), G_DATA(c, 1), G_DATA(c, 2), c->n_threads);
}

static const glue_op_t ops[] = {
    {"maxpool2_forward", "maxpool2_forward(x, w, y, code|None, n_threads): 2x2 max pooling of the "
     "first w columns of x's rows.",
     {G_IN("x", NPY_FLOAT32, 3, X_ANY, X_ANY), G_N("w"), G_OUT("y", NPY_FLOAT32, 3, X_ANY, X_ANY),
      G_OPT_OUT("code", NPY_UINT8, 3, X_ANY, X_ANY), G_THREADS_ARG},
     0, 0, check_maxpool2_forward, NULL, call_maxpool2_forward, {0}, 0, {0}},
    {"maxpool2_backward", "maxpool2_backward(dy, code, dx, n_threads): the gradient of 2x2 max "
     "pooling.",
     {G_IN("dy", NPY_FLOAT32, 3, X_ANY, X_ANY), G_IN("code", NPY_UINT8, 3, X_ANY, X_ANY),
      G_OUT("dx", NPY_FLOAT32, 3, X_ANY, X_ANY), G_THREADS_ARG},
     0, 0, check_maxpool2_backward, NULL, call_maxpool2_backward, {0}, 0, {0}},
};

GLUE_FAMILY(pool, ops, NULL);
