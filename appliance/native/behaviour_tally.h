/*
 * The per-flow accounting of the behaviour layer (appliance/detection/behaviour.py) in C; included by dpi.c
 * after dns_windows.h (it reads records with dnsw_get).
 *
 * BehaviourLayer.analyze spent ~2.7 us per flow of the bench corpus in Python, nearly all of it in the
 * bookkeeping every flow does: the agent's volume window (total, bytes per destination, the last 20 flow
 * ids) and the connection series and visitors of its destination. Here that bookkeeping is the C method
 * BehaviourCore.analyze; the judges, which compute floating point figures and build evidence, stay in
 * Python and are called only when one can fire (the same tests as the Python before them):
 *     self._roll(flow, state, bucket, config)          a flow opened a later window (CUSUM, Welford)
 *     self._volume_alarm(flow, state, bucket, config)  the window holds min_bytes and the baseline is warm
 *     self._judge_beacon(flow, config, key, series, visitors)  the series holds min_connections
 * each returning a Detection or None. The state stays in the Python objects the judges, `snapshot` and
 * `restore` use: the dicts, the slotted _Volume dataclass (its slots are read and written where they are,
 * as dnsw_get does), the deques. behaviour_reference.py is the Python twin the tests hold this to.
 *
 * Agent ids are attacker-influenced and addresses and ports attacker-chosen: every table is a Python dict
 * (str hashes are SipHash, keyed per process), never a C hash table, with the bounds of the Python
 * (max_keys per dict, emptied when full). Integers keep Python's semantics whatever their size: int64
 * arithmetic is a fast path taken only when every operand fits and no result overflows; anything else
 * (huge byte counts, an int subclass, a zero divisor) goes through the abstract number protocol.
 *
 * BehaviourCore(holder, volume, series, visitors, make_volume, max_keys, tcp, udp)
 *     holder.current is read per flow; when it is another object than last time, self._settings(config)
 *     gives (bucket_ns, warmup_buckets, min_bytes, history, min_connections, ignore_ports).
 *     .analyze(flow) -> list[Detection]     .fleet: FleetPrevalence or None (read per flow)
 *     ._volume, ._series, ._visitors: the dicts above (read-only attributes)
 */
#include <structmember.h>

#define BHV_PORTS 65536

static dnsw_attr bhv_attr_agent_id, bhv_attr_flow_id, bhv_attr_first_ns, bhv_attr_last_ns, bhv_attr_bytes_out,
    bhv_attr_packets_out, bhv_attr_remote_ip, bhv_attr_remote_port, bhv_attr_local_port, bhv_attr_transport,
    bhv_attr_bucket, bhv_attr_total, bhv_attr_by_remote, bhv_attr_flow_ids, bhv_attr_stats, bhv_attr_n;
static PyObject *bhv_s_current, *bhv_s_settings, *bhv_s_roll, *bhv_s_volume_alarm, *bhv_s_judge_beacon,
    *bhv_s_visited, *bhv_s_maxlen;
static PyObject *bhv_deque, *bhv_deque_append, *bhv_zero, *bhv_port_floor;

typedef struct {
    PyObject_HEAD
    PyObject *holder;       /* AnalysisConfigHolder */
    PyObject *config;       /* the config the settings below come from; NULL before the first flow */
    PyObject *volume;       /* dict: agent_id -> _Volume */
    PyObject *series;       /* dict: (agent_id, remote_ip, remote_port) -> deque[(first_ns, bytes_out)] */
    PyObject *visitors;     /* dict: (remote_ip, remote_port) -> dict agent_id -> last seen ns */
    PyObject *fleet;        /* FleetPrevalence, None or NULL */
    PyObject *make_volume;  /* _Volume */
    PyObject *tcp, *udp;    /* Transport.TCP, Transport.UDP */
    Py_ssize_t max_keys;
    /* From the config in force. */
    PyObject *bucket_ns, *warmup_buckets, *min_bytes;
    PyObject *series_kwargs;  /* {"maxlen": history} */
    PyObject *ignore_ports;   /* the config's sequence, for ports that are not plain ints in range */
    Py_ssize_t min_connections;
    unsigned char ignored[BHV_PORTS / 8];
} BehaviourCoreObject;

static PyTypeObject BehaviourCoreType;

