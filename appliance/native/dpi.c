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
 * sample_facts(samples, (ClientHello maker, ServerHello maker, TlsMetadata maker, Facts maker, JA4 memo,
 *               JA3 memo, JA4S memo)) -> (facts, requests, responses, handshake, chain) | None
 *     What FlowFacts.facts reads of a TCP flow's samples (packets: .payload bytes-like, .direction), in one
 *     pass (the twin of facts.facts_reference's loop and tls_meta._joined). `requests`/`responses`: the
 *     payloads that may open an HTTP request (outbound, first byte an ASCII letter) or response (not
 *     outbound, "HTTP/"), lists or None, for the caller to parse into the facts' empty lists; `handshake`:
 *     a sample opens a handshake record (first byte 0x16). Then each direction's samples joined from the
 *     first that opens a record, its hello read as client_hello / server_hello do, and a TlsMetadata of the
 *     two (None when neither was read) with the fingerprints that the memos give for the texts they hash
 *     (JA4 memo["head|ciphers|extensions"], JA3 memo[ja3 string], JA4S memo["head|extensions"], see
 *     tls_fingerprint.FingerprintMemo), all made by the SlotMakers given; `facts` holds it (tls,
 *     client_hello). `chain`: where a ServerHello was read, the certificate chain
 *     (tls_parse.certificate_chain), ([DER], complete), for the caller to read into the metadata; else None.
 *     None when the flow has neither a handshake nor an HTTP candidate. A decoded flow's samples (fastpath's
 *     SampleList, sample_list.h) are read entry by entry, no Packet made: a candidate's payload is made as bytes.
 * SlotMaker(cls, names[, defaults])
 *     Makes objects of a slotted dataclass without its __init__ (sample_facts' hellos and metadata;
 *     slot_maker.h, the decoder's own in fastpath.c).
 * DomainWindow, AgentDns, DnsScanner, dga_scan
 *     The DNS detectors' per-message accounting (dns_windows.h, the twin of dpi/dns_reference.py and
 *     dpi/dga_signals_reference.py).
 * label_features(label, logp, floor, unseen) -> (loglik, letters, digits, consonants, longest consonant run)
 *     NameScorer.features' per-character work (dpi/dga.py), held to its Python twin by tests/appliance/native/test_dpi.py.
 * SuffixSplitter
 *     RegisteredDomains.split: registered domains by the public suffix list's rules (suffix_split.h).
 * BehaviourCore
 *     The behaviour layer's per-flow accounting (behaviour_tally.h, the twin of behaviour_reference.py).
 * resolver_observe, resolver_lookup
 *     ResolverCache.observe_many and .lookup (resolver_cache.h, the twin of resolutions_reference.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "tls_hello.h"
#include <structmember.h>

#define SLOT_MAKER_TYPE_NAME "appliance.native.dpi.SlotMaker"
#include "slot_maker.h"

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

/* A label's letters, digits and consonants as str.isalpha, str.isdigit and not in "aeiouy", and its longest
 * consonant run: what label_features and the name model's miss path (name_model.h) count. */
typedef struct {
    Py_ssize_t letters, digits, consonants, best;
} LabelCounts;

static LabelCounts label_counts(PyObject *label)
{
    LabelCounts out = {0, 0, 0, 0};
    Py_ssize_t n = PyUnicode_GET_LENGTH(label), run = 0;
    int kind = PyUnicode_KIND(label);
    const void *data = PyUnicode_DATA(label);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        int alpha = Py_UNICODE_ISALPHA(c);
        out.digits += Py_UNICODE_ISDIGIT(c) != 0;
        if (alpha && !(c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u' || c == 'y')) {
            out.letters++;
            out.consonants++;
            run++;
            out.best = run > out.best ? run : out.best;
        }
        else {
            out.letters += alpha != 0;
            run = 0;
        }
    }
    return out;
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
    LabelCounts counts = label_counts(label);
    return Py_BuildValue("(dnnnn)", total / (double)grams, counts.letters, counts.digits, counts.consonants,
                         counts.best);
}

#include "dns_list.h"
#include "sample_list.h"
#include "dns_windows.h"
#include "suffix_split.h"
#include "loop_failure.h"
#include "behaviour_tally.h"
#include "signature_scan.h"
#include "name_model.h"
#include "resolver_cache.h"
#include "resolver_batch.h"
#include "tls_gate.h"
#include "word_segment.h"

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
    static PyObject *names[5];  /* SSLv3 .. TLSv1.3, made once: one of them names nearly every hello */
    const char *name = tlsh_version_name(version);
    if (name != NULL && version >= 0x0300 && version <= 0x0304) {
        PyObject **made = &names[version - 0x0300];
        if (*made == NULL)
            *made = ascii_text(name, strlen(name));
        return Py_XNewRef(*made);
    }
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

/* A tuple of `n` new references (stolen); NULL, with every reference released, when one of them is NULL
 * (Py_BuildValue's "N" without parsing a format per call: these tuples are made for every TLS flow). */
static PyObject *tuple_of(PyObject **items, Py_ssize_t n)
{
    PyObject *out = NULL;
    int failed = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        failed |= items[i] == NULL;
    if (!failed)
        out = PyTuple_New(n);
    if (out == NULL) {
        for (Py_ssize_t i = 0; i < n; i++)
            Py_XDECREF(items[i]);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        PyTuple_SET_ITEM(out, i, items[i]);
    return out;
}

/* The memo keys of the last hellos read (JA4 texts, JA3 string, JA4S texts), kept: consecutive flows of the
 * same software give the same texts, and the same str object finds its memo entry with its hash already
 * computed and by identity (no SipHash, no compare). Three strings held for the module's life. */
enum { KEY_JA4, KEY_JA3, KEY_JA4S, KEY_KINDS };
static PyObject *last_keys[KEY_KINDS];

/* The `n` texts joined with '|' as an ASCII str: the one kept for `kind` when it is the same text. */
static PyObject *key_text(int kind, const char *const *parts, const size_t *lens, int n)
{
    size_t total = (size_t)(n - 1);
    for (int i = 0; i < n; i++)
        total += lens[i];
    PyObject *kept = last_keys[kind];
    if (kept != NULL && (size_t)PyUnicode_GET_LENGTH(kept) == total) {
        const char *text = (const char *)PyUnicode_1BYTE_DATA(kept);
        int same = 1;
        for (int i = 0, at = 0; same && i < n; at += (int)lens[i], i++) {
            if (i)
                same = text[at++] == '|';
            same = same && memcmp(text + at, parts[i], lens[i]) == 0;
        }
        if (same)
            return Py_NewRef(kept);
    }
    PyObject *out = PyUnicode_New((Py_ssize_t)total, 127);
    if (out == NULL)
        return NULL;
    char *text = (char *)PyUnicode_1BYTE_DATA(out);
    for (int i = 0; i < n; i++) {
        if (i)
            *text++ = '|';
        memcpy(text, parts[i], lens[i]);
        text += lens[i];
    }
    Py_XSETREF(last_keys[kind], Py_NewRef(out));
    return out;
}

/* Small texts and sorts on the stack; a hostile hello's 8 K-value lists on the heap. */
#define TEXT_ON_STACK 4096
#define SORT_ON_STACK 512

/* The client texts as a tuple of four str, or (`as_key`) as the keys of the fingerprint memos
 * (tls_fingerprint.FingerprintMemo): (the three JA4 texts as one str, '|' between them (no text holds one),
 * the JA3 string). */
static PyObject *client_texts_object(const tlsh_client_view *view, int as_key)
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
        if (as_key) {
            const char *parts[4] = {text, text + lens[0], text + lens[0] + lens[1], text + lens[0] + lens[1] + lens[2]};
            PyObject *keys[2] = {key_text(KEY_JA4, parts, lens, 3), key_text(KEY_JA3, parts + 3, lens + 3, 1)};
            out = tuple_of(keys, 2);
        } else {
            out = PyTuple_New(4);
            for (size_t i = 0, at = 0; out != NULL && i < 4; at += lens[i], i++) {
                PyObject *item = ascii_text(text + at, lens[i]);
                if (item == NULL)
                    Py_CLEAR(out);
                else
                    PyTuple_SET_ITEM(out, (Py_ssize_t)i, item);
            }
        }
    }
    if (text != text_stack)
        PyMem_Free(text);
    if (sort != sort_stack)
        PyMem_Free(sort);
    return out;
}

