/* module.c: the CPython/NumPy glue of decentlearn._core, the only file that includes Python.h.
 *
 * Each function parses its arguments, checks every array's dtype (TypeError), dimensions, shape,
 * contiguity, alignment and writability (ValueError naming the argument, with expected and actual
 * values), never copies an out= array, releases the GIL exactly around the kernel call, and turns a
 * kernel's DL_E_* status into an exception. Defaults (threads, out=None) are resolved in
 * decentlearn/ops.py, not here.
 *
 * Most functions are rows of the table glue_ops[] run by one driver, glue_run (the comment above
 * it gives the row format and the order of the checks; docs/testing.md has an annotated row): a
 * new kernel of the usual shape is one table row plus a one-line call thunk. The functions in
 * methods[] are hand-written because their arguments do not fit a row.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_2_0_API_VERSION
#include <numpy/arrayobject.h>

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>

#include "dl.h"

/* The checks every array argument shares: aligned to its dtype, and writeable for an output. */
static int check_aligned_writeable(PyArrayObject *a, const char *fn, const char *name,
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
    return check_aligned_writeable(a, fn, name, writeable);
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

/* ---- Shared argument helpers: every glue function converts seeds, steps, peers and thread counts
 * with the same "O&" converters and checks outputs against inputs with check_disjoint, so the
 * checks and their messages are the same everywhere and always name the argument. ---- */

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

static int conv_seed(PyObject *o, void *v) { return conv_u64(o, v, "seed"); }
static int conv_step(PyObject *o, void *v) { return conv_u64(o, v, "step"); }
static int conv_peer0(PyObject *o, void *v) {
    return conv_ll(o, v, "peer0", 0, INT64_MAX, ">= 0 and <= 2**63 - 1");
}

/* CPUs this process may use (OpenMP's count, which follows the affinity mask); 1 without OpenMP. */
static int cpu_limit(void) {
#ifdef _OPENMP
    const int n = omp_get_num_procs();
    return n > 0 ? n : 1;
#else
    return 1;
#endif
}

/* n_threads >= 1, capped at the CPU count: more threads than CPUs only add overhead, and results
 * never depend on the thread count. */
static int conv_threads(PyObject *o, void *v) {
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
static int check_peer_rows(const char *fn, long long peer0, npy_intp rows) {
    if (rows > 0 && peer0 > INT64_MAX - (rows - 1)) {
        PyErr_Format(PyExc_ValueError,
                     "%s: peer0 + n_rows - 1 must be <= 2**63 - 1, got peer0=%lld with %zd rows", fn,
                     peer0, (Py_ssize_t)rows);
        return -1;
    }
    return 0;
}

/* check_disjoint(fn, n_out, n, a0, name0, a1, name1, ...): the first n_out of the n arrays are
 * outputs; each must share no memory with any other array (NULL entries are skipped). Sets a
 * ValueError naming both arrays and returns -1 when two do. */
static int check_disjoint(const char *fn, int n_out, int n, ...) {
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
static int check_finite_f32(const char *fn, const char *name, PyArrayObject *a) {
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

/* decentlearn._core.NonFiniteError: a ValueError for NaN/inf input (training that diverged). */
static PyObject *NonFiniteError = NULL;

/* Raises the Python exception for a kernel status; `fn` names the function. Returns NULL. */
static PyObject *raise_status(const char *fn, int status) {
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

/* ---- Table-driven glue ---------------------------------------------------------------------
 * Most kernels have the same shape: some (rows, dim) arrays, a few scalars, outputs passed by the
 * caller. Such a kernel is described by one glue_op_t row in glue_ops[] (below) and run by ONE
 * driver, glue_run, which does, in this order:
 *   1. parse: a PyArg_ParseTuple format built from args[] ("O!" for an array, "O" for an array
 *      or None (G_OPT_*: None leaves the slot NULL and skips its checks), "i", "p", "n", "f", "O&"
 *      with conv_seed / conv_step / conv_peer0 / conv_threads), so argument-count and type errors
 *      read as in a hand-written function ("topk() argument 1 must be numpy.ndarray, not list");
 *   2. every array: dtype (TypeError), ndim, C-contiguous, aligned, writeable when an output
 *      (G_F32_OR_S8: the first array's dtype if int8, else float32; G_NDIM_ANY: any ndim);
 *   3. R = axis 0 of args[rows_from] and D = axis 1 of args[cols_from] (array slots, counted
 *      among the arrays only); each int scalar with a range: "fn: name must be in [lo, hi], got v";
 *   4. op->check (optional): the op's own scalar checks; it may set ext[0], ext[1] (derived
 *      extents such as packed row bytes);
 *   5. with a peer0 argument: peer0 + R - 1 <= 2**63 - 1;
 *   6. each array's shape, axis by axis: X_R, X_D, X_E0, X_E1 (== ext[i]), X_GE_E0 (>= ext[0]);
 *   7. every output shares no memory with any other array (outputs, then inputs, in order);
 *   8. op->post (optional): checks that read array contents (after the shapes are known);
 *   9. op->call without the GIL (the dispatch table is read with the GIL held);
 *  10. status: op->err.status gets op->err's message, others go to raise_status;
 *  11. return: None, the array slot ret[0], or a tuple of slots ret[0], ret[1].
 * Adding a kernel of this shape is one row in glue_ops[] plus a one-line call thunk. Kernels whose
 * arguments do not fit (CSR matrices, strided or optional operands, results allocated here) keep
 * a hand-written function listed in methods[]. */

enum { G_END = 0, G_ARR, G_OPT_ARR, G_INT, G_BOOL, G_SSIZE, G_FLOAT, G_SEED, G_STEP, G_PEER0,
       G_THREADS };
enum { X_ANY = 0, X_R, X_D, X_E0, X_E1, X_GE_E0 };   /* a required extent of one array axis */
enum { E_NONE = 0, E_I0, E_POW2_I0, E_POW2M1_I0 };   /* the %d of a status message */
/* An array dtype that follows the first array: int8 when it is int8, else float32 (the call thunk
 * picks the kernel of c->dtype). */
#define G_F32_OR_S8 (-1)
#define G_NDIM_ANY (-1) /* an array of any number of dimensions (op->check relates the shapes) */
#define GLUE_MAX_ARGS 12
#define GLUE_MAX_ARRAYS 6

typedef struct {
    int kind;               /* G_* */
    const char *name;       /* arrays and ranged ints: the name in messages */
    int dtype, ndim, out;   /* arrays: NPY_* type (or G_F32_OR_S8), dimensions, written by the
                               kernel */
    int dims[2];            /* arrays: X_* for axes 0 and 1 (further axes: op->check) */
    int ranged;             /* G_INT: check lo <= v <= hi */
    long long lo, hi;
} glue_arg_t;

typedef struct glue_op glue_op_t;

/* One call's converted arguments, in declaration order per kind (the sizes fit the largest row). */
typedef struct {
    const glue_op_t *op;
    PyObject *args;
    PyArrayObject *arr[GLUE_MAX_ARRAYS];
    int ints[3];
    Py_ssize_t ssz[6];
    int dtype; /* G_F32_OR_S8 resolved */
    float flt[4];
    unsigned long long seed, step;
    long long peer0;
    int n_threads;
    npy_intp rows, dim, ext[2];
} glue_call_t;

struct glue_op {
    const char *name, *doc;
    glue_arg_t args[GLUE_MAX_ARGS]; /* Python argument order, ended by G_END */
    int rows_from, cols_from;       /* array slots (never optional) giving R (axis 0), D (axis 1) */
    int (*check)(glue_call_t *c);   /* optional, -1 with an exception set */
    int (*post)(glue_call_t *c);    /* optional, -1 with an exception set */
    int (*call)(const glue_call_t *c, const dl_dispatch_t *d);
    struct {
        int status;       /* 0: none */
        PyObject **exc;   /* &PyExc_ValueError or &NonFiniteError */
        const char *fmt;  /* "%s: ... %d": the function name, then the value picked by `arg` */
        int arg;          /* E_* */
    } err;
    int n_ret;               /* 0: None, 1: the array, 2: a tuple */
    signed char ret[2];      /* array slots returned */
};

#define G_IN(nm, ty, nd, d0, d1) {G_ARR, nm, ty, nd, 0, {d0, d1}, 0, 0, 0}
#define G_OUT(nm, ty, nd, d0, d1) {G_ARR, nm, ty, nd, 1, {d0, d1}, 0, 0, 0}
/* An array or None (then its slot is NULL: no checks, the thunk passes NULL). */
#define G_OPT_IN(nm, ty, nd, d0, d1) {G_OPT_ARR, nm, ty, nd, 0, {d0, d1}, 0, 0, 0}
#define G_OPT_OUT(nm, ty, nd, d0, d1) {G_OPT_ARR, nm, ty, nd, 1, {d0, d1}, 0, 0, 0}
#define G_BOOL_ARG(nm) {G_BOOL, nm, 0, 0, 0, {0, 0}, 0, 0, 0}
#define G_INT_IN(nm, l, h) {G_INT, nm, 0, 0, 0, {0, 0}, 1, l, h}
#define G_I(nm) {G_INT, nm, 0, 0, 0, {0, 0}, 0, 0, 0}
#define G_N(nm) {G_SSIZE, nm, 0, 0, 0, {0, 0}, 0, 0, 0}
#define G_F(nm) {G_FLOAT, nm, 0, 0, 0, {0, 0}, 0, 0, 0}
#define G_SEED_ARG {G_SEED, "seed", 0, 0, 0, {0, 0}, 0, 0, 0}
#define G_STEP_ARG {G_STEP, "step", 0, 0, 0, {0, 0}, 0, 0, 0}
#define G_PEER0_ARG {G_PEER0, "peer0", 0, 0, 0, {0, 0}, 0, 0, 0}
#define G_THREADS_ARG {G_THREADS, "n_threads", 0, 0, 0, {0, 0}, 0, 0, 0}
#define G_DATA(c, i) PyArray_DATA((c)->arr[i])
#define G_DATA_OR_NULL(c, i) ((c)->arr[i] == NULL ? NULL : PyArray_DATA((c)->arr[i]))

static int glue_check_shape(const glue_call_t *c, const glue_arg_t *s, PyArrayObject *a) {
    npy_intp want[2];
    int ge = 0, bad = 0;
    if (s->ndim > 2 || s->ndim == G_NDIM_ANY) return 0; /* checked by op->check */
    for (int d = 0; d < s->ndim; d++) {
        switch (s->dims[d]) {
        case X_R: want[d] = c->rows; break;
        case X_D: want[d] = c->dim; break;
        case X_E0: want[d] = c->ext[0]; break;
        case X_E1: want[d] = c->ext[1]; break;
        case X_GE_E0: want[d] = c->ext[0], ge = 1; break;
        default: want[d] = PyArray_DIM(a, d); break;
        }
        if (s->dims[d] == X_GE_E0 ? PyArray_DIM(a, d) < want[d] : PyArray_DIM(a, d) != want[d])
            bad = 1;
    }
    if (!bad) return 0;
    const char *fn = c->op->name;
    if (s->ndim == 1)
        PyErr_Format(PyExc_ValueError, "%s: %s must have shape (%zd,), got (%zd,)", fn, s->name,
                     (Py_ssize_t)want[0], (Py_ssize_t)PyArray_DIM(a, 0));
    else if (ge)
        PyErr_Format(PyExc_ValueError, "%s: %s must have shape (%zd, >= %lld), got (%zd, %zd)", fn,
                     s->name, (Py_ssize_t)want[0], (long long)want[1],
                     (Py_ssize_t)PyArray_DIM(a, 0), (Py_ssize_t)PyArray_DIM(a, 1));
    else
        PyErr_Format(PyExc_ValueError, "%s: %s must have shape (%zd, %zd), got (%zd, %zd)", fn,
                     s->name, (Py_ssize_t)want[0], (Py_ssize_t)want[1],
                     (Py_ssize_t)PyArray_DIM(a, 0), (Py_ssize_t)PyArray_DIM(a, 1));
    return -1;
}

/* The one driver of every glue_ops[] row; self is a capsule holding the row. */
static PyObject *glue_run(PyObject *self, PyObject *args) {
    const glue_op_t *op = PyCapsule_GetPointer(self, "decentlearn._core.glue_op");
    if (op == NULL) return NULL;
    glue_call_t c;
    memset(&c, 0, sizeof c);
    c.op = op, c.args = args;
    const glue_arg_t *arr_spec[GLUE_MAX_ARRAYS];
    /* 1. parse with a format built from the table; unused trailing pointers are ignored. */
    char fmt[3 * GLUE_MAX_ARGS + 64];
    void *p[2 * GLUE_MAX_ARGS];
    int nf = 0, np = 0, na = 0, ni = 0, nn = 0, nfl = 0, has_peer0 = 0;
    memset(p, 0, sizeof p);
    for (const glue_arg_t *s = op->args; s->kind != G_END; s++) {
        switch (s->kind) {
        case G_ARR:
            fmt[nf++] = 'O', fmt[nf++] = '!';
            p[np++] = &PyArray_Type, p[np++] = &c.arr[na];
            arr_spec[na++] = s;
            break;
        case G_OPT_ARR: /* "O" into the slot, checked after parsing */
            fmt[nf++] = 'O', p[np++] = &c.arr[na];
            arr_spec[na++] = s;
            break;
        case G_INT: fmt[nf++] = 'i', p[np++] = &c.ints[ni++]; break;
        case G_BOOL: fmt[nf++] = 'p', p[np++] = &c.ints[ni++]; break;
        case G_SSIZE: fmt[nf++] = 'n', p[np++] = &c.ssz[nn++]; break;
        case G_FLOAT: fmt[nf++] = 'f', p[np++] = &c.flt[nfl++]; break;
        default: {
            void *conv = s->kind == G_SEED    ? (void *)conv_seed
                         : s->kind == G_STEP  ? (void *)conv_step
                         : s->kind == G_PEER0 ? (void *)conv_peer0
                                              : (void *)conv_threads;
            void *dst = s->kind == G_SEED    ? (void *)&c.seed
                        : s->kind == G_STEP  ? (void *)&c.step
                        : s->kind == G_PEER0 ? (void *)&c.peer0
                                             : (void *)&c.n_threads;
            has_peer0 |= s->kind == G_PEER0;
            fmt[nf++] = 'O', fmt[nf++] = '&', p[np++] = conv, p[np++] = dst;
        }
        }
    }
    snprintf(fmt + nf, sizeof fmt - nf, ":%s", op->name);
    if (!PyArg_ParseTuple(args, fmt, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9],
                          p[10], p[11], p[12], p[13], p[14], p[15], p[16], p[17], p[18], p[19],
                          p[20], p[21], p[22], p[23]))
        return NULL;
    const char *fn = op->name;
    for (int i = 0; i < na; i++) {
        if (arr_spec[i]->kind != G_OPT_ARR) continue;
        PyObject *o = (PyObject *)c.arr[i];
        if (o == Py_None)
            c.arr[i] = NULL;
        else if (!PyArray_Check(o))
            return PyErr_Format(PyExc_TypeError, "%s: %s must be a numpy array or None", fn,
                                arr_spec[i]->name);
    }
    /* 2. arrays */
    c.dtype = na > 0 && c.arr[0] != NULL && PyArray_TYPE(c.arr[0]) == NPY_INT8 ? NPY_INT8
                                                                          : NPY_FLOAT32;
    for (int i = 0; i < na; i++)
        if (c.arr[i] != NULL && check_array(c.arr[i], fn, arr_spec[i]->name,
                        arr_spec[i]->dtype == G_F32_OR_S8 ? c.dtype : arr_spec[i]->dtype,
                        arr_spec[i]->ndim == G_NDIM_ANY ? PyArray_NDIM(c.arr[i])
                                                        : arr_spec[i]->ndim,
                        arr_spec[i]->out))
            return NULL;
    if (check_threads(fn, c.n_threads)) return NULL;
    /* 3. R, D and ranged ints */
    c.rows = PyArray_NDIM(c.arr[op->rows_from]) > 0 ? PyArray_DIM(c.arr[op->rows_from], 0) : 1;
    c.dim = PyArray_NDIM(c.arr[op->cols_from]) > 1 ? PyArray_DIM(c.arr[op->cols_from], 1) : 1;
    ni = 0;
    for (const glue_arg_t *s = op->args; s->kind != G_END; s++) {
        if (s->kind != G_INT && s->kind != G_BOOL) continue;
        const int v = c.ints[ni++];
        if (s->ranged && (v < s->lo || v > s->hi))
            return PyErr_Format(PyExc_ValueError, "%s: %s must be in [%lld, %lld], got %d", fn,
                                s->name, s->lo, s->hi, v);
    }
    /* 4. - 8. */
    if (op->check != NULL && op->check(&c)) return NULL;
    if (has_peer0 && check_peer_rows(fn, c.peer0, c.rows)) return NULL;
    for (int i = 0; i < na; i++)
        if (c.arr[i] != NULL && glue_check_shape(&c, arr_spec[i], c.arr[i])) return NULL;
    PyArrayObject *ordered[GLUE_MAX_ARRAYS];
    const char *names[GLUE_MAX_ARRAYS];
    int n_out = 0, k = 0;
    for (int pass = 1; pass >= 0; pass--)
        for (int i = 0; i < na; i++)
            if (arr_spec[i]->out == pass && c.arr[i] != NULL) {
                ordered[k] = c.arr[i], names[k++] = arr_spec[i]->name;
                n_out += pass;
            }
    for (int i = 0; i < n_out; i++)
        for (int j = 0; j < k; j++)
            if (j != i && overlaps(ordered[i], ordered[j]))
                return PyErr_Format(PyExc_ValueError, "%s: %s must not share memory with %s", fn,
                                    names[i], names[j]);
    if (op->post != NULL && op->post(&c)) return NULL;
    /* 9. - 10. */
    const dl_dispatch_t *d = dl_dispatch();
    int status;
    Py_BEGIN_ALLOW_THREADS;
    status = op->call(&c, d);
    Py_END_ALLOW_THREADS;
    if (status != DL_OK && status == op->err.status) {
        const int i0 = c.ints[0];
        const int v = op->err.arg == E_I0         ? i0
                      : op->err.arg == E_POW2_I0  ? 1 << i0
                      : op->err.arg == E_POW2M1_I0 ? (1 << i0) - 1
                                                  : 0;
        return PyErr_Format(*op->err.exc, op->err.fmt, fn, v);
    }
    if (status != DL_OK) return raise_status(fn, status);
    /* 11. */
    if (op->n_ret == 0) Py_RETURN_NONE;
    if (op->n_ret == 1) return Py_NewRef((PyObject *)c.arr[op->ret[0]]);
    return Py_BuildValue("(OO)", c.arr[op->ret[0]], c.arr[op->ret[1]]);
}

/* ---- glue_ops[] rows: call thunks (run without the GIL) and per-op checks ---- */

/* >>> glue rng */
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
static int ext_rowbytes_i0(glue_call_t *c) { /* packed rows of D codes of ints[0] bits */
    c->ext[0] = dl_bitpack_row_bytes(c->dim, c->ints[0]);
    return 0;
}
static int call_bitpack(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_bitpack_u8(c->rows, c->dim, c->ints[0], G_DATA(c, 0), G_DATA(c, 1), c->n_threads);
}
static int call_bitunpack(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_bitunpack_u8(c->rows, c->dim, c->ints[0], G_DATA(c, 0), G_DATA(c, 1), c->n_threads);
}
/* <<< glue rng */

/* >>> glue natural */
static int call_natural_encode(const glue_call_t *c, const dl_dispatch_t *d) {
    return d->natural_encode_f32(c->rows, c->dim, G_DATA(c, 0), c->seed, c->step, c->peer0,
                                 G_DATA(c, 1), c->n_threads);
}
static int call_natural_decode(const glue_call_t *c, const dl_dispatch_t *d) {
    return d->natural_decode_f32(c->rows, c->dim, G_DATA(c, 0), G_DATA(c, 1), c->n_threads);
}
static int check_dither_p(glue_call_t *c) {
    const float p = c->flt[0];
    if (!(p == 1.0f || p == 2.0f || (p > 3.4e38f && p == p))) {
        PyErr_Format(PyExc_ValueError, "dither_encode: p must be 1, 2 or inf, got %R",
                     PyTuple_GET_ITEM(c->args, 2));
        return -1;
    }
    return 0;
}
static int call_dither_encode(const glue_call_t *c, const dl_dispatch_t *d) {
    return d->natural_dither_encode_f32(c->rows, c->dim, G_DATA(c, 0), c->ints[0], c->flt[0],
                                        c->seed, c->step, c->peer0, G_DATA(c, 1), G_DATA(c, 2),
                                        c->n_threads);
}
static int call_dither_decode(const glue_call_t *c, const dl_dispatch_t *d) {
    return d->natural_dither_decode_f32(c->rows, c->dim, G_DATA(c, 0), G_DATA(c, 1), c->ints[0],
                                        G_DATA(c, 2), c->n_threads);
}
/* <<< glue natural */


/* >>> glue topk (table rows: topk, randk) */
/* x rows shorter than 2^31 (int32 indices) and 0 <= k <= dim; out_idx / out_val are (R, k). */
static int check_topk_k(glue_call_t *c) {
    const char *fn = c->op->name;
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

/* threshold stays hand-written: it counts, allocates the results, then fills them. */
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
    if (check_array(x, "threshold", "x", NPY_FLOAT32, 2, 0) || check_threads("threshold", n_threads))
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
/* <<< glue topk */

/* >>> glue stc (table rows: golomb_encode, golomb_decode); D is k, ssz[0] the row length dim */
static int check_golomb_dim(glue_call_t *c) {
    const Py_ssize_t dim = c->ssz[0];
    if (dim < c->dim || dim > INT32_MAX) {
        PyErr_Format(PyExc_ValueError,
                     "%s: dim must be in [k, 2**31 - 1] = [%zd, 2147483647], got %zd", c->op->name,
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
/* <<< glue stc */

/* >>> glue quant (table rows: qsgd_*, bucket_*, sign_*, int8_*) */
static int ext_rowbytes_qsgd(glue_call_t *c) { /* packed rows of D levels */
    c->ext[0] = dl_bitpack_row_bytes(c->dim, dl_qsgd_bits(c->ints[0]));
    return 0;
}
static int ext_rowbytes_1(glue_call_t *c) { /* packed rows of D signs */
    c->ext[0] = dl_bitpack_row_bytes(c->dim, 1);
    return 0;
}
/* bits 4 or 8, bucket in [1, 2**24], dim <= 2**32; ext = (buckets per row, packed row bytes). */
static int check_bucket(glue_call_t *c) {
    const char *fn = c->op->name;
    const int bits = c->ints[0];
    const Py_ssize_t bucket = c->ssz[0];
    if (bits != 4 && bits != 8) {
        PyErr_Format(PyExc_ValueError, "%s: bits must be 4 or 8, got %d", fn, bits);
        return -1;
    }
    if (bucket < 1 || bucket > (1 << 24)) {
        PyErr_Format(PyExc_ValueError, "%s: bucket must be in [1, 2**24], got %zd", fn, bucket);
        return -1;
    }
    if ((int64_t)c->dim > ((int64_t)1 << 32)) {
        PyErr_Format(PyExc_ValueError, "%s: dim must be <= 2**32, got %zd", fn, (Py_ssize_t)c->dim);
        return -1;
    }
    c->ext[0] = (c->dim + bucket - 1) / bucket;
    c->ext[1] = dl_bitpack_row_bytes(c->dim, bits);
    return 0;
}
/* With dim == 0 no chunk would make the kernel look at the norms: check them here. */
static int post_qsgd_norms(glue_call_t *c) {
    if (c->dim != 0) return 0;
    const int levels = c->ints[0];
    const float *nv = G_DATA(c, 0);
    for (npy_intp r = 0; r < c->rows; r++) {
        const float sc = (float)((double)nv[r] / levels), top = (float)levels * sc;
        if (!(nv[r] >= 0.0f && nv[r] <= FLT_MAX) || !(fabsf(top) <= FLT_MAX)) {
            PyErr_Format(PyExc_ValueError,
                         "qsgd_decode: malformed message: norm must be finite and >= 0 and every "
                         "level <= levels = %d", levels);
            return -1;
        }
    }
    return 0;
}
static int call_qsgd_encode(const glue_call_t *c, const dl_dispatch_t *d) {
    return d->qsgd_encode_f32(c->rows, c->dim, c->ints[0], G_DATA(c, 0), c->seed, c->step,
                              c->peer0, G_DATA(c, 1), G_DATA(c, 2), c->n_threads);
}
static int call_qsgd_decode(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_qsgd_decode_f32(c->rows, c->dim, c->ints[0], G_DATA(c, 0), G_DATA(c, 1),
                              G_DATA(c, 2), c->n_threads);
}
static int call_bucket_encode(const glue_call_t *c, const dl_dispatch_t *d) {
    return d->bucket_encode_f32(c->rows, c->dim, c->ints[0], c->ssz[0], G_DATA(c, 0), c->seed,
                                c->step, c->peer0, G_DATA(c, 1), G_DATA(c, 2), G_DATA(c, 3),
                                c->n_threads);
}
static int call_bucket_decode(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_bucket_decode_f32(c->rows, c->dim, c->ints[0], c->ssz[0], G_DATA(c, 0),
                                G_DATA(c, 1), G_DATA(c, 2), G_DATA(c, 3), c->n_threads);
}
static int call_sign_encode(const glue_call_t *c, const dl_dispatch_t *d) {
    return d->sign_encode_f32(c->rows, c->dim, G_DATA(c, 0), G_DATA(c, 1), G_DATA(c, 2),
                              c->n_threads);
}
static int call_sign_decode(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_sign_decode_f32(c->rows, c->dim, G_DATA(c, 0), G_DATA(c, 1), G_DATA(c, 2),
                              c->n_threads);
}
static int call_int8_encode(const glue_call_t *c, const dl_dispatch_t *d) {
    return d->int8_encode_f32(c->rows, c->dim, G_DATA(c, 0), c->seed, c->step, c->peer0,
                              G_DATA(c, 1), G_DATA(c, 2), c->n_threads);
}
static int call_int8_decode(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_int8_decode_f32(c->rows, c->dim, G_DATA(c, 0), G_DATA(c, 1), G_DATA(c, 2),
                              c->n_threads);
}
/* <<< glue quant */

/* >>> glue gemm */
/* gemm_s8_layout() -> dict: the packed-B layout of the active path (name, mr, nr, kg, b_elem). */
static PyObject *py_gemm_s8_layout(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    const dl_gemm_s8_layout_t *l = dl_dispatch()->gemm_s8_layout;
    return Py_BuildValue("{s:s,s:i,s:i,s:i,s:i,s:i}", "name", l->name, "mr", l->mr, "nr", l->nr,
                         "kg", l->kg, "b_elem", l->b_elem, "max_k", DL_GEMM_S8_MAX_K);
}

/* Checks a packed B (data uint8 1-D, colsum int32 1-D, layout name, k, n) against the active
 * layout; ValueError naming what does not match. */
static int gemm_check_packed(const char *fn, PyArrayObject *data, PyArrayObject *colsum,
                             const char *layout, Py_ssize_t k, Py_ssize_t n) {
    const dl_gemm_s8_layout_t *l = dl_dispatch()->gemm_s8_layout;
    if (check_array(data, fn, "packed_b.data", NPY_UINT8, 1, 0) ||
        check_array(colsum, fn, "packed_b.colsum", NPY_INT32, 1, 0))
        return -1;
    if (strcmp(layout, l->name) != 0) {
        PyErr_Format(PyExc_ValueError,
                     "%s: packed_b was packed for layout '%s' but the active path '%s' needs "
                     "layout '%s'; pack B again with ops.pack_b_s8",
                     fn, layout, dl_dispatch()->name, l->name);
        return -1;
    }
    if (k < 0 || k > DL_GEMM_S8_MAX_K || n < 0) {
        PyErr_Format(PyExc_ValueError, "%s: packed_b has k=%zd, n=%zd; need 0 <= k <= %d, n >= 0",
                     fn, k, n, DL_GEMM_S8_MAX_K);
        return -1;
    }
    const int64_t bytes = dl_gemm_s8_packed_bytes(l, k, n), n_pad = dl_cdiv_i64(n, l->nr) * l->nr;
    if (bytes < 0 || PyArray_DIM(data, 0) != bytes || PyArray_DIM(colsum, 0) != n_pad) {
        PyErr_Format(PyExc_ValueError,
                     "%s: packed_b.data must have %lld bytes and packed_b.colsum %lld values for "
                     "k=%zd, n=%zd, got %zd and %zd",
                     fn, (long long)bytes, (long long)n_pad, k, n, (Py_ssize_t)PyArray_DIM(data, 0),
                     (Py_ssize_t)PyArray_DIM(colsum, 0));
        return -1;
    }
    return 0;
}

/* gemm_s8_pack_b(b (k, n) int8, data (bytes,) uint8, colsum (n_pad,) int32, n_threads) -> None */
static PyObject *py_gemm_s8_pack_b(PyObject *self, PyObject *args) {
    PyArrayObject *b, *data, *colsum;
    int n_threads, status;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!O!O&:pack_b_s8", &PyArray_Type, &b, &PyArray_Type, &data,
                          &PyArray_Type, &colsum, conv_threads, &n_threads))
        return NULL;
    if (check_array(b, "pack_b_s8", "b", NPY_INT8, 2, 0) ||
        check_array(data, "pack_b_s8", "data", NPY_UINT8, 1, 1) ||
        check_array(colsum, "pack_b_s8", "colsum", NPY_INT32, 1, 1) ||
        check_threads("pack_b_s8", n_threads))
        return NULL;
    const npy_intp k = PyArray_DIM(b, 0), n = PyArray_DIM(b, 1);
    if (k > DL_GEMM_S8_MAX_K)
        return PyErr_Format(PyExc_ValueError,
                            "pack_b_s8: b has k=%zd rows; int32 accumulation is exact only for k "
                            "<= %d",
                            (Py_ssize_t)k, DL_GEMM_S8_MAX_K);
    const dl_dispatch_t *d = dl_dispatch();
    const int64_t bytes = dl_gemm_s8_packed_bytes(d->gemm_s8_layout, k, n);
    const int64_t n_pad = dl_cdiv_i64(n, d->gemm_s8_layout->nr) * d->gemm_s8_layout->nr;
    if (PyArray_DIM(data, 0) != bytes || PyArray_DIM(colsum, 0) != n_pad)
        return PyErr_Format(PyExc_ValueError,
                            "pack_b_s8: data must have %lld bytes and colsum %lld values, got %zd "
                            "and %zd",
                            (long long)bytes, (long long)n_pad, (Py_ssize_t)PyArray_DIM(data, 0),
                            (Py_ssize_t)PyArray_DIM(colsum, 0));
    if (check_disjoint("pack_b_s8", 2, 3, data, "data", colsum, "colsum", b, "b")) return NULL;
    dl_gemm_s8_pack_b_fn fn = d->gemm_s8_pack_b;
    Py_BEGIN_ALLOW_THREADS;
    status = fn(k, n, PyArray_DATA(b), PyArray_DATA(data), PyArray_DATA(colsum), n_threads);
    Py_END_ALLOW_THREADS;
    if (status != DL_OK) return raise_status("pack_b_s8", status);
    Py_RETURN_NONE;
}

/* Shared by gemm_s8 and gemm_s8_f32: checks a against the packed B and out, runs the kernel. */
static PyObject *gemm_run(const char *fn, PyArrayObject *a, PyArrayObject *data,
                          PyArrayObject *colsum, const char *layout, Py_ssize_t k, Py_ssize_t n,
                          PyArrayObject *out, dl_gemm_s8_out_t *o, int n_threads) {
    int status;
    if (check_array(a, fn, "a", NPY_INT8, 2, 0) || check_threads(fn, n_threads) ||
        gemm_check_packed(fn, data, colsum, layout, k, n))
        return NULL;
    if (PyArray_DIM(a, 1) != k)
        return PyErr_Format(PyExc_ValueError,
                            "%s: a has %zd columns but packed_b has k=%zd rows (shapes (m, k) @ "
                            "(k, n))",
                            fn, (Py_ssize_t)PyArray_DIM(a, 1), k);
    if (check_shape2(out, fn, "out", PyArray_DIM(a, 0), n)) return NULL;
    if (check_disjoint(fn, 1, 4, out, "out", a, "a", data, "packed_b.data", colsum,
                       "packed_b.colsum"))
        return NULL;
    dl_gemm_s8_fn kern = dl_dispatch()->gemm_s8;
    Py_BEGIN_ALLOW_THREADS;
    status = kern(PyArray_DIM(a, 0), k, n, PyArray_DATA(a), PyArray_DATA(data),
                  PyArray_DATA(colsum), o, n_threads);
    Py_END_ALLOW_THREADS;
    if (status != DL_OK) return raise_status(fn, status);
    Py_INCREF(out);
    return (PyObject *)out;
}

/* gemm_s8(a (m, k) int8, data, colsum, layout, k, n, out (m, n) int32, n_threads) -> out */
static PyObject *py_gemm_s8(PyObject *self, PyObject *args) {
    PyArrayObject *a, *data, *colsum, *out;
    const char *layout;
    Py_ssize_t k, n;
    int n_threads;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!O!snnO!O&:gemm_s8", &PyArray_Type, &a, &PyArray_Type, &data,
                          &PyArray_Type, &colsum, &layout, &k, &n, &PyArray_Type, &out,
                          conv_threads, &n_threads))
        return NULL;
    if (check_array(out, "gemm_s8", "out", NPY_INT32, 2, 1)) return NULL;
    dl_gemm_s8_out_t o = {PyArray_DATA(out), NULL, 0.0f, NULL, 0, NULL};
    return gemm_run("gemm_s8", a, data, colsum, layout, k, n, out, &o, n_threads);
}

/* gemm_s8_f32(a, data, colsum, layout, k, n, a_scale, b_scale (1 or n,) f32, bias (n,) f32 or
 * None, out (m, n) f32, n_threads) -> out = (a @ b) * a_scale * b_scale + bias */
static PyObject *py_gemm_s8_f32(PyObject *self, PyObject *args) {
    PyArrayObject *a, *data, *colsum, *b_scale, *out;
    PyObject *bias_obj;
    const char *layout;
    Py_ssize_t k, n;
    float a_scale;
    int n_threads;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!O!snnfO!OO!O&:gemm_s8_f32", &PyArray_Type, &a, &PyArray_Type,
                          &data, &PyArray_Type, &colsum, &layout, &k, &n, &a_scale, &PyArray_Type,
                          &b_scale, &bias_obj, &PyArray_Type, &out, conv_threads, &n_threads))
        return NULL;
    if (check_array(out, "gemm_s8_f32", "out", NPY_FLOAT32, 2, 1) ||
        check_array(b_scale, "gemm_s8_f32", "b_scale", NPY_FLOAT32, 1, 0))
        return NULL;
    const npy_intp ns = PyArray_DIM(b_scale, 0);
    if (ns != 1 && ns != n)
        return PyErr_Format(PyExc_ValueError,
                            "gemm_s8_f32: b_scale must have 1 or n=%zd values, got %zd", n,
                            (Py_ssize_t)ns);
    const float *bias = NULL;
    if (bias_obj != Py_None) {
        if (!PyArray_Check(bias_obj))
            return PyErr_Format(PyExc_TypeError, "gemm_s8_f32: bias must be a numpy.ndarray or None");
        PyArrayObject *ba = (PyArrayObject *)bias_obj;
        if (check_array(ba, "gemm_s8_f32", "bias", NPY_FLOAT32, 1, 0)) return NULL;
        if (PyArray_DIM(ba, 0) != n)
            return PyErr_Format(PyExc_ValueError, "gemm_s8_f32: bias must have n=%zd values, got %zd",
                                n, (Py_ssize_t)PyArray_DIM(ba, 0));
        if (overlaps(out, ba))
            return PyErr_Format(PyExc_ValueError, "gemm_s8_f32: out must not overlap bias");
        bias = PyArray_DATA(ba);
    }
    if (overlaps(out, b_scale))
        return PyErr_Format(PyExc_ValueError, "gemm_s8_f32: out must not overlap b_scale");
    if (!isfinite(a_scale))
        return PyErr_Format(PyExc_ValueError, "gemm_s8_f32: a_scale must be finite, got %R",
                            PyTuple_GET_ITEM(args, 6));
    if (check_finite_f32("gemm_s8_f32", "b_scale", b_scale)) return NULL;
    dl_gemm_s8_out_t o = {NULL, PyArray_DATA(out), a_scale, PyArray_DATA(b_scale), ns, bias};
    return gemm_run("gemm_s8_f32", a, data, colsum, layout, k, n, out, &o, n_threads);
}

/* Checks a scale array for a (rows, dim) matrix and channel axis (-1: 1 value). */
static int gemm_check_scale(const char *fn, PyArrayObject *scale, int axis, npy_intp rows,
                            npy_intp dim) {
    if (check_array(scale, fn, "scale", NPY_FLOAT32, 1, 0)) return -1;
    if (axis < -1 || axis > 1) {
        PyErr_Format(PyExc_ValueError, "%s: axis must be None, 0 or 1, got %d", fn, axis);
        return -1;
    }
    const npy_intp want = axis < 0 ? 1 : axis == 0 ? rows : dim;
    if (PyArray_DIM(scale, 0) != want) {
        PyErr_Format(PyExc_ValueError, "%s: scale must have %zd values for axis %d, got %zd", fn,
                     (Py_ssize_t)want, axis, (Py_ssize_t)PyArray_DIM(scale, 0));
        return -1;
    }
    return 0;
}

/* Checks a 2-D float32 input whose rows are each contiguous but may lie ld elements apart (a slice
 * of every peer's parameter row); sets *ld. Sets a Python exception and returns -1 on failure. */
static int check_rows(PyArrayObject *a, const char *fn, const char *name, npy_intp *ld) {
    if (PyArray_TYPE(a) != NPY_FLOAT32 || PyArray_NDIM(a) != 2)
        return check_array(a, fn, name, NPY_FLOAT32, 2, 0);
    const npy_intp rows = PyArray_DIM(a, 0), dim = PyArray_DIM(a, 1);
    const npy_intp s0 = PyArray_STRIDE(a, 0), s1 = PyArray_STRIDE(a, 1), item = sizeof(float);
    if (PyArray_IS_C_CONTIGUOUS(a) || rows == 0 || dim == 0) {
        *ld = dim;
        return check_array(a, fn, name, NPY_FLOAT32, 2, 0);
    }
    const int row_ok = dim == 1 || s1 == item;
    const int ld_ok = rows == 1 || (s0 > 0 && s0 % item == 0 && s0 / item >= dim);
    if (!row_ok || !ld_ok) {
        PyErr_Format(PyExc_ValueError,
                     "%s: %s must have contiguous rows with a positive row stride (use "
                     "np.ascontiguousarray)", fn, name);
        return -1;
    }
    if (!PyArray_ISALIGNED(a)) {
        PyErr_Format(PyExc_ValueError, "%s: %s must be aligned to its dtype", fn, name);
        return -1;
    }
    *ld = rows <= 1 ? dim : s0 / item;
    return 0;
}

/* Whether b's bytes intersect the byte span of a row-strided 2-D a (first to last byte touched). */
static int overlaps_rows(PyArrayObject *a, npy_intp ld, PyArrayObject *b) {
    const npy_intp rows = PyArray_DIM(a, 0), dim = PyArray_DIM(a, 1);
    if (rows == 0 || dim == 0 || PyArray_NBYTES(b) == 0) return 0;
    const char *a0 = PyArray_BYTES(a), *a1 = a0 + ((rows - 1) * ld + dim) * (npy_intp)sizeof(float);
    const char *b0 = PyArray_BYTES(b), *b1 = b0 + PyArray_NBYTES(b);
    return a0 < b1 && b0 < a1;
}

/* quantize_s8(x (r, d) f32, scale f32, axis, rounding, seed, step, peer0, out (r, d) i8,
 * n_threads) -> out */
static PyObject *py_quantize_s8(PyObject *self, PyObject *args) {
    PyArrayObject *x, *scale, *out;
    int axis, rounding, n_threads, status;
    unsigned long long seed, step;
    long long peer0;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!iiO&O&O&O!O&:quantize_s8", &PyArray_Type, &x, &PyArray_Type,
                          &scale, &axis, &rounding, conv_seed, &seed, conv_step, &step, conv_peer0,
                          &peer0, &PyArray_Type, &out, conv_threads, &n_threads))
        return NULL;
    npy_intp ldx = 0;
    if (check_rows(x, "quantize_s8", "x", &ldx) ||
        check_array(out, "quantize_s8", "out", NPY_INT8, 2, 1) ||
        check_threads("quantize_s8", n_threads))
        return NULL;
    const npy_intp rows = PyArray_DIM(x, 0), dim = PyArray_DIM(x, 1);
    if (check_peer_rows("quantize_s8", peer0, rows)) return NULL;
    if (gemm_check_scale("quantize_s8", scale, axis, rows, dim) ||
        check_shape2(out, "quantize_s8", "out", rows, dim))
        return NULL;
    if (overlaps_rows(x, ldx, out) || overlaps(out, scale))
        return PyErr_Format(PyExc_ValueError, "quantize_s8: out must not overlap x or scale");
    if (rounding != 0 && rounding != 1)
        return PyErr_Format(PyExc_ValueError, "quantize_s8: rounding must be 0 or 1");
    Py_BEGIN_ALLOW_THREADS;
    status = dl_gemm_quantize_s8(rows, dim, PyArray_DATA(x), ldx, PyArray_DATA(scale),
                                 PyArray_DIM(scale, 0), axis, rounding, seed, step, peer0,
                                 PyArray_DATA(out), n_threads);
    Py_END_ALLOW_THREADS;
    if (status == DL_E_ARG)
        return PyErr_Format(PyExc_ValueError,
                            "quantize_s8: every scale must be finite and >= FLT_MIN = "
                            "1.1754944e-38 (so that 1 / scale is finite)");
    if (status != DL_OK) return raise_status("quantize_s8", status);
    Py_INCREF(out);
    return (PyObject *)out;
}

