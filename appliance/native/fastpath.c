/*
 * appliance.native.fastpath: the per-packet hot path of ingestion, in C.
 *
 * Two types, each wrapped by a Python class that owns the role:
 *   WireReader  (wrapped by appliance.ingest.convert.PacketConverter): parses serialized
 *               NetworkPacket / PacketBatch messages straight from the gRPC bytes, validates and
 *               repairs them by the ingestion rules, counts every rejection and repair by reason.
 *               The FlowTable is given its reader when it is built and parses with it in add_wire.
 *   FlowTable   (wrapped by appliance.flows.tracker.FlowTracker): the live flows of every agent,
 *               per-class LRU lists for idle expiry, per-agent event clocks, the flow cap.
 *
 * Why C: at a few hundred thousand packets per second, reading twelve protobuf fields into
 * Python objects and updating a flow record in Python costs ~5 us per packet, ten times the
 * budget. Here a packet that only updates counters touches no Python object at all. Python is
 * called only where the domain lives: a new flow's FlowRecord is built by a Python factory,
 * and DNS packets (which the resolver cache and the DNS caps need parsed at once) and ICMP samples
 * go to a Python `keep` callback that parses them (appliance.ingest.dns). The payload samples of
 * every other flow are written here, straight into the flow record contract (proto/flow_record.proto), and
 * reach Python as bytes when the flow ends.
 *
 * The semantics are those of the pure-Python tracker this replaced, kept as the test oracle in
 * tests/appliance/native/reference_model.py; the differential tests require identical results.
 * All methods run with the GIL held and are serialised by the Python wrapper's lock.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dns_wire.h"
#include "slot_maker.h"
#include "dns_list.h"
#include "sample_list.h"

#define NS_PER_MS 1000000LL
#define OUTBOUND 1
#define INBOUND 2
#define TCP_FIN 0x01
#define TCP_RST 0x04
#define UDP_HEADER 8
#define NAME_MAX_CHARS 256
#define GROUP_DEPTH_LIMIT 100 /* upb's default recursion limit */

/* ------------------------------------------------------------------------------------------ */
/* Reasons (strings shared with appliance.ingest.convert)                                      */

enum { R_ZERO, R_DIRECTION, R_PORT, R_PROTOCOL, R_MALFORMED, R_COUNT };
static const char *const REJECT_NAMES[R_COUNT] = {
    "zero_address", "bad_direction", "bad_port", "bad_protocol", "malformed_message",
};
enum { F_TIMESTAMP, F_TRUNCATED, F_SHORT_HEADER, F_NAME, F_COUNT };
static const char *const REPAIR_NAMES[F_COUNT] = {
    "timestamp_replaced", "payload_truncated", "short_header", "process_name_replaced",
};

/* Timeout classes, in the order the Python tracker iterates them. */
enum { C_TCP, C_UDP, C_DNS, C_ICMP, C_OTHER, NCLS };

/* End reasons, interned at module init. */
enum { E_IDLE, E_ACTIVE, E_FULL, E_TCP_CLOSE, E_STREAM, E_EVICTED, E_SHUTDOWN, E_COUNT };
static const char *const END_NAMES[E_COUNT] = {
    "idle", "active", "dns_full", "tcp_close", "stream_end", "evicted", "shutdown",
};
static PyObject *end_strings[E_COUNT];

/* Attribute names of FlowRecord written back from the C counters. */
enum {
    A_FIRST, A_LAST, A_PK_OUT, A_PK_IN, A_BY_OUT, A_BY_IN, A_PB_OUT, A_PB_IN, A_FLAGS, A_PID,
    A_NAME, A_END, A_FLOW_ID, A_KEPT_WIRE, A_COUNT
};
static const char *const ATTR_NAMES[A_COUNT] = {
    "first_ns", "last_ns", "packets_out", "packets_in", "bytes_out", "bytes_in",
    "payload_bytes_out", "payload_bytes_in", "tcp_flags", "pid", "process_name", "end_reason",
    "flow_id", "kept_wire",
};
static PyObject *attr_strings[A_COUNT];
static PyObject *empty_string;

/* ------------------------------------------------------------------------------------------ */
/* A validated packet, as the tracker consumes it                                              */

typedef struct {
    int64_t ts;
    uint32_t direction, protocol, local_ip, remote_ip, local_port, remote_port, size, flags, pid;
    const char *payload;
    Py_ssize_t payload_len;
    PyObject *payload_obj; /* borrowed; the payload as a bytes object when it is one already */
    PyObject *name;        /* borrowed; never NULL */
} Pkt;

/* ------------------------------------------------------------------------------------------ */
/* Protobuf wire format                                                                        */

/* Field numbers of NetworkPacket and PacketBatch (proto/sensor.proto). Exported as WIRE_FIELDS; a test
 * holds them against the generated descriptor, so the contract and this parser cannot drift apart. */
enum {
    N_LOCAL_IP = 1, N_REMOTE_IP = 2, N_LOCAL_PORT = 3, N_REMOTE_PORT = 4, N_PROTOCOL = 5, N_TIMESTAMP = 6,
    N_DIRECTION = 7, N_SIZE = 8, N_PAYLOAD = 9, N_TCP_FLAGS = 10, N_PID = 11, N_PROCESS_NAME = 12,
    N_BATCH_PACKETS = 1,
};

/* Field numbers of SamplePacket and of FlowRecord.samples (proto/flow_record.proto). Exported as
 * SAMPLE_FIELDS and held against the generated descriptor by a test, like WIRE_FIELDS. */
enum {
    S_TIMESTAMP = 1, S_DIRECTION = 2, S_SIZE = 3, S_PAYLOAD = 4, S_TCP_FLAGS = 5, S_PID = 6, S_PROCESS_NAME = 7,
    S_DNS_INDEX = 8, S_RECORD_DNS = 20, S_RECORD_SAMPLES = 21,
};

typedef struct {
    uint64_t v[N_PROCESS_NAME + 1]; /* varint fields by number (every field but the two byte strings) */
    const char *payload;
    Py_ssize_t payload_len;
    const char *name;
    Py_ssize_t name_len;
} WirePkt;

static inline int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 70 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -1; /* truncated, or longer than ten bytes */
}

/* Tags and lengths are 32-bit varints: upb refuses them beyond five bytes, even when padded. */
static inline int read_varint32(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
    const uint8_t *start = *p;
    if (read_varint(p, end, out) || *p - start > 5 || *out > UINT32_MAX)
        return -1;
    return 0;
}

static inline int read_length(const uint8_t **p, const uint8_t *end, uint64_t *n)
{
    return read_varint32(p, end, n) || *n > (uint64_t)(end - *p) ? -1 : 0;
}

/* Field number 0 is invalid in a message, but upb skips it inside an unknown group: so do we. */
static inline int read_tag_in(const uint8_t **p, const uint8_t *end, uint32_t *field, uint32_t *wt, int in_group)
{
    uint64_t tag;
    if (read_varint32(p, end, &tag) || ((tag >> 3) == 0 && !in_group))
        return -1;
    *field = (uint32_t)(tag >> 3);
    *wt = (uint32_t)(tag & 7);
    return 0;
}

static inline int read_tag(const uint8_t **p, const uint8_t *end, uint32_t *field, uint32_t *wt)
{
    return read_tag_in(p, end, field, wt, 0);
}

/* Skip one field of wire type `wt` whose tag was just read (unknown fields, as protobuf does). */
static int skip_field(const uint8_t **p, const uint8_t *end, uint32_t field, uint32_t wt, int depth)
{
    uint64_t n;
    switch (wt) {
    case 0:
        return read_varint(p, end, &n);
    case 1:
        if (end - *p < 8)
            return -1;
        *p += 8;
        return 0;
    case 2:
        if (read_length(p, end, &n))
            return -1;
        *p += n;
        return 0;
    case 5:
        if (end - *p < 4)
            return -1;
        *p += 4;
        return 0;
    case 3:
        if (depth >= GROUP_DEPTH_LIMIT)
            return -1;
        for (;;) {
            uint32_t f, w;
            if (read_tag_in(p, end, &f, &w, 1))
                return -1;
            if (w == 4)
                return f == field ? 0 : -1;
            if (skip_field(p, end, f, w, depth + 1))
                return -1;
        }
    default: /* 4 (an end-group with no start), 6, 7 */
        return -1;
    }
}

/* Decode one NetworkPacket; -1 when its encoding is broken. Last value wins, as in protobuf. */
static int decode_packet(const uint8_t *p, const uint8_t *end, WirePkt *w)
{
    memset(w, 0, sizeof(*w));
    w->payload = w->name = "";
    while (p < end) {
        uint32_t field, wt;
        if (read_tag(&p, end, &field, &wt))
            return -1;
        if (wt == 0 && field <= N_PID && field != N_PAYLOAD) {
            if (read_varint(&p, end, &w->v[field]))
                return -1;
        } else if (wt == 2 && (field == N_PAYLOAD || field == N_PROCESS_NAME)) {
            uint64_t n;
            if (read_length(&p, end, &n))
                return -1;
            if (field == N_PAYLOAD) {
                w->payload = (const char *)p;
                w->payload_len = (Py_ssize_t)n;
            } else {
                w->name = (const char *)p;
                w->name_len = (Py_ssize_t)n;
            }
            p += n;
        } else if (skip_field(&p, end, field, wt, 0)) {
            return -1;
        }
    }
    return 0;
}

/* Iterate the NetworkPacket submessages of a PacketBatch (field 1). Returns 1 with the next
 * one in [*sub, *sub_end), 0 at the end, -1 when the batch framing is broken. */
static int next_in_batch(const uint8_t **p, const uint8_t *end, const uint8_t **sub, const uint8_t **sub_end)
{
    while (*p < end) {
        uint32_t field, wt;
        if (read_tag(p, end, &field, &wt))
            return -1;
        if (field == N_BATCH_PACKETS && wt == 2) {
            uint64_t n;
            if (read_length(p, end, &n))
                return -1;
            *sub = *p;
            *sub_end = *p + n;
            *p += n;
            return 1;
        }
        if (skip_field(p, end, field, wt, 0))
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* WireReader                                                                                  */

typedef struct {
    PyObject_HEAD
    Py_ssize_t max_payload;
    int64_t future_ns;
    unsigned long long rejected[R_COUNT];
    unsigned long long repaired[F_COUNT];
    /* Agents send the same process name many times: keep the last one decoded. */
    char *name_raw;
    Py_ssize_t name_raw_len, name_raw_cap;
    PyObject *name_obj;
    int name_replaced;
} WireReader;

static int reader_init(WireReader *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"max_payload_bytes", "future_tolerance_ns", NULL};
    Py_ssize_t max_payload;
    long long future_ns;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "nL", kwlist, &max_payload, &future_ns))
        return -1;
    if (max_payload < 0 || future_ns < 0) {
        PyErr_SetString(PyExc_ValueError, "limits must not be negative");
        return -1;
    }
    self->max_payload = max_payload;
    self->future_ns = future_ns;
    return 0;
}

static void reader_dealloc(WireReader *self)
{
    Py_CLEAR(self->name_obj);
    PyMem_Free(self->name_raw);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The process name object for raw bytes (borrowed from the cache); NULL on memory error. */
static PyObject *reader_name(WireReader *self, const char *raw, Py_ssize_t len)
{
    if (len == 0)
        return empty_string;
    if (self->name_obj && len == self->name_raw_len && memcmp(raw, self->name_raw, (size_t)len) == 0) {
        if (self->name_replaced)
            self->repaired[F_NAME]++;
        return self->name_obj;
    }
    int replaced = 0;
    PyObject *name = PyUnicode_DecodeUTF8(raw, len, NULL);
    if (name == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
            return NULL;
        PyErr_Clear();
        name = PyUnicode_DecodeUTF8(raw, len, "replace");
        if (name == NULL)
            return NULL;
        replaced = 1;
    }
    if (PyUnicode_GET_LENGTH(name) > NAME_MAX_CHARS) {
        PyObject *cut = PyUnicode_Substring(name, 0, NAME_MAX_CHARS);
        Py_DECREF(name);
        if (cut == NULL)
            return NULL;
        name = cut;
    }
    if (len > self->name_raw_cap) {
        char *buf = PyMem_Realloc(self->name_raw, (size_t)len);
        if (buf == NULL) {
            Py_DECREF(name);
            PyErr_NoMemory();
            return NULL;
        }
        self->name_raw = buf;
        self->name_raw_cap = len;
    }
    memcpy(self->name_raw, raw, (size_t)len);
    self->name_raw_len = len;
    Py_XSETREF(self->name_obj, name);
    self->name_replaced = replaced;
    if (replaced)
        self->repaired[F_NAME]++;
    return name;
}

/* Apply the ingestion rules. Returns 1 when accepted (into *out), 0 when rejected (counted),
 * -1 on a Python error. */
static int reader_validate(WireReader *self, const WirePkt *w, int64_t now_ns, Pkt *out)
{
    uint32_t local_ip = (uint32_t)w->v[N_LOCAL_IP], remote_ip = (uint32_t)w->v[N_REMOTE_IP];
    int32_t direction = (int32_t)(uint32_t)w->v[N_DIRECTION];
    uint32_t protocol = (uint32_t)w->v[N_PROTOCOL];
    if (!local_ip || !remote_ip) {
        self->rejected[R_ZERO]++;
        return 0;
    }
    if (direction != OUTBOUND && direction != INBOUND) {
        self->rejected[R_DIRECTION]++;
        return 0;
    }
    if (protocol > 255) {
        self->rejected[R_PROTOCOL]++;
        return 0;
    }
    uint32_t local_port = 0, remote_port = 0;
    if (protocol == 6 || protocol == 17) {
        local_port = (uint32_t)w->v[N_LOCAL_PORT];
        remote_port = (uint32_t)w->v[N_REMOTE_PORT];
        if (local_port > 65535 || remote_port > 65535) {
            self->rejected[R_PORT]++;
            return 0;
        }
    }
    uint64_t ms = w->v[N_TIMESTAMP];
    int64_t horizon = now_ns > INT64_MAX - self->future_ns ? INT64_MAX : now_ns + self->future_ns;
    if (ms == 0 || horizon < 0 || ms > (uint64_t)horizon / NS_PER_MS) {
        out->ts = now_ns;
        self->repaired[F_TIMESTAMP]++;
    } else {
        out->ts = (int64_t)ms * NS_PER_MS;
    }
    const char *payload = w->payload;
    Py_ssize_t len = w->payload_len;
    if (len > self->max_payload) {
        len = self->max_payload;
        self->repaired[F_TRUNCATED]++;
    }
    if (protocol == 17 && direction == OUTBOUND) {
        /* The contract keeps the UDP header on outbound payloads; strip it once, here. */
        if (len >= UDP_HEADER) {
            payload += UDP_HEADER;
            len -= UDP_HEADER;
        } else {
            len = 0;
            self->repaired[F_SHORT_HEADER]++;
        }
    } else if (protocol == 1 && len > 0 && len < 4) {
        self->repaired[F_SHORT_HEADER]++;
    }
    PyObject *name = reader_name(self, w->name, w->name_len);
    if (name == NULL)
        return -1;
    out->direction = (uint32_t)direction;
    out->protocol = protocol;
    out->local_ip = local_ip;
    out->remote_ip = remote_ip;
    out->local_port = local_port;
    out->remote_port = remote_port;
    out->size = (uint32_t)w->v[N_SIZE];
    out->flags = (uint32_t)w->v[N_TCP_FLAGS];
    out->pid = (uint32_t)w->v[N_PID];
    out->payload = payload;
    out->payload_len = len;
    out->payload_obj = NULL;
    out->name = name;
    return 1;
}

/* Walk the packets of one message (a PacketBatch or a single NetworkPacket), calling `each`
 * for every accepted one. Counts accepted and rejected packets; -1 on a Python error. */
typedef int (*PacketSink)(void *ctx, Pkt *pkt);

static int reader_walk(WireReader *self, const uint8_t *data, Py_ssize_t size, int batched, int64_t now_ns,
                       PacketSink each, void *ctx, Py_ssize_t *accepted, Py_ssize_t *rejected)
{
    const uint8_t *p = data, *end = data + size;
    for (;;) {
        const uint8_t *sub, *sub_end;
        if (batched) {
            int more = next_in_batch(&p, end, &sub, &sub_end);
            if (more == 0)
                return 0;
            if (more < 0) {
                /* The framing is broken: what follows cannot be delimited. Drop it, count once. */
                self->rejected[R_MALFORMED]++;
                (*rejected)++;
                return 0;
            }
        } else {
            sub = data;
            sub_end = end;
        }
        WirePkt w;
        Pkt pkt;
        int ok = 0;
        if (decode_packet(sub, sub_end, &w)) {
            self->rejected[R_MALFORMED]++;
        } else {
            ok = reader_validate(self, &w, now_ns, &pkt);
            if (ok < 0)
                return -1;
        }
        if (ok) {
            (*accepted)++;
            /* `each` may run Python code that lets another thread use this reader and replace
             * its cached name: hold the packet's own reference meanwhile. */
            Py_INCREF(pkt.name);
            int rc = each(ctx, &pkt);
            Py_DECREF(pkt.name);
            if (rc < 0)
                return -1;
        } else {
            (*rejected)++;
        }
        if (!batched)
            return 0;
    }
}

static PyObject *pkt_payload(const Pkt *pkt)
{
    if (pkt->payload_obj != NULL) {
        Py_INCREF(pkt->payload_obj);
        return pkt->payload_obj;
    }
    return PyBytes_FromStringAndSize(pkt->payload, pkt->payload_len);
}

/* The RawPacket tuple of appliance.ingest.convert. */
static PyObject *pkt_tuple(const Pkt *pkt)
{
    PyObject *payload = pkt_payload(pkt);
    if (payload == NULL)
        return NULL;
    Py_INCREF(pkt->name);
    return Py_BuildValue("(LIIIIIIINIIN)", (long long)pkt->ts, pkt->direction, pkt->protocol, pkt->local_ip,
                         pkt->remote_ip, pkt->local_port, pkt->remote_port, pkt->size, payload, pkt->flags,
                         pkt->pid, pkt->name);
}

static int collect_tuple(void *ctx, Pkt *pkt)
{
    PyObject *tuple = pkt_tuple(pkt);
    if (tuple == NULL)
        return -1;
    int rc = PyList_Append((PyObject *)ctx, tuple);
    Py_DECREF(tuple);
    return rc;
}

static PyObject *reader_read(WireReader *self, PyObject *args)
{
    Py_buffer view;
    int batched;
    long long now_ns;
    if (!PyArg_ParseTuple(args, "y*pL", &view, &batched, &now_ns))
        return NULL;
    PyObject *out = PyList_New(0);
    Py_ssize_t accepted = 0, rejected = 0;
    if (out != NULL &&
        reader_walk(self, view.buf, view.len, batched, now_ns, collect_tuple, out, &accepted, &rejected) < 0)
        Py_CLEAR(out);
    PyBuffer_Release(&view);
    return out;
}

static PyObject *counts_dict(const unsigned long long *counts, const char *const *names, int n)
{
    PyObject *d = PyDict_New();
    for (int i = 0; d != NULL && i < n; i++) {
        if (!counts[i])
            continue;
        PyObject *v = PyLong_FromUnsignedLongLong(counts[i]);
        if (v == NULL || PyDict_SetItemString(d, names[i], v) < 0)
            Py_CLEAR(d);
        Py_XDECREF(v);
    }
    return d;
}

static PyObject *reader_rejected(WireReader *self, void *closure)
{
    return counts_dict(self->rejected, REJECT_NAMES, R_COUNT);
}

static PyObject *reader_repaired(WireReader *self, void *closure)
{
    return counts_dict(self->repaired, REPAIR_NAMES, F_COUNT);
}

static PyMethodDef reader_methods[] = {
    {"read", (PyCFunction)reader_read, METH_VARARGS,
     "read(data, batched, now_ns) -> list of RawPacket tuples (rejections and repairs counted)"},
    {NULL},
};

static PyGetSetDef reader_getset[] = {
    {"rejected", (getter)reader_rejected, NULL, "packets rejected, by reason", NULL},
    {"repaired", (getter)reader_repaired, NULL, "packets repaired, by reason", NULL},
    {NULL},
};

static PyTypeObject WireReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "appliance.native.fastpath.WireReader",
    .tp_basicsize = sizeof(WireReader),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "WireReader(max_payload_bytes, future_tolerance_ns): parses and validates NetworkPacket bytes",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)reader_init,
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_methods = reader_methods,
    .tp_getset = reader_getset,
};

