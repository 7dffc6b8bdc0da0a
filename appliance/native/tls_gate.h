/*
 * The TLS detector's first half in C (TlsAnalyzer.analyze, appliance/detection/dpi/tls.py): whether a TCP flow can
 * raise anything at all. Included by dpi.c after resolver_cache.h, whose lookup it calls.
 *
 * Every TCP flow asks it (4,369 of the bench corpus's 7,907 flows), and nearly every one is quiet: its address
 * resolved by the agent, its SNI among the names, its fingerprint seen on the agent before, no chain in clear. In
 * Python those tests, the fingerprint's prevalence (FingerprintPrevalence.observe) and the resolver's lookup were
 * 1.3-2 us of attribute reads and calls per flow; here one call decides, with the prevalence's dicts and the
 * resolver's maps still the Python objects they were (the rest of the detector and the tests read them).
 *
 * tls_gate(flow, tls, hello, state) -> None | (rare, rarity, resolution)
 *     None: nothing to raise (what analyze returned [] for, the prevalence observed as Python did). Otherwise
 *     what the rest of analyze needs: rare (bool), rarity (FingerprintPrevalence.observe's answer: None or
 *     (other agents, seconds watched, handshakes before)) and the resolution (or None).
 *     state: (TCP, ports, agents_of, watched, max_fingerprints, max_agents, by_ip, maker, window_s,
 *     rare_max_fleet_agents, rare_learning_s, rare_min_handshakes), built by the detector once per config.
 * tests/appliance/detection/tls_reference.py keeps the Python it replaces (gate_reference), which the tests hold it to.
 */

enum { TG_TCP, TG_PORTS, TG_AGENTS_OF, TG_WATCHED, TG_MAX_FP, TG_MAX_AGENTS, TG_BY_IP, TG_MAKER, TG_WINDOW,
       TG_RARE_MAX, TG_RARE_LEARNING, TG_RARE_MIN, TG_STATE };

static dnsw_attr tg_attr_transport, tg_attr_remote_port, tg_attr_remote_ip, tg_attr_ja4, tg_attr_certificates,
    tg_attr_sni;
static PyObject *tg_zero, *tg_one, *tg_second; /* 0, 1, 1_000_000_000 */

static int tg_init(void)
{
    if (!dnsw_intern(&tg_attr_transport.name, "transport") || !dnsw_intern(&tg_attr_remote_port.name, "remote_port")
        || !dnsw_intern(&tg_attr_remote_ip.name, "remote_ip") || !dnsw_intern(&tg_attr_ja4.name, "ja4")
        || !dnsw_intern(&tg_attr_certificates.name, "certificates") || !dnsw_intern(&tg_attr_sni.name, "sni"))
        return -1;
    tg_zero = PyLong_FromLong(0);
    tg_one = PyLong_FromLong(1);
    tg_second = PyLong_FromLong(1000000000L);
    return tg_zero == NULL || tg_one == NULL || tg_second == NULL ? -1 : 0;
}

/* Room for one more key in a prevalence map (FingerprintPrevalence: `if len(d) >= max: del d[next(iter(d))]`), by
 * resolver_cache.h's rc_bound (0, -1 on error). */
static int tg_room(PyObject *dict, PyObject *max)
{
    Py_ssize_t limit = PyLong_AsSsize_t(max);
    if (limit == -1 && PyErr_Occurred())
        return -1;
    return rc_bound(dict, limit > 0 ? limit - 1 : 0);
}

