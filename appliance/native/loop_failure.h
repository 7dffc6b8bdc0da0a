/* The loops over a batch of flows (pipeline.AnalysisLayer.analyze_many in C: BehaviourCore.analyze_many,
 * dpi_loop) hand a flow whose analysis raised an Exception to `failed(flow)`, with that exception as the one being
 * handled (what `except` gives Python: a logger's exception() reads it), and go on; without `failed`, or for
 * anything that is not an Exception, the error is the caller's. Included by dpi.c. */

/* Called with the flow's error set: 0 when `failed` took it (the error cleared), -1 with the error (the caller's, or
 * one `failed` raised) set. */
static int loop_hand_failure(PyObject *failed, PyObject *flow)
{
    if (failed == Py_None || !PyErr_ExceptionMatches(PyExc_Exception))
        return -1;
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback != NULL)
        PyException_SetTraceback(value, traceback);
    PyObject *outer = PyErr_GetHandledException();
    PyErr_SetHandledException(value);
    PyObject *done = PyObject_CallOneArg(failed, flow);
    PyErr_SetHandledException(outer);
    Py_XDECREF(outer);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    if (done == NULL)
        return -1;
    Py_DECREF(done);
    return 0;
}
