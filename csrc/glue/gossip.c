/* gossip.c: glue of the gossip step out = W @ X (csrc/gossip*.c, dispatched per ISA), W a CSR
 * matrix passed as its three arrays (indptr, indices, data) and its column count. Hand-written:
 * W's shape and contents are checked against X and out with their own messages, and every kernel
 * failure is a RuntimeError naming the status. decentlearn/ops/gossip.py is the Python side.
 */
#include "glue.h"

/* The arguments (indptr, indices, data, n_cols, x, out, n_threads) of gossip and spmm, parsed and
 * checked (W's shape and contents against X and out), named `fn` in the messages. Returns 0, or -1
 * with the Python exception set. */
typedef struct {
    PyArrayObject *x, *out;
    dl_csr_f32_t w;
    int n_threads;
    npy_intp ldx, ldo; /* X's and out's row strides in floats */
} csr_call_t;

/* out_rows: X and out may be 2-D views with contiguous rows lying apart (column blocks of wider
 * matrices; spmm), else they must be C-contiguous (gossip). */
static int parse_csr_call(PyObject *args, const char *fn, csr_call_t *c, int out_rows) {
    PyArrayObject *indptr, *indices, *data, *x, *out;
    Py_ssize_t n_cols;
    char format[32];
    snprintf(format, sizeof format, "O!O!O!nO!O!O&:%s", fn);
    if (!PyArg_ParseTuple(args, format, &PyArray_Type, &indptr, &PyArray_Type, &indices,
                          &PyArray_Type, &data, &n_cols, &PyArray_Type, &x, &PyArray_Type, &out,
                          conv_threads, &c->n_threads))
        return -1;
    if (check_array(indptr, fn, "W.indptr", NPY_INT64, 1, 0) ||
        check_array(indices, fn, "W.indices", NPY_INT32, 1, 0) ||
        check_array(data, fn, "W.data", NPY_FLOAT32, 1, 0) ||
        check_threads(fn, c->n_threads))
        return -1;
    c->ldx = PyArray_NDIM(x) == 2 ? PyArray_DIM(x, 1) : 0;
    c->ldo = PyArray_NDIM(out) == 2 ? PyArray_DIM(out, 1) : 0;
    if (out_rows ? (check_rows(x, fn, "X", &c->ldx) || check_rows(out, fn, "out", &c->ldo) ||
                    check_aligned_writeable(out, fn, "out", 1))
                 : (check_array(x, fn, "X", NPY_FLOAT32, 2, 0) ||
                    check_array(out, fn, "out", NPY_FLOAT32, 2, 1)))
        return -1;
    const npy_intp n_rows = PyArray_DIM(indptr, 0) - 1;
    if (n_rows < 0) {
        PyErr_Format(PyExc_ValueError, "%s: W.indptr must have n_rows + 1 >= 1 entries", fn);
        return -1;
    }
    const npy_intp nnz = ((const int64_t *)PyArray_DATA(indptr))[n_rows];
    if (PyArray_DIM(indices, 0) != nnz || PyArray_DIM(data, 0) != nnz) {
        PyErr_Format(PyExc_ValueError,
                     "%s: W.indices and W.data must have indptr[-1] = %zd entries, got %zd and %zd",
                     fn, (Py_ssize_t)nnz, (Py_ssize_t)PyArray_DIM(indices, 0),
                     (Py_ssize_t)PyArray_DIM(data, 0));
        return -1;
    }
    if (PyArray_DIM(x, 0) != n_cols) {
        PyErr_Format(PyExc_ValueError,
                     "%s: X must have one row per column of W: W is %zd x %zd but X has shape "
                     "(%zd, %zd)",
                     fn, (Py_ssize_t)n_rows, n_cols, (Py_ssize_t)PyArray_DIM(x, 0),
                     (Py_ssize_t)PyArray_DIM(x, 1));
        return -1;
    }
    if (PyArray_DIM(out, 0) != n_rows || PyArray_DIM(out, 1) != PyArray_DIM(x, 1)) {
        PyErr_Format(PyExc_ValueError, "%s: out must have shape (%zd, %zd), got (%zd, %zd)", fn,
                     (Py_ssize_t)n_rows, (Py_ssize_t)PyArray_DIM(x, 1),
                     (Py_ssize_t)PyArray_DIM(out, 0), (Py_ssize_t)PyArray_DIM(out, 1));
        return -1;
    }
    if (c->ldo == PyArray_DIM(out, 1) && c->ldx == PyArray_DIM(x, 1)) {
        if (check_disjoint(fn, 1, 5, out, "out", x, "X", indptr, "W.indptr", indices, "W.indices",
                           data, "W.data"))
            return -1;
    } else { /* row-strided views: their spans, and X's rows against out's */
        PyArrayObject *in[3] = {indptr, indices, data};
        const char *names[3] = {"W.indptr", "W.indices", "W.data"};
        for (int i = 0; i < 3; i++)
            if (overlaps_rows(out, c->ldo, in[i])) {
                PyErr_Format(PyExc_ValueError, "%s: out must not overlap %s", fn, names[i]);
                return -1;
            }
        if (!rows_disjoint(out, x)) {
            PyErr_Format(PyExc_ValueError, "%s: out must not overlap X", fn);
            return -1;
        }
    }
    dl_csr_f32_t w = {n_rows, n_cols, PyArray_DATA(indptr), PyArray_DATA(indices),
                      PyArray_DATA(data)};
    const int status = dl_csr_check(&w);
    if (status == DL_E_INDPTR) {
        PyErr_Format(PyExc_ValueError, "%s: W.indptr must start at 0 and be non-decreasing", fn);
        return -1;
    }
    if (status == DL_E_INDEX) {
        PyErr_Format(PyExc_ValueError, "%s: W.indices must lie in [0, %zd)", fn, n_cols);
        return -1;
    }
    c->x = x;
    c->out = out;
    c->w = w;
    return 0;
}

