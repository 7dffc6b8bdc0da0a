/*
 * The per-message accounting of the DNS detectors (appliance/detection/dpi/dns.py and dga_signals.py) in C;
 * included by dpi.c.
 *
 * DnsAnalyzer spent ~27 us per DNS flow of the bench corpus in Python, most of it in the loop over the
 * flow's messages: a sliding window of events per (agent, registered domain), the agent's answers window
 * and its scored domains; DgaSignals looped over the same messages again. Here each loop is one call per
 * flow (DnsScanner.scan, DgaScanner.scan); the judges, which build evidence, stay in Python, run only when one can
 * report (each judge's first tests are in the scan too), and read the state through the members below. dpi/dns_reference.py and dpi/dga_signals_reference.py
 * are the Python twins the tests hold this to.
 *
 * Names are chosen by attackers: every table keyed by a name is a Python dict (str hashes are SipHash,
 * keyed per process), never a C hash table. The bounds are the caller's (max_keys, max_events) and the
 * 20 flow ids of a deque(maxlen=20). Timestamps are int64 nanoseconds in [0, 2**62) (ingestion
 * replaces future ones); the scans check every one of a flow before they change anything and raise
 * ValueError for a flow outside that range (or with last_ns before first_ns), so int64 arithmetic
 * (ts - window, at most 7 days) cannot wrap.
 *
 * DomainWindow(first_ns=0)   queries under one registered domain by one agent, inside the window
 * AgentDns()                 one agent's scored domains, answers window, query-rate buckets and baseline
 * DnsScanner(agents, windows, split_memo, split, score_memo, score, max_keys, max_events)
 *     .configure(...)   the config in force (DnsAnalyzer calls it when the config object changes)
 *     .scan(flow) -> (agent, queries, now_ns, judged, dga_due, flood_due), or None when no judge is due
 *     Everything DnsAnalyzer.analyze did before its judges: the messages, the flood buckets, the expiry of
 *     the agent's scored domains. judged: [(registered, window)] of the touched windows (first-touch order)
 *     that pass the tunneling judge's first tests (enough queries, by names or by volume), or None;
 *     dga_due/flood_due: whether the DGA and flood judges can fire. Each is the judge's own test before it asks
 *     the throttle, with the same arithmetic, so a judge runs in Python only when it may report.
 * dga_scan(flow, agents, make_state, askers, split_memo, split, cap, prevalence_window_ns, burst_window_ns,
 *          max_agents, max_per_agent, max_domains, minimum) -> (state, now_ns, close_due, failed_any) or None
 *     DgaSignals.analyze up to where its judge can fire (appliance/detection/dpi/dga_signals.py), the same way.
 * DgaScanner(agents, make_state, askers, split_memo, split, max_agents, max_per_agent, max_domains)
 *     .configure(cap, prevalence_window_ns, burst_window_ns, minimum); .scan(flow): dga_scan with these bound.
 * dga_unresolved(failed, askers, horizon, cap) -> int
 *     The start of DgaSignals._judge: the expiry of an agent's failures, and how many unknown ones are left.
 * dga_unknown_since(failed, askers, since, cap) -> int
 *     DgaSignals._close_window's count: the unknown failures at or after `since`.
 */
#include <string.h>
#include <structmember.h>

#define DNSW_FLOW_IDS 20
#define DNSW_TS_LIMIT ((long long)1 << 62)
#define DNSW_NXDOMAIN 3

/* Interned strings, set once by dnsw_init (module exec). */
/* An attribute read by dnsw_get: its interned name and where the slot of the last type seen is. */
typedef struct {
    PyObject *name;
    PyTypeObject *type;  /* held; NULL before the first read */
    Py_ssize_t offset;   /* -1: not a plain object slot of `type`, use PyObject_GetAttr */
} dnsw_attr;

static dnsw_attr dnsw_attr_dns, dnsw_attr_agent_id, dnsw_attr_flow_id, dnsw_attr_first_ns, dnsw_attr_last_ns, dnsw_attr_packets_out, dnsw_attr_timestamp_ns, dnsw_attr_is_response, dnsw_attr_rcode, dnsw_attr_qname, dnsw_attr_qtype, dnsw_attr_score, dnsw_attr_answers, dnsw_attr_ttl, dnsw_attr_failed, dnsw_attr_answers_count, dnsw_attr_failures, dnsw_attr_ttls, dnsw_attr_window_start;
static PyObject *dnsw_xn, *dnsw_name_extend, *dnsw_name_append;
static PyObject *dnsw_local_suffixes[6];
static PyObject *dnsw_no_args;  /* () */
static const char *const dnsw_local_suffix_texts[6] = {"arpa", "local", "lan", "internal", "localdomain", "home"};
static size_t dnsw_local_suffix_lens[6]; /* their strlen, set at init */

/* -- attributes of the records, read where their slots are -------------------------------------------
 * FlowRecord, DnsMessage and DnsAnswer are slotted dataclasses: an attribute is a member descriptor at a fixed
 * offset. PyObject_GetAttr finds it through the type's method cache every time (a third of the loop); this
 * reads the slot directly while the object's type is the one the attribute last resolved on (held, so its
 * pointer is never reused by another type). Anything but a plain object member takes PyObject_GetAttr. */
static PyObject *dnsw_get(PyObject *obj, dnsw_attr *attr)
{
    PyTypeObject *type = Py_TYPE(obj);
    if (type != attr->type) {
        Py_ssize_t offset = -1;
        PyObject *descr = PyObject_GetAttr((PyObject *)type, attr->name);
        if (descr == NULL)
            PyErr_Clear();
        else if (Py_IS_TYPE(descr, &PyMemberDescr_Type) && ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX
                 && ((PyMemberDescrObject *)descr)->d_common.d_type == type)
            offset = ((PyMemberDescrObject *)descr)->d_member->offset;
        Py_XDECREF(descr);
        Py_INCREF(type);
        Py_XSETREF(attr->type, type);
        attr->offset = offset;
    }
    if (attr->offset < 0)
        return PyObject_GetAttr(obj, attr->name);
    PyObject *value = *(PyObject **)((char *)obj + attr->offset);
    if (value == NULL) {
        PyErr_Format(PyExc_AttributeError, "'%.100s' object has no attribute '%U'", type->tp_name, attr->name);
        return NULL;
    }
    return Py_NewRef(value);
}

/* obj.<attribute> = value (a new reference taken): the slot itself when dnsw_get found one on this type and the type
 * sets attributes the generic way (no __setattr__ of its own), else PyObject_SetAttr. Call dnsw_get first. */
static int dnsw_set(PyObject *obj, dnsw_attr *attr, PyObject *value)
{
    PyTypeObject *type = Py_TYPE(obj);
    if (type == attr->type && attr->offset >= 0 && type->tp_setattro == PyObject_GenericSetAttr) {
        PyObject **slot = (PyObject **)((char *)obj + attr->offset);
        Py_XSETREF(*slot, Py_NewRef(value));
        return 0;
    }
    return PyObject_SetAttr(obj, attr->name, value);
}

/* (first, second), both stolen; NULL, with both released, when either is NULL. */
static PyObject *dnsw_pair(PyObject *first, PyObject *second)
{
    PyObject *pair = (first != NULL && second != NULL) ? PyTuple_New(2) : NULL;
    if (pair == NULL) {
        Py_XDECREF(first);
        Py_XDECREF(second);
        return NULL;
    }
    PyTuple_SET_ITEM(pair, 0, first);
    PyTuple_SET_ITEM(pair, 1, second);
    return pair;
}

/* -- a deque(maxlen=20) of flow ids ---------------------------------------------------------------- */
typedef struct {
    PyObject *ids[DNSW_FLOW_IDS];
    int head, count;
} dnsw_ids;

static int dnsw_ids_contains(const dnsw_ids *ring, PyObject *id)
{
    /* str ids (all that ingestion makes) are told apart by their hashes first: kept in the object, no compare. */
    Py_hash_t hash = PyUnicode_CheckExact(id) ? PyObject_Hash(id) : -1;
    if (hash == -1 && PyErr_Occurred())
        return -1;
    /* Newest first: a flow's queries find their own id (the same object) at once. */
    for (int i = ring->count - 1; i >= 0; i--) {
        PyObject *other = ring->ids[(ring->head + i) % DNSW_FLOW_IDS];
        if (other == id)
            return 1;
        if (hash != -1 && PyUnicode_CheckExact(other) && PyObject_Hash(other) != hash)
            continue;
        int equal = PyObject_RichCompareBool(other, id, Py_EQ);
        if (equal != 0)
            return equal;  /* 1, or -1 with an exception set */
    }
    return 0;
}

static void dnsw_ids_append(dnsw_ids *ring, PyObject *id)
{
    Py_INCREF(id);
    if (ring->count < DNSW_FLOW_IDS) {
        ring->ids[(ring->head + ring->count) % DNSW_FLOW_IDS] = id;
        ring->count++;
        return;
    }
    PyObject *oldest = ring->ids[ring->head];
    ring->ids[ring->head] = id;
    ring->head = (ring->head + 1) % DNSW_FLOW_IDS;
    Py_DECREF(oldest);
}

static PyObject *dnsw_ids_list(const dnsw_ids *ring)
{
    PyObject *out = PyList_New(ring->count);
    if (out == NULL)
        return NULL;
    for (int i = 0; i < ring->count; i++) {
        PyObject *id = ring->ids[(ring->head + i) % DNSW_FLOW_IDS];
        Py_INCREF(id);
        PyList_SET_ITEM(out, i, id);
    }
    return out;
}

static void dnsw_ids_clear(dnsw_ids *ring)
{
    for (int i = 0; i < ring->count; i++)
        Py_CLEAR(ring->ids[(ring->head + i) % DNSW_FLOW_IDS]);
    ring->head = ring->count = 0;
}

/* -- DomainWindow ------------------------------------------------------------------------------------ */
typedef struct {
    long long ts;
    PyObject *sub;  /* the subdomain part, NULL when empty */
    long long flat_len;
    double entropy;
    int suspicious;
} dnsw_event;

typedef struct {
    PyObject_HEAD
    dnsw_event *events;  /* ring, capacity a power of two, at most max_events + 1 used */
    Py_ssize_t cap, head, count;
    PyObject *subdomains;  /* dict: unique subdomain -> occurrences in the window */
    long long length_sum;
    double entropy_sum;
    long long suspicious_qtypes;
    long long unique_bytes;
    long long first_ns;
    dnsw_ids flow_ids;
} DomainWindowObject;

static PyTypeObject DomainWindowType;

static DomainWindowObject *dnsw_window_new(long long first_ns)
{
    DomainWindowObject *w = PyObject_New(DomainWindowObject, &DomainWindowType);
    if (w == NULL)
        return NULL;
    w->events = NULL;
    w->cap = w->head = w->count = 0;
    w->length_sum = w->suspicious_qtypes = w->unique_bytes = 0;
    w->entropy_sum = 0.0;
    w->first_ns = first_ns;
    w->flow_ids.head = w->flow_ids.count = 0;
    w->subdomains = PyDict_New();
    if (w->subdomains == NULL) {
        Py_DECREF(w);
        return NULL;
    }
    return w;
}

static PyObject *DomainWindow_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *keywords[] = {"first_ns", NULL};
    long long first_ns = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|L:DomainWindow", keywords, &first_ns))
        return NULL;
    return (PyObject *)dnsw_window_new(first_ns);
}

static void DomainWindow_dealloc(DomainWindowObject *w)
{
    for (Py_ssize_t i = 0; i < w->count; i++)
        Py_XDECREF(w->events[(w->head + i) & (w->cap - 1)].sub);
    PyMem_Free(w->events);
    Py_XDECREF(w->subdomains);
    dnsw_ids_clear(&w->flow_ids);
    PyObject_Free(w);
}

