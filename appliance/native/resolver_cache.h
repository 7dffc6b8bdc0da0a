/*
 * ResolverCache.observe_many and .lookup in C (appliance/detection/resolutions.py); included by dpi.c after
 * dns_windows.h, whose slot reader (dnsw_get) it shares.
 *
 * The analysis process feeds the cache every DNS answer the agents' resolvers returned (7,596 on the bench
 * corpus) and the TLS detector asks it once per TCP flow; in Python that was 0.9 us per answer and 0.5 us per
 * question, mostly bytecode around a few dict operations. The state stays in Python objects: the per-agent
 * dicts (keys are addresses and names that agents and their resolvers choose: Python's keyed string hash,
 * no C table) and the Resolution dataclasses, whose slots are read and written through a SlotMaker's offsets.
 * `tests/appliance/detection/resolutions_reference.py` is the Python twin the tests hold this to.
 *
 * resolver_observe(items, by_ip, by_name, max_per_agent, maker, thin) -> responses learned
 *     items: tuples whose first two fields are (agent_id, DnsMessage), in order; by_ip: {agent: {address:
 *     Resolution}}, by_name: {agent: {name: first ns}}; maker: SlotMaker(Resolution) (name, names, seen_ns,
 *     ttl_s, times); thin: resolutions._thin, called when a times list holds something but plain ints.
 * resolver_lookup(by_ip, maker, agent_id, address, at_ns, window_s[, slack_s=2.0]) -> Resolution | None
 *     The state first, so that functools.partial binds it and the TLS detector calls C with no Python frame.
 *     `address`: a str, or an IPv4 address as an int (FlowRecord.remote_ip), looked up as model.ip_str writes it.
 *
 * Exactness: timestamps, TTLs and the times lists are compared and subtracted as Python ints would be. Ints
 * within +-2**62 (every nanosecond time until the year 2116, every TTL) take 128-bit C arithmetic; anything
 * else takes the Python number protocol, so the answer never depends on which path ran.
 */

#define RC_SMALL (((long long)1) << 62)
#define RC_MAX_TIMES 64

static dnsw_attr rc_attr_is_response, rc_attr_answers, rc_attr_qname, rc_attr_timestamp_ns, rc_attr_rtype,
    rc_attr_data, rc_attr_ttl;
static PyObject *rc_second;        /* 1_000_000_000 */
static PyObject *rc_billion_float; /* 1e9 */
static PyObject *rc_default_slack; /* 2.0: ResolverCache.lookup's default slack_s */

enum { RC_NAME, RC_NAMES, RC_SEEN_NS, RC_TTL_S, RC_TIMES, RC_FIELDS };

/* An exact int within +-2**62 into *out: 1; anything else: 0 (no error set). */
static int rc_small(PyObject *v, long long *out)
{
    if (!PyLong_CheckExact(v))
        return 0;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || x >= RC_SMALL || x <= -RC_SMALL) {
        if (x == -1 && PyErr_Occurred())
            PyErr_Clear();
        return 0;
    }
    *out = x;
    return 1;
}

/* a < b as Python says (-1 on error). */
static int rc_less(PyObject *a, PyObject *b)
{
    long long x, y;
    if (rc_small(a, &x) && rc_small(b, &y))
        return x < y;
    return PyObject_RichCompareBool(a, b, Py_LT);
}

/* abs(a - b) > 1_000_000_000 as Python says (-1 on error). */
static int rc_apart(PyObject *a, PyObject *b)
{
    long long x, y;
    if (rc_small(a, &x) && rc_small(b, &y)) {
        long long d = x - y; /* |x|, |y| < 2**62: no overflow */
        return (d < 0 ? -d : d) > 1000000000LL;
    }
    PyObject *d = PyNumber_Subtract(a, b);
    PyObject *m = d != NULL ? PyNumber_Absolute(d) : NULL;
    Py_XDECREF(d);
    if (m == NULL)
        return -1;
    int r = PyObject_RichCompareBool(m, rc_second, Py_GT);
    Py_DECREF(m);
    return r;
}

/* x < item, x given as an object and, when `small`, as xv too (-1 on error). */
static int rc_x_less(PyObject *x, int small, long long xv, PyObject *item)
{
    long long iv;
    if (small && rc_small(item, &iv))
        return xv < iv;
    Py_INCREF(item);
    int less = PyObject_RichCompareBool(x, item, Py_LT);
    Py_DECREF(item);
    return less;
}

