/* peak_avx512vnni.c: the int8 peak loop (peak_impl.h) with AVX-512 VNNI vpdpbusd, the instruction
 * of the VNNI int8 GEMM. Empty off x86-64. */
#if defined(__x86_64__) || defined(_M_X64)
#define DL_SUFFIX avx512vnni
#define DL_PEAK_KIND 3
#include "peak_impl.h"
#else
typedef int dl_peak_avx512vnni_unused;
#endif
