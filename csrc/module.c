/* module.c: creates decentlearn._core from the per-family glue tables in csrc/glue/.
 *
 * The only C file that imports NumPy's C API (import_array) and the one place where the families
 * are listed: each csrc/glue/<family>.c exports a glue_family_t (its table rows, run by the one
 * driver glue_run in glue/driver.c, and its hand-written functions); this file applies
 * DECENTLEARN_ISA, creates the module and NonFiniteError, and adds every family's functions. A
 * new family is one glue file, one line in glue.h and one line in families[] below.
 */
#define DL_GLUE_IMPORT_ARRAY
#include "glue/glue.h"

static const glue_family_t *const families[] = {
    &glue_family_gossip, &glue_family_rng,     &glue_family_bitpack,   &glue_family_natural,
    &glue_family_topk,   &glue_family_stc,     &glue_family_quant,     &glue_family_gemm_s8,
    &glue_family_nn,     &glue_family_optim,   &glue_family_conv,      &glue_family_pool,
    &glue_family_loss,   &glue_family_norm,    &glue_family_copy,      &glue_family_consensus,
    &glue_family_act,    &glue_family_peak,    &glue_family_config,
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "decentlearn._core",
                                       "C kernels of decentlearn (see decentlearn.ops).", -1,
                                       NULL, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__core(void) {
    import_array();
    if (glue_isa_from_env() < 0) return NULL;
    (void)dl_dispatch();
    (void)dl_llc_bytes(); /* read once, before any kernel runs on threads */
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    NonFiniteError = PyErr_NewExceptionWithDoc(
        "decentlearn._core.NonFiniteError",
        "A kernel was given NaN or infinity where finite values are required.", PyExc_ValueError,
        NULL);
    if (NonFiniteError == NULL || PyModule_AddObjectRef(m, "NonFiniteError", NonFiniteError) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (glue_add_family(m, families[i]) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    return m;
}
