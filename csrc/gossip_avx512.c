/* gossip_avx512.c: the CSR gossip kernel of gossip_impl.h built with avx512 flags (see setup.py).
 * Compiled to an empty unit off x86-64; the dispatch table then never points here. */
#if defined(__x86_64__) || defined(_M_X64)
#define DL_SUFFIX avx512
#include "gossip_impl.h"
#else
typedef int dl_gossip_avx512_unused;
#endif
