/* copy.c: glue of the memory-bandwidth kernels decentlearn.bench measures the machine's limits
 * with (csrc/copy.c): copy_f32 (non-temporal streaming copy) and read_f32 (a read-only pass), two
 * glue_op_t rows; and take_rows (the minibatch gather), hand-written because it takes any dtype,
 * with the peer sampler's batch_indices and shuffle_segments. decentlearn/ops/copy.py is the
 * Python side.
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

/* axpby(a, x, b, y, out, n_threads) is a table row: out = a x + b y, all C-contiguous float32 of
 * one size. out is declared an input so that it may be x or y itself (in place); here it must be
 * writable, and identical to x (y) or share no memory with it. */
static int check_axpby(glue_call_t *c) {
    PyArrayObject *x = c->arr[0], *y = c->arr[1], *out = c->arr[2];
    if (PyArray_SIZE(y) != PyArray_SIZE(x) || PyArray_SIZE(out) != PyArray_SIZE(x)) {
        PyErr_Format(PyExc_ValueError, "axpby: y and out must have x's size %zd, got %zd and %zd",
                     (Py_ssize_t)PyArray_SIZE(x), (Py_ssize_t)PyArray_SIZE(y),
                     (Py_ssize_t)PyArray_SIZE(out));
        return -1;
    }
    if (check_aligned_writeable(out, "axpby", "out", 1)) return -1;
    for (int i = 0; i < 2; i++)
        if (PyArray_DATA(c->arr[i]) != PyArray_DATA(out) && overlaps(c->arr[i], out)) {
            PyErr_Format(PyExc_ValueError, "axpby: out must be %s itself or share no memory with "
                         "it", i ? "y" : "x");
            return -1;
        }
    return 0;
}
static int call_axpby(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_axpby_f32((int64_t)PyArray_SIZE(c->arr[0]), c->flt[0], G_DATA(c, 0), c->flt[1],
                        G_DATA(c, 1), G_DATA(c, 2), c->n_threads);
}

/* scale_rows(x, s, divide, out, n_threads) is a table row: x and out (R, D) float32, s (R,)
 * float32. out is declared an input so that it may be x itself; here it must be writable, and x
 * itself or disjoint from it. */
