/* C helpers for deep packet inspection: the few pure functions the analysis side calls for nearly every
 * flow, where CPython's per-character loops cost more than the rest of the detector (measured by
 * bench/pipeline_bench.py). Each one has a Python reference beside its caller that the tests hold it to
 * (tests/appliance/native/test_dpi.py), also under ASan/UBSan (test_sanitized.py).
 *
 * shannon_entropy(text) -> float
 *     Bits per character of a str (code points) or a bytes-like object (bytes), 0.0 when empty:
 *     log2(n) - sum(c * log2(c)) / n over the counts c of distinct symbols, summed in ascending
 *     symbol order.
 *
 * client_hello(payload) -> ((12 ClientHello fields), (ja4 head, ja4 ciphers, ja4 extensions, ja3 string)) | None
 * server_hello(payload) -> ((6 ServerHello fields), (ja4s head, ja4s extensions)) | None
 *     The hello at the start of a direction's joined samples (tls_hello.h, the twin of tls_parse.py), its
 *     fields in the order of the dataclass, and the strings its fingerprints hash (tlsh_client_texts,
 *     tlsh_server_texts); None where parse_*_hello_reference gives None.
 * client_hello_texts(hello) -> (ja4 head, ja4 ciphers, ja4 extensions, ja3 string)
 * server_hello_texts(hello) -> (ja4s head, ja4s extensions)
 *     The same strings from a ClientHello/ServerHello object (its integers must be 16-bit, its ALPN bytes).
 *
 * DomainWindow, AgentDns, DnsScanner, dga_scan
 *     The DNS detectors' per-message accounting (dns_windows.h, the twin of dpi/dns_reference.py and
 *     dpi/dga_signals_reference.py).
 * label_features(label, logp, floor, unseen) -> (loglik, letters, digits, consonants, longest consonant run)
 *     NameScorer.features' per-character work (dpi/dga.py), held to its Python twin by tests/appliance/native/test_dpi.py.
 * SuffixSplitter
 *     RegisteredDomains.split: registered domains by the public suffix list's rules (suffix_split.h).
 * BehaviourCore
 *     The behaviour layer's per-flow accounting (behaviour_tally.h, the twin of behaviour_reference.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "tls_hello.h"

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

/* NameScorer.features' per-character work (dpi/dga.py, label_counts_reference and loglik_reference):
 * the mean trigram log-likelihood of "^^" + label + "$" (each trigram's log-probability, else its context's
 * floor, else `unseen`, summed in order), then the counts of letters, digits and consonants (str.isalpha,
 * str.isdigit, not in "aeiouy") and the longest run of consonants. */
static PyObject *label_features(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyUnicode_Check(args[0]) || !PyDict_Check(args[1]) || !PyDict_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "label_features(label: str, logp: dict, floor: dict, unseen: float)");
        return NULL;
    }
    PyObject *label = args[0], *logp = args[1], *floor = args[2];
    double unseen = PyFloat_AsDouble(args[3]);
    if (unseen == -1.0 && PyErr_Occurred())
        return NULL;
    PyObject *begin = PyUnicode_FromString("^^"), *end = PyUnicode_FromString("$"), *head = NULL, *text = NULL;
    if (begin && end && (head = PyUnicode_Concat(begin, label)) != NULL)
        text = PyUnicode_Concat(head, end);
    Py_XDECREF(begin);
    Py_XDECREF(end);
    Py_XDECREF(head);
    if (text == NULL)
        return NULL;
    Py_ssize_t grams = PyUnicode_GET_LENGTH(text) - 2;
    double total = 0.0;
    for (Py_ssize_t i = 0; i < grams; i++) {
        PyObject *gram = PyUnicode_Substring(text, i, i + 3), *context = NULL;
        PyObject *value = gram ? PyDict_GetItemWithError(logp, gram) : NULL;
        if (value == NULL && gram != NULL && !PyErr_Occurred()) {
            context = PyUnicode_Substring(gram, 0, 2);
            value = context ? PyDict_GetItemWithError(floor, context) : NULL;
        }
        double v = value != NULL ? PyFloat_AsDouble(value) : unseen;
        Py_XDECREF(gram);
        Py_XDECREF(context);
        if (PyErr_Occurred()) {
            Py_DECREF(text);
            return NULL;
        }
        total += v;
    }
    Py_DECREF(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(label), letters = 0, digits = 0, consonants = 0, run = 0, best = 0;
    int kind = PyUnicode_KIND(label);
    const void *data = PyUnicode_DATA(label);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        int alpha = Py_UNICODE_ISALPHA(c);
        digits += Py_UNICODE_ISDIGIT(c) != 0;
        if (alpha && !(c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u' || c == 'y')) {
            letters++;
            consonants++;
            run++;
            best = run > best ? run : best;
        }
        else {
            letters += alpha != 0;
            run = 0;
        }
    }
    return Py_BuildValue("(dnnnn)", total / (double)grams, letters, digits, consonants, best);
}

