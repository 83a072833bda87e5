/*
 * common/util.c helpers. pdr_fmt_u64 and pdr_join2 agree with snprintf (every power-of-ten edge, the
 * largest value, truncation). pdr_random_room: CSPRNG rooms handed out from a per-thread buffer. Every room
 * is below 2^63, 10 000 rooms of one thread are distinct, two threads get different rooms, and a forked child
 * does not replay the parent's buffer (its next rooms differ from the parent's next rooms).
 * pdr_split_hostport: names, IPv4, bracketed and bare IPv6, with and without a port, and each way to
 * get it wrong. pdr_dqueue_t: appends keep the order, and leaving from the tail, the head or the middle
 * keeps head and tail right. pdr_dlink_pop / pdr_dqueue_pop take the first member (a stack, a FIFO) and
 * NULL when empty; pdr_dlink_move / pdr_dqueue_move hand a whole list over, in order, leaving the source
 * empty and the moved members able to leave their new list. pdr_ratelog_take: at most one line a
 * period, the lines refused meanwhile counted on the next.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "runner.h"
#include "dlist.h"
#include "err.h"
#include "ratelog.h"
#include "util.h"

#define N 10000

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void *other_thread(void *arg)
{
    uint64_t *out = arg;
    for (int i = 0; i < 8; i++)
        out[i] = pdr_random_room();
    return NULL;
}

static void formatting(void)
{
    uint64_t vals[64];
    int n = 0;
    vals[n++] = 0;
    vals[n++] = UINT64_MAX;
    for (uint64_t p = 1; n < 62 && p <= UINT64_MAX / 10; p *= 10) {
        vals[n++] = p - 1;
        vals[n++] = p;
    }
    for (int i = 0; i < n; i++) {
        char a[32], b[32];
        size_t k = pdr_fmt_u64(a, vals[i]);
        a[k] = '\0';
        snprintf(b, sizeof(b), "%" PRIu64, vals[i]);
        CHECK(strcmp(a, b) == 0);
    }
    /* Every value below 10^5 (each digit count, odd and even, through the two-digit steps) and a few
     * long ones with every digit. */
    static const uint64_t longs[] = {1234567890123456789u, 9876543210987654321u, 10203040506070809u,
                                     UINT64_MAX - 1, 4611686018427387904u};
    int bad = 0;
    for (uint64_t v = 0; v < 100000 + sizeof(longs) / sizeof(longs[0]); v++) {
        uint64_t x = v < 100000 ? v : longs[v - 100000];
        char a[32], b[32];
        size_t k = pdr_fmt_u64(a, x);
        a[k] = '\0';
        snprintf(b, sizeof(b), "%" PRIu64, x);
        bad += strcmp(a, b) != 0;
    }
    CHECK(bad == 0);
    /* Each bit length's edges (the digit count starts from the bit length). */
    for (int b = 1; b <= 64; b++) {
        uint64_t top = b == 64 ? UINT64_MAX : (1ull << b) - 1;
        uint64_t edge[3] = {top, top >> 1, (top >> 1) + 1};
        for (int e = 0; e < 3; e++) {
            char a[32], c[32];
            size_t k = pdr_fmt_u64(a, edge[e]);
            a[k] = '\0';
            snprintf(c, sizeof(c), "%" PRIu64, edge[e]);
            bad += strcmp(a, c) != 0;
        }
    }
    CHECK(bad == 0);
    /* pdr_hex against printf's, every length to 40 (the four-byte steps and the rest), every byte value. */
    uint8_t raw[40];
    for (int rep = 0; rep < 64; rep++) {
        for (size_t i = 0; i < sizeof(raw); i++)
            raw[i] = (uint8_t)(rep * 40 + (int)i * 7);
        for (size_t len = 0; len <= sizeof(raw); len++) {
            char h[2 * sizeof(raw) + 1], want[2 * sizeof(raw) + 1];
            memset(h, 'x', sizeof(h));
            pdr_hex(raw, len, h);
            for (size_t i = 0; i < len; i++)
                snprintf(want + 2 * i, 3, "%02x", raw[i]);
            want[2 * len] = '\0';
            bad += strcmp(h, want) != 0;
        }
    }
    CHECK(bad == 0);
    char out[16];
    CHECK(pdr_join2(out, sizeof(out), "http://h:1", "/generate") == 15 &&
          strcmp(out, "http://h:1/gene") == 0);
    CHECK(pdr_join2(out, sizeof(out), "ab", "cd") == 4 && strcmp(out, "abcd") == 0);
    CHECK(pdr_join2(out, 3, "abcdef", "x") == 2 && strcmp(out, "ab") == 0);
    CHECK(pdr_join2(out, 1, "a", "b") == 0 && out[0] == '\0');
}

