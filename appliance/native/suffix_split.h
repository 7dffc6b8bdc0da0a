/*
 * RegisteredDomains.split in C (appliance/detection/domains.py); included by dpi.c.
 *
 * Every query name of a DNS tunnel is new, so the split memo misses on each one, and the library's
 * `privatesuffix` (one join and three set lookups per possible depth, from the deepest) cost ~2 us of the
 * DNS detectors' time per name. This walks the same rules from the right and stops at the first suffix no
 * rule ends with: two or three set lookups. The rule sets are the library's, split by kind; every table is
 * a Python set or dict (str hashes are SipHash, keyed per process). tests/appliance/detection/test_domains.py
 * holds it equal to `PublicSuffixList.privatesuffix`.
 *
 * SuffixSplitter(exact, exceptions, wildcards, tails, max_depth, memo, memo_size)
 *     exact: every rule as the library stores it; exceptions: "x" for each "!x"; wildcards: "x" for each
 *     "*.x"; tails: every label-suffix of all of those; max_depth: the deepest rule's labels + 1.
 *     .split(name) -> (registered domain, its label left of the public suffix), or (name, its first label)
 *     when it has none; remembered in `memo` (cleared when it holds memo_size names). Names under one registered
 *     domain share one tuple (an inner dict by registered domain, bounded the same way).
 */

typedef struct {
    PyObject_HEAD
    PyObject *exact, *exceptions, *wildcards, *tails;  /* frozensets of str */
    PyObject *memo;                                    /* dict: name -> (registered, label) */
    PyObject *pairs;                                   /* dict: registered -> its (registered, label), shared */
    Py_ssize_t max_depth, memo_size;
} SuffixSplitterObject;

static PyTypeObject SuffixSplitterType;

static PyObject *SuffixSplitter_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *keywords[] = {"exact", "exceptions", "wildcards", "tails", "max_depth", "memo", "memo_size", NULL};
    PyObject *sets[4], *memo;
    Py_ssize_t max_depth, memo_size;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!O!O!nO!n:SuffixSplitter", keywords, &PyFrozenSet_Type, &sets[0],
                                     &PyFrozenSet_Type, &sets[1], &PyFrozenSet_Type, &sets[2], &PyFrozenSet_Type,
                                     &sets[3], &max_depth, &PyDict_Type, &memo, &memo_size))
        return NULL;
    if (max_depth < 1 || memo_size < 1) {
        PyErr_SetString(PyExc_ValueError, "SuffixSplitter: max_depth and memo_size must be positive");
        return NULL;
    }
    SuffixSplitterObject *s = (SuffixSplitterObject *)type->tp_alloc(type, 0);
    if (s == NULL)
        return NULL;
    s->exact = Py_NewRef(sets[0]);
    s->exceptions = Py_NewRef(sets[1]);
    s->wildcards = Py_NewRef(sets[2]);
    s->tails = Py_NewRef(sets[3]);
    s->memo = Py_NewRef(memo);
    if ((s->pairs = PyDict_New()) == NULL) {
        Py_DECREF(s);
        return NULL;
    }
    s->max_depth = max_depth;
    s->memo_size = memo_size;
    return (PyObject *)s;
}

static int SuffixSplitter_traverse(SuffixSplitterObject *s, visitproc visit, void *arg)
{
    Py_VISIT(s->exact);
    Py_VISIT(s->exceptions);
    Py_VISIT(s->wildcards);
    Py_VISIT(s->tails);
    Py_VISIT(s->memo);
    Py_VISIT(s->pairs);
    return 0;
}

static int SuffixSplitter_clear(SuffixSplitterObject *s)
{
    Py_CLEAR(s->exact);
    Py_CLEAR(s->exceptions);
    Py_CLEAR(s->wildcards);
    Py_CLEAR(s->tails);
    Py_CLEAR(s->memo);
    Py_CLEAR(s->pairs);
    return 0;
}

