/*
 * The verdicts pdr_reqguard_scan (router/front/reqguard_scan.c) must give, composed the long way: the
 * separate checks of router/front/reqguard.c, h2o's own request parser (picohttpparser, exported by
 * libh2o) and the Content-Length found line by line. pdr_reqguard_ref_differs compares the two on one
 * input. Shared by tests/unit/test_reqguard.c and tests/fuzz/fuzz_fwdheaders.c.
 */
#ifndef PDR_REQGUARD_REF_H
#define PDR_REQGUARD_REF_H

#include <stdint.h>
#include <string.h>
#include <strings.h>
#include "reqguard.h"

/* libh2o exports picohttpparser; Debian ships no header for it. */
struct phr_header {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
};
int phr_parse_request(const char *buf, size_t len, const char **method, size_t *method_len, const char **path,
                      size_t *path_len, int *minor_version, struct phr_header *headers, size_t *num_headers,
                      size_t last_len);

/* The first line of the head's `head` bytes that follows a LF and starts "content-length:": its value
 * (INT64_MAX past 18 digits), -1 when it has no digits or there is none. */
static inline int64_t pdr_reqguard_ref_length(const char *p, size_t head)
{
    static const char name[] = "content-length:";
    for (const char *nl = memchr(p, '\n', head); nl != NULL;
         nl = memchr(nl + 1, '\n', head - (size_t)(nl + 1 - p))) {
        size_t i = (size_t)(nl - p);
        if (i + sizeof(name) - 1 >= head)
            break;
        if (strncasecmp(p + i + 1, name, sizeof(name) - 1) != 0)
            continue;
        size_t j = i + sizeof(name);
        while (j < head && (p[j] == ' ' || p[j] == '\t'))
            j++;
        int64_t v = 0;
        size_t digits = 0;
        for (; j < head && p[j] >= '0' && p[j] <= '9' && digits < 18; j++, digits++)
            v = v * 10 + (p[j] - '0');
        if (digits == 0)
            return -1;
        return j < head && p[j] >= '0' && p[j] <= '9' ? INT64_MAX : v;
    }
    return -1;
}

static inline void pdr_reqguard_ref(const char *p, size_t n, size_t max_fields, size_t max_bytes,
                                    pdr_reqhead_t *r)
{
    r->limit = pdr_reqguard_head_limits(p, n, max_fields, max_bytes);
    r->len = pdr_reqguard_head_len(p, n, &r->chunked);
    r->bad = NULL;
    r->content_length = -1;
    if (r->len == 0)
        return;
    const char *why, *method, *path;
    size_t method_len, path_len, num_headers = 100; /* H2O_MAX_HEADERS */
    int minor;
    struct phr_header headers[100];
    if (pdr_reqguard_check_head(p, n, &why) != 0)
        r->bad = why;
    else if (phr_parse_request(p, n, &method, &method_len, &path, &path_len, &minor, headers, &num_headers,
                               0) == -1)
        r->bad = "the request line or a header line cannot be parsed";
    if (!r->chunked)
        r->content_length = pdr_reqguard_ref_length(p, r->len);
}

/* NULL when pdr_reqguard_scan agrees with the reference on what the guard uses, else what differs. */
static inline const char *pdr_reqguard_ref_differs(const char *p, size_t n, size_t max_fields,
                                                   size_t max_bytes)
{
    pdr_reqhead_t a, b;
    pdr_reqguard_scan(p, n, max_fields, max_bytes, &a);
    pdr_reqguard_ref(p, n, max_fields, max_bytes, &b);
    if (a.limit != b.limit)
        return "limit";
    if (a.limit != 0)
        return NULL;
    if (a.len != b.len)
        return "len";
    if ((a.bad == NULL) != (b.bad == NULL) || (a.bad != NULL && strcmp(a.bad, b.bad) != 0))
        return "bad";
    if (a.bad == NULL && a.len != 0 && (a.chunked != b.chunked || a.content_length != b.content_length))
        return "framing";
    return NULL;
}

#endif