/* dequantize_s8 is a glue_ops[] row: scale has 1, R or D values for axis -1, 0 or 1 (finite). */
static int check_dequantize_scale(glue_call_t *c) {
    return gemm_check_scale(c->op->name, c->arr[1], c->ints[0], c->rows, c->dim);
}
static int post_dequantize_finite(glue_call_t *c) {
    return check_finite_f32(c->op->name, "scale", c->arr[1]);
}
static int call_dequantize_s8(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_gemm_dequantize_s8(c->rows, c->dim, G_DATA(c, 0), G_DATA(c, 1),
                                 PyArray_DIM(c->arr[1], 0), c->ints[0], G_DATA(c, 2),
                                 c->n_threads);
}

/* absmax_scale(x (r, d) f32, axis, out f32 (1, r or d values), n_threads) -> out */
static PyObject *py_absmax_scale(PyObject *self, PyObject *args) {
    PyArrayObject *x, *out;
    int axis, n_threads, status;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!iO!O&:absmax_scale", &PyArray_Type, &x, &axis, &PyArray_Type,
                          &out, conv_threads, &n_threads))
        return NULL;
    npy_intp ldx = 0;
    if (check_rows(x, "absmax_scale", "x", &ldx) ||
        check_array(out, "absmax_scale", "out", NPY_FLOAT32, 1, 1) ||
        check_threads("absmax_scale", n_threads))
        return NULL;
    if (gemm_check_scale("absmax_scale", out, axis, PyArray_DIM(x, 0), PyArray_DIM(x, 1)))
        return NULL;
    if (overlaps_rows(x, ldx, out))
        return PyErr_Format(PyExc_ValueError, "absmax_scale: out must not overlap x");
    Py_BEGIN_ALLOW_THREADS;
    status = dl_gemm_absmax_scale_f32(PyArray_DIM(x, 0), PyArray_DIM(x, 1), PyArray_DATA(x), ldx,
                                      axis, PyArray_DATA(out), n_threads);
    Py_END_ALLOW_THREADS;
    if (status != DL_OK) return raise_status("absmax_scale", status);
    Py_INCREF(out);
    return (PyObject *)out;
}
/* Checks a peer-batched 3-D operand: dtype, contiguous last axis, non-negative aligned strides. */
static int gemm_check_batch3(PyArrayObject *a, const char *fn, const char *name, int type_num,
                             int writeable) {
    if (PyArray_TYPE(a) != type_num) {
        PyArray_Descr *want = PyArray_DescrFromType(type_num);
        PyErr_Format(PyExc_TypeError, "%s: %s must have dtype %S, got %S", fn, name,
                     (PyObject *)want, (PyObject *)PyArray_DESCR(a));
        Py_XDECREF(want);
        return -1;
    }
    if (PyArray_NDIM(a) != 3) {
        PyErr_Format(PyExc_ValueError, "%s: %s must be 3-dimensional (P, rows, cols), got %d "
                     "dimensions", fn, name, PyArray_NDIM(a));
        return -1;
    }
    const npy_intp it = PyArray_ITEMSIZE(a);
    if (PyArray_SIZE(a) > 0 && /* an empty operand is never read: any strides */
        ((PyArray_DIM(a, 2) > 1 && PyArray_STRIDE(a, 2) != it) || PyArray_STRIDE(a, 0) < 0 ||
         PyArray_STRIDE(a, 1) < 0 || PyArray_STRIDE(a, 0) % it || PyArray_STRIDE(a, 1) % it ||
         !PyArray_ISALIGNED(a))) {
        PyErr_Format(PyExc_ValueError,
                     "%s: %s must have a contiguous last axis and non-negative, aligned peer and "
                     "row strides", fn, name);
        return -1;
    }
    if (writeable && !PyArray_ISWRITEABLE(a)) {
        PyErr_Format(PyExc_ValueError, "%s: %s must be writeable", fn, name);
        return -1;
    }
    return 0;
}

