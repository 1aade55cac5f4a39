/* bitpack.c: packs b-bit codes (1 <= b <= 8) into bytes and back, row by row.
 *
 * Used by every quantizer whose levels need fewer than 8 bits (QSGD, natural dithering, 4-bit
 * buckets, sign). Bit order is little-endian: code j of a row occupies bits [j*b, (j+1)*b) of the
 * row's byte string, and each row starts on a byte boundary (dl_bitpack_row_bytes bytes per row).
 * Packing refuses a code >= 2^b (DL_E_RANGE); unpacking never fails: any byte string of the right
 * length decodes to codes < 2^b.
 */
#include "dl.h"

int64_t dl_bitpack_row_bytes(int64_t dim, int bits) { return (dim * bits + 7) / 8; }

/* packed (n_rows x row_bytes) from codes (n_rows x dim). DL_E_RANGE when a code is >= 2^bits
 * (a code is never silently masked; packed is then unspecified). */
int dl_bitpack_u8(int64_t n_rows, int64_t dim, int bits, const uint8_t *codes, uint8_t *packed,
                  int n_threads) {
    if (n_rows < 0 || dim < 0 || bits < 1 || bits > 8 || n_threads < 1) return DL_E_ARG;
    const int64_t rb = dl_bitpack_row_bytes(dim, bits);
    const uint32_t mask = (1u << bits) - 1u;
    uint32_t high = 0; /* OR of every code's bits above mask */
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(n_threads) if (n_rows * dim > (1 << 16))    \
    reduction(| : high)
#endif
    for (int64_t r = 0; r < n_rows; r++) {
        const uint8_t *c = codes + r * dim;
        uint8_t *out = packed + r * rb;
        uint32_t acc = 0;
        int fill = 0;
        int64_t o = 0;
        for (int64_t j = 0; j < dim; j++) {
            high |= (uint32_t)c[j] & ~mask;
            acc |= ((uint32_t)c[j] & mask) << fill;
            fill += bits;
            if (fill >= 8) {
                out[o++] = (uint8_t)acc;
                acc >>= 8;
                fill -= 8;
            }
        }
        if (fill > 0) out[o++] = (uint8_t)acc;
    }
    return high ? DL_E_RANGE : DL_OK;
}

/* codes (n_rows x dim) from packed (n_rows x row_bytes). */
/* dim codes of `bits` (1, 2 or 4: a constant where inlined) bits, 8 / bits a byte, low bits
 * first: the bytes' fields in registers, no bit reader. */
static inline __attribute__((always_inline)) void unpack_whole(const uint8_t *in, uint8_t *c,
                                                               int64_t dim, int bits) {
    const int per = 8 / bits;
    const uint32_t mask = (1u << bits) - 1u;
    int64_t j = 0;
    for (; j + per <= dim; j += per) {
        const uint32_t byte = in[j / per];
        for (int f = 0; f < per; f++) c[j + f] = (uint8_t)((byte >> (f * bits)) & mask);
    }
    for (int f = 0; j < dim; j++, f++) c[j] = (uint8_t)((in[j / per] >> (f * bits)) & mask);
}

int dl_bitunpack_u8(int64_t n_rows, int64_t dim, int bits, const uint8_t *packed, uint8_t *codes,
                    int n_threads) {
    if (n_rows < 0 || dim < 0 || bits < 1 || bits > 8 || n_threads < 1) return DL_E_ARG;
    const int64_t rb = dl_bitpack_row_bytes(dim, bits);
    const uint32_t mask = (1u << bits) - 1u;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(n_threads) if (n_rows * dim > (1 << 16))
#endif
    for (int64_t r = 0; r < n_rows; r++) {
        const uint8_t *in = packed + r * rb;
        uint8_t *c = codes + r * dim;
        if (bits == 1 || bits == 2 || bits == 4) { /* whole fields a byte, low bits first */
            if (bits == 4)
                unpack_whole(in, c, dim, 4);
            else if (bits == 2)
                unpack_whole(in, c, dim, 2);
            else
                unpack_whole(in, c, dim, 1);
            continue;
        }
        uint32_t acc = 0;
        int fill = 0;
        int64_t i = 0;
        for (int64_t j = 0; j < dim; j++) {
            if (fill < bits) {
                acc |= (uint32_t)in[i++] << fill;
                fill += 8;
            }
            c[j] = (uint8_t)(acc & mask);
            acc >>= bits;
            fill -= bits;
        }
    }
    return DL_OK;
}
