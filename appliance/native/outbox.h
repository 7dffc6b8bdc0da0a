/* Outbox: the server's hand-off to its analysis process, in C (included by fastpath.c).
 *
 * Ended flows (WireFlow entries, already in the flow record contract's encoding) and DNS items wait here per
 * agent, under the bound and the fairness rules of appliance.analysis.fair_queue.FairQueue (equal shares per
 * round; when full, a newcomer takes the place of the newest flow of the agent holding the most, or is itself
 * dropped when its agent already holds its share; drops counted per agent). A sending thread calls `run(fd)`,
 * which releases the interpreter lock and stays in C: it gathers for a few milliseconds or until a batch is
 * full, cuts a DNS frame and a flow frame the way the Python sender cut them, and writes them to the channel
 * with one sendmsg each. It comes back to Python only when asked (a control message to send, a drain wanting
 * the outbox empty, closing) or when the channel broke.
 *
 * READY mode (run(fd, ready_fd), what AnalysisProcess uses): the analysis process sends a byte on a second
 * socketpair before each wait for a frame. After writing, the sender holds what comes until that byte, then writes all
 * of it at once; while the process waits, it gathers as above but looks on its own timer (OUTBOX_TICK_MS), and only
 * after OUTBOX_LINGER without work does it sleep until a put wakes it (an eventfd). So no producer wakes it across the
 * CPUs while flows come: the byte wakes it on its own CPU, where the analysis process that sent it is about to wait.
 * Interleaved with the mode before it (sixteen rounds a side, a fast spell of the 2-core bench machine, 2026-12-02):
 * the gRPC threads -2.3 ms a pass, packets/s until every flow is analysed +5.3% (new appliance) and +6.9% (running).
 *
 * Why: in Python the hand-off cost the ingestion core 17 ms per bench corpus of about 100 (README, "where the
 * time goes"), most of it the sending thread taking the interpreter lock from the gRPC handlers and giving it
 * back, around 90 times per corpus. Producers (the gRPC handlers, holding the interpreter lock) take a reference to
 * each flow's entry and take the outbox's mutex for a few list operations; the sender holds the mutex only to
 * detach nodes, never the interpreter lock, and writes with the mutex released. Lock order: interpreter lock,
 * then the mutex; nothing waits for the interpreter lock while holding the mutex.
 *
 * A flow's node holds a reference to its entry (an immutable bytes object) instead of a copy: the sender reads
 * the bytes without the interpreter lock, which is safe while the reference keeps them alive. It cannot drop that
 * reference itself (no interpreter lock), so the nodes it wrote go onto a `spent` list that whoever next holds the
 * interpreter lock here releases (the next put, run or wait_idle coming back, the outbox's end). Copying cost
 * the producers a malloc and a memcpy per flow (4.2 MB per bench corpus): put over the corpus alone 2.28 -> 0.70
 * ms, beside a running sender (releases counted) 4.6-5.3 -> 4.3-4.8 ms (README, "Less work on both sides": most of
 * the producers' cost is running beside the sender, not copying). DNS items are framed by put_dns and stay copies.
 */

#ifndef OUTBOX_H
#define OUTBOX_H

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define OUTBOX_SHARE 16      /* flows per agent per round, at least (fair_queue.PER_AGENT_ROUND) */
#define OUTBOX_IOV 512       /* iovecs per sendmsg (IOV_MAX is 1024 on Linux) */
#define OUTBOX_TICK_MS 1      /* READY mode: how often an idle analysis process's sender looks, while flows come */
#define OUTBOX_LINGER 0.25    /* READY mode: seconds of nothing to send after which it sleeps until woken */

typedef struct OutNode {
    struct OutNode *prev, *next;
    double put_at;        /* a flow's: when it was put (outbox_now), for oldest_wait */
    size_t len;
    const uint8_t *bytes; /* what is written: data, or the entry's own bytes */
    PyObject *owner;      /* a flow's entry (a reference, released with the interpreter lock), or NULL: a copy */
    uint8_t data[];
} OutNode;

typedef struct OutAgent {
    struct OutAgent *prev, *next; /* in the outbox's line of waiting agents (held > 0), in order of arrival */
    OutNode *head, *tail;         /* its flows, oldest first */
    Py_ssize_t held;
    Py_ssize_t index;             /* in Outbox.names */
    Py_ssize_t dropped_now;       /* scratch of one put */
    int waiting;
} OutAgent;

