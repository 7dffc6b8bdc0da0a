/*
 * The per-flow accounting of the behaviour layer (appliance/detection/behaviour.py) in C; included by dpi.c
 * after dns_windows.h (it reads records with dnsw_get).
 *
 * BehaviourLayer.analyze spent ~2.7 us per flow of the bench corpus in Python, nearly all of it in the
 * bookkeeping every flow does: the agent's volume window (total, bytes per destination, the last 20 flow
 * ids) and the connection series and visitors of its destination. Here that bookkeeping is the C method
 * BehaviourCore.analyze; the judges, which compute floating point figures and build evidence, stay in
 * Python and are called only when one can fire (the same tests as the Python before them):
 *     self._cusum(flow, state, value, config)        a closed window raises the CUSUM alarm, or holds figures
 *                                                    other than the plain floats the C reads (the warm-up, the
 *                                                    zero sum and a run's bookkeeping are done here: bhv_cusum)
 *     self._roll(flow, state, bucket, config)          closing windows when the state holds other than the plain
 *                                                    ints and floats the C reads (never from BehaviourLayer)
 *     self._volume_alarm(flow, state, bucket, config)  the window holds min_bytes and the baseline is warm
 *     self._judge_beacon(flow, config, key, series, visitors, prevalence, figures)  the series holds
 *         min_connections; with a fleet, always (figures None: the fleet is asked first); without, when the
 *         destination is not common, self._throttle.would_allow(("beacon", agent, address, port), ...) and the
 *         series' figures (bhv_figures) do not already rule a beacon out (neither has side effects: asked
 *         before the judge's own tests, they change nothing but what is computed)
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
 *     gives (bucket_ns, warmup_buckets, min_bytes, history, min_connections, ignore_ports,
 *     common_destination_agents, prevalence_window_ns, min_interval_s, max_cv, cusum, ema_alpha, cusum_k,
 *     report_interval_s, cusum_h, cusum_min_bytes).
 *     .analyze(flow) -> list[Detection]     .fleet: FleetPrevalence or None (read per flow)
 *     ._volume, ._series, ._visitors: the dicts above (read-only attributes)
 */
#include <float.h>
#include <structmember.h>

#define BHV_PORTS 65536
#define BHV_TIME_LIMIT ((long long)1 << 62)
#define BHV_EXACT ((long long)1 << 53)  /* ints below convert to double exactly */

static dnsw_attr bhv_attr_current, bhv_attr_agent_id, bhv_attr_flow_id, bhv_attr_first_ns, bhv_attr_last_ns, bhv_attr_bytes_out,
    bhv_attr_packets_out, bhv_attr_remote_ip, bhv_attr_remote_port, bhv_attr_local_port, bhv_attr_transport,
    bhv_attr_bucket, bhv_attr_total, bhv_attr_by_remote, bhv_attr_flow_ids, bhv_attr_stats, bhv_attr_n, bhv_attr_mean,
    bhv_attr_m2, bhv_attr_ema, bhv_attr_reference, bhv_attr_cusum, bhv_attr_run_buckets, bhv_attr_run_max_z,
    bhv_attr_run_by_remote, bhv_attr_run_first_ns;
static PyObject *bhv_s_throttle, *bhv_s_would_allow, *bhv_s_beacon, *bhv_s_settings, *bhv_s_roll, *bhv_s_cusum, *bhv_s_volume_alarm, *bhv_s_judge_beacon,
    *bhv_s_visited;
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
    PyObject *key, *destination;  /* the last lookup tuples (bhv_lookup_key), or NULL */
    PyObject *tcp, *udp;    /* Transport.TCP, Transport.UDP */
    Py_ssize_t max_keys;
    /* From the config in force. */
    PyObject *bucket_ns, *warmup_buckets, *min_bytes;
    PyObject *series_args;  /* ((), history): deque((), history) is deque(maxlen=history), without keywords to parse */
    PyObject *ignore_ports;   /* the config's sequence, for ports that are not plain ints in range */
    PyObject *prevalence_window_ns;
    PyObject *report_interval_s;  /* detectors.report_interval_s */
    Py_ssize_t min_connections, common_destination_agents;
    double min_interval_s, max_cv;
    int cusum;                 /* volume.cusum */
    long long warmup;          /* volume.warmup_buckets */
    double ema_alpha, cusum_k, cusum_h, cusum_min_bytes;
    unsigned char ignored[BHV_PORTS / 8];
} BehaviourCoreObject;

static PyTypeObject BehaviourCoreType;

