/* consensus.c: glue of the consensus distance kernels (csrc/consensus.c): consensus_sums,
 * consensus_distance, column_mean and weighted_column_sum, one glue_op_t row each. decentlearn/ops/consensus.py is the Python side.
 */
#include "glue.h"

/* consensus_sums is a table row: out (2,) float64 gets sum X^2 and sum_c (sum_i X_ic)^2. */
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

/* consensus_distance is a table row: out (1,) float64 gets the exact centred distance. */
static int check_distance_out(glue_call_t *c) {
    if (PyArray_SIZE(c->arr[1]) != 1) {
        PyErr_Format(PyExc_ValueError,
                     "consensus_distance: out must have 1 float64 entry, got %zd",
                     (Py_ssize_t)PyArray_SIZE(c->arr[1]));
        return -1;
    }
    return 0;
}

static int call_consensus_distance(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_consensus_distance_f32((int64_t)c->rows, (int64_t)c->dim, G_DATA(c, 0),
                                     G_DATA(c, 1), G_DATA_OR_NULL(c, 2), c->n_threads);
}

/* column_mean is a table row: mean (D,) float64 gets X.mean(axis=0, dtype=float64). */
static int call_column_mean(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_column_mean_f32((int64_t)c->rows, (int64_t)c->dim, G_DATA(c, 0), G_DATA(c, 1),
                              c->n_threads);
}

static int call_row_sums(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_row_sums_f32((int64_t)c->rows, (int64_t)c->dim, G_DATA(c, 0), G_DATA(c, 1),
                           c->n_threads);
}

/* weighted_column_sum is a table row: w (P,) float64, out (D,) float64. */
static int call_weighted_column_sum(const glue_call_t *c, const dl_dispatch_t *d) {
    (void)d;
    return dl_weighted_column_sum_f32((int64_t)c->rows, (int64_t)c->dim, G_DATA(c, 0),
                                      G_DATA(c, 1), G_DATA(c, 2), c->n_threads);
}

static const glue_op_t ops[] = {
    {"consensus_sums", "consensus_sums(X, out, n_threads) -> out: (sum of X^2, sum over columns "
     "of the squared column sums), float64, one pass over the (P, D) float32 X.",
     {G_IN("X", NPY_FLOAT32, 2, X_R, X_D),
      G_OUT("out", NPY_FLOAT64, 1, X_ANY, X_ANY), G_THREADS_ARG},
     0, 0, check_consensus_out, NULL, call_consensus_sums, {0}, 1, {1}},
    {"consensus_distance", "consensus_distance(X, out, mean, n_threads) -> out: the exact "
     "consensus distance (1/P) sum (X_ic - mean_c)^2 of the (P, D) float32 X, float64, in a fixed "
     "order; mean (D,) float64 or None gets the column means.",
     {G_IN("X", NPY_FLOAT32, 2, X_R, X_D),
      G_OUT("out", NPY_FLOAT64, 1, X_ANY, X_ANY), G_OPT_OUT("mean", NPY_FLOAT64, 1, X_D, X_ANY),
      G_THREADS_ARG},
     0, 0, check_distance_out, NULL, call_consensus_distance, {0}, 1, {1}},
    {"column_mean", "column_mean(X, mean, n_threads) -> mean: the column means of the (P, D) "
     "float32 X in float64, summed in row order (NumPy's X.mean(axis=0, dtype=float64)).",
     {G_IN("X", NPY_FLOAT32, 2, X_R, X_D), G_OUT("mean", NPY_FLOAT64, 1, X_D, X_ANY),
      G_THREADS_ARG},
     0, 0, NULL, NULL, call_column_mean, {0}, 1, {1}},
    {"row_sums", "row_sums(x, out, n_threads) -> out: each row's sum of the (R, n) float32 x in "
     "float32, NumPy's pairwise summation (np.sum(x, axis=1)).",
     {G_IN("x", NPY_FLOAT32, 2, X_R, X_D), G_OUT("out", NPY_FLOAT32, 1, X_R, X_ANY),
      G_THREADS_ARG},
     0, 0, NULL, NULL, call_row_sums, {0}, 1, {1}},
    {"weighted_column_sum", "weighted_column_sum(X, w, out, n_threads) -> out: sum_k w[k] X[k] "
     "in float64, the rows of the (P, D) float32 X in order.",
     {G_IN("X", NPY_FLOAT32, 2, X_R, X_D), G_IN("w", NPY_FLOAT64, 1, X_R, X_ANY),
      G_OUT("out", NPY_FLOAT64, 1, X_D, X_ANY), G_THREADS_ARG},
     0, 0, NULL, NULL, call_weighted_column_sum, {0}, 1, {2}},
};

GLUE_FAMILY(consensus, ops, NULL);