/* -- integers with Python's semantics, int64 when it is exact -------------------------------------- */
static int bhv_small(PyObject *o, long long *value)
{
    if (!PyLong_CheckExact(o))
        return 0;
    int overflow;
    *value = PyLong_AsLongLongAndOverflow(o, &overflow);
    return !overflow && !(*value == -1 && PyErr_Occurred());
}

static PyObject *bhv_add(PyObject *a, PyObject *b)
{
    long long x, y, sum;
    if (bhv_small(a, &x) && bhv_small(b, &y) && !__builtin_add_overflow(x, y, &sum))
        return PyLong_FromLongLong(sum);
    PyErr_Clear();
    return PyNumber_Add(a, b);
}

static PyObject *bhv_floor_divide(PyObject *a, PyObject *b)
{
    long long x, y;
    if (bhv_small(a, &x) && bhv_small(b, &y) && y != 0 && !(x == LLONG_MIN && y == -1)) {
        long long q = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0)))
            q--;
        return PyLong_FromLongLong(q);
    }
    PyErr_Clear();
    return PyNumber_FloorDivide(a, b);
}

/* a <op> b as Python answers it: 1, 0, or -1 with an exception set. */
static int bhv_compare(PyObject *a, PyObject *b, int op)
{
    long long x, y;
    if (bhv_small(a, &x) && bhv_small(b, &y)) {
        switch (op) {
        case Py_LT: return x < y;
        case Py_LE: return x <= y;
        case Py_EQ: return x == y;
        case Py_NE: return x != y;
        case Py_GT: return x > y;
        default: return x >= y;
        }
    }
    PyErr_Clear();
    return PyObject_RichCompareBool(a, b, op);
}

/* Writes an attribute where dnsw_get found its slot (obj was just read through the same attr), else setattr. */
static int bhv_set(PyObject *obj, dnsw_attr *attr, PyObject *value)
{
    if (Py_TYPE(obj) == attr->type && attr->offset >= 0) {
        Py_INCREF(value);
        Py_XSETREF(*(PyObject **)((char *)obj + attr->offset), value);
        return 0;
    }
    return PyObject_SetAttr(obj, attr->name, value);
}

/* Appends a judge's answer (a Detection or None; steals the reference). */
static int bhv_keep(PyObject *out, PyObject *found)
{
    if (found == NULL)
        return -1;
    int failed = found != Py_None && PyList_Append(out, found) < 0;
    Py_DECREF(found);
    return failed ? -1 : 0;
}

/* -- the config in force -------------------------------------------------------------------------- */
static int bhv_configure(BehaviourCoreObject *self, PyObject *config)
{
    PyObject *settings = PyObject_CallMethodOneArg((PyObject *)self, bhv_s_settings, config);
    if (settings == NULL)
        return -1;
    PyObject *bucket_ns, *warmup, *min_bytes, *history, *ignore_ports;
    Py_ssize_t min_connections;
    if (!PyArg_ParseTuple(settings, "OOOOnO:BehaviourCore settings", &bucket_ns, &warmup, &min_bytes, &history,
                          &min_connections, &ignore_ports)) {
        Py_DECREF(settings);
        return -1;
    }
    PyObject *kwargs = Py_BuildValue("{OO}", bhv_s_maxlen, history);
    PyObject *ports = kwargs ? PySequence_Fast(ignore_ports, "ignore_ports must be a sequence") : NULL;
    if (ports == NULL) {
        Py_XDECREF(kwargs);
        Py_DECREF(settings);
        return -1;
    }
    memset(self->ignored, 0, sizeof(self->ignored));
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(ports); i++) {
        long long port;
        if (bhv_small(PySequence_Fast_GET_ITEM(ports, i), &port) && port >= 0 && port < BHV_PORTS)
            self->ignored[port >> 3] |= (unsigned char)(1u << (port & 7));
        PyErr_Clear();
    }
    Py_INCREF(bucket_ns);
    Py_INCREF(warmup);
    Py_INCREF(min_bytes);
    Py_INCREF(config);
    Py_XSETREF(self->bucket_ns, bucket_ns);
    Py_XSETREF(self->warmup_buckets, warmup);
    Py_XSETREF(self->min_bytes, min_bytes);
    Py_XSETREF(self->series_kwargs, kwargs);
    Py_XSETREF(self->ignore_ports, ports);
    Py_XSETREF(self->config, config);
    self->min_connections = min_connections;
    Py_DECREF(settings);
    return 0;
}

