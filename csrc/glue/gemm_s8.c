/* gemm_s8.c: glue of the int8 GEMMs and their quantizers (csrc/gemm_s8*.c, dispatched per ISA):
 * packing B and the packed GEMMs (gemm_s8_layout, gemm_s8_pack_b, gemm_s8, gemm_s8_f32), the
 * quantizers (quantize_s8, dequantize_s8, absmax_scale), the peer-batched GEMM (gemm_s8_batched)
 * and the fused int8 dense layer (gemm_s8_dense_forward / gemm_s8_dense_backward).
 * dequantize_s8 is a glue_op_t row; the rest are hand-written: a packed B travels as several
 * arguments with its own checks, gemm_s8_pack_b's messages name ops.pack_b_s8, x may be
 * row-strided, the batched operands are strided 3-D arrays (strided.c).
 * decentlearn/ops/gemm_s8.py is the Python side.
 */
#include "glue.h"

#include <math.h>
#include <string.h>

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
            return PyErr_Format(PyExc_TypeError,
                                "gemm_s8_f32: bias must be a numpy.ndarray or None");
        PyArrayObject *ba = (PyArrayObject *)bias_obj;
        if (check_array(ba, "gemm_s8_f32", "bias", NPY_FLOAT32, 1, 0)) return NULL;
        if (PyArray_DIM(ba, 0) != n)
            return PyErr_Format(PyExc_ValueError,
                                "gemm_s8_f32: bias must have n=%zd values, got %zd", n,
                                (Py_ssize_t)PyArray_DIM(ba, 0));
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