static int dnsw_events_push(DomainWindowObject *w, dnsw_event event)
{
    if (w->count == w->cap) {
        Py_ssize_t cap = w->cap ? w->cap * 2 : 8;
        dnsw_event *grown = PyMem_Malloc((size_t)cap * sizeof(dnsw_event));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < w->count; i++)
            grown[i] = w->events[(w->head + i) & (w->cap - 1)];
        PyMem_Free(w->events);
        w->events = grown;
        w->cap = cap;
        w->head = 0;
    }
    w->events[(w->head + w->count) & (w->cap - 1)] = event;
    w->count++;
    return 0;
}

/* count * log2(count) for the counts of one symbol in a name (a DNS name has at most 253): computed once, by the
 * same expression entropy_of_bytes (dpi.c) uses, so that the sums are the same to the bit. */
#define DNSW_CLOG_COUNTS 256
static double dnsw_clog[DNSW_CLOG_COUNTS];

static void dnsw_clog_init(void)
{
    for (Py_ssize_t c = 0; c < DNSW_CLOG_COUNTS; c++)
        dnsw_clog[c] = c > 1 ? (double)c * log2((double)c) : 0.0;
}

/* Bits per character of `sub` without its dots, as shannon_entropy(sub.replace(".", "")); its length too. */
static int dnsw_flat_entropy(PyObject *sub, long long *flat_len, double *entropy)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(sub);
    if (PyUnicode_KIND(sub) == PyUnicode_1BYTE_KIND) {
        const unsigned char *data = PyUnicode_1BYTE_DATA(sub);
        /* Only the symbols between the lowest and the highest seen are cleared and summed (ascending order). */
        unsigned lo = 256, hi = 0;
        Py_ssize_t flat = 0, counts[256];
        for (Py_ssize_t i = 0; i < n; i++) {
            unsigned c = data[i];
            if (c == '.')
                continue;
            flat++;
            lo = c < lo ? c : lo;
            hi = c > hi ? c : hi;
        }
        *flat_len = flat;
        if (flat == 0) {
            *entropy = 0.0;
            return 0;
        }
        memset(&counts[lo], 0, (hi - lo + 1) * sizeof(counts[0]));
        for (Py_ssize_t i = 0; i < n; i++) {
            if (data[i] != '.')
                counts[data[i]]++;
        }
        double weighted = 0.0;
        for (unsigned s = lo; s <= hi; s++) {
            if (counts[s] > 1)
                weighted += counts[s] < DNSW_CLOG_COUNTS ? dnsw_clog[counts[s]] : (double)counts[s] * log2((double)counts[s]);
        }
        *entropy = log2((double)flat) - weighted / (double)flat;
        return 0;
    }
    PyObject *dot = PyUnicode_FromOrdinal('.'), *empty = PyUnicode_New(0, 0);
    PyObject *flat = (dot && empty) ? PyUnicode_Replace(sub, dot, empty, -1) : NULL;
    Py_XDECREF(dot);
    Py_XDECREF(empty);
    if (flat == NULL)
        return -1;
    *flat_len = PyUnicode_GET_LENGTH(flat);
    *entropy = 0.0;
    if (*flat_len) {
        PyObject *value = entropy_of_wide(flat, (Py_ssize_t)*flat_len);
        if (value == NULL) {
            Py_DECREF(flat);
            return -1;
        }
        *entropy = PyFloat_AS_DOUBLE(value);
        Py_DECREF(value);
    }
    Py_DECREF(flat);
    return 0;
}

/* DnsAnalyzer._add_query: one query into the window, then evict what fell out of it. */
static int dnsw_add_query(DomainWindowObject *w, PyObject *name, PyObject *registered, int suspicious, long long ts,
                          long long window_ns, Py_ssize_t max_events)
{
    Py_ssize_t name_len = PyUnicode_GET_LENGTH(name), registered_len = PyUnicode_GET_LENGTH(registered);
    dnsw_event event = {ts, NULL, 0, 0.0, suspicious};
    if (name_len > registered_len && name_len - registered_len - 1 > 0) {
        event.sub = PyUnicode_Substring(name, 0, name_len - registered_len - 1);
        if (event.sub == NULL || dnsw_flat_entropy(event.sub, &event.flat_len, &event.entropy) < 0) {
            Py_XDECREF(event.sub);
            return -1;
        }
    }
    if (dnsw_events_push(w, event) < 0) {
        Py_XDECREF(event.sub);
        return -1;
    }
    w->length_sum += event.flat_len;
    w->entropy_sum += event.entropy;
    w->suspicious_qtypes += suspicious;
    if (event.sub != NULL) {
        PyObject *seen = PyDict_GetItemWithError(w->subdomains, event.sub);
        if (seen == NULL && PyErr_Occurred())
            return -1;
        long long count = seen ? PyLong_AsLongLong(seen) : 0;
        if (count == -1 && PyErr_Occurred())
            return -1;
        PyObject *next = PyLong_FromLongLong(count + 1);
        if (next == NULL || PyDict_SetItem(w->subdomains, event.sub, next) < 0) {
            Py_XDECREF(next);
            return -1;
        }
        Py_DECREF(next);
        if (!count)
            w->unique_bytes += name_len;
    }
    long long horizon = ts - window_ns;
    while (w->count && (w->events[w->head].ts < horizon || w->count > max_events)) {
        dnsw_event old = w->events[w->head];
        w->head = (w->head + 1) & (w->cap - 1);
        w->count--;
        w->length_sum -= old.flat_len;
        w->entropy_sum -= old.entropy;
        w->suspicious_qtypes -= old.suspicious;
        if (old.sub == NULL)
            continue;
        PyObject *seen = PyDict_GetItemWithError(w->subdomains, old.sub);
        long long left = seen ? PyLong_AsLongLong(seen) - 1 : -1;
        int failed;
        if (seen == NULL || (left == -2 && PyErr_Occurred())) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "DomainWindow: an evicted subdomain is not counted");
            failed = 1;
        }
        else if (left) {
            PyObject *value = PyLong_FromLongLong(left);
            failed = value == NULL || PyDict_SetItem(w->subdomains, old.sub, value) < 0;
            Py_XDECREF(value);
        }
        else {
            failed = PyDict_DelItem(w->subdomains, old.sub) < 0;
            w->unique_bytes -= PyUnicode_GET_LENGTH(old.sub) + registered_len + 1;
        }
        Py_DECREF(old.sub);
        if (failed)
            return -1;
    }
    return 0;
}

static PyObject *DomainWindow_get_queries(DomainWindowObject *w, void *closure)
{
    return PyLong_FromSsize_t(w->count);
}

static PyObject *DomainWindow_get_first_event_ns(DomainWindowObject *w, void *closure)
{
    if (!w->count) {
        PyErr_SetString(PyExc_IndexError, "DomainWindow: no event in the window");
        return NULL;
    }
    return PyLong_FromLongLong(w->events[w->head].ts);
}

static PyObject *DomainWindow_get_flow_ids(DomainWindowObject *w, void *closure)
{
    return dnsw_ids_list(&w->flow_ids);
}

static PyMemberDef DomainWindow_members[] = {
    {"subdomains", T_OBJECT, offsetof(DomainWindowObject, subdomains), READONLY,
     "dict: unique subdomain -> occurrences in the window, oldest first (read it, do not change it)"},
    {"length_sum", T_LONGLONG, offsetof(DomainWindowObject, length_sum), READONLY, "characters of subdomains, dots left out"},
    {"entropy_sum", T_DOUBLE, offsetof(DomainWindowObject, entropy_sum), READONLY, "bits/char of the subdomains, summed"},
    {"suspicious_qtypes", T_LONGLONG, offsetof(DomainWindowObject, suspicious_qtypes), READONLY, "TXT/NULL/CNAME queries"},
    {"unique_bytes", T_LONGLONG, offsetof(DomainWindowObject, unique_bytes), READONLY, "characters of unique query names"},
    {"first_ns", T_LONGLONG, offsetof(DomainWindowObject, first_ns), READONLY, "when the window was opened"},
    {NULL},
};

static PyGetSetDef DomainWindow_getset[] = {
    {"queries", (getter)DomainWindow_get_queries, NULL, "queries in the window", NULL},
    {"first_event_ns", (getter)DomainWindow_get_first_event_ns, NULL, "timestamp of the oldest query in the window", NULL},
    {"flow_ids", (getter)DomainWindow_get_flow_ids, NULL, "the last 20 flows with a query in the window (a new list)", NULL},
    {NULL},
};

static PyTypeObject DomainWindowType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "appliance.native.dpi.DomainWindow",
    .tp_doc = "Queries under one registered domain by one agent, inside the tunneling window.",
    .tp_basicsize = sizeof(DomainWindowObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = DomainWindow_new,
    .tp_dealloc = (destructor)DomainWindow_dealloc,
    .tp_members = DomainWindow_members,
    .tp_getset = DomainWindow_getset,
};

/* -- AgentDns -------------------------------------------------------------------------------------- */
typedef struct {
    long long ts;
    int nx;
} dnsw_answer;

typedef struct {
    PyObject_HEAD
    PyObject *domains;  /* dict: registered -> (last seen ns, score), oldest first */
    long long suspicious;
    double threshold;
    dnsw_answer *answers;  /* ring, capacity a power of two */
    Py_ssize_t cap, head, count;
    long long nx_count;
    PyObject *buckets;  /* dict: bucket index -> queries */
    long long top_bucket;
    long long top_count, previous_count;  /* buckets[top_bucket] and buckets[top_bucket - 1] (0 when absent), kept */
    long long base_n;
    double base_mean, base_m2;
    dnsw_ids flow_ids;
} AgentDnsObject;

static PyTypeObject AgentDnsType;

static PyObject *AgentDns_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) || (kwds != NULL && PyDict_GET_SIZE(kwds))) {
        PyErr_SetString(PyExc_TypeError, "AgentDns() takes no arguments");
        return NULL;
    }
    AgentDnsObject *a = PyObject_New(AgentDnsObject, &AgentDnsType);
    if (a == NULL)
        return NULL;
    a->answers = NULL;
    a->cap = a->head = a->count = 0;
    a->suspicious = a->nx_count = a->base_n = 0;
    a->threshold = -1.0;
    a->top_bucket = -1;
    a->top_count = a->previous_count = 0;
    a->base_mean = a->base_m2 = 0.0;
    a->flow_ids.head = a->flow_ids.count = 0;
    a->domains = PyDict_New();
    a->buckets = PyDict_New();
    if (a->domains == NULL || a->buckets == NULL) {
        Py_DECREF(a);
        return NULL;
    }
    return (PyObject *)a;
}

static void AgentDns_dealloc(AgentDnsObject *a)
{
    PyMem_Free(a->answers);
    Py_XDECREF(a->domains);
    Py_XDECREF(a->buckets);
    dnsw_ids_clear(&a->flow_ids);
    PyObject_Free(a);
}

/* DnsAnalyzer._count_response. */
static int dnsw_count_answer(AgentDnsObject *a, int nx, long long ts, long long window_ns, Py_ssize_t max_events)
{
    if (a->count == a->cap) {
        Py_ssize_t cap = a->cap ? a->cap * 2 : 8;
        dnsw_answer *grown = PyMem_Malloc((size_t)cap * sizeof(dnsw_answer));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < a->count; i++)
            grown[i] = a->answers[(a->head + i) & (a->cap - 1)];
        PyMem_Free(a->answers);
        a->answers = grown;
        a->cap = cap;
        a->head = 0;
    }
    a->answers[(a->head + a->count) & (a->cap - 1)] = (dnsw_answer){ts, nx};
    a->count++;
    a->nx_count += nx;
    long long horizon = ts - window_ns;
    while (a->count && (a->answers[a->head].ts < horizon || a->count > max_events)) {
        a->nx_count -= a->answers[a->head].nx;
        a->head = (a->head + 1) & (a->cap - 1);
        a->count--;
    }
    return 0;
}