/* `port in beaconing.ignore_ports`: the bitmap for plain ints in range; equality over the list otherwise. */
static int bhv_ignored(BehaviourCoreObject *self, PyObject *port)
{
    long long value;
    if (bhv_small(port, &value) && value >= 0 && value < BHV_PORTS)
        return (self->ignored[value >> 3] >> (value & 7)) & 1;
    PyErr_Clear();
    return PySequence_Contains(self->ignore_ports, port);
}

/* A dict's entry for key, made (and the dict emptied first when it holds max_keys) when missing; borrowed. */
static PyObject *bhv_entry(PyObject *dict, PyObject *key, Py_ssize_t max_keys, PyObject *(*make)(void *), void *arg)
{
    PyObject *value = PyDict_GetItemWithError(dict, key);
    if (value != NULL || PyErr_Occurred())
        return value;
    if (PyDict_GET_SIZE(dict) >= max_keys)
        PyDict_Clear(dict);
    PyObject *made = make(arg);
    if (made == NULL)
        return NULL;
    int failed = PyDict_SetItem(dict, key, made) < 0;
    Py_DECREF(made);
    return failed ? NULL : made;  /* the dict holds it */
}

static PyObject *bhv_make_volume(void *self)
{
    return PyObject_CallNoArgs(((BehaviourCoreObject *)self)->make_volume);
}

static PyObject *bhv_make_series(void *self)
{
    static PyObject *no_args;
    if (no_args == NULL && (no_args = PyTuple_New(0)) == NULL)
        return NULL;
    return PyObject_Call(bhv_deque, no_args, ((BehaviourCoreObject *)self)->series_kwargs);
}

static PyObject *bhv_make_visitors(void *unused)
{
    return PyDict_New();
}

static int bhv_append(PyObject *deque, PyObject *item)
{
    PyObject *args[2] = {deque, item};
    PyObject *none = PyObject_Vectorcall(bhv_deque_append, args, 2, NULL);
    Py_XDECREF(none);
    return none == NULL ? -1 : 0;
}

/* -- the volume window: _analyze_volume up to its judges --------------------------------------------- */
static int bhv_volume(BehaviourCoreObject *self, PyObject *flow, PyObject *agent, PyObject *bytes_out, PyObject *out)
{
    int failed = -1, c;
    PyObject *bucket = NULL, *current = NULL, *total = NULL, *sum = NULL, *by_remote = NULL, *remote_ip = NULL,
             *flow_id = NULL, *flow_ids = NULL, *stats = NULL, *n = NULL, *last_ns = NULL;
    PyObject *state = bhv_entry(self->volume, agent, self->max_keys, bhv_make_volume, self);
    if (state == NULL)
        return -1;
    Py_INCREF(state);  /* a judge may empty the dict */
    if ((last_ns = dnsw_get(flow, &bhv_attr_last_ns)) == NULL || (bucket = bhv_floor_divide(last_ns, self->bucket_ns)) == NULL
        || (current = dnsw_get(state, &bhv_attr_bucket)) == NULL || (c = bhv_compare(bucket, current, Py_GT)) < 0)
        goto done;
    if (c) {
        if (bhv_keep(out, PyObject_CallMethodObjArgs((PyObject *)self, bhv_s_roll, flow, state, bucket, self->config, NULL)) < 0)
            goto done;
    }
    else if ((c = bhv_compare(bucket, current, Py_LT)) < 0)
        goto done;
    else if (c)
        Py_SETREF(bucket, Py_NewRef(current));  /* a late flow counts in the open window */
    if ((total = dnsw_get(state, &bhv_attr_total)) == NULL || (sum = bhv_add(total, bytes_out)) == NULL
        || bhv_set(state, &bhv_attr_total, sum) < 0)
        goto done;
    if ((by_remote = dnsw_get(state, &bhv_attr_by_remote)) == NULL || (remote_ip = dnsw_get(flow, &bhv_attr_remote_ip)) == NULL)
        goto done;
    if (!PyDict_Check(by_remote)) {
        PyErr_SetString(PyExc_TypeError, "_Volume.by_remote must be a dict");
        goto done;
    }
    PyObject *sent = PyDict_GetItemWithError(by_remote, remote_ip);
    if (sent == NULL && PyErr_Occurred())
        goto done;
    Py_SETREF(sum, bhv_add(sent ? sent : bhv_zero, bytes_out));
    if (sum == NULL || PyDict_SetItem(by_remote, remote_ip, sum) < 0)
        goto done;
    if ((flow_id = dnsw_get(flow, &bhv_attr_flow_id)) == NULL || (flow_ids = dnsw_get(state, &bhv_attr_flow_ids)) == NULL
        || bhv_append(flow_ids, flow_id) < 0)
        goto done;
    if ((stats = dnsw_get(state, &bhv_attr_stats)) == NULL || (n = dnsw_get(stats, &bhv_attr_n)) == NULL
        || (c = bhv_compare(n, self->warmup_buckets, Py_LT)) < 0)
        goto done;
    if (!c) {
        Py_SETREF(total, dnsw_get(state, &bhv_attr_total));
        if (total == NULL || (c = bhv_compare(total, self->min_bytes, Py_LT)) < 0)
            goto done;
        if (!c && bhv_keep(out, PyObject_CallMethodObjArgs((PyObject *)self, bhv_s_volume_alarm, flow, state, bucket,
                                                           self->config, NULL)) < 0)
            goto done;
    }
    failed = 0;
done:
    Py_DECREF(state);
    Py_XDECREF(last_ns);
    Py_XDECREF(bucket);
    Py_XDECREF(current);
    Py_XDECREF(total);
    Py_XDECREF(sum);
    Py_XDECREF(by_remote);
    Py_XDECREF(remote_ip);
    Py_XDECREF(flow_id);
    Py_XDECREF(flow_ids);
    Py_XDECREF(stats);
    Py_XDECREF(n);
    return failed;
}