/* Byte range [lo, hi) touched by an array with non-negative strides (lo == hi when empty). */
static void gemm_extent(PyArrayObject *a, const char **lo, const char **hi) {
    *lo = *hi = PyArray_BYTES(a);
    for (int d = 0; d < PyArray_NDIM(a); d++)
        if (PyArray_DIM(a, d) == 0) return;
    npy_intp end = PyArray_ITEMSIZE(a);
    for (int d = 0; d < PyArray_NDIM(a); d++) end += (PyArray_DIM(a, d) - 1) * PyArray_STRIDE(a, d);
    *hi = *lo + end;
}

static int gemm_disjoint(PyArrayObject *a, PyArrayObject *b) {
    const char *a0, *a1, *b0, *b1;
    gemm_extent(a, &a0, &a1);
    gemm_extent(b, &b0, &b1);
    return a0 == a1 || b0 == b1 || a1 <= b0 || b1 <= a0;
}

/* gemm_s8_batched(a, b, trans_a, trans_b, a_scale|None, b_scale|None, bias|None, out, n_threads)
 * -> out: out[p] = a[p] @ b[p] (a[p] or b[p] read transposed when trans_*), int32 exact when out
 * is int32, else float32 * a_scale[p] * b_scale[p][j] + bias[p][j]. */
