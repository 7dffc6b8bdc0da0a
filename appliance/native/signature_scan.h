/*
 * The per-message loop of the signature layer's DNS scan (appliance/detection/signatures/matcher.py
 * _dns_scan) in C; included by dpi.c.
 *
 * A DNS flow carries 2 messages (a query and its answer) or, for tunnels and DGA bursts, 64; in Python each
 * message cost four attribute reads, four dict reads and the mask arithmetic in bytecode. Here the same
 * reads of the same dicts, per message, with `reported` the rules an earlier message of the flow matched:
 *     alive = type_memo[m.qtype] & (code_memo[m.rcode] if m.is_response else query_alive) & ~reported
 *     evaluated, holds = name_memo[m.qname]       (0 hits when m.qname is empty or alive is 0)
 *     hits  = holds & alive                       when alive & ~evaluated is 0
 * When a type or code read misses, `miss(flow, m, reported)` (Python: fills the tables) answers for the
 * message. When only the name read does (no entry, or one that lacks some alive rule), the rules missing are
 * evaluated by the generated matcher, `match(flow, m, wanted)` -> the wanted rules that hold, and the entry
 * grows (the memo emptied first when it holds `entries` names): sigscan_name_miss, matcher.py's name_miss. Every table is a Python dict, so names (attacker-chosen) are hashed with the keyed
 * SipHash of str; no C hash table. Masks stay Python ints (the number protocol): any number of rules.
 *
 * dns_first_hits(flow, messages: list, type_memo, code_memo, query_alive, name_memo, miss, match, entries)
 *     -> None when no message hit a rule; else [(new hit mask, message), ...]: each message that matched a
 *        rule no earlier message had matched, in message order.
 */

static PyObject *sigscan_names[4];  /* qname, qtype, rcode, is_response: interned at the first call */
static const char *const sigscan_name_texts[4] = {"qname", "qtype", "rcode", "is_response"};

/* The memo value under key, borrowed; NULL without an error when it is missing. */
static PyObject *sigscan_read(PyObject *memo, PyObject *key)
{
    if (!PyDict_Check(memo)) {
        PyErr_SetString(PyExc_TypeError, "dns_first_hits: memos must be dicts");
        return NULL;
    }
    return PyDict_GetItemWithError(memo, key);
}

/* One message's hits among the rules not reported yet (new reference), or Py_None when a type or code read
 * missed; NULL on an error. `unreported` is ~reported. When only the name read misses, *alive_out gets a new
 * reference to alive, and the result is Py_None. */
static PyObject *sigscan_message(PyObject *m, PyObject *type_memo, PyObject *code_memo, PyObject *query_alive,
                                 PyObject *name_memo, PyObject *unreported, PyObject **alive_out)
{
    PyObject *qname = PyObject_GetAttr(m, sigscan_names[0]);
    if (qname == NULL)
        return NULL;
    int named = PyObject_IsTrue(qname);
    if (named <= 0) {
        Py_DECREF(qname);
        return named < 0 ? NULL : PyLong_FromLong(0);  /* a message without a question is no record */
    }
    PyObject *result = NULL, *kind_code = NULL, *alive = NULL, *code = NULL, *rcode = NULL;
    PyObject *qtype = PyObject_GetAttr(m, sigscan_names[1]);
    if (qtype == NULL)
        goto done;
    PyObject *kind = sigscan_read(type_memo, qtype);
    Py_DECREF(qtype);
    if (kind == NULL)
        goto missed;
    Py_INCREF(kind);  /* a later read may run Python that empties the memo */
    PyObject *is_response = PyObject_GetAttr(m, sigscan_names[3]);
    int response = is_response == NULL ? -1 : PyObject_IsTrue(is_response);
    Py_XDECREF(is_response);
    if (response < 0) {
        Py_DECREF(kind);
        goto done;
    }
    if (response) {
        rcode = PyObject_GetAttr(m, sigscan_names[2]);
        code = rcode == NULL ? NULL : sigscan_read(code_memo, rcode);
        if (code == NULL) {
            Py_DECREF(kind);
            goto missed;
        }
    }
    else
        code = query_alive;
    kind_code = PyNumber_And(kind, code);
    Py_DECREF(kind);
    if (kind_code == NULL)
        goto done;
    alive = PyNumber_And(kind_code, unreported);
    if (alive == NULL)
        goto done;
    int any = PyObject_IsTrue(alive);
    if (any <= 0) {
        result = any < 0 ? NULL : PyLong_FromLong(0);
        goto done;
    }
    PyObject *entry = sigscan_read(name_memo, qname);
    if (entry == NULL)
        goto name_missed;
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 2) {
        PyErr_SetString(PyExc_TypeError, "dns_first_hits: name memo entries are (evaluated, holds)");
        goto done;
    }
    Py_INCREF(entry);
    PyObject *evaluated = PyTuple_GET_ITEM(entry, 0), *covered = PyNumber_And(alive, evaluated);
    int complete = covered == NULL ? -1 : PyObject_RichCompareBool(covered, alive, Py_EQ);
    Py_XDECREF(covered);
    if (complete > 0)
        result = PyNumber_And(PyTuple_GET_ITEM(entry, 1), alive);
    Py_DECREF(entry);
    if (complete == 0)
        goto name_missed;
    goto done;
name_missed:
    if (!PyErr_Occurred()) {
        *alive_out = Py_NewRef(alive);
        result = Py_NewRef(Py_None);
    }
    goto done;
missed:
    if (!PyErr_Occurred())
        result = Py_NewRef(Py_None);
done:
    Py_XDECREF(alive);
    Py_XDECREF(kind_code);
    Py_XDECREF(rcode);
    Py_DECREF(qname);
    return result;
}