static int check_scale_rows(glue_call_t *c) {
    PyArrayObject *x = c->arr[0], *out = c->arr[2];
    if (check_aligned_writeable(out, "scale_rows", "out", 1)) return -1;
    if (PyArray_DATA(x) != PyArray_DATA(out) && overlaps(x, out)) {
        PyErr_SetString(PyExc_ValueError, "scale_rows: out must be x itself or share no memory "
                                          "with it");
        return -1;
    }
    return 0;
}
static int call_scale_rows(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_scale_rows_f32(c->rows, c->dim, G_DATA(c, 0), G_DATA(c, 1), c->ints[0],
                             G_DATA(c, 2), c->n_threads);
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
    {"scale_rows", "scale_rows(x, s, divide, out, n_threads): out[r] = x[r] * s[r] (or / s[r]).",
     {G_IN("x", NPY_FLOAT32, 2, X_R, X_D), G_IN("s", NPY_FLOAT32, 1, X_R, X_ANY),
      G_BOOL_ARG("divide"), G_IN("out", NPY_FLOAT32, 2, X_R, X_D), G_THREADS_ARG},
     0, 0, NULL, check_scale_rows, call_scale_rows, {0}, 0, {0}},
    {"axpby", "axpby(a, x, b, y, out, n_threads): out = a x + b y (float32).",
     {G_F("a"), G_IN("x", NPY_FLOAT32, G_NDIM_ANY, X_ANY, X_ANY), G_F("b"),
      G_IN("y", NPY_FLOAT32, G_NDIM_ANY, X_ANY, X_ANY),
      G_IN("out", NPY_FLOAT32, G_NDIM_ANY, X_ANY, X_ANY), G_THREADS_ARG},
     0, 0, check_axpby, NULL, call_axpby, {0}, 0, {0}},
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

/* The source of take_rows and place_rows: an array of at least one dimension holding plain values
 * (copying Python object pointers would need reference counts), C-contiguous; *row_bytes gets the
 * bytes of one row (axis 0). Returns 0, or -1 with the exception set. */
static int plain_rows_src(const char *fn, PyArrayObject *src, int64_t *row_bytes) {
    const int nd = PyArray_NDIM(src);
    if (PyDataType_REFCHK(PyArray_DESCR(src))) {
        PyErr_Format(PyExc_TypeError, "%s: src must hold plain values, not Python objects", fn);
        return -1;
    }
    if (nd < 1) {
        PyErr_Format(PyExc_ValueError, "%s: src must have at least 1 dimension, got 0", fn);
        return -1;
    }
    if (check_array(src, fn, "src", PyArray_TYPE(src), nd, 0)) return -1;
    *row_bytes = (int64_t)PyArray_ITEMSIZE(src);
    for (int a = 1; a < nd; a++) *row_bytes *= (int64_t)PyArray_DIM(src, a);
    return 0;
}

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
    int64_t row_bytes;
    if (plain_rows_src("take_rows", src, &row_bytes) ||
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

/* Checks the peer sampler's per-peer int64 vectors: each 1-D C-contiguous of length P (the first
 * one's). */
static int check_peer_vectors(const char *fn, PyArrayObject *const *a, const char *const *names,
                              int n) {
    for (int i = 0; i < n; i++) {
        if (check_array(a[i], fn, names[i], NPY_INT64, 1, 0)) return -1;
        if (PyArray_DIM(a[i], 0) != PyArray_DIM(a[0], 0)) {
            PyErr_Format(PyExc_ValueError, "%s: %s must have %s's length %zd, got %zd", fn,
                         names[i], names[0], (Py_ssize_t)PyArray_DIM(a[0], 0),
                         (Py_ssize_t)PyArray_DIM(a[i], 0));
            return -1;
        }
    }
    return 0;
}

/* batch_indices(perm, start, size, cursor, out, n_threads) -> out: out (P, B) int64 gets
 * perm[start[p] + (cursor[p] + j) % size[p]]; every array int64 and C-contiguous. */
static PyObject *py_batch_indices(PyObject *self, PyObject *args) {
    PyArrayObject *perm, *start, *size, *cursor, *out;
    int n_threads, status;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O&:batch_indices", &PyArray_Type, &perm,
                          &PyArray_Type, &start, &PyArray_Type, &size, &PyArray_Type, &cursor,
                          &PyArray_Type, &out, conv_threads, &n_threads))
        return NULL;
    PyArrayObject *const vec[3] = {start, size, cursor};
    const char *const names[3] = {"start", "size", "cursor"};
    if (check_array(perm, "batch_indices", "perm", NPY_INT64, 1, 0) ||
        check_peer_vectors("batch_indices", vec, names, 3) ||
        check_array(out, "batch_indices", "out", NPY_INT64, 2, 1) ||
        check_threads("batch_indices", n_threads))
        return NULL;
    if (PyArray_DIM(out, 0) != PyArray_DIM(start, 0)) {
        PyErr_Format(PyExc_ValueError, "batch_indices: out must have %zd rows (one per peer), got "
                     "%zd", (Py_ssize_t)PyArray_DIM(start, 0), (Py_ssize_t)PyArray_DIM(out, 0));
        return NULL;
    }
    if (check_disjoint("batch_indices", 1, 5, out, "out", perm, "perm", start, "start", size,
                       "size", cursor, "cursor"))
        return NULL;
    Py_BEGIN_ALLOW_THREADS;
    status = dl_batch_indices(PyArray_DIM(out, 0), PyArray_DIM(out, 1), PyArray_DATA(perm),
                              PyArray_DIM(perm, 0), PyArray_DATA(start), PyArray_DATA(size),
                              PyArray_DATA(cursor), PyArray_DATA(out), n_threads);
    Py_END_ALLOW_THREADS;
    if (status == DL_E_ARG) {
        PyErr_SetString(PyExc_ValueError, "batch_indices: every size must be >= 1 and every "
                        "cursor >= 0");
        return NULL;
    }
    if (status == DL_E_INDEX) {
        PyErr_Format(PyExc_IndexError, "batch_indices: every segment [start, start + size) must "
                     "lie in [0, %zd) (perm's length)", (Py_ssize_t)PyArray_DIM(perm, 0));
        return NULL;
    }
    if (status != DL_OK) return raise_status("batch_indices", status);
    Py_INCREF(out);
    return (PyObject *)out;
}

