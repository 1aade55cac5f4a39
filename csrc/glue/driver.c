/* driver.c: the one driver of the table-driven glue (glue_run) and the function that adds a
 * family's functions to the module (glue_add_family).
 *
 * glue_run parses, checks, releases the GIL around the kernel and maps its status for every
 * glue_op_t row of every family, in the fixed order listed in glue.h; a row's own checks and its
 * kernel call are the hooks in its family's file.
 */
#include "glue.h"

#include <stdio.h>
#include <string.h>

/* Step 6: axes 0 and 1 of one array against R, D and the extents (ValueError with the expected and
 * actual shapes). */
static int glue_check_shape(const glue_call_t *c, const glue_arg_t *s, PyArrayObject *a) {
    npy_intp want[2];
    int ge = 0, bad = 0;
    if (s->ndim > 2 || s->ndim == G_NDIM_ANY) return 0; /* checked by op->check */
    for (int d = 0; d < s->ndim; d++) {
        switch (s->dims[d]) {
        case X_R: want[d] = c->rows; break;
        case X_D: want[d] = c->dim; break;
        case X_E0: want[d] = c->ext[0]; break;
        case X_E1: want[d] = c->ext[1]; break;
        case X_GE_E0: want[d] = c->ext[0], ge = 1; break;
        default: want[d] = PyArray_DIM(a, d); break;
        }
        if (s->dims[d] == X_GE_E0 ? PyArray_DIM(a, d) < want[d] : PyArray_DIM(a, d) != want[d])
            bad = 1;
    }
    if (!bad) return 0;
    const char *fn = c->fn;
    if (s->ndim == 1)
        PyErr_Format(PyExc_ValueError, "%s: %s must have shape (%zd,), got (%zd,)", fn, s->name,
                     (Py_ssize_t)want[0], (Py_ssize_t)PyArray_DIM(a, 0));
    else if (ge)
        PyErr_Format(PyExc_ValueError, "%s: %s must have shape (%zd, >= %lld), got (%zd, %zd)", fn,
                     s->name, (Py_ssize_t)want[0], (long long)want[1],
                     (Py_ssize_t)PyArray_DIM(a, 0), (Py_ssize_t)PyArray_DIM(a, 1));
    else
        PyErr_Format(PyExc_ValueError, "%s: %s must have shape (%zd, %zd), got (%zd, %zd)", fn,
                     s->name, (Py_ssize_t)want[0], (Py_ssize_t)want[1],
                     (Py_ssize_t)PyArray_DIM(a, 0), (Py_ssize_t)PyArray_DIM(a, 1));
    return -1;
}

