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
#include "err.h"
#include "fdpass.h"

static int same_file(int a, int b)
{
    struct stat sa, sb;
    return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_ino == sb.st_ino && sa.st_dev == sb.st_dev;
}

int main(void)
{
    struct pdr__fdsrv *srv = NULL;
    CHECK(pdr__fdsrv_start(&srv) == 0 && srv != NULL);
    if (srv == NULL)
        return 1;
    uint32_t pid = pdr__fdsrv_pid(srv);
    uint64_t nonce = pdr__fdsrv_nonce(srv);
    CHECK(pid == (uint32_t)getpid());

    int a = memfd_create("fdpass-a", MFD_CLOEXEC), b = memfd_create("fdpass-b", MFD_CLOEXEC);
    int a_keep = dup(a);
    CHECK(a >= 0 && b >= 0 && a_keep >= 0);
    CHECK(write(a, "hello", 5) == 5);
    uint64_t ida = 0, idb = 0;
    CHECK(pdr__fdsrv_add(srv, a, &ida) == 0);
    CHECK(pdr__fdsrv_add(srv, b, &idb) == 0);
    CHECK(ida != idb);
    CHECK(pdr__fdsrv_count(srv) == 2);

    /* A held descriptor comes back: the same open file (its offset moved by the write above). */
    int got = -1;
    CHECK(pdr__fdsrv_fetch(pid, nonce, ida, 1000, &got) == 0 && got >= 0);
    CHECK(got != a_keep && same_file(got, a_keep));
    CHECK(lseek(got, 0, SEEK_CUR) == 5);
    CHECK((fcntl(got, F_GETFD) & FD_CLOEXEC) != 0);
    close(got);
    /* Twice: the server keeps it. */
    CHECK(pdr__fdsrv_fetch(pid, nonce, ida, 1000, &got) == 0 && same_file(got, a_keep));
    close(got);

    /* Unknown id, wrong nonce (no such server), dropped id. */
    got = 7;
    CHECK(pdr__fdsrv_fetch(pid, nonce, ida ^ idb ^ 1, 1000, &got) == PDR_EINVAL && got == -1);
    CHECK(pdr__fdsrv_fetch(pid, nonce + 1, ida, 1000, &got) == PDR_ECONNREFUSED && got == -1);
    pdr__fdsrv_drop(srv, ida);
    CHECK(pdr__fdsrv_count(srv) == 1);
    CHECK(pdr__fdsrv_fetch(pid, nonce, ida, 1000, &got) == PDR_EINVAL);
    pdr__fdsrv_drop(srv, ida); /* again: no-op */
    CHECK(pdr__fdsrv_fetch(pid, nonce, idb, 1000, &got) == 0 && got >= 0);
    close(got);

    /* A client that connects and never asks holds the server up for a bounded time only: a request
     * behind it is still answered well inside its own 5 s timeout. */
    {
        int idle = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa;
        memset(&sa, 0, sizeof(sa));
        sa.sun_family = AF_UNIX;
        int n = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "pdxfer-fd/%u/%016llx", (unsigned)pid,
                         (unsigned long long)nonce);
        CHECK(connect(idle, (struct sockaddr *)&sa,
                      (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n)) == 0);
        CHECK(pdr__fdsrv_fetch(pid, nonce, idb, 5000, &got) == 0 && got >= 0);
        close(got);
        close(idle);
    }

    /* Stop: the socket is gone and b's descriptor closed (fd b is free for reuse). */
    pdr__fdsrv_stop(srv);
    CHECK(pdr__fdsrv_fetch(pid, nonce, idb, 1000, &got) == PDR_ECONNREFUSED);
    CHECK(fcntl(b, F_GETFD) == -1);
    pdr__fdsrv_stop(NULL);
    close(a_keep);
    CHECK_DONE();
}
