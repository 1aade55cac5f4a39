/* copy.c: a streaming copy, the in-process measure of the memory bandwidth limit.
 *
 * Benchmarks compare memory-bound kernels with the fastest copy this machine does, measured in the
 * same process: np.copyto (cached stores: the destination's lines are read before they are
 * written) and this kernel, which stores with non-temporal SSE2 stores (part of x86-64, so one
 * build serves every ISA path) and moves only the 2 n * 4 bytes a copy must move. The array is
 * split into fixed chunks of DL_COPY_CHUNK floats, contiguous runs of which go to each thread.
 * Off x86-64 it falls back to memcpy per chunk.
 */
#include <string.h>

#include "dl.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define DL_COPY_X86 1
#endif

#define DL_COPY_CHUNK (1 << 16) /* floats per chunk (256 KiB) */

/* dst[i] = src[i] for i < n floats within one chunk: aligned head, 64-byte non-temporal body. */
static void copy_chunk(const float *src, float *dst, int64_t n) {
#ifdef DL_COPY_X86
    int64_t i = dl_min_i64((int64_t)(((-(uintptr_t)dst) & 15) / 4), n);
    memcpy(dst, src, (size_t)i * sizeof(float));
    for (; i + 16 <= n; i += 16) {
        const __m128 a = _mm_loadu_ps(src + i), b = _mm_loadu_ps(src + i + 4);
        const __m128 c = _mm_loadu_ps(src + i + 8), d = _mm_loadu_ps(src + i + 12);
        _mm_stream_ps(dst + i, a);
        _mm_stream_ps(dst + i + 4, b);
        _mm_stream_ps(dst + i + 8, c);
        _mm_stream_ps(dst + i + 12, d);
    }
    memcpy(dst + i, src + i, (size_t)(n - i) * sizeof(float));
#else
    memcpy(dst, src, (size_t)n * sizeof(float));
#endif
}

/* dst[0:n) = src[0:n) (float32, must not overlap; dst need not be aligned, but a dst that is not
 * 4-byte aligned is the caller's error). Non-temporal stores, then a store fence per thread. */
int dl_copy_f32(int64_t n, const float *src, float *dst, int n_threads) {
    if (n < 0 || n_threads < 1) return DL_E_ARG;
    const int64_t nc = dl_cdiv_i64(n, DL_COPY_CHUNK);
    if (nc == 0) return DL_OK;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads((int)dl_min_i64(n_threads, nc))
#else
    (void)n_threads;
#endif
    for (int64_t c = 0; c < nc; c++) {
        const int64_t i0 = c * DL_COPY_CHUNK;
        copy_chunk(src + i0, dst + i0, dl_min_i64(DL_COPY_CHUNK, n - i0));
#ifdef DL_COPY_X86
        _mm_sfence();
#endif
    }
    return DL_OK;
}
