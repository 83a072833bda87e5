/*
 * Request-head checks for HTTP/1 clients (see reqguard.h). One pass over the head, line by line; the
 * head ends at the first empty line.
 */
#include "reqguard.h"
#include <string.h>
#include "util.h"

static int name_is(const char *p, size_t len, const char *name)
{
    size_t n = strlen(name);
    if (len != n)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        if (c != name[i])
            return 0;
    }
    return 1;
}

int pdr_reqguard_check_head(const char *p, size_t n, const char **why)
{
    size_t i = 0;
    while (i < n && (p[i] == '\r' || p[i] == '\n'))
        i++;
    int line_no = 0, http10 = 0, n_cl = 0, n_te = 0, n_host = 0;
    for (;;) {
        const char *nl = memchr(p + i, '\n', n - i);
        if (nl == NULL) {
            *why = "incomplete request head";
            return -1;
        }
        size_t end = (size_t)(nl - p);
        if (end == i || p[end - 1] != '\r') {
            *why = "a bare LF ends a line of the request head (lines end with CRLF)";
            return -1;
        }
        const char *line = p + i;
        size_t len = end - 1 - i; /* without the CRLF */
        i = end + 1;
        if (line_no++ == 0) {
            /* The request line: only its version matters here. */
            http10 = len >= 8 && memcmp(line + len - 8, "HTTP/1.0", 8) == 0;
            continue;
        }
        if (len == 0)
            break; /* the end of the head */
        if (line[0] == ' ' || line[0] == '\t') {
            *why = "obs-fold: a header line begins with whitespace";
            return -1;
        }
        const char *colon = memchr(line, ':', len);
        if (colon == NULL) {
            *why = "a header line without a colon";
            return -1;
        }
        size_t nlen = (size_t)(colon - line);
        if (nlen == 0 || line[nlen - 1] == ' ' || line[nlen - 1] == '\t') {
            *why = "whitespace between a header name and its colon";
            return -1;
        }
        if (name_is(line, nlen, "content-length"))
            n_cl++;
        else if (name_is(line, nlen, "transfer-encoding"))
            n_te++;
        else if (name_is(line, nlen, "host"))
            n_host++;
    }
    if (n_cl > 0 && n_te > 0)
        *why = "both Content-Length and Transfer-Encoding";
    else if (n_cl > 1)
        *why = "more than one Content-Length";
    else if (n_te > 1)
        *why = "more than one Transfer-Encoding";
    else if (n_te > 0 && http10)
        *why = "Transfer-Encoding in an HTTP/1.0 request";
    else if (n_host > 1)
        *why = "more than one Host";
    else if (n_host == 0 && !http10)
        *why = "an HTTP/1.1 request without Host";
    else
        return 0;
    return -1;
}

size_t pdr_reqguard_head_len(const char *p, size_t n, int *chunked)
{
    size_t i = 0;
    while (i < n && (p[i] == '\r' || p[i] == '\n'))
        i++;
    *chunked = 0;
    int first = 1;
    for (;;) {
        const char *nl = memchr(p + i, '\n', n - i);
        if (nl == NULL)
            return 0;
        size_t end = (size_t)(nl - p);
        size_t len = end - i;
        if (len > 0 && p[end - 1] == '\r')
            len--;
        const char *line = p + i;
        i = end + 1;
        if (len == 0 && !first)
            return i;
        first = 0;
        const char *colon = memchr(line, ':', len);
        if (colon != NULL && name_is(line, (size_t)(colon - line), "transfer-encoding"))
            *chunked = 1;
    }
}

