/* The C speedup of nccldoctor/ncclog/lines.py: one pass over a run of whole lines.
 *
 * classify(data, start, end) -> (lines, shapes, candidates, calls), exactly as
 * lines.classify_python computes it with Python's own bytes and re operations (the tests run
 * both on every real log of the corpus and on generated text):
 *   lines        the lines of data[start:end] that a newline ends;
 *   shapes       those without "NCCL" (the application's), each digit as '0', in order;
 *   candidates   those with an "NCCL" that is not the envelope of a collective-trace line
 *                (" INFO <word>: opCount ") or of a CALL line (" CALL "), in order:
 *                ncclog/parser.py's CANDIDATE regex;
 *   calls        how many "NCCL CALL " the other lines hold.
 * It reads only inside data[start:end] and never assumes a NUL byte ends anything.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define NEEDLE "NCCL"
#define NEEDLE_LEN 4

static int is_word(unsigned char c) {  /* re's \w in a bytes pattern: ASCII only */
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static int starts(const char *at, const char *stop, const char *text, size_t len) {
    return (size_t)(stop - at) >= len && memcmp(at, text, len) == 0;
}

/* 1: the NCCL at `at` heads a CALL line, 2: a collective-trace line, 0: neither. */
static int envelope(const char *at, const char *stop) {
    const char *p = at + NEEDLE_LEN;
    if (starts(p, stop, " CALL ", 6))
        return 1;
    if (!starts(p, stop, " INFO ", 6))
        return 0;
    p += 6;
    const char *word = p;
    while (p < stop && is_word((unsigned char)*p))
        p++;  /* greedy \w+ cannot give back: ':' is no word character */
    return p > word && starts(p, stop, ": opCount ", 10) ? 2 : 0;
}

/* The first NEEDLE in [from, stop): memchr for its first letter, then the rest. Twice as
 * fast as glibc's memmem on logs, where an upper-case N is rare outside the needle. */
static const char *find_needle(const char *from, const char *stop) {
    while (stop - from >= NEEDLE_LEN) {
        const char *at = memchr(from, NEEDLE[0], (size_t)(stop - from - NEEDLE_LEN + 1));
        if (at == NULL)
            return NULL;
        if (memcmp(at + 1, NEEDLE + 1, NEEDLE_LEN - 1) == 0)
            return at;
        from = at + 1;
    }
    return NULL;
}

static int append_line(PyObject *list, const char *first, const char *stop, int shaped) {
    PyObject *line = PyBytes_FromStringAndSize(shaped ? NULL : first, stop - first);
    if (line == NULL)
        return -1;
    if (shaped) {  /* lines.SHAPE: every digit as 0, so a progress bar is one shape */
        char *out = PyBytes_AS_STRING(line);
        for (Py_ssize_t i = 0; i < stop - first; i++)
            out[i] = first[i] >= '1' && first[i] <= '9' ? '0' : first[i];
    }
    int failed = PyList_Append(list, line);
    Py_DECREF(line);
    return failed;
}

static PyObject *classify(PyObject *module, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, end;
    if (!PyArg_ParseTuple(args, "y*nn", &view, &start, &end))
        return NULL;
    if (end > view.len)  /* as Python's slices: bounds past the data are its ends */
        end = view.len;
    if (start < 0)
        start = 0;
    if (start > end)
        start = end;
    PyObject *shapes = PyList_New(0);
    PyObject *candidates = PyList_New(0);
    Py_ssize_t lines = 0, calls = 0;
    if (shapes == NULL || candidates == NULL)
        goto fail;
    const char *base = (const char *)view.buf;
    const char *p = base + start, *last = base + end;
    const char *nl;
    while (p < last && (nl = memchr(p, '\n', (size_t)(last - p))) != NULL) {
        lines++;
        const char *at = find_needle(p, nl);
        if (at == NULL) {
            if (append_line(shapes, p, nl, 1) < 0)
                goto fail;
        } else {
            Py_ssize_t line_calls = 0;
            int candidate = 0;
            for (; at != NULL; at = find_needle(at + 1, nl)) {
                int kind = envelope(at, nl);
                if (kind == 0) {
                    candidate = 1;
                    break;
                }
                line_calls += kind == 1;
            }
            if (candidate) {
                if (append_line(candidates, p, nl, 0) < 0)
                    goto fail;
            } else {
                calls += line_calls;
            }
        }
        p = nl + 1;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("nNNn", lines, shapes, candidates, calls);
fail:
    Py_XDECREF(shapes);
    Py_XDECREF(candidates);
    PyBuffer_Release(&view);
    return NULL;
}

static PyMethodDef methods[] = {
    {"classify", classify, METH_VARARGS,
     "classify(data, start, end) -> (lines, shapes, candidates, calls)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_lines", "The C speedup of nccldoctor.ncclog.lines.", -1, methods,
};

PyMODINIT_FUNC PyInit__lines(void) {
    return PyModule_Create(&module);
}