static PyObject *py_gemm_s8_batched(PyObject *self, PyObject *args) {
    const char *fn = "gemm_s8_batched";
    PyArrayObject *a, *b, *out;
    PyObject *as_obj, *bs_obj, *bias_obj;
    int trans_a, trans_b, n_threads, status;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!ppOOOO!O&:gemm_s8_batched", &PyArray_Type, &a, &PyArray_Type,
                          &b, &trans_a, &trans_b, &as_obj, &bs_obj, &bias_obj, &PyArray_Type, &out,
                          conv_threads, &n_threads))
        return NULL;
    const int is_f32 = PyArray_TYPE(out) == NPY_FLOAT32;
    if (gemm_check_batch3(a, fn, "a", NPY_INT8, 0) || gemm_check_batch3(b, fn, "b", NPY_INT8, 0) ||
        gemm_check_batch3(out, fn, "out", is_f32 ? NPY_FLOAT32 : NPY_INT32, 1) ||
        check_threads(fn, n_threads))
        return NULL;
    const npy_intp P = PyArray_DIM(out, 0), m = PyArray_DIM(out, 1), n = PyArray_DIM(out, 2);
    const npy_intp am = PyArray_DIM(a, trans_a ? 2 : 1), k = PyArray_DIM(a, trans_a ? 1 : 2);
    const npy_intp bk = PyArray_DIM(b, trans_b ? 2 : 1), bn = PyArray_DIM(b, trans_b ? 1 : 2);
    if (PyArray_DIM(a, 0) != P || PyArray_DIM(b, 0) != P || am != m || bn != n || bk != k)
        return PyErr_Format(PyExc_ValueError,
                            "%s: shapes do not match: a (P=%zd, m=%zd, k=%zd) @ b (P=%zd, k=%zd, "
                            "n=%zd) -> out (%zd, %zd, %zd)",
                            fn, (Py_ssize_t)PyArray_DIM(a, 0), (Py_ssize_t)am, (Py_ssize_t)k,
                            (Py_ssize_t)PyArray_DIM(b, 0), (Py_ssize_t)bk, (Py_ssize_t)bn,
                            (Py_ssize_t)P, (Py_ssize_t)m, (Py_ssize_t)n);
    if (k > DL_GEMM_S8_MAX_K)
        return PyErr_Format(PyExc_ValueError, "%s: k=%zd exceeds %d, the largest exact k", fn,
                            (Py_ssize_t)k, DL_GEMM_S8_MAX_K);
    const npy_intp it = PyArray_ITEMSIZE(out);
    const npy_intp c_rs = m > 1 ? PyArray_STRIDE(out, 1) / it : n;
    const npy_intp c_ps = P > 1 ? PyArray_STRIDE(out, 0) / it : m * c_rs;
    /* An empty out (P, m or n = 0; NumPy gives it zero strides) has nothing to overlap. */
    const int empty = PyArray_SIZE(out) == 0;
    if (!empty && ((m > 1 && c_rs < n) || (P > 1 && m > 0 && n > 0 && c_ps < m * c_rs)))
        return PyErr_Format(PyExc_ValueError, "%s: out's rows and peers must not overlap", fn);
    if (!gemm_disjoint(out, a) || !gemm_disjoint(out, b))
        return PyErr_Format(PyExc_ValueError, "%s: out must not overlap a or b", fn);
    dl_gemm_s8_batch_t bt;
    memset(&bt, 0, sizeof bt);
    bt.p = P, bt.m = m, bt.k = k, bt.n = n;
    bt.a = PyArray_DATA(a), bt.a_ps = PyArray_STRIDE(a, 0), bt.a_trans = trans_a;
    bt.a_rs = PyArray_DIM(a, 1) > 1 ? PyArray_STRIDE(a, 1) : PyArray_DIM(a, 2);
    bt.b = PyArray_DATA(b), bt.b_ps = PyArray_STRIDE(b, 0), bt.b_trans = trans_b;
    bt.b_rs = PyArray_DIM(b, 1) > 1 ? PyArray_STRIDE(b, 1) : PyArray_DIM(b, 2);
    bt.c_ps = c_ps, bt.c_rs = c_rs;
    if (P == 1) bt.a_ps = PyArray_DIM(a, 1) * bt.a_rs, bt.b_ps = PyArray_DIM(b, 1) * bt.b_rs;
    if (!is_f32) {
        if (as_obj != Py_None || bs_obj != Py_None || bias_obj != Py_None)
            return PyErr_Format(PyExc_ValueError,
                                "%s: an int32 out takes no a_scale, b_scale or bias", fn);
        bt.c = PyArray_DATA(out);
    } else {
        if (!PyArray_Check(as_obj) || !PyArray_Check(bs_obj))
            return PyErr_Format(PyExc_TypeError,
                                "%s: a float32 out needs a_scale and b_scale float32 arrays", fn);
        PyArrayObject *as = (PyArrayObject *)as_obj, *bs = (PyArrayObject *)bs_obj;
        if (check_array(as, fn, "a_scale", NPY_FLOAT32, 1, 0)) return NULL;
        if (PyArray_TYPE(bs) != NPY_FLOAT32 || !PyArray_IS_C_CONTIGUOUS(bs) ||
            !PyArray_ISALIGNED(bs))
            return PyErr_Format(PyExc_TypeError, "%s: b_scale must be a C-contiguous float32 "
                                "array", fn);
        if (PyArray_DIM(as, 0) != P)
            return PyErr_Format(PyExc_ValueError, "%s: a_scale must have P=%zd values, got %zd", fn,
                                (Py_ssize_t)P, (Py_ssize_t)PyArray_DIM(as, 0));
        npy_intp bsn;
        if (PyArray_NDIM(bs) == 1 && PyArray_DIM(bs, 0) == P)
            bsn = 1;
        else if (PyArray_NDIM(bs) == 2 && PyArray_DIM(bs, 0) == P && PyArray_DIM(bs, 1) == n)
            bsn = n;
        else
            return PyErr_Format(PyExc_ValueError,
                                "%s: b_scale must have shape (P,) = (%zd,) or (P, n) = (%zd, %zd)",
                                fn, (Py_ssize_t)P, (Py_ssize_t)P, (Py_ssize_t)n);
        if (!gemm_disjoint(out, as) || !gemm_disjoint(out, bs))
            return PyErr_Format(PyExc_ValueError, "%s: out must not overlap the scales", fn);
        if (check_finite_f32(fn, "a_scale", as) || check_finite_f32(fn, "b_scale", bs)) return NULL;
        bt.a_scale = PyArray_DATA(as), bt.b_scale = PyArray_DATA(bs), bt.b_scale_n = bsn;
        if (bias_obj != Py_None) {
            if (!PyArray_Check(bias_obj))
                return PyErr_Format(PyExc_TypeError, "%s: bias must be a numpy.ndarray or None",
                                    fn);
            PyArrayObject *ba = (PyArrayObject *)bias_obj;
            if (check_array(ba, fn, "bias", NPY_FLOAT32, 2, 0) || check_shape2(ba, fn, "bias", P, n))
                return NULL;
            if (!gemm_disjoint(out, ba))
                return PyErr_Format(PyExc_ValueError, "%s: out must not overlap bias", fn);
            bt.bias = PyArray_DATA(ba);
        }
        bt.c_f32 = PyArray_DATA(out);
    }
    if (empty) { /* the correct result: nothing to compute */
        Py_INCREF(out);
        return (PyObject *)out;
    }
    dl_gemm_s8_batched_fn kern = dl_dispatch()->gemm_s8_batched;
    Py_BEGIN_ALLOW_THREADS;
    status = kern(&bt, n_threads);
    Py_END_ALLOW_THREADS;
    if (status != DL_OK) return raise_status(fn, status);
    Py_INCREF(out);
    return (PyObject *)out;
}
/* <<< glue gemm */

/* >>> glue limits (copy.c, peak*.c): the measured limits of decentlearn.bench */

/* copy_f32 is a glue_ops[] row: dst[...] = src[...] with non-temporal stores; src and dst are
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
/* consensus_sums is a glue_ops[] row: out (2,) float64 gets sum X^2 and sum_c (sum_i X_ic)^2. */
static int check_consensus_out(glue_call_t *c) {
    if (PyArray_SIZE(c->arr[1]) != 2) {
        PyErr_Format(PyExc_ValueError, "consensus_sums: out must have 2 float64 entries, got %zd",
                     (Py_ssize_t)PyArray_SIZE(c->arr[1]));
        return -1;
    }
    return 0;
}

static int call_consensus_sums(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_consensus_sums_f32((int64_t)c->rows, (int64_t)c->dim, G_DATA(c, 0), G_DATA(c, 1),
                                 c->n_threads);
}

static int call_copy_f32(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_copy_f32((int64_t)PyArray_SIZE(c->arr[0]), G_DATA(c, 0), G_DATA(c, 1), c->n_threads);
}
/* read_f32 is a glue_ops[] row: out (1,) uint32 gets the XOR of src's words (a read-only pass). */
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

/* peak_s8(reps, n_threads) -> (ops, check): the active path's int8 peak loop, reps iterations on
 * each thread; ops = operations done (2 per multiply-add). */
static PyObject *py_peak_s8(PyObject *self, PyObject *args) {
    long long reps;
    int n_threads, status;
    int64_t ops = 0, check = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "LO&:peak_s8", &reps, conv_threads, &n_threads)) return NULL;
    if (reps < 0) {
        PyErr_Format(PyExc_ValueError, "peak_s8: reps must be >= 0, got %lld", reps);
        return NULL;
    }
    if (check_threads("peak_s8", n_threads) < 0) return NULL;
    const dl_dispatch_t *d = dl_dispatch();
    Py_BEGIN_ALLOW_THREADS;
    status = d->peak_s8((int64_t)reps, n_threads, &ops, &check);
    Py_END_ALLOW_THREADS;
    if (status != DL_OK) return raise_status("peak_s8", status);
    return Py_BuildValue("(LL)", (long long)ops, (long long)check);
}
/* <<< glue limits */
/* >>> glue nn: peer-batched float32 GEMMs of the layers and the SGD step ------------------------
 * Operands are float32 arrays of 3 dimensions (peers, rows, cols) with non-negative strides that
 * are multiples of 4 bytes; a leading dimension of 1 is broadcast to every peer (peer stride 0).
 * Strides reach the kernels in elements. */

/* Checks a float32 operand of `ndim` dimensions against `shape` (-1: any) and fills its strides
 * in elements. unit_last: the last axis must be contiguous. */