/* The server texts as a tuple of two str, or (`as_key`) as one str "head|extensions". */
static PyObject *server_texts_object(const tlsh_server_view *view, int as_key)
{
    char text_stack[TEXT_ON_STACK];
    size_t need = tlsh_server_text_bound(view);
    char *text = need <= TEXT_ON_STACK ? text_stack : PyMem_Malloc(need);
    if (text == NULL)
        return PyErr_NoMemory();
    size_t lens[2];
    tlsh_server_texts(view, text, lens);
    PyObject *out;
    if (as_key) {
        const char *parts[2] = {text, text + lens[0]};
        out = key_text(KEY_JA4S, parts, lens, 2);
    } else {
        out = Py_BuildValue("(s#s#)", text, (Py_ssize_t)lens[0], text + lens[0], (Py_ssize_t)lens[1]);
    }
    if (text != text_stack)
        PyMem_Free(text);
    return out;
}

#define CLIENT_FIELDS 12
#define SERVER_FIELDS 6
#define METADATA_FIELDS 8

/* The ClientHello dataclass's fields, in order, as new references (NULL where one could not be made). */
static void client_field_values(const tlsh_client_hello *h, PyObject **items)
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
    items[0] = version_text(tlsh_version_name(max) != NULL ? max : h->view.legacy_version);
    items[1] = sni_text(h->sni);
    items[2] = PyLong_FromUnsignedLong(h->view.legacy_version);
    items[3] = u16_tuple(h->view.ciphers);
    items[4] = u16_tuple(h->view.extensions);
    items[5] = u16_tuple(h->view.versions);
    items[6] = u16_tuple(h->view.sig_algs);
    items[7] = u16_tuple(h->view.groups);
    items[8] = u16_tuple(h->view.point_formats);
    items[9] = alpn;
    items[10] = PyBool_FromLong(h->has_sni_extension);
    items[11] = PyBool_FromLong(h->complete);
}

