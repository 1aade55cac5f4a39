/* peak.c: the int8 peak loop (peak_impl.h) of the portable path: SSE2 pmaddwd on x86-64, plain C
 * elsewhere; and dl_peak_s8_window, which times any path's loop on a team of threads over a
 * common time window. */
#define DL_SUFFIX generic
#if defined(__x86_64__) || defined(_M_X64)
#define DL_PEAK_KIND 1
#else
#define DL_PEAK_KIND 0
#endif
#include "peak_impl.h"

#include <time.h>

/* The peak of n_threads threads at once, for any path's loop fn: every thread runs chunks of
 * `chunk` iterations of fn on one thread (a nested one-thread team) until `seconds` after a
 * common start (taken after a barrier, so team start-up is not timed); *ops = the operations of
 * every chunk of every thread, *elapsed = the common start to the last thread's end. A fixed
 * amount of work per thread would instead be timed by its slowest thread: one thread sharing its
 * core with another process (or a spinning BLAS thread) halves the whole team's figure. */
int dl_peak_s8_window(dl_peak_s8_fn fn, int64_t chunk, double seconds, int n_threads,
                      int64_t *ops, double *elapsed, int64_t *check) {
    if (fn == NULL || chunk < 1 || !(seconds >= 0.0) || n_threads < 1) return DL_E_ARG;
    int64_t total = 0, sum = 0;
    int status = DL_OK;
#ifdef _OPENMP
    double t0 = 0.0, t_end = 0.0;
#pragma omp parallel num_threads(n_threads) reduction(+ : total, sum) reduction(max : t_end)     \
    reduction(min : status)
    {
#pragma omp barrier
#pragma omp single
        t0 = omp_get_wtime(); /* the single's closing barrier: every thread starts after t0 */
        double now;
        do {
            int64_t o = 0, c = 0;
            const int s = fn(chunk, 1, &o, &c);
            if (s < status) status = s;
            total += o;
            sum += c;
            now = omp_get_wtime();
        } while (status == DL_OK && now < t0 + seconds);
        t_end = now;
    }
    *elapsed = t_end - t0;
#else
    (void)n_threads;
    const clock_t c0 = clock();
    double t;
    do {
        int64_t o = 0, c = 0;
        status = fn(chunk, 1, &o, &c);
        total += o;
        sum += c;
        t = (double)(clock() - c0) / CLOCKS_PER_SEC;
    } while (status == DL_OK && t < seconds);
    *elapsed = t;
#endif
    *ops = total;
    *check = sum;
    return status;
}