static void SuffixSplitter_dealloc(SuffixSplitterObject *s)
{
    PyObject_GC_UnTrack(s);
    SuffixSplitter_clear(s);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

/* The name as the library compares it: one trailing dot dropped, lower case (str.lower). A new reference. */
static PyObject *sfx_prepared(PyObject *name)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(name);
    if (n && PyUnicode_READ_CHAR(name, n - 1) == '.')
        n--;
    PyObject *domain = PyUnicode_Substring(name, 0, n);
    if (domain == NULL)
        return NULL;
    if (PyUnicode_IS_ASCII(domain)) {
        const Py_UCS1 *data = PyUnicode_1BYTE_DATA(domain);
        Py_ssize_t i = 0;
        while (i < n && !(data[i] >= 'A' && data[i] <= 'Z'))
            i++;
        if (i == n)
            return domain;
    }
    PyObject *lower = PyObject_CallMethod(domain, "lower", NULL);
    Py_DECREF(domain);
    return lower;
}

/* The start of the last `count` labels of `domain` (labels >= count). */
static Py_ssize_t sfx_label_start(PyObject *domain, Py_ssize_t count)
{
    Py_ssize_t end = PyUnicode_GET_LENGTH(domain);
    for (Py_ssize_t i = 0; i < count && end >= 0; i++)
        end = end > 0 ? PyUnicode_FindChar(domain, '.', 0, end, -1) : -1;
    return end + 1;
}

/* PublicSuffixList.privatesuffix(name) with unknown TLDs public: a new reference, Py_None when it has none. */
static PyObject *sfx_private_suffix(SuffixSplitterObject *s, PyObject *name)
{
    PyObject *domain = sfx_prepared(name);
    if (domain == NULL)
        return NULL;
    Py_ssize_t n = PyUnicode_GET_LENGTH(domain), labels = 1;
    int empty_label = n == 0;
    if (PyUnicode_KIND(domain) == PyUnicode_1BYTE_KIND) {  /* every name ingestion makes: the dots found by memchr */
        const char *data = (const char *)PyUnicode_1BYTE_DATA(domain), *dot = data;
        while (!empty_label && (dot = memchr(dot, '.', (size_t)(data + n - dot))) != NULL) {
            Py_ssize_t i = dot - data;
            labels++;
            empty_label = i == 0 || i == n - 1 || data[i + 1] == '.';
            dot++;
        }
    }
    for (Py_ssize_t i = 0; PyUnicode_KIND(domain) != PyUnicode_1BYTE_KIND && i < n && !empty_label; i++) {
        if (PyUnicode_READ_CHAR(domain, i) == '.') {
            labels++;
            empty_label = i == 0 || i == n - 1 || PyUnicode_READ_CHAR(domain, i + 1) == '.';
        }
    }
    if (empty_label || labels == 1) {  /* not a valid domain, or a TLD alone: no private part */
        Py_DECREF(domain);
        Py_RETURN_NONE;
    }
    /* The deepest suffix made is kept: it is most often the registered domain (one label below the public suffix). */
    PyObject *last = NULL;
    Py_ssize_t last_depth = 0;
    Py_ssize_t public = 1, deepest = labels < s->max_depth ? labels : s->max_depth;
    for (Py_ssize_t depth = 1; depth <= deepest; depth++) {
        PyObject *suffix = PyUnicode_Substring(domain, sfx_label_start(domain, depth), n);
        if (suffix == NULL) {
            Py_XDECREF(last);
            Py_DECREF(domain);
            return NULL;
        }
        int known = PySet_Contains(s->tails, suffix), found = 0;
        if (known == 1) {
            /* At one depth the library tries exception, then wildcard, then exact; the deepest match wins. */
            if ((found = PySet_Contains(s->exceptions, suffix)) == 1)
                public = depth - 1;
            else if (found == 0 && (found = PySet_Contains(s->wildcards, suffix)) == 1)
                public = depth < labels ? depth + 1 : depth;
            else if (found == 0 && (found = PySet_Contains(s->exact, suffix)) == 1)
                public = depth;
        }
        Py_XSETREF(last, suffix);
        last_depth = depth;
        if (known < 0 || found < 0) {
            Py_DECREF(last);
            Py_DECREF(domain);
            return NULL;
        }
        if (!known)  /* no rule ends with this suffix: none deeper can match */
            break;
    }
    PyObject *out;
    if (labels < public + 1)
        out = Py_NewRef(Py_None);
    else if (last_depth == public + 1)
        out = Py_NewRef(last);
    else
        out = PyUnicode_Substring(domain, sfx_label_start(domain, public + 1), n);
    Py_XDECREF(last);
    Py_DECREF(domain);
    return out;
}

