/*
 * tls_hello.h: the ClientHello and ServerHello at the start of a direction's TLS records, and the strings that
 * JA4, JA4S and JA3 hash, in C.
 *
 * The C twin of appliance/detection/dpi/tls_parse.py (parse_client_hello_reference,
 * parse_server_hello_reference, certificate_chain) and tls_fingerprint.py (ja4_reference, ja4s_reference,
 * ja3_string_reference):
 * the same records joined (handshake records, major version 3, at most TLSH_MAX_HANDSHAKE_BYTES of the
 * payload, a record longer than the bytes there is cut), the same bounded reads (a field announced past the
 * end stops the parse where Python's _Short does), the same quirks (a list of odd length reads its whole
 * values and skips the last byte; an extension body is bounded by the message, not by the extensions block;
 * a later duplicate extension replaces an earlier one where Python's does). tests/appliance/native/
 * test_tls_hello.py holds the two equal on every hello the tests build, every cut of real hellos, hostile
 * records and seeded random mutations; change both or neither.
 *
 * Work is linear in the at most 16 KB read (sorting aside: two lists, insertion sort when short, qsort
 * otherwise) and nothing is allocated here: the caller passes a tlsh_scratch (about 40 KB) that the parse
 * results point into, and text buffers of the size tlsh_*_text_bound() gives.
 *
 * Self-contained: no Python API, no global state; every helper is static and prefixed tlsh_.
 */
#ifndef APPLIANCE_NATIVE_TLS_HELLO_H
#define APPLIANCE_NATIVE_TLS_HELLO_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TLSH_MAX_HANDSHAKE_BYTES 16384 /* tls_parse.MAX_HANDSHAKE_BYTES */
#define TLSH_MAX_ALPN_NAMES 32
#define TLSH_HANDSHAKE 0x16
#define TLSH_CLIENT_HELLO 1
#define TLSH_SERVER_HELLO 2
#define TLSH_EXT_SNI 0
#define TLSH_EXT_GROUPS 10
#define TLSH_EXT_POINT_FORMATS 11
#define TLSH_EXT_SIG_ALGS 13
#define TLSH_EXT_ALPN 16
#define TLSH_EXT_VERSIONS 43
#define TLSH_CERTIFICATE 11
#define TLSH_MAX_CERTIFICATES 8 /* tls_parse.MAX_CERTIFICATES */
/* A JA4 head after the transport letter: version (2), d/i (1), two counts (2 + 2), ALPN (2). */
#define TLSH_JA4_HEAD 9
/* A JA4S head after the transport letter: version (2), count (2), ALPN (2), '_', cipher (4). */
#define TLSH_JA4S_HEAD 11

typedef struct {
    const uint16_t *v;
    size_t n;
} tlsh_u16s;

typedef struct {
    const unsigned char *p;
    size_t n;
} tlsh_bytes;

/* Where the parse results live. The joined records are at most 16 KB; every u16 list value a hello yields
 * comes from two bytes of its own (cipher list and extension bodies do not overlap), so 8 K values hold them
 * all; every extension takes at least 4 bytes (at most 4 K types); point formats are one byte each, so they
 * have their own array, which a later duplicate extension overwrites (only the last one counts). */
typedef struct {
    unsigned char stream[TLSH_MAX_HANDSHAKE_BYTES];
    uint16_t values[TLSH_MAX_HANDSHAKE_BYTES / 2];
    size_t used;
    uint16_t ext_types[TLSH_MAX_HANDSHAKE_BYTES / 4];
    uint16_t point_formats[255];
} tlsh_scratch;

/* What the fingerprints read of a ClientHello: filled by the parser or from a Python object. */
typedef struct {
    unsigned legacy_version;
    tlsh_u16s ciphers, extensions, versions, sig_algs, groups, point_formats;
    tlsh_bytes alpn_first; /* the first ALPN name; n == 0 when there is none or it is empty */
} tlsh_client_view;

typedef struct {
    tlsh_client_view view;
    tlsh_bytes sni;                            /* the raw name of the last SNI entry read */
    int has_sni_extension;
    tlsh_bytes alpn[TLSH_MAX_ALPN_NAMES];
    size_t alpn_n;
    int complete;
} tlsh_client_hello;

typedef struct {
    unsigned legacy_version, cipher, selected_version;
    tlsh_u16s extensions;
    tlsh_bytes alpn;
} tlsh_server_view;

