/* glue.h: what every CPython/NumPy glue file of decentlearn._core (csrc/glue/) shares.
 *
 * The argument converters and checks (dtype -> TypeError; dimensions, shape, contiguity, alignment,
 * writability and overlap -> ValueError naming the argument with the expected and actual values),
 * the status -> exception mapping, the checks of strided peer-batched operands, and the table types
 * of the one driver glue_run (driver.c): a kernel of the usual shape is one glue_op_t row in its
 * family's file. Each family file exports one glue_family_t (its rows and its hand-written
 * functions); csrc/module.c collects them. Defaults (threads, out=None) are resolved in Python
 * (decentlearn/ops), never here. Only module.c imports NumPy's C API (import_array); every other
 * glue file reaches it through the same PY_ARRAY_UNIQUE_SYMBOL.
 */
#ifndef DL_GLUE_H
#define DL_GLUE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#ifndef NPY_NO_DEPRECATED_API
#define NPY_NO_DEPRECATED_API NPY_2_0_API_VERSION
#endif
#define PY_ARRAY_UNIQUE_SYMBOL dl_glue_ARRAY_API
#ifndef DL_GLUE_IMPORT_ARRAY
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>

#include "dl.h"

/* The glue's own symbols stay inside the extension (no clash with other libraries' names). */
#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/* ---- args.c: converters and checks; each sets a Python exception and returns -1 (a converter:
 * 0) on failure ---- */

/* decentlearn._core.NonFiniteError: a ValueError for NaN/inf input (training that diverged);
 * created by module.c. */
extern PyObject *NonFiniteError;

/* Raises the Python exception for a kernel status; `fn` names the function. Returns NULL. */
PyObject *raise_status(const char *fn, int status);

/* dtype (TypeError), ndim, C-contiguous, aligned, and writeable when `writeable`. */
int check_array(PyArrayObject *a, const char *fn, const char *name, int type_num, int ndim,
                int writeable);
/* Aligned to its dtype, and writeable when `writeable`. */
int check_aligned_writeable(PyArrayObject *a, const char *fn, const char *name, int writeable);
/* A 2-D array of exactly the shape (rows, cols). */
int check_shape2(PyArrayObject *a, const char *fn, const char *name, npy_intp rows, npy_intp cols);
/* Whether two arrays' byte ranges [data, data + nbytes) intersect (empty ones never do). */
int overlaps(PyArrayObject *a, PyArrayObject *b);
/* check_disjoint(fn, n_out, n, a0, name0, a1, name1, ...): the first n_out of the n (at most 8)
 * arrays are outputs; each must share no memory with any other (NULL entries skipped). */
int check_disjoint(const char *fn, int n_out, int n, ...);
/* Every value of a float32 array is finite. */
int check_finite_f32(const char *fn, const char *name, PyArrayObject *a);
int check_threads(const char *fn, int n_threads);
/* Rows peer0 .. peer0 + rows - 1 must be representable (the generator's peer is an int64). */
int check_peer_rows(const char *fn, long long peer0, npy_intp rows);

/* "O&" converters: seed and step in [0, 2^64 - 1] (unsigned long long), peer0 in [0, 2^63 - 1]
 * (long long), n_threads >= 1 capped at the CPUs this process may use (int). */
int conv_seed(PyObject *o, void *v);
int conv_step(PyObject *o, void *v);
int conv_peer0(PyObject *o, void *v);
int conv_threads(PyObject *o, void *v);

/* ---- strided.c: operands that are not C-contiguous (row slices, peer-batched 3-D arrays) ---- */

/* A 2-D float32 input whose rows are each contiguous but may lie *ld elements apart. */
int check_rows(PyArrayObject *a, const char *fn, const char *name, npy_intp *ld);
/* Whether b's bytes intersect the byte span of a row-strided 2-D a. */
int overlaps_rows(PyArrayObject *a, npy_intp ld, PyArrayObject *b);
/* A peer-batched 3-D operand: dtype, contiguous last axis, non-negative aligned strides. */
int check_batch3(PyArrayObject *a, const char *fn, const char *name, int type_num, int writeable);
/* Whether the byte ranges touched by two arrays with non-negative strides are disjoint. */
int strided_disjoint(PyArrayObject *a, PyArrayObject *b);
/* A float32 operand of `ndim` dimensions and `shape` (-1: any) with non-negative strides that are
 * multiples of 4 bytes; fills st with its strides in elements (0 for an axis of length <= 1).
 * unit_last: the last axis must be contiguous. */
int strided_operand(PyObject *o, const char *fn, const char *name, int ndim, const npy_intp *shape,
                    int unit_last, int writeable, int64_t *st);
