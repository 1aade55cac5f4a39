/* peak_amx.c: the int8 peak loop of the AMX path: tdpbssd on tiles that never leave the unit.
 *
 * Each thread loads the tile configuration (tile state is per thread), fills an A and a B tile
 * (16 x 64 bytes) from its seed and runs reps iterations of DL_PEAK_AMX_UNROLL x 6 tdpbssd on
 * six independent C tiles (tmm0-5; enough to cover the instruction's latency at one per 16
 * cycles), then stores and sums the C tiles (the checksum) and releases the tiles. One tdpbssd is
 * 16 x 16 x 64 multiply-adds = 32768 operations; reps x 96 instructions per thread, as the other
 * paths' loops (peak_impl.h), so decentlearn/_reference/peak.py counts them the same way. Stubs
 * when the compiler lacks AMX, an empty unit off x86-64.
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <stdint.h>
#include <string.h>

#include "dl.h"

#if defined(__AMX_TILE__) && defined(__AMX_INT8__)
#include <immintrin.h>

#define DL_PEAK_AMX_UNROLL 16
#define PEAK_AMX_OPS_PER_INSN (2 * 16 * 16 * 64)

static int64_t peak_amx_thread(int64_t reps, int seed) {
    int8_t src[2][1024] __attribute__((aligned(64)));
    int32_t c[16 * 16] __attribute__((aligned(64)));
    for (int i = 0; i < 2 * 1024; i++) src[i / 1024][i % 1024] = (int8_t)((seed + 1) * 37 + i);
    dl_amx_tile_begin();
    DL_AMX_LOADD(6, src[0], 64);
    DL_AMX_LOADD(7, src[1], 64);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_zero(4);
    _tile_zero(5);
    for (int64_t r = 0; r < reps; r++) {
        for (int u = 0; u < DL_PEAK_AMX_UNROLL; u++) {
            _tile_dpbssd(0, 6, 7);
            _tile_dpbssd(1, 6, 7);
            _tile_dpbssd(2, 6, 7);
            _tile_dpbssd(3, 6, 7);
            _tile_dpbssd(4, 6, 7);
            _tile_dpbssd(5, 6, 7);
        }
    }
    int64_t s = 0;
#define PEAK_AMX_SUM(t)                                                                            \
    _tile_stored(t, c, 64);                                                                        \
    for (int i = 0; i < 256; i++) s += c[i];
    PEAK_AMX_SUM(0)
    PEAK_AMX_SUM(1)
    PEAK_AMX_SUM(2)
    PEAK_AMX_SUM(3)
    PEAK_AMX_SUM(4)
    PEAK_AMX_SUM(5)
#undef PEAK_AMX_SUM
    dl_amx_tile_end();
    return s;
}

/* *ops = operations done (2 per multiply-add) by reps iterations on each of n_threads threads;
 * *check = a checksum of the C tiles. DL_E_ARG for reps < 0 or n_threads < 1. */
int dl_peak_s8_amx(int64_t reps, int n_threads, int64_t *ops, int64_t *check) {
    if (reps < 0 || n_threads < 1) return DL_E_ARG;
    int64_t sum = 0;
    int team = 1;
#ifdef _OPENMP
#pragma omp parallel num_threads(n_threads) reduction(+ : sum)
    {
#pragma omp single
        team = omp_get_num_threads();
        sum += peak_amx_thread(reps, omp_get_thread_num());
    }
#else
    sum = peak_amx_thread(reps, 0);
#endif
    *ops = (int64_t)team * reps * DL_PEAK_AMX_UNROLL * 6 * PEAK_AMX_OPS_PER_INSN;
    *check = sum;
    return DL_OK;
}
#else
int dl_peak_s8_amx(int64_t reps, int n_threads, int64_t *ops, int64_t *check) {
    (void)reps, (void)n_threads, (void)ops, (void)check;
    return DL_E_ARG;
}
#endif
#else
typedef int dl_peak_amx_unused;
#endif