static int dnsw_score_of(PyObject *pair, double *score)
{
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
        PyErr_SetString(PyExc_TypeError, "AgentDns.domains values must be (ts, score) tuples");
        return -1;
    }
    *score = PyFloat_AsDouble(PyTuple_GET_ITEM(pair, 1));
    return (*score == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

/* DnsAnalyzer._remember_domain. */
static int dnsw_remember_domain(AgentDnsObject *a, PyObject *registered, long long ts, double score, double threshold)
{
    double old;
    if (threshold != a->threshold) {  /* first use, or the threshold was reconfigured: recount */
        a->threshold = threshold;
        long long count = 0;
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (PyDict_Next(a->domains, &pos, &key, &value)) {
            if (dnsw_score_of(value, &old) < 0)
                return -1;
            count += old >= threshold;
        }
        a->suspicious = count;
    }
    PyObject *previous = PyDict_GetItemWithError(a->domains, registered);
    if (previous == NULL && PyErr_Occurred())
        return -1;
    if (previous != NULL) {
        if (dnsw_score_of(previous, &old) < 0)
            return -1;
        if (old >= threshold)
            a->suspicious--;
        if (PyDict_DelItem(a->domains, registered) < 0)
            return -1;
    }
    PyObject *pair = dnsw_pair(PyLong_FromLongLong(ts), PyFloat_FromDouble(score));
    if (pair == NULL || PyDict_SetItem(a->domains, registered, pair) < 0) {
        Py_XDECREF(pair);
        return -1;
    }
    Py_DECREF(pair);
    if (score >= threshold)
        a->suspicious++;
    return 0;
}

static PyObject *AgentDns_get_answered(AgentDnsObject *a, void *closure)
{
    return PyLong_FromSsize_t(a->count);
}

static PyObject *AgentDns_get_flow_ids(AgentDnsObject *a, void *closure)
{
    return dnsw_ids_list(&a->flow_ids);
}

static PyMemberDef AgentDns_members[] = {
    {"domains", T_OBJECT, offsetof(AgentDnsObject, domains), READONLY,
     "dict: registered domain -> (last seen ns, score), oldest first"},
    {"suspicious", T_LONGLONG, offsetof(AgentDnsObject, suspicious), READONLY, "domains scored at or above threshold"},
    {"threshold", T_DOUBLE, offsetof(AgentDnsObject, threshold), READONLY, "the name threshold `suspicious` counts against"},
    {"nx_count", T_LONGLONG, offsetof(AgentDnsObject, nx_count), READONLY, "NXDOMAIN answers in the window"},
    {"buckets", T_OBJECT, offsetof(AgentDnsObject, buckets), READONLY, "dict: bucket index -> queries"},
    {"top_bucket", T_LONGLONG, offsetof(AgentDnsObject, top_bucket), READONLY, "the newest bucket index, -1 before any"},
    {"top_count", T_LONGLONG, offsetof(AgentDnsObject, top_count), READONLY,
     "buckets[top_bucket], kept for the flood judge's gate (0 before any)"},
    {"previous_count", T_LONGLONG, offsetof(AgentDnsObject, previous_count), READONLY,
     "buckets.get(top_bucket - 1, 0), kept for the flood judge's gate"},
    {"base_n", T_LONGLONG, offsetof(AgentDnsObject, base_n), READONLY, "closed buckets in the baseline"},
    {"base_mean", T_DOUBLE, offsetof(AgentDnsObject, base_mean), READONLY, "baseline mean, queries/s"},
    {"base_m2", T_DOUBLE, offsetof(AgentDnsObject, base_m2), READONLY, "baseline sum of squared deviations (Welford)"},
    {NULL},
};

static PyGetSetDef AgentDns_getset[] = {
    {"answered", (getter)AgentDns_get_answered, NULL, "answers in the window", NULL},
    {"flow_ids", (getter)AgentDns_get_flow_ids, NULL, "the agent's last 20 DNS flows (a new list)", NULL},
    {NULL},
};

static PyTypeObject AgentDnsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "appliance.native.dpi.AgentDns",
    .tp_doc = "Per-agent DNS state: registered domains seen (DGA), answers (NXDOMAIN ratio), query-rate buckets.",
    .tp_basicsize = sizeof(AgentDnsObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = AgentDns_new,
    .tp_dealloc = (destructor)AgentDns_dealloc,
    .tp_members = AgentDns_members,
    .tp_getset = AgentDns_getset,
};

/* -- DnsScanner ------------------------------------------------------------------------------------ */
typedef struct {
    PyObject_HEAD
    PyObject *agents;      /* dict: agent id -> AgentDns */
    PyObject *windows;     /* dict: (agent id, registered) -> DomainWindow */
    PyObject *split_memo;  /* dict: name -> (registered, label) */
    PyObject *split;       /* callable(name) -> (registered, label), on a memo miss */
    PyObject *score_memo;  /* dict: label -> object with a float `score` */
    PyObject *score;       /* callable(label) -> float, on a memo miss */
    Py_ssize_t max_keys, max_events;
    /* The config in force (configure()): windows and thresholds the loop and the judges' gates use. */
    int configured;
    long long tunnel_window_ns, min_tunnel_queries, dga_window_ns, min_suspicious_domains, bucket_ns, warmup_buckets;
    double name_threshold, bucket_s, absolute_qps, baseline_min_qps, baseline_z;
    /* The judges' first tests: a window (or an agent) that fails them is not handed to Python. */
    long long min_unique_subdomains, min_name_bytes, nxdomain_min_responses;
    double min_mean_subdomain_length, min_label_entropy, min_suspicious_share, nxdomain_ratio;
} DnsScannerObject;

static PyTypeObject DnsScannerType;

static PyObject *DnsScanner_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *keywords[] = {"agents", "windows", "split_memo", "split", "score_memo", "score", "max_keys", "max_events", NULL};
    PyObject *agents, *windows, *split_memo, *split, *score_memo, *score;
    Py_ssize_t max_keys, max_events;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!O!OO!Onn:DnsScanner", keywords, &PyDict_Type, &agents, &PyDict_Type, &windows,
                                     &PyDict_Type, &split_memo, &split, &PyDict_Type, &score_memo, &score,
                                     &max_keys, &max_events))
        return NULL;
    if (max_keys < 1 || max_events < 1) {
        PyErr_SetString(PyExc_ValueError, "DnsScanner: max_keys and max_events must be positive");
        return NULL;
    }
    DnsScannerObject *s = (DnsScannerObject *)type->tp_alloc(type, 0);
    if (s == NULL)
        return NULL;
    s->agents = Py_NewRef(agents);
    s->windows = Py_NewRef(windows);
    s->split_memo = Py_NewRef(split_memo);
    s->split = Py_NewRef(split);
    s->score_memo = Py_NewRef(score_memo);
    s->score = Py_NewRef(score);
    s->max_keys = max_keys;
    s->max_events = max_events;
    return (PyObject *)s;
}

static int DnsScanner_traverse(DnsScannerObject *s, visitproc visit, void *arg)
{
    Py_VISIT(s->agents);
    Py_VISIT(s->windows);
    Py_VISIT(s->split_memo);
    Py_VISIT(s->split);
    Py_VISIT(s->score_memo);
    Py_VISIT(s->score);
    return 0;
}

static int DnsScanner_clear(DnsScannerObject *s)
{
    Py_CLEAR(s->agents);
    Py_CLEAR(s->windows);
    Py_CLEAR(s->split_memo);
    Py_CLEAR(s->split);
    Py_CLEAR(s->score_memo);
    Py_CLEAR(s->score);
    return 0;
}

static void DnsScanner_dealloc(DnsScannerObject *s)
{
    PyObject_GC_UnTrack(s);
    DnsScanner_clear(s);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

/* One message of a flow, read and checked before any state changes. */
typedef struct {
    long long ts;
    int is_response;
    int flag;        /* NXDOMAIN for a response, a TXT/NULL/CNAME question for a query */
    PyObject *name;  /* the query name (a new reference), NULL for a response */
} dnsw_message;

static int dnsw_timestamp(PyObject *value, const char *what, long long *out)
{
    if (value == NULL)
        return -1;
    if (!PyLong_Check(value)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", what, Py_TYPE(value)->tp_name);
        Py_DECREF(value);
        return -1;
    }
    int overflow = 0;
    *out = PyLong_AsLongLongAndOverflow(value, &overflow);
    Py_DECREF(value);
    if (*out == -1 && PyErr_Occurred())
        return -1;
    if (overflow || *out < 0 || *out >= DNSW_TS_LIMIT) {
        PyErr_Format(PyExc_ValueError, "%s out of range [0, 2**62)", what);
        return -1;
    }
    return 0;
}

/* A small int attribute compared with a set of values (rcode == 3, qtype in {16, 10, 5}). */
static int dnsw_int_in(PyObject *message, dnsw_attr *attribute, const long *values, int n)
{
    PyObject *value = dnsw_get(message, attribute);
    if (value == NULL)
        return -1;
    if (!PyLong_Check(value)) {
        PyErr_Format(PyExc_TypeError, "DNS message %U must be an int", attribute->name);
        Py_DECREF(value);
        return -1;
    }
    int overflow = 0;
    long v = PyLong_AsLongAndOverflow(value, &overflow);
    Py_DECREF(value);
    if (v == -1 && PyErr_Occurred())
        return -1;
    for (int i = 0; i < n && !overflow; i++) {
        if (v == values[i])
            return 1;
    }
    return 0;
}

static const long dnsw_nxdomain[1] = {DNSW_NXDOMAIN};
static const long dnsw_suspicious_qtypes[3] = {16, 10, 5};  /* TXT, NULL, CNAME */

static void dnsw_messages_free(dnsw_message *messages, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        Py_XDECREF(messages[i].name);
    PyMem_Free(messages);
}

static dnsw_message *dnsw_read_messages(PyObject *seq, long long last_ns, Py_ssize_t *count)
{
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    dnsw_message *out = PyMem_Calloc((size_t)(n ? n : 1), sizeof(dnsw_message));
    if (out == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *message = PySequence_Fast_GET_ITEM(seq, i);
        dnsw_message *m = &out[i];
        if (dnsw_timestamp(dnsw_get(message, &dnsw_attr_timestamp_ns), "DNS message timestamp_ns", &m->ts) < 0)
            goto fail;
        if (m->ts == 0)
            m->ts = last_ns;
        PyObject *flag = dnsw_get(message, &dnsw_attr_is_response);
        m->is_response = flag ? PyObject_IsTrue(flag) : -1;
        Py_XDECREF(flag);
        if (m->is_response < 0)
            goto fail;
        if (m->is_response) {
            m->flag = dnsw_int_in(message, &dnsw_attr_rcode, dnsw_nxdomain, 1);
        }
        else {
            m->name = dnsw_get(message, &dnsw_attr_qname);
            if (m->name == NULL)
                goto fail;
            if (!PyUnicode_Check(m->name)) {
                PyErr_SetString(PyExc_TypeError, "DNS message qname must be a str");
                goto fail;
            }
            m->flag = dnsw_int_in(message, &dnsw_attr_qtype, dnsw_suspicious_qtypes, 3);
        }
        if (m->flag < 0)
            goto fail;
    }
    *count = n;
    return out;
fail:
    dnsw_messages_free(out, n);
    return NULL;
}

/* fastpath.DnsList (dns_list.h): flow.dns as the analysis process decodes it, read here entry by entry instead of
 * attribute by attribute (set by dnsw_init; NULL: every sequence goes the object path). */
static PyTypeObject *dnsw_list_type;

static DnsListObject *dnsw_as_list(PyObject *dns)
{
    return dnsw_list_type != NULL && Py_IS_TYPE(dns, dnsw_list_type) ? (DnsListObject *)dns : NULL;
}

static int dnsw_value_in(uint32_t v, const long *values, int n)
{
    for (int i = 0; i < n; i++) {
        if ((long)v == values[i])
            return 1;
    }
    return 0;
}

/* The entry's timestamp_ns checked as dnsw_timestamp checks the object's (`last_ns` when 0). */
static int dnsw_entry_time(const DnsEntry *e, long long last_ns, long long *out)
{
    if (e->ts >= (uint64_t)DNSW_TS_LIMIT) {
        PyErr_SetString(PyExc_ValueError, "DNS message timestamp_ns out of range [0, 2**62)");
        return -1;
    }
    *out = e->ts ? (long long)e->ts : last_ns;
    return 0;
}

/* dnsw_read_messages for a DnsList: the same messages, from its entries. */
static dnsw_message *dnsw_read_entries(DnsListObject *l, long long last_ns, Py_ssize_t *count)
{
    Py_ssize_t n = Py_SIZE(l);
    dnsw_message *out = PyMem_Calloc((size_t)(n ? n : 1), sizeof(dnsw_message));
    if (out == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const DnsEntry *e = &l->entries[i];
        dnsw_message *m = &out[i];
        if (dnsw_entry_time(e, last_ns, &m->ts) < 0) {
            dnsw_messages_free(out, n);
            return NULL;
        }
        m->is_response = e->is_response;
        if (m->is_response)
            m->flag = dnsw_value_in(e->rcode, dnsw_nxdomain, 1);
        else {
            m->name = Py_NewRef(e->qname);
            m->flag = dnsw_value_in(e->qtype, dnsw_suspicious_qtypes, 3);
        }
    }
    *count = n;
    return out;
}

/* fastpath's type `name` into *slot, checked to have the layout `header` (dns_list.h, sample_list.h) gives it: the
 * two extensions are built apart, and one read with the other's old layout would read past its entries. */
static int dnsw_fastpath_type(const char *name, Py_ssize_t basicsize, Py_ssize_t itemsize, const char *header,
                              PyTypeObject **slot)
{
    PyObject *fastpath = PyImport_ImportModule("appliance.native.fastpath");
    if (fastpath == NULL)
        return -1;
    PyObject *type = PyObject_GetAttrString(fastpath, name);
    Py_DECREF(fastpath);
    if (type == NULL)
        return -1;
    if (!PyType_Check(type) || ((PyTypeObject *)type)->tp_basicsize != basicsize
        || ((PyTypeObject *)type)->tp_itemsize != itemsize) {
        Py_DECREF(type);
        PyErr_Format(PyExc_ImportError, "appliance.native.fastpath.%s is not %s's: rebuild both extensions", name, header);
        return -1;
    }
    Py_XSETREF(*slot, (PyTypeObject *)type);
    return 0;
}

static int dnsw_list_init(void)
{
    return dnsw_fastpath_type("DnsList", (Py_ssize_t)offsetof(DnsListObject, entries), (Py_ssize_t)sizeof(DnsEntry),
                              "dns_list.h", &dnsw_list_type);
}

/* Skipped by the detectors: empty, a local suffix (str.endswith, so "xarpa" too), or no dot. */
static int dnsw_skipped_name(PyObject *name)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(name);
    if (n == 0)
        return 1;
    if (PyUnicode_KIND(name) == PyUnicode_1BYTE_KIND) {  /* every name ingestion makes: bytes compared in place */
        const char *data = (const char *)PyUnicode_1BYTE_DATA(name);
        for (int i = 0; i < 6; i++) {  /* the last letter first: most names (".com") leave without a memcmp */
            size_t len = dnsw_local_suffix_lens[i];
            if ((size_t)n >= len && data[n - 1] == dnsw_local_suffix_texts[i][len - 1] &&
                memcmp(data + n - len, dnsw_local_suffix_texts[i], len) == 0)
                return 1;
        }
        return memchr(data, '.', (size_t)n) == NULL;
    }
    for (int i = 0; i < 6; i++) {
        Py_ssize_t match = PyUnicode_Tailmatch(name, dnsw_local_suffixes[i], 0, PY_SSIZE_T_MAX, 1);
        if (match != 0)
            return (int)match;
    }
    Py_ssize_t dot = PyUnicode_FindChar(name, '.', 0, n, 1);
    return dot == -2 ? -1 : dot == -1;
}

