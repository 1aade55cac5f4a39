/* dl.h: types, status codes and small helpers shared by every decentlearn kernel.
 *
 * Kernels in csrc/ work on raw pointers and sizes, never include Python.h, and report failure
 * through a negative DL_E_* status that the glue (module.c) turns into a Python exception naming
 * the argument at fault. Each kernel family that has ISA-specific builds declares one symbol per
 * ISA (suffix _generic, _avx2, _avx512, _avx512vnni, _amx) and is reached through the dispatch
 * table below, filled once at import from __builtin_cpu_supports and CPUID/XCR0 (AMX), or forced
 * with DECENTLEARN_ISA.
 */
#ifndef DL_H
#define DL_H

#include <stddef.h>
#include <stdint.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* Status codes. 0 is success; every failure is negative. */
enum {
    DL_OK = 0,
    DL_E_ARG = -1,    /* a size or count is out of range */
    DL_E_INDPTR = -2, /* CSR indptr is not 0-based, non-decreasing, ending at nnz */
    DL_E_INDEX = -3,  /* CSR column index outside [0, n_cols) */
    DL_E_NOMEM = -4,  /* allocation failed */
    DL_E_NONFINITE = -5, /* an input value is NaN or infinite where a finite one is required */
    DL_E_FORMAT = -6,    /* encoded bytes are malformed (from an untrusted peer): never trusted */
    DL_E_SPACE = -7,     /* an output buffer is too small for the result */
    DL_E_RANGE = -8,     /* an input value is outside the range the kernel accepts */
};

/* A read-only CSR matrix with float32 values, as the gossip kernel consumes it. */
typedef struct {
    int64_t n_rows;
    int64_t n_cols;
    const int64_t *indptr;  /* n_rows + 1 entries */
    const int32_t *indices; /* indptr[n_rows] entries */
    const float *data;      /* indptr[n_rows] entries */
} dl_csr_f32_t;

/* Instruction-set paths, best last. */
typedef enum {
    DL_ISA_GENERIC = 0,
    DL_ISA_AVX2 = 1,
    DL_ISA_AVX512 = 2,     /* F, BW, VL, DQ */
    DL_ISA_AVX512VNNI = 3, /* the above + VNNI (vpdpbusd): int8 dot products */
    DL_ISA_AMX = 4,        /* the above + AMX-TILE, AMX-INT8 (tdpbssd), enabled by the OS */
    DL_ISA_COUNT = 5
} dl_isa_t;

typedef int (*dl_gossip_csr_f32_fn)(const dl_csr_f32_t *w, int64_t dim, const float *x, float *y,
                                    int n_threads);

/* Function types of the kernels with ISA-specific builds, per family. */
/* >>> dispatch-types natural */
typedef int (*dl_natural_encode_f32_fn)(int64_t n_rows, int64_t dim, const float *x, uint64_t seed,
                                        uint64_t step, int64_t peer0, uint8_t *codes,
                                        int n_threads);
typedef int (*dl_natural_decode_f32_fn)(int64_t n_rows, int64_t dim, const uint8_t *codes,
                                        float *y, int n_threads);
typedef int (*dl_natural_dither_encode_f32_fn)(int64_t n_rows, int64_t dim, const float *x, int s,
                                               float p, uint64_t seed, uint64_t step,
                                               int64_t peer0, float *norms, uint8_t *codes,
                                               int n_threads);
typedef int (*dl_natural_dither_decode_f32_fn)(int64_t n_rows, int64_t dim, const float *norms,
                                               const uint8_t *codes, int s, float *y,
                                               int n_threads);
/* <<< dispatch-types natural */
/* >>> dispatch-types topk */
typedef int64_t (*dl_topk_filter_f32_fn)(const float *x, int64_t i0, int64_t i1, uint32_t t,
                                        int64_t cap, int32_t *idx, uint32_t *bits, int32_t *hist);
typedef int64_t (*dl_topk_randfilter_u32_fn)(uint64_t key, int64_t i0, int64_t i1, uint32_t t,
                                            int64_t cap, int32_t *idx, uint32_t *score);
typedef int64_t (*dl_topk_count_f32_fn)(const float *x, int64_t n, uint32_t t, int64_t *n_nan);
typedef int64_t (*dl_topk_compact_u32_fn)(const int32_t *idx, const uint32_t *bits, int64_t n,
                                         uint32_t mask, uint32_t t, int64_t cap, int32_t *oi,
                                         uint32_t *ob);
/* <<< dispatch-types topk */
/* >>> dispatch-types quant */
typedef int (*dl_qsgd_encode_f32_fn)(int64_t n_rows, int64_t dim, int levels, const float *x,
                                     uint64_t seed, uint64_t step, int64_t peer0, float *norm,
                                     uint8_t *packed, int n_threads);
typedef int (*dl_bucket_encode_f32_fn)(int64_t n_rows, int64_t dim, int bits, int64_t bucket,
                                       const float *x, uint64_t seed, uint64_t step, int64_t peer0,
                                       float *lo, float *scale, uint8_t *packed, int n_threads);
typedef int (*dl_sign_encode_f32_fn)(int64_t n_rows, int64_t dim, const float *x, float *scale,
                                     uint8_t *packed, int n_threads);
typedef int (*dl_int8_encode_f32_fn)(int64_t n_rows, int64_t dim, const float *x, uint64_t seed,
                                     uint64_t step, int64_t peer0, float *scale, int8_t *q,
                                     int n_threads);
/* <<< dispatch-types quant */
/* >>> dispatch-types gemm */
/* Where a packed B's bytes go (one layout per microkernel family; see gemm_s8_impl.h). */
typedef struct {
    const char *name; /* "s16" (generic, avx2, avx512) or "vnni" (avx512vnni, amx) */
    int mr, nr, kg;   /* register tile rows x columns; k values per group */
    int b_elem;       /* bytes per packed B value */
} dl_gemm_s8_layout_t;
/* How gemm_s8 stores its tile: exact int32 into c, or c_f32 = c * a_scale * b_scale[j] + bias[j]. */
typedef struct {
    int32_t *c;          /* (m, n) int32 output, or NULL when c_f32 is used */
    float *c_f32;        /* (m, n) float32 output, or NULL */
    float a_scale;       /* per-tensor scale of A */
    const float *b_scale; /* b_scale_n values: 1 (per tensor) or n (per output column) */
    int64_t b_scale_n;
    const float *bias; /* n values or NULL */
} dl_gemm_s8_out_t;
typedef int (*dl_gemm_s8_pack_b_fn)(int64_t k, int64_t n, const int8_t *b, uint8_t *packed,
                                    int32_t *colsum, int n_threads);
typedef int (*dl_gemm_s8_fn)(int64_t m, int64_t k, int64_t n, const int8_t *a,
                             const uint8_t *packed, const int32_t *colsum,
                             const dl_gemm_s8_out_t *out, int n_threads);
/* Row-segment cores of the quantizer: nearest-even codes of x[j] * (inv ? inv[j] : inv0), and the
 * largest |x| bit pattern (>= 0x7f800000: NaN or infinity). */
typedef uint32_t (*dl_gemm_qnearest_f32_fn)(const float *x, const float *inv, float inv0,
                                            int64_t n, int8_t *q);
typedef uint32_t (*dl_gemm_absmax_bits_f32_fn)(const float *x, int64_t n);
/* Stochastic rounding core: floor(v) + (u < v - floor(v)) for v = clamp(x[j] * (inv ? inv[j] :
 * inv0)), u = dl_rng_unit(key, j0 + j); returns the largest |x| bit pattern. */
typedef uint32_t (*dl_gemm_qstoch_f32_fn)(const float *x, const float *inv, float inv0, int64_t n,
                                          uint64_t key, uint64_t j0, int8_t *q);