typedef struct {
    tlsh_server_view view;
    int complete;
} tlsh_server_hello;

/* A cursor over one message, as tls_parse._Reader: `pos` may pass `end` (after an extension announced
 * longer than its block); reads that need bytes past `end` fail (-1). */
typedef struct {
    const unsigned char *data;
    ptrdiff_t len, pos, end;
} tlsh_reader;

static inline unsigned tlsh_be16(const unsigned char *p)
{
    return (unsigned)p[0] << 8 | p[1];
}

static inline int tlsh_is_grease(unsigned v)
{
    return (v & 0x0F0F) == 0x0A0A && (v >> 8) == (v & 0xFF);
}

static inline ptrdiff_t tlsh_min(ptrdiff_t a, ptrdiff_t b)
{
    return a < b ? a : b;
}

static int tlsh_u8(tlsh_reader *r, unsigned *out)
{
    if (r->pos >= r->end)
        return -1;
    *out = r->data[r->pos++];
    return 0;
}

static int tlsh_u16(tlsh_reader *r, unsigned *out)
{
    if (r->pos + 2 > r->end)
        return -1;
    *out = tlsh_be16(r->data + r->pos);
    r->pos += 2;
    return 0;
}

static int tlsh_skip(tlsh_reader *r, ptrdiff_t n)
{
    if (r->pos + n > r->end)
        return -1;
    r->pos += n;
    return 0;
}

/* `count` big-endian values at `p` into the scratch (room is there by construction: see tlsh_scratch). */
static tlsh_u16s tlsh_decode(tlsh_scratch *s, const unsigned char *p, size_t count)
{
    tlsh_u16s out = {s->values + s->used, count};
    for (size_t i = 0; i < count; i++)
        s->values[s->used + i] = (uint16_t)tlsh_be16(p + 2 * i);
    s->used += count;
    return out;
}

/* _Reader.u16_list: length // 2 values, the odd byte left unread. */
static int tlsh_u16_list(tlsh_reader *r, unsigned length, tlsh_scratch *s, tlsh_u16s *out)
{
    ptrdiff_t count = length / 2;
    if (r->pos + 2 * count > r->end)
        return -1;
    *out = tlsh_decode(s, r->data + r->pos, (size_t)count);
    r->pos += 2 * count;
    return 0;
}

/* handshake_stream: the bodies of the handshake records at the start of `p`, joined into s->stream. */
static size_t tlsh_handshake_stream(const unsigned char *p, size_t n, tlsh_scratch *s)
{
    size_t end = n < TLSH_MAX_HANDSHAKE_BYTES ? n : TLSH_MAX_HANDSHAKE_BYTES, pos = 0, len = 0;
    while (pos + 5 <= end && p[pos] == TLSH_HANDSHAKE && p[pos + 1] == 3) {
        size_t length = tlsh_be16(p + pos + 3);
        size_t stop = pos + 5 + length < end ? pos + 5 + length : end;
        memcpy(s->stream + len, p + pos + 5, stop - (pos + 5)); /* len + (stop - pos - 5) <= stop <= end */
        len += stop - (pos + 5);
        pos += 5 + length;
    }
    return len;
}

/* handshake_message: the body of the first message if it is of type `wanted`; 0 when it is not. */
static int tlsh_handshake_message(const unsigned char *p, size_t n, int wanted, tlsh_scratch *s, tlsh_reader *body,
                                  int *complete)
{
    size_t len = tlsh_handshake_stream(p, n, s);
    if (len < 4 || s->stream[0] != wanted)
        return 0;
    size_t length = (size_t)s->stream[1] << 16 | (size_t)s->stream[2] << 8 | s->stream[3];
    size_t have = length < len - 4 ? length : len - 4;
    body->data = s->stream + 4;
    body->len = body->end = (ptrdiff_t)have;
    body->pos = 0;
    *complete = have == length;
    return 1;
}

static size_t tlsh_be24(const unsigned char *p)
{
    return (size_t)p[0] << 16 | (size_t)p[1] << 8 | p[2];
}

/* certificate_chain on a handshake stream (tlsh_handshake_stream's output, at most 16 KB): the DER
 * certificates of the first Certificate message, leaf first, at most TLSH_MAX_CERTIFICATES, pointing into
 * `stream`. Returns their count and sets *complete (0 when the bytes end inside the message, as Python's
 * _Short), or -1 when the stream holds no Certificate message. */
