/* stc.c: the Golomb/Rice position coder of Sparse Ternary Compression (Sattler et al., 2019).
 *
 * A row's kept positions (strictly increasing, in [0, dim)) and their sign bits become one bit
 * string. With Rice parameter b (M = 2^b), each position in turn writes gap = pos - prev - 1
 * (prev = -1 before the first): the quotient q = gap >> b in unary (q one-bits, then a zero-bit),
 * the remainder gap & (M - 1) in b bits (least significant first), then one sign bit (1 means
 * negative). Bits go LSB-first into bytes, as in bitpack.c; pad bits after the last are zero. Sum
 * of the quotients is at most (dim - k) >> b, so dl_stc_golomb_max_bits bounds every row. Rows are
 * independent and coded in parallel (one long row in fixed chunks: encode_row_par); the decoder
 * treats its input as untrusted and returns DL_E_FORMAT for anything but exactly k valid positions
 * that use exactly nbits bits.
 */
#include <stdlib.h>
#include <string.h>

#include "dl.h"

#define DL_STC_CHUNK 4096 /* values per chunk of the ternary sums (stc_ternary) */
/* positions per chunk of one long row coded on several threads: 1,024 gives 16 threads work from
 * k = 16,384 (STC at p = 0.001 of 25M values: 25 chunks) */
#define DL_STC_CODE_CHUNK 1024

int64_t dl_stc_golomb_max_bits(int64_t k, int64_t dim, int b) {
    if (k < 0 || dim < 0 || k > dim || b < 0 || b > DL_STC_MAX_B) return -1;
    return ((dim - k) >> b) + k * (int64_t)(b + 2);
}

/* Little-endian bit writer into a bounded buffer; `over` is set instead of writing past `cap`. */
typedef struct {
    uint8_t *out;
    int64_t cap, o;
    uint64_t acc;
    int fill, over;
} bitw_t;

/* Appends the low n (<= 32) bits of v. */
static inline void bitw_put(bitw_t *w, uint64_t v, int n) {
    w->acc |= v << w->fill;
    w->fill += n;
    if (w->fill >= 32) {
        if (w->o + 4 <= w->cap) {
            w->out[w->o] = (uint8_t)w->acc;
            w->out[w->o + 1] = (uint8_t)(w->acc >> 8);
            w->out[w->o + 2] = (uint8_t)(w->acc >> 16);
            w->out[w->o + 3] = (uint8_t)(w->acc >> 24);
        } else {
            w->over = 1;
        }
        w->o += 4;
        w->acc >>= 32;
        w->fill -= 32;
    }
}

static int encode_row(const int32_t *pos, const uint8_t *neg, int64_t k, int64_t dim, int b,
                      uint8_t *out, int64_t row_bytes, int64_t *nbits) {
    bitw_t w = {out, row_bytes, 0, 0, 0, 0};
    int64_t prev = -1, total = 0;
    const uint64_t rmask = ((uint64_t)1 << b) - 1;
    for (int64_t i = 0; i < k; i++) {
        const int64_t p = pos[i];
        if (p <= prev || p >= dim) return DL_E_ARG;
        const uint64_t gap = (uint64_t)(p - prev - 1);
        uint64_t q = gap >> b;
        const uint64_t tail = (gap & rmask) | ((uint64_t)(neg[i] != 0) << b);
        total += (int64_t)q + b + 2;
        if (q + b + 2 <= 32) { /* the usual case: one put of q ones, the zero and the tail */
            bitw_put(&w, (((uint64_t)1 << q) - 1) | (tail << (q + 1)), (int)q + b + 2);
        } else {
            for (; q >= 32; q -= 32) bitw_put(&w, 0xffffffffu, 32);
            bitw_put(&w, ((uint64_t)1 << q) - 1, (int)q + 1); /* q ones, then the zero */
            bitw_put(&w, tail, b + 1);
        }
        prev = p;
    }
    /* flush the partial word, then zero the rest of the row */
    if (w.over || w.o + (w.fill + 7) / 8 > row_bytes) return DL_E_SPACE;
    for (; w.fill > 0; w.fill -= 8, w.acc >>= 8) out[w.o++] = (uint8_t)w.acc;
    memset(out + w.o, 0, (size_t)(row_bytes - w.o));
    *nbits = total;
    return DL_OK;
}