#include "dns_windows.h"
#include "suffix_split.h"
#include "behaviour_tally.h"

static PyObject *ascii_text(const char *text, size_t len)
{
    PyObject *out = PyUnicode_New((Py_ssize_t)len, 127);
    if (out != NULL)
        memcpy(PyUnicode_1BYTE_DATA(out), text, len);
    return out;
}

static PyObject *u16_tuple(tlsh_u16s list)
{
    PyObject *out = PyTuple_New((Py_ssize_t)list.n);
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < list.n; i++) {
        PyObject *value = PyLong_FromLong(list.v[i]);
        if (value == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, (Py_ssize_t)i, value);
    }
    return out;
}

/* version_name(): the _VERSIONS name or 0x%04x. */
static PyObject *version_text(unsigned version)
{
    const char *name = tlsh_version_name(version);
    if (name != NULL)
        return ascii_text(name, strlen(name));
    char hex[6] = {'0', 'x'};
    tlsh_hex4(hex + 2, version);
    return ascii_text(hex, 6);
}

/* name.decode("ascii", "replace").lower().rstrip("."): a byte >= 0x80 becomes U+FFFD, never a dot, so the
 * dots are stripped from the bytes first. */
static PyObject *sni_text(tlsh_bytes name)
{
    size_t n = name.n;
    while (n > 0 && name.p[n - 1] == '.')
        n--;
    int wide = 0;
    for (size_t i = 0; i < n; i++)
        wide |= name.p[i] >= 0x80;
    PyObject *out = PyUnicode_New((Py_ssize_t)n, wide ? 0xFFFD : 127);
    if (out == NULL)
        return NULL;
    int kind = PyUnicode_KIND(out);
    void *data = PyUnicode_DATA(out);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = name.p[i];
        Py_UCS4 ch = c >= 0x80 ? 0xFFFD : (c >= 'A' && c <= 'Z') ? (Py_UCS4)(c + 32) : c;
        PyUnicode_WRITE(kind, data, (Py_ssize_t)i, ch);
    }
    return out;
}

static PyObject *bytes_of(tlsh_bytes b)
{
    return PyBytes_FromStringAndSize((const char *)b.p, (Py_ssize_t)b.n);
}

/* Small texts and sorts on the stack; a hostile hello's 8 K-value lists on the heap. */
#define TEXT_ON_STACK 4096
#define SORT_ON_STACK 512

static PyObject *client_texts_tuple(const tlsh_client_view *view)
{
    char text_stack[TEXT_ON_STACK];
    uint16_t sort_stack[SORT_ON_STACK];
    size_t text_need = tlsh_client_text_bound(view), sort_need = tlsh_client_sort_bound(view);
    char *text = text_need <= TEXT_ON_STACK ? text_stack : PyMem_Malloc(text_need);
    uint16_t *sort = sort_need <= SORT_ON_STACK ? sort_stack : PyMem_Malloc(sort_need * sizeof(uint16_t));
    PyObject *out = NULL;
    if (text == NULL || sort == NULL) {
        PyErr_NoMemory();
    } else {
        size_t lens[4];
        tlsh_client_texts(view, text, sort, lens);
        out = PyTuple_New(4);
        for (size_t i = 0, at = 0; out != NULL && i < 4; at += lens[i], i++) {
            PyObject *item = ascii_text(text + at, lens[i]);
            if (item == NULL)
                Py_CLEAR(out);
            else
                PyTuple_SET_ITEM(out, (Py_ssize_t)i, item);
        }
    }
    if (text != text_stack)
        PyMem_Free(text);
    if (sort != sort_stack)
        PyMem_Free(sort);
    return out;
}

