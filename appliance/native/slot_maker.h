/* SlotMaker: builds instances of a slotted dataclass by storing their fields straight into the slots.
 *
 * Included by fastpath.c (module appliance.native.fastpath) and dpi.c (appliance.native.dpi, which defines
 * SLOT_MAKER_TYPE_NAME first: sample_facts makes the TLS hellos and metadata with it). The record decoder makes a FlowRecord, its
 * DnsMessages and a Packet per payload sample for every flow the analysis process reads; calling the classes
 * ran the dataclass-generated __init__, one Python attribute store per field, and that was most of the
 * decoder's time (about 2.5 of its 3.7 us per flow on the bench corpus). A maker does what that __init__
 * does for a class whose __init__ only assigns its fields: allocate, then set each slot.
 *
 * What a maker may be built for is checked when it is built, not assumed:
 * - every name is a writable object slot (a member descriptor of type T_OBJECT_EX) of the class itself;
 * - the names cover every object slot of the class and its bases, each once (no slot is left empty);
 * - the class has no __post_init__ (a dataclass would call it) and no instance dict;
 * - defaults of the trailing fields are immutable (None, bool, int, float, str, bytes): the same object goes
 *   into every instance, where the dataclass would have made a new one from a default_factory.
 * Python code asserts the rest (that the class is a dataclass with slots and no custom __init__:
 * appliance/flows/record_codec.py); the tests hold a maker's objects equal to the class's own
 * (tests/appliance/native/test_slot_maker.py).
 */

#ifndef SLOT_MAKER_TYPE_NAME
#define SLOT_MAKER_TYPE_NAME "appliance.native.fastpath.SlotMaker"
#endif

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyTypeObject *cls;
    Py_ssize_t nargs;    /* fields given positionally at each call */
    Py_ssize_t nslots;   /* all fields: nargs + len(defaults) */
    Py_ssize_t *offsets; /* nslots offsets into the instance */
    PyObject *defaults;  /* tuple of the last nslots - nargs fields' values */
    int dense;           /* the slots fill the whole instance: allocated unzeroed, tracked once filled */
} SlotMaker;

static PyTypeObject SlotMakerType;

/* A new instance, its slots not set yet. A dense class's instance comes neither zeroed (every byte past the
 * header is a slot about to be set) nor tracked by the collector (slot_maker_fill tracks it once it is filled):
 * tp_alloc zeroed it first, a tenth of the record decoder's time. */
static PyObject *slot_maker_alloc(SlotMaker *self)
{
    return self->dense ? PyObject_GC_New(PyObject, self->cls) : self->cls->tp_alloc(self->cls, 0);
}

/* Set the slots of `obj` (from slot_maker_alloc) to items[0..nargs), stolen, and the defaults. */
static PyObject *slot_maker_fill(SlotMaker *self, PyObject *obj, PyObject *const *items)
{
    char *base = (char *)obj;
    for (Py_ssize_t i = 0; i < self->nargs; i++)
        *(PyObject **)(base + self->offsets[i]) = items[i];
    for (Py_ssize_t i = self->nargs; i < self->nslots; i++)
        *(PyObject **)(base + self->offsets[i]) = Py_NewRef(PyTuple_GET_ITEM(self->defaults, i - self->nargs));
    if (self->dense)
        PyObject_GC_Track(obj);
    return obj;
}

/* The instance, with args[0..nargs) and the defaults in its slots (new references taken here). */
static PyObject *slot_maker_make(SlotMaker *self, PyObject *const *args)
{
    PyObject *obj = slot_maker_alloc(self);
    if (obj == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < self->nargs; i++)
        Py_INCREF(args[i]);
    return slot_maker_fill(self, obj, args);
}

/* The same from C with items[0..nargs) as new references, stolen: moved into the slots, with no reference count
 * taken and dropped per field (NULL among them: every one released, NULL returned; the error is the one that made
 * the NULL). */
static PyObject *slot_maker_take(SlotMaker *self, PyObject **items)
{
    int failed = 0;
    for (Py_ssize_t i = 0; i < self->nargs; i++)
        failed |= items[i] == NULL;
    PyObject *obj = failed ? NULL : slot_maker_alloc(self);
    if (obj == NULL) {
        for (Py_ssize_t i = 0; i < self->nargs; i++)
            Py_XDECREF(items[i]);
        return NULL;
    }
    return slot_maker_fill(self, obj, items);
}

static PyObject *slot_maker_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    SlotMaker *self = (SlotMaker *)callable;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (n != self->nargs || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0)) {
        PyErr_Format(PyExc_TypeError, "a maker of %s takes exactly %zd positional arguments (%zd given)",
                     self->cls->tp_name, self->nargs, n);
        return NULL;
    }
    return slot_maker_make(self, args);
}

static int slot_default_ok(PyObject *v)
{
    return v == Py_None || PyBool_Check(v) || PyLong_CheckExact(v) || PyFloat_CheckExact(v) || PyUnicode_CheckExact(v) ||
           PyBytes_CheckExact(v);
}

/* Object slots of `type` and its bases (member descriptors of type T_OBJECT_EX), counted. */
static Py_ssize_t slot_count(PyTypeObject *type)
{
    PyObject *mro = type->tp_mro;
    Py_ssize_t count = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); i++) {
        PyObject *dict = ((PyTypeObject *)PyTuple_GET_ITEM(mro, i))->tp_dict;
        PyObject *key, *value;
        Py_ssize_t pos = 0;
        while (PyDict_Next(dict, &pos, &key, &value))
            if (Py_IS_TYPE(value, &PyMemberDescr_Type) && ((PyMemberDescrObject *)value)->d_member->type == T_OBJECT_EX)
                count++;
    }
    return count;
}