/* bisect.bisect_right(times, x) on the sorted list (-1 on error). The latest time is tried first: answers and
 * lookups are mostly about now, past every time kept, and then one comparison settles it. */
static Py_ssize_t rc_bisect_right(PyObject *times, PyObject *x)
{
    Py_ssize_t lo = 0, hi = PyList_GET_SIZE(times);
    long long xv;
    int small = rc_small(x, &xv);
    if (hi > 0) {
        int less = rc_x_less(x, small, xv, PyList_GET_ITEM(times, hi - 1));
        if (less <= 0)
            return less < 0 ? -1 : PyList_GET_SIZE(times);
    }
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        int less = rc_x_less(x, small, xv, PyList_GET_ITEM(times, mid));
        if (less < 0)
            return -1;
        if (less)
            hi = mid;
        else
            lo = mid + 1;
        if (hi > PyList_GET_SIZE(times)) /* a comparison ran Python code that shrank the list */
            hi = PyList_GET_SIZE(times);
    }
    return lo;
}

/* resolutions._thin on a list of small ints: the first interior index whose neighbours are closest together
 * goes. Anything else: the Python function itself. */
static int rc_thin(PyObject *times, PyObject *thin)
{
    Py_ssize_t n = PyList_GET_SIZE(times);
    long long *v = n <= 2 * RC_MAX_TIMES ? PyMem_Malloc(sizeof(long long) * (size_t)n) : NULL;
    int small = v != NULL;
    for (Py_ssize_t k = 0; small && k < n; k++)
        small = rc_small(PyList_GET_ITEM(times, k), &v[k]);
    if (!small || n < 3) {
        PyMem_Free(v);
        PyObject *r = PyObject_CallOneArg(thin, times);
        Py_XDECREF(r);
        return r == NULL ? -1 : 0;
    }
    Py_ssize_t best = 1;
    long long gap = v[2] - v[0]; /* |v| < 2**62: a difference fits */
    for (Py_ssize_t k = 2; k < n - 1; k++)
        if (v[k + 1] - v[k - 1] < gap) {
            gap = v[k + 1] - v[k - 1];
            best = k;
        }
    PyMem_Free(v);
    return PyList_SetSlice(times, best, best + 1, NULL);
}

/* The Resolution slot `field` of `obj` (borrowed), after the caller checked the type. */
#define RC_SLOT(maker, obj, field) (*(PyObject **)((char *)(obj) + (maker)->offsets[field]))

static void rc_set_slot(SlotMaker *maker, PyObject *obj, int field, PyObject *value)
{
    PyObject **slot = &RC_SLOT(maker, obj, field);
    Py_XSETREF(*slot, Py_NewRef(value));
}

/* dict.get(key) as a new reference; NULL with no error when absent. */
static PyObject *rc_get(PyObject *dict, PyObject *key)
{
    return Py_XNewRef(PyDict_GetItemWithError(dict, key));
}

/* dict[key] for `key` of an outer dict, made empty when absent (new reference). */
static PyObject *rc_inner(PyObject *outer, PyObject *key)
{
    PyObject *inner = rc_get(outer, key);
    if (inner == NULL && !PyErr_Occurred()) {
        inner = PyDict_New();
        if (inner != NULL && PyDict_SetItem(outer, key, inner) < 0)
            Py_CLEAR(inner);
    }
    return inner;
}

/* Oldest first (insertion order) until the dict holds at most `max` keys: del d[next(iter(d))]. */
static int rc_bound(PyObject *dict, Py_ssize_t max)
{
    while (PyDict_GET_SIZE(dict) > max) {
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        if (!PyDict_Next(dict, &pos, &key, &value))
            break;
        Py_INCREF(key);
        int r = PyDict_DelItem(dict, key);
        Py_DECREF(key);
        if (r < 0)
            return -1;
    }
    return 0;
}

static int rc_check_maker(PyObject *maker)
{
    if (!Py_IS_TYPE(maker, &SlotMakerType) || ((SlotMaker *)maker)->nslots != RC_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "the Resolution maker must be a SlotMaker of its 5 fields");
        return -1;
    }
    return 0;
}

/* The message's chain of names: [qname] and its CNAME targets (`names`, NULL when it had no CNAME). */
typedef struct {
    PyObject *qname, *names;
    PyObject *tuple; /* tuple(names), made when first needed (new reference) */
} rc_chain;