static PyObject *server_texts_tuple(const tlsh_server_view *view)
{
    char text_stack[TEXT_ON_STACK];
    size_t need = tlsh_server_text_bound(view);
    char *text = need <= TEXT_ON_STACK ? text_stack : PyMem_Malloc(need);
    if (text == NULL)
        return PyErr_NoMemory();
    size_t lens[2];
    tlsh_server_texts(view, text, lens);
    PyObject *out = Py_BuildValue("(s#s#)", text, (Py_ssize_t)lens[0], text + lens[0], (Py_ssize_t)lens[1]);
    if (text != text_stack)
        PyMem_Free(text);
    return out;
}

/* The ClientHello dataclass's fields, in order. */
static PyObject *client_fields(const tlsh_client_hello *h)
{
    unsigned max = tlsh_max_version(&h->view);
    PyObject *alpn = PyTuple_New((Py_ssize_t)h->alpn_n);
    for (size_t i = 0; alpn != NULL && i < h->alpn_n; i++) {
        PyObject *name = bytes_of(h->alpn[i]);
        if (name == NULL)
            Py_CLEAR(alpn);
        else
            PyTuple_SET_ITEM(alpn, (Py_ssize_t)i, name);
    }
    if (alpn == NULL)
        return NULL;
    /* "N" steals each reference and releases the rest when one of them is NULL (Py_BuildValue's contract). */
    return Py_BuildValue("(NNINNNNNNNNN)",
                         version_text(tlsh_version_name(max) != NULL ? max : h->view.legacy_version),
                         sni_text(h->sni), h->view.legacy_version, u16_tuple(h->view.ciphers),
                         u16_tuple(h->view.extensions), u16_tuple(h->view.versions), u16_tuple(h->view.sig_algs),
                         u16_tuple(h->view.groups), u16_tuple(h->view.point_formats), alpn,
                         PyBool_FromLong(h->has_sni_extension), PyBool_FromLong(h->complete));
}