/* Appends one byte of a chunk's code: byte `skip` (the one it shares with the chunk before, or
 * -1) goes to *head, to be OR'ed in after every chunk is written. */
static inline void chunk_byte(uint8_t *out, int64_t *o, int64_t skip, uint8_t *head, uint8_t v) {
    if (*o == skip)
        *head = v;
    else
        out[*o] = v;
    (*o)++;
}

/* Appends the low n (<= 32) bits of v, flushing whole 32-bit words as bytes. */
static inline void chunk_put(uint8_t *out, int64_t *o, int64_t skip, uint8_t *head, uint64_t *acc,
                             int *fill, uint64_t v, int n) {
    *acc |= v << *fill;
    *fill += n;
    if (*fill >= 32) {
        if (*o > skip) { /* past the shared byte: four plain stores */
            for (int j = 0; j < 4; j++) out[*o + j] = (uint8_t)(*acc >> (8 * j));
            *o += 4;
        } else {
            for (int j = 0; j < 4; j++) chunk_byte(out, o, skip, head, (uint8_t)(*acc >> (8 * j)));
        }
        *acc >>= 32;
        *fill -= 32;
    }
}

/* encode_row for one long row on nt threads, byte for byte the same: fixed chunks of
 * DL_STC_CODE_CHUNK positions count their bits (the gap of a chunk's first position is taken
 * from the last one of the chunk before), a prefix sum in chunk order gives each its bit offset,
 * and each writes its code there. A byte holding the end of one chunk and the start of the next
 * is written by the first; the second's bits in it are OR'ed in afterwards, in order. */
static int encode_row_par(const int32_t *pos, const uint8_t *neg, int64_t k, int64_t dim, int b,
                          uint8_t *out, int64_t row_bytes, int64_t *nbits, int nt) {
    const int64_t nc = dl_cdiv_i64(k, DL_STC_CODE_CHUNK);
    int64_t *off = malloc((size_t)(nc + 1) * sizeof(int64_t));
    uint8_t *head = calloc((size_t)nc, 1);
    if (off == NULL || head == NULL) {
        free(off);
        free(head);
        return DL_E_NOMEM;
    }
    const uint64_t rmask = ((uint64_t)1 << b) - 1;
    int bad = 0;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) reduction(| : bad)