static int tlsh_certificate_chain(const unsigned char *stream, size_t len, tlsh_bytes *certs, int *complete)
{
    size_t pos = 0;
    while (pos + 4 <= len) {
        size_t length = tlsh_be24(stream + pos + 1); /* < 16 M: pos + 4 + length cannot wrap */
        if (stream[pos] != TLSH_CERTIFICATE) {
            pos += 4 + length;
            continue;
        }
        size_t at = pos + 4, end = at + length < len ? at + length : len;
        int n = 0;
        *complete = 0;
        if (at + 3 > end)
            return 0;
        size_t total = tlsh_be24(stream + at);
        at += 3;
        end = at + total < end ? at + total : end;
        while (end > at && n < TLSH_MAX_CERTIFICATES) {
            if (at + 3 > end)
                return n;
            size_t der = tlsh_be24(stream + at);
            at += 3;
            if (at + der > end)
                return n;
            certs[n].p = stream + at;
            certs[n].n = der;
            n++;
            at += der;
        }
        *complete = pos + 4 + length <= len;
        return n;
    }
    return -1;
}

/* _alpn_names: at most TLSH_MAX_ALPN_NAMES names of an ALPN body, as far as they are whole. */
static size_t tlsh_alpn_names(const unsigned char *ext, size_t elen, tlsh_bytes *names, size_t max)
{
    tlsh_reader r = {ext, (ptrdiff_t)elen, 2, 0};
    if (elen >= 2)
        r.end = tlsh_min(2 + (ptrdiff_t)tlsh_be16(ext), (ptrdiff_t)elen);
    size_t n = 0;
    unsigned len;
    while (r.end - r.pos > 0 && n < max) {
        if (tlsh_u8(&r, &len) < 0 || r.pos + (ptrdiff_t)len > r.end)
            break;
        names[n].p = ext + r.pos;
        names[n].n = len;
        n++;
        r.pos += len;
    }
    return n;
}

/* A list prefixed by its length in `prefix` bytes, bounded by the body: min(declared, available) // 2 values. */
static tlsh_u16s tlsh_prefixed_list(const unsigned char *ext, size_t elen, size_t prefix, tlsh_scratch *s)
{
    size_t declared = prefix == 1 ? ext[0] : tlsh_be16(ext);
    size_t available = elen - prefix;
    return tlsh_decode(s, ext + prefix, (declared < available ? declared : available) / 2);
}

static void tlsh_on_client_extension(tlsh_client_hello *h, unsigned type, const unsigned char *ext, size_t elen,
                                     tlsh_scratch *s)
{
    switch (type) {
    case TLSH_EXT_SNI:
        h->has_sni_extension = 1;
        if (elen >= 5 && ext[2] == 0) {
            size_t name_len = tlsh_be16(ext + 3);
            h->sni.p = ext + 5;
            h->sni.n = name_len < elen - 5 ? name_len : elen - 5;
        }
        break;
    case TLSH_EXT_VERSIONS:
        if (elen >= 1)
            h->view.versions = tlsh_prefixed_list(ext, elen, 1, s);
        break;
    case TLSH_EXT_SIG_ALGS:
        if (elen >= 2)
            h->view.sig_algs = tlsh_prefixed_list(ext, elen, 2, s);
        break;
    case TLSH_EXT_GROUPS:
        if (elen >= 2)
            h->view.groups = tlsh_prefixed_list(ext, elen, 2, s);
        break;
    case TLSH_EXT_POINT_FORMATS:
        if (elen >= 1) {
            size_t n = ext[0] < elen - 1 ? ext[0] : elen - 1; /* <= 255 */
            for (size_t i = 0; i < n; i++)
                s->point_formats[i] = ext[1 + i];
            h->view.point_formats.v = s->point_formats;
            h->view.point_formats.n = n;
        }
        break;
    case TLSH_EXT_ALPN:
        h->alpn_n = tlsh_alpn_names(ext, elen, h->alpn, TLSH_MAX_ALPN_NAMES);
        break;
    default:
        break;
    }
}

static void tlsh_on_server_extension(tlsh_server_hello *h, unsigned type, const unsigned char *ext, size_t elen)
{
    if (type == TLSH_EXT_VERSIONS && elen >= 2) {
        h->view.selected_version = tlsh_be16(ext);
    } else if (type == TLSH_EXT_ALPN) {
        tlsh_bytes first = {NULL, 0};
        tlsh_alpn_names(ext, elen, &first, 1);
        h->view.alpn = first;
    }
}