typedef struct {
    PyObject_HEAD
    pthread_mutex_t mu;
    pthread_cond_t work;   /* the sender waits on it for flows, DNS items or a request */
    pthread_cond_t idle;   /* wait_idle waits on it */
    Py_ssize_t size, batch, dns_max;
    double gather;         /* seconds */
    PyObject *index;       /* agent_id -> index (int) */
    PyObject *names;       /* index -> agent_id */
    OutAgent **agents;
    Py_ssize_t n_agents, cap_agents;
    OutAgent *first, *last; /* agents with flows waiting, in turn */
    Py_ssize_t depth, busy; /* flows waiting; flows cut into a frame being written */
    OutNode *dns_head, *dns_tail;
    Py_ssize_t dns_depth, dns_busy;
    OutNode *spent;        /* written nodes holding references, for the next holder of the interpreter lock */
    unsigned long long dropped, dns_dropped, sent_flows, frames_sent;
    double gather_until;   /* while gathering: when to send what waits, batch or not (0: not gathering) */
    int flush, poked, want_idle, closing, running;
    /* READY mode (run() given the analysis process's ready descriptor): the sender writes while the analysis process
     * waits, and learns that it waits from a byte it sends; producers wake the sender (wake_fd) only in a deep sleep. */
    int wake_fd;           /* an eventfd: pokes and producers wake a sender waiting in poll() */
    int analysis_idle;     /* it said it waits and nothing was written since (1 at first; after a restart a stale 0 is
                            * mended by the new process's first byte, sent as it starts waiting) */
    int deep;              /* the sender waits in poll() without a timeout for lack of work: a put must wake it */
    int ready_mode;        /* run() is in READY mode: wake-ups go through wake_fd */
    double ticking_until;  /* READY mode: looks every OUTBOX_TICK_MS until then, then sleeps until woken */
    int held_back;         /* READY mode: items waited for the analysis process: sent as soon as it waits */
} Outbox;

static double outbox_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int outbox_is_idle(const Outbox *o)
{
    return !o->depth && !o->busy && !o->dns_depth && !o->dns_busy;
}

/* n onto the end of the singly linked list head..tail. */
static void outbox_append(OutNode **head, OutNode **tail, OutNode *n)
{
    n->next = NULL;
    if (*tail != NULL)
        (*tail)->next = n;
    else
        *head = n;
    *tail = n;
}

/* Free nodes and drop their references: with the interpreter lock. */
static void outbox_free_nodes(OutNode *n)
{
    while (n != NULL) {
        OutNode *next = n->next;
        Py_XDECREF(n->owner);
        free(n);
        n = next;
    }
}

/* Nodes a frame wrote, without the interpreter lock: copies are freed, nodes holding a reference join `spent`
 * (one splice under the mutex). */
static void outbox_retire_nodes(Outbox *o, OutNode *n)
{
    OutNode *head = NULL, *tail = NULL;
    while (n != NULL) {
        OutNode *next = n->next;
        if (n->owner == NULL)
            free(n);
        else
            outbox_append(&head, &tail, n);
        n = next;
    }
    if (head == NULL)
        return;
    pthread_mutex_lock(&o->mu);
    tail->next = o->spent;
    o->spent = head;
    pthread_mutex_unlock(&o->mu);
}

/* Release what the sender wrote (with the interpreter lock, without the mutex). */
static void outbox_release_spent(Outbox *o)
{
    pthread_mutex_lock(&o->mu);
    OutNode *spent = o->spent;
    o->spent = NULL;
    pthread_mutex_unlock(&o->mu);
    outbox_free_nodes(spent);
}

/* -- the agents' lines (under the mutex) ----------------------------------------------------- */
static void outbox_join_line(Outbox *o, OutAgent *a)
{
    a->waiting = 1;
    a->prev = o->last;
    a->next = NULL;
    if (o->last != NULL)
        o->last->next = a;
    else
        o->first = a;
    o->last = a;
}

static void outbox_leave_line(Outbox *o, OutAgent *a)
{
    if (a->prev != NULL)
        a->prev->next = a->next;
    else
        o->first = a->next;
    if (a->next != NULL)
        a->next->prev = a->prev;
    else
        o->last = a->prev;
    a->prev = a->next = NULL;
    a->waiting = 0;
}

static void outbox_push(Outbox *o, OutAgent *a, OutNode *n)
{
    n->next = NULL;
    n->prev = a->tail;
    if (a->tail != NULL)
        a->tail->next = n;
    else
        a->head = n;
    a->tail = n;
    if (!a->waiting)
        outbox_join_line(o, a);
    a->held++;
    o->depth++;
}

/* The newest flow of `a` out (to make room); returns it. */
static OutNode *outbox_pop_newest(Outbox *o, OutAgent *a)
{
    OutNode *n = a->tail;
    a->tail = n->prev;
    if (a->tail != NULL)
        a->tail->next = NULL;
    else
        a->head = NULL;
    a->held--;
    o->depth--;
    if (!a->held)
        outbox_leave_line(o, a);
    n->prev = n->next = NULL;
    return n;
}

/* One flow under the bound (FairQueue._admit): the agent whose flow was dropped, or NULL. The dropped node
 * goes onto *garbage. */
static OutAgent *outbox_admit(Outbox *o, OutAgent *a, OutNode *n, OutNode **garbage)
{
    OutAgent *victim = NULL;
    if (o->depth + o->busy >= o->size) {
        OutAgent *longest = NULL;
        for (OutAgent *x = o->first; x != NULL; x = x->next) /* the first of the longest, as max() picks it */
            if (longest == NULL || x->held > longest->held)
                longest = x;
        Py_ssize_t mine = a->held, most = longest != NULL ? longest->held : 0;
        if (longest == NULL || longest == a || most <= mine + 1) {
            n->next = *garbage;
            *garbage = n;
            return a; /* this agent already holds its share: its new flow is the one dropped */
        }
        OutNode *old = outbox_pop_newest(o, longest);
        old->next = *garbage;
        *garbage = old;
        victim = longest;
    }
    outbox_push(o, a, n);
    return victim;
}

