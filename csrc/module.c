/* module.c: the CPython/NumPy glue of decentlearn._core, the only file that includes Python.h.
 *
 * Each function parses its arguments, checks every array's dtype (TypeError), dimensions, shape,
 * contiguity, alignment and writability (ValueError naming the argument, with expected and actual
 * values), never copies an out= array, releases the GIL exactly around the kernel call, and turns a
 * kernel's DL_E_* status into an exception. Defaults (threads, out=None) are resolved in
 * decentlearn/ops.py, not here.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_2_0_API_VERSION
#include <numpy/arrayobject.h>

#include "dl.h"

/* Checks an array argument; sets a Python exception and returns -1 on failure. */
static int check_array(PyArrayObject *a, const char *fn, const char *name, int type_num, int ndim,
                       int writeable) {
    if (PyArray_TYPE(a) != type_num) {
        PyArray_Descr *want = PyArray_DescrFromType(type_num);
        PyErr_Format(PyExc_TypeError, "%s: %s must have dtype %S, got %S", fn, name, (PyObject *)want,
                     (PyObject *)PyArray_DESCR(a));
        Py_XDECREF(want);
        return -1;
    }
    if (PyArray_NDIM(a) != ndim) {
        PyErr_Format(PyExc_ValueError, "%s: %s must be %d-dimensional, got %d dimensions", fn, name,
                     ndim, PyArray_NDIM(a));
        return -1;
    }
    if (!PyArray_IS_C_CONTIGUOUS(a)) {
        PyErr_Format(PyExc_ValueError, "%s: %s must be C-contiguous (use np.ascontiguousarray)", fn,
                     name);
        return -1;
    }
    if (!PyArray_ISALIGNED(a)) {
        PyErr_Format(PyExc_ValueError, "%s: %s must be aligned to its dtype", fn, name);
        return -1;
    }
    if (writeable && !PyArray_ISWRITEABLE(a)) {
        PyErr_Format(PyExc_ValueError, "%s: %s must be writeable", fn, name);
        return -1;
    }
    return 0;
}

static int overlaps(PyArrayObject *a, PyArrayObject *b) {
    const char *a0 = PyArray_BYTES(a), *b0 = PyArray_BYTES(b);
    const char *a1 = a0 + PyArray_NBYTES(a), *b1 = b0 + PyArray_NBYTES(b);
    return PyArray_NBYTES(a) > 0 && PyArray_NBYTES(b) > 0 && a0 < b1 && b0 < a1;
}

static int check_threads(const char *fn, int n_threads) {
    if (n_threads < 1) {
        PyErr_Format(PyExc_ValueError, "%s: n_threads must be >= 1, got %d", fn, n_threads);
        return -1;
    }
    return 0;
}

/* gossip(indptr, indices, data, n_cols, x, out, n_threads) -> out; out = W @ x, W CSR. */
static PyObject *py_gossip(PyObject *self, PyObject *args) {
    PyArrayObject *indptr, *indices, *data, *x, *out;
    Py_ssize_t n_cols;
    int n_threads, status;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!O!nO!O!i:gossip", &PyArray_Type, &indptr, &PyArray_Type,
                          &indices, &PyArray_Type, &data, &n_cols, &PyArray_Type, &x,
                          &PyArray_Type, &out, &n_threads))
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
    if (overlaps(x, out)) {
        PyErr_SetString(PyExc_ValueError, "gossip: out must not share memory with X");
        return NULL;
    }
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

/* Raises the Python exception for a kernel status; `fn` names the function. Returns NULL. */
static PyObject *raise_status(const char *fn, int status) {
    switch (status) {
    case DL_E_NONFINITE:
        return PyErr_Format(PyExc_ValueError, "%s: x must be finite (no NaN or infinity)", fn);
    case DL_E_FORMAT:
        return PyErr_Format(PyExc_ValueError, "%s: malformed encoded data", fn);
    case DL_E_SPACE:
        return PyErr_Format(PyExc_ValueError, "%s: output buffer too small", fn);
    case DL_E_NOMEM:
        return PyErr_NoMemory();
    default:
        return PyErr_Format(PyExc_RuntimeError, "%s: kernel failed with status %d", fn, status);
    }
}