/* Disjoint byte ranges, or views taking disjoint column ranges of every row of one matrix. */
int rows_disjoint(PyArrayObject *a, PyArrayObject *b);
/* An output must not overlap an input (None or NULL input: nothing to check). */
int check_rows_disjoint(const char *fn, PyObject *out, const char *oname, PyObject *in,
                        const char *iname);
/* An operand whose leading axis is 1 (shared) or P peers. */
int check_peers(const char *fn, const char *name, PyObject *o, npy_intp P);

/* ---- driver.c: the table-driven glue ----------------------------------------------------------
 * Most kernels have the same shape: some (rows, dim) arrays, a few scalars, outputs passed by the
 * caller. Such a kernel is one glue_op_t row run by ONE driver, glue_run, which does, in order:
 *   1. parse: a PyArg_ParseTuple format built from args[] ("O!" for an array, "O" for an array
 *      or None (G_OPT_*: None leaves the slot NULL and skips its checks), "i", "p", "n", "f", "O&"
 *      with conv_seed / conv_step / conv_peer0 / conv_threads), so argument-count and type errors
 *      read as in a hand-written function ("topk() argument 1 must be numpy.ndarray, not list");
 *   2. every array: dtype (TypeError), ndim, C-contiguous, aligned, writeable when an output
 *      (G_F32_OR_S8: the first array's dtype if int8, else float32; G_NDIM_ANY: any ndim), then
 *      n_threads >= 1;
 *   3. R = axis 0 of args[rows_from] and D = axis 1 of args[cols_from] (array slots, counted
 *      among the arrays only); each int scalar with a range: "fn: name must be in [lo, hi], got v";
 *   4. op->check (optional): the op's own scalar checks; it may set ext[0], ext[1] (derived
 *      extents such as packed row bytes). Required (checked when the module loads) for an op
 *      with an array of more than 2 axes or of any number: step 6 checks axes 0 and 1 only;
 *   5. with a peer0 argument: peer0 + R - 1 <= 2**63 - 1;
 *   6. each array's shape, axis by axis: X_R, X_D, X_E0, X_E1 (== ext[i]), X_GE_E0 (>= ext[0]);
 *   7. every output shares no memory with any other array (outputs, then inputs, in order);
 *   8. op->post (optional): checks that read array contents (after the shapes are known);
 *   9. op->call without the GIL (the dispatch table is read with the GIL held);
 *  10. status: op->err.status gets op->err's message, others go to raise_status;
 *  11. return: None, the array slot ret[0], or a tuple of slots ret[0], ret[1].
 * Kernels whose arguments do not fit (strided or optional operands with their own messages,
 * results allocated here, no arrays at all) keep a hand-written function in their family's
 * methods[]. */

enum { G_END = 0, G_ARR, G_OPT_ARR, G_INT, G_BOOL, G_SSIZE, G_FLOAT, G_SEED, G_STEP, G_PEER0,
       G_THREADS };
enum { X_ANY = 0, X_R, X_D, X_E0, X_E1, X_GE_E0 }; /* a required extent of one array axis */
enum { E_NONE = 0, E_I0, E_POW2_I0, E_POW2M1_I0 }; /* the %d of a status message */
/* An array dtype that follows the first array: int8 when it is int8, else float32 (the call thunk
 * picks the kernel of c->dtype). */
#define G_F32_OR_S8 (-1)
#define G_NDIM_ANY (-1) /* an array of any number of dimensions (op->check relates the shapes) */
#define GLUE_MAX_ARGS 12
#define GLUE_MAX_ARRAYS 10

typedef struct {
    int kind;             /* G_* */
    const char *name;     /* arrays and ranged ints: the name in messages */
    int dtype, ndim, out; /* arrays: NPY_* type (or G_F32_OR_S8), dimensions, written by the
                             kernel */
    int dims[2];          /* arrays: X_* for axes 0 and 1 (further axes: op->check) */
    int ranged;           /* G_INT: check lo <= v <= hi */
    long long lo, hi;
} glue_arg_t;

typedef struct glue_op glue_op_t;

/* One call's converted arguments, in declaration order per kind (the sizes fit the largest row). */
typedef struct {
    const glue_op_t *op;
    const char *fn; /* op->name, the name in messages */
    PyObject *args;
    PyArrayObject *arr[GLUE_MAX_ARRAYS];
    int ints[3];
    Py_ssize_t ssz[6];
    int dtype; /* G_F32_OR_S8 resolved */
    float flt[4];
    unsigned long long seed, step;
    long long peer0;
    int n_threads;
    npy_intp rows, dim, ext[2];
} glue_call_t;

