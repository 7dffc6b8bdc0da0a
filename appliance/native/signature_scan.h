/*
 * The per-message loop of the signature layer's DNS scan (appliance/detection/signatures/matcher.py
 * DnsScan) in C; included by dpi.c after dns_windows.h (its dnsw_get reads the messages' slots).
 *
 * A DNS flow carries 2 messages (a query and its answer) or, for tunnels and DGA bursts, 64. Per message, with
 * `reported` the rules an earlier message of the flow matched:
 *     alive = type_memo[m.qtype] & (code_memo[m.rcode] if m.is_response else query_alive) & ~reported
 *     evaluated, holds = name_memo[m.qname]       (no hits when m.qname is empty or alive is 0)
 *     hits  = holds & alive                       when alive & ~evaluated is 0
 * When a type or code read misses, `miss(flow, m, reported)` (Python: fills the tables) answers for the
 * message. When only the name read does (no entry, or one that lacks some alive rule), the rules missing are
 * evaluated by the generated matcher of the rules' name conditions, `match(flow, m, wanted)` -> the wanted rules
 * whose name conditions hold, and the entry grows (the memo emptied first when it holds `entries` names), as
 * matcher.py's name_miss does. The matcher is not asked for a rule that one of the state's prefilters rules out
 * (a regex's required literal absent from an ASCII name, or the run an anchored regex opens with, a name length
 * condition failing): most new names fail
 * every alive rule that way, and a call of the generated matcher costs ~0.5 us. A message
 * whose name is the previous message's (an answer after its query) takes that message's entry without a
 * second read. Every table is a Python dict, so names (attacker-chosen) are hashed with the keyed SipHash of
 * str; no C hash table. The masks are Python ints in the tables and C integers here: one scan state covers at
 * most SIGSCAN_RULES rules (DnsScan gives a larger protocol one state per 64 rules, `offset` apart).
 *
 * dns_first_hits(out: list, step, flow, messages: list | DnsList, state) -> None
 *     (a DnsList, a decoded flow's messages, is read from its entries: a message is made only for a call of
 *     `miss` or `match` or for a hit, see dns_list.h)
 *     state = (offset, type_memo, code_memo, query_alive, name_memo, miss, match, entries, prefilters)
 *     appends (step, offset + i, message) to `out` for each rule i some message matched, ascending by i, with
 *     the first message that matched it.
 */

#define SIGSCAN_RULES 64

typedef struct {
    PyObject *type_memo, *code_memo, *name_memo, *miss, *match;
    uint64_t query_alive;
    Py_ssize_t entries;
    PyObject *prefilters;  /* tuple of (rule, op, value): see sigscan_fails */
} sigscan_state;

#define SIGSCAN_LITERAL 0  /* value: bytes, lower case ASCII; fails when an ASCII name's lower case lacks it */
#define SIGSCAN_LONGER 1   /* value: int; fails when the name has no more characters than that */
#define SIGSCAN_SHORTER 2  /* value: int; fails when the name has no fewer characters than that */
#define SIGSCAN_RUN 3       /* value: (bytes, n): fails when an ASCII name does not open with n of those (lower case) */
#define SIGSCAN_NAME_MAX 255  /* names longer than a DNS name can be are never prefiltered here */

/* Whether needle (lower case) occurs in the first n bytes of hay. */
static int sigscan_contains(const char *hay, Py_ssize_t n, const char *needle, Py_ssize_t k)
{
    /* glibc's memmem (Python.h asks for _GNU_SOURCE): a memcmp at every offset was 1% of the attack scenarios. */
    return k <= n && memmem(hay, (size_t)n, needle, (size_t)k) != NULL;
}

/* The rules among `wanted` whose name conditions certainly fail for qname, from the state's prefilters: each a
 * necessary condition of one of the rule's name conditions (matcher.py _name_prefilters), so a rule they rule out
 * needs no call of the matcher; -1 with an exception. */
