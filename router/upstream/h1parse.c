/*
 * Incremental HTTP/1.1 response parser (see h1parse.h for the contract). Pure: no I/O, no allocation,
 * no global state; each pdr_h1resp_t is owned by one caller and touched only from its thread.
 *
 * A head or trailer line that lies whole in the input, with no byte that needs a closer look (a control
 * character other than HT, a CR not followed by LF, the head's ceiling reached, a status line not
 * starting "HTTP/1."), is found sixteen bytes at a time (SSE2; eight with a word-at-a-time scan where
 * SSE2 is missing or PDR_H1_SCALAR is defined) and checked where it lies: an ordinary header line's
 * name is found by its ':' and recognised by its length and one or two word comparisons, and only a name
 * that is none of the four framing headers' is checked byte by byte for tchars. Any other line (split
 * across inputs, or with such a byte) is read one byte at a time into a bounded line buffer, which
 * decides every error and its offset; the whole-line path takes only lines that the byte path would
 * accept up to their end, so any split of the input gives the same result. Chunk-size lines are read
 * byte by byte. Body bytes are never copied: BODY events point into the caller's buffer. Invariants:
 * `used` never exceeds n, NEED_MORE always consumes everything, and every line, the head and the
 * trailer section have a fixed ceiling.
 */
#include "h1parse.h"

#include <stddef.h>
#include <string.h>

#include "h1scan.h"

enum {
    S_STATUS = 0, /* reading the status line (pdr_h1_init leaves state 0) */
    S_HEADER,     /* reading header lines */
    S_NOBODY,     /* headers reported, no body follows: DONE is due */
    S_LENGTH,     /* Content-Length body */
    S_CLOSE,      /* body until the connection closes */
    S_CHUNK_SIZE, /* reading a chunk-size line */
    S_CHUNK_DATA, /* inside a chunk's data */
    S_CHUNK_END,  /* the CRLF after a chunk's data */
    S_TRAILER,    /* trailer lines after the last chunk */
    S_DONE,
    S_ERROR,
};

enum { CHUNK_DIGITS = 0, CHUNK_AFTER_DIGITS, CHUNK_EXT };

#define H1_MAX_LENGTH (UINT64_C(1) << 62) /* the largest Content-Length or chunk size accepted */
/* The bytes of a line the line buffer keeps (it has one more, for a byte that stops a name's scan). */
#define H1_LINE (sizeof(((pdr_h1resp_t *)0)->line) - 1)

static int fail(pdr_h1resp_t *r, const char *why)
{
    r->state = S_ERROR;
    r->error = why;
    return PDR_H1_ERROR;
}

/* Resets everything a response's head sets (used again after a 1xx interim response). The line buffer is
 * not cleared: only the line_len bytes written since are ever read. */
static void reset_response(pdr_h1resp_t *r)
{
    int head = r->head_request;
    memset(r, 0, offsetof(pdr_h1resp_t, content_type));
    r->content_type[0] = '\0';
    r->head_request = head;
    r->content_length = -1;
    r->state = S_STATUS;
}

void pdr_h1_init(pdr_h1resp_t *r)
{
    r->head_request = 0;
    reset_response(r);
}