/* ------------------------------------------------------------------------------------------ */
/* WireFlow: an ended flow as flow record contract bytes                                       */

/* A flow that ended without Python ever holding it, as the analysis process and the cluster bus take it:
 * `entry` is one FlowRecordBatch.records entry (tag, length, FlowRecord message), so a batch is the version
 * field followed by entries, joined. The three other attributes are what the hand-off reads before that
 * (fairness per agent, the REST ring of finished flows). Holds no containers: not tracked by the collector. */
typedef struct {
    PyObject_HEAD
    PyObject *agent_id, *flow_id, *entry;
    long long last_ns;
} WireFlow;

static void wireflow_dealloc(WireFlow *self)
{
    Py_XDECREF(self->agent_id);
    Py_XDECREF(self->flow_id);
    Py_XDECREF(self->entry);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef wireflow_members[] = {
    {"agent_id", T_OBJECT_EX, offsetof(WireFlow, agent_id), READONLY, NULL},
    {"flow_id", T_OBJECT_EX, offsetof(WireFlow, flow_id), READONLY, NULL},
    {"entry", T_OBJECT_EX, offsetof(WireFlow, entry), READONLY, "a FlowRecordBatch.records entry (tag, length, record)"},
    {"last_ns", T_LONGLONG, offsetof(WireFlow, last_ns), READONLY, NULL},
    {NULL},
};

static PyTypeObject WireFlowType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "appliance.native.fastpath.WireFlow",
    .tp_basicsize = sizeof(WireFlow),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An ended flow as flow record contract bytes (made by FlowTable with ended_as_wire)",
    .tp_dealloc = (destructor)wireflow_dealloc,
    .tp_members = wireflow_members,
};

/* ------------------------------------------------------------------------------------------ */
/* FlowTable                                                                                   */

#define FIN_OUT 1
#define FIN_IN 2

struct Agent;

typedef struct Flow {
    struct Flow *hnext;       /* hash chain */
    struct Flow *prev, *next; /* LRU list of (agent, class): head is the least recently updated */
    struct Agent *agent;
    uint64_t hash;
    uint32_t local_ip, remote_ip;
    uint16_t local_port, remote_port;
    uint8_t protocol, cls, fins, is_dns;
    int64_t first, last;
    uint64_t touched; /* the table's touch count when a packet last updated it: the LRU order, as a number */
    uint64_t packets_out, packets_in, bytes_out, bytes_in, payload_out, payload_in;
    uint32_t flags, pid, samples;
    uint32_t dns; /* DNS messages kept (as FlowRecord.dns entries in `sw`) */
    PyObject *name;   /* owned; NULL until a packet names the process */
    /* owned FlowRecord; NULL until something in Python needs it (a snapshot, find, a kept DNS or ICMP packet,
     * the flow's end): a flow that only C touches costs no Python object until it ends. */
    PyObject *record;
    uint64_t number;     /* the counter part of the flow id: unique in the table, never reused */
    struct Flow *inext;  /* chain of the id index */
    /* The payload samples and DNS messages of a flow that is not ICMP, kept here as FlowRecord.samples and
     * FlowRecord.dns entries of proto/flow_record.proto (written into the record as `kept_wire`): no Python
     * object per packet. */
    uint8_t *sw;
    size_t sw_len, sw_cap;
} Flow;

typedef struct Agent {
    struct Agent *prev, *next; /* creation order (eviction scans agents in this order) */
    PyObject *id;              /* owned str */
    uint64_t serial;           /* part of the flow key */
    int64_t clock;             /* event clock, ns: newest packet timestamp seen */
    double wall;               /* time.monotonic() of the last batch */
    Py_ssize_t streams, count;
    Flow *head[NCLS], *tail[NCLS];
} Agent;

typedef struct {
    PyObject_HEAD
    Flow **buckets;
    size_t mask;
    Py_ssize_t count;
    Agent *first_agent, *last_agent;
    PyObject *agents; /* dict: agent id -> int (Agent pointer) */
    uint64_t next_serial;
    int64_t idle_ns[NCLS], active_ns, dns_active_ns;
    Py_ssize_t max_flows, max_per_agent;
    uint32_t samples_cap;
    Py_ssize_t sample_bytes; /* bytes kept of each sample's payload */
    uint8_t sampled[256];    /* per IP protocol: whether its flows keep payload samples at all */
    PyObject *factory, *keep, *ended;
    PyObject *transports; /* tuple indexed by IP protocol: FlowRecord.transport of each */
    Flow **ids;           /* id index: flows by `number` (same size as `buckets`), for find() */
    char prefix[33];      /* flow ids are prefix + number as 12+ lowercase hex digits */
    size_t prefix_len;
    uint64_t next_number;
    int ended_as_wire; /* flows Python never held end as WireFlow, not FlowRecord */
    uint32_t dns_cap;  /* DNS messages a flow keeps; a flow that holds this many ends (dns_full) */
    DnsWire parsed;    /* the DNS message of the packet at hand (a buffer reused for every packet) */
    PyObject *answers; /* list of (agent_id, DnsMessage bytes): the DNS responses of the call under way */
    WireReader *reader; /* owned, for the table's life; what add_wire parses with (NULL: add_packets only) */
    uint64_t touches;   /* packets accounted so far: every flow's `touched` comes from it */
    Py_ssize_t snapshot_visited; /* flows the last snapshot looked at (a check for tests) */
    unsigned long long created, expired, evicted;
    unsigned long long evicted_agent_cap; /* flows ended because their agent was at its own cap */
    unsigned long long bucket_refused;    /* new flows refused because their hash chain was full */
} FlowTable;

/* Longest hash chain a lookup walks. With the keyed hash and a load factor of at most 1 a chain
 * this long does not happen by chance (the longest of 200,000 flows is about 8); only someone
 * who knows the key could build one, and then the new flow is refused and counted instead. */
#define MAX_CHAIN 32

static double monotonic_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* the clock behind Python's time.monotonic() on Linux */
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The flow hash is SipHash-1-3 (the variant CPython uses for str and bytes) keyed with 128 random
 * bits drawn from os.urandom when the module is imported. The 5-tuples are chosen by whoever
 * sends the traffic; with an unkeyed hash anyone can compute tuples that share a bucket and
 * turn every lookup into a walk of one long chain under the tracker lock. */
static uint64_t siphash_k0, siphash_k1;

#define ROTL64(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                   \
    do {                                                                                           \
        v0 += v1; v1 = ROTL64(v1, 13); v1 ^= v0; v0 = ROTL64(v0, 32);                              \
        v2 += v3; v3 = ROTL64(v3, 16); v3 ^= v2;                                                   \
        v0 += v3; v3 = ROTL64(v3, 21); v3 ^= v0;                                                   \
        v2 += v1; v1 = ROTL64(v1, 17); v1 ^= v2; v2 = ROTL64(v2, 32);                              \
    } while (0)

