/*
 * The headers a request carries to its workers, and the limits its head must keep (see fwdheaders.h).
 * pdr_fwd_build() runs once per request, from the h2o request's header list (HTTP/1 and HTTP/2 alike:
 * h2o gives both as name/value pairs, pseudo-headers apart); the block lives in the request's pool.
 * Loop thread only; the pure helpers are any thread.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include "defaults.h"
#include "err.h"
#include "fwdheaders.h"
#include "router.h"
#include "trace.h"
#include "util.h"

static int lc(int c)
{
    return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
}

#define ONES 0x0101010101010101ull
#define HIGH 0x8080808080808080ull

/* Eight bytes of name equal the eight of the lower-case literal lit, letters in any case: the case bit
 * is set in name's bytes where lit has a letter (lit's letter bytes found by the seven-bit range sums,
 * which cannot carry), and only there. */
static inline __attribute__((always_inline)) int eq8(const char *name, const char *lit)
{
    uint64_t w, l;
    memcpy(&w, name, 8);
    memcpy(&l, lit, 8);
    uint64_t letters = (((l + (0x80 - 'a') * ONES) & ~(l + (0x7f - 'z') * ONES)) & HIGH) >> 2;
    return (w | letters) == l;
}

/* name[0..len) equals the lower-case literal s, in any case; eight bytes at a time from eight on (the
 * last word overlaps the one before it). */
static inline __attribute__((always_inline)) int eq(const char *name, size_t len, const char *s, size_t slen)
{
    if (len != slen)
        return 0;
    if (len >= 8) {
        size_t i = 0;
        for (; i + 8 < len; i += 8)
            if (!eq8(name + i, s + i))
                return 0;
        return eq8(name + len - 8, s + len - 8);
    }
    for (size_t i = 0; i < len; i++)
        if (lc((unsigned char)name[i]) != s[i])
            return 0;
    return 1;
}

#define EQ(n, l, lit) eq(n, l, lit, sizeof(lit) - 1)

/* What the router does with a client field, by name (any case): one switch on the length, so each field
 * costs one comparison or two. */
enum kind {
    K_FORWARD = 0, /* end to end: forwarded as is */
    K_HOP,         /* hop-by-hop: dropped */
    K_CONNECTION,  /* hop-by-hop, and it names more */
    K_ROUTER,      /* the router writes its own: dropped */
    K_XFF,         /* X-Forwarded-For: joined, the client's address appended */
    K_XFH,         /* X-Forwarded-Host: forwarded, and the router adds none */
    K_COOKIE,      /* forwarded; HTTP/2 fields joined into one line */
    K_TRACEPARENT, /* read, never forwarded as is */
    K_TRACESTATE,  /* forwarded when the trace is continued */
};

static enum kind classify(const char *name, size_t len, int api_key)
{
    if (len >= 6 && EQ(name, 6, "proxy-")) /* Proxy-Authorization, Proxy-Connection, ... */
        return K_HOP;
    if (len > 0 && name[0] == ':')
        return K_ROUTER; /* a pseudo-header (h2o keeps them apart; never forwarded as a field) */
    switch (len) {
    case 2:
        return EQ(name, len, "te") ? K_HOP : K_FORWARD;
    case 4:
        return EQ(name, len, "host") ? K_ROUTER : K_FORWARD;
    case 6:
        return EQ(name, len, "cookie") ? K_COOKIE : EQ(name, len, "expect") ? K_ROUTER : K_FORWARD;
    case 7:
        return EQ(name, len, "trailer") || EQ(name, len, "upgrade") ? K_HOP : K_FORWARD;
    case 10:
        return EQ(name, len, "connection")   ? K_CONNECTION
               : EQ(name, len, "keep-alive") ? K_HOP
               : EQ(name, len, "tracestate") ? K_TRACESTATE
                                             : K_FORWARD;
    case 11:
        return EQ(name, len, "traceparent") ? K_TRACEPARENT : K_FORWARD;
    case 12:
        return EQ(name, len, "content-type") || EQ(name, len, "x-request-id") ? K_ROUTER : K_FORWARD;
    case 13:
        return api_key && EQ(name, len, "authorization") ? K_ROUTER : K_FORWARD;
    case 14:
        return EQ(name, len, "content-length")   ? K_ROUTER
               : EQ(name, len, "http2-settings") ? K_HOP
                                                 : K_FORWARD;
    case 15:
        return EQ(name, len, "x-forwarded-for")   ? K_XFF
               : EQ(name, len, "accept-encoding") ? K_ROUTER
                                                  : K_FORWARD;
    case 16:
        return EQ(name, len, "x-forwarded-host")   ? K_XFH
               : EQ(name, len, "content-encoding") ? K_ROUTER
                                                   : K_FORWARD;
    case 20: /* vLLM's rank header: with data-parallel workers the router names the rank of each leg */
        return EQ(name, len, "x-data-parallel-rank") ? K_ROUTER : K_FORWARD;
    case 17:
        return EQ(name, len, "transfer-encoding")   ? K_HOP
               : EQ(name, len, "x-forwarded-proto") ? K_ROUTER
                                                    : K_FORWARD;
    }
    return K_FORWARD;
}