/* _read_extensions: the types in wire order into s->ext_types, each body handed to the client or the server
 * handler. Returns whether the block was whole. */
static int tlsh_read_extensions(tlsh_reader *r, tlsh_scratch *s, tlsh_u16s *types, tlsh_client_hello *client,
                                tlsh_server_hello *server)
{
    unsigned total;
    types->v = s->ext_types;
    types->n = 0;
    if (tlsh_u16(r, &total) < 0)
        return 0;
    ptrdiff_t pos = r->pos, end = tlsh_min(r->pos + (ptrdiff_t)total, r->len);
    int complete = end - pos == (ptrdiff_t)total;
    while (end - pos >= 4) {
        unsigned type = tlsh_be16(r->data + pos), length = tlsh_be16(r->data + pos + 2);
        pos += 4;
        s->ext_types[types->n++] = (uint16_t)type; /* each took 4 bytes of at most 16 K */
        size_t elen = (size_t)tlsh_min((ptrdiff_t)length, r->len - pos); /* bounded by the message, as Python's slice */
        if (elen < length)
            complete = 0;
        const unsigned char *ext = r->data + pos;
        pos += length;
        if (client != NULL)
            tlsh_on_client_extension(client, type, ext, elen, s);
        else
            tlsh_on_server_extension(server, type, ext, elen);
    }
    return complete && pos == end;
}

/* parse_client_hello: 1 and `h` filled when `p` starts with a ClientHello, 0 when it does not. */
static int tlsh_parse_client_hello(const unsigned char *p, size_t n, tlsh_scratch *s, tlsh_client_hello *h)
{
    memset(h, 0, sizeof(*h));
    s->used = 0;
    tlsh_reader r;
    if (!tlsh_handshake_message(p, n, TLSH_CLIENT_HELLO, s, &r, &h->complete))
        return 0;
    unsigned legacy, len;
    if (tlsh_u16(&r, &legacy) < 0)
        return 0;
    h->view.legacy_version = legacy;
    if (tlsh_skip(&r, 32) < 0 || tlsh_u8(&r, &len) < 0 || tlsh_skip(&r, len) < 0 || tlsh_u16(&r, &len) < 0
        || tlsh_u16_list(&r, len, s, &h->view.ciphers) < 0 || tlsh_u8(&r, &len) < 0 || tlsh_skip(&r, len) < 0) {
        h->complete = 0;
        return legacy != 0;
    }
    if (r.end - r.pos > 0 && !tlsh_read_extensions(&r, s, &h->view.extensions, h, NULL))
        h->complete = 0;
    if (h->alpn_n > 0)
        h->view.alpn_first = h->alpn[0];
    return 1;
}

/* parse_server_hello: 1 and `h` filled when `p` starts with a ServerHello, 0 when it does not. */
static int tlsh_parse_server_hello(const unsigned char *p, size_t n, tlsh_scratch *s, tlsh_server_hello *h)
{
    memset(h, 0, sizeof(*h));
    s->used = 0;
    tlsh_reader r;
    if (!tlsh_handshake_message(p, n, TLSH_SERVER_HELLO, s, &r, &h->complete))
        return 0;
    unsigned len, compression;
    if (tlsh_u16(&r, &h->view.legacy_version) < 0 || tlsh_skip(&r, 32) < 0 || tlsh_u8(&r, &len) < 0
        || tlsh_skip(&r, len) < 0 || tlsh_u16(&r, &h->view.cipher) < 0 || tlsh_u8(&r, &compression) < 0)
        return 0;
    if (r.end - r.pos > 0 && !tlsh_read_extensions(&r, s, &h->view.extensions, NULL, h))
        h->complete = 0;
    return 1;
}

/* ClientHello.max_version: the highest supported_versions value that is not GREASE, else legacy_version. */
static unsigned tlsh_max_version(const tlsh_client_view *v)
{
    unsigned best = 0;
    int any = 0;
    for (size_t i = 0; i < v->versions.n; i++) {
        if (!tlsh_is_grease(v->versions.v[i]) && (!any || v->versions.v[i] > best)) {
            best = v->versions.v[i];
            any = 1;
        }
    }
    return any ? best : v->legacy_version;
}

/* tls_parse._VERSIONS; NULL for the others (version_name writes them 0x%04x). */
static const char *tlsh_version_name(unsigned version)
{
    switch (version) {
    case 0x0300: return "SSLv3";
    case 0x0301: return "TLSv1.0";
    case 0x0302: return "TLSv1.1";
    case 0x0303: return "TLSv1.2";
    case 0x0304: return "TLSv1.3";
    default: return NULL;
    }
}