/* -- integers with Python's semantics, int64 when it is exact -------------------------------------- */
static int bhv_small(PyObject *o, long long *value)
{
    if (!PyLong_CheckExact(o))
        return 0;
#if PY_VERSION_HEX >= 0x030C0000
    if (PyUnstable_Long_IsCompact((PyLongObject *)o)) {
        *value = (long long)PyUnstable_Long_CompactValue((PyLongObject *)o);
        return 1;
    }
#else
    /* Ints of up to two 30-bit digits (ports, addresses, byte counts) without the call. */
    Py_ssize_t size = Py_SIZE(o);
    if (size >= -2 && size <= 2) {
        const digit *d = ((PyLongObject *)o)->ob_digit;
        long long magnitude = size == 0 ? 0 : size == 1 || size == -1 ? (long long)d[0]
                                                                     : (long long)d[0] | (long long)d[1] << PyLong_SHIFT;
        *value = size < 0 ? -magnitude : magnitude;
        return 1;
    }
#endif
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
    PyObject *bucket_ns, *warmup, *min_bytes, *history, *ignore_ports, *window_ns;
    Py_ssize_t min_connections, common;
    PyObject *report_interval;
    double min_interval, max_cv, ema_alpha, cusum_k, cusum_h, cusum_min_bytes;
    int cusum;
    if (!PyArg_ParseTuple(settings, "OOOOnOnOddpddOdd:BehaviourCore settings", &bucket_ns, &warmup, &min_bytes, &history,
                          &min_connections, &ignore_ports, &common, &window_ns, &min_interval, &max_cv, &cusum,
                          &ema_alpha, &cusum_k, &report_interval, &cusum_h, &cusum_min_bytes)) {
        Py_DECREF(settings);
        return -1;
    }
    long long warmup_count = PyLong_AsLongLong(warmup);
    if (warmup_count == -1 && PyErr_Occurred()) {
        Py_DECREF(settings);
        return -1;
    }
    PyObject *series_args = Py_BuildValue("(()O)", history);
    PyObject *ports = series_args ? PySequence_Fast(ignore_ports, "ignore_ports must be a sequence") : NULL;
    if (ports == NULL) {
        Py_XDECREF(series_args);
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
    Py_XSETREF(self->prevalence_window_ns, Py_NewRef(window_ns));
    Py_XSETREF(self->report_interval_s, Py_NewRef(report_interval));
    self->common_destination_agents = common;
    self->min_interval_s = min_interval;
    self->max_cv = max_cv;
    self->cusum = cusum;
    self->warmup = warmup_count;
    self->ema_alpha = ema_alpha;
    self->cusum_k = cusum_k;
    self->cusum_h = cusum_h;
    self->cusum_min_bytes = cusum_min_bytes;  /* float(volume.cusum_min_bytes) */
    Py_XSETREF(self->bucket_ns, bucket_ns);
    Py_XSETREF(self->warmup_buckets, warmup);
    Py_XSETREF(self->min_bytes, min_bytes);
    Py_XSETREF(self->series_args, series_args);
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
    return PyObject_Call(bhv_deque, ((BehaviourCoreObject *)self)->series_args, NULL);
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

/* -- closing windows: BehaviourLayer._roll, and _cusum short of its alarm ------------------------------- */
typedef struct {
    long long n;
    double mean, m2, ema;
} bhv_welford;

/* A Welford's fields into w: 1, or 0 when they are not a plain int and floats (the Python then), -1 on error. */
static int bhv_welford_load(PyObject *welford, bhv_welford *w)
{
    PyObject *n = dnsw_get(welford, &bhv_attr_n), *mean = NULL, *m2 = NULL, *ema = NULL;
    int plain = -1;
    if (n != NULL && (mean = dnsw_get(welford, &bhv_attr_mean)) != NULL && (m2 = dnsw_get(welford, &bhv_attr_m2)) != NULL
        && (ema = dnsw_get(welford, &bhv_attr_ema)) != NULL) {
        plain = bhv_small(n, &w->n) && w->n >= 0 && w->n < BHV_EXACT && PyFloat_CheckExact(mean) && PyFloat_CheckExact(m2)
                && PyFloat_CheckExact(ema);
        PyErr_Clear();
        if (plain) {
            w->mean = PyFloat_AS_DOUBLE(mean);
            w->m2 = PyFloat_AS_DOUBLE(m2);
            w->ema = PyFloat_AS_DOUBLE(ema);
        }
    }
    Py_XDECREF(n);
    Py_XDECREF(mean);
    Py_XDECREF(m2);
    Py_XDECREF(ema);
    return plain;
}

static int bhv_set_number(PyObject *obj, dnsw_attr *attr, PyObject *value)  /* steals value */
{
    int failed = value == NULL || bhv_set(obj, attr, value) < 0;
    Py_XDECREF(value);
    return failed ? -1 : 0;
}

static int bhv_welford_store(PyObject *welford, const bhv_welford *w)
{
    return bhv_set_number(welford, &bhv_attr_n, PyLong_FromLongLong(w->n)) < 0
           || bhv_set_number(welford, &bhv_attr_mean, PyFloat_FromDouble(w->mean)) < 0
           || bhv_set_number(welford, &bhv_attr_m2, PyFloat_FromDouble(w->m2)) < 0
           || bhv_set_number(welford, &bhv_attr_ema, PyFloat_FromDouble(w->ema)) < 0 ? -1 : 0;
}

/* Welford.add, operation for operation (its int n converted to double as Python does: exact below 2**53). */
static void bhv_welford_add(bhv_welford *w, double value, double alpha)
{
    w->n += 1;
    double delta = value - w->mean;
    w->mean += delta / (double)w->n;
    w->m2 += delta * (value - w->mean);
    w->ema = w->n == 1 ? value : alpha * value + (1 - alpha) * w->ema;
}

/* What closing windows changes in a _Volume, held in C between the calls to the Python. */
typedef struct {
    PyObject *stats_obj, *reference_obj;  /* held */
    bhv_welford stats, reference;
    double cusum;
} bhv_windows;

static void bhv_windows_release(bhv_windows *ws)
{
    Py_CLEAR(ws->stats_obj);
    Py_CLEAR(ws->reference_obj);
}

/* 1 loaded, 0 not plain ints and floats (nothing held), -1 error (nothing held). */
static int bhv_windows_load(PyObject *state, bhv_windows *ws)
{
    PyObject *cusum = NULL;
    int plain = -1;
    ws->stats_obj = dnsw_get(state, &bhv_attr_stats);
    ws->reference_obj = ws->stats_obj ? dnsw_get(state, &bhv_attr_reference) : NULL;
    if (ws->reference_obj != NULL && (cusum = dnsw_get(state, &bhv_attr_cusum)) != NULL
        && (plain = bhv_welford_load(ws->stats_obj, &ws->stats)) == 1
        && (plain = bhv_welford_load(ws->reference_obj, &ws->reference)) == 1) {
        plain = PyFloat_CheckExact(cusum) && ws->stats_obj != ws->reference_obj;
        ws->cusum = plain ? PyFloat_AS_DOUBLE(cusum) : 0.0;
    }
    Py_XDECREF(cusum);
    if (plain != 1)
        bhv_windows_release(ws);
    return plain;
}

static int bhv_windows_store(PyObject *state, const bhv_windows *ws)
{
    return bhv_welford_store(ws->stats_obj, &ws->stats) < 0 || bhv_welford_store(ws->reference_obj, &ws->reference) < 0
           || bhv_set_number(state, &bhv_attr_cusum, PyFloat_FromDouble(ws->cusum)) < 0 ? -1 : 0;
}

static int bhv_clear(PyObject *table)
{
    if (PyDict_CheckExact(table)) {
        PyDict_Clear(table);
        return 0;
    }
    PyObject *none = PyObject_CallMethod(table, "clear", NULL);
    Py_XDECREF(none);
    return none == NULL ? -1 : 0;
}

/* _cusum's bookkeeping of a window that leaves the sum at `sum` > 0, when it raises no alarm: 1 done, 0 the
 * Python's (the alarm, which builds the detection, or fields that are not a plain int, float and dicts; nothing
 * changed then), -1 on an error. mean and std are the reference's, as _cusum computed them. */
static int bhv_run(BehaviourCoreObject *self, PyObject *state, bhv_windows *ws, double value, double sum, double std)
{
    PyObject *run_by_remote = dnsw_get(state, &bhv_attr_run_by_remote), *by_remote = NULL, *run_buckets = NULL,
             *run_max_z = NULL, *first = NULL, *bucket = NULL;
    long long runs;
    int done = -1;
    if (run_by_remote == NULL || (by_remote = dnsw_get(state, &bhv_attr_by_remote)) == NULL
        || (run_buckets = dnsw_get(state, &bhv_attr_run_buckets)) == NULL || (run_max_z = dnsw_get(state, &bhv_attr_run_max_z)) == NULL)
        goto out;
    done = 0;
    if (!PyDict_CheckExact(run_by_remote) || !PyDict_CheckExact(by_remote) || !PyFloat_CheckExact(run_max_z)
        || !bhv_small(run_buckets, &runs) || runs < 0 || runs >= LLONG_MAX) {
        PyErr_Clear();
        goto out;
    }
    double threshold = self->cusum_h * std;
    threshold = self->cusum_min_bytes > threshold ? self->cusum_min_bytes : threshold;
    int accumulate = value != 0.0 && PyDict_GET_SIZE(run_by_remote) < 10000;
    if (!(sum < threshold) && (PyDict_GET_SIZE(run_by_remote) || (accumulate && PyDict_GET_SIZE(by_remote))))
        goto out;  /* the alarm */
    done = -1;
    if (runs == 0) {
        if ((bucket = dnsw_get(state, &bhv_attr_bucket)) == NULL || (first = PyNumber_Multiply(bucket, self->bucket_ns)) == NULL
            || bhv_set(state, &bhv_attr_run_first_ns, first) < 0)
            goto out;
    }
    double z = (value - ws->reference.mean) / std, max_z = PyFloat_AS_DOUBLE(run_max_z);
    if (bhv_set_number(state, &bhv_attr_run_buckets, PyLong_FromLongLong(runs + 1)) < 0
        || (z > max_z && bhv_set_number(state, &bhv_attr_run_max_z, PyFloat_FromDouble(z)) < 0))
        goto out;
    if (accumulate) {
        PyObject *remote, *sent;
        Py_ssize_t at = 0;
        while (PyDict_Next(by_remote, &at, &remote, &sent)) {
            PyObject *before = PyDict_GetItemWithError(run_by_remote, remote), *added;
            if ((before == NULL && PyErr_Occurred()) || (added = bhv_add(before ? before : bhv_zero, sent)) == NULL)
                goto out;
            int failed = PyDict_SetItem(run_by_remote, remote, added) < 0;
            Py_DECREF(added);
            if (failed)
                goto out;
        }
    }
    ws->cusum = sum;
    done = 1;
out:
    Py_XDECREF(run_by_remote);
    Py_XDECREF(by_remote);
    Py_XDECREF(run_buckets);
    Py_XDECREF(run_max_z);
    Py_XDECREF(first);
    Py_XDECREF(bucket);
    return done;
}

/* _cusum(flow, state, value, config) for one closed window: here while the reference warms up, when the window
 * leaves the sum at zero (the arithmetic of _cusum's first lines, in its order) or adds to a run without raising
 * the alarm (bhv_run); otherwise (the alarm, or figures the C does not read) the figures are
 * stored and the Python judges the window (computing the same sum again from them), and they are loaded
 * again (*loaded: 1, or 0 when the Python left other than plain figures). A Detection, None, or NULL. */
static PyObject *bhv_cusum(BehaviourCoreObject *self, PyObject *flow, PyObject *state, bhv_windows *ws, double value,
                           int *loaded)
{
    if (!self->cusum)
        Py_RETURN_NONE;
    bhv_welford *reference = &ws->reference;
    if (reference->n < self->warmup) {
        bhv_welford_add(reference, value, self->ema_alpha);
        Py_RETURN_NONE;
    }
    double variance = reference->n > 1 ? reference->m2 / (double)(reference->n - 1) : 0.0;
    if (variance >= 0) {  /* else math.sqrt raises: the Python's to raise */
        double std = reference->n > 1 ? sqrt(variance) : 0.0;
        std = 1.0 > std ? 1.0 : std;  /* max(reference.std, 1.0) */
        double sum = ws->cusum + value - reference->mean - self->cusum_k * std;
        if (!(sum > 0.0)) {  /* max(0.0, sum) == 0.0 */
            PyObject *run_by_remote = dnsw_get(state, &bhv_attr_run_by_remote);
            ws->cusum = 0.0;
            bhv_welford_add(reference, value, self->ema_alpha);
            int failed = run_by_remote == NULL || bhv_set(state, &bhv_attr_run_buckets, bhv_zero) < 0
                         || bhv_set_number(state, &bhv_attr_run_max_z, PyFloat_FromDouble(0.0)) < 0
                         || bhv_clear(run_by_remote) < 0;
            Py_XDECREF(run_by_remote);
            if (failed)
                return NULL;
            Py_RETURN_NONE;
        }
        int run = bhv_run(self, state, ws, value, sum, std);
        if (run < 0)
            return NULL;
        if (run)
            Py_RETURN_NONE;
    }
    PyObject *number = PyFloat_FromDouble(value), *found = NULL;
    if (number != NULL && bhv_windows_store(state, ws) >= 0) {
        bhv_windows_release(ws);
        found = PyObject_CallMethodObjArgs((PyObject *)self, bhv_s_cusum, flow, state, number, self->config, NULL);
        if (found != NULL && (*loaded = bhv_windows_load(state, ws)) < 0)
            Py_CLEAR(found);
        if (found == NULL)
            *loaded = 0;
    }
    Py_XDECREF(number);
    return found;
}

/* BehaviourLayer._roll: a flow opened window `bucket` after `current`: the closed one (and up to 60 quiet ones
 * after it) join the baselines, and the window starts empty. A Detection, None, or NULL on an error. */
static PyObject *bhv_roll(BehaviourCoreObject *self, PyObject *flow, PyObject *state, PyObject *current, PyObject *bucket)
{
    long long opened, closed;
    PyObject *total = dnsw_get(state, &bhv_attr_total), *found = NULL, *by_remote = NULL;
    bhv_windows ws = {NULL, NULL};
    int loaded = 0;
    double value = 0.0;
    if (total == NULL)
        return NULL;
    if (bhv_small(bucket, &opened) && bhv_small(current, &closed) && PyLong_CheckExact(total)
        && opened < BHV_TIME_LIMIT && closed > -BHV_TIME_LIMIT) {
        value = PyLong_AsDouble(total);  /* float(state.total): correctly rounded, OverflowError past 1e308 */
        loaded = value == -1.0 && PyErr_Occurred() ? 0 : bhv_windows_load(state, &ws);
    }
    if (loaded >= 0)
        PyErr_Clear();
    Py_DECREF(total);
    if (loaded < 0)
        return NULL;
    if (!loaded)  /* the Python's arithmetic, and its errors */
        return PyObject_CallMethodObjArgs((PyObject *)self, bhv_s_roll, flow, state, bucket, self->config, NULL);
    if (closed >= 0) {
        long long quiet = opened - closed - 1 < 60 ? opened - closed - 1 : 60;
        for (long long i = -1; i < quiet; i++) {
            double window = i < 0 ? value : 0.0;
            PyObject *judged = bhv_cusum(self, flow, state, &ws, window, &loaded);
            if (judged == NULL || !loaded) {
                if (judged != NULL)
                    PyErr_SetString(PyExc_RuntimeError, "BehaviourLayer._cusum left figures the C does not read");
                Py_XDECREF(judged);
                Py_XDECREF(found);
                bhv_windows_release(&ws);
                return NULL;
            }
            if (found == NULL || found == Py_None)
                Py_XSETREF(found, judged);  /* found = found or quiet: the first detection */
            else
                Py_DECREF(judged);
            bhv_welford_add(&ws.stats, window, self->ema_alpha);
        }
    }
    int failed = bhv_windows_store(state, &ws) < 0 || bhv_set(state, &bhv_attr_bucket, bucket) < 0
                 || bhv_set(state, &bhv_attr_total, bhv_zero) < 0 || (by_remote = dnsw_get(state, &bhv_attr_by_remote)) == NULL
                 || bhv_clear(by_remote) < 0;
    bhv_windows_release(&ws);
    Py_XDECREF(by_remote);
    if (failed) {
        Py_XDECREF(found);
        return NULL;
    }
    return found ? found : Py_NewRef(Py_None);
}

/* -- the volume window: _analyze_volume up to its judges --------------------------------------------- */
static int bhv_volume(BehaviourCoreObject *self, PyObject *flow, PyObject *agent, PyObject *bytes_out, PyObject *last_ns,
                      PyObject *remote_ip, PyObject *out)
{
    int failed = -1, c;
    long long time, width, open;
    PyObject *bucket = NULL, *current = NULL, *total = NULL, *sum = NULL, *by_remote = NULL, *flow_id = NULL,
             *flow_ids = NULL, *stats = NULL, *n = NULL;
    PyObject *state = bhv_entry(self->volume, agent, self->max_keys, bhv_make_volume, self);
    if (state == NULL)
        return -1;
    Py_INCREF(state);  /* a judge may empty the dict */
    if ((current = dnsw_get(state, &bhv_attr_bucket)) == NULL)
        goto done;
    if (bhv_small(last_ns, &time) && bhv_small(self->bucket_ns, &width) && width > 0 && bhv_small(current, &open)) {
        /* The usual case without a new int: the flow falls in the open window (or a closed one: late). */
        long long q = time / width - (time % width != 0 && time < 0);
        if (q <= open)
            bucket = Py_NewRef(current);
        else if ((bucket = PyLong_FromLongLong(q)) == NULL || bhv_keep(out, bhv_roll(self, flow, state, current, bucket)) < 0)
            goto done;
    }
    else {
        PyErr_Clear();
        if ((bucket = bhv_floor_divide(last_ns, self->bucket_ns)) == NULL || (c = bhv_compare(bucket, current, Py_GT)) < 0)
            goto done;
        if (c) {
            if (bhv_keep(out, bhv_roll(self, flow, state, current, bucket)) < 0)
                goto done;
        }
        else if ((c = bhv_compare(bucket, current, Py_LT)) < 0)
            goto done;
        else if (c)
            Py_SETREF(bucket, Py_NewRef(current));  /* a late flow counts in the open window */
    }
    if ((total = dnsw_get(state, &bhv_attr_total)) == NULL)
        goto done;
    Py_SETREF(total, bhv_add(total, bytes_out));
    if (total == NULL || bhv_set(state, &bhv_attr_total, total) < 0 || (by_remote = dnsw_get(state, &bhv_attr_by_remote)) == NULL)
        goto done;
    if (!PyDict_Check(by_remote)) {
        PyErr_SetString(PyExc_TypeError, "_Volume.by_remote must be a dict");
        goto done;
    }
    PyObject *sent = PyDict_GetItemWithError(by_remote, remote_ip);
    if (sent == NULL && PyErr_Occurred())
        goto done;
    if ((sum = bhv_add(sent ? sent : bhv_zero, bytes_out)) == NULL || PyDict_SetItem(by_remote, remote_ip, sum) < 0)
        goto done;
    if ((flow_id = dnsw_get(flow, &bhv_attr_flow_id)) == NULL || (flow_ids = dnsw_get(state, &bhv_attr_flow_ids)) == NULL
        || bhv_append(flow_ids, flow_id) < 0)
        goto done;
    /* `stats.n < warmup_buckets or total < min_bytes`, the second asked first (neither has side effects): most
       windows never hold min_bytes, and the baseline's count is another object to read. */
    if ((c = bhv_compare(total, self->min_bytes, Py_LT)) < 0)
        goto done;
    if (!c) {
        if ((stats = dnsw_get(state, &bhv_attr_stats)) == NULL || (n = dnsw_get(stats, &bhv_attr_n)) == NULL
            || (c = bhv_compare(n, self->warmup_buckets, Py_LT)) < 0)
            goto done;
        if (!c && bhv_keep(out, PyObject_CallMethodObjArgs((PyObject *)self, bhv_s_volume_alarm, flow, state, bucket,
                                                           self->config, NULL)) < 0)
            goto done;
    }
    failed = 0;
done:
    Py_DECREF(state);
    Py_XDECREF(bucket);
    Py_XDECREF(current);
    Py_XDECREF(total);
    Py_XDECREF(sum);
    Py_XDECREF(by_remote);
    Py_XDECREF(flow_id);
    Py_XDECREF(flow_ids);
    Py_XDECREF(stats);
    Py_XDECREF(n);
    return failed;
}

/* BehaviourLayer._prevalence: forgets the visitors last seen before the window, counts the others. */
static Py_ssize_t bhv_prevalence(BehaviourCoreObject *self, PyObject *visitors, PyObject *now_ns)
{
    PyObject *horizon = PyNumber_Subtract(now_ns, self->prevalence_window_ns), *gone = PyList_New(0);
    PyObject *agent, *seen;
    Py_ssize_t at = 0, failed = horizon == NULL || gone == NULL;
    while (!failed && PyDict_Next(visitors, &at, &agent, &seen)) {
        int before = bhv_compare(seen, horizon, Py_LT);
        failed = before < 0 || (before && PyList_Append(gone, agent) < 0);
    }
    for (Py_ssize_t i = 0; !failed && i < PyList_GET_SIZE(gone); i++)
        failed = PyDict_DelItem(visitors, PyList_GET_ITEM(gone, i)) < 0;
    Py_XDECREF(horizon);
    Py_XDECREF(gone);
    return failed ? -1 : PyDict_GET_SIZE(visitors);
}

/* -- beacon_scores' figures ---------------------------------------------------------------------------
 * The same operations in the same order as behaviour.beacon_scores and the statistics functions it calls
 * (median, fmean = fsum / n, quantiles(n=4) 'exclusive'), on doubles: every step is one IEEE operation
 * (the build turns floating point contraction off), sums are math.fsum's correctly rounded one, squares
 * are pow(|d|, 2.0) as float.__pow__ computes them, and round() half to even as float.__round__. What
 * Python would compute differently is declined (None: the caller runs the Python): a series item that is
 * not a pair of ints, times beyond +-2**62 or an interval of 2**53 ns or more (int / int is then not one
 * division of doubles), sizes beyond int64, a quotient or square that is not a normal finite double. The
 * rounding to 2 or 3 digits stays in Python (float.__round__ with digits is decimal, not one IEEE step). */

/* Ascending sort of n values with a buffer of n more: insertion sort of runs of 16, then bottom-up merges
 * (O(n log n) whatever the order an attacker gives the times; no comparison callback as qsort has). */
#define BHV_DEFINE_SORT(name, type)                                                                             \
    static void name(type *values, type *buffer, Py_ssize_t n)                                                  \
    {                                                                                                           \
        for (Py_ssize_t start = 0; start < n; start += 16) {                                                    \
            Py_ssize_t end = start + 16 < n ? start + 16 : n;                                                   \
            for (Py_ssize_t i = start + 1; i < end; i++) {                                                      \
                type v = values[i];                                                                             \
                Py_ssize_t j = i;                                                                               \
                for (; j > start && values[j - 1] > v; j--)                                                     \
                    values[j] = values[j - 1];                                                                  \
                values[j] = v;                                                                                  \
            }                                                                                                   \
        }                                                                                                       \
        type *from = values, *to = buffer;                                                                      \
        for (Py_ssize_t width = 16; width < n; width *= 2) {                                                    \
            for (Py_ssize_t lo = 0; lo < n; lo += 2 * width) {                                                  \
                Py_ssize_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n; \
                Py_ssize_t i = lo, j = mid, k = lo;                                                             \
                while (i < mid && j < hi)                                                                       \
                    to[k++] = from[j] < from[i] ? from[j++] : from[i++];                                        \
                while (i < mid)                                                                                 \
                    to[k++] = from[i++];                                                                        \
                while (j < hi)                                                                                  \
                    to[k++] = from[j++];                                                                        \
            }                                                                                                   \
            type *swap = from;                                                                                  \
            from = to;                                                                                          \
            to = swap;                                                                                          \
        }                                                                                                       \
        if (from != values)                                                                                     \
            memcpy(values, from, (size_t)n * sizeof(type));                                                     \
    }
BHV_DEFINE_SORT(bhv_sort_ll, long long)
BHV_DEFINE_SORT(bhv_sort_double, double)

/* float.__pow__(d, 2) calls the C library's pow at run time; a constant 2.0 would let the compiler turn it
 * into d * d, which pow (within 0.54 ULP, not correctly rounded) need not equal. */
static volatile double bhv_two = 2.0;

/* math.fsum of finite values (Shewchuk's partials, CPython's final half-even fix); 0 when it is not finite. */
static int bhv_fsum(const double *values, Py_ssize_t count, double *partials, double *out)
{
    Py_ssize_t n = 0;
    double hi, yr, lo = 0.0, x, y, t;
    for (Py_ssize_t k = 0; k < count; k++) {
        Py_ssize_t i = 0;
        x = values[k];
        for (Py_ssize_t j = 0; j < n; j++) {
            y = partials[j];
            if (fabs(x) < fabs(y)) {
                t = x;
                x = y;
                y = t;
            }
            hi = x + y;
            yr = hi - x;
            lo = y - yr;
            if (lo != 0.0)
                partials[i++] = lo;
            x = hi;
        }
        n = i;
        if (x != 0.0) {
            if (!isfinite(x))
                return 0;
            partials[n++] = x;
        }
    }
    hi = 0.0;
    if (n > 0) {
        hi = partials[--n];
        while (n > 0) {
            x = hi;
            y = partials[--n];
            hi = x + y;
            yr = hi - x;
            lo = y - yr;
            if (lo != 0.0)
                break;
        }
        if (n > 0 && ((lo < 0.0 && partials[n - 1] < 0.0) || (lo > 0.0 && partials[n - 1] > 0.0))) {
            y = lo * 2.0;
            x = hi + y;
            yr = x - hi;
            if (y == yr)
                hi = x;
        }
    }
    *out = hi;
    return 1;
}

/* statistics.median of values (sorted in place). */
static double bhv_median(double *values, double *buffer, Py_ssize_t n)
{
    bhv_sort_double(values, buffer, n);
    return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

/* _pstdev(values, mean): sqrt(fsum((v - mean) ** 2) / n); 0 when a square is not a normal finite double. */
static int bhv_pstdev(const double *values, Py_ssize_t n, double mean, double *work, double *partials, double *out)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        double d = fabs(values[i] - mean), square = d == 0.0 || d == 1.0 ? d : pow(d, bhv_two);
        if (!isfinite(square) || (square != 0.0 && square < DBL_MIN))
            return 0;
        work[i] = square;
    }
    double sum;
    if (!bhv_fsum(work, n, partials, &sum))
        return 0;
    *out = sqrt(sum / (double)n);
    return 1;
}

/* float.__round__(x) with no digits: half to even. */
static double bhv_round_half_even(double x)
{
    double rounded = round(x);
    if (fabs(x - rounded) == 0.5)
        rounded = 2.0 * round(x / 2.0);
    return rounded;
}

enum { BHV_FIGURES, BHV_DECLINED, BHV_NO_BEACON };

/* (connections, median, cv, mad / median or None, Bowley skew or None, missed beats, size cv, first start) of a series
 * (*status BHV_FIGURES; NULL and *status BHV_FIGURES on an error), or NULL and *status:
 *   BHV_NO_BEACON  beacon_scores gives None (too few intervals), or the judge certainly refuses the series:
 *                  fewer connections than min_connections, or cv > cv_cutoff (the caller's max_cv + 0.001:
 *                  round(cv, 3) is then above max_cv, being within 0.0005 and a rounding of the double
 *                  nearest to the decimal of cv). Figures after cv are not computed then.
 *   BHV_DECLINED   only the Python computes the exact figures. */
static PyObject *bhv_figures(PyObject *items, double min_interval, double cv_cutoff, Py_ssize_t min_connections,
                             int *status)
{
    Py_ssize_t n = PySequence_Fast_GET_SIZE(items), kept = 0, count, folded_n;
    PyObject *out = NULL;
    long long *times = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(long long)), missed = 0;
    double *work = PyMem_Malloc((size_t)(n ? n : 1) * 7 * sizeof(double));
    *status = BHV_DECLINED;
    if (times == NULL || work == NULL) {
        *status = BHV_FIGURES;
        PyErr_NoMemory();
        goto done;
    }
    double *intervals = work, *sorted = work + n, *folded = work + 2 * n, *sizes = work + 3 * n, *scratch = work + 4 * n,
           *partials = work + 5 * n, *buffer = work + 6 * n;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(items, i);
        long long t, size;
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2 || !bhv_small(PyTuple_GET_ITEM(item, 0), &t)
            || !bhv_small(PyTuple_GET_ITEM(item, 1), &size) || t <= -BHV_TIME_LIMIT || t >= BHV_TIME_LIMIT) {
            PyErr_Clear();
            goto done;
        }
        times[i] = t;
        sizes[i] = (double)size;
    }
    if (n == 0)
        goto done;  /* times[0] raises IndexError in Python */
    bhv_sort_ll(times, (long long *)buffer, n);
    long long last = times[0];
    count = 1;
    for (Py_ssize_t i = 1; i < n; i++) {
        long long gap = times[i] - last;
        if (gap >= BHV_EXACT)
            goto done;
        if ((double)gap / 1e9 >= min_interval) {
            intervals[kept++] = (double)gap / 1e9;
            last = times[i];
            count++;
        }
    }
    if (kept < 3 || count < min_connections) {
        *status = BHV_NO_BEACON;
        goto done;
    }
    memcpy(sorted, intervals, (size_t)kept * sizeof(double));
    double median = bhv_median(sorted, buffer, kept), mean, cv = 1.0, std, size_mean, size_cv = 0.0, skew = 0.0;
    folded_n = kept;
    for (Py_ssize_t i = 0; i < kept; i++) {
        double value = intervals[i], beats = 1.0;
        if (median > 0) {
            double ratio = value / median;
            if (!isfinite(ratio) || fabs(ratio) >= (double)BHV_EXACT)
                goto done;
            beats = bhv_round_half_even(ratio);
        }
        if (beats >= 2 && fabs(value / beats - median) <= 0.25 * median) {
            folded[i] = value / beats;
            missed += (long long)beats - 1;
        }
        else
            folded[i] = value;
    }
    if (!bhv_fsum(folded, folded_n, partials, &mean))
        goto done;
    mean = mean / (double)folded_n;
    if (mean > 0) {
        if (!bhv_pstdev(folded, folded_n, mean, scratch, partials, &std))
            goto done;
        cv = std / mean;
    }
    if (cv > cv_cutoff) {
        *status = BHV_NO_BEACON;
        goto done;
    }
    for (Py_ssize_t i = 0; i < folded_n; i++)
        sorted[i] = fabs(folded[i] - median);
    double mad = bhv_median(sorted, buffer, folded_n);
    if (!bhv_fsum(sizes, n, partials, &size_mean))
        goto done;
    size_mean = size_mean / (double)n;
    if (size_mean > 0 && n > 1) {
        if (!bhv_pstdev(sizes, n, size_mean, scratch, partials, &std))
            goto done;
        size_cv = std / size_mean;
    }
    if (folded_n >= 4) {
        double q[3];
        long long m = folded_n + 1;
        memcpy(sorted, folded, (size_t)folded_n * sizeof(double));
        bhv_sort_double(sorted, buffer, folded_n);
        for (long long i = 1; i < 4; i++) {
            long long j = i * m / 4, delta;
            j = j < 1 ? 1 : j > folded_n - 1 ? folded_n - 1 : j;
            delta = i * m - j * 4;
            q[i - 1] = (sorted[j - 1] * (double)(4 - delta) + sorted[j] * (double)delta) / 4;
        }
        double spread = q[2] - q[0];
        skew = spread == 0 ? 0.0 : (q[2] + q[0] - 2 * q[1]) / spread;
    }
    *status = BHV_FIGURES;
    PyObject *mad_ratio = median > 0 ? PyFloat_FromDouble(mad / median) : Py_NewRef(Py_None);
    PyObject *bowley = folded_n >= 4 ? PyFloat_FromDouble(skew) : Py_NewRef(Py_None);
    if (mad_ratio != NULL && bowley != NULL)
        out = Py_BuildValue("(nddOOLdL)", count, median, cv, mad_ratio, bowley, missed, size_cv, times[0]);
    Py_XDECREF(mad_ratio);
    Py_XDECREF(bowley);
