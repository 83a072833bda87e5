/*
 * Unit test of router/discovery/discovery_dns.c's pure parts, reached by including the source: the address
 * set (sort, de-duplication, comparison), worker formatting, the resolver override's parser, DNS answer
 * parsing on hand-built messages, and publish()'s emit-on-change rule. No network.
 */
#include "../../router/discovery/discovery_dns.c"
#include "check.h"
#include "runner.h"

static struct dns_addr v4(const char *s)
{
    struct dns_addr a;
    memset(&a, 0, sizeof(a));
    a.family = AF_INET;
    inet_pton(AF_INET, s, a.bytes);
    return a;
}

static struct dns_addr v6(const char *s)
{
    struct dns_addr a;
    memset(&a, 0, sizeof(a));
    a.family = AF_INET6;
    inet_pton(AF_INET6, s, a.bytes);
    return a;
}

static void test_set(void)
{
    struct dns_addr v[] = {v6("fd00::2"), v4("10.0.0.9"), v4("10.0.0.10"),
                           v6("fd00::1"), v4("10.0.0.9"), v4("9.255.255.255")};
    size_t n = set_normalize(v, sizeof(v) / sizeof(v[0]));
    CHECK(n == 5);
    struct dns_addr want[] = {v4("9.255.255.255"), v4("10.0.0.9"), v4("10.0.0.10"), v6("fd00::1"),
                              v6("fd00::2")};
    CHECK(set_equal(v, n, want, 5));
    CHECK(!set_equal(v, n, want, 4));
    CHECK(!set_equal(v, 2, want + 1, 2));
    CHECK(set_equal(NULL, 0, NULL, 0));
    CHECK(set_normalize(v, 1) == 1 && set_normalize(v, 0) == 0);

    pdr_discovered_t w;
    struct dns_role r = {.port = 30000, .bootstrap_port = 8998};
    format_worker(&want[1], &r, &w);
    CHECK(strcmp(w.url, "http://10.0.0.9:30000") == 0);
    CHECK(strcmp(w.name, "10.0.0.9") == 0);
    CHECK(w.bootstrap_port == 8998);
    r = (struct dns_role){.port = 1, .bootstrap_port = -1};
    format_worker(&want[3], &r, &w);
    CHECK(strcmp(w.url, "http://[fd00::1]:1") == 0);
    CHECK(strcmp(w.name, "fd00::1") == 0);
    CHECK(w.bootstrap_port == -1);
    r.https = 1; /* scheme: https */
    format_worker(&want[3], &r, &w);
    CHECK(strcmp(w.url, "https://[fd00::1]:1") == 0);
    format_worker(&want[1], &r, &w);
    CHECK(strcmp(w.url, "https://10.0.0.9:1") == 0);
}

