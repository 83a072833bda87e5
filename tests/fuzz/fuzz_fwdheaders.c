/*
 * Fuzz target for the pure parsers of the forwarded headers (router/front/fwdheaders.c) and the raw head
 * limits (router/front/reqguard.c). Invariants:
 *   - pdr_traceparent_parse: a value it accepts, formatted again with its own parent id, is accepted
 *     again with the same fields; for version 00 that string is the (trimmed) input itself;
 *   - pdr_fwd_is_hop_by_hop / pdr_fwd_is_router_set do not depend on the case of the name;
 *   - pdr_fwd_connection_names finds every token of a list the input builds from its own bytes;
 *   - pdr_reqguard_head_limits answers 0, 414 or 431; a refused prefix stays refused as more bytes
 *     arrive, and a head accepted whole is accepted at every prefix (the check runs on each read);
 *   - pdr_reqguard_scan gives the verdicts of the separate head checks and of h2o's own parser
 *     (tests/unit/reqguard_ref.h), at every prefix of the input;
 *   - pdr_fwd_build, on an HTTP/1 request whose fields are the input's "name: value" lines, forwards no
 *     field that is hop-by-hop or that one of the request's Connection fields names.
 * Built with libFuzzer when PDR_LIBFUZZER is defined; otherwise a main() replays the files named on the
 * command line with deterministic mutations (ctest's fwdheaders_fuzz_corpus).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../unit/reqguard_ref.h"
#include "fwdheaders.h"
#include "reqguard.h"
#include "router.h"

static void fail(const char *what, const uint8_t *data, size_t size)
{
    fprintf(stderr, "fwdheaders: %s (input of %zu bytes: %.*s)\n", what, size, (int)(size < 200 ? size : 200),
            (const char *)data);
    abort();
}

static void check_traceparent(const uint8_t *data, size_t size)
{
    pdr_trace_t t;
    if (pdr_traceparent_parse((const char *)data, size, &t) != 0)
        return;
    char again[PDR_TRACEPARENT_LEN + 1];
    pdr_traceparent_format(&t, t.parent_id, again);
    pdr_trace_t u;
    if (pdr_traceparent_parse(again, PDR_TRACEPARENT_LEN, &u) != 0 || memcmp(&t, &u, sizeof(t)) != 0)
        fail("a formatted traceparent does not parse back", data, size);
    const char *v = (const char *)data;
    size_t n = size;
    while (n > 0 && (*v == ' ' || *v == '\t')) {
        v++;
        n--;
    }
    while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    if (v[0] == '0' && v[1] == '0' && (n != PDR_TRACEPARENT_LEN || memcmp(v, again, n) != 0))
        fail("a version 00 traceparent is not its own formatting", data, size);
}

static void check_names(const uint8_t *data, size_t size)
{
    size_t n = size < 64 ? size : 64;
    char up[64], low[64];
    for (size_t i = 0; i < n; i++) {
        char c = (char)data[i];
        up[i] = c >= 'a' && c <= 'z' ? (char)(c - 'a' + 'A') : c;
        low[i] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
    }
    if (pdr_fwd_is_hop_by_hop(up, n) != pdr_fwd_is_hop_by_hop(low, n) ||
        pdr_fwd_is_router_set(up, n, 1) != pdr_fwd_is_router_set(low, n, 1) ||
        pdr_fwd_is_router_set(up, n, 0) != pdr_fwd_is_router_set(low, n, 0))
        fail("a name's class depends on its case", data, size);
    if (pdr_fwd_is_router_set(low, n, 0) && !pdr_fwd_is_router_set(low, n, 1))
        fail("a worker key makes the router write fewer headers", data, size);
    /* A Connection list of the input's comma-free, space-free pieces names each of them. */
    char list[600];
    size_t ll = 0, start = 0;
    for (size_t i = 0; i <= n && ll + 70 < sizeof(list); i++) {
        if (i < n && data[i] != ',' && data[i] != ' ' && data[i] != '\t')
            continue;
        if (i > start) {
            memcpy(list + ll, data + start, i - start);
            ll += i - start;
            list[ll++] = ',';
            list[ll++] = ' ';
        }
        start = i + 1;
    }
    start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && data[i] != ',' && data[i] != ' ' && data[i] != '\t')
            continue;
        if (i > start && ll + 70 < sizeof(list) &&
            !pdr_fwd_connection_names(list, ll, (const char *)data + start, i - start))
            fail("a Connection list does not name one of its tokens", data, size);
        start = i + 1;
    }
}

static void check_head_limits(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data;
    size_t fields = size > 0 ? data[0] % 8 : 1, bytes = size > 1 ? 16 + data[1] % 128 : 64;
    int whole = pdr_reqguard_head_limits(p, size, fields, bytes);
    if (whole != 0 && whole != 414 && whole != 431)
        fail("head_limits answered something else than 0, 414 or 431", data, size);
    int refused = 0;
    for (size_t k = 0; k <= size; k += 1 + size / 64) {
        int r = pdr_reqguard_head_limits(p, k, fields, bytes);
        if (refused && r == 0)
            fail("a refused head was accepted once more bytes came", data, size);
        if (r != 0)
            refused = 1;
        if (whole == 0 && r != 0)
            fail("a head accepted whole was refused at a prefix", data, size);
    }
}