static PyObject *SuffixSplitter_split(SuffixSplitterObject *s, PyObject *name)
{
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "split() takes a str, not %.100s", Py_TYPE(name)->tp_name);
        return NULL;
    }
    PyObject *hit = PyDict_GetItemWithError(s->memo, name);
    if (hit != NULL)
        return Py_NewRef(hit);
    if (PyErr_Occurred())
        return NULL;
    PyObject *registered = PyUnicode_GET_LENGTH(name) ? sfx_private_suffix(s, name) : Py_NewRef(Py_None);
    if (registered == NULL)
        return NULL;
    /* Names under one registered domain (a tunnel's, a flood's: every name new) get its one pair: no label made
     * again, and the callers' dict keys and comparisons meet the same string objects (hash kept, identity first). */
    PyObject *result = registered != Py_None ? PyDict_GetItemWithError(s->pairs, registered) : NULL;
    if (result != NULL) {
        Py_INCREF(result);
        Py_DECREF(registered);
    }
    else {
        if (PyErr_Occurred()) {
            Py_DECREF(registered);
            return NULL;
        }
        PyObject *whole = registered == Py_None ? name : registered, *label;
        Py_ssize_t dot = PyUnicode_FindChar(whole, '.', 0, PyUnicode_GET_LENGTH(whole), 1);
        if (dot == -2) {
            Py_DECREF(registered);
            return NULL;
        }
        label = dot >= 0 ? PyUnicode_Substring(whole, 0, dot) : Py_NewRef(whole);
        result = label ? PyTuple_Pack(2, whole, label) : NULL;
        Py_XDECREF(label);
        if (result != NULL && registered != Py_None) {
            if (PyDict_GET_SIZE(s->pairs) >= s->memo_size)
                PyDict_Clear(s->pairs);
            if (PyDict_SetItem(s->pairs, registered, result) < 0)
                Py_CLEAR(result);
        }
        Py_DECREF(registered);
        if (result == NULL)
            return NULL;
    }
    if (PyDict_GET_SIZE(s->memo) >= s->memo_size)
        PyDict_Clear(s->memo);
    if (PyDict_SetItem(s->memo, name, result) < 0) {
        Py_DECREF(result);
        return NULL;
    }
    return result;
}

static PyMethodDef SuffixSplitter_methods[] = {
    {"split", (PyCFunction)SuffixSplitter_split, METH_O,
     "split(name) -> (registered domain, its label), or (name, its first label) when it has none (remembered)."},
    {NULL},
};

static PyTypeObject SuffixSplitterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "appliance.native.dpi.SuffixSplitter",
    .tp_doc = "Registered domains by the public suffix list's rules, remembered (see suffix_split.h).",
    .tp_basicsize = sizeof(SuffixSplitterObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = SuffixSplitter_new,
    .tp_dealloc = (destructor)SuffixSplitter_dealloc,
    .tp_traverse = (traverseproc)SuffixSplitter_traverse,
    .tp_clear = (inquiry)SuffixSplitter_clear,
    .tp_methods = SuffixSplitter_methods,
};

static int sfx_init(PyObject *module)
{
    if (PyType_Ready(&SuffixSplitterType) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "SuffixSplitter", (PyObject *)&SuffixSplitterType);
}
