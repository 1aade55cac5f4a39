/* gossip.c: glue of the gossip step out = W @ X (csrc/gossip*.c, dispatched per ISA), W a CSR
 * matrix passed as its three arrays (indptr, indices, data) and its column count. Hand-written:
 * W's shape and contents are checked against X and out with their own messages, and every kernel
 * failure is a RuntimeError naming the status. decentlearn/ops/gossip.py is the Python side.
 */
#include "glue.h"

/* gossip(indptr, indices, data, n_cols, x, out, n_threads) -> out; out = W @ x, W CSR. */
static PyObject *py_gossip(PyObject *self, PyObject *args) {
    PyArrayObject *indptr, *indices, *data, *x, *out;
    Py_ssize_t n_cols;
    int n_threads, status;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!O!nO!O!O&:gossip", &PyArray_Type, &indptr, &PyArray_Type,
                          &indices, &PyArray_Type, &data, &n_cols, &PyArray_Type, &x, &PyArray_Type,
                          &out, conv_threads, &n_threads))
        return NULL;
    if (check_array(indptr, "gossip", "W.indptr", NPY_INT64, 1, 0) ||
        check_array(indices, "gossip", "W.indices", NPY_INT32, 1, 0) ||
        check_array(data, "gossip", "W.data", NPY_FLOAT32, 1, 0) ||
        check_array(x, "gossip", "X", NPY_FLOAT32, 2, 0) ||
        check_array(out, "gossip", "out", NPY_FLOAT32, 2, 1) || check_threads("gossip", n_threads))
        return NULL;
    const npy_intp n_rows = PyArray_DIM(indptr, 0) - 1;
    if (n_rows < 0) {
        PyErr_SetString(PyExc_ValueError, "gossip: W.indptr must have n_rows + 1 >= 1 entries");
        return NULL;
    }
    const npy_intp nnz = ((const int64_t *)PyArray_DATA(indptr))[n_rows];
    if (PyArray_DIM(indices, 0) != nnz || PyArray_DIM(data, 0) != nnz) {
        PyErr_Format(PyExc_ValueError,
                     "gossip: W.indices and W.data must have indptr[-1] = %zd entries, got %zd "
                     "and %zd",
                     (Py_ssize_t)nnz, (Py_ssize_t)PyArray_DIM(indices, 0),
                     (Py_ssize_t)PyArray_DIM(data, 0));
        return NULL;
    }
    if (PyArray_DIM(x, 0) != n_cols) {
        PyErr_Format(PyExc_ValueError,
                     "gossip: X must have one row per peer: W is %zd x %zd but X has shape "
                     "(%zd, %zd)",
                     (Py_ssize_t)n_rows, n_cols, (Py_ssize_t)PyArray_DIM(x, 0),
                     (Py_ssize_t)PyArray_DIM(x, 1));
        return NULL;
    }
    if (PyArray_DIM(out, 0) != n_rows || PyArray_DIM(out, 1) != PyArray_DIM(x, 1)) {
        PyErr_Format(PyExc_ValueError, "gossip: out must have shape (%zd, %zd), got (%zd, %zd)",
                     (Py_ssize_t)n_rows, (Py_ssize_t)PyArray_DIM(x, 1),
                     (Py_ssize_t)PyArray_DIM(out, 0), (Py_ssize_t)PyArray_DIM(out, 1));
        return NULL;
    }
    if (check_disjoint("gossip", 1, 5, out, "out", x, "X", indptr, "W.indptr", indices,
                       "W.indices", data, "W.data"))
        return NULL;
    dl_csr_f32_t w = {n_rows, n_cols, PyArray_DATA(indptr), PyArray_DATA(indices),
                      PyArray_DATA(data)};
    status = dl_csr_check(&w);
    if (status == DL_E_INDPTR) {
        PyErr_SetString(PyExc_ValueError,
                        "gossip: W.indptr must start at 0 and be non-decreasing");
        return NULL;
    }
    if (status == DL_E_INDEX) {
        PyErr_Format(PyExc_ValueError, "gossip: W.indices must lie in [0, %zd)", n_cols);
        return NULL;
    }
    dl_gossip_csr_f32_fn fn = dl_dispatch()->gossip_csr_f32;
    Py_BEGIN_ALLOW_THREADS;
    status = fn(&w, PyArray_DIM(x, 1), PyArray_DATA(x), PyArray_DATA(out), n_threads);
    Py_END_ALLOW_THREADS;
    if (status != DL_OK) {
        PyErr_Format(PyExc_RuntimeError, "gossip: kernel failed with status %d", status);
        return NULL;
    }
    Py_INCREF(out);
    return (PyObject *)out;
}

static PyMethodDef methods[] = {
    {"gossip", py_gossip, METH_VARARGS,
     "gossip(indptr, indices, data, n_cols, x, out, n_threads) -> out = W @ x for CSR W."},
    {NULL, NULL, 0, NULL},
};

GLUE_FAMILY_METHODS(gossip, methods);