/* The alive rules' name hits of message m when the name's entry lacks some of them (new reference). */
static PyObject *sigscan_name_miss(PyObject *flow, PyObject *m, PyObject *alive, PyObject *name_memo, PyObject *match,
                                   Py_ssize_t entries)
{
    PyObject *qname = PyObject_GetAttr(m, sigscan_names[0]);
    if (qname == NULL)
        return NULL;
    PyObject *result = NULL, *evaluated = NULL, *holds = NULL, *missing = NULL, *wanted = NULL, *found = NULL;
    PyObject *grown_evaluated = NULL, *grown_holds = NULL, *entry = sigscan_read(name_memo, qname);
    if (entry == NULL && PyErr_Occurred())
        goto done;
    if (entry != NULL && (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 2)) {
        PyErr_SetString(PyExc_TypeError, "dns_first_hits: name memo entries are (evaluated, holds)");
        goto done;
    }
    evaluated = entry != NULL ? Py_NewRef(PyTuple_GET_ITEM(entry, 0)) : PyLong_FromLong(0);
    holds = entry != NULL ? Py_NewRef(PyTuple_GET_ITEM(entry, 1)) : PyLong_FromLong(0);
    if ((missing = PyNumber_Invert(evaluated)) == NULL || (wanted = PyNumber_And(alive, missing)) == NULL)
        goto done;
    /* The matcher tests the wanted rules' every condition: their type and code ones hold (they are alive),
     * so what it finds is which of them the name satisfies. */
    if ((found = PyObject_CallFunctionObjArgs(match, flow, m, wanted, NULL)) == NULL)
        goto done;
    if ((grown_evaluated = PyNumber_Or(evaluated, wanted)) == NULL || (grown_holds = PyNumber_Or(holds, found)) == NULL)
        goto done;
    if (PyDict_GET_SIZE(name_memo) >= entries)
        PyDict_Clear(name_memo);
    PyObject *pair = PyTuple_Pack(2, grown_evaluated, grown_holds);
    if (pair == NULL)
        goto done;
    int stored = PyDict_SetItem(name_memo, qname, pair);
    Py_DECREF(pair);
    if (stored == 0)
        result = PyNumber_And(grown_holds, alive);
done:
    Py_XDECREF(grown_holds);
    Py_XDECREF(grown_evaluated);
    Py_XDECREF(found);
    Py_XDECREF(wanted);
    Py_XDECREF(missing);
    Py_XDECREF(holds);
    Py_XDECREF(evaluated);
    Py_DECREF(qname);
    return result;
}

static PyObject *dns_first_hits(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "dns_first_hits takes 9 arguments");
        return NULL;
    }
    PyObject *flow = args[0], *messages = args[1], *miss = args[6], *match = args[7];
    Py_ssize_t entries = PyLong_AsSsize_t(args[8]);
    if (entries == -1 && PyErr_Occurred())
        return NULL;
    if (!PyDict_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "dns_first_hits: memos must be dicts");
        return NULL;
    }
    if (!PyList_Check(messages)) {
        PyErr_SetString(PyExc_TypeError, "dns_first_hits: messages must be a list");
        return NULL;
    }
    for (int i = 0; i < 4; i++) {
        if (sigscan_names[i] == NULL && (sigscan_names[i] = PyUnicode_InternFromString(sigscan_name_texts[i])) == NULL)
            return NULL;
    }
    PyObject *out = NULL;  /* made at the first hit */
    PyObject *reported = PyLong_FromLong(0), *unreported = PyLong_FromLong(-1);
    if (reported == NULL || unreported == NULL)
        goto failed;
    /* The list is read by index each time: a memo read or `miss` may run Python that changes it. */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(messages); i++) {
        PyObject *m = Py_NewRef(PyList_GET_ITEM(messages, i));
        PyObject *alive = NULL;
        PyObject *hits = sigscan_message(m, args[2], args[3], args[4], args[5], unreported, &alive);
        if (hits == Py_None) {
            Py_DECREF(hits);
            if (alive != NULL)
                hits = sigscan_name_miss(flow, m, alive, args[5], match, entries);
            else
                hits = PyObject_CallFunctionObjArgs(miss, flow, m, reported, NULL);
        }
        Py_XDECREF(alive);
        if (hits == NULL) {
            Py_DECREF(m);
            goto failed;
        }
        PyObject *fresh = PyNumber_And(hits, unreported);  /* the memo's hits were among alive: already new */
        Py_DECREF(hits);
        int any = fresh == NULL ? -1 : PyObject_IsTrue(fresh);
        if (any > 0) {
            PyObject *grown = PyNumber_Or(reported, fresh);
            PyObject *inverted = grown == NULL ? NULL : PyNumber_Invert(grown);
            PyObject *pair = inverted == NULL ? NULL : PyTuple_Pack(2, fresh, m);
            if (out == NULL && pair != NULL)
                out = PyList_New(0);
            if (pair == NULL || out == NULL || PyList_Append(out, pair) < 0)
                any = -1;
            Py_XDECREF(pair);
            Py_SETREF(reported, grown);  /* NULL on a failure: reported is not read again then */
            Py_SETREF(unreported, inverted);
        }
        Py_XDECREF(fresh);
        Py_DECREF(m);
        if (any < 0)
            goto failed;
    }
    Py_DECREF(reported);
    Py_DECREF(unreported);
    if (out == NULL)
        Py_RETURN_NONE;
    return out;
failed:
    Py_XDECREF(reported);
    Py_XDECREF(unreported);
    Py_XDECREF(out);
    return NULL;
}
