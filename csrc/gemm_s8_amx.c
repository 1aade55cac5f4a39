/* gemm_s8_amx.c: the exact int8 GEMMs on AMX tiles (tdpbssd), packed B in the "vnni" layout.
 *
 * B is packed exactly as for avx512vnni (panels of 64 columns, groups of 4 k values; column j's 4
 * values at byte 4 j of each 256-byte group), so a PackedB and the layout object are shared by the
 * two paths: the 16-column block c of 16 consecutive groups is an AMX B tile (16 rows of 64 bytes)
 * read from the panel with a stride of 256 bytes at byte offset 64 c. A is packed here as rows of
 * 64 consecutive k values (DL_GEMM_AKG: k zero-padded to a multiple of 64, rows to 32), so an A
 * tile is 16 rows at a stride of 64 bytes. tdpbssd multiplies signed by signed bytes into int32
 * without saturation: no +128 shift and no colsum correction, and since the exact sum fits in
 * int32 for k <= DL_GEMM_S8_MAX_K the result equals the other paths' bit for bit. Microkernel: 32
 * rows x 64 columns as two 32 x 32 halves, each 2 A tiles x 2 B tiles -> 4 C tiles (tmm0-3 C,
 * tmm4-5 A, tmm6-7 B). The last k block of a k that is not a multiple of 64 takes its B rows from
 * a zero-padded copy (the packed panel holds only ceil(k / 4) groups). Tile state is per thread:
 * every parallel region loads the tile configuration in each thread before its first tile
 * instruction and releases it after the last (DL_GEMM_THREAD_BEGIN/END). When the compiler lacks
 * AMX, the entry points are defined to refuse (DL_E_ARG, dl_gemm_s8_amx_built = 0) and the
 * dispatch never offers amx; off x86-64 the unit is empty.
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <stdint.h>
#include <string.h>

#include "dl.h"

#if defined(__AMX_TILE__) && defined(__AMX_INT8__)
#include <immintrin.h>

const int dl_gemm_s8_amx_built = 1;

/* The one tile configuration: palette 1, eight tiles of 16 rows x 64 bytes. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} dl_amx_cfg_t;

void dl_amx_tile_begin(void) {
    dl_amx_cfg_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    /* not _tile_loadconfig: GCC 12's operand covers 8 of the 64 bytes, so the compiler drops the
     * stores of the rest */
    __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
}
void dl_amx_tile_end(void) {
    _tile_release();
    _mm_sfence(); /* the non-temporal stores of dl_gemm_store_row, before the region's barrier */
}

#define DL_SUFFIX amx
#define DL_GEMM_MR 32
#define DL_GEMM_NR 64
#define DL_GEMM_KG 4
#define DL_GEMM_AKG 64
#define DL_GEMM_EPI_LANES 16 /* the dense epilogue in zmm registers, as the VNNI build */
#define DL_GEMM_THREAD_BEGIN() dl_amx_tile_begin()
#define DL_GEMM_THREAD_END() dl_amx_tile_end()
typedef int8_t dl_gemm_a_t;
typedef int8_t dl_gemm_b_t;
static inline dl_gemm_a_t dl_gemm_a_conv(int8_t v) { return v; }

#include "gemm_s8_vnni_pack.h"

/* Copies the kr (< 16) groups of the last k block of column blocks c0, c0 + 1 of a panel (bp at
 * the block's first group) into two zero-padded B tiles of 16 rows x 64 bytes. */
static inline void amx_tail_b(const int8_t *bp, int kr, int c0, int8_t tail[2][1024]) {
    memset(tail, 0, 2 * 1024);
    for (int h = 0; h < 2; h++)
        for (int g = 0; g < kr; g++) memcpy(tail[h] + 64 * g, bp + 256 * g + 64 * (c0 + h), 64);
}

/* Rows of 32 results (one half of a 32 x 64 register tile in a tile buffer, row stride 64) still
 * to be written to a 64-byte aligned C with non-temporal stores, int32 as they are or float32
 * float(c) * sc[j] + bias[j] (the FMA the portable store's loop contracts to). amx_half writes
 * a few between its tile instructions, so that the stores of one tile overlap the next tile's
 * multiplies instead of following them. */
typedef struct {
    const int32_t *src;
    char *dst;
    int64_t dst_rs; /* bytes between rows of C */
    int rows;       /* rows left */
    const float *sc, *bias; /* the half's 32 columns, or NULL for int32 */
} amx_pend_t;