/* dequantize_s8 is a table row: scale has 1, R or D values for axis -1, 0 or 1 (finite). */
static int check_dequantize_scale(glue_call_t *c) {
    return gemm_check_scale(c->fn, c->arr[1], c->ints[0], c->rows, c->dim);
}
static int post_dequantize_finite(glue_call_t *c) {
    return check_finite_f32(c->fn, "scale", c->arr[1]);
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
    if (check_batch3(a, fn, "a", NPY_INT8, 0) || check_batch3(b, fn, "b", NPY_INT8, 0) ||
        check_batch3(out, fn, "out", is_f32 ? NPY_FLOAT32 : NPY_INT32, 1) ||
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
    if (!strided_disjoint(out, a) || !strided_disjoint(out, b))
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
        if (!strided_disjoint(out, as) || !strided_disjoint(out, bs))
            return PyErr_Format(PyExc_ValueError, "%s: out must not overlap the scales", fn);
        if (check_finite_f32(fn, "a_scale", as) || check_finite_f32(fn, "b_scale", bs)) return NULL;
        bt.a_scale = PyArray_DATA(as), bt.b_scale = PyArray_DATA(bs), bt.b_scale_n = bsn;
        if (bias_obj != Py_None) {
            if (!PyArray_Check(bias_obj))
                return PyErr_Format(PyExc_TypeError, "%s: bias must be a numpy.ndarray or None",
                                    fn);
            PyArrayObject *ba = (PyArrayObject *)bias_obj;
            if (check_array(ba, fn, "bias", NPY_FLOAT32, 2, 0) ||
                check_shape2(ba, fn, "bias", P, n))
                return NULL;
            if (!strided_disjoint(out, ba))
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
            if (!rows_disjoint((PyArrayObject *)arrs[i], (PyArrayObject *)arrs[j])) {
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
    if (strided_operand(w, fn, "w", 3, any3, s8_dense_unit(w), 0, sw) < 0) return NULL;
    const npy_intp P = PyArray_DIM((PyArrayObject *)w, 0), NI = PyArray_DIM((PyArrayObject *)w, 1),
                   NO = PyArray_DIM((PyArrayObject *)w, 2);
    const npy_intp shape_x[3] = {-1, -1, NI};
    if (strided_operand(x, fn, "x", 3, shape_x, s8_dense_unit(x), 0, sx) < 0 ||
        check_peers(fn, "x", x, P) < 0)
        return NULL;
    const npy_intp PX = PyArray_DIM((PyArrayObject *)x, 0), NB = PyArray_DIM((PyArrayObject *)x, 1);
    const npy_intp shape_y[3] = {P, NB, NO}, shape_b[2] = {P, NO}, shape_xq[3] = {PX, NB, NI},
                   shape_wq[3] = {P, NI, NO}, shape_sx[1] = {PX}, shape_sw[1] = {P};
    if (strided_operand(y, fn, "y", 3, shape_y, s8_dense_unit(y), 1, sy) < 0 ||
        (bias != Py_None &&
         strided_operand(bias, fn, "bias", 2, shape_b, s8_dense_unit(bias), 0, sbias) < 0) ||
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
    Py_BEGIN_ALLOW_THREADS;
    status = dl_dispatch()->gemm_s8_dense_forward(&d, n_threads);
    Py_END_ALLOW_THREADS;
    if (status != DL_OK) return raise_status(fn, status);
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
    if (strided_operand(dy, fn, "dy", 3, any3, s8_dense_unit(dy), 0, sdy) < 0) return NULL;
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
    if (check_peers(fn, "xq", xq, P)) return NULL;
    const npy_intp shape_xq[3] = {PX, NB, NI}, shape_wq[3] = {P, NI, NO}, shape_sx[1] = {PX},
                   shape_sw[1] = {P}, shape_dx[3] = {P, NB, NI}, shape_gw[3] = {P, NI, NO},
                   shape_gb[2] = {P, NO};
    if (s8_dense_array(xq, fn, "xq", NPY_INT8, 3, shape_xq, 0) < 0 ||
        s8_dense_array(sxo, fn, "sx", NPY_FLOAT32, 1, shape_sx, 0) < 0 ||
        s8_dense_array(wq, fn, "wq", NPY_INT8, 3, shape_wq, 0) < 0 ||
        s8_dense_array(swo, fn, "sw", NPY_FLOAT32, 1, shape_sw, 0) < 0 ||
        (mask != Py_None &&
         strided_operand(mask, fn, "mask", 3, shape_dx, s8_dense_unit(mask), 0, sm) < 0) ||
        strided_operand(gw, fn, "gw", 3, shape_gw, s8_dense_unit(gw), 1, sgw) < 0 ||
        strided_operand(gb, fn, "gb", 2, shape_gb, s8_dense_unit(gb), 1, sgb) < 0 ||
        (dx != Py_None &&
         strided_operand(dx, fn, "dx", 3, shape_dx, s8_dense_unit(dx), 1, sdx) < 0) ||
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
    Py_BEGIN_ALLOW_THREADS;
    status = dl_dispatch()->gemm_s8_dense_backward(&d, n_threads);
    Py_END_ALLOW_THREADS;
    if (status != DL_OK) return raise_status(fn, status);
    Py_RETURN_NONE;
}

static const glue_op_t ops[] = {
    {"dequantize_s8", "dequantize_s8(q, scale, axis, out, n_threads) -> out.",
     {G_IN("q", NPY_INT8, 2, X_R, X_D), G_IN("scale", NPY_FLOAT32, 1, X_ANY, X_ANY), G_I("axis"),
      G_OUT("out", NPY_FLOAT32, 2, X_R, X_D), G_THREADS_ARG},
     0, 0, check_dequantize_scale, post_dequantize_finite, call_dequantize_s8, {0}, 1, {2}},
};

static PyMethodDef methods[] = {
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
    {"gemm_s8_dense_forward", py_gemm_s8_dense_forward, METH_VARARGS,
     "gemm_s8_dense_forward(x, w, bias, relu, y, xq, sx, wq, sw, n_threads) -> y."},
    {"gemm_s8_dense_backward", py_gemm_s8_dense_backward, METH_VARARGS,
     "gemm_s8_dense_backward(dy, xq, sx, wq, sw, mask, gw, gb, dx, seed, step, peer0, "
     "n_threads) -> None."},
    {NULL, NULL, 0, NULL},
};

GLUE_FAMILY(gemm_s8, ops, methods);
