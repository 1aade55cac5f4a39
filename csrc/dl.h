/* dl.h: types, status codes and small helpers shared by every decentlearn kernel.
 *
 * Kernels in csrc/ work on raw pointers and sizes, never include Python.h, and report failure
 * through a negative DL_E_* status that the glue (module.c) turns into a Python exception naming
 * the argument at fault. Each kernel family that has ISA-specific builds declares one symbol per
 * ISA (suffix _generic, _avx2, _avx512) and is reached through the dispatch table below, filled
 * once at import from __builtin_cpu_supports (or forced with DECENTLEARN_ISA).
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
typedef enum { DL_ISA_GENERIC = 0, DL_ISA_AVX2 = 1, DL_ISA_AVX512 = 2, DL_ISA_COUNT = 3 } dl_isa_t;

typedef int (*dl_gossip_csr_f32_fn)(const dl_csr_f32_t *w, int64_t dim, const float *x, float *y,
                                    int n_threads);

/* One entry per kernel that has ISA-specific builds. */
typedef struct {
    dl_isa_t isa;
    const char *name;
    dl_gossip_csr_f32_fn gossip_csr_f32;
} dl_dispatch_t;

/* dispatch.c */
const dl_dispatch_t *dl_dispatch(void);
int dl_isa_supported(dl_isa_t isa);
int dl_set_isa(dl_isa_t isa); /* DL_E_ARG when the CPU (or the build) lacks it */
const char *dl_isa_name(dl_isa_t isa);

/* gossip.c (ISA independent) */
int dl_csr_check(const dl_csr_f32_t *w);

#define DL_DECLARE_ISA(fn, ret, args)                                                              \
    ret fn##_generic args;                                                                         \
    ret fn##_avx2 args;                                                                            \
    ret fn##_avx512 args;

DL_DECLARE_ISA(dl_gossip_csr_f32, int,
               (const dl_csr_f32_t *w, int64_t dim, const float *x, float *y, int n_threads))

static inline int64_t dl_min_i64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t dl_max_i64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t dl_cdiv_i64(int64_t a, int64_t b) { return (a + b - 1) / b; }

#endif /* DL_H */