static inline void amx_pend_rows(amx_pend_t *p, int r) {
    for (; r > 0 && p->rows > 0; r--, p->rows--, p->src += DL_GEMM_NR, p->dst += p->dst_rs)
        for (int h = 0; h < 2; h++) {
            const __m512i v = _mm512_load_si512((const void *)(p->src + 16 * h));
            if (p->sc == NULL)
                _mm512_stream_si512((void *)(p->dst + 64 * h), v);
            else
                _mm512_stream_ps((float *)(p->dst + 64 * h),
                                 _mm512_fmadd_ps(_mm512_cvtepi32_ps(v),
                                                 _mm512_loadu_ps(p->sc + 16 * h),
                                                 _mm512_loadu_ps(p->bias + 16 * h)));
        }
}

/* C tiles 0-3 += A rows 0-15 (tmm4) and 16-31 (tmm5) x column blocks c0, c0 + 1 of the panel over
 * every k block; stored into tile (32 x 64 int32) at columns 16 c0 ... Only rows 0-15 (C tiles 0
 * and 1) when two_a is 0. pend (may be NULL): rows written two per k block, all by the end. */
/* C tiles 0-3 (tmm0-3) = 0. */
static inline void amx_zero_c(void) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
}

/* One k block: C tiles 0, 1 (and 2, 3 when two_a) += A rows (tmm4, tmm5) x the column blocks b0
 * and b1 (tmm6, tmm7, rows b_stride bytes apart). */
static inline void amx_kblock(const int8_t *a, const int8_t *b0, const int8_t *b1, int b_stride,
                              int two_a) {
    DL_AMX_LOADD(4, a, 64);
    DL_AMX_LOADD(6, b0, b_stride);
    DL_AMX_LOADD(7, b1, b_stride);
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    if (two_a) {
        DL_AMX_LOADD(5, a + 16 * 64, 64);
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
    }
}

/* One k block of C tiles 0-3: A rows 0-15 (tmm4) and 16-31 (tmm5) at a row stride of rs bytes
 * times the column blocks b0, b1 (tmm6, tmm7, rows b_stride bytes apart). */
static inline void amx_kblock_s(const int8_t *a, int64_t rs, const int8_t *b0, const int8_t *b1,
                                int b_stride) {
    DL_AMX_LOADD(4, a, rs);
    DL_AMX_LOADD(6, b0, b_stride);
    DL_AMX_LOADD(7, b1, b_stride);
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    DL_AMX_LOADD(5, a + 16 * rs, rs);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
}

static inline void amx_half_p(int64_t kgn, const int8_t *ap, const int8_t *bp, int c0, int two_a,
                              int32_t *tile, amx_pend_t *pend) {
    const int64_t nkb = kgn / 16, kr = kgn % 16;
    amx_zero_c();
    for (int64_t kb = 0; kb < nkb; kb++) {
        const int8_t *b = bp + kb * 16 * 256 + 64 * c0;
        amx_kblock(ap + kb * DL_GEMM_MR * 64, b, b + 64, 256, two_a);
        if (pend != NULL) amx_pend_rows(pend, 2);
    }
    if (pend != NULL) amx_pend_rows(pend, DL_GEMM_MR);
    if (kr) { /* the last, partial k block: its B rows zero-padded into a local panel */
        int8_t tail[2][1024] __attribute__((aligned(64)));
        amx_tail_b(bp + nkb * 16 * 256, (int)kr, c0, tail);
        amx_kblock(ap + nkb * DL_GEMM_MR * 64, tail[0], tail[1], 64, two_a);
    }
    _tile_stored(0, tile + 16 * c0, DL_GEMM_NR * 4);
    _tile_stored(1, tile + 16 * c0 + 16, DL_GEMM_NR * 4);
    if (two_a) {
        _tile_stored(2, tile + 16 * DL_GEMM_NR + 16 * c0, DL_GEMM_NR * 4);
        _tile_stored(3, tile + 16 * DL_GEMM_NR + 16 * c0 + 16, DL_GEMM_NR * 4);
    }
}
static inline void amx_half(int64_t kgn, const int8_t *ap, const int8_t *bp, int c0, int two_a,
                            int32_t *tile) {
    amx_half_p(kgn, ap, bp, c0, two_a, tile, NULL);
}

/* The first mr (1..32) rows of tile (32 x 64) = packed A tile @ packed B panel over kgn groups of
 * 4 k values (colsum unused: tdpbssd is signed x signed). Up to 16 rows use one A tile. */
#define DL_GEMM_HAVE_UKERNEL_ROWS 1
static inline void dl_gemm_ukernel_rows(int mr, int64_t kgn, const int8_t *ap, const int8_t *bp,
                                        const int32_t *colsum, int32_t *tile) {
    (void)colsum;
    amx_half(kgn, ap, bp, 0, mr > 16, tile);
    amx_half(kgn, ap, bp, 2, mr > 16, tile);
}