static int nn_operand(PyObject *o, const char *fn, const char *name, int ndim,
                      const npy_intp *shape, int unit_last, int writeable, int64_t *st) {
    if (!PyArray_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be a numpy array, got %s", fn, name,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    PyArrayObject *a = (PyArrayObject *)o;
    if (PyArray_TYPE(a) != NPY_FLOAT32) {
        PyErr_Format(PyExc_TypeError, "%s: %s must have dtype float32, got %S", fn, name,
                     (PyObject *)PyArray_DESCR(a));
        return -1;
    }
    if (PyArray_NDIM(a) != ndim) {
        PyErr_Format(PyExc_ValueError, "%s: %s must be %d-dimensional, got %d dimensions", fn,
                     name, ndim, PyArray_NDIM(a));
        return -1;
    }
    for (int d = 0; d < ndim; d++) {
        if (shape[d] >= 0 && PyArray_DIM(a, d) != shape[d]) {
            PyErr_Format(PyExc_ValueError, "%s: %s has %zd entries on axis %d, expected %zd", fn,
                         name, (Py_ssize_t)PyArray_DIM(a, d), d, (Py_ssize_t)shape[d]);
            return -1;
        }
        const npy_intp s = PyArray_STRIDE(a, d);
        if (PyArray_DIM(a, d) > 1 && (s < 0 || s % 4)) {
            PyErr_Format(PyExc_ValueError,
                         "%s: %s must have non-negative strides that are multiples of 4 bytes",
                         fn, name);
            return -1;
        }
        st[d] = PyArray_DIM(a, d) > 1 ? (int64_t)(s / 4) : 0;
    }
    if (unit_last && PyArray_DIM(a, ndim - 1) > 1 && st[ndim - 1] != 1) {
        PyErr_Format(PyExc_ValueError, "%s: %s must have a contiguous last axis", fn, name);
        return -1;
    }
    return check_aligned_writeable(a, fn, name, writeable);
}

/* Bytes one peer (index 0 of axis 0) of an array spans, from its first element. */
static npy_intp nn_peer_extent(PyArrayObject *a) {
    npy_intp end = PyArray_ITEMSIZE(a);
    for (int d = 1; d < PyArray_NDIM(a); d++) end += (PyArray_DIM(a, d) - 1) * PyArray_STRIDE(a, d);
    return end;
}

/* Disjoint byte ranges, or views of the rows of one (P, dim) matrix that take disjoint column
 * ranges of every row (a layer's weight and bias gradients): same peer count and peer stride,
 * and each peer's span of one lies between the other's in every row. */
static int nn_rows_disjoint(PyArrayObject *a, PyArrayObject *b) {
    if (gemm_disjoint(a, b)) return 1;
    if (PyArray_NDIM(a) < 2 || PyArray_NDIM(b) < 2 || PyArray_DIM(a, 0) != PyArray_DIM(b, 0) ||
        PyArray_STRIDE(a, 0) != PyArray_STRIDE(b, 0) || PyArray_STRIDE(a, 0) <= 0 ||
        PyArray_SIZE(a) == 0 || PyArray_SIZE(b) == 0)
        return 0;
    const npy_intp s = PyArray_STRIDE(a, 0);
    const char *pa = PyArray_BYTES(a), *pb = PyArray_BYTES(b);
    if (pb < pa) {
        PyArrayObject *t = a;
        a = b, b = t;
        const char *tp = pa;
        pa = pb, pb = tp;
    }
    const npy_intp ea = nn_peer_extent(a), eb = nn_peer_extent(b), d = (npy_intp)(pb - pa) % s;
    return ea <= s && eb <= s && ea <= d && d + eb <= s;
}

/* An output must not overlap an input (the kernels read inputs while writing outputs). */
static int nn_disjoint(const char *fn, PyObject *out, const char *oname, PyObject *in,
                       const char *iname) {
    if (in == NULL || in == Py_None) return 0;
    if (!nn_rows_disjoint((PyArrayObject *)out, (PyArrayObject *)in)) {
        PyErr_Format(PyExc_ValueError, "%s: %s must not overlap %s", fn, oname, iname);
        return -1;
    }
    return 0;
}

/* Peers of an operand whose leading axis is 1 or P. */
static int nn_peers(const char *fn, const char *name, PyObject *o, npy_intp P) {
    const npy_intp n = PyArray_DIM((PyArrayObject *)o, 0);
    if (n != 1 && n != P) {
        PyErr_Format(PyExc_ValueError, "%s: %s must have 1 (shared) or P=%zd peers on axis 0, "
                     "got %zd", fn, name, (Py_ssize_t)P, (Py_ssize_t)n);
        return -1;
    }
    return 0;
}

/* nn_gemm(a, b, c, accumulate, n_threads) -> c: c[p] (+)= a[p] @ b[p]; a (1|P, M, K), b (1|P, K, N)
 * with any non-negative strides, c (P, M, N) with contiguous rows. */
static PyObject *py_nn_gemm(PyObject *self, PyObject *args) {
    const char *fn = "nn_gemm";
    PyObject *a, *b, *c;
    int accumulate, n_threads, status;
    int64_t sa[3], sb[3], sc[3];
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOpO&:nn_gemm", &a, &b, &c, &accumulate, conv_threads,
                          &n_threads)) return NULL;
    const npy_intp any3[3] = {-1, -1, -1};
    if (nn_operand(c, fn, "c", 3, any3, 1, 1, sc) < 0) return NULL;
    const npy_intp P = PyArray_DIM((PyArrayObject *)c, 0), M = PyArray_DIM((PyArrayObject *)c, 1),
                   N = PyArray_DIM((PyArrayObject *)c, 2);
    const npy_intp shape_a[3] = {-1, M, -1};
    if (nn_operand(a, fn, "a", 3, shape_a, 0, 0, sa) < 0 || nn_peers(fn, "a", a, P) < 0)
        return NULL;
    const npy_intp K = PyArray_DIM((PyArrayObject *)a, 2);
    const npy_intp shape_b[3] = {-1, K, N};
    if (nn_operand(b, fn, "b", 3, shape_b, 0, 0, sb) < 0 || nn_peers(fn, "b", b, P) < 0 ||
        check_threads(fn, n_threads) < 0 || nn_disjoint(fn, c, "c", a, "a") < 0 ||
        nn_disjoint(fn, c, "c", b, "b") < 0)
        return NULL;
    const dl_nn_gemm_t g = {
        .n_peers = P, .m = M, .n = N, .k = K,
        .a = (const float *)PyArray_DATA((PyArrayObject *)a), .a_ps = sa[0], .a_rs = sa[1],
        .a_cs = sa[2],
        .b = (const float *)PyArray_DATA((PyArrayObject *)b), .b_ps = sb[0], .b_rs = sb[1],
        .b_cs = sb[2],
        .c = (float *)PyArray_DATA((PyArrayObject *)c), .c_ps = sc[0], .c_rs = sc[1],
        .accumulate = accumulate};
    Py_BEGIN_ALLOW_THREADS status = dl_dispatch()->nn_gemm_f32(&g, n_threads);
    Py_END_ALLOW_THREADS if (status != DL_OK) return raise_status(fn, status);
    Py_INCREF(c);
    return c;
}

/* nn_dense_forward(x, w, bias|None, relu, y, n_threads) -> y: y[p] = act(x[p] @ w[p] + bias[p]);
 * x (1|P, B, I), w (P, I, O) and y (P, B, O) with contiguous rows, bias (P, O). */
static PyObject *py_nn_dense_forward(PyObject *self, PyObject *args) {
    const char *fn = "nn_dense_forward";
    PyObject *x, *w, *bias, *y;
    int relu, n_threads, status;
    int64_t sx[3], sw[3], sbias[2] = {0, 0}, sy[3];
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOpOO&:nn_dense_forward", &x, &w, &bias, &relu, &y,
                          conv_threads, &n_threads))
        return NULL;
    const npy_intp any3[3] = {-1, -1, -1};
    if (nn_operand(w, fn, "w", 3, any3, 1, 0, sw) < 0) return NULL;
    const npy_intp P = PyArray_DIM((PyArrayObject *)w, 0), NI = PyArray_DIM((PyArrayObject *)w, 1),
                   NO = PyArray_DIM((PyArrayObject *)w, 2);
    const npy_intp shape_x[3] = {-1, -1, NI};
    if (nn_operand(x, fn, "x", 3, shape_x, 1, 0, sx) < 0 || nn_peers(fn, "x", x, P) < 0)
        return NULL;
    const npy_intp NB = PyArray_DIM((PyArrayObject *)x, 1);
    const npy_intp shape_y[3] = {P, NB, NO}, shape_b[2] = {P, NO};
    if (nn_operand(y, fn, "y", 3, shape_y, 1, 1, sy) < 0 ||
        (bias != Py_None && nn_operand(bias, fn, "bias", 2, shape_b, 1, 0, sbias) < 0) ||
        check_threads(fn, n_threads) < 0 || nn_disjoint(fn, y, "y", x, "x") < 0 ||
        nn_disjoint(fn, y, "y", w, "w") < 0 || nn_disjoint(fn, y, "y", bias, "bias") < 0)
        return NULL;
    if (NI > 1 && sw[1] != NO) {
        PyErr_Format(PyExc_ValueError, "%s: w must hold each peer's (I, O) matrix contiguously", fn);
        return NULL;
    }
    const dl_nn_dense_t d = {
        .n_peers = P, .batch = NB, .n_in = NI, .n_out = NO,
        .x = (const float *)PyArray_DATA((PyArrayObject *)x), .x_ps = sx[0], .x_rs = sx[1],
        .w = (const float *)PyArray_DATA((PyArrayObject *)w), .w_ps = sw[0],
        .bias = bias == Py_None ? NULL : (const float *)PyArray_DATA((PyArrayObject *)bias),
        .b_ps = sbias[0], .relu = relu,
        .y = (float *)PyArray_DATA((PyArrayObject *)y), .y_ps = sy[0], .y_rs = sy[1]};
    Py_BEGIN_ALLOW_THREADS status = dl_dispatch()->nn_dense_forward_f32(&d, n_threads);
    Py_END_ALLOW_THREADS if (status != DL_OK) return raise_status(fn, status);
    Py_INCREF(y);
    return y;
}

/* nn_dense_backward(x, w, dy, mask|None, gw, gb, dx|None, n_threads) -> None: gb[p] = sum_b dy[p],
 * gw[p] = x[p]^T dy[p], dx[p] = (dy[p] @ w[p]^T) * (mask[p] > 0). Shapes as in nn_dense_forward;
 * dy (P, B, O), mask and dx (P, B, I), gw (P, I, O), gb (P, O). */
static PyObject *py_nn_dense_backward(PyObject *self, PyObject *args) {
    const char *fn = "nn_dense_backward";
    PyObject *x, *w, *dy, *mask, *gw, *gb, *dx;
    int n_threads, status;
    int64_t sx[3], sw[3], sdy[3], sm[3] = {0, 0, 0}, sgw[3], sgb[2], sdx[3] = {0, 0, 0};
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOOOOO&:nn_dense_backward", &x, &w, &dy, &mask, &gw, &gb, &dx,
                          conv_threads,
                          &n_threads))
        return NULL;
    const npy_intp any3[3] = {-1, -1, -1};
    if (nn_operand(w, fn, "w", 3, any3, 1, 0, sw) < 0) return NULL;
    const npy_intp P = PyArray_DIM((PyArrayObject *)w, 0), NI = PyArray_DIM((PyArrayObject *)w, 1),
                   NO = PyArray_DIM((PyArrayObject *)w, 2);
    const npy_intp shape_x[3] = {-1, -1, NI};
    if (nn_operand(x, fn, "x", 3, shape_x, 1, 0, sx) < 0 || nn_peers(fn, "x", x, P) < 0)
        return NULL;
    const npy_intp NB = PyArray_DIM((PyArrayObject *)x, 1);
    const npy_intp shape_dy[3] = {P, NB, NO}, shape_dx[3] = {P, NB, NI}, shape_gw[3] = {P, NI, NO},
                   shape_gb[2] = {P, NO};
    if (nn_operand(dy, fn, "dy", 3, shape_dy, 1, 0, sdy) < 0 ||
        (mask != Py_None && nn_operand(mask, fn, "mask", 3, shape_dx, 1, 0, sm) < 0) ||
        nn_operand(gw, fn, "gw", 3, shape_gw, 1, 1, sgw) < 0 ||
        nn_operand(gb, fn, "gb", 2, shape_gb, 1, 1, sgb) < 0 ||
        (dx != Py_None && nn_operand(dx, fn, "dx", 3, shape_dx, 1, 1, sdx) < 0) ||
        check_threads(fn, n_threads) < 0)
        return NULL;
    if ((NI > 1 && (sw[1] != NO || sgw[1] != NO))) {
        PyErr_Format(PyExc_ValueError, "%s: w and gw must hold each peer's (I, O) matrix "
                     "contiguously", fn);
        return NULL;
    }
    PyObject *ins[4] = {x, w, dy, mask};
    const char *in_names[4] = {"x", "w", "dy", "mask"};
    PyObject *outs[3] = {gw, gb, dx};
    const char *out_names[3] = {"gw", "gb", "dx"};
    for (int o = 0; o < 3; o++) {
        if (outs[o] == Py_None) continue;
        for (int i = 0; i < 4; i++)
            if (nn_disjoint(fn, outs[o], out_names[o], ins[i], in_names[i]) < 0) return NULL;
        for (int j = o + 1; j < 3; j++)
            if (nn_disjoint(fn, outs[o], out_names[o], outs[j], out_names[j]) < 0) return NULL;
    }
    const dl_nn_dense_t d = {
        .n_peers = P, .batch = NB, .n_in = NI, .n_out = NO,
        .x = (const float *)PyArray_DATA((PyArrayObject *)x), .x_ps = sx[0], .x_rs = sx[1],
        .w = (const float *)PyArray_DATA((PyArrayObject *)w), .w_ps = sw[0],
        .dy = (const float *)PyArray_DATA((PyArrayObject *)dy), .dy_ps = sdy[0], .dy_rs = sdy[1],
        .gw = (float *)PyArray_DATA((PyArrayObject *)gw), .gw_ps = sgw[0],
        .gb = (float *)PyArray_DATA((PyArrayObject *)gb), .gb_ps = sgb[0],
        .dx = dx == Py_None ? NULL : (float *)PyArray_DATA((PyArrayObject *)dx), .dx_ps = sdx[0],
        .dx_rs = sdx[1],
        .mask = mask == Py_None ? NULL : (const float *)PyArray_DATA((PyArrayObject *)mask),
        .m_ps = sm[0], .m_rs = sm[1]};
    Py_BEGIN_ALLOW_THREADS status = dl_dispatch()->nn_dense_backward_f32(&d, n_threads);
    Py_END_ALLOW_THREADS if (status != DL_OK) return raise_status(fn, status);
    Py_RETURN_NONE;
}