#endif
    for (int64_t c = 0; c < nc; c++) {
        const int64_t i0 = c * DL_STC_CODE_CHUNK, i1 = dl_min_i64(k, i0 + DL_STC_CODE_CHUNK);
        int64_t prev = i0 > 0 ? pos[i0 - 1] : -1, bits = 0;
        for (int64_t i = i0; i < i1; i++) {
            const int64_t p = pos[i];
            if (p <= prev || p >= dim) { /* (an invalid pos[i0 - 1] fails in chunk c - 1) */
                bad = 1;
                break;
            }
            bits += ((p - prev - 1) >> b) + b + 2;
            prev = p;
        }
        off[c + 1] = bits;
    }
    int status = DL_OK;
    off[0] = 0;
    for (int64_t c = 0; c < nc; c++) off[c + 1] += off[c];
    if (bad)
        status = DL_E_ARG;
    else if ((off[nc] + 7) / 8 > row_bytes)
        status = DL_E_SPACE;
    if (status == DL_OK) {
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
        for (int64_t c = 0; c < nc; c++) {
            const int64_t i0 = c * DL_STC_CODE_CHUNK, i1 = dl_min_i64(k, i0 + DL_STC_CODE_CHUNK);
            int64_t o = off[c] >> 3, prev = i0 > 0 ? pos[i0 - 1] : -1;
            const int64_t skip = (off[c] & 7) ? o : -1;
            uint64_t acc = 0;
            int fill = (int)(off[c] & 7);
            for (int64_t i = i0; i < i1; i++) {
                const uint64_t gap = (uint64_t)(pos[i] - prev - 1);
                uint64_t q = gap >> b;
                const uint64_t tail = (gap & rmask) | ((uint64_t)(neg[i] != 0) << b);
                if (q + b + 2 <= 32) {
                    chunk_put(out, &o, skip, &head[c], &acc, &fill,
                              (((uint64_t)1 << q) - 1) | (tail << (q + 1)), (int)q + b + 2);
                } else {
                    for (; q >= 32; q -= 32)
                        chunk_put(out, &o, skip, &head[c], &acc, &fill, 0xffffffffu, 32);
                    chunk_put(out, &o, skip, &head[c], &acc, &fill, ((uint64_t)1 << q) - 1,
                              (int)q + 1);
                    chunk_put(out, &o, skip, &head[c], &acc, &fill, tail, b + 1);
                }
                prev = pos[i];
            }
            for (; fill > 0; fill -= 8, acc >>= 8)
                chunk_byte(out, &o, skip, &head[c], (uint8_t)acc);
        }
        for (int64_t c = 1; c < nc; c++)
            if (off[c] & 7) out[off[c] >> 3] |= head[c];
        const int64_t used = (off[nc] + 7) / 8;
        memset(out + used, 0, (size_t)(row_bytes - used));
        *nbits = off[nc];
    }
    free(off);
    free(head);
    return status;
}

/* data (n_rows x row_bytes) and nbits (n_rows) from positions and negative (n_rows x k, uint8 0/1
 * or any non-zero for negative); DL_E_ARG if a row's positions are not strictly increasing in
 * [0, dim), DL_E_SPACE if a row does not fit (never with row_bytes >= ceil(max_bits / 8)). Bytes
 * after each row's code are zeroed. Rows in parallel. */
int dl_stc_golomb_encode(int64_t n_rows, int64_t k, int64_t dim, int b, const int32_t *positions,
                         const uint8_t *negative, uint8_t *data, int64_t row_bytes, int64_t *nbits,
                         int n_threads) {
    if (n_rows < 0 || k < 0 || dim < 0 || k > dim || b < 0 || b > DL_STC_MAX_B ||
        row_bytes < 0 || n_threads < 1)
        return DL_E_ARG;
    int status = DL_OK;
    if (n_threads > 1 && n_rows < n_threads && k >= 2 * DL_STC_CODE_CHUNK) { /* few long rows */
        for (int64_t r = 0; r < n_rows && status == DL_OK; r++)
            status = encode_row_par(positions + r * k, negative + r * k, k, dim, b,
                                    data + r * row_bytes, row_bytes, nbits + r, n_threads);
        return status;
    }
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(n_threads)                        \
    if (n_rows > 1 && n_rows * k > (1 << 16)) reduction(min : status)
#endif
    for (int64_t r = 0; r < n_rows; r++) {
        int s = encode_row(positions + r * k, negative + r * k, k, dim, b, data + r * row_bytes,
                           row_bytes, nbits + r);
        if (s < status) status = s;
    }
    return status;
}

/* ---- the ternary values: mean kept magnitude and signs ----------------------------------------
 * STC sends each kept value as sign * mu, mu = float32(sum |val| / k) with the sum in float64 (the
 * NumPy expression np.abs(val).sum(axis=1, dtype=np.float64), which sums in its own order). The
 * sum is taken here in fixed chunks, in parallel, and flagged exact when no order can round it:
 * every |val| is a multiple of q, the spacing of the smallest non-zero one's binade (2^(E - 150)
 * for biased exponent E, 2^-149 for subnormals), so every partial sum of these non-negative terms
 * is a multiple of q no larger than the total, and a float64 holds every such multiple up to
 * 2^53 q exactly. Requiring total <= 2^52 q (a margin far above the rounding of the check's own
 * sum) makes the result independent of the order, hence NumPy's. Rows not flagged (magnitudes
 * spread over more than about 2^29 / k, or not finite) are left to the caller. */
