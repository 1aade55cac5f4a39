/* stc.c: glue of Sparse Ternary Compression's Golomb/Rice position coding (csrc/stc.c):
 * golomb_encode and golomb_decode, two glue_op_t rows in which D is k (the kept entries per row)
 * and the scalar dim is the row length, and stc_ternary (the sums behind mu, and the signs).
 * decentlearn/ops/stc.py is the Python side.
 */
#include "glue.h"

static int check_golomb_dim(glue_call_t *c) {
    const Py_ssize_t dim = c->ssz[0];
    if (dim < c->dim || dim > INT32_MAX) {
        PyErr_Format(PyExc_ValueError,
                     "%s: dim must be in [k, 2**31 - 1] = [%zd, 2147483647], got %zd", c->fn,
                     (Py_ssize_t)c->dim, dim);
        return -1;
    }
    c->ext[0] = (dl_stc_golomb_max_bits(c->dim, dim, c->ints[0]) + 7) / 8; /* data row bytes */
    return 0;
}
static int call_golomb_encode(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_stc_golomb_encode(c->rows, c->dim, c->ssz[0], c->ints[0], G_DATA(c, 0), G_DATA(c, 1),
                                G_DATA(c, 2), PyArray_DIM(c->arr[2], 1), G_DATA(c, 3),
                                c->n_threads);
}
static int call_golomb_decode(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_stc_golomb_decode(c->rows, c->dim, c->ssz[0], c->ints[0], G_DATA(c, 0),
                                PyArray_DIM(c->arr[0], 1), G_DATA(c, 1), G_DATA(c, 2),
                                G_DATA(c, 3), c->n_threads);
}
static int call_ternary(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_stc_ternary_f32(c->rows, c->dim, G_DATA(c, 0), G_DATA(c, 1), G_DATA(c, 2),
                              G_DATA(c, 3), c->n_threads);
}

static const glue_op_t ops[] = {
    {"golomb_encode", "golomb_encode(positions, negative, dim, b, data, nbits, n_threads) -> None.",
     {G_IN("positions", NPY_INT32, 2, X_R, X_D), G_IN("negative", NPY_UINT8, 2, X_R, X_D),
      G_N("dim"), G_INT_IN("b", 0, DL_STC_MAX_B), G_OUT("data", NPY_UINT8, 2, X_R, X_GE_E0),
      G_OUT("nbits", NPY_INT64, 1, X_R, X_ANY), G_THREADS_ARG},
     0, 0, check_golomb_dim, NULL, call_golomb_encode,
     {DL_E_ARG, &PyExc_ValueError,
      "%s: positions must be strictly increasing within each row and lie in [0, dim)", E_NONE},
     0, {0}},
    {"golomb_decode", "golomb_decode(data, nbits, dim, b, positions, negative, n_threads) -> None.",
     {G_IN("data", NPY_UINT8, 2, X_R, X_ANY), G_IN("nbits", NPY_INT64, 1, X_R, X_ANY), G_N("dim"),
      G_INT_IN("b", 0, DL_STC_MAX_B), G_OUT("positions", NPY_INT32, 2, X_R, X_D),
      G_OUT("negative", NPY_UINT8, 2, X_R, X_D), G_THREADS_ARG},
     0, 2, check_golomb_dim, NULL, call_golomb_decode, {0}, 0, {0}},
    {"stc_ternary", "stc_ternary(val, negative, sums, exact, n_threads) -> None.",
     {G_IN("val", NPY_FLOAT32, 2, X_R, X_D), G_OUT("negative", NPY_UINT8, 2, X_R, X_D),
      G_OUT("sums", NPY_FLOAT64, 1, X_R, X_ANY), G_OUT("exact", NPY_UINT8, 1, X_R, X_ANY),
      G_THREADS_ARG},
     0, 0, NULL, NULL, call_ternary, {0}, 0, {0}},
};

GLUE_FAMILY(stc, ops, NULL);