static void hostport_case(const char *in, int rc, const char *host, const char *port, int v6, int bad)
{
    pdr_hostport_t hp;
    int r = pdr_split_hostport(in, strlen(in), &hp);
    CHECK(r == rc);
    if (r != 0) {
        CHECK(hp.bad == bad);
        return;
    }
    CHECK(hp.hlen == strlen(host) && memcmp(hp.host, host, hp.hlen) == 0);
    CHECK(port == NULL ? hp.port == NULL
                       : hp.port != NULL && hp.plen == strlen(port) && memcmp(hp.port, port, hp.plen) == 0);
    CHECK(hp.ipv6 == v6);
    CHECK(hp.bracketed == (in[0] == '['));
}

static void hostport(void)
{
    hostport_case("example.com", 0, "example.com", NULL, 0, 0);
    hostport_case("example.com:8000", 0, "example.com", "8000", 0, 0);
    hostport_case("10.0.0.1:53", 0, "10.0.0.1", "53", 0, 0);
    hostport_case("10.0.0.1:", 0, "10.0.0.1", "", 0, 0);
    hostport_case("[::1]", 0, "::1", NULL, 1, 0);
    hostport_case("[::1]:30001", 0, "::1", "30001", 1, 0);
    hostport_case("[fe80::1%eth0]:1", 0, "fe80::1%eth0", "1", 1, 0);
    hostport_case("::1", 0, "::1", NULL, 1, 0);
    hostport_case("2001:db8::5:53", 0, "2001:db8::5:53", NULL, 1, 0);
    hostport_case("[::1", PDR_EINVAL, NULL, NULL, 0, PDR_HOSTPORT_NO_CLOSE);
    hostport_case("[::1]x", PDR_EINVAL, NULL, NULL, 0, PDR_HOSTPORT_AFTER_CLOSE);
    hostport_case("[::1]]:80", PDR_EINVAL, NULL, NULL, 0, PDR_HOSTPORT_AFTER_CLOSE);
    hostport_case("[]:80", PDR_EINVAL, NULL, NULL, 0, PDR_HOSTPORT_EMPTY);
    hostport_case(":80", PDR_EINVAL, NULL, NULL, 0, PDR_HOSTPORT_EMPTY);
    hostport_case("", PDR_EINVAL, NULL, NULL, 0, PDR_HOSTPORT_EMPTY);
    /* Only the given span is read. */
    pdr_hostport_t hp;
    CHECK(pdr_split_hostport("[::1]:80/path", 8, &hp) == 0 && hp.plen == 2);
    char buf[8];
    CHECK(pdr_host_copy("[::1]", 5, buf, sizeof(buf)) == 0 && strcmp(buf, "::1") == 0);
    CHECK(pdr_host_copy("verylonghost", 12, buf, sizeof(buf)) == PDR_EINVAL);
}

static void dqueue(void)
{
    pdr_dlink_t l[4] = {{0}};
    pdr_dqueue_t q = {0};
    for (int i = 0; i < 3; i++)
        pdr_dqueue_append(&q, &l[i]);
    CHECK(q.head == &l[0] && q.tail == &l[2] && l[0].next == &l[1] && l[1].next == &l[2] &&
          l[2].next == NULL);
    pdr_dqueue_unlink(&q, &l[2]); /* the tail */
    CHECK(q.tail == &l[1] && l[1].next == NULL && !pdr_dlink_linked(&l[2]));
    pdr_dqueue_append(&q, &l[3]);
    CHECK(q.tail == &l[3] && l[1].next == &l[3]);
    pdr_dqueue_unlink(&q, &l[1]); /* the middle */
    CHECK(q.head == &l[0] && l[0].next == &l[3] && q.tail == &l[3]);
    pdr_dqueue_unlink(&q, &l[0]); /* the head */
    CHECK(q.head == &l[3] && q.tail == &l[3]);
    pdr_dqueue_unlink(&q, &l[3]);
    pdr_dqueue_unlink(&q, &l[3]); /* twice: a no-op */
    CHECK(q.head == NULL && q.tail == NULL);
    pdr_dqueue_append(&q, &l[2]);
    CHECK(q.head == &l[2] && q.tail == &l[2] && l[2].prev == &q.head);
}