int pdr_reqguard_head_limits(const char *p, size_t n, size_t max_fields, size_t max_bytes)
{
    size_t i = 0, fields = 0, bytes = 0;
    while (i < n && (p[i] == '\r' || p[i] == '\n'))
        i++;
    /* A line that has not ended yet counts without a CR it may end with, so that the verdict on a head
     * can only go from accepted to refused as more of it arrives. */
    const char *nl = memchr(p + i, '\n', n - i);
    size_t len = nl != NULL ? (size_t)(nl - (p + i)) : n - i;
    if (len > 0 && p[i + len - 1] == '\r')
        len--;
    if (len > max_bytes)
        return 414; /* the request line, without its line end */
    if (nl == NULL)
        return 0;
    i = (size_t)(nl - p) + 1;
    while (i < n) {
        nl = memchr(p + i, '\n', n - i);
        len = nl != NULL ? (size_t)(nl - (p + i)) : n - i;
        if (len > 0 && p[i + len - 1] == '\r')
            len--;
        if (nl != NULL && len == 0)
            return 0; /* the end of the head */
        if (nl != NULL)
            fields++;
        bytes += nl != NULL ? len + 2 : len; /* a complete line counts with a CRLF, bare LF or not */
        if (fields > max_fields || bytes > max_bytes)
            return 431;
        if (nl == NULL)
            break;
        i = (size_t)(nl - p) + 1;
    }
    return 0;
}

enum { CG_SIZE = 0, CG_EXT, CG_LF, CG_DATA, CG_DATA_CR, CG_DATA_LF };

void pdr_chunkguard_init(pdr_chunkguard_t *g, uint64_t limit)
{
    memset(g, 0, sizeof(*g));
    g->limit = limit;
}

int pdr_chunkguard_feed(pdr_chunkguard_t *g, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        switch (g->state) {
        case CG_SIZE: {
            int v = pdr_hex_digit(c);
            if (v >= 0) {
                if (++g->digits > 16)
                    return PDR_CHUNK_LOST; /* h2o refuses it itself */
                g->size = g->size * 16 + (uint64_t)v;
                continue;
            }
            if (g->digits == 0)
                return PDR_CHUNK_LOST;
            if (c == ';' || c == ' ' || c == '\t')
                g->state = CG_EXT;
            else if (c == '\r')
                g->state = CG_LF;
            else if (c == '\n')
                goto size_line_done;
            else
                return PDR_CHUNK_LOST;
            continue;
        }
        case CG_EXT:
            if (c == '\r')
                g->state = CG_LF;
            else if (c == '\n')
                goto size_line_done;
            continue;
        case CG_LF:
            if (c != '\n')
                return PDR_CHUNK_LOST;
        size_line_done:
            if (g->size > g->limit || g->size > g->limit - g->data)
                return PDR_CHUNK_TOO_BIG;
            if (g->size == 0)
                return PDR_CHUNK_DONE;
            g->left = g->size;
            g->state = CG_DATA;
            continue;
        case CG_DATA: {
            uint64_t take = n - i < g->left ? n - i : g->left;
            g->left -= take;
            g->data += take;
            i += (size_t)take - 1;
            if (g->left == 0)
                g->state = CG_DATA_CR;
            continue;
        }
        case CG_DATA_CR:
        case CG_DATA_LF:
            if (c == '\r' && g->state == CG_DATA_CR) {
                g->state = CG_DATA_LF;
                continue;
            }
            if (c != '\n') /* CRLF or a bare LF after the data */
                return PDR_CHUNK_LOST;
            g->state = CG_SIZE;
            g->size = 0;
            g->digits = 0;
            continue;
        }
    }
    return PDR_CHUNK_MORE;
}

/* ---- HTTP/2 header blocks ---- */