/* SipHash-1-3 of three little-endian 64-bit words (a 24-byte message). */
static inline uint64_t siphash13_3(uint64_t m0, uint64_t m1, uint64_t m2)
{
    uint64_t v0 = siphash_k0 ^ 0x736f6d6570736575ULL, v1 = siphash_k1 ^ 0x646f72616e646f6dULL;
    uint64_t v2 = siphash_k0 ^ 0x6c7967656e657261ULL, v3 = siphash_k1 ^ 0x7465646279746573ULL;
    const uint64_t last = (uint64_t)24 << 56;
    v3 ^= m0; SIPROUND; v0 ^= m0;
    v3 ^= m1; SIPROUND; v0 ^= m1;
    v3 ^= m2; SIPROUND; v0 ^= m2;
    v3 ^= last; SIPROUND; v0 ^= last;
    v2 ^= 0xff;
    SIPROUND; SIPROUND; SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

static inline uint64_t flow_hash(uint64_t serial, const Pkt *p)
{
    uint64_t a = ((uint64_t)p->local_ip << 32) | p->remote_ip;
    uint64_t b = ((uint64_t)p->protocol << 32) | ((uint64_t)p->local_port << 16) | p->remote_port;
    return siphash13_3(serial, a, b);
}

static int table_grow(FlowTable *t)
{
    size_t n = (t->mask + 1) * 2;
    Flow **buckets = PyMem_Calloc(n, sizeof(Flow *));
    if (buckets == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Flow **ids = PyMem_Calloc(n, sizeof(Flow *));
    if (ids == NULL) {
        PyMem_Free(buckets);
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i <= t->mask; i++) {
        Flow *f = t->buckets[i];
        while (f) {
            Flow *next = f->hnext;
            size_t j = f->hash & (n - 1);
            f->hnext = buckets[j];
            buckets[j] = f;
            f = next;
        }
        f = t->ids[i];
        while (f) {
            Flow *next = f->inext;
            size_t j = f->number & (n - 1);
            f->inext = ids[j];
            ids[j] = f;
            f = next;
        }
    }
    PyMem_Free(t->buckets);
    PyMem_Free(t->ids);
    t->buckets = buckets;
    t->ids = ids;
    t->mask = n - 1;
    return 0;
}

static inline void lru_unlink(Agent *a, Flow *f)
{
    if (f->prev)
        f->prev->next = f->next;
    else
        a->head[f->cls] = f->next;
    if (f->next)
        f->next->prev = f->prev;
    else
        a->tail[f->cls] = f->prev;
    f->prev = f->next = NULL;
}

static inline void lru_append(Agent *a, Flow *f)
{
    f->prev = a->tail[f->cls];
    f->next = NULL;
    if (f->prev)
        f->prev->next = f;
    else
        a->head[f->cls] = f;
    a->tail[f->cls] = f;
}

static void hash_remove(FlowTable *t, Flow *f)
{
    Flow **slot = &t->buckets[f->hash & t->mask];
    while (*slot != f)
        slot = &(*slot)->hnext;
    *slot = f->hnext;
    /* Numbers are handed out in sequence, so the id index spreads them evenly: its chains are short. */
    slot = &t->ids[f->number & t->mask];
    while (*slot != f)
        slot = &(*slot)->inext;
    *slot = f->inext;
}

static int set_attr_u64(PyObject *obj, int attr, unsigned long long v)
{
    PyObject *o = PyLong_FromUnsignedLongLong(v);
    if (o == NULL)
        return -1;
    int rc = PyObject_SetAttr(obj, attr_strings[attr], o);
    Py_DECREF(o);
    return rc;
}

static int set_attr_i64(PyObject *obj, int attr, long long v)
{
    PyObject *o = PyLong_FromLongLong(v);
    if (o == NULL)
        return -1;
    int rc = PyObject_SetAttr(obj, attr_strings[attr], o);
    Py_DECREF(o);
    return rc;
}

/* Write the flow's counters into its FlowRecord. */
static int sync_record(Flow *f)
{
    PyObject *r = f->record;
    if (set_attr_i64(r, A_FIRST, f->first) || set_attr_i64(r, A_LAST, f->last) ||
        set_attr_u64(r, A_PK_OUT, f->packets_out) || set_attr_u64(r, A_PK_IN, f->packets_in) ||
        set_attr_u64(r, A_BY_OUT, f->bytes_out) || set_attr_u64(r, A_BY_IN, f->bytes_in) ||
        set_attr_u64(r, A_PB_OUT, f->payload_out) || set_attr_u64(r, A_PB_IN, f->payload_in) ||
        set_attr_u64(r, A_FLAGS, f->flags) || set_attr_u64(r, A_PID, f->pid))
        return -1;
    if (f->name && PyObject_SetAttr(r, attr_strings[A_NAME], f->name) < 0)
        return -1;
    if (f->sw_len) {
        PyObject *wire = PyBytes_FromStringAndSize((const char *)f->sw, (Py_ssize_t)f->sw_len);
        if (wire == NULL)
            return -1;
        int rc = PyObject_SetAttr(r, attr_strings[A_KEPT_WIRE], wire);
        Py_DECREF(wire);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* FlowRecord's leading fields, in its order: what build_record passes (positionally, in one call). Exported as
 * RECORD_FIELDS; a test holds them against the dataclass. `kept_wire` goes by keyword. */
enum {
    RF_FLOW_ID, RF_AGENT_ID, RF_PROTOCOL, RF_TRANSPORT, RF_LOCAL_IP, RF_LOCAL_PORT, RF_REMOTE_IP, RF_REMOTE_PORT,
    RF_FIRST, RF_LAST, RF_PK_OUT, RF_PK_IN, RF_BY_OUT, RF_BY_IN, RF_PB_OUT, RF_PB_IN, RF_FLAGS, RF_PID, RF_NAME,
    RF_END, RF_COUNT
};
static const char *const RECORD_FIELD_NAMES[RF_COUNT] = {
    "flow_id", "agent_id", "protocol", "transport", "local_ip", "local_port", "remote_ip", "remote_port",
    "first_ns", "last_ns", "packets_out", "packets_in", "bytes_out", "bytes_in", "payload_bytes_out",
    "payload_bytes_in", "tcp_flags", "pid", "process_name", "end_reason",
};
static PyObject *kept_wire_kwnames; /* ("kept_wire",) */

/* The flow's id into buf (at least 33 + 16 bytes): the table's prefix, then its number as at least 12 lowercase hex
 * digits (FlowIds' format); its length. Written by hand: snprintf's format interpreter was a millisecond of the
 * ingestion CPU per bench corpus (perf, 2026-12-01), for one id per ended flow. */
static int flow_id_write(const FlowTable *t, uint64_t number, char *buf)
{
    static const char hex[] = "0123456789abcdef";
    memcpy(buf, t->prefix, t->prefix_len);
    int digits = 12;
    while (digits < 16 && (number >> (4 * digits)) != 0)
        digits++;
    char *o = buf + t->prefix_len;
    for (int i = digits - 1; i >= 0; i--)
        *o++ = hex[(number >> (4 * i)) & 0xF];
    *o = '\0';
    return (int)(o - buf);
}

/* The flow's id as a str (flow_id_write). */
static PyObject *flow_id_of(FlowTable *t, uint64_t number)
{
    char buf[64];
    int n = flow_id_write(t, number, buf);
    return PyUnicode_DecodeASCII(buf, n, NULL);
}

/* A new FlowRecord holding the flow as it is now, ended for `reason` ("" while live): one call of the
 * factory (FlowRecord) with every field, instead of a Python call per flow start and attributes per end. */
static PyObject *build_record(FlowTable *t, Flow *f, PyObject *reason)
{
    PyObject *args[RF_COUNT + 1] = {NULL};
    args[RF_FLOW_ID] = flow_id_of(t, f->number);
    args[RF_AGENT_ID] = Py_NewRef(f->agent->id);
    args[RF_PROTOCOL] = PyLong_FromUnsignedLong(f->protocol);
    args[RF_TRANSPORT] = Py_NewRef(PyTuple_GET_ITEM(t->transports, f->protocol)); /* 256 items, checked at init */
    args[RF_LOCAL_IP] = PyLong_FromUnsignedLong(f->local_ip);
    args[RF_LOCAL_PORT] = PyLong_FromUnsignedLong(f->local_port);
    args[RF_REMOTE_IP] = PyLong_FromUnsignedLong(f->remote_ip);
    args[RF_REMOTE_PORT] = PyLong_FromUnsignedLong(f->remote_port);
    args[RF_FIRST] = PyLong_FromLongLong(f->first);
    args[RF_LAST] = PyLong_FromLongLong(f->last);
    args[RF_PK_OUT] = PyLong_FromUnsignedLongLong(f->packets_out);
    args[RF_PK_IN] = PyLong_FromUnsignedLongLong(f->packets_in);
    args[RF_BY_OUT] = PyLong_FromUnsignedLongLong(f->bytes_out);
    args[RF_BY_IN] = PyLong_FromUnsignedLongLong(f->bytes_in);
    args[RF_PB_OUT] = PyLong_FromUnsignedLongLong(f->payload_out);
    args[RF_PB_IN] = PyLong_FromUnsignedLongLong(f->payload_in);
    args[RF_FLAGS] = PyLong_FromUnsignedLong(f->flags);
    args[RF_PID] = PyLong_FromUnsignedLong(f->pid);
    args[RF_NAME] = Py_NewRef(f->name ? f->name : empty_string);
    args[RF_END] = Py_NewRef(reason);
    PyObject *kwnames = NULL;
    if (f->sw_len) {
        args[RF_COUNT] = PyBytes_FromStringAndSize((const char *)f->sw, (Py_ssize_t)f->sw_len);
        kwnames = kept_wire_kwnames;
    }
    PyObject *record = NULL;
    int ok = 1;
    for (int i = 0; i < RF_COUNT + (kwnames != NULL); i++)
        ok &= args[i] != NULL;
    if (ok)
        record = PyObject_Vectorcall(t->factory, args, RF_COUNT, kwnames);
    for (int i = 0; i < RF_COUNT + 1; i++)
        Py_XDECREF(args[i]);
    return record;
}

/* The flow's record, made now or brought up to date (borrowed; NULL on error). */
static PyObject *flow_record(FlowTable *t, Flow *f)
{
    if (f->record == NULL)
        return f->record = build_record(t, f, empty_string);
    return sync_record(f) < 0 ? NULL : f->record;
}

/* -- writing samples as protobuf ----------------------------------------------------------- */
/* The varint writers are dns_wire.h's (it is self-contained; this file writes with the same two). */
static inline size_t varint_size(uint64_t v) { return dnsw_varint_size(v); }
static inline uint8_t *put_varint(uint8_t *o, uint64_t v) { return dnsw_put_varint(o, v); }

/* proto3: a zero scalar is not written */
static inline size_t varint_field_size(int field, uint64_t v) { return v ? varint_size((uint64_t)field << 3) + varint_size(v) : 0; }

static inline uint8_t *put_varint_field(uint8_t *o, int field, uint64_t v)
{
    if (!v)
        return o;
    o = put_varint(o, (uint64_t)field << 3);
    return put_varint(o, v);
}

static inline size_t bytes_field_size(int field, size_t len) { return len ? varint_size(((uint64_t)field << 3) | 2) + varint_size(len) + len : 0; }

static inline uint8_t *put_bytes_field(uint8_t *o, int field, const void *data, size_t len)
{
    if (!len)
        return o;
    o = put_varint(o, ((uint64_t)field << 3) | 2);
    o = put_varint(o, len);
    memcpy(o, data, len);
    return o + len;
}

/* Room for `need` more bytes at the end of the flow's kept entries. */
static int kept_reserve(Flow *f, size_t need)
{
    if (f->sw_len + need <= f->sw_cap)
        return 0;
    size_t cap = f->sw_cap ? f->sw_cap * 2 : 256;
    while (cap < f->sw_len + need)
        cap *= 2;
    uint8_t *grown = PyMem_Realloc(f->sw, cap);
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    f->sw = grown;
    f->sw_cap = cap;
    return 0;
}

/* Append one payload sample to the flow's `samples` entries, its payload cut to sample_bytes; `dns_index` is
 * 1 + the index of its DNS message among the flow's `dns` entries (0: none). */
static int keep_sample(FlowTable *t, Flow *f, const Pkt *p, uint32_t dns_index)
{
    Py_ssize_t name_len = 0;
    const char *name = PyUnicode_AsUTF8AndSize(p->name, &name_len);
    if (name == NULL)
        return -1;
    size_t payload_len = (size_t)(p->payload_len < t->sample_bytes ? p->payload_len : t->sample_bytes);
    size_t body = varint_field_size(S_TIMESTAMP, (uint64_t)p->ts) + varint_field_size(S_DIRECTION, p->direction) +
                  varint_field_size(S_SIZE, p->size) + bytes_field_size(S_PAYLOAD, payload_len) +
                  varint_field_size(S_TCP_FLAGS, p->flags) + varint_field_size(S_PID, p->pid) +
                  bytes_field_size(S_PROCESS_NAME, (size_t)name_len) + varint_field_size(S_DNS_INDEX, dns_index);
    size_t need = varint_size(((uint64_t)S_RECORD_SAMPLES << 3) | 2) + varint_size(body) + body;
    if (kept_reserve(f, need) < 0)
        return -1;
    uint8_t *o = f->sw + f->sw_len;
    o = put_varint(o, ((uint64_t)S_RECORD_SAMPLES << 3) | 2);
    o = put_varint(o, body);
    o = put_varint_field(o, S_TIMESTAMP, (uint64_t)p->ts);
    o = put_varint_field(o, S_DIRECTION, p->direction);
    o = put_varint_field(o, S_SIZE, p->size);
    o = put_bytes_field(o, S_PAYLOAD, p->payload, payload_len);
    o = put_varint_field(o, S_TCP_FLAGS, p->flags);
    o = put_varint_field(o, S_PID, p->pid);
    o = put_bytes_field(o, S_PROCESS_NAME, name, (size_t)name_len);
    o = put_varint_field(o, S_DNS_INDEX, dns_index);
    f->sw_len = (size_t)(o - f->sw);
    return 0;
}

/* A packet of a DNS flow (port 53, not ICMP) with a payload: its message parsed in C (dns_wire.h, held equal to
 * appliance.flows.dns by tests/appliance/native/test_dns_wire.py) and kept as a FlowRecord.dns entry, responses
 * that resolve a name to an address also queued for the resolver cache, the packet kept as a sample while the flow's budget lasts. *full is set
 * when the flow now holds dns_cap messages: it ends, and the socket's next queries start a new record. */
static int keep_dns(FlowTable *t, Flow *f, const Pkt *p, int sample, int *full)
{
    uint32_t dns_index = 0;
    /* The message is read as the Python path did: TCP with its length prefix; UDP, and any other protocol's
     * port-53 packet that is not kept as a sample, without. */
    int tcp = p->protocol == 6;
    if (tcp || p->protocol == 17 || !sample) {
        DnsWire *w = &t->parsed;
        w->len = 0;
        const uint8_t *payload = (const uint8_t *)p->payload;
        int rc = tcp ? dns_to_wire_tcp(payload, (size_t)p->payload_len, (uint64_t)p->ts, w)
                     : dns_to_wire(payload, (size_t)p->payload_len, (uint64_t)p->ts, w);
        if (rc == DNS_WIRE_NOMEM) {
            PyErr_NoMemory();
            return -1;
        }
        if (rc == DNS_WIRE_OK) {
            if (w->resolves) { /* only what the resolver cache learns from travels ahead of the flow */
                PyObject *item = Py_BuildValue("(Oy#)", f->agent->id, (const char *)w->data, (Py_ssize_t)w->len);
                int bad = item == NULL || PyList_Append(t->answers, item) < 0;
                Py_XDECREF(item);
                if (bad)
                    return -1;
            }
            if (f->dns < t->dns_cap) {
                if (dns_wire_frame(w, 0, S_RECORD_DNS) < 0) {
                    PyErr_NoMemory();
                    return -1;
                }
                if (kept_reserve(f, w->len) < 0)
                    return -1;
                memcpy(f->sw + f->sw_len, w->data, w->len);
                f->sw_len += w->len;
                dns_index = ++f->dns;
            }
        }
    }
    if (sample) {
        if (keep_sample(t, f, p, dns_index) < 0)
            return -1;
        f->samples++;
    }
    *full = f->dns >= t->dns_cap;
    return 0;
}

/* FlowRecord field numbers (proto/flow_record.proto), as encode_entry writes them. Exported as
 * RECORD_WIRE_FIELDS and held against the generated descriptor by a test. */
enum {
    W_FLOW_ID = 1, W_AGENT_ID, W_PROTOCOL, W_LOCAL_IP, W_LOCAL_PORT, W_REMOTE_IP, W_REMOTE_PORT, W_FIRST, W_LAST,
    W_PK_OUT, W_PK_IN, W_BY_OUT, W_BY_IN, W_PB_OUT, W_PB_IN, W_FLAGS, W_PID, W_NAME, W_END,
    W_BATCH_RECORDS = 2,
};

/* The ended flow as a WireFlow: its FlowRecord encoded here, samples included as C kept them. */
static PyObject *wire_flow(FlowTable *t, Flow *f, PyObject *reason)
{
    Py_ssize_t agent_len, name_len = 0, reason_len;
    const char *agent = PyUnicode_AsUTF8AndSize(f->agent->id, &agent_len);
    const char *name = f->name ? PyUnicode_AsUTF8AndSize(f->name, &name_len) : "";
    const char *why = PyUnicode_AsUTF8AndSize(reason, &reason_len);
    if (agent == NULL || name == NULL || why == NULL)
        return NULL;
    char id[64];
    int id_len = flow_id_write(t, f->number, id);
    size_t body = bytes_field_size(W_FLOW_ID, (size_t)id_len) + bytes_field_size(W_AGENT_ID, (size_t)agent_len) +
                  varint_field_size(W_PROTOCOL, f->protocol) + varint_field_size(W_LOCAL_IP, f->local_ip) +
                  varint_field_size(W_LOCAL_PORT, f->local_port) + varint_field_size(W_REMOTE_IP, f->remote_ip) +
                  varint_field_size(W_REMOTE_PORT, f->remote_port) + varint_field_size(W_FIRST, (uint64_t)f->first) +
                  varint_field_size(W_LAST, (uint64_t)f->last) + varint_field_size(W_PK_OUT, f->packets_out) +
                  varint_field_size(W_PK_IN, f->packets_in) + varint_field_size(W_BY_OUT, f->bytes_out) +
                  varint_field_size(W_BY_IN, f->bytes_in) + varint_field_size(W_PB_OUT, f->payload_out) +
                  varint_field_size(W_PB_IN, f->payload_in) + varint_field_size(W_FLAGS, f->flags) +
                  varint_field_size(W_PID, f->pid) + bytes_field_size(W_NAME, (size_t)name_len) +
                  bytes_field_size(W_END, (size_t)reason_len) + f->sw_len;
    size_t size = varint_size(((uint64_t)W_BATCH_RECORDS << 3) | 2) + varint_size(body) + body;
    PyObject *entry = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (entry == NULL)
        return NULL;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(entry);
    o = put_varint(o, ((uint64_t)W_BATCH_RECORDS << 3) | 2);
    o = put_varint(o, body);
    o = put_bytes_field(o, W_FLOW_ID, id, (size_t)id_len);
    o = put_bytes_field(o, W_AGENT_ID, agent, (size_t)agent_len);
    o = put_varint_field(o, W_PROTOCOL, f->protocol);
    o = put_varint_field(o, W_LOCAL_IP, f->local_ip);
    o = put_varint_field(o, W_LOCAL_PORT, f->local_port);
    o = put_varint_field(o, W_REMOTE_IP, f->remote_ip);
    o = put_varint_field(o, W_REMOTE_PORT, f->remote_port);
    o = put_varint_field(o, W_FIRST, (uint64_t)f->first);
    o = put_varint_field(o, W_LAST, (uint64_t)f->last);
    o = put_varint_field(o, W_PK_OUT, f->packets_out);
    o = put_varint_field(o, W_PK_IN, f->packets_in);
    o = put_varint_field(o, W_BY_OUT, f->bytes_out);
    o = put_varint_field(o, W_BY_IN, f->bytes_in);
    o = put_varint_field(o, W_PB_OUT, f->payload_out);
    o = put_varint_field(o, W_PB_IN, f->payload_in);
    o = put_varint_field(o, W_FLAGS, f->flags);
    o = put_varint_field(o, W_PID, f->pid);
    o = put_bytes_field(o, W_NAME, name, (size_t)name_len);
    o = put_bytes_field(o, W_END, why, (size_t)reason_len);
    if (f->sw_len) {
        memcpy(o, f->sw, f->sw_len);
        o += f->sw_len;
    }
    if ((size_t)(o - (uint8_t *)PyBytes_AS_STRING(entry)) != size) { /* the sizes above and the writes disagree */
        Py_DECREF(entry);
        PyErr_SetString(PyExc_SystemError, "FlowTable: a flow record entry was not the size computed");
        return NULL;
    }
    WireFlow *w = PyObject_New(WireFlow, &WireFlowType);
    if (w == NULL) {
        Py_DECREF(entry);
        return NULL;
    }
    w->entry = entry;
    w->agent_id = Py_NewRef(f->agent->id);
    w->flow_id = PyUnicode_DecodeASCII(id, id_len, NULL);
    w->last_ns = f->last;
    if (w->flow_id == NULL) {
        Py_DECREF(w);
        return NULL;
    }
    return (PyObject *)w;
}

/* End a flow: out of the tables, counters into its record, the record onto the ended list. */
static int end_flow(FlowTable *t, Flow *f, PyObject *reason)
{
    Agent *a = f->agent;
    lru_unlink(a, f);
    hash_remove(t, f);
    t->count--;
    a->count--;
    if (reason == end_strings[E_EVICTED])
        t->evicted++;
    else
        t->expired++;
    int rc;
    if (f->record != NULL) { /* Python has held it since it was live (a snapshot, find, kept packets) */
        rc = sync_record(f);
        if (rc == 0)
            rc = PyObject_SetAttr(f->record, attr_strings[A_END], reason);
        if (rc == 0)
            rc = PyList_Append(t->ended, f->record);
        Py_DECREF(f->record);
    } else {
        PyObject *record = t->ended_as_wire ? wire_flow(t, f, reason) : build_record(t, f, reason);
        rc = record != NULL ? PyList_Append(t->ended, record) : -1;
        Py_XDECREF(record);
    }
    Py_XDECREF(f->name);
    PyMem_Free(f->sw);
    PyMem_Free(f);
    return rc;
}

static int expire_idle(FlowTable *t, Agent *a, int64_t clock)
{
    for (int c = 0; c < NCLS; c++) {
        int64_t horizon = clock - t->idle_ns[c];
        while (a->head[c] && a->head[c]->last <= horizon) {
            if (end_flow(t, a->head[c], end_strings[E_IDLE]) < 0)
                return -1;
        }
    }
    return 0;
}

/* Evict the flow idle longest (in its agent's event time) to make room under the cap. */
static int evict_oldest(FlowTable *t)
{
    Flow *best = NULL;
    int64_t best_idle = 0;
    for (Agent *a = t->first_agent; a; a = a->next) {
        for (int c = 0; c < NCLS; c++) {
            Flow *f = a->head[c];
            if (f && (best == NULL || a->clock - f->last > best_idle)) {
                best = f;
                best_idle = a->clock - f->last;
            }
        }
    }
    return best ? end_flow(t, best, end_strings[E_EVICTED]) : 0;
}

/* Evict the agent's own flow idle longest: one agent at its cap makes room from its own flows. */
static int evict_agent_oldest(FlowTable *t, Agent *a)
{
    Flow *best = NULL;
    for (int c = 0; c < NCLS; c++) {
        Flow *f = a->head[c];
        if (f && (best == NULL || f->last < best->last))
            best = f;
    }
    if (best == NULL)
        return 0;
    t->evicted_agent_cap++;
    return end_flow(t, best, end_strings[E_EVICTED]);
}

static Agent *agent_lookup(FlowTable *t, PyObject *id)
{
    PyObject *ptr = PyDict_GetItemWithError(t->agents, id);
    return ptr ? (Agent *)PyLong_AsVoidPtr(ptr) : NULL;
}

static Agent *agent_get(FlowTable *t, PyObject *id)
{
    Agent *a = agent_lookup(t, id);
    if (a || PyErr_Occurred())
        return a;
    if (!PyUnicode_Check(id)) {
        PyErr_SetString(PyExc_TypeError, "agent id must be a str");
        return NULL;
    }
    a = PyMem_Calloc(1, sizeof(Agent));
    if (a == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    PyObject *ptr = PyLong_FromVoidPtr(a);
    if (ptr == NULL || PyDict_SetItem(t->agents, id, ptr) < 0) {
        Py_XDECREF(ptr);
        PyMem_Free(a);
        return NULL;
    }
    Py_DECREF(ptr);
    Py_INCREF(id);
    a->id = id;
    a->serial = t->next_serial++;
    a->wall = monotonic_now();
    a->prev = t->last_agent;
    if (t->last_agent)
        t->last_agent->next = a;
    else
        t->first_agent = a;
    t->last_agent = a;
    return a;
}

static int agent_delete(FlowTable *t, Agent *a)
{
    if (PyDict_DelItem(t->agents, a->id) < 0)
        return -1;
    if (a->prev)
        a->prev->next = a->next;
    else
        t->first_agent = a->next;
    if (a->next)
        a->next->prev = a->prev;
    else
        t->last_agent = a->prev;
    Py_DECREF(a->id);
    PyMem_Free(a);
    return 0;
}

static int flush_agent(FlowTable *t, Agent *a, PyObject *reason)
{
    for (int c = 0; c < NCLS; c++) {
        while (a->head[c]) {
            if (end_flow(t, a->head[c], reason) < 0)
                return -1;
        }
    }
    return 0;
}

typedef struct {
    FlowTable *table;
    Agent *agent;
    int64_t clock;
} Batch;

static Flow *new_flow(FlowTable *t, Agent *a, const Pkt *p, uint64_t hash, int cls, int is_dns)
{
    if (a->count >= t->max_per_agent && evict_agent_oldest(t, a) < 0)
        return NULL;
    if (t->count >= t->max_flows && evict_oldest(t) < 0)
        return NULL;
    if ((size_t)t->count >= t->mask + 1 && table_grow(t) < 0)
        return NULL;
    Flow *f = PyMem_Calloc(1, sizeof(Flow));
    if (f == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    f->number = t->next_number++;
    f->inext = t->ids[f->number & t->mask];
    t->ids[f->number & t->mask] = f;
    f->agent = a;
    f->hash = hash;
    f->local_ip = p->local_ip;
    f->remote_ip = p->remote_ip;
    f->local_port = (uint16_t)p->local_port;
    f->remote_port = (uint16_t)p->remote_port;
    f->protocol = (uint8_t)p->protocol;
    f->cls = (uint8_t)cls;
    f->is_dns = (uint8_t)is_dns;
    f->first = f->last = p->ts;
    size_t b = hash & t->mask;
    f->hnext = t->buckets[b];
    t->buckets[b] = f;
    lru_append(a, f);
    t->count++;
    a->count++;
    t->created++;
    return f;
}

/* Account one packet to its flow. */
static int track(void *ctx, Pkt *p)
{
    Batch *batch = ctx;
    FlowTable *t = batch->table;
    Agent *a = batch->agent;
    int is_dns = p->remote_port == 53 || p->local_port == 53;
    int cls;
    switch (p->protocol) {
    case 6: cls = C_TCP; break;
    case 17: cls = is_dns ? C_DNS : C_UDP; break;
    case 1: cls = C_ICMP; break;
    default: cls = C_OTHER;
    }
    uint64_t hash = flow_hash(a->serial, p);
    Flow *f = t->buckets[hash & t->mask];
    int chain = 0;
    while (f && !(f->hash == hash && f->agent == a && f->local_ip == p->local_ip && f->remote_ip == p->remote_ip &&
                  f->local_port == p->local_port && f->remote_port == p->remote_port && f->protocol == p->protocol)) {
        f = f->hnext;
        chain++;
    }
    if (f == NULL) {
        if (chain >= MAX_CHAIN) {
            t->bucket_refused++;
            return 0;
        }
        f = new_flow(t, a, p, hash, cls, is_dns);
        if (f == NULL)
            return -1;
    } else {
        if (a->tail[cls] != f) {
            lru_unlink(a, f);
            lru_append(a, f);
        }
        if (p->ts > f->last)
            f->last = p->ts;
        else if (p->ts < f->first)
            f->first = p->ts;
    }
    f->touched = ++t->touches; /* it is now at the tail of its list: the lists stay sorted by `touched` */
    if (p->ts > batch->clock)
        batch->clock = p->ts;
    if (p->direction == OUTBOUND) {
        f->packets_out++;
        f->bytes_out += p->size;
        f->payload_out += (uint64_t)p->payload_len;
    } else {
        f->packets_in++;
        f->bytes_in += p->size;
        f->payload_in += (uint64_t)p->payload_len;
    }
    if (p->payload_len) {
        int sample = f->samples < t->samples_cap && t->sampled[p->protocol];
        if (p->protocol != 1 && is_dns) {
            int full;
            if (keep_dns(t, f, p, sample, &full) < 0)
                return -1;
            if (full)
                return end_flow(t, f, end_strings[E_FULL]);
        } else if (sample && (p->protocol != 1 || (t->ended_as_wire && !is_dns))) {
            /* ICMP's too when flows leave as contract bytes: the analysis process reads IcmpInfo from the sample's
             * payload as it travels (cut), so the whole payload Python would read it from never reaches it. Kept
             * in Python, each cost a call and a Packet here and its record an encoding in Python (with the batch
             * it ended in): 2 ms of the ingestion CPU a pass of the bench corpus (22 ICMP flows of 8 samples). */
            if (keep_sample(t, f, p, 0) < 0)
                return -1;
            f->samples++;
        } else if (sample || is_dns) {
            /* ICMP flows' kept packets go to Python when analysed in this process: IcmpInfo is read from the whole
             * payload, before the cut (and a port-53 ICMP packet's bytes are read as DNS there, as before). Python
             * says when a DNS flow is full, so that its socket's next queries start a new record. */
            if (f->record == NULL && (f->record = build_record(t, f, empty_string)) == NULL)
                return -1;
            PyObject *raw = pkt_tuple(p);
            if (raw == NULL)
                return -1;
            PyObject *full = PyObject_CallFunctionObjArgs(t->keep, f->record, raw, sample ? Py_True : Py_False,
                                                          is_dns ? Py_True : Py_False, NULL);
            Py_DECREF(raw);
            if (full == NULL)
                return -1;
            int is_full = PyObject_IsTrue(full);
            Py_DECREF(full);
            if (is_full < 0)
                return -1;
            if (sample)
                f->samples++;
            if (is_full)
                return end_flow(t, f, end_strings[E_FULL]);
        }
    }
    if (p->pid && !f->pid) {
        f->pid = p->pid;
        Py_INCREF(p->name);
        Py_XSETREF(f->name, p->name);
    }
    if (p->flags) {
        f->flags |= p->flags;
        if (p->flags & (TCP_RST | TCP_FIN)) {
            int closed;
            if (p->flags & TCP_RST) {
                closed = 1;
            } else {
                f->fins |= p->direction == OUTBOUND ? FIN_OUT : FIN_IN;
                closed = f->fins == (FIN_OUT | FIN_IN);
            }
            if (closed)
                return end_flow(t, f, end_strings[E_TCP_CLOSE]);
        }
    }
    if (f->last - f->first >= (is_dns ? t->dns_active_ns : t->active_ns))
        return end_flow(t, f, end_strings[E_ACTIVE]);
    return 0;
}

/* After a batch: commit the agent's event clock and expire what it ended. */
static int finish_batch(Batch *batch)
{
    batch->agent->clock = batch->clock;
    batch->agent->wall = monotonic_now();
    return expire_idle(batch->table, batch->agent, batch->clock);
}

static int u32_item(PyObject *tuple, Py_ssize_t i, uint32_t *out)
{
    unsigned long v = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(tuple, i));
    if (v == (unsigned long)-1 && PyErr_Occurred())
        return -1;
    if (v > UINT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "packet field out of range");
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

static int pkt_from_tuple(PyObject *raw, Pkt *p)
{
    if (!PyTuple_Check(raw) || PyTuple_GET_SIZE(raw) != 12) {
        PyErr_SetString(PyExc_TypeError, "a RawPacket is a tuple of 12 items");
        return -1;
    }
    p->ts = PyLong_AsLongLong(PyTuple_GET_ITEM(raw, 0));
    if (p->ts == -1 && PyErr_Occurred())
        return -1;
    if (u32_item(raw, 1, &p->direction) || u32_item(raw, 2, &p->protocol) || u32_item(raw, 3, &p->local_ip) ||
        u32_item(raw, 4, &p->remote_ip) || u32_item(raw, 5, &p->local_port) || u32_item(raw, 6, &p->remote_port) ||
        u32_item(raw, 7, &p->size) || u32_item(raw, 9, &p->flags) || u32_item(raw, 10, &p->pid))
        return -1;
    if (p->local_port > 65535 || p->remote_port > 65535 || p->protocol > 255) {
        PyErr_SetString(PyExc_ValueError, "a RawPacket holds validated values only");
        return -1;
    }
    PyObject *payload = PyTuple_GET_ITEM(raw, 8);
    PyObject *name = PyTuple_GET_ITEM(raw, 11);
    if (!PyBytes_Check(payload) || !PyUnicode_Check(name)) {
        PyErr_SetString(PyExc_TypeError, "RawPacket payload must be bytes and process name str");
        return -1;
    }
    p->payload = PyBytes_AS_STRING(payload);
    p->payload_len = PyBytes_GET_SIZE(payload);
    p->payload_obj = payload;
    p->name = name;
    return 0;
}

static PyObject *table_add_packets(FlowTable *self, PyObject *args)
{
    PyObject *agent_id, *packets;
    if (!PyArg_ParseTuple(args, "UO", &agent_id, &packets))
        return NULL;
    PyObject *seq = PySequence_Fast(packets, "packets must be iterable");
    if (seq == NULL)
        return NULL;
    Batch batch = {self, agent_get(self, agent_id), 0};
    if (batch.agent == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    batch.clock = batch.agent->clock;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    int rc = 0;
    for (Py_ssize_t i = 0; i < n && rc == 0; i++) {
        Pkt p;
        rc = pkt_from_tuple(items[i], &p);
        if (rc == 0)
            rc = track(&batch, &p);
    }
    Py_DECREF(seq);
    if (rc < 0)
        return NULL;
    if (finish_batch(&batch) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* add_wire(agent_id, data, batched, now_ns): parse `data` with the table's reader and account its packets. */
static PyObject *table_add_wire(FlowTable *self, PyObject *args)
{
    PyObject *agent_id;
    Py_buffer view;
    int batched;
    long long now_ns;
    if (!PyArg_ParseTuple(args, "Uy*pL", &agent_id, &view, &batched, &now_ns))
        return NULL;
    WireReader *reader = self->reader;
    if (reader == NULL) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "this FlowTable was built without a reader: add_packets only");
        return NULL;
    }
    Batch batch = {self, agent_get(self, agent_id), 0};
    if (batch.agent == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    batch.clock = batch.agent->clock;
    Py_ssize_t accepted = 0, rejected = 0;
    int rc = reader_walk(reader, view.buf, view.len, batched, now_ns, track, &batch, &accepted, &rejected);
    PyBuffer_Release(&view);
    if (rc < 0 || finish_batch(&batch) < 0)
        return NULL;
    return Py_BuildValue("(nn)", accepted, rejected);
}

static PyObject *table_take_ended(FlowTable *self, PyObject *unused)
{
    PyObject *ended = self->ended;
    PyObject *fresh = PyList_New(0);
    if (fresh == NULL)
        return NULL;
    self->ended = fresh;
    return ended;
}

static PyObject *table_take_answers(FlowTable *self, PyObject *unused)
{
    PyObject *answers = self->answers;
    PyObject *fresh = PyList_New(0);
    if (fresh == NULL)
        return NULL;
    self->answers = fresh;
    return answers;
}

static PyObject *table_stream_opened(FlowTable *self, PyObject *agent_id)
{
    Agent *a = agent_get(self, agent_id);
    if (a == NULL)
        return NULL;
    a->streams++;
    Py_RETURN_NONE;
}

/* A stream ended or broke: when it was the agent's last one, flush all its flows. */
static PyObject *table_stream_closed(FlowTable *self, PyObject *agent_id)
{
    Agent *a = agent_lookup(self, agent_id);
    if (a == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    if (a->streams > 0)
        a->streams--;
    if (a->streams == 0 && (flush_agent(self, a, end_strings[E_STREAM]) < 0 || agent_delete(self, a) < 0))
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *table_flush_all(FlowTable *self, PyObject *reason)
{
    if (!PyUnicode_Check(reason)) {
        PyErr_SetString(PyExc_TypeError, "the end reason must be a str");
        return NULL;
    }
    /* Interned, so that an "evicted" from Python is counted as an eviction too. */
    Py_INCREF(reason);
    PyUnicode_InternInPlace(&reason);
    int rc = 0;
    for (Agent *a = self->first_agent; a && rc == 0; a = a->next)
        rc = flush_agent(self, a, reason);
    Py_DECREF(reason);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* Advance the event clock of quiet agents by the wall time they were quiet, and expire. */
static PyObject *table_sweep(FlowTable *self, PyObject *arg)
{
    double now = PyFloat_AsDouble(arg);
    if (now == -1.0 && PyErr_Occurred())
        return NULL;
    Agent *a = self->first_agent;
    while (a) {
        Agent *next = a->next;
        double quiet = now - a->wall;
        if (quiet >= 1.0) {
            double advanced = (double)a->clock + quiet * 1e9; /* saturates instead of overflowing */
            a->clock = advanced >= 9.2e18 ? (int64_t)9.2e18 : a->clock + (int64_t)(quiet * 1e9);
            a->wall = now;
            if (expire_idle(self, a, a->clock) < 0)
                return NULL;
        }
        if (!a->streams && !a->count && agent_delete(self, a) < 0)
            return NULL;
        a = next;
    }
    Py_RETURN_NONE;
}

/* Restore the max-heap property (by `touched`) below position i. */
static void heap_down(Flow **heap, size_t n, size_t i)
{
    Flow *x = heap[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && heap[c + 1]->touched > heap[c]->touched)
            c++;
        if (heap[c]->touched <= x->touched)
            break;
        heap[i] = heap[c];
        i = c;
    }
    heap[i] = x;
}

/* The `limit` live flows a packet updated most recently, most recent first, optionally of one agent.
 *
 * Every (agent, class) list is in update order (`touched` rises from head to tail), so a k-way merge
 * from the tails yields the table in update order, newest first: the newest `limit` cost the list
 * tails plus `limit` steps of a heap, however many flows the table holds. The order is that of
 * arrival, not of the packets' own timestamps: those may go backwards, and a flow's `last_ns` (its
 * newest timestamp) does not move on such a packet, so sorting by it would need a scan or a second
 * index kept up to date on every packet. */
static PyObject *table_snapshot(FlowTable *self, PyObject *args)
{
    PyObject *agent_id;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "On", &agent_id, &limit))
        return NULL;
    self->snapshot_visited = 0;
    Agent *only = NULL;
    if (agent_id != Py_None) {
        only = agent_lookup(self, agent_id);
        if (only == NULL) {
            if (PyErr_Occurred())
                return NULL;
            return PyList_New(0);
        }
    }
    Py_ssize_t live = only ? only->count : self->count;
    if (limit <= 0 || live == 0)
        return PyList_New(0);
    if (limit > live)
        limit = live;
    size_t lists = (size_t)NCLS * (only ? 1 : (size_t)PyDict_GET_SIZE(self->agents));
    Flow **heap = PyMem_Malloc(sizeof(Flow *) * lists);
    if (heap == NULL)
        return PyErr_NoMemory();
    size_t n = 0;
    for (Agent *a = only ? only : self->first_agent; a; a = only ? NULL : a->next)
        for (int c = 0; c < NCLS; c++)
            if (a->tail[c] && n < lists)
                heap[n++] = a->tail[c];
    for (size_t i = n / 2; i-- > 0;)
        heap_down(heap, n, i);
    self->snapshot_visited = (Py_ssize_t)n;
    PyObject *out = PyList_New(limit);
    Py_ssize_t taken = 0;
    while (out != NULL && taken < limit && n > 0) {
        Flow *f = heap[0];
        if (flow_record(self, f) == NULL) {
            Py_CLEAR(out);
            break;
        }
        Py_INCREF(f->record);
        PyList_SET_ITEM(out, taken++, f->record);
        if (f->prev) {
            heap[0] = f->prev;
            self->snapshot_visited++;
        } else {
            heap[0] = heap[--n];
        }
        if (n > 0)
            heap_down(heap, n, 0);
    }
    PyMem_Free(heap);
    if (out != NULL && taken < limit) { /* the lists hold fewer flows than the counts say: a bug */
        Py_CLEAR(out);
        PyErr_SetString(PyExc_SystemError, "FlowTable: the flow lists and counts disagree");
    }
    return out;
}

/* find(flow_id): the live flow of that id, its record up to date, or None. Through the id index: one short
 * chain, never a scan of the table. */
static PyObject *table_find(FlowTable *self, PyObject *wanted)
{
    if (!PyUnicode_Check(wanted)) {
        PyErr_SetString(PyExc_TypeError, "a flow id is a str");
        return NULL;
    }
    Py_ssize_t len;
    const char *text = PyUnicode_AsUTF8AndSize(wanted, &len);
    if (text == NULL)
        return NULL;
    size_t n = (size_t)len;
    if (n < self->prefix_len + 12 || n > self->prefix_len + 16 || memcmp(text, self->prefix, self->prefix_len) != 0)
        Py_RETURN_NONE;
    uint64_t number = 0;
    for (size_t i = self->prefix_len; i < n; i++) {
        char c = text[i];
        int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (digit < 0)
            Py_RETURN_NONE;
        number = number << 4 | (uint64_t)digit;
    }
    for (Flow *f = self->ids[number & self->mask]; f; f = f->inext)
        if (f->number == number) {
            /* the canonical spelling only: "...0001" and "...00001" are not both one flow's id */
            char canonical[64];
            int m = flow_id_write(self, number, canonical);
            if ((size_t)m != n || memcmp(canonical, text, n) != 0)
                Py_RETURN_NONE;
            return Py_XNewRef(flow_record(self, f));
        }
    Py_RETURN_NONE;
}

static int table_init(FlowTable *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"idle_ns", "active_ns", "dns_active_ns", "max_flows", "samples_per_flow",
                             "factory", "keep", "max_flows_per_agent", "reader", "sample_bytes", "transports",
                             "id_prefix", "ended_as_wire", "dns_per_flow", "sampled", NULL};
    long long idle[NCLS], active, dns_active;
    Py_ssize_t max_flows, samples, max_per_agent = 0, sample_bytes = 2048, prefix_len = 0;
    PyObject *factory, *keep, *reader = Py_None, *transports = NULL;
    const char *prefix = "";
    int ended_as_wire = 0;
    Py_ssize_t dns_cap = 64;
    const char *sampled = NULL;
    Py_ssize_t sampled_len = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "(LLLLL)LLnnOO|n$OnO!s#pnz#", kwlist, &idle[0], &idle[1], &idle[2],
                                     &idle[3], &idle[4], &active, &dns_active, &max_flows, &samples, &factory, &keep,
                                     &max_per_agent, &reader, &sample_bytes, &PyTuple_Type, &transports, &prefix,
                                     &prefix_len, &ended_as_wire, &dns_cap, &sampled, &sampled_len))
        return -1;
    if (sampled != NULL && sampled_len != 256) {
        PyErr_SetString(PyExc_ValueError, "sampled must be 256 flags, one per IP protocol (or None: every one)");
        return -1;
    }
    if (transports == NULL || PyTuple_GET_SIZE(transports) != 256) {
        PyErr_SetString(PyExc_TypeError, "transports must be a tuple of 256: the transport of each IP protocol");
        return -1;
    }
    if (dns_cap < 1 || dns_cap > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "dns_per_flow must be at least 1 and a 32-bit count");
        return -1;
    }
    if (prefix_len > 32) {
        PyErr_SetString(PyExc_ValueError, "id_prefix is at most 32 characters");
        return -1;
    }
    for (Py_ssize_t i = 0; i < prefix_len; i++)
        if ((unsigned char)prefix[i] < 0x21 || (unsigned char)prefix[i] > 0x7e) {
            PyErr_SetString(PyExc_ValueError, "id_prefix must be printable ASCII");
            return -1;
        }
    if (sample_bytes < 0) {
        PyErr_SetString(PyExc_ValueError, "sample_bytes must not be negative");
        return -1;
    }
    if (!PyCallable_Check(factory) || !PyCallable_Check(keep)) {
        PyErr_SetString(PyExc_TypeError, "factory and keep must be callable");
        return -1;
    }
    if (reader != Py_None && !PyObject_TypeCheck(reader, &WireReaderType)) {
        PyErr_SetString(PyExc_TypeError, "reader must be a WireReader or None");
        return -1;
    }
    if (max_flows < 1 || samples < 0 || samples > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "max_flows must be at least 1 and samples_per_flow a 32-bit count");
        return -1;
    }
    if (self->buckets != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "FlowTable is already initialised");
        return -1;
    }
    for (int c = 0; c < NCLS; c++)
        self->idle_ns[c] = idle[c];
    self->active_ns = active;
    self->dns_active_ns = dns_active;
    self->max_flows = max_flows;
    /* 0: no cap of its own, only the table's */
    self->max_per_agent = max_per_agent > 0 && max_per_agent < max_flows ? max_per_agent : max_flows;
    self->samples_cap = (uint32_t)samples;
    self->sample_bytes = sample_bytes;
    for (int i = 0; i < 256; i++)
        self->sampled[i] = sampled == NULL || sampled[i] != 0;
    self->buckets = PyMem_Calloc(1024, sizeof(Flow *));
    self->ids = PyMem_Calloc(1024, sizeof(Flow *));
    self->mask = 1023;
    memcpy(self->prefix, prefix, (size_t)prefix_len);
    self->prefix[prefix_len] = '\0';
    self->prefix_len = (size_t)prefix_len;
    self->next_number = 1;
    self->ended_as_wire = ended_as_wire;
    self->dns_cap = (uint32_t)dns_cap;
    self->answers = PyList_New(0);
    if (self->answers == NULL)
        return -1;
    self->agents = PyDict_New();
    self->ended = PyList_New(0);
    if (self->buckets == NULL || self->ids == NULL || self->agents == NULL || self->ended == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_INCREF(factory);
    self->factory = factory;
    Py_INCREF(keep);
    self->keep = keep;
    self->transports = Py_NewRef(transports);
    if (reader != Py_None) {
        Py_INCREF(reader);
        self->reader = (WireReader *)reader;
    }
    return 0;
}

static int table_traverse(FlowTable *self, visitproc visit, void *arg)
{
    Py_VISIT(self->factory);
    Py_VISIT(self->keep);
    Py_VISIT(self->ended);
    Py_VISIT(self->agents);
    Py_VISIT(self->transports);
    Py_VISIT(self->answers);
    for (Agent *a = self->first_agent; a; a = a->next)
        for (int c = 0; c < NCLS; c++)
            for (Flow *f = a->head[c]; f; f = f->next)
                Py_VISIT(f->record);
    return 0;
}

static int table_clear(FlowTable *self)
{
    Py_CLEAR(self->factory);
    Py_CLEAR(self->keep);
    Py_CLEAR(self->transports);
    Py_CLEAR(self->answers);
    return 0;
}

static void table_dealloc(FlowTable *self)
{
    PyObject_GC_UnTrack(self);
    table_clear(self);
    Agent *a = self->first_agent;
    while (a) {
        for (int c = 0; c < NCLS; c++) {
            Flow *f = a->head[c];
            while (f) {
                Flow *next = f->next;
                Py_XDECREF(f->name);
                Py_XDECREF(f->record);
                PyMem_Free(f->sw);
                PyMem_Free(f);
                f = next;
            }
        }
        Agent *next = a->next;
        Py_DECREF(a->id);
        PyMem_Free(a);
        a = next;
    }
    PyMem_Free(self->buckets);
    PyMem_Free(self->ids);
    dns_wire_free(&self->parsed);
    Py_CLEAR(self->agents);
    Py_CLEAR(self->ended);
    Py_CLEAR(self->reader);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *table_get_count(FlowTable *self, void *closure) { return PyLong_FromSsize_t(self->count); }
static PyObject *table_get_answers(FlowTable *self, void *closure) { return Py_NewRef(self->answers); }
static PyObject *table_get_created(FlowTable *self, void *closure) { return PyLong_FromUnsignedLongLong(self->created); }
static PyObject *table_get_expired(FlowTable *self, void *closure) { return PyLong_FromUnsignedLongLong(self->expired); }
static PyObject *table_get_evicted(FlowTable *self, void *closure) { return PyLong_FromUnsignedLongLong(self->evicted); }
static PyObject *table_get_evicted_agent_cap(FlowTable *self, void *closure)
{
    return PyLong_FromUnsignedLongLong(self->evicted_agent_cap);
}
static PyObject *table_get_bucket_refused(FlowTable *self, void *closure)
{
    return PyLong_FromUnsignedLongLong(self->bucket_refused);
}

static PyObject *table_get_snapshot_visited(FlowTable *self, void *closure)
{
    return PyLong_FromSsize_t(self->snapshot_visited);
}

/* The longest hash chain now (a check for tests and benchmarks; walks the whole table). */
static PyObject *table_get_longest_chain(FlowTable *self, void *closure)
{
    Py_ssize_t longest = 0;
    for (size_t i = 0; i <= self->mask; i++) {
        Py_ssize_t n = 0;
        for (Flow *f = self->buckets[i]; f; f = f->hnext)
            n++;
        if (n > longest)
            longest = n;
    }
    return PyLong_FromSsize_t(longest);
}

static PyMethodDef table_methods[] = {
    {"add_packets", (PyCFunction)table_add_packets, METH_VARARGS, "add_packets(agent_id, raw_packets)"},
    {"add_wire", (PyCFunction)table_add_wire, METH_VARARGS,
     "add_wire(agent_id, data, batched, now_ns) -> (accepted, rejected), parsed by the table's reader"},
    {"take_ended", (PyCFunction)table_take_ended, METH_NOARGS, "the records ended since the last call"},
    {"take_answers", (PyCFunction)table_take_answers, METH_NOARGS,
     "the DNS responses seen since the last call: (agent_id, serialized sensor.flows.DnsMessage)"},
    {"stream_opened", (PyCFunction)table_stream_opened, METH_O, NULL},
    {"stream_closed", (PyCFunction)table_stream_closed, METH_O, NULL},
    {"flush_all", (PyCFunction)table_flush_all, METH_O, "flush_all(reason)"},
    {"sweep", (PyCFunction)table_sweep, METH_O, "sweep(now_monotonic)"},
    {"snapshot", (PyCFunction)table_snapshot, METH_VARARGS,
     "snapshot(agent_id or None, limit): the flows updated most recently, most recent first"},
    {"find", (PyCFunction)table_find, METH_O, "find(flow_id): the live flow's record, up to date, or None"},
    {NULL},
};

static PyGetSetDef table_getset[] = {
    {"count", (getter)table_get_count, NULL, "live flows", NULL},
    {"answers", (getter)table_get_answers, NULL,
     "the DNS responses of the call under way (the keep callback appends the ones it parses)", NULL},
    {"created", (getter)table_get_created, NULL, NULL, NULL},
    {"expired", (getter)table_get_expired, NULL, NULL, NULL},
    {"evicted", (getter)table_get_evicted, NULL, NULL, NULL},
    {"evicted_agent_cap", (getter)table_get_evicted_agent_cap, NULL, "flows evicted by their agent's own cap", NULL},
    {"bucket_refused", (getter)table_get_bucket_refused, NULL, "new flows refused on a full hash chain", NULL},
    {"longest_chain", (getter)table_get_longest_chain, NULL, "the longest hash chain (walks the table)", NULL},
    {"snapshot_visited", (getter)table_get_snapshot_visited, NULL, "flows the last snapshot looked at", NULL},
    {NULL},
};

static PyTypeObject FlowTableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "appliance.native.fastpath.FlowTable",
    .tp_basicsize = sizeof(FlowTable),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "FlowTable(idle_ns, active_ns, dns_active_ns, max_flows, samples_per_flow, factory, keep, "
              "max_flows_per_agent=0, *, reader=None, sample_bytes=2048, transports, id_prefix='', ended_as_wire=False, "
              "dns_per_flow=64, sampled=None)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)table_init,
    .tp_dealloc = (destructor)table_dealloc,
    .tp_traverse = (traverseproc)table_traverse,
    .tp_clear = (inquiry)table_clear,
    .tp_methods = table_methods,
    .tp_getset = table_getset,
};

/* ------------------------------------------------------------------------------------------ */

/* dns_wire(payload, timestamp_ns=0, tcp=False, field=0): dns_wire.h's parser as Python sees it, for the
 * tests that hold it equal to appliance/flows/dns.py; field > 0 frames the message as that field. */
static PyObject *fastpath_dns_wire(PyObject *module, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"payload", "timestamp_ns", "tcp", "field", NULL};
    Py_buffer payload;
    PyObject *timestamp = NULL;
    int tcp = 0;
    unsigned int field = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*|O!pI", kwlist, &payload, &PyLong_Type, &timestamp, &tcp, &field))
        return NULL;
    if (field >= (1u << 29)) {
        PyBuffer_Release(&payload);
        PyErr_SetString(PyExc_ValueError, "field must be below 2**29");
        return NULL;
    }
    unsigned long long timestamp_ns = timestamp != NULL ? PyLong_AsUnsignedLongLong(timestamp) : 0;
    if (timestamp_ns == (unsigned long long)-1 && PyErr_Occurred()) {
        PyBuffer_Release(&payload);
        return NULL;
    }
    DnsWire out = {0};
    int rc = tcp ? dns_to_wire_tcp(payload.buf, (size_t)payload.len, timestamp_ns, &out)
                 : dns_to_wire(payload.buf, (size_t)payload.len, timestamp_ns, &out);
    PyBuffer_Release(&payload);
    if (rc == DNS_WIRE_OK && field > 0 && dns_wire_frame(&out, 0, field) < 0)
        rc = DNS_WIRE_NOMEM;
    PyObject *result = rc == DNS_WIRE_NOMEM ? PyErr_NoMemory()
                       : rc == DNS_WIRE_NONE ? Py_NewRef(Py_None)
                                             : PyBytes_FromStringAndSize((const char *)out.data, (Py_ssize_t)out.len);
    dns_wire_free(&out);
    return result;
}

/* -- reading flow record batches ----------------------------------------------------------- */

/* decode_records: a serialized FlowRecordBatch as appliance.flows.record_codec._decode_python reads it with upb,
 * without a upb message and attribute reads per field. Each message is read by one loop over a table of its
 * field kinds; what upb does is matched where the wire is odd (the tests hold the two decoders equal on hostile
 * bytes): a known field with another wire type is an unknown field; the last value of a scalar wins; uint32
 * fields keep the low 32 bits of a longer varint; strings must be UTF-8; unknown groups nest at most
 * GROUP_DEPTH_LIMIT deep, counted from the top of the batch.
 *
 * The objects are equal to upb's, field for field and type for type, but fewer: within one call, an ASCII str
 * equal to one of the last few of its kind is shared (a DNS response repeats its query's name, an answer the
 * question; a batch repeats its agents and end reasons), and so is an int equal to the last value of the same
 * field (a flow's local address, a query's id in its response). Both are immutable: sharing shows only to `is`.
 * The string caches compare bytes, with no hash (names are chosen by whoever sends the packets), over a few
 * entries. An ASCII string is copied, not decoded; any other is decoded where it is read, so invalid UTF-8
 * fails at the same place as before, with the same UnicodeDecodeError. */
enum { K_SKIP, K_U32, K_U64, K_BOOL, K_STR, K_BYTES, K_MSG, K_LATER }; /* up to K_BOOL: varints */
#define MSG_MAX_FIELD 21

/* The last value of each field read, by field number. A field is set when its bit is: a varint in `v` (else 0);
 * a string or bytes field as its bytes in the batch (`at`, `len`: any bytes, ASCII for a string) or as a
 * non-ASCII string already decoded (`o`). Bits, not zeroed arrays: clearing the arrays was a sixth of the
 * reader's time. */
typedef struct {
    uint32_t has_v, has_span, has_obj;
    const uint8_t *later; /* the tag of the first K_LATER field (read in a second pass); NULL: none */
    uint64_t v[MSG_MAX_FIELD + 1];
    uint32_t len[MSG_MAX_FIELD + 1];
    const uint8_t *at[MSG_MAX_FIELD + 1];
    PyObject *o[MSG_MAX_FIELD + 1];
} MsgFields;

static inline uint64_t msg_v(const MsgFields *m, int field)
{
    return m->has_v >> field & 1 ? m->v[field] : 0;
}

typedef int (*OnMessage)(void *ctx, uint32_t field, const uint8_t *p, const uint8_t *end);

static void msg_fields_clear(MsgFields *m)
{
    for (; m->has_obj; m->has_obj &= m->has_obj - 1)
        Py_DECREF(m->o[__builtin_ctz(m->has_obj)]);
}

/* Most varints of a record (tags, lengths, small fields) are one byte: read without the loop. */
static inline int dec_varint(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
    if (*p < end && **p < 0x80) {
        *out = *(*p)++;
        return 0;
    }
    return read_varint(p, end, out);
}

static inline int dec_tag(const uint8_t **p, const uint8_t *end, uint32_t *field, uint32_t *wt)
{
    if (*p < end && **p < 0x80 && **p >= 8) { /* field 0 takes read_tag's refusal */
        uint8_t b = *(*p)++;
        *field = b >> 3;
        *wt = b & 7;
        return 0;
    }
    return read_tag(p, end, field, wt);
}

static inline int dec_length(const uint8_t **p, const uint8_t *end, uint64_t *n)
{
    if (*p < end && **p < 0x80) {
        *n = *(*p)++;
        return *n > (uint64_t)(end - *p) ? -1 : 0;
    }
    return read_length(p, end, n);
}

static inline int is_ascii(const uint8_t *p, size_t n)
{
    uint64_t acc = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        acc |= w;
    }
    for (; i < n; i++)
        acc |= p[i];
    return (acc & 0x8080808080808080ULL) == 0;
}

/* Read the fields of one message in [p, end) by `kinds` (indexed by field number, `nkinds` entries) into `m`
 * (set up here; msg_fields_clear releases it, whatever the outcome). -1 on a broken encoding (no exception set)
 * or a Python error (set). */
static int read_message(const uint8_t *p, const uint8_t *end, const uint8_t *kinds, uint32_t nkinds, MsgFields *m,
                        OnMessage on_message, void *ctx, int depth)
{
    m->has_v = m->has_span = m->has_obj = 0;
    m->later = NULL;
    while (p < end) {
        const uint8_t *tag_at = p;
        uint32_t field, wt;
        if (dec_tag(&p, end, &field, &wt))
            return -1;
        int kind = field < nkinds ? kinds[field] : K_SKIP;
        if (kind == K_SKIP || wt != (kind <= K_BOOL ? 0u : 2u)) {
            if (skip_field(&p, end, field, wt, depth))
                return -1;
            continue;
        }
        if (wt == 0) {
            uint64_t v;
            if (dec_varint(&p, end, &v))
                return -1;
            m->v[field] = kind == K_U32 ? (uint32_t)v : kind == K_BOOL ? v != 0 : v;
            m->has_v |= 1u << field;
            continue;
        }
        uint64_t n;
        if (dec_length(&p, end, &n))
            return -1;
        const uint8_t *sub = p;
        p += n;
        if (kind == K_MSG) {
            if (on_message(ctx, field, sub, p))
                return -1;
        } else if (kind == K_LATER) {
            if (m->later == NULL)
                m->later = tag_at;
        } else if (kind == K_STR && !is_ascii(sub, n)) {
            PyObject *value = PyUnicode_DecodeUTF8((const char *)sub, (Py_ssize_t)n, NULL);
            if (value == NULL)
                return -1;
            if (m->has_obj >> field & 1)
                Py_DECREF(m->o[field]);
            m->o[field] = value;
            m->has_obj |= 1u << field;
            m->has_span &= ~(1u << field);
        } else {
            if (m->has_obj >> field & 1) {
                Py_DECREF(m->o[field]);
                m->has_obj &= ~(1u << field);
            }
            m->at[field] = sub;
            m->len[field] = (uint32_t)n;
            m->has_span |= 1u << field;
        }
    }
    return 0;
}

/* Field numbers of FlowRecordBatch, DnsMessage and DnsAnswer (proto/flow_record.proto); FlowRecord's are W_*,
 * SamplePacket's S_*. */
enum { RB_VERSION = 1, RB_RECORDS = 2 };
enum { DM_ID = 1, DM_IS_RESPONSE, DM_RCODE, DM_QNAME, DM_QTYPE, DM_QCLASS, DM_ANSWERS, DM_MALFORMED, DM_TIMESTAMP };
enum { DA_NAME = 1, DA_RTYPE, DA_TTL, DA_DATA };

static const uint8_t BATCH_KINDS[] = {[RB_VERSION] = K_U32, [RB_RECORDS] = K_MSG};
static const uint8_t ANSWER_KINDS[] = {[DA_NAME] = K_STR, [DA_RTYPE] = K_U32, [DA_TTL] = K_U32, [DA_DATA] = K_STR};
static const uint8_t DNS_KINDS[] = {
    [DM_ID] = K_U32, [DM_IS_RESPONSE] = K_BOOL, [DM_RCODE] = K_U32, [DM_QNAME] = K_STR, [DM_QTYPE] = K_U32,
    [DM_QCLASS] = K_U32, [DM_ANSWERS] = K_MSG, [DM_MALFORMED] = K_BOOL, [DM_TIMESTAMP] = K_U64,
};
static const uint8_t SAMPLE_KINDS[] = {
    [S_TIMESTAMP] = K_U64, [S_DIRECTION] = K_U32, [S_SIZE] = K_U32, [S_PAYLOAD] = K_BYTES, [S_TCP_FLAGS] = K_U32,
    [S_PID] = K_U32, [S_PROCESS_NAME] = K_STR, [S_DNS_INDEX] = K_U32,
};
/* A record's samples are read in a second pass, from the first of them: they link to DNS messages that may
 * follow them. */
static const uint8_t RECORD_KINDS[] = {
    [W_FLOW_ID] = K_STR, [W_AGENT_ID] = K_STR, [W_PROTOCOL] = K_U32, [W_LOCAL_IP] = K_U32, [W_LOCAL_PORT] = K_U32,
    [W_REMOTE_IP] = K_U32, [W_REMOTE_PORT] = K_U32, [W_FIRST] = K_U64, [W_LAST] = K_U64, [W_PK_OUT] = K_U64,
    [W_PK_IN] = K_U64, [W_BY_OUT] = K_U64, [W_BY_IN] = K_U64, [W_PB_OUT] = K_U64, [W_PB_IN] = K_U64,
    [W_FLAGS] = K_U32, [W_PID] = K_U32, [W_NAME] = K_STR, [W_END] = K_STR, [S_RECORD_DNS] = K_MSG,
    [S_RECORD_SAMPLES] = K_LATER,
};
static const uint8_t RECORD_SAMPLE_KINDS[] = {[S_RECORD_SAMPLES] = K_MSG};
_Static_assert(sizeof(RECORD_KINDS) <= MSG_MAX_FIELD + 1 && sizeof(RECORD_SAMPLE_KINDS) <= MSG_MAX_FIELD + 1,
               "MsgFields holds every field of a kinds table");
#define KINDS(table) (table), (uint32_t)(sizeof(table) / sizeof((table)[0]))

/* The objects one call shares (see above): the last few ASCII strings of a kind, the last int of each field. */
#define NAME_CACHE 8 /* DNS names and answer data: a flow's names, its answers' addresses */
#define HEAD_CACHE 4 /* agent ids, process names, end reasons */

typedef struct {
    PyObject *s[NAME_CACHE];     /* ASCII strings made by ascii_str; NULL: empty */
    const uint8_t *at[NAME_CACHE]; /* their characters and lengths, compared without touching the objects */
    uint32_t len[NAME_CACHE];
    unsigned size, next;
} StrCache;

typedef struct {
    uint64_t v;
    PyObject *o; /* NULL: empty */
} IntSlot;

typedef struct {
    IntSlot record[MSG_MAX_FIELD + 1], dns[DM_TIMESTAMP + 1], answer[DA_DATA + 1], sample[S_DNS_INDEX + 1];
    StrCache names, heads;
} DecodeCache;

static void cache_init(DecodeCache *c)
{
    memset(c, 0, sizeof(*c));
    c->names.size = NAME_CACHE;
    c->heads.size = HEAD_CACHE;
}

static void int_slots_clear(IntSlot *slots, size_t n)
{
    for (size_t i = 0; i < n; i++)
        Py_CLEAR(slots[i].o);
}

static void cache_clear(DecodeCache *c)
{
    int_slots_clear(c->record, sizeof(c->record) / sizeof(IntSlot));
    int_slots_clear(c->dns, sizeof(c->dns) / sizeof(IntSlot));
    int_slots_clear(c->answer, sizeof(c->answer) / sizeof(IntSlot));
    int_slots_clear(c->sample, sizeof(c->sample) / sizeof(IntSlot));
    for (int i = 0; i < NAME_CACHE; i++) {
        Py_CLEAR(c->names.s[i]);
        Py_CLEAR(c->heads.s[i]);
    }
}

static PyObject *cached_int(IntSlot *slot, uint64_t v)
{
    if (slot->o != NULL && slot->v == v)
        return Py_NewRef(slot->o);
    PyObject *o = PyLong_FromUnsignedLongLong(v);
    if (o != NULL) {
        Py_XSETREF(slot->o, Py_NewRef(o));
        slot->v = v;
    }
    return o;
}

/* The str of n ASCII bytes (what PyUnicode_DecodeUTF8 returns for them, without the decoder; one character
 * comes from its cache of them, as there). */
static PyObject *ascii_str(const uint8_t *p, uint32_t n)
{
    if (n <= 1)
        return n ? PyUnicode_DecodeUTF8((const char *)p, 1, NULL) : Py_NewRef(empty_string);
    PyObject *s = PyUnicode_New((Py_ssize_t)n, 127);
    if (s != NULL)
        memcpy(PyUnicode_1BYTE_DATA(s), p, n);
    return s;
}

/* The str of n ASCII bytes: one of `cache`'s if equal (NULL: no cache), else a new one that replaces its oldest. */
static PyObject *cached_str(StrCache *cache, const uint8_t *p, uint32_t n)
{
    if (cache == NULL || n <= 1)
        return ascii_str(p, n);
    for (unsigned i = 0; i < cache->size; i++)
        if (cache->len[i] == n && memcmp(cache->at[i], p, n) == 0) /* an empty entry has length 0 */
            return Py_NewRef(cache->s[i]);
    PyObject *s = ascii_str(p, n);
    if (s != NULL) {
        unsigned i = cache->next;
        Py_XSETREF(cache->s[i], Py_NewRef(s));
        cache->at[i] = PyUnicode_1BYTE_DATA(s);
        cache->len[i] = n;
        cache->next = (i + 1) % cache->size;
    }
    return s;
}

/* A string field's str (new reference; "" when absent). */
static PyObject *msg_str(const MsgFields *m, int field, StrCache *cache)
{
    if (m->has_obj >> field & 1)
        return Py_NewRef(m->o[field]);
    if (m->has_span >> field & 1)
        return cached_str(cache, m->at[field], m->len[field]);
    return Py_NewRef(empty_string);
}

static PyObject *msg_bytes(const MsgFields *m, int field)
{
    return m->has_span >> field & 1 ? PyBytes_FromStringAndSize((const char *)m->at[field], (Py_ssize_t)m->len[field])
                                     : PyBytes_FromStringAndSize(NULL, 0);
}

static inline PyObject *msg_int(const MsgFields *m, int field, IntSlot *slots)
{
    return cached_int(&slots[field], msg_v(m, field));
}

/* The items of a list being read, kept in C until it is complete, then moved into a list of their number. */
#define ITEMS_INLINE 8
typedef struct {
    PyObject **items;
    Py_ssize_t n, cap;
    PyObject *inline_items[ITEMS_INLINE];
} ItemBuf;

static void buf_init(ItemBuf *b)
{
    b->items = b->inline_items;
    b->n = 0;
    b->cap = ITEMS_INLINE;
}

static void buf_clear(ItemBuf *b)
{
    for (Py_ssize_t i = 0; i < b->n; i++)
        Py_DECREF(b->items[i]);
    if (b->items != b->inline_items)
        PyMem_Free(b->items);
    buf_init(b);
}

/* Append `item` (stolen; NULL: a failure, -1). */
static int buf_push(ItemBuf *b, PyObject *item)
{
    if (item == NULL)
        return -1;
    if (b->n == b->cap) {
        size_t cap = (size_t)b->cap * 2;
        PyObject **grown = b->items == b->inline_items ? PyMem_Malloc(cap * sizeof(PyObject *))
                                                       : PyMem_Realloc(b->items, cap * sizeof(PyObject *));
        if (grown == NULL) {
            Py_DECREF(item);
            PyErr_NoMemory();
            return -1;
        }
        if (b->items == b->inline_items)
            memcpy(grown, b->inline_items, sizeof(b->inline_items));
        b->items = grown;
        b->cap = (Py_ssize_t)cap;
    }
    b->items[b->n++] = item;
    return 0;
}

/* A list of the items, moved out of `b` (left empty). */
static PyObject *buf_list(ItemBuf *b)
{
    PyObject *list = PyList_New(b->n);
    if (list == NULL) {
        buf_clear(b);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < b->n; i++)
        PyList_SET_ITEM(list, i, b->items[i]);
    b->n = 0;
    buf_clear(b);
    return list;
}

typedef struct {
    PyObject *make_record, *make_packet, *make_dns, *make_answer, *make_icmp, *transports;
    const uint8_t *sampled; /* 256 flags: the IP protocols whose samples are read (NULL: every one) */
} RecordMakers;

enum { H_PROTOCOL, H_TRANSPORT, H_LOCAL_IP, H_REMOTE_IP, H_LOCAL_PORT, H_REMOTE_PORT, H_COUNT };

/* One message being read: what its callbacks append to and what a record's samples repeat. */
typedef struct DnsBuild DnsBuild;

typedef struct {
    const RecordMakers *mk;
    DecodeCache *cache;
    ItemBuf *out;     /* answers of a DNS message, DNS messages or samples of a record, records */
    DnsBuild *dnsb;   /* a record's DNS messages as DnsList entries, while it is read */
    PyObject *dns;    /* the record's DNS messages, a DnsList (samples link to them) */
    PyObject *head[H_COUNT]; /* borrowed: the record's fields every sample repeats */
    uint32_t protocol;
} ReadCtx;

/* Call `make` with the `n` new references in args (released here, NULL among them meaning a failure). */
static PyObject *call_owned(PyObject *make, PyObject **args, Py_ssize_t n)
{
    PyObject *result = NULL;
    int ok = 1;
    for (Py_ssize_t i = 0; i < n; i++)
        ok &= args[i] != NULL;
    if (ok)
        result = PyObject_Vectorcall(make, args, (size_t)n, NULL);
    for (Py_ssize_t i = 0; i < n; i++)
        Py_XDECREF(args[i]);
    return result;
}

/* The same; a SlotMaker of n fields takes the references into its instance without a call. */
static PyObject *make_owned(PyObject *make, PyObject **args, Py_ssize_t n)
{
    if (Py_IS_TYPE(make, &SlotMakerType) && ((SlotMaker *)make)->nargs == n)
        return slot_maker_take((SlotMaker *)make, args);
    return call_owned(make, args, n);
}

static int append_owned(PyObject *list, PyObject *item)
{
    if (item == NULL)
        return -1;
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}

static int on_answer(void *vctx, uint32_t field, const uint8_t *p, const uint8_t *end)
{
    (void)field;
    ReadCtx *ctx = vctx;
    DecodeCache *c = ctx->cache;
    MsgFields m;
    if (read_message(p, end, KINDS(ANSWER_KINDS), &m, NULL, NULL, 3)) {
        msg_fields_clear(&m);
        return -1;
    }
    PyObject *args[] = {msg_str(&m, DA_NAME, &c->names), msg_int(&m, DA_RTYPE, c->answer),
                        msg_int(&m, DA_TTL, c->answer), msg_str(&m, DA_DATA, &c->names)};
    msg_fields_clear(&m);
    return buf_push(ctx->out, make_owned(ctx->mk->make_answer, args, 4));
}

static int on_dns(void *vctx, uint32_t field, const uint8_t *p, const uint8_t *end)
{
    (void)field;
    ReadCtx *ctx = vctx;
    DecodeCache *c = ctx->cache;
    ItemBuf answers;
    buf_init(&answers);
    ReadCtx sub = {.mk = ctx->mk, .cache = c, .out = &answers};
    MsgFields m;
    if (read_message(p, end, KINDS(DNS_KINDS), &m, on_answer, &sub, 2)) {
        msg_fields_clear(&m);
        buf_clear(&answers);
        return -1;
    }
    PyObject *args[] = {
        msg_int(&m, DM_ID, c->dns), PyBool_FromLong((long)msg_v(&m, DM_IS_RESPONSE)), msg_int(&m, DM_RCODE, c->dns),
        msg_str(&m, DM_QNAME, &c->names), msg_int(&m, DM_QTYPE, c->dns), msg_int(&m, DM_QCLASS, c->dns),
        buf_list(&answers), PyBool_FromLong((long)msg_v(&m, DM_MALFORMED)), msg_int(&m, DM_TIMESTAMP, c->dns),
    };
    msg_fields_clear(&m);
    return buf_push(ctx->out, make_owned(ctx->mk->make_dns, args, 9));
}

/* -- DnsList (dns_list.h) ---------------------------------------------------------------------------- */
static PyTypeObject DnsListType;

/* A record's DNS messages while it is read: their entries and encodings, grown as they come. */
struct DnsBuild {
    DnsEntry *entries;
    Py_ssize_t n, cap;
    uint8_t *blob;
    size_t used, room;
};

static void dnsb_clear(DnsBuild *b)
{
    for (Py_ssize_t i = 0; i < b->n; i++)
        Py_DECREF(b->entries[i].qname);
    PyMem_Free(b->entries);
    PyMem_Free(b->blob);
    memset(b, 0, sizeof(*b));
}

/* The answers of a message in a DnsList: each read (a broken one fails the batch, as when objects were made), the
 * first one's TTL kept. */
typedef struct {
    uint32_t count, first_ttl;
} AnswerPeek;

static int on_answer_peek(void *vctx, uint32_t field, const uint8_t *p, const uint8_t *end)
{
    (void)field;
    AnswerPeek *peek = vctx;
    MsgFields m;
    int rc = read_message(p, end, KINDS(ANSWER_KINDS), &m, NULL, NULL, 3);
    if (rc == 0 && peek->count++ == 0)
        peek->first_ttl = (uint32_t)msg_v(&m, DA_TTL);
    msg_fields_clear(&m);
    return rc;
}

/* One of a record's DNS messages as a DnsList entry (the record's on_message for its dns field). */
/* Room in a lazy list's build for one more entry (`entry_size` bytes each; `first` of them the first time) and
 * `need` bytes of blob in all: 0, or -1 with MemoryError (what it had stays). */
static int lazy_grow(void **entries, Py_ssize_t *cap, Py_ssize_t n, size_t entry_size, Py_ssize_t first,
                     uint8_t **blob, size_t *room, size_t need)
{
    if (n == *cap) {
        Py_ssize_t more = *cap ? *cap * 2 : first;
        void *grown = PyMem_Realloc(*entries, (size_t)more * entry_size);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        *entries = grown;
        *cap = more;
    }
    if (need > *room) {
        size_t bigger = need * 2 + 256;
        uint8_t *grown = PyMem_Realloc(*blob, bigger);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        *blob = grown;
        *room = bigger;
    }
    return 0;
}

static int on_dns_entry(void *vctx, uint32_t field, const uint8_t *p, const uint8_t *end)
{
    (void)field;
    ReadCtx *ctx = vctx;
    DnsBuild *b = ctx->dnsb;
    AnswerPeek peek = {0, 0};
    MsgFields m;
    if (read_message(p, end, KINDS(DNS_KINDS), &m, on_answer_peek, &peek, 2)) {
        msg_fields_clear(&m);
        return -1;
    }
    size_t len = (size_t)(end - p);
    if (lazy_grow((void **)&b->entries, &b->cap, b->n, sizeof(DnsEntry), 16, &b->blob, &b->room, b->used + len) < 0) {
        msg_fields_clear(&m);
        return -1;
    }
    PyObject *qname = msg_str(&m, DM_QNAME, &ctx->cache->names);
    if (qname == NULL) {
        msg_fields_clear(&m);
        return -1;
    }
    if (len)  /* an empty message: the blob may not exist yet */
        memcpy(b->blob + b->used, p, len);
    b->entries[b->n++] = (DnsEntry){
        .ts = msg_v(&m, DM_TIMESTAMP), .id = (uint32_t)msg_v(&m, DM_ID), .rcode = (uint32_t)msg_v(&m, DM_RCODE),
        .qtype = (uint32_t)msg_v(&m, DM_QTYPE), .qclass = (uint32_t)msg_v(&m, DM_QCLASS), .first_ttl = peek.first_ttl,
        .is_response = msg_v(&m, DM_IS_RESPONSE) != 0, .malformed = msg_v(&m, DM_MALFORMED) != 0,
        .answered = peek.count > 0, .qname = qname, .at = (uint32_t)b->used, .len = (uint32_t)len,
    };
    b->used += len;
    msg_fields_clear(&m);
    return 0;
}

/* The DnsList of what `b` holds (moved out of it, left empty); NULL with an exception. */
static PyObject *dnsl_from_build(DnsBuild *b, const RecordMakers *mk)
{
    DnsListObject *l = PyObject_GC_NewVar(DnsListObject, &DnsListType, b->n);
    if (l == NULL) {
        dnsb_clear(b);
        return NULL;
    }
    l->make_dns = Py_NewRef(mk->make_dns);
    l->make_answer = Py_NewRef(mk->make_answer);
    l->made = NULL;
    l->blob = b->blob;
    if (b->n)
        memcpy(l->entries, b->entries, (size_t)b->n * sizeof(DnsEntry));
    PyMem_Free(b->entries);
    memset(b, 0, sizeof(*b));
    PyObject_GC_Track(l);
    return (PyObject *)l;
}

/* Item i of a lazy list (DnsList, SampleList: `made` is its array of the objects made so far, NULL until the first).
 * 1 with *out a new reference when the item was made before, 0 when it is to be made, -1 with an exception (an
 * index out of range, no memory). */
static int lazy_lookup(PyObject ***made, Py_ssize_t size, Py_ssize_t i, const char *list, PyObject **out)
{
    if (i < 0 || i >= size) {
        PyErr_Format(PyExc_IndexError, "%s index out of range", list);
        return -1;
    }
    if (*made == NULL && (*made = PyMem_Calloc((size_t)size, sizeof(PyObject *))) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if ((*made)[i] == NULL)
        return 0;
    *out = Py_NewRef((*made)[i]);
    return 1;
}

/* The item a reader (returning `rc`) put in `one`, kept as made[i] and returned (a new reference); NULL with an
 * exception. The entry was read once already when its batch was: a failure here is a bug. */
static PyObject *lazy_keep(PyObject **made, Py_ssize_t i, ItemBuf *one, int rc, const char *what)
{
    if (rc < 0) {
        buf_clear(one);
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_SystemError, "%s read before does not read again", what);
        return NULL;
    }
    PyObject *item = one->items[0];
    one->n = 0;
    buf_clear(one);
    if (made[i] != NULL) {  /* a maker that ran Python asked for it meanwhile: that one stays */
        Py_DECREF(item);
        return Py_NewRef(made[i]);
    }
    made[i] = Py_NewRef(item);
    return item;
}

static Py_ssize_t dnsl_length(DnsListObject *l)
{
    return Py_SIZE(l);
}

/* Entry i's DnsMessage (a new reference), made from its encoding the first time it is asked for. */
static PyObject *dnsl_item(DnsListObject *l, Py_ssize_t i)
{
    PyObject *made = NULL;
    int found = lazy_lookup(&l->made, Py_SIZE(l), i, "DnsList", &made);
    if (found != 0)
        return made;
    const DnsEntry *e = &l->entries[i];
    RecordMakers mk = {.make_dns = l->make_dns, .make_answer = l->make_answer};
    DecodeCache cache;
    cache_init(&cache);
    if (PyUnicode_IS_ASCII(e->qname) && PyUnicode_GET_LENGTH(e->qname) > 1) {  /* the message's name is the entry's */
        cache.names.s[0] = Py_NewRef(e->qname);
        cache.names.at[0] = PyUnicode_1BYTE_DATA(e->qname);
        cache.names.len[0] = (uint32_t)PyUnicode_GET_LENGTH(e->qname);
        cache.names.next = 1;
    }
    ItemBuf one;
    buf_init(&one);
    ReadCtx ctx = {.mk = &mk, .cache = &cache, .out = &one};
    const uint8_t *blob = l->blob != NULL ? l->blob : (const uint8_t *)""; /* none: every message is empty */
    int rc = on_dns(&ctx, DM_ANSWERS, blob + e->at, blob + e->at + e->len);
    cache_clear(&cache);
    return lazy_keep(l->made, i, &one, rc, "DnsList: a message");
}

/* Shared by DnsList and SampleList, each a read-only sequence standing for the list of its items: equal to a list
 * (or a list of its own type) of equal items, shown, joined, copied and pickled as that list. */
static PyObject *lazy_richcompare(PyObject *self, PyObject *other, int op)
{
    if ((op != Py_EQ && op != Py_NE) || !(PyList_Check(other) || Py_IS_TYPE(other, Py_TYPE(self))))
        Py_RETURN_NOTIMPLEMENTED;
    PyObject *mine = PySequence_List(self), *theirs = PySequence_List(other), *result = NULL;
    if (mine != NULL && theirs != NULL)
        result = PyObject_RichCompare(mine, theirs, op);
    Py_XDECREF(mine);
    Py_XDECREF(theirs);
    return result;
}

static PyObject *lazy_repr(PyObject *self)
{
    PyObject *list = PySequence_List(self);
    if (list == NULL)
        return NULL;
    PyObject *text = PyObject_Repr(list);
    Py_DECREF(list);
    return text;
}

static PyObject *lazy_concat(PyObject *self, PyObject *other)
{
    PyObject *list = PySequence_List(self);
    if (list == NULL)
        return NULL;
    PyObject *joined = PySequence_Concat(list, other);
    Py_DECREF(list);
    return joined;
}

/* How many of `n` items were made (their `made` array: NULL until the first is). */
static PyObject *lazy_made(PyObject *const *made, Py_ssize_t n)
{
    Py_ssize_t count = 0;
    for (Py_ssize_t i = 0; made != NULL && i < n; i++)
        count += made[i] != NULL;
    return PyLong_FromSsize_t(count);
}

/* The made items, for the collector: visited, and cleared to break a cycle through them (a caller stored the list
 * in one); whatever makes them stays until dealloc, so an item asked for again is made again, the same. */
static int lazy_visit(PyObject *const *made, Py_ssize_t n, visitproc visit, void *arg)
{
    for (Py_ssize_t i = 0; made != NULL && i < n; i++)
        Py_VISIT(made[i]);
    return 0;
}

static void lazy_clear(PyObject **made, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; made != NULL && i < n; i++)
        Py_CLEAR(made[i]);
}

