/* strided.c: checks of the operands that are not plain C-contiguous arrays (declared in glue.h):
 * row-strided 2-D inputs (a slice of every peer's parameter row: check_rows, overlaps_rows) and
 * peer-batched 3-D operands with non-negative strides, a leading axis of 1 broadcast to every peer
 * (check_batch3, strided_operand, check_peers), and their overlap tests (strided_disjoint,
 * rows_disjoint). Used by the gemm_s8 and nn glue; strides reach the kernels in elements.
 */
#include "glue.h"

/* Checks a 2-D float32 input whose rows are each contiguous but may lie ld elements apart (a slice
 * of every peer's parameter row); sets *ld. Sets a Python exception and returns -1 on failure. */
int check_rows(PyArrayObject *a, const char *fn, const char *name, npy_intp *ld) {
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
int overlaps_rows(PyArrayObject *a, npy_intp ld, PyArrayObject *b) {
    const npy_intp rows = PyArray_DIM(a, 0), dim = PyArray_DIM(a, 1);
    if (rows == 0 || dim == 0 || PyArray_NBYTES(b) == 0) return 0;
    const char *a0 = PyArray_BYTES(a), *a1 = a0 + ((rows - 1) * ld + dim) * (npy_intp)sizeof(float);
    const char *b0 = PyArray_BYTES(b), *b1 = b0 + PyArray_NBYTES(b);
    return a0 < b1 && b0 < a1;
}

/* Checks a peer-batched 3-D operand: dtype, contiguous last axis, non-negative aligned strides. */
int check_batch3(PyArrayObject *a, const char *fn, const char *name, int type_num,
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
static void strided_extent(PyArrayObject *a, const char **lo, const char **hi) {
    *lo = *hi = PyArray_BYTES(a);
    for (int d = 0; d < PyArray_NDIM(a); d++)
        if (PyArray_DIM(a, d) == 0) return;
    npy_intp end = PyArray_ITEMSIZE(a);
    for (int d = 0; d < PyArray_NDIM(a); d++) end += (PyArray_DIM(a, d) - 1) * PyArray_STRIDE(a, d);
    *hi = *lo + end;
}

int strided_disjoint(PyArrayObject *a, PyArrayObject *b) {
    const char *a0, *a1, *b0, *b1;
    strided_extent(a, &a0, &a1);
    strided_extent(b, &b0, &b1);
    return a0 == a1 || b0 == b1 || a1 <= b0 || b1 <= a0;
}

/* Checks a float32 operand of `ndim` dimensions against `shape` (-1: any) and fills its strides
 * in elements. unit_last: the last axis must be contiguous. */
int strided_operand(PyObject *o, const char *fn, const char *name, int ndim,
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
static npy_intp peer_extent(PyArrayObject *a) {
    npy_intp end = PyArray_ITEMSIZE(a);
    for (int d = 1; d < PyArray_NDIM(a); d++) end += (PyArray_DIM(a, d) - 1) * PyArray_STRIDE(a, d);
    return end;
}

/* Disjoint byte ranges, or views of the rows of one (P, dim) matrix that take disjoint column
 * ranges of every row (a layer's weight and bias gradients): same peer count and peer stride,
 * and each peer's span of one lies between the other's in every row. */
int rows_disjoint(PyArrayObject *a, PyArrayObject *b) {
    if (strided_disjoint(a, b)) return 1;
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
    const npy_intp ea = peer_extent(a), eb = peer_extent(b), d = (npy_intp)(pb - pa) % s;
    return ea <= s && eb <= s && ea <= d && d + eb <= s;
}

/* An output must not overlap an input (the kernels read inputs while writing outputs). */
int check_rows_disjoint(const char *fn, PyObject *out, const char *oname, PyObject *in,
                       const char *iname) {
    if (in == NULL || in == Py_None) return 0;
    if (!rows_disjoint((PyArrayObject *)out, (PyArrayObject *)in)) {
        PyErr_Format(PyExc_ValueError, "%s: %s must not overlap %s", fn, oname, iname);
        return -1;
    }
    return 0;
}

/* Peers of an operand whose leading axis is 1 or P. */
int check_peers(const char *fn, const char *name, PyObject *o, npy_intp P) {
    const npy_intp n = PyArray_DIM((PyArrayObject *)o, 0);
    if (n != 1 && n != P) {
        PyErr_Format(PyExc_ValueError, "%s: %s must have 1 (shared) or P=%zd peers on axis 0, "
                     "got %zd", fn, name, (Py_ssize_t)P, (Py_ssize_t)n);
        return -1;
    }
    return 0;
}
