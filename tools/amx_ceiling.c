/* amx_ceiling.c: what one core's AMX tiles reach on data in cache, without the GEMM around them.
 *
 *   gcc -O2 -mamx-tile -mamx-int8 tools/amx_ceiling.c -o /tmp/amx_ceiling
 *   /tmp/amx_ceiling K KC U P      e.g. 1024 1024 4 4   (one thread; Linux x86-64 with AMX)
 *
 * The loop of gemm_s8_amx.c's microkernel on synthetic data: 32 x 32 blocks of C in four tiles
 * (tmm0-3), two A tiles of 16 rows x 64 k values (tmm4-5, row stride 64 bytes, as packed A) and
 * two B tiles (tmm6-7, rows 256 bytes apart, as the "vnni" packed B panel of 64 columns). U row
 * tiles of 32 rows and P panels of 64 columns (two 32-column halves each), k = K: A is U * 32 * K
 * bytes, B P * 64 * K bytes, both reused across repetitions (in L1 or L2 by their size). KC < K
 * splits k into chunks of KC with C's tiles stored and loaded again between chunks (k blocking
 * for L1 reuse); KC = K keeps C in the tiles for the whole k. Prints int8 GOP/s (2 ops per
 * multiply-add), best of 5 runs of about 4 G multiply-adds. Figures: docs/performance.md.
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define LOADD(t, base, stride)                                                                     \
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"((const void *)(base)),                 \
                     "r"((long)(stride))                                                          \
                     : "memory")

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} cfg_t;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s K KC U P (K, KC multiples of 64, KC divides K)\n", argv[0]);
        return 2;
    }
    const long K = atol(argv[1]), KC = atol(argv[2]), U = atol(argv[3]), P = atol(argv[4]);
    if (K < 64 || K % 64 || KC < 64 || KC % 64 || K % KC || U < 1 || P < 1) {
        fprintf(stderr, "K and KC must be multiples of 64 with KC dividing K; U, P >= 1\n");
        return 2;
    }
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) != 0) {
        fprintf(stderr, "no AMX tile data permission (no AMX here?)\n");
        return 1;
    }
    cfg_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
    const long nkb = K / 64, ckb = KC / 64;
    int8_t *A = aligned_alloc(64, (size_t)(U * 32 * K)), *B = aligned_alloc(64, (size_t)(P * K * 64));
    int32_t *C = aligned_alloc(64, (size_t)(U * 2 * 4096));
    memset(A, 1, (size_t)(U * 32 * K));
    memset(B, 1, (size_t)(P * K * 64));
    long reps = (long)(4e9 / (U * P * 32.0 * 64 * K));
    if (reps < 1) reps = 1;
    double best = 1e30;
    for (int trial = 0; trial < 5; trial++) {
        const double t0 = now();
        for (long r = 0; r < reps; r++)
            for (long p = 0; p < P; p++)
                for (long c = 0; c < nkb; c += ckb)
                    for (long x = 0; x < U * 2; x++) {
                        const long u = x / 2, h = x % 2;
                        const int8_t *a = A + u * 32 * K, *b = B + p * K * 64 + h * 128;
                        int32_t *cc = C + (u * 2 + h) * 1024;
                        if (c == 0) {
                            _tile_zero(0);
                            _tile_zero(1);
                            _tile_zero(2);
                            _tile_zero(3);
                        } else {
                            LOADD(0, cc, 128);
                            LOADD(1, cc + 16, 128);
                            LOADD(2, cc + 512, 128);
                            LOADD(3, cc + 528, 128);
                        }
                        for (long kb = c; kb < c + ckb; kb++) {
                            LOADD(4, a + kb * 2048, 64);
                            LOADD(6, b + kb * 16 * 256, 256);
                            LOADD(7, b + kb * 16 * 256 + 64, 256);
                            _tile_dpbssd(0, 4, 6);
                            _tile_dpbssd(1, 4, 7);
                            LOADD(5, a + kb * 2048 + 1024, 64);
                            _tile_dpbssd(2, 5, 6);
                            _tile_dpbssd(3, 5, 7);
                        }
                        _tile_stored(0, cc, 128);
                        _tile_stored(1, cc + 16, 128);
                        _tile_stored(2, cc + 512, 128);
                        _tile_stored(3, cc + 528, 128);
                    }
        const double t = now() - t0;
        if (t < best) best = t;
    }
    _tile_release();
    printf("K=%ld KC=%ld U=%ld P=%ld (A %ld KiB, B %ld KiB): %.0f GOP/s\n", K, KC, U, P,
           U * 32 * K / 1024, P * K * 64 / 1024, 2.0 * reps * U * P * 32 * 64 * K / best / 1e9);
    free(A);
    free(B);
    free(C);
    return 0;
}