static Py_ssize_t rc_chain_size(const rc_chain *c)
{
    return c->names != NULL ? PyList_GET_SIZE(c->names) : 1;
}

static PyObject *rc_chain_item(const rc_chain *c, Py_ssize_t i)
{
    return c->names != NULL ? PyList_GET_ITEM(c->names, i) : c->qname;
}

static PyObject *rc_chain_tuple(rc_chain *c)
{
    if (c->tuple == NULL)
        c->tuple = c->names != NULL ? PyList_AsTuple(c->names) : PyTuple_Pack(1, c->qname);
    return c->tuple;
}

/* 1 when `names` (a Resolution's) is a tuple equal to the chain, item by item: it stays, equal to the tuple the
 * Python made anew (most answers repeat a name's resolution: no tuple made for them). -1 on error. */
static int rc_chain_equals(const rc_chain *c, PyObject *names)
{
    Py_ssize_t n = rc_chain_size(c);
    if (names == NULL || !PyTuple_CheckExact(names) || PyTuple_GET_SIZE(names) != n)
        return 0;
    for (Py_ssize_t i = 0; i < n && i < rc_chain_size(c); i++) {
        PyObject *a = PyTuple_GET_ITEM(names, i), *b = rc_chain_item(c, i);
        if (a == b)
            continue;
        Py_INCREF(a);
        Py_INCREF(b);
        int same = PyObject_RichCompareBool(a, b, Py_EQ);
        Py_DECREF(a);
        Py_DECREF(b);
        if (same <= 0)
            return same;
    }
    return n == rc_chain_size(c);
}

/* One known address answered again: its Resolution updated in place (the Python loop's `else` branch). */
static int rc_update(SlotMaker *maker, PyObject *old, PyObject *qname, rc_chain *chain, PyObject *ts, PyObject *ttl,
                     PyObject *thin)
{
    PyObject *times = RC_SLOT(maker, old, RC_TIMES);
    if (times == NULL || !PyList_CheckExact(times) || PyList_GET_SIZE(times) == 0) {
        PyErr_SetString(PyExc_TypeError, "a Resolution's times must be a non-empty list");
        return -1;
    }
    Py_INCREF(times);
    int apart = rc_apart(ts, PyList_GET_ITEM(times, PyList_GET_SIZE(times) - 1));
    if (apart > 0) {
        Py_ssize_t at = rc_bisect_right(times, ts);
        if (at < 0 || PyList_Insert(times, at, ts) < 0 ||
            (PyList_GET_SIZE(times) > RC_MAX_TIMES && rc_thin(times, thin) < 0))
            apart = -1;
    }
    Py_DECREF(times);
    if (apart < 0)
        return -1;
    rc_set_slot(maker, old, RC_NAME, qname);
    int same = rc_chain_equals(chain, RC_SLOT(maker, old, RC_NAMES));
    if (same < 0)
        return -1;
    if (!same) {
        if (rc_chain_tuple(chain) == NULL)
            return -1;
        rc_set_slot(maker, old, RC_NAMES, chain->tuple);
    }
    rc_set_slot(maker, old, RC_TTL_S, ttl);
    PyObject *seen = RC_SLOT(maker, old, RC_SEEN_NS);
    int later = seen == NULL ? 1 : rc_less(seen, ts);
    if (later < 0)
        return -1;
    if (later)
        rc_set_slot(maker, old, RC_SEEN_NS, ts);
    return 0;
}

/* rtype == code as Python says (-1 on error). */
static int rc_is(PyObject *rtype, long long code, PyObject *code_object)
{
    long long v;
    if (rc_small(rtype, &v))
        return v == code;
    return PyObject_RichCompareBool(rtype, code_object, Py_EQ);
}

static PyObject *rc_cname, *rc_a, *rc_aaaa; /* 5, 1, 28 */

/* A CNAME's target joins `*names` ([qname, targets...], made at the first CNAME: most answers have none) once.
 * Steals `target` (NULL: the error its maker set). -1 on error, else 0. */