/* (registered, label) of a name: the memo, or a call. A new reference to a checked 2-tuple of str. */
static PyObject *dnsw_split(PyObject *memo, PyObject *split, PyObject *name)
{
    PyObject *pair = PyDict_GetItemWithError(memo, name);
    if (pair != NULL)
        Py_INCREF(pair);
    else if (PyErr_Occurred())
        return NULL;
    else if ((pair = PyObject_CallOneArg(split, name)) == NULL)
        return NULL;
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(pair, 0))
        || !PyUnicode_Check(PyTuple_GET_ITEM(pair, 1))) {
        PyErr_SetString(PyExc_TypeError, "split(name) must give (registered, label), two str");
        Py_DECREF(pair);
        return NULL;
    }
    return pair;
}

static int dnsw_score(DnsScannerObject *s, PyObject *label, double *score)
{
    PyObject *features = PyDict_GetItemWithError(s->score_memo, label);
    PyObject *value;
    if (features != NULL)
        value = dnsw_get(features, &dnsw_attr_score);
    else if (PyErr_Occurred())
        return -1;
    else
        value = PyObject_CallOneArg(s->score, label);
    if (value == NULL)
        return -1;
    *score = PyFloat_AsDouble(value);
    Py_DECREF(value);
    return (*score == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

/*
 * The registered domains the flow's queries went to lately, with their windows: a tunnel's queries come in runs
 * under one or two registered domains (a flow may interleave two). A query to one of them needs only its window's
 * accounting: the flow id and the touched entry are already there, and the window is the one in `windows` (the
 * entries are dropped when that dict is cleared). What each query stored in agent->domains in turn (the domain
 * moved to the newest place, with this query's time and the same score: the suspicious count does not change) is
 * left pending and stored once: before a query to another domain (whose remembering must come after) and at the
 * end of the messages, the pending ones in the order of their last query. Nothing reads agent->domains between.
 */
#define DNSW_RECENT 4
typedef struct {
    PyObject *registered;        /* strong reference */
    DomainWindowObject *window;  /* strong reference */
    int remembered;              /* the domain is in agent->domains (not a punycode label), with this score */
    double score;
    long long last_use;          /* the query sequence number of its last query, for eviction */
    int pending;                 /* its last query's time is still to be stored in agent->domains */
    long long pending_ts;
} dnsw_recent_entry;

typedef struct {
    dnsw_recent_entry entries[DNSW_RECENT];
    int count;
    long long sequence;
    PyObject *newest;  /* borrowed from an entry or NULL: the key known to be agent->domains' newest */
} dnsw_recent;

static void dnsw_recent_clear(dnsw_recent *recent)
{
    for (int i = 0; i < recent->count; i++) {
        Py_CLEAR(recent->entries[i].registered);
        Py_CLEAR(recent->entries[i].window);
    }
    recent->count = 0;
    recent->newest = NULL;
}

/* Store the pending domains in agent->domains, oldest last query first, each moved to the newest place. */
static int dnsw_recent_flush(dnsw_recent *recent, AgentDnsObject *agent)
{
    for (;;) {
        dnsw_recent_entry *next = NULL;
        for (int i = 0; i < recent->count; i++) {
            dnsw_recent_entry *e = &recent->entries[i];
            if (e->pending && (next == NULL || e->last_use < next->last_use))
                next = e;
        }
        if (next == NULL)
            return 0;
        next->pending = 0;
        /* Already the newest (a run of queries under one domain): stored in place, which is where moving puts it. */
        if (recent->newest != next->registered && PyDict_DelItem(agent->domains, next->registered) < 0)
            return -1;
        PyObject *value = dnsw_pair(PyLong_FromLongLong(next->pending_ts), PyFloat_FromDouble(next->score));
        int status = value != NULL ? PyDict_SetItem(agent->domains, next->registered, value) : -1;
        Py_XDECREF(value);
        if (status < 0)
            return -1;
        recent->newest = next->registered;
    }
}

/* The entry of `registered`, or NULL (with an exception set on error). */
static dnsw_recent_entry *dnsw_recent_find(dnsw_recent *recent, PyObject *registered)
{
    for (int i = 0; i < recent->count; i++) {
        dnsw_recent_entry *e = &recent->entries[i];
        if (e->registered == registered || PyUnicode_Compare(e->registered, registered) == 0)
            return e;
        if (PyErr_Occurred())
            return NULL;
    }
    return NULL;
}

/* A new entry (its pending ones flushed first by the caller): a free one, or the least recently used. */
static void dnsw_recent_add(dnsw_recent *recent, PyObject *registered, DomainWindowObject *window, int remembered,
                            double score)
{
    dnsw_recent_entry *e = &recent->entries[0];
    if (recent->count < DNSW_RECENT)
        e = &recent->entries[recent->count++];
    else {
        for (int i = 1; i < DNSW_RECENT; i++) {
            if (recent->entries[i].last_use < e->last_use)
                e = &recent->entries[i];
        }
        if (recent->newest == e->registered)
            recent->newest = NULL;
        Py_CLEAR(e->registered);
        Py_CLEAR(e->window);
    }
    e->registered = Py_NewRef(registered);
    e->window = (DomainWindowObject *)Py_NewRef(window);
    e->remembered = remembered;
    e->score = score;
    e->last_use = ++recent->sequence;
    e->pending = 0;
    if (remembered)
        recent->newest = e->registered;
}

/* The windows a flow's queries touched, by registered domain in first-touch order (a dict's `touched[registered] =
 * window`): most flows touch one or two, held here; past DNSW_TOUCHED_HELD distinct domains, a dict holds them all. */
#define DNSW_TOUCHED_HELD 8
typedef struct {
    PyObject *registered[DNSW_TOUCHED_HELD];          /* strong references */
    DomainWindowObject *windows[DNSW_TOUCHED_HELD];   /* strong references */
    int count;
    PyObject *spilled;  /* dict: registered -> window, once more than DNSW_TOUCHED_HELD; then the arrays are empty */
} dnsw_touched;

static void dnsw_touched_clear(dnsw_touched *t)
{
    for (int i = 0; i < t->count; i++) {
        Py_CLEAR(t->registered[i]);
        Py_CLEAR(t->windows[i]);
    }
    t->count = 0;
    Py_CLEAR(t->spilled);
}

static int dnsw_touch(dnsw_touched *t, PyObject *registered, DomainWindowObject *window)
{
    if (t->spilled != NULL)
        return PyDict_SetItem(t->spilled, registered, (PyObject *)window);
    for (int i = 0; i < t->count; i++) {
        if (t->registered[i] == registered || PyUnicode_Compare(t->registered[i], registered) == 0) {
            Py_SETREF(t->windows[i], (DomainWindowObject *)Py_NewRef(window));
            return 0;
        }
        if (PyErr_Occurred())
            return -1;
    }
    if (t->count < DNSW_TOUCHED_HELD) {
        t->registered[t->count] = Py_NewRef(registered);
        t->windows[t->count] = (DomainWindowObject *)Py_NewRef(window);
        t->count++;
        return 0;
    }
    PyObject *spilled = PyDict_New();
    for (int i = 0; spilled != NULL && i < t->count; i++) {
        if (PyDict_SetItem(spilled, t->registered[i], (PyObject *)t->windows[i]) < 0)
            Py_CLEAR(spilled);
    }
    if (spilled == NULL)
        return -1;
    dnsw_touched_clear(t);
    t->spilled = spilled;
    return PyDict_SetItem(spilled, registered, (PyObject *)window);
}

/* The i-th touched (registered, window), borrowed; 0 past the last. */
static int dnsw_touched_next(const dnsw_touched *t, Py_ssize_t *pos, PyObject **registered, PyObject **window)
{
    if (t->spilled != NULL)
        return PyDict_Next(t->spilled, pos, registered, window);
    if (*pos >= t->count)
        return 0;
    *registered = t->registered[*pos];
    *window = (PyObject *)t->windows[*pos];
    (*pos)++;
    return 1;
}

/* One query: its window's accounting, the flow id, the touched windows and the agent's scored domains. */
static int dnsw_query(DnsScannerObject *s, AgentDnsObject *agent, PyObject *agent_id, PyObject *flow_id,
                      const dnsw_message *m, dnsw_touched *touched, long long tunnel_window_ns, double threshold,
                      dnsw_recent *recent)
{
    PyObject *pair = dnsw_split(s->split_memo, s->split, m->name);
    if (pair == NULL)
        return -1;
    PyObject *registered = PyTuple_GET_ITEM(pair, 0), *label = PyTuple_GET_ITEM(pair, 1);
    int status = -1;
    DomainWindowObject *window = NULL;
    PyObject *key = NULL;
    dnsw_recent_entry *known = dnsw_recent_find(recent, registered);
    if (known != NULL) {  /* one of the flow's recent domains: its window's accounting, the rest left pending */
        if (dnsw_add_query(known->window, m->name, registered, m->flag, m->ts, tunnel_window_ns, s->max_events) < 0)
            goto done;
        known->last_use = ++recent->sequence;
        if (known->remembered) {
            known->pending = 1;
            known->pending_ts = m->ts;
        }
        status = 0;
        goto done;
    }
    if (PyErr_Occurred() || dnsw_recent_flush(recent, agent) < 0)
        goto done;
    if ((key = PyTuple_Pack(2, agent_id, registered)) == NULL)
        goto done;
    window = (DomainWindowObject *)PyDict_GetItemWithError(s->windows, key);
    if (window != NULL) {
        if (Py_TYPE(window) != &DomainWindowType) {
            PyErr_SetString(PyExc_TypeError, "DnsScanner: the windows dict holds something other than a DomainWindow");
            window = NULL;
            goto done;
        }
        Py_INCREF(window);
    }
    else {
        if (PyErr_Occurred())
            goto done;
        if (PyDict_GET_SIZE(s->windows) >= s->max_keys) {
            PyDict_Clear(s->windows);
            dnsw_recent_clear(recent);  /* their windows left the dict (nothing is pending: flushed above) */
        }
        window = dnsw_window_new(m->ts);
        if (window == NULL || PyDict_SetItem(s->windows, key, (PyObject *)window) < 0)
            goto done;
    }
    if (dnsw_add_query(window, m->name, registered, m->flag, m->ts, tunnel_window_ns, s->max_events) < 0)
        goto done;
    int seen = dnsw_ids_contains(&window->flow_ids, flow_id);
    if (seen < 0)
        goto done;
    if (!seen)
        dnsw_ids_append(&window->flow_ids, flow_id);
    if (dnsw_touch(touched, registered, window) < 0)
        goto done;
    int punycode = (int)PyUnicode_Tailmatch(label, dnsw_xn, 0, PY_SSIZE_T_MAX, -1);
    if (punycode < 0)
        goto done;
    double score = 0.0;
    if (!punycode) {
        if (dnsw_score(s, label, &score) < 0 || dnsw_remember_domain(agent, registered, m->ts, score, threshold) < 0)
            goto done;
    }
    dnsw_recent_add(recent, registered, window, !punycode, score);
    status = 0;
done:
    Py_XDECREF(window);
    Py_XDECREF(key);
    Py_DECREF(pair);
    return status;
}

/* A bucket's queries: its value in agent.buckets, 0 when absent. */
static int dnsw_bucket_get(PyObject *buckets, long long index, long long *count)
{
    PyObject *key = PyLong_FromLongLong(index);
    if (key == NULL)
        return -1;
    PyObject *value = PyDict_GetItemWithError(buckets, key);
    Py_DECREF(key);
    if (value == NULL) {
        *count = 0;
        return PyErr_Occurred() ? -1 : 0;
    }
    *count = PyLong_AsLongLong(value);
    return (*count == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int dnsw_bucket_set(PyObject *buckets, long long index, long long count)
{
    PyObject *key = PyLong_FromLongLong(index), *value = PyLong_FromLongLong(count);
    int status = (key && value) ? PyDict_SetItem(buckets, key, value) : -1;
    Py_XDECREF(key);
    Py_XDECREF(value);
    return status;
}

static void dnsw_baseline_add(AgentDnsObject *a, double value)
{
    a->base_n += 1;
    double delta = value - a->base_mean;
    a->base_mean += delta / (double)a->base_n;
    a->base_m2 += delta * (value - a->base_mean);
}

/* DnsAnalyzer._count_queries: the flow's outbound packets spread over its buckets; closed buckets to the baseline. */
static int dnsw_count_queries(DnsScannerObject *s, AgentDnsObject *a, long long first_ns, long long last_ns,
                              long long packets_out)
{
    long long first = first_ns / s->bucket_ns, last = last_ns / s->bucket_ns;
    long long spans = last - first + 1;
    if (spans > 360) {  /* a flow longer than an hour of buckets: count it in its last hour */
        first = last - 359;
        spans = 360;
    }
    if (spans < 1) {  /* last before first: Python's divmod by a negative count, not a record ingestion makes */
        PyErr_SetString(PyExc_ValueError, "flow last_ns before first_ns");
        return -1;
    }
    long long share = packets_out / spans, extra = packets_out % spans, top = a->top_bucket, last_count = 0;
    for (long long i = 0; i < spans; i++) {
        long long bucket = first + i, count;
        if (top >= 0 && bucket == top)  /* most flows: the newest bucket, whose count is kept here */
            count = a->top_count;
        else if (dnsw_bucket_get(a->buckets, bucket, &count) < 0)
            return -1;
        count += share + (i < extra ? 1 : 0);
        if (dnsw_bucket_set(a->buckets, bucket, count) < 0)
            return -1;
        if (top >= 0 && bucket == top)
            a->top_count = count;
        else if (top >= 0 && bucket == top - 1)
            a->previous_count = count;
        last_count = count;
    }
    long long index = last;
    if (index <= a->top_bucket)
        return 0;
    /* A new newest bucket: its count was just set (the loop ends on it), the one before it is looked up. */
    a->top_count = last_count;
    if (dnsw_bucket_get(a->buckets, index - 1, &a->previous_count) < 0)
        return -1;
    if (a->top_bucket >= 0) {
        /* Close every bucket older than the two newest into the baseline (zeros included, capped). */
        long long zeros = index - a->top_bucket - 1;
        zeros = zeros < 0 ? 0 : (zeros > 30 ? 30 : zeros);
        for (long long i = 0; i < zeros; i++)
            dnsw_baseline_add(a, 0.0);
    }
    a->top_bucket = index;
    PyObject *old = PyList_New(0), *key, *value;
    if (old == NULL)
        return -1;
    Py_ssize_t pos = 0;
    while (PyDict_Next(a->buckets, &pos, &key, &value)) {
        long long b = PyLong_AsLongLong(key);
        if ((b == -1 && PyErr_Occurred()) || (b < index - 2 && PyList_Append(old, key) < 0)) {
            Py_DECREF(old);
            return -1;
        }
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(old); i++) {
        key = PyList_GET_ITEM(old, i);
        value = PyDict_GetItemWithError(a->buckets, key);
        long long count = value ? PyLong_AsLongLong(value) : -1;
        if (value == NULL || (count == -1 && PyErr_Occurred()) || PyDict_DelItem(a->buckets, key) < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "AgentDns: a bucket vanished");
            Py_DECREF(old);
            return -1;
        }
        double rate = (double)count / s->bucket_s;
        if (rate < s->absolute_qps)  /* an alarm bucket does not teach the baseline */
            dnsw_baseline_add(a, rate);
    }
    Py_DECREF(old);
    return 0;
}

/* The start of DnsAnalyzer._judge_dga: domains older than the window leave, the threshold is the config's. */
static int dnsw_expire_domains(DnsScannerObject *s, AgentDnsObject *a, long long now_ns)
{
    long long horizon = now_ns - s->dga_window_ns;
    PyObject *gone = NULL, *key, *value;  /* made only when a domain leaves: most flows find the oldest in the window */
    Py_ssize_t pos = 0;
    double score;
    int status = -1;
    while (PyDict_Next(a->domains, &pos, &key, &value)) {
        if (!PyTuple_Check(value) || PyTuple_GET_SIZE(value) != 2) {
            PyErr_SetString(PyExc_TypeError, "AgentDns.domains values must be (ts, score) tuples");
            goto done;
        }
        long long seen = PyLong_AsLongLong(PyTuple_GET_ITEM(value, 0));
        if ((seen == -1 && PyErr_Occurred()) || dnsw_score_of(value, &score) < 0)
            goto done;
        if (seen >= horizon)
            break;
        if ((gone == NULL && (gone = PyList_New(0)) == NULL) || PyList_Append(gone, key) < 0)
            goto done;
        if (score >= a->threshold)
            a->suspicious--;
    }
    for (Py_ssize_t i = 0; gone != NULL && i < PyList_GET_SIZE(gone); i++) {
        if (PyDict_DelItem(a->domains, PyList_GET_ITEM(gone, i)) < 0)
            goto done;
    }
    if (a->threshold != s->name_threshold) {
        a->threshold = s->name_threshold;
        long long count = 0;
        pos = 0;
        while (PyDict_Next(a->domains, &pos, &key, &value)) {
            if (dnsw_score_of(value, &score) < 0)
                goto done;
            count += score >= s->name_threshold;
        }
        a->suspicious = count;
    }
    status = 0;
done:
    Py_XDECREF(gone);
    return status;
}

/* The test at the start of DnsAnalyzer._judge_flood, with the same arithmetic: may a flood detector fire? */
static int dnsw_flood_due(DnsScannerObject *s, AgentDnsObject *a)
{
    if (a->top_bucket < 0)
        return 0;
    long long count = a->top_count > a->previous_count ? a->top_count : a->previous_count;
    double rate = (double)count / s->bucket_s;
    double std = a->base_n > 1 ? sqrt(a->base_m2 / (double)(a->base_n - 1)) : 0.0;
    double z = (rate - a->base_mean) / (1.0 > std ? 1.0 : std);
    int warm = a->base_n >= s->warmup_buckets;
    return rate >= s->absolute_qps || (warm && rate >= s->baseline_min_qps && z >= s->baseline_z);
}

/* The tests at the start of DnsAnalyzer._judge_tunneling, with the same arithmetic: may a tunneling detector fire? */
static int dnsw_tunneling_due(DnsScannerObject *s, DomainWindowObject *w)
{
    long long n = w->count, unique = PyDict_GET_SIZE(w->subdomains);
    if (n < s->min_tunnel_queries || n < 1)
        return 0;
    double mean_len = (double)w->length_sum / (double)n, mean_entropy = w->entropy_sum / (double)n;
    int by_names = mean_len >= s->min_mean_subdomain_length && mean_entropy >= s->min_label_entropy
                   && unique >= s->min_unique_subdomains;
    int by_volume = unique >= s->min_unique_subdomains && w->unique_bytes >= s->min_name_bytes
                    && mean_len >= s->min_mean_subdomain_length / 2;
    return by_names || by_volume;
}

/* The tests at the start of DnsAnalyzer._judge_dga (after dnsw_expire_domains), with the same arithmetic. */
static int dnsw_dga_due(DnsScannerObject *s, AgentDnsObject *a)
{
    if ((double)a->suspicious < (double)s->min_suspicious_domains / 2)
        return 0;
    Py_ssize_t total = PyDict_GET_SIZE(a->domains);
    double share = total ? (double)a->suspicious / (double)total : 0.0;
    double nx_ratio = a->count ? (double)a->nx_count / (double)a->count : 0.0;
    return (a->suspicious >= s->min_suspicious_domains && share >= s->min_suspicious_share)
           || (a->count >= s->nxdomain_min_responses && nx_ratio >= s->nxdomain_ratio);
}

static PyObject *DnsScanner_configure(DnsScannerObject *s, PyObject *args)
{
    if (!PyArg_ParseTuple(args, "LLdLLLddddLLddLdLd:configure", &s->tunnel_window_ns, &s->min_tunnel_queries,
                          &s->name_threshold, &s->dga_window_ns, &s->min_suspicious_domains, &s->bucket_ns, &s->bucket_s,
                          &s->absolute_qps, &s->baseline_min_qps, &s->baseline_z, &s->warmup_buckets,
                          &s->min_unique_subdomains, &s->min_mean_subdomain_length, &s->min_label_entropy,
                          &s->min_name_bytes, &s->min_suspicious_share, &s->nxdomain_min_responses, &s->nxdomain_ratio)) {
        s->configured = 0;
        return NULL;
    }
    if (s->tunnel_window_ns < 0 || s->tunnel_window_ns >= DNSW_TS_LIMIT || s->dga_window_ns < 0
        || s->dga_window_ns >= DNSW_TS_LIMIT || s->bucket_ns < 1 || !(s->bucket_s > 0.0)) {
        s->configured = 0;
        PyErr_SetString(PyExc_ValueError, "configure(): windows out of range");
        return NULL;
    }
    s->configured = 1;
    Py_RETURN_NONE;
}

static PyObject *DnsScanner_scan(DnsScannerObject *s, PyObject *flow)
{
    if (!s->configured) {
        PyErr_SetString(PyExc_RuntimeError, "scan(): configure() the scanner first");
        return NULL;
    }
    long long tunnel_window_ns = s->tunnel_window_ns, dga_window_ns = s->dga_window_ns;
    double threshold = s->name_threshold;
    long long first_ns, last_ns, packets_out;
    if (dnsw_timestamp(dnsw_get(flow, &dnsw_attr_first_ns), "flow first_ns", &first_ns) < 0
        || dnsw_timestamp(dnsw_get(flow, &dnsw_attr_last_ns), "flow last_ns", &last_ns) < 0
        || dnsw_timestamp(dnsw_get(flow, &dnsw_attr_packets_out), "flow packets_out", &packets_out) < 0)
        return NULL;
    if (packets_out && last_ns / s->bucket_ns < first_ns / s->bucket_ns) {
        PyErr_SetString(PyExc_ValueError, "flow last_ns before first_ns");
        return NULL;
    }
    PyObject *agent_id = NULL, *flow_id = NULL, *judged = NULL, *out = NULL, *seq = NULL;
    dnsw_touched touched = {.count = 0, .spilled = NULL};
    AgentDnsObject *agent = NULL;
    dnsw_message *messages = NULL;
    dnsw_recent recent = {.count = 0, .sequence = 0, .newest = NULL};
    Py_ssize_t n = 0;
    PyObject *dns = dnsw_get(flow, &dnsw_attr_dns);
    if (dns == NULL)
        return NULL;
    DnsListObject *decoded = dnsw_as_list(dns);
    if (decoded != NULL)
        messages = dnsw_read_entries(decoded, last_ns, &n);
    else if ((seq = PySequence_Fast(dns, "flow.dns must be a sequence")) != NULL)
        messages = dnsw_read_messages(seq, last_ns, &n);
    Py_DECREF(dns);
    if (messages == NULL)
        goto done;
    if ((agent_id = dnsw_get(flow, &dnsw_attr_agent_id)) == NULL
        || (flow_id = dnsw_get(flow, &dnsw_attr_flow_id)) == NULL)
        goto done;
    /* Checked: from here on the state changes. */
    agent = (AgentDnsObject *)PyDict_GetItemWithError(s->agents, agent_id);
    if (agent != NULL && Py_TYPE(agent) != &AgentDnsType) {
        PyErr_SetString(PyExc_TypeError, "DnsScanner: the agents dict holds something other than an AgentDns");
        agent = NULL;
        goto done;
    }
    if (agent != NULL)
        Py_INCREF(agent);
    else {
        if (PyErr_Occurred())
            goto done;
        if (PyDict_GET_SIZE(s->agents) >= s->max_keys)
            PyDict_Clear(s->agents);
        agent = (AgentDnsObject *)AgentDns_new(&AgentDnsType, dnsw_no_args, NULL);
        if (agent == NULL || PyDict_SetItem(s->agents, agent_id, (PyObject *)agent) < 0)
            goto done;
    }
    dnsw_ids_append(&agent->flow_ids, flow_id);
    long long now_ns = first_ns, queries = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const dnsw_message *m = &messages[i];
        if (m->ts > now_ns)
            now_ns = m->ts;
        if (m->is_response) {
            if (dnsw_count_answer(agent, m->flag, m->ts, dga_window_ns, s->max_events) < 0)
                goto done;
            continue;
        }
        int skipped = dnsw_skipped_name(m->name);
        if (skipped < 0)
            goto done;
        if (skipped)
            continue;
        queries++;
        if (dnsw_query(s, agent, agent_id, flow_id, m, &touched, tunnel_window_ns, threshold, &recent) < 0)
            goto done;
    }
    if (dnsw_recent_flush(&recent, agent) < 0)
        goto done;
    /* The flood counter uses the flow's packet count: a flow keeps only its first DNS messages. */
    if (packets_out) {
        if (dnsw_count_queries(s, agent, first_ns, last_ns, packets_out) < 0)
            goto done;
        if (queries < 1)
            queries = 1;
    }
    int dga_due = 0, flood_due = 0;
    if (queries) {
        if (dnsw_expire_domains(s, agent, now_ns) < 0 || (flood_due = dnsw_flood_due(s, agent)) < 0)
            goto done;
        dga_due = dnsw_dga_due(s, agent);
    }
    /* Windows the tunneling judge would pass over are not handed to it. */
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (dnsw_touched_next(&touched, &pos, &key, &value)) {
        if (dnsw_tunneling_due(s, (DomainWindowObject *)value)) {
            if (judged == NULL && (judged = PyList_New(0)) == NULL)
                goto done;
            PyObject *item = PyTuple_Pack(2, key, value);
            if (item == NULL || PyList_Append(judged, item) < 0) {
                Py_XDECREF(item);
                goto done;
            }
            Py_DECREF(item);
        }
    }
    if (judged == NULL && !dga_due && !flood_due)
        out = Py_NewRef(Py_None);  /* nothing for the judges: most flows */
    else
        out = Py_BuildValue("(OLLOOO)", agent, queries, now_ns, judged ? judged : Py_None, dga_due ? Py_True : Py_False,
                            flood_due ? Py_True : Py_False);
done:
    if (messages != NULL)
        dnsw_messages_free(messages, n);
    Py_XDECREF(seq);
    Py_XDECREF(agent_id);
    Py_XDECREF(flow_id);
    dnsw_touched_clear(&touched);
    Py_XDECREF(judged);
    dnsw_recent_clear(&recent);
    Py_XDECREF(agent);
    return out;
}

static PyMethodDef DnsScanner_methods[] = {
    {"scan", (PyCFunction)DnsScanner_scan, METH_O,
     "scan(flow) -> (agent, queries, now_ns, [(registered, window) to judge] or None, dga due, flood due), "
     "or None when no judge is due."},
    {"configure", (PyCFunction)DnsScanner_configure, METH_VARARGS,
     "configure(tunnel_window_ns, min_tunnel_queries, name_threshold, dga_window_ns, min_suspicious_domains, "
     "bucket_ns, bucket_s, absolute_qps, baseline_min_qps, baseline_z, warmup_buckets, min_unique_subdomains, "
     "min_mean_subdomain_length, min_label_entropy, min_name_bytes, min_suspicious_share, nxdomain_min_responses, "
     "nxdomain_ratio): the config in force."},
    {NULL},
};

static PyTypeObject DnsScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "appliance.native.dpi.DnsScanner",
    .tp_doc = "The DNS detectors' per-message loop over the windows it is given (see dns_windows.h).",
    .tp_basicsize = sizeof(DnsScannerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = DnsScanner_new,
    .tp_dealloc = (destructor)DnsScanner_dealloc,
    .tp_traverse = (traverseproc)DnsScanner_traverse,
    .tp_clear = (inquiry)DnsScanner_clear,
    .tp_methods = DnsScanner_methods,
};


/* -- DgaSignals ------------------------------------------------------------------------------------ */
/* One message as DgaSignals reads it, checked before any state changes. */
typedef struct {
    long long ts;
    int is_response, nx;
    PyObject *name;  /* a new reference; NULL for an empty name (skipped) */
    PyObject *ttl;   /* the first answer's TTL of a resolved response (a new reference), or NULL */
} dgas_message;

static void dgas_messages_free(dgas_message *messages, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_XDECREF(messages[i].name);
        Py_XDECREF(messages[i].ttl);
    }
    PyMem_Free(messages);
}

static dgas_message *dgas_read_messages(PyObject *seq, long long last_ns)
{
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    dgas_message *out = PyMem_Calloc((size_t)(n ? n : 1), sizeof(dgas_message));
    if (out == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *message = PySequence_Fast_GET_ITEM(seq, i);
        dgas_message *m = &out[i];
        m->name = dnsw_get(message, &dnsw_attr_qname);
        if (m->name == NULL)
            goto fail;
        if (!PyUnicode_Check(m->name)) {
            PyErr_SetString(PyExc_TypeError, "DNS message qname must be a str");
            goto fail;
        }
        if (PyUnicode_GET_LENGTH(m->name) == 0) {
            Py_CLEAR(m->name);
            continue;
        }
        if (dnsw_timestamp(dnsw_get(message, &dnsw_attr_timestamp_ns), "DNS message timestamp_ns", &m->ts) < 0)
            goto fail;
        if (m->ts == 0)
            m->ts = last_ns;
        PyObject *flag = dnsw_get(message, &dnsw_attr_is_response);
        m->is_response = flag ? PyObject_IsTrue(flag) : -1;
        Py_XDECREF(flag);
        if (m->is_response < 0)
            goto fail;
        if (!m->is_response)
            continue;
        if ((m->nx = dnsw_int_in(message, &dnsw_attr_rcode, dnsw_nxdomain, 1)) < 0)
            goto fail;
        if (m->nx)
            continue;
        PyObject *answers = dnsw_get(message, &dnsw_attr_answers);
        int any = answers ? PyObject_IsTrue(answers) : -1;
        if (any > 0) {
            PyObject *first = PySequence_GetItem(answers, 0);
            m->ttl = first ? dnsw_get(first, &dnsw_attr_ttl) : NULL;
            Py_XDECREF(first);
            any = m->ttl ? 0 : -1;
        }
        Py_XDECREF(answers);
        if (any < 0)
            goto fail;
    }
    return out;
fail:
    dgas_messages_free(out, n);
    return NULL;
}

/* dgas_read_messages for a DnsList: the same messages, from its entries. */
static dgas_message *dgas_read_entries(DnsListObject *l, long long last_ns)
{
    Py_ssize_t n = Py_SIZE(l);
    dgas_message *out = PyMem_Calloc((size_t)(n ? n : 1), sizeof(dgas_message));
    if (out == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const DnsEntry *e = &l->entries[i];
        dgas_message *m = &out[i];
        if (PyUnicode_GET_LENGTH(e->qname) == 0)
            continue;
        m->name = Py_NewRef(e->qname);
        if (dnsw_entry_time(e, last_ns, &m->ts) < 0)
            goto fail;
        m->is_response = e->is_response;
        if (!m->is_response || (m->nx = dnsw_value_in(e->rcode, dnsw_nxdomain, 1)))
            continue;
        if (e->answered && (m->ttl = PyLong_FromUnsignedLong(e->first_ttl)) == NULL)
            goto fail;
    }
    return out;
fail:
    dgas_messages_free(out, n);
    return NULL;
}

/* DgaSignals._count_asker: one more agent asking for a registered domain, within the prevalence window. */
static int dgas_count_asker(PyObject *askers, PyObject *registered, PyObject *agent_id, long long ts, Py_ssize_t cap,
                            double window_ns, Py_ssize_t max_domains)
{
    PyObject *entry = PyDict_GetItemWithError(askers, registered);
    if (entry == NULL && PyErr_Occurred())
        return -1;
    long long seen = 0;
    if (entry != NULL) {
        if (!PyList_Check(entry) || PyList_GET_SIZE(entry) != 2 || !PySet_Check(PyList_GET_ITEM(entry, 1))) {
            PyErr_SetString(PyExc_TypeError, "askers values must be [ts, set of agents]");
            return -1;
        }
        seen = PyLong_AsLongLong(PyList_GET_ITEM(entry, 0));
        if (seen == -1 && PyErr_Occurred())
            return -1;
    }
    if (entry == NULL || (double)(ts - seen) > window_ns) {
        if (PyDict_GET_SIZE(askers) >= max_domains)
            PyDict_Clear(askers);
        PyObject *agents = PySet_New(NULL), *fresh = NULL, *first = NULL;
        if (agents != NULL && PySet_Add(agents, agent_id) == 0 && (first = PyLong_FromLongLong(ts)) != NULL
            && (fresh = PyList_New(2)) != NULL) {
            PyList_SET_ITEM(fresh, 0, first);  /* both stolen */
            PyList_SET_ITEM(fresh, 1, agents);
            first = agents = NULL;
        }
        Py_XDECREF(first);
        Py_XDECREF(agents);
        int status = fresh ? PyDict_SetItem(askers, registered, fresh) : -1;
        Py_XDECREF(fresh);
        return status;
    }
    if (ts > seen) {
        PyObject *value = PyLong_FromLongLong(ts);
        if (value == NULL || PyList_SetItem(entry, 0, value) < 0)  /* steals value */
            return -1;
    }
    PyObject *agents = PyList_GET_ITEM(entry, 1);
    return PySet_GET_SIZE(agents) < cap ? PySet_Add(agents, agent_id) : 0;
}

/* DgaSignals: the failed (NXDOMAIN) registered domain moves to the end of the agent's failures. */
static int dgas_fail(PyObject *failed, PyObject *pair, long long ts, Py_ssize_t max_per_agent)
{
    PyObject *registered = PyTuple_GET_ITEM(pair, 0);
    if (PyDict_GetItemWithError(failed, registered) != NULL) {
        if (PyDict_DelItem(failed, registered) < 0)
            return -1;
    }
    else if (PyErr_Occurred())
        return -1;
    PyObject *value = dnsw_pair(PyLong_FromLongLong(ts), Py_NewRef(PyTuple_GET_ITEM(pair, 1)));
    if (value == NULL || PyDict_SetItem(failed, registered, value) < 0) {
        Py_XDECREF(value);
        return -1;
    }
    Py_DECREF(value);
    if (PyDict_GET_SIZE(failed) > max_per_agent) {
        Py_ssize_t pos = 0;
        PyObject *oldest, *ignored;
        if (PyDict_Next(failed, &pos, &oldest, &ignored)) {
            Py_INCREF(oldest);
            int status = PyDict_DelItem(failed, oldest);
            Py_DECREF(oldest);
            return status;
        }
    }
    return 0;
}

/* How many of an agent's failures at or after `since` are unknown (fewer than `cap` agents asked for them). */
static Py_ssize_t dgas_unknown_since(PyObject *failed, PyObject *askers, long long since, Py_ssize_t cap)
{
    Py_ssize_t pos = 0, unknown = 0;
    PyObject *key, *value;
    while (PyDict_Next(failed, &pos, &key, &value)) {
        if (!PyTuple_Check(value) || PyTuple_GET_SIZE(value) != 2) {
            PyErr_SetString(PyExc_TypeError, "failed values must be (ts, label) tuples");
            return -1;
        }
        long long ts = PyLong_AsLongLong(PyTuple_GET_ITEM(value, 0));
        if (ts == -1 && PyErr_Occurred())
            return -1;
        if (ts < since)
            continue;
        PyObject *entry = PyDict_GetItemWithError(askers, key);
        if (entry == NULL) {
            if (PyErr_Occurred())
                return -1;
            unknown++;
            continue;
        }
        if (!PyList_Check(entry) || PyList_GET_SIZE(entry) != 2 || !PyAnySet_Check(PyList_GET_ITEM(entry, 1))) {
            PyErr_SetString(PyExc_TypeError, "askers values must be [ts, set of agents]");
            return -1;
        }
        unknown += PySet_GET_SIZE(PyList_GET_ITEM(entry, 1)) < cap;
    }
    return unknown;
}

/*
 * The start of DgaSignals._judge: failures older than `horizon` leave from the front (up to the first one inside
 * it, as the judge's loop did), then how many of those left are unknown (fewer than `cap` agents asked for them).
 */
static Py_ssize_t dgas_unresolved(PyObject *failed, PyObject *askers, long long horizon, Py_ssize_t cap)
{
    PyObject *gone = NULL, *key, *value;  /* made only when a failure leaves */
    Py_ssize_t pos = 0, count = -1;
    while (PyDict_Next(failed, &pos, &key, &value)) {
        if (!PyTuple_Check(value) || PyTuple_GET_SIZE(value) != 2) {
            PyErr_SetString(PyExc_TypeError, "failed values must be (ts, label) tuples");
            goto done;
        }
        long long ts = PyLong_AsLongLong(PyTuple_GET_ITEM(value, 0));
        if (ts == -1 && PyErr_Occurred())
            goto done;
        if (ts >= horizon)
            break;
        if ((gone == NULL && (gone = PyList_New(0)) == NULL) || PyList_Append(gone, key) < 0)
            goto done;
    }
    for (Py_ssize_t i = 0; gone != NULL && i < PyList_GET_SIZE(gone); i++) {
        if (PyDict_DelItem(failed, PyList_GET_ITEM(gone, i)) < 0)
            goto done;
    }
    count = dgas_unknown_since(failed, askers, LLONG_MIN, cap);
done:
    Py_XDECREF(gone);
    return count;
}

/* dga_unknown_since(failed, askers, since, cap) -> int: see dgas_unknown_since (DgaSignals._close_window's count). */
static PyObject *dga_unknown_since(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyDict_Check(args[0]) || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "dga_unknown_since(failed: dict, askers: dict, since, cap)");
        return NULL;
    }
    long long since = PyLong_AsLongLong(args[2]);
    Py_ssize_t cap = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred())
        return NULL;
    Py_ssize_t count = dgas_unknown_since(args[0], args[1], since, cap);
    return count < 0 ? NULL : PyLong_FromSsize_t(count);
}