done:
    PyMem_Free(times);
    PyMem_Free(work);
    return out;
}

static PyObject *BehaviourCore_beacon_figures(PyObject *unused, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "beacon_figures(series, min_interval_s) takes 2 arguments");
        return NULL;
    }
    double min_interval = PyFloat_AsDouble(args[1]);
    if (min_interval == -1.0 && PyErr_Occurred())
        return NULL;
    PyObject *items = PySequence_Fast(args[0], "beacon_figures: series must be a sequence");
    if (items == NULL)
        return NULL;
    int status;
    PyObject *out = bhv_figures(items, min_interval, Py_HUGE_VAL, 0, &status);
    Py_DECREF(items);
    if (status == BHV_DECLINED)
        Py_RETURN_NONE;
    return status == BHV_NO_BEACON ? PyTuple_New(0) : out;
}

/* self._throttle.would_allow(("beacon", str(agent), str(address), str(port)), now, report_interval_s): the
 * judge's last test, asked first (it records nothing). 1, 0, or -1 on an error. */
static int bhv_would_allow(BehaviourCoreObject *self, PyObject *key, PyObject *now_ns)
{
    PyObject *throttled = PyTuple_New(4), *throttle = NULL, *answer = NULL;
    int allowed = -1;
    if (throttled == NULL)
        return -1;
    PyTuple_SET_ITEM(throttled, 0, Py_NewRef(bhv_s_beacon));
    for (Py_ssize_t i = 0; i < 3; i++) {
        PyObject *text = PyObject_Str(PyTuple_GET_ITEM(key, i));
        if (text == NULL)
            goto done;
        PyTuple_SET_ITEM(throttled, i + 1, text);
    }
    if ((throttle = PyObject_GetAttr((PyObject *)self, bhv_s_throttle)) != NULL
        && (answer = PyObject_CallMethodObjArgs(throttle, bhv_s_would_allow, throttled, now_ns, self->report_interval_s, NULL)) != NULL)
        allowed = PyObject_IsTrue(answer);
done:
    Py_DECREF(throttled);
    Py_XDECREF(throttle);
    Py_XDECREF(answer);
    return allowed;
}

