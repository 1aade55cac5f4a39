/* rng.c: glue of the counter-based generators (csrc/rng.c): rng_u32 and rng_fast_u32 fill a
 * (rows, dim) uint32 array with the words of (seed, step, peer0 + row, column). Two glue_op_t
 * rows; decentlearn/ops/rng.py is the Python side.
 */
#include "glue.h"

static int call_rng_u32(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_rng_fill_u32(c->rows, c->dim, c->seed, c->step, c->peer0, 0, G_DATA(c, 0),
                           c->n_threads);
}
static int call_rng_fast_u32(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_rng_fill_u32(c->rows, c->dim, c->seed, c->step, c->peer0, 1, G_DATA(c, 0),
                           c->n_threads);
}

/* hash_smallest(base, out, n_threads) -> out: out (n, s) int64, row j the s columns k != j of the
 * smallest keys of (base, j, k) (dl_hash_smallest): Epidemic Learning's out-neighbours. */
static PyObject *py_hash_smallest(PyObject *self, PyObject *args) {
    PyArrayObject *out;
    unsigned long long base;
    int n_threads, status;
    (void)self;
    if (!PyArg_ParseTuple(args, "O&O!O&:hash_smallest", conv_seed, &base, &PyArray_Type, &out,
                          conv_threads, &n_threads))
        return NULL;
    if (check_array(out, "hash_smallest", "out", NPY_INT64, 2, 1) ||
        check_threads("hash_smallest", n_threads))
        return NULL;
    const npy_intp n = PyArray_DIM(out, 0), s = PyArray_DIM(out, 1);
    if (n < 2 || s < 1 || s > n - 1) {
        PyErr_Format(PyExc_ValueError, "hash_smallest: out must be (n, s) with n >= 2 and 1 <= s "
                     "<= n - 1, got (%zd, %zd)", (Py_ssize_t)n, (Py_ssize_t)s);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS;
    status = dl_hash_smallest(n, s, (uint64_t)base, PyArray_DATA(out), n_threads);
    Py_END_ALLOW_THREADS;
    if (status != DL_OK) return raise_status("hash_smallest", status);
    Py_INCREF(out);
    return (PyObject *)out;
}

static PyMethodDef methods[] = {
    {"hash_smallest", py_hash_smallest, METH_VARARGS,
     "hash_smallest(base, out, n_threads) -> out: row j of the (n, s) int64 out holds the s "
     "columns k != j with the smallest 53-bit keys mix64(mix64(base + G + j) + G + k) >> 11."},
    {NULL, NULL, 0, NULL},
};

static const glue_op_t ops[] = {
    {"rng_u32", "rng_u32(seed, step, peer0, out, n_threads) -> out.",
     {G_SEED_ARG, G_STEP_ARG, G_PEER0_ARG, G_OUT("out", NPY_UINT32, 2, X_R, X_D), G_THREADS_ARG},
     0, 0, NULL, NULL, call_rng_u32, {0}, 1, {0}},
    {"rng_fast_u32", "rng_fast_u32(seed, step, peer0, out, n_threads) -> out.",
     {G_SEED_ARG, G_STEP_ARG, G_PEER0_ARG, G_OUT("out", NPY_UINT32, 2, X_R, X_D), G_THREADS_ARG},
     0, 0, NULL, NULL, call_rng_fast_u32, {0}, 1, {0}},
};

GLUE_FAMILY(rng, ops, methods);
