/*
 * NameScorer.features in C (appliance/detection/dpi/dga.py); included by dpi.c after label_features and
 * shannon_entropy, which it shares.
 *
 * Every label of a DGA or a tunnel is new to the scorer's memo, and the Python path cost ~7.7 us per label:
 * a substring and a dict lookup per trigram, then the arithmetic, five round() calls and a dataclass. Here
 * the trigram model is a table built once from the model's dicts (the model is ours, read from the shipped
 * JSON, not attacker-chosen: a C table is safe; the memo of labels, which attackers choose, stays a Python
 * dict). `NameScorer.features_reference` is the Python twin the tests hold this to.
 *
 * NameModel(logp, floor, unseen, maker, memo, memo_limit)
 *     logp: {trigram: log-probability}, floor: {bigram context: log-probability}, unseen: float; maker: a
 *     SlotMaker of NameFeatures (label, loglik, entropy, digit_ratio, consonant_ratio, max_consonant_run,
 *     score); memo: the dict it fills (label -> NameFeatures), cleared when it holds more than memo_limit.
 *     .features(label) -> NameFeatures   the memo's, or computed and remembered
 *     .score(label) -> float               features(label).score
 *
 * Exactness: the same IEEE operations in the same order as the Python (dpi.c is built with
 * -ffp-contract=off), the same sum order over the trigrams, and the rounding is float.__round__ itself.
 */

/* The model's symbols (39 today) get indices 0..symbols-2; every other character is the last index, in no
 * trigram or context of the model. */
#define NM_MAX_SYMBOLS 64
#define NM_UNSET 255

typedef struct {
    PyObject_HEAD
    unsigned char index[128]; /* ASCII character -> symbol (other: symbols - 1) */
    int symbols;              /* the model's, plus one for every other character */
    double *trigram;          /* symbols**3 log-probabilities, NAN where the model has none */
    double *floor;            /* symbols**2 context log-probabilities, NAN where the model has none */
    double unseen;
    PyObject *maker;                       /* SlotMaker of NameFeatures */
    PyObject *memo;                        /* dict: label -> NameFeatures */
    Py_ssize_t memo_limit;
} NameModelObject;

static PyTypeObject NameModelType;
static PyObject *nm_round;  /* float.__round__ */
static PyObject *nm_digits; /* 3 */
static PyObject *nm_score_name;

static int nm_symbol(NameModelObject *m, Py_UCS4 c)
{
    return c < 128 ? m->index[c] : m->symbols - 1;
}

/* Symbols of the model's keys, each key `width` characters long, into m->index. */
static int nm_index_keys(NameModelObject *m, PyObject *table, Py_ssize_t width, int *next)
{
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(table, &pos, &key, &value)) {
        if (!PyUnicode_Check(key) || PyUnicode_GET_LENGTH(key) != width || !PyFloat_Check(value)
            || isnan(PyFloat_AS_DOUBLE(value))) {
            PyErr_Format(PyExc_ValueError, "NameModel: keys must be %zd-character str, values floats", width);
            return -1;
        }
        for (Py_ssize_t i = 0; i < width; i++) {
            Py_UCS4 c = PyUnicode_READ_CHAR(key, i);
            if (c >= 128) {
                PyErr_SetString(PyExc_ValueError, "NameModel: the model's symbols must be ASCII");
                return -1;
            }
            if (m->index[c] == NM_UNSET) {
                if (*next >= NM_MAX_SYMBOLS - 1) {
                    PyErr_SetString(PyExc_ValueError, "NameModel: too many symbols in the model");
                    return -1;
                }
                m->index[c] = (unsigned char)(*next)++;
            }
        }
    }
    return 0;
}

