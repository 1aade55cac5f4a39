/* gossip.c: the portable build of the CSR gossip kernel, and CSR validation.
 *
 * The kernel body lives in gossip_impl.h; gossip_avx2.c and gossip_avx512.c compile the same body
 * with wider vectors. dl_csr_check validates a CSR matrix that came from Python before any kernel
 * indexes memory with it.
 */
#define DL_SUFFIX generic
#include "gossip_impl.h"

/* Returns DL_OK when indptr is 0-based, non-decreasing and ends at nnz, and every column index is
 * in [0, n_cols); DL_E_INDPTR / DL_E_INDEX otherwise. O(n_rows + nnz), single-threaded. */
int dl_csr_check(const dl_csr_f32_t *w) {
    if (w->n_rows < 0 || w->n_cols < 0) return DL_E_ARG;
    if (w->indptr[0] != 0) return DL_E_INDPTR;
    for (int64_t i = 0; i < w->n_rows; i++)
        if (w->indptr[i + 1] < w->indptr[i]) return DL_E_INDPTR;
    const int64_t nnz = w->indptr[w->n_rows];
    for (int64_t p = 0; p < nnz; p++)
        if (w->indices[p] < 0 || (int64_t)w->indices[p] >= w->n_cols) return DL_E_INDEX;
    return DL_OK;
}

/* Y = W X with W's products and sums in float32 as scipy.sparse computes a float32 product: each
 * output element starts at +0 and adds its row's terms data[p] * x[indices[p], c] in stored order,
 * each product rounded, then each sum (no fused multiply-add: this portable build has none and the
 * pragma of gossip_impl.h forbids contraction). Rows of X and Y lie ldx and ldy floats apart (>=
 * dim: column blocks of wider matrices). Tasks are (row, block of DL_SPMM_CB columns), an
 * element's value independent of the task it falls in, so of the thread count. */
#define DL_SPMM_CB 1024
int dl_spmm_csr_f32(const dl_csr_f32_t *w, int64_t dim, const float *x, int64_t ldx, float *y,
                    int64_t ldy, int n_threads) {
    if (w->n_rows < 0 || dim < 0 || ldx < dim || ldy < dim || n_threads < 1) return DL_E_ARG;
    const int64_t blocks = (dim + DL_SPMM_CB - 1) / DL_SPMM_CB;
    const int64_t tasks = w->n_rows * blocks;
#pragma omp parallel for schedule(static) num_threads(n_threads) if (n_threads > 1)
    for (int64_t task = 0; task < tasks; task++) {
        const int64_t i = task / blocks, c0 = (task % blocks) * DL_SPMM_CB;
        const int64_t nc = dl_min_i64(DL_SPMM_CB, dim - c0);
        float *restrict yr = y + i * ldy + c0;
        for (int64_t c = 0; c < nc; c++) yr[c] = 0.0f;
        for (int64_t p = w->indptr[i]; p < w->indptr[i + 1]; p++) {
            const float a = w->data[p];
            const float *restrict xr = x + (int64_t)w->indices[p] * ldx + c0;
            for (int64_t c = 0; c < nc; c++) yr[c] = yr[c] + a * xr[c];
        }
    }
    return DL_OK;
}