static PyObject *lazy_reduce(PyObject *self, PyObject *unused)
{
    (void)unused;
    PyObject *list = PySequence_List(self);
    return list == NULL ? NULL : Py_BuildValue("(O(N))", (PyObject *)&PyList_Type, list);
}

static int dnsl_traverse(DnsListObject *l, visitproc visit, void *arg)
{
    Py_VISIT(l->make_dns);
    Py_VISIT(l->make_answer);
    return lazy_visit(l->made, Py_SIZE(l), visit, arg);
}

/* Breaks a cycle through the messages made (a caller stored the list in one of them); the makers stay until
 * dealloc, so an entry asked for again is made again rather than read through a NULL maker. */
static int dnsl_clear(DnsListObject *l)
{
    lazy_clear(l->made, Py_SIZE(l));
    return 0;
}

static void dnsl_dealloc(DnsListObject *l)
{
    PyObject_GC_UnTrack(l);
    dnsl_clear(l);
    Py_CLEAR(l->make_dns);
    Py_CLEAR(l->make_answer);
    for (Py_ssize_t i = 0; i < Py_SIZE(l); i++)
        Py_DECREF(l->entries[i].qname);
    PyMem_Free(l->made);
    PyMem_Free(l->blob);
    PyObject_GC_Del(l);
}

