/* router/front/fwdheaders.c: hop-by-hop filtering, traceparent validation, request ids, the request-head
 * checks and the forwarded block built from a request made by hand (no sockets). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "../../router/front/fwdheaders.h"
#include "check.h"
#include "runner.h"
#include "router.h"

static int hop(const char *s)
{
    return pdr_fwd_is_hop_by_hop(s, strlen(s));
}

static int rset(const char *s, int key)
{
    return pdr_fwd_is_router_set(s, strlen(s), key);
}

static int conn_names(const char *conn, const char *name)
{
    return pdr_fwd_connection_names(conn, strlen(conn), name, strlen(name));
}

static int tp_ok(const char *s)
{
    pdr_trace_t t;
    return pdr_traceparent_parse(s, strlen(s), &t) == 0;
}

static socklen_t peer_v4(h2o_conn_t *conn, struct sockaddr *sa)
{
    (void)conn;
    struct sockaddr_in *in = (struct sockaddr_in *)sa;
    memset(in, 0, sizeof(*in));
    in->sin_family = AF_INET;
    inet_pton(AF_INET, "10.1.2.3", &in->sin_addr);
    return sizeof(*in);
}

/* An address whose octets take one, two and three digits, and zero. */
static socklen_t peer_v4_wide(h2o_conn_t *conn, struct sockaddr *sa)
{
    (void)conn;
    struct sockaddr_in *in = (struct sockaddr_in *)sa;
    memset(in, 0, sizeof(*in));
    in->sin_family = AF_INET;
    inet_pton(AF_INET, "255.100.0.9", &in->sin_addr);
    return sizeof(*in);
}

static socklen_t peer_v6(h2o_conn_t *conn, struct sockaddr *sa)
{
    (void)conn;
    struct sockaddr_in6 *in = (struct sockaddr_in6 *)sa;
    memset(in, 0, sizeof(*in));
    in->sin6_family = AF_INET6;
    inet_pton(AF_INET6, "2001:db8::7", &in->sin6_addr);
    return sizeof(*in);
}

typedef struct fake {
    h2o_conn_callbacks_t cbs;
    h2o_conn_t conn;
    h2o_req_t req;
} fake_t;

static void fake_init(fake_t *f, int version, socklen_t (*peer)(h2o_conn_t *, struct sockaddr *))
{
    memset(f, 0, sizeof(*f));
    f->cbs.get_peername = peer;
    f->conn.callbacks = &f->cbs;
    f->req.conn = &f->conn;
    f->req.version = version;
    f->req.scheme = &H2O_URL_SCHEME_HTTP;
    f->req.input.authority = h2o_iovec_init(H2O_STRLIT("router.example:8000"));
    f->req.input.path = h2o_iovec_init(H2O_STRLIT("/generate"));
    h2o_mem_init_pool(&f->req.pool);
}

static void add(fake_t *f, const char *name, const char *value)
{
    h2o_add_header_by_str(&f->req.pool, &f->req.headers, name, strlen(name), 1, name, value, strlen(value));
}

/* The value of the line `name` in a forwarded block (NULL when absent); a second line of that name fails. */
static const char *line_of(const char *block, const char *name, char *out, size_t cap)
{
    const char *found = NULL;
    size_t nlen = strlen(name);
    for (const char *p = block; p != NULL && *p;) {
        const char *e = strstr(p, "\r\n");
        size_t len = e != NULL ? (size_t)(e - p) : strlen(p);
        if (len > nlen + 1 && strncasecmp(p, name, nlen) == 0 && p[nlen] == ':') {
            CHECK(found == NULL);
            found = p;
            size_t vl = len - nlen - 2 < cap - 1 ? len - nlen - 2 : cap - 1;
            memcpy(out, p + nlen + 2, vl);
            out[vl] = '\0';
        }
        p = e != NULL ? e + 2 : NULL;
    }
    return found != NULL ? out : NULL;
}

