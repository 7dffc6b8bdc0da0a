/* dpi_loop: the DPI layer's loop over a batch of flows (appliance/detection/dpi/layer.py DpiLayer.analyze_many) in C.
 * Included by dpi.c after facts_memo.h.
 *
 * Most flows raise nothing, and for them the layer's work is all in C already (the DNS and DGA scans, a TCP flow's
 * facts and the TLS gate); what the loop cost on top was Python's: a frame's worth of attribute reads, compares and
 * calls per flow. Here the loop calls those parts itself, in the order the Python loop did, and calls back into
 * Python, `lead(kind, flow, a, b)`, only where a judge or a Python analyzer must look, at once (a judge reads the
 * state the flow's own scan left, before the next flow's scan changes it):
 *
 *   TCP:  LEAD_TCP_DNS (flow, None, None) first when flow.dns holds messages (DNS over TCP);
 *         facts = facts_of(flow); gate = tls_gate(flow, facts.tls, facts.client_hello, gate_state);
 *         LEAD_TCP (flow, facts, gate) when gate is not None or facts.http_requests holds any
 *   UDP:  only when flow.dns holds messages and flow.remote_port == 53:
 *         LEAD_DNS (flow, scanned, None) when dns_scan(flow) is not None, LEAD_DNS_OUT when it raised ValueError;
 *         then LEAD_DGA / LEAD_DGA_OUT from dga_scan(flow) alike
 *   ICMP: LEAD_ICMP (flow, None, None)
 *   else: nothing
 *
 * Each lead returns the detections it found (a list) or None; a flow's are added up in that order (`found + judged`,
 * a new list, as the Python loop did). A flow on which anything raises an Exception goes to failed(flow)
 * (loop_failure.h) and its partial findings are dropped, as in the Python loop.
 *
 * dpi_loop(flows: list, failed, parts, lead) -> [(index, detections)] of the flows with any;
 *     parts = (tcp, udp, icmp, facts_of, tls_gate, gate_state, dns_scan, dga_scan)
 */

enum { LEAD_TCP_DNS, LEAD_TCP, LEAD_DNS, LEAD_DNS_OUT, LEAD_DGA, LEAD_DGA_OUT, LEAD_ICMP, LEAD_KINDS };
enum { DL_TCP, DL_UDP, DL_ICMP, DL_FACTS_OF, DL_TLS_GATE, DL_GATE_STATE, DL_DNS_SCAN, DL_DGA_SCAN, DL_PARTS };

static dnsw_attr dl_attr_transport, dl_attr_dns, dl_attr_remote_port, dl_attr_tls, dl_attr_client_hello,
    dl_attr_http_requests;
static PyObject *dl_kinds[LEAD_KINDS], *dl_port_53;

static int dl_init(void)
{
    if (!dnsw_intern(&dl_attr_transport.name, "transport") || !dnsw_intern(&dl_attr_dns.name, "dns")
        || !dnsw_intern(&dl_attr_remote_port.name, "remote_port") || !dnsw_intern(&dl_attr_tls.name, "tls")
        || !dnsw_intern(&dl_attr_client_hello.name, "client_hello")
        || !dnsw_intern(&dl_attr_http_requests.name, "http_requests"))
        return -1;
    for (int i = 0; i < LEAD_KINDS; i++)
        if (dl_kinds[i] == NULL && (dl_kinds[i] = PyLong_FromLong(i)) == NULL)
            return -1;
    if (dl_port_53 == NULL && (dl_port_53 = PyLong_FromLong(53)) == NULL)
        return -1;
    return 0;
}

/* Whether obj.<attr> is true: 1, 0, or -1 with an exception. */
static int dl_true(PyObject *obj, dnsw_attr *attr)
{
    PyObject *value = dnsw_get(obj, attr);
    if (value == NULL)
        return -1;
    int truth = PyObject_IsTrue(value);
    Py_DECREF(value);
    return truth;
}

/* lead(kind, flow, a, b)'s answer added to *found (`*found = *found + judged if *found else judged`); 0, or -1 with
 * an exception. */
static int dl_lead(PyObject *lead, int kind, PyObject *flow, PyObject *a, PyObject *b, PyObject **found)
{
    PyObject *args[4] = {dl_kinds[kind], flow, a, b};
    PyObject *judged = PyObject_Vectorcall(lead, args, 4, NULL);
    if (judged == NULL)
        return -1;
    int some = *found != NULL ? PyObject_IsTrue(*found) : 0;
    if (some < 0) {
        Py_DECREF(judged);
        return -1;
    }
    if (!some) {
        Py_XSETREF(*found, judged);
        return 0;
    }
    PyObject *sum = PyNumber_Add(*found, judged);
    Py_DECREF(judged);
    if (sum == NULL)
        return -1;
    Py_SETREF(*found, sum);
    return 0;
}