int pdr_fwd_is_hop_by_hop(const char *name, size_t len)
{
    enum kind k = classify(name, len, 0);
    return k == K_HOP || k == K_CONNECTION;
}

int pdr_fwd_is_router_set(const char *name, size_t len, int api_key)
{
    enum kind k = classify(name, len, api_key);
    return k == K_ROUTER || k == K_TRACEPARENT;
}

static int is_ows(char c)
{
    return c == ' ' || c == '\t';
}

int pdr_fwd_connection_names(const char *conn, size_t clen, const char *name, size_t nlen)
{
    size_t i = 0;
    while (i < clen) {
        while (i < clen && (is_ows(conn[i]) || conn[i] == ','))
            i++;
        size_t s = i;
        while (i < clen && conn[i] != ',')
            i++;
        size_t e = i;
        while (e > s && is_ows(conn[e - 1]))
            e--;
        if (e - s == nlen && nlen > 0) {
            size_t k = 0;
            while (k < nlen && lc((unsigned char)conn[s + k]) == lc((unsigned char)name[k]))
                k++;
            if (k == nlen)
                return 1;
        }
    }
    return 0;
}

/* Lower-case hex digit values; -1 for anything else (upper case is invalid in traceparent). */
static int hexv(unsigned char c)
{
    static const signed char v[256] = {
        ['0'] = 0, ['1'] = 1, ['2'] = 2,  ['3'] = 3,  ['4'] = 4,  ['5'] = 5,  ['6'] = 6,  ['7'] = 7,
        ['8'] = 8, ['9'] = 9, ['a'] = 10, ['b'] = 11, ['c'] = 12, ['d'] = 13, ['e'] = 14, ['f'] = 15,
    };
    /* The table's zero means "not a digit" except for '0'. */
    return v[c] != 0 || c == '0' ? v[c] : -1;
}

static int unhex(const char *s, size_t n, uint8_t *out)
{
    int bad = 0;
    size_t i = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    /* Eight digits (four bytes) at a time: each byte must be '0'..'9' or 'a'..'f' (seven-bit range sums,
     * exact per byte); a digit's value is its low nibble, plus 9 for a letter. The nibbles are then paired
     * (high nibble first) and the pairs packed. */
    for (; i + 4 <= n; i += 4) {
        uint64_t w;
        memcpy(&w, s + 2 * i, 8);
        uint64_t x = w & ~HIGH;
        uint64_t digit = (x + (0x80 - '0') * ONES) & ~(x + (0x7f - '9') * ONES);
        uint64_t alpha = (x + (0x80 - 'a') * ONES) & ~(x + (0x7f - 'f') * ONES);
        if ((((digit | alpha) & ~w) & HIGH) != HIGH)
            return -1;
        uint64_t v = (w & (0x0f * ONES)) + ((alpha & HIGH) >> 7) * 9;
        v = ((v << 4) | (v >> 8)) & 0x00ff00ff00ff00ffull;
        v = (v | (v >> 8)) & 0x0000ffff0000ffffull;
        v = (v | (v >> 16)) & 0xffffffffull;
        uint32_t b = (uint32_t)v;
        memcpy(out + i, &b, 4);
    }
#endif
    for (; i < n; i++) {
        int h = hexv((unsigned char)s[2 * i]), l = hexv((unsigned char)s[2 * i + 1]);
        bad |= h | l;
        out[i] = (uint8_t)((h & 15) << 4 | (l & 15));
    }
    return bad < 0 ? -1 : 0;
}

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0)
            return 0;
    return 1;
}