/* Checks a 2-D array has exactly the given shape (rows, cols). */
static int check_shape2(PyArrayObject *a, const char *fn, const char *name, npy_intp rows,
                        npy_intp cols) {
    if (PyArray_DIM(a, 0) != rows || PyArray_DIM(a, 1) != cols) {
        PyErr_Format(PyExc_ValueError, "%s: %s must have shape (%zd, %zd), got (%zd, %zd)", fn,
                     name, (Py_ssize_t)rows, (Py_ssize_t)cols, (Py_ssize_t)PyArray_DIM(a, 0),
                     (Py_ssize_t)PyArray_DIM(a, 1));
        return -1;
    }
    return 0;
}

/* rng_u32(seed, step, peer0, out, n_threads) -> out: the generator's numbers for each row/index. */
static PyObject *py_rng_u32(PyObject *self, PyObject *args) {
    unsigned long long seed, step;
    long long peer0;
    PyArrayObject *out;
    int n_threads, status;
    (void)self;
    if (!PyArg_ParseTuple(args, "KKLO!i:rng_u32", &seed, &step, &peer0, &PyArray_Type, &out,
                          &n_threads))
        return NULL;
    if (check_array(out, "rng_u32", "out", NPY_UINT32, 2, 1) || check_threads("rng_u32", n_threads))
        return NULL;
    Py_BEGIN_ALLOW_THREADS;
    status = dl_rng_fill_u32(PyArray_DIM(out, 0), PyArray_DIM(out, 1), seed, step, peer0,
                             PyArray_DATA(out), n_threads);
    Py_END_ALLOW_THREADS;
    if (status != DL_OK) return raise_status("rng_u32", status);
    Py_INCREF(out);
    return (PyObject *)out;
}

/* bitpack(codes (r, d) uint8, bits, out (r, row_bytes) uint8, n_threads) -> out */
static PyObject *py_bitpack(PyObject *self, PyObject *args) {
    PyArrayObject *codes, *out;
    int bits, n_threads, status;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!iO!i:bitpack", &PyArray_Type, &codes, &bits, &PyArray_Type, &out,
                          &n_threads))
        return NULL;
    if (check_array(codes, "bitpack", "codes", NPY_UINT8, 2, 0) ||
        check_array(out, "bitpack", "out", NPY_UINT8, 2, 1) || check_threads("bitpack", n_threads))
        return NULL;
    if (bits < 1 || bits > 8)
        return PyErr_Format(PyExc_ValueError, "bitpack: bits must be in [1, 8], got %d", bits);
    const npy_intp rows = PyArray_DIM(codes, 0), dim = PyArray_DIM(codes, 1);
    if (check_shape2(out, "bitpack", "out", rows, dl_bitpack_row_bytes(dim, bits))) return NULL;
    Py_BEGIN_ALLOW_THREADS;
    status = dl_bitpack_u8(rows, dim, bits, PyArray_DATA(codes), PyArray_DATA(out), n_threads);
    Py_END_ALLOW_THREADS;
    if (status != DL_OK) return raise_status("bitpack", status);
    Py_INCREF(out);
    return (PyObject *)out;
}

/* bitunpack(packed (r, row_bytes) uint8, bits, out (r, d) uint8, n_threads) -> out */
static PyObject *py_bitunpack(PyObject *self, PyObject *args) {
    PyArrayObject *packed, *out;
    int bits, n_threads, status;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!iO!i:bitunpack", &PyArray_Type, &packed, &bits, &PyArray_Type,
                          &out, &n_threads))
        return NULL;
    if (check_array(packed, "bitunpack", "packed", NPY_UINT8, 2, 0) ||
        check_array(out, "bitunpack", "out", NPY_UINT8, 2, 1) ||
        check_threads("bitunpack", n_threads))
        return NULL;
    if (bits < 1 || bits > 8)
        return PyErr_Format(PyExc_ValueError, "bitunpack: bits must be in [1, 8], got %d", bits);
    const npy_intp rows = PyArray_DIM(out, 0), dim = PyArray_DIM(out, 1);
    if (check_shape2(packed, "bitunpack", "packed", rows, dl_bitpack_row_bytes(dim, bits)))
        return NULL;
    Py_BEGIN_ALLOW_THREADS;
    status = dl_bitunpack_u8(rows, dim, bits, PyArray_DATA(packed), PyArray_DATA(out), n_threads);
    Py_END_ALLOW_THREADS;
    if (status != DL_OK) return raise_status("bitunpack", status);
    Py_INCREF(out);
    return (PyObject *)out;
}

/* >>> glue natural */
/* <<< glue natural */