/* Runs `kernel` on a checked call without the GIL; returns out or NULL. */
static PyObject *run_csr_call(const char *fn, csr_call_t *c, dl_gossip_csr_f32_fn kernel) {
    int status;
    Py_BEGIN_ALLOW_THREADS;
    status = kernel(&c->w, PyArray_DIM(c->x, 1), PyArray_DATA(c->x), PyArray_DATA(c->out),
                    c->n_threads);
    Py_END_ALLOW_THREADS;
    if (status != DL_OK) {
        PyErr_Format(PyExc_RuntimeError, "%s: kernel failed with status %d", fn, status);
        return NULL;
    }
    Py_INCREF(c->out);
    return (PyObject *)c->out;
}

/* gossip(indptr, indices, data, n_cols, x, out, n_threads) -> out; out = W @ x, W CSR. */
static PyObject *py_gossip(PyObject *self, PyObject *args) {
    csr_call_t c;
    (void)self;
    if (parse_csr_call(args, "gossip", &c, 0)) return NULL;
    return run_csr_call("gossip", &c, dl_dispatch()->gossip_csr_f32);
}

/* spmm(indptr, indices, data, n_cols, x, out, n_threads) -> out; out = W @ x in float32
 * arithmetic (scipy.sparse's order). */
static PyObject *py_spmm(PyObject *self, PyObject *args) {
    csr_call_t c;
    (void)self;
    if (parse_csr_call(args, "spmm", &c, 1)) return NULL;
    int status;
    Py_BEGIN_ALLOW_THREADS;
    status = dl_spmm_csr_f32(&c.w, PyArray_DIM(c.x, 1), PyArray_DATA(c.x), c.ldx,
                             PyArray_DATA(c.out), c.ldo, c.n_threads);
    Py_END_ALLOW_THREADS;
    if (status != DL_OK) {
        PyErr_Format(PyExc_RuntimeError, "spmm: kernel failed with status %d", status);
        return NULL;
    }
    Py_INCREF(c.out);
    return (PyObject *)c.out;
}

static PyMethodDef methods[] = {
    {"gossip", py_gossip, METH_VARARGS,
     "gossip(indptr, indices, data, n_cols, x, out, n_threads) -> out = W @ x for CSR W."},
    {"spmm", py_spmm, METH_VARARGS,
     "spmm(indptr, indices, data, n_cols, x, out, n_threads) -> out = W @ x for CSR W, float32 "
     "arithmetic in scipy.sparse's order."},
    {NULL, NULL, 0, NULL},
};

GLUE_FAMILY_METHODS(gossip, methods);