/* One batched int8 GEMM over P peers: C_p = A_p @ B_p for p < P (see dl_gemm_s8_batched_*).
 * Strides are in elements; the last axis of every stored operand is contiguous. A stored
 * transposed (a_trans) is (k, m) with row stride a_rs, else (m, k); B likewise (n, k) or (k, n). */
typedef struct {
    int64_t p, m, k, n;
    const int8_t *a;
    int64_t a_ps, a_rs; /* peer stride (0: one A shared by every peer), row stride */
    int a_trans;
    const int8_t *b;
    int64_t b_ps, b_rs;
    int b_trans;
    const float *a_scale; /* (P,) per-peer scale of A (float output only) */
    const float *b_scale; /* (P, b_scale_n): b_scale_n 1 (per tensor) or n (per output column) */
    int64_t b_scale_n;
    const float *bias; /* (P, n) contiguous or NULL (float output only) */
    int32_t *c;        /* exact int32 output, or NULL */
    float *c_f32;      /* c * a_scale[p] * b_scale[p][j] + bias[p][j], or NULL */
    int64_t c_ps, c_rs;
} dl_gemm_s8_batch_t;
typedef int (*dl_gemm_s8_batched_fn)(const dl_gemm_s8_batch_t *bt, int n_threads);
/* One peer-batched int8 dense layer, fused (gemm_s8_impl.h); strides in elements, rows contiguous.
 * Forward: sx[p], xq[p] (B, I) = absmax scale and nearest codes of x[p] (per tensor; x_ps 0: x is
 * shared and quantized once into xq[0], sx[0]), sw[p], wq[p] (I, O) the same of w[p] (contiguous);
 * y[p] = act(float(xq[p] wq[p]) * (sx[p] sw[p]) + bias[p]) (bias NULL: + 0), act the ReLU of
 * np.maximum(v, 0) when relu. Backward (xq_ps: 0 or B * I): gb[p] = sum_b dy[p] in batch order;
 * dyq = stochastic codes of dy[p] (scale sdy, counter RNG keyed by (seed, step, peer0 + p) at index
 * b * O + o); gw[p] = float(xq[p]^T dyq) * (sx[p] sdy) + 0; dx[p] (when not NULL) =
 * (float(dyq wq[p]^T) * (sdy sw[p]) + 0) * (mask[p] > 0 ? 1 : 0) (mask NULL: no factor). */
typedef struct {
    int64_t n_peers, batch, n_in, n_out;
    const float *x;
    int64_t x_ps, x_rs;
    const float *w;
    int64_t w_ps;
    const float *bias;
    int64_t b_ps;
    int relu;
    float *y;
    int64_t y_ps, y_rs;
    int8_t *xq; /* (1 or P, B, I) contiguous codes and (1 or P) scales of x */
    float *sx;
    int64_t xq_ps;
    int8_t *wq; /* (P, I, O) contiguous codes and (P) scales of w */
    float *sw;
    const float *dy;
    int64_t dy_ps, dy_rs;
    uint64_t seed, step;
    int64_t peer0;
    float *gw;
    int64_t gw_ps;
    float *gb;
    int64_t gb_ps;
    float *dx;
    int64_t dx_ps, dx_rs;
    const float *mask;
    int64_t m_ps, m_rs;
} dl_gemm_s8_dense_t;
typedef int (*dl_gemm_s8_dense_fn)(const dl_gemm_s8_dense_t *d, int n_threads);
/* Conv2d's int8 input gradient on padded images, without a column gradient (gemm_s8_impl.h):
 * per peer, dxp[p] (C, B, len) = col2im of the columns float(wq[p]^T dq[p]) * (sw[p] sdy[p]),
 * i.e. zeroed, then for every row kk = (c, i, j) of wq[p] (Cout, C k k) in order and every
 * sample b, dxp[p][c, b, i wp + j + t] += float(sum_o wq[p][o, kk] dq[p][o, b run + t]) * s for
 * t < run: the bits of the int8 GEMM on im2col columns followed by conv_fold. Rows contiguous;
 * strides in elements. */
typedef struct {
    int64_t n_peers, cout, c, batch, len, k, wp, run;
    const int8_t *wq; /* (P, Cout, C k k) codes and (P) scales */
    int64_t wq_ps;
    const float *sw;
    const int8_t *dq; /* (P, Cout, B run) codes and (P) scales */
    int64_t dq_ps, dq_rs;
    const float *sdy;
    float *dxp; /* (P, C, B, len), every element written */
    int64_t dxp_ps;
} dl_gemm_s8_conv_dgrad_t;
typedef int (*dl_gemm_s8_conv_dgrad_fn)(const dl_gemm_s8_conv_dgrad_t *d, int n_threads);
/* Conv2d's int8 forward product on padded codes, without im2col (gemm_s8_impl.h): per peer,
 * y[p][o, b run + t] = float(sum_kk wq[p][o, kk] xq[p][c, b, i wp + j + t]) * (sw[p] sx[p]),
 * then + bias[p][o] (a separate float32 add), kk = (c, i, j), t < run: the bits of the int8 GEMM
 * on im2col columns followed by the bias add. xq_ps and sx_ps 0: one input shared by every peer
 * (codes and scale). Rows contiguous; strides in elements. */
typedef struct {
    int64_t n_peers, cout, c, batch, len, k, wp, run;
    const int8_t *wq; /* (P, Cout, C k k) codes and (P) scales */
    int64_t wq_ps;
    const float *sw;
    const int8_t *xq; /* (P or 1, C, B, len) padded codes and scales */
    int64_t xq_ps;
    const float *sx;
    int64_t sx_ps;
    const float *bias; /* (P, Cout) */
    int64_t b_ps;
    float *y; /* (P, Cout, B run) */
    int64_t y_ps, y_rs;
} dl_gemm_s8_conv_fwd_t;
typedef int (*dl_gemm_s8_conv_fwd_fn)(const dl_gemm_s8_conv_fwd_t *d, int n_threads);
/* Conv2d's int8 weight gradient on padded codes, without im2col (gemm_s8_impl.h): per peer and
 * chunk of `chunk` samples (the last one shorter), part[o, kk] = float(sum over the chunk's
 * positions of dq[p][o, b run + t] xq[p][c, b, i wp + j + t]) * (sdy[p] sx[p]), kk = (c, i, j);
 * gw[p] = the first chunk's part, + each later one's in order (float32 adds): the bits of the
 * int8 GEMM on each chunk's im2col columns followed by those adds. xq_ps and sx_ps 0: one input
 * shared by every peer. gw[p] (Cout, C k k) contiguous; strides in elements. */
typedef struct {
    int64_t n_peers, cout, c, batch, len, k, wp, run, chunk;
    const int8_t *dq; /* (P, Cout, B run) codes and (P) scales */
    int64_t dq_ps, dq_rs;
    const float *sdy;
    const int8_t *xq; /* (P or 1, C, B, len) padded codes and scales */
    int64_t xq_ps;
    const float *sx;
    int64_t sx_ps;
    float *gw; /* (P, Cout, C k k) */
    int64_t gw_ps;
} dl_gemm_s8_conv_wgrad_t;
typedef int (*dl_gemm_s8_conv_wgrad_fn)(const dl_gemm_s8_conv_wgrad_t *d, int n_threads);
/* <<< dispatch-types gemm */
/* >>> dispatch-types limits */
typedef int (*dl_peak_s8_fn)(int64_t reps, int n_threads, int64_t *ops, int64_t *check);
/* <<< dispatch-types limits */
/* >>> dispatch-types nn */
/* C_p (+)= A_p B_p for p < n_peers: A_p m x k, B_p k x n with element strides (row, column) and a
 * peer stride each (0 broadcasts one matrix to every peer); C_p's rows are contiguous (row stride
 * c_rs). C must not overlap A or B. */