/* -- the connection series: _analyze_beaconing up to its judge --------------------------------------- */
static int bhv_beaconing(BehaviourCoreObject *self, PyObject *flow, PyObject *agent, PyObject *bytes_out, PyObject *out)
{
    int failed = -1, c;
    PyObject *packets_out = NULL, *remote_port = NULL, *local_port = NULL, *remote_ip = NULL, *key = NULL,
             *first_ns = NULL, *point = NULL, *destination = NULL, *last_ns = NULL, *series, *visitors;
    if ((packets_out = dnsw_get(flow, &bhv_attr_packets_out)) == NULL || (c = bhv_compare(packets_out, bhv_zero, Py_EQ)) < 0)
        goto done;
    if (c || (remote_port = dnsw_get(flow, &bhv_attr_remote_port)) == NULL || (c = bhv_ignored(self, remote_port)) != 0
        || (local_port = dnsw_get(flow, &bhv_attr_local_port)) == NULL || (c = bhv_ignored(self, local_port)) != 0)
        goto skipped;
    if ((c = bhv_compare(local_port, bhv_port_floor, Py_LT)) < 0)
        goto done;
    if (c && (c = bhv_compare(bhv_port_floor, remote_port, Py_LE)) != 0)
        goto skipped;  /* the agent is the server side of this flow (or an error, c < 0) */
    if ((remote_ip = dnsw_get(flow, &bhv_attr_remote_ip)) == NULL
        || (key = PyTuple_Pack(3, agent, remote_ip, remote_port)) == NULL
        || (series = bhv_entry(self->series, key, self->max_keys, bhv_make_series, self)) == NULL)
        goto done;
    if ((first_ns = dnsw_get(flow, &bhv_attr_first_ns)) == NULL || (point = PyTuple_Pack(2, first_ns, bytes_out)) == NULL
        || bhv_append(series, point) < 0)
        goto done;
    Py_INCREF(series);  /* held across the calls below, which may empty the dicts */
    if ((destination = PyTuple_Pack(2, remote_ip, remote_port)) == NULL
        || (visitors = bhv_entry(self->visitors, destination, self->max_keys, bhv_make_visitors, NULL)) == NULL
        || (last_ns = dnsw_get(flow, &bhv_attr_last_ns)) == NULL || PyDict_SetItem(visitors, agent, last_ns) < 0) {
        Py_DECREF(series);
        goto done;
    }
    Py_INCREF(visitors);
    if (self->fleet != NULL && self->fleet != Py_None) {
        PyObject *none = PyObject_CallMethodObjArgs(self->fleet, bhv_s_visited, destination, agent, last_ns, NULL);
        if (none == NULL) {
            Py_DECREF(series);
            Py_DECREF(visitors);
            goto done;
        }
        Py_DECREF(none);
    }
    Py_ssize_t length = PyObject_Length(series);
    if (length >= 0 && length >= self->min_connections)
        failed = bhv_keep(out, PyObject_CallMethodObjArgs((PyObject *)self, bhv_s_judge_beacon, flow, self->config, key,
                                                          series, visitors, NULL));
    else
        failed = length < 0 ? -1 : 0;
    Py_DECREF(series);
    Py_DECREF(visitors);
    goto done;
skipped:
    failed = c < 0 ? -1 : 0;
done:
    Py_XDECREF(packets_out);
    Py_XDECREF(remote_port);
    Py_XDECREF(local_port);
    Py_XDECREF(remote_ip);
    Py_XDECREF(key);
    Py_XDECREF(first_ns);
    Py_XDECREF(point);
    Py_XDECREF(destination);
    Py_XDECREF(last_ns);
    return failed;
}