static int sigscan_fails(PyObject *prefilters, PyObject *qname, uint64_t wanted, uint64_t *failing)
{
    *failing = 0;
    if (!PyTuple_CheckExact(prefilters)) {
        PyErr_SetString(PyExc_TypeError, "dns_first_hits: prefilters must be a tuple");
        return -1;
    }
    if (PyTuple_GET_SIZE(prefilters) == 0 || !PyUnicode_CheckExact(qname))
        return 0;
    Py_ssize_t length = PyUnicode_GET_LENGTH(qname);
    char lower[SIGSCAN_NAME_MAX];
    int ascii = PyUnicode_IS_ASCII(qname) && length <= SIGSCAN_NAME_MAX;
    if (ascii) {
        const Py_UCS1 *text = PyUnicode_1BYTE_DATA(qname);
        for (Py_ssize_t i = 0; i < length; i++)
            lower[i] = (char)(text[i] >= 'A' && text[i] <= 'Z' ? text[i] + 32 : text[i]);
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(prefilters); i++) {
        PyObject *check = PyTuple_GET_ITEM(prefilters, i);
        if (!PyTuple_CheckExact(check) || PyTuple_GET_SIZE(check) != 3) {
            PyErr_SetString(PyExc_TypeError, "dns_first_hits: a prefilter is (rule, op, value)");
            return -1;
        }
        long rule = PyLong_AsLong(PyTuple_GET_ITEM(check, 0)), op = PyLong_AsLong(PyTuple_GET_ITEM(check, 1));
        if (PyErr_Occurred())
            return -1;
        if (rule < 0 || rule >= SIGSCAN_RULES) {
            PyErr_SetString(PyExc_ValueError, "dns_first_hits: a prefilter's rule is out of range");
            return -1;
        }
        uint64_t bit = (uint64_t)1 << rule;
        if (!(wanted & bit) || (*failing & bit))
            continue;
        PyObject *value = PyTuple_GET_ITEM(check, 2);
        int fails = 0;
        if (op == SIGSCAN_LITERAL) {
            if (!PyBytes_CheckExact(value)) {
                PyErr_SetString(PyExc_TypeError, "dns_first_hits: a literal prefilter's value is bytes");
                return -1;
            }
            fails = ascii && !sigscan_contains(lower, length, PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value));
        }
        else if (op == SIGSCAN_LONGER || op == SIGSCAN_SHORTER) {
            Py_ssize_t bound = PyLong_AsSsize_t(value);
            if (bound == -1 && PyErr_Occurred())
                return -1;
            fails = op == SIGSCAN_LONGER ? length <= bound : length >= bound;
        }
        else if (op == SIGSCAN_RUN) {
            PyObject *chars = PyTuple_CheckExact(value) && PyTuple_GET_SIZE(value) == 2 ? PyTuple_GET_ITEM(value, 0) : NULL;
            Py_ssize_t n = chars != NULL ? PyLong_AsSsize_t(PyTuple_GET_ITEM(value, 1)) : -1;
            if (chars == NULL || !PyBytes_CheckExact(chars) || n < 1) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_TypeError, "dns_first_hits: a run prefilter's value is (bytes, n >= 1)");
                return -1;
            }
            if (ascii) {
                fails = length < n;
                for (Py_ssize_t j = 0; !fails && j < n; j++)
                    fails = memchr(PyBytes_AS_STRING(chars), lower[j], (size_t)PyBytes_GET_SIZE(chars)) == NULL;
            }
        }
        else {
            PyErr_SetString(PyExc_ValueError, "dns_first_hits: unknown prefilter op");
            return -1;
        }
        if (fails)
            *failing |= bit;
    }
    return 0;
}

/* The message attributes, read where their slots are (dnsw_get, dns_windows.h); names interned at first use. */
static dnsw_attr sigscan_qname = {NULL, NULL, -1}, sigscan_qtype = {NULL, NULL, -1}, sigscan_rcode = {NULL, NULL, -1},
                 sigscan_is_response = {NULL, NULL, -1};

