/*
 * DNS discovery against a real DNS server: dnsmasq on a loopback port, answering for the "test" domain
 * from a hosts file that the test rewrites (and reloads with SIGHUP). The source runs with interval_ms
 * 100 and discovery.dns.resolver pointing at dnsmasq. Checked, in order:
 *   1. both roles' first sets: A and AAAA records, sorted, URLs and bootstrap ports as the config says;
 *   2. a changed set is emitted whole; the other role, unchanged, is not emitted again;
 *   3. a name that is gone (NXDOMAIN) empties its role;
 *   4. with the server dead nothing is emitted (a failure is not "no workers");
 *   5. pdr_discovery_stop returns within 1 s and no callback runs after it.
 * argv[1] "ipv4" (resolver 127.0.0.1:P) or "ipv6" (resolver [::1]:P); further arguments name cases.
 * Steps 1 to 5 are one case, "dns_sets": each starts from the sets and the server the step before left.
 * Every case exits 77 (skipped) without dnsmasq, or without ::1 for "ipv6", so the test is skipped.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "../unit/check.h"
#include "../unit/runner.h"
#include "config.h"
#include "discovery.h"

#define MAX_SET 8

/* What the emit callback saw, per role. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int emits[2];
    size_t n[2];
    char urls[2][MAX_SET][256];
    int bad; /* a callback broke the contract */
} seen = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {0, 0}, {0, 0}, {{{0}}}, 0};

static void on_emit(void *ud, const char *source, pdr_role_t role, const pdr_discovered_t *list, size_t n)
{
    (void)ud;
    pthread_mutex_lock(&seen.mu);
    if (strcmp(source, "dns") != 0 || (unsigned)role > 1 || n > MAX_SET) {
        seen.bad++;
    } else {
        for (size_t i = 0; i < n; i++) {
            /* name is the bare address; the url brackets it when it is IPv6. */
            char want[300];
            if (strchr(list[i].name, ':') != NULL)
                snprintf(want, sizeof(want), "http://[%s]:%d", list[i].name,
                         role == PDR_ROLE_PREFILL ? 30000 : 30001);
            else
                snprintf(want, sizeof(want), "http://%s:%d", list[i].name,
                         role == PDR_ROLE_PREFILL ? 30000 : 30001);
            if (strcmp(want, list[i].url) != 0 ||
                list[i].bootstrap_port != (role == PDR_ROLE_PREFILL ? 8998 : -1)) {
                fprintf(stderr, "bad worker: url %s name %s bootstrap %d\n", list[i].url, list[i].name,
                        list[i].bootstrap_port);
                seen.bad++;
            }
            snprintf(seen.urls[role][i], sizeof(seen.urls[role][i]), "%s", list[i].url);
        }
        seen.n[role] = n;
        seen.emits[role]++;
    }
    pthread_cond_broadcast(&seen.cv);
    pthread_mutex_unlock(&seen.mu);
}

static int set_is(pdr_role_t role, const char *const *want, size_t n)
{
    if (seen.emits[role] == 0 || seen.n[role] != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(seen.urls[role][i], want[i]) != 0)
            return 0;
    return 1;
}