static const char H2_PREFACE[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

#define H2_HEADERS 0x1
#define H2_CONTINUATION 0x9
#define H2_END_HEADERS 0x4

void pdr_h2guard_init(pdr_h2guard_t *g, uint64_t limit)
{
    memset(g, 0, sizeof(*g));
    g->preface_left = sizeof(H2_PREFACE) - 1;
    g->limit = limit;
}

void pdr_h2guard_set_body_limit(pdr_h2guard_t *g, uint64_t body_limit, pdr_h2g_bodies_t *bodies)
{
    g->body_limit = bodies != NULL ? body_limit : 0;
    g->bodies = bodies;
}

#define H2_DATA 0x0
#define H2_PRIORITY 0x2
#define H2_RST_STREAM 0x3
#define H2_SETTINGS 0x4
#define H2_PING 0x6
#define H2_END_STREAM 0x1
#define H2_ACK 0x1
#define H2_PADDED 0x8
#define H2_MAX_FRAME 16384 /* SETTINGS_MAX_FRAME_SIZE's default, which h2o 2.2.5 keeps */
#define H2G_DROP (-1)      /* h2guard_frame: the frame leaves the buffer */

static pdr_h2g_body_t *body_of(pdr_h2guard_t *g, uint32_t stream)
{
    for (size_t i = 0; i < PDR_H2G_BODIES; i++)
        if (g->bodies->body[i].stream == stream)
            return &g->bodies->body[i];
    return NULL;
}

/* A stream whose HEADERS did not end it: its body is followed in a free slot, else in the slot of a
 * stream already refused (the oldest first), else not at all (h2o's own limit stands). */
static void body_open(pdr_h2guard_t *g, uint32_t stream)
{
    pdr_h2g_body_t *b = body_of(g, 0);
    for (size_t i = 0; b == NULL && i < PDR_H2G_BODIES; i++)
        if (g->bodies->body[i].refused)
            b = &g->bodies->body[i];
    if (b != NULL)
        *b = (pdr_h2g_body_t){stream, PDR_H2G_OPEN, 0, g->now_ms};
}

/* DATA bytes of body b (padding excluded) arrived in the frame whose header starts at h. */
static void body_data(pdr_h2guard_t *g, pdr_h2g_body_t *b, char *h, uint64_t data)
{
    int over = g->budget_on && g->held + data > g->budget;
    if (over && g->budget_closes) {
        g->budget_hit = 1; /* the caller closes the connection */
        g->bodies_over_budget++;
        return;
    }
    b->bytes += data;
    b->last_ms = g->now_ms;
    g->held += data;
    if (h[4] & H2_END_STREAM) {
        b->stream = 0;
    } else if (b->bytes > g->body_limit || over) {
        h[4] |= H2_END_STREAM; /* h2o takes this frame as the body's last and hands the request on */
        if (b->bytes > g->body_limit) {
            b->refused = PDR_H2G_REFUSED_SIZE;
            g->bodies_refused++;
        } else {
            b->refused = PDR_H2G_REFUSED_BUDGET;
            g->bodies_over_budget++;
            g->bodies->over_budget[g->over_budget_next++ % PDR_H2G_BODIES] = b->stream;
        }
    }
}

int pdr_h2guard_over_budget(const pdr_h2guard_t *g, uint32_t stream)
{
    for (size_t i = 0; g->bodies != NULL && i < PDR_H2G_BODIES && stream != 0; i++)
        if (g->bodies->over_budget[i] == stream)
            return 1;
    return 0;
}

void pdr_h2guard_release(pdr_h2guard_t *g, uint64_t bytes)
{
    g->held = g->held > bytes ? g->held - bytes : 0;
}

uint32_t pdr_h2guard_take_stalled(pdr_h2guard_t *g, uint64_t before_ms)
{
    pdr_h2g_body_t *oldest = NULL;
    for (size_t i = 0; g->bodies != NULL && i < PDR_H2G_BODIES; i++) {
        pdr_h2g_body_t *b = &g->bodies->body[i];
        if (b->stream != 0 && b->refused == PDR_H2G_OPEN && b->last_ms < before_ms &&
            (oldest == NULL || b->last_ms < oldest->last_ms))
            oldest = b;
    }
    if (oldest == NULL)
        return 0;
    uint32_t s = oldest->stream;
    pdr_h2guard_release(g, oldest->bytes);
    oldest->stream = 0;
    return s;
}

uint32_t pdr_h2guard_biggest(const pdr_h2guard_t *g, uint64_t *bytes, uint64_t *last_ms)
{
    const pdr_h2g_body_t *big = NULL;
    for (size_t i = 0; g->bodies != NULL && i < PDR_H2G_BODIES; i++) {
        const pdr_h2g_body_t *b = &g->bodies->body[i];
        if (b->stream != 0 && b->refused == PDR_H2G_OPEN &&
            (big == NULL || b->bytes > big->bytes || (b->bytes == big->bytes && b->last_ms < big->last_ms)))
            big = b;
    }
    if (big == NULL)
        return 0;
    *bytes = big->bytes;
    *last_ms = big->last_ms;
    return big->stream;
}

void pdr_h2guard_take(pdr_h2guard_t *g, uint32_t stream)
{
    pdr_h2g_body_t *b = stream != 0 && g->bodies != NULL ? body_of(g, stream) : NULL;
    if (b == NULL)
        return;
    pdr_h2guard_release(g, b->bytes);
    b->stream = 0;
}

/* ---- the content-length of an HTTP/2 request, in its HEADERS frame ----
 *
 * h2o 2.2.5 checks a stream's body against its content-length at END_STREAM and resets the stream
 * (PROTOCOL_ERROR) when they differ, so the guard cannot end such a body early. A content-length above the
 * body limit is made harmless instead: its field (as every encoder writes it, a literal whose name is the
 * static table's entry 28, the value plain or Huffman-coded digits) is given entry 29's name
 * (content-location) in place, the same length; h2o then sees no length, and the body is ended at the
 * limit as any other. HPACK: RFC 7541 (integers 5.1, strings 5.2, representations 6, the Huffman codes
 * of the digits in appendix B). */

/* An HPACK integer with an n-bit prefix at *p (below end): its value, or -1 when malformed. */
static int64_t hpack_int(const uint8_t **p, const uint8_t *end, int n)
{
    if (*p >= end)
        return -1;
    uint64_t max = (1u << n) - 1, v = **p & max;
    (*p)++;
    if (v < max)
        return (int64_t)v;
    for (int shift = 0; *p < end && shift <= 28; shift += 7) {
        uint8_t b = *(*p)++;
        v += (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return (int64_t)v;
    }
    return -1;
}

/* The decimal value of a string of digits, plain or Huffman-coded; -1 when it is not one. */
static int64_t hpack_digits(const uint8_t *s, size_t len, int huffman)
{
    int64_t v = 0;
    size_t digits = 0;
    if (!huffman) {
        for (size_t i = 0; i < len; i++) {
            if (s[i] < '0' || s[i] > '9' || ++digits > 18)
                return -1;
            v = v * 10 + (s[i] - '0');
        }
        return digits > 0 ? v : -1;
    }
    /* '0' '1' '2' are the 5-bit codes 0..2, '3'..'9' the 6-bit codes 0x19..0x1f; padding is 1 bits */
    uint64_t bits = 0;
    int have = 0;
    size_t i = 0;
    for (;;) {
        while (have < 6 && i < len) {
            bits = bits << 8 | s[i++];
            have += 8;
        }
        if (have < 5)
            break;
        unsigned c5 = (unsigned)(bits >> (have - 5)) & 0x1f;
        int d = -1;
        if (c5 <= 2) {
            d = (int)c5;
            have -= 5;
        } else if (have >= 6) {
            unsigned c6 = (unsigned)(bits >> (have - 6)) & 0x3f;
            if (c6 >= 0x19 && c6 <= 0x1f) {
                d = (int)(c6 - 0x19) + 3;
                have -= 6;
            }
        }
        if (d < 0)
            break;
        if (++digits > 18)
            return -1;
        v = v * 10 + d;
    }
    /* what is left must be padding: fewer than 8 bits, all ones */
    if (have >= 8 || i < len || (bits & ((1u << have) - 1)) != (1u << have) - 1u)
        return -1;
    return digits > 0 ? v : -1;
}

/* Looks through a whole HEADERS frame payload (b, len, with its flags) for a content-length above limit
 * and renames it in place (see above). */
static void h2_rename_big_length(uint8_t *b, size_t len, uint8_t flags, uint64_t limit)
{
    const uint8_t *p = b, *end = b + len;
    if (flags & H2_PADDED) {
        if (len < 1 || (size_t)b[0] + 1 > len)
            return;
        end -= b[0];
        p++;
    }
    if (flags & 0x20) /* PRIORITY: stream dependency and weight */
        p += 5;
    while (p < end) {
        uint8_t first = *p;
        uint8_t *name_at = (uint8_t *)p;
        int64_t idx;
        int prefix;
        if (first & 0x80) { /* indexed field */
            if (hpack_int(&p, end, 7) < 0)
                return;
            continue;
        }
        if ((first & 0xe0) == 0x20) { /* dynamic table size update */
            if (hpack_int(&p, end, 5) < 0)
                return;
            continue;
        }
        prefix = (first & 0xc0) == 0x40 ? 6 : 4;
        if ((idx = hpack_int(&p, end, prefix)) < 0)
            return;
        if (idx == 0) { /* a literal name: skip it */
            int64_t nl = p < end ? hpack_int(&p, end, 7) : -1;
            if (nl < 0 || nl > end - p)
                return;
            p += nl;
        }
        if (p >= end)
            return;
        int huffman = *p & 0x80;
        int64_t vl = hpack_int(&p, end, 7);
        if (vl < 0 || vl > end - p)
            return;
        if (idx == 28) {
            int64_t cl = hpack_digits(p, (size_t)vl, huffman);
            if (cl > (int64_t)limit) {
                /* entry 28 -> 29: with a 6-bit prefix one byte; with a 4-bit one 0x?f then 13 -> 14 */
                if (prefix == 6)
                    name_at[0] = (uint8_t)((name_at[0] & 0xc0) | 29);
                else
                    name_at[1] = 14;
            }
        }
        p += vl;
    }
}

/* A frame's header is complete (at h, in the caller's buffer): 0 to go on, or a PDR_H2G_* verdict. */
static int h2guard_frame(pdr_h2guard_t *g, char *h, char *pl, const char *end)
{
    const uint8_t *u = g->hdr;
    uint32_t len = (uint32_t)u[0] << 16 | (uint32_t)u[1] << 8 | u[2];
    uint8_t type = u[3], flags = u[4];
    uint32_t stream =
        ((uint32_t)u[5] << 24 | (uint32_t)u[6] << 16 | (uint32_t)u[7] << 8 | u[8]) & 0x7fffffffu;
    g->payload_left = len;
    if (type == H2_CONTINUATION || type == H2_PRIORITY || (type == H2_SETTINGS && !(flags & H2_ACK)) ||
        (type == H2_PING && !(flags & H2_ACK)) || (type == H2_DATA && len == 0 && !(flags & H2_END_STREAM)) ||
        type > H2_CONTINUATION)
        g->control++;
    if (g->in_block) {
        if (type != H2_CONTINUATION || stream != g->block_stream)
            return PDR_H2G_LOST; /* a protocol error h2o answers itself */
    } else if (type == H2_CONTINUATION) {
        return PDR_H2G_LOST;
    } else if (type != H2_HEADERS) {
        pdr_h2g_body_t *b = g->body_limit > 0 && stream != 0 ? body_of(g, stream) : NULL;
        if (type > H2_CONTINUATION && len <= H2_MAX_FRAME) {
            return H2G_DROP; /* h2o 2.2.5 would write a line to stderr for each one */
        } else if (b != NULL && type == H2_RST_STREAM) {
            if (b->refused == PDR_H2G_OPEN)
                pdr_h2guard_release(g, b->bytes); /* never handed on: h2o frees it now */
            b->stream = 0;
        } else if (b != NULL && type == H2_DATA && b->refused && len <= H2_MAX_FRAME) {
            g->window_debt += len;
            return H2G_DROP;
        } else if (b != NULL && type == H2_DATA && (flags & H2_PADDED) && len > 0) {
            g->pad_wait = b; /* the pad length is the payload's first byte */
            g->pad_frame_len = len;
        } else if (b != NULL && type == H2_DATA) {
            body_data(g, b, h, len);
        }
        return 0;
    } else {
        g->in_block = 1;
        g->block_stream = stream;
        g->block = 0;
        if (g->body_limit > 0 && !(flags & H2_END_STREAM) && body_of(g, stream) == NULL) {
            body_open(g, stream);
            /* the whole frame must be in the buffer (else the length, if any, stands: h2o's limit) */
            if ((size_t)(end - pl) >= len)
                h2_rename_big_length((uint8_t *)pl, len, flags, g->body_limit);
        }
    }
    g->block += len;
    if (g->block > g->limit)
        return PDR_H2G_TOO_BIG;
    if (flags & H2_END_HEADERS) {
        g->in_block = 0;
        if (stream > g->last_stream)
            g->last_stream = stream;
    }
    return 0;
}

int pdr_h2guard_feed(pdr_h2guard_t *g, char *buf, size_t from, size_t *len)
{
    /* The bytes kept are moved down to w as they are read at p (w <= p): a dropped frame's header is
     * taken back from the output, and its payload is skipped as it comes. */
    char *p = buf + from, *w = p, *end = buf + *len;
    int v = PDR_H2G_MORE;
    while (p < end && v == PDR_H2G_MORE) {
        if (g->preface_left > 0) {
            size_t at = sizeof(H2_PREFACE) - 1 - g->preface_left;
            if (*p != H2_PREFACE[at]) {
                v = PDR_H2G_LOST;
                break;
            }
            g->preface_left--;
            if (w != p)
                *w = *p;
            w++, p++;
        } else if (g->payload_left > 0) {
            if (g->pad_wait != NULL) {
                /* the first payload byte of a PADDED DATA frame: its header is the 9 bytes before it */
                uint8_t pad = (uint8_t)*p;
                uint64_t data = g->pad_frame_len > 1u + pad ? g->pad_frame_len - 1u - pad : 0;
                body_data(g, g->pad_wait, w - 9, data);
                g->pad_wait = NULL;
                if (g->budget_hit) {
                    v = PDR_H2G_OVER_BUDGET;
                    break;
                }
            }
            size_t take = (size_t)(end - p) < g->payload_left ? (size_t)(end - p) : g->payload_left;
            g->payload_left -= (uint32_t)take;
            if (!g->dropping) {
                if (w != p)
                    memmove(w, p, take);
                w += take;
            }
            p += take;
        } else {
            g->hdr[g->hdr_have++] = (uint8_t)*p;
            if (w != p)
                *w = *p;
            w++, p++;
            if (g->hdr_have == sizeof(g->hdr)) {
                g->hdr_have = 0;
                g->dropping = 0;
                int f = h2guard_frame(g, w - 9, p, end);
                if (f == H2G_DROP) {
                    w -= 9; /* the header's first bytes may have come in an earlier feed: still here */
                    g->dropping = 1;
                    g->dropped++;
                } else if (f != 0) {
                    v = f;
                } else if (g->budget_hit) {
                    v = PDR_H2G_OVER_BUDGET;
                }
            }
        }
    }
    if (p < end && w != p)
        memmove(w, p, (size_t)(end - p)); /* what a verdict left unread stays, for h2o */
    *len = (size_t)(w - buf) + (size_t)(end - p);
    return v;
}

size_t pdr_h2_goaway_frame(char *out, size_t cap, uint32_t last_stream, uint32_t error_code,
                           const char *debug)
{
    size_t dl = strlen(debug), len = 8 + dl;
    if (cap < 9 + len)
        return 0;
    uint8_t *o = (uint8_t *)out;
    o[0] = (uint8_t)(len >> 16), o[1] = (uint8_t)(len >> 8), o[2] = (uint8_t)len;
    o[3] = 0x7; /* GOAWAY */
    o[4] = 0;
    memset(o + 5, 0, 4); /* stream 0 */
    last_stream &= 0x7fffffffu;
    o[9] = (uint8_t)(last_stream >> 24), o[10] = (uint8_t)(last_stream >> 16),
    o[11] = (uint8_t)(last_stream >> 8), o[12] = (uint8_t)last_stream;
    o[13] = (uint8_t)(error_code >> 24), o[14] = (uint8_t)(error_code >> 16),
    o[15] = (uint8_t)(error_code >> 8), o[16] = (uint8_t)error_code;
    memcpy(o + 17, debug, dl);
    return 9 + len;
}
