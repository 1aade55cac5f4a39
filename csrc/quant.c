/* quant.c: the portable build of the quantizer encoders (quant_impl.h), and their decoders.
 *
 * Decoders read messages from other peers, so they trust nothing: every row's norm/scale must be
 * finite and >= 0 (bucket lo finite), codes must be in range (QSGD level <= S, int8 != -128), and
 * the largest value a row can decode to must be finite; otherwise DL_E_FORMAT. Sizes come from the
 * caller (the glue checks every array's shape against them). Decoding is a few operations per value
 * with no random numbers, so one portable build suffices; it never contracts multiply-adds, so
 * the values equal the NumPy reference bit for bit.
 */
#define DL_SUFFIX generic
#include "quant_impl.h"

/* The largest magnitude an encoded row may decode to, checked once per row (or bucket). */
static inline int q_ok_scale(float s) { return s >= 0.0f && s <= FLT_MAX; }
static inline int q_ok_value(float v) { return fabsf(v) <= FLT_MAX; }

/* out (n_rows x dim) from norm[n_rows] and packed QSGD codes (see dl_qsgd_encode_f32). */
int dl_qsgd_decode_f32(int64_t n_rows, int64_t dim, int levels, const float *norm,
                       const uint8_t *packed, float *out, int n_threads) {
    if (n_rows < 0 || dim < 0 || levels < 1 || levels > 127 || n_threads < 1) return DL_E_ARG;
    const int bits = dl_qsgd_bits(levels);
    const int64_t n_ch = dl_cdiv_i64(dim, DL_QUANT_CHUNK), n_items = n_rows * n_ch;
    const int64_t rb = dl_bitpack_row_bytes(dim, bits), cb = (int64_t)DL_QUANT_CHUNK * bits / 8;
    int bad = 0;
#ifndef _OPENMP
    (void)n_threads;
#endif
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic) num_threads(n_threads) reduction(| : bad)               \
    if (n_rows * dim > (1 << 15))
#endif
    for (int64_t it = 0; it < n_items; it++) {
        const int64_t r = it / n_ch, j0 = (it % n_ch) * DL_QUANT_CHUNK;
        const int64_t len = dl_min_i64(DL_QUANT_CHUNK, dim - j0);
        const float scale = (float)((double)norm[r] / levels);
        if (!q_ok_scale(norm[r]) || !q_ok_value((float)levels * scale)) {
            bad = 1;
            continue;
        }
        uint8_t buf[DL_QUANT_CHUNK];
        const uint8_t *codes = packed + r * rb + (j0 / DL_QUANT_CHUNK) * cb;
        if (bits != 8) {
            dl_bitunpack_u8(1, len, bits, codes, buf, 1);
            codes = buf;
        }
        float *o = out + r * dim + j0;
        uint32_t top = 0;
        for (int64_t k = 0; k < len; k++) {
            const uint32_t l = (uint32_t)codes[k] >> 1;
            top = l > top ? l : top;
            const float v = (float)l * scale;
            o[k] = (codes[k] & 1) ? -v : v;
        }
        bad |= top > (uint32_t)levels;
    }
    return bad ? DL_E_FORMAT : DL_OK;
}

/* out (n_rows x dim) = lo + q * scale per bucket (see dl_bucket_encode_f32 for the shapes). */
int dl_bucket_decode_f32(int64_t n_rows, int64_t dim, int bits, int64_t bucket, const float *lo,
                         const float *scale, const uint8_t *packed, float *out, int n_threads) {
    if (n_rows < 0 || dim < 0 || (bits != 4 && bits != 8) || bucket < 1 || n_threads < 1)
        return DL_E_ARG;
    const int64_t nb = dl_cdiv_i64(dim, bucket), rb = dl_bitpack_row_bytes(dim, bits);
    const int64_t n_items = n_rows * nb;
    const float qmax = (float)((1 << bits) - 1);
    int bad = 0;
#ifndef _OPENMP
    (void)n_threads;
#endif
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 32) num_threads(n_threads) reduction(| : bad)           \
    if (n_rows * dim > (1 << 15))