int pdr_traceparent_parse(const char *v, size_t len, pdr_trace_t *out)
{
    /* Surrounding whitespace is not part of the value (h2o trims HTTP/1 values; HTTP/2 has none). */
    while (len > 0 && is_ows(v[0])) {
        v++;
        len--;
    }
    while (len > 0 && is_ows(v[len - 1]))
        len--;
    uint8_t version;
    if (len < PDR_TRACEPARENT_LEN || unhex(v, 1, &version) != 0 || version == 0xff)
        return -1;
    if (version == 0 ? len != PDR_TRACEPARENT_LEN
                     : len > PDR_TRACEPARENT_LEN && v[PDR_TRACEPARENT_LEN] != '-')
        return -1;
    if (v[2] != '-' || v[35] != '-' || v[52] != '-')
        return -1;
    pdr_trace_t t;
    if (unhex(v + 3, 16, t.trace_id) != 0 || unhex(v + 36, 8, t.parent_id) != 0 ||
        unhex(v + 53, 1, &t.flags) != 0)
        return -1;
    if (all_zero(t.trace_id, 16) || all_zero(t.parent_id, 8))
        return -1;
    *out = t;
    return 0;
}

void pdr_traceparent_format(const pdr_trace_t *t, const uint8_t span[8], char out[PDR_TRACEPARENT_LEN + 1])
{
    memcpy(out, "00-", 3);
    pdr_hex(t->trace_id, 16, out + 3);
    out[35] = '-';
    pdr_hex(span, 8, out + 36);
    out[52] = '-';
    pdr_hex(&t->flags, 1, out + 53);
}

int pdr_fwd_request_id_ok(const char *v, size_t len)
{
    /* Letters, digits, '-', '_' and '.'. */
    static const uint32_t map[8] = {0, 0x03ff6000, 0x87fffffe, 0x07fffffe, 0, 0, 0, 0};
    if (len == 0 || len >= 64)
        return 0;
    for (size_t k = 0; k < len; k++) {
        unsigned char ch = (unsigned char)v[k];
        if (!((map[ch >> 5] >> (ch & 31)) & 1))
            return 0;
    }
    return 1;
}

/* ---- request-head checks ---- */

/* RFC 9110 token characters. */
static int is_tchar(unsigned char c)
{
    static const uint32_t map[8] = {0, 0x03ff6cfa, 0xc7fffffe, 0x57ffffff, 0, 0, 0, 0};
    return (map[c >> 5] >> (c & 31)) & 1;
}

static int name_ok(const char *p, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!is_tchar((unsigned char)p[i]))
            return 0;
    return 1;
}

/* A field value may not hold CR, LF or NUL: HTTP/2 can carry them (h2o 2.2.5 does not refuse them), and
 * written into an HTTP/1 request to a worker they would split it. Other control characters but HTAB too. */
static int value_ok(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return 0;
    }
    return 1;
}

/* The first connection-specific field of an HTTP/2 request, which makes it malformed (RFC 9113 section
 * 8.2.2): Connection, Proxy-Connection, Keep-Alive, Transfer-Encoding, Upgrade, and TE with any value but
 * "trailers". Else NULL. h2o 2.2.5's HPACK decoder already ends the connection (GOAWAY PROTOCOL_ERROR) on
 * Connection, Transfer-Encoding, Upgrade, HTTP2-Settings and such a TE, but passes Keep-Alive and
 * Proxy-Connection on; the whole list is checked here so that none reaches a worker whatever h2o does. */
static const char *h2_connection_specific(h2o_req_t *req)
{
    static const char *const banned[] = {
        "connection",     "keep-alive", "proxy-connection", "transfer-encoding", "upgrade",
        "http2-settings", "te"};
    /* The request of an `Upgrade: h2c` is stream 1 of the new HTTP/2 connection but came as HTTP/1, with
     * its Connection, Upgrade and HTTP2-Settings fields (h2o's HPACK would have refused HTTP2-Settings
     * from a real HTTP/2 client): its hop-by-hop fields are dropped as for any HTTP/1 request. */
    for (size_t i = 0; i < req->headers.size; i++)
        if (EQ(req->headers.entries[i].name->base, req->headers.entries[i].name->len, "http2-settings"))
            return NULL;
    for (size_t i = 0; i < req->headers.size; i++) {
        const h2o_header_t *e = &req->headers.entries[i];
        for (size_t k = 0; k < sizeof(banned) / sizeof(banned[0]); k++) {
            if (!eq(e->name->base, e->name->len, banned[k], strlen(banned[k])))
                continue;
            if (strcmp(banned[k], "te") != 0 || !EQ(e->value.base, e->value.len, "trailers"))
                return banned[k];
        }
    }
    return NULL;
}