/* FingerprintPrevalence.observe(agent_id, fingerprint, now_ns): a new reference to None or the tuple, NULL on error. */
static PyObject *tg_observe(PyObject *const *state, PyObject *agent_id, PyObject *fingerprint, PyObject *now_ns)
{
    PyObject *agents_of = state[TG_AGENTS_OF], *watched_of = state[TG_WATCHED];
    PyObject *watched = Py_XNewRef(PyDict_GetItemWithError(watched_of, agent_id));
    if (watched == NULL) {
        if (PyErr_Occurred() || tg_room(watched_of, state[TG_MAX_FP]) < 0)
            return NULL;
        watched = PyList_New(2);
        if (watched == NULL)
            return NULL;
        PyList_SET_ITEM(watched, 0, Py_NewRef(now_ns));
        PyList_SET_ITEM(watched, 1, Py_NewRef(tg_zero));
        if (PyDict_SetItem(watched_of, agent_id, watched) < 0) {
            Py_DECREF(watched);
            return NULL;
        }
    } else if (!PyList_Check(watched) || PyList_GET_SIZE(watched) != 2) {
        Py_DECREF(watched);
        PyErr_SetString(PyExc_TypeError, "an agent's watch is a [first ns, handshakes] list");
        return NULL;
    }
    PyObject *out = NULL, *agents = NULL, *handshakes = Py_NewRef(PyList_GET_ITEM(watched, 1));
    PyObject *more = PyNumber_Add(handshakes, tg_one);
    if (more == NULL)
        goto done;
    PyList_SetItem(watched, 1, more); /* steals */
    agents = Py_XNewRef(PyDict_GetItemWithError(agents_of, fingerprint));
    if (agents == NULL) {
        if (PyErr_Occurred() || tg_room(agents_of, state[TG_MAX_FP]) < 0)
            goto done;
        agents = PySet_New(NULL);
        if (agents == NULL || PyDict_SetItem(agents_of, fingerprint, agents) < 0)
            goto done;
    } else {
        int seen = PySet_Contains(agents, agent_id);
        if (seen != 0) { /* seen before: nothing to judge (or an error) */
            if (seen > 0)
                out = Py_NewRef(Py_None);
            goto done;
        }
    }
    PyObject *others = PyLong_FromSsize_t(PySet_GET_SIZE(agents));
    if (others == NULL)
        goto done;
    int room = PyObject_RichCompareBool(others, state[TG_MAX_AGENTS], Py_LT);
    if (room < 0 || (room > 0 && PySet_Add(agents, agent_id) < 0)) {
        Py_DECREF(others);
        goto done;
    }
    /* max(now_ns - watched[0], 0) / _NS, with Python's numbers (the rare path: a fingerprint new to this agent) */
    PyObject *since = PyNumber_Subtract(now_ns, PyList_GET_ITEM(watched, 0));
    int negative = since != NULL ? PyObject_RichCompareBool(since, tg_zero, Py_LT) : -1;
    PyObject *seconds = negative < 0 ? NULL : PyNumber_TrueDivide(negative ? tg_zero : since, tg_second);
    Py_XDECREF(since);
    if (seconds == NULL) {
        Py_DECREF(others);
        goto done;
    }
    out = PyTuple_Pack(3, others, seconds, handshakes);
    Py_DECREF(others);
    Py_DECREF(seconds);
done:
    Py_XDECREF(agents);
    Py_DECREF(handshakes);
    Py_DECREF(watched);
    return out;
}

/* rarity's three against the config: others <= rare_max_fleet_agents and watched_s >= rare_learning_s and
 * handshakes >= rare_min_handshakes (1, 0, -1 on error). */
static int tg_rare(PyObject *const *state, PyObject *rarity)
{
    int r = PyObject_RichCompareBool(PyTuple_GET_ITEM(rarity, 0), state[TG_RARE_MAX], Py_LE);
    if (r > 0)
        r = PyObject_RichCompareBool(PyTuple_GET_ITEM(rarity, 1), state[TG_RARE_LEARNING], Py_GE);
    if (r > 0)
        r = PyObject_RichCompareBool(PyTuple_GET_ITEM(rarity, 2), state[TG_RARE_MIN], Py_GE);
    return r;
}