#endif
    for (int64_t it = 0; it < n_items; it++) {
        const int64_t r = it / nb, b = it % nb, j0 = b * bucket;
        const int64_t len = dl_min_i64(bucket, dim - j0);
        const float l = lo[it], s = scale[it];
        if (!q_ok_value(l) || !q_ok_scale(s) || !q_ok_value(l + qmax * s)) {
            bad = 1;
            continue;
        }
        const uint8_t *row = packed + r * rb;
        float *o = out + r * dim + j0;
        if (bits == 8) {
            for (int64_t k = 0; k < len; k++) o[k] = l + (float)row[j0 + k] * s;
        } else { /* two codes a byte, low nibble first: whole bytes, an odd start and end alone */
            int64_t k = 0;
            if ((j0 & 1) && len > 0) o[k++] = l + (float)(row[j0 >> 1] >> 4) * s;
            const uint8_t *pb = row + ((j0 + k) >> 1);
            for (; k + 2 <= len; k += 2, pb++) {
                o[k] = l + (float)(*pb & 15) * s;
                o[k + 1] = l + (float)(*pb >> 4) * s;
            }
            if (k < len) o[k] = l + (float)(*pb & 15) * s;
        }
    }
    return bad ? DL_E_FORMAT : DL_OK;
}

/* The float sign bits of a nibble's four values (bit i set: value i negative). */
#define DL_SIGN_BIT(x, i) ((((x) >> (i)) & 1) ? 0x80000000u : 0u)
#define DL_SIGN_NIBBLE(x) {DL_SIGN_BIT(x, 0), DL_SIGN_BIT(x, 1), DL_SIGN_BIT(x, 2), DL_SIGN_BIT(x, 3)}
static const uint32_t sign_nibble[16][4] = {
    DL_SIGN_NIBBLE(0),  DL_SIGN_NIBBLE(1),  DL_SIGN_NIBBLE(2),  DL_SIGN_NIBBLE(3),
    DL_SIGN_NIBBLE(4),  DL_SIGN_NIBBLE(5),  DL_SIGN_NIBBLE(6),  DL_SIGN_NIBBLE(7),
    DL_SIGN_NIBBLE(8),  DL_SIGN_NIBBLE(9),  DL_SIGN_NIBBLE(10), DL_SIGN_NIBBLE(11),
    DL_SIGN_NIBBLE(12), DL_SIGN_NIBBLE(13), DL_SIGN_NIBBLE(14), DL_SIGN_NIBBLE(15)};

/* out (n_rows x dim) = +-scale[r] from packed sign bits (1 = negative), ceil(dim / 8) bytes a
 * row; -scale is scale with its sign bit set (IEEE negation), written 8 values per byte. */
int dl_sign_decode_f32(int64_t n_rows, int64_t dim, const float *scale, const uint8_t *packed,
                       float *out, int n_threads) {
    if (n_rows < 0 || dim < 0 || n_threads < 1) return DL_E_ARG;
    const int64_t rb = dl_cdiv_i64(dim, 8);
    int bad = 0;
#ifndef _OPENMP
    (void)n_threads;
#endif
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic) num_threads(n_threads) reduction(| : bad)               \
    if (n_rows * dim > (1 << 15))
#endif
    for (int64_t r = 0; r < n_rows; r++) {
        const float s = scale[r];
        if (!q_ok_scale(s)) {
            bad = 1;
            continue;
        }
        const uint8_t *p = packed + r * rb;
        float *o = out + r * dim;
        uint32_t sb;
        memcpy(&sb, &s, sizeof sb);
        int64_t j = 0;
        for (; j + 8 <= dim; j += 8) { /* a byte's 8 values: s with the sign bits of its nibbles */
            const uint8_t b = p[j >> 3];
            uint32_t w[8];
            for (int i = 0; i < 4; i++) {
                w[i] = sb ^ sign_nibble[b & 15][i];
                w[4 + i] = sb ^ sign_nibble[b >> 4][i];
            }
            memcpy(o + j, w, sizeof w);
        }
        for (; j < dim; j++) o[j] = ((p[j >> 3] >> (j & 7)) & 1) ? -s : s;
    }
    return bad ? DL_E_FORMAT : DL_OK;
}

/* out (n_rows x dim) = q * scale[r]; q in [-127, 127]. */
int dl_int8_decode_f32(int64_t n_rows, int64_t dim, const float *scale, const int8_t *q,
                       float *out, int n_threads) {
    if (n_rows < 0 || dim < 0 || n_threads < 1) return DL_E_ARG;
    int bad = 0;
#ifndef _OPENMP
    (void)n_threads;
#endif
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic) num_threads(n_threads) reduction(| : bad)               \
    if (n_rows * dim > (1 << 15))
#endif
    for (int64_t r = 0; r < n_rows; r++) {
        const float s = scale[r];
        if (!q_ok_scale(s) || !q_ok_value(127.0f * s)) {
            bad = 1;
            continue;
        }
        const int8_t *qr = q + r * dim;
        float *o = out + r * dim;
        int lowest = 0;
        for (int64_t j = 0; j < dim; j++) {
            lowest = qr[j] < lowest ? qr[j] : lowest;
            o[j] = (float)qr[j] * s;
        }
        bad |= lowest < -127;
    }
    return bad ? DL_E_FORMAT : DL_OK;
}