/* dga_unresolved(failed, askers, horizon, cap) -> int: see dgas_unresolved. */
static PyObject *dga_unresolved(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyDict_Check(args[0]) || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "dga_unresolved(failed: dict, askers: dict, horizon, cap)");
        return NULL;
    }
    long long horizon = PyLong_AsLongLong(args[2]);
    Py_ssize_t cap = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred())
        return NULL;
    Py_ssize_t count = dgas_unresolved(args[0], args[1], horizon, cap);
    return count < 0 ? NULL : PyLong_FromSsize_t(count);
}

/* state.<attribute> += delta for an int attribute. */
static int dgas_add(PyObject *state, dnsw_attr *attribute, long long delta)
{
    if (!delta)
        return 0;
    PyObject *value = dnsw_get(state, attribute), *sum = NULL, *step = PyLong_FromLongLong(delta);
    if (value != NULL && step != NULL)
        sum = PyNumber_Add(value, step);
    int status = sum ? dnsw_set(state, attribute, sum) : -1;
    Py_XDECREF(value);
    Py_XDECREF(step);
    Py_XDECREF(sum);
    return status;
}

/*
 * dga_scan(flow, agents, make_state, askers, split_memo, split, cap, prevalence_window_ns, burst_window_ns,
 *          max_agents, max_per_agent, max_domains, minimum) -> (state, now_ns, close_due, failed_any) or None
 * DgaSignals.analyze up to its judge (dga_signals_reference.py is its Python twin): the flow's agent state
 * (found in `agents`, or made by make_state(first_ns) after clearing a full dict), its failed registered
 * domains, answer counts and resolved TTLs, and the domains' askers, updated in place. close_due: the burst
 * window has run its length. failed_any: a name failed and the judge can fire; when the window is not due,
 * the start of the judge runs here (dgas_unresolved: the expiry, then the unknown failures counted) and a
 * count below `minimum` (the smaller of the two detectors' minimums, where the judge returns nothing) is no
 * failure. None when neither is left (most flows).
 */