/* shuffle_segments(perm, start, size, peers, u, n_threads) -> None: the listed peers' segments of
 * perm reshuffled in place by the float64 uniforms u (see dl_shuffle_segments). */
static PyObject *py_shuffle_segments(PyObject *self, PyObject *args) {
    PyArrayObject *perm, *start, *size, *peers, *u;
    int n_threads, status;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O&:shuffle_segments", &PyArray_Type, &perm,
                          &PyArray_Type, &start, &PyArray_Type, &size, &PyArray_Type, &peers,
                          &PyArray_Type, &u, conv_threads, &n_threads))
        return NULL;
    PyArrayObject *const vec[2] = {start, size};
    const char *const names[2] = {"start", "size"};
    if (check_array(perm, "shuffle_segments", "perm", NPY_INT64, 1, 1) ||
        check_peer_vectors("shuffle_segments", vec, names, 2) ||
        check_array(peers, "shuffle_segments", "peers", NPY_INT64, 1, 0) ||
        check_array(u, "shuffle_segments", "u", NPY_FLOAT64, 1, 0) ||
        check_threads("shuffle_segments", n_threads))
        return NULL;
    if (check_disjoint("shuffle_segments", 1, 5, perm, "perm", start, "start", size, "size",
                       peers, "peers", u, "u"))
        return NULL;
    Py_BEGIN_ALLOW_THREADS;
    status = dl_shuffle_segments(PyArray_DIM(peers, 0), PyArray_DATA(peers), PyArray_DIM(start, 0),
                                 PyArray_DATA(start), PyArray_DATA(size), PyArray_DATA(perm),
                                 PyArray_DIM(perm, 0), PyArray_DATA(u), PyArray_DIM(u, 0),
                                 n_threads);
    Py_END_ALLOW_THREADS;
    if (status == DL_E_ARG) {
        PyErr_SetString(PyExc_ValueError, "shuffle_segments: peers must ascend strictly within "
                        "[0, len(start)), their sizes be >= 1, and u hold one value per sample "
                        "of their segments");
        return NULL;
    }
    if (status == DL_E_INDEX) {
        PyErr_Format(PyExc_IndexError, "shuffle_segments: every listed segment [start, start + "
                     "size) must lie in [0, %zd) (perm's length)", (Py_ssize_t)PyArray_DIM(perm, 0));
        return NULL;
    }
    if (status != DL_OK) return raise_status("shuffle_segments", status);
    Py_RETURN_NONE;
}

/* copy2d(src, dst, n_threads) -> dst: 2-D float32 views of one shape whose rows are each
 * contiguous (column blocks of wider matrices), not overlapping. */
static PyObject *py_copy2d(PyObject *self, PyObject *args) {
    PyArrayObject *src, *dst;
    int n_threads, status;
    npy_intp lds, ldd;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!O&:copy2d", &PyArray_Type, &src, &PyArray_Type, &dst,
                          conv_threads, &n_threads))
        return NULL;
    if (check_rows(src, "copy2d", "src", &lds) || check_rows(dst, "copy2d", "dst", &ldd) ||
        check_aligned_writeable(dst, "copy2d", "dst", 1) || check_threads("copy2d", n_threads))
        return NULL;
    if (PyArray_DIM(src, 0) != PyArray_DIM(dst, 0) || PyArray_DIM(src, 1) != PyArray_DIM(dst, 1)) {
        PyErr_Format(PyExc_ValueError, "copy2d: dst must have src's shape (%zd, %zd), got (%zd, %zd)",
                     (Py_ssize_t)PyArray_DIM(src, 0), (Py_ssize_t)PyArray_DIM(src, 1),
                     (Py_ssize_t)PyArray_DIM(dst, 0), (Py_ssize_t)PyArray_DIM(dst, 1));
        return NULL;
    }
    if (!rows_disjoint(dst, src)) {
        PyErr_SetString(PyExc_ValueError, "copy2d: dst must not overlap src");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS;
    status = dl_copy2d_f32(PyArray_DIM(src, 0), PyArray_DIM(src, 1), PyArray_DATA(src), lds,
                           PyArray_DATA(dst), ldd, n_threads);
    Py_END_ALLOW_THREADS;
    if (status != DL_OK) return raise_status("copy2d", status);
    Py_INCREF(dst);
    return (PyObject *)dst;
}

