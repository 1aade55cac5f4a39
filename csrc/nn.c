/* nn.c: the portable build of the layers' float32 GEMMs (nn_impl.h); nn_avx2.c builds the same
 * body with AVX2 and FMA. */
#define DL_SUFFIX generic
#include "nn_impl.h"