static PyObject *dnsl_get_made(DnsListObject *l, void *closure)
{
    (void)closure;
    return lazy_made(l->made, Py_SIZE(l));
}

static PyGetSetDef dnsl_getset[] = {
    {"made", (getter)dnsl_get_made, NULL, "how many of the messages were made into objects so far", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods dnsl_as_sequence = {
    .sq_length = (lenfunc)dnsl_length,
    .sq_concat = lazy_concat,
    .sq_item = (ssizeargfunc)dnsl_item,
};

static PyMethodDef lazy_methods[] = {
    {"__reduce__", lazy_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject DnsListType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "appliance.native.fastpath.DnsList",
    .tp_doc = "A flow's DNS messages as decoded: a read-only sequence of DnsMessage, each made when first asked for.",
    .tp_basicsize = offsetof(DnsListObject, entries),
    .tp_itemsize = sizeof(DnsEntry),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_dealloc = (destructor)dnsl_dealloc,
    .tp_traverse = (traverseproc)dnsl_traverse,
    .tp_clear = (inquiry)dnsl_clear,
    .tp_repr = lazy_repr,
    .tp_richcompare = lazy_richcompare,
    .tp_as_sequence = &dnsl_as_sequence,
    .tp_methods = lazy_methods,
    .tp_getset = dnsl_getset,
    .tp_hash = PyObject_HashNotImplemented,
};

static int on_sample(void *vctx, uint32_t field, const uint8_t *p, const uint8_t *end)
{
    (void)field;
    ReadCtx *ctx = vctx;
    DecodeCache *c = ctx->cache;
    MsgFields m;
    if (read_message(p, end, KINDS(SAMPLE_KINDS), &m, NULL, NULL, 2)) {
        msg_fields_clear(&m);
        return -1;
    }
    PyObject *payload = msg_bytes(&m, S_PAYLOAD);
    PyObject *icmp = Py_NewRef(Py_None);
    if (payload != NULL && ctx->protocol == 1 && PyBytes_GET_SIZE(payload) >= 4) {
        const uint8_t *b = (const uint8_t *)PyBytes_AS_STRING(payload);
        PyObject *icmp_args[] = {PyLong_FromLong(b[0]), PyLong_FromLong(b[1]),
                                 PyBytes_FromStringAndSize((const char *)b + 4, PyBytes_GET_SIZE(payload) - 4)};
        Py_SETREF(icmp, make_owned(ctx->mk->make_icmp, icmp_args, 3));
    }
    uint64_t index = msg_v(&m, S_DNS_INDEX);
    PyObject *message = index > 0 && index <= (uint64_t)Py_SIZE(ctx->dns)
                            ? dnsl_item((DnsListObject *)ctx->dns, (Py_ssize_t)index - 1) : Py_NewRef(Py_None);
    PyObject *args[] = {
        msg_int(&m, S_TIMESTAMP, c->sample), msg_int(&m, S_DIRECTION, c->sample),
        Py_NewRef(ctx->head[H_PROTOCOL]), Py_NewRef(ctx->head[H_TRANSPORT]), Py_NewRef(ctx->head[H_LOCAL_IP]),
        Py_NewRef(ctx->head[H_REMOTE_IP]), Py_NewRef(ctx->head[H_LOCAL_PORT]), Py_NewRef(ctx->head[H_REMOTE_PORT]),
        msg_int(&m, S_SIZE, c->sample), payload, msg_int(&m, S_TCP_FLAGS, c->sample), msg_int(&m, S_PID, c->sample),
        msg_str(&m, S_PROCESS_NAME, &c->heads), message, icmp,
    };
    msg_fields_clear(&m);
    return buf_push(ctx->out, make_owned(ctx->mk->make_packet, args, 15));
}

/* -- SampleList (sample_list.h) ------------------------------------------------------------------------ */
static PyTypeObject SampleListType;

/* A record's samples while it is read: their entries and encodings, grown as they come. */
typedef struct {
    SampleEntry *entries;
    Py_ssize_t n, cap;
    uint8_t *blob;
    size_t used, room;
} SampleBuild;

static void sampleb_clear(SampleBuild *b)
{
    PyMem_Free(b->entries);
    PyMem_Free(b->blob);
    memset(b, 0, sizeof(*b));
}

/* One SamplePacket of a record: read now (a broken one fails the batch here, as when its Packet was made here), kept
 * as its encoding, its payload's place and its direction. */
static int on_sample_entry(void *vctx, uint32_t field, const uint8_t *p, const uint8_t *end)
{
    (void)field;
    SampleBuild *b = vctx;
    MsgFields m;
    if (read_message(p, end, KINDS(SAMPLE_KINDS), &m, NULL, NULL, 2)) {
        msg_fields_clear(&m);
        return -1;
    }
    uint64_t direction = msg_v(&m, S_DIRECTION);
    const uint8_t *payload = m.has_span >> S_PAYLOAD & 1 ? m.at[S_PAYLOAD] : NULL;  /* inside [p, end) */
    uint32_t size = payload != NULL ? m.len[S_PAYLOAD] : 0;
    msg_fields_clear(&m);
    size_t len = (size_t)(end - p);
    if (len > UINT32_MAX || b->used + len > UINT32_MAX) {  /* a batch is far smaller: the channel bounds frames */
        PyErr_SetString(PyExc_ValueError, "a flow's samples are too large to read");
        return -1;
    }
    if (lazy_grow((void **)&b->entries, &b->cap, b->n, sizeof(SampleEntry), 4, &b->blob, &b->room, b->used + len) < 0)
        return -1;
    if (len)
        memcpy(b->blob + b->used, p, len);
    b->entries[b->n++] = (SampleEntry){
        .at = (uint32_t)b->used, .len = (uint32_t)len,
        .payload = payload != NULL ? (uint32_t)(b->used + (size_t)(payload - p)) : 0, .size = size,
        .direction = direction == 1 || direction == 2 ? (uint8_t)direction : 0,
    };
    b->used += len;
    return 0;
}

/* The SampleList of what `b` holds (moved out of it, left empty), with the record's fields its Packets repeat;
 * NULL with an exception. */
static PyObject *samplel_from_build(SampleBuild *b, const RecordMakers *mk, PyObject *const head[H_COUNT],
                                    PyObject *dns, uint32_t protocol)
{
    SampleListObject *l = PyObject_GC_NewVar(SampleListObject, &SampleListType, b->n);
    if (l == NULL) {
        sampleb_clear(b);
        return NULL;
    }
    l->make_packet = Py_NewRef(mk->make_packet);
    l->make_icmp = Py_NewRef(mk->make_icmp);
    for (int i = 0; i < H_COUNT; i++)
        l->head[i] = Py_NewRef(head[i]);
    l->dns = Py_NewRef(dns);
    l->protocol = protocol;
    l->made = NULL;
    l->blob = b->blob;
    if (b->n)
        memcpy(l->entries, b->entries, (size_t)b->n * sizeof(SampleEntry));
    PyMem_Free(b->entries);
    memset(b, 0, sizeof(*b));
    PyObject_GC_Track(l);
    return (PyObject *)l;
}

static Py_ssize_t samplel_length(SampleListObject *l)
{
    return Py_SIZE(l);
}

/* Entry i's Packet (a new reference), made from its encoding the first time it is asked for, as the decoder
 * made it before (on_sample). */
static PyObject *samplel_item(SampleListObject *l, Py_ssize_t i)
{
    PyObject *made = NULL;
    int found = lazy_lookup(&l->made, Py_SIZE(l), i, "SampleList", &made);
    if (found != 0)
        return made;
    const SampleEntry *e = &l->entries[i];
    RecordMakers mk = {.make_packet = l->make_packet, .make_icmp = l->make_icmp};
    DecodeCache cache;
    cache_init(&cache);
    ItemBuf one;
    buf_init(&one);
    ReadCtx ctx = {.mk = &mk, .cache = &cache, .out = &one, .dns = l->dns, .protocol = l->protocol};
    memcpy(ctx.head, l->head, sizeof(ctx.head));
    const uint8_t *blob = l->blob != NULL ? l->blob : (const uint8_t *)""; /* none: every sample is empty */
    int rc = on_sample(&ctx, S_RECORD_SAMPLES, blob + e->at, blob + e->at + e->len);
    cache_clear(&cache);
    return lazy_keep(l->made, i, &one, rc, "SampleList: a sample");
}

static int samplel_traverse(SampleListObject *l, visitproc visit, void *arg)
{
    Py_VISIT(l->make_packet);
    Py_VISIT(l->make_icmp);
    Py_VISIT(l->dns);
    for (int i = 0; i < H_COUNT; i++)
        Py_VISIT(l->head[i]);
    return lazy_visit(l->made, Py_SIZE(l), visit, arg);
}

/* Breaks a cycle through the packets made (a caller stored the list in one of them, or in one of their DNS
 * messages); the makers, the record's fields and the DnsList stay until dealloc, so an entry asked for again is
 * made again, the same. */
static int samplel_clear(SampleListObject *l)
{
    lazy_clear(l->made, Py_SIZE(l));
    return 0;
}

static void samplel_dealloc(SampleListObject *l)
{
    PyObject_GC_UnTrack(l);
    samplel_clear(l);
    Py_CLEAR(l->make_packet);
    Py_CLEAR(l->make_icmp);
    Py_CLEAR(l->dns);
    for (int i = 0; i < H_COUNT; i++)
        Py_CLEAR(l->head[i]);
    PyMem_Free(l->made);
    PyMem_Free(l->blob);
    PyObject_GC_Del(l);
}

static PyObject *samplel_get_made(SampleListObject *l, void *closure)
{
    (void)closure;
    return lazy_made(l->made, Py_SIZE(l));
}

static PyGetSetDef samplel_getset[] = {
    {"made", (getter)samplel_get_made, NULL, "how many of the samples were made into Packet objects so far", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods samplel_as_sequence = {
    .sq_length = (lenfunc)samplel_length,
    .sq_concat = lazy_concat,
    .sq_item = (ssizeargfunc)samplel_item,
};


static PyTypeObject SampleListType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "appliance.native.fastpath.SampleList",
    .tp_doc = "A flow's payload samples as decoded: a read-only sequence of Packet, each made when first asked for.",
    .tp_basicsize = offsetof(SampleListObject, entries),
    .tp_itemsize = sizeof(SampleEntry),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_dealloc = (destructor)samplel_dealloc,
    .tp_traverse = (traverseproc)samplel_traverse,
    .tp_clear = (inquiry)samplel_clear,
    .tp_repr = lazy_repr,
    .tp_richcompare = lazy_richcompare,
    .tp_as_sequence = &samplel_as_sequence,
    .tp_methods = lazy_methods,
    .tp_getset = samplel_getset,
    .tp_hash = PyObject_HashNotImplemented,
};

static int on_record(void *vctx, uint32_t field, const uint8_t *p, const uint8_t *end)
{
    (void)field;
    ReadCtx *ctx = vctx;
    DecodeCache *c = ctx->cache;
    DnsBuild dnsb = {0};
    ReadCtx sub = {.mk = ctx->mk, .cache = c, .dnsb = &dnsb};
    MsgFields m;
    if (read_message(p, end, KINDS(RECORD_KINDS), &m, on_dns_entry, &sub, 1)) {
        msg_fields_clear(&m);
        dnsb_clear(&dnsb);
        return -1;
    }
    PyObject *transports = ctx->mk->transports;
    uint64_t protocol = msg_v(&m, W_PROTOCOL);
    PyObject *args[RF_COUNT + 2];
    args[RF_FLOW_ID] = msg_str(&m, W_FLOW_ID, NULL); /* unique */
    args[RF_AGENT_ID] = msg_str(&m, W_AGENT_ID, &c->heads);
    args[RF_PROTOCOL] = msg_int(&m, W_PROTOCOL, c->record);
    args[RF_TRANSPORT] = Py_NewRef(PyTuple_GET_ITEM(transports, protocol < (uint64_t)PyTuple_GET_SIZE(transports)
                                                                    ? (Py_ssize_t)protocol : 0));
    static const int int_fields[][2] = {
        {RF_LOCAL_IP, W_LOCAL_IP}, {RF_LOCAL_PORT, W_LOCAL_PORT}, {RF_REMOTE_IP, W_REMOTE_IP},
        {RF_REMOTE_PORT, W_REMOTE_PORT}, {RF_PK_OUT, W_PK_OUT},
        {RF_PK_IN, W_PK_IN}, {RF_BY_OUT, W_BY_OUT}, {RF_BY_IN, W_BY_IN}, {RF_PB_OUT, W_PB_OUT},
        {RF_PB_IN, W_PB_IN}, {RF_FLAGS, W_FLAGS}, {RF_PID, W_PID},
    };
    for (size_t i = 0; i < sizeof(int_fields) / sizeof(int_fields[0]); i++)
        args[int_fields[i][0]] = msg_int(&m, int_fields[i][1], c->record);
    args[RF_FIRST] = msg_int(&m, W_FIRST, c->record);
    args[RF_LAST] = msg_int(&m, W_LAST, c->record);
    args[RF_NAME] = msg_str(&m, W_NAME, &c->heads);
    args[RF_END] = msg_str(&m, W_END, &c->heads);
    args[RF_COUNT] = sub.dns = dnsl_from_build(&dnsb, ctx->mk);
    const uint8_t *later = m.later;
    msg_fields_clear(&m);
    int ok = 1;
    for (int i = 0; i < RF_COUNT + 1; i++)
        ok &= args[i] != NULL;
    const uint8_t *sampled = ctx->mk->sampled;
    SampleBuild samples = {0};
    if (ok && later != NULL && (sampled == NULL || (protocol < 256 && sampled[protocol]))) {
        MsgFields none;
        ok = read_message(later, end, KINDS(RECORD_SAMPLE_KINDS), &none, on_sample_entry, &samples, 1) == 0;
        msg_fields_clear(&none);
    }
    /* The samples as a SampleList (their Packets made when asked for), a plain empty list when there are none;
     * NULL when they did not read: make_owned releases the rest. */
    PyObject *list = NULL;
    if (ok && samples.n == 0)
        list = PyList_New(0);
    else if (ok) {
        PyObject *const head[H_COUNT] = {args[RF_PROTOCOL], args[RF_TRANSPORT], args[RF_LOCAL_IP],
                                         args[RF_REMOTE_IP], args[RF_LOCAL_PORT], args[RF_REMOTE_PORT]};
        list = samplel_from_build(&samples, ctx->mk, head, args[RF_COUNT], (uint32_t)protocol);
    }
    sampleb_clear(&samples);
    args[RF_COUNT + 1] = list;
    return buf_push(ctx->out, make_owned(ctx->mk->make_record, args, RF_COUNT + 2));
}

/* decode_records(data, make_record, make_packet, make_dns, make_answer, make_icmp, transports[, sampled]) -> list;
 * `sampled`, 256 bytes, names the IP protocols whose samples are read (non-zero); the others' records come with
 * no samples, their sample entries skipped unread (the analysis process reads only what its layers read). */
static PyObject *fastpath_decode_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 7 && nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "decode_records takes 7 or 8 arguments: data, make_record, make_packet, "
                                         "make_dns, make_answer, make_icmp, transports[, sampled]");
        return NULL;
    }
    RecordMakers mk = {args[1], args[2], args[3], args[4], args[5], args[6], NULL};
    if (!PyTuple_Check(mk.transports) || PyTuple_GET_SIZE(mk.transports) != 256) {
        PyErr_SetString(PyExc_TypeError, "transports must be a tuple of 256: the transport of each IP protocol");
        return NULL;
    }
    if (nargs == 8 && args[7] != Py_None) {
        if (!PyBytes_Check(args[7]) || PyBytes_GET_SIZE(args[7]) != 256) {
            PyErr_SetString(PyExc_TypeError, "sampled must be 256 bytes: non-zero for the IP protocols whose samples are read");
            return NULL;
        }
        mk.sampled = (const uint8_t *)PyBytes_AS_STRING(args[7]);
    }
    Py_buffer data;
    if (PyObject_GetBuffer(args[0], &data, PyBUF_SIMPLE) < 0)
        return NULL;
    DecodeCache cache;
    cache_init(&cache);
    ItemBuf records;
    buf_init(&records);
    ReadCtx ctx = {.mk = &mk, .cache = &cache, .out = &records};
    MsgFields m;
    int rc = read_message(data.buf, (const uint8_t *)data.buf + data.len, KINDS(BATCH_KINDS), &m, on_record, &ctx, 0);
    PyBuffer_Release(&data);
    msg_fields_clear(&m);
    cache_clear(&cache);
    if (rc == 0 && msg_v(&m, RB_VERSION) != 1) {
        PyErr_Format(PyExc_ValueError, "flow record batch version %llu; this reader reads version 1",
                     (unsigned long long)msg_v(&m, RB_VERSION));
        rc = -1;
    }
    if (rc < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "not a flow record batch: broken protobuf encoding");
        buf_clear(&records);
        return NULL;
    }
    return buf_list(&records);
}