static void stc_abs_part(const float *v, int64_t n, uint8_t *neg, double *sum, uint32_t *emin,
                         uint32_t *emax) {
    /* three simple loops the compiler vectorizes: signs, the sum, the extreme magnitudes (the
     * bits of |x| order like |x|; a zero counts as the largest finite bits for the minimum) */
    for (int64_t i = 0; i < n; i++) neg[i] = v[i] < 0.0f;
    double acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += (double)__builtin_fabsf(v[i + l]);
    for (; i < n; i++) acc[0] += (double)__builtin_fabsf(v[i]);
    *sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    int32_t lo = 0x7f7fffff, hi = 0;
    for (int64_t j = 0; j < n; j++) {
        int32_t a;
        memcpy(&a, v + j, sizeof a);
        a &= 0x7fffffff;
        const int32_t az = a ? a : 0x7f7fffff;
        lo = az < lo ? az : lo;
        hi = a > hi ? a : hi;
    }
    const uint32_t elo = (uint32_t)lo >> 23;
    *emin = n == 0 || (lo == 0x7f7fffff && hi == 0) ? 0xffu : (elo ? elo : 1u);
    *emax = (uint32_t)hi >> 23;
}

/* negative (n_rows x k) = val < 0; sums[r] = sum of |val[r]| (float64); exact[r] = 1 when that sum
 * is exact in any order (see above), 0 otherwise (sums[r] then approximate). Fixed chunks of
 * DL_STC_CHUNK values, combined in order: the same bits for every thread count. */
int dl_stc_ternary_f32(int64_t n_rows, int64_t k, const float *val, uint8_t *negative,
                       double *sums, uint8_t *exact, int n_threads) {
    if (n_rows < 0 || k < 0 || n_threads < 1) return DL_E_ARG;
    if (n_rows == 0) return DL_OK;
    const int64_t cpr = dl_max_i64(1, dl_cdiv_i64(k, DL_STC_CHUNK)), n_tiles = n_rows * cpr;
    double *part = malloc((size_t)n_tiles * sizeof(double));
    uint32_t *ex = malloc((size_t)n_tiles * 2 * sizeof(uint32_t));
    if (part == NULL || ex == NULL) {
        free(part);
        free(ex);
        return DL_E_NOMEM;
    }
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads((int)dl_min_i64(n_threads, n_tiles)) \
    if (n_tiles > 1 && n_rows * k > (1 << 15))
#else
    (void)n_threads;
#endif
    for (int64_t t = 0; t < n_tiles; t++) {
        const int64_t r = t / cpr, i0 = (t % cpr) * DL_STC_CHUNK;
        const int64_t n = dl_max_i64(0, dl_min_i64(DL_STC_CHUNK, k - i0));
        stc_abs_part(val + r * k + i0, n, negative + r * k + i0, part + t, ex + 2 * t,
                     ex + 2 * t + 1);
    }
    for (int64_t r = 0; r < n_rows; r++) {
        double s = 0.0;
        uint32_t lo = 0xffu, hi = 0;
        for (int64_t c = 0; c < cpr; c++) {
            const int64_t t = r * cpr + c;
            s += part[t];
            lo = ex[2 * t] < lo ? ex[2 * t] : lo;
            hi = ex[2 * t + 1] > hi ? ex[2 * t + 1] : hi;
        }
        sums[r] = s;
        /* q = 2^(lo - 150); s <= 2^52 q, written without forming q (lo may be 1) */
        exact[r] = hi < 0xffu && (lo == 0xffu || s <= __builtin_ldexp(1.0, (int)lo - 98));
    }
    free(part);
    free(ex);
    return DL_OK;
}

/* 64 bits of `in` (n bytes) starting at bit `bit`; bytes past n read as zero. At least 57 of the
 * returned bits come from the stream (the top ones may be zeros from shifting). */