/* tile (32 x 64) = packed A tile @ packed B panel over kgn groups of 4 k values. */
static inline void dl_gemm_ukernel(int64_t kgn, const int8_t *ap, const int8_t *bp,
                                   const int32_t *colsum, int32_t *tile) {
    dl_gemm_ukernel_rows(DL_GEMM_MR, kgn, ap, bp, colsum, tile);
}

/* nt (1..4) whole row tiles (32 rows each) x one full panel of 64 columns, computed and written
 * to a wide C (n >= 512: large, written once, not read back by the kernel) whose rows start on
 * 64-byte lines, with non-temporal stores (no read for ownership) that overlap the next half
 * tile's multiplies (amx_pend_t). Returns 0, computing nothing, when C does not qualify; the
 * driver then takes the plain path (dl_gemm_ukernel_multi, gemm_store). */
#define DL_GEMM_HAVE_UKERNEL_STORE 1
static inline int dl_gemm_ukernel_store(int nt, int64_t kgn, const int8_t *ap, int64_t a_tile,
                                        const int8_t *bp, int64_t i0, int64_t m, int64_t j0,
                                        int nv, int64_t n, const dl_gemm_s8_out_t *o,
                                        const float *sc, const float *bias, int32_t *tiles) {
    char *c0p = o->c != NULL ? (char *)(o->c + i0 * n + j0) : (char *)(o->c_f32 + i0 * n + j0);
    if (n < 512 || nv != DL_GEMM_NR || i0 + (int64_t)nt * DL_GEMM_MR > m || (n * 4) % 64 != 0 ||
        (uintptr_t)c0p % 64 != 0)
        return 0;
    amx_pend_t pend = {NULL, NULL, 0, 0, NULL, NULL};
    for (int c0 = 0; c0 < 4; c0 += 2)
        for (int u = 0; u < nt; u++) {
            int32_t *t = tiles + u * DL_GEMM_MR * DL_GEMM_NR;
            amx_half_p(kgn, ap + u * a_tile, bp, c0, 1, t, &pend);
            pend.src = t + 16 * c0;
            pend.dst = c0p + ((int64_t)u * DL_GEMM_MR * n + 16 * c0) * 4;
            pend.dst_rs = n * 4;
            pend.rows = DL_GEMM_MR;
            pend.sc = o->c != NULL ? NULL : sc + j0 + 16 * c0;
            pend.bias = o->c != NULL ? NULL : bias + j0 + 16 * c0;
        }
    amx_pend_rows(&pend, DL_GEMM_MR);
    return 1;
}

/* nt (1..4) row tiles against one panel: per half of the panel's columns, every row tile in turn,
 * so the half panel (32 columns x k) is read from L1 after the first tile and only A streams. */
#define DL_GEMM_UK_TILES 4
static inline void dl_gemm_ukernel_multi(int nt, int64_t kgn, const int8_t *ap, int64_t a_tile,
                                         const int8_t *bp, const int32_t *colsum, int32_t *tiles) {
    (void)colsum;
    for (int c0 = 0; c0 < 4; c0 += 2)
        for (int u = 0; u < nt; u++)
            amx_half(kgn, ap + u * a_tile, bp, c0, 1, tiles + u * DL_GEMM_MR * DL_GEMM_NR);
}

/* Epilogue of rows r0 .. r1 - 1 of the half (columns 16 h0 .. 16 h0 + 31) of a 32 x 64 tile
 * buffer: c[r, j] = act(float(t) * s + bv[j]) for the nv valid columns, act the ReLU (v <= 0 ->
 * +0, NaN kept) or the mask factor ((mask[r, j] > 0) ? 1 : 0, NULL: none); the same operations as
 * gemm_dense_row's, so the same bits. */
static inline void amx_epi_rows(const int32_t *tile, int r0, int r1, int h0, int nv, float s,
                                const float *bv, int relu, const float *mask, int64_t m_rs,
                                float *c, int64_t c_rs) {
    const __m512 sv = _mm512_set1_ps(s);
    for (int h = h0; h < h0 + 2; h++) {
        if (16 * h >= nv) break;
        const __mmask16 k = dl_epi_mask(nv - 16 * h);
        const __m512 b = _mm512_loadu_ps(bv + 16 * h);
        for (int r = r0; r < r1; r++)
            dl_epi16(_mm512_load_si512((const void *)(tile + r * DL_GEMM_NR + 16 * h)), sv, b,
                     relu, mask != NULL ? mask + r * m_rs + 16 * h : NULL, k,
                     c + r * c_rs + 16 * h);
    }
}

