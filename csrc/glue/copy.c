/* copy.c: glue of the memory-bandwidth kernels decentlearn.bench measures the machine's limits
 * with (csrc/copy.c): copy_f32 (non-temporal streaming copy) and read_f32 (a read-only pass), two
 * glue_op_t rows. decentlearn/ops/copy.py is the Python side.
 */
#include "glue.h"

/* copy_f32 is a table row: dst[...] = src[...] with non-temporal stores; src and dst are
 * C-contiguous aligned float32 arrays of the same size (any shapes), not overlapping. */
static int check_copy_size(glue_call_t *c) {
    PyArrayObject *src = c->arr[0], *dst = c->arr[1];
    if (PyArray_SIZE(src) != PyArray_SIZE(dst)) {
        PyErr_Format(PyExc_ValueError, "copy_f32: dst must have src's size %zd, got %zd",
                     (Py_ssize_t)PyArray_SIZE(src), (Py_ssize_t)PyArray_SIZE(dst));
        return -1;
    }
    if (overlaps(src, dst)) {
        PyErr_SetString(PyExc_ValueError, "copy_f32: dst must not overlap src");
        return -1;
    }
    return 0;
}
static int call_copy_f32(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_copy_f32((int64_t)PyArray_SIZE(c->arr[0]), G_DATA(c, 0), G_DATA(c, 1), c->n_threads);
}
/* read_f32 is a table row: out (1,) uint32 gets the XOR of src's words (a read-only pass). */
static int check_read_out(glue_call_t *c) {
    if (PyArray_SIZE(c->arr[1]) != 1) {
        PyErr_Format(PyExc_ValueError, "read_f32: out must have 1 uint32 entry, got %zd",
                     (Py_ssize_t)PyArray_SIZE(c->arr[1]));
        return -1;
    }
    return 0;
}
static int call_read_f32(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_read_f32((int64_t)PyArray_SIZE(c->arr[0]), G_DATA(c, 0), G_DATA(c, 1), c->n_threads);
}

static const glue_op_t ops[] = {
    {"copy_f32", "copy_f32(src, dst, n_threads) -> dst: non-temporal streaming copy (float32).",
     {G_IN("src", NPY_FLOAT32, G_NDIM_ANY, X_ANY, X_ANY),
      G_OUT("dst", NPY_FLOAT32, G_NDIM_ANY, X_ANY, X_ANY), G_THREADS_ARG},
     0, 0, check_copy_size, NULL, call_copy_f32, {0}, 1, {1}},
    {"read_f32", "read_f32(src, out, n_threads) -> out: XOR of src's 32-bit words, a read-only "
     "pass (float32).",
     {G_IN("src", NPY_FLOAT32, G_NDIM_ANY, X_ANY, X_ANY),
      G_OUT("out", NPY_UINT32, G_NDIM_ANY, X_ANY, X_ANY), G_THREADS_ARG},
     0, 0, check_read_out, NULL, call_read_f32, {0}, 1, {1}},
};

GLUE_FAMILY(copy, ops, NULL);
