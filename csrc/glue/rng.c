/* rng.c: glue of the counter-based generators (csrc/rng.c): rng_u32 and rng_fast_u32 fill a
 * (rows, dim) uint32 array with the words of (seed, step, peer0 + row, column). Two glue_op_t
 * rows; decentlearn/ops/rng.py is the Python side.
 */
#include "glue.h"

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

static const glue_op_t ops[] = {
    {"rng_u32", "rng_u32(seed, step, peer0, out, n_threads) -> out.",
     {G_SEED_ARG, G_STEP_ARG, G_PEER0_ARG, G_OUT("out", NPY_UINT32, 2, X_R, X_D), G_THREADS_ARG},
     0, 0, NULL, NULL, call_rng_u32, {0}, 1, {0}},
    {"rng_fast_u32", "rng_fast_u32(seed, step, peer0, out, n_threads) -> out.",
     {G_SEED_ARG, G_STEP_ARG, G_PEER0_ARG, G_OUT("out", NPY_UINT32, 2, X_R, X_D), G_THREADS_ARG},
     0, 0, NULL, NULL, call_rng_fast_u32, {0}, 1, {0}},
};

GLUE_FAMILY(rng, ops, NULL);