typedef struct {
    int64_t n_peers, m, n, k;
    const float *a;
    int64_t a_ps, a_rs, a_cs;
    const float *b;
    int64_t b_ps, b_rs, b_cs;
    float *c;
    int64_t c_ps, c_rs;
    int accumulate;
} dl_nn_gemm_t;
/* One peer-batched dense layer; strides in elements, rows contiguous. Forward: y (P, B, O) =
 * x (P, B, I) @ w (P, I, O) + bias (P, O) (NULL: none), then ReLU when relu. Backward: gb (P, O) =
 * sum_b dy, gw (P, I, O) = x^T dy, and when dx != NULL dx (P, B, I) = dy w^T, zeroed where
 * mask (P, B, I) (NULL: none) is not > 0. Peer strides may be 0 for inputs (shared x). */
typedef struct {
    int64_t n_peers, batch, n_in, n_out;
    const float *x;
    int64_t x_ps, x_rs;
    const float *w;
    int64_t w_ps;
    const float *bias;
    int64_t b_ps;
    int relu;
    float *y;
    int64_t y_ps, y_rs;
    const float *dy;
    int64_t dy_ps, dy_rs;
    float *gw;
    int64_t gw_ps;
    float *gb;
    int64_t gb_ps;
    float *dx;
    int64_t dx_ps, dx_rs;
    const float *mask;
    int64_t m_ps, m_rs;
} dl_nn_dense_t;
/* A convolution's forward without im2col: for p < n_peers and b < batch,
 * y_p[:, b run .. (b+1) run) = wb_p (cout x (c k k + 1)) [unfold(xp_p, b); 1], where row
 * (ci, i, j) of unfold(xp_p, b) is the run elements of image (ci, b) of xp_p (c, batch, len)
 * from i wp + j, and the last row of ones carries the bias (wb_p's last column). The same
 * products, in the same order per element, as nn_gemm on conv_unfold's columns. xp's peer stride
 * may be 0 (one shared input); y_p is (cout, batch run), contiguous; wb_p (cout, c k k + 1). */
typedef struct {
    int64_t n_peers, cout, c, batch, len, k, wp, run;
    const float *wb;
    int64_t wb_ps;
    const float *xp;
    int64_t xp_ps;
    float *y;
    int64_t y_ps;
    /* With w set, wb is not used: wb_p is assembled from w_p (cout x c k k, rows w_rs apart) and
     * bias_p (cout) in a buffer of each thread, so the layer's parameters are read in place. */
    const float *w;
    int64_t w_ps, w_rs;
    const float *bias;
    int64_t bias_ps;
} dl_nn_conv_t;
/* A convolution's weight gradient without im2col: g_p ((c k k + 1) x cout, contiguous) = the sum
 * over chunks [b0, b1) of `chunk` samples of [unfold(xp_p, b0 .. b1); 1] dy_p[:, b0 run ..
 * b1 run)^T, the first chunk written, the later ones added, each chunk's product in blocks of
 * 256 of its (b1 - b0) run positions: the same operations, in the same order per element, as
 * nn_gemm on conv_unfold's columns with a row of ones (accumulate from the second chunk on).
 * dy_p (cout, >= batch run), rows dy_rs apart; xp as in dl_nn_conv_t (peer stride 0: shared).
 * With gw set, g is not used: the same values go to the layer's own layout instead, gw_p
 * (cout x c k k, rows gw_rs apart) = the first c k k rows of g_p transposed, and gb_p (cout) =
 * its last row (each thread forms its rows of g_p in a buffer of its own). */
typedef struct {
    int64_t n_peers, cout, c, batch, len, k, wp, run, chunk;
    const float *xp;
    int64_t xp_ps;
    const float *dy;
    int64_t dy_ps, dy_rs;
    float *g;
    int64_t g_ps;
    float *gw;
    int64_t gw_ps, gw_rs;
    float *gb;
    int64_t gb_ps;
} dl_nn_wgrad_t;
/* A convolution's input gradient without the column gradient: for every peer p, sample b and
 * channel ci, dxp_p[ci, b, t] for t < len = the sum, over kernel offsets (i, j) in order with
 * i wp + j <= t < i wp + j + run, of the chain over co of w_p[co, (ci, i, j)] dy_p[co, b run + t -
 * i wp - j] (from 0, in blocks of 256 co added in order), added to +0.0: bit for bit nn_gemm's
 * W^T dY followed by conv_fold into zeros. w_p (cout, c k k) rows w_rs apart; dy_p (cout,
 * >= batch run) rows dy_rs apart; dxp_p (c, batch, len) contiguous, every element written. */
typedef struct {
    int64_t n_peers, cout, c, batch, len, k, wp, run;
    const float *w;
    int64_t w_ps, w_rs;
    const float *dy;
    int64_t dy_ps, dy_rs;
    float *dxp;
    int64_t dxp_ps;
} dl_nn_dgrad_t;
typedef int (*dl_nn_gemm_f32_fn)(const dl_nn_gemm_t *g, int n_threads);
typedef int (*dl_nn_conv_f32_fn)(const dl_nn_conv_t *cv, int n_threads);
typedef int (*dl_nn_dgrad_f32_fn)(const dl_nn_dgrad_t *d, int n_threads);
typedef int (*dl_nn_wgrad_f32_fn)(const dl_nn_wgrad_t *w, int n_threads);
typedef int (*dl_nn_dense_f32_fn)(const dl_nn_dense_t *d, int n_threads);
/* <<< dispatch-types nn */
/* >>> dispatch-types optim */
/* The float32 constants of an Adam or LAMB step (NumPy's roundings of the float64 values) and
 * whether the weight decay terms apply (tested on the float64 values, as NumPy's code does). */
typedef struct {
    float b1, ob1, b2, ob2, eps, wd, decay; /* beta1, 1 - beta1, beta2, 1 - beta2, eps, wd, lr wd */
    int use_wd, use_decay;
} dl_optim_coef_t;
typedef void (*dl_optim_adam_span_fn)(int64_t n, float *p, const float *g, float *m, float *v,
                                      const dl_optim_coef_t *c, float lr_t, float root2);
typedef void (*dl_optim_lamb_span_fn)(int64_t n, const float *p, const float *g, float *m,
                                      float *v, float *u, const dl_optim_coef_t *c, float bias1,
                                      float bias2);
typedef double (*dl_optim_sumsq_fn)(const float *x, int64_t n);
/* <<< dispatch-types optim */

