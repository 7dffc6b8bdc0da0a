/*
 * WordModel.segment in C (appliance/detection/dpi/dga_words.py); included by dpi.c.
 *
 * Every label of a dictionary or random DGA is new to the word model, and its DGA report shapes every unknown
 * failed label of the window: the Python Viterbi cost 20-40 us per label, nearly all of it a substring and a
 * dict or set lookup per piece tried (PyUnicode_Substring alone was 4% of the analysis process's CPU on the
 * bench corpus's attack scenarios). Here the model's words and word prefixes are one table built once, probed
 * with (pointer, length) spans of the label: no object is made until the words are.
 *
 * WordTable(unigrams, prefixes, max_word, unknown_per_char)
 *     unigrams: {word: log-probability}; prefixes: the proper prefixes `segment` may extend (a set or frozenset
 *     of str); max_word: the longest piece tried; unknown_per_char: the log-probability of a letter outside
 *     every word. Keys that are not ASCII are left out: only ASCII text is segmented here.
 *     .segment(text) -> (words, coverage) | None   what WordModel.segment returns; None when `text` is not
 *                                                   ASCII (the caller runs the Python loop)
 *
 * Exactness: the same loops in the same order as WordModel.segment, _words and _merge_unknown, the same IEEE
 * additions and comparisons on the same doubles (dpi.c is built with -ffp-contract=off), so the split is the
 * same, ties included; tests/appliance/detection/test_dga_words.py holds it to segment_reference.
 *
 * The table is keyed by the model's strings, which are ours (the shipped word model), not attacker-chosen; the
 * probes are the attacker's labels, so the hash is still Python's keyed one (_Py_HashBytes, SipHash with the
 * process's secret): no label can be made to walk a long run of the table.
 */

#define WS_WORD 1u
#define WS_PREFIX 2u
#define WS_MAX_TEXT 256 /* longer text goes to the Python loop (shape() hands over 63 letters at most); the arrays
                           * of one call are on the stack */

typedef struct {
    Py_hash_t hash;
    uint32_t offset; /* into keys */
    uint16_t length;
    uint8_t flags;   /* WS_WORD, WS_PREFIX */
    double logp;     /* the word's, when WS_WORD */
} WsSlot;

typedef struct {
    PyObject_HEAD
    WsSlot *slots;
    size_t mask;     /* slots - 1 (a power of two, at most half full) */
    size_t used;
    char *keys;
    size_t keys_len, keys_cap;
    Py_ssize_t max_word;
    double unknown;
} WordTableObject;

static PyTypeObject WordTableType;

static WsSlot *ws_find(const WordTableObject *t, const char *s, size_t n, Py_hash_t h)
{
    for (size_t i = (size_t)h & t->mask;; i = (i + 1) & t->mask) {
        WsSlot *slot = &t->slots[i];
        if (slot->length == 0)
            return slot; /* empty (every key has at least one character) */
        if (slot->hash == h && slot->length == n && memcmp(t->keys + slot->offset, s, n) == 0)
            return slot;
    }
}

/* The flags and log-probability of s[0:n]; 0 when the table holds nothing for it. */
static unsigned ws_lookup(const WordTableObject *t, const char *s, size_t n, double *logp)
{
    const WsSlot *slot = ws_find(t, s, n, _Py_HashBytes(s, (Py_ssize_t)n));
    if (slot->length == 0)
        return 0;
    *logp = slot->logp;
    return slot->flags;
}