static PyObject *client_hello(PyObject *module, PyObject *payload)
{
    Py_buffer view;
    if (PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    tlsh_scratch scratch;
    tlsh_client_hello hello;
    int found = tlsh_parse_client_hello(view.buf, (size_t)view.len, &scratch, &hello);
    PyObject *out = found ? Py_BuildValue("(NN)", client_fields(&hello), client_texts_tuple(&hello.view)) : Py_NewRef(Py_None);
    PyBuffer_Release(&view);
    return out;
}

static PyObject *server_hello(PyObject *module, PyObject *payload)
{
    Py_buffer view;
    if (PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    tlsh_scratch scratch;
    tlsh_server_hello hello;
    int found = tlsh_parse_server_hello(view.buf, (size_t)view.len, &scratch, &hello);
    PyBuffer_Release(&view);
    if (!found)
        Py_RETURN_NONE;
    return Py_BuildValue("((IININO)N)", hello.view.legacy_version, hello.view.cipher, u16_tuple(hello.view.extensions),
                         hello.view.selected_version, bytes_of(hello.view.alpn), hello.complete ? Py_True : Py_False,
                         server_texts_tuple(&hello.view));
}

/* The attribute names the *_texts functions read, interned once per module: PyObject_GetAttrString would make
 * a new str per call, and CPython's type attribute cache keeps the last names it saw alive (bounded, but it
 * grows with every new address under a sanitizer's allocator). */
enum { A_LEGACY_VERSION, A_CIPHERS, A_EXTENSIONS, A_SUPPORTED_VERSIONS, A_SIGNATURE_ALGORITHMS, A_GROUPS,
       A_POINT_FORMATS, A_ALPN, A_CIPHER, A_SELECTED_VERSION, A_COUNT };
static const char *const attribute_names[A_COUNT] = {
    "legacy_version", "ciphers", "extensions", "supported_versions", "signature_algorithms", "groups",
    "point_formats", "alpn", "cipher", "selected_version"};

typedef struct {
    PyObject *names[A_COUNT];
} dpi_state;

static PyObject *attribute(PyObject *module, PyObject *hello, int which)
{
    return PyObject_GetAttr(hello, ((dpi_state *)PyModule_GetState(module))->names[which]);
}

/* An attribute that must be an int of 16 bits (what the parser gives). */
static int u16_attribute(PyObject *module, PyObject *hello, int which, unsigned *out)
{
    const char *name = attribute_names[which];
    PyObject *value = attribute(module, hello, which);
    if (value == NULL)
        return -1;
    long v = PyLong_AsLong(value);
    Py_DECREF(value);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 0 || v > 0xFFFF) {
        PyErr_Format(PyExc_ValueError, "%s is %ld: not a 16-bit value", name, v);
        return -1;
    }
    *out = (unsigned)v;
    return 0;
}

/* A sequence attribute of 16-bit ints, copied into `pool` (freed by the caller whatever happens). */
static int u16s_attribute(PyObject *module, PyObject *hello, int which, tlsh_u16s *out, uint16_t **pool, int slot)
{
    const char *name = attribute_names[which];
    PyObject *value = attribute(module, hello, which);
    if (value == NULL)
        return -1;
    PyObject *seq = PySequence_Fast(value, name);
    Py_DECREF(value);
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    pool[slot] = PyMem_Malloc((size_t)n * sizeof(uint16_t) + 1);
    if (pool[slot] == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        /* ints only: converting anything else could run an __index__ that shrinks the list under this loop */
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyLong_Check(item)) {
            PyErr_Format(PyExc_TypeError, "%s holds a %.100s, not an int", name, Py_TYPE(item)->tp_name);
            Py_DECREF(seq);
            return -1;
        }
        long v = PyLong_AsLong(item);
        if ((v == -1 && PyErr_Occurred()) || v < 0 || v > 0xFFFF) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "%s holds %ld: not a 16-bit value", name, v);
            Py_DECREF(seq);
            return -1;
        }
        pool[slot][i] = (uint16_t)v;
    }
    Py_DECREF(seq);
    out->v = pool[slot];
    out->n = (size_t)n;
    return 0;
}

static int bytes_of_object(PyObject *value, const char *name, tlsh_bytes *out)
{
    if (!PyBytes_Check(value)) {
        PyErr_Format(PyExc_TypeError, "%s must be bytes, not %.100s", name, Py_TYPE(value)->tp_name);
        return -1;
    }
    out->p = (const unsigned char *)PyBytes_AS_STRING(value);
    out->n = (size_t)PyBytes_GET_SIZE(value);
    return 0;
}

static PyObject *client_hello_texts(PyObject *module, PyObject *hello)
{
    enum { LISTS = 6 };
    static const int names[LISTS] = {A_CIPHERS, A_EXTENSIONS, A_SUPPORTED_VERSIONS, A_SIGNATURE_ALGORITHMS, A_GROUPS,
                                     A_POINT_FORMATS};
    uint16_t *pool[LISTS] = {NULL};
    tlsh_client_view view;
    memset(&view, 0, sizeof(view));
    tlsh_u16s *lists[LISTS] = {&view.ciphers, &view.extensions, &view.versions, &view.sig_algs, &view.groups,
                               &view.point_formats};
    PyObject *out = NULL, *alpn = NULL;
    if (u16_attribute(module, hello, A_LEGACY_VERSION, &view.legacy_version) < 0)
        goto done;
    for (int i = 0; i < LISTS; i++) {
        if (u16s_attribute(module, hello, names[i], lists[i], pool, i) < 0)
            goto done;
    }
    alpn = attribute(module, hello, A_ALPN);  /* held while the view points into its first name */
    if (alpn == NULL)
        goto done;
    Py_ssize_t count = PySequence_Size(alpn);
    if (count < 0)
        goto done;
    if (count > 0) {
        PyObject *first = PySequence_GetItem(alpn, 0);
        if (first == NULL)
            goto done;
        Py_SETREF(alpn, first);
        if (bytes_of_object(alpn, "alpn[0]", &view.alpn_first) < 0)
            goto done;
    }
    out = client_texts_tuple(&view);
done:
    Py_XDECREF(alpn);
    for (int i = 0; i < LISTS; i++)
        PyMem_Free(pool[i]);
    return out;
}

