/*
 * dns_wire.h: one DNS message (RFC 1035) parsed straight into its flow record encoding, in C.
 *
 * The C twin of appliance/flows/dns.py: dns_to_wire(msg, len, ts, out) appends to `out` exactly the
 * bytes of record_codec._dns_pb(parse_dns(msg, ts)).SerializeToString(), the protobuf encoding of
 * sensor.flows.DnsMessage (proto/flow_record.proto), and dns_to_wire_tcp() those of parse_dns_tcp().
 * tests/appliance/native/test_dns_wire.py holds the two parsers equal, byte for byte, on fixtures,
 * hostile messages and seeded random mutations; change both or neither.
 *
 * Same rules as the Python parser: best effort, a message that ends or points somewhere it cannot
 * gives what was read so far with `malformed` set; compression pointers are followed at most 32 hops
 * per name, names stop at 255 octets, one message may make the parser read at most 512 labels
 * (pointers included), at most 32 answers are kept and further questions are skipped without
 * following their pointers. Work is linear in the message length and the output is bounded by it
 * (names <= 1020 characters, rdata <= 4 characters per byte), so hostile input costs microseconds.
 *
 * Self-contained: no Python API, no global state; every helper is static and prefixed dnsw_.
 */
#ifndef APPLIANCE_NATIVE_DNS_WIRE_H
#define APPLIANCE_NATIVE_DNS_WIRE_H

#include <arpa/inet.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define DNSW_HEADER 12
#define DNSW_RR_FIXED 10
#define DNSW_MAX_POINTER_HOPS 32
#define DNSW_MAX_ANSWERS 32
#define DNSW_LABEL_BUDGET 512
#define DNSW_NAME_OCTETS 255
/* A name of at most 255 octets as text: every byte may become 4 characters ("\xNN"): <= 1020. */
#define DNSW_NAME_TEXT 1024

enum { DNS_WIRE_NOMEM = -1, DNS_WIRE_NONE = 0, DNS_WIRE_OK = 1 };

/* The caller's output: a growable buffer that it owns and may reuse across calls (set len = 0), and
 * what the last parsed message said that the caller needs without decoding it again. */
typedef struct DnsWire {
    uint8_t *data;   /* malloc'd, grown with realloc; release with dns_wire_free() */
    size_t len;      /* bytes written; a call appends its message at data + len */
    size_t cap;
    int is_response; /* the last message's QR bit */
    int malformed;   /* the last message's `malformed` field */
    int resolves;    /* the last message names its question and answers it with an address (A or AAAA): what
                      * ResolverCache.observe learns from; other responses teach the resolver cache nothing */
} DnsWire;

static inline void dns_wire_free(DnsWire *w)
{
    free(w->data);
    w->data = NULL;
    w->len = w->cap = 0;
}

/* Room for `more` bytes after w->len; -1 when memory runs out (w unchanged). */
static int dnsw_reserve(DnsWire *w, size_t more)
{
    if (w->cap - w->len >= more)
        return 0;
    size_t want = w->cap ? w->cap : 256;
    while (want - w->len < more) {
        if (want > SIZE_MAX / 2)
            return -1;
        want *= 2;
    }
    uint8_t *grown = realloc(w->data, want);
    if (grown == NULL)
        return -1;
    w->data = grown;
    w->cap = want;
    return 0;
}

static inline size_t dnsw_varint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *dnsw_put_varint(uint8_t *o, uint64_t v)
{
    while (v >= 0x80) {
        *o++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *o++ = (uint8_t)v;
    return o;
}

/* proto3: a zero scalar or an empty string is not written. Every field number here is < 16 (one tag byte). */
static inline size_t dnsw_uint_field_size(uint64_t v) { return v ? 1 + dnsw_varint_size(v) : 0; }
static inline size_t dnsw_text_field_size(size_t len) { return len ? 1 + dnsw_varint_size(len) + len : 0; }

static inline uint8_t *dnsw_put_uint_field(uint8_t *o, unsigned field, uint64_t v)
{
    if (v == 0)
        return o;
    *o++ = (uint8_t)(field << 3);
    return dnsw_put_varint(o, v);
}

/* The tag and length of a text field of `len` bytes (the caller writes the bytes); nothing when empty. */
static inline uint8_t *dnsw_put_text_head(uint8_t *o, unsigned field, size_t len)
{
    if (len == 0)
        return o;
    *o++ = (uint8_t)((field << 3) | 2);
    return dnsw_put_varint(o, len);
}

static const char dnsw_hex[] = "0123456789abcdef";

/* bytes.decode("ascii", "backslashreplace"), lowered (str.lower) when `lower`: characters written. */
static inline size_t dnsw_put_text(char *o, const uint8_t *s, size_t n, int lower)
{
    char *start = o;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = s[i];
        if (b >= 0x80) {
            *o++ = '\\';
            *o++ = 'x';
            *o++ = dnsw_hex[b >> 4];
            *o++ = dnsw_hex[b & 15];
        } else {
            *o++ = (char)(lower && b >= 'A' && b <= 'Z' ? b + ('a' - 'A') : b);
        }
    }
    return (size_t)(o - start);
}

