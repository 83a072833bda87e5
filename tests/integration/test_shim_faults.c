/*
 * Failure paths across process and socket boundaries: a prefill child SIGKILLed mid-stream and a
 * decode child SIGKILLed mid-stream (the survivor receives PDR_EPEERGONE promptly, not at its deadline);
 * stalled peers (a socket that accepts and never answers, a fake decode that never reads) end at
 * their deadline; malformed frames from raw sockets (bad magic, huge len, an offset outside the
 * destination) close only that connection while the shim keeps serving other peers.
 * Children are forked while the parent holds no shim, so no thread is duplicated.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pdshim.h"
#include "test_shim_util.h"
#include "wire.h"
#include "../unit/runner.h"

#define BIG (512u << 20)

static void nap_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

/* Polls a byte another process writes; there is no event for "the transfer is under way". */
static int wait_byte(volatile uint8_t *p, uint8_t v, int timeout_ms)
{
    for (int i = 0; i < timeout_ms * 5; i++) {
        if (__atomic_load_n(p, __ATOMIC_RELAXED) == v)
            return 1;
        nap_us(200);
    }
    return 0;
}

static void reap(pid_t pid)
{
    kill(pid, SIGKILL);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
}

static void test_prefill_killed(void)
{
    int pfd[2];
    CHECK(pipe(pfd) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        uint8_t *src = malloc(BIG);
        memset(src, 0x5A, BIG);
        int err;
        pdshim_opts_t o = {.listen_host = "127.0.0.1"};
        pdshim_t *pre = pdshim_create(&o, &err);
        struct done a;
        done_init(&a);
        pdshim_seg_t s = {src, BIG};
        pdshim_offer(pre, 1, &s, 1, 60000, done_cb, &a);
        int port = pdshim_listen_port(pre);
        if (write(pfd[1], &port, sizeof(port)) != sizeof(port))
            _exit(1);
        for (;;)
            pause();
    }
    close(pfd[1]);
    int port = 0;
    CHECK(read(pfd[0], &port, sizeof(port)) == sizeof(port));
    close(pfd[0]);
    int err;
    pdshim_opts_t o = {0};
    pdshim_t *dec = pdshim_create(&o, &err);
    uint8_t *dst = mmap(NULL, BIG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(dst != MAP_FAILED);
    pdshim_seg_t d = {dst, BIG};
    struct done b;
    done_init(&b);
    CHECK_EQ_ERR(pdshim_fetch(dec, "127.0.0.1", port, 1, &d, 1, 20000, done_cb, &b), 0);
    /* Bytes flow: counted by the kernel on this process's sockets (dst is being written by the shim). */
    int flowing = 0;
    for (int i = 0; i < 10000 * 5 && !flowing; i++) {
        flowing = tcp_received_from(port) > (2u << 20);
        if (!flowing)
            nap_us(200);
    }
    CHECK(flowing);
    uint64_t t0 = t_now_ns(); /* before the kill, as below */
    kill(pid, SIGKILL);
    CHECK(done_wait(&b, 1, 10000) == 1);
    uint64_t ms = (b.t_ns - t0) / 1000000;
    printf("prefill killed mid-stream: decode got %s after %llu ms (%llu of %u bytes)\n",
           pdr_errname(b.status), (unsigned long long)ms, (unsigned long long)b.bytes, BIG);
    CHECK_EQ_ERR(b.status, PDR_EPEERGONE);
    /* The peer's death ended it, not the fetch's 20 s deadline: half of that leaves ThreadSanitizer's
     * slowdown room (1.4 s was seen). */
    CHECK(ms < 10000);
    pdshim_destroy(dec);
    reap(pid);
    munmap(dst, BIG);
    done_fini(&b);
    printf("ok prefill killed\n");
}

static void test_decode_killed(void)
{
    int pfd[2];
    CHECK(pipe(pfd) == 0);
    uint8_t *shared = mmap(NULL, BIG, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(shared != MAP_FAILED);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(pfd[1]);
        int port;
        if (read(pfd[0], &port, sizeof(port)) != sizeof(port))
            _exit(1);
        int err;
        pdshim_opts_t o = {0};
        pdshim_t *dec = pdshim_create(&o, &err);
        struct done b;
        done_init(&b);
        pdshim_seg_t d = {shared, BIG};
        pdshim_fetch(dec, "127.0.0.1", port, 2, &d, 1, 60000, done_cb, &b);
        for (;;)
            pause();
    }
    close(pfd[0]);
    uint8_t *src = malloc(BIG);
    memset(src, 0x5A, BIG);
    int err;
    pdshim_opts_t o = {.listen_host = "127.0.0.1"};
    pdshim_t *pre = pdshim_create(&o, &err);
    int port = pdshim_listen_port(pre);
    CHECK(write(pfd[1], &port, sizeof(port)) == sizeof(port));
    close(pfd[1]);
    struct done a;
    done_init(&a);
    pdshim_seg_t s = {src, BIG};
    CHECK_EQ_ERR(pdshim_offer(pre, 2, &s, 1, 20000, done_cb, &a), 0);
    CHECK(wait_byte(shared + (1u << 20), 0x5A, 10000));
    /* The clock starts before the kill: the prefill may see the peer die before this thread runs again. */
    uint64_t t0 = t_now_ns();
    kill(pid, SIGKILL);
    CHECK(done_wait(&a, 1, 10000) == 1);
    uint64_t ms = (a.t_ns - t0) / 1000000;
    printf("decode killed mid-stream: prefill got %s after %llu ms\n", pdr_errname(a.status),
           (unsigned long long)ms);
    CHECK_EQ_ERR(a.status, PDR_EPEERGONE);
    CHECK(ms < 10000); /* the peer's death, not the offer's 20 s deadline */
    pdshim_destroy(pre);
    reap(pid);
    munmap(shared, BIG);
    free(src);
    done_fini(&a);
    printf("ok decode killed\n");
}

static int raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {
        .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    return fd;
}

static void read_full(int fd, void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        CHECK(r > 0);
        p += r;
        n -= (size_t)r;
    }
}