/* Up to `limit` flows in turn from every waiting agent (FairQueue.take_round): detached, oldest of each share
 * first, counted busy. Returns the count; *out is the list. */
static Py_ssize_t outbox_cut(Outbox *o, Py_ssize_t limit, OutNode **out)
{
    OutNode *head = NULL, *tail = NULL;
    Py_ssize_t count = 0;
    while (o->first != NULL && count < limit) {
        Py_ssize_t lines = 0;
        for (OutAgent *x = o->first; x != NULL; x = x->next)
            lines++;
        Py_ssize_t share = (limit - count) / lines;
        if (share < OUTBOX_SHARE)
            share = OUTBOX_SHARE;
        OutAgent *a = o->first;
        while (a != NULL) {
            OutAgent *next = a->next;
            Py_ssize_t take = share < limit - count ? share : limit - count;
            for (Py_ssize_t i = 0; i < take && a->head != NULL; i++) {
                OutNode *n = a->head;
                a->head = n->next;
                if (a->head == NULL)
                    a->tail = NULL;
                else
                    a->head->prev = NULL;
                outbox_append(&head, &tail, n);
                a->held--;
                o->depth--;
                count++;
            }
            if (!a->held)
                outbox_leave_line(o, a);
            if (count >= limit)
                break;
            a = next;
        }
    }
    o->busy += count;
    *out = head;
    return count;
}

/* -- writing (no interpreter lock, no mutex) --------------------------------------------------- */
/* Write iovecs whole; 0, or an errno. A descriptor left non-blocking (a timeout the receiver set on the socket)
 * is waited on with poll. */