/* An int8 code array or float32 scale array of the fused int8 dense layer: C-contiguous, writeable
 * when an output, of exactly the given shape. */
static int s8_dense_array(PyObject *o, const char *fn, const char *name, int type_num, int ndim,
                          const npy_intp *shape, int writeable) {
    if (!PyArray_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be a numpy array, got %s", fn, name,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    PyArrayObject *a = (PyArrayObject *)o;
    if (check_array(a, fn, name, type_num, ndim, writeable) < 0) return -1;
    for (int d = 0; d < ndim; d++)
        if (PyArray_DIM(a, d) != shape[d]) {
            PyErr_Format(PyExc_ValueError, "%s: %s has %zd entries on axis %d, expected %zd", fn,
                         name, (Py_ssize_t)PyArray_DIM(a, d), d, (Py_ssize_t)shape[d]);
            return -1;
        }
    return 0;
}

/* No two of n arrays (None skipped) may share bytes; names for the message. */
static int s8_dense_disjoint(const char *fn, int n, PyObject **arrs, const char **names) {
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            if (arrs[i] == Py_None || arrs[j] == Py_None) continue;
            if (!nn_rows_disjoint((PyArrayObject *)arrs[i], (PyArrayObject *)arrs[j])) {
                PyErr_Format(PyExc_ValueError, "%s: %s must not overlap %s", fn, names[i],
                             names[j]);
                return -1;
            }
        }
    return 0;
}

/* Empty batches have no stride to check (NumPy gives them stride 0). */
static int s8_dense_unit(PyObject *o) {
    return !PyArray_Check(o) || PyArray_SIZE((PyArrayObject *)o) > 0;
}

/* gemm_s8_dense_forward(x, w, bias|None, relu, y, xq, sx, wq, sw, n_threads) -> y: the fused int8
 * dense layer (dl_gemm_s8_dense_t): x (Px, B, I) float32 with Px 1 (shared) or P, w (P, I, O) with
 * each peer's matrix contiguous, bias (P, O), y (P, B, O); outputs xq (Px, B, I) int8, sx (Px,),
 * wq (P, I, O) int8, sw (P,) float32, all C-contiguous. */
static PyObject *py_gemm_s8_dense_forward(PyObject *self, PyObject *args) {
    const char *fn = "gemm_s8_dense_forward";
    PyObject *x, *w, *bias, *y, *xq, *sxo, *wq, *swo;
    int relu, n_threads, status;
    int64_t sx[3], sw[3], sbias[2] = {0, 0}, sy[3];
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOpOOOOOO&:gemm_s8_dense_forward", &x, &w, &bias, &relu, &y,
                          &xq, &sxo, &wq, &swo, conv_threads, &n_threads))
        return NULL;
    const npy_intp any3[3] = {-1, -1, -1};
    if (nn_operand(w, fn, "w", 3, any3, s8_dense_unit(w), 0, sw) < 0) return NULL;
    const npy_intp P = PyArray_DIM((PyArrayObject *)w, 0), NI = PyArray_DIM((PyArrayObject *)w, 1),
                   NO = PyArray_DIM((PyArrayObject *)w, 2);
    const npy_intp shape_x[3] = {-1, -1, NI};
    if (nn_operand(x, fn, "x", 3, shape_x, s8_dense_unit(x), 0, sx) < 0 ||
        nn_peers(fn, "x", x, P) < 0)
        return NULL;
    const npy_intp PX = PyArray_DIM((PyArrayObject *)x, 0), NB = PyArray_DIM((PyArrayObject *)x, 1);
    const npy_intp shape_y[3] = {P, NB, NO}, shape_b[2] = {P, NO}, shape_xq[3] = {PX, NB, NI},
                   shape_wq[3] = {P, NI, NO}, shape_sx[1] = {PX}, shape_sw[1] = {P};
    if (nn_operand(y, fn, "y", 3, shape_y, s8_dense_unit(y), 1, sy) < 0 ||
        (bias != Py_None &&
         nn_operand(bias, fn, "bias", 2, shape_b, s8_dense_unit(bias), 0, sbias) < 0) ||
        s8_dense_array(xq, fn, "xq", NPY_INT8, 3, shape_xq, 1) < 0 ||
        s8_dense_array(sxo, fn, "sx", NPY_FLOAT32, 1, shape_sx, 1) < 0 ||
        s8_dense_array(wq, fn, "wq", NPY_INT8, 3, shape_wq, 1) < 0 ||
        s8_dense_array(swo, fn, "sw", NPY_FLOAT32, 1, shape_sw, 1) < 0 ||
        check_threads(fn, n_threads) < 0)
        return NULL;
    if (NI > 1 && sw[1] != NO) {
        PyErr_Format(PyExc_ValueError,
                     "%s: w must hold each peer's (I, O) matrix contiguously", fn);
        return NULL;
    }
    if (PX == P && P > 1 && sx[0] == 0) {
        PyErr_Format(PyExc_ValueError, "%s: x with %zd peers must not have peer stride 0 (pass "
                     "one shared (1, B, I) x)", fn, (Py_ssize_t)P);
        return NULL;
    }
    PyObject *arrs[9] = {y, xq, sxo, wq, swo, x, w, bias, NULL};
    const char *names[8] = {"y", "xq", "sx", "wq", "sw", "x", "w", "bias"};
    for (int o = 0; o < 5; o++) /* outputs against everything after them */
        for (int i = o + 1; i < 8; i++) {
            PyObject *pair[2] = {arrs[o], arrs[i]};
            const char *pn[2] = {names[o], names[i]};
            if (s8_dense_disjoint(fn, 2, pair, pn) < 0) return NULL;
        }
    const dl_gemm_s8_dense_t d = {
        .n_peers = P, .batch = NB, .n_in = NI, .n_out = NO,
        .x = (const float *)PyArray_DATA((PyArrayObject *)x), .x_ps = PX == 1 ? 0 : sx[0],
        .x_rs = NB > 1 ? sx[1] : NI,
        .w = (const float *)PyArray_DATA((PyArrayObject *)w), .w_ps = sw[0],
        .bias = bias == Py_None ? NULL : (const float *)PyArray_DATA((PyArrayObject *)bias),
        .b_ps = sbias[0], .relu = relu,
        .y = (float *)PyArray_DATA((PyArrayObject *)y), .y_ps = sy[0], .y_rs = NB > 1 ? sy[1] : NO,
        .xq = (int8_t *)PyArray_DATA((PyArrayObject *)xq),
        .sx = (float *)PyArray_DATA((PyArrayObject *)sxo),
        .wq = (int8_t *)PyArray_DATA((PyArrayObject *)wq),
        .sw = (float *)PyArray_DATA((PyArrayObject *)swo)};
    Py_BEGIN_ALLOW_THREADS status = dl_dispatch()->gemm_s8_dense_forward(&d, n_threads);
    Py_END_ALLOW_THREADS if (status != DL_OK) return raise_status(fn, status);
    Py_INCREF(y);
    return y;
}

/* gemm_s8_dense_backward(dy, xq, sx, wq, sw, mask|None, gw, gb, dx|None, seed, step, peer0,
 * n_threads) -> None: the fused int8 dense layer's backward (dl_gemm_s8_dense_t) from the codes
 * of its forward: dy (P, B, O), xq (Px, B, I), sx (Px,), wq (P, I, O), sw (P,), mask and dx
 * (P, B, I), gw (P, I, O) with each peer's matrix contiguous, gb (P, O). */
static PyObject *py_gemm_s8_dense_backward(PyObject *self, PyObject *args) {
    const char *fn = "gemm_s8_dense_backward";
    PyObject *dy, *xq, *sxo, *wq, *swo, *mask, *gw, *gb, *dx;
    unsigned long long seed = 0, step = 0;
    long long peer0 = 0;
    int n_threads, status;
    int64_t sdy[3], sm[3] = {0, 0, 0}, sgw[3], sgb[2], sdx[3] = {0, 0, 0};
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOO&O&O&O&:gemm_s8_dense_backward", &dy, &xq, &sxo, &wq,
                          &swo, &mask, &gw, &gb, &dx, conv_seed, &seed, conv_step, &step,
                          conv_peer0, &peer0, conv_threads, &n_threads))
        return NULL;
    const npy_intp any3[3] = {-1, -1, -1};
    if (nn_operand(dy, fn, "dy", 3, any3, s8_dense_unit(dy), 0, sdy) < 0) return NULL;
    const npy_intp P = PyArray_DIM((PyArrayObject *)dy, 0),
                   NB = PyArray_DIM((PyArrayObject *)dy, 1),
                   NO = PyArray_DIM((PyArrayObject *)dy, 2);
    if (!PyArray_Check(wq) || PyArray_NDIM((PyArrayObject *)wq) != 3) {
        PyErr_Format(PyExc_ValueError, "%s: wq must be a 3-dimensional int8 array (P, I, O)", fn);
        return NULL;
    }
    if (!PyArray_Check(xq) || PyArray_NDIM((PyArrayObject *)xq) != 3) {
        PyErr_Format(PyExc_ValueError, "%s: xq must be a 3-dimensional int8 array (1 or P, B, I)",
                     fn);
        return NULL;
    }
    const npy_intp NI = PyArray_DIM((PyArrayObject *)wq, 1),
                   PX = PyArray_DIM((PyArrayObject *)xq, 0);
    if (nn_peers(fn, "xq", xq, P)) return NULL;
    const npy_intp shape_xq[3] = {PX, NB, NI}, shape_wq[3] = {P, NI, NO}, shape_sx[1] = {PX},
                   shape_sw[1] = {P}, shape_dx[3] = {P, NB, NI}, shape_gw[3] = {P, NI, NO},
                   shape_gb[2] = {P, NO};
    if (s8_dense_array(xq, fn, "xq", NPY_INT8, 3, shape_xq, 0) < 0 ||
        s8_dense_array(sxo, fn, "sx", NPY_FLOAT32, 1, shape_sx, 0) < 0 ||
        s8_dense_array(wq, fn, "wq", NPY_INT8, 3, shape_wq, 0) < 0 ||
        s8_dense_array(swo, fn, "sw", NPY_FLOAT32, 1, shape_sw, 0) < 0 ||
        (mask != Py_None &&
         nn_operand(mask, fn, "mask", 3, shape_dx, s8_dense_unit(mask), 0, sm) < 0) ||
        nn_operand(gw, fn, "gw", 3, shape_gw, s8_dense_unit(gw), 1, sgw) < 0 ||
        nn_operand(gb, fn, "gb", 2, shape_gb, s8_dense_unit(gb), 1, sgb) < 0 ||
        (dx != Py_None && nn_operand(dx, fn, "dx", 3, shape_dx, s8_dense_unit(dx), 1, sdx) < 0) ||
        check_threads(fn, n_threads) < 0 || check_peer_rows(fn, peer0, P) < 0)
        return NULL;
    if (NI > 1 && sgw[1] != NO) {
        PyErr_Format(PyExc_ValueError, "%s: gw must hold each peer's (I, O) matrix contiguously",
                     fn);
        return NULL;
    }
    PyObject *arrs[9] = {gw, gb, dx, dy, xq, sxo, wq, swo, mask};
    const char *names[9] = {"gw", "gb", "dx", "dy", "xq", "sx", "wq", "sw", "mask"};
    for (int o = 0; o < 3; o++)
        for (int i = o + 1; i < 9; i++) {
            PyObject *pair[2] = {arrs[o], arrs[i]};
            const char *pn[2] = {names[o], names[i]};
            if (s8_dense_disjoint(fn, 2, pair, pn) < 0) return NULL;
        }
    const dl_gemm_s8_dense_t d = {
        .n_peers = P, .batch = NB, .n_in = NI, .n_out = NO,
        .xq = (int8_t *)PyArray_DATA((PyArrayObject *)xq),
        .sx = (float *)PyArray_DATA((PyArrayObject *)sxo), .xq_ps = PX == 1 ? 0 : NB * NI,
        .wq = (int8_t *)PyArray_DATA((PyArrayObject *)wq),
        .sw = (float *)PyArray_DATA((PyArrayObject *)swo),
        .dy = (const float *)PyArray_DATA((PyArrayObject *)dy), .dy_ps = sdy[0],
        .dy_rs = NB > 1 ? sdy[1] : NO, .seed = seed, .step = step, .peer0 = peer0,
        .gw = (float *)PyArray_DATA((PyArrayObject *)gw), .gw_ps = sgw[0],
        .gb = (float *)PyArray_DATA((PyArrayObject *)gb), .gb_ps = sgb[0],
        .dx = dx == Py_None ? NULL : (float *)PyArray_DATA((PyArrayObject *)dx), .dx_ps = sdx[0],
        .dx_rs = NB > 1 ? sdx[1] : NI,
        .mask = mask == Py_None ? NULL : (const float *)PyArray_DATA((PyArrayObject *)mask),
        .m_ps = sm[0], .m_rs = NB > 1 ? sm[1] : NI};
    Py_BEGIN_ALLOW_THREADS status = dl_dispatch()->gemm_s8_dense_backward(&d, n_threads);
    Py_END_ALLOW_THREADS if (status != DL_OK) return raise_status(fn, status);
    Py_RETURN_NONE;
}

/* sgd_step is a glue_ops[] row: one SGD step in place on params (and buf); all (P, dim)
 * C-contiguous float32, frozen (P,) int64 prefix lengths in [0, dim]; buf needed when
 * momentum != 0. */
static int check_sgd_overlap(glue_call_t *c) { /* before the generic check: its own messages */
    PyArrayObject *params = c->arr[0], *grad = c->arr[1], *buf = c->arr[2];
    if (overlaps(params, grad)) {
        PyErr_SetString(PyExc_ValueError, "sgd_step: grad must not overlap params");
        return -1;
    }
    if (buf != NULL && (overlaps(buf, params) || overlaps(buf, grad))) {
        PyErr_SetString(PyExc_ValueError, "sgd_step: buf must not overlap params or grad");
        return -1;
    }
    return 0;
}
static int post_sgd_step(glue_call_t *c) {
    if (c->arr[2] == NULL && c->flt[1] != 0.0f) {
        PyErr_SetString(PyExc_ValueError, "sgd_step: buf is required when momentum != 0");
        return -1;
    }
    const int64_t *fz = G_DATA_OR_NULL(c, 3);
    for (npy_intp r = 0; fz != NULL && r < c->rows; r++)
        if (fz[r] < 0 || fz[r] > c->dim) {
            PyErr_Format(PyExc_ValueError, "sgd_step: frozen must hold prefix lengths in [0, %zd], "
                         "got %lld", (Py_ssize_t)c->dim, (long long)fz[r]);
            return -1;
        }
    return 0;
}
static int call_sgd_step(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_optim_sgd_f32(c->rows, c->dim, G_DATA(c, 0), G_DATA(c, 1), G_DATA_OR_NULL(c, 2),
                            c->flt[0], c->flt[1], c->flt[2], c->ints[0], G_DATA_OR_NULL(c, 3),
                            c->n_threads);
}
/* <<< glue nn */

