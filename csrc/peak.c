/* peak.c: the int8 peak loop (peak_impl.h) of the portable path: SSE2 pmaddwd on x86-64, plain C
 * elsewhere. */
#define DL_SUFFIX generic
#if defined(__x86_64__) || defined(_M_X64)
#define DL_PEAK_KIND 1
#else
#define DL_PEAK_KIND 0
#endif
#include "peak_impl.h"
