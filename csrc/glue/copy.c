/* copy.c: glue of the memory-bandwidth kernels decentlearn.bench measures the machine's limits
 * with (csrc/copy.c): copy_f32 (non-temporal streaming copy) and read_f32 (a read-only pass), two
 * glue_op_t rows; and take_rows (the minibatch gather), hand-written because it takes any dtype.
 * decentlearn/ops/copy.py is the Python side.
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

/* swap_axes12(src, dst, n_threads) -> dst: src (P, A, B, K) and dst (P, B, A, K) float32,
 * C-contiguous: dst[p, j, i] = src[p, i, j]. */
static int check_swap_axes12(glue_call_t *c) {
    PyArrayObject *src = c->arr[0], *dst = c->arr[1];
    const npy_intp want[4] = {PyArray_DIM(src, 0), PyArray_DIM(src, 2), PyArray_DIM(src, 1),
                              PyArray_DIM(src, 3)};
    for (int d = 0; d < 4; d++)
        if (PyArray_DIM(dst, d) != want[d]) {
            PyErr_Format(PyExc_ValueError, "%s: dst must have shape (%zd, %zd, %zd, %zd) (src's "
                         "axes 1 and 2 swapped)", c->fn, (Py_ssize_t)want[0], (Py_ssize_t)want[1],
                         (Py_ssize_t)want[2], (Py_ssize_t)want[3]);
            return -1;
        }
    return 0;
}
static int call_swap_axes12(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    PyArrayObject *src = c->arr[0];
    return dl_swap_axes12_f32(PyArray_DIM(src, 0), PyArray_DIM(src, 1), PyArray_DIM(src, 2),
                              PyArray_DIM(src, 3), G_DATA(c, 0), G_DATA(c, 1), c->n_threads);
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
    {"swap_axes12", "swap_axes12(src, dst, n_threads) -> dst: axes 1 and 2 of a 4-D float32 "
     "array swapped.",
     {G_IN("src", NPY_FLOAT32, 4, X_ANY, X_ANY), G_OUT("dst", NPY_FLOAT32, 4, X_ANY, X_ANY),
      G_THREADS_ARG},
     0, 0, check_swap_axes12, NULL, call_swap_axes12, {0}, 1, {1}},
};

/* take_rows(src, idx, out, n_threads) -> out: out[r] = src[idx.flat[r]], rows of src's trailing
 * shape; src and out C-contiguous of one dtype, idx int64 C-contiguous, out of shape idx.shape +
 * src.shape[1:]. */
static PyObject *py_take_rows(PyObject *self, PyObject *args) {
    PyArrayObject *src, *idx, *out;
    int n_threads, status;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!O!O&:take_rows", &PyArray_Type, &src, &PyArray_Type, &idx,
                          &PyArray_Type, &out, conv_threads, &n_threads))
        return NULL;
    const int nd = PyArray_NDIM(src), ni = PyArray_NDIM(idx);
    if (PyDataType_REFCHK(PyArray_DESCR(src))) { /* object pointers: copying them needs refcounts */
        PyErr_SetString(PyExc_TypeError, "take_rows: src must hold plain values, not Python objects");
        return NULL;
    }
    if (nd < 1) {
        PyErr_SetString(PyExc_ValueError, "take_rows: src must have at least 1 dimension, got 0");
        return NULL;
    }
    if (check_array(src, "take_rows", "src", PyArray_TYPE(src), nd, 0) ||
        check_array(idx, "take_rows", "idx", NPY_INT64, ni, 0) ||
        check_array(out, "take_rows", "out", PyArray_TYPE(src), PyArray_NDIM(out), 1) ||
        check_threads("take_rows", n_threads))
        return NULL;
    int ok = PyArray_NDIM(out) == ni + nd - 1;
    for (int a = 0; ok && a < ni; a++) ok = PyArray_DIM(out, a) == PyArray_DIM(idx, a);
    for (int a = 1; ok && a < nd; a++) ok = PyArray_DIM(out, ni + a - 1) == PyArray_DIM(src, a);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError,
                        "take_rows: out must have shape idx.shape + src.shape[1:]");
        return NULL;
    }
    if (check_disjoint("take_rows", 1, 3, out, "out", src, "src", idx, "idx")) return NULL;
    const int64_t n_src = PyArray_DIM(src, 0);
    int64_t row_bytes = (int64_t)PyArray_ITEMSIZE(src);
    for (int a = 1; a < nd; a++) row_bytes *= (int64_t)PyArray_DIM(src, a);
    Py_BEGIN_ALLOW_THREADS;
    status = dl_take_rows(n_src, row_bytes, PyArray_DATA(src), (int64_t)PyArray_SIZE(idx),
                          PyArray_DATA(idx), PyArray_DATA(out), n_threads);
    Py_END_ALLOW_THREADS;
    if (status == DL_E_INDEX) {
        PyErr_Format(PyExc_IndexError, "take_rows: every idx must lie in [0, %lld) (src's rows)",
                     (long long)n_src);
        return NULL;
    }
    if (status != DL_OK) return raise_status("take_rows", status);
    Py_INCREF(out);
    return (PyObject *)out;
}

static PyMethodDef methods[] = {
    {"take_rows", py_take_rows, METH_VARARGS,
     "take_rows(src, idx, out, n_threads) -> out: out[r] = src[idx.flat[r]] (any dtype)."},
    {NULL, NULL, 0, NULL},
};

GLUE_FAMILY(copy, ops, methods);
