/* topk.c: glue of the sparsifiers (csrc/topk*.c): topk and randk are glue_op_t rows (k entries
 * per row into caller-given (rows, k) outputs); threshold is hand-written because it counts first,
 * then allocates its results here and fills them. decentlearn/ops/topk.py is the Python side.
 */
#include "glue.h"

/* x rows shorter than 2^31 (int32 indices) and 0 <= k <= dim; out_idx / out_val are (R, k). */
static int check_topk_k(glue_call_t *c) {
    const char *fn = c->fn;
    const Py_ssize_t k = c->ssz[0];
    if (c->dim > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s: x rows must be shorter than 2^31, got dim=%zd", fn,
                     (Py_ssize_t)c->dim);
        return -1;
    }
    if (k < 0 || k > c->dim) {
        PyErr_Format(PyExc_ValueError, "%s: k must be in [0, dim=%zd], got %zd", fn,
                     (Py_ssize_t)c->dim, k);
        return -1;
    }
    c->ext[0] = k;
    return 0;
}
static int call_topk(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_topk_exact_f32(c->rows, c->dim, c->ssz[0], G_DATA(c, 0), G_DATA(c, 1), G_DATA(c, 2),
                             c->n_threads);
}
static int call_randk(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_topk_random_f32(c->rows, c->dim, c->ssz[0], G_DATA(c, 0), c->seed, c->step, c->peer0,
                              G_DATA(c, 1), G_DATA(c, 2), c->n_threads);
}

/* threshold(x, v, n_threads) -> (counts int64 (n,), idx int32 (sum,), val float32 (sum,)). */
static PyObject *py_threshold(PyObject *self, PyObject *args) {
    PyArrayObject *x, *counts = NULL, *idx = NULL, *val = NULL;
    PyObject *result = NULL;
    float v;
    int n_threads, status;
    int64_t *chunk = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!fO&:threshold", &PyArray_Type, &x, &v, conv_threads, &n_threads))
        return NULL;
    if (check_array(x, "threshold", "x", NPY_FLOAT32, 2, 0) ||
        check_threads("threshold", n_threads))
        return NULL;
    if (!(v >= 0.0f))
        return PyErr_Format(PyExc_ValueError, "threshold: v must be a number >= 0, got %R",
                            PyTuple_GET_ITEM(args, 1));
    const npy_intp rows = PyArray_DIM(x, 0), dim = PyArray_DIM(x, 1);
    if (dim > INT32_MAX)
        return PyErr_Format(PyExc_ValueError,
                            "threshold: x rows must be shorter than 2^31, got dim=%zd",
                            (Py_ssize_t)dim);
    const int64_t nc = dl_topk_threshold_chunks(dim);
    chunk = PyMem_RawMalloc((size_t)(rows * nc > 0 ? rows * nc : 1) * sizeof(int64_t));
    if (chunk == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS;
    status = dl_topk_threshold_count_f32(rows, dim, v, PyArray_DATA(x), chunk, n_threads);
    Py_END_ALLOW_THREADS;
    if (status == DL_E_NONFINITE) {
        PyErr_SetString(NonFiniteError, "threshold: x must not contain NaN");
        goto done;
    }
    if (status != DL_OK) {
        raise_status("threshold", status);
        goto done;
    }
    npy_intp n_rows = rows, total = 0;
    counts = (PyArrayObject *)PyArray_SimpleNew(1, &n_rows, NPY_INT64);
    if (counts == NULL) goto done;
    int64_t *cp = PyArray_DATA(counts);
    for (npy_intp r = 0; r < rows; r++) {
        cp[r] = 0;
        for (int64_t c = 0; c < nc; c++) cp[r] += chunk[r * nc + c];
        total += cp[r];
    }
    idx = (PyArrayObject *)PyArray_SimpleNew(1, &total, NPY_INT32);
    val = (PyArrayObject *)PyArray_SimpleNew(1, &total, NPY_FLOAT32);
    if (idx == NULL || val == NULL) goto done;
    Py_BEGIN_ALLOW_THREADS;
    status = dl_topk_threshold_f32(rows, dim, v, PyArray_DATA(x), chunk, PyArray_DATA(idx),
                                   PyArray_DATA(val), n_threads);
    Py_END_ALLOW_THREADS;
    if (status != DL_OK) {
        raise_status("threshold", status);
        goto done;
    }
    result = Py_BuildValue("(OOO)", counts, idx, val);
done:
    PyMem_RawFree(chunk);
    Py_XDECREF(counts);
    Py_XDECREF(idx);
    Py_XDECREF(val);
    return result;
}

/* scatter(idx, val, out, n_threads) is a table row: idx (R, k) int32, val (R, k) float32, out
 * (R, dim) float32. */
static int check_scatter(glue_call_t *c) {
    c->ext[0] = PyArray_DIM(c->arr[0], 1);
    return 0;
}
static int call_scatter(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_topk_scatter_f32(c->rows, c->ext[0], c->dim, G_DATA(c, 0), G_DATA(c, 1),
                               G_DATA(c, 2), c->n_threads);
}

static const glue_op_t ops[] = {
    {"topk",
     "topk(x, k, out_idx, out_val, n_threads) -> (out_idx, out_val): k largest |x| per row.",
     {G_IN("x", NPY_FLOAT32, 2, X_R, X_D), G_N("k"), G_OUT("out_idx", NPY_INT32, 2, X_R, X_E0),
      G_OUT("out_val", NPY_FLOAT32, 2, X_R, X_E0), G_THREADS_ARG},
     0, 0, check_topk_k, NULL, call_topk,
     {DL_E_NONFINITE, &NonFiniteError, "%s: x must not contain NaN", E_NONE}, 2, {1, 2}},
    {"randk", "randk(x, k, seed, step, peer0, out_idx, out_val, n_threads) -> (out_idx, out_val).",
     {G_IN("x", NPY_FLOAT32, 2, X_R, X_D), G_N("k"), G_SEED_ARG, G_STEP_ARG, G_PEER0_ARG,
      G_OUT("out_idx", NPY_INT32, 2, X_R, X_E0), G_OUT("out_val", NPY_FLOAT32, 2, X_R, X_E0),
      G_THREADS_ARG},
     0, 0, check_topk_k, NULL, call_randk, {0}, 2, {1, 2}},
    {"scatter", "scatter(idx, val, out, n_threads) -> out: zeros with out[r, idx[r, j]] = "
     "val[r, j].",
     {G_IN("idx", NPY_INT32, 2, X_R, X_ANY), G_IN("val", NPY_FLOAT32, 2, X_R, X_E0),
      G_OUT("out", NPY_FLOAT32, 2, X_R, X_D), G_THREADS_ARG},
     0, 2, check_scatter, NULL, call_scatter,
     {DL_E_INDEX, &PyExc_ValueError, "%s: idx must hold column indices in [0, dim)", E_NONE}, 1,
     {2}},
};

static PyMethodDef methods[] = {
    {"threshold", py_threshold, METH_VARARGS,
     "threshold(x, v, n_threads) -> (counts, idx, val): every |x| >= v, rows concatenated."},
    {NULL, NULL, 0, NULL},
};

GLUE_FAMILY(topk, ops, methods);