static void test_names(void)
{
    /* Hop-by-hop, any case; Proxy-* by prefix. */
    CHECK(hop("connection") && hop("Connection") && hop("KEEP-ALIVE") && hop("te") && hop("Trailer"));
    CHECK(hop("transfer-encoding") && hop("upgrade") && hop("http2-settings"));
    CHECK(hop("proxy-authorization") && hop("Proxy-Connection") && hop("proxy-anything"));
    CHECK(!hop("x-custom") && !hop("trailers") && !hop("tee") && !hop("proxy") && !hop("authorization"));
    CHECK(!hop("accept") && !hop("user-agent") && !hop("tracestate"));
    /* What the router writes itself. */
    CHECK(rset("host", 0) && rset("Content-Length", 0) && rset("content-type", 0) && rset("expect", 0));
    CHECK(rset("x-request-id", 0) && rset("traceparent", 0) && rset("X-Forwarded-Proto", 0));
    CHECK(rset("accept-encoding", 0) && rset("content-encoding", 0) && rset(":path", 0));
    CHECK(!rset("authorization", 0) && rset("authorization", 1) && rset("Authorization", 1));
    CHECK(!rset("x-forwarded-for", 0) && !rset("x-forwarded-host", 0) && !rset("tracestate", 0));
    CHECK(!rset("accept", 1) && !rset("cookie", 1));
    /* Only letters match in either case: a byte that differs from the name's by the case bit alone is
     * another name (0x0d for '-', 0x10 for '0', '@' for '`'). */
    CHECK(rset("CONTENT-TYPE", 0) && rset("X-Data-Parallel-Rank", 0) && hop("Transfer-Encoding"));
    CHECK(!rset("content\rlength", 0) && !rset("content\rtype", 0) && !hop("transfer\rencoding"));
    CHECK(!rset("x\rforwarded-proto", 0) && !rset("x-data-parallel\rrank", 0) && !hop("http2\x0dsettings"));
    CHECK(!hop("http\x12-settings") && rset("x-forwarded-prot\x4f", 0) && !rset("x-request-i\x04", 0));
    /* Connection's list: tokens, any case, optional whitespace, empty elements. */
    CHECK(conn_names("close, X-Hop", "x-hop") && conn_names("X-Hop", "X-HOP") &&
          conn_names(" ,x-a ,, x-b ", "x-b"));
    CHECK(!conn_names("keep-alive", "x-hop") && !conn_names("x-hopper", "x-hop") && !conn_names("", "x"));
    CHECK(!conn_names("x-ho", "x-hop") && !conn_names("close", ""));
}