/* The ServerHello dataclass's fields, in order, as new references (NULL where one could not be made). */
static void server_field_values(const tlsh_server_hello *h, PyObject **items)
{
    items[0] = PyLong_FromUnsignedLong(h->view.legacy_version);
    items[1] = PyLong_FromUnsignedLong(h->view.cipher);
    items[2] = u16_tuple(h->view.extensions);
    items[3] = PyLong_FromUnsignedLong(h->view.selected_version);
    items[4] = bytes_of(h->view.alpn);
    items[5] = PyBool_FromLong(h->complete);
}

static PyObject *client_fields(const tlsh_client_hello *h)
{
    PyObject *items[CLIENT_FIELDS];
    client_field_values(h, items);
    return tuple_of(items, CLIENT_FIELDS);
}

static PyObject *server_fields(const tlsh_server_hello *h)
{
    PyObject *items[SERVER_FIELDS];
    server_field_values(h, items);
    return tuple_of(items, SERVER_FIELDS);
}

/* The maker at reader[i] if it is one of `n` slots, else NULL with TypeError. */
static SlotMaker *reader_maker(PyObject *reader, Py_ssize_t i, Py_ssize_t n)
{
    PyObject *maker = PyTuple_GET_ITEM(reader, i);
    if (!Py_IS_TYPE(maker, &SlotMakerType) || ((SlotMaker *)maker)->nargs != n) {
        PyErr_Format(PyExc_TypeError, "sample_facts: reader[%zd] must be a SlotMaker of %zd slots", i, n);
        return NULL;
    }
    return (SlotMaker *)maker;
}