static PyObject *tls_gate(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyTuple_CheckExact(args[3]) || PyTuple_GET_SIZE(args[3]) != TG_STATE) {
        PyErr_SetString(PyExc_TypeError, "tls_gate(flow, tls, hello, state): state is a tuple of 12");
        return NULL;
    }
    PyObject *flow = args[0], *tls = args[1], *hello = args[2];
    PyObject *const *state = &PyTuple_GET_ITEM(args[3], 0);
    PyObject *agent_id = NULL, *first_ns = NULL, *ja4 = NULL, *rarity = NULL, *resolution = NULL, *sni = NULL;
    PyObject *out = NULL;
    /* if flow.transport is not _TCP or flow.packets_out == 0: return [] */
    PyObject *value = dnsw_get(flow, &tg_attr_transport);
    if (value == NULL)
        return NULL;
    int tcp = value == state[TG_TCP];
    Py_DECREF(value);
    if (!tcp)
        Py_RETURN_NONE;
    value = dnsw_get(flow, &dnsw_attr_packets_out);
    int none_out = value != NULL ? PyObject_RichCompareBool(value, tg_zero, Py_EQ) : -1;
    Py_XDECREF(value);
    if (none_out != 0)
        return none_out < 0 ? NULL : Py_NewRef(Py_None);
    int rare = 0;
    if (tls == Py_None) { /* no handshake read: judged only on a TLS port */
        value = dnsw_get(flow, &tg_attr_remote_port);
        int on_port = value != NULL ? PySequence_Contains(state[TG_PORTS], value) : -1;
        Py_XDECREF(value);
        if (on_port <= 0)
            return on_port < 0 ? NULL : Py_NewRef(Py_None);
    }
    if ((agent_id = dnsw_get(flow, &dnsw_attr_agent_id)) == NULL || (first_ns = dnsw_get(flow, &dnsw_attr_first_ns)) == NULL)
        goto done;
    if (tls != Py_None) {
        if ((ja4 = dnsw_get(tls, &tg_attr_ja4)) == NULL)
            goto done;
        int any = PyObject_IsTrue(ja4);
        if (any < 0)
            goto done;
        if (any) {
            if ((rarity = tg_observe(state, agent_id, ja4, first_ns)) == NULL)
                goto done;
            if (rarity != Py_None && (rare = tg_rare(state, rarity)) < 0)
                goto done;
        }
    }
    if (hello == Py_None)
        sni = PyUnicode_FromStringAndSize("", 0);
    else
        sni = dnsw_get(hello, &tg_attr_sni);
    if (sni == NULL)
        goto done;
    value = dnsw_get(flow, &tg_attr_remote_ip);
    if (value == NULL)
        goto done;
    PyObject *lookup[6] = {state[TG_BY_IP], state[TG_MAKER], agent_id, value, first_ns, state[TG_WINDOW]};
    resolution = resolver_lookup(module, lookup, 6);
    Py_DECREF(value);
    if (resolution == NULL)
        goto done;
    /* Quiet: resolved, not rare, no chain in clear, its SNI (if any) among the names. */
    if (resolution != Py_None && !rare) {
        int chain = 0;
        if (tls != Py_None) {
            value = dnsw_get(tls, &tg_attr_certificates);
            chain = value != NULL ? PyObject_IsTrue(value) : -1;
            Py_XDECREF(value);
            if (chain < 0)
                goto done;
        }
        if (!chain) {
            int named = PyObject_IsTrue(sni);
            if (named > 0) {
                PyObject *names = RC_SLOT((SlotMaker *)state[TG_MAKER], resolution, RC_NAMES);
                named = names != NULL ? PySequence_Contains(names, sni) : -1;
                if (named >= 0)
                    named = !named; /* named now says: an SNI the names lack */
            }
            if (named < 0)
                goto done;
            if (!named) {
                out = Py_NewRef(Py_None);
                goto done;
            }
        }
    }
    out = PyTuple_Pack(3, rare ? Py_True : Py_False, rarity != NULL ? rarity : Py_None, resolution);
done:
    Py_XDECREF(agent_id);
    Py_XDECREF(first_ns);
    Py_XDECREF(ja4);
    Py_XDECREF(rarity);
    Py_XDECREF(resolution);
    Py_XDECREF(sni);
    return out;
}
