/* peak_amx.c: the int8 peak loop of the AMX path: tdpbssd on tiles that never leave the unit.
 *
 * Each thread loads the tile configuration (tile state is per thread), fills an A and a B tile
 * (16 x 64 bytes) from its seed and runs reps iterations of DL_PEAK_AMX_UNROLL x 6 tdpbssd on
 * six independent C tiles (tmm0-5; enough to cover the instruction's latency at one per 16
 * cycles), then stores and sums the C tiles (the checksum) and releases the tiles. One tdpbssd is
 * 16 x 16 x 64 multiply-adds = 32768 operations; reps x 96 instructions per thread, as the other
 * paths' loops (peak_impl.h; the team driver is peak_team.h's), so decentlearn/_reference/peak.py
 * counts them the same way. Without compiler support for AMX it refuses (DL_E_ARG; never
 * dispatched); off x86-64 the unit is empty.
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <stdint.h>
#include <string.h>

#include "dl.h"
#include "peak_team.h"

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

/* *ops, *check: see peak_team.h (the checksum is the C tiles'). */
int dl_peak_s8_amx(int64_t reps, int n_threads, int64_t *ops, int64_t *check) {
    return dl_peak_team(reps, n_threads, peak_amx_thread,
                        (int64_t)DL_PEAK_AMX_UNROLL * 6 * PEAK_AMX_OPS_PER_INSN, ops, check);
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