static PyObject *BehaviourCore_analyze(BehaviourCoreObject *self, PyObject *flow)
{
    if (self->holder == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "BehaviourCore.__init__ was not called");
        return NULL;
    }
    PyObject *config = PyObject_GetAttr(self->holder, bhv_s_current);
    if (config == NULL)
        return NULL;
    int failed = config != self->config && bhv_configure(self, config) < 0;
    Py_DECREF(config);  /* self->config holds it */
    if (failed)
        return NULL;
    PyObject *out = PyList_New(0), *agent = NULL, *bytes_out = NULL, *transport = NULL;
    if (out == NULL || (agent = dnsw_get(flow, &bhv_attr_agent_id)) == NULL
        || (bytes_out = dnsw_get(flow, &bhv_attr_bytes_out)) == NULL || bhv_volume(self, flow, agent, bytes_out, out) < 0
        || (transport = dnsw_get(flow, &bhv_attr_transport)) == NULL
        || ((transport == self->tcp || transport == self->udp) && bhv_beaconing(self, flow, agent, bytes_out, out) < 0))
        Py_CLEAR(out);
    Py_XDECREF(agent);
    Py_XDECREF(bytes_out);
    Py_XDECREF(transport);
    return out;
}

/* -- the type --------------------------------------------------------------------------------------- */
static int BehaviourCore_init(BehaviourCoreObject *self, PyObject *args, PyObject *kwds)
{
    static char *keywords[] = {"holder", "volume", "series", "visitors", "make_volume", "max_keys", "tcp", "udp", NULL};
    PyObject *holder, *volume, *series, *visitors, *make_volume, *tcp, *udp;
    Py_ssize_t max_keys;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!O!O!OnOO:BehaviourCore", keywords, &holder, &PyDict_Type, &volume,
                                     &PyDict_Type, &series, &PyDict_Type, &visitors, &make_volume, &max_keys, &tcp, &udp))
        return -1;
    if (max_keys < 1) {
        PyErr_SetString(PyExc_ValueError, "BehaviourCore: max_keys must be at least 1");
        return -1;
    }
    Py_XSETREF(self->holder, Py_NewRef(holder));
    Py_CLEAR(self->config);
    Py_XSETREF(self->volume, Py_NewRef(volume));
    Py_XSETREF(self->series, Py_NewRef(series));
    Py_XSETREF(self->visitors, Py_NewRef(visitors));
    Py_XSETREF(self->make_volume, Py_NewRef(make_volume));
    Py_XSETREF(self->tcp, Py_NewRef(tcp));
    Py_XSETREF(self->udp, Py_NewRef(udp));
    self->max_keys = max_keys;
    return 0;
}

static int BehaviourCore_traverse(BehaviourCoreObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->holder);
    Py_VISIT(self->config);
    Py_VISIT(self->volume);
    Py_VISIT(self->series);
    Py_VISIT(self->visitors);
    Py_VISIT(self->fleet);
    Py_VISIT(self->make_volume);
    Py_VISIT(self->tcp);
    Py_VISIT(self->udp);
    Py_VISIT(self->bucket_ns);
    Py_VISIT(self->warmup_buckets);
    Py_VISIT(self->min_bytes);
    Py_VISIT(self->series_kwargs);
    Py_VISIT(self->ignore_ports);
    return 0;
}

static int BehaviourCore_clear(BehaviourCoreObject *self)
{
    Py_CLEAR(self->holder);
    Py_CLEAR(self->config);
    Py_CLEAR(self->volume);
    Py_CLEAR(self->series);
    Py_CLEAR(self->visitors);
    Py_CLEAR(self->fleet);
    Py_CLEAR(self->make_volume);
    Py_CLEAR(self->tcp);
    Py_CLEAR(self->udp);
    Py_CLEAR(self->bucket_ns);
    Py_CLEAR(self->warmup_buckets);
    Py_CLEAR(self->min_bytes);
    Py_CLEAR(self->series_kwargs);
    Py_CLEAR(self->ignore_ports);
    return 0;
}