/* >>> glue conv: im2col / col2im of Conv2d on wide rows (csrc/conv.c) ----------------------------
 * The kernels are declared in dl.h. */

/* conv_unfold and conv_fold are glue_ops[] rows. Their geometry: images (G, C, B, L), columns
 * (G, R, ld) of the same dtype, 0 <= b0 <= b1 <= B, k >= 1, wp >= k, run >= 0, rows of L >=
 * (k-1)*wp + k-1 + run elements, R >= C*k*k and ld >= (b1 - b0) * run; ssz = b0, b1, k, wp, run. */
static int conv_check_geometry(glue_call_t *c, int img_slot, const char *img_name, int cols_slot,
                               const char *cols_name) {
    const char *fn = c->op->name;
    PyArrayObject *img = c->arr[img_slot], *cols = c->arr[cols_slot];
    const Py_ssize_t b0 = c->ssz[0], b1 = c->ssz[1], k = c->ssz[2], wp = c->ssz[3], run = c->ssz[4];
    const npy_intp G = PyArray_DIM(img, 0), C = PyArray_DIM(img, 1), B = PyArray_DIM(img, 2),
                   L = PyArray_DIM(img, 3);
    if (PyArray_DIM(cols, 0) != G) {
        PyErr_Format(PyExc_ValueError, "%s: %s must have %zd rows on axis 0 (as %s), got %zd", fn,
                     cols_name, (Py_ssize_t)G, img_name, (Py_ssize_t)PyArray_DIM(cols, 0));
        return -1;
    }
    if (k < 1 || wp < k || run < 0) {
        PyErr_Format(PyExc_ValueError, "%s: need k >= 1, wp >= k and run >= 0, got k=%zd, wp=%zd, "
                     "run=%zd", fn, k, wp, run);
        return -1;
    }
    if (b0 < 0 || b1 < b0 || b1 > B) {
        PyErr_Format(PyExc_ValueError, "%s: need 0 <= b0 <= b1 <= %zd, got b0=%zd, b1=%zd", fn,
                     (Py_ssize_t)B, b0, b1);
        return -1;
    }
    if ((k - 1) * wp + (k - 1) + run > L) {
        PyErr_Format(PyExc_ValueError, "%s: %s rows must hold (k-1)*wp + k-1 + run = %zd elements, "
                     "got %zd", fn, img_name, (k - 1) * wp + (k - 1) + run, (Py_ssize_t)L);
        return -1;
    }
    if (PyArray_DIM(cols, 1) < C * k * k || PyArray_DIM(cols, 2) < (b1 - b0) * run) {
        PyErr_Format(PyExc_ValueError, "%s: %s must have shape (%zd, >= %zd, >= %zd), got (%zd, "
                     "%zd, %zd)", fn, cols_name, (Py_ssize_t)G, (Py_ssize_t)(C * k * k),
                     (b1 - b0) * run, (Py_ssize_t)G, (Py_ssize_t)PyArray_DIM(cols, 1),
                     (Py_ssize_t)PyArray_DIM(cols, 2));
        return -1;
    }
    if (overlaps(img, cols)) {
        PyErr_Format(PyExc_ValueError, "%s: %s must not overlap %s", fn, cols_name, img_name);
        return -1;
    }
    return 0;
}
static int check_conv_unfold(glue_call_t *c) { return conv_check_geometry(c, 0, "xp", 1, "cols"); }
static int check_conv_fold(glue_call_t *c) { return conv_check_geometry(c, 1, "dxp", 0, "dcols"); }

/* im2col of samples [b0, b1) of xp (slot 0) into the first C*k*k rows of cols (slot 1). */
static int call_conv_unfold(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    PyArrayObject *xp = c->arr[0], *cols = c->arr[1];
    const npy_intp G = PyArray_DIM(xp, 0), C = PyArray_DIM(xp, 1), B = PyArray_DIM(xp, 2),
                   L = PyArray_DIM(xp, 3), R = PyArray_DIM(cols, 1), ld = PyArray_DIM(cols, 2);
    if (c->dtype == NPY_INT8)
        return dl_conv_unfold_s8(G, C, B, L, c->ssz[0], c->ssz[1], c->ssz[2], c->ssz[3],
                                 c->ssz[4], G_DATA(c, 0), G_DATA(c, 1), R, ld, c->n_threads);
    return dl_conv_unfold_f32(G, C, B, L, c->ssz[0], c->ssz[1], c->ssz[2], c->ssz[3], c->ssz[4],
                              G_DATA(c, 0), G_DATA(c, 1), R, ld, c->n_threads);
}
/* col2im: adds the first C*k*k rows of dcols (slot 0) into samples [b0, b1) of dxp (slot 1). */
static int call_conv_fold(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    PyArrayObject *dcols = c->arr[0], *dxp = c->arr[1];
    const npy_intp G = PyArray_DIM(dxp, 0), C = PyArray_DIM(dxp, 1), B = PyArray_DIM(dxp, 2),
                   L = PyArray_DIM(dxp, 3), R = PyArray_DIM(dcols, 1), ld = PyArray_DIM(dcols, 2);
    return dl_conv_fold_f32(G, C, B, L, c->ssz[0], c->ssz[1], c->ssz[2], c->ssz[3], c->ssz[4],
                            G_DATA(c, 0), R, ld, G_DATA(c, 1), c->n_threads);
}
/* <<< glue conv */

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
    PyErr_Format(PyExc_ValueError, "set_isa: isa must be one of 'generic', 'avx2', 'avx512', 'avx512vnni', got '%s'",
                 name);
    return NULL;
}

/* The table: one row per kernel (see the comment above glue_run for the fields). */
/* >>> glue pool: 2x2 max pooling of MaxPool2d (csrc/pool.c) -------------------------------------
 * maxpool2_forward(x, w, y, code|None, n_threads): x (n, h, ld) float32 with even h, even w <= ld;
 * y (n, h/2, w/2) float32 and code (n, h/2, w/2) uint8. maxpool2_backward(dy, code, dx,
 * n_threads): dy and code (n, h2, w2), dx (n, 2*h2, 2*w2). */
static int pool_check_shape(const char *fn, const char *name, PyArrayObject *a, npy_intp n,
                            npy_intp h, npy_intp w) {
    if (PyArray_DIM(a, 0) != n || PyArray_DIM(a, 1) != h || PyArray_DIM(a, 2) != w) {
        PyErr_Format(PyExc_ValueError, "%s: %s must have shape (%zd, %zd, %zd), got (%zd, %zd, %zd)",
                     fn, name, (Py_ssize_t)n, (Py_ssize_t)h, (Py_ssize_t)w,
                     (Py_ssize_t)PyArray_DIM(a, 0), (Py_ssize_t)PyArray_DIM(a, 1),
                     (Py_ssize_t)PyArray_DIM(a, 2));
        return -1;
    }
    return 0;
}
static int check_maxpool2_forward(glue_call_t *c) {
    const char *fn = c->op->name;
    PyArrayObject *x = c->arr[0];
    const npy_intp n = PyArray_DIM(x, 0), h = PyArray_DIM(x, 1), ld = PyArray_DIM(x, 2);
    const Py_ssize_t w = c->ssz[0];
    if (h % 2 || w < 0 || w % 2 || w > ld) {
        PyErr_Format(PyExc_ValueError, "%s: need an even number of rows and an even w <= %zd "
                     "(x's last axis), got %zd rows and w=%zd", fn, (Py_ssize_t)ld,
                     (Py_ssize_t)h, w);
        return -1;
    }
    if (pool_check_shape(fn, "y", c->arr[1], n, h / 2, w / 2)) return -1;
    if (c->arr[2] != NULL && pool_check_shape(fn, "code", c->arr[2], n, h / 2, w / 2)) return -1;
    return 0;
}
static int call_maxpool2_forward(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    PyArrayObject *x = c->arr[0];
    return dl_maxpool2_forward_f32(PyArray_DIM(x, 0), PyArray_DIM(x, 1), PyArray_DIM(x, 2),
                                   c->ssz[0], G_DATA(c, 0), G_DATA(c, 1), G_DATA_OR_NULL(c, 2),
                                   c->n_threads);
}
static int check_maxpool2_backward(glue_call_t *c) {
    const char *fn = c->op->name;
    PyArrayObject *dy = c->arr[0];
    const npy_intp n = PyArray_DIM(dy, 0), h2 = PyArray_DIM(dy, 1), w2 = PyArray_DIM(dy, 2);
    if (pool_check_shape(fn, "code", c->arr[1], n, h2, w2)) return -1;
    return pool_check_shape(fn, "dx", c->arr[2], n, 2 * h2, 2 * w2);
}
static int call_maxpool2_backward(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    PyArrayObject *dy = c->arr[0];
    return dl_maxpool2_backward_f32(PyArray_DIM(dy, 0), PyArray_DIM(dy, 1), PyArray_DIM(dy, 2),
                                    G_DATA(c, 0), G_DATA(c, 1), G_DATA(c, 2), c->n_threads);
}
/* <<< glue pool */

