/* peak_team.h: the team driver every int8 peak loop shares (peak_impl.h's SIMD loops and the AMX
 * tile loop of peak_amx.c). thread(reps, seed) runs one thread's loop and returns its checksum;
 * each of the n_threads threads runs it once, with its thread number as the seed. *ops = the
 * threads that ran x reps x ops_per_rep (2 operations per multiply-add, as GEMM GOP/s count
 * 2 m n k); *check = the sum of the checksums. DL_E_ARG for reps < 0 or n_threads < 1. Timing is
 * the caller's.
 */
#ifndef DL_PEAK_TEAM_H
#define DL_PEAK_TEAM_H
#include <stdint.h>

#include "dl.h"

static inline int dl_peak_team(int64_t reps, int n_threads, int64_t (*thread)(int64_t, int),
                               int64_t ops_per_rep, int64_t *ops, int64_t *check) {
    if (reps < 0 || n_threads < 1) return DL_E_ARG;
    int64_t sum = 0;
    int team = 1;
#ifdef _OPENMP
#pragma omp parallel num_threads(n_threads) reduction(+ : sum)
    {
#pragma omp single
        team = omp_get_num_threads();
        sum += thread(reps, omp_get_thread_num());
    }
#else
    sum = thread(reps, 0);
#endif
    *ops = (int64_t)team * reps * ops_per_rep;
    *check = sum;
    return DL_OK;
}
#endif
