/* nn_avx2.c: the layers' float32 GEMMs of nn_impl.h built with AVX2 + FMA flags (see setup.py):
 * 6 x 16 register tile (12 ymm accumulators) and a 6 x 12 one for narrow N (6 ymm + 6 xmm).
 * Compiled to an empty unit off x86-64. */
#if defined(__x86_64__) || defined(_M_X64)
#define DL_SUFFIX avx2
#include "nn_impl.h"
#else
typedef int dl_nn_avx2_unused;
#endif