/* The series holds min_connections: the judge unless its answer is known to be None here. */
static int bhv_judge_beacon(BehaviourCoreObject *self, PyObject *flow, PyObject *key, PyObject *series, PyObject *visitors,
                            Py_ssize_t prevalence, PyObject *last_ns, PyObject *out)
{
    PyObject *figures = NULL, *count;
    if (self->fleet == NULL || self->fleet == Py_None) {
        if (self->common_destination_agents && prevalence >= self->common_destination_agents)
            return 0;  /* shared infrastructure */
        int allowed = bhv_would_allow(self, key, last_ns);
        if (allowed <= 0)
            return allowed;  /* reported lately (0), or an error */
        PyObject *items = PySequence_Fast(series, "the series must be a sequence");
        int status = BHV_FIGURES;
        if (items != NULL) {
            figures = bhv_figures(items, self->min_interval_s, self->max_cv + 0.001, self->min_connections, &status);
            Py_DECREF(items);
        }
        if (status == BHV_NO_BEACON)
            return 0;
        if (figures == NULL && status != BHV_DECLINED)
            return -1;
    }
    if ((count = PyLong_FromSsize_t(prevalence)) == NULL) {
        Py_XDECREF(figures);
        return -1;
    }
    int failed = bhv_keep(out, PyObject_CallMethodObjArgs((PyObject *)self, bhv_s_judge_beacon, flow, self->config, key,
                                                         series, visitors, count, figures ? figures : Py_None, NULL));
    Py_DECREF(count);
    Py_XDECREF(figures);
    return failed;
}

