/*
 * Request-head checks for HTTP/1 clients (see reqguard.h). One pass over the head, line by line; the
 * head ends at the first empty line.
 */
#include "reqguard.h"
#include <string.h>

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