/* >>> glue topk */
/* <<< glue topk */

/* >>> glue stc */
/* <<< glue stc */

/* >>> glue quant */
/* <<< glue quant */

/* config() -> dict describing the build and the active paths. */
static PyObject *py_config(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    PyObject *supported = PyList_New(0);
    if (supported == NULL) return NULL;
    for (int i = 0; i < DL_ISA_COUNT; i++) {
        if (!dl_isa_supported((dl_isa_t)i)) continue;
        PyObject *name = PyUnicode_FromString(dl_isa_name((dl_isa_t)i));
        if (name == NULL || PyList_Append(supported, name) < 0) {
            Py_XDECREF(name);
            Py_DECREF(supported);
            return NULL;
        }
        Py_DECREF(name);
    }
#ifdef _OPENMP
    const int openmp = 1, max_threads = omp_get_max_threads(), omp_version = _OPENMP;
#else
    const int openmp = 0, max_threads = 1, omp_version = 0;
#endif
#if defined(__VERSION__)
    const char *compiler = __VERSION__;
#else
    const char *compiler = "unknown";
#endif
    return Py_BuildValue("{s:s,s:N,s:O,s:i,s:i,s:s}", "isa", dl_dispatch()->name, "isa_supported",
                         supported, "openmp", openmp ? Py_True : Py_False, "omp_max_threads",
                         max_threads, "omp_version", omp_version, "compiler", compiler);
}

/* set_isa(name) forces an instruction-set path for every kernel (tests, benchmarks). */
static PyObject *py_set_isa(PyObject *self, PyObject *args) {
    const char *name;
    (void)self;
    if (!PyArg_ParseTuple(args, "s:set_isa", &name)) return NULL;
    for (int i = 0; i < DL_ISA_COUNT; i++) {
        if (strcmp(name, dl_isa_name((dl_isa_t)i)) != 0) continue;
        if (dl_set_isa((dl_isa_t)i) != DL_OK) {
            PyErr_Format(PyExc_ValueError, "set_isa: this CPU or build does not support '%s'",
                         name);
            return NULL;
        }
        Py_RETURN_NONE;
    }
    PyErr_Format(PyExc_ValueError, "set_isa: isa must be one of 'generic', 'avx2', 'avx512', got '%s'",
                 name);
    return NULL;
}

static PyMethodDef methods[] = {
    {"gossip", py_gossip, METH_VARARGS,
     "gossip(indptr, indices, data, n_cols, x, out, n_threads) -> out = W @ x for CSR W."},
    {"rng_u32", py_rng_u32, METH_VARARGS, "rng_u32(seed, step, peer0, out, n_threads) -> out."},
    {"bitpack", py_bitpack, METH_VARARGS, "bitpack(codes, bits, out, n_threads) -> out."},
    {"bitunpack", py_bitunpack, METH_VARARGS, "bitunpack(packed, bits, out, n_threads) -> out."},
    /* >>> methods natural */
    /* <<< methods natural */
    /* >>> methods topk */
    /* <<< methods topk */
    /* >>> methods stc */
    /* <<< methods stc */
    /* >>> methods quant */
    /* <<< methods quant */
    {"config", py_config, METH_NOARGS, "config() -> dict describing the build and active ISA."},
    {"set_isa", py_set_isa, METH_VARARGS, "set_isa(name): force 'generic', 'avx2' or 'avx512'."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "decentlearn._core",
                                       "C kernels of decentlearn (see decentlearn.ops).", -1,
                                       methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__core(void) {
    import_array();
    const char *forced = getenv("DECENTLEARN_ISA");
    if (forced != NULL && forced[0] != '\0') {
        int found = 0;
        for (int i = 0; i < DL_ISA_COUNT; i++) {
            if (strcmp(forced, dl_isa_name((dl_isa_t)i)) != 0) continue;
            found = 1;
            if (dl_set_isa((dl_isa_t)i) != DL_OK) {
                PyErr_Format(PyExc_ImportError,
                             "DECENTLEARN_ISA=%s: this CPU or build does not support it", forced);
                return NULL;
            }
        }
        if (!found) {
            PyErr_Format(PyExc_ImportError,
                         "DECENTLEARN_ISA must be 'generic', 'avx2' or 'avx512', got '%s'", forced);
            return NULL;
        }
    }
    (void)dl_dispatch();
    return PyModule_Create(&moduledef);
}
