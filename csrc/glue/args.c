/* args.c: the argument converters and checks every glue file shares (declared in glue.h).
 *
 * Every glue function converts seeds, steps, peers and thread counts with the same "O&"
 * converters, checks arrays with check_array (dtype -> TypeError; dimensions, contiguity,
 * alignment, writability -> ValueError naming the argument), checks outputs against inputs with
 * check_disjoint, and turns a kernel's DL_E_* status into an exception with raise_status, so the
 * checks and their messages are the same everywhere and always name the argument.
 */
#include "glue.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* The checks every array argument shares: aligned to its dtype, and writeable for an output. */
int check_aligned_writeable(PyArrayObject *a, const char *fn, const char *name,
                                   int writeable) {
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

/* Checks an array argument; sets a Python exception and returns -1 on failure. */
int check_array(PyArrayObject *a, const char *fn, const char *name, int type_num, int ndim,
                       int writeable) {
    if (PyArray_TYPE(a) != type_num) {
        PyArray_Descr *want = PyArray_DescrFromType(type_num);
        PyErr_Format(PyExc_TypeError, "%s: %s must have dtype %S, got %S", fn, name,
                     (PyObject *)want, (PyObject *)PyArray_DESCR(a));
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
    return check_aligned_writeable(a, fn, name, writeable);
}

int overlaps(PyArrayObject *a, PyArrayObject *b) {
    const char *a0 = PyArray_BYTES(a), *b0 = PyArray_BYTES(b);
    const char *a1 = a0 + PyArray_NBYTES(a), *b1 = b0 + PyArray_NBYTES(b);
    return PyArray_NBYTES(a) > 0 && PyArray_NBYTES(b) > 0 && a0 < b1 && b0 < a1;
}

int check_threads(const char *fn, int n_threads) {
    if (n_threads < 1) {
        PyErr_Format(PyExc_ValueError, "%s: n_threads must be >= 1, got %d", fn, n_threads);
        return -1;
    }
    return 0;
}

/* An integer argument in [0, 2^64 - 1] (never wrapped modulo 2^64, as "K" would). */
static int conv_u64(PyObject *o, unsigned long long *v, const char *name) {
    PyObject *i = PyNumber_Index(o);
    if (i == NULL) {
        PyErr_Format(PyExc_TypeError, "%s must be an integer, got %s", name, Py_TYPE(o)->tp_name);
        return 0;
    }
    const unsigned long long r = PyLong_AsUnsignedLongLong(i);
    if (r == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s must be an integer >= 0 and <= 2**64 - 1, got %R", name,
                     i);
        Py_DECREF(i);
        return 0;
    }
    Py_DECREF(i);
    *v = r;
    return 1;
}

/* An integer argument in [lo, hi] (a C long long), named in the error. */
static int conv_ll(PyObject *o, long long *v, const char *name, long long lo, long long hi,
                   const char *range) {
    PyObject *i = PyNumber_Index(o);
    if (i == NULL) {
        PyErr_Format(PyExc_TypeError, "%s must be an integer, got %s", name, Py_TYPE(o)->tp_name);
        return 0;
    }
    int overflow = 0;
    const long long r = PyLong_AsLongLongAndOverflow(i, &overflow);
    if ((r == -1 && PyErr_Occurred()) || overflow || r < lo || r > hi) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s must be an integer %s, got %R", name, range, i);
        Py_DECREF(i);
        return 0;
    }
    Py_DECREF(i);
    *v = r;
    return 1;
}

int conv_seed(PyObject *o, void *v) { return conv_u64(o, v, "seed"); }
int conv_step(PyObject *o, void *v) { return conv_u64(o, v, "step"); }
int conv_peer0(PyObject *o, void *v) {
    return conv_ll(o, v, "peer0", 0, INT64_MAX, ">= 0 and <= 2**63 - 1");
}

/* The most threads a kernel gets: the CPUs this process may use (OpenMP's count, which follows the
 * affinity mask; 1 without OpenMP), or DECENTLEARN_THREAD_CAP when it holds an integer in
 * [1, 4096] (the test suite sets it so that teams larger than a small machine's really run, as
 * decentlearn.ops.threads does). */