static int rc_add_cname(PyObject **names, PyObject *qname, PyObject *target)
{
    if (target == NULL)
        return -1;
    if (*names == NULL) {
        if ((*names = PyList_New(1)) == NULL) {
            Py_DECREF(target);
            return -1;
        }
        PyList_SET_ITEM(*names, 0, Py_NewRef(qname));
    }
    int known = PySequence_Contains(*names, target);
    if (known == 0)
        known = PyList_Append(*names, target);
    Py_DECREF(target);
    return known < 0 ? -1 : 0;
}

/* One answer of a message: a CNAME's target joins *names (once; the list [qname, ...] made at the first CNAME),
 * an A or AAAA answer's (data, ttl) joins `pairs` (new references) at *count. -1 on error. */
static int rc_answer(PyObject *answer, PyObject *qname, PyObject **names, PyObject **pairs, Py_ssize_t *count)
{
    PyObject *rtype = dnsw_get(answer, &rc_attr_rtype);
    if (rtype == NULL)
        return -1;
    int is_cname = rc_is(rtype, 5, rc_cname), is_address = 0;
    if (is_cname == 0) {
        is_address = rc_is(rtype, 1, rc_a);
        if (is_address == 0)
            is_address = rc_is(rtype, 28, rc_aaaa);
    }
    Py_DECREF(rtype);
    if (is_cname < 0 || is_address < 0)
        return -1;
    if (is_cname)
        return rc_add_cname(names, qname, dnsw_get(answer, &rc_attr_data));
    if (is_address) {
        PyObject *address = dnsw_get(answer, &rc_attr_data);
        PyObject *ttl = address != NULL ? dnsw_get(answer, &rc_attr_ttl) : NULL;
        if (ttl == NULL) {
            Py_XDECREF(address);
            return -1;
        }
        pairs[2 * *count] = address;
        pairs[2 * *count + 1] = ttl;
        (*count)++;
    }
    return 0;
}

/* What one response teaches (the Python loop's body once its answers are read): `names` is [qname, CNAME targets...]
 * or NULL when it had no CNAME, `pairs` the (address, ttl) of its A and AAAA answers (count >= 1), `ts` its
 * timestamp. Borrows everything. -1 on error, else 1. */
static int rc_learn(PyObject *agent_id, PyObject *qname, PyObject *names, PyObject *const *pairs, Py_ssize_t count,
                    PyObject *ts, PyObject *by_ip_all, PyObject *by_name_all, Py_ssize_t max, SlotMaker *maker,
                    PyObject *thin)
{
    int result = -1;
    rc_chain chain = {.qname = qname, .names = names, .tuple = NULL};
    PyObject *by_ip = NULL, *by_name = NULL;
    if ((by_ip = rc_inner(by_ip_all, agent_id)) == NULL || (by_name = rc_inner(by_name_all, agent_id)) == NULL)
        goto done;
    if (!PyDict_CheckExact(by_ip) || !PyDict_CheckExact(by_name)) {
        PyErr_SetString(PyExc_TypeError, "the per-agent maps must be dicts");
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *address = pairs[2 * i], *ttl = pairs[2 * i + 1];
        PyObject *old = rc_get(by_ip, address); /* popped and put back: insertion order is recency */
        if (old == NULL) {
            if (PyErr_Occurred())
                goto done;
            PyObject *times = PyList_New(1);
            if (times == NULL)
                goto done;
            PyList_SET_ITEM(times, 0, Py_NewRef(ts));
            if (rc_chain_tuple(&chain) == NULL) {
                Py_DECREF(times);
                goto done;
            }
            PyObject *fields[RC_FIELDS] = {Py_NewRef(qname), Py_NewRef(chain.tuple), Py_NewRef(ts), Py_NewRef(ttl), times};
            PyObject *made = slot_maker_take(maker, fields);
            int r = made != NULL ? PyDict_SetItem(by_ip, address, made) : -1;
            Py_XDECREF(made);
            if (r < 0)
                goto done;
            continue;
        }
        int r = -1;
        if (!Py_IS_TYPE(old, maker->cls))
            PyErr_SetString(PyExc_TypeError, "the cache holds something but a Resolution");
        else if (PyDict_DelItem(by_ip, address) == 0 && rc_update(maker, old, qname, &chain, ts, ttl, thin) == 0)
            r = PyDict_SetItem(by_ip, address, old);
        Py_DECREF(old);
        if (r < 0)
            goto done;
    }
    for (Py_ssize_t i = 0; i < rc_chain_size(&chain); i++) {
        /* first = by_name.pop(name, ts); by_name[name] = first if first < ts else ts */
        PyObject *name = Py_NewRef(rc_chain_item(&chain, i));
        PyObject *first = rc_get(by_name, name);
        if (first == NULL && PyErr_Occurred()) {
            Py_DECREF(name);
            goto done;
        }
        int earlier = 0;
        if (first != NULL) {
            earlier = PyDict_DelItem(by_name, name) < 0 ? -1 : rc_less(first, ts);
            if (earlier < 0) {
                Py_DECREF(first);
                Py_DECREF(name);
                goto done;
            }
        }
        int r = PyDict_SetItem(by_name, name, earlier ? first : ts);
        Py_XDECREF(first);
        Py_DECREF(name);
        if (r < 0)
            goto done;
    }
    if (rc_bound(by_ip, max) < 0 || rc_bound(by_name, max) < 0)
        goto done;
    result = 1;
done:
    Py_XDECREF(chain.tuple);
    Py_XDECREF(by_ip);
    Py_XDECREF(by_name);
    return result;
}