/* One entry per kernel that has ISA-specific builds. A family adds its members in its section. */
typedef struct {
    dl_isa_t isa;
    const char *name;
    dl_gossip_csr_f32_fn gossip_csr_f32;
    /* >>> dispatch-members natural */
    dl_natural_encode_f32_fn natural_encode_f32;
    dl_natural_decode_f32_fn natural_decode_f32;
    dl_natural_dither_encode_f32_fn natural_dither_encode_f32;
    dl_natural_dither_decode_f32_fn natural_dither_decode_f32;
    /* <<< dispatch-members natural */
    /* >>> dispatch-members topk */
    dl_topk_filter_f32_fn topk_filter_f32;
    dl_topk_randfilter_u32_fn topk_randfilter_u32;
    dl_topk_count_f32_fn topk_count_f32;
    dl_topk_compact_u32_fn topk_compact_u32;
    /* <<< dispatch-members topk */
    /* >>> dispatch-members quant */
    dl_qsgd_encode_f32_fn qsgd_encode_f32;
    dl_bucket_encode_f32_fn bucket_encode_f32;
    dl_sign_encode_f32_fn sign_encode_f32;
    dl_int8_encode_f32_fn int8_encode_f32;
    /* <<< dispatch-members quant */
    /* >>> dispatch-members gemm */
    const dl_gemm_s8_layout_t *gemm_s8_layout;
    dl_gemm_s8_pack_b_fn gemm_s8_pack_b;
    dl_gemm_s8_fn gemm_s8;
    dl_gemm_qnearest_f32_fn gemm_qnearest_f32;
    dl_gemm_absmax_bits_f32_fn gemm_absmax_bits_f32;
    dl_gemm_qstoch_f32_fn gemm_qstoch_f32;
    dl_gemm_s8_batched_fn gemm_s8_batched;
    dl_gemm_s8_dense_fn gemm_s8_dense_forward;
    dl_gemm_s8_dense_fn gemm_s8_dense_backward;
    dl_gemm_s8_conv_dgrad_fn gemm_s8_conv_dgrad;
    dl_gemm_s8_conv_fwd_fn gemm_s8_conv_fwd;
    dl_gemm_s8_conv_wgrad_fn gemm_s8_conv_wgrad;
    /* <<< dispatch-members gemm */
    /* >>> dispatch-members limits */
    dl_peak_s8_fn peak_s8; /* the int8 peak loop of the instruction the active gemm_s8 uses */
    /* <<< dispatch-members limits */
    /* >>> dispatch-members nn */
    dl_nn_gemm_f32_fn nn_gemm_f32;
    dl_nn_dense_f32_fn nn_dense_forward_f32;
    dl_nn_dense_f32_fn nn_dense_backward_f32;
    dl_nn_conv_f32_fn nn_conv_forward_f32;
    dl_nn_wgrad_f32_fn nn_conv_wgrad_f32;
    dl_nn_dgrad_f32_fn nn_conv_dgrad_f32;
    /* <<< dispatch-members nn */
    /* >>> dispatch-members optim */
    dl_optim_adam_span_fn optim_adam_span;
    dl_optim_lamb_span_fn optim_lamb_span;
    dl_optim_sumsq_fn optim_sumsq;
    /* <<< dispatch-members optim */
} dl_dispatch_t;

/* dispatch.c */
const dl_dispatch_t *dl_dispatch(void);
int dl_isa_supported(dl_isa_t isa);
int dl_set_isa(dl_isa_t isa); /* DL_E_ARG when the CPU (or the build) lacks it */
const char *dl_isa_name(dl_isa_t isa);
/* The last-level cache's bytes (0: unknown), read once at import; dl_set_llc_bytes(n) sets it (n < 0:
 * read again) and returns the value before; call it only while no kernel runs (tests, benchmarks). */
int64_t dl_llc_bytes(void);
int64_t dl_set_llc_bytes(int64_t n);

/* gossip.c (ISA independent) */
int dl_csr_check(const dl_csr_f32_t *w);
/* Y = W X in float32 arithmetic, scipy.sparse's order: +0, then each row's terms in stored order;
 * rows of X and Y ldx and ldy floats apart. */
int dl_spmm_csr_f32(const dl_csr_f32_t *w, int64_t dim, const float *x, int64_t ldx, float *y,
                    int64_t ldy, int n_threads);

#define DL_DECLARE_ISA(fn, ret, args)                                                              \
    ret fn##_generic args;                                                                         \
    ret fn##_avx2 args;                                                                            \
    ret fn##_avx512 args;

DL_DECLARE_ISA(dl_gossip_csr_f32, int,
               (const dl_csr_f32_t *w, int64_t dim, const float *x, float *y, int n_threads))

/* ---- Counter-based random numbers ---------------------------------------------------------
 * Every stochastic kernel draws the value for element `index` of peer `peer` at step `step` as
 * dl_rng_u32(dl_rng_key(seed, step, peer), index): a pure function of those four numbers, so
 * results are identical for any thread count and any split of rows between processes (a kernel
 * given rows peer0.. of a matrix uses peer = peer0 + row). decentlearn/_reference/rng.py is the
 * bit-exact NumPy twin. Quality: two rounds of a 32-bit avalanche hash (lowbias32, bias ~0.11)
 * with independent 32-bit key halves; ample for stochastic rounding and sampling. */