static int cpu_limit(void) {
#ifdef _OPENMP
    const char *env = getenv("DECENTLEARN_THREAD_CAP");
    if (env != NULL) {
        char *end = NULL;
        const long cap = strtol(env, &end, 10);
        if (end != env && *end == '\0' && cap >= 1 && cap <= 4096) return (int)cap;
    }
    const int n = omp_get_num_procs();
    return n > 0 ? n : 1;
#else
    return 1;
#endif
}

/* n_threads >= 1, capped at the CPU count: more threads than CPUs only add overhead, and results
 * never depend on the thread count. */
int conv_threads(PyObject *o, void *v) {
    PyObject *i = PyNumber_Index(o);
    if (i == NULL) {
        PyErr_Format(PyExc_TypeError, "n_threads must be an integer, got %s", Py_TYPE(o)->tp_name);
        return 0;
    }
    int overflow = 0;
    const long long n = PyLong_AsLongLongAndOverflow(i, &overflow);
    if ((n == -1 && PyErr_Occurred()) || overflow < 0 || (!overflow && n < 1)) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "n_threads must be an integer >= 1, got %R", i);
        Py_DECREF(i);
        return 0;
    }
    Py_DECREF(i);
    const int cap = cpu_limit();
    *(int *)v = (overflow > 0 || n > cap) ? cap : (int)n;
    return 1;
}

/* Rows peer0 .. peer0 + rows - 1 must be representable (the generator's peer is an int64). */
int check_peer_rows(const char *fn, long long peer0, npy_intp rows) {
    if (rows > 0 && peer0 > INT64_MAX - (rows - 1)) {
        PyErr_Format(PyExc_ValueError,
                     "%s: peer0 + n_rows - 1 must be <= 2**63 - 1, got peer0=%lld with %zd rows",
                     fn, peer0, (Py_ssize_t)rows);
        return -1;
    }
    return 0;
}

/* check_disjoint(fn, n_out, n, a0, name0, a1, name1, ...): the first n_out of the n arrays are
 * outputs; each must share no memory with any other array (NULL entries are skipped). Sets a
 * ValueError naming both arrays and returns -1 when two do. */
int check_disjoint(const char *fn, int n_out, int n, ...) {
    PyArrayObject *arr[8];
    const char *names[8];
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n && i < 8; i++) {
        arr[i] = va_arg(ap, PyArrayObject *);
        names[i] = va_arg(ap, const char *);
    }
    va_end(ap);
    for (int i = 0; i < n_out && i < 8; i++)
        for (int j = 0; j < n && j < 8; j++)
            if (j != i && arr[i] != NULL && arr[j] != NULL && overlaps(arr[i], arr[j])) {
                PyErr_Format(PyExc_ValueError, "%s: %s must not share memory with %s", fn,
                             names[i], names[j]);
                return -1;
            }
    return 0;
}

/* Every value of a float32 array is finite (scales from a caller; the siblings refuse NaN/inf). */
int check_finite_f32(const char *fn, const char *name, PyArrayObject *a) {
    const float *v = PyArray_DATA(a);
    for (npy_intp i = 0; i < PyArray_SIZE(a); i++)
        if (!isfinite(v[i])) {
            char buf[32];
            snprintf(buf, sizeof buf, "%g", (double)v[i]);
            PyErr_Format(PyExc_ValueError, "%s: %s must be finite, got %s at index %zd", fn, name,
                         buf, (Py_ssize_t)i);
            return -1;
        }
    return 0;
}
/* decentlearn._core.NonFiniteError: a ValueError for NaN/inf input (training that diverged). */
PyObject *NonFiniteError = NULL;

/* Raises the Python exception for a kernel status; `fn` names the function. Returns NULL. */
PyObject *raise_status(const char *fn, int status) {
    switch (status) {
    case DL_E_NONFINITE:
        return PyErr_Format(NonFiniteError, "%s: x must be finite (no NaN or infinity)", fn);
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
int check_shape2(PyArrayObject *a, const char *fn, const char *name, npy_intp rows,
                        npy_intp cols) {
    if (PyArray_DIM(a, 0) != rows || PyArray_DIM(a, 1) != cols) {
        PyErr_Format(PyExc_ValueError, "%s: %s must have shape (%zd, %zd), got (%zd, %zd)", fn,
                     name, (Py_ssize_t)rows, (Py_ssize_t)cols, (Py_ssize_t)PyArray_DIM(a, 0),
                     (Py_ssize_t)PyArray_DIM(a, 1));
        return -1;
    }
    return 0;
}
