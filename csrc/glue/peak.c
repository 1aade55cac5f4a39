/* peak.c: glue of the int8 multiply-add peak loop decentlearn.bench measures the machine's limit
 * with (csrc/peak*.c, dispatched per ISA): peak_s8, hand-written (no arrays; it returns counts).
 * decentlearn/ops/peak.py is the Python side.
 */
#include "glue.h"

/* peak_s8(reps, n_threads) -> (ops, check): the active path's int8 peak loop, reps iterations on
 * each thread; ops = operations done (2 per multiply-add). */
static PyObject *py_peak_s8(PyObject *self, PyObject *args) {
    long long reps;
    int n_threads, status;
    int64_t ops = 0, check = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "LO&:peak_s8", &reps, conv_threads, &n_threads)) return NULL;
    if (reps < 0) {
        PyErr_Format(PyExc_ValueError, "peak_s8: reps must be >= 0, got %lld", reps);
        return NULL;
    }
    if (check_threads("peak_s8", n_threads) < 0) return NULL;
    const dl_dispatch_t *d = dl_dispatch();
    Py_BEGIN_ALLOW_THREADS;
    status = d->peak_s8((int64_t)reps, n_threads, &ops, &check);
    Py_END_ALLOW_THREADS;
    if (status != DL_OK) return raise_status("peak_s8", status);
    return Py_BuildValue("(LL)", (long long)ops, (long long)check);
}

static PyMethodDef methods[] = {
    {"peak_s8", py_peak_s8, METH_VARARGS,
     "peak_s8(reps, n_threads) -> (ops, check): the active path's int8 multiply-add peak loop."},
    {NULL, NULL, 0, NULL},
};

GLUE_FAMILY_METHODS(peak, methods);
