/* rng.c: fills a matrix with a counter-based generator of dl.h, for tests and references.
 *
 * out[r, j] = dl_rng_u32(dl_rng_key(seed, step, peer0 + r), j) (or dl_rng_fast_u32, the
 * compressors' generator): the exact numbers a stochastic kernel draws for row r, element j.
 * Tests compare it with decentlearn/_reference/rng.py.
 */
#include "dl.h"

int dl_rng_fill_u32(int64_t n_rows, int64_t dim, uint64_t seed, uint64_t step, int64_t peer0,
                    int fast, uint32_t *out, int n_threads) {
    if (n_rows < 0 || dim < 0 || n_threads < 1 || (fast != 0 && fast != 1)) return DL_E_ARG;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(n_threads)
#endif
    for (int64_t r = 0; r < n_rows; r++) {
        const uint64_t key = dl_rng_key(seed, step, (uint64_t)(peer0 + r));
        for (int64_t j = 0; j < dim; j++)
            out[r * dim + j] =
                fast ? dl_rng_fast_u32(key, (uint64_t)j) : dl_rng_u32(key, (uint64_t)j);
    }
    return DL_OK;
}