/* The (address, ttl) references of `count` pairs dropped, and their array freed unless it is `stack`. */
static void rc_pairs_release(PyObject **pairs, Py_ssize_t count, PyObject **stack)
{
    for (Py_ssize_t i = 0; i < 2 * count; i++)
        Py_DECREF(pairs[i]);
    if (pairs != stack)
        PyMem_Free(pairs);
}

/* The observe calls' arguments (what, by_ip, by_name, max_per_agent, maker, thin) checked; *max read. */
static int rc_observe_args(PyObject *const *args, Py_ssize_t nargs, const char *usage, Py_ssize_t *max)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    if (!PyDict_Check(args[1]) || !PyDict_Check(args[2]) || rc_check_maker(args[4]) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "by_ip and by_name must be dicts");
        return -1;
    }
    *max = PyLong_AsSsize_t(args[3]);
    return *max == -1 && PyErr_Occurred() ? -1 : 0;
}

/* One message of the Python loop: -1 error, 0 taught nothing, 1 learned. */
static int rc_observe_one(PyObject *agent_id, PyObject *message, PyObject *by_ip_all, PyObject *by_name_all,
                          Py_ssize_t max, SlotMaker *maker, PyObject *thin)
{
    /* if not message.is_response or not message.answers or not message.qname: continue */
    PyObject *flag = dnsw_get(message, &rc_attr_is_response);
    int truth = flag != NULL ? PyObject_IsTrue(flag) : -1;
    Py_XDECREF(flag);
    if (truth <= 0)
        return truth;
    PyObject *answers = dnsw_get(message, &rc_attr_answers);
    truth = answers != NULL ? PyObject_IsTrue(answers) : -1;
    if (truth <= 0) {
        Py_XDECREF(answers);
        return truth;
    }
    PyObject *qname = dnsw_get(message, &rc_attr_qname);
    truth = qname != NULL ? PyObject_IsTrue(qname) : -1;
    if (truth <= 0) {
        Py_DECREF(answers);
        Py_XDECREF(qname);
        return truth;
    }
    int result = -1;
    PyObject *seq = PySequence_Fast(answers, "DnsMessage.answers must be iterable");
    PyObject *names = NULL, *ts = NULL;
    PyObject *stack[32], **pairs = stack; /* (data, ttl) of the A and AAAA answers, new references */
    Py_ssize_t count = 0;
    if (seq == NULL)
        goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > 16 && (pairs = PyMem_Malloc(sizeof(PyObject *) * 2 * (size_t)n)) == NULL) {
        pairs = stack;
        PyErr_NoMemory();
        goto done;
    }
    /* At most n answers (pairs holds 2n); fewer if a comparison ran Python code that shrank the list. */
    for (Py_ssize_t i = 0; i < n && i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *answer = Py_NewRef(PySequence_Fast_GET_ITEM(seq, i));
        int r = rc_answer(answer, qname, &names, pairs, &count);
        Py_DECREF(answer);
        if (r < 0)
            goto done;
    }
    if (count == 0) {
        result = 0;
        goto done;
    }
    if ((ts = dnsw_get(message, &rc_attr_timestamp_ns)) == NULL)
        goto done;
    result = rc_learn(agent_id, qname, names, pairs, count, ts, by_ip_all, by_name_all, max, maker, thin);