static inline size_t dnsw_text_size(const uint8_t *s, size_t n)
{
    size_t chars = n;
    for (size_t i = 0; i < n; i++)
        chars += (s[i] >> 7) * 3;
    return chars;
}

/* One message being parsed: the labels it may still make us read are shared by all its names. */
typedef struct {
    const uint8_t *buf;
    size_t len;
    int labels_left;
} DnswMessage;

/* dns.py _read_name: the possibly compressed name at `off` as lower-case text (no trailing dot) into
 * `text` (DNSW_NAME_TEXT bytes, not NUL-terminated); *next is the offset after the name where it sits.
 * 0, or -1 when malformed (text and *next are then undefined). */
static int dnsw_read_name(DnswMessage *m, size_t off, char *text, size_t *text_len, size_t *next)
{
    const uint8_t *buf = m->buf;
    size_t end = SIZE_MAX, chars = 0, octets = 0;
    int hops = 0;
    for (;;) {
        if (off >= m->len)
            return -1; /* name runs past the end */
        uint8_t n = buf[off];
        if (n == 0) {
            off += 1;
            break;
        }
        if (--m->labels_left < 0)
            return -1; /* too many labels in one message */
        if ((n & 0xC0) == 0xC0) {
            if (off + 1 >= m->len)
                return -1; /* truncated pointer */
            if (++hops > DNSW_MAX_POINTER_HOPS)
                return -1; /* compression pointer loop */
            if (end == SIZE_MAX)
                end = off + 2;
            off = ((size_t)(n & 0x3F) << 8) | buf[off + 1];
            continue;
        }
        if (n & 0xC0)
            return -1; /* reserved label type */
        if (n > m->len - off - 1)
            return -1; /* truncated label */
        octets += (size_t)n + 1;
        if (octets > DNSW_NAME_OCTETS)
            return -1; /* name longer than 255 octets */
        if (chars)
            text[chars++] = '.';
        chars += dnsw_put_text(text + chars, buf + off + 1, n, 1);
        off += 1 + (size_t)n;
    }
    *text_len = chars;
    *next = end != SIZE_MAX ? end : off;
    return 0;
}

/* dns.py _skip_name: the offset after the name at `off`, pointers not followed; -1 when malformed. */
static int dnsw_skip_name(const uint8_t *buf, size_t len, size_t off, size_t *next)
{
    for (;;) {
        if (off >= len)
            return -1;
        uint8_t n = buf[off];
        if (n == 0) {
            *next = off + 1;
            return 0;
        }
        if ((n & 0xC0) == 0xC0) {
            *next = off + 2;
            return 0;
        }
        if (n & 0xC0)
            return -1;
        off += 1 + (size_t)n;
    }
}

static inline unsigned dnsw_u16(const uint8_t *p) { return (unsigned)p[0] << 8 | p[1]; }

/* inet_ntop(AF_INET) without its formatted printing (a tenth of the cost, on the commonest answer). */
static inline size_t dnsw_ipv4(const uint8_t *a, char *o)
{
    char *start = o;
    for (int i = 0; i < 4; i++) {
        unsigned v = a[i];
        if (v >= 100)
            *o++ = (char)('0' + v / 100);
        if (v >= 10)
            *o++ = (char)('0' + v / 10 % 10);
        *o++ = (char)('0' + v % 10);
        if (i < 3)
            *o++ = '.';
    }
    return (size_t)(o - start);
}

/* How an answer's data is written: from a text buffer, or computed from rdata while writing. */
enum { DNSW_DATA_TEXT, DNSW_DATA_TXT, DNSW_DATA_HEX };

/* The TXT rdata as dns.py joins it: character-strings concatenated, each cut where rdata ends. */
static size_t dnsw_txt(const uint8_t *rd, size_t rdlen, char *o)
{
    size_t chars = 0;
    for (size_t i = 0; i < rdlen; i += 1 + (size_t)rd[i]) {
        size_t n = rd[i], avail = rdlen - i - 1;
        if (n > avail)
            n = avail;
        chars += o ? dnsw_put_text(o + chars, rd + i + 1, n, 0) : dnsw_text_size(rd + i + 1, n);
    }
    return chars;
}