/* The fused dense layer's full row tiles (gemm_dense_mm; see the VNNI build): 32 rows of A, its
 * packed tile (packed: rows of 64 k values, a_rs unused) or signed codes read in place (row r at
 * a + r * a_rs; k = 4 kgn, then a multiple of 64: whole k blocks), against one panel; the
 * epilogue from the tile buffer in zmm registers. Per half of the panel's columns the tiles are
 * computed and stored, and the previous half's rows are finished between the k blocks (their
 * stores then overlap the multiplies). A last partial k block (packed A only) takes its B rows
 * from a zero-padded copy, as amx_half_p. */
#define DL_GEMM_HAVE_UKERNEL_EPI 1
#define DL_GEMM_EPI_KALIGN 64
static inline void dl_gemm_ukernel_epi(int64_t kgn, const int8_t *a, int64_t a_rs, int packed,
                                       const int8_t *bp, const int32_t *colsum, float s,
                                       const float *bv, int relu, const float *mask, int64_t m_rs,
                                       float *c, int64_t c_rs, int nv) {
    (void)colsum;
    int32_t tile[DL_GEMM_MR * DL_GEMM_NR] __attribute__((aligned(64)));
    const int64_t nkb = kgn / 16, kr = kgn % 16;
    const int64_t rs = packed ? 64 : a_rs, kb_step = packed ? DL_GEMM_MR * 64 : 64;
    int done = DL_GEMM_MR; /* rows of the previous half still to finish: none */
    for (int c0 = 0; c0 < 4 && 16 * c0 < nv; c0 += 2) {
        amx_zero_c();
        for (int64_t kb = 0; kb < nkb; kb++) {
            const int8_t *b = bp + kb * 16 * 256 + 64 * c0;
            amx_kblock_s(a + kb * kb_step, rs, b, b + 64, 256);
            if (done < DL_GEMM_MR) { /* four rows of the previous half */
                const int r1 = done + 4 < DL_GEMM_MR ? done + 4 : DL_GEMM_MR;
                amx_epi_rows(tile, done, r1, c0 - 2, nv, s, bv, relu, mask, m_rs, c, c_rs);
                done = r1;
            }
        }
        if (kr) {
            int8_t tail[2][1024] __attribute__((aligned(64)));
            amx_tail_b(bp + nkb * 16 * 256, (int)kr, c0, tail);
            amx_kblock_s(a + nkb * kb_step, rs, tail[0], tail[1], 64);
        }
        if (done < DL_GEMM_MR)
            amx_epi_rows(tile, done, DL_GEMM_MR, c0 - 2, nv, s, bv, relu, mask, m_rs, c, c_rs);
        _tile_stored(0, tile + 16 * c0, DL_GEMM_NR * 4);
        _tile_stored(1, tile + 16 * c0 + 16, DL_GEMM_NR * 4);
        _tile_stored(2, tile + 16 * DL_GEMM_NR + 16 * c0, DL_GEMM_NR * 4);
        _tile_stored(3, tile + 16 * DL_GEMM_NR + 16 * c0 + 16, DL_GEMM_NR * 4);
        done = 0;
    }
    amx_epi_rows(tile, done, DL_GEMM_MR, nv > 32 ? 2 : 0, nv, s, bv, relu, mask, m_rs, c, c_rs);
}

/* The fused dense layer's tile builds get their own names; the public entry points below choose
 * between them and the VNNI builds. */
#define dl_gemm_s8_amx dl_gemm_s8_amx_tiles
#define dl_gemm_s8_batched_amx dl_gemm_s8_batched_amx_tiles
#define dl_gemm_s8_dense_forward_amx dl_gemm_s8_dense_forward_amx_tiles
#define dl_gemm_s8_dense_backward_amx dl_gemm_s8_dense_backward_amx_tiles
#define DL_GEMM_NO_CONV /* the convolutions' products run the VNNI build (below) */
#include "gemm_s8_impl.h"
#undef dl_gemm_s8_amx
#undef dl_gemm_s8_batched_amx
#undef dl_gemm_s8_dense_forward_amx
#undef dl_gemm_s8_dense_backward_amx

/* Products of fewer than 32 rows (a GEMV, a convolution's few output channels) or over fewer than
 * 64 k values (a convolution's input gradient over its few output channels) run the VNNI build: a
 * 32-row tile or a 64-value k block would be mostly padding. The same exact sums, so the same
 * results. */
