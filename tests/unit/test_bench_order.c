/*
 * pdxfer-bench (transport/bench/pdxfer_common.c, pdxfer_initiator.c and pdxfer_target.c, included) on a CPU,
 * against tests/unit/fake_cuda.c: a target and an initiator in one process move rooms of "device memory" with
 * several rooms in flight, every byte verified. The fake is strict about ordering: work queued on a stream
 * runs only once the host waits for it, and a stream destroyed with work pending drops that work. So a bench
 * that offers its source before the pattern fill has completed, or checks a destination before its compare
 * has run, moves wrong bytes and fails here. Also: a copy that never lands (the fake loses one IPC copy in
 * LOSE_EVERY) is caught by full verification, reported as the slot's previous room, and makes the initiator
 * exit 1; and every stream, event and pinned buffer is released at the end.
 */
#include "../../transport/bench/pdxfer_common.c"
#include "../../transport/bench/pdxfer_initiator.c"
#include "../../transport/bench/pdxfer_target.c"

#include <arpa/inet.h>
#include <netinet/in.h>

#include "runner.h"

#define CHECK(cond)                                                                                          \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);                         \
            abort();                                                                                         \
        }                                                                                                    \
    } while (0)
#define CHECK_EQ_ERR(got, want) CHECK((got) == (want))

extern long pdr__fake_cuda_live;
extern long pdr__fake_cuda_strict;
extern long pdr__fake_cuda_dropped;
extern long pdr__fake_cuda_lose_d2d;

#define LOSE_EVERY 7

/* A port p with p and p + 1 free on 127.0.0.1 (the target's data and control ports). */
static int free_port_pair(void)
{
    for (int tries = 0; tries < 100; tries++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0), fd2 = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t sl = sizeof(sa);
        CHECK(fd >= 0 && fd2 >= 0);
        int port = 0;
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
            getsockname(fd, (struct sockaddr *)&sa, &sl) == 0) {
            port = ntohs(sa.sin_port);
            sa.sin_port = htons((uint16_t)(port + 1));
            if (port >= 65534 || bind(fd2, (struct sockaddr *)&sa, sizeof(sa)) != 0)
                port = 0;
        }
        close(fd);
        close(fd2);
        if (port != 0)
            return port;
    }
    CHECK(!"no free port pair");
    return 0;
}

struct target_run {
    struct args a;
    char listen[32];
    int rc;
    pthread_t thread;
};

static void *target_thread(void *arg)
{
    struct target_run *t = arg;
    t->rc = pdx__run_target(&t->a);
    return NULL;
}

static struct args base_args(const char *mode, const char *backend, const char *mem, int device)
{
    struct args a;
    memset(&a, 0, sizeof(a));
    a.mode = mode;
    a.backend = backend;
    a.mem = mem;
    a.device = device;
    a.peer_device = -1;
    a.threads = 1;
    a.batch = 1;
    a.duration = 10;
    a.timeout_ms = 20000;
    a.verify = pdx__is_cuda(&a) ? VERIFY_FULL : VERIFY_SAMPLE;
    return a;
}

/* Starts a target, runs one initiator session against it, stops the target. Returns the initiator's
 * exit status; *target_rc receives the target's. */
static int session(const char *backend, const char *mem, int threads, long batch, size_t block,
                   int *target_rc)
{
    int port = free_port_pair();
    struct target_run t;
    memset(&t, 0, sizeof(t));
    t.a = base_args("target", backend, mem, 0);
    snprintf(t.listen, sizeof(t.listen), "127.0.0.1:%d", port);
    t.a.listen = t.listen;
    pdx__stop_flag = 0;
    CHECK(pthread_create(&t.thread, NULL, target_thread, &t) == 0);
    /* The control port accepts once the target is up (a probe that sends nothing is dropped). */
    for (int i = 0; i < 500; i++) {
        int fd = pdx__tcp_socket("127.0.0.1", port + 1, 0);
        if (fd >= 0) {
            close(fd);
            break;
        }
        usleep(10000);
    }
    char peer[32];
    snprintf(peer, sizeof(peer), "127.0.0.1:%d", port);
    struct args i = base_args("initiator", backend, mem, 1);
    i.peer = peer;
    i.threads = threads;
    i.batch = batch;
    i.block = block;
    i.duration = 0.5;
    int rc = pdx__run_initiator(&i);
    pdx__stop_flag = 1;
    CHECK(pthread_join(t.thread, NULL) == 0);
    *target_rc = t.rc;
    return rc;
}