static void check_scan(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data;
    size_t fields = size > 0 ? data[0] % 8 : 1, bytes = size > 1 ? 16 + data[1] % 128 : 64;
    for (size_t k = 0; k <= size; k += 1 + size / 64)
        if (pdr_reqguard_ref_differs(p, k, fields, bytes) != NULL ||
            pdr_reqguard_ref_differs(p, k, 100, 8192) != NULL)
            fail("the one-pass head scan differs from the separate checks", data, size);
    if (pdr_reqguard_ref_differs(p, size, 100, 8192) != NULL)
        fail("the one-pass head scan differs from the separate checks", data, size);
}

static void check_build(const uint8_t *data, size_t size)
{
    static pdr_config_t *conf;
    if (conf == NULL && (conf = pdr_config_new_default()) == NULL)
        abort();
    h2o_conn_callbacks_t cbs;
    h2o_conn_t conn;
    h2o_req_t req;
    memset(&cbs, 0, sizeof(cbs));
    memset(&conn, 0, sizeof(conn));
    memset(&req, 0, sizeof(req));
    conn.callbacks = &cbs;
    req.conn = &conn;
    req.version = 0x101;
    req.scheme = &H2O_URL_SCHEME_HTTP;
    req.input.authority = h2o_iovec_init(H2O_STRLIT("router.example"));
    h2o_mem_init_pool(&req.pool);
    /* The input's lines "name: value" become the fields (at most 64, as limits.max_headers bounds them). */
    const char *p = (const char *)data, *end = p + size;
    while (p < end && req.headers.size < 64) {
        const char *nl = memchr(p, '\n', (size_t)(end - p)), *le = nl != NULL ? nl : end;
        const char *colon = memchr(p, ':', (size_t)(le - p));
        if (colon != NULL && colon > p) {
            const char *v = colon + 1;
            while (v < le && *v == ' ')
                v++;
            char *name = h2o_mem_alloc_pool(&req.pool, (size_t)(colon - p));
            for (size_t i = 0; i < (size_t)(colon - p); i++) /* h2o gives HTTP/1 names in lower case */
                name[i] = p[i] >= 'A' && p[i] <= 'Z' ? (char)(p[i] - 'A' + 'a') : p[i];
            h2o_add_header_by_str(&req.pool, &req.headers, name, (size_t)(colon - p), 1, NULL, v,
                                  (size_t)(le - v));
        }
        p = le + (nl != NULL);
    }
    pdr_fwd_t fw;
    if (pdr_fwd_build(&fw, &req, conf) != 0)
        fail("pdr_fwd_build failed", data, size);
    for (const char *l = fw.block; *l != '\0';) {
        const char *e = strstr(l, "\r\n"), *colon = strchr(l, ':');
        size_t nlen = (size_t)(colon - l);
        size_t llen = e != NULL ? (size_t)(e - l) : strlen(l);
        if (pdr_fwd_is_hop_by_hop(l, nlen))
            fail("a hop-by-hop field was forwarded", data, size);
        int named = 0;
        for (size_t i = 0; i < req.headers.size; i++) {
            const h2o_header_t *h = &req.headers.entries[i];
            named |= h->name == &H2O_TOKEN_CONNECTION->buf &&
                     pdr_fwd_connection_names(h->value.base, h->value.len, l, nlen);
        }
        /* The router's own X-Forwarded-For and -Host hold only what it adds when Connection names them:
         * the peer ("unknown" here, no address) and the authority. Other router-set fields are its own. */
        if (named && nlen == 15 && strncasecmp(l, "x-forwarded-for", 15) == 0) {
            if (llen != 15 + 2 + 7 || memcmp(l + 17, "unknown", 7) != 0)
                fail("a named X-Forwarded-For was joined", data, size);
        } else if (named && nlen == 16 && strncasecmp(l, "x-forwarded-host", 16) == 0) {
            if (llen != 16 + 2 + 14 || memcmp(l + 18, "router.example", 14) != 0)
                fail("a named X-Forwarded-Host was forwarded", data, size);
        } else if (named && !pdr_fwd_is_router_set(l, nlen, 0)) {
            fail("a field Connection names was forwarded", data, size);
        }
        l = e != NULL ? e + 2 : l + llen;
    }
    h2o_mem_clear_pool(&req.pool);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_traceparent(data, size);
    check_names(data, size);
    check_head_limits(data, size);
    check_scan(data, size);
    check_build(data, size);
    return 0;
}

#ifndef PDR_LIBFUZZER
#define PDR_REPLAY_MUTATIONS 300
#include "replay_main.h"
#endif
