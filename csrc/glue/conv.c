/* conv.c: glue of Conv2d's im2col / col2im on wide rows (csrc/conv.c): conv_unfold (float32 or
 * int8) and conv_fold (float32), two glue_op_t rows whose hook checks the shared geometry, and
 * conv_pad (float32), the zero-padded wide rows of images, and conv_crop, their interiors; and
 * conv_forward, conv_weight_grad and conv_input_grad, the float32 forward product, weight
 * gradient and input gradient on the padded images without im2col or a column gradient
 * (nn_impl.h, dispatched per ISA).
 * decentlearn/ops/conv.py is the Python side.
 */
#include "glue.h"

/* Images on wide rows of L for a k x k kernel over rows of wp with output runs of run:
 * 1 <= k <= wp < 2**31, run >= 0 and L >= (k-1)*wp + k-1 + run (img_name in the message). */
static int conv_check_runs(const char *fn, Py_ssize_t k, Py_ssize_t wp, Py_ssize_t run,
                           npy_intp L, const char *img_name) {
    if (k < 1 || wp < k || run < 0 || k > INT32_MAX || wp > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s: need 1 <= k <= wp < 2**31 and run >= 0, got k=%zd, "
                     "wp=%zd, run=%zd", fn, k, wp, run);
        return -1;
    }
    if ((k - 1) * wp + (k - 1) + run > L) {
        PyErr_Format(PyExc_ValueError, "%s: %s rows must hold (k-1)*wp + k-1 + run = %zd elements, "
                     "got %zd", fn, img_name, (k - 1) * wp + (k - 1) + run, (Py_ssize_t)L);
        return -1;
    }
    return 0;
}

/* A leading axis of G: 1 (one input shared by every peer) or P. */
static int conv_check_groups(const char *fn, const char *name, npy_intp G, npy_intp P) {
    if (G != 1 && G != P) {
        PyErr_Format(PyExc_ValueError, "%s: %s must have 1 (shared) or P=%zd groups on axis 0, got "
                     "%zd", fn, name, (Py_ssize_t)P, (Py_ssize_t)G);
        return -1;
    }
    return 0;
}

/* A 3-D array of exactly (d0, d1, d2). */
static int conv_check_shape3(const char *fn, const char *name, PyArrayObject *a, npy_intp d0,
                             npy_intp d1, npy_intp d2) {
    if (PyArray_DIM(a, 0) != d0 || PyArray_DIM(a, 1) != d1 || PyArray_DIM(a, 2) != d2) {
        PyErr_Format(PyExc_ValueError,
                     "%s: %s must have shape (%zd, %zd, %zd), got (%zd, %zd, %zd)", fn, name,
                     (Py_ssize_t)d0, (Py_ssize_t)d1, (Py_ssize_t)d2,
                     (Py_ssize_t)PyArray_DIM(a, 0), (Py_ssize_t)PyArray_DIM(a, 1),
                     (Py_ssize_t)PyArray_DIM(a, 2));
        return -1;
    }
    return 0;
}

/* The output of a product on padded images must overlap neither operand. */
static int conv_check_disjoint(const char *fn, PyArrayObject *out, const char *out_name,
                               PyArrayObject *a, const char *a_name, PyArrayObject *b,
                               const char *b_name) {
    if (overlaps(out, a) || overlaps(out, b)) {
        PyErr_Format(PyExc_ValueError, "%s: %s must not overlap %s or %s", fn, out_name, a_name,
                     b_name);
        return -1;
    }
    return 0;
}

/* conv_unfold and conv_fold are table rows. Their geometry: images (G, C, B, L), columns
 * (G, R, ld) of the same dtype, 0 <= b0 <= b1 <= B, k >= 1, wp >= k, run >= 0, rows of L >=
 * (k-1)*wp + k-1 + run elements, R >= C*k*k and ld >= (b1 - b0) * run; ssz = b0, b1, k, wp, run. */
