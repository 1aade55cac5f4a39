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