static void dlist_pop_move(void)
{
    pdr_dlink_t l[4] = {{0}};
    pdr_dlink_t *stack = NULL, *taken = NULL;
    CHECK(pdr_dlink_pop(&stack) == NULL);
    for (int i = 0; i < 3; i++)
        pdr_dlink_push(&stack, &l[i]);
    pdr_dlink_move(&taken, &stack);
    CHECK(stack == NULL && taken == &l[2] && l[2].prev == &taken);
    pdr_dlink_push(&stack, &l[3]); /* the source is usable again, apart from what was taken */
    CHECK(stack == &l[3] && l[3].next == NULL);
    pdr_dlink_unlink(&l[1]); /* a moved member leaves its new list */
    CHECK(l[2].next == &l[0] && l[0].prev == &l[2].next);
    CHECK(pdr_dlink_pop(&taken) == &l[2] && !pdr_dlink_linked(&l[2]) && taken == &l[0]);
    CHECK(pdr_dlink_pop(&taken) == &l[0] && taken == NULL && pdr_dlink_pop(&taken) == NULL);
    pdr_dlink_t *empty = NULL;
    pdr_dlink_move(&taken, &empty);
    CHECK(taken == NULL);

    pdr_dlink_t m[4] = {{0}};
    pdr_dqueue_t q = {0}, got = {0};
    CHECK(pdr_dqueue_pop(&q) == NULL);
    for (int i = 0; i < 3; i++)
        pdr_dqueue_append(&q, &m[i]);
    pdr_dqueue_move(&got, &q);
    CHECK(q.head == NULL && q.tail == NULL && got.head == &m[0] && got.tail == &m[2] &&
          m[0].prev == &got.head);
    pdr_dqueue_append(&q, &m[3]);
    CHECK(q.head == &m[3] && q.tail == &m[3] && got.tail == &m[2] && m[2].next == NULL);
    CHECK(pdr_dqueue_pop(&got) == &m[0] && got.head == &m[1] && m[1].prev == &got.head);
    pdr_dqueue_unlink(&got, &m[2]);
    CHECK(got.tail == &m[1]);
    CHECK(pdr_dqueue_pop(&got) == &m[1] && got.head == NULL && got.tail == NULL);
    CHECK(pdr_dqueue_pop(&got) == NULL);
    pdr_dqueue_t none = {0};
    pdr_dqueue_move(&got, &none);
    CHECK(got.head == NULL && got.tail == NULL);
}

static void test_random_room(void)
{
    static uint64_t r[N + 16];
    for (int i = 0; i < N; i++) {
        r[i] = pdr_random_room();
        CHECK(r[i] <= INT64_MAX);
    }
    pthread_t t;
    CHECK(pthread_create(&t, NULL, other_thread, r + N) == 0);
    pthread_join(t, NULL);
    qsort(r, N + 8, sizeof(r[0]), cmp_u64);
    int dup = 0;
    for (int i = 1; i < N + 8; i++)
        dup += r[i] == r[i - 1];
    CHECK(dup == 0);

    /* Fork with rooms left in this thread's buffer: the child's next rooms are its own. */
    (void)pdr_random_room();
    int p[2];
    CHECK(pipe(p) == 0);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        uint64_t mine[4];
        for (int i = 0; i < 4; i++)
            mine[i] = pdr_random_room();
        _exit(write(p[1], mine, sizeof(mine)) == (ssize_t)sizeof(mine) ? 0 : 1);
    }
    uint64_t theirs[4], ours[4];
    for (int i = 0; i < 4; i++)
        ours[i] = pdr_random_room();
    CHECK(read(p[0], theirs, sizeof(theirs)) == (ssize_t)sizeof(theirs));
    int st = 0;
    waitpid(child, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    int same = 0;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            same += ours[i] == theirs[j];
    CHECK(same == 0);
}

/* pdr_ratelog_take: one line a period; the refused ones counted and handed to the next line written. */
static void ratelog(void)
{
    pdr_ratelog_t rl = PDR_RATELOG_INIT;
    uint64_t sup = 99, s = 1000000000ull;
    CHECK(pdr_ratelog_take(&rl, 5 * s, 60 * s, &sup) == 1 && sup == 0);
    CHECK(pdr_ratelog_take(&rl, 5 * s, 60 * s, &sup) == 0);
    CHECK(pdr_ratelog_take(&rl, 64 * s, 60 * s, &sup) == 0);
    CHECK(pdr_ratelog_take(&rl, 65 * s, 60 * s, &sup) == 1 && sup == 2);
    CHECK(pdr_ratelog_take(&rl, 124 * s, 60 * s, &sup) == 0);
    CHECK(pdr_ratelog_take(&rl, 500 * s, 60 * s, &sup) == 1 && sup == 1);
}

static const pdr_test_case_t cases[] = {
    {"hostport", hostport, 60},
    {"dqueue", dqueue, 60},
    {"dlist_pop_move", dlist_pop_move, 60},
    {"formatting", formatting, 60},
    {"random_room", test_random_room, 60},
    {"ratelog", ratelog, 60},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