/* A rule mask (a non-negative int below 2**64) read into *mask; -1 with an exception otherwise. */
static int sigscan_mask(PyObject *value, uint64_t *mask)
{
    if (!PyLong_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "dns_first_hits: rule masks must be ints");
        return -1;
    }
    unsigned long long bits = PyLong_AsUnsignedLongLong(value);
    if (bits == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *mask = bits;
    return 0;
}

/* The memo value under key, borrowed; NULL without an error when it is missing. */
static PyObject *sigscan_read(PyObject *memo, PyObject *key)
{
    if (!PyDict_Check(memo)) {
        PyErr_SetString(PyExc_TypeError, "dns_first_hits: memos must be dicts");
        return NULL;
    }
    return PyDict_GetItemWithError(memo, key);
}

/* A name memo entry (evaluated, holds) read into the two masks; -1 with an exception when it is no such pair. */
static int sigscan_entry(PyObject *entry, uint64_t *evaluated, uint64_t *holds)
{
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 2) {
        PyErr_SetString(PyExc_TypeError, "dns_first_hits: name memo entries are (evaluated, holds)");
        return -1;
    }
    return sigscan_mask(PyTuple_GET_ITEM(entry, 0), evaluated) < 0 || sigscan_mask(PyTuple_GET_ITEM(entry, 1), holds) < 0 ? -1 : 0;
}

/* `callback(flow, m, mask)` -> its answer as a mask; -1 with an exception. */
static int sigscan_call(PyObject *callback, PyObject *flow, PyObject *m, uint64_t mask, uint64_t *answer)
{
    PyObject *arg = PyLong_FromUnsignedLongLong(mask);
    if (arg == NULL)
        return -1;
    PyObject *got = PyObject_CallFunctionObjArgs(callback, flow, m, arg, NULL);
    Py_DECREF(arg);
    if (got == NULL)
        return -1;
    int failed = sigscan_mask(got, answer);
    Py_DECREF(got);
    return failed;
}

/* The message a loop step reads: the list's object, or a DnsList entry whose DnsMessage is made only when Python
 * must see it (a call of the matcher, a hit). */
typedef struct {
    PyObject *object;      /* held; NULL until made (DnsList) */
    PyObject *list;        /* the DnsList, or NULL */
    Py_ssize_t index;
} sigscan_message;

static PyObject *sigscan_object(sigscan_message *m)
{
    if (m->object == NULL)
        m->object = PySequence_GetItem(m->list, m->index);
    return m->object;
}

/* When message m's entry (*evaluated, *holds) lacks some alive rule: those asked of the matcher (their name
 * conditions only), the entry grown in place and stored under qname; -1 with an exception. (Asking for every rule
 * the type leaves alive, so that an NXDOMAIN answer finds its query's entry complete, saved a third of the misses
 * on the bench corpus and cost as much: the NXDOMAIN rule's prefilter then ran on every query's name.) */
static int sigscan_name_miss(const sigscan_state *s, PyObject *flow, sigscan_message *m, PyObject *qname, uint64_t alive,
                             uint64_t *evaluated, uint64_t *holds)
{
    uint64_t wanted = alive & ~*evaluated, failing, found = 0;
    if (sigscan_fails(s->prefilters, qname, wanted, &failing) < 0)
        return -1;
    if ((wanted & ~failing) != 0
        && (sigscan_object(m) == NULL || sigscan_call(s->match, flow, m->object, wanted & ~failing, &found) < 0))
        return -1;
    *evaluated |= wanted;
    *holds |= found;
    if (PyDict_GET_SIZE(s->name_memo) >= s->entries)
        PyDict_Clear(s->name_memo);
    PyObject *pair = Py_BuildValue("(KK)", (unsigned long long)*evaluated, (unsigned long long)*holds);
    if (pair == NULL)
        return -1;
    int stored = PyDict_SetItem(s->name_memo, qname, pair);
    Py_DECREF(pair);
    return stored;
}