/* verify() itself: a planted wrong word is found, counted and located, on "device" and host memory. */
static void test_verify_finds(const char *mem)
{
    struct args a = base_args("initiator", "auto", mem, 0);
    a.block = 4096;
    a.batch = 2;
    a.threads = 1;
    struct initiator in;
    memset(&in, 0, sizeof(in));
    in.a = &a;
    struct worker w;
    memset(&w, 0, sizeof(w));
    w.in = &in;
    CHECK_EQ_ERR(pdr__cuda_bind(0), 0);
    in.dst = pdx__mem_alloc(&a, a.block * 2);
    if (pdx__is_cuda(&a)) {
        CHECK_EQ_ERR(pdr__cuda_stream_create(&w.stream), 0);
        CHECK_EQ_ERR(pdr__cuda_mem_alloc(16, &w.scratch), 0);
    }
    for (int mode = VERIFY_OFF; mode <= VERIFY_FULL; mode++) {
        a.verify = mode;
        uint64_t seq = 3, first = 0; /* slot 1, block 3 % 3 = 0 */
        fill_block(slot_of(&w, seq), a.block, block_of(&a, seq));
        CHECK(verify(&w, seq, &first) == 0 && first == UINT64_MAX);
        /* Word 5 lies between samples: only full verification sees it; the last word is sampled. */
        uint64_t junk = 0x1234;
        memcpy(slot_of(&w, seq) + 5 * 8, &junk, 8);
        memcpy(slot_of(&w, seq) + a.block - 8, &junk, 8);
        uint64_t bad = verify(&w, seq, &first);
        if (mode == VERIFY_FULL)
            CHECK(bad == 2 && first == 5);
        else if (mode == VERIFY_SAMPLE)
            CHECK(bad == 1 && first == a.block / 8 - 1);
        else
            CHECK(bad == 0);
        /* The previous room of the slot (seq 3 - batch = 1) carried block 1: named as such. */
        CHECK(strcmp(mismatch_kind(&a, seq, 0, pdx__pattern_word(1, 0)), "the slot's previous room") == 0);
        CHECK(strcmp(mismatch_kind(&a, seq, 0, 0), "zero, never written") == 0);
    }
    pdr__cuda_mem_free(w.scratch);
    pdr__cuda_stream_destroy(w.stream);
    pdx__mem_free(&a, in.dst);
    printf("ok verify finds wrong words (%s)\n", mem);
}

static void test_verify_finds_cuda(void)
{
    test_verify_finds("cuda");
}

static void test_verify_finds_host(void)
{
    test_verify_finds("host");
}

/* CUDA IPC between device memory, 4 workers x 2 rooms in flight: every byte right, exit 0. */
static void test_cuda_ipc_device(void)
{
    int trc = -1;
    CHECK(session("cuda_ipc", "cuda", 4, 2, 256 << 10, &trc) == 0);
    CHECK(trc == 0);
    CHECK(pdr__fake_cuda_dropped == 0); /* the bench waited for all of its own work */
    printf("ok cuda_ipc, device memory, full verification\n");
}

/* TCP staging from and into device memory, and VMM destinations, the same. */
static void test_tcp_device(void)
{
    int trc = -1;
    CHECK(session("tcp", "cuda", 2, 2, 256 << 10, &trc) == 0 && trc == 0);
    printf("ok tcp, device memory, full verification\n");
}

static void test_cuda_ipc_vmm(void)
{
    int trc = -1;
    CHECK(session("cuda_ipc", "cuda_vmm", 2, 1, 256 << 10, &trc) == 0 && trc == 0);
    printf("ok cuda_ipc, VMM memory, full verification\n");
}

static void test_tcp_host(void)
{
    int trc = -1;
    CHECK(session("tcp", "host", 2, 3, 64 << 10, &trc) == 0 && trc == 0);
    printf("ok tcp, host memory, sampled verification\n");
}

/* A copy that never lands leaves the slot's previous room in place: verify errors, exit 1. */
static void test_lost_copy(void)
{
    int trc = -1;
    pdr__fake_cuda_lose_d2d = LOSE_EVERY;
    CHECK(session("cuda_ipc", "cuda", 2, 2, 64 << 10, &trc) == 1);
    pdr__fake_cuda_lose_d2d = 0;
    printf("ok a lost copy fails the run\n");
}

static void setup(void)
{
    signal(SIGPIPE, SIG_IGN);
    pdr__fake_cuda_strict = 1;
}

/* Every case releases every stream, event and pinned buffer it made. */
static void teardown(void)
{
    CHECK(pdr__fake_cuda_live == 0);
}

static const pdr_test_case_t cases[] = {
    {"verify_finds_cuda", test_verify_finds_cuda, 30},
    {"verify_finds_host", test_verify_finds_host, 30},
    {"cuda_ipc_device", test_cuda_ipc_device, 60},
    {"tcp_device", test_tcp_device, 60},
    {"cuda_ipc_vmm", test_cuda_ipc_vmm, 60},
    {"tcp_host", test_tcp_host, 60},
    {"lost_copy", test_lost_copy, 60},
};

int main(int argc, char **argv)
{
    int rc = pdr_test_run(cases, sizeof(cases) / sizeof(cases[0]), setup, teardown, argc, argv);
    if (rc == 0)
        printf("all ok\n");
    return rc;
}