static inline uint64_t dl_mix64(uint64_t z) { /* splitmix64's finalizer */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static inline uint64_t dl_rng_key(uint64_t seed, uint64_t step, uint64_t peer) {
    return dl_mix64(dl_mix64(dl_mix64(seed + 0x9e3779b97f4a7c15ULL) ^ step) ^ peer);
}
static inline uint32_t dl_hash32(uint32_t x) { /* lowbias32 (C. Wellons' hash-prospector) */
    x ^= x >> 16;
    x *= 0x21f0aaadu;
    x ^= x >> 15;
    x *= 0x735a2d97u;
    x ^= x >> 15;
    return x;
}
static inline uint32_t dl_rng_u32(uint64_t key, uint64_t index) {
    uint32_t x = dl_hash32((uint32_t)index ^ (uint32_t)key);
    return dl_hash32(x ^ (uint32_t)(key >> 32) ^ ((uint32_t)(index >> 32) * 0x9e3779b9u));
}
/* Uniform float in [0, 1) with 24 random bits. */
static inline float dl_rng_unit(uint64_t key, uint64_t index) {
    return (float)(dl_rng_u32(key, index) >> 8) * 0x1.0p-24f;
}

/* The compressors' generator (natural compression/dithering, the quantizer encoders): half the
 * multiplies of dl_rng_u32, since they draw one word per value of the whole state. One lowbias32
 * round of a Weyl sequence whose start and odd step come from the 64-bit key: element j of a row
 * hashes klo + j w (mod 2^32), w = khi | 1, so consecutive elements advance the hash input by one
 * add (vectorized: lane i of a block starts at base + i w). The index's high half adds
 * (j >> 32) * 0x9e3779b9. Peers' streams are not shifted copies of one another (each has its own
 * step w). decentlearn/_reference/rng.py (rng_fast_u32) is its NumPy twin. */
static inline uint32_t dl_rng_fast_base(uint64_t key, uint64_t index) {
    return (uint32_t)key + (uint32_t)index * ((uint32_t)(key >> 32) | 1u) +
           (uint32_t)(index >> 32) * 0x9e3779b9u;
}
static inline uint32_t dl_rng_fast_u32(uint64_t key, uint64_t index) {
    return dl_hash32(dl_rng_fast_base(key, index));
}
/* Uniform float in [0, 1) with 24 random bits from dl_rng_fast_u32. */
static inline float dl_rng_fast_unit(uint64_t key, uint64_t index) {
    return (float)(dl_rng_fast_u32(key, index) >> 8) * 0x1.0p-24f;
}

/* ---- Compression kernels (csrc/<family>.c) ----------------------------------------------
 * Conventions: x is a C-contiguous (n_rows, dim) float32 matrix, each row compressed on its own
 * (a 1-D vector is n_rows = 1); stochastic kernels take (seed, step, peer0) as above; kernels that
 * read encoded bytes validate every length and index and return DL_E_FORMAT, never read or write
 * out of bounds. Each family adds its prototypes in its own section below. */

/* rng.c */
/* fast = 0: dl_rng_u32, 1: dl_rng_fast_u32 (the compressors' generator). */
int dl_rng_fill_u32(int64_t n_rows, int64_t dim, uint64_t seed, uint64_t step, int64_t peer0,
                    int fast, uint32_t *out, int n_threads);
/* out (n, s): for every j the s columns k != j of smallest key(j, k) = mix64(mix64(base + G + j) +
 * G + k) >> 11, ties to the smaller k, in increasing (key, k) order (Epidemic Learning's graph). */
int dl_hash_smallest(int64_t n, int64_t s, uint64_t base, int64_t *out, int n_threads);

/* bitpack.c: b-bit codes (1 <= b <= 8), little-endian bit order, rows padded to whole bytes. */
int64_t dl_bitpack_row_bytes(int64_t dim, int bits);
int dl_bitpack_u8(int64_t n_rows, int64_t dim, int bits, const uint8_t *codes, uint8_t *packed,
                  int n_threads);
int dl_bitunpack_u8(int64_t n_rows, int64_t dim, int bits, const uint8_t *packed, uint8_t *codes,
                    int n_threads);

/* >>> section natural (natural.c) */
/* Natural compression: one byte per value, bit 7 sign, bits 0-6 c (0 -> 0, else 2^(c - 64)).
 * Natural dithering: per row a float32 norm and codes (level << 1) | sign, level 0..s. */
DL_DECLARE_ISA(dl_natural_encode_f32, int,
               (int64_t n_rows, int64_t dim, const float *x, uint64_t seed, uint64_t step,
                int64_t peer0, uint8_t *codes, int n_threads))
DL_DECLARE_ISA(dl_natural_decode_f32, int,
               (int64_t n_rows, int64_t dim, const uint8_t *codes, float *y, int n_threads))
DL_DECLARE_ISA(dl_natural_dither_encode_f32, int,
               (int64_t n_rows, int64_t dim, const float *x, int s, float p, uint64_t seed,
                uint64_t step, int64_t peer0, float *norms, uint8_t *codes, int n_threads))
DL_DECLARE_ISA(dl_natural_dither_decode_f32, int,
               (int64_t n_rows, int64_t dim, const float *norms, const uint8_t *codes, int s,
                float *y, int n_threads))
/* Bits per dithering code for s levels: 1 + ceil(log2(s + 1)); DL_E_ARG unless 1 <= s <= 31. */
int dl_natural_dither_bits(int s);
/* <<< section natural */

/* >>> section topk (topk.c) */
/* Filter passes (topk_impl.h, one build per ISA): scores |x| bits or ~rng, compared unsigned. */
DL_DECLARE_ISA(dl_topk_filter_f32, int64_t,
               (const float *x, int64_t i0, int64_t i1, uint32_t t, int64_t cap, int32_t *idx,
                uint32_t *bits, int32_t *hist))
DL_DECLARE_ISA(dl_topk_randfilter_u32, int64_t,
               (uint64_t key, int64_t i0, int64_t i1, uint32_t t, int64_t cap, int32_t *idx,
                uint32_t *score))
DL_DECLARE_ISA(dl_topk_count_f32, int64_t,
               (const float *x, int64_t n, uint32_t t, int64_t *n_nan))
DL_DECLARE_ISA(dl_topk_compact_u32, int64_t,
               (const int32_t *idx, const uint32_t *bits, int64_t n, uint32_t mask, uint32_t t,
                int64_t cap, int32_t *oi, uint32_t *ob))
int dl_topk_exact_f32(int64_t n_rows, int64_t dim, int64_t k, const float *x, int32_t *idx,
                      float *val, int n_threads);
int dl_topk_random_f32(int64_t n_rows, int64_t dim, int64_t k, const float *x, uint64_t seed,
                       uint64_t step, int64_t peer0, int32_t *idx, float *val, int n_threads);
int64_t dl_topk_threshold_chunks(int64_t dim);
int dl_topk_threshold_count_f32(int64_t n_rows, int64_t dim, float v, const float *x,
                                int64_t *chunk_counts, int n_threads);
int dl_topk_threshold_f32(int64_t n_rows, int64_t dim, float v, const float *x,
                          const int64_t *chunk_counts, int32_t *idx, float *val, int n_threads);
/* out (n_rows, dim) = 0 with out[r, idx[r, j]] = val[r, j] for j < k in order (a sparse message
 * decoded); DL_E_INDEX (nothing written) unless every idx is in [0, dim). */
int dl_topk_scatter_f32(int64_t n_rows, int64_t k, int64_t dim, const int32_t *idx,
                        const float *val, float *out, int n_threads);
/* <<< section topk */

/* >>> section stc (stc.c) */
/* Golomb/Rice coder of kept positions + sign bits (Rice parameter b in [0, DL_STC_MAX_B]). */
#define DL_STC_MAX_B 31
/* Upper bound on a row's code length in bits (-1 if the arguments are out of range). */
int64_t dl_stc_golomb_max_bits(int64_t k, int64_t dim, int b);
int dl_stc_golomb_encode(int64_t n_rows, int64_t k, int64_t dim, int b, const int32_t *positions,
                         const uint8_t *negative, uint8_t *data, int64_t row_bytes, int64_t *nbits,
                         int n_threads);
int dl_stc_golomb_decode(int64_t n_rows, int64_t k, int64_t dim, int b, const uint8_t *data,
                         int64_t row_bytes, const int64_t *nbits, int32_t *positions,
                         uint8_t *negative, int n_threads);
/* negative = val < 0, sums = per-row sum of |val| in float64, exact = whether that sum is the same
 * in every order (so equal to NumPy's); see stc.c. */
int dl_stc_ternary_f32(int64_t n_rows, int64_t k, const float *val, uint8_t *negative,
                       double *sums, uint8_t *exact, int n_threads);
/* <<< section stc */

/* >>> section quant (quant.c) */
/* Quantizers. Encoders have ISA builds (quant_impl.h, reached through dl_dispatch()); decoders
 * validate untrusted messages and return DL_E_FORMAT. Sums over a row are float64 over chunks of
 * DL_QUANT_CHUNK values in DL_QUANT_LANES lanes, combined in a fixed order (see quant_impl.h). */
#define DL_QUANT_CHUNK 8192
#define DL_QUANT_LANES 8
/* Bits of a QSGD code for 1 <= levels <= 127: 1 sign bit + ceil(log2(levels + 1)). */
static inline int dl_qsgd_bits(int levels) {
    int b = 0;
    while ((1 << b) < levels + 1) b++;
    return 1 + b;
}
DL_DECLARE_ISA(dl_qsgd_encode_f32, int,
               (int64_t n_rows, int64_t dim, int levels, const float *x, uint64_t seed,
                uint64_t step, int64_t peer0, float *norm, uint8_t *packed, int n_threads))
DL_DECLARE_ISA(dl_bucket_encode_f32, int,
               (int64_t n_rows, int64_t dim, int bits, int64_t bucket, const float *x,
                uint64_t seed, uint64_t step, int64_t peer0, float *lo, float *scale,
                uint8_t *packed, int n_threads))
DL_DECLARE_ISA(dl_sign_encode_f32, int,
               (int64_t n_rows, int64_t dim, const float *x, float *scale, uint8_t *packed,
                int n_threads))
DL_DECLARE_ISA(dl_int8_encode_f32, int,
               (int64_t n_rows, int64_t dim, const float *x, uint64_t seed, uint64_t step,
                int64_t peer0, float *scale, int8_t *q, int n_threads))
int dl_qsgd_decode_f32(int64_t n_rows, int64_t dim, int levels, const float *norm,
                       const uint8_t *packed, float *out, int n_threads);
int dl_bucket_decode_f32(int64_t n_rows, int64_t dim, int bits, int64_t bucket, const float *lo,
                         const float *scale, const uint8_t *packed, float *out, int n_threads);
int dl_sign_decode_f32(int64_t n_rows, int64_t dim, const float *scale, const uint8_t *packed,
                       float *out, int n_threads);
int dl_int8_decode_f32(int64_t n_rows, int64_t dim, const float *scale, const int8_t *q,
                       float *out, int n_threads);
/* <<< section quant */
/* >>> section gemm */
/* Exact int8 GEMM: C (m, n) int32 = A (m, k) int8 @ B (k, n) int8, B packed once for the active
 * layout (dl_gemm_s8_layout_t). Every |product| <= 128 * 128 = 2^14, so int32 sums are exact
 * while k <= DL_GEMM_S8_MAX_K = floor((2^31 - 1) / 2^14). */
#define DL_GEMM_S8_MAX_K 131071
extern const dl_gemm_s8_layout_t dl_gemm_s8_layout_s16;  /* gemm_s8.c */
extern const dl_gemm_s8_layout_t dl_gemm_s8_layout_vnni; /* gemm_s8_avx512vnni.c (x86-64) */
/* Bytes of a packed B for a layout: ceil(n / nr) * nr * ceil(k / kg) * kg * b_elem (-1 if
 * k or n is out of range); its colsum has ceil(n / nr) * nr int32 values. */
int64_t dl_gemm_s8_packed_bytes(const dl_gemm_s8_layout_t *layout, int64_t k, int64_t n);
int dl_gemm_s8_pack_b_generic(int64_t k, int64_t n, const int8_t *b, uint8_t *packed,
                              int32_t *colsum, int n_threads);
int dl_gemm_s8_pack_b_avx2(int64_t k, int64_t n, const int8_t *b, uint8_t *packed,
                           int32_t *colsum, int n_threads);
int dl_gemm_s8_pack_b_avx512vnni(int64_t k, int64_t n, const int8_t *b, uint8_t *packed,
                                 int32_t *colsum, int n_threads);
int dl_gemm_s8_generic(int64_t m, int64_t k, int64_t n, const int8_t *a, const uint8_t *packed,
                       const int32_t *colsum, const dl_gemm_s8_out_t *out, int n_threads);
int dl_gemm_s8_avx2(int64_t m, int64_t k, int64_t n, const int8_t *a, const uint8_t *packed,
                    const int32_t *colsum, const dl_gemm_s8_out_t *out, int n_threads);
int dl_gemm_s8_avx512vnni(int64_t m, int64_t k, int64_t n, const int8_t *a,
                          const uint8_t *packed, const int32_t *colsum,
                          const dl_gemm_s8_out_t *out, int n_threads);
/* gemm_s8_amx.c (x86-64): the AMX int8 GEMMs on the "vnni" packed layout (packed by
 * dl_gemm_s8_pack_b_avx512vnni); dl_gemm_s8_amx_built is 0 when the compiler lacked AMX. The
 * caller of any tile instruction loads the tile configuration in its thread first
 * (dl_amx_tile_begin) and releases it after (dl_amx_tile_end). */
extern const int dl_gemm_s8_amx_built;
void dl_amx_tile_begin(void);
void dl_amx_tile_end(void);
#if defined(__AMX_TILE__)
/* A tile load that the compiler knows reads memory (GCC 12's _tile_loadd names only the
 * pointer, so stores into a buffer just before could be dropped or moved past the load). */
#define DL_AMX_LOADD(t, base, stride)                                                              \
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"((const void *)(base)),                 \
                     "r"((long)(stride))                                                          \
                     : "memory")
#endif
int dl_gemm_s8_amx(int64_t m, int64_t k, int64_t n, const int8_t *a, const uint8_t *packed,
                   const int32_t *colsum, const dl_gemm_s8_out_t *out, int n_threads);
uint32_t dl_gemm_qnearest_f32_generic(const float *x, const float *inv, float inv0, int64_t n,
                                      int8_t *q);
uint32_t dl_gemm_qnearest_f32_avx512vnni(const float *x, const float *inv, float inv0, int64_t n,
                                         int8_t *q);
uint32_t dl_gemm_absmax_bits_f32_generic(const float *x, int64_t n);
uint32_t dl_gemm_absmax_bits_f32_avx512vnni(const float *x, int64_t n);
uint32_t dl_gemm_qnearest_f32_avx2(const float *x, const float *inv, float inv0, int64_t n,
                                   int8_t *q);
uint32_t dl_gemm_absmax_bits_f32_avx2(const float *x, int64_t n);
uint32_t dl_gemm_qstoch_f32_generic(const float *x, const float *inv, float inv0, int64_t n,
                                    uint64_t key, uint64_t j0, int8_t *q);
uint32_t dl_gemm_qstoch_f32_avx2(const float *x, const float *inv, float inv0, int64_t n,
                                 uint64_t key, uint64_t j0, int8_t *q);
uint32_t dl_gemm_qstoch_f32_avx512vnni(const float *x, const float *inv, float inv0, int64_t n,
                                       uint64_t key, uint64_t j0, int8_t *q);
/* Quantization (gemm_s8.c; the nearest-rounding, absmax and stochastic-rounding cores have an AVX-512 build): q = clamp(round(x * (1 / scale)), -127, 127), scale per
 * tensor (scale_n == 1), per row (axis 0, scale_n == n_rows) or per column (axis 1, scale_n ==
 * dim), row r of x at x + r * ldx (ldx >= dim: strided rows, e.g. a weight slice of every
 * peer's parameter row); rounding 0 = nearest even, 1 = stochastic floor(v) + (u < v - floor(v)) with u from the
 * counter RNG (seed, step, peer0 + row, column). DL_E_NONFINITE for NaN/inf x, DL_E_ARG for a
 * scale that is not finite and > 0. */
int dl_gemm_quantize_s8(int64_t n_rows, int64_t dim, const float *x, int64_t ldx,
                        const float *scale, int64_t scale_n, int axis, int rounding, uint64_t seed,
                        uint64_t step, int64_t peer0, int8_t *q, int n_threads);
/* y = q * scale (scale laid out as for dl_gemm_quantize_s8). */
int dl_gemm_dequantize_s8(int64_t n_rows, int64_t dim, const int8_t *q, const float *scale,
                          int64_t scale_n, int axis, float *y, int n_threads);
/* scale = max|x| / 127 (1 where every |x| is 0) over the whole matrix (axis -1, 1 value), per
 * row (axis 0, n_rows values) or per column (axis 1, dim values). DL_E_NONFINITE for NaN/inf. */
int dl_gemm_absmax_scale_f32(int64_t n_rows, int64_t dim, const float *x, int64_t ldx, int axis,
                             float *scale, int n_threads);
/* One tensor (rows x cols, row stride ldx) quantized per tensor, single-threaded: *scale and the
 * contiguous codes q; rounding 0 nearest, 1 stochastic keyed by key at index r * cols + c. */
int dl_gemm_quantize_tensor_s8(int64_t rows, int64_t cols, const float *x, int64_t ldx,
                               int rounding, uint64_t key, int8_t *q, float *scale);
/* Batched exact int8 GEMM over peers (gemm_s8_impl.h, one build per layout). */
int dl_gemm_s8_batched_generic(const dl_gemm_s8_batch_t *bt, int n_threads);
int dl_gemm_s8_batched_avx2(const dl_gemm_s8_batch_t *bt, int n_threads);
int dl_gemm_s8_batched_avx512vnni(const dl_gemm_s8_batch_t *bt, int n_threads);
int dl_gemm_s8_batched_amx(const dl_gemm_s8_batch_t *bt, int n_threads);
/* Fused int8 dense layer over peers (gemm_s8_impl.h, one build per layout; dl_gemm_s8_dense_t). */
int dl_gemm_s8_dense_forward_generic(const dl_gemm_s8_dense_t *d, int n_threads);
int dl_gemm_s8_dense_forward_avx2(const dl_gemm_s8_dense_t *d, int n_threads);
int dl_gemm_s8_dense_forward_avx512vnni(const dl_gemm_s8_dense_t *d, int n_threads);
int dl_gemm_s8_dense_forward_amx(const dl_gemm_s8_dense_t *d, int n_threads);
int dl_gemm_s8_dense_backward_generic(const dl_gemm_s8_dense_t *d, int n_threads);
int dl_gemm_s8_dense_backward_avx2(const dl_gemm_s8_dense_t *d, int n_threads);
int dl_gemm_s8_dense_backward_avx512vnni(const dl_gemm_s8_dense_t *d, int n_threads);
int dl_gemm_s8_dense_backward_amx(const dl_gemm_s8_dense_t *d, int n_threads);
/* Conv2d's int8 input gradient (gemm_s8_impl.h; dl_gemm_s8_conv_dgrad_t). */
int dl_gemm_s8_conv_dgrad_generic(const dl_gemm_s8_conv_dgrad_t *d, int n_threads);
int dl_gemm_s8_conv_dgrad_avx2(const dl_gemm_s8_conv_dgrad_t *d, int n_threads);
int dl_gemm_s8_conv_dgrad_avx512vnni(const dl_gemm_s8_conv_dgrad_t *d, int n_threads);
int dl_gemm_s8_conv_dgrad_amx(const dl_gemm_s8_conv_dgrad_t *d, int n_threads);
int dl_gemm_s8_conv_fwd_generic(const dl_gemm_s8_conv_fwd_t *d, int n_threads);
int dl_gemm_s8_conv_fwd_avx2(const dl_gemm_s8_conv_fwd_t *d, int n_threads);
int dl_gemm_s8_conv_fwd_avx512vnni(const dl_gemm_s8_conv_fwd_t *d, int n_threads);
int dl_gemm_s8_conv_fwd_amx(const dl_gemm_s8_conv_fwd_t *d, int n_threads);
int dl_gemm_s8_conv_wgrad_generic(const dl_gemm_s8_conv_wgrad_t *d, int n_threads);
int dl_gemm_s8_conv_wgrad_avx2(const dl_gemm_s8_conv_wgrad_t *d, int n_threads);
int dl_gemm_s8_conv_wgrad_avx512vnni(const dl_gemm_s8_conv_wgrad_t *d, int n_threads);
int dl_gemm_s8_conv_wgrad_amx(const dl_gemm_s8_conv_wgrad_t *d, int n_threads);
/* <<< section gemm */

/* >>> section limits (copy.c, peak*.c): the machine's limits, measured by the benchmarks */
/* dst[0:n) = src[0:n) with non-temporal stores (no overlap); any n_threads, same result. */
int dl_copy_f32(int64_t n, const float *src, float *dst, int n_threads);
/* out = a x + b y over n float32 values (products rounded, then summed; out may be x or y). */
int dl_axpby_f32(int64_t n, float a, const float *x, float b, const float *y, float *out,
                 int n_threads);
/* the same over rows of w values, rows ldx, ldy, ldo apart (out may be x or y, same stride). */
int dl_axpby_rows_f32(int64_t n_rows, int64_t w, float a, const float *x, int64_t ldx, float b,
                      const float *y, int64_t ldy, float *out, int64_t ldo, int n_threads);
/* dst row p = src row inv[p], or zeros where inv[p] == -1 (rows of row_bytes bytes). */
int dl_place_rows(int64_t n_dst, int64_t row_bytes, void *dst, const int64_t *inv, int64_t n_src,
                  const void *src, int n_threads);
/* dst row idx[r] = src row r (src_step 1) or row 0 (src_step 0); idx strictly increasing. */
int dl_put_rows(int64_t n_dst, int64_t row_bytes, void *dst, int64_t n_idx, const int64_t *idx,
                const void *src, int src_step, int n_threads);
/* counts[r] = number of j with a[idx[r], j] != b[j] (float32, IEEE comparison). */
int dl_count_ne_rows(int64_t n_rows, int64_t dim, const float *a, int64_t n_idx,
                     const int64_t *idx, const float *b, int64_t *counts, int n_threads);
/* dst rows = src rows (n_rows x w float32; rows lds and ldd values apart). */
int dl_copy2d_f32(int64_t n_rows, int64_t w, const float *src, int64_t lds, float *dst,
                  int64_t ldd, int n_threads);
/* out[r] = x[r] * s[r] (divide: x[r] / s[r]) per row (NumPy's broadcasting; out may be x). */
int dl_scale_rows_f32(int64_t n_rows, int64_t dim, const float *x, const float *s, int divide,
                      float *out, int n_threads);
/* *out = XOR of src's n words: a read-only pass (copy.c). */
int dl_read_f32(int64_t n, const float *src, uint32_t *out, int n_threads);
/* dst (P, B, A, K) = src (P, A, B, K) with axes 1 and 2 swapped (rows of K copied whole). */
int dl_swap_axes12_f32(int64_t P, int64_t A, int64_t B, int64_t K, const float *src, float *dst,
                       int n_threads);
/* dst row r = src row idx[r] for r < n_idx (rows of row_bytes bytes); DL_E_INDEX (nothing written)
 * when an index is outside [0, n_src). */
int dl_take_rows(int64_t n_src, int64_t row_bytes, const void *src, int64_t n_idx,
                 const int64_t *idx, void *dst, int n_threads);
/* The peer sampler (decentlearn/runner/sampler.py): every peer's B minibatch indices from its
 * segment of perm, and the reshuffle of listed peers' segments by given uniforms (copy.c). */
int dl_batch_indices(int64_t P, int64_t B, const int64_t *perm, int64_t n_perm, const int64_t *start,
                     const int64_t *size, const int64_t *cursor, int64_t *idx, int n_threads);
int dl_shuffle_segments(int64_t n_list, const int64_t *peers, int64_t n_peers, const int64_t *start,
                        const int64_t *size, int64_t *perm, int64_t n_perm, const double *u,
                        int64_t n_u, int n_threads);

/* consensus.c: out[0] = sum_{i,c} X_ic^2 and out[1] = sum_c (sum_i X_ic)^2 of a (P, D) float32
 * matrix, in float64, in one pass (fixed column chunks: independent of n_threads). */
int dl_consensus_sums_f32(int64_t P, int64_t D, const float *X, double *out, int n_threads);
/* consensus.c: *out = (1/P) sum_{i,c} (X_ic - m_c)^2, m the column means, in float64 in a fixed
 * order (column chunks; independent of n_threads; the NumPy twin gives the same bits); mean (D
 * values, or NULL) gets m. */
int dl_consensus_distance_f32(int64_t P, int64_t D, const float *X, double *out, double *mean,
                              int n_threads);
/* mean[c] = (sum_i X_ic in row order) / P, float64: NumPy's X.mean(axis=0, dtype=float64). */
int dl_column_mean_f32(int64_t P, int64_t D, const float *X, double *mean, int n_threads);
/* out[r] = np.sum(x[r]) of the C-contiguous (R, n) float32 x: NumPy's pairwise summation. */
int dl_row_sums_f32(int64_t R, int64_t n, const float *x, float *out, int n_threads);
/* out[c] = sum_k w[k] X_kc, float64, rows in order (NumPy's add.reduce of the products). */
int dl_weighted_column_sum_f32(int64_t P, int64_t D, const float *X, const double *w, double *out,
                               int n_threads);
/* The int8 multiply-add peak loop of one instruction (peak_impl.h): *ops operations (2 per
 * multiply-add) done by reps iterations on each of n_threads threads; *check a checksum. */
int dl_peak_s8_generic(int64_t reps, int n_threads, int64_t *ops, int64_t *check);
int dl_peak_s8_avx2(int64_t reps, int n_threads, int64_t *ops, int64_t *check);
int dl_peak_s8_avx512vnni(int64_t reps, int n_threads, int64_t *ops, int64_t *check);
int dl_peak_s8_amx(int64_t reps, int n_threads, int64_t *ops, int64_t *check);
/* Every thread runs chunks of `chunk` iterations of fn (one thread each) until `seconds` after a
 * common start: *ops done by all, *elapsed seconds from the start to the last end (peak.c). */
int dl_peak_s8_window(dl_peak_s8_fn fn, int64_t chunk, double seconds, int n_threads,
                      int64_t *ops, double *elapsed, int64_t *check);
/* <<< section limits */

static inline int64_t dl_min_i64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t dl_max_i64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t dl_cdiv_i64(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* >>> nn: peer-batched float32 GEMMs (nn_impl.h) and the optimizer step (optim.c) */
DL_DECLARE_ISA(dl_nn_gemm_f32, int, (const dl_nn_gemm_t *g, int n_threads))
DL_DECLARE_ISA(dl_nn_dense_forward_f32, int, (const dl_nn_dense_t *d, int n_threads))
DL_DECLARE_ISA(dl_nn_dense_backward_f32, int, (const dl_nn_dense_t *d, int n_threads))
DL_DECLARE_ISA(dl_nn_conv_forward_f32, int, (const dl_nn_conv_t *cv, int n_threads))
DL_DECLARE_ISA(dl_nn_conv_wgrad_f32, int, (const dl_nn_wgrad_t *w, int n_threads))
DL_DECLARE_ISA(dl_nn_conv_dgrad_f32, int, (const dl_nn_dgrad_t *d, int n_threads))
/* One SGD step over P rows of dim (see optim.c). */
int dl_optim_sgd_f32(int64_t n_peers, int64_t dim, float *params, const float *grad, float *buf,
                     float lr, float momentum, float weight_decay, int nesterov,
                     const int64_t *frozen, int n_threads);
/* The elementwise spans of the Adam and LAMB steps and the lane-ordered sum of squares
 * (optim_impl.h), one build per ISA. */
#define DL_DECLARE_OPTIM(isa)                                                                      \
    void dl_optim_adam_span_##isa(int64_t n, float *p, const float *g, float *m, float *v,         \
                                  const dl_optim_coef_t *c, float lr_t, float root2);              \
    void dl_optim_lamb_span_##isa(int64_t n, const float *p, const float *g, float *m, float *v,   \
                                  float *u, const dl_optim_coef_t *c, float bias1, float bias2);   \
    double dl_optim_sumsq_##isa(const float *x, int64_t n);
