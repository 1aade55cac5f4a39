/* bitpack.c: glue of the bit packing of small codes (csrc/bitpack.c): bitpack and bitunpack move
 * (rows, dim) uint8 codes of `bits` bits to and from packed rows. Two glue_op_t rows;
 * decentlearn/ops/bitpack.py is the Python side.
 */
#include "glue.h"

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

static const glue_op_t ops[] = {
    {"bitpack", "bitpack(codes, bits, out, n_threads) -> out.",
     {G_IN("codes", NPY_UINT8, 2, X_R, X_D), G_INT_IN("bits", 1, 8),
      G_OUT("out", NPY_UINT8, 2, X_R, X_E0), G_THREADS_ARG},
     0, 0, ext_rowbytes_i0, NULL, call_bitpack,
     {DL_E_RANGE, &PyExc_ValueError, "%s: every code must be < 2**bits = %d", E_POW2_I0}, 1, {1}},
    {"bitunpack", "bitunpack(packed, bits, out, n_threads) -> out.",
     {G_IN("packed", NPY_UINT8, 2, X_R, X_E0), G_INT_IN("bits", 1, 8),
      G_OUT("out", NPY_UINT8, 2, X_R, X_D), G_THREADS_ARG},
     1, 1, ext_rowbytes_i0, NULL, call_bitunpack, {0}, 1, {1}},
};

GLUE_FAMILY(bitpack, ops, NULL);