static const glue_op_t glue_ops[] = {
    /* >>> glue-table rng */
    {"rng_u32", "rng_u32(seed, step, peer0, out, n_threads) -> out.",
     {G_SEED_ARG, G_STEP_ARG, G_PEER0_ARG, G_OUT("out", NPY_UINT32, 2, X_R, X_D), G_THREADS_ARG},
     0, 0, NULL, NULL, call_rng_u32, {0}, 1, {0}},
    {"rng_fast_u32", "rng_fast_u32(seed, step, peer0, out, n_threads) -> out.",
     {G_SEED_ARG, G_STEP_ARG, G_PEER0_ARG, G_OUT("out", NPY_UINT32, 2, X_R, X_D), G_THREADS_ARG},
     0, 0, NULL, NULL, call_rng_fast_u32, {0}, 1, {0}},
    {"bitpack", "bitpack(codes, bits, out, n_threads) -> out.",
     {G_IN("codes", NPY_UINT8, 2, X_R, X_D), G_INT_IN("bits", 1, 8),
      G_OUT("out", NPY_UINT8, 2, X_R, X_E0), G_THREADS_ARG},
     0, 0, ext_rowbytes_i0, NULL, call_bitpack,
     {DL_E_RANGE, &PyExc_ValueError, "%s: every code must be < 2**bits = %d", E_POW2_I0}, 1, {1}},
    {"bitunpack", "bitunpack(packed, bits, out, n_threads) -> out.",
     {G_IN("packed", NPY_UINT8, 2, X_R, X_E0), G_INT_IN("bits", 1, 8),
      G_OUT("out", NPY_UINT8, 2, X_R, X_D), G_THREADS_ARG},
     1, 1, ext_rowbytes_i0, NULL, call_bitunpack, {0}, 1, {1}},
    /* <<< glue-table rng */
    /* >>> glue-table natural */
    {"natural_encode", "natural_encode(x, seed, step, peer0, out, n_threads) -> out (uint8 codes).",
     {G_IN("x", NPY_FLOAT32, 2, X_R, X_D), G_SEED_ARG, G_STEP_ARG, G_PEER0_ARG,
      G_OUT("out", NPY_UINT8, 2, X_R, X_D), G_THREADS_ARG},
     0, 0, NULL, NULL, call_natural_encode, {0}, 1, {1}},
    {"natural_decode", "natural_decode(codes, out, n_threads) -> out (float32).",
     {G_IN("codes", NPY_UINT8, 2, X_R, X_D), G_OUT("out", NPY_FLOAT32, 2, X_R, X_D),
      G_THREADS_ARG},
     0, 0, NULL, NULL, call_natural_decode, {0}, 1, {1}},
    {"dither_encode",
     "dither_encode(x, s, p, seed, step, peer0, norms, codes, n_threads) -> (norms, codes).",
     {G_IN("x", NPY_FLOAT32, 2, X_R, X_D), G_INT_IN("s", 1, 31), G_F("p"), G_SEED_ARG,
      G_STEP_ARG, G_PEER0_ARG, G_OUT("norms", NPY_FLOAT32, 1, X_R, X_ANY),
      G_OUT("codes", NPY_UINT8, 2, X_R, X_D), G_THREADS_ARG},
     0, 0, check_dither_p, NULL, call_dither_encode, {0}, 2, {1, 2}},
    {"dither_decode", "dither_decode(norms, codes, s, out, n_threads) -> out (float32).",
     {G_IN("norms", NPY_FLOAT32, 1, X_R, X_ANY), G_IN("codes", NPY_UINT8, 2, X_R, X_D),
      G_INT_IN("s", 1, 31), G_OUT("out", NPY_FLOAT32, 2, X_R, X_D), G_THREADS_ARG},
     1, 1, NULL, NULL, call_dither_decode,
     {DL_E_FORMAT, &PyExc_ValueError,
      "%s: malformed encoded data (norms must be finite and >= 0, code levels (code >> 1) <= "
      "s=%d)",
      E_I0},
     1, {2}},
    /* <<< glue-table natural */
    /* >>> glue-table topk */
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
    /* <<< glue-table topk */
    /* >>> glue-table stc */
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
    /* <<< glue-table stc */
    /* >>> glue-table quant */
    {"qsgd_encode", "qsgd_encode(x, levels, seed, step, peer0, norm, packed, n_threads) -> None.",
     {G_IN("x", NPY_FLOAT32, 2, X_R, X_D), G_INT_IN("levels", 1, 127), G_SEED_ARG, G_STEP_ARG,
      G_PEER0_ARG, G_OUT("norm", NPY_FLOAT32, 1, X_R, X_ANY),
      G_OUT("packed", NPY_UINT8, 2, X_R, X_E0), G_THREADS_ARG},
     0, 0, ext_rowbytes_qsgd, NULL, call_qsgd_encode, {0}, 0, {0}},
    {"qsgd_decode", "qsgd_decode(norm, packed, levels, out, n_threads) -> out.",
     {G_IN("norm", NPY_FLOAT32, 1, X_R, X_ANY), G_IN("packed", NPY_UINT8, 2, X_R, X_E0),
      G_INT_IN("levels", 1, 127), G_OUT("out", NPY_FLOAT32, 2, X_R, X_D), G_THREADS_ARG},
     2, 2, ext_rowbytes_qsgd, post_qsgd_norms, call_qsgd_decode,
     {DL_E_FORMAT, &PyExc_ValueError,
      "%s: malformed message: norm must be finite and >= 0 and every level <= levels = %d", E_I0},
     1, {2}},
    {"bucket_encode",
     "bucket_encode(x, bits, bucket, seed, step, peer0, lo, scale, packed, n_threads) -> None.",
     {G_IN("x", NPY_FLOAT32, 2, X_R, X_D), G_I("bits"), G_N("bucket"), G_SEED_ARG, G_STEP_ARG,
      G_PEER0_ARG, G_OUT("lo", NPY_FLOAT32, 2, X_R, X_E0),
      G_OUT("scale", NPY_FLOAT32, 2, X_R, X_E0), G_OUT("packed", NPY_UINT8, 2, X_R, X_E1),
      G_THREADS_ARG},
     0, 0, check_bucket, NULL, call_bucket_encode, {0}, 0, {0}},
    {"bucket_decode", "bucket_decode(lo, scale, packed, bits, bucket, out, n_threads) -> out.",
     {G_IN("lo", NPY_FLOAT32, 2, X_R, X_E0), G_IN("scale", NPY_FLOAT32, 2, X_R, X_E0),
      G_IN("packed", NPY_UINT8, 2, X_R, X_E1), G_I("bits"), G_N("bucket"),
      G_OUT("out", NPY_FLOAT32, 2, X_R, X_D), G_THREADS_ARG},
     3, 3, check_bucket, NULL, call_bucket_decode,
     {DL_E_FORMAT, &PyExc_ValueError,
      "%s: malformed message: lo must be finite, scale finite and >= 0, and lo + %d * scale "
      "finite",
      E_POW2M1_I0},
     1, {3}},
    {"sign_encode", "sign_encode(x, scale, packed, n_threads) -> None.",
     {G_IN("x", NPY_FLOAT32, 2, X_R, X_D), G_OUT("scale", NPY_FLOAT32, 1, X_R, X_ANY),
      G_OUT("packed", NPY_UINT8, 2, X_R, X_E0), G_THREADS_ARG},
     0, 0, ext_rowbytes_1, NULL, call_sign_encode, {0}, 0, {0}},
    {"sign_decode", "sign_decode(scale, packed, out, n_threads) -> out.",
     {G_IN("scale", NPY_FLOAT32, 1, X_R, X_ANY), G_IN("packed", NPY_UINT8, 2, X_R, X_E0),
      G_OUT("out", NPY_FLOAT32, 2, X_R, X_D), G_THREADS_ARG},
     2, 2, ext_rowbytes_1, NULL, call_sign_decode,
     {DL_E_FORMAT, &PyExc_ValueError, "%s: malformed message: scale must be finite and >= 0",
      E_NONE},
     1, {2}},
    {"int8_encode", "int8_encode(x, seed, step, peer0, scale, q, n_threads) -> None.",
     {G_IN("x", NPY_FLOAT32, 2, X_R, X_D), G_SEED_ARG, G_STEP_ARG, G_PEER0_ARG,
      G_OUT("scale", NPY_FLOAT32, 1, X_R, X_ANY), G_OUT("q", NPY_INT8, 2, X_R, X_D),
      G_THREADS_ARG},
     0, 0, NULL, NULL, call_int8_encode, {0}, 0, {0}},
    {"int8_decode", "int8_decode(scale, q, out, n_threads) -> out.",
     {G_IN("scale", NPY_FLOAT32, 1, X_R, X_ANY), G_IN("q", NPY_INT8, 2, X_R, X_D),
      G_OUT("out", NPY_FLOAT32, 2, X_R, X_D), G_THREADS_ARG},
     2, 2, NULL, NULL, call_int8_decode,
     {DL_E_FORMAT, &PyExc_ValueError,
      "%s: malformed message: scale must be finite and >= 0 (127 * scale finite), q in "
      "[-127, 127]",
      E_NONE},
     1, {2}},
    /* <<< glue-table quant */
    /* >>> glue-table gemm */
    {"dequantize_s8", "dequantize_s8(q, scale, axis, out, n_threads) -> out.",
     {G_IN("q", NPY_INT8, 2, X_R, X_D), G_IN("scale", NPY_FLOAT32, 1, X_ANY, X_ANY), G_I("axis"),
      G_OUT("out", NPY_FLOAT32, 2, X_R, X_D), G_THREADS_ARG},
     0, 0, check_dequantize_scale, post_dequantize_finite, call_dequantize_s8, {0}, 1, {2}},
    /* <<< glue-table gemm */
    /* >>> glue-table conv */
    {"conv_unfold", "conv_unfold(xp, b0, b1, cols, k, wp, run, n_threads): im2col on wide rows.",
     {G_IN("xp", G_F32_OR_S8, 4, X_ANY, X_ANY), G_N("b0"), G_N("b1"),
      G_OUT("cols", G_F32_OR_S8, 3, X_ANY, X_ANY), G_N("k"), G_N("wp"), G_N("run"), G_THREADS_ARG},
     0, 0, check_conv_unfold, NULL, call_conv_unfold, {0}, 0, {0}},
    {"conv_fold", "conv_fold(dcols, dxp, b0, b1, k, wp, run, n_threads): col2im on wide rows.",
     {G_IN("dcols", NPY_FLOAT32, 3, X_ANY, X_ANY), G_OUT("dxp", NPY_FLOAT32, 4, X_ANY, X_ANY),
      G_N("b0"), G_N("b1"), G_N("k"), G_N("wp"), G_N("run"), G_THREADS_ARG},
     0, 0, check_conv_fold, NULL, call_conv_fold, {0}, 0, {0}},
    /* <<< glue-table conv */
    /* >>> glue-table pool */
    {"maxpool2_forward", "maxpool2_forward(x, w, y, code|None, n_threads): 2x2 max pooling of the "
     "first w columns of x's rows.",
     {G_IN("x", NPY_FLOAT32, 3, X_ANY, X_ANY), G_N("w"), G_OUT("y", NPY_FLOAT32, 3, X_ANY, X_ANY),
      G_OPT_OUT("code", NPY_UINT8, 3, X_ANY, X_ANY), G_THREADS_ARG},
     0, 0, check_maxpool2_forward, NULL, call_maxpool2_forward, {0}, 0, {0}},
    {"maxpool2_backward", "maxpool2_backward(dy, code, dx, n_threads): the gradient of 2x2 max "
     "pooling.",
     {G_IN("dy", NPY_FLOAT32, 3, X_ANY, X_ANY), G_IN("code", NPY_UINT8, 3, X_ANY, X_ANY),
      G_OUT("dx", NPY_FLOAT32, 3, X_ANY, X_ANY), G_THREADS_ARG},
     0, 0, check_maxpool2_backward, NULL, call_maxpool2_backward, {0}, 0, {0}},
    /* <<< glue-table pool */
    /* >>> glue-table limits */
    {"copy_f32", "copy_f32(src, dst, n_threads) -> dst: non-temporal streaming copy (float32).",
     {G_IN("src", NPY_FLOAT32, G_NDIM_ANY, X_ANY, X_ANY),
      G_OUT("dst", NPY_FLOAT32, G_NDIM_ANY, X_ANY, X_ANY), G_THREADS_ARG},
     0, 0, check_copy_size, NULL, call_copy_f32, {0}, 1, {1}},
    {"read_f32", "read_f32(src, out, n_threads) -> out: XOR of src's 32-bit words, a read-only "
     "pass (float32).",
     {G_IN("src", NPY_FLOAT32, G_NDIM_ANY, X_ANY, X_ANY),
      G_OUT("out", NPY_UINT32, G_NDIM_ANY, X_ANY, X_ANY), G_THREADS_ARG},
     0, 0, check_read_out, NULL, call_read_f32, {0}, 1, {1}},
    {"consensus_sums", "consensus_sums(X, out, n_threads) -> out: (sum of X^2, sum over columns "
     "of the squared column sums), float64, one pass over the (P, D) float32 X.",
     {G_IN("X", NPY_FLOAT32, 2, X_R, X_D),
      G_OUT("out", NPY_FLOAT64, 1, X_ANY, X_ANY), G_THREADS_ARG},
     0, 0, check_consensus_out, NULL, call_consensus_sums, {0}, 1, {1}},
    /* <<< glue-table limits */
    /* >>> glue-table nn */
    {"sgd_step",
     "sgd_step(params, grad, buf, lr, momentum, weight_decay, nesterov, frozen, n_threads).",
     {G_OUT("params", NPY_FLOAT32, 2, X_R, X_D), G_IN("grad", NPY_FLOAT32, 2, X_R, X_D),
      G_OPT_OUT("buf", NPY_FLOAT32, 2, X_R, X_D), G_F("lr"), G_F("momentum"), G_F("weight_decay"),
      G_BOOL_ARG("nesterov"), G_OPT_IN("frozen", NPY_INT64, 1, X_R, X_ANY), G_THREADS_ARG},
     0, 0, check_sgd_overlap, post_sgd_step, call_sgd_step, {0}, 0, {0}},
    /* <<< glue-table nn */
};
#define GLUE_N_OPS ((int)(sizeof glue_ops / sizeof glue_ops[0]))
static PyMethodDef glue_defs[GLUE_N_OPS];

/* The hand-written functions (arguments that do not fit glue_ops[]). */
static PyMethodDef methods[] = {
    {"gossip", py_gossip, METH_VARARGS,
     "gossip(indptr, indices, data, n_cols, x, out, n_threads) -> out = W @ x for CSR W."},
    /* >>> methods topk */
    {"threshold", py_threshold, METH_VARARGS,
     "threshold(x, v, n_threads) -> (counts, idx, val): every |x| >= v, rows concatenated."},
    /* <<< methods topk */
    /* >>> methods gemm */
    {"gemm_s8_layout", py_gemm_s8_layout, METH_NOARGS,
     "gemm_s8_layout() -> dict: packed-B layout of the active path."},
    {"gemm_s8_pack_b", py_gemm_s8_pack_b, METH_VARARGS,
     "gemm_s8_pack_b(b, data, colsum, n_threads) -> None."},
    {"gemm_s8", py_gemm_s8, METH_VARARGS,
     "gemm_s8(a, data, colsum, layout, k, n, out, n_threads) -> out (int32, exact)."},
    {"gemm_s8_f32", py_gemm_s8_f32, METH_VARARGS,
     "gemm_s8_f32(a, data, colsum, layout, k, n, a_scale, b_scale, bias, out, n_threads) -> out."},
    {"quantize_s8", py_quantize_s8, METH_VARARGS,
     "quantize_s8(x, scale, axis, rounding, seed, step, peer0, out, n_threads) -> out."},
    {"absmax_scale", py_absmax_scale, METH_VARARGS,
     "absmax_scale(x, axis, out, n_threads) -> out."},
    {"gemm_s8_batched", py_gemm_s8_batched, METH_VARARGS,
     "gemm_s8_batched(a, b, trans_a, trans_b, a_scale, b_scale, bias, out, n_threads) -> out."},
    /* <<< methods gemm */
    /* >>> methods limits */
    {"peak_s8", py_peak_s8, METH_VARARGS,
     "peak_s8(reps, n_threads) -> (ops, check): the active path's int8 multiply-add peak loop."},
    /* <<< methods limits */
    /* >>> methods nn */
    {"nn_gemm", py_nn_gemm, METH_VARARGS, "nn_gemm(a, b, c, accumulate, n_threads) -> c."},
    {"nn_dense_forward", py_nn_dense_forward, METH_VARARGS,
     "nn_dense_forward(x, w, bias, relu, y, n_threads) -> y."},
    {"nn_dense_backward", py_nn_dense_backward, METH_VARARGS,
     "nn_dense_backward(x, w, dy, mask, gw, gb, dx, n_threads) -> None."},
    {"gemm_s8_dense_forward", py_gemm_s8_dense_forward, METH_VARARGS,
     "gemm_s8_dense_forward(x, w, bias, relu, y, xq, sx, wq, sw, n_threads) -> y."},
    {"gemm_s8_dense_backward", py_gemm_s8_dense_backward, METH_VARARGS,
     "gemm_s8_dense_backward(dy, xq, sx, wq, sw, mask, gw, gb, dx, seed, step, peer0, "
     "n_threads) -> None."},
    /* <<< methods nn */
    {"config", py_config, METH_NOARGS, "config() -> dict describing the build and active ISA."},
    {"set_isa", py_set_isa, METH_VARARGS, "set_isa(name): force 'generic', 'avx2', 'avx512' or 'avx512vnni'."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "decentlearn._core",
                                       "C kernels of decentlearn (see decentlearn.ops).", -1,
                                       methods, NULL, NULL, NULL, NULL};

/* Adds one function per glue_ops[] row: glue_run with the row (in a capsule) as self. */
static int glue_add_ops(PyObject *m) {
    PyObject *modname = PyUnicode_FromString("decentlearn._core");
    if (modname == NULL) return -1;
    for (int i = 0; i < GLUE_N_OPS; i++) {
        glue_defs[i] = (PyMethodDef){glue_ops[i].name, glue_run, METH_VARARGS, glue_ops[i].doc};
        PyObject *cap = PyCapsule_New((void *)&glue_ops[i], "decentlearn._core.glue_op", NULL);
        PyObject *f = cap == NULL ? NULL : PyCFunction_NewEx(&glue_defs[i], cap, modname);
        Py_XDECREF(cap);
        const int rc = f == NULL ? -1 : PyModule_AddObjectRef(m, glue_ops[i].name, f);
        Py_XDECREF(f);
        if (rc < 0) {
            Py_DECREF(modname);
            return -1;
        }
    }
    Py_DECREF(modname);
    return 0;
}

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
                         "DECENTLEARN_ISA must be 'generic', 'avx2', 'avx512' or 'avx512vnni', got '%s'", forced);
            return NULL;
        }
    }
    (void)dl_dispatch();
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    NonFiniteError = PyErr_NewExceptionWithDoc(
        "decentlearn._core.NonFiniteError",
        "A kernel was given NaN or infinity where finite values are required.", PyExc_ValueError,
        NULL);
    if (NonFiniteError == NULL || PyModule_AddObjectRef(m, "NonFiniteError", NonFiniteError) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (glue_add_ops(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