static void test_traceparent(void)
{
    /* traceparent (W3C Trace Context level 1, section 3.2). */
    const char *good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    pdr_trace_t t;
    CHECK(pdr_traceparent_parse(good, strlen(good), &t) == 0);
    CHECK(t.trace_id[0] == 0x4b && t.trace_id[15] == 0x36 && t.parent_id[0] == 0x00 &&
          t.parent_id[7] == 0xb7);
    CHECK(t.flags == 1);
    CHECK(tp_ok("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"));
    CHECK(tp_ok(" 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 "));
    CHECK(!tp_ok("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"));  /* upper case */
    CHECK(!tp_ok("00-00000000000000000000000000000000-00f067aa0ba902b7-01"));  /* zero trace id */
    CHECK(!tp_ok("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"));  /* zero parent id */
    CHECK(!tp_ok("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));  /* version ff */
    CHECK(!tp_ok("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-")); /* 00 is 55 long */
    CHECK(!tp_ok("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1"));
    CHECK(!tp_ok("00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01"));
    CHECK(!tp_ok("00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
    CHECK(!tp_ok("0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
    CHECK(!tp_ok("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz-01"));
    CHECK(!tp_ok(""));
    /* A later version: its first fields as 00's, more only after a '-'. */
    CHECK(tp_ok("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
    CHECK(tp_ok("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-holds"));
    CHECK(!tp_ok("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01xwhat"));
    char out[PDR_TRACEPARENT_LEN + 1];
    uint8_t span[8] = {0xde, 0xad, 0xbe, 0xef, 0, 1, 2, 3};
    pdr_traceparent_format(&t, span, out);
    CHECK(strcmp(out, "00-4bf92f3577b34da6a3ce929d0e0e4736-deadbeef00010203-01") == 0);
    /* Every byte value at every digit of the ids and the flags: accepted exactly when it is a lower-case
     * hex digit, and then read as its value. */
    static const size_t digits[] = {3, 4, 10, 17, 18, 34, 36, 40, 43, 44, 51, 53, 54};
    int bad = 0;
    for (size_t d = 0; d < sizeof(digits) / sizeof(digits[0]); d++) {
        for (int b = 0; b < 256; b++) {
            char v[PDR_TRACEPARENT_LEN + 1];
            memcpy(v, good, sizeof(v));
            v[digits[d]] = (char)b;
            int hex = (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f');
            pdr_trace_t u;
            int ok = pdr_traceparent_parse(v, PDR_TRACEPARENT_LEN, &u) == 0;
            bad += ok != hex;
            if (ok) {
                char back[PDR_TRACEPARENT_LEN + 1];
                pdr_traceparent_format(&u, u.parent_id, back);
                bad += strcmp(back, v) != 0;
            }
        }
    }
    CHECK(bad == 0);
}

static void test_request_ids(void)
{
    /* Request ids. */
    CHECK(pdr_fwd_request_id_ok("abc-DEF_1.2", 11) && !pdr_fwd_request_id_ok("", 0));
    CHECK(!pdr_fwd_request_id_ok("a b", 3) && !pdr_fwd_request_id_ok("a\"b", 3));
    char long_id[65];
    memset(long_id, 'a', 64);
    CHECK(pdr_fwd_request_id_ok(long_id, 63) && !pdr_fwd_request_id_ok(long_id, 64));
    int bad = 0;
    for (int b = 0; b < 256; b++) {
        char id[3] = {'a', (char)b, 'z'};
        int want = (b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || b == '-' ||
                   b == '_' || b == '.';
        bad += pdr_fwd_request_id_ok(id, 3) != want;
    }
    CHECK(bad == 0);
}

static void test_forwarded(void)
{
    const char *good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    pdr_config_t *c = pdr_config_new_default();
    CHECK(c != NULL);
    char msg[256], v[512];

    /* The forwarded block: an HTTP/1 client with everything. */
    fake_t f;
    fake_init(&f, 0x101, peer_v4);
    add(&f, "user-agent", "ua/1");
    add(&f, "X-Custom", "one");
    add(&f, "connection", "keep-alive, X-Hop");
    add(&f, "x-hop", "gone");
    add(&f, "keep-alive", "timeout=5");
    add(&f, "proxy-authorization", "Basic x");
    add(&f, "te", "trailers");
    add(&f, "x-forwarded-for", "192.0.2.1");
    add(&f, "x-forwarded-for", "198.51.100.2, 203.0.113.3");
    add(&f, "authorization", "Bearer client");
    add(&f, "x-correlation-id", "corr-7");
    add(&f, "traceparent", good);
    add(&f, "tracestate", "vendor=x");
    add(&f, "accept-encoding", "gzip");
    add(&f, "expect", "100-continue");
    CHECK(pdr_fwd_check_request(&f.req, c, msg, sizeof(msg)) == 0);
    pdr_fwd_t fw;
    CHECK(pdr_fwd_build(&fw, &f.req, c) == 0);
    CHECK(strcmp(fw.request_id, "corr-7") == 0); /* x-request-id absent: the next name of the list */
    CHECK(strcmp(fw.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736") == 0);
    CHECK(line_of(fw.block, "X-Request-Id", v, sizeof(v)) && strcmp(v, "corr-7") == 0);
    CHECK(line_of(fw.block, "X-Custom", v, sizeof(v)) && strcmp(v, "one") == 0);
    CHECK(line_of(fw.block, "user-agent", v, sizeof(v)) && strcmp(v, "ua/1") == 0);
    CHECK(line_of(fw.block, "authorization", v, sizeof(v)) && strcmp(v, "Bearer client") == 0);
    CHECK(line_of(fw.block, "tracestate", v, sizeof(v)) && strcmp(v, "vendor=x") == 0);
    CHECK(line_of(fw.block, "X-Forwarded-For", v, sizeof(v)) &&
          strcmp(v, "192.0.2.1, 198.51.100.2, 203.0.113.3, 10.1.2.3") == 0);
    CHECK(line_of(fw.block, "X-Forwarded-Proto", v, sizeof(v)) && strcmp(v, "http") == 0);
    CHECK(line_of(fw.block, "X-Forwarded-Host", v, sizeof(v)) && strcmp(v, "router.example:8000") == 0);
    static const char *const dropped[] = {
        "connection",      "x-hop",  "keep-alive", "proxy-authorization", "te", "traceparent",
        "accept-encoding", "expect", "host",       "content-length"};
    for (size_t i = 0; i < sizeof(dropped) / sizeof(dropped[0]); i++)
        CHECK(line_of(fw.block, dropped[i], v, sizeof(v)) == NULL);
    CHECK(strstr(fw.block, "\r\n\r\n") == NULL && fw.block[strlen(fw.block) - 1] != '\n');
    /* Each leg: the block and a traceparent of the client's trace with a new parent id of its own. */
    const char *const *l1 = pdr_fwd_leg(&fw);
    CHECK(l1[0] == fw.block && l1[1] != NULL && l1[2] == NULL);
    char tp1[80], tp2[80];
    snprintf(tp1, sizeof(tp1), "%s", l1[1]);
    const char *const *l2 = pdr_fwd_leg(&fw);
    snprintf(tp2, sizeof(tp2), "%s", l2[1]);
    CHECK(strncmp(tp1, "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-", 49) == 0);
    CHECK(strlen(tp1) == 13 + PDR_TRACEPARENT_LEN && strcmp(tp1 + 13 + 52, "-01") == 0);
    CHECK(strncmp(tp1, tp2, 49) == 0 && strcmp(tp1, tp2) != 0);
    CHECK(strncmp(tp1 + 13 + 36, "00f067aa0ba902b7", 16) != 0);
    CHECK(tp_ok(tp1 + 13) && tp_ok(tp2 + 13));
    h2o_mem_clear_pool(&f.req.pool);

    /* A worker key replaces the client's Authorization; an invalid traceparent starts a new trace and its
     * tracestate is dropped; X-Forwarded-Host of the client stays. HTTP/2 cookies become one line. IPv6. */
    c->worker_api_key = strdup("k3y");
    fake_init(&f, 0x200, peer_v6);
    add(&f, "authorization", "Bearer client");
    add(&f, "traceparent", "00-00000000000000000000000000000000-00f067aa0ba902b7-01");
    add(&f, "tracestate", "vendor=x");
    add(&f, "x-forwarded-host", "outer.example");
    add(&f, "cookie", "a=1");
    add(&f, "cookie", "b=2");
    add(&f, "x-request-id", "bad id");
    CHECK(pdr_fwd_build(&fw, &f.req, c) == 0);
    CHECK(strlen(fw.request_id) == 32 && strcmp(fw.request_id, "bad id") != 0);
    CHECK(line_of(fw.block, "Authorization", v, sizeof(v)) && strcmp(v, "Bearer k3y") == 0);
    CHECK(line_of(fw.block, "tracestate", v, sizeof(v)) == NULL);
    CHECK(line_of(fw.block, "x-forwarded-host", v, sizeof(v)) && strcmp(v, "outer.example") == 0);
    CHECK(line_of(fw.block, "Cookie", v, sizeof(v)) && strcmp(v, "a=1; b=2") == 0);
    CHECK(line_of(fw.block, "X-Forwarded-For", v, sizeof(v)) && strcmp(v, "2001:db8::7") == 0);
    CHECK(strlen(fw.trace_id) == 32 && strcmp(fw.trace_id, "00000000000000000000000000000000") != 0);
    l1 = pdr_fwd_leg(&fw);
    CHECK(strncmp(l1[1] + 13, "00-", 3) == 0 && strncmp(l1[1] + 16, fw.trace_id, 32) == 0);
    CHECK(strcmp(l1[1] + 13 + 52, "-01") == 0 && tp_ok(l1[1] + 13));
    h2o_mem_clear_pool(&f.req.pool);
    /* Two traceparent fields: neither is trusted. */
    fake_init(&f, 0x200, peer_v4);
    add(&f, "traceparent", good);
    add(&f, "traceparent", good);
    CHECK(pdr_fwd_build(&fw, &f.req, c) == 0 && strcmp(fw.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736") != 0);
    h2o_mem_clear_pool(&f.req.pool);
    /* request_id_headers order: the first name of the list wins, whatever the order of the fields. */
    fake_init(&f, 0x101, peer_v4);
    add(&f, "x-trace-id", "third");
    add(&f, "x-correlation-id", "second");
    CHECK(pdr_fwd_build(&fw, &f.req, c) == 0 && strcmp(fw.request_id, "second") == 0);
    h2o_mem_clear_pool(&f.req.pool);
    fake_init(&f, 0x101, peer_v4_wide);
    CHECK(pdr_fwd_build(&fw, &f.req, c) == 0);
    CHECK(line_of(fw.block, "X-Forwarded-For", v, sizeof(v)) && strcmp(v, "255.100.0.9") == 0);
    /* New request ids: a fixed prefix per thread and a counter, 32 hex digits. */
    char id1[33], id2[33];
    pdr_fwd_new_request_id(id1);
    pdr_fwd_new_request_id(id2);
    CHECK(strlen(id1) == 32 && strlen(id2) == 32 && memcmp(id1, id2, 16) == 0);
    CHECK(strtoull(id2 + 16, NULL, 16) == strtoull(id1 + 16, NULL, 16) + 1);
    h2o_mem_clear_pool(&f.req.pool);

    /* Limits: max_headers fields, max_header_bytes (name + value + 4 each), the request target, and
     * characters that would split an HTTP/1 request to a worker. */
    c->limits.max_headers = 3;
    c->limits.max_header_bytes = 1024;
    fake_init(&f, 0x200, peer_v4);
    add(&f, "a", "1");
    add(&f, "b", "2");
    add(&f, "c", "3");
    CHECK(pdr_fwd_check_request(&f.req, c, msg, sizeof(msg)) == 0);
    add(&f, "d", "4");
    CHECK(pdr_fwd_check_request(&f.req, c, msg, sizeof(msg)) == 431 && strstr(msg, "limits.max_headers"));
    h2o_mem_clear_pool(&f.req.pool);
    char big[1100];
    memset(big, 'x', sizeof(big) - 1);
    big[1024 - 4 - 1] = '\0'; /* name "n" + value + 4 = 1024: at the limit */
    fake_init(&f, 0x200, peer_v4);
    add(&f, "n", big);
    CHECK(pdr_fwd_check_request(&f.req, c, msg, sizeof(msg)) == 0);
    h2o_mem_clear_pool(&f.req.pool);
    big[1024 - 4 - 1] = 'x';
    big[1024 - 4] = '\0';
    fake_init(&f, 0x200, peer_v4);
    add(&f, "n", big);
    CHECK(pdr_fwd_check_request(&f.req, c, msg, sizeof(msg)) == 431 &&
          strstr(msg, "limits.max_header_bytes"));
    h2o_mem_clear_pool(&f.req.pool);
    fake_init(&f, 0x200, peer_v4);
    f.req.input.path = h2o_iovec_init(big, 1025);
    CHECK(pdr_fwd_check_request(&f.req, c, msg, sizeof(msg)) == 414);
    add(&f, "x-a", "line\r\nInjected: 1");
    f.req.input.path = h2o_iovec_init(H2O_STRLIT("/generate"));
    CHECK(pdr_fwd_check_request(&f.req, c, msg, sizeof(msg)) == 400 && strstr(msg, "value"));
    h2o_mem_clear_pool(&f.req.pool);
    fake_init(&f, 0x200, peer_v4);
    add(&f, "x a", "1");
    CHECK(pdr_fwd_check_request(&f.req, c, msg, sizeof(msg)) == 400 && strstr(msg, "name"));
    h2o_mem_clear_pool(&f.req.pool);
    fake_init(&f, 0x200, peer_v4);
    add(&f, "x-nul", "a");
    f.req.headers.entries[0].value = h2o_iovec_init("a\0b", 3);
    CHECK(pdr_fwd_check_request(&f.req, c, msg, sizeof(msg)) == 400);
    f.req.headers.entries[0].value = h2o_iovec_init("a\tb", 3); /* HTAB is allowed */
    CHECK(pdr_fwd_check_request(&f.req, c, msg, sizeof(msg)) == 0);
    f.req.input.authority = h2o_iovec_init("a\nb", 3);
    CHECK(pdr_fwd_check_request(&f.req, c, msg, sizeof(msg)) == 400);
    h2o_mem_clear_pool(&f.req.pool);
    pdr_config_unref(c);
}

/* Every field Connection names is hop-by-hop (RFC 9110 section 7.6.1), the ones the router writes itself
 * included: a named X-Forwarded-For is not joined, a named X-Forwarded-Host gives way to the router's. HTTP/2
 * requests with connection-specific fields are malformed (RFC 9113 section 8.2.2). */
static void test_connection_named(void)
{
    pdr_config_t *c = pdr_config_new_default();
    CHECK(c != NULL);
    char msg[256], v[512];
    fake_t f;
    pdr_fwd_t fw;
    fake_init(&f, 0x101, peer_v4);
    add(&f, "x-forwarded-for", "192.0.2.1");
    add(&f, "X-Secret-Hop", "1");
    add(&f, "x-forwarded-host", "inner.example");
    add(&f, "X-Kept", "yes");
    add(&f, "connection", "keep-alive, X-Forwarded-For");
    add(&f, "connection", "x-secret-hop,X-FORWARDED-HOST");
    CHECK(pdr_fwd_check_request(&f.req, c, msg, sizeof(msg)) == 0);
    CHECK(pdr_fwd_build(&fw, &f.req, c) == 0);
    CHECK(line_of(fw.block, "X-Secret-Hop", v, sizeof(v)) == NULL);
    CHECK(line_of(fw.block, "X-Forwarded-For", v, sizeof(v)) && strcmp(v, "10.1.2.3") == 0);
    CHECK(line_of(fw.block, "X-Forwarded-Host", v, sizeof(v)) && strcmp(v, "router.example:8000") == 0);
    CHECK(line_of(fw.block, "X-Kept", v, sizeof(v)) && strcmp(v, "yes") == 0);
    CHECK(line_of(fw.block, "connection", v, sizeof(v)) == NULL);
    h2o_mem_clear_pool(&f.req.pool);

    static const char *const banned[][2] = {{"keep-alive", "timeout=5"}, {"proxy-connection", "keep-alive"},
                                            {"connection", "x-a"},       {"transfer-encoding", "chunked"},
                                            {"upgrade", "h2c"},          {"te", "gzip"}};
    for (size_t i = 0; i < sizeof(banned) / sizeof(banned[0]); i++) {
        fake_init(&f, 0x200, peer_v4);
        add(&f, "x-ok", "1");
        add(&f, banned[i][0], banned[i][1]);
        CHECK(pdr_fwd_check_request(&f.req, c, msg, sizeof(msg)) == 400 && strstr(msg, banned[i][0]) &&
              strstr(msg, "connection-specific"));
        h2o_mem_clear_pool(&f.req.pool);
        /* The same fields in HTTP/1 are only dropped. */
        fake_init(&f, 0x101, peer_v4);
        add(&f, banned[i][0], banned[i][1]);
        CHECK(pdr_fwd_check_request(&f.req, c, msg, sizeof(msg)) == 0);
        h2o_mem_clear_pool(&f.req.pool);
    }
    fake_init(&f, 0x200, peer_v4);
    add(&f, "te", "trailers"); /* the one TE value HTTP/2 allows */
    CHECK(pdr_fwd_check_request(&f.req, c, msg, sizeof(msg)) == 0);
    h2o_mem_clear_pool(&f.req.pool);
    pdr_config_unref(c);
}

static const pdr_test_case_t cases[] = {
    {"names", test_names, 60},
    {"connection_named", test_connection_named, 60},
    {"traceparent", test_traceparent, 60},
    {"request_ids", test_request_ids, 60},
    {"forwarded", test_forwarded, 60},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