done:
    rc_pairs_release(pairs, count, stack);
    Py_XDECREF(seq);
    Py_XDECREF(names);
    Py_XDECREF(ts);
    Py_DECREF(answers);
    Py_DECREF(qname);
    return result;
}

static PyObject *resolver_observe(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t max;
    if (rc_observe_args(args, nargs, "resolver_observe(items, by_ip, by_name, max_per_agent, maker, thin)", &max) < 0)
        return NULL;
    PyObject *by_ip_all = args[1], *by_name_all = args[2], *thin = args[5];
    PyObject *seq = PySequence_Fast(args[0], "items must be iterable");
    if (seq == NULL)
        return NULL;
    Py_ssize_t learned = 0;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 2) {
            PyErr_SetString(PyExc_TypeError, "each item must be a tuple (agent_id, message, ...)");
            Py_DECREF(seq);
            return NULL;
        }
        Py_INCREF(item);
        int r = rc_observe_one(PyTuple_GET_ITEM(item, 0), PyTuple_GET_ITEM(item, 1), by_ip_all, by_name_all, max,
                               (SlotMaker *)args[4], thin);
        Py_DECREF(item);
        if (r < 0) {
            Py_DECREF(seq);
            return NULL;
        }
        learned += r;
    }
    Py_DECREF(seq);
    return PyLong_FromSsize_t(learned);
}

/* The Python age test for numbers the fast path does not take: age_s <= window_s or age_s <= ttl_s. */
static int rc_recent_slow(double age_s, PyObject *window_s, PyObject *ttl_s)
{
    PyObject *age = PyFloat_FromDouble(age_s);
    if (age == NULL)
        return -1;
    int r = PyObject_RichCompareBool(age, window_s, Py_LE);
    if (r == 0)
        r = PyObject_RichCompareBool(age, ttl_s, Py_LE);
    Py_DECREF(age);
    return r;
}

/* The cache's key of an address: a str as it is; an int (FlowRecord.remote_ip) as model.ip_str writes it, the
 * dotted quad of its four bytes (socket.inet_ntoa), so that the TLS detector formats an address only when a
 * flow raises something. New reference. */
static PyObject *rc_address(PyObject *address)
{
    if (!PyLong_CheckExact(address))
        return Py_NewRef(address);
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(address, &overflow);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    if (overflow || v < 0 || v > 0xFFFFFFFFLL) {
        PyErr_SetString(PyExc_ValueError, "an IPv4 address as an int must be within 0..2**32-1");
        return NULL;
    }
    char text[16], *at = text;
    for (int shift = 24; shift >= 0; shift -= 8) {
        unsigned octet = (unsigned)(v >> shift) & 0xFF;
        if (octet >= 100)
            *at++ = (char)('0' + octet / 100);
        if (octet >= 10)
            *at++ = (char)('0' + octet / 10 % 10);
        *at++ = (char)('0' + octet % 10);
        if (shift)
            *at++ = '.';
    }
    return PyUnicode_FromStringAndSize(text, at - text);
}

