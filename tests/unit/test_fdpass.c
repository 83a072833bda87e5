/*
 * The fd server of CUDA VMM sharing (transport/fdpass.c) alone, over a real abstract Unix socket: a
 * held descriptor comes back as a new descriptor of the same open file (same inode, shared offset),
 * an unknown or dropped id is refused, a server that does not exist (or has stopped) answers
 * ECONNREFUSED at once, ids differ, and stop closes what it held.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "runner.h"
#include "err.h"
#include "fdpass.h"

static int same_file(int a, int b)
{
    struct stat sa, sb;
    return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_ino == sb.st_ino && sa.st_dev == sb.st_dev;
}

/* Each case's own server, holding two memfds (a written to: its offset is 5) under ids a and b. */
struct fixture {
    struct pdr__fdsrv *srv;
    uint32_t pid;
    uint64_t nonce;
    int a, b, a_keep;
    uint64_t ida, idb;
};

static void fixture_start(struct fixture *f)
{
    memset(f, 0, sizeof(*f));
    CHECK(pdr__fdsrv_start(&f->srv) == 0 && f->srv != NULL);
    if (f->srv == NULL)
        exit(1);
    f->pid = pdr__fdsrv_pid(f->srv);
    f->nonce = pdr__fdsrv_nonce(f->srv);
    CHECK(f->pid == (uint32_t)getpid());

    f->a = memfd_create("fdpass-a", MFD_CLOEXEC);
    f->b = memfd_create("fdpass-b", MFD_CLOEXEC);
    f->a_keep = dup(f->a);
    CHECK(f->a >= 0 && f->b >= 0 && f->a_keep >= 0);
    CHECK(write(f->a, "hello", 5) == 5);
    CHECK(pdr__fdsrv_add(f->srv, f->a, &f->ida) == 0);
    CHECK(pdr__fdsrv_add(f->srv, f->b, &f->idb) == 0);
    CHECK(f->ida != f->idb);
    CHECK(pdr__fdsrv_count(f->srv) == 2);
}

static void fixture_stop(struct fixture *f)
{
    pdr__fdsrv_stop(f->srv);
    close(f->a_keep);
}

/* A held descriptor comes back: the same open file (its offset moved by the write above). */
static void test_fetch(void)
{
    struct fixture f;
    fixture_start(&f);
    int got = -1;
    CHECK(pdr__fdsrv_fetch(f.pid, f.nonce, f.ida, 1000, &got) == 0 && got >= 0);
    CHECK(got != f.a_keep && same_file(got, f.a_keep));
    CHECK(lseek(got, 0, SEEK_CUR) == 5);
    CHECK((fcntl(got, F_GETFD) & FD_CLOEXEC) != 0);
    close(got);
    /* Twice: the server keeps it. */
    CHECK(pdr__fdsrv_fetch(f.pid, f.nonce, f.ida, 1000, &got) == 0 && same_file(got, f.a_keep));
    close(got);
    fixture_stop(&f);
}

/* Unknown id, wrong nonce (no such server), dropped id. */
static void test_refused(void)
{
    struct fixture f;
    fixture_start(&f);
    int got = 7;
    CHECK(pdr__fdsrv_fetch(f.pid, f.nonce, f.ida ^ f.idb ^ 1, 1000, &got) == PDR_EINVAL && got == -1);
    CHECK(pdr__fdsrv_fetch(f.pid, f.nonce + 1, f.ida, 1000, &got) == PDR_ECONNREFUSED && got == -1);
    pdr__fdsrv_drop(f.srv, f.ida);
    CHECK(pdr__fdsrv_count(f.srv) == 1);
    CHECK(pdr__fdsrv_fetch(f.pid, f.nonce, f.ida, 1000, &got) == PDR_EINVAL);
    pdr__fdsrv_drop(f.srv, f.ida); /* again: no-op */
    CHECK(pdr__fdsrv_fetch(f.pid, f.nonce, f.idb, 1000, &got) == 0 && got >= 0);
    close(got);
    fixture_stop(&f);
}

/* A client that connects and never asks holds the server up for a bounded time only: a request
 * behind it is still answered well inside its own 5 s timeout. */
static void test_idle_client(void)
{
    struct fixture f;
    fixture_start(&f);
    int got = -1;
    int idle = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    int n = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "pdxfer-fd/%u/%016llx", (unsigned)f.pid,
                     (unsigned long long)f.nonce);
    CHECK(connect(idle, (struct sockaddr *)&sa,
                  (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n)) == 0);
    CHECK(pdr__fdsrv_fetch(f.pid, f.nonce, f.idb, 5000, &got) == 0 && got >= 0);
    close(got);
    close(idle);
    fixture_stop(&f);
}

/* Stop: the socket is gone and b's descriptor closed (fd b is free for reuse). */
static void test_stop(void)
{
    struct fixture f;
    fixture_start(&f);
    int got = -1;
    pdr__fdsrv_stop(f.srv);
    CHECK(pdr__fdsrv_fetch(f.pid, f.nonce, f.idb, 1000, &got) == PDR_ECONNREFUSED);
    CHECK(fcntl(f.b, F_GETFD) == -1);
    pdr__fdsrv_stop(NULL);
    close(f.a_keep);
}

static const pdr_test_case_t cases[] = {
    {"fetch", test_fetch, 30},
    {"refused", test_refused, 30},
    {"idle_client", test_idle_client, 30},
    {"stop", test_stop, 30},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