static void BehaviourCore_dealloc(BehaviourCoreObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    BehaviourCore_clear(self);
    type->tp_free((PyObject *)self);
}

static PyMethodDef BehaviourCore_methods[] = {
    {"analyze", (PyCFunction)BehaviourCore_analyze, METH_O, "analyze(flow) -> list[Detection]: the behaviour layer's detections."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef BehaviourCore_members[] = {
    {"fleet", T_OBJECT, offsetof(BehaviourCoreObject, fleet), 0, "Destination prevalence beyond this layer's agents, or None."},
    {"_volume", T_OBJECT, offsetof(BehaviourCoreObject, volume), READONLY, "agent_id -> _Volume"},
    {"_series", T_OBJECT, offsetof(BehaviourCoreObject, series), READONLY, "(agent_id, remote_ip, remote_port) -> deque"},
    {"_visitors", T_OBJECT, offsetof(BehaviourCoreObject, visitors), READONLY, "(remote_ip, remote_port) -> {agent_id: ns}"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject BehaviourCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "appliance.native.dpi.BehaviourCore",
    .tp_doc = "The behaviour layer's per-flow accounting (behaviour_tally.h); subclassed by BehaviourLayer.",
    .tp_basicsize = sizeof(BehaviourCoreObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)BehaviourCore_init,
    .tp_dealloc = (destructor)BehaviourCore_dealloc,
    .tp_traverse = (traverseproc)BehaviourCore_traverse,
    .tp_clear = (inquiry)BehaviourCore_clear,
    .tp_methods = BehaviourCore_methods,
    .tp_members = BehaviourCore_members,
};

/* Called by the module's exec slot. */
static int bhv_init(PyObject *module)
{
    struct { dnsw_attr *attr; const char *name; } attrs[] = {
        {&bhv_attr_agent_id, "agent_id"}, {&bhv_attr_flow_id, "flow_id"}, {&bhv_attr_first_ns, "first_ns"},
        {&bhv_attr_last_ns, "last_ns"}, {&bhv_attr_bytes_out, "bytes_out"}, {&bhv_attr_packets_out, "packets_out"},
        {&bhv_attr_remote_ip, "remote_ip"}, {&bhv_attr_remote_port, "remote_port"}, {&bhv_attr_local_port, "local_port"},
        {&bhv_attr_transport, "transport"}, {&bhv_attr_bucket, "bucket"}, {&bhv_attr_total, "total"},
        {&bhv_attr_by_remote, "by_remote"}, {&bhv_attr_flow_ids, "flow_ids"}, {&bhv_attr_stats, "stats"}, {&bhv_attr_n, "n"},
    };
    for (size_t i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++) {
        if (!dnsw_intern(&attrs[i].attr->name, attrs[i].name))
            return -1;
    }
    if (!dnsw_intern(&bhv_s_current, "current") || !dnsw_intern(&bhv_s_settings, "_settings") || !dnsw_intern(&bhv_s_roll, "_roll")
        || !dnsw_intern(&bhv_s_volume_alarm, "_volume_alarm") || !dnsw_intern(&bhv_s_judge_beacon, "_judge_beacon")
        || !dnsw_intern(&bhv_s_visited, "visited") || !dnsw_intern(&bhv_s_maxlen, "maxlen"))
        return -1;
    if (bhv_deque == NULL) {
        PyObject *collections = PyImport_ImportModule("collections");
        bhv_deque = collections ? PyObject_GetAttrString(collections, "deque") : NULL;
        Py_XDECREF(collections);
        if (bhv_deque == NULL || (bhv_deque_append = PyObject_GetAttrString(bhv_deque, "append")) == NULL)
            return -1;
    }
    if ((bhv_zero == NULL && (bhv_zero = PyLong_FromLong(0)) == NULL)
        || (bhv_port_floor == NULL && (bhv_port_floor = PyLong_FromLong(1024)) == NULL))
        return -1;
    if (PyType_Ready(&BehaviourCoreType) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "BehaviourCore", (PyObject *)&BehaviourCoreType);
}