static PyObject *client_hello(PyObject *module, PyObject *payload)
{
    Py_buffer view;
    if (PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    tlsh_scratch scratch;
    tlsh_client_hello hello;
    int found = tlsh_parse_client_hello(view.buf, (size_t)view.len, &scratch, &hello);
    PyObject *out = found ? Py_BuildValue("(NN)", client_fields(&hello), client_texts_object(&hello.view, 0))
                          : Py_NewRef(Py_None);
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
    return Py_BuildValue("(NN)", server_fields(&hello), server_texts_object(&hello.view, 0));
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
    out = client_texts_object(&view, 0);
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
    out = server_texts_object(&view, 0);
done:
    Py_XDECREF(alpn);
    PyMem_Free(pool[0]);
    return out;
}

/* One direction's samples joined from the first that opens a handshake record (tls_meta._joined), as far
 * as the hello and certificate readers look: their first TLSH_MAX_HANDSHAKE_BYTES. */
typedef struct {
    unsigned char bytes[TLSH_MAX_HANDSHAKE_BYTES];
    size_t len;
    int open;
} sample_join;

static void join_sample(sample_join *join, const unsigned char *payload, size_t n)
{
    if (!join->open) {
        if (n == 0 || payload[0] != TLSH_HANDSHAKE)
            return;
        join->open = 1;
    }
    size_t room = TLSH_MAX_HANDSHAKE_BYTES - join->len, take = n < room ? n : room;
    memcpy(join->bytes + join->len, payload, take);
    join->len += take;
}

/* Packet.payload and Packet.direction, read where their slots are (dnsw_get; names set by dpi_exec). */
static dnsw_attr sample_attr_payload, sample_attr_direction;

/* Appends `item` to the list at *list, made on first use. */
static int append_lazily(PyObject **list, PyObject *item)
{
    if (*list == NULL && (*list = PyList_New(0)) == NULL)
        return -1;
    return PyList_Append(*list, item);
}

/* A direction as the Python compares it (`direction == 1`, `== 2`): 1 (outbound), 2 (inbound), 0 for anything
 * else, -1 with an exception when a comparison raised. An int is read; anything else is compared. */
static int sample_direction(PyObject *value)
{
    if (PyLong_CheckExact(value)) {
        int overflow;
        long v = PyLong_AsLongAndOverflow(value, &overflow);
        return overflow == 0 && (v == 1 || v == 2) ? (int)v : 0;
    }
    for (long d = 1; d <= 2; d++) {
        PyObject *wanted = PyLong_FromLong(d);
        int equal = wanted != NULL ? PyObject_RichCompareBool(value, wanted, Py_EQ) : -1;
        Py_XDECREF(wanted);
        if (equal != 0)
            return equal < 0 ? -1 : (int)d;
    }
    return 0;
}

/* fastpath.SampleList (sample_list.h): flow.samples as the analysis process decodes it (set by dpi_exec; NULL:
 * every sequence goes the object path). */
static PyTypeObject *sample_list_type;

static int sample_list_init(void)
{
    return dnsw_fastpath_type("SampleList", (Py_ssize_t)offsetof(SampleListObject, entries),
                              (Py_ssize_t)sizeof(SampleEntry), "sample_list.h", &sample_list_type);
}

/* classify_samples over a SampleList's entries: the same walk, each payload read where the list keeps it. */
static int classify_entries(const SampleListObject *l, sample_join joins[2], int *handshake, PyObject **requests,
                            PyObject **responses)
{
    for (Py_ssize_t i = 0; i < Py_SIZE(l); i++) {
        const SampleEntry *e = &l->entries[i];
        const unsigned char *p = e->size ? l->blob + e->payload : (const unsigned char *)"";
        size_t n = e->size;
        int status = 0;
        if (n > 0 && p[0] == TLSH_HANDSHAKE)
            *handshake = 1;
        else if ((e->direction == 1 && n > 0 && ((p[0] | 0x20) >= 'a' && (p[0] | 0x20) <= 'z'))
                 || (e->direction != 1 && n >= 5 && memcmp(p, "HTTP/", 5) == 0)) {
            PyObject *payload = PyBytes_FromStringAndSize((const char *)p, (Py_ssize_t)n);
            status = payload == NULL ? -1 : append_lazily(e->direction == 1 ? requests : responses, payload);
            Py_XDECREF(payload);
        }
        if (status < 0)
            return -1;
        if (e->direction != 0)
            join_sample(&joins[e->direction - 1], p, n);
    }
    return 0;
}

/* Walks the samples once: the HTTP candidates appended to the request and response lists (the payload objects
 * themselves; a list made on first use), both directions joined, *handshake set when a sample opens a
 * handshake record. A SampleList's entries are read in place (classify_entries). */
static int classify_samples(PyObject *samples, sample_join joins[2], int *handshake, PyObject **requests,
                            PyObject **responses)
{
    if (sample_list_type != NULL && Py_IS_TYPE(samples, sample_list_type))
        return classify_entries((const SampleListObject *)samples, joins, handshake, requests, responses);
    PyObject *seq = PySequence_Fast(samples, "sample_facts() takes a sequence of packets");
    if (seq == NULL)
        return -1;
    int status = 0;
    /* The size is read again each turn and each packet held while read: a list changed under the loop (by an
     * attribute getter of some other packet type) is walked as far as it goes, never past its end. */
    for (Py_ssize_t i = 0; status == 0 && i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *packet = Py_NewRef(PySequence_Fast_GET_ITEM(seq, i));
        PyObject *payload = dnsw_get(packet, &sample_attr_payload);
        PyObject *direction_value = payload != NULL ? dnsw_get(packet, &sample_attr_direction) : NULL;
        Py_buffer view;
        int direction = direction_value != NULL ? sample_direction(direction_value) : -1;
        if (direction < 0 || PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE) < 0) {
            status = -1;
        } else {
            const unsigned char *p = view.buf;
            size_t n = (size_t)view.len;
            if (n > 0 && p[0] == TLSH_HANDSHAKE)
                *handshake = 1;
            else if (direction == 1 && n > 0 && ((p[0] | 0x20) >= 'a' && (p[0] | 0x20) <= 'z'))
                status = append_lazily(requests, payload);  /* payload[:1].isalpha() */
            else if (direction != 1 && n >= 5 && memcmp(p, "HTTP/", 5) == 0)
                status = append_lazily(responses, payload);
            if (direction != 0)
                join_sample(&joins[direction - 1], p, n);
            PyBuffer_Release(&view);
        }
        Py_XDECREF(direction_value);
        Py_XDECREF(payload);
        Py_DECREF(packet);
    }
    Py_DECREF(seq);
    return status;
}