/* Add `key` (a str) with `flags` (and its log-probability for a word); non-ASCII keys are skipped. */
static int ws_add(WordTableObject *t, PyObject *key, unsigned flags, double logp)
{
    if (!PyUnicode_Check(key)) {
        PyErr_SetString(PyExc_TypeError, "WordTable: every word and prefix must be a str");
        return -1;
    }
    if (!PyUnicode_IS_ASCII(key))
        return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(key);
    if (n == 0 || n > 0xFFFF) {
        PyErr_SetString(PyExc_ValueError, "WordTable: words and prefixes have 1 to 65535 characters");
        return -1;
    }
    const char *s = (const char *)PyUnicode_DATA(key);
    Py_hash_t h = _Py_HashBytes(s, n);
    WsSlot *slot = ws_find(t, s, (size_t)n, h);
    if (slot->length == 0) {
        if (t->keys_len + (size_t)n > UINT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "WordTable: the model is too large");
            return -1;
        }
        if (t->keys_len + (size_t)n > t->keys_cap) {
            size_t cap = (t->keys_cap ? t->keys_cap * 2 : 1 << 16) + (size_t)n;
            char *grown = PyMem_Realloc(t->keys, cap);
            if (grown == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            t->keys = grown;
            t->keys_cap = cap;
        }
        memcpy(t->keys + t->keys_len, s, (size_t)n);
        slot->hash = h;
        slot->offset = (uint32_t)t->keys_len;
        slot->length = (uint16_t)n;
        slot->flags = 0;
        slot->logp = 0.0;
        t->keys_len += (size_t)n;
        t->used++;
    }
    slot->flags |= (uint8_t)flags;
    if (flags & WS_WORD)
        slot->logp = logp;
    return 0;
}

static PyObject *WordTable_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"unigrams", "prefixes", "max_word", "unknown_per_char", NULL};
    PyObject *unigrams, *prefixes;
    Py_ssize_t max_word;
    double unknown;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!Ond", kwlist, &PyDict_Type, &unigrams, &prefixes, &max_word, &unknown))
        return NULL;
    if (!PyAnySet_Check(prefixes)) {
        PyErr_SetString(PyExc_TypeError, "WordTable: prefixes must be a set or frozenset");
        return NULL;
    }
    if (max_word < 1 || max_word > 255) {
        PyErr_SetString(PyExc_ValueError, "WordTable: max_word must be 1 to 255");
        return NULL;
    }
    WordTableObject *t = (WordTableObject *)type->tp_alloc(type, 0);
    if (t == NULL)
        return NULL;
    t->max_word = max_word;
    t->unknown = unknown;
    size_t want = 2 * ((size_t)PyDict_GET_SIZE(unigrams) + (size_t)PySet_GET_SIZE(prefixes)) + 16, size = 16;
    while (size < want)
        size <<= 1;
    if ((t->slots = PyMem_Calloc(size, sizeof(WsSlot))) == NULL) {
        Py_DECREF(t);
        return PyErr_NoMemory();
    }
    t->mask = size - 1;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(unigrams, &pos, &key, &value)) {
        double logp = PyFloat_AsDouble(value);
        if ((logp == -1.0 && PyErr_Occurred()) || ws_add(t, key, WS_WORD, logp) < 0) {
            Py_DECREF(t);
            return NULL;
        }
    }
    PyObject *it = PyObject_GetIter(prefixes);
    if (it == NULL) {
        Py_DECREF(t);
        return NULL;
    }
    while ((key = PyIter_Next(it)) != NULL) {
        int r = ws_add(t, key, WS_PREFIX, 0.0);
        Py_DECREF(key);
        if (r < 0)
            break;
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) {
        Py_DECREF(t);
        return NULL;
    }
    return (PyObject *)t;
}