/* DnsBatch (proto/flow_record.proto): the DNS answers and events that travel ahead of the flows they explain. */
enum { DB_ITEMS = 1 };
enum { AD_AGENT = 1, AD_MESSAGE, AD_FROM_EVENT };
static const uint8_t DNS_BATCH_KINDS[] = {[DB_ITEMS] = K_MSG};
static const uint8_t AGENT_DNS_KINDS[] = {[AD_AGENT] = K_STR, [AD_MESSAGE] = K_MSG, [AD_FROM_EVENT] = K_BOOL};

/* Where an AgentDns's message is, and how many times the field came (upb merges repeats: see below). */
typedef struct {
    const uint8_t *p, *end;
    int count;
} MsgRange;

static int on_range(void *vctx, uint32_t field, const uint8_t *p, const uint8_t *end)
{
    (void)field;
    MsgRange *r = vctx;
    r->p = p;
    r->end = end;
    r->count++;
    return 0;
}

typedef struct {
    const RecordMakers *mk;
    DecodeCache *cache;
    PyObject *list;
    int merged; /* a message field came twice: the caller reads the batch with upb, which merges them */
} DnsBatchCtx;

static int on_agent_dns(void *vctx, uint32_t field, const uint8_t *p, const uint8_t *end)
{
    (void)field;
    DnsBatchCtx *ctx = vctx;
    MsgFields m;
    MsgRange r = {p, p, 0}; /* absent: an empty message, all defaults, as upb reads it */
    if (read_message(p, end, KINDS(AGENT_DNS_KINDS), &m, on_range, &r, 1)) {
        msg_fields_clear(&m);
        return -1;
    }
    if (r.count > 1) {
        ctx->merged = 1;
        msg_fields_clear(&m);
        return -1;
    }
    ItemBuf one;
    buf_init(&one);
    ReadCtx sub = {.mk = ctx->mk, .cache = ctx->cache, .out = &one};
    PyObject *agent = msg_str(&m, AD_AGENT, &ctx->cache->heads);
    PyObject *item = agent == NULL || on_dns(&sub, DM_ANSWERS, r.p, r.end) ? NULL : PyTuple_New(3);
    if (item != NULL) {
        PyTuple_SET_ITEM(item, 0, agent);
        PyTuple_SET_ITEM(item, 1, one.items[0]); /* moved out of `one` */
        PyTuple_SET_ITEM(item, 2, PyBool_FromLong((long)msg_v(&m, AD_FROM_EVENT)));
        one.n = 0;
    } else {
        Py_XDECREF(agent);
    }
    buf_clear(&one);
    msg_fields_clear(&m);
    return append_owned(ctx->list, item);
}

