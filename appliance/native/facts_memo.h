/*
 * FactsMemo: the payload facts of the flows a batch's layers ask for, kept by flow object, and the common way to them
 * in C (appliance/detection/facts.py: FlowFacts is its subclass); included by dpi.c after sample_facts.
 *
 * The DPI layer asks first for a TCP flow's facts (its samples read by sample_facts), the signature layer after it
 * for the same object. In Python each ask cost the bookkeeping around sample_facts (the memo's lookups and store,
 * the counters, the metadata's `complete`): more than sample_facts' own walk on the bench corpus. Here:
 *
 * FactsMemo(reader, finish, tcp, empty, keep, views)
 *     .facts(flow) -> Facts   the facts of `flow`: kept ones as they were; else its samples read (sample_facts with
 *         `reader`) when its transport is `tcp` and it has samples, `empty()` when there is nothing to read. What is rare
 *         goes to finish(flow, found) -> Facts with sample_facts' whole answer: HTTP payloads to parse, a chain in clear,
 *         or, with `views`, the REST view to put on the flow. The rest is counted here: tls_handshakes (a hello read),
 *         tls_incomplete (of those, one cut short or a chain that ran past the samples), tls_unreadable (a handshake
 *         record opened, no hello read); `finish` counts its own flows (the members are writable).
 *     Kept: two generations of `keep` flows (a flow is forgotten `keep` to 2 * `keep` flows later), in dicts keyed by
 *     the flow's address (as id()), each entry holding the flow so that its address is no other's meanwhile. Addresses
 *     are not chosen by any sender, so no keyed hash is needed for them.
 */

typedef struct {
    PyObject_HEAD
    PyObject *reader;   /* sample_facts' reader (checked at init) */
    PyObject *finish;   /* finish(flow, found) -> Facts */
    PyObject *tcp;      /* Transport.TCP */
    PyObject *empty;    /* empty() -> Facts with nothing in it */
    PyObject *kept, *older; /* dict: id(flow) -> (flow, facts) */
    Py_ssize_t keep;
    Py_ssize_t tls_handshakes, tls_incomplete, tls_unreadable;
    int views;
} FactsMemoObject;

/* `complete` twice: dnsw_get keeps the slot of one type per attribute, and it is read on ClientHello and ServerHello. */
static dnsw_attr fm_attr_transport, fm_attr_samples, fm_attr_tls, fm_attr_client_hello, fm_attr_server_hello,
    fm_attr_chain_complete, fm_attr_client_complete, fm_attr_server_complete;

static int FactsMemo_init(FactsMemoObject *self, PyObject *args, PyObject *kwds)
{
    static char *keywords[] = {"reader", "finish", "tcp", "empty", "keep", "views", NULL};
    PyObject *reader, *finish, *tcp, *empty;
    Py_ssize_t keep;
    int views;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOnp:FactsMemo", keywords, &reader, &finish, &tcp, &empty, &keep, &views))
        return -1;
    if (!sample_reader_checked(reader))
        return -1;
    if (keep < 1) {
        PyErr_SetString(PyExc_ValueError, "FactsMemo: keep must be at least 1");
        return -1;
    }
    PyObject *kept = PyDict_New(), *older = PyDict_New();
    if (kept == NULL || older == NULL) {
        Py_XDECREF(kept);
        Py_XDECREF(older);
        return -1;
    }
    Py_XSETREF(self->reader, Py_NewRef(reader));
    Py_XSETREF(self->finish, Py_NewRef(finish));
    Py_XSETREF(self->tcp, Py_NewRef(tcp));
    Py_XSETREF(self->empty, Py_NewRef(empty));
    Py_XSETREF(self->kept, kept);
    Py_XSETREF(self->older, older);
    self->keep = keep;
    self->views = views;
    return 0;
}

/* Whether a hello of `meta` (a TlsMetadata) or its chain was cut short: not meta.complete. -1 on error. */
static int fm_incomplete(PyObject *meta)
{
    PyObject *chain = dnsw_get(meta, &fm_attr_chain_complete);
    if (chain == NULL)
        return -1;
    int whole = PyObject_IsTrue(chain);
    Py_DECREF(chain);
    dnsw_attr *sides[2] = {&fm_attr_client_hello, &fm_attr_server_hello};
    dnsw_attr *completes[2] = {&fm_attr_client_complete, &fm_attr_server_complete};
    for (int i = 0; whole == 1 && i < 2; i++) {
        PyObject *hello = dnsw_get(meta, sides[i]);
        if (hello == NULL)
            return -1;
        if (hello != Py_None) {
            PyObject *complete = dnsw_get(hello, completes[i]);
            whole = complete == NULL ? -1 : PyObject_IsTrue(complete);
            Py_XDECREF(complete);
        }
        Py_DECREF(hello);
    }
    return whole < 0 ? -1 : !whole;
}

