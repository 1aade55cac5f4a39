/* natural.c: glue of natural compression and natural dithering (csrc/natural*.c, dispatched per
 * ISA): natural_encode / natural_decode and dither_encode / dither_decode, four glue_op_t rows;
 * decentlearn/ops/natural.py is the Python side.
 */
#include "glue.h"

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

static const glue_op_t ops[] = {
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
};

GLUE_FAMILY(natural, ops, NULL);