static PyObject *server_hello_texts(PyObject *module, PyObject *hello)
{
    tlsh_server_view view;
    memset(&view, 0, sizeof(view));
    uint16_t *pool[1] = {NULL};
    PyObject *out = NULL, *alpn = NULL;
    if (u16_attribute(module, hello, A_LEGACY_VERSION, &view.legacy_version) < 0
        || u16_attribute(module, hello, A_CIPHER, &view.cipher) < 0
        || u16_attribute(module, hello, A_SELECTED_VERSION, &view.selected_version) < 0
        || u16s_attribute(module, hello, A_EXTENSIONS, &view.extensions, pool, 0) < 0)
        goto done;
    alpn = attribute(module, hello, A_ALPN);
    if (alpn == NULL || bytes_of_object(alpn, "alpn", &view.alpn) < 0)
        goto done;
    out = server_texts_tuple(&view);
done:
    Py_XDECREF(alpn);
    PyMem_Free(pool[0]);
    return out;
}

static PyMethodDef dpi_functions[] = {
    {"client_hello", client_hello, METH_O,
     "client_hello(payload) -> ((ClientHello fields), (ja4 head, ja4 ciphers, ja4 extensions, ja3 string)) | None."},
    {"server_hello", server_hello, METH_O,
     "server_hello(payload) -> ((ServerHello fields), (ja4s head, ja4s extensions)) | None."},
    {"client_hello_texts", client_hello_texts, METH_O,
     "client_hello_texts(hello) -> (ja4 head, ja4 ciphers, ja4 extensions, ja3 string) of a ClientHello."},
    {"server_hello_texts", server_hello_texts, METH_O,
     "server_hello_texts(hello) -> (ja4s head, ja4s extensions) of a ServerHello."},
    {"dga_scan", (PyCFunction)(void (*)(void))dga_scan, METH_FASTCALL,
     "dga_scan(flow, agents, make_state, askers, split_memo, split, cap, prevalence_window_ns, burst_window_ns, "
     "max_agents, max_per_agent, max_domains) -> (state, now_ns, close_due, failed_any) or None: DgaSignals up to its judge."},
    {"label_features", (PyCFunction)(void (*)(void))label_features, METH_FASTCALL,
     "label_features(label, logp, floor, unseen) -> (mean trigram log-likelihood, letters, digits, consonants, "
     "longest consonant run): NameScorer.features' per-character work."},
    {"shannon_entropy", shannon_entropy, METH_O,
     "shannon_entropy(text) -> float: bits per character of a str or bytes (0.0 when empty)."},
    {NULL, NULL, 0, NULL},
};

static int dpi_exec(PyObject *module)
{
    dpi_state *state = PyModule_GetState(module);
    for (int i = 0; i < A_COUNT; i++) {
        state->names[i] = PyUnicode_InternFromString(attribute_names[i]);
        if (state->names[i] == NULL)
            return -1;
    }
    if (sfx_init(module) < 0)
        return -1;
    if (dnsw_init(module) < 0)
        return -1;
    return bhv_init(module);
}

static int dpi_clear(PyObject *module)
{
    dpi_state *state = PyModule_GetState(module);
    for (int i = 0; state != NULL && i < A_COUNT; i++)
        Py_CLEAR(state->names[i]);
    return 0;
}

static void dpi_free(void *module)
{
    dpi_clear(module);
}

static PyModuleDef_Slot dpi_slots[] = {
    {Py_mod_exec, dpi_exec},
    {0, NULL},
};

static struct PyModuleDef dpi_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "appliance.native.dpi",
    .m_doc = "C helpers for deep packet inspection (see dpi.c).",
    .m_size = sizeof(dpi_state),
    .m_methods = dpi_functions,
    .m_slots = dpi_slots,
    .m_clear = dpi_clear,
    .m_free = dpi_free,
};

PyMODINIT_FUNC PyInit_dpi(void)
{
    return PyModuleDef_Init(&dpi_module);
}