int pdr_fwd_check_request(h2o_req_t *req, const pdr_config_t *c, char *msg, size_t cap)
{
    size_t n = req->headers.size, bytes = 0;
    if (n > (size_t)c->limits.max_headers) {
        snprintf(msg, cap, "the request has %zu header fields, more than limits.max_headers (%d)", n,
                 c->limits.max_headers);
        return 431;
    }
    /* HTTP/1: h2o's parser (picohttpparser) has already refused names that are not tokens and values with
     * control characters; HTTP/2 fields come from HPACK unchecked. */
    int h2 = req->version >= 0x200;
    for (size_t i = 0; i < n; i++) {
        const h2o_header_t *e = &req->headers.entries[i];
        bytes += e->name->len + e->value.len + 4;
        if (h2 && (!name_ok(e->name->base, e->name->len) || !value_ok(e->value.base, e->value.len))) {
            snprintf(msg, cap, "a header field %s holds a character HTTP does not allow there",
                     name_ok(e->name->base, e->name->len) ? "value" : "name");
            return 400;
        }
    }
    if (bytes > (size_t)c->limits.max_header_bytes) {
        snprintf(msg, cap,
                 "the request's header fields take %zu bytes, more than limits.max_header_bytes (%d)", bytes,
                 c->limits.max_header_bytes);
        return 431;
    }
    if (req->input.path.len > (size_t)c->limits.max_header_bytes) {
        snprintf(msg, cap, "the request target is longer than limits.max_header_bytes (%d)",
                 c->limits.max_header_bytes);
        return 414;
    }
    if (h2 && !value_ok(req->input.authority.base, req->input.authority.len)) {
        snprintf(msg, cap, "the request's authority holds a character HTTP does not allow there");
        return 400;
    }
    if (h2) {
        const char *field = h2_connection_specific(req);
        if (field != NULL) {
            snprintf(msg, cap,
                     "HTTP/2 forbids the connection-specific header field %s (RFC 9113 section 8.2.2): the "
                     "request is malformed",
                     field);
            return 400;
        }
    }
    return 0;
}

/* ---- the forwarded block ---- */

typedef struct out {
    char *p;
    size_t len, cap;
} out_t;

/* The capacity is computed for the worst case first, so nothing here can overflow. */
static inline void put(out_t *o, const char *s, size_t n)
{
    memcpy(o->p + o->len, s, n);
    o->len += n;
}

static inline void put_line(out_t *o, const char *name, size_t nlen, const char *v, size_t vlen)
{
    char *p = o->p + o->len;
    if (o->len > 0) {
        p[0] = '\r';
        p[1] = '\n';
        p += 2;
    }
    memcpy(p, name, nlen);
    p += nlen;
    p[0] = ':';
    p[1] = ' ';
    memcpy(p + 2, v, vlen);
    o->len = (size_t)(p + 2 + vlen - o->p);
}

#define PUT_LIT(o, s) put(o, s, sizeof(s) - 1)

/* The client's address as X-Forwarded-For writes it (IPv6 without brackets, as nginx does). */
static size_t peer_addr(h2o_req_t *req, char *out, size_t cap)
{
    struct sockaddr_storage ss;
    socklen_t sl = req->conn->callbacks->get_peername != NULL
                       ? req->conn->callbacks->get_peername(req->conn, (struct sockaddr *)&ss)
                       : 0;
    const char *r = NULL;
    if (sl != 0 && ss.ss_family == AF_INET && cap >= 16) {
        /* By hand: inet_ntop formats IPv4 through printf-style formatting, a third of the cost of the whole
         * block. */
        const uint8_t *a = (const uint8_t *)&((struct sockaddr_in *)&ss)->sin_addr;
        size_t n = 0;
        for (int i = 0; i < 4; i++) {
            unsigned v = a[i];
            if (i > 0)
                out[n++] = '.';
            if (v >= 100)
                out[n++] = (char)('0' + v / 100);
            if (v >= 10)
                out[n++] = (char)('0' + v / 10 % 10);
            out[n++] = (char)('0' + v % 10);
        }
        out[n] = '\0';
        return n;
    } else if (sl != 0 && ss.ss_family == AF_INET6)
        r = inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, out, (socklen_t)cap);
    if (r == NULL) {
        snprintf(out, cap, "unknown"); /* RFC 7239's obfuscated "unknown" */
        return 7;
    }
    return strlen(out);
}