static void WordTable_dealloc(WordTableObject *t)
{
    PyMem_Free(t->slots);
    PyMem_Free(t->keys);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

/* segment(text) -> (words, coverage) | None: WordModel.segment, then _words and _merge_unknown. */
static PyObject *WordTable_segment(WordTableObject *t, PyObject *text)
{
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "segment: text must be a str");
        return NULL;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    if (!PyUnicode_IS_ASCII(text) || n > WS_MAX_TEXT)
        Py_RETURN_NONE;
    const char *s = (const char *)PyUnicode_DATA(text);
    double best[WS_MAX_TEXT + 1];
    Py_ssize_t back[WS_MAX_TEXT + 1];
    unsigned char known[WS_MAX_TEXT + 1];
    best[0] = 0.0;
    back[0] = 0;
    known[0] = 0;
    for (Py_ssize_t i = 1; i <= n; i++) {
        best[i] = -INFINITY;
        back[i] = 0;
        known[i] = 0;
    }
    for (Py_ssize_t start = 0; start < n; start++) {
        double base = best[start];
        Py_ssize_t last = start + t->max_word < n ? start + t->max_word : n;
        for (Py_ssize_t end = start + 1; end <= last; end++) {
            size_t width = (size_t)(end - start);
            double value = 0.0;
            unsigned flags = ws_lookup(t, s + start, width, &value);
            int is_known = (flags & WS_WORD) != 0;
            if (!is_known) {
                if (width > 1) {
                    if (!(flags & WS_PREFIX))
                        break;
                    continue;
                }
                value = t->unknown;
            }
            double total = base + value;
            if (total > best[end]) {
                best[end] = total;
                back[end] = start;
                known[end] = (unsigned char)is_known;
            }
            if (width == 1 && !(flags & WS_PREFIX))
                break;
        }
    }
    /* _words: the split the back pointers give, last piece first, and the letters in known words of 3+ */
    Py_ssize_t spans[WS_MAX_TEXT][2], count = 0, covered = 0;
    for (Py_ssize_t end = n; end > 0;) {
        Py_ssize_t start = back[end];
        spans[count][0] = start;
        spans[count][1] = end;
        count++;
        if (known[end] && end - start >= 3)
            covered += end - start;
        end = start;
    }
    /* _merge_unknown, in reading order: runs of unknown single letters joined (a merged run is one span) */
    Py_ssize_t merged[WS_MAX_TEXT][2], kept = 0;
    double unused;
    for (Py_ssize_t i = count - 1; i >= 0; i--) {
        Py_ssize_t start = spans[i][0], end = spans[i][1];
        if (kept && end - start == 1 && !(ws_lookup(t, s + start, 1, &unused) & WS_WORD)
            && !(ws_lookup(t, s + merged[kept - 1][0], (size_t)(merged[kept - 1][1] - merged[kept - 1][0]), &unused)
                 & WS_WORD)) {
            merged[kept - 1][1] = end;
        } else {
            merged[kept][0] = start;
            merged[kept][1] = end;
            kept++;
        }
    }
    PyObject *words = PyList_New(kept);
    if (words == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < kept; i++) {
        PyObject *word = PyUnicode_FromStringAndSize(s + merged[i][0], merged[i][1] - merged[i][0]);
        if (word == NULL) {
            Py_DECREF(words);
            return NULL;
        }
        PyList_SET_ITEM(words, i, word);
    }
    return Py_BuildValue("(Nd)", words, n ? (double)covered / (double)n : 0.0);
}

static PyObject *WordTable_size(WordTableObject *t, void *closure)
{
    return PyLong_FromSize_t(t->used);
}

static PyMethodDef WordTable_methods[] = {
    {"segment", (PyCFunction)WordTable_segment, METH_O,
     "segment(text) -> (words, coverage) | None: WordModel.segment; None when text is not ASCII."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef WordTable_getset[] = {
    {"size", (getter)WordTable_size, NULL, "distinct words and prefixes held", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject WordTableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "appliance.native.dpi.WordTable",
    .tp_basicsize = sizeof(WordTableObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "WordTable(unigrams, prefixes, max_word, unknown_per_char): WordModel.segment in C (word_segment.h).",
    .tp_new = WordTable_new,
    .tp_dealloc = (destructor)WordTable_dealloc,
    .tp_methods = WordTable_methods,
    .tp_getset = WordTable_getset,
};

/* Called by the module's exec slot. */
static int ws_init(PyObject *module)
{
    if (PyType_Ready(&WordTableType) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "WordTable", (PyObject *)&WordTableType);
}