#define DL_AMX_SMALL(m, k) ((m) < DL_GEMM_MR || (k) < 64)
int dl_gemm_s8_amx(int64_t m, int64_t k, int64_t n, const int8_t *a, const uint8_t *packed,
                   const int32_t *colsum, const dl_gemm_s8_out_t *out, int n_threads) {
    if (DL_AMX_SMALL(m, k))
        return dl_gemm_s8_avx512vnni(m, k, n, a, packed, colsum, out, n_threads);
    return dl_gemm_s8_amx_tiles(m, k, n, a, packed, colsum, out, n_threads);
}
int dl_gemm_s8_batched_amx(const dl_gemm_s8_batch_t *bt, int n_threads) {
    if (bt != NULL && DL_AMX_SMALL(bt->m, bt->k))
        return dl_gemm_s8_batched_avx512vnni(bt, n_threads);
    return dl_gemm_s8_batched_amx_tiles(bt, n_threads);
}

/* The fused int8 dense layer: a batch below 64 rows runs the VNNI build (the same exact products,
 * so the same results): its per-peer products are too small for 32-row tiles and 64-value k
 * blocks (dW multiplies over the batch), measured 0.93-0.96x the VNNI build at batch 32 on the
 * MLP's layers, 1.02x at 64-128, 1.23x at 256 (docs/performance.md). */
#define DL_AMX_DENSE_MIN_BATCH 64
int dl_gemm_s8_dense_forward_amx(const dl_gemm_s8_dense_t *d, int n_threads) {
    if (d != NULL && d->batch < DL_AMX_DENSE_MIN_BATCH)
        return dl_gemm_s8_dense_forward_avx512vnni(d, n_threads);
    return dl_gemm_s8_dense_forward_amx_tiles(d, n_threads);
}
int dl_gemm_s8_dense_backward_amx(const dl_gemm_s8_dense_t *d, int n_threads) {
    if (d != NULL && d->batch < DL_AMX_DENSE_MIN_BATCH)
        return dl_gemm_s8_dense_backward_avx512vnni(d, n_threads);
    return dl_gemm_s8_dense_backward_amx_tiles(d, n_threads);
}

/* Conv2d's int8 products have the few output channels on a side (the input gradient multiplies
 * over them, k = Cout below a tile's 64-value k block; the forward has Cout rows, below a tile's
 * 32; the weight gradient has Cout rows too): the VNNI build, the same exact sums. */
#define DL_AMX_VIA_VNNI(name, type)                                                                \
    int name##_amx(const type *d, int n_threads) { return name##_avx512vnni(d, n_threads); }
DL_AMX_VIA_VNNI(dl_gemm_s8_conv_fwd, dl_gemm_s8_conv_fwd_t)
DL_AMX_VIA_VNNI(dl_gemm_s8_conv_wgrad, dl_gemm_s8_conv_wgrad_t)
DL_AMX_VIA_VNNI(dl_gemm_s8_conv_dgrad, dl_gemm_s8_conv_dgrad_t)

#else /* the compiler lacks AMX: entry points that refuse (DL_E_ARG); dl_isa_supported never
       * offers amx in such a build, so the dispatch does not reach them */
const int dl_gemm_s8_amx_built = 0;
void dl_amx_tile_begin(void) {}
void dl_amx_tile_end(void) {}
int dl_gemm_s8_amx(int64_t m, int64_t k, int64_t n, const int8_t *a, const uint8_t *packed,
                   const int32_t *colsum, const dl_gemm_s8_out_t *out, int n_threads) {
    (void)m, (void)k, (void)n, (void)a, (void)packed, (void)colsum, (void)out, (void)n_threads;
    return DL_E_ARG;
}
#define DL_AMX_REFUSE(fn, type)                                                                    \
    int fn(const type *d, int n_threads) {                                                         \
        (void)d, (void)n_threads;                                                                  \
        return DL_E_ARG;                                                                           \
    }
DL_AMX_REFUSE(dl_gemm_s8_batched_amx, dl_gemm_s8_batch_t)
DL_AMX_REFUSE(dl_gemm_s8_dense_forward_amx, dl_gemm_s8_dense_t)
DL_AMX_REFUSE(dl_gemm_s8_dense_backward_amx, dl_gemm_s8_dense_t)
DL_AMX_REFUSE(dl_gemm_s8_conv_fwd_amx, dl_gemm_s8_conv_fwd_t)
DL_AMX_REFUSE(dl_gemm_s8_conv_wgrad_amx, dl_gemm_s8_conv_wgrad_t)
DL_AMX_REFUSE(dl_gemm_s8_conv_dgrad_amx, dl_gemm_s8_conv_dgrad_t)
#endif
#else
typedef int dl_gemm_s8_amx_unused;
#endif
