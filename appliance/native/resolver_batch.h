/*
 * ResolverCache.observe_batch in C: a DnsBatch's answers into the resolver cache straight from its bytes
 * (appliance/detection/resolutions.py); included by dpi.c after resolver_cache.h, whose rc_learn it feeds.
 *
 * The analysis process receives every DNS answer the agents' resolvers returned as DnsBatch frames (7,596 answers
 * on the bench corpus, 4,605 of them in the DNS flood at its end). Read into DnsMessage and DnsAnswer objects
 * (fastpath.decode_dns_batch) and then read again attribute by attribute by resolver_observe, each answer cost
 * about 0.7 us, 3 ms of the analysis process's CPU on the flood; here the batch is read once, in place, and only
 * what the cache keeps becomes a Python object (the agent id, the name, the addresses, the TTLs and the time).
 *
 * resolver_observe_batch(data, by_ip, by_name, max_per_agent, maker, thin) -> responses learned | None
 *     What resolver_observe(decode_dns(data), ...) does, for a batch of answers. None, with nothing observed,
 *     when the batch is anything but plain: a resolver event among its items (those go to the DNS layers too,
 *     in order: the caller reads the batch into objects), a string that is not ASCII, a field encoded other
 *     than the contract says, a message given twice, broken or truncated encoding. The caller then takes the
 *     objects' path, which reads, refuses or merges exactly as upb does: this reader never has to.
 *
 * Two passes: the whole batch is read and checked first, then observed, so a batch that falls back has changed
 * nothing. Work and memory are linear in the batch's length.
 */

enum { RB_VARINT = 0, RB_I64 = 1, RB_LEN = 2, RB_I32 = 5 };

typedef struct {
    const uint8_t *p;
    size_t n;
} rb_span;

typedef struct {
    rb_span data;
    uint32_t rtype, ttl;
} rb_answer;

typedef struct {
    rb_span agent, qname;
    uint64_t ts;
    size_t first, count; /* its answers in the batch's answer array */
    int is_response;
} rb_item;

typedef struct {
    rb_item *items;
    size_t n_items, cap_items;
    rb_answer *answers;
    size_t n_answers, cap_answers;
} rb_batch;