void pdr_fwd_new_request_id(char out[33])
{
    static __thread uint64_t prefix, counter;
    static __thread char prefix_hex[17]; /* the prefix's hex, made once per thread */
    if (prefix == 0) {
        pdr_random_bytes(&prefix, sizeof(prefix));
        uint8_t b[8];
        for (int i = 0; i < 8; i++)
            b[i] = (uint8_t)(prefix >> (56 - 8 * i));
        pdr_hex(b, 8, prefix_hex);
    }
    uint64_t be = htobe64(++counter); /* big-endian: the hex reads as the two numbers */
    memcpy(out, prefix_hex, 16);
    pdr_hex((const uint8_t *)&be, 8, out + 16);
}

static void random_nonzero(uint8_t *p, size_t n)
{
    do {
        for (size_t i = 0; i < n; i += 8) {
            uint64_t r = pdr_random_u64();
            memcpy(p + i, &r, n - i < 8 ? n - i : 8);
        }
    } while (all_zero(p, n));
}

/* The client's trace context: 1 with *t when it sent exactly one valid traceparent. */
static int client_trace(h2o_req_t *req, pdr_trace_t *t)
{
    ssize_t i = h2o_find_header_by_str(&req->headers, H2O_STRLIT("traceparent"), -1);
    if (i < 0 || h2o_find_header_by_str(&req->headers, H2O_STRLIT("traceparent"), i) >= 0)
        return 0; /* none, or several (which one would be the parent?) */
    h2o_iovec_t v = req->headers.entries[i].value;
    return pdr_traceparent_parse(v.base, v.len, t) == 0;
}

int pdr_fwd_trace_id(h2o_req_t *req, char out[33])
{
    pdr_trace_t t;
    if (!client_trace(req, &t))
        return 0;
    pdr_hex(t.trace_id, 16, out);
    return 1;
}

/* 1 when a Connection field of the request, the first at index first (-1: none), names the field name. Every
 * field Connection names is hop-by-hop (RFC 9110 section 7.6.1): it is not forwarded, and the router does
 * not fold it into the fields it writes itself (X-Forwarded-For, X-Forwarded-Host). */
static int named_by_connection(h2o_req_t *req, ssize_t first, const char *name, size_t nlen)
{
    for (ssize_t k = first; k >= 0; k = h2o_find_header(&req->headers, H2O_TOKEN_CONNECTION, k))
        if (pdr_fwd_connection_names(req->headers.entries[k].value.base, req->headers.entries[k].value.len,
                                     name, nlen))
            return 1;
    return 0;
}