/* The one driver of every glue_op_t row; self is a capsule holding the row. */
static PyObject *glue_run(PyObject *self, PyObject *args) {
    const glue_op_t *op = PyCapsule_GetPointer(self, "decentlearn._core.glue_op");
    if (op == NULL) return NULL;
    glue_call_t c;
    memset(&c, 0, sizeof c);
    c.op = op, c.args = args;
    c.fn = op->name;
    const glue_arg_t *arr_spec[GLUE_MAX_ARRAYS];
    /* 1. parse with a format built from the table; unused trailing pointers are ignored. */
    char fmt[3 * GLUE_MAX_ARGS + 64];
    void *p[2 * GLUE_MAX_ARGS];
    int nf = 0, np = 0, na = 0, ni = 0, nn = 0, nfl = 0, has_peer0 = 0;
    memset(p, 0, sizeof p);
    for (const glue_arg_t *s = op->args; s->kind != G_END; s++) {
        switch (s->kind) {
        case G_ARR:
            fmt[nf++] = 'O', fmt[nf++] = '!';
            p[np++] = &PyArray_Type, p[np++] = &c.arr[na];
            arr_spec[na++] = s;
            break;
        case G_OPT_ARR: /* "O" into the slot, checked after parsing */
            fmt[nf++] = 'O', p[np++] = &c.arr[na];
            arr_spec[na++] = s;
            break;
        case G_INT: fmt[nf++] = 'i', p[np++] = &c.ints[ni++]; break;
        case G_BOOL: fmt[nf++] = 'p', p[np++] = &c.ints[ni++]; break;
        case G_SSIZE: fmt[nf++] = 'n', p[np++] = &c.ssz[nn++]; break;
        case G_FLOAT: fmt[nf++] = 'f', p[np++] = &c.flt[nfl++]; break;
        default: {
            void *conv = s->kind == G_SEED    ? (void *)conv_seed
                         : s->kind == G_STEP  ? (void *)conv_step
                         : s->kind == G_PEER0 ? (void *)conv_peer0
                                              : (void *)conv_threads;
            void *dst = s->kind == G_SEED    ? (void *)&c.seed
                        : s->kind == G_STEP  ? (void *)&c.step
                        : s->kind == G_PEER0 ? (void *)&c.peer0
                                             : (void *)&c.n_threads;
            has_peer0 |= s->kind == G_PEER0;
            fmt[nf++] = 'O', fmt[nf++] = '&', p[np++] = conv, p[np++] = dst;
        }
        }
    }
    snprintf(fmt + nf, sizeof fmt - nf, ":%s", c.fn);
    if (!PyArg_ParseTuple(args, fmt, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9],
                          p[10], p[11], p[12], p[13], p[14], p[15], p[16], p[17], p[18], p[19],
                          p[20], p[21], p[22], p[23]))
        return NULL;
    const char *fn = c.fn;
    for (int i = 0; i < na; i++) {
        if (arr_spec[i]->kind != G_OPT_ARR) continue;
        PyObject *o = (PyObject *)c.arr[i];
        if (o == Py_None)
            c.arr[i] = NULL;
        else if (!PyArray_Check(o))
            return PyErr_Format(PyExc_TypeError, "%s: %s must be a numpy array or None", fn,
                                arr_spec[i]->name);
    }
    /* 2. arrays */
    c.dtype = na > 0 && c.arr[0] != NULL && PyArray_TYPE(c.arr[0]) == NPY_INT8 ? NPY_INT8
                                                                          : NPY_FLOAT32;
    for (int i = 0; i < na; i++)
        if (c.arr[i] != NULL && check_array(c.arr[i], fn, arr_spec[i]->name,
                        arr_spec[i]->dtype == G_F32_OR_S8 ? c.dtype : arr_spec[i]->dtype,
                        arr_spec[i]->ndim == G_NDIM_ANY ? PyArray_NDIM(c.arr[i])
                                                        : arr_spec[i]->ndim,
                        arr_spec[i]->out))
            return NULL;
    if (check_threads(fn, c.n_threads)) return NULL;
    /* 3. R, D and ranged ints */
    c.rows = PyArray_NDIM(c.arr[op->rows_from]) > 0 ? PyArray_DIM(c.arr[op->rows_from], 0) : 1;
    c.dim = PyArray_NDIM(c.arr[op->cols_from]) > 1 ? PyArray_DIM(c.arr[op->cols_from], 1) : 1;
    ni = 0;
    for (const glue_arg_t *s = op->args; s->kind != G_END; s++) {
        if (s->kind != G_INT && s->kind != G_BOOL) continue;
        const int v = c.ints[ni++];
        if (s->ranged && (v < s->lo || v > s->hi))
            return PyErr_Format(PyExc_ValueError, "%s: %s must be in [%lld, %lld], got %d", fn,
                                s->name, s->lo, s->hi, v);
    }
    /* 4. - 8. */
    if (op->check != NULL && op->check(&c)) return NULL;
    if (has_peer0 && check_peer_rows(fn, c.peer0, c.rows)) return NULL;
    for (int i = 0; i < na; i++)
        if (c.arr[i] != NULL && glue_check_shape(&c, arr_spec[i], c.arr[i])) return NULL;
    PyArrayObject *ordered[GLUE_MAX_ARRAYS];
    const char *names[GLUE_MAX_ARRAYS];
    int n_out = 0, k = 0;
    for (int pass = 1; pass >= 0; pass--)
        for (int i = 0; i < na; i++)
            if (arr_spec[i]->out == pass && c.arr[i] != NULL) {
                ordered[k] = c.arr[i], names[k++] = arr_spec[i]->name;
                n_out += pass;
            }
    for (int i = 0; i < n_out; i++)
        for (int j = 0; j < k; j++)
            if (j != i && overlaps(ordered[i], ordered[j]))
                return PyErr_Format(PyExc_ValueError, "%s: %s must not share memory with %s", fn,
                                    names[i], names[j]);
    if (op->post != NULL && op->post(&c)) return NULL;
    /* 9. - 10. */
    const dl_dispatch_t *d = dl_dispatch();
    int status;
    Py_BEGIN_ALLOW_THREADS;
    status = op->call(&c, d);
    Py_END_ALLOW_THREADS;
    if (status != DL_OK && status == op->err.status) {
        const int i0 = c.ints[0];
        const int v = op->err.arg == E_I0         ? i0
                      : op->err.arg == E_POW2_I0  ? 1 << i0
                      : op->err.arg == E_POW2M1_I0 ? (1 << i0) - 1
                                                  : 0;
        return PyErr_Format(*op->err.exc, op->err.fmt, fn, v);
    }
    if (status != DL_OK) return raise_status(fn, status);
    /* 11. */
    if (op->n_ret == 0) Py_RETURN_NONE;
    if (op->n_ret == 1) return Py_NewRef((PyObject *)c.arr[op->ret[0]]);
    return Py_BuildValue("(OO)", c.arr[op->ret[0]], c.arr[op->ret[1]]);
}

int glue_add_family(PyObject *m, const glue_family_t *f) {
    if (f->methods != NULL && PyModule_AddFunctions(m, f->methods) < 0) return -1;
    if (f->n_ops == 0) return 0;
    PyObject *modname = PyUnicode_FromString("decentlearn._core");
    if (modname == NULL) return -1;
    for (int i = 0; i < f->n_ops; i++) {
        const glue_op_t *op = &f->ops[i];
        /* Step 6 checks axes 0 and 1 of 1- and 2-D arrays only: an op with a larger or free-form
         * array must relate its shapes in its check hook, or a kernel could index past an end. */
        for (int a = 0; op->check == NULL && a < GLUE_MAX_ARGS && op->args[a].kind != G_END; a++)
            if ((op->args[a].kind == G_ARR || op->args[a].kind == G_OPT_ARR) &&
                (op->args[a].ndim > 2 || op->args[a].ndim == G_NDIM_ANY)) {
                Py_DECREF(modname);
                PyErr_Format(PyExc_SystemError, "glue table: %s has the %d-axis array %s and no "
                             "check hook", op->name, op->args[a].ndim, op->args[a].name);
                return -1;
            }
        f->defs[i] = (PyMethodDef){op->name, glue_run, METH_VARARGS, op->doc};
        PyObject *cap = PyCapsule_New((void *)op, "decentlearn._core.glue_op", NULL);
        PyObject *fn = cap == NULL ? NULL : PyCFunction_NewEx(&f->defs[i], cap, modname);
        Py_XDECREF(cap);
        const int rc = fn == NULL ? -1 : PyModule_AddObjectRef(m, op->name, fn);
        Py_XDECREF(fn);
        if (rc < 0) {
            Py_DECREF(modname);
            return -1;
        }
    }
    Py_DECREF(modname);
    return 0;
}
