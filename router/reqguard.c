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

/* A frame's header is complete: 0 to go on, or a PDR_H2G_* verdict. */
static int h2guard_frame(pdr_h2guard_t *g)
{
    const uint8_t *h = g->hdr;
    uint32_t len = (uint32_t)h[0] << 16 | (uint32_t)h[1] << 8 | h[2];
    uint8_t type = h[3], flags = h[4];
    uint32_t stream =
        ((uint32_t)h[5] << 24 | (uint32_t)h[6] << 16 | (uint32_t)h[7] << 8 | h[8]) & 0x7fffffffu;
    g->payload_left = len;
    if (g->in_block) {
        if (type != H2_CONTINUATION || stream != g->block_stream)
            return PDR_H2G_LOST; /* a protocol error h2o answers itself */
    } else if (type == H2_CONTINUATION) {
        return PDR_H2G_LOST;
    } else if (type != H2_HEADERS) {
        return 0;
    } else {
        g->in_block = 1;
        g->block_stream = stream;
        g->block = 0;
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

int pdr_h2guard_feed(pdr_h2guard_t *g, const char *p, size_t n)
{
    const char *end = p + n;
    while (p < end) {
        if (g->preface_left > 0) {
            size_t at = sizeof(H2_PREFACE) - 1 - g->preface_left;
            if (*p != H2_PREFACE[at])
                return PDR_H2G_LOST;
            g->preface_left--;
            p++;
        } else if (g->payload_left > 0) {
            size_t take = (size_t)(end - p) < g->payload_left ? (size_t)(end - p) : g->payload_left;
            g->payload_left -= (uint32_t)take;
            p += take;
        } else {
            g->hdr[g->hdr_have++] = (uint8_t)*p++;
            if (g->hdr_have == sizeof(g->hdr)) {
                g->hdr_have = 0;
                int v = h2guard_frame(g);
                if (v != 0)
                    return v;
            }
        }
    }
    return PDR_H2G_MORE;
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