/* Waits until the peer closes fd (read returns 0 or an error), discarding data. */
static int wait_closed(int fd, int timeout_ms)
{
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    uint8_t buf[4096];
    for (;;) {
        ssize_t r = read(fd, buf, sizeof(buf));
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
            return 1;
        if (r < 0)
            return 0;
    }
}

static void test_stalled(void)
{
    int err;
    pdshim_opts_t po = {.listen_host = "127.0.0.1"}, dopt = {0};
    pdshim_t *pre = pdshim_create(&po, &err), *dec = pdshim_create(&dopt, &err);
    uint8_t buf[4096];
    pdshim_seg_t s = {buf, sizeof(buf)};

    /* A peer that accepts (the kernel does, from the backlog) and never says anything. */
    int port, lfd = raw_listener(&port);
    struct done b;
    done_init(&b);
    uint64_t t0 = t_now_ns();
    CHECK_EQ_ERR(pdshim_fetch(dec, "127.0.0.1", port, 3, &s, 1, 700, done_cb, &b), 0);
    CHECK(done_wait(&b, 1, 5000) == 1);
    uint64_t ms = (b.t_ns - t0) / 1000000;
    printf("silent prefill: %s after %llu ms (deadline 700)\n", pdr_errname(b.status),
           (unsigned long long)ms);
    CHECK(b.status == PDR_ETIMEDOUT || b.status == PDR_EPEERGONE);
    CHECK(ms >= 690 && ms < 2500); /* at the deadline, not at done_wait's 5 s */
    close(lfd);

    /* A fake decode that asks for a big room and never reads: the offer ends at its deadline. */
    size_t big = 64u << 20;
    uint8_t *src = calloc(1, big);
    pdshim_seg_t bs = {src, big};
    struct done a;
    done_init(&a);
    CHECK_EQ_ERR(pdshim_offer(pre, 4, &bs, 1, 800, done_cb, &a), 0);
    int fd = raw_connect(pdshim_listen_port(pre));
    uint8_t f[256];
    size_t n = pdr__xfer_fetch_encode(f, sizeof(f), 4, 1, big, 10000, &big, sizeof(size_t), 1);
    CHECK(write(fd, f, n) == (ssize_t)n);
    t0 = t_now_ns();
    CHECK(done_wait(&a, 1, 5000) == 1);
    ms = (a.t_ns - t0) / 1000000;
    printf("stalled decode: offer %s after %llu ms (deadline 800)\n", pdr_errname(a.status),
           (unsigned long long)ms);
    CHECK(a.status == PDR_ETIMEDOUT || a.status == PDR_EPEERGONE);
    CHECK(ms < 2500); /* at the 800 ms deadline, not at done_wait's 5 s */
    close(fd);
    free(src);
    pdshim_destroy(pre);
    pdshim_destroy(dec);
    done_fini(&a);
    done_fini(&b);
    printf("ok stalled peers\n");
}

