/* natural.c: the portable build of natural compression and natural dithering.
 *
 * The kernel bodies live in natural_impl.h; natural_avx2.c and natural_avx512.c compile the same
 * bodies with wider vectors, and dl_dispatch() picks one at run time. decentlearn/_reference/
 * natural.py is the NumPy spec every build matches bit for bit.
 */
#define DL_SUFFIX generic
#include "natural_impl.h"

int dl_natural_dither_bits(int s) {
    if (s < 1 || s > 31) return DL_E_ARG;
    int b = 0;
    while ((1 << b) < s + 1) b++;
    return 1 + b;
}