static PyObject *NameModel_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *keywords[] = {"logp", "floor", "unseen", "maker", "memo", "memo_limit", NULL};
    PyObject *logp, *floor, *maker, *memo;
    double unseen;
    Py_ssize_t memo_limit;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!dO!O!n:NameModel", keywords, &PyDict_Type, &logp, &PyDict_Type,
                                     &floor, &unseen, &SlotMakerType, &maker, &PyDict_Type, &memo, &memo_limit))
        return NULL;
    if (((SlotMaker *)maker)->nargs != 7) {
        PyErr_SetString(PyExc_ValueError, "NameModel: the maker must take the 7 fields of NameFeatures");
        return NULL;
    }
    NameModelObject *m = (NameModelObject *)type->tp_alloc(type, 0);
    if (m == NULL)
        return NULL;
    memset(m->index, NM_UNSET, sizeof(m->index));
    m->unseen = unseen;
    m->memo_limit = memo_limit;
    m->maker = Py_NewRef(maker);
    m->memo = Py_NewRef(memo);
    int next = 0;
    if (nm_index_keys(m, logp, 3, &next) < 0 || nm_index_keys(m, floor, 2, &next) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    m->symbols = next + 1;
    for (int c = 0; c < 128; c++)
        m->index[c] = m->index[c] == NM_UNSET ? (unsigned char)next : m->index[c];
    size_t s = (size_t)m->symbols, cells = s * s * s;
    m->trigram = PyMem_Malloc(cells * sizeof(double));
    m->floor = PyMem_Malloc(s * s * sizeof(double));
    if (m->trigram == NULL || m->floor == NULL) {
        Py_DECREF(m);
        return PyErr_NoMemory();
    }
    for (size_t i = 0; i < cells; i++)
        m->trigram[i] = NAN;
    for (size_t i = 0; i < s * s; i++)
        m->floor[i] = NAN;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(logp, &pos, &key, &value)) {
        int a = m->index[PyUnicode_READ_CHAR(key, 0)], b = m->index[PyUnicode_READ_CHAR(key, 1)];
        int c = m->index[PyUnicode_READ_CHAR(key, 2)];
        m->trigram[((size_t)a * s + b) * s + c] = PyFloat_AS_DOUBLE(value);
    }
    pos = 0;
    while (PyDict_Next(floor, &pos, &key, &value)) {
        int a = m->index[PyUnicode_READ_CHAR(key, 0)], b = m->index[PyUnicode_READ_CHAR(key, 1)];
        m->floor[(size_t)a * s + b] = PyFloat_AS_DOUBLE(value);
    }
    return (PyObject *)m;
}

static int NameModel_traverse(NameModelObject *m, visitproc visit, void *arg)
{
    Py_VISIT(m->maker);
    Py_VISIT(m->memo);
    return 0;
}

static int NameModel_clear(NameModelObject *m)
{
    Py_CLEAR(m->maker);
    Py_CLEAR(m->memo);
    return 0;
}

static void NameModel_dealloc(NameModelObject *m)
{
    PyObject_GC_UnTrack(m);
    NameModel_clear(m);
    PyMem_Free(m->trigram);
    PyMem_Free(m->floor);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

/* dga.ramp: 0 at or below low, 1 at or above high, linear between. */
static double nm_ramp(double value, double low, double high)
{
    if (value <= low)
        return 0.0;
    if (value >= high)
        return 1.0;
    return (value - low) / (high - low);
}

/* round(value, 3), by float.__round__ itself: a new reference. */
static PyObject *nm_rounded(double value)
{
    PyObject *number = PyFloat_FromDouble(value);
    if (number == NULL)
        return NULL;
    PyObject *args[2] = {number, nm_digits};
    PyObject *out = PyObject_Vectorcall(nm_round, args, 2, NULL);
    Py_DECREF(number);
    return out;
}

/* The NameFeatures of a label not in the memo (what NameScorer.features_reference computes). */
static PyObject *nm_compute(NameModelObject *m, PyObject *label)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(label);
    int kind = PyUnicode_KIND(label);
    const void *data = PyUnicode_DATA(label);
    /* The trigrams of "^^" + label + "$", summed in order: the model's value, else its context's, else unseen. */
    int hat = nm_symbol(m, '^'), end = nm_symbol(m, '$');
    int a = hat, b = hat;
    size_t s = (size_t)m->symbols;
    double total = 0.0;
    for (Py_ssize_t i = 0; i <= n; i++) {
        int c = i < n ? nm_symbol(m, PyUnicode_READ(kind, data, i)) : end;
        double v = m->trigram[((size_t)a * s + b) * s + c];
        if (isnan(v)) {
            v = m->floor[(size_t)a * s + b];
            if (isnan(v))
                v = m->unseen;
        }
        total += v;
        a = b;
        b = c;
    }
    double ll = total / (double)(n + 1);
    LabelCounts counts = label_counts(label); /* dpi.c, shared with label_features */
    Py_ssize_t letters = counts.letters, digits = counts.digits, consonants = counts.consonants, best = counts.best;
    PyObject *entropy_object = shannon_entropy(NULL, label);
    if (entropy_object == NULL)
        return NULL;
    double entropy = PyFloat_AS_DOUBLE(entropy_object);
    Py_DECREF(entropy_object);
    Py_ssize_t length = n > 1 ? n : 1;
    double digit_ratio = (double)digits / (double)length;
    double consonant_ratio = (double)consonants / (double)(letters > 1 ? letters : 1);
    /* NameScorer.features_reference's weights, operation for operation. */
    double f_ll = nm_ramp(-ll, 2.0, 3.3);
    double f_entropy = length >= 8 ? nm_ramp(entropy, 2.8, 3.8) : 0.0;
    double f_digits = nm_ramp(digit_ratio, 0.1, 0.4);
    double by_ratio = nm_ramp(consonant_ratio, 0.65, 0.85), by_run = nm_ramp((double)best, 4.0, 7.0);
    double f_consonants = by_run > by_ratio ? by_run : by_ratio;  /* max(): the first when equal */
    double length_weight = nm_ramp((double)length, 5.0, 10.0);
    double score = length_weight * (0.55 * f_ll + 0.15 * f_entropy + 0.15 * f_digits + 0.15 * f_consonants);
    score = 1.0 < score ? 1.0 : score;  /* min(score, 1.0) */
    PyObject *items[7] = {Py_NewRef(label), nm_rounded(ll), nm_rounded(entropy), nm_rounded(digit_ratio),
                          nm_rounded(consonant_ratio), PyLong_FromSsize_t(best), nm_rounded(score)};
    return slot_maker_take((SlotMaker *)m->maker, items);
}

