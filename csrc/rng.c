/* rng.c: fills a matrix with a counter-based generator of dl.h, for tests and references.
 *
 * out[r, j] = dl_rng_u32(dl_rng_key(seed, step, peer0 + r), j) (or dl_rng_fast_u32, the
 * compressors' generator): the exact numbers a stochastic kernel draws for row r, element j.
 * Tests compare it with decentlearn/_reference/rng.py.
 */
#include <stdlib.h>

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

/* A max-heap of (key, index) pairs, ordered lexicographically, for dl_hash_smallest. */
static inline int hs_less(uint64_t ka, int64_t ia, uint64_t kb, int64_t ib) {
    return ka < kb || (ka == kb && ia < ib);
}
static void hs_sift_down(uint64_t *key, int64_t *idx, int64_t m, int64_t i) {
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= m) return;
        if (c + 1 < m && hs_less(key[c], idx[c], key[c + 1], idx[c + 1])) c++;
        if (!hs_less(key[i], idx[i], key[c], idx[c])) return;
        const uint64_t tk = key[i];
        const int64_t ti = idx[i];
        key[i] = key[c], idx[i] = idx[c], key[c] = tk, idx[c] = ti;
        i = c;
    }
}

/* For every row j of [0, n): the s columns k != j with the smallest keys
 * key(j, k) = dl_mix64(dl_mix64(base + G + j) + G + k) >> 11, G = 0x9e3779b97f4a7c15 (the 53-bit
 * integers behind decentlearn.seeds.hash_uniform(seed, stream, t, j, k) when base is
 * hash_u64(seed, stream, t)), ties to the smaller k, written to out[j * s + 0 .. s - 1] in
 * increasing (key, k) order: Epidemic Learning's random out-neighbours of every peer, without the
 * n x n matrix of keys. Rows on the threads; each row is one pass over its n keys with a heap of
 * s, so any thread count gives the same result. */
int dl_hash_smallest(int64_t n, int64_t s, uint64_t base, int64_t *out, int n_threads) {
    if (n < 2 || s < 1 || s > n - 1 || n_threads < 1) return DL_E_ARG;
    const uint64_t golden = 0x9e3779b97f4a7c15ULL;
    int failed = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads((int)dl_max_i64(1, dl_min_i64(n_threads, n))) reduction(| : failed)
#else
    (void)n_threads;
#endif
    {
        uint64_t *key = malloc((size_t)s * sizeof(uint64_t));
        int64_t *idx = malloc((size_t)s * sizeof(int64_t));
        const int ok = key != NULL && idx != NULL;
        if (!ok) failed = 1;
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t j = 0; j < n; j++) {
            if (!ok) continue;
            const uint64_t hj = dl_mix64(base + golden + (uint64_t)j);
            int64_t m = 0;
            for (int64_t k = 0; k < n; k++) {
                if (k == j) continue;
                const uint64_t kk = dl_mix64(hj + golden + (uint64_t)k) >> 11;
                if (m < s) { /* push, sift up */
                    int64_t i = m++;
                    key[i] = kk, idx[i] = k;
                    while (i > 0) {
                        const int64_t p = (i - 1) / 2;
                        if (!hs_less(key[p], idx[p], key[i], idx[i])) break;
                        const uint64_t tk = key[p];
                        const int64_t ti = idx[p];
                        key[p] = key[i], idx[p] = idx[i], key[i] = tk, idx[i] = ti;
                        i = p;
                    }
                } else if (kk < key[0]) { /* an equal key has a larger k: it stays out */
                    key[0] = kk, idx[0] = k;
                    hs_sift_down(key, idx, m, 0);
                }
            }
            for (int64_t i = s - 1; i >= 0; i--) { /* pop the largest into the last slot */
                out[j * s + i] = idx[0];
                key[0] = key[i], idx[0] = idx[i];
                hs_sift_down(key, idx, i, 0);
            }
        }
        free(key);
        free(idx);
    }
    return failed ? DL_E_NOMEM : DL_OK;
}