/* One direction's hello as Python objects: made by `maker` (a ClientHello or ServerHello) with the memo key of
 * its fingerprint texts; both None when the joined bytes hold no hello. `server` picks the ServerHello reader;
 * its handshake stream's certificate chain goes to *chain. */
static int hello_objects(const sample_join *join, int server, SlotMaker *maker, tlsh_scratch *scratch,
                         PyObject **hello, PyObject **key, PyObject **chain)
{
    *hello = Py_NewRef(Py_None);
    *key = Py_NewRef(Py_None);
    if (!join->open)
        return 0;
    PyObject *items[CLIENT_FIELDS], *made_key;
    if (!server) {
        tlsh_client_hello parsed;
        if (!tlsh_parse_client_hello(join->bytes, join->len, scratch, &parsed))
            return 0;
        client_field_values(&parsed, items);
        made_key = client_texts_object(&parsed.view, 1);
    } else {
        tlsh_server_hello parsed;
        if (!tlsh_parse_server_hello(join->bytes, join->len, scratch, &parsed))
            return 0;
        server_field_values(&parsed, items);
        made_key = server_texts_object(&parsed.view, 1);
    }
    PyObject *made = slot_maker_take(maker, items);
    if (made == NULL || made_key == NULL) {
        Py_XDECREF(made);
        Py_XDECREF(made_key);
        return -1;
    }
    Py_SETREF(*hello, made);
    Py_SETREF(*key, made_key);
    if (!server)
        return 0;
    /* tls_metadata reads the chain where a ServerHello was read: same stream, read again (the hello's
     * results pointed into it and are Python objects by now). */
    tlsh_bytes certs[TLSH_MAX_CERTIFICATES];
    int complete;
    int n = tlsh_certificate_chain(scratch->stream, tlsh_handshake_stream(join->bytes, join->len, scratch), certs,
                                   &complete);
    if (n < 0)
        return 0;
    PyObject *ders = PyList_New(n);
    for (int i = 0; ders != NULL && i < n; i++) {
        PyObject *der = bytes_of(certs[i]);
        if (der == NULL)
            Py_CLEAR(ders);
        else
            PyList_SET_ITEM(ders, i, der);
    }
    if (ders == NULL)
        return -1;
    PyObject *parts[2] = {ders, PyBool_FromLong(complete)};
    Py_SETREF(*chain, tuple_of(parts, 2));
    return *chain != NULL ? 0 : -1;
}

