/* config.c: glue of the build description and the run-time ISA dispatch (csrc/dispatch.c):
 * config() (the active and supported paths, OpenMP, compiler), set_isa(name), and the
 * DECENTLEARN_ISA environment variable applied once at import. decentlearn.show_config() and the
 * tests' `isa` fixture are the Python side.
 */
#include "glue.h"

#include <stdlib.h>
#include <string.h>

/* config() -> dict describing the build and the active paths. */
static PyObject *py_config(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    PyObject *supported = PyList_New(0);
    if (supported == NULL) return NULL;
    for (int i = 0; i < DL_ISA_COUNT; i++) {
        if (!dl_isa_supported((dl_isa_t)i)) continue;
        PyObject *name = PyUnicode_FromString(dl_isa_name((dl_isa_t)i));
        if (name == NULL || PyList_Append(supported, name) < 0) {
            Py_XDECREF(name);
            Py_DECREF(supported);
            return NULL;
        }
        Py_DECREF(name);
    }
#ifdef _OPENMP
    const int openmp = 1, max_threads = omp_get_max_threads(), omp_version = _OPENMP;
#else
    const int openmp = 0, max_threads = 1, omp_version = 0;
#endif
#if defined(__VERSION__)
    const char *compiler = __VERSION__;
#else
    const char *compiler = "unknown";
#endif
    return Py_BuildValue("{s:s,s:N,s:O,s:i,s:i,s:s,s:L}", "isa", dl_dispatch()->name,
                         "isa_supported", supported, "openmp", openmp ? Py_True : Py_False,
                         "omp_max_threads", max_threads, "omp_version", omp_version, "compiler",
                         compiler, "llc_bytes", (long long)dl_llc_bytes());
}

/* set_isa(name) forces an instruction-set path for every kernel (tests, benchmarks). */
static PyObject *py_set_isa(PyObject *self, PyObject *args) {
    const char *name;
    (void)self;
    if (!PyArg_ParseTuple(args, "s:set_isa", &name)) return NULL;
    for (int i = 0; i < DL_ISA_COUNT; i++) {
        if (strcmp(name, dl_isa_name((dl_isa_t)i)) != 0) continue;
        if (dl_set_isa((dl_isa_t)i) != DL_OK) {
            PyErr_Format(PyExc_ValueError, "set_isa: this CPU or build does not support '%s'",
                         name);
            return NULL;
        }
        Py_RETURN_NONE;
    }
    PyErr_Format(PyExc_ValueError,
                 "set_isa: isa must be one of 'generic', 'avx2', 'avx512', 'avx512vnni', 'amx', "
                 "got '%s'",
                 name);
    return NULL;
}

int glue_isa_from_env(void) {
    const char *forced = getenv("DECENTLEARN_ISA");
    if (forced == NULL || forced[0] == '\0') return 0;
    int found = 0;
    for (int i = 0; i < DL_ISA_COUNT; i++) {
        if (strcmp(forced, dl_isa_name((dl_isa_t)i)) != 0) continue;
        found = 1;
        if (dl_set_isa((dl_isa_t)i) != DL_OK) {
            PyErr_Format(PyExc_ImportError,
                         "DECENTLEARN_ISA=%s: this CPU or build does not support it", forced);
            return -1;
        }
    }
    if (!found) {
        PyErr_Format(PyExc_ImportError,
                     "DECENTLEARN_ISA must be 'generic', 'avx2', 'avx512', 'avx512vnni' or 'amx', "
                     "got '%s'",
                     forced);
        return -1;
    }
    return 0;
}

/* set_llc_bytes(n) -> the last-level cache size the kernels assumed before; n >= 0 sets it, -1
 * reads it again (tests and benchmarks: it decides which outputs bypass the caches). */
static PyObject *py_set_llc_bytes(PyObject *self, PyObject *args) {
    long long n;
    (void)self;
    if (!PyArg_ParseTuple(args, "L:set_llc_bytes", &n)) return NULL;
    if (n < -1) {
        PyErr_Format(PyExc_ValueError, "set_llc_bytes: n must be >= 0 or -1 (read again), got %lld",
                     n);
        return NULL;
    }
    return PyLong_FromLongLong((long long)dl_set_llc_bytes((int64_t)n));
}

static PyMethodDef methods[] = {
    {"config", py_config, METH_NOARGS, "config() -> dict describing the build and active ISA."},
    {"set_isa", py_set_isa, METH_VARARGS,
     "set_isa(name): force 'generic', 'avx2', 'avx512', 'avx512vnni' or 'amx'."},
    {"set_llc_bytes", py_set_llc_bytes, METH_VARARGS,
     "set_llc_bytes(n) -> previous: the last-level cache size in bytes the kernels assume "
     "(-1: read it again)."},
    {NULL, NULL, 0, NULL},
};

GLUE_FAMILY_METHODS(config, methods);
