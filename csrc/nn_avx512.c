/* nn_avx512.c: the layers' float32 GEMMs of nn_impl.h built with AVX-512F + FMA flags (see
 * setup.py): the same 6-row register tile on 16-lane vectors (6 x 32, 12 zmm accumulators; a
 * narrow last panel of 16 columns), edges through masked loads and stores. Each element is the
 * same chain of multiply-adds as the AVX2 build's, so the two agree bit for bit. Compiled to an
 * empty unit off x86-64. */
#if defined(__x86_64__) || defined(_M_X64)
#define DL_SUFFIX avx512
#include "nn_impl.h"
#else
typedef int dl_nn_avx512_unused;
#endif