/* A real room between two shims still works. */
static void real_room(pdshim_t *pre, pdshim_t *dec, uint64_t room)
{
    uint8_t src[10000], dst[10000];
    fill(src, sizeof(src), room, 0);
    pdshim_seg_t s = {src, sizeof(src)}, d = {dst, sizeof(dst)};
    struct done a, b;
    done_init(&a);
    done_init(&b);
    CHECK_EQ_ERR(pdshim_offer(pre, room, &s, 1, 5000, done_cb, &a), 0);
    CHECK_EQ_ERR(pdshim_fetch(dec, "127.0.0.1", pdshim_listen_port(pre), room, &d, 1, 5000, done_cb, &b), 0);
    CHECK(done_wait(&a, 1, 6000) == 1 && done_wait(&b, 1, 6000) == 1);
    CHECK_EQ_ERR(a.status, 0);
    CHECK_EQ_ERR(b.status, 0);
    CHECK(check_fill(dst, sizeof(dst), room, 0));
    done_fini(&a);
    done_fini(&b);
}

static void test_malformed(void)
{
    int err;
    pdshim_opts_t po = {.listen_host = "127.0.0.1"}, dopt = {0};
    pdshim_t *pre = pdshim_create(&po, &err), *dec = pdshim_create(&dopt, &err);
    int port = pdshim_listen_port(pre);
    real_room(pre, dec, 10); /* the decode's session to the prefill is open from here on */

    /* Bad magic, a huge DATA length, a FETCH whose segments do not add up, an unknown type: each
     * closes that connection only. */
    uint8_t frames[4][64];
    size_t lens[4];
    pdr__xfer_hdr_encode(frames[0], PDR_XF_FETCH, 1, 24);
    frames[0][0] ^= 0xff;
    lens[0] = 48;
    pdr__xfer_hdr_encode(frames[1], PDR_XF_DATA, 1, UINT64_MAX);
    lens[1] = 24;
    size_t seg = 5;
    lens[2] = pdr__xfer_fetch_encode(frames[2], 64, 1, 1, 6, 0, &seg, sizeof(size_t), 1);
    pdr__xfer_hdr_encode(frames[3], 77, 1, 0);
    lens[3] = 24;
    for (int i = 0; i < 4; i++) {
        int fd = raw_connect(port);
        CHECK(write(fd, frames[i], lens[i]) == (ssize_t)lens[i]);
        CHECK(wait_closed(fd, 3000));
        close(fd);
        real_room(pre, dec, 20 + (uint64_t)i);
    }

    /* A fake prefill that answers a FETCH with DATA outside the destination: that fetch fails with
     * PDR_EPROTO, its connection is closed, the decode keeps working with the real prefill. */
    int lport, lfd = raw_listener(&lport);
    uint8_t buf[100];
    pdshim_seg_t d = {buf, sizeof(buf)};
    struct done b;
    done_init(&b);
    CHECK_EQ_ERR(pdshim_fetch(dec, "127.0.0.1", lport, 30, &d, 1, 5000, done_cb, &b), 0);
    int fd = accept(lfd, NULL, NULL);
    CHECK(fd >= 0);
    struct pdr_xfer_hdr h;
    /* The session opens with a HELLO (the fake never answers it, so no data connections follow). */
    uint8_t hello[PDR_XFER_HDR_LEN + PDR_XFER_HELLO_LEN];
    read_full(fd, hello, sizeof(hello));
    CHECK(pdr__xfer_hdr_decode(hello, &h) == 0 && h.type == PDR_XF_HELLO);
    uint8_t f[PDR_XFER_HDR_LEN + PDR_XFER_FETCH_FIXED + 8];
    read_full(fd, f, sizeof(f));
    struct pdr_xfer_fetch_desc desc;
    CHECK(pdr__xfer_hdr_decode(f, &h) == 0 && h.type == PDR_XF_FETCH && h.room == 30);
    CHECK(pdr__xfer_fetch_decode(f + PDR_XFER_HDR_LEN, (size_t)h.len, &desc) == 0 && desc.total == 100);
    uint8_t data[PDR_XFER_HDR_LEN + PDR_XFER_DATA_PFX + 10];
    memset(data, 0, sizeof(data));
    pdr__xfer_data_hdr_encode(data, 30, desc.xid, 95, 10); /* bytes 95..104 of a 100-byte room */
    CHECK(write(fd, data, sizeof(data)) == (ssize_t)sizeof(data));
    CHECK(done_wait(&b, 1, 3000) == 1);
    CHECK_EQ_ERR(b.status, PDR_EPROTO);
    CHECK(wait_closed(fd, 3000));
    close(fd);
    close(lfd);
    real_room(pre, dec, 31);
    pdshim_destroy(pre);
    pdshim_destroy(dec);
    done_fini(&b);
    printf("ok malformed frames\n");
}

static const pdr_test_case_t cases[] = {
    {"prefill_killed", test_prefill_killed, 40},
    {"decode_killed", test_decode_killed, 40},
    {"stalled", test_stalled, 40},
    {"malformed", test_malformed, 40},
};

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    return pdr_test_run(cases, sizeof(cases) / sizeof(cases[0]), NULL, NULL, argc, argv);
}