/* memo[key] (a dict whose __missing__ computes and keeps the value), checked to be a str. */
static PyObject *remembered(PyObject *memo, PyObject *key)
{
    PyObject *value = PyObject_GetItem(memo, key);
    if (value != NULL && !PyUnicode_Check(value)) {
        Py_DECREF(value);
        PyErr_SetString(PyExc_TypeError, "a fingerprint memo gave no str");
        return NULL;
    }
    return value;
}

#define FACTS_FIELDS 4
#define READER_ITEMS 7  /* 4 makers, the JA4, JA3 and JA4S memos */

/* TlsMetadata(client, server, ja4, ja4s, ja3) with the fingerprints from the memos (reader[4..6]); None when
 * neither hello was read. `client_keys`: (JA4 key, JA3 string). Steals nothing. */
static PyObject *metadata_object(PyObject *reader, SlotMaker *maker, PyObject *client, PyObject *client_keys,
                                 PyObject *server, PyObject *server_key)
{
    if (client == Py_None && server == Py_None)
        Py_RETURN_NONE;
    PyObject *ja4 = NULL, *ja3 = NULL, *ja4s = NULL;
    if (client != Py_None) {
        ja4 = remembered(PyTuple_GET_ITEM(reader, 4), PyTuple_GET_ITEM(client_keys, 0));
        ja3 = ja4 != NULL ? remembered(PyTuple_GET_ITEM(reader, 5), PyTuple_GET_ITEM(client_keys, 1)) : NULL;
        if (ja3 == NULL) {
            Py_XDECREF(ja4);
            return NULL;
        }
    }
    if (server != Py_None && (ja4s = remembered(PyTuple_GET_ITEM(reader, 6), server_key)) == NULL) {
        Py_XDECREF(ja4);
        Py_XDECREF(ja3);
        return NULL;
    }
    /* client_hello, server_hello, ja4, ja4s, ja3, certificates, chain_complete, certificates_unreadable */
    PyObject *items[METADATA_FIELDS] = {
        Py_NewRef(client), Py_NewRef(server), ja4 != NULL ? ja4 : PyUnicode_New(0, 0),
        ja4s != NULL ? ja4s : PyUnicode_New(0, 0), ja3 != NULL ? ja3 : PyUnicode_New(0, 0),
        PyList_New(0), Py_NewRef(Py_True), PyLong_FromLong(0)};
    return slot_maker_take(maker, items);
}

/* sample_facts(samples, reader): see the top of this file. */
static PyObject *sample_facts_read(PyObject *samples, PyObject *reader);

static int sample_reader_checked(PyObject *reader)
{
    if (!PyTuple_Check(reader) || PyTuple_GET_SIZE(reader) != READER_ITEMS) {
        PyErr_SetString(PyExc_TypeError, "sample_facts(samples, (ClientHello maker, ServerHello maker, TlsMetadata "
                                         "maker, Facts maker, JA4 memo, JA3 memo, JA4S memo))");
        return 0;
    }
    return 1;
}

