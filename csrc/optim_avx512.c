/* optim_avx512.c: the optimizers' elementwise spans (optim_impl.h) built with avx512 flags (see
 * setup.py). Compiled to an empty unit off x86-64; the dispatch table then never points here. */
#if defined(__x86_64__) || defined(_M_X64)
#define DL_SUFFIX avx512
#include "optim_impl.h"
#else
typedef int dl_optim_avx512_unused;
#endif