static PyObject *dga_scan(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 13 || !PyDict_Check(args[1]) || !PyDict_Check(args[3]) || !PyDict_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "dga_scan(flow, agents: dict, make_state, askers: dict, split_memo: dict, split, "
                                         "cap, prevalence_window_ns, burst_window_ns, max_agents, max_per_agent, max_domains, "
                                         "minimum)");
        return NULL;
    }
    PyObject *flow = args[0], *agents = args[1], *make_state = args[2], *askers = args[3];
    PyObject *split_memo = args[4], *split = args[5];
    Py_ssize_t cap = PyLong_AsSsize_t(args[6]), max_agents = PyLong_AsSsize_t(args[9]);
    Py_ssize_t max_per_agent = PyLong_AsSsize_t(args[10]), max_domains = PyLong_AsSsize_t(args[11]);
    double window_ns = PyFloat_AsDouble(args[7]);
    long long burst_window_ns = PyLong_AsLongLong(args[8]), minimum = PyLong_AsLongLong(args[12]);
    if (PyErr_Occurred())
        return NULL;
    if (max_agents < 1 || max_per_agent < 1 || max_domains < 1) {
        PyErr_SetString(PyExc_ValueError, "dga_scan(): bounds must be positive");
        return NULL;
    }
    if (burst_window_ns < 0 || burst_window_ns >= DNSW_TS_LIMIT) {  /* now_ns - burst_window_ns cannot wrap */
        PyErr_SetString(PyExc_ValueError, "dga_scan(): burst window out of range");
        return NULL;
    }
    long long first_ns, last_ns;
    if (dnsw_timestamp(dnsw_get(flow, &dnsw_attr_first_ns), "flow first_ns", &first_ns) < 0
        || dnsw_timestamp(dnsw_get(flow, &dnsw_attr_last_ns), "flow last_ns", &last_ns) < 0)
        return NULL;
    PyObject *dns = dnsw_get(flow, &dnsw_attr_dns), *seq = NULL, *agent_id = NULL, *ttls = NULL, *out = NULL;
    PyObject *last_name = NULL, *last_registered = NULL, *state = NULL, *failed = NULL;
    PyObject *split_name = NULL, *split_pair = NULL;  /* the last name split, and its (registered, label) */
    Py_ssize_t ttl_count = 0;
    dgas_message *messages = NULL;
    Py_ssize_t n = 0;
    if (dns == NULL)
        return NULL;
    DnsListObject *decoded = dnsw_as_list(dns);
    if (decoded != NULL) {
        n = Py_SIZE(decoded);
        messages = dgas_read_entries(decoded, last_ns);
    }
    else if ((seq = PySequence_Fast(dns, "flow.dns must be a sequence")) != NULL) {
        n = PySequence_Fast_GET_SIZE(seq);
        messages = dgas_read_messages(seq, last_ns);
    }
    Py_DECREF(dns);
    if (messages == NULL || (agent_id = dnsw_get(flow, &dnsw_attr_agent_id)) == NULL)
        goto done;
    /* Checked: from here on the state changes. */
    state = PyDict_GetItemWithError(agents, agent_id);
    if (state != NULL)
        Py_INCREF(state);
    else {
        if (PyErr_Occurred())
            goto done;
        if (PyDict_GET_SIZE(agents) >= max_agents)
            PyDict_Clear(agents);
        PyObject *start = PyLong_FromLongLong(first_ns);
        state = start ? PyObject_CallOneArg(make_state, start) : NULL;
        Py_XDECREF(start);
        if (state == NULL || PyDict_SetItem(agents, agent_id, state) < 0)
            goto done;
    }
    if ((failed = dnsw_get(state, &dnsw_attr_failed)) == NULL)
        goto done;
    if (!PyDict_Check(failed)) {
        PyErr_SetString(PyExc_TypeError, "dga_scan(): state.failed must be a dict");
        goto done;
    }
    long long now_ns = first_ns, answers = 0, failures = 0;
    int failed_any = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const dgas_message *m = &messages[i];
        if (m->name == NULL)
            continue;
        if (m->ts > now_ns)
            now_ns = m->ts;
        if (m->is_response) {
            answers++;
            if (!m->nx) {
                ttl_count += m->ttl != NULL;
                continue;
            }
            failures++;
            /* An answer repeats its query's name: the split made for the query serves (a name split is no skipped one). */
            int same = split_name == NULL ? 0 : split_name == m->name ? 1 : PyUnicode_Compare(m->name, split_name) == 0;
            if (PyErr_Occurred())
                goto done;
            if (!same) {
                int skipped = dnsw_skipped_name(m->name);
                if (skipped < 0)
                    goto done;
                if (skipped)
                    continue;
                PyObject *pair = dnsw_split(split_memo, split, m->name);
                if (pair == NULL)
                    goto done;
                Py_XSETREF(split_pair, pair);
                Py_XSETREF(split_name, Py_NewRef(m->name));
            }
            if (dgas_fail(failed, split_pair, m->ts, max_per_agent) < 0)
                goto done;
            failed_any = 1;
            continue;
        }
        if (last_name != NULL) {
            int same = PyUnicode_Compare(m->name, last_name);
            if (same == -1 && PyErr_Occurred())
                goto done;
            if (same == 0)  /* the same name again: the same registered domain, already counted */
                continue;
        }
        Py_INCREF(m->name);
        Py_XSETREF(last_name, m->name);
        int skipped = dnsw_skipped_name(m->name);
        if (skipped < 0)
            goto done;
        if (skipped)
            continue;
        PyObject *pair = dnsw_split(split_memo, split, m->name);
        if (pair == NULL)
            goto done;
        Py_XSETREF(split_pair, pair);
        Py_XSETREF(split_name, Py_NewRef(m->name));
        PyObject *registered = PyTuple_GET_ITEM(pair, 0);
        int same = last_registered ? PyUnicode_Compare(registered, last_registered) : 1;
        if (same == -1 && PyErr_Occurred())
            goto done;
        if (same != 0) {  /* a flow's many names under one domain count once */
            Py_INCREF(registered);
            Py_XSETREF(last_registered, registered);
            if (dgas_count_asker(askers, registered, agent_id, m->ts, cap, window_ns, max_domains) < 0)
                goto done;
        }
    }
    if (dgas_add(state, &dnsw_attr_answers_count, answers) < 0 || dgas_add(state, &dnsw_attr_failures, failures) < 0)
        goto done;
    if (ttl_count) {  /* state.ttls.extend(the resolved answers' TTLs): most flows have one, appended alone */
        PyObject *kept = dnsw_get(state, &dnsw_attr_ttls), *ignored = NULL;
        if (kept != NULL && ttl_count > 1 && (ttls = PyList_New(0)) != NULL) {
            int status = 0;
            for (Py_ssize_t i = 0; i < n && status == 0; i++)
                status = messages[i].ttl != NULL ? PyList_Append(ttls, messages[i].ttl) : 0;
            if (status == 0)
                ignored = PyObject_CallMethodOneArg(kept, dnsw_name_extend, ttls);
        }
        for (Py_ssize_t i = 0; kept != NULL && ttl_count == 1 && i < n; i++) {
            if (messages[i].ttl != NULL)
                ignored = PyObject_CallMethodOneArg(kept, dnsw_name_append, messages[i].ttl);
        }
        Py_XDECREF(kept);
        if (ignored == NULL)
            goto done;
        Py_DECREF(ignored);
    }
    long long window_start;
    if (dnsw_timestamp(dnsw_get(state, &dnsw_attr_window_start), "state window_start", &window_start) < 0)
        goto done;
    int close_due = now_ns - window_start >= burst_window_ns;
    if (failed_any && !close_due) {  /* the window closes before the judge's expiry: then the judge does it all */
        Py_ssize_t unknown = dgas_unresolved(failed, askers, now_ns - burst_window_ns, cap);
        if (unknown < 0)
            goto done;
        failed_any = unknown >= minimum;
    }
    if (!close_due && !failed_any)
        out = Py_NewRef(Py_None);
    else
        out = Py_BuildValue("(OLOO)", state, now_ns, close_due ? Py_True : Py_False, failed_any ? Py_True : Py_False);
