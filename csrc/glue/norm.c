/* norm.c: glue of GroupNorm (csrc/norm.c): groupnorm_forward and groupnorm_backward, two
 * glue_op_t rows whose hooks check the shared shapes. decentlearn/ops/norm.py is the Python side.
 */
#include "glue.h"

/* An array of exactly the given shape (ndim 2 or 3). */
static int norm_shape(const char *fn, const char *name, PyArrayObject *a, int nd, npy_intp d0,
                      npy_intp d1, npy_intp d2) {
    const npy_intp want[3] = {d0, d1, d2};
    int ok = PyArray_NDIM(a) == nd;
    for (int i = 0; ok && i < nd; i++) ok = PyArray_DIM(a, i) == want[i];
    if (!ok) {
        if (nd == 2)
            PyErr_Format(PyExc_ValueError, "%s: %s must have shape (%zd, %zd)", fn, name,
                         (Py_ssize_t)d0, (Py_ssize_t)d1);
        else
            PyErr_Format(PyExc_ValueError, "%s: %s must have shape (%zd, %zd, %zd)", fn, name,
                         (Py_ssize_t)d0, (Py_ssize_t)d1, (Py_ssize_t)d2);
        return -1;
    }
    return 0;
}

/* The images (N, H, ld) against gamma (P, C): w <= ld, C >= 1, N = P*C*B; sets ext[0] = B. */
static int norm_images(glue_call_t *c, PyArrayObject *img, PyArrayObject *gamma, Py_ssize_t w) {
    const npy_intp N = PyArray_DIM(img, 0), ld = PyArray_DIM(img, 2);
    const npy_intp P = PyArray_DIM(gamma, 0), C = PyArray_DIM(gamma, 1);
    if (w < 0 || w > ld) {
        PyErr_Format(PyExc_ValueError, "%s: need 0 <= w <= %zd (the images' last axis), got %zd",
                     c->fn, (Py_ssize_t)ld, w);
        return -1;
    }
    if (C < 1 || (P == 0 ? N != 0 : N % (P * C) != 0)) {
        PyErr_Format(PyExc_ValueError, "%s: the images must be P*C*B = %zd*%zd*B (gamma is (P, C)), "
                     "got %zd", c->fn, (Py_ssize_t)P, (Py_ssize_t)C, (Py_ssize_t)N);
        return -1;
    }
    c->ext[0] = P == 0 ? 0 : N / (P * C);
    return 0;
}

/* groupnorm_forward(x, w, gamma, beta, groups, eps, xc, rstd, y, n_threads) -> y; slots x 0,
 * gamma 1, beta 2, xc 3, rstd 4, y 5; ssz w, groups; flt eps. */
static int check_groupnorm_forward(glue_call_t *c) {
    const char *fn = c->fn;
    PyArrayObject *x = c->arr[0], *gamma = c->arr[1];
    const Py_ssize_t w = c->ssz[0], groups = c->ssz[1];
    if (norm_images(c, x, gamma, w) < 0) return -1;
    const npy_intp N = PyArray_DIM(x, 0), H = PyArray_DIM(x, 1), P = PyArray_DIM(gamma, 0),
                   C = PyArray_DIM(gamma, 1);
    if (groups < 1 || C % groups != 0) {
        PyErr_Format(PyExc_ValueError, "%s: groups must divide the %zd channels, got %zd", fn,
                     (Py_ssize_t)C, groups);
        return -1;
    }
    if (!(c->flt[0] > 0.0f) || !isfinite(c->flt[0])) {
        PyErr_Format(PyExc_ValueError, "%s: eps must be a finite float > 0", fn);
        return -1;
    }
    if (norm_shape(fn, "beta", c->arr[2], 2, P, C, 0) < 0 ||
        norm_shape(fn, "xc", c->arr[3], 2, N, H * w, 0) < 0 ||
        norm_shape(fn, "rstd", c->arr[4], 3, P, groups, c->ext[0]) < 0 ||
        norm_shape(fn, "y", c->arr[5], 2, N, H * w, 0) < 0)
        return -1;
    return 0;
}
static int call_groupnorm_forward(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    PyArrayObject *x = c->arr[0], *gamma = c->arr[1];
    return dl_groupnorm_forward_f32(PyArray_DIM(gamma, 0), PyArray_DIM(gamma, 1), c->ssz[1],
                                    c->ext[0], PyArray_DIM(x, 1), c->ssz[0], G_DATA(c, 0),
                                    PyArray_DIM(x, 2), G_DATA(c, 1), G_DATA(c, 2), c->flt[0],
                                    G_DATA(c, 3), G_DATA(c, 4), G_DATA(c, 5), c->n_threads);
}

