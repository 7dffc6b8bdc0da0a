/* correlation_sums: the loop of Correlator._judge over a group's detections (appliance/detection/correlation.py).
 *
 * A group is an (agent, indicator)'s detections within the window, judged again each time a flow adds to it: for a
 * beacon or an HTTP covert channel that is every flow, over a group of tens. In Python the loop was a third of
 * correlation's time (2026-12-02, docs/figures.md), and correlation is most of what the last agents' frames cost the
 * analysis process at the end of a pass. This is the same loop with the same float operations in the same order
 * (held equal to the Python loop, and to the reference `combine`, by tests/appliance/detection/test_correlation.py):
 *
 *     for d in group:
 *         p = d.confidence * 0.5 ** (max(now_ns - d.last_ns, 0) / half_life_ns)
 *         remaining *= 1.0 - min(max(p, 0.0), 1.0)
 *         detectors.add(d.detector)
 *         weights[d.category] = weights.get(d.category, 0.0) + p
 *         if d.category not in leads or p > leads[d.category][1]: leads[d.category] = (d, p)
 *         if severity is None or d.severity > severity: severity = d.severity
 *
 * correlation_sums(group, now_ns, half_life_ns) -> (remaining, detectors, weights, leads, severity). The Python loop
 * stays in correlation.py for what this declines (TypeError: a confidence that is not a float, an age past 2**53 ns, a
 * half-life not above zero; ValueError, as dnsw_timestamp says: a timestamp outside [0, 2**62)), so nothing a detection
 * or a config may hold changes what a group is judged to be.
 */

#ifndef CORRELATION_SUMS_H
#define CORRELATION_SUMS_H

#include <math.h>

#define CS_EXACT ((long long)1 << 53)

static dnsw_attr cs_attr_confidence, cs_attr_last_ns, cs_attr_detector, cs_attr_category, cs_attr_severity;

static int cs_init(void)
{
    return dnsw_intern(&cs_attr_confidence.name, "confidence") && dnsw_intern(&cs_attr_last_ns.name, "last_ns")
        && dnsw_intern(&cs_attr_detector.name, "detector") && dnsw_intern(&cs_attr_category.name, "category")
        && dnsw_intern(&cs_attr_severity.name, "severity") ? 0 : -1;
}

/* One detection into the sums; -1 with an exception (TypeError: declined, the caller takes the Python loop). */
static int cs_add(PyObject *d, long long now_ns, double half_life_ns, double *remaining, PyObject *detectors,
                  PyObject *weights, PyObject *leads, PyObject **severity)
{
    int rc = -1;
    PyObject *confidence = NULL, *detector = NULL, *category = NULL, *sev = NULL, *lead = NULL;
    long long last_ns;
    if ((confidence = dnsw_get(d, &cs_attr_confidence)) == NULL
        || dnsw_timestamp(dnsw_get(d, &cs_attr_last_ns), "last_ns", &last_ns) < 0 /* [0, 2**62): no overflow below */
        || (detector = dnsw_get(d, &cs_attr_detector)) == NULL || (category = dnsw_get(d, &cs_attr_category)) == NULL
        || (sev = dnsw_get(d, &cs_attr_severity)) == NULL)
        goto done;
    if (!PyFloat_CheckExact(confidence)) {
        PyErr_SetString(PyExc_TypeError, "correlation_sums: a confidence that is not a float");
        goto done;
    }
    long long age = now_ns - last_ns;
    if (age < 0)
        age = 0;
    if (age > CS_EXACT) { /* a float's exact integers end here: past it Python's int / int rounds otherwise */
        PyErr_SetString(PyExc_TypeError, "correlation_sums: an age past 2**53 ns");
        goto done;
    }
    /* int / float: the int made a float first (exact below 2**53, rounded to nearest as Python rounds it above) */
    double p = PyFloat_AS_DOUBLE(confidence) * pow(0.5, (double)age / half_life_ns);
    double clamped = p;  /* min(max(p, 0.0), 1.0): the first argument unless the second is strictly beyond it */
    if (0.0 > clamped)
        clamped = 0.0;
    if (1.0 < clamped)
        clamped = 1.0;
    *remaining *= 1.0 - clamped;
    if (PySet_Add(detectors, detector) < 0)
        goto done;
    PyObject *weight = PyDict_GetItemWithError(weights, category); /* borrowed */
    if (weight == NULL && PyErr_Occurred())
        goto done;
    PyObject *sum = PyFloat_FromDouble((weight != NULL ? PyFloat_AS_DOUBLE(weight) : 0.0) + p);
    if (sum == NULL || PyDict_SetItem(weights, category, sum) < 0) {
        Py_XDECREF(sum);
        goto done;
    }
    Py_DECREF(sum);
    PyObject *best = PyDict_GetItemWithError(leads, category); /* borrowed: (detection, p) */
    if (best == NULL && PyErr_Occurred())
        goto done;
    if (best == NULL || p > PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(best, 1))) {
        PyObject *pf = PyFloat_FromDouble(p);
        if (pf == NULL || (lead = PyTuple_Pack(2, d, pf)) == NULL) {
            Py_XDECREF(pf);
            goto done;
        }
        Py_DECREF(pf);
        if (PyDict_SetItem(leads, category, lead) < 0)
            goto done;
    }
    if (*severity == Py_None) {
        Py_SETREF(*severity, Py_NewRef(sev));
    } else {
        int greater = PyObject_RichCompareBool(sev, *severity, Py_GT);
        if (greater < 0)
            goto done;
        if (greater)
            Py_SETREF(*severity, Py_NewRef(sev));
    }
    rc = 0;
