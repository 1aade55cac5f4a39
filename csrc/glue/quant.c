/* quant.c: glue of the quantizers (csrc/quant*.c, dispatched per ISA): QSGD, CGX-style buckets,
 * scaled sign and int8, an encode and a decode each, eight glue_op_t rows. Every decoder maps the
 * kernel's DL_E_FORMAT to a "malformed message" ValueError. decentlearn/ops/quant.py is the Python
 * side.
 */
#include "glue.h"

#include <float.h>
#include <math.h>

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
    const char *fn = c->fn;
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

static const glue_op_t ops[] = {
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
};

GLUE_FAMILY(quant, ops, NULL);