/* A tuple of `size` items (a, b[, c]) to look a dict up with: the last one again when nothing but this layer
 * holds it (a dict that took it as a key, or a judge that kept it, holds it too: then a new one), its items
 * replaced as PyTuple_SetItem allows for a tuple nobody else refers to. Saves two tuples per flow. From
 * 3.14 on, tuples cache their hash: a new one every time. A new reference. */
static PyObject *bhv_lookup_key(PyObject **last, Py_ssize_t size, PyObject *a, PyObject *b, PyObject *c)
{
#if PY_VERSION_HEX >= 0x030E0000
    return size == 3 ? PyTuple_Pack(3, a, b, c) : PyTuple_Pack(2, a, b);
#else
    PyObject *items[3] = {a, b, c};
    if (*last == NULL || Py_REFCNT(*last) != 1) {
        Py_XSETREF(*last, PyTuple_New(size));
        if (*last == NULL)
            return NULL;
    }
    for (Py_ssize_t i = 0; i < size; i++) {
        Py_INCREF(items[i]);
        Py_XSETREF(PyTuple_GET_ITEM(*last, i), items[i]);
    }
    return Py_NewRef(*last);
#endif
}

/* -- the connection series: _analyze_beaconing up to its judge --------------------------------------- */
static int bhv_beaconing(BehaviourCoreObject *self, PyObject *flow, PyObject *agent, PyObject *bytes_out, PyObject *last_ns,
                         PyObject *remote_ip, PyObject *out)
{
    int failed = -1, c;
    PyObject *packets_out = NULL, *remote_port = NULL, *local_port = NULL, *key = NULL, *first_ns = NULL, *point = NULL,
             *destination = NULL, *series, *visitors;
    if ((packets_out = dnsw_get(flow, &bhv_attr_packets_out)) == NULL || (c = bhv_compare(packets_out, bhv_zero, Py_EQ)) < 0)
        goto done;
    if (c || (remote_port = dnsw_get(flow, &bhv_attr_remote_port)) == NULL || (c = bhv_ignored(self, remote_port)) != 0
        || (local_port = dnsw_get(flow, &bhv_attr_local_port)) == NULL || (c = bhv_ignored(self, local_port)) != 0)
        goto skipped;
    if ((c = bhv_compare(local_port, bhv_port_floor, Py_LT)) < 0)
        goto done;
    if (c && (c = bhv_compare(bhv_port_floor, remote_port, Py_LE)) != 0)
        goto skipped;  /* the agent is the server side of this flow (or an error, c < 0) */
    if ((key = bhv_lookup_key(&self->key, 3, agent, remote_ip, remote_port)) == NULL
        || (series = bhv_entry(self->series, key, self->max_keys, bhv_make_series, self)) == NULL)
        goto done;
    if ((first_ns = dnsw_get(flow, &bhv_attr_first_ns)) == NULL || (point = PyTuple_Pack(2, first_ns, bytes_out)) == NULL
        || bhv_append(series, point) < 0)
        goto done;
    if (PyLong_CheckExact(first_ns) && PyLong_CheckExact(bytes_out))
        PyObject_GC_UnTrack(point);  /* two ints, in no cycle ever: kept out of the collector's young scans */
    Py_INCREF(series);  /* held across the calls below, which may empty the dicts */
    if ((destination = bhv_lookup_key(&self->destination, 2, remote_ip, remote_port, NULL)) == NULL
        || (visitors = bhv_entry(self->visitors, destination, self->max_keys, bhv_make_visitors, NULL)) == NULL
        || PyDict_SetItem(visitors, agent, last_ns) < 0) {
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
    Py_ssize_t length = PyObject_Length(series), prevalence = 0;
    if (length >= 0 && length >= self->min_connections && (prevalence = bhv_prevalence(self, visitors, last_ns)) >= 0)
        failed = bhv_judge_beacon(self, flow, key, series, visitors, prevalence, last_ns, out);
    else
        failed = length < 0 || prevalence < 0 ? -1 : 0;
    Py_DECREF(series);
    Py_DECREF(visitors);
    goto done;
skipped:
    failed = c < 0 ? -1 : 0;
done:
    Py_XDECREF(packets_out);
    Py_XDECREF(remote_port);
    Py_XDECREF(local_port);
    Py_XDECREF(key);
    Py_XDECREF(first_ns);
    Py_XDECREF(point);
    Py_XDECREF(destination);
    return failed;
}

static PyObject *BehaviourCore_analyze(BehaviourCoreObject *self, PyObject *flow)
{
    if (self->holder == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "BehaviourCore.__init__ was not called");
        return NULL;
    }
    PyObject *config = dnsw_get(self->holder, &bhv_attr_current);
    if (config == NULL)
        return NULL;
    int failed = config != self->config && bhv_configure(self, config) < 0;
    Py_DECREF(config);  /* self->config holds it */
    if (failed)
        return NULL;
    PyObject *out = PyList_New(0), *agent = NULL, *bytes_out = NULL, *last_ns = NULL, *remote_ip = NULL, *transport = NULL;
    if (out == NULL || (agent = dnsw_get(flow, &bhv_attr_agent_id)) == NULL
        || (bytes_out = dnsw_get(flow, &bhv_attr_bytes_out)) == NULL || (last_ns = dnsw_get(flow, &bhv_attr_last_ns)) == NULL
        || (remote_ip = dnsw_get(flow, &bhv_attr_remote_ip)) == NULL
        || bhv_volume(self, flow, agent, bytes_out, last_ns, remote_ip, out) < 0
        || (transport = dnsw_get(flow, &bhv_attr_transport)) == NULL
        || ((transport == self->tcp || transport == self->udp)
            && bhv_beaconing(self, flow, agent, bytes_out, last_ns, remote_ip, out) < 0))
        Py_CLEAR(out);
    Py_XDECREF(agent);
    Py_XDECREF(bytes_out);
    Py_XDECREF(last_ns);
    Py_XDECREF(remote_ip);
    Py_XDECREF(transport);
    return out;
}