/* An input of axpby_rows: check_rows's row-strided 2-D float32, or one contiguous row broadcast
 * to every row (np.broadcast_to(row, shape): row stride 0), *ld = 0. */
static int rows_or_broadcast(PyArrayObject *a, const char *name, npy_intp *ld) {
    if (PyArray_TYPE(a) == NPY_FLOAT32 && PyArray_NDIM(a) == 2 && PyArray_DIM(a, 0) > 1 &&
        PyArray_STRIDE(a, 0) == 0 && (PyArray_DIM(a, 1) <= 1 || PyArray_STRIDE(a, 1) == 4) &&
        PyArray_ISALIGNED(a)) {
        *ld = 0;
        return 0;
    }
    return check_rows(a, "axpby", name, ld);
}

/* axpby_rows(a, x, b, y, out, n_threads) -> out: out = a x + b y for 2-D float32 views of one
 * shape whose rows are each contiguous (column blocks of wider matrices; x or y may also be one
 * row broadcast to every row); out may be x or y itself (the same view) and must share no memory
 * with them otherwise. */
static PyObject *py_axpby_rows(PyObject *self, PyObject *args) {
    PyArrayObject *x, *y, *out;
    double a, b;
    int n_threads, status;
    npy_intp ldx, ldy, ldo;
    (void)self;
    if (!PyArg_ParseTuple(args, "dO!dO!O!O&:axpby_rows", &a, &PyArray_Type, &x, &b, &PyArray_Type,
                          &y, &PyArray_Type, &out, conv_threads, &n_threads))
        return NULL;
    if (rows_or_broadcast(x, "x", &ldx) || rows_or_broadcast(y, "y", &ldy) ||
        check_rows(out, "axpby", "out", &ldo) || check_aligned_writeable(out, "axpby", "out", 1) ||
        check_threads("axpby", n_threads))
        return NULL;
    const npy_intp rows = PyArray_DIM(x, 0), w = PyArray_DIM(x, 1);
    if (PyArray_DIM(y, 0) != rows || PyArray_DIM(y, 1) != w || PyArray_DIM(out, 0) != rows ||
        PyArray_DIM(out, 1) != w) {
        PyErr_Format(PyExc_ValueError, "axpby: y and out must have x's shape (%zd, %zd), got "
                     "(%zd, %zd) and (%zd, %zd)", (Py_ssize_t)rows, (Py_ssize_t)w,
                     (Py_ssize_t)PyArray_DIM(y, 0), (Py_ssize_t)PyArray_DIM(y, 1),
                     (Py_ssize_t)PyArray_DIM(out, 0), (Py_ssize_t)PyArray_DIM(out, 1));
        return NULL;
    }
    PyArrayObject *in[2] = {x, y};
    const npy_intp ld[2] = {ldx, ldy};
    for (int i = 0; i < 2; i++) {
        const int same = PyArray_DATA(in[i]) == PyArray_DATA(out) && (ld[i] == ldo || rows <= 1);
        if (!same && !rows_disjoint(out, in[i])) {
            PyErr_Format(PyExc_ValueError, "axpby: out must be %s itself or share no memory with "
                         "it", i ? "y" : "x");
            return NULL;
        }
    }
    Py_BEGIN_ALLOW_THREADS;
    status = dl_axpby_rows_f32(rows, w, (float)a, PyArray_DATA(x), ldx, (float)b, PyArray_DATA(y),
                               ldy, PyArray_DATA(out), ldo, n_threads);
    Py_END_ALLOW_THREADS;
    if (status != DL_OK) return raise_status("axpby", status);
    Py_INCREF(out);
    return (PyObject *)out;
}

/* put_rows(dst, idx, src, n_threads) -> dst: dst[idx[r]] = src[r] (src of len(idx) rows) or src[0]
 * (src of one row, written into every listed row); idx int64, strictly increasing; dst and src
 * C-contiguous of one dtype and row shape, not overlapping. */