/* The facts of a flow not kept: read, counted or finished in Python. A new reference, NULL on error. */
static PyObject *fm_read(FactsMemoObject *self, PyObject *flow)
{
    PyObject *transport = dnsw_get(flow, &fm_attr_transport), *found = NULL;
    if (transport == NULL)
        return NULL;
    int tcp = transport == self->tcp;
    Py_DECREF(transport);
    if (tcp) {
        PyObject *samples = dnsw_get(flow, &fm_attr_samples);
        if (samples == NULL)
            return NULL;
        int some = PyObject_IsTrue(samples);
        found = some < 0 ? NULL : some ? sample_facts_read(samples, self->reader) : Py_NewRef(Py_None);
        Py_DECREF(samples);
        if (found == NULL)
            return NULL;
    }
    if (found == NULL || found == Py_None) {
        Py_XDECREF(found);
        return PyObject_CallNoArgs(self->empty);
    }
    /* (Facts, requests, responses, handshake, chain) */
    PyObject *result = PyTuple_GET_ITEM(found, 0), *meta = dnsw_get(result, &fm_attr_tls);
    if (meta == NULL) {
        Py_DECREF(found);
        return NULL;
    }
    if (PyTuple_GET_ITEM(found, 1) != Py_None || PyTuple_GET_ITEM(found, 2) != Py_None || PyTuple_GET_ITEM(found, 4) != Py_None
        || (self->views && meta != Py_None)) {
        Py_DECREF(meta);
        PyObject *finished = PyObject_CallFunctionObjArgs(self->finish, flow, found, NULL);
        Py_DECREF(found);
        return finished;
    }
    int failed = 0;
    if (meta != Py_None) {
        int incomplete = fm_incomplete(meta);
        failed = incomplete < 0;
        self->tls_handshakes += !failed;
        self->tls_incomplete += incomplete == 1;
    } else if (PyTuple_GET_ITEM(found, 3) == Py_True) {
        self->tls_unreadable += 1;
    }
    Py_DECREF(meta);
    result = failed ? NULL : Py_NewRef(result);
    Py_DECREF(found);
    return result;
}

static PyObject *FactsMemo_facts(FactsMemoObject *self, PyObject *flow)
{
    if (self->kept == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "FactsMemo.__init__ was not called");
        return NULL;
    }
    PyObject *key = PyLong_FromVoidPtr(flow);
    if (key == NULL)
        return NULL;
    PyObject *kept = PyDict_GetItemWithError(self->kept, key);
    if (kept == NULL && !PyErr_Occurred())
        kept = PyDict_GetItemWithError(self->older, key);
    if (kept != NULL || PyErr_Occurred()) {
        Py_DECREF(key);
        return kept == NULL ? NULL : Py_NewRef(PyTuple_GET_ITEM(kept, 1));
    }
    PyObject *result = fm_read(self, flow), *entry = NULL;
    if (result != NULL && PyDict_GET_SIZE(self->kept) >= self->keep) {
        PyObject *fresh = PyDict_New();
        if (fresh == NULL)
            Py_CLEAR(result);
        else {
            Py_SETREF(self->older, self->kept);
            self->kept = fresh;
        }
    }
    if (result != NULL && ((entry = PyTuple_Pack(2, flow, result)) == NULL || PyDict_SetItem(self->kept, key, entry) < 0))
        Py_CLEAR(result);
    Py_XDECREF(entry);
    Py_DECREF(key);
    return result;
}

static int FactsMemo_traverse(FactsMemoObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->reader);
    Py_VISIT(self->finish);
    Py_VISIT(self->tcp);
    Py_VISIT(self->empty);
    Py_VISIT(self->kept);
    Py_VISIT(self->older);
    return 0;
}

static int FactsMemo_clear(FactsMemoObject *self)
{
    Py_CLEAR(self->reader);
    Py_CLEAR(self->finish);
    Py_CLEAR(self->tcp);
    Py_CLEAR(self->empty);
    Py_CLEAR(self->kept);
    Py_CLEAR(self->older);
    return 0;
}

static void FactsMemo_dealloc(FactsMemoObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    FactsMemo_clear(self);
    type->tp_free((PyObject *)self);
}

static PyMethodDef FactsMemo_methods[] = {
    {"facts", (PyCFunction)FactsMemo_facts, METH_O, "facts(flow) -> Facts: the flow's payload facts, read once while kept."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef FactsMemo_members[] = {
    {"tls_handshakes", T_PYSSIZET, offsetof(FactsMemoObject, tls_handshakes), 0, "flows with a ClientHello or ServerHello read"},
    {"tls_incomplete", T_PYSSIZET, offsetof(FactsMemoObject, tls_incomplete), 0,
     "of those, a hello cut by the sample size or split beyond the samples, or a chain that ran past them"},
    {"tls_unreadable", T_PYSSIZET, offsetof(FactsMemoObject, tls_unreadable), 0,
     "a sample opened a handshake record but no hello could be read"},
    {"tls_views", T_INT, offsetof(FactsMemoObject, views), READONLY,
     "whether the REST view of a flow's TLS metadata is put on the flow (the `views` it was made with)"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject FactsMemoType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "appliance.native.dpi.FactsMemo",
    .tp_doc = "The payload facts of the last flows asked for, and the common way to them (facts_memo.h); subclassed by FlowFacts.",
    .tp_basicsize = sizeof(FactsMemoObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)FactsMemo_init,
    .tp_dealloc = (destructor)FactsMemo_dealloc,
    .tp_traverse = (traverseproc)FactsMemo_traverse,
    .tp_clear = (inquiry)FactsMemo_clear,
    .tp_methods = FactsMemo_methods,
    .tp_members = FactsMemo_members,
};

/* Called by the module's exec slot. */
static int fm_init(PyObject *module)
{
    if (!dnsw_intern(&fm_attr_transport.name, "transport") || !dnsw_intern(&fm_attr_samples.name, "samples")
        || !dnsw_intern(&fm_attr_tls.name, "tls") || !dnsw_intern(&fm_attr_client_hello.name, "client_hello")
        || !dnsw_intern(&fm_attr_server_hello.name, "server_hello")
        || !dnsw_intern(&fm_attr_chain_complete.name, "chain_complete")
        || !dnsw_intern(&fm_attr_client_complete.name, "complete") || !dnsw_intern(&fm_attr_server_complete.name, "complete"))
        return -1;
    if (PyType_Ready(&FactsMemoType) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "FactsMemo", (PyObject *)&FactsMemoType);
}
