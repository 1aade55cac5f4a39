/* natural_avx512.c: natural compression and dithering (natural_impl.h) built with avx512 flags (see
 * setup.py). Compiled to an empty unit off x86-64; the dispatch table then never points here. */
#if defined(__x86_64__) || defined(_M_X64)
#define DL_SUFFIX avx512
#include "natural_impl.h"
#else
typedef int dl_natural_avx512_unused;
#endif