static PyObject *py_put_rows(PyObject *self, PyObject *args) {
    PyArrayObject *dst, *idx, *src;
    int n_threads, status;
    int64_t row_bytes;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!O!O&:put_rows", &PyArray_Type, &dst, &PyArray_Type, &idx,
                          &PyArray_Type, &src, conv_threads, &n_threads))
        return NULL;
    if (plain_rows_src("put_rows", src, &row_bytes) ||
        check_array(idx, "put_rows", "idx", NPY_INT64, 1, 0) ||
        check_array(dst, "put_rows", "dst", PyArray_TYPE(src), PyArray_NDIM(src), 1) ||
        check_threads("put_rows", n_threads))
        return NULL;
    const npy_intp n_idx = PyArray_DIM(idx, 0), n_src = PyArray_DIM(src, 0);
    int ok = n_src == n_idx || n_src == 1;
    for (int a = 1; ok && a < PyArray_NDIM(src); a++) ok = PyArray_DIM(dst, a) == PyArray_DIM(src, a);
    if (!ok) {
        PyErr_Format(PyExc_ValueError, "put_rows: src must have len(idx) = %zd rows or 1, and "
                     "dst's row shape", (Py_ssize_t)n_idx);
        return NULL;
    }
    if (check_disjoint("put_rows", 1, 3, dst, "dst", src, "src", idx, "idx")) return NULL;
    const int64_t n_dst = PyArray_DIM(dst, 0);
    Py_BEGIN_ALLOW_THREADS;
    status = dl_put_rows(n_dst, row_bytes, PyArray_DATA(dst), n_idx, PyArray_DATA(idx),
                         PyArray_DATA(src), n_src == n_idx && n_idx != 1 ? 1 : 0, n_threads);
    Py_END_ALLOW_THREADS;
    if (status == DL_E_INDEX) {
        PyErr_Format(PyExc_IndexError, "put_rows: idx must be strictly increasing in [0, %lld) "
                     "(dst's rows)", (long long)n_dst);
        return NULL;
    }
    if (status != DL_OK) return raise_status("put_rows", status);
    Py_INCREF(dst);
    return (PyObject *)dst;
}

/* count_ne_rows(a, idx, b, counts, n_threads) -> counts: counts[r] = count of a[idx[r]] != b,
 * a (n, dim) float32 C-contiguous, b (dim,) float32, idx and counts int64 of one length. */
static PyObject *py_count_ne_rows(PyObject *self, PyObject *args) {
    PyArrayObject *a, *idx, *b, *counts;
    int n_threads, status;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O&:count_ne_rows", &PyArray_Type, &a, &PyArray_Type,
                          &idx, &PyArray_Type, &b, &PyArray_Type, &counts, conv_threads,
                          &n_threads))
        return NULL;
    if (check_array(a, "count_ne_rows", "a", NPY_FLOAT32, 2, 0) ||
        check_array(idx, "count_ne_rows", "idx", NPY_INT64, 1, 0) ||
        check_array(b, "count_ne_rows", "b", NPY_FLOAT32, 1, 0) ||
        check_array(counts, "count_ne_rows", "counts", NPY_INT64, 1, 1) ||
        check_threads("count_ne_rows", n_threads))
        return NULL;
    if (PyArray_DIM(b, 0) != PyArray_DIM(a, 1) || PyArray_DIM(counts, 0) != PyArray_DIM(idx, 0)) {
        PyErr_Format(PyExc_ValueError, "count_ne_rows: b must have a's %zd columns and counts "
                     "idx's %zd entries", (Py_ssize_t)PyArray_DIM(a, 1),
                     (Py_ssize_t)PyArray_DIM(idx, 0));
        return NULL;
    }
    if (check_disjoint("count_ne_rows", 1, 4, counts, "counts", a, "a", idx, "idx", b, "b"))
        return NULL;
    const int64_t n_rows = PyArray_DIM(a, 0);
    Py_BEGIN_ALLOW_THREADS;
    status = dl_count_ne_rows(n_rows, PyArray_DIM(a, 1), PyArray_DATA(a), PyArray_DIM(idx, 0),
                              PyArray_DATA(idx), PyArray_DATA(b), PyArray_DATA(counts), n_threads);
    Py_END_ALLOW_THREADS;
    if (status == DL_E_INDEX) {
        PyErr_Format(PyExc_IndexError, "count_ne_rows: every idx must lie in [0, %lld) (a's rows)",
                     (long long)n_rows);
        return NULL;
    }
    if (status != DL_OK) return raise_status("count_ne_rows", status);
    Py_INCREF(counts);
    return (PyObject *)counts;
}