static PyObject *resolver_lookup(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 && nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "resolver_lookup(by_ip, maker, agent_id, address, at_ns, window_s[, slack_s])");
        return NULL;
    }
    if (!PyDict_Check(args[0]) || rc_check_maker(args[1]) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "by_ip must be a dict");
        return NULL;
    }
    SlotMaker *maker = (SlotMaker *)args[1];
    PyObject *at_ns = args[4], *window_s = args[5], *slack_s = nargs == 7 ? args[6] : rc_default_slack;
    PyObject *by_ip = PyDict_GetItemWithError(args[0], args[2]); /* borrowed */
    if (by_ip == NULL)
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    if (!PyDict_Check(by_ip)) {
        PyErr_SetString(PyExc_TypeError, "the per-agent maps must be dicts");
        return NULL;
    }
    PyObject *address = rc_address(args[3]);
    PyObject *hit = address != NULL ? PyDict_GetItemWithError(by_ip, address) : NULL;
    Py_XDECREF(address);
    if (hit == NULL)
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    if (!Py_IS_TYPE(hit, maker->cls)) {
        PyErr_SetString(PyExc_TypeError, "the cache holds something but a Resolution");
        return NULL;
    }
    Py_INCREF(hit);
    PyObject *times = RC_SLOT(maker, hit, RC_TIMES), *ttl_s = RC_SLOT(maker, hit, RC_TTL_S), *out = NULL;
    PyObject *bound = NULL, *slack_ns = NULL, *age = NULL, *last = NULL;
    if (times == NULL || !PyList_Check(times) || ttl_s == NULL) {
        PyErr_SetString(PyExc_TypeError, "a Resolution's times must be a list");
        goto done;
    }
    Py_INCREF(times);
    /* i = bisect_right(times, at_ns + int(slack_s * 1e9)) */
    long long at, t;
    double slack = PyFloat_CheckExact(slack_s) ? PyFloat_AS_DOUBLE(slack_s) * 1e9 : NAN;
    if (rc_small(at_ns, &at) && fabs(slack) < 1e18) /* then |at + int(slack)| < 2**63 */
        bound = PyLong_FromLongLong(at + (long long)slack);
    else {
        PyObject *scaled = PyNumber_Multiply(slack_s, rc_billion_float);
        slack_ns = scaled != NULL ? PyNumber_Long(scaled) : NULL;
        Py_XDECREF(scaled);
        bound = slack_ns != NULL ? PyNumber_Add(at_ns, slack_ns) : NULL;
    }
    Py_ssize_t i = bound != NULL ? rc_bisect_right(times, bound) : -1;
    if (i < 0)
        goto done_times;
    if (i == 0 || i > PyList_GET_SIZE(times)) {
        out = Py_NewRef(Py_None);
        goto done_times;
    }
    /* age_s = (at_ns - times[i - 1]) / 1e9; hit if age_s <= window_s or age_s <= hit.ttl_s */
    last = Py_NewRef(PyList_GET_ITEM(times, i - 1));
    double age_s;
    if (rc_small(at_ns, &at) && rc_small(last, &t))
        age_s = (double)(at - t) / 1e9; /* |at - t| < 2**63; the int's nearest double, as Python converts it */
    else {
        PyObject *d = PyNumber_Subtract(at_ns, last);
        age = d != NULL ? PyNumber_TrueDivide(d, rc_billion_float) : NULL;
        Py_XDECREF(d);
        if (age == NULL)
            goto done_times;
        age_s = PyFloat_AsDouble(age);
        if (age_s == -1.0 && PyErr_Occurred())
            goto done_times;
    }
    long long ttl;
    int recent;
    if (PyFloat_CheckExact(window_s) && rc_small(ttl_s, &ttl) && ttl < (1LL << 53) && ttl > -(1LL << 53))
        recent = age_s <= PyFloat_AS_DOUBLE(window_s) || age_s <= (double)ttl; /* exact: |ttl| < 2**53 */
    else
        recent = rc_recent_slow(age_s, window_s, ttl_s);
    if (recent >= 0)
        out = Py_NewRef(recent ? hit : Py_None);
done_times:
    Py_DECREF(times);
done:
    Py_XDECREF(bound);
    Py_XDECREF(slack_ns);
    Py_XDECREF(age);
    Py_XDECREF(last);
    Py_DECREF(hit);
    return out;
}

/* Called by the module's exec slot. */
static int rc_init(PyObject *module)
{
    static const struct {
        dnsw_attr *attr;
        const char *name;
    } attrs[] = {{&rc_attr_is_response, "is_response"}, {&rc_attr_answers, "answers"}, {&rc_attr_qname, "qname"},
                 {&rc_attr_timestamp_ns, "timestamp_ns"}, {&rc_attr_rtype, "rtype"}, {&rc_attr_data, "data"},
                 {&rc_attr_ttl, "ttl"}};
    for (size_t i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++)
        if (attrs[i].attr->name == NULL && (attrs[i].attr->name = PyUnicode_InternFromString(attrs[i].name)) == NULL)
            return -1;
    if (rc_second == NULL && (rc_second = PyLong_FromLong(1000000000L)) == NULL)
        return -1;
    if (rc_billion_float == NULL && (rc_billion_float = PyFloat_FromDouble(1e9)) == NULL)
        return -1;
    if (rc_default_slack == NULL && (rc_default_slack = PyFloat_FromDouble(2.0)) == NULL)
        return -1;
    if ((rc_cname == NULL && (rc_cname = PyLong_FromLong(5)) == NULL) || (rc_a == NULL && (rc_a = PyLong_FromLong(1)) == NULL)
        || (rc_aaaa == NULL && (rc_aaaa = PyLong_FromLong(28)) == NULL))
        return -1;
    return 0;
}