struct glue_op {
    const char *name, *doc;
    glue_arg_t args[GLUE_MAX_ARGS]; /* Python argument order, ended by G_END */
    int rows_from, cols_from;       /* array slots (never optional) giving R (axis 0), D (axis 1) */
    int (*check)(glue_call_t *c);   /* optional, -1 with an exception set */
    int (*post)(glue_call_t *c);    /* optional, -1 with an exception set */
    int (*call)(const glue_call_t *c, const dl_dispatch_t *d);
    struct {
        int status;      /* 0: none */
        PyObject **exc;  /* &PyExc_ValueError or &NonFiniteError */
        const char *fmt; /* "%s: ... %d": the function name, then the value picked by `arg` */
        int arg;         /* E_* */
    } err;
    int n_ret;          /* 0: None, 1: the array, 2: a tuple */
    signed char ret[2]; /* array slots returned */
};

#define G_IN(nm, ty, nd, d0, d1) {G_ARR, nm, ty, nd, 0, {d0, d1}, 0, 0, 0}
#define G_OUT(nm, ty, nd, d0, d1) {G_ARR, nm, ty, nd, 1, {d0, d1}, 0, 0, 0}
/* An array or None (then its slot is NULL: no checks, the thunk passes NULL). */
#define G_OPT_IN(nm, ty, nd, d0, d1) {G_OPT_ARR, nm, ty, nd, 0, {d0, d1}, 0, 0, 0}
#define G_OPT_OUT(nm, ty, nd, d0, d1) {G_OPT_ARR, nm, ty, nd, 1, {d0, d1}, 0, 0, 0}
#define G_BOOL_ARG(nm) {G_BOOL, nm, 0, 0, 0, {0, 0}, 0, 0, 0}
#define G_INT_IN(nm, l, h) {G_INT, nm, 0, 0, 0, {0, 0}, 1, l, h}
#define G_I(nm) {G_INT, nm, 0, 0, 0, {0, 0}, 0, 0, 0}
#define G_N(nm) {G_SSIZE, nm, 0, 0, 0, {0, 0}, 0, 0, 0}
#define G_F(nm) {G_FLOAT, nm, 0, 0, 0, {0, 0}, 0, 0, 0}
#define G_SEED_ARG {G_SEED, "seed", 0, 0, 0, {0, 0}, 0, 0, 0}
#define G_STEP_ARG {G_STEP, "step", 0, 0, 0, {0, 0}, 0, 0, 0}
#define G_PEER0_ARG {G_PEER0, "peer0", 0, 0, 0, {0, 0}, 0, 0, 0}
#define G_THREADS_ARG {G_THREADS, "n_threads", 0, 0, 0, {0, 0}, 0, 0, 0}
#define G_DATA(c, i) PyArray_DATA((c)->arr[i])
#define G_DATA_OR_NULL(c, i) ((c)->arr[i] == NULL ? NULL : PyArray_DATA((c)->arr[i]))

/* One kernel family's glue: its table rows and its hand-written functions (NULL-terminated, or
 * NULL). defs holds one PyMethodDef per row, filled by glue_add_family. */
typedef struct {
    const char *name;
    const glue_op_t *ops;
    int n_ops;
    PyMethodDef *defs;
    PyMethodDef *methods;
} glue_family_t;

/* GLUE_FAMILY(fam, ops, methods) defines glue_family_<fam> from a static glue_op_t ops[] array;
 * GLUE_FAMILY_METHODS(fam, methods) one with hand-written functions only. */
#define GLUE_FAMILY(fam, ops, methods)                                                             \
    static PyMethodDef fam##_defs[sizeof ops / sizeof ops[0]];                                     \
    const glue_family_t glue_family_##fam = {#fam, ops, (int)(sizeof ops / sizeof ops[0]),         \
                                             fam##_defs, methods}
#define GLUE_FAMILY_METHODS(fam, methods)                                                          \
    const glue_family_t glue_family_##fam = {#fam, NULL, 0, NULL, methods}

/* Adds a family's functions to the module: the hand-written ones with the module as self, one
 * glue_run function per row with the row (in a capsule) as self. */
int glue_add_family(PyObject *m, const glue_family_t *f);

/* The families (csrc/glue/<family>.c, named like the kernel files and decentlearn/ops modules). */
extern const glue_family_t glue_family_gossip, glue_family_rng, glue_family_bitpack,
    glue_family_natural, glue_family_topk, glue_family_stc, glue_family_quant, glue_family_gemm_s8,
    glue_family_nn, glue_family_optim, glue_family_conv, glue_family_pool, glue_family_loss,
    glue_family_norm, glue_family_act, glue_family_copy, glue_family_consensus, glue_family_peak,
    glue_family_config;

/* config.c: applies DECENTLEARN_ISA at import (ImportError when unknown or unsupported). */
int glue_isa_from_env(void);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