static PyObject *sample_facts(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "sample_facts(samples, reader) takes two arguments");
        return NULL;
    }
    return sample_reader_checked(args[1]) ? sample_facts_read(args[0], args[1]) : NULL;
}

/* sample_facts with its reader checked by the caller (a tuple of READER_ITEMS). */
static PyObject *sample_facts_read(PyObject *samples, PyObject *reader)
{
    SlotMaker *makers[4] = {reader_maker(reader, 0, CLIENT_FIELDS), reader_maker(reader, 1, SERVER_FIELDS),
                                  reader_maker(reader, 2, METADATA_FIELDS), reader_maker(reader, 3, FACTS_FIELDS)};
    if (makers[0] == NULL || makers[1] == NULL || makers[2] == NULL || makers[3] == NULL)
        return NULL;
    sample_join joins[2];
    joins[0].len = joins[1].len = 0;
    joins[0].open = joins[1].open = 0;
    int handshake = 0;
    PyObject *requests = NULL, *responses = NULL;
    if (classify_samples(samples, joins, &handshake, &requests, &responses) < 0) {
        Py_XDECREF(requests);
        Py_XDECREF(responses);
        return NULL;
    }
    if (!handshake && requests == NULL && responses == NULL)
        Py_RETURN_NONE;
    PyObject *meta = Py_NewRef(Py_None), *chain = Py_NewRef(Py_None);
    if (handshake) {
        tlsh_scratch scratch;
        PyObject *hellos[4] = {NULL, NULL, NULL, NULL};
        Py_CLEAR(meta);
        if (hello_objects(&joins[0], 0, makers[0], &scratch, &hellos[0], &hellos[1], &chain) == 0
            && hello_objects(&joins[1], 1, makers[1], &scratch, &hellos[2], &hellos[3], &chain) == 0)
            meta = metadata_object(reader, makers[2], hellos[0], hellos[1], hellos[2], hellos[3]);
        for (int i = 0; i < 4; i++)
            Py_XDECREF(hellos[i]);
    }
    /* Facts(http_requests=[], http_responses=[], client_hello=meta.client_hello, tls=meta) */
    PyObject *hello = meta == NULL || meta == Py_None ? Py_None : *(PyObject **)((char *)meta + makers[2]->offsets[0]);
    PyObject *facts_items[FACTS_FIELDS] = {PyList_New(0), PyList_New(0), Py_NewRef(hello), meta};
    PyObject *items[5] = {slot_maker_take(makers[3], facts_items), requests != NULL ? requests : Py_NewRef(Py_None),
                          responses != NULL ? responses : Py_NewRef(Py_None), PyBool_FromLong(handshake), chain};
    return tuple_of(items, 5);
}

#include "facts_memo.h"
#include "dpi_loop.h"
#include "memory_reserve.h"
#include "correlation_sums.h"