/* A scan's answer led to the Python side: the scan's own kind when it found something due, `out` when it raised
 * ValueError (the flow's timestamps out of range: counted and skipped there), nothing when it returned None. */
static int dl_scan(PyObject *scan, PyObject *lead, int kind, int out, PyObject *flow, PyObject **found)
{
    PyObject *scanned = PyObject_CallOneArg(scan, flow);
    if (scanned == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_ValueError))
            return -1;
        PyErr_Clear();
        return dl_lead(lead, out, flow, Py_None, Py_None, found);
    }
    int rc = scanned == Py_None ? 0 : dl_lead(lead, kind, flow, scanned, Py_None, found);
    Py_DECREF(scanned);
    return rc;
}

/* One TCP flow: DNS over TCP, the facts, the gate. */
static int dl_tcp(PyObject *const *parts, PyObject *lead, PyObject *flow, PyObject **found)
{
    int dns = dl_true(flow, &dl_attr_dns);
    if (dns < 0 || (dns && dl_lead(lead, LEAD_TCP_DNS, flow, Py_None, Py_None, found) < 0))
        return -1;
    PyObject *facts = PyObject_CallOneArg(parts[DL_FACTS_OF], flow), *tls = NULL, *hello = NULL, *gate = NULL;
    int rc = -1;
    if (facts == NULL || (tls = dnsw_get(facts, &dl_attr_tls)) == NULL
        || (hello = dnsw_get(facts, &dl_attr_client_hello)) == NULL)
        goto done;
    PyObject *args[4] = {flow, tls, hello, parts[DL_GATE_STATE]};
    if ((gate = PyObject_Vectorcall(parts[DL_TLS_GATE], args, 4, NULL)) == NULL)
        goto done;
    int http = gate == Py_None ? dl_true(facts, &dl_attr_http_requests) : 1;
    if (http < 0)
        goto done;
    rc = http ? dl_lead(lead, LEAD_TCP, flow, facts, gate, found) : 0;
done:
    Py_XDECREF(facts);
    Py_XDECREF(tls);
    Py_XDECREF(hello);
    Py_XDECREF(gate);
    return rc;
}

/* One UDP flow: DNS to port 53 only. */
static int dl_udp(PyObject *const *parts, PyObject *lead, PyObject *flow, PyObject **found)
{
    int dns = dl_true(flow, &dl_attr_dns);
    if (dns <= 0)
        return dns;
    PyObject *port = dnsw_get(flow, &dl_attr_remote_port);
    if (port == NULL)
        return -1;
    int other = PyObject_RichCompareBool(port, dl_port_53, Py_NE);
    Py_DECREF(port);
    if (other != 0)
        return other < 0 ? -1 : 0;
    if (dl_scan(parts[DL_DNS_SCAN], lead, LEAD_DNS, LEAD_DNS_OUT, flow, found) < 0)
        return -1;
    return dl_scan(parts[DL_DGA_SCAN], lead, LEAD_DGA, LEAD_DGA_OUT, flow, found);
}

static PyObject *dpi_loop(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyList_Check(args[0]) || !PyTuple_CheckExact(args[2]) || PyTuple_GET_SIZE(args[2]) != DL_PARTS) {
        PyErr_SetString(PyExc_TypeError, "dpi_loop(flows: list, failed, parts: tuple of 8, lead)");
        return NULL;
    }
    PyObject *flows = args[0], *failed = args[1], *lead = args[3];
    PyObject *const *parts = &PyTuple_GET_ITEM(args[2], 0);
    PyObject *flagged = PyList_New(0);
    if (flagged == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(flows); i++) { /* the size read again: failed() may change the list */
        PyObject *flow = Py_NewRef(PyList_GET_ITEM(flows, i)), *found = NULL;
        PyObject *transport = dnsw_get(flow, &dl_attr_transport);
        int rc = transport == NULL ? -1
                 : transport == parts[DL_TCP] ? dl_tcp(parts, lead, flow, &found)
                 : transport == parts[DL_UDP] ? dl_udp(parts, lead, flow, &found)
                 : transport == parts[DL_ICMP] ? dl_lead(lead, LEAD_ICMP, flow, Py_None, Py_None, &found)
                 : 0;
        Py_XDECREF(transport);
        int some = rc < 0 || found == NULL ? 0 : PyObject_IsTrue(found);
        if (rc < 0 || some < 0) {
            Py_CLEAR(found);
            rc = loop_hand_failure(failed, flow);
        } else if (some) {
            PyObject *pair = dnsw_pair(PyLong_FromSsize_t(i), Py_NewRef(found));
            rc = pair == NULL || PyList_Append(flagged, pair) < 0 ? -1 : 0;
            Py_XDECREF(pair);
        }
        Py_XDECREF(found);
        Py_DECREF(flow);
        if (rc < 0) {
            Py_DECREF(flagged);
            return NULL;
        }
    }
    return flagged;
}