/* Whether two message names are the same text (the previous message's name is held: never a dangling pointer). */
static int sigscan_same_name(PyObject *a, PyObject *b)
{
    if (a == b)
        return 1;
    if (a == NULL || !PyUnicode_CheckExact(a) || !PyUnicode_CheckExact(b))
        return 0;
    return PyUnicode_GET_LENGTH(a) == PyUnicode_GET_LENGTH(b) && PyUnicode_Compare(a, b) == 0;
}

static PyObject *dns_first_hits(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "dns_first_hits takes 5 arguments");
        return NULL;
    }
    PyObject *out = args[0], *step = args[1], *flow = args[2], *messages = args[3], *state = args[4];
    DnsListObject *decoded = dnsw_as_list(messages);
    if (!PyList_Check(out) || !(PyList_Check(messages) || decoded != NULL)) {
        PyErr_SetString(PyExc_TypeError, "dns_first_hits: out and messages must be lists");
        return NULL;
    }
    if (!PyTuple_CheckExact(state) || PyTuple_GET_SIZE(state) != 9) {
        PyErr_SetString(PyExc_TypeError, "dns_first_hits: the state is (offset, type_memo, code_memo, query_alive, "
                                         "name_memo, miss, match, entries, prefilters)");
        return NULL;
    }
    sigscan_state s = {PyTuple_GET_ITEM(state, 1), PyTuple_GET_ITEM(state, 2), PyTuple_GET_ITEM(state, 4),
                       PyTuple_GET_ITEM(state, 5), PyTuple_GET_ITEM(state, 6), 0, 0, PyTuple_GET_ITEM(state, 8)};
    Py_ssize_t offset = PyLong_AsSsize_t(PyTuple_GET_ITEM(state, 0));
    if (offset == -1 && PyErr_Occurred())
        return NULL;
    if ((s.entries = PyLong_AsSsize_t(PyTuple_GET_ITEM(state, 7))) == -1 && PyErr_Occurred())
        return NULL;
    if (sigscan_mask(PyTuple_GET_ITEM(state, 3), &s.query_alive) < 0)
        return NULL;
    if (!PyDict_Check(s.type_memo) || !PyDict_Check(s.code_memo) || !PyDict_Check(s.name_memo)) {
        PyErr_SetString(PyExc_TypeError, "dns_first_hits: memos must be dicts");
        return NULL;
    }
    dnsw_attr *attrs[4] = {&sigscan_qname, &sigscan_qtype, &sigscan_rcode, &sigscan_is_response};
    static const char *const texts[4] = {"qname", "qtype", "rcode", "is_response"};
    for (int i = 0; i < 4; i++) {
        if (attrs[i]->name == NULL && (attrs[i]->name = PyUnicode_InternFromString(texts[i])) == NULL)
            return NULL;
    }
    PyObject *first[SIGSCAN_RULES];  /* per rule of `reported` (set with its bit): the first message that matched it (held) */
    uint64_t reported = 0;
    PyObject *prev_name = NULL;  /* held: the name whose entry prev_evaluated, prev_holds are */
    uint64_t prev_evaluated = 0, prev_holds = 0;
    int failed = 0;
    /* The list is read by index each time: a memo read or a callback may run Python that changes it (a DnsList
     * cannot change). A DnsList's entries give the fields without making the messages. */
    Py_ssize_t count = decoded != NULL ? Py_SIZE(decoded) : 0;
    for (Py_ssize_t i = 0; !failed && i < (decoded != NULL ? count : PyList_GET_SIZE(messages)); i++) {
        sigscan_message m = {NULL, decoded != NULL ? messages : NULL, i};
        const DnsEntry *e = decoded != NULL ? &decoded->entries[i] : NULL;
        PyObject *qname = NULL, *qtype = NULL, *response = NULL, *rcode = NULL;
        uint64_t alive = 0, hits = 0;
        failed = -1;
        if (e == NULL) {
            m.object = Py_NewRef(PyList_GET_ITEM(messages, i));
            if ((qname = dnsw_get(m.object, &sigscan_qname)) == NULL)
                goto next;
        }
        else
            qname = Py_NewRef(e->qname);
        int named = PyUnicode_CheckExact(qname) ? PyUnicode_GET_LENGTH(qname) > 0 : PyObject_IsTrue(qname);
        if (named <= 0) {  /* a message without a question is no record */
            failed = named;
            goto next;
        }
        if ((qtype = e != NULL ? PyLong_FromUnsignedLong(e->qtype) : dnsw_get(m.object, &sigscan_qtype)) == NULL)
            goto next;
        PyObject *kind = PyDict_GetItemWithError(s.type_memo, qtype);
        if (kind == NULL && PyErr_Occurred())
            goto next;
        uint64_t kind_mask = 0, code_mask = s.query_alive;
        if (kind == NULL || sigscan_mask(kind, &kind_mask) < 0)
            goto missed;
        int is_response;
        if (e != NULL)
            is_response = e->is_response;
        else {
            if ((response = dnsw_get(m.object, &sigscan_is_response)) == NULL)
                goto next;
            is_response = response == Py_True ? 1 : response == Py_False ? 0 : PyObject_IsTrue(response);
            if (is_response < 0)
                goto next;
        }
        if (is_response) {
            if ((rcode = e != NULL ? PyLong_FromUnsignedLong(e->rcode) : dnsw_get(m.object, &sigscan_rcode)) == NULL)
                goto next;
            PyObject *code = PyDict_GetItemWithError(s.code_memo, rcode);
            if (code == NULL && PyErr_Occurred())
                goto next;
            if (code == NULL || sigscan_mask(code, &code_mask) < 0)
                goto missed;
        }
        alive = kind_mask & code_mask & ~reported;
        if (alive == 0) {
            failed = 0;
            goto next;
        }
        uint64_t evaluated = 0, holds = 0;
        if (sigscan_same_name(prev_name, qname)) {
            evaluated = prev_evaluated;
            holds = prev_holds;
        }
        else {
            PyObject *entry = sigscan_read(s.name_memo, qname);
            if (entry == NULL && PyErr_Occurred())
                goto next;
            if (entry != NULL && sigscan_entry(entry, &evaluated, &holds) < 0)
                goto next;
            Py_XSETREF(prev_name, Py_NewRef(qname));
        }
        if ((alive & ~evaluated) != 0 && sigscan_name_miss(&s, flow, &m, qname, alive, &evaluated, &holds) < 0) {
            Py_CLEAR(prev_name);
            goto next;
        }
        prev_evaluated = evaluated;
        prev_holds = holds;
        hits = holds & alive;
        failed = 0;
        goto next;
    missed:
        if (PyErr_Occurred())
            goto next;
        Py_CLEAR(prev_name);  /* the Python miss may have changed the name memo */
        if (sigscan_object(&m) == NULL || sigscan_call(s.miss, flow, m.object, reported, &hits) < 0)
            goto next;
        failed = 0;
    next:
        if (!failed && (hits & ~reported) != 0) {
            uint64_t fresh = hits & ~reported;  /* the memo's hits were among alive: already new */
            if (sigscan_object(&m) == NULL)
                failed = -1;
            else {
                reported |= fresh;
                for (int bit = 0; fresh != 0; bit++, fresh >>= 1) {
                    if (fresh & 1)
                        first[bit] = Py_NewRef(m.object);
                }
            }
        }
        Py_XDECREF(rcode);
        Py_XDECREF(response);
        Py_XDECREF(qtype);
        Py_XDECREF(qname);
        Py_XDECREF(m.object);
    }
    Py_XDECREF(prev_name);
    for (uint64_t left = reported; left != 0; left &= left - 1) {  /* ascending by rule */
        int bit = __builtin_ctzll(left);
        if (!failed) {
            PyObject *hit = Py_BuildValue("(OnO)", step, offset + bit, first[bit]);
            if (hit == NULL || PyList_Append(out, hit) < 0)
                failed = -1;
            Py_XDECREF(hit);
        }
        Py_DECREF(first[bit]);
    }
    if (failed)
        return NULL;
    Py_RETURN_NONE;
}