/* Case-insensitive comparison of the slice [s, s + len) with the lower-case literal lit. */
static int slice_is(const char *s, size_t len, const char *lit)
{
    size_t n = strlen(lit);
    if (len != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (lower((unsigned char)s[i]) != (unsigned char)lit[i])
            return 0;
    return 1;
}

static inline __attribute__((always_inline)) void trim(const char **s, size_t *len)
{
    while (*len > 0 && is_ows(**s)) {
        (*s)++;
        (*len)--;
    }
    while (*len > 0 && is_ows((*s)[*len - 1]))
        (*len)--;
}

/*
 * Calls fn on each non-empty element of the comma-separated list [s, s + len), trimmed. Returns the
 * first non-zero value fn returns, else 0.
 */
static int each_element(pdr_h1resp_t *r, const char *s, size_t len,
                        int (*fn)(pdr_h1resp_t *r, const char *e, size_t elen))
{
    while (len > 0) {
        const char *comma = memchr(s, ',', len);
        size_t elen = comma ? (size_t)(comma - s) : len;
        const char *e = s;
        size_t tlen = elen;
        trim(&e, &tlen);
        if (tlen > 0) {
            int rc = fn(r, e, tlen);
            if (rc != 0)
                return rc;
        }
        if (comma == NULL)
            break;
        s += elen + 1;
        len -= elen + 1;
    }
    return 0;
}

static int connection_token(pdr_h1resp_t *r, const char *e, size_t elen)
{
    if (slice_is(e, elen, "close"))
        r->conn_close = 1;
    else if (slice_is(e, elen, "keep-alive"))
        r->conn_keep = 1;
    return 0;
}

static int transfer_coding(pdr_h1resp_t *r, const char *e, size_t elen)
{
    /* A coding may carry parameters after ';': its name ends there. */
    const char *semi = memchr(e, ';', elen);
    size_t nlen = semi ? (size_t)(semi - e) : elen;
    trim(&e, &nlen);
    if (nlen == 0)
        return fail(r, "malformed Transfer-Encoding header");
    for (size_t i = 0; i < nlen; i++)
        if (!is_tchar((unsigned char)e[i]))
            return fail(r, "malformed Transfer-Encoding header");
    r->te_last_chunked = slice_is(e, nlen, "chunked");
    r->te_chunked_seen += r->te_last_chunked;
    return 0;
}

static int content_length(pdr_h1resp_t *r, const char *v, size_t vlen)
{
    uint64_t x = 0;
    if (vlen == 0)
        return fail(r, "empty Content-Length header");
    for (size_t i = 0; i < vlen; i++) {
        if (v[i] < '0' || v[i] > '9')
            return fail(r, "non-numeric Content-Length header");
        uint64_t d = (uint64_t)(v[i] - '0');
        if (x > (H1_MAX_LENGTH - d) / 10)
            return fail(r, "Content-Length too large");
        x = x * 10 + d;
    }
    if (r->saw_cl && (uint64_t)r->content_length != x)
        return fail(r, "different Content-Length values");
    r->saw_cl = 1;
    r->content_length = (int64_t)x;
    return 0;
}

/* The headers that matter for framing. Only four names, and their lengths tell them apart: one
 * comparison per header. */
enum { H_OTHER, H_CTYPE, H_CLEN, H_TE, H_CONN };

static inline __attribute__((always_inline)) int which_header(const char *l, size_t nlen)
{
    switch (nlen) {
    case 10:
        return NAME_IS(l, "connection") ? H_CONN : H_OTHER;
    case 12:
        return NAME_IS(l, "content-type") ? H_CTYPE : H_OTHER;
    case 14:
        return NAME_IS(l, "content-length") ? H_CLEN : H_OTHER;
    case 17:
        return NAME_IS(l, "transfer-encoding") ? H_TE : H_OTHER;
    default:
        return H_OTHER;
    }
}

/* Applies a framing header (which: not H_OTHER) whose value, untrimmed, is [v, v + vlen); cut: its line
 * was longer than the line buffer (and the value is cut there). */
static int framing_header(pdr_h1resp_t *r, int which, const char *v, size_t vlen, int cut)
{
    trim(&v, &vlen);
    if (which == H_CTYPE) {
        /* Truncated to the field's size (the value is only logged and matched by prefix). */
        size_t c = vlen < sizeof(r->content_type) - 1 ? vlen : sizeof(r->content_type) - 1;
        memcpy(r->content_type, v, c);
        r->content_type[c] = '\0';
        return 0;
    }
    if (cut)
        return fail(r, "Content-Length, Transfer-Encoding or Connection header line too long");
    if (which == H_CLEN)
        return content_length(r, v, vlen);
    if (which == H_CONN) {
        if (vlen == 10 && NAME_IS(v, "keep-alive")) { /* one token: what each_element would find */
            r->conn_keep = 1;
            return 0;
        }
        return each_element(r, v, vlen, connection_token);
    }
    r->saw_te = 1;
    return each_element(r, v, vlen, transfer_coding);
}

/*
 * Checks one header (or trailer) line of line_len bytes, of which the first min(line_len, H1_LINE) are
 * at l and are followed by a byte that is not a tchar, and applies the headers that matter for framing
 * when `apply` is set.
 */
static int header_line(pdr_h1resp_t *r, const char *l, size_t line_len, int apply)
{
    size_t len = line_len < H1_LINE ? line_len : H1_LINE;
    int cut = line_len > H1_LINE;
    if (is_ows(l[0]))
        return fail(r, "obsolete header line folding (line starts with whitespace)");
    /* The name runs to the first byte that is not a tchar; when that byte is not ':', the checks below
     * say which error it is, in the order that gives every line one answer. */
    size_t nlen = tchar_run(l);
    if (nlen > len)
        nlen = len;
    const char *colon = l + nlen;
    if (nlen == len || *colon != ':') {
        colon = memchr(l, ':', len);
        if (colon == NULL)
            return fail(r, cut ? "header name too long" : "header line without ':'");
        nlen = (size_t)(colon - l);
        if (nlen > 0)
            return fail(r, "invalid character in header name (or whitespace before ':')");
    }
    if (nlen == 0)
        return fail(r, "empty header name");
    if (!apply)
        return 0;
    int which = which_header(l, nlen);
    if (which == H_OTHER)
        return 0;
    return framing_header(r, which, colon + 1, len - nlen - 1, cut);
}

static int status_line(pdr_h1resp_t *r, const char *l, size_t line_len)
{
    size_t len = line_len < H1_LINE ? line_len : H1_LINE;
    if (len < 12 || memcmp(l, "HTTP/1.", 7) != 0 || l[7] < '0' || l[7] > '9' || l[8] != ' ' || l[9] < '1' ||
        l[9] > '9' || l[10] < '0' || l[10] > '9' || l[11] < '0' || l[11] > '9' || (len > 12 && l[12] != ' '))
        return fail(r, "malformed status line (expected \"HTTP/1.x NNN reason\")");
    r->http10 = l[7] == '0';
    r->status = (l[9] - '0') * 100 + (l[10] - '0') * 10 + (l[11] - '0');
    r->state = S_HEADER;
    return 0;
}

/* The empty line ending a final response's head: decides the framing of the body. */
static int end_of_head(pdr_h1resp_t *r)
{
    if (r->saw_te && r->saw_cl)
        return fail(r, "both Transfer-Encoding and Content-Length");
    if (r->saw_te && (!r->te_last_chunked || r->te_chunked_seen != 1))
        return fail(r, "unsupported transfer coding (chunked must be the last coding, once)");
    r->keep_alive = r->http10 ? (r->conn_keep && !r->conn_close) : !r->conn_close;
    if (r->head_request || r->status == 204 || r->status == 304) {
        r->content_length = 0;
        r->state = S_NOBODY;
    } else if (r->saw_te) {
        r->chunked = 1;
        r->state = S_CHUNK_SIZE;
    } else if (r->saw_cl) {
        r->remaining = (uint64_t)r->content_length;
        r->state = r->remaining > 0 ? S_LENGTH : S_NOBODY;
    } else {
        r->keep_alive = 0;
        r->state = S_CLOSE;
    }
    r->line_len = 0;
    r->head_len = 0;
    return PDR_H1_HEADERS;
}

/*
 * Takes one byte of a head or trailer line. Returns 1 when the line is complete (in r->line, r->line_len),
 * 0 when more is needed, PDR_H1_ERROR on a bad byte or an over-long block.
 */
static int head_byte(pdr_h1resp_t *r, unsigned char c)
{
    if (++r->head_len > PDR_H1_MAX_HEAD)
        return fail(r, r->state == S_TRAILER ? "trailer section too long" : "response header block too long");
    if (c == '\n') {
        r->line_cr = 0;
        return 1;
    }
    if (r->line_cr)
        return fail(r, "CR not followed by LF");
    if (c == '\r') {
        r->line_cr = 1;
        return 0;
    }
    if (is_ctl(c))
        return fail(r, "control character in response head");
    /* Fail early on a peer that does not speak HTTP/1.x (TLS, HTTP/2, a banner). */
    if (r->state == S_STATUS && r->line_len < 7 && c != (unsigned char)"HTTP/1."[r->line_len])
        return fail(r, "malformed status line (expected \"HTTP/1.x NNN reason\")");
    if (r->line_len < H1_LINE)
        r->line[r->line_len] = (char)c;
    r->line_len++;
    return 0;
}

enum { LINE_NEXT = -1 }; /* line_end(): go on with the next line */

/* A head or trailer line of line_len bytes is complete (the first min(line_len, sizeof r->line) at l):
 * LINE_NEXT, or the event to report. */
static int line_end(pdr_h1resp_t *r, const char *l, size_t line_len)
{
    int rc;
    if (r->state == S_STATUS) {
        rc = status_line(r, l, line_len);
    } else if (line_len > 0) {
        rc = header_line(r, l, line_len, r->state == S_HEADER);
    } else if (r->state == S_TRAILER) {
        r->state = S_DONE;
        return PDR_H1_DONE;
    } else if (r->status < 200) {
        /* The end of a 1xx interim response: the final one follows. */
        reset_response(r);
        return LINE_NEXT;
    } else {
        return end_of_head(r);
    }
    if (rc == PDR_H1_ERROR)
        return rc;
    r->line_len = 0;
    return LINE_NEXT;
}

/*
 * Head or trailer lines that lie whole in p[*i, n), read where they lie while the byte path would accept
 * every byte of them up to their end (no control character other than HT, no CR without LF, the block's
 * ceiling not reached, a status line starting "HTTP/1."), so that any split of the input gives the same
 * result. Returns the event of the line that ended the head (HEADERS, DONE, ERROR), else LINE_NEXT with
 * *i at the first line left to the byte path.
 */
static int whole_lines(pdr_h1resp_t *r, const char *p, size_t n, size_t *ip)
{
    size_t i = *ip;
    int rc = LINE_NEXT;
    for (;;) {
        const char *l = p + i;
        size_t avail = n - i;
        unsigned colons;
        size_t len = find_ctl((const unsigned char *)l, avail, &colons);
        if (len == avail)
            break;
        size_t end = len + 1;
        if (l[len] != '\n') {
            if (l[len] != '\r' || end == avail || l[end] != '\n')
                break;
            end++;
        }
        if (end > PDR_H1_MAX_HEAD - r->head_len)
            break;
        if (r->state == S_HEADER && len > 0 && len <= H1_LINE) {
            /* What header_line and line_end do for an ordinary header line, inline: the name ends at the
             * line's first ':' when every byte before it is a tchar. A name that is one of the framing
             * headers' is one (their names are tchars, and no other byte of a head line matches them);
             * any other is looked at byte by byte. */
            size_t nlen = colons != 0 ? (size_t)__builtin_ctz(colons) : colon_at(l, len);
            if (nlen > 0 && nlen < len) {
                int which = which_header(l, nlen);
                if (which != H_OTHER || tchar_run(l) == nlen) {
                    r->head_len += end;
                    i += end;
                    if (which != H_OTHER && framing_header(r, which, l + nlen + 1, len - nlen - 1, 0) != 0) {
                        rc = PDR_H1_ERROR;
                        break;
                    }
                    continue;
                }
            }
        } else if (r->state == S_HEADER && len == 0 && r->status >= 200) {
            /* The head's ceiling was checked above; end_of_head starts the count again. */
            i += end;
            rc = end_of_head(r);
            break;
        } else if (r->state == S_STATUS) {
            if (len < 7 || memcmp(l, "HTTP/1.", 7) != 0)
                break;
            r->head_len += end;
            i += end;
            if (status_line(r, l, len) != 0) {
                rc = PDR_H1_ERROR;
                break;
            }
            continue;
        }
        r->head_len += end;
        i += end;
        rc = line_end(r, l, len);
        if (rc != LINE_NEXT)
            break;
    }
    *ip = i;
    return rc;
}

static int hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (unsigned char)lower(c);
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Takes one byte of a chunk-size line; returns 1 when the line is complete, 0, or PDR_H1_ERROR. */
static int chunk_size_byte(pdr_h1resp_t *r, unsigned char c)
{
    if (++r->line_len > PDR_H1_MAX_CHUNK_LINE)
        return fail(r, "chunk-size line too long");
    if (c == '\n' || c == '\r') {
        if (c == '\r' && r->line_cr)
            return fail(r, "CR not followed by LF");
        if (r->chunk_phase == CHUNK_DIGITS && r->line_len == 1)
            return fail(r, "empty chunk size");
        if (c == '\r') {
            r->line_cr = 1;
            return 0;
        }
        r->line_cr = 0;
        return 1;
    }
    if (r->line_cr)
        return fail(r, "CR not followed by LF");
    if (is_ctl(c))
        return fail(r, "control character in chunk-size line");
    int h = hex_value(c);
    switch (r->chunk_phase) {
    case CHUNK_DIGITS:
        if (h >= 0) {
            if (r->remaining > (H1_MAX_LENGTH - (uint64_t)h) / 16)
                return fail(r, "chunk size too large");
            r->remaining = r->remaining * 16 + (uint64_t)h;
            return 0;
        }
        if (r->line_len == 1)
            return fail(r, "empty chunk size");
        r->chunk_phase = CHUNK_AFTER_DIGITS;
        /* fall through */
    case CHUNK_AFTER_DIGITS:
        if (c == ';')
            r->chunk_phase = CHUNK_EXT;
        else if (!is_ows((char)c))
            return fail(r, "invalid character in chunk size");
        return 0;
    default:
        return 0; /* Chunk extensions are ignored. */
    }
}

/* pdr_h1_next for every state (the head's machinery, kept out of the small function below). */
static __attribute__((noinline)) int next_any(pdr_h1resp_t *r, const char *p, size_t n, size_t *used,
                                              const char **body, size_t *blen)
{
    size_t i = 0;
    int rc;
    *used = 0;
    *body = NULL;
    *blen = 0;
    for (;;) {
        switch (r->state) {
        case S_DONE:
            return PDR_H1_DONE;
        case S_ERROR:
            return PDR_H1_ERROR;
        case S_NOBODY:
            r->state = S_DONE;
            *used = i;
            return PDR_H1_DONE;
        case S_LENGTH:
        case S_CLOSE:
        case S_CHUNK_DATA: {
            if (i == n) {
                *used = n;
                return PDR_H1_NEED_MORE;
            }
            size_t take = n - i;
            if (r->state != S_CLOSE && take > r->remaining)
                take = (size_t)r->remaining;
            *body = p + i;
            *blen = take;
            *used = i + take;
            if (r->state != S_CLOSE) {
                r->remaining -= take;
                if (r->remaining == 0)
                    r->state = r->state == S_LENGTH ? S_NOBODY : S_CHUNK_END;
            }
            return PDR_H1_BODY;
        }
        default:
            break;
        }
        if (i == n) {
            *used = n;
            return PDR_H1_NEED_MORE;
        }
        if ((r->state == S_HEADER || r->state == S_TRAILER || r->state == S_STATUS) && r->line_len == 0 &&
            !r->line_cr) {
            rc = whole_lines(r, p, n, &i);
            *used = i;
            if (rc != LINE_NEXT)
                return rc;
            if (i == n) {
                *used = n;
                return PDR_H1_NEED_MORE;
            }
        }
        if ((r->state == S_HEADER || r->state == S_TRAILER || (r->state == S_STATUS && r->line_len >= 7)) &&
            !r->line_cr) {
            /* Fast path: the ordinary bytes of a head line in one go (what head_byte does per byte). */
            size_t j = i;
            while (j < n) {
                unsigned char b = (unsigned char)p[j];
                if (b < 0x20 || b == 0x7f)
                    break; /* CR, LF, a tab or a control character: per byte below */
                j++;
            }
            size_t run = j - i;
            if (run > 0) {
                if (r->head_len + run > PDR_H1_MAX_HEAD)
                    return fail(r, r->state == S_TRAILER ? "trailer section too long"
                                                         : "response header block too long");
                r->head_len += run;
                if (r->line_len < H1_LINE) {
                    size_t room = H1_LINE - r->line_len;
                    memcpy(r->line + r->line_len, p + i, run < room ? run : room);
                }
                r->line_len += run;
                i = j;
                *used = i;
                continue;
            }
        }
        unsigned char c = (unsigned char)p[i++];
        *used = i;
        switch (r->state) {
        case S_CHUNK_END:
            if (c == '\r' && !r->line_cr) {
                r->line_cr = 1;
            } else if (c == '\n') {
                r->line_cr = 0;
                r->line_len = 0;
                r->chunk_phase = CHUNK_DIGITS;
                r->state = S_CHUNK_SIZE;
            } else {
                return fail(r, "chunk data not followed by CRLF");
            }
            break;
        case S_CHUNK_SIZE:
            rc = chunk_size_byte(r, c);
            if (rc == PDR_H1_ERROR)
                return rc;
            if (rc == 1) {
                r->line_len = 0;
                r->head_len = 0;
                r->state = r->remaining > 0 ? S_CHUNK_DATA : S_TRAILER;
            }
            break;
        default: /* S_STATUS, S_HEADER, S_TRAILER */
            rc = head_byte(r, c);
            if (rc == PDR_H1_ERROR)
                return rc;
            if (rc == 0)
                break;
            r->line[r->line_len < H1_LINE ? r->line_len : H1_LINE] = '\0'; /* stops a name's scan */
            rc = line_end(r, r->line, r->line_len);
            if (rc != LINE_NEXT)
                return rc;
            break;
        }
    }
}

int pdr_h1_next(pdr_h1resp_t *r, const char *p, size_t n, size_t *used, const char **body, size_t *blen)
{
    /* A response's last calls, a Content-Length body and its end, as next_any would answer them. */
    if (r->state == S_LENGTH && n > 0) {
        size_t take = n < r->remaining ? n : (size_t)r->remaining;
        *used = take;
        *body = p;
        *blen = take;
        r->remaining -= take;
        if (r->remaining == 0)
            r->state = S_NOBODY;
        return PDR_H1_BODY;
    }
    if (r->state == S_NOBODY) {
        r->state = S_DONE;
        *used = 0;
        *body = NULL;
        *blen = 0;
        return PDR_H1_DONE;
    }
    return next_any(r, p, n, used, body, blen);
}

int pdr_h1_eof(pdr_h1resp_t *r)
{
    switch (r->state) {
    case S_CLOSE:
    case S_NOBODY:
    case S_DONE:
        r->state = S_DONE;
        return PDR_H1_DONE;
    case S_ERROR:
        return PDR_H1_ERROR;
    default:
        return fail(r, "connection closed before the response ended");
    }
}