static int conv_check_geometry(glue_call_t *c, int img_slot, const char *img_name, int cols_slot,
                               const char *cols_name) {
    const char *fn = c->fn;
    PyArrayObject *img = c->arr[img_slot], *cols = c->arr[cols_slot];
    const Py_ssize_t b0 = c->ssz[0], b1 = c->ssz[1], k = c->ssz[2], wp = c->ssz[3], run = c->ssz[4];
    const npy_intp G = PyArray_DIM(img, 0), C = PyArray_DIM(img, 1), B = PyArray_DIM(img, 2),
                   L = PyArray_DIM(img, 3);
    if (PyArray_DIM(cols, 0) != G) {
        PyErr_Format(PyExc_ValueError, "%s: %s must have %zd rows on axis 0 (as %s), got %zd", fn,
                     cols_name, (Py_ssize_t)G, img_name, (Py_ssize_t)PyArray_DIM(cols, 0));
        return -1;
    }
    if (conv_check_runs(fn, k, wp, run, L, img_name) < 0) return -1;
    if (b0 < 0 || b1 < b0 || b1 > B) {
        PyErr_Format(PyExc_ValueError, "%s: need 0 <= b0 <= b1 <= %zd, got b0=%zd, b1=%zd", fn,
                     (Py_ssize_t)B, b0, b1);
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

/* The wide-row geometry shared by conv_pad and conv_crop: images of h x w placed at pad in rows
 * of wp, within wide rows of len (named wide_name in messages). */
static int conv_check_wide(const glue_call_t *c, npy_intp h, npy_intp w, Py_ssize_t pad,
                           Py_ssize_t wp, npy_intp len, const char *wide_name) {
    if (pad < 0 || pad > INT32_MAX || wp > INT32_MAX || wp < w + 2 * pad) {
        PyErr_Format(PyExc_ValueError, "%s: need 0 <= pad < 2**31 and w + 2*pad <= wp < 2**31, got "
                     "w=%zd, pad=%zd, wp=%zd", c->fn, (Py_ssize_t)w, pad, wp);
        return -1;
    }
    if ((h + 2 * pad) * wp > len) {
        PyErr_Format(PyExc_ValueError, "%s: %s rows must hold (h + 2*pad)*wp = %zd elements, got "
                     "%zd", c->fn, wide_name, (Py_ssize_t)((h + 2 * pad) * wp), (Py_ssize_t)len);
        return -1;
    }
    return 0;
}

/* conv_pad(src, w, dst, pad, wp, n_threads): src (n, h, ld) float32 (w <= ld), dst (n, len) with
 * wp >= w + 2*pad and len >= (h + 2*pad)*wp; ssz = w, pad, wp. */
static int check_conv_pad(glue_call_t *c) {
    PyArrayObject *src = c->arr[0], *dst = c->arr[1];
    const Py_ssize_t w = c->ssz[0];
    const npy_intp ld = PyArray_DIM(src, 2);
    if (w < 0 || w > ld) {
        PyErr_Format(PyExc_ValueError, "%s: need 0 <= w <= %zd (src's last axis), got w=%zd", c->fn,
                     (Py_ssize_t)ld, w);
        return -1;
    }
    return conv_check_wide(c, PyArray_DIM(src, 1), w, c->ssz[1], c->ssz[2], PyArray_DIM(dst, 1),
                           "dst");
}
static int call_conv_pad(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    PyArrayObject *src = c->arr[0], *dst = c->arr[1];
    return dl_conv_pad_f32(PyArray_DIM(src, 0), PyArray_DIM(src, 1), PyArray_DIM(src, 2),
                           c->ssz[0], G_DATA(c, 0), c->ssz[1], c->ssz[2], PyArray_DIM(dst, 1),
                           G_DATA(c, 1), c->n_threads);
}

/* conv_crop(src, pad, wp, dst, n_threads): src (n, len) wide rows, dst (n, h, w) with
 * wp >= w + 2*pad and len >= (h + 2*pad)*wp; ssz = pad, wp. */
static int check_conv_crop(glue_call_t *c) {
    PyArrayObject *src = c->arr[0], *dst = c->arr[1];
    if (PyArray_DIM(dst, 0) != PyArray_DIM(src, 0)) { /* (the driver checks 2-D shapes only) */
        PyErr_Format(PyExc_ValueError, "%s: dst must have src's %zd rows on axis 0, got %zd", c->fn,
                     (Py_ssize_t)PyArray_DIM(src, 0), (Py_ssize_t)PyArray_DIM(dst, 0));
        return -1;
    }
    return conv_check_wide(c, PyArray_DIM(dst, 1), PyArray_DIM(dst, 2), c->ssz[0], c->ssz[1],
                           PyArray_DIM(src, 1), "src");
}
static int call_conv_crop(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    PyArrayObject *src = c->arr[0], *dst = c->arr[1];
    return dl_conv_crop_f32(PyArray_DIM(src, 0), PyArray_DIM(src, 1), G_DATA(c, 0), c->ssz[0],
                            c->ssz[1], PyArray_DIM(dst, 1), PyArray_DIM(dst, 2), G_DATA(c, 1),
                            c->n_threads);
}

/* conv_forward(wb, xp, y, k, wp, run, n_threads): wb (P, Cout, C*k*k + 1), xp (G, C, B, L) with
 * G = 1 (shared) or P, k >= 1, wp >= k, run >= 0, L >= (k-1)*wp + k-1 + run, y (P, Cout, B*run),
 * y overlapping neither; ssz = k, wp, run. */
static int check_conv_forward(glue_call_t *c) {
    const char *fn = c->fn;
    PyArrayObject *wb = c->arr[0], *xp = c->arr[1], *y = c->arr[2];
    const Py_ssize_t k = c->ssz[0], wp = c->ssz[1], run = c->ssz[2];
    const npy_intp P = PyArray_DIM(wb, 0), cout = PyArray_DIM(wb, 1), C = PyArray_DIM(xp, 1),
                   B = PyArray_DIM(xp, 2);
    if (conv_check_runs(fn, k, wp, run, PyArray_DIM(xp, 3), "xp") < 0 ||
        conv_check_groups(fn, "xp", PyArray_DIM(xp, 0), P) < 0)
        return -1;
    if (PyArray_DIM(wb, 2) != C * k * k + 1) {
        PyErr_Format(PyExc_ValueError, "%s: wb must have C*k*k + 1 = %zd columns "
                     "([weight | bias]), got %zd", fn, (Py_ssize_t)(C * k * k + 1),
                     (Py_ssize_t)PyArray_DIM(wb, 2));
        return -1;
    }
    if (conv_check_shape3(fn, "y", y, P, cout, B * run) < 0 ||
        conv_check_disjoint(fn, y, "y", xp, "xp", wb, "wb") < 0)
        return -1;
    return 0;
}
static int call_conv_forward(const glue_call_t *c, const dl_dispatch_t *d) {
    PyArrayObject *wb = c->arr[0], *xp = c->arr[1];
    const npy_intp P = PyArray_DIM(wb, 0), C = PyArray_DIM(xp, 1), B = PyArray_DIM(xp, 2),
                   L = PyArray_DIM(xp, 3);
    const dl_nn_conv_t cv = {
        .n_peers = P, .cout = PyArray_DIM(wb, 1), .c = C, .batch = B, .len = L, .k = c->ssz[0],
        .wp = c->ssz[1], .run = c->ssz[2], .wb = G_DATA(c, 0), .wb_ps = PyArray_STRIDE(wb, 0) / 4,
        .xp = G_DATA(c, 1), .xp_ps = PyArray_DIM(xp, 0) == 1 ? 0 : C * B * L, .y = G_DATA(c, 2),
        .y_ps = PyArray_STRIDE(c->arr[2], 0) / 4};
    return d->nn_conv_forward_f32(&cv, c->n_threads);
}

/* conv_weight_grad(xp, dy, g, k, wp, run, chunk, n_threads): xp (G, C, B, L) as conv_forward's,
 * dy (P, Cout, B*run), g (P, C*k*k + 1, Cout) overlapping neither, chunk >= 1; ssz = k, wp, run,
 * chunk. */
static int check_conv_weight_grad(glue_call_t *c) {
    const char *fn = c->fn;
    PyArrayObject *xp = c->arr[0], *dy = c->arr[1], *g = c->arr[2];
    const Py_ssize_t k = c->ssz[0], wp = c->ssz[1], run = c->ssz[2], chunk = c->ssz[3];
    const npy_intp P = PyArray_DIM(dy, 0), cout = PyArray_DIM(dy, 1), C = PyArray_DIM(xp, 1),
                   B = PyArray_DIM(xp, 2);
    if (conv_check_runs(fn, k, wp, run, PyArray_DIM(xp, 3), "xp") < 0 ||
        conv_check_groups(fn, "xp", PyArray_DIM(xp, 0), P) < 0)
        return -1;
    if (chunk < 1) {
        PyErr_Format(PyExc_ValueError, "%s: need chunk >= 1, got chunk=%zd", fn, chunk);
        return -1;
    }
    if (conv_check_shape3(fn, "dy", dy, P, cout, B * run) < 0 ||
        conv_check_shape3(fn, "g", g, P, C * k * k + 1, cout) < 0 ||
        conv_check_disjoint(fn, g, "g", xp, "xp", dy, "dy") < 0)
        return -1;
    return 0;
}
static int call_conv_weight_grad(const glue_call_t *c, const dl_dispatch_t *d) {
    PyArrayObject *xp = c->arr[0], *dy = c->arr[1];
    const npy_intp P = PyArray_DIM(dy, 0), C = PyArray_DIM(xp, 1), B = PyArray_DIM(xp, 2),
                   L = PyArray_DIM(xp, 3);
    const dl_nn_wgrad_t w = {
        .n_peers = P, .cout = PyArray_DIM(dy, 1), .c = C, .batch = B, .len = L, .k = c->ssz[0],
        .wp = c->ssz[1], .run = c->ssz[2], .chunk = c->ssz[3], .xp = G_DATA(c, 0),
        .xp_ps = PyArray_DIM(xp, 0) == 1 ? 0 : C * B * L, .dy = G_DATA(c, 1),
        .dy_ps = PyArray_STRIDE(dy, 0) / 4, .dy_rs = PyArray_STRIDE(dy, 1) / 4, .g = G_DATA(c, 2),
        .g_ps = PyArray_STRIDE(c->arr[2], 0) / 4};
    return d->nn_conv_wgrad_f32(&w, c->n_threads);
}

/* The operands of conv_forward_params and conv_param_grad: xp (G, C, B, L) and `a` (P, Cout, B*run)
 * C-contiguous float32 (`a` written when `a_out`: y; read: dy), the geometry, and the layer's
 * weight and bias views w_obj (P, Cout, C*k*k) and b_obj (P, Cout): float32 with a contiguous last
 * axis and any non-negative strides (written when `views_out`), their strides in elements into
 * sw and sb. dims gets P, Cout, C, B, L. Returns 0, or -1 with the exception set. */
static int conv_layer_operands(const char *fn, PyArrayObject *xp, PyArrayObject *a,
                               const char *a_name, int a_out, Py_ssize_t k, Py_ssize_t wp,
                               Py_ssize_t run, PyObject *w_obj, const char *w_name,
                               PyObject *b_obj, const char *b_name, int views_out, int64_t *sw,
                               int64_t *sb, npy_intp *dims) {
    if (check_array(xp, fn, "xp", NPY_FLOAT32, 4, 0) ||
        check_array(a, fn, a_name, NPY_FLOAT32, 3, a_out))
        return -1;
    const npy_intp P = PyArray_DIM(a, 0), cout = PyArray_DIM(a, 1), C = PyArray_DIM(xp, 1),
                   B = PyArray_DIM(xp, 2), L = PyArray_DIM(xp, 3);
    if (conv_check_runs(fn, k, wp, run, L, "xp") < 0 ||
        conv_check_groups(fn, "xp", PyArray_DIM(xp, 0), P) < 0 ||
        conv_check_shape3(fn, a_name, a, P, cout, B * run) < 0)
        return -1;
    const npy_intp shape_w[3] = {P, cout, C * k * k}, shape_b[2] = {P, cout};
    if (strided_operand(w_obj, fn, w_name, 3, shape_w, 1, views_out, sw) < 0 ||
        strided_operand(b_obj, fn, b_name, 2, shape_b, 1, views_out, sb) < 0)
        return -1;
    dims[0] = P, dims[1] = cout, dims[2] = C, dims[3] = B, dims[4] = L;
    return 0;
}

/* conv_forward_params(w, bias, xp, y, k, wp, run, n_threads) -> y: conv_forward with wb_p =
 * [w_p | bias_p] assembled by the kernel, so the layer's parameters are read in place: w (P,
 * Cout, C*k*k) and bias (P, Cout) float32 with a contiguous last axis and any non-negative
 * strides (views into the parameter matrix); xp, y as conv_forward's, y overlapping nothing.
 * Hand-written: w and bias are strided. */
static PyObject *py_conv_forward_params(PyObject *self, PyObject *args) {
    const char *fn = "conv_forward_params";
    PyObject *w_obj, *b_obj;
    PyArrayObject *xp, *y;
    Py_ssize_t k, wp, run;
    int n_threads, status;
    int64_t sw[3], sb[2];
    (void)self;
    npy_intp dims[5];
    if (!PyArg_ParseTuple(args, "OOO!O!nnnO&:conv_forward_params", &w_obj, &b_obj, &PyArray_Type,
                          &xp, &PyArray_Type, &y, &k, &wp, &run, conv_threads, &n_threads))
        return NULL;
    if (check_threads(fn, n_threads) ||
        conv_layer_operands(fn, xp, y, "y", 1, k, wp, run, w_obj, "w", b_obj, "bias", 0, sw, sb,
                            dims) < 0)
        return NULL;
    const npy_intp P = dims[0], cout = dims[1], C = dims[2], B = dims[3], L = dims[4];
    PyArrayObject *w = (PyArrayObject *)w_obj, *bias = (PyArrayObject *)b_obj;
    if (overlaps(y, xp) || !strided_disjoint(y, w) || !strided_disjoint(y, bias)) {
        PyErr_Format(PyExc_ValueError, "%s: y must not overlap xp, w or bias", fn);
        return NULL;
    }
    const dl_nn_conv_t cv = {
        .n_peers = P, .cout = cout, .c = C, .batch = B, .len = L, .k = k, .wp = wp, .run = run,
        .xp = PyArray_DATA(xp), .xp_ps = PyArray_DIM(xp, 0) == 1 ? 0 : C * B * L,
        .y = PyArray_DATA(y), .y_ps = PyArray_STRIDE(y, 0) / 4, .w = PyArray_DATA(w),
        .w_ps = sw[0], .w_rs = cout > 1 ? sw[1] : C * k * k, .bias = PyArray_DATA(bias),
        .bias_ps = sb[0]};
    dl_nn_conv_f32_fn kernel = dl_dispatch()->nn_conv_forward_f32;
    Py_BEGIN_ALLOW_THREADS;
    status = kernel(&cv, n_threads);
    Py_END_ALLOW_THREADS;
    if (status != DL_OK) return raise_status(fn, status);
    Py_INCREF(y);
    return (PyObject *)y;
}

/* conv_param_grad(xp, dy, gw, gb, k, wp, run, chunk, n_threads) -> None: conv_weight_grad's sums
 * written in the layer's own layout: gw (P, Cout, C*k*k) gets the first C*k*k rows of each g[p]
 * transposed and gb (P, Cout) its last row. gw and gb are float32 views with a contiguous last axis
 * and any non-negative strides (column blocks of the (P, dim) gradient matrix), disjoint from each
 * other and from xp and dy; xp and dy as conv_weight_grad's. Hand-written: gw and gb are strided. */
static PyObject *py_conv_param_grad(PyObject *self, PyObject *args) {
    const char *fn = "conv_param_grad";
    PyArrayObject *xp, *dy;
    PyObject *gw_obj, *gb_obj;
    Py_ssize_t k, wp, run, chunk;
    int n_threads, status;
    int64_t sw[3], sb[2];
    (void)self;
    npy_intp dims[5];
    if (!PyArg_ParseTuple(args, "O!O!OOnnnnO&:conv_param_grad", &PyArray_Type, &xp,
                          &PyArray_Type, &dy, &gw_obj, &gb_obj, &k, &wp, &run, &chunk,
                          conv_threads, &n_threads))
        return NULL;
    if (check_threads(fn, n_threads) ||
        conv_layer_operands(fn, xp, dy, "dy", 0, k, wp, run, gw_obj, "gw", gb_obj, "gb", 1, sw, sb,
                            dims) < 0)
        return NULL;
    const npy_intp P = dims[0], cout = dims[1], C = dims[2], B = dims[3], L = dims[4];
    if (chunk < 1) {
        PyErr_Format(PyExc_ValueError, "%s: need chunk >= 1, got chunk=%zd", fn, chunk);
        return NULL;
    }
    PyArrayObject *gw = (PyArrayObject *)gw_obj, *gb = (PyArrayObject *)gb_obj;
    if (!strided_disjoint(gw, xp) || !strided_disjoint(gw, dy) || !strided_disjoint(gb, xp) ||
        !strided_disjoint(gb, dy)) {
        PyErr_Format(PyExc_ValueError, "%s: gw and gb must not overlap xp or dy", fn);
        return NULL;
    }
    if (!rows_disjoint(gw, gb)) {
        PyErr_Format(PyExc_ValueError, "%s: gw and gb must not overlap each other", fn);
        return NULL;
    }
    const dl_nn_wgrad_t w = {
        .n_peers = P, .cout = cout, .c = C, .batch = B, .len = L, .k = k, .wp = wp, .run = run,
        .chunk = chunk, .xp = PyArray_DATA(xp), .xp_ps = PyArray_DIM(xp, 0) == 1 ? 0 : C * B * L,
        .dy = PyArray_DATA(dy), .dy_ps = PyArray_STRIDE(dy, 0) / 4,
        .dy_rs = PyArray_STRIDE(dy, 1) / 4, .gw = PyArray_DATA(gw), .gw_ps = sw[0],
        .gw_rs = cout > 1 ? sw[1] : C * k * k, .gb = PyArray_DATA(gb), .gb_ps = sb[0]};
    dl_nn_wgrad_f32_fn kernel = dl_dispatch()->nn_conv_wgrad_f32;
    Py_BEGIN_ALLOW_THREADS;
    status = kernel(&w, n_threads);
    Py_END_ALLOW_THREADS;
    if (status != DL_OK) return raise_status(fn, status);
    Py_RETURN_NONE;
}

/* conv_input_grad(w, dy, dxp, k, wp, run, n_threads) -> dxp: w (P, Cout, C*k*k) float32 with a
 * contiguous last axis and any non-negative peer and row strides (a layer's weights read in
 * place from the parameter matrix), dy (P, Cout, B*run) and dxp (P, C, B, L) C-contiguous, with
 * k >= 1, wp >= k, run >= 0, (k-1)*wp + k-1 + run <= L < 2**30 (the kernel's lane positions are
 * int32), dxp overlapping neither. Hand-written: w may be strided. */
static PyObject *py_conv_input_grad(PyObject *self, PyObject *args) {
    const char *fn = "conv_input_grad";
    PyObject *w_obj;
    PyArrayObject *dy, *dxp;
    Py_ssize_t k, wp, run;
    int n_threads, status;
    int64_t sw[3];
    (void)self;
    if (!PyArg_ParseTuple(args, "OO!O!nnnO&:conv_input_grad", &w_obj, &PyArray_Type, &dy,
                          &PyArray_Type, &dxp, &k, &wp, &run, conv_threads, &n_threads))
        return NULL;
    const npy_intp any3[3] = {-1, -1, -1};
    if (strided_operand(w_obj, fn, "w", 3, any3, 1, 0, sw) < 0 ||
        check_array(dy, fn, "dy", NPY_FLOAT32, 3, 0) ||
        check_array(dxp, fn, "dxp", NPY_FLOAT32, 4, 1) || check_threads(fn, n_threads))
        return NULL;
    PyArrayObject *w = (PyArrayObject *)w_obj;
    const npy_intp P = PyArray_DIM(dxp, 0), C = PyArray_DIM(dxp, 1), B = PyArray_DIM(dxp, 2),
                   L = PyArray_DIM(dxp, 3), cout = PyArray_DIM(w, 1);
    if (conv_check_runs(fn, k, wp, run, L, "dxp") < 0) return NULL;
    if (L >= (1 << 30)) {
        PyErr_Format(PyExc_ValueError, "%s: dxp rows must be shorter than 2**30 elements, got %zd",
                     fn, (Py_ssize_t)L);
        return NULL;
    }
    if (conv_check_shape3(fn, "w", w, P, cout, C * k * k) < 0 ||
        conv_check_shape3(fn, "dy", dy, P, cout, B * run) < 0)
        return NULL;
    if (!strided_disjoint(dxp, w) || overlaps(dxp, dy)) {
        PyErr_Format(PyExc_ValueError, "%s: dxp must not overlap w or dy", fn);
        return NULL;
    }
    const dl_nn_dgrad_t g = {
        .n_peers = PyArray_DIM(dy, 0), .cout = PyArray_DIM(dy, 1), .c = C, .batch = B, .len = L,
        .k = k, .wp = wp, .run = run, .w = PyArray_DATA(w), .w_ps = sw[0],
        .w_rs = cout > 1 ? sw[1] : C * k * k, .dy = PyArray_DATA(dy),
        .dy_ps = PyArray_STRIDE(dy, 0) / 4, .dy_rs = PyArray_STRIDE(dy, 1) / 4,
        .dxp = PyArray_DATA(dxp), .dxp_ps = PyArray_STRIDE(dxp, 0) / 4};
    dl_nn_dgrad_f32_fn kernel = dl_dispatch()->nn_conv_dgrad_f32;
    Py_BEGIN_ALLOW_THREADS;
    status = kernel(&g, n_threads);
    Py_END_ALLOW_THREADS;
    if (status != DL_OK) return raise_status(fn, status);
    Py_INCREF(dxp);
    return (PyObject *)dxp;
}

/* conv_input_grad_s8(wq, sw, dq, sdy, dxp, k, wp, run, n_threads): wq (P, Cout, C*k*k) and dq
 * (P, Cout, B*run) int8 codes with per-peer scales sw, sdy (P,), dxp (P, C, B, L) as for
 * conv_input_grad; ssz = k, wp, run. */
static int check_conv_input_grad_s8(glue_call_t *c) {
    const char *fn = c->fn;
    PyArrayObject *w = c->arr[0], *dq = c->arr[2], *dxp = c->arr[4];
    const Py_ssize_t k = c->ssz[0], wp = c->ssz[1], run = c->ssz[2];
    const npy_intp P = PyArray_DIM(w, 0), C = PyArray_DIM(dxp, 1), B = PyArray_DIM(dxp, 2),
                   L = PyArray_DIM(dxp, 3), cout = PyArray_DIM(w, 1);
    if (conv_check_runs(fn, k, wp, run, L, "dxp") < 0) return -1;
    if (PyArray_DIM(dxp, 0) != P) {
        PyErr_Format(PyExc_ValueError, "%s: dxp must have P=%zd peers on axis 0, got %zd", fn,
                     (Py_ssize_t)P, (Py_ssize_t)PyArray_DIM(dxp, 0));
        return -1;
    }
    if (cout > DL_GEMM_S8_MAX_K) {
        PyErr_Format(PyExc_ValueError, "%s: wq must have at most %d output channels, got %zd", fn,
                     DL_GEMM_S8_MAX_K, (Py_ssize_t)cout);
        return -1;
    }
    if (conv_check_shape3(fn, "wq", w, P, cout, C * k * k) < 0 ||
        conv_check_shape3(fn, "dq", dq, P, cout, B * run) < 0)
        return -1;
    return 0;
}
static int call_conv_input_grad_s8(const glue_call_t *c, const dl_dispatch_t *d) {
    PyArrayObject *w = c->arr[0], *dq = c->arr[2], *dxp = c->arr[4];
    const dl_gemm_s8_conv_dgrad_t g = {
        .n_peers = PyArray_DIM(w, 0), .cout = PyArray_DIM(w, 1), .c = PyArray_DIM(dxp, 1),
        .batch = PyArray_DIM(dxp, 2), .len = PyArray_DIM(dxp, 3), .k = c->ssz[0],
        .wp = c->ssz[1], .run = c->ssz[2], .wq = G_DATA(c, 0), .wq_ps = PyArray_STRIDE(w, 0),
        .sw = G_DATA(c, 1), .dq = G_DATA(c, 2), .dq_ps = PyArray_STRIDE(dq, 0),
        .dq_rs = PyArray_STRIDE(dq, 1), .sdy = G_DATA(c, 3), .dxp = G_DATA(c, 4),
        .dxp_ps = PyArray_STRIDE(dxp, 0) / 4};
    return d->gemm_s8_conv_dgrad(&g, c->n_threads);
}

/* The padded int8 codes xq (G, C, B, L) of the int8 products, G 1 (shared) or P, whose rows hold
 * the runs, and their scales sx (G,). */
static int conv_check_codes(const char *fn, PyArrayObject *xq, PyArrayObject *sx, npy_intp P,
                            Py_ssize_t k, Py_ssize_t wp, Py_ssize_t run) {
    const npy_intp G = PyArray_DIM(xq, 0);
    if (conv_check_runs(fn, k, wp, run, PyArray_DIM(xq, 3), "xq") < 0 ||
        conv_check_groups(fn, "xq", G, P) < 0)
        return -1;
    if (PyArray_DIM(sx, 0) != G) {
        PyErr_Format(PyExc_ValueError, "%s: sx must have %zd entries (as xq's groups), got %zd",
                     fn, (Py_ssize_t)G, (Py_ssize_t)PyArray_DIM(sx, 0));
        return -1;
    }
    return 0;
}

/* conv_forward_s8(wq, sw, xq, sx, bias, y, k, wp, run, n_threads): wq (P, Cout, C*k*k) int8
 * codes and sw (P,) scales, xq (G, C, B, L) padded int8 codes and sx (G,) scales with G 1
 * (shared) or P, bias (P, Cout), y (P, Cout, B*run); ssz = k, wp, run. */
static int check_conv_forward_s8(glue_call_t *c) {
    const char *fn = c->fn;
    PyArrayObject *w = c->arr[0], *xq = c->arr[2], *sx = c->arr[3], *bias = c->arr[4],
                  *y = c->arr[5];
    const Py_ssize_t k = c->ssz[0], wp = c->ssz[1], run = c->ssz[2];
    const npy_intp P = PyArray_DIM(w, 0), cout = PyArray_DIM(w, 1), C = PyArray_DIM(xq, 1),
                   B = PyArray_DIM(xq, 2);
    if (conv_check_codes(fn, xq, sx, P, k, wp, run) < 0) return -1;
    if (C * k * k > DL_GEMM_S8_MAX_K) {
        PyErr_Format(PyExc_ValueError, "%s: C*k*k must be at most %d, got %zd", fn,
                     DL_GEMM_S8_MAX_K, (Py_ssize_t)(C * k * k));
        return -1;
    }
    if (PyArray_DIM(bias, 0) != P || PyArray_DIM(bias, 1) != cout) {
        PyErr_Format(PyExc_ValueError, "%s: bias must have shape (%zd, %zd), got (%zd, %zd)", fn,
                     (Py_ssize_t)P, (Py_ssize_t)cout, (Py_ssize_t)PyArray_DIM(bias, 0),
                     (Py_ssize_t)PyArray_DIM(bias, 1));
        return -1;
    }
    if (conv_check_shape3(fn, "wq", w, P, cout, C * k * k) < 0 ||
        conv_check_shape3(fn, "y", y, P, cout, B * run) < 0)
        return -1;
    return 0;
}
static int call_conv_forward_s8(const glue_call_t *c, const dl_dispatch_t *d) {
    PyArrayObject *w = c->arr[0], *xq = c->arr[2], *y = c->arr[5];
    const int shared = PyArray_DIM(xq, 0) == 1;
    const dl_gemm_s8_conv_fwd_t f = {
        .n_peers = PyArray_DIM(w, 0), .cout = PyArray_DIM(w, 1), .c = PyArray_DIM(xq, 1),
        .batch = PyArray_DIM(xq, 2), .len = PyArray_DIM(xq, 3), .k = c->ssz[0],
        .wp = c->ssz[1], .run = c->ssz[2], .wq = G_DATA(c, 0), .wq_ps = PyArray_STRIDE(w, 0),
        .sw = G_DATA(c, 1), .xq = G_DATA(c, 2), .xq_ps = shared ? 0 : PyArray_STRIDE(xq, 0),
        .sx = G_DATA(c, 3), .sx_ps = shared ? 0 : 1, .bias = G_DATA(c, 4),
        .b_ps = PyArray_STRIDE(c->arr[4], 0) / 4, .y = G_DATA(c, 5),
        .y_ps = PyArray_STRIDE(y, 0) / 4, .y_rs = PyArray_STRIDE(y, 1) / 4};
    return d->gemm_s8_conv_fwd(&f, c->n_threads);
}

/* conv_weight_grad_s8(dq, sdy, xq, sx, gw, k, wp, run, chunk, n_threads): dq (P, Cout, B*run)
 * int8 codes and sdy (P,) scales, xq (G, C, B, L) padded int8 codes and sx (G,) scales with G 1
 * (shared) or P, gw (P, Cout, C*k*k), chunk >= 1 samples with chunk*run <= the exact-sum bound;
 * ssz = k, wp, run, chunk. */
static int check_conv_weight_grad_s8(glue_call_t *c) {
    const char *fn = c->fn;
    PyArrayObject *dq = c->arr[0], *xq = c->arr[2], *sx = c->arr[3], *gw = c->arr[4];
    const Py_ssize_t k = c->ssz[0], wp = c->ssz[1], run = c->ssz[2], chunk = c->ssz[3];
    const npy_intp P = PyArray_DIM(dq, 0), cout = PyArray_DIM(dq, 1), C = PyArray_DIM(xq, 1),
                   B = PyArray_DIM(xq, 2);
    if (conv_check_codes(fn, xq, sx, P, k, wp, run) < 0) return -1;
    if (chunk < 1 || chunk > DL_GEMM_S8_MAX_K || chunk * run > DL_GEMM_S8_MAX_K) {
        PyErr_Format(PyExc_ValueError, "%s: need chunk >= 1 and chunk*run <= %d, got chunk=%zd, "
                     "run=%zd", fn, DL_GEMM_S8_MAX_K, chunk, run);
        return -1;
    }
    if (cout > (1 << 24) || C * k * k > (1 << 24)) {
        PyErr_Format(PyExc_ValueError, "%s: Cout and C*k*k must be at most 2**24, got %zd and %zd",
                     fn, (Py_ssize_t)cout, (Py_ssize_t)(C * k * k));
        return -1;
    }
    if (conv_check_shape3(fn, "dq", dq, P, cout, B * run) < 0 ||
        conv_check_shape3(fn, "gw", gw, P, cout, C * k * k) < 0)
        return -1;
    return 0;
}
static int call_conv_weight_grad_s8(const glue_call_t *c, const dl_dispatch_t *d) {
    PyArrayObject *dq = c->arr[0], *xq = c->arr[2], *gw = c->arr[4];
    const int shared = PyArray_DIM(xq, 0) == 1;
    const dl_gemm_s8_conv_wgrad_t g = {
        .n_peers = PyArray_DIM(dq, 0), .cout = PyArray_DIM(dq, 1), .c = PyArray_DIM(xq, 1),
        .batch = PyArray_DIM(xq, 2), .len = PyArray_DIM(xq, 3), .k = c->ssz[0],
        .wp = c->ssz[1], .run = c->ssz[2], .chunk = c->ssz[3], .dq = G_DATA(c, 0),
        .dq_ps = PyArray_STRIDE(dq, 0), .dq_rs = PyArray_STRIDE(dq, 1), .sdy = G_DATA(c, 1),
        .xq = G_DATA(c, 2), .xq_ps = shared ? 0 : PyArray_STRIDE(xq, 0), .sx = G_DATA(c, 3),
        .sx_ps = shared ? 0 : 1, .gw = G_DATA(c, 4), .gw_ps = PyArray_STRIDE(gw, 0) / 4};
    return d->gemm_s8_conv_wgrad(&g, c->n_threads);
}

static const glue_op_t ops[] = {
    {"conv_unfold", "conv_unfold(xp, b0, b1, cols, k, wp, run, n_threads): im2col on wide rows.",
     {G_IN("xp", G_F32_OR_S8, 4, X_ANY, X_ANY), G_N("b0"), G_N("b1"),
      G_OUT("cols", G_F32_OR_S8, 3, X_ANY, X_ANY), G_N("k"), G_N("wp"), G_N("run"), G_THREADS_ARG},
     0, 0, check_conv_unfold, NULL, call_conv_unfold, {0}, 0, {0}},
    {"conv_fold", "conv_fold(dcols, dxp, b0, b1, k, wp, run, n_threads): col2im on wide rows.",
     {G_IN("dcols", NPY_FLOAT32, 3, X_ANY, X_ANY), G_OUT("dxp", NPY_FLOAT32, 4, X_ANY, X_ANY),
      G_N("b0"), G_N("b1"), G_N("k"), G_N("wp"), G_N("run"), G_THREADS_ARG},
     0, 0, check_conv_fold, NULL, call_conv_fold, {0}, 0, {0}},
    {"conv_pad", "conv_pad(src, w, dst, pad, wp, n_threads): zero-padded wide rows from images.",
     {G_IN("src", NPY_FLOAT32, 3, X_ANY, X_ANY), G_N("w"), G_OUT("dst", NPY_FLOAT32, 2, X_R, X_ANY),
      G_N("pad"), G_N("wp"), G_THREADS_ARG},
     0, 0, check_conv_pad, NULL, call_conv_pad, {0}, 0, {0}},
    {"conv_crop", "conv_crop(src, pad, wp, dst, n_threads): the interiors of wide rows.",
     {G_IN("src", NPY_FLOAT32, 2, X_ANY, X_ANY), G_N("pad"), G_N("wp"),
      G_OUT("dst", NPY_FLOAT32, 3, X_ANY, X_ANY), G_THREADS_ARG},
     0, 0, check_conv_crop, NULL, call_conv_crop, {0}, 0, {0}},
    {"conv_forward", "conv_forward(wb, xp, y, k, wp, run, n_threads): Conv2d's forward product "
     "on the padded images, without im2col.",
     {G_IN("wb", NPY_FLOAT32, 3, X_ANY, X_ANY), G_IN("xp", NPY_FLOAT32, 4, X_ANY, X_ANY),
      G_OUT("y", NPY_FLOAT32, 3, X_ANY, X_ANY), G_N("k"), G_N("wp"), G_N("run"), G_THREADS_ARG},
     0, 0, check_conv_forward, NULL, call_conv_forward, {0}, 0, {0}},
    {"conv_weight_grad", "conv_weight_grad(xp, dy, g, k, wp, run, chunk, n_threads): Conv2d's "
     "[weight | bias] gradient on the padded images, without im2col.",
     {G_IN("xp", NPY_FLOAT32, 4, X_ANY, X_ANY), G_IN("dy", NPY_FLOAT32, 3, X_ANY, X_ANY),
      G_OUT("g", NPY_FLOAT32, 3, X_ANY, X_ANY), G_N("k"), G_N("wp"), G_N("run"), G_N("chunk"),
      G_THREADS_ARG},
     0, 0, check_conv_weight_grad, NULL, call_conv_weight_grad, {0}, 0, {0}},
    {"conv_input_grad_s8", "conv_input_grad_s8(wq, sw, dq, sdy, dxp, k, wp, run, n_threads): "
     "Conv2d's int8 input gradient on the padded images, without a column gradient.",
     {G_IN("wq", NPY_INT8, 3, X_ANY, X_ANY), G_IN("sw", NPY_FLOAT32, 1, X_R, X_ANY),
      G_IN("dq", NPY_INT8, 3, X_R, X_ANY), G_IN("sdy", NPY_FLOAT32, 1, X_R, X_ANY),
      G_OUT("dxp", NPY_FLOAT32, 4, X_R, X_ANY), G_N("k"), G_N("wp"), G_N("run"), G_THREADS_ARG},
     0, 0, check_conv_input_grad_s8, NULL, call_conv_input_grad_s8, {0}, 0, {0}},
    {"conv_forward_s8", "conv_forward_s8(wq, sw, xq, sx, bias, y, k, wp, run, n_threads): "
     "Conv2d's int8 forward product on the padded codes, without im2col.",
     {G_IN("wq", NPY_INT8, 3, X_ANY, X_ANY), G_IN("sw", NPY_FLOAT32, 1, X_R, X_ANY),
      G_IN("xq", NPY_INT8, 4, X_ANY, X_ANY), G_IN("sx", NPY_FLOAT32, 1, X_ANY, X_ANY),
      G_IN("bias", NPY_FLOAT32, 2, X_R, X_ANY), G_OUT("y", NPY_FLOAT32, 3, X_R, X_ANY),
      G_N("k"), G_N("wp"), G_N("run"), G_THREADS_ARG},
     0, 0, check_conv_forward_s8, NULL, call_conv_forward_s8, {0}, 0, {0}},
    {"conv_weight_grad_s8", "conv_weight_grad_s8(dq, sdy, xq, sx, gw, k, wp, run, chunk, "
     "n_threads): Conv2d's int8 weight gradient on the padded codes, without im2col.",
     {G_IN("dq", NPY_INT8, 3, X_ANY, X_ANY), G_IN("sdy", NPY_FLOAT32, 1, X_R, X_ANY),
      G_IN("xq", NPY_INT8, 4, X_ANY, X_ANY), G_IN("sx", NPY_FLOAT32, 1, X_ANY, X_ANY),
      G_OUT("gw", NPY_FLOAT32, 3, X_R, X_ANY), G_N("k"), G_N("wp"), G_N("run"), G_N("chunk"),
      G_THREADS_ARG},
     0, 0, check_conv_weight_grad_s8, NULL, call_conv_weight_grad_s8, {0}, 0, {0}},
};

static PyMethodDef methods[] = {
    {"conv_forward_params", py_conv_forward_params, METH_VARARGS,
     "conv_forward_params(w, bias, xp, y, k, wp, run, n_threads) -> y: Conv2d's forward product "
     "on the padded images, reading the layer's (strided) weight and bias in place."},
    {"conv_param_grad", py_conv_param_grad, METH_VARARGS,
     "conv_param_grad(xp, dy, gw, gb, k, wp, run, chunk, n_threads): Conv2d's weight and bias "
     "gradients without im2col, written into the layer's (strided) views."},
    {"conv_input_grad", py_conv_input_grad, METH_VARARGS,
     "conv_input_grad(w, dy, dxp, k, wp, run, n_threads) -> dxp: Conv2d's input gradient on the "
     "padded images, without a column gradient (w may be a strided view)."},
    {NULL, NULL, 0, NULL},
};

GLUE_FAMILY(conv, ops, methods);