/* place_rows(src, inv, out, n_threads) -> out: out[p] = src[inv[p]], zeros where inv[p] == -1;
 * src and out of one plain dtype with the same row shape, inv (len(out),) int64. */
static PyObject *py_place_rows(PyObject *self, PyObject *args) {
    PyArrayObject *src, *inv, *out;
    int n_threads, status;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!O!O&:place_rows", &PyArray_Type, &src, &PyArray_Type, &inv,
                          &PyArray_Type, &out, conv_threads, &n_threads))
        return NULL;
    const int nd = PyArray_NDIM(src);
    int64_t row_bytes;
    if (plain_rows_src("place_rows", src, &row_bytes) ||
        check_array(inv, "place_rows", "inv", NPY_INT64, 1, 0) ||
        check_array(out, "place_rows", "out", PyArray_TYPE(src), nd, 1) ||
        check_threads("place_rows", n_threads))
        return NULL;
    int ok = PyArray_DIM(inv, 0) == PyArray_DIM(out, 0);
    for (int a = 1; ok && a < nd; a++) ok = PyArray_DIM(out, a) == PyArray_DIM(src, a);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "place_rows: out must have shape (len(inv),) + "
                                          "src.shape[1:]");
        return NULL;
    }
    if (check_disjoint("place_rows", 1, 3, out, "out", src, "src", inv, "inv")) return NULL;
    const int64_t n_src = PyArray_DIM(src, 0);
    Py_BEGIN_ALLOW_THREADS;
    status = dl_place_rows(PyArray_DIM(out, 0), row_bytes, PyArray_DATA(out), PyArray_DATA(inv),
                           n_src, PyArray_DATA(src), n_threads);
    Py_END_ALLOW_THREADS;
    if (status == DL_E_INDEX) {
        PyErr_Format(PyExc_IndexError, "place_rows: every inv must be -1 or lie in [0, %lld) "
                     "(src's rows)", (long long)n_src);
        return NULL;
    }
    if (status != DL_OK) return raise_status("place_rows", status);
    Py_INCREF(out);
    return (PyObject *)out;
}

static PyMethodDef methods[] = {
    {"axpby_rows", py_axpby_rows, METH_VARARGS,
     "axpby_rows(a, x, b, y, out, n_threads) -> out: out = a x + b y for 2-D float32 views with "
     "contiguous rows (column blocks of wider matrices)."},
    {"put_rows", py_put_rows, METH_VARARGS,
     "put_rows(dst, idx, src, n_threads) -> dst: dst[idx[r]] = src[r] (or src[0] for a one-row "
     "src), idx strictly increasing (any plain dtype)."},
    {"count_ne_rows", py_count_ne_rows, METH_VARARGS,
     "count_ne_rows(a, idx, b, counts, n_threads) -> counts: counts[r] = count of a[idx[r]] != b "
     "(float32)."},
    {"copy2d", py_copy2d, METH_VARARGS,
     "copy2d(src, dst, n_threads) -> dst: dst[...] = src for 2-D float32 views with contiguous "
     "rows (column blocks of wider matrices)."},
    {"place_rows", py_place_rows, METH_VARARGS,
     "place_rows(src, inv, out, n_threads) -> out: out[p] = src[inv[p]], zeros where inv[p] == -1 "
     "(any plain dtype)."},
    {"take_rows", py_take_rows, METH_VARARGS,
     "take_rows(src, idx, out, n_threads) -> out: out[r] = src[idx.flat[r]] (any dtype)."},
    {"batch_indices", py_batch_indices, METH_VARARGS,
     "batch_indices(perm, start, size, cursor, out, n_threads) -> out: each peer's minibatch "
     "indices, out[p, j] = perm[start[p] + (cursor[p] + j) % size[p]] (int64)."},
    {"shuffle_segments", py_shuffle_segments, METH_VARARGS,
     "shuffle_segments(perm, start, size, peers, u, n_threads) -> None: the listed peers' "
     "segments of perm reshuffled in place by the uniforms u (int64 perm, float64 u)."},
    {NULL, NULL, 0, NULL},
};

GLUE_FAMILY(copy, ops, methods);