DL_DECLARE_OPTIM(generic)
DL_DECLARE_OPTIM(avx2)
DL_DECLARE_OPTIM(avx512)
/* One Adam/AdamW step over P rows of dim: rowc (P, 2) float64 = per row lr / (1 - b1^t) and
 * sqrt(1 - b2^t); coef[7] = b1, 1 - b1, b2, 1 - b2, eps, L2 weight decay (added to the gradient),
 * decoupled decay (lr wd, AdamW), each used as float32 (see optim.c). */
int dl_optim_adam_f32(int64_t n_peers, int64_t dim, float *params, const float *grad, float *m,
                      float *v, const double *rowc, const double *coef, const int64_t *frozen,
                      int n_threads);
/* One LAMB step: rowc (P, 2) = 1 - b1^t, 1 - b2^t; coef[7] = b1, 1 - b1, b2, 1 - b2, eps, wd, lr;
 * the layers' column ranges bounds[0] = 0 < ... < bounds[n_seg] = dim; work (P, dim) scratch. */
int dl_optim_lamb_f32(int64_t n_peers, int64_t dim, float *params, const float *grad, float *m,
                      float *v, float *work, const double *rowc, const double *coef,
                      const int64_t *bounds, int64_t n_seg, const int64_t *frozen, int n_threads);