int pdr_fwd_build(pdr_fwd_t *f, h2o_req_t *req, const pdr_config_t *c)
{
    memset(f, 0, sizeof(*f));
    const char *key = c->worker_api_key;
    size_t keylen = key != NULL ? strlen(key) : 0;
    int h2 = req->version >= 0x200;

    /* One pass over the client's fields finds what the router needs (an h2o_find_header per name would
     * walk them once each): the request id candidates, the traceparent, Connection, and the sizes. */
    size_t cap = 0, xff_len = 0, cookie_len = 0, n_xff = 0, n_cookie = 0, n_tp = 0;
    size_t rid_rank = SIZE_MAX; /* position in request_id_headers of the best usable id so far */
    const h2o_iovec_t *xfh = NULL, *tp = NULL, *rid = NULL;
    ssize_t conn_i = -1; /* the first Connection field: it names more hop-by-hop fields */
    size_t n_rid = c->n_request_id_headers < PDR_CONFIG_MAX_REQUEST_ID_HEADERS
                       ? c->n_request_id_headers
                       : PDR_CONFIG_MAX_REQUEST_ID_HEADERS;
    /* Each field's kind, kept for the second pass (a request has at most limits.max_headers <= 100). */
    uint8_t kinds[128];
    size_t rid_len[PDR_CONFIG_MAX_REQUEST_ID_HEADERS];
    uint64_t rid_lens = 0; /* bit L: a name of length L (< 64) is in the list; longer ones take bit 0 */
    for (size_t k = 0; k < n_rid; k++) {
        rid_len[k] = strlen(c->request_id_headers[k]);
        rid_lens |= 1ull << (rid_len[k] < 64 ? rid_len[k] : 0);
    }
    for (size_t i = 0; i < req->headers.size; i++) {
        const h2o_header_t *e = &req->headers.entries[i];
        const char *name = e->name->base;
        size_t nlen = e->name->len;
        cap += nlen + e->value.len + 4;
        enum kind kd = classify(name, nlen, key != NULL);
        if (kd == K_COOKIE && !h2)
            kd = K_FORWARD;
        if (i < sizeof(kinds))
            kinds[i] = (uint8_t)kd;
        switch (kd) {
        case K_XFF:
            xff_len += e->value.len + 2;
            n_xff++;
            break;
        case K_COOKIE:
            cookie_len += e->value.len + 2;
            n_cookie++;
            break;
        case K_XFH:
            if (xfh == NULL)
                xfh = &e->value;
            break;
        case K_TRACEPARENT:
            tp = &e->value;
            n_tp++;
            break;
        case K_CONNECTION:
            if (conn_i < 0)
                conn_i = (ssize_t)i;
            break;
        default:
            break;
        }
        if (!((rid_lens >> (nlen < 64 ? nlen : 0)) & 1))
            continue; /* no request-id name has this length */
        for (size_t k = 0; k < n_rid && k < rid_rank; k++) {
            /* request_id_headers are lower case */
            if (eq(name, nlen, c->request_id_headers[k], rid_len[k]) &&
                pdr_fwd_request_id_ok(e->value.base, e->value.len)) {
                rid_rank = k;
                rid = &e->value;
                break;
            }
        }
    }
    if (conn_i >= 0 && xfh != NULL) {
        /* The client's X-Forwarded-Host counts only when Connection does not name it (then it is for this
         * hop alone, and the router writes its own). */
        xfh = NULL;
        for (size_t i = 0; i < req->headers.size && xfh == NULL; i++) {
            const h2o_header_t *e = &req->headers.entries[i];
            if (classify(e->name->base, e->name->len, 0) == K_XFH &&
                !named_by_connection(req, conn_i, e->name->base, e->name->len))
                xfh = &e->value;
        }
    }
    if (rid != NULL) {
        memcpy(f->request_id, rid->base, rid->len); /* rid->len < 64 < sizeof(request_id) */
        f->request_id[rid->len] = '\0';
    } else {
        pdr_fwd_new_request_id(f->request_id);
    }
    size_t rid_n = rid != NULL ? rid->len : 32; /* strlen(f->request_id) */
    /* Several traceparent fields: which one would be the parent? None is trusted. */
    int traced = n_tp == 1 && pdr_traceparent_parse(tp->base, tp->len, &f->trace) == 0;
    if (!traced) {
        /* A new trace. Flags 01 (sampled) unless tracing.sample_ratio leaves it out: the router records its
         * part (the access log's trace_id, the exported spans), and workers that sample by their parent's
         * flag keep the trace. */
        random_nonzero(f->trace.trace_id, 16);
        memset(f->trace.parent_id, 0, 8);
        f->trace.flags = pdr_trace_sample_new() ? 0x01 : 0x00;
    }
    pdr_hex(f->trace.trace_id, 16, f->trace_id);
    /* The legs' traceparent line but its span id, which each leg writes (pdr_fwd_leg). */
    char *line = f->tp_line;
    memcpy(line, "traceparent: 00-", 16);
    memcpy(line + 16, f->trace_id, 32);
    line[48] = '-';
    memset(line + 49, '0', 16);
    line[65] = '-';
    pdr_hex(&f->trace.flags, 1, line + 66);

    char addr[INET6_ADDRSTRLEN + 8];
    size_t addr_len = peer_addr(req, addr, sizeof(addr));
    /* h2o takes Host (HTTP/1) and :authority (HTTP/2) out of the field list into input.authority; for an
     * HTTP/1.0 request without Host it makes one up, which is not the client's. */
    h2o_iovec_t authority = req->version != 0x100 ? req->input.authority : h2o_iovec_init(NULL, 0);
    cap += 18 + xff_len + addr_len + 2;                            /* X-Forwarded-For */
    cap += 21 + (req->scheme != NULL ? req->scheme->name.len : 5); /* X-Forwarded-Proto */
    cap += 20 + authority.len;                                     /* X-Forwarded-Host */
    cap += 16 + rid_n;                                             /* X-Request-Id */
    cap += 25 + keylen;                                            /* Authorization: Bearer */
    cap += 10 + cookie_len;                                        /* Cookie (HTTP/2: one line) */
    cap += 1;
    char *p = h2o_mem_alloc_pool(&req->pool, cap);
    out_t o = {p, 0, cap - 1};

    put_line(&o, H2O_STRLIT("X-Request-Id"), f->request_id, rid_n);
    const char *sc = c->sidecar.enabled ? c->sidecar.prefill_header : NULL;
    size_t sc_len = sc != NULL ? strlen(sc) : 0;
    if (key != NULL) {
        put_line(&o, H2O_STRLIT("Authorization"), H2O_STRLIT("Bearer "));
        put(&o, key, keylen);
    }
    for (size_t i = 0; i < req->headers.size; i++) {
        const h2o_header_t *e = &req->headers.entries[i];
        const char *name = e->name->base;
        size_t nlen = e->name->len;
        enum kind kd = i < sizeof(kinds) ? (enum kind)kinds[i] : classify(name, nlen, key != NULL);
        if (kd == K_COOKIE && !h2)
            kd = K_FORWARD;
        if (kd == K_HOP || kd == K_CONNECTION || kd == K_ROUTER || kd == K_TRACEPARENT || kd == K_XFF ||
            kd == K_COOKIE)
            continue; /* dropped, or (X-Forwarded-For, HTTP/2 cookies) written below as one line */
        if (kd == K_TRACESTATE && !traced)
            continue; /* belongs to a trace the router does not continue */
        if (named_by_connection(req, conn_i, name, nlen))
            continue;
        if (sc != NULL && eq(name, nlen, sc, sc_len))
            continue; /* sidecar mode's prefill header is the router's: never sent to the engines */
        put_line(&o, e->orig_name != NULL ? e->orig_name : name, nlen, e->value.base, e->value.len);
    }
    if (n_cookie > 0) {
        /* HTTP/2 may split Cookie into several fields; HTTP/1 carries one (RFC 9113 section 8.2.3). */
        put_line(&o, H2O_STRLIT("Cookie"), "", 0);
        size_t k = 0;
        for (size_t i = 0; i < req->headers.size; i++) {
            const h2o_header_t *e = &req->headers.entries[i];
            if (classify(e->name->base, e->name->len, 0) != K_COOKIE)
                continue;
            if (k++ > 0)
                PUT_LIT(&o, "; ");
            put(&o, e->value.base, e->value.len);
        }
    }
    put_line(&o, H2O_STRLIT("X-Forwarded-For"), "", 0);
    if (n_xff > 0) {
        size_t k = 0;
        for (size_t i = 0; i < req->headers.size; i++) {
            const h2o_header_t *e = &req->headers.entries[i];
            if (e->value.len == 0 || classify(e->name->base, e->name->len, 0) != K_XFF ||
                named_by_connection(req, conn_i, e->name->base, e->name->len))
                continue;
            if (k++ > 0)
                PUT_LIT(&o, ", ");
            put(&o, e->value.base, e->value.len);
        }
        if (k > 0)
            PUT_LIT(&o, ", ");
    }
    put(&o, addr, addr_len);
    if (req->scheme != NULL)
        put_line(&o, H2O_STRLIT("X-Forwarded-Proto"), req->scheme->name.base, req->scheme->name.len);
    else
        put_line(&o, H2O_STRLIT("X-Forwarded-Proto"), H2O_STRLIT("http"));
    if (xfh == NULL && authority.len > 0)
        put_line(&o, H2O_STRLIT("X-Forwarded-Host"), authority.base, authority.len);
    p[o.len] = '\0';
    f->block = p;
    return 0;
}

const char *const *pdr_fwd_leg(pdr_fwd_t *f)
{
    /* Each leg is a new span of the router's (as Envoy makes one per upstream call): the workers see the
     * router's span as their parent, and each leg's id is its own. */
    uint8_t *span = f->last_span;
    random_nonzero(span, 8);
    char *o = f->tp_line;     /* the rest of the line is pdr_fwd_build's */
    pdr_hex(span, 8, o + 49); /* its NUL lands on the '-' before the flags */
    o[65] = '-';
    f->leg[0] = f->block != NULL && f->block[0] != '\0' ? f->block : f->tp_line;
    f->leg[1] = f->leg[0] == f->tp_line ? NULL : f->tp_line;
    f->leg[2] = NULL;
    return f->leg;
}
