/* C helpers for deep packet inspection: the few pure functions the analysis side calls for nearly every
 * flow, where CPython's per-character loops cost more than the rest of the detector (measured by
 * bench/pipeline_bench.py). Each one has a Python reference beside its caller that the tests hold it to
 * (tests/appliance/native/test_dpi.py), also under ASan/UBSan (test_sanitized.py).
 *
 * shannon_entropy(text) -> float
 *     Bits per character of a str (code points) or a bytes-like object (bytes), 0.0 when empty:
 *     log2(n) - sum(c * log2(c)) / n over the counts c of distinct symbols, summed in ascending
 *     symbol order.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* Counts of one-byte symbols: a table, no sorting. */
static double entropy_of_bytes(const unsigned char *data, Py_ssize_t n)
{
    Py_ssize_t counts[256] = {0};
    for (Py_ssize_t i = 0; i < n; i++)
        counts[data[i]]++;
    double weighted = 0.0;
    for (int s = 0; s < 256; s++) {
        if (counts[s] > 1)  /* 1 * log2(1) == 0 */
            weighted += (double)counts[s] * log2((double)counts[s]);
    }
    return log2((double)n) - weighted / (double)n;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Two- and four-byte strings (rare: names are ASCII after IDNA): sort a copy, count runs. */
static PyObject *entropy_of_wide(PyObject *text, Py_ssize_t n)
{
    uint32_t *points = PyMem_Malloc((size_t)n * sizeof(uint32_t));
    if (points == NULL)
        return PyErr_NoMemory();
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    for (Py_ssize_t i = 0; i < n; i++)
        points[i] = PyUnicode_READ(kind, data, i);
    qsort(points, (size_t)n, sizeof(uint32_t), cmp_u32);
    double weighted = 0.0;
    Py_ssize_t run = 1;
    for (Py_ssize_t i = 1; i <= n; i++) {
        if (i < n && points[i] == points[i - 1]) {
            run++;
            continue;
        }
        if (run > 1)
            weighted += (double)run * log2((double)run);
        run = 1;
    }
    PyMem_Free(points);
    return PyFloat_FromDouble(log2((double)n) - weighted / (double)n);
}

static PyObject *shannon_entropy(PyObject *module, PyObject *text)
{
    if (PyUnicode_Check(text)) {
        Py_ssize_t n = PyUnicode_GET_LENGTH(text);
        if (n == 0)
            return PyFloat_FromDouble(0.0);
        if (PyUnicode_KIND(text) == PyUnicode_1BYTE_KIND)
            return PyFloat_FromDouble(entropy_of_bytes(PyUnicode_1BYTE_DATA(text), n));
        return entropy_of_wide(text, n);
    }
    Py_buffer view;
    if (PyObject_GetBuffer(text, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Format(PyExc_TypeError, "shannon_entropy() takes str or bytes, not %.100s", Py_TYPE(text)->tp_name);
        return NULL;
    }
    double value = view.len ? entropy_of_bytes(view.buf, view.len) : 0.0;
    PyBuffer_Release(&view);
    return PyFloat_FromDouble(value);
}

static PyMethodDef dpi_functions[] = {
    {"shannon_entropy", shannon_entropy, METH_O,
     "shannon_entropy(text) -> float: bits per character of a str or bytes (0.0 when empty)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef dpi_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "appliance.native.dpi",
    .m_doc = "C helpers for deep packet inspection (see dpi.c).",
    .m_size = 0,
    .m_methods = dpi_functions,
};

PyMODINIT_FUNC PyInit_dpi(void)
{
    return PyModuleDef_Init(&dpi_module);
}