/* One answer (dns.py's loop body) appended as a DnsMessage.answers entry; *off moves past it and *rtype_out
 * is its type. 0, -1 malformed, -2 out of memory. */
static int dnsw_answer(DnswMessage *m, size_t *off, DnsWire *out, unsigned *rtype_out)
{
    const uint8_t *buf = m->buf;
    char name[DNSW_NAME_TEXT], text[DNSW_NAME_TEXT];
    size_t name_len, data_len, after;
    if (dnsw_read_name(m, *off, name, &name_len, &after) < 0)
        return -1;
    if (after + DNSW_RR_FIXED > m->len)
        return -1; /* truncated resource record */
    const uint8_t *rr = buf + after;
    unsigned rtype = dnsw_u16(rr);
    uint32_t ttl = (uint32_t)rr[4] << 24 | (uint32_t)rr[5] << 16 | (uint32_t)rr[6] << 8 | rr[7];
    size_t rdlen = dnsw_u16(rr + 8), start = after + DNSW_RR_FIXED;
    if (start + rdlen > m->len)
        return -1; /* rdata runs past the end */
    const uint8_t *rd = buf + start;
    int kind = DNSW_DATA_TEXT;
    if (rtype == 1 && rdlen == 4) {
        data_len = dnsw_ipv4(rd, text);
    } else if (rtype == 28 && rdlen == 16) {
        if (inet_ntop(AF_INET6, rd, text, sizeof text) == NULL)
            return -1;
        data_len = strlen(text);
    } else if (rtype == 2 || rtype == 5 || rtype == 12) { /* NS, CNAME, PTR: read in the whole message */
        if (dnsw_read_name(m, start, text, &data_len, &after) < 0)
            return -1;
    } else if (rtype == 15 && rdlen >= 3) { /* MX: the name after the preference */
        if (dnsw_read_name(m, start + 2, text, &data_len, &after) < 0)
            return -1;
    } else if (rtype == 16) {
        kind = DNSW_DATA_TXT;
        data_len = dnsw_txt(rd, rdlen, NULL);
    } else {
        kind = DNSW_DATA_HEX;
        data_len = 2 * rdlen;
    }
    size_t sub = dnsw_text_field_size(name_len) + dnsw_uint_field_size(rtype) + dnsw_uint_field_size(ttl) +
                 dnsw_text_field_size(data_len);
    if (dnsw_reserve(out, 1 + dnsw_varint_size(sub) + sub) < 0)
        return -2;
    uint8_t *o = out->data + out->len;
    *o++ = (7 << 3) | 2; /* DnsMessage.answers */
    o = dnsw_put_varint(o, sub);
    o = dnsw_put_text_head(o, 1, name_len);
    memcpy(o, name, name_len);
    o += name_len;
    o = dnsw_put_uint_field(o, 2, rtype);
    o = dnsw_put_uint_field(o, 3, ttl);
    o = dnsw_put_text_head(o, 4, data_len);
    if (kind == DNSW_DATA_TEXT) {
        memcpy(o, text, data_len);
    } else if (kind == DNSW_DATA_TXT) {
        dnsw_txt(rd, rdlen, (char *)o);
    } else {
        for (size_t i = 0; i < rdlen; i++) {
            o[2 * i] = (uint8_t)dnsw_hex[rd[i] >> 4];
            o[2 * i + 1] = (uint8_t)dnsw_hex[rd[i] & 15];
        }
    }
    out->len = (size_t)(o + data_len - out->data);
    *off = start + rdlen;
    *rtype_out = rtype;
    return 0;
}