static void test_resolver(void)
{
    struct sockaddr_in6 sa;
    struct sockaddr_in *sin = (struct sockaddr_in *)(void *)&sa;
    CHECK(parse_resolver("127.0.0.1:5353", &sa) == 0);
    CHECK(sin->sin_family == AF_INET && ntohs(sin->sin_port) == 5353 &&
          ntohl(sin->sin_addr.s_addr) == 0x7f000001);
    CHECK(parse_resolver("10.0.0.1", &sa) == 0 && sin->sin_family == AF_INET && ntohs(sin->sin_port) == 53);
    CHECK(parse_resolver("[::1]:5353", &sa) == 0);
    CHECK(sa.sin6_family == AF_INET6 && ntohs(sa.sin6_port) == 5353 && IN6_IS_ADDR_LOOPBACK(&sa.sin6_addr));
    CHECK(parse_resolver("[fd00::1]", &sa) == 0 && sa.sin6_family == AF_INET6 && ntohs(sa.sin6_port) == 53);
    CHECK(parse_resolver("fd00::1", &sa) == 0 && sa.sin6_family == AF_INET6 && ntohs(sa.sin6_port) == 53);
    static const char *const bad[] = {"",       "localhost", "1.2.3.4:", "1.2.3.4:0", "1.2.3.4:65536", "[::1",
                                      "[::1]x", "[::1]:",    "[]:53",    "1.2.3:53",  "[1.2.3.4]:53"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (parse_resolver(bad[i], &sa) == 0) {
            fprintf(stderr, "resolver '%s' accepted\n", bad[i]);
            check_failures++;
        }
}

/* A response to a query for "p.test": header, question, then the records added with add_rr. */
struct msg {
    unsigned char b[1024];
    size_t n;
};

static void put16(struct msg *m, unsigned v)
{
    m->b[m->n++] = (unsigned char)(v >> 8);
    m->b[m->n++] = (unsigned char)v;
}

static void msg_init(struct msg *m, unsigned ancount)
{
    static const unsigned char qname[] = {1, 'p', 4, 't', 'e', 's', 't', 0};
    m->n = 0;
    put16(m, 0x1234);
    put16(m, 0x8180); /* response, RD, RA, NOERROR */
    put16(m, 1);
    put16(m, ancount);
    put16(m, 0);
    put16(m, 0);
    memcpy(m->b + m->n, qname, sizeof(qname));
    m->n += sizeof(qname);
    put16(m, ns_t_a);
    put16(m, ns_c_in);
}

static void add_rr(struct msg *m, unsigned type, unsigned cls, const void *rdata, unsigned rdlen)
{
    put16(m, 0xc00c); /* owner: pointer to the question's name */
    put16(m, type);
    put16(m, cls);
    put16(m, 0);
    put16(m, 30); /* TTL */
    put16(m, rdlen);
    memcpy(m->b + m->n, rdata, rdlen);
    m->n += rdlen;
}

static void test_answer(void)
{
    struct dns_addr buf[8];
    struct dns_set set = {buf, 0};
    struct msg m;
    unsigned char a1[4] = {10, 0, 0, 2}, a2[4] = {10, 0, 0, 1}, aaaa[16] = {0xfd, 0, [15] = 5};
    static const unsigned char cname[] = {1, 'x', 4, 't', 'e', 's', 't', 0};

    /* A CNAME, two A records, one of another class: the two A records are taken. */
    msg_init(&m, 4);
    add_rr(&m, ns_t_cname, ns_c_in, cname, sizeof(cname));
    add_rr(&m, ns_t_a, ns_c_in, a1, 4);
    add_rr(&m, ns_t_a, ns_c_chaos, a2, 4);
    add_rr(&m, ns_t_a, ns_c_in, a2, 4);
    CHECK(parse_answer(m.b, (int)m.n, ns_t_a, &set) == 0);
    CHECK(set.n == 2);
    /* The AAAA answer adds to the same set. */
    msg_init(&m, 1);
    add_rr(&m, ns_t_aaaa, ns_c_in, aaaa, 16);
    CHECK(parse_answer(m.b, (int)m.n, ns_t_aaaa, &set) == 0);
    CHECK(set.n == 3);
    set.n = set_normalize(set.v, set.n);
    struct dns_addr want[] = {v4("10.0.0.1"), v4("10.0.0.2"), v6("fd00::5")};
    CHECK(set_equal(set.v, set.n, want, 3));

    /* Malformed: an A record of 3 bytes; a message cut short; ancount larger than the records. */
    set.n = 0;
    msg_init(&m, 1);
    add_rr(&m, ns_t_a, ns_c_in, a1, 3);
    CHECK(parse_answer(m.b, (int)m.n, ns_t_a, &set) == -1);
    msg_init(&m, 1);
    add_rr(&m, ns_t_a, ns_c_in, a1, 4);
    CHECK(parse_answer(m.b, (int)m.n - 2, ns_t_a, &set) == -1);
    msg_init(&m, 2);
    add_rr(&m, ns_t_a, ns_c_in, a1, 4);
    CHECK(parse_answer(m.b, (int)m.n, ns_t_a, &set) == -1);
    CHECK(parse_answer(m.b, 5, ns_t_a, &set) == -1);
}

static struct {
    int calls;
    pdr_role_t role;
    size_t n;
    pdr_discovered_t list[4];
} got;

static void record(void *ud, const char *source, pdr_role_t role, const pdr_discovered_t *list, size_t n)
{
    CHECK(ud == &got);
    CHECK(strcmp(source, "dns") == 0);
    got.calls++;
    got.role = role;
    got.n = n;
    memcpy(got.list, list, (n < 4 ? n : 4) * sizeof(*list));
}

static void test_publish(void)
{
    dns_source_t s;
    memset(&s, 0, sizeof(s));
    s.cb = record;
    s.ud = &got;
    s.roles[PDR_ROLE_DECODE] = (struct dns_role){.name = "d.test", .port = 30001, .bootstrap_port = -1};
    struct dns_addr v[2];
    struct dns_set set = {v, 0};

    /* The first complete answer is emitted even when empty; the same empty set is not emitted again. */
    publish(&s, PDR_ROLE_DECODE, &set);
    CHECK(got.calls == 1 && got.role == PDR_ROLE_DECODE && got.n == 0);
    publish(&s, PDR_ROLE_DECODE, &set);
    CHECK(got.calls == 1);
    v[0] = v4("10.0.0.1");
    v[1] = v6("::1");
    set.n = 2;
    publish(&s, PDR_ROLE_DECODE, &set);
    CHECK(got.calls == 2 && got.n == 2);
    CHECK(strcmp(got.list[0].url, "http://10.0.0.1:30001") == 0);
    CHECK(strcmp(got.list[1].url, "http://[::1]:30001") == 0);
    CHECK(got.list[1].bootstrap_port == -1);
    publish(&s, PDR_ROLE_DECODE, &set);
    CHECK(got.calls == 2);
    set.n = 1;
    publish(&s, PDR_ROLE_DECODE, &set);
    CHECK(got.calls == 3 && got.n == 1);
    free(s.roles[PDR_ROLE_DECODE].last);
}

/* Opening and closing the resolver without a query frees everything (LeakSanitizer checks it). */
static void test_resolver_lifecycle(void)
{
    static const char *const servers[] = {"127.0.0.1:5353", "[::1]:5353", NULL};
    for (size_t i = 0; i < sizeof(servers) / sizeof(servers[0]); i++) {
        dns_source_t s;
        char why[256];
        memset(&s, 0, sizeof(s));
        if (servers[i] != NULL) {
            CHECK(parse_resolver(servers[i], &s.server) == 0);
            s.has_server = 1;
        }
        if (resolver_open(&s, why, sizeof(why)) != 0)
            continue; /* no usable resolv.conf here: nothing was allocated */
        CHECK(s.res.retrans == PDR_DNS_QUERY_TIMEOUT_S && s.res.retry == 1);
        if (servers[i] != NULL) {
            CHECK(s.res.nscount == 1);
            CHECK(i == 0 ? s.res.nsaddr_list[0].sin_family == AF_INET &&
                               ntohs(s.res.nsaddr_list[0].sin_port) == 5353
                         : s.res.nsaddr_list[0].sin_family == 0 && s.res._u._ext.nsaddrs[0] != NULL &&
                               ntohs(s.res._u._ext.nsaddrs[0]->sin6_port) == 5353);
        }
        resolver_close(&s);
    }
}

static const pdr_test_case_t cases[] = {
    {"set", test_set, 60},
    {"resolver", test_resolver, 60},
    {"answer", test_answer, 60},
    {"publish", test_publish, 60},
    {"resolver_lifecycle", test_resolver_lifecycle, 60},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