/* tls_fingerprint._JA4_VERSIONS, "00" for the others. */
static const char *tlsh_ja4_version(unsigned version)
{
    switch (version) {
    case 0x0304: return "13";
    case 0x0303: return "12";
    case 0x0302: return "11";
    case 0x0301: return "10";
    case 0x0300: return "s3";
    case 0x0002: return "s2";
    case 0xFEFF: return "d1";
    case 0xFEFD: return "d2";
    case 0xFEFC: return "d3";
    default: return "00";
    }
}

static const char tlsh_hex[] = "0123456789abcdef";

static int tlsh_alnum(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

/* tls_fingerprint.alpn_code: first and last character, or the first and last hex digit when not alphanumeric. */
static char *tlsh_alpn_code(char *out, tlsh_bytes first)
{
    if (first.n == 0) {
        out[0] = out[1] = '0';
    } else if (tlsh_alnum(first.p[0]) && tlsh_alnum(first.p[first.n - 1])) {
        out[0] = (char)first.p[0];
        out[1] = (char)first.p[first.n - 1];
    } else {
        out[0] = tlsh_hex[first.p[0] >> 4];
        out[1] = tlsh_hex[first.p[first.n - 1] & 0xF];
    }
    return out + 2;
}

static char *tlsh_count(char *out, size_t n)
{
    n = n < 99 ? n : 99;
    out[0] = (char)('0' + n / 10);
    out[1] = (char)('0' + n % 10);
    return out + 2;
}

static char *tlsh_hex4(char *out, unsigned v)
{
    out[0] = tlsh_hex[v >> 12 & 0xF];
    out[1] = tlsh_hex[v >> 8 & 0xF];
    out[2] = tlsh_hex[v >> 4 & 0xF];
    out[3] = tlsh_hex[v & 0xF];
    return out + 4;
}

static char *tlsh_decimal(char *out, unsigned v)
{
    char digits[10];
    int n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *out++ = digits[--n];
    return out;
}

/* _hex_list: "002f,0035,1301". */
static char *tlsh_hex_list(char *out, const uint16_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (i)
            *out++ = ',';
        out = tlsh_hex4(out, v[i]);
    }
    return out;
}

/* ja3_string's join: decimal, dash-separated, GREASE dropped when `drop_grease`. */
static char *tlsh_dash_list(char *out, tlsh_u16s list, int drop_grease)
{
    int first = 1;
    for (size_t i = 0; i < list.n; i++) {
        if (drop_grease && tlsh_is_grease(list.v[i]))
            continue;
        if (!first)
            *out++ = '-';
        out = tlsh_decimal(out, list.v[i]);
        first = 0;
    }
    return out;
}

static int tlsh_cmp_u16(const void *a, const void *b)
{
    return (int)*(const uint16_t *)a - (int)*(const uint16_t *)b;
}

/* The values of `list` that are not GREASE (nor `skip_a`/`skip_b`, when >= 0) into `out`, ascending. */
static size_t tlsh_sorted_without_grease(tlsh_u16s list, long skip_a, long skip_b, uint16_t *out)
{
    size_t n = 0;
    for (size_t i = 0; i < list.n; i++) {
        uint16_t v = list.v[i];
        if (!tlsh_is_grease(v) && v != skip_a && v != skip_b)
            out[n++] = v;
    }
    if (n > 32) {
        qsort(out, n, sizeof(uint16_t), tlsh_cmp_u16);
    } else {
        for (size_t i = 1; i < n; i++) {
            uint16_t v = out[i];
            size_t j = i;
            for (; j > 0 && out[j - 1] > v; j--)
                out[j] = out[j - 1];
            out[j] = v;
        }
    }
    return n;
}

static size_t tlsh_count_without_grease(tlsh_u16s list)
{
    size_t n = 0;
    for (size_t i = 0; i < list.n; i++)
        n += !tlsh_is_grease(list.v[i]);
    return n;
}

/* Room for tlsh_client_texts' four strings (characters) and its sorting scratch (values). */
static size_t tlsh_client_text_bound(const tlsh_client_view *v)
{
    size_t ja4 = TLSH_JA4_HEAD + 5 * v->ciphers.n + 5 * (v->extensions.n + v->sig_algs.n) + 1;
    size_t ja3 = 6 + 6 * (v->ciphers.n + v->extensions.n + v->groups.n + v->point_formats.n) + 4;
    return ja4 + ja3;
}