/* decode_dns_batch(data, make_dns, make_answer) -> list[(agent_id, message, from_event)] | None */
static PyObject *fastpath_decode_dns_batch(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "decode_dns_batch takes 3 arguments: data, make_dns, make_answer");
        return NULL;
    }
    RecordMakers mk = {.make_dns = args[1], .make_answer = args[2]};
    Py_buffer data;
    if (PyObject_GetBuffer(args[0], &data, PyBUF_SIMPLE) < 0)
        return NULL;
    DecodeCache cache;
    cache_init(&cache);
    DnsBatchCtx ctx = {.mk = &mk, .cache = &cache, .list = PyList_New(0)};
    MsgFields m;
    int rc = ctx.list == NULL ? -1
                              : read_message(data.buf, (const uint8_t *)data.buf + data.len, KINDS(DNS_BATCH_KINDS), &m,
                                             on_agent_dns, &ctx, 0);
    PyBuffer_Release(&data);
    if (ctx.list != NULL)
        msg_fields_clear(&m);
    cache_clear(&cache);
    if (rc < 0) {
        Py_XDECREF(ctx.list);
        if (ctx.merged && !PyErr_Occurred())
            Py_RETURN_NONE;
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "not a DNS batch: broken protobuf encoding");
        return NULL;
    }
    return ctx.list;
}