static void deadline_in(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* Waits (condition variable, with a deadline) until role's last emitted set is want. */
static int wait_set(int line, pdr_role_t role, const char *const *want, size_t n, int timeout_ms)
{
    struct timespec dl;
    deadline_in(&dl, timeout_ms);
    pthread_mutex_lock(&seen.mu);
    int rc = 0;
    while (!set_is(role, want, n) && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&seen.cv, &seen.mu, &dl);
    int ok = set_is(role, want, n);
    if (!ok) {
        fprintf(stderr, "%s:%d: role %d: timed out; last set (%d emits):\n", __FILE__, line, (int)role,
                seen.emits[role]);
        for (size_t i = 0; i < seen.n[role]; i++)
            fprintf(stderr, "  %s\n", seen.urls[role][i]);
        check_failures++;
    }
    pthread_mutex_unlock(&seen.mu);
    return ok;
}
#define WAIT_SET(role, ...)                                                                                  \
    do {                                                                                                     \
        static const char *const want_[] = {__VA_ARGS__};                                                    \
        wait_set(__LINE__, role, want_, sizeof(want_) / sizeof(want_[0]), 10000);                            \
    } while (0)

static char dir[] = "/tmp/pdr_test_dns.XXXXXX";
static char hosts[300];
static pid_t dnsmasq = -1;

static void write_hosts(const char *text)
{
    char tmp[320];
    snprintf(tmp, sizeof(tmp), "%s.new", hosts);
    FILE *f = fopen(tmp, "w");
    if (f == NULL || fputs(text, f) < 0 || fclose(f) != 0 || rename(tmp, hosts) != 0) {
        perror(hosts);
        exit(1);
    }
}

static const char *find_dnsmasq(void)
{
    static const char *const paths[] = {"/usr/sbin/dnsmasq", "/usr/bin/dnsmasq", "/sbin/dnsmasq"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
        if (access(paths[i], X_OK) == 0)
            return paths[i];
    return NULL;
}

/* addr:port as a sockaddr of family; returns its length. */
static socklen_t make_addr(int family, const char *addr, int port, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof(*ss));
    if (family == AF_INET) {
        struct sockaddr_in *sin = (struct sockaddr_in *)ss;
        sin->sin_family = AF_INET;
        sin->sin_port = htons((uint16_t)port);
        inet_pton(AF_INET, addr, &sin->sin_addr);
        return sizeof(*sin);
    }
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons((uint16_t)port);
    inet_pton(AF_INET6, addr, &sin6->sin6_addr);
    return sizeof(*sin6);
}

/* A port free for both UDP and TCP on addr (dnsmasq takes both); 0 when none was found. */
static int free_port(int family, const char *addr)
{
    for (int attempt = 0; attempt < 20; attempt++) {
        struct sockaddr_storage ss;
        socklen_t sl = make_addr(family, addr, 0, &ss);
        int u = socket(family, SOCK_DGRAM, 0), t = socket(family, SOCK_STREAM, 0);
        int port = 0;
        if (u >= 0 && t >= 0 && bind(u, (struct sockaddr *)&ss, sl) == 0 &&
            getsockname(u, (struct sockaddr *)&ss, &sl) == 0 && bind(t, (struct sockaddr *)&ss, sl) == 0)
            port = ntohs(family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                           : ((struct sockaddr_in6 *)&ss)->sin6_port);
        if (u >= 0)
            close(u);
        if (t >= 0)
            close(t);
        if (port != 0)
            return port;
    }
    return 0;
}

/* True once something accepts TCP connections at addr:port (dnsmasq listens on TCP and UDP). */
static int tcp_up(int family, const char *addr, int port)
{
    struct sockaddr_storage ss;
    socklen_t sl = make_addr(family, addr, port, &ss);
    int fd = socket(family, SOCK_STREAM, 0);
    int ok = fd >= 0 && connect(fd, (struct sockaddr *)&ss, sl) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* Starts dnsmasq on addr and a free port; returns the port (0: could not). */
static int start_dnsmasq(const char *bin, int family, const char *addr)
{
    for (int attempt = 0; attempt < 5; attempt++) {
        int port = free_port(family, addr);
        if (port == 0)
            return 0;
        char a_port[32], a_listen[80], a_hosts[340];
        snprintf(a_port, sizeof(a_port), "--port=%d", port);
        snprintf(a_listen, sizeof(a_listen), "--listen-address=%s", addr);
        snprintf(a_hosts, sizeof(a_hosts), "--addn-hosts=%s", hosts);
        /* --local=/test/: answer the test domain from the hosts file alone (NXDOMAIN for other names in
         * it). As root, stay root: the default "nobody" could not read the test's private directory. */
        const char *argv[] = {bin,
                              "--no-daemon",
                              "--conf-file=/dev/null",
                              a_port,
                              a_listen,
                              "--bind-interfaces",
                              "--no-resolv",
                              "--no-hosts",
                              a_hosts,
                              "--local=/test/",
                              "--pid-file",
                              "--log-facility=-",
                              geteuid() == 0 ? "--user=root" : NULL,
                              NULL};
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 0;
        }
        if (pid == 0) {
            execv(bin, (char *const *)argv);
            _exit(127);
        }
        /* Poll until it listens or exits: dnsmasq gives no other readiness signal. */
        for (int i = 0; i < 500; i++) {
            int status;
            if (waitpid(pid, &status, WNOHANG) == pid)
                break;
            if (tcp_up(family, addr, port)) {
                dnsmasq = pid;
                return port;
            }
            struct timespec ts = {0, 10 * 1000000L};
            nanosleep(&ts, NULL);
        }
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fprintf(stderr, "dnsmasq did not start on port %d, trying another\n", port);
    }
    return 0;
}

static int ipv6_loopback(void)
{
    int fd = socket(AF_INET6, SOCK_DGRAM, 0);
    struct sockaddr_in6 sin6;
    memset(&sin6, 0, sizeof(sin6));
    sin6.sin6_family = AF_INET6;
    sin6.sin6_addr = in6addr_loopback;
    int ok = fd >= 0 && bind(fd, (struct sockaddr *)&sin6, sizeof(sin6)) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The address family every case uses: argv[1], read by main before the cases run. */
static int v6;

/* dnsmasq's path; exits 77 (the case is skipped) without it, or without ::1 for IPv6. */
static const char *need_dnsmasq(void)
{
    const char *bin = find_dnsmasq();
    if (bin == NULL) {
        fprintf(stderr, "dnsmasq not installed (Debian: dnsmasq-base); skipped\n");
        exit(77);
    }
    if (v6 && !ipv6_loopback()) {
        fprintf(stderr, "no IPv6 loopback; skipped\n");
        exit(77);
    }
    return bin;
}

static void setup(void)
{
    signal(SIGPIPE, SIG_IGN);
    pthread_condattr_t ca; /* deadlines are on the monotonic clock */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_destroy(&seen.cv);
    pthread_cond_init(&seen.cv, &ca);
    pthread_condattr_destroy(&ca);
}

static void test_dns_sets(void)
{
    const char *bin = need_dnsmasq();
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        exit(1);
    }
    snprintf(hosts, sizeof(hosts), "%s/hosts", dir);
    write_hosts(
        "127.0.0.2 prefill.test\n127.0.0.3 prefill.test\n127.0.0.4 decode.test\nfd00::5 decode.test\n");
    const char *addr = v6 ? "::1" : "127.0.0.1";
    int port = start_dnsmasq(bin, v6 ? AF_INET6 : AF_INET, addr);
    if (port == 0) {
        fprintf(stderr, "cannot start %s\n", bin);
        exit(1);
    }

    char yaml[512], err[512];
    snprintf(yaml, sizeof(yaml),
             "discovery:\n"
             "  dns:\n"
             "    interval_ms: 100\n"
             "    resolver: \"%s%s%s:%d\"\n"
             "    prefill: { name: prefill.test, port: 30000 }\n"
             "    decode: { name: decode.test., port: 30001 }\n",
             v6 ? "[" : "", addr, v6 ? "]" : "", port);
    pdr_config_t *c = pdr_config_load_string(yaml, strlen(yaml), "dns.yaml", err, sizeof(err));
    if (c == NULL) {
        fprintf(stderr, "config: %s\n", err);
        kill(dnsmasq, SIGKILL);
        exit(1);
    }
    pdr_discovery_t *d = pdr_dns_discovery_start(&c->discovery, NULL, on_emit, NULL, err, sizeof(err));
    CHECK(d != NULL);
    if (d == NULL) {
        fprintf(stderr, "start: %s\n", err);
        kill(dnsmasq, SIGKILL);
        pdr_config_unref(c);
        exit(1);
    }

    /* 1. First sets; AAAA after A (IPv4 sorts first). */
    WAIT_SET(PDR_ROLE_PREFILL, "http://127.0.0.2:30000", "http://127.0.0.3:30000");
    WAIT_SET(PDR_ROLE_DECODE, "http://127.0.0.4:30001", "http://[fd00::5]:30001");

    /* 2. One address out, one in; the decode set stays and is not emitted again. */
    pthread_mutex_lock(&seen.mu);
    int decode_emits = seen.emits[PDR_ROLE_DECODE], prefill_emits = seen.emits[PDR_ROLE_PREFILL];
    pthread_mutex_unlock(&seen.mu);
    CHECK(decode_emits == 1 && prefill_emits == 1);
    write_hosts(
        "127.0.0.9 prefill.test\n127.0.0.3 prefill.test\n127.0.0.4 decode.test\nfd00::5 decode.test\n");
    CHECK(kill(dnsmasq, SIGHUP) == 0);
    WAIT_SET(PDR_ROLE_PREFILL, "http://127.0.0.3:30000", "http://127.0.0.9:30000");

    /* 3. The name is gone: NXDOMAIN is an empty set. */
    write_hosts("127.0.0.4 decode.test\nfd00::5 decode.test\n");
    CHECK(kill(dnsmasq, SIGHUP) == 0);
    wait_set(__LINE__, PDR_ROLE_PREFILL, NULL, 0, 10000);
    pthread_mutex_lock(&seen.mu);
    CHECK(seen.emits[PDR_ROLE_DECODE] == decode_emits);
    CHECK(seen.emits[PDR_ROLE_PREFILL] == prefill_emits + 2);
    pthread_mutex_unlock(&seen.mu);

    /* 4. Server down: no emit for ten intervals; the last sets stand. Waiting is the assertion here. */
    kill(dnsmasq, SIGKILL);
    waitpid(dnsmasq, NULL, 0);
    dnsmasq = -1;
    pthread_mutex_lock(&seen.mu);
    int before[2] = {seen.emits[0], seen.emits[1]};
    struct timespec dl;
    deadline_in(&dl, 1000);
    while (pthread_cond_timedwait(&seen.cv, &seen.mu, &dl) != ETIMEDOUT) {
    }
    CHECK(seen.emits[0] == before[0] && seen.emits[1] == before[1]);
    CHECK(seen.n[PDR_ROLE_DECODE] == 2);
    pthread_mutex_unlock(&seen.mu);

    /* 5. Stop is prompt; nothing runs after it. */
    uint64_t t0 = now_ms();
    pdr_discovery_stop(d);
    uint64_t took = now_ms() - t0;
    if (took >= 1000) {
        fprintf(stderr, "pdr_discovery_stop took %llu ms\n", (unsigned long long)took);
        check_failures++;
    }
    pthread_mutex_lock(&seen.mu);
    CHECK(seen.emits[0] == before[0] && seen.emits[1] == before[1]);
    CHECK(seen.bad == 0);
    pthread_mutex_unlock(&seen.mu);
    pdr_config_unref(c);

    unlink(hosts);
    rmdir(dir);
    if (check_failures) {
        fprintf(stderr, "test_dns_discovery: %d check(s) failed\n", check_failures);
        exit(1);
    }
    printf("test_dns_discovery %s: all checks passed (stop took %llu ms)\n", v6 ? "ipv6" : "ipv4",
           (unsigned long long)took);
}

/* Nothing to do: no source, no error. Skipped where dns_sets is, so that the whole test reads skipped there,
 * as it did before it had cases. */
static void test_no_source(void)
{
    (void)need_dnsmasq();
    char err[512];
    pdr_config_t *none = pdr_config_new_default();
    err[0] = 'x';
    CHECK(none != NULL &&
          pdr_dns_discovery_start(&none->discovery, NULL, on_emit, NULL, err, sizeof(err)) == NULL &&
          err[0] == '\0');
    pdr_config_unref(none);
}

static const pdr_test_case_t cases[] = {
    {"dns_sets", test_dns_sets, 50},
    {"no_source", test_no_source, 10},
};

/* argv[1] is the family; the names after it pick cases. */
int main(int argc, char **argv)
{
    v6 = argc > 1 && strcmp(argv[1], "ipv6") == 0;
    int skip = argc > 1 ? 1 : 0;
    return pdr_test_run(cases, sizeof(cases) / sizeof(cases[0]), setup, NULL, argc - skip, argv + skip);
}