/* One LARS step: coef[5] = lr, momentum, wd, eta (trust coefficient), eps; buf NULL when
 * momentum is 0. */
int dl_optim_lars_f32(int64_t n_peers, int64_t dim, float *params, const float *grad, float *buf,
                      const double *coef, const int64_t *bounds, int64_t n_seg,
                      const int64_t *frozen, int n_threads);
/* <<< nn */

/* >>> conv: im2col / col2im of Conv2d on wide rows (conv.c); contracts in conv.c. */
int dl_conv_unfold_f32(int64_t n_groups, int64_t channels, int64_t batch, int64_t len, int64_t b0,
                       int64_t b1, int64_t k, int64_t wp, int64_t run, const float *xp,
                       float *cols, int64_t rows, int64_t ld, int n_threads);
int dl_conv_unfold_s8(int64_t n_groups, int64_t channels, int64_t batch, int64_t len, int64_t b0,
                      int64_t b1, int64_t k, int64_t wp, int64_t run, const int8_t *xp,
                      int8_t *cols, int64_t rows, int64_t ld, int n_threads);
int dl_conv_fold_f32(int64_t n_groups, int64_t channels, int64_t batch, int64_t len, int64_t b0,
                     int64_t b1, int64_t k, int64_t wp, int64_t run, const float *dcols,
                     int64_t rows, int64_t ld, float *dxp, int n_threads);