static PyObject *slot_maker_new(PyTypeObject *subtype, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"cls", "names", "defaults", NULL};
    PyObject *cls, *names, *defaults = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!|O!", kwlist, &PyType_Type, &cls, &PyTuple_Type, &names,
                                     &PyTuple_Type, &defaults))
        return NULL;
    PyTypeObject *type = (PyTypeObject *)cls;
    Py_ssize_t nslots = PyTuple_GET_SIZE(names);
    Py_ssize_t ndefaults = defaults != NULL ? PyTuple_GET_SIZE(defaults) : 0;
    if (ndefaults > nslots) {
        PyErr_SetString(PyExc_ValueError, "more defaults than names");
        return NULL;
    }
    if (type->tp_dictoffset != 0 || PyObject_HasAttrString(cls, "__post_init__")) {
        PyErr_Format(PyExc_TypeError, "%s is not a plain slotted class (instance dict or __post_init__)", type->tp_name);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < ndefaults; i++)
        if (!slot_default_ok(PyTuple_GET_ITEM(defaults, i))) {
            PyErr_SetString(PyExc_TypeError, "defaults must be immutable (None, bool, int, float, str, bytes)");
            return NULL;
        }
    if (slot_count(type) != nslots) {
        PyErr_Format(PyExc_ValueError, "%s has %zd object slots; the names give %zd", type->tp_name, slot_count(type),
                     nslots);
        return NULL;
    }
    Py_ssize_t *offsets = PyMem_Calloc((size_t)(nslots ? nslots : 1), sizeof(Py_ssize_t));
    if (offsets == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < nslots; i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i);
        PyObject *d = PyUnicode_Check(name) ? PyDict_GetItemWithError(type->tp_dict, name) : NULL;
        if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type) ||
            ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX ||
            (((PyMemberDescrObject *)d)->d_member->flags & READONLY)) {
            PyMem_Free(offsets);
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "%R is not a writable object slot of %s itself", name, type->tp_name);
            return NULL;
        }
        offsets[i] = ((PyMemberDescrObject *)d)->d_member->offset;
        for (Py_ssize_t j = 0; j < i; j++)
            if (offsets[j] == offsets[i]) {
                PyMem_Free(offsets);
                PyErr_Format(PyExc_ValueError, "%R is named twice", name);
                return NULL;
            }
    }
    SlotMaker *self = (SlotMaker *)subtype->tp_alloc(subtype, 0);
    if (self == NULL) {
        PyMem_Free(offsets);
        return NULL;
    }
    self->vectorcall = slot_maker_vectorcall;
    self->cls = (PyTypeObject *)Py_NewRef(cls);
    self->nslots = nslots;
    self->nargs = nslots - ndefaults;
    self->offsets = offsets;
    self->defaults = defaults != NULL ? Py_NewRef(defaults) : PyTuple_New(0);
    /* Dense: the generic allocator, no items, and the slots (distinct, pointer-sized, inside the instance) are all
     * of it past the object header, so that no byte is left unset. */
    int dense = type->tp_alloc == PyType_GenericAlloc && type->tp_itemsize == 0 && PyType_IS_GC(type) &&
                type->tp_basicsize == (Py_ssize_t)(sizeof(PyObject) + (size_t)nslots * sizeof(PyObject *));
    for (Py_ssize_t i = 0; i < nslots; i++)
        dense &= offsets[i] >= (Py_ssize_t)sizeof(PyObject) &&
                 offsets[i] + (Py_ssize_t)sizeof(PyObject *) <= type->tp_basicsize;
    self->dense = dense;
    if (self->defaults == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int slot_maker_traverse(SlotMaker *self, visitproc visit, void *arg)
{
    Py_VISIT(self->cls);
    Py_VISIT(self->defaults);
    return 0;
}

static int slot_maker_clear(SlotMaker *self)
{
    Py_CLEAR(self->cls);
    Py_CLEAR(self->defaults);
    return 0;
}

static void slot_maker_dealloc(SlotMaker *self)
{
    PyObject_GC_UnTrack(self);
    slot_maker_clear(self);
    PyMem_Free(self->offsets);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *slot_maker_get_cls(SlotMaker *self, void *unused)
{
    return Py_NewRef(self->cls);
}

static PyGetSetDef slot_maker_getset[] = {
    {"cls", (getter)slot_maker_get_cls, NULL, "the class this maker builds", NULL},
    {NULL},
};

static PyTypeObject SlotMakerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = SLOT_MAKER_TYPE_NAME,
    .tp_doc = "SlotMaker(cls, names, defaults=()): a callable that builds `cls` from its fields in `names` order\n"
              "(the last len(defaults) of them from `defaults`), storing them in the slots without running __init__.",
    .tp_basicsize = sizeof(SlotMaker),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(SlotMaker, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = slot_maker_new,
    .tp_traverse = (traverseproc)slot_maker_traverse,
    .tp_clear = (inquiry)slot_maker_clear,
    .tp_dealloc = (destructor)slot_maker_dealloc,
    .tp_getset = slot_maker_getset,
};