done:
    if (messages != NULL)
        dgas_messages_free(messages, n);
    Py_XDECREF(seq);
    Py_XDECREF(agent_id);
    Py_XDECREF(state);
    Py_XDECREF(failed);
    Py_XDECREF(ttls);
    Py_XDECREF(last_name);
    Py_XDECREF(last_registered);
    Py_XDECREF(split_name);
    Py_XDECREF(split_pair);
    return out;
}

/* -- DgaScanner: dga_scan with its state and config bound (one attribute and a one-argument call per flow) ------ */
#define DGAS_ARGS 13
enum { DGAS_FLOW, DGAS_AGENTS, DGAS_MAKE_STATE, DGAS_ASKERS, DGAS_SPLIT_MEMO, DGAS_SPLIT, DGAS_CAP, DGAS_PREVALENCE_NS,
       DGAS_BURST_NS, DGAS_MAX_AGENTS, DGAS_MAX_PER_AGENT, DGAS_MAX_DOMAINS, DGAS_MINIMUM };

typedef struct {
    PyObject_HEAD
    PyObject *args[DGAS_ARGS];  /* dga_scan's arguments; the flow's slot stays NULL, the config's until configure() */
} DgaScannerObject;

static PyObject *DgaScanner_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *keywords[] = {"agents", "make_state", "askers", "split_memo", "split", "max_agents", "max_per_agent",
                               "max_domains", NULL};
    PyObject *bound[8];
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!OO!O!OO!O!O!:DgaScanner", keywords, &PyDict_Type, &bound[0], &bound[1],
                                     &PyDict_Type, &bound[2], &PyDict_Type, &bound[3], &bound[4], &PyLong_Type, &bound[5],
                                     &PyLong_Type, &bound[6], &PyLong_Type, &bound[7]))
        return NULL;
    DgaScannerObject *s = (DgaScannerObject *)type->tp_alloc(type, 0);
    if (s == NULL)
        return NULL;
    for (int i = 0; i < 5; i++)
        s->args[DGAS_AGENTS + i] = Py_NewRef(bound[i]);
    for (int i = 0; i < 3; i++)
        s->args[DGAS_MAX_AGENTS + i] = Py_NewRef(bound[5 + i]);
    return (PyObject *)s;
}