done:
    Py_XDECREF(confidence);
    Py_XDECREF(detector);
    Py_XDECREF(category);
    Py_XDECREF(sev);
    Py_XDECREF(lead);
    return rc;
}

static PyObject *correlation_sums(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "correlation_sums(group, now_ns, half_life_ns)");
        return NULL;
    }
    long long now_ns;
    if (dnsw_timestamp(Py_NewRef(args[1]), "now_ns", &now_ns) < 0)
        return NULL;
    if (!PyFloat_Check(args[2]) && !PyLong_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "correlation_sums: half_life_ns must be a float or an int");
        return NULL;
    }
    double half_life_ns = PyFloat_AsDouble(args[2]);
    if (half_life_ns == -1.0 && PyErr_Occurred())
        return NULL;
    if (!(half_life_ns > 0.0)) { /* zero, negative or NaN: Python's division says what it says (ZeroDivisionError) */
        PyErr_SetString(PyExc_TypeError, "correlation_sums: half_life_ns must be above zero");
        return NULL;
    }
    if (PyLong_Check(args[2]) && fabs(half_life_ns) > (double)CS_EXACT) {
        PyErr_SetString(PyExc_TypeError, "correlation_sums: an int half_life_ns past 2**53");
        return NULL;
    }
    PyObject *iter = PyObject_GetIter(args[0]);
    if (iter == NULL)
        return NULL;
    double remaining = 1.0;
    PyObject *detectors = PySet_New(NULL), *weights = PyDict_New(), *leads = PyDict_New(), *severity = Py_NewRef(Py_None);
    PyObject *d = NULL, *out = NULL;
    if (detectors == NULL || weights == NULL || leads == NULL)
        goto done;
    while ((d = PyIter_Next(iter)) != NULL) {
        int rc = cs_add(d, now_ns, half_life_ns, &remaining, detectors, weights, leads, &severity);
        Py_DECREF(d);
        if (rc < 0)
            goto done;
    }
    if (PyErr_Occurred())
        goto done;
    out = Py_BuildValue("(dOOOO)", remaining, detectors, weights, leads, severity);
done:
    Py_DECREF(iter);
    Py_XDECREF(detectors);
    Py_XDECREF(weights);
    Py_XDECREF(leads);
    Py_DECREF(severity);
    return out;
}

#endif
