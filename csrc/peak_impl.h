/* peak_impl.h: the int8 multiply-add peak of one ISA path, measured by a loop that never leaves
 * the registers, compiled once per instruction (DL_PEAK_KIND).
 *
 * The loop issues the instruction the path's int8 GEMM is built on, on DL_PEAK_ACC independent
 * accumulators (enough to cover its latency at full throughput):
 *   1: SSE2 pmaddwd (generic x86-64 path): 8 int16 multiply-adds = 16 ops per instruction;
 *   2: AVX2 vpmaddwd + vpaddd (avx2, avx512 without VNNI): 16 multiply-adds = 32 ops;
 *   3: AVX-512 VNNI vpdpbusd (avx512vnni): 64 int8 multiply-adds = 128 ops;
 *   0: plain C int32 multiply-adds (other architectures): 1 multiply-add = 2 ops.
 * dl_peak_s8_<isa>(reps, n_threads, &ops, &check) runs reps iterations of the loop on each of
 * n_threads threads and reports the operations done (2 per multiply-add, as GEMM GOP/s count
 * 2 m n k) and a checksum that keeps the compiler from removing the loop. Timing is the caller's.
 */
#include <stdint.h>

#include "dl.h"
#include "peak_team.h"

#if DL_PEAK_KIND > 0
#include <immintrin.h>
#endif

#define DL_PEAK_CAT2(a, b) a##_##b
#define DL_PEAK_CAT(a, b) DL_PEAK_CAT2(a, b)
#define DL_PEAK_ACC 12 /* independent accumulators */
#define DL_PEAK_UNROLL 8 /* instructions per accumulator per iteration */

#if DL_PEAK_KIND == 1
typedef __m128i peak_v;
#define PEAK_OPS_PER_INSN 16
static inline peak_v peak_zero(void) { return _mm_setzero_si128(); }
static inline peak_v peak_set(int v) { return _mm_set1_epi32(v); }
static inline peak_v peak_step(peak_v acc, peak_v b) {
    return _mm_add_epi32(acc, _mm_madd_epi16(acc, b));
}
static inline int64_t peak_sum(peak_v v) {
    int32_t t[4];
    _mm_storeu_si128((__m128i *)t, v);
    return (int64_t)t[0] + t[1] + t[2] + t[3];
}
#elif DL_PEAK_KIND == 2
typedef __m256i peak_v;
#define PEAK_OPS_PER_INSN 32
static inline peak_v peak_zero(void) { return _mm256_setzero_si256(); }
static inline peak_v peak_set(int v) { return _mm256_set1_epi32(v); }
static inline peak_v peak_step(peak_v acc, peak_v b) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(acc, b));
}
static inline int64_t peak_sum(peak_v v) {
    int32_t t[8];
    _mm256_storeu_si256((__m256i *)t, v);
    int64_t s = 0;
    for (int i = 0; i < 8; i++) s += t[i];
    return s;
}
#elif DL_PEAK_KIND == 3
typedef __m512i peak_v;
#define PEAK_OPS_PER_INSN 128
static inline peak_v peak_zero(void) { return _mm512_setzero_si512(); }
static inline peak_v peak_set(int v) { return _mm512_set1_epi32(v); }
static inline peak_v peak_step(peak_v acc, peak_v b) {
    return _mm512_dpbusd_epi32(acc, acc, b);
}
static inline int64_t peak_sum(peak_v v) { return _mm512_reduce_add_epi32(v); }
#else
typedef int32_t peak_v;
#define PEAK_OPS_PER_INSN 2
static inline peak_v peak_zero(void) { return 0; }
static inline peak_v peak_set(int v) { return v; }
static inline peak_v peak_step(peak_v acc, peak_v b) {
    return (peak_v)((uint32_t)acc + (uint32_t)acc * (uint32_t)b); /* wraps, no overflow UB */
}
static inline int64_t peak_sum(peak_v v) { return v; }
#endif

/* One thread's loop. Each accumulator is also the first operand of its next multiply-add (a
 * dependency chain per accumulator, DL_PEAK_ACC chains in flight), so no step can be folded or
 * hoisted; the operands come from `seed` so nothing is constant. */
static int64_t peak_thread(int64_t reps, int seed) {
    peak_v acc[DL_PEAK_ACC];
    const peak_v b = peak_set((seed + 1) | 0x01010101);
#pragma GCC unroll 12
    for (int j = 0; j < DL_PEAK_ACC; j++) acc[j] = peak_set(seed + j);
    for (int64_t r = 0; r < reps; r++) {
#pragma GCC unroll 8
        for (int u = 0; u < DL_PEAK_UNROLL; u++) {
#pragma GCC unroll 12
            for (int j = 0; j < DL_PEAK_ACC; j++) acc[j] = peak_step(acc[j], b);
        }
        /* an empty asm that claims to change the accumulators keeps them in registers */
#if DL_PEAK_KIND > 0
#pragma GCC unroll 12
        for (int j = 0; j < DL_PEAK_ACC; j++) __asm__ volatile("" : "+v"(acc[j]));
#else
#pragma GCC unroll 12
        for (int j = 0; j < DL_PEAK_ACC; j++) __asm__ volatile("" : "+r"(acc[j]));
#endif
    }
    int64_t s = 0;
    for (int j = 0; j < DL_PEAK_ACC; j++) s += peak_sum(acc[j]);
    return s;
}

/* *ops, *check: see peak_team.h (the checksum is the accumulators'). */
int DL_PEAK_CAT(dl_peak_s8, DL_SUFFIX)(int64_t reps, int n_threads, int64_t *ops,
                                       int64_t *check) {
    return dl_peak_team(reps, n_threads, peak_thread,
                        (int64_t)DL_PEAK_UNROLL * DL_PEAK_ACC * PEAK_OPS_PER_INSN, ops, check);
}
