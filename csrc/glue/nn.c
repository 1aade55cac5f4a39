/* nn.c: glue of the layers' peer-batched float32 GEMMs (csrc/nn*.c, dispatched per ISA): nn_gemm,
 * nn_dense_forward and nn_dense_backward, hand-written: their operands are strided 3-D arrays
 * (peers, rows, cols) whose leading axis of 1 is broadcast to every peer (strided.c checks them).
 * decentlearn/ops/nn.py is the Python side.
 */
#include "glue.h"

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
    if (strided_operand(c, fn, "c", 3, any3, 1, 1, sc) < 0) return NULL;
    const npy_intp P = PyArray_DIM((PyArrayObject *)c, 0), M = PyArray_DIM((PyArrayObject *)c, 1),
                   N = PyArray_DIM((PyArrayObject *)c, 2);
    const npy_intp shape_a[3] = {-1, M, -1};
    if (strided_operand(a, fn, "a", 3, shape_a, 0, 0, sa) < 0 || check_peers(fn, "a", a, P) < 0)
        return NULL;
    const npy_intp K = PyArray_DIM((PyArrayObject *)a, 2);
    const npy_intp shape_b[3] = {-1, K, N};
    if (strided_operand(b, fn, "b", 3, shape_b, 0, 0, sb) < 0 || check_peers(fn, "b", b, P) < 0 ||
        check_threads(fn, n_threads) < 0 || check_rows_disjoint(fn, c, "c", a, "a") < 0 ||
        check_rows_disjoint(fn, c, "c", b, "b") < 0)
        return NULL;
    const dl_nn_gemm_t g = {
        .n_peers = P, .m = M, .n = N, .k = K,
        .a = (const float *)PyArray_DATA((PyArrayObject *)a), .a_ps = sa[0], .a_rs = sa[1],
        .a_cs = sa[2],
        .b = (const float *)PyArray_DATA((PyArrayObject *)b), .b_ps = sb[0], .b_rs = sb[1],
        .b_cs = sb[2],
        .c = (float *)PyArray_DATA((PyArrayObject *)c), .c_ps = sc[0], .c_rs = sc[1],
        .accumulate = accumulate};
    Py_BEGIN_ALLOW_THREADS;
    status = dl_dispatch()->nn_gemm_f32(&g, n_threads);
    Py_END_ALLOW_THREADS;
    if (status != DL_OK) return raise_status(fn, status);
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
    if (strided_operand(w, fn, "w", 3, any3, 1, 0, sw) < 0) return NULL;
    const npy_intp P = PyArray_DIM((PyArrayObject *)w, 0), NI = PyArray_DIM((PyArrayObject *)w, 1),
                   NO = PyArray_DIM((PyArrayObject *)w, 2);
    const npy_intp shape_x[3] = {-1, -1, NI};
    if (strided_operand(x, fn, "x", 3, shape_x, 1, 0, sx) < 0 || check_peers(fn, "x", x, P) < 0)
        return NULL;
    const npy_intp NB = PyArray_DIM((PyArrayObject *)x, 1);
    const npy_intp shape_y[3] = {P, NB, NO}, shape_b[2] = {P, NO};
    if (strided_operand(y, fn, "y", 3, shape_y, 1, 1, sy) < 0 ||
        (bias != Py_None && strided_operand(bias, fn, "bias", 2, shape_b, 1, 0, sbias) < 0) ||
        check_threads(fn, n_threads) < 0 || check_rows_disjoint(fn, y, "y", x, "x") < 0 ||
        check_rows_disjoint(fn, y, "y", w, "w") < 0 ||
        check_rows_disjoint(fn, y, "y", bias, "bias") < 0)
        return NULL;
    if (NI > 1 && sw[1] != NO) {
        PyErr_Format(PyExc_ValueError, "%s: w must hold each peer's (I, O) matrix contiguously",
                     fn);
        return NULL;
    }
    const dl_nn_dense_t d = {
        .n_peers = P, .batch = NB, .n_in = NI, .n_out = NO,
        .x = (const float *)PyArray_DATA((PyArrayObject *)x), .x_ps = sx[0], .x_rs = sx[1],
        .w = (const float *)PyArray_DATA((PyArrayObject *)w), .w_ps = sw[0],
        .bias = bias == Py_None ? NULL : (const float *)PyArray_DATA((PyArrayObject *)bias),
        .b_ps = sbias[0], .relu = relu,
        .y = (float *)PyArray_DATA((PyArrayObject *)y), .y_ps = sy[0], .y_rs = sy[1]};
    Py_BEGIN_ALLOW_THREADS;
    status = dl_dispatch()->nn_dense_forward_f32(&d, n_threads);
    Py_END_ALLOW_THREADS;
    if (status != DL_OK) return raise_status(fn, status);
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
    if (strided_operand(w, fn, "w", 3, any3, 1, 0, sw) < 0) return NULL;
    const npy_intp P = PyArray_DIM((PyArrayObject *)w, 0), NI = PyArray_DIM((PyArrayObject *)w, 1),
                   NO = PyArray_DIM((PyArrayObject *)w, 2);
    const npy_intp shape_x[3] = {-1, -1, NI};
    if (strided_operand(x, fn, "x", 3, shape_x, 1, 0, sx) < 0 || check_peers(fn, "x", x, P) < 0)
        return NULL;
    const npy_intp NB = PyArray_DIM((PyArrayObject *)x, 1);
    const npy_intp shape_dy[3] = {P, NB, NO}, shape_dx[3] = {P, NB, NI}, shape_gw[3] = {P, NI, NO},
                   shape_gb[2] = {P, NO};
    if (strided_operand(dy, fn, "dy", 3, shape_dy, 1, 0, sdy) < 0 ||
        (mask != Py_None && strided_operand(mask, fn, "mask", 3, shape_dx, 1, 0, sm) < 0) ||
        strided_operand(gw, fn, "gw", 3, shape_gw, 1, 1, sgw) < 0 ||
        strided_operand(gb, fn, "gb", 2, shape_gb, 1, 1, sgb) < 0 ||
        (dx != Py_None && strided_operand(dx, fn, "dx", 3, shape_dx, 1, 1, sdx) < 0) ||
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
            if (check_rows_disjoint(fn, outs[o], out_names[o], ins[i], in_names[i]) < 0)
                return NULL;
        for (int j = o + 1; j < 3; j++)
            if (check_rows_disjoint(fn, outs[o], out_names[o], outs[j], out_names[j]) < 0)
                return NULL;
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
    Py_BEGIN_ALLOW_THREADS;
    status = dl_dispatch()->nn_dense_backward_f32(&d, n_threads);
    Py_END_ALLOW_THREADS;
    if (status != DL_OK) return raise_status(fn, status);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"nn_gemm", py_nn_gemm, METH_VARARGS, "nn_gemm(a, b, c, accumulate, n_threads) -> c."},
    {"nn_dense_forward", py_nn_dense_forward, METH_VARARGS,
     "nn_dense_forward(x, w, bias, relu, y, n_threads) -> y."},
    {"nn_dense_backward", py_nn_dense_backward, METH_VARARGS,
     "nn_dense_backward(x, w, dy, mask, gw, gb, dx, n_threads) -> None."},
    {NULL, NULL, 0, NULL},
};

GLUE_FAMILY_METHODS(nn, methods);
