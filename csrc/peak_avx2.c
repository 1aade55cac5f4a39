/* peak_avx2.c: the int8 peak loop (peak_impl.h) with AVX2 vpmaddwd, the instruction of the AVX2
 * int8 GEMM (also used by the AVX-512 path without VNNI). Empty off x86-64. */
#if defined(__x86_64__) || defined(_M_X64)
#define DL_SUFFIX avx2
#define DL_PEAK_KIND 2
#include "peak_impl.h"
#else
typedef int dl_peak_avx2_unused;
#endif