/* Zero-padded wide rows (G*C*B images of len) from images (n, h, ld) (the first w of each row). */
int dl_conv_pad_f32(int64_t n, int64_t h, int64_t ld, int64_t w, const float *src, int64_t pad,
                    int64_t wp, int64_t len, float *dst, int n_threads);
/* Its inverse: the (n, h, w) interiors of n wide rows of len. */
int dl_conv_crop_f32(int64_t n, int64_t len, const float *src, int64_t pad, int64_t wp, int64_t h,
                     int64_t w, float *dst, int n_threads);
/* <<< conv */

/* >>> pool: 2x2 max pooling, stride 2, of MaxPool2d (pool.c); contracts in pool.c. */
int dl_maxpool2_forward_f32(int64_t n, int64_t h, int64_t ld, int64_t w, const float *x, float *y,
                            uint8_t *code, int n_threads);
int dl_maxpool2_backward_f32(int64_t n, int64_t h2, int64_t w2, const float *dy,
                             const uint8_t *code, float *dx, int n_threads);
/* <<< pool */

/* >>> loss: softmax cross-entropy of the models' logits (loss.c); contracts in loss.c. */
/* y[i] = exp(x[i]) rounded to float32 (x and y may be the same array). */
int dl_exp_f32(int64_t n, const float *x, float *y, int n_threads);
/* Per peer p of P: loss[p] = mean cross-entropy of the B rows of C logits at z + p*B*C against
 * labels y[p*y_ps + b] (y_ps = B, or 0: one row shared by all peers); z becomes the gradient
 * (want_grad) or the softmax numerators. correct (P values, or NULL) gets per peer the number
 * of rows whose np.argmax (first maximum, or first NaN) is the label. DL_E_RANGE (nothing
 * written) when a label is outside [0, C). */
int dl_softmax_xent_f32(int64_t P, int64_t B, int64_t C, float *z, const int64_t *y, int64_t y_ps,
                        double *loss, int64_t *correct, int want_grad, int n_threads);
/* <<< loss */

/* >>> norm: GroupNorm forward and backward (norm.c); contracts in norm.c. */
int dl_groupnorm_forward_f32(int64_t P, int64_t C, int64_t G, int64_t B, int64_t H, int64_t W,
                             const float *x, int64_t ld, const float *gamma, const float *beta,
                             float eps, float *xc, float *rstd, float *y, int n_threads);
int dl_groupnorm_backward_f32(int64_t P, int64_t C, int64_t G, int64_t B, int64_t H, int64_t W,
                              const float *dy, int64_t ld, const float *xc, const float *rstd,
                              const float *gamma, float *g_gamma, float *g_beta, float *dx,
                              int n_threads);
/* <<< norm */

/* >>> act: the backward pass of ReLU (act.c); contracts in act.c. */
/* dx[i] = dy[i] * (y[i] > 0 ? 1 : 0) for i < n (no overlap). */
int dl_relu_backward_f32(int64_t n, const float *dy, const float *y, float *dx, int n_threads);
/* x[i] = x[i] > 0 or NaN ? x[i] : +0.0, in place. */
int dl_relu_forward_f32(int64_t n, float *x, int n_threads);
/* <<< act */

#endif /* DL_H */