static PyMethodDef dpi_functions[] = {
    {"sample_facts", (PyCFunction)(void (*)(void))sample_facts, METH_FASTCALL,
     "sample_facts(samples, (ClientHello maker, ServerHello maker, TlsMetadata maker, Facts maker, JA4 memo, "
     "JA3 memo, JA4S memo)) -> (Facts, requests, responses, handshake, chain | None) | None: a TCP flow's samples read "
     "in one pass."},
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
     "max_agents, max_per_agent, max_domains, minimum) -> (state, now_ns, close_due, failed_any) or None: DgaSignals up to its judge."},
    {"dga_unknown_since", (PyCFunction)(void (*)(void))dga_unknown_since, METH_FASTCALL,
     "dga_unknown_since(failed, askers, since, cap) -> int: an agent's unknown failures at or after `since`."},
    {"dga_unresolved", (PyCFunction)(void (*)(void))dga_unresolved, METH_FASTCALL,
     "dga_unresolved(failed, askers, horizon, cap) -> int: the expiry of an agent's failures, then the unknown ones left."},
    {"label_features", (PyCFunction)(void (*)(void))label_features, METH_FASTCALL,
     "label_features(label, logp, floor, unseen) -> (mean trigram log-likelihood, letters, digits, consonants, "
     "longest consonant run): NameScorer.features' per-character work."},
    {"dns_first_hits", (PyCFunction)(void (*)(void))dns_first_hits, METH_FASTCALL,
     "dns_first_hits(out, step, flow, messages, (offset, type_memo, code_memo, query_alive, name_memo, miss, match, entries, "
     "prefilters)) "
     "-> None, (step, rule, first message) appended to out: the signature layer's DNS scan loop (signature_scan.h)."},
    {"resolver_observe", (PyCFunction)(void (*)(void))resolver_observe, METH_FASTCALL,
     "resolver_observe(items, by_ip, by_name, max_per_agent, maker, thin) -> responses learned: "
     "ResolverCache.observe_many (resolver_cache.h)."},
    {"resolver_observe_batch", (PyCFunction)(void (*)(void))resolver_observe_batch, METH_FASTCALL,
     "resolver_observe_batch(data, by_ip, by_name, max_per_agent, maker, thin) -> responses learned | None: "
     "ResolverCache.observe_batch, a DnsBatch read in place (resolver_batch.h); None when it is not plain."},
    {"resolver_lookup", (PyCFunction)(void (*)(void))resolver_lookup, METH_FASTCALL,
     "resolver_lookup(by_ip, maker, agent_id, address, at_ns, window_s[, slack_s=2.0]) -> Resolution | None: "
     "ResolverCache.lookup (resolver_cache.h)."},
    {"tls_gate", (PyCFunction)(void (*)(void))tls_gate, METH_FASTCALL,
     "tls_gate(flow, tls, hello, state) -> None | (rare, rarity, resolution): TlsAnalyzer.analyze up to whether the "
     "flow can raise anything (tls_gate.h)."},
    {"dpi_loop", (PyCFunction)(void (*)(void))dpi_loop, METH_FASTCALL,
     "dpi_loop(flows, failed, (tcp, udp, icmp, facts_of, tls_gate, gate_state, dns_scan, dga_scan), lead) -> [(index, "
     "detections)]: the DPI layer's loop over a batch, calling lead(kind, flow, a, b) only where Python must judge "
     "(dpi_loop.h)."},
    {"shannon_entropy", shannon_entropy, METH_O,
     "shannon_entropy(text) -> float: bits per character of a str or bytes (0.0 when empty)."},
    {"correlation_sums", (PyCFunction)(void (*)(void))correlation_sums, METH_FASTCALL,
     "correlation_sums(group, now_ns, half_life_ns) -> (remaining, detectors, weights, leads, severity): the loop of "
     "Correlator._judge over a group (correlation_sums.h); TypeError or ValueError for what it declines."},
    {"reserve_memory", (PyCFunction)(void (*)(void))reserve_memory, METH_FASTCALL,
     "reserve_memory(arena_bytes, heap_bytes) -> (arena bytes reserved, heap bytes touched): memory touched now "
     "instead of page by page later, once per process (memory_reserve.h)."},
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
    if (!dnsw_intern(&sample_attr_payload.name, "payload") || !dnsw_intern(&sample_attr_direction.name, "direction"))
        return -1;
    if (PyType_Ready(&SlotMakerType) < 0 || PyModule_AddObjectRef(module, "SlotMaker", (PyObject *)&SlotMakerType) < 0)
        return -1;
    if (dnsw_init(module) < 0 || sample_list_init() < 0)
        return -1;
    if (rc_init(module) < 0 || tg_init() < 0 || dl_init() < 0)
        return -1;
    if (ws_init(module) < 0)
        return -1;
    if (fm_init(module) < 0 || cs_init() < 0)
        return -1;
    return bhv_init(module) < 0 ? -1 : nm_init(module);
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