/* features(label): the memo's, or computed and remembered (the memo cleared first when over its limit). */
static PyObject *nm_features(NameModelObject *m, PyObject *label)
{
    if (!PyUnicode_Check(label)) {
        PyErr_Format(PyExc_TypeError, "NameModel: a label must be a str, not %.100s", Py_TYPE(label)->tp_name);
        return NULL;
    }
    PyObject *cached = PyDict_GetItemWithError(m->memo, label);
    if (cached != NULL)
        return Py_NewRef(cached);
    if (PyErr_Occurred())
        return NULL;
    PyObject *features = nm_compute(m, label);
    if (features == NULL)
        return NULL;
    if (PyDict_GET_SIZE(m->memo) > m->memo_limit)
        PyDict_Clear(m->memo);
    if (PyDict_SetItem(m->memo, label, features) < 0) {
        Py_DECREF(features);
        return NULL;
    }
    return features;
}

static PyObject *NameModel_features(NameModelObject *m, PyObject *label)
{
    return nm_features(m, label);
}

static PyObject *NameModel_score(NameModelObject *m, PyObject *label)
{
    PyObject *features = nm_features(m, label);
    if (features == NULL)
        return NULL;
    PyObject *score = PyObject_GetAttr(features, nm_score_name);
    Py_DECREF(features);
    return score;
}

static PyMethodDef NameModel_methods[] = {
    {"features", (PyCFunction)NameModel_features, METH_O,
     "features(label) -> NameFeatures: the memo's, or computed (NameScorer.features_reference's twin) and remembered."},
    {"score", (PyCFunction)NameModel_score, METH_O, "score(label) -> float: features(label).score."},
    {NULL},
};

static PyTypeObject NameModelType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "appliance.native.dpi.NameModel",
    .tp_basicsize = sizeof(NameModelObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "NameModel(logp, floor, unseen, maker, memo, memo_limit): NameScorer.features in C (name_model.h).",
    .tp_new = NameModel_new,
    .tp_traverse = (traverseproc)NameModel_traverse,
    .tp_clear = (inquiry)NameModel_clear,
    .tp_dealloc = (destructor)NameModel_dealloc,
    .tp_methods = NameModel_methods,
};

/* Called by the module's exec slot. */
static int nm_init(PyObject *module)
{
    if (nm_round == NULL && (nm_round = PyObject_GetAttrString((PyObject *)&PyFloat_Type, "__round__")) == NULL)
        return -1;
    if (nm_digits == NULL && (nm_digits = PyLong_FromLong(3)) == NULL)
        return -1;
    if (nm_score_name == NULL && (nm_score_name = PyUnicode_InternFromString("score")) == NULL)
        return -1;
    if (PyType_Ready(&NameModelType) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "NameModel", (PyObject *)&NameModelType);
}