/* groupnorm_backward(dy, w, xc, rstd, gamma, g_gamma, g_beta, dx|None, n_threads); slots dy 0,
 * xc 1, rstd 2, gamma 3, g_gamma 4, g_beta 5, dx 6; ssz w. The groups are rstd's axis 1. */
static int check_groupnorm_backward(glue_call_t *c) {
    const char *fn = c->fn;
    PyArrayObject *dy = c->arr[0], *gamma = c->arr[3];
    const Py_ssize_t w = c->ssz[0];
    if (norm_images(c, dy, gamma, w) < 0) return -1;
    const npy_intp N = PyArray_DIM(dy, 0), H = PyArray_DIM(dy, 1), P = PyArray_DIM(gamma, 0),
                   C = PyArray_DIM(gamma, 1), G = PyArray_DIM(c->arr[2], 1);
    if (G < 1 || C % G != 0) {
        PyErr_Format(PyExc_ValueError, "%s: rstd's axis 1 (the groups) must divide the %zd "
                     "channels, got %zd", fn, (Py_ssize_t)C, (Py_ssize_t)G);
        return -1;
    }
    if (norm_shape(fn, "xc", c->arr[1], 2, N, H * w, 0) < 0 ||
        norm_shape(fn, "rstd", c->arr[2], 3, P, G, c->ext[0]) < 0 ||
        norm_shape(fn, "g_gamma", c->arr[4], 2, P, C, 0) < 0 ||
        norm_shape(fn, "g_beta", c->arr[5], 2, P, C, 0) < 0 ||
        (c->arr[6] != NULL && norm_shape(fn, "dx", c->arr[6], 2, N, H * w, 0) < 0))
        return -1;
    return 0;
}
static int call_groupnorm_backward(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    PyArrayObject *dy = c->arr[0], *gamma = c->arr[3];
    return dl_groupnorm_backward_f32(PyArray_DIM(gamma, 0), PyArray_DIM(gamma, 1),
                                     PyArray_DIM(c->arr[2], 1), c->ext[0], PyArray_DIM(dy, 1),
                                     c->ssz[0], G_DATA(c, 0), PyArray_DIM(dy, 2), G_DATA(c, 1),
                                     G_DATA(c, 2), G_DATA(c, 3), G_DATA(c, 4), G_DATA(c, 5),
                                     G_DATA_OR_NULL(c, 6), c->n_threads);
}

static const glue_op_t ops[] = {
    {"groupnorm_forward", "groupnorm_forward(x, w, gamma, beta, groups, eps, xc, rstd, y, "
     "n_threads) -> y: GroupNorm of P*C*B images.",
     {G_IN("x", NPY_FLOAT32, 3, X_ANY, X_ANY), G_N("w"), G_IN("gamma", NPY_FLOAT32, 2, X_ANY, X_ANY),
      G_IN("beta", NPY_FLOAT32, 2, X_ANY, X_ANY), G_N("groups"), G_F("eps"),
      G_OUT("xc", NPY_FLOAT32, 2, X_ANY, X_ANY), G_OUT("rstd", NPY_FLOAT32, 3, X_ANY, X_ANY),
      G_OUT("y", NPY_FLOAT32, 2, X_ANY, X_ANY), G_THREADS_ARG},
     0, 0, check_groupnorm_forward, NULL, call_groupnorm_forward, {0}, 1, {5}},
    {"groupnorm_backward", "groupnorm_backward(dy, w, xc, rstd, gamma, g_gamma, g_beta, dx|None, "
     "n_threads): the gradients of groupnorm_forward.",
     {G_IN("dy", NPY_FLOAT32, 3, X_ANY, X_ANY), G_N("w"), G_IN("xc", NPY_FLOAT32, 2, X_ANY, X_ANY),
      G_IN("rstd", NPY_FLOAT32, 3, X_ANY, X_ANY), G_IN("gamma", NPY_FLOAT32, 2, X_ANY, X_ANY),
      G_OUT("g_gamma", NPY_FLOAT32, 2, X_ANY, X_ANY), G_OUT("g_beta", NPY_FLOAT32, 2, X_ANY, X_ANY),
      G_OPT_OUT("dx", NPY_FLOAT32, 2, X_ANY, X_ANY), G_THREADS_ARG},
     0, 0, check_groupnorm_backward, NULL, call_groupnorm_backward, {0}, 0, {0}},
};

GLUE_FAMILY(norm, ops, NULL);