/* parse_dns, with `malformed` forced on when `truncated` (the TCP length prefix said more). */
static int dnsw_message(const uint8_t *msg, size_t len, uint64_t timestamp_ns, int truncated, DnsWire *out)
{
    if (len < DNSW_HEADER)
        return DNS_WIRE_NONE;
    size_t entry_len = out->len;
    unsigned flags = dnsw_u16(msg + 2), qdcount = dnsw_u16(msg + 4), ancount = dnsw_u16(msg + 6);
    DnswMessage m = {msg, len, DNSW_LABEL_BUDGET};
    int malformed = 0, named = 0;
    out->resolves = 0;
    /* Header fields (<= 8 bytes), the question name (<= 1024) and the question's type and class (<= 8). */
    if (dnsw_reserve(out, 8 + 3 + DNSW_NAME_TEXT + 8) < 0)
        return DNS_WIRE_NOMEM;
    uint8_t *o = out->data + out->len;
    o = dnsw_put_uint_field(o, 1, dnsw_u16(msg));
    o = dnsw_put_uint_field(o, 2, (flags & 0x8000) != 0);
    o = dnsw_put_uint_field(o, 3, flags & 0x000F);
    size_t off = DNSW_HEADER;
    for (unsigned index = 0; index < qdcount; index++) {
        /* Only the first question is kept; the others are skipped without following their pointers. */
        if (index == 0) {
            char qname[DNSW_NAME_TEXT];
            size_t qname_len;
            if (dnsw_read_name(&m, off, qname, &qname_len, &off) < 0) {
                malformed = 1;
                break;
            }
            o = dnsw_put_text_head(o, 4, qname_len);
            memcpy(o, qname, qname_len);
            o += qname_len;
            named = qname_len > 0;
        } else if (dnsw_skip_name(msg, len, off, &off) < 0) {
            malformed = 1;
            break;
        }
        if (off + 4 > len) {
            malformed = 1; /* truncated question */
            break;
        }
        if (index == 0) {
            o = dnsw_put_uint_field(o, 5, dnsw_u16(msg + off));
            o = dnsw_put_uint_field(o, 6, dnsw_u16(msg + off + 2));
        }
        off += 4;
    }
    out->len = (size_t)(o - out->data);
    unsigned answers = ancount < DNSW_MAX_ANSWERS ? ancount : DNSW_MAX_ANSWERS;
    int addresses = 0;
    for (unsigned i = 0; !malformed && i < answers; i++) {
        unsigned rtype = 0;
        int rc = dnsw_answer(&m, &off, out, &rtype);
        if (rc == -2) {
            out->len = entry_len;
            return DNS_WIRE_NOMEM;
        }
        malformed = rc < 0;
        addresses += rc == 0 && (rtype == 1 || rtype == 28); /* an address answer written */
    }
    malformed |= truncated;
    if (dnsw_reserve(out, 2 + 1 + 10) < 0) {
        out->len = entry_len;
        return DNS_WIRE_NOMEM;
    }
    o = out->data + out->len;
    o = dnsw_put_uint_field(o, 8, (uint64_t)malformed);
    o = dnsw_put_uint_field(o, 9, timestamp_ns);
    out->len = (size_t)(o - out->data);
    out->is_response = (flags & 0x8000) != 0;
    out->malformed = malformed;
    out->resolves = out->is_response && named && addresses > 0;
    return DNS_WIRE_OK;
}

/* dns.py parse_dns(msg, timestamp_ns) for a UDP payload (no length prefix), appended to `out` as a
 * serialized sensor.flows.DnsMessage. DNS_WIRE_OK; DNS_WIRE_NONE where parse_dns returns None (shorter
 * than the 12-byte header: nothing written); DNS_WIRE_NOMEM (out->len as it was). */
static inline int dns_to_wire(const uint8_t *msg, size_t len, uint64_t timestamp_ns, DnsWire *out)
{
    return dnsw_message(msg, len, timestamp_ns, 0, out);
}

/* dns.py parse_dns_tcp: the first message of a TCP segment behind its 2-byte length prefix; malformed
 * when the prefix declares more than the segment holds. Same results as dns_to_wire. */
static inline int dns_to_wire_tcp(const uint8_t *segment, size_t len, uint64_t timestamp_ns, DnsWire *out)
{
    if (len < 2 + DNSW_HEADER)
        return DNS_WIRE_NONE;
    return dnsw_message(segment + 2, len - 2, timestamp_ns, dnsw_u16(segment) > len - 2, out);
}

/* Makes the message appended since out->len was `start` a length-delimited field `field` of the
 * enclosing message (FlowRecord.dns is 20, AgentDns.message 2): its tag and length go in front of it.
 * 0, or -1 when memory runs out (out unchanged). */
static inline int dns_wire_frame(DnsWire *out, size_t start, uint32_t field)
{
    size_t size = out->len - start;
    uint64_t tag = (uint64_t)field << 3 | 2;
    size_t head = dnsw_varint_size(tag) + dnsw_varint_size(size);
    if (dnsw_reserve(out, head) < 0)
        return -1;
    uint8_t *at = out->data + start;
    memmove(at + head, at, size);
    dnsw_put_varint(dnsw_put_varint(at, tag), size);
    out->len += head;
    return 0;
}

#endif /* APPLIANCE_NATIVE_DNS_WIRE_H */