/* analyze_many(flows, failed=None) -> [(index, detections)]: analyze on each flow of the list in turn, for the flows that
 * raised any (pipeline.AnalysisLayer.analyze_many). A flow whose analysis raises an Exception goes to failed(flow)
 * (loop_failure.h) and the loop goes on. */
static PyObject *BehaviourCore_analyze_many(BehaviourCoreObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "analyze_many(flows: list, failed=None)");
        return NULL;
    }
    PyObject *flows = args[0], *failed = nargs > 1 ? args[1] : Py_None;
    PyObject *flagged = PyList_New(0);
    if (flagged == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(flows); i++) { /* the size read again: failed() may change the list */
        PyObject *flow = Py_NewRef(PyList_GET_ITEM(flows, i));
        PyObject *found = BehaviourCore_analyze(self, flow);
        int bad = 0;
        if (found == NULL) {
            bad = loop_hand_failure(failed, flow) < 0;
        } else if (PyList_GET_SIZE(found) > 0) {
            PyObject *index = PyLong_FromSsize_t(i);
            PyObject *pair = dnsw_pair(index, Py_NewRef(found));
            bad = pair == NULL || PyList_Append(flagged, pair) < 0;
            Py_XDECREF(pair);
        }
        Py_XDECREF(found);
        Py_DECREF(flow);
        if (bad) {
            Py_DECREF(flagged);
            return NULL;
        }
    }
    return flagged;
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
    Py_VISIT(self->key);
    Py_VISIT(self->destination);
    Py_VISIT(self->tcp);
    Py_VISIT(self->udp);
    Py_VISIT(self->bucket_ns);
    Py_VISIT(self->warmup_buckets);
    Py_VISIT(self->min_bytes);
    Py_VISIT(self->series_args);
    Py_VISIT(self->ignore_ports);
    Py_VISIT(self->prevalence_window_ns);
    Py_VISIT(self->report_interval_s);
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
    Py_CLEAR(self->key);
    Py_CLEAR(self->destination);
    Py_CLEAR(self->tcp);
    Py_CLEAR(self->udp);
    Py_CLEAR(self->bucket_ns);
    Py_CLEAR(self->warmup_buckets);
    Py_CLEAR(self->min_bytes);
    Py_CLEAR(self->series_args);
    Py_CLEAR(self->ignore_ports);
    Py_CLEAR(self->prevalence_window_ns);
    Py_CLEAR(self->report_interval_s);
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
    {"analyze_many", (PyCFunction)(void (*)(void))BehaviourCore_analyze_many, METH_FASTCALL,
     "analyze_many(flows, failed=None) -> [(index, detections)] of the flows that raised any; a flow whose analysis raises "
     "goes to failed(flow) (inside the exception) and the next goes on."},
    {"beacon_figures", (PyCFunction)(void (*)(void))BehaviourCore_beacon_figures, METH_FASTCALL | METH_STATIC,
     "beacon_figures(series, min_interval_s) -> (connections, median, cv, mad/median | None, bowley | None, missed, "
     "size_cv, first start), () when too few intervals, None when only the Python gives the exact figures."},
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
        {&bhv_attr_current, "current"}, {&bhv_attr_agent_id, "agent_id"}, {&bhv_attr_flow_id, "flow_id"}, {&bhv_attr_first_ns, "first_ns"},
        {&bhv_attr_last_ns, "last_ns"}, {&bhv_attr_bytes_out, "bytes_out"}, {&bhv_attr_packets_out, "packets_out"},
        {&bhv_attr_remote_ip, "remote_ip"}, {&bhv_attr_remote_port, "remote_port"}, {&bhv_attr_local_port, "local_port"},
        {&bhv_attr_transport, "transport"}, {&bhv_attr_bucket, "bucket"}, {&bhv_attr_total, "total"},
        {&bhv_attr_by_remote, "by_remote"}, {&bhv_attr_flow_ids, "flow_ids"}, {&bhv_attr_stats, "stats"}, {&bhv_attr_n, "n"},
        {&bhv_attr_mean, "mean"}, {&bhv_attr_m2, "m2"}, {&bhv_attr_ema, "ema"}, {&bhv_attr_reference, "reference"},
        {&bhv_attr_cusum, "cusum"}, {&bhv_attr_run_buckets, "run_buckets"}, {&bhv_attr_run_max_z, "run_max_z"},
        {&bhv_attr_run_by_remote, "run_by_remote"}, {&bhv_attr_run_first_ns, "run_first_ns"},
    };
    for (size_t i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++) {
        if (!dnsw_intern(&attrs[i].attr->name, attrs[i].name))
            return -1;
    }
    if (!dnsw_intern(&bhv_s_throttle, "_throttle") || !dnsw_intern(&bhv_s_would_allow, "would_allow")
        || !dnsw_intern(&bhv_s_beacon, "beacon") || !dnsw_intern(&bhv_s_settings, "_settings") || !dnsw_intern(&bhv_s_roll, "_roll")
        || !dnsw_intern(&bhv_s_cusum, "_cusum")
        || !dnsw_intern(&bhv_s_volume_alarm, "_volume_alarm") || !dnsw_intern(&bhv_s_judge_beacon, "_judge_beacon")
        || !dnsw_intern(&bhv_s_visited, "visited"))
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
