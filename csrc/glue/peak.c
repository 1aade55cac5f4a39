/* peak.c: glue of the int8 multiply-add peak loop decentlearn.bench measures the machine's limit
 * with (csrc/peak*.c, dispatched per ISA): peak_s8 (a fixed number of iterations per thread) and
 * peak_s8_window (every thread over one time window), hand-written (no arrays; they return
 * counts).
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

/* peak_s8_window(chunk, seconds, n_threads) -> (ops, elapsed, check): the active path's loop on
 * n_threads threads at once over a common window of about `seconds` (dl_peak_s8_window). */
static PyObject *py_peak_s8_window(PyObject *self, PyObject *args) {
    long long chunk;
    double seconds, elapsed = 0.0;
    int n_threads, status;
    int64_t ops = 0, check = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "LdO&:peak_s8_window", &chunk, &seconds, conv_threads,
                          &n_threads))
        return NULL;
    if (chunk < 1) {
        PyErr_Format(PyExc_ValueError, "peak_s8_window: chunk must be >= 1, got %lld", chunk);
        return NULL;
    }
    if (!(seconds >= 0.0 && seconds <= 3600.0)) {
        PyErr_Format(PyExc_ValueError,
                     "peak_s8_window: seconds must be in [0, 3600], got %R",
                     PyTuple_GET_ITEM(args, 1));
        return NULL;
    }
    if (check_threads("peak_s8_window", n_threads) < 0) return NULL;
    const dl_dispatch_t *d = dl_dispatch();
    Py_BEGIN_ALLOW_THREADS;
    status = dl_peak_s8_window(d->peak_s8, (int64_t)chunk, seconds, n_threads, &ops, &elapsed,
                               &check);
    Py_END_ALLOW_THREADS;
    if (status != DL_OK) return raise_status("peak_s8_window", status);
    return Py_BuildValue("(LdL)", (long long)ops, elapsed, (long long)check);
}

static PyMethodDef methods[] = {
    {"peak_s8", py_peak_s8, METH_VARARGS,
     "peak_s8(reps, n_threads) -> (ops, check): the active path's int8 multiply-add peak loop."},
    {"peak_s8_window", py_peak_s8_window, METH_VARARGS,
     "peak_s8_window(chunk, seconds, n_threads) -> (ops, elapsed, check): the loop on every "
     "thread at once over a common time window."},
    {NULL, NULL, 0, NULL},
};

GLUE_FAMILY_METHODS(peak, methods);