static int outbox_write(int fd, struct iovec *iov, int n)
{
    while (n > 0) {
        struct msghdr msg = {0};
        msg.msg_iov = iov;
        msg.msg_iovlen = (size_t)(n < OUTBOX_IOV ? n : OUTBOX_IOV);
        ssize_t w = sendmsg(fd, &msg, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                struct pollfd p = {.fd = fd, .events = POLLOUT};
                if (poll(&p, 1, -1) < 0 && errno != EINTR)
                    return errno;
                continue;
            }
            return errno;
        }
        size_t left = (size_t)w;
        while (n > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return 0;
}

/* One frame: kind, 4-byte big-endian length, `prefix` (the batch's version field, or nothing), the nodes. */
static int outbox_write_frame(int fd, char kind, const uint8_t *prefix, size_t prefix_len, OutNode *nodes,
                              Py_ssize_t count)
{
    struct iovec *iov = malloc(sizeof(struct iovec) * (size_t)(count + 2));
    if (iov == NULL)
        return ENOMEM;
    size_t total = prefix_len;
    int n = 2;
    for (OutNode *x = nodes; x != NULL; x = x->next) {
        iov[n].iov_base = (void *)x->bytes;
        iov[n].iov_len = x->len;
        total += x->len;
        n++;
    }
    uint8_t head[5] = {(uint8_t)kind, (uint8_t)(total >> 24), (uint8_t)(total >> 16), (uint8_t)(total >> 8),
                       (uint8_t)total};
    iov[0].iov_base = head;
    iov[0].iov_len = sizeof head;
    iov[1].iov_base = (void *)prefix;
    iov[1].iov_len = prefix_len;
    int err = total > 0xFFFFFFFFu ? EMSGSIZE : outbox_write(fd, iov, n);
    free(iov);
    return err;
}

/* -- the Python type --------------------------------------------------------------------------- */
static const uint8_t OUTBOX_VERSION_FIELD[] = {0x08, 0x01}; /* FlowRecordBatch.version = 1 */

static OutAgent *outbox_agent(Outbox *o, PyObject *agent_id)
{
    PyObject *at = PyDict_GetItemWithError(o->index, agent_id);
    if (at != NULL)
        return o->agents[PyLong_AsSsize_t(at)];
    if (PyErr_Occurred())
        return NULL;
    if (!PyUnicode_Check(agent_id)) {
        PyErr_SetString(PyExc_TypeError, "an agent_id is a str");
        return NULL;
    }
    if (o->n_agents == o->cap_agents) {
        Py_ssize_t cap = o->cap_agents ? o->cap_agents * 2 : 16;
        OutAgent **grown = realloc(o->agents, sizeof(OutAgent *) * (size_t)cap);
        if (grown == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        o->agents = grown;
        o->cap_agents = cap;
    }
    OutAgent *a = calloc(1, sizeof(OutAgent));
    if (a == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    if (PyList_Append(o->names, agent_id) < 0) {
        free(a);
        return NULL;
    }
    PyObject *number = PyLong_FromSsize_t(o->n_agents);
    if (number == NULL || PyDict_SetItem(o->index, agent_id, number) < 0) {
        Py_XDECREF(number);
        free(a);
        PyList_SetSlice(o->names, o->n_agents, o->n_agents + 1, NULL); /* names and index stay in step */
        return NULL;
    }
    Py_DECREF(number);
    a->index = o->n_agents;
    o->agents[o->n_agents++] = a;
    return a;
}

/* Every method but the getters needs __init__ to have run (Outbox.__new__ alone leaves no index or names). */
static int outbox_ready(Outbox *o)
{
    if (o->index != NULL)
        return 1;
    PyErr_SetString(PyExc_RuntimeError, "Outbox: not initialised");
    return 0;
}

/* A flow's node: a reference to its entry (bytes). */
static OutNode *outbox_node(PyObject *entry)
{
    OutNode *n = malloc(sizeof(OutNode));
    if (n == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    n->prev = n->next = NULL;
    n->put_at = 0;
    n->len = (size_t)PyBytes_GET_SIZE(entry);
    n->bytes = (const uint8_t *)PyBytes_AS_STRING(entry);
    n->owner = Py_NewRef(entry);
    return n;
}

static int outbox_init(Outbox *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"size", "batch", "dns_max", "gather", NULL};
    Py_ssize_t size, batch, dns_max;
    double gather;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "nnnd", kwlist, &size, &batch, &dns_max, &gather))
        return -1;
    if (size < 1 || batch < 1 || dns_max < 0 || !(gather >= 0)) {
        PyErr_SetString(PyExc_ValueError, "Outbox: size and batch must be positive, dns_max and gather not negative");
        return -1;
    }
    if (self->index != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Outbox: already initialised");
        return -1;
    }
    self->size = size;
    self->batch = batch;
    self->dns_max = dns_max;
    self->gather = gather;
    self->index = PyDict_New();
    self->names = PyList_New(0);
    if (self->index == NULL || self->names == NULL)
        return -1;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    self->analysis_idle = 1;
    pthread_mutex_init(&self->mu, NULL);
    pthread_cond_init(&self->work, &attr);
    pthread_cond_init(&self->idle, &attr);
    pthread_condattr_destroy(&attr);
    self->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (self->wake_fd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return 0;
}

static void outbox_dealloc(Outbox *self)
{
    if (self->index != NULL) { /* initialised: no thread is in run() (the owner joined it) */
        for (Py_ssize_t i = 0; i < self->n_agents; i++) {
            outbox_free_nodes(self->agents[i]->head);
            free(self->agents[i]);
        }
        outbox_free_nodes(self->dns_head);
        outbox_free_nodes(self->spent);
        pthread_mutex_destroy(&self->mu);
        pthread_cond_destroy(&self->work);
        pthread_cond_destroy(&self->idle);
        if (self->wake_fd >= 0)
            close(self->wake_fd);
    }
    free(self->agents);
    Py_XDECREF(self->index);
    Py_XDECREF(self->names);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Wake the sender wherever it waits (under the mutex). In READY mode it waits in poll(): the eventfd's counter stays
 * set until it reads it, so a wake-up sent before it polls is not lost. */
static void outbox_kick(Outbox *o)
{
    if (o->ready_mode) {
        uint64_t one = 1;
        ssize_t w = write(o->wake_fd, &one, sizeof one);
        (void)w; /* EAGAIN: the counter is already set, the sender wakes anyway */
        return;
    }
    pthread_cond_signal(&o->work);
}

/* After a put (under the mutex). The sender sleeps untimed only when nothing waits: wake it when the first item comes in,
 * and when a batch's worth waits (while it gathers), not at every put. */
static void outbox_wake(Outbox *o, Py_ssize_t depth_before, Py_ssize_t dns_before)
{
    if (o->ready_mode) { /* only a sender asleep for lack of work (the analysis process idle) needs waking */
        if (o->deep && (o->depth || o->dns_depth)) {
            o->deep = 0;
            outbox_kick(o);
        }
        return;
    }
    int was_empty = !depth_before && !dns_before;
    if ((was_empty && (o->depth || o->dns_depth)) || (depth_before < o->batch && o->depth >= o->batch) ||
        (dns_before < o->batch && o->dns_depth >= o->batch))
        pthread_cond_signal(&o->work);
}

/* put(flows): WireFlows, or (agent_id, entry bytes) tuples, in the order they ended. None, or the flows dropped
 * to keep the bound, {agent_id: count}. */
static PyObject *outbox_put(Outbox *self, PyObject *flows)
{
    if (!outbox_ready(self))
        return NULL;
    outbox_release_spent(self);
    PyObject *seq = PySequence_Fast(flows, "flows must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    OutAgent **whose = PyMem_Malloc(sizeof(OutAgent *) * (size_t)(n ? n : 1));
    OutNode **nodes = PyMem_Calloc((size_t)(n ? n : 1), sizeof(OutNode *));
    if (whose == NULL || nodes == NULL) {
        PyMem_Free(whose);
        PyMem_Free(nodes);
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) { /* agents and copies first, the mutex after: it is held for list work only */
        PyObject *item = items[i], *agent_id, *entry;
        if (Py_IS_TYPE(item, &WireFlowType)) {
            agent_id = ((WireFlow *)item)->agent_id;
            entry = ((WireFlow *)item)->entry;
        } else if (PyTuple_Check(item) && PyTuple_GET_SIZE(item) == 2) {
            agent_id = PyTuple_GET_ITEM(item, 0);
            entry = PyTuple_GET_ITEM(item, 1);
        } else {
            PyErr_SetString(PyExc_TypeError, "a flow is a WireFlow or an (agent_id, entry) tuple");
            goto fail;
        }
        if (!PyBytes_Check(entry)) {
            PyErr_SetString(PyExc_TypeError, "a flow's entry is bytes");
            goto fail;
        }
        if ((whose[i] = outbox_agent(self, agent_id)) == NULL)
            goto fail;
        if ((nodes[i] = outbox_node(entry)) == NULL)
            goto fail;
    }
    OutNode *garbage = NULL;
    int dropped_any = 0;
    double now = outbox_now(); /* one clock read per put: the flows of one ingest call came together */
    for (Py_ssize_t i = 0; i < n; i++)
        nodes[i]->put_at = now;
    pthread_mutex_lock(&self->mu);
    Py_ssize_t before = self->depth;
    if (before + self->busy + n <= self->size) { /* room for all (nearly always) */
        for (Py_ssize_t i = 0; i < n; i++)
            outbox_push(self, whose[i], nodes[i]);
    } else {
        for (Py_ssize_t i = 0; i < n; i++) {
            OutAgent *victim = outbox_admit(self, whose[i], nodes[i], &garbage);
            if (victim != NULL) {
                victim->dropped_now++;
                self->dropped++;
                dropped_any = 1;
            }
        }
    }
    outbox_wake(self, before, self->dns_depth);
    pthread_mutex_unlock(&self->mu);
    outbox_free_nodes(garbage);
    PyMem_Free(whose);
    PyMem_Free(nodes);
    Py_DECREF(seq);
    if (!dropped_any)
        Py_RETURN_NONE;
    PyObject *out = PyDict_New();
    for (Py_ssize_t i = 0; i < self->n_agents; i++) { /* the scratch counts are read and cleared under the GIL */
        OutAgent *a = self->agents[i];
        if (!a->dropped_now)
            continue;
        PyObject *count = PyLong_FromSsize_t(a->dropped_now);
        a->dropped_now = 0;
        if (out != NULL && (count == NULL || PyDict_SetItem(out, PyList_GET_ITEM(self->names, a->index), count) < 0))
            Py_CLEAR(out);
        Py_XDECREF(count);
    }
    return out;
fail:
    for (Py_ssize_t i = 0; i < n; i++)
        outbox_free_nodes(nodes[i]);
    PyMem_Free(whose);
    PyMem_Free(nodes);
    Py_DECREF(seq);
    return NULL;
}

/* put_dns(items): (agent_id, serialized DnsMessage, from_event) items, or (agent_id, serialized DnsMessage)
 * answers (from_event false), in order; the number dropped (over dns_max).
 *
 * One node holds a call's items, framed one after the other as they go in the DNS frame: a node (a malloc here,
 * a free on the sender's thread) per answer cost the ingestion CPU more than framing it did (bench/pipeline_bench.py,
 * 2026-12-01: the answers' hand-off alone 4.0 ms of the gRPC threads' CPU a pass, ~7,600 answers). */
static PyObject *outbox_put_dns(Outbox *self, PyObject *items)
{
    if (!outbox_ready(self))
        return NULL;
    PyObject *seq = PySequence_Fast(items, "items must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **it = PySequence_Fast_ITEMS(seq);
    size_t *ends = PyMem_Malloc(sizeof(size_t) * (size_t)(n ? n : 1)); /* where each item's framing ends */
    if (ends == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    size_t total = 0;
    const char *agent;
    Py_ssize_t alen;
    PyObject *message;
    int from_event;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (dns_item_parts(it[i], 1, &agent, &alen, &message, &from_event) < 0) {
            PyMem_Free(ends);
            Py_DECREF(seq);
            return NULL;
        }
        size_t body = dns_item_size(alen, PyBytes_GET_SIZE(message), from_event);
        total += 1 + varint_size(body) + body;
        ends[i] = total;
    }
    OutNode *node = NULL;
    if (n) {
        if ((node = malloc(sizeof(OutNode) + total)) == NULL) {
            PyMem_Free(ends);
            Py_DECREF(seq);
            return PyErr_NoMemory();
        }
        uint8_t *o = node->data;
        for (Py_ssize_t i = 0; i < n; i++) {
            dns_item_parts(it[i], 1, &agent, &alen, &message, &from_event); /* succeeded above: nothing changed */
            o = put_dns_item(o, agent, alen, message, from_event);      /* as encode_dns_batch writes it */
        }
        node->put_at = 0;
        node->bytes = node->data;
        node->owner = NULL;
        node->prev = node->next = NULL;
    }
    Py_DECREF(seq);
    Py_ssize_t dropped = 0;
    pthread_mutex_lock(&self->mu);
    Py_ssize_t room = self->dns_max - self->dns_depth, kept = n < room ? n : (room > 0 ? room : 0);
    if (kept < n) { /* the newest beyond the bound are dropped */
        dropped = n - kept;
        self->dns_dropped += (unsigned long long)dropped;
    }
    if (kept) {
        Py_ssize_t dns_before = self->dns_depth;
        node->len = ends[kept - 1];
        node->prev = self->dns_tail;
        if (self->dns_tail != NULL)
            self->dns_tail->next = node;
        else
            self->dns_head = node;
        self->dns_tail = node;
        self->dns_depth += kept;
        outbox_wake(self, self->depth, dns_before);
        node = NULL;
    }
    pthread_mutex_unlock(&self->mu);
    free(node); /* none kept */
    PyMem_Free(ends);
    return PyLong_FromSsize_t(dropped);
}

/* One frame of what waits, written with the mutex released (held on entry and exit): the DNS items first (they go
 * ahead of the flows they explain), else up to a batch of flows. 0, or an errno (*lost: the flows that did not go). */
static int outbox_send_one(Outbox *self, int fd, Py_ssize_t *lost)
{
    int err;
    if (self->dns_depth) {
        OutNode *nodes = self->dns_head;
        Py_ssize_t count = self->dns_depth;
        self->dns_head = self->dns_tail = NULL;
        self->dns_depth = 0;
        self->dns_busy = count;
        pthread_mutex_unlock(&self->mu);
        err = outbox_write_frame(fd, 'D', NULL, 0, nodes, count);
        outbox_retire_nodes(self, nodes);
        pthread_mutex_lock(&self->mu);
        self->dns_busy = 0;
        if (err)
            return err;
        self->frames_sent++;
        if (outbox_is_idle(self))
            pthread_cond_broadcast(&self->idle);
        return 0;
    }
    OutNode *nodes;
    Py_ssize_t count = outbox_cut(self, self->batch, &nodes);
    self->gather_until = 0; /* what comes next is gathered afresh */
    pthread_mutex_unlock(&self->mu);
    err = outbox_write_frame(fd, 'F', OUTBOX_VERSION_FIELD, sizeof OUTBOX_VERSION_FIELD, nodes, count);
    outbox_retire_nodes(self, nodes);
    pthread_mutex_lock(&self->mu);
    self->busy -= count;
    if (outbox_is_idle(self))
        pthread_cond_broadcast(&self->idle);
    if (err) {
        *lost = count;
        return err;
    }
    self->sent_flows += (unsigned long long)count;
    self->frames_sent++;
    return 0;
}

/* Nothing waits (mutex held): the next item is gathered afresh, wait_idle() returns, and run() comes back if a drain
 * wanted the outbox empty (1). */
static int outbox_emptied(Outbox *o)
{
    o->gather_until = 0;
    o->flush = 0;
    pthread_cond_broadcast(&o->idle);
    if (!o->want_idle)
        return 0;
    o->want_idle = 0;
    return 1;
}

/* READY mode: the analysis process waits; what came while it worked goes at once, without gathering. */
static void outbox_now_idle(Outbox *o)
{
    if (!o->analysis_idle && (o->depth || o->dns_depth))
        o->held_back = 1;
    o->analysis_idle = 1;
}

/* READY mode: the bytes the analysis process sent to say it waits (mutex held; the descriptor is non-blocking). */
static void outbox_read_ready(Outbox *o, int ready_fd, int *ended)
{
    char buf[256];
    while (!*ended) {
        ssize_t r = read(ready_fd, buf, sizeof buf);
        if (r > 0) {
            outbox_now_idle(o);
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return; /* all read */
        *ended = 1; /* the end of the stream, or broken: the process is gone */
    }
    outbox_now_idle(o); /* gone: frames are written, and fail, so that the caller learns it */
}

/* READY mode: wait for the analysis process's byte, a kick, or timeout_ms (-1: none), the mutex released. */
static void outbox_poll(Outbox *o, int ready_fd, int ended, int timeout_ms)
{
    struct pollfd p[2] = {{.fd = ended ? -1 : ready_fd, .events = POLLIN}, {.fd = o->wake_fd, .events = POLLIN}};
    pthread_mutex_unlock(&o->mu);
    if (poll(p, 2, timeout_ms) > 0 && (p[1].revents & POLLIN)) {
        uint64_t value;
        ssize_t r = read(o->wake_fd, &value, sizeof value);
        (void)r;
    }
    pthread_mutex_lock(&o->mu);
}

/* READY mode's loop (mutex held). While the analysis process works, nothing is written and no producer wakes the
 * sender: what comes waits here, and goes all at once when the process says it waits (its byte, a wake-up on its own
 * CPU). While it waits, the sender gathers as in the other mode but looks on its own timer every OUTBOX_TICK_MS; after
 * OUTBOX_LINGER with nothing to send it sleeps until a put wakes it. */
static int outbox_run_ready(Outbox *self, int fd, int ready_fd, Py_ssize_t *lost)
{
    int err = 0, ended = 0;
    self->ready_mode = 1;
    for (;;) {
        if (self->closing || self->poked) {
            self->poked = 0;
            break;
        }
        outbox_read_ready(self, ready_fd, &ended);
        if (self->dns_depth || self->depth) {
            double now = outbox_now();
            self->ticking_until = now + OUTBOX_LINGER;
            if (!self->gather_until)
                self->gather_until = now + self->gather;
            if (!self->analysis_idle) {
                self->held_back = 1;
                outbox_poll(self, ready_fd, ended, -1);
                continue;
            }
            if (self->held_back || now >= self->gather_until || self->flush || self->depth >= self->batch ||
                self->dns_depth >= self->batch) {
                while (!err && (self->dns_depth || self->depth))
                    err = outbox_send_one(self, fd, lost);
                if (err)
                    break;
                self->held_back = 0;
                self->analysis_idle = ended; /* at work until it says it waits */
                continue;
            }
            outbox_poll(self, ready_fd, ended, OUTBOX_TICK_MS); /* gathering: looked at again on the next tick */
            continue;
        }
        if (outbox_emptied(self))
            break;
        if (!self->analysis_idle) {
            outbox_poll(self, ready_fd, ended, -1);
        } else if (outbox_now() < self->ticking_until) {
            outbox_poll(self, ready_fd, ended, OUTBOX_TICK_MS);
        } else {
            self->deep = 1;
            outbox_poll(self, ready_fd, ended, -1);
            self->deep = 0;
        }
    }
    self->ready_mode = 0;
    return err;
}

/* run(fd, ready_fd=-1) -> (flows lost, errno): send until asked back (poke, a drain that wants the outbox empty,
 * closing): (0, 0); or until a write failed: (the flows of the frame that did not go, errno). With ready_fd (the
 * analysis process's end of a second socketpair, non-blocking), READY mode (outbox_run_ready). Releases the
 * interpreter lock for all of it. One thread at a time. */
static PyObject *outbox_run(Outbox *self, PyObject *args)
{
    if (!outbox_ready(self))
        return NULL;
    PyObject *channel;
    int ready_fd = -1;
    if (!PyArg_ParseTuple(args, "O|i", &channel, &ready_fd))
        return NULL;
    int fd = PyObject_AsFileDescriptor(channel);
    if (fd < 0)
        return NULL;
    Py_ssize_t lost = 0;
    int err = 0, busy_thread = 0;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->mu);
    if (self->running)
        busy_thread = 1;
    self->running = 1;
    if (!busy_thread && ready_fd >= 0)
        err = outbox_run_ready(self, fd, ready_fd, &lost);
    while (!busy_thread && ready_fd < 0) {
        if (self->closing || self->poked) {
            self->poked = 0;
            break;
        }
        if (self->dns_depth || self->depth) {
            double now = outbox_now();
            if (!self->gather_until)
                self->gather_until = now + self->gather;
            if (now >= self->gather_until || self->flush || self->depth >= self->batch || self->dns_depth >= self->batch) {
                if ((err = outbox_send_one(self, fd, &lost)) != 0)
                    break;
                continue;
            }
            double wait = self->gather_until;
            struct timespec ts = {.tv_sec = (time_t)wait, .tv_nsec = (long)((wait - (double)(time_t)wait) * 1e9)};
            pthread_cond_timedwait(&self->work, &self->mu, &ts);
            continue;
        }
        if (outbox_emptied(self))
            break;
        pthread_cond_wait(&self->work, &self->mu);
    }
    if (!busy_thread)
        self->running = 0;
    pthread_mutex_unlock(&self->mu);
    Py_END_ALLOW_THREADS
    outbox_release_spent(self);
    if (busy_thread) {
        PyErr_SetString(PyExc_RuntimeError, "Outbox.run: another thread is running it");
        return NULL;
    }
    return Py_BuildValue("(ni)", lost, err);
}

/* poke(flush=False, want_idle=False): bring run() back to Python (a control message to send); with flush, send
 * what waits without gathering; with want_idle, run() returns once the outbox is empty instead. */
static PyObject *outbox_poke(Outbox *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"flush", "want_idle", NULL};
    int flush = 0, want_idle = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|pp", kwlist, &flush, &want_idle))
        return NULL;
    pthread_mutex_lock(&self->mu);
    if (flush)
        self->flush = 1;
    if (want_idle)
        self->want_idle = 1;
    if (!flush && !want_idle)
        self->poked = 1;
    outbox_kick(self);
    pthread_mutex_unlock(&self->mu);
    Py_RETURN_NONE;
}

static PyObject *outbox_close(Outbox *self, PyObject *unused)
{
    (void)unused;
    pthread_mutex_lock(&self->mu);
    self->closing = 1;
    pthread_cond_broadcast(&self->work);
    outbox_kick(self);
    pthread_cond_broadcast(&self->idle);
    pthread_mutex_unlock(&self->mu);
    Py_RETURN_NONE;
}

static PyObject *outbox_reopen(Outbox *self, PyObject *unused)
{
    (void)unused;
    pthread_mutex_lock(&self->mu);
    self->closing = 0;
    pthread_mutex_unlock(&self->mu);
    Py_RETURN_NONE;
}

/* wait_idle(timeout) -> bool: nothing waits and nothing is being written (False when the time ran out or the
 * outbox closed first). */
static PyObject *outbox_wait_idle(Outbox *self, PyObject *arg)
{
    if (!outbox_ready(self))
        return NULL;
    double timeout = PyFloat_AsDouble(arg);
    if (timeout == -1.0 && PyErr_Occurred())
        return NULL;
    int idle;
    Py_BEGIN_ALLOW_THREADS
    double deadline = outbox_now() + (timeout > 0 ? timeout : 0);
    struct timespec ts = {.tv_sec = (time_t)deadline, .tv_nsec = (long)((deadline - (double)(time_t)deadline) * 1e9)};
    pthread_mutex_lock(&self->mu);
    while (!(idle = outbox_is_idle(self)) && !self->closing)
        if (pthread_cond_timedwait(&self->idle, &self->mu, &ts) == ETIMEDOUT) {
            idle = outbox_is_idle(self);
            break;
        }
    pthread_mutex_unlock(&self->mu);
    Py_END_ALLOW_THREADS
    outbox_release_spent(self);
    return PyBool_FromLong(idle);
}

/* take_sent() -> int: the flows written whole since the last call (what a process that dies had been handed). */
static PyObject *outbox_take_sent(Outbox *self, PyObject *unused)
{
    (void)unused;
    pthread_mutex_lock(&self->mu);
    unsigned long long sent = self->sent_flows;
    self->sent_flows = 0;
    pthread_mutex_unlock(&self->mu);
    return PyLong_FromUnsignedLongLong(sent);
}

#define OUTBOX_GETTER(field, make)                                                                       \
    static PyObject *outbox_get_##field(Outbox *self, void *closure)                                    \
    {                                                                                                    \
        (void)closure;                                                                                   \
        pthread_mutex_lock(&self->mu);                                                                   \
        __typeof__(self->field) v = self->field;                                                         \
        pthread_mutex_unlock(&self->mu);                                                                 \
        return make(v);                                                                                  \
    }
OUTBOX_GETTER(depth, PyLong_FromSsize_t)
OUTBOX_GETTER(dns_depth, PyLong_FromSsize_t)
OUTBOX_GETTER(dropped, PyLong_FromUnsignedLongLong)
OUTBOX_GETTER(dns_dropped, PyLong_FromUnsignedLongLong)
OUTBOX_GETTER(frames_sent, PyLong_FromUnsignedLongLong)

static PyObject *outbox_get_idle(Outbox *self, void *closure)
{
    (void)closure;
    pthread_mutex_lock(&self->mu);
    int idle = outbox_is_idle(self);
    pthread_mutex_unlock(&self->mu);
    return PyBool_FromLong(idle);
}

/* How long the oldest flow waiting has waited, in seconds (0.0 when none waits): each agent's line is oldest first, so
 * the oldest is the earliest of the waiting agents' heads. Flows cut into a frame being written are not counted. */
static PyObject *outbox_get_oldest_wait(Outbox *self, void *closure)
{
    (void)closure;
    const OutNode *oldest = NULL;
    double since = 0;
    pthread_mutex_lock(&self->mu);
    for (const OutAgent *a = self->first; a != NULL; a = a->next)
        if (a->head != NULL && (oldest == NULL || a->head->put_at < oldest->put_at))
            oldest = a->head;
    if (oldest != NULL)
        since = oldest->put_at;
    pthread_mutex_unlock(&self->mu);
    double wait = oldest != NULL ? outbox_now() - since : 0.0;
    return PyFloat_FromDouble(wait > 0 ? wait : 0.0);
}

static PyMethodDef outbox_methods[] = {
    {"put", (PyCFunction)outbox_put, METH_O,
     "put(flows) -> dict | None: queue ended flows (WireFlows or (agent_id, entry) tuples); the flows dropped to keep\n"
     "the bound per agent, or None"},
    {"put_dns", (PyCFunction)outbox_put_dns, METH_O,
     "put_dns(items) -> int: queue (agent_id, serialized DnsMessage[, from_event]) items; the number dropped"},
    {"run", (PyCFunction)outbox_run, METH_VARARGS,
     "run(fd) -> (lost, errno): write frames to fd until asked back ((0, 0)) or a write fails"},
    {"poke", (PyCFunction)(void (*)(void))outbox_poke, METH_VARARGS | METH_KEYWORDS,
     "poke(flush=False, want_idle=False): bring run() back, or have it send at once / come back once empty"},
    {"close", (PyCFunction)outbox_close, METH_NOARGS, "run() comes back and wait_idle() gives up, for good"},
    {"reopen", (PyCFunction)outbox_reopen, METH_NOARGS, "undo close()"},
    {"wait_idle", (PyCFunction)outbox_wait_idle, METH_O, "wait_idle(timeout) -> bool"},
    {"take_sent", (PyCFunction)outbox_take_sent, METH_NOARGS, "the flows written whole since the last call"},
    {NULL},
};

static PyGetSetDef outbox_getset[] = {
    {"depth", (getter)outbox_get_depth, NULL, "flows waiting", NULL},
    {"dns_depth", (getter)outbox_get_dns_depth, NULL, "DNS items waiting", NULL},
    {"dropped", (getter)outbox_get_dropped, NULL, "flows dropped to keep the bound", NULL},
    {"dns_dropped", (getter)outbox_get_dns_dropped, NULL, "DNS items dropped over dns_max", NULL},
    {"frames_sent", (getter)outbox_get_frames_sent, NULL, "frames written whole", NULL},
    {"idle", (getter)outbox_get_idle, NULL, "nothing waits and nothing is being written", NULL},
    {"oldest_wait", (getter)outbox_get_oldest_wait, NULL, "seconds the oldest flow waiting has waited (0.0: none)", NULL},
    {NULL},
};

static PyTypeObject OutboxType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "appliance.native.fastpath.Outbox",
    .tp_basicsize = sizeof(Outbox),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Outbox(size, batch, dns_max, gather): ended flows and DNS items for the analysis process, fair per agent\n"
              "under a bound, written as channel frames by run() without the interpreter lock (outbox.h)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)outbox_init,
    .tp_dealloc = (destructor)outbox_dealloc,
    .tp_methods = outbox_methods,
    .tp_getset = outbox_getset,
};

#endif