/* encode_dns_batch(items) -> bytes: a serialized DnsBatch of (agent_id, message bytes, from_event) items, each
 * message already a serialized sensor.flows.DnsMessage (the table's answers are). Fields in number order, proto3
 * omissions as upb writes them (an empty agent id, a false from_event; the message is always present); the tests
 * hold the bytes equal to upb's. Framing in Python cost the hand-off thread ~0.6 us per answer. */
static size_t dns_item_size(Py_ssize_t alen, Py_ssize_t mlen, int from_event)
{
    return (alen ? 1 + varint_size((uint64_t)alen) + (size_t)alen : 0) + 1 + varint_size((uint64_t)mlen) + (size_t)mlen +
           (from_event ? 2 : 0);
}

/* An item's parts: (agent_id, message bytes, from_event), or with `pairs` also (agent_id, message bytes), an answer
 * (from_event false: the flow table's answers as they are handed over). */
static int dns_item_parts(PyObject *item, int pairs, const char **agent, Py_ssize_t *alen, PyObject **message,
                          int *from_event)
{
    int pair = pairs && PyTuple_Check(item) && PyTuple_GET_SIZE(item) == 2;
    if (!pair && (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3)) {
        PyErr_SetString(PyExc_TypeError, "a DNS batch item is a tuple (agent_id, message bytes, from_event)");
        return -1;
    }
    PyObject *a = PyTuple_GET_ITEM(item, 0), *m = PyTuple_GET_ITEM(item, 1);
    if (!PyUnicode_Check(a) || !PyBytes_Check(m)) {
        PyErr_SetString(PyExc_TypeError, "a DNS batch item's agent_id must be str and its message bytes");
        return -1;
    }
    if ((*agent = PyUnicode_AsUTF8AndSize(a, alen)) == NULL)
        return -1;
    *message = m;
    if ((*from_event = pair ? 0 : PyObject_IsTrue(PyTuple_GET_ITEM(item, 2))) < 0)
        return -1;
    return 0;
}

/* One DnsBatch.items entry, written at `o` (dns_item_size(...) bytes after its tag and length); the end. */
static uint8_t *put_dns_item(uint8_t *o, const char *agent, Py_ssize_t alen, PyObject *message, int from_event)
{
    Py_ssize_t mlen = PyBytes_GET_SIZE(message);
    *o++ = (1 << 3) | 2; /* DnsBatch.items */
    o = put_varint(o, dns_item_size(alen, mlen, from_event));
    o = put_bytes_field(o, 1, agent, (size_t)alen); /* AgentDns.agent_id */
    *o++ = (2 << 3) | 2;                            /* AgentDns.message, even when empty */
    o = put_varint(o, (uint64_t)mlen);
    memcpy(o, PyBytes_AS_STRING(message), (size_t)mlen);
    o += mlen;
    return put_varint_field(o, 3, (uint64_t)(from_event != 0)); /* AgentDns.from_event */
}

static PyObject *fastpath_encode_dns_batch(PyObject *module, PyObject *items)
{
    (void)module;
    PyObject *seq = PySequence_Fast(items, "items must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **it = PySequence_Fast_ITEMS(seq);
    size_t total = 0;
    const char *agent;
    Py_ssize_t alen;
    PyObject *message;
    int from_event;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (dns_item_parts(it[i], 0, &agent, &alen, &message, &from_event) < 0) {
            Py_DECREF(seq);
            return NULL;
        }
        size_t body = dns_item_size(alen, PyBytes_GET_SIZE(message), from_event);
        total += 1 + varint_size(body) + body;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (out == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        dns_item_parts(it[i], 0, &agent, &alen, &message, &from_event); /* succeeded above: nothing changed since */
        o = put_dns_item(o, agent, alen, message, from_event);
    }
    Py_DECREF(seq);
    if ((size_t)(o - (uint8_t *)PyBytes_AS_STRING(out)) != total) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_SystemError, "encode_dns_batch: size mismatch");
        return NULL;
    }
    return out;
}

#include "outbox.h" /* after the DNS batch writer and WireFlow, which it uses */

static PyMethodDef fastpath_functions[] = {
    {"dns_wire", (PyCFunction)(void (*)(void))fastpath_dns_wire, METH_VARARGS | METH_KEYWORDS,
     "dns_wire(payload, timestamp_ns=0, tcp=False, field=0) -> bytes | None: the serialized sensor.flows.DnsMessage\n"
     "of appliance.flows.dns.parse_dns (parse_dns_tcp when tcp), None where it returns None; with field > 0, that\n"
     "message as a length-delimited field of that number"},
    {"encode_dns_batch", (PyCFunction)fastpath_encode_dns_batch, METH_O,
     "encode_dns_batch(items) -> bytes: a serialized sensor.flows.DnsBatch of (agent_id, message, from_event) items,\n"
     "each message a serialized sensor.flows.DnsMessage, written as upb writes it"},
    {"decode_dns_batch", (PyCFunction)(void (*)(void))fastpath_decode_dns_batch, METH_FASTCALL,
     "decode_dns_batch(data, make_dns, make_answer) -> list | None: the (agent_id, DnsMessage, from_event) items of a\n"
     "serialized sensor.flows.DnsBatch, as record_codec reads them with upb; None when an item repeats its message\n"
     "field (upb merges the repeats: read such a batch with upb); ValueError for bytes that are not a DnsBatch"},
    {"decode_records", (PyCFunction)(void (*)(void))fastpath_decode_records, METH_FASTCALL,
     "decode_records(data, make_record, make_packet, make_dns, make_answer, make_icmp, transports[, sampled]) -> list: the\n"
     "FlowRecords of a serialized sensor.flows.FlowRecordBatch as appliance.flows.record_codec reads them (made by\n"
     "calling the five factories; transports: the transport of each IP protocol); ValueError when the bytes are\n"
     "not a version 1 batch"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fastpath_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "appliance.native.fastpath",
    .m_doc = "The per-packet hot path of ingestion: wire parsing, validation, flow accounting.",
    .m_size = -1,
    .m_methods = fastpath_functions,
};

/* The hash key: 16 bytes of os.urandom, once per process. */
static int init_hash_key(void)
{
    PyObject *os = PyImport_ImportModule("os");
    if (os == NULL)
        return -1;
    PyObject *key = PyObject_CallMethod(os, "urandom", "i", 16);
    Py_DECREF(os);
    if (key == NULL)
        return -1;
    if (!PyBytes_Check(key) || PyBytes_GET_SIZE(key) != 16) {
        Py_DECREF(key);
        PyErr_SetString(PyExc_RuntimeError, "os.urandom(16) did not return 16 bytes");
        return -1;
    }
    memcpy(&siphash_k0, PyBytes_AS_STRING(key), 8);
    memcpy(&siphash_k1, PyBytes_AS_STRING(key) + 8, 8);
    Py_DECREF(key);
    return 0;
}

/* PyModule_AddObject that also releases `v` on failure (PyModule_Add is 3.13+). */
static int add_owned(PyObject *m, const char *name, PyObject *v)
{
    if (v == NULL)
        return -1;
    if (PyModule_AddObject(m, name, v) < 0) {
        Py_DECREF(v);
        return -1;
    }
    return 0;
}

static PyObject *name_tuple(const char *const *names, int n)
{
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t != NULL && i < n; i++) {
        PyObject *s = PyUnicode_FromString(names[i]);
        if (s == NULL) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, s);
    }
    return t;
}

/* The names and numbers this module shares with Python and the proto contract, as module attributes:
 * tests/appliance/native/test_names.py holds them against the tracker, the converter, FlowRecord and
 * the generated descriptor. */
static int export_names(PyObject *m)
{
    static const char *const CLASS_NAMES[NCLS] = {"tcp", "udp", "dns", "icmp", "other"};
    PyObject *fields = Py_BuildValue(
        "{sisisisisisisisisisisisi}", "local_ip", N_LOCAL_IP, "remote_ip", N_REMOTE_IP, "local_port", N_LOCAL_PORT,
        "remote_port", N_REMOTE_PORT, "protocol", N_PROTOCOL, "timestamp", N_TIMESTAMP, "direction", N_DIRECTION,
        "size", N_SIZE, "payload", N_PAYLOAD, "tcp_flags", N_TCP_FLAGS, "pid", N_PID, "process_name", N_PROCESS_NAME);
    if (fields == NULL || add_owned(m, "WIRE_FIELDS", fields) < 0)
        return -1;
    PyObject *sample_fields = Py_BuildValue(
        "{sisisisisisisisisisi}", "timestamp_ns", S_TIMESTAMP, "direction", S_DIRECTION, "size", S_SIZE, "payload",
        S_PAYLOAD, "tcp_flags", S_TCP_FLAGS, "pid", S_PID, "process_name", S_PROCESS_NAME, "dns_index", S_DNS_INDEX,
        "samples", S_RECORD_SAMPLES, "dns", S_RECORD_DNS);
    if (sample_fields == NULL || add_owned(m, "SAMPLE_FIELDS", sample_fields) < 0)
        return -1;
    PyObject *record_fields = Py_BuildValue(
        "{sisisisisisisisisisisisisisisisisisisisi}", "flow_id", W_FLOW_ID, "agent_id", W_AGENT_ID, "protocol", W_PROTOCOL,
        "local_ip", W_LOCAL_IP, "local_port", W_LOCAL_PORT, "remote_ip", W_REMOTE_IP, "remote_port", W_REMOTE_PORT,
        "first_ns", W_FIRST, "last_ns", W_LAST, "packets_out", W_PK_OUT, "packets_in", W_PK_IN, "bytes_out", W_BY_OUT,
        "bytes_in", W_BY_IN, "payload_bytes_out", W_PB_OUT, "payload_bytes_in", W_PB_IN, "tcp_flags", W_FLAGS,
        "pid", W_PID, "process_name", W_NAME, "end_reason", W_END, "records", W_BATCH_RECORDS);
    if (record_fields == NULL || add_owned(m, "RECORD_WIRE_FIELDS", record_fields) < 0)
        return -1;
    if (PyModule_AddIntConstant(m, "BATCH_PACKETS_FIELD", N_BATCH_PACKETS) < 0 ||
        add_owned(m, "REJECT_REASONS", name_tuple(REJECT_NAMES, R_COUNT)) < 0 ||
        add_owned(m, "REPAIR_REASONS", name_tuple(REPAIR_NAMES, F_COUNT)) < 0 ||
        add_owned(m, "END_REASONS", name_tuple(END_NAMES, E_COUNT)) < 0 ||
        add_owned(m, "RECORD_ATTRIBUTES", name_tuple(ATTR_NAMES, A_COUNT)) < 0 ||
        add_owned(m, "RECORD_FIELDS", name_tuple(RECORD_FIELD_NAMES, RF_COUNT)) < 0 ||
        add_owned(m, "TIMEOUT_CLASSES", name_tuple(CLASS_NAMES, NCLS)) < 0)
        return -1;
    return 0;
}

PyMODINIT_FUNC PyInit_fastpath(void)
{
    if (init_hash_key() < 0)
        return NULL;
    for (int i = 0; i < E_COUNT; i++)
        if ((end_strings[i] = PyUnicode_InternFromString(END_NAMES[i])) == NULL)
            return NULL;
    for (int i = 0; i < A_COUNT; i++)
        if ((attr_strings[i] = PyUnicode_InternFromString(ATTR_NAMES[i])) == NULL)
            return NULL;
    if ((empty_string = PyUnicode_InternFromString("")) == NULL)
        return NULL;
    if ((kept_wire_kwnames = Py_BuildValue("(s)", "kept_wire")) == NULL)
        return NULL;
    if (PyType_Ready(&WireReaderType) < 0 || PyType_Ready(&FlowTableType) < 0 || PyType_Ready(&WireFlowType) < 0 || PyType_Ready(&OutboxType) < 0 ||
        PyType_Ready(&SlotMakerType) < 0 || PyType_Ready(&DnsListType) < 0 || PyType_Ready(&SampleListType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&fastpath_module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "WireReader", (PyObject *)&WireReaderType) < 0 ||
        PyModule_AddObjectRef(m, "FlowTable", (PyObject *)&FlowTableType) < 0 ||
        PyModule_AddObjectRef(m, "WireFlow", (PyObject *)&WireFlowType) < 0 ||
        PyModule_AddObjectRef(m, "Outbox", (PyObject *)&OutboxType) < 0 ||
        PyModule_AddObjectRef(m, "SlotMaker", (PyObject *)&SlotMakerType) < 0 ||
        PyModule_AddObjectRef(m, "DnsList", (PyObject *)&DnsListType) < 0 ||
        PyModule_AddObjectRef(m, "SampleList", (PyObject *)&SampleListType) < 0 || export_names(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
