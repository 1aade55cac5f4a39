/* gossip_avx2.c: the CSR gossip kernel of gossip_impl.h built with avx2 flags (see setup.py).
 * Compiled to an empty unit off x86-64; the dispatch table then never points here. */
#if defined(__x86_64__) || defined(_M_X64)
#define DL_SUFFIX avx2
#include "gossip_impl.h"
#else
typedef int dl_gossip_avx2_unused;
#endif