static inline uint64_t load_bits(const uint8_t *in, int64_t n, int64_t bit) {
    const int64_t byte = bit >> 3;
    uint64_t v = 0;
    if (byte + 8 <= n) {
        for (int j = 0; j < 8; j++) v |= (uint64_t)in[byte + j] << (8 * j);
    } else {
        for (int64_t j = 0; byte + j < n; j++) v |= (uint64_t)in[byte + j] << (8 * j);
    }
    return v >> (bit & 7);
}

static int decode_row(const uint8_t *in, int64_t row_bytes, int64_t nbits, int64_t k, int64_t dim,
                      int b, int32_t *pos, uint8_t *neg) {
    if (nbits < 0 || nbits > 8 * row_bytes) return DL_E_FORMAT;
    const int64_t max_bits = dl_stc_golomb_max_bits(k, dim, b);
    if (nbits > max_bits) return DL_E_FORMAT;
    const int64_t n = (nbits + 7) / 8; /* the code's bytes; later ones are not looked at */
    if (nbits & 7) {
        if (in[n - 1] >> (nbits & 7)) return DL_E_FORMAT; /* non-zero pad bits */
    }
    const uint64_t rmask = ((uint64_t)1 << b) - 1;
    int64_t bit = 0, prev = -1;
    for (int64_t i = 0; i < k; i++) {
        if (prev + 1 >= dim) return DL_E_FORMAT;
        /* the largest quotient that keeps this position below dim */
        const int64_t qmax = (dim - prev - 2) >> b;
        int64_t q = 0;
        for (;;) {
            const int64_t avail = dl_min_i64(57, nbits - bit);
            if (avail <= 0) return DL_E_FORMAT;
            const uint64_t window = load_bits(in, n, bit);
            const int64_t ones = ~window ? (int64_t)__builtin_ctzll(~window) : 64;
            if (ones < avail) {
                q += ones;
                bit += ones + 1;
                break;
            }
            q += avail;
            bit += avail;
            if (q > qmax) return DL_E_FORMAT;
        }
        if (q > qmax || nbits - bit < b + 1) return DL_E_FORMAT;
        const uint64_t tail = load_bits(in, n, bit); /* b + 1 <= 32 bits */
        bit += b + 1;
        const int64_t p = prev + 1 + (int64_t)(((uint64_t)q << b) | (tail & rmask));
        if (p >= dim) return DL_E_FORMAT;
        pos[i] = (int32_t)p;
        neg[i] = (uint8_t)((tail >> b) & 1);
        prev = p;
    }
    return bit == nbits ? DL_OK : DL_E_FORMAT;
}

/* positions (n_rows x k int32) and negative (n_rows x k, 0/1) from data (n_rows x row_bytes) and
 * nbits (n_rows): untrusted input, DL_E_FORMAT unless every row holds exactly k positions in
 * [0, dim) that use exactly nbits[r] <= 8 * row_bytes bits with zero pad bits. Rows in parallel;
 * outputs of a malformed row are unspecified. */
int dl_stc_golomb_decode(int64_t n_rows, int64_t k, int64_t dim, int b, const uint8_t *data,
                         int64_t row_bytes, const int64_t *nbits, int32_t *positions,
                         uint8_t *negative, int n_threads) {
    if (n_rows < 0 || k < 0 || dim < 0 || k > dim || dim > INT32_MAX || b < 0 ||
        b > DL_STC_MAX_B || row_bytes < 0 || n_threads < 1)
        return DL_E_ARG;
    int status = DL_OK;
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(n_threads)                        \
    if (n_rows > 1 && n_rows * k > (1 << 16)) reduction(min : status)
#endif
    for (int64_t r = 0; r < n_rows; r++) {
        int s = decode_row(data + r * row_bytes, row_bytes, nbits[r], k, dim, b, positions + r * k,
                           negative + r * k);
        if (s < status) status = s;
    }
    return status;
}