static int DgaScanner_traverse(DgaScannerObject *s, visitproc visit, void *arg)
{
    for (int i = 0; i < DGAS_ARGS; i++)
        Py_VISIT(s->args[i]);
    return 0;
}

static int DgaScanner_clear(DgaScannerObject *s)
{
    for (int i = 0; i < DGAS_ARGS; i++)
        Py_CLEAR(s->args[i]);
    return 0;
}

static void DgaScanner_dealloc(DgaScannerObject *s)
{
    PyObject_GC_UnTrack(s);
    DgaScanner_clear(s);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *DgaScanner_configure(DgaScannerObject *s, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "configure(cap, prevalence_window_ns, burst_window_ns, minimum)");
        return NULL;
    }
    Py_XSETREF(s->args[DGAS_CAP], Py_NewRef(args[0]));
    Py_XSETREF(s->args[DGAS_PREVALENCE_NS], Py_NewRef(args[1]));
    Py_XSETREF(s->args[DGAS_BURST_NS], Py_NewRef(args[2]));
    Py_XSETREF(s->args[DGAS_MINIMUM], Py_NewRef(args[3]));
    Py_RETURN_NONE;
}

static PyObject *DgaScanner_scan(DgaScannerObject *s, PyObject *flow)
{
    if (s->args[DGAS_MINIMUM] == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "scan(): configure() the scanner first");
        return NULL;
    }
    PyObject *args[DGAS_ARGS];
    memcpy(args, s->args, sizeof(args));
    args[DGAS_FLOW] = flow;
    return dga_scan(NULL, args, DGAS_ARGS);
}

static PyMethodDef DgaScanner_methods[] = {
    {"scan", (PyCFunction)DgaScanner_scan, METH_O,
     "scan(flow) -> dga_scan(flow, ...) with the state and config bound: (state, now_ns, close_due, failed_any) or None."},
    {"configure", (PyCFunction)(void (*)(void))DgaScanner_configure, METH_FASTCALL,
     "configure(cap, prevalence_window_ns, burst_window_ns, minimum): the config in force."},
    {NULL},
};

static PyTypeObject DgaScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "appliance.native.dpi.DgaScanner",
    .tp_doc = "dga_scan bound to DgaSignals' state and config (see dns_windows.h).",
    .tp_basicsize = sizeof(DgaScannerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = DgaScanner_new,
    .tp_dealloc = (destructor)DgaScanner_dealloc,
    .tp_traverse = (traverseproc)DgaScanner_traverse,
    .tp_clear = (inquiry)DgaScanner_clear,
    .tp_methods = DgaScanner_methods,
};

static PyObject *dnsw_intern(PyObject **slot, const char *text)
{
    if (*slot == NULL)
        *slot = PyUnicode_InternFromString(text);
    return *slot;
}

/* Called by the module's exec slot: the strings above and the three types. */
static int dnsw_init(PyObject *module)
{
    if (!dnsw_intern(&dnsw_attr_dns.name, "dns") || !dnsw_intern(&dnsw_attr_agent_id.name, "agent_id")
        || !dnsw_intern(&dnsw_attr_flow_id.name, "flow_id") || !dnsw_intern(&dnsw_attr_first_ns.name, "first_ns")
        || !dnsw_intern(&dnsw_attr_last_ns.name, "last_ns") || !dnsw_intern(&dnsw_attr_packets_out.name, "packets_out") || !dnsw_intern(&dnsw_attr_timestamp_ns.name, "timestamp_ns")
        || !dnsw_intern(&dnsw_attr_is_response.name, "is_response") || !dnsw_intern(&dnsw_attr_rcode.name, "rcode")
        || !dnsw_intern(&dnsw_attr_qname.name, "qname") || !dnsw_intern(&dnsw_attr_qtype.name, "qtype")
        || !dnsw_intern(&dnsw_attr_score.name, "score") || !dnsw_intern(&dnsw_attr_answers.name, "answers")
        || !dnsw_intern(&dnsw_attr_ttl.name, "ttl") || !dnsw_intern(&dnsw_attr_failed.name, "failed")
        || !dnsw_intern(&dnsw_attr_answers_count.name, "answers") || !dnsw_intern(&dnsw_attr_failures.name, "failures")
        || !dnsw_intern(&dnsw_attr_ttls.name, "ttls") || !dnsw_intern(&dnsw_name_extend, "extend") || !dnsw_intern(&dnsw_name_append, "append")
        || !dnsw_intern(&dnsw_attr_window_start.name, "window_start") || !dnsw_intern(&dnsw_xn, "xn--"))
        return -1;
    for (int i = 0; i < 6; i++) {
        if (!dnsw_intern(&dnsw_local_suffixes[i], dnsw_local_suffix_texts[i]))
            return -1;
        dnsw_local_suffix_lens[i] = strlen(dnsw_local_suffix_texts[i]);
    }
    if (dnsw_no_args == NULL && (dnsw_no_args = PyTuple_New(0)) == NULL)
        return -1;
    if (dnsw_list_init() < 0)
        return -1;
    dnsw_clog_init();
    PyTypeObject *types[4] = {&DomainWindowType, &AgentDnsType, &DnsScannerType, &DgaScannerType};
    const char *names[4] = {"DomainWindow", "AgentDns", "DnsScanner", "DgaScanner"};
    for (int i = 0; i < 4; i++) {
        if (PyType_Ready(types[i]) < 0 || PyModule_AddObjectRef(module, names[i], (PyObject *)types[i]) < 0)
            return -1;
    }
    return 0;
}