static size_t tlsh_client_sort_bound(const tlsh_client_view *v)
{
    return v->ciphers.n + v->extensions.n + 1;
}

/* The strings JA4 and JA3 are made of, written one after the other into `text` (at least
 * tlsh_client_text_bound characters; `sort` at least tlsh_client_sort_bound values), their lengths in `lens`:
 *   [0] the JA4 head after the transport letter ("13d1516h2");
 *   [1] the sorted cipher list JA4 hashes, empty when there is no cipher (JA4 then writes 000000000000);
 *   [2] the sorted extensions (without SNI and ALPN), then "_" and the signature algorithms when there are
 *       any, empty when there is no such extension;
 *   [3] the JA3 string. */
static void tlsh_client_texts(const tlsh_client_view *v, char *text, uint16_t *sort, size_t lens[4])
{
    char *out = text, *start = text;
    size_t ciphers = tlsh_count_without_grease(v->ciphers), extensions = 0;
    int has_sni = 0;
    for (size_t i = 0; i < v->extensions.n; i++) {
        if (!tlsh_is_grease(v->extensions.v[i])) {
            extensions++;
            has_sni |= v->extensions.v[i] == TLSH_EXT_SNI;
        }
    }
    memcpy(out, tlsh_ja4_version(tlsh_max_version(v)), 2);
    out += 2;
    *out++ = has_sni ? 'd' : 'i';
    out = tlsh_count(out, ciphers);
    out = tlsh_count(out, extensions);
    out = tlsh_alpn_code(out, v->alpn_first);
    lens[0] = (size_t)(out - start);

    start = out;
    size_t n = tlsh_sorted_without_grease(v->ciphers, -1, -1, sort);
    out = tlsh_hex_list(out, sort, n);
    lens[1] = (size_t)(out - start);

    start = out;
    n = tlsh_sorted_without_grease(v->extensions, TLSH_EXT_SNI, TLSH_EXT_ALPN, sort);
    if (n > 0) {
        out = tlsh_hex_list(out, sort, n);
        int first = 1;
        for (size_t i = 0; i < v->sig_algs.n; i++) {
            if (tlsh_is_grease(v->sig_algs.v[i]))
                continue;
            *out++ = first ? '_' : ',';
            out = tlsh_hex4(out, v->sig_algs.v[i]);
            first = 0;
        }
    }
    lens[2] = (size_t)(out - start);

    start = out;
    out = tlsh_decimal(out, v->legacy_version);
    *out++ = ',';
    out = tlsh_dash_list(out, v->ciphers, 1);
    *out++ = ',';
    out = tlsh_dash_list(out, v->extensions, 1);
    *out++ = ',';
    out = tlsh_dash_list(out, v->groups, 1);
    *out++ = ',';
    out = tlsh_dash_list(out, v->point_formats, 0);
    lens[3] = (size_t)(out - start);
}

static size_t tlsh_server_text_bound(const tlsh_server_view *v)
{
    return TLSH_JA4S_HEAD + 5 * v->extensions.n + 1;
}

/* The strings of JA4S, written one after the other into `text` (at least tlsh_server_text_bound characters):
 *   [0] the head after the transport letter and the cipher ("120400_c030");
 *   [1] the extensions in wire order, GREASE dropped, empty when there are none. */
static void tlsh_server_texts(const tlsh_server_view *v, char *text, size_t lens[2])
{
    char *out = text;
    memcpy(out, tlsh_ja4_version(v->selected_version ? v->selected_version : v->legacy_version), 2);
    out += 2;
    out = tlsh_count(out, tlsh_count_without_grease(v->extensions));
    out = tlsh_alpn_code(out, v->alpn);
    *out++ = '_';
    out = tlsh_hex4(out, v->cipher);
    lens[0] = (size_t)(out - text);

    char *start = out;
    int first = 1;
    for (size_t i = 0; i < v->extensions.n; i++) {
        if (tlsh_is_grease(v->extensions.v[i]))
            continue;
        if (!first)
            *out++ = ',';
        out = tlsh_hex4(out, v->extensions.v[i]);
        first = 0;
    }
    lens[1] = (size_t)(out - start);
}

#endif /* APPLIANCE_NATIVE_TLS_HELLO_H */