/* A varint at *p (before end): 0, or -1 when broken or not plain (over 64 bits: left to upb's reading). */
static int rb_varint(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        if (shift == 63 && b > 1)
            return -1;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

/* The next field: its number, wire type and, for RB_LEN, its bytes; a varint's value in *value. 1 read, 0 at the
 * end, -1 broken or a wire type outside 0, 1, 2, 5 (groups: never in this contract). */
static int rb_field(const uint8_t **p, const uint8_t *end, uint32_t *field, int *wire, uint64_t *value, rb_span *bytes)
{
    if (*p >= end)
        return 0;
    uint64_t tag;
    if (rb_varint(p, end, &tag) < 0 || (tag >> 3) == 0 || (tag >> 3) >= (1u << 29)) /* field numbers: 1 to 2**29-1 */
        return -1;
    *field = (uint32_t)(tag >> 3);
    *wire = (int)(tag & 7);
    switch (*wire) {
    case RB_VARINT:
        return rb_varint(p, end, value) < 0 ? -1 : 1;
    case RB_I64:
    case RB_I32: {
        size_t width = *wire == RB_I64 ? 8 : 4;
        if ((size_t)(end - *p) < width)
            return -1;
        *p += width;
        return 1;
    }
    case RB_LEN: {
        uint64_t len;
        if (rb_varint(p, end, &len) < 0 || len > (uint64_t)(end - *p))
            return -1;
        bytes->p = *p;
        bytes->n = (size_t)len;
        *p += len;
        return 1;
    }
    default:
        return -1;
    }
}

/* A message's fields one at a time: rb_next fills field, wire, v (a varint's value) and s (a length's bytes). */
typedef struct {
    const uint8_t *p, *end;
    uint32_t field;
    int wire;
    uint64_t v;
    rb_span s;
} rb_reader;

static rb_reader rb_reader_of(rb_span in)
{
    rb_reader rd = {.p = in.p, .end = in.p + in.n};
    return rd;
}

static int rb_next(rb_reader *rd)
{
    return rb_field(&rd->p, rd->end, &rd->field, &rd->wire, &rd->v, &rd->s);
}

static int rb_ascii(rb_span s)
{
    for (size_t i = 0; i < s.n; i++)
        if (s.p[i] >= 0x80)
            return 0;
    return 1;
}

/* A known field in the wire type the contract gives it (anything else: not plain); a string must be ASCII. */
#define RB_EXPECT(cond)                                                                                                \
    do {                                                                                                               \
        if (!(cond))                                                                                                   \
            return 0;                                                                                                  \
    } while (0)

/* One DnsAnswer appended: 1, 0 not plain, -1 out of memory. */
static int rb_read_answer(rb_batch *b, rb_span in)
{
    if (b->n_answers == b->cap_answers) {
        size_t cap = b->cap_answers ? 2 * b->cap_answers : 256;
        rb_answer *grown = PyMem_Realloc(b->answers, cap * sizeof(rb_answer));
        if (grown == NULL)
            return -1;
        b->answers = grown;
        b->cap_answers = cap;
    }
    rb_answer a = {{(const uint8_t *)"", 0}, 0, 0};
    rb_reader rd = rb_reader_of(in);
    int r;
    while ((r = rb_next(&rd)) > 0) {
        switch (rd.field) {
        case 1: /* name: read by nobody here, but a string all the same */
            RB_EXPECT(rd.wire == RB_LEN && rb_ascii(rd.s));
            break;
        case 2:
            RB_EXPECT(rd.wire == RB_VARINT);
            a.rtype = (uint32_t)rd.v;
            break;
        case 3:
            RB_EXPECT(rd.wire == RB_VARINT);
            a.ttl = (uint32_t)rd.v;
            break;
        case 4:
            RB_EXPECT(rd.wire == RB_LEN && rb_ascii(rd.s));
            a.data = rd.s;
            break;
        default:
            break; /* unknown: skipped, as upb keeps it aside */
        }
    }
    if (r < 0)
        return 0;
    b->answers[b->n_answers++] = a;
    return 1;
}

/* One DnsMessage into *item: 1, 0 not plain, -1 out of memory. */
static int rb_read_message(rb_batch *b, rb_span in, rb_item *item)
{
    rb_reader rd = rb_reader_of(in);
    int r;
    while ((r = rb_next(&rd)) > 0) {
        switch (rd.field) {
        case 1: case 3: case 5: case 6: case 8: /* id, rcode, qtype, qclass, malformed */
            RB_EXPECT(rd.wire == RB_VARINT);
            break;
        case 2:
            RB_EXPECT(rd.wire == RB_VARINT);
            item->is_response = rd.v != 0;
            break;
        case 4:
            RB_EXPECT(rd.wire == RB_LEN && rb_ascii(rd.s));
            item->qname = rd.s;
            break;
        case 7: {
            RB_EXPECT(rd.wire == RB_LEN);
            int got = rb_read_answer(b, rd.s);
            if (got <= 0)
                return got;
            item->count++;
            break;
        }
        case 9:
            RB_EXPECT(rd.wire == RB_VARINT);
            item->ts = rd.v;
            break;
        default:
            break;
        }
    }
    return r < 0 ? 0 : 1;
}

/* One AgentDns appended: 1, 0 not plain (a resolver event among them, too), -1 out of memory. */
static int rb_read_item(rb_batch *b, rb_span in)
{
    if (b->n_items == b->cap_items) {
        size_t cap = b->cap_items ? 2 * b->cap_items : 64;
        rb_item *grown = PyMem_Realloc(b->items, cap * sizeof(rb_item));
        if (grown == NULL)
            return -1;
        b->items = grown;
        b->cap_items = cap;
    }
    rb_item item = {.agent = {(const uint8_t *)"", 0}, .qname = {(const uint8_t *)"", 0}, .first = b->n_answers};
    int messages = 0;
    rb_reader rd = rb_reader_of(in);
    int r;
    while ((r = rb_next(&rd)) > 0) {
        switch (rd.field) {
        case 1:
            RB_EXPECT(rd.wire == RB_LEN && rb_ascii(rd.s));
            item.agent = rd.s;
            break;
        case 2: {
            RB_EXPECT(rd.wire == RB_LEN && ++messages == 1); /* given twice, upb merges the two: not plain */
            int got = rb_read_message(b, rd.s, &item);
            if (got <= 0)
                return got;
            break;
        }
        case 3:
            RB_EXPECT(rd.wire == RB_VARINT && rd.v == 0); /* a resolver event: the layers see it too, in order */
            break;
        default:
            break;
        }
    }
    if (r < 0)
        return 0;
    b->items[b->n_items++] = item;
    return 1;
}

/* An ASCII str of s; the same object as *last when its bytes are equal (names and addresses repeat). */
static PyObject *rb_str(rb_span s, rb_span *last_span, PyObject **last)
{
    if (*last != NULL && last_span->n == s.n && memcmp(last_span->p, s.p, s.n) == 0)
        return Py_NewRef(*last);
    PyObject *made = PyUnicode_New((Py_ssize_t)s.n, 127);
    if (made == NULL)
        return NULL;
    memcpy(PyUnicode_DATA(made), s.p, s.n);
    Py_XSETREF(*last, Py_NewRef(made));
    *last_span = s;
    return made;
}

typedef struct {
    rb_span agent_span, qname_span, data_span;
    PyObject *agent, *qname, *data;
} rb_strings;

/* What one item teaches (rc_observe_one's tests and gathering, on the read fields): -1, 0 nothing, 1 learned. */
static int rb_observe_item(const rb_batch *b, const rb_item *item, rb_strings *cache, PyObject *by_ip_all,
                           PyObject *by_name_all, Py_ssize_t max, SlotMaker *maker, PyObject *thin)
{
    if (!item->is_response || item->count == 0 || item->qname.n == 0)
        return 0;
    size_t addresses = 0;
    for (size_t i = 0; i < item->count; i++) {
        uint32_t rtype = b->answers[item->first + i].rtype;
        addresses += rtype == 1 || rtype == 28;
    }
    if (addresses == 0)
        return 0;
    int result = -1;
    PyObject *stack[32], **pairs = stack, *names = NULL, *ts = NULL, *agent = NULL;
    Py_ssize_t count = 0;
    PyObject *qname = rb_str(item->qname, &cache->qname_span, &cache->qname);
    if (qname == NULL)
        return -1;
    if (addresses > 16 && (pairs = PyMem_Malloc(sizeof(PyObject *) * 2 * addresses)) == NULL) {
        pairs = stack;
        PyErr_NoMemory();
        goto done;
    }
    for (size_t i = 0; i < item->count; i++) {
        const rb_answer *a = &b->answers[item->first + i];
        if (a->rtype == 5) {
            if (rc_add_cname(&names, qname, rb_str(a->data, &cache->data_span, &cache->data)) < 0)
                goto done;
        } else if (a->rtype == 1 || a->rtype == 28) {
            PyObject *address = rb_str(a->data, &cache->data_span, &cache->data);
            PyObject *ttl = address != NULL ? PyLong_FromUnsignedLong(a->ttl) : NULL;
            if (ttl == NULL) {
                Py_XDECREF(address);
                goto done;
            }
            pairs[2 * count] = address;
            pairs[2 * count + 1] = ttl;
            count++;
        }
    }
    if ((ts = PyLong_FromUnsignedLongLong(item->ts)) == NULL ||
        (agent = rb_str(item->agent, &cache->agent_span, &cache->agent)) == NULL)
        goto done;
    result = rc_learn(agent, qname, names, pairs, count, ts, by_ip_all, by_name_all, max, maker, thin);
done:
    rc_pairs_release(pairs, count, stack);
    Py_XDECREF(names);
    Py_XDECREF(ts);
    Py_XDECREF(agent);
    Py_DECREF(qname);
    return result;
}

static PyObject *resolver_observe_batch(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    Py_ssize_t max;
    if (rc_observe_args(args, nargs, "resolver_observe_batch(data, by_ip, by_name, max_per_agent, maker, thin)", &max) < 0)
        return NULL;
    PyObject *by_ip_all = args[1], *by_name_all = args[2], *thin = args[5];
    Py_buffer data;
    if (PyObject_GetBuffer(args[0], &data, PyBUF_SIMPLE) < 0)
        return NULL;
    rb_batch b = {0};
    int plain = 1;
    rb_reader rd = rb_reader_of((rb_span){data.buf, (size_t)data.len});
    int r;
    while (plain > 0 && (r = rb_next(&rd)) != 0) {
        if (r < 0 || (rd.field == 1 && rd.wire != RB_LEN))
            plain = 0;
        else if (rd.field == 1)
            plain = rb_read_item(&b, rd.s);
    }
    PyObject *out = NULL;
    if (plain < 0) {
        PyErr_NoMemory();
    } else if (plain == 0) {
        out = Py_NewRef(Py_None);
    } else {
        rb_strings cache = {0};
        Py_ssize_t learned = 0;
        size_t i = 0;
        for (; i < b.n_items; i++) {
            int got = rb_observe_item(&b, &b.items[i], &cache, by_ip_all, by_name_all, max, (SlotMaker *)args[4], thin);
            if (got < 0)
                break;
            learned += got;
        }
        if (i == b.n_items)
            out = PyLong_FromSsize_t(learned);
        Py_XDECREF(cache.agent);
        Py_XDECREF(cache.qname);
        Py_XDECREF(cache.data);
    }
    PyMem_Free(b.items);
    PyMem_Free(b.answers);
    PyBuffer_Release(&data);
    return out;
}
