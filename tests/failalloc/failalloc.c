/*
 * The allocation wrappers of failalloc.h. Counters are atomics: the engines allocate on their own
 * threads. The SIGUSR2 handler only stores to atomics (async-signal-safe).
 */
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "failalloc.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void __real_free(void *p);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
void __wrap_free(void *p);

static long fail_at = -1; /* -1: not armed */
static long count, live, env_at = -1;
static int failed;

void pdr_failalloc_arm(long at)
{
    __atomic_store_n(&count, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&failed, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&fail_at, at, __ATOMIC_SEQ_CST);
}

long pdr_failalloc_count(void)
{
    return __atomic_load_n(&count, __ATOMIC_SEQ_CST);
}

int pdr_failalloc_failed(void)
{
    return __atomic_load_n(&failed, __ATOMIC_SEQ_CST);
}

long pdr_failalloc_live(void)
{
    return __atomic_load_n(&live, __ATOMIC_SEQ_CST);
}

/* Whether this allocation is the one to fail. */
static int should_fail(void)
{
    long at = __atomic_load_n(&fail_at, __ATOMIC_SEQ_CST);
    if (at < 0)
        return 0;
    long n = __atomic_add_fetch(&count, 1, __ATOMIC_SEQ_CST);
    if (at == 0 || n != at)
        return 0;
    __atomic_store_n(&failed, 1, __ATOMIC_SEQ_CST);
    if (getenv("PDR_FAIL_ALLOC_TRACE") != NULL) { /* where it failed, on stderr */
        void *frames[32];
        int nf = backtrace(frames, 32);
        fprintf(stderr, "failalloc: allocation %ld fails here:\n", n);
        backtrace_symbols_fd(frames, nf, 2);
    }
    errno = ENOMEM;
    return 1;
}

static void *counted(void *p)
{
    if (p != NULL)
        __atomic_add_fetch(&live, 1, __ATOMIC_SEQ_CST);
    return p;
}

void *__wrap_malloc(size_t n)
{
    return should_fail() ? NULL : counted(__real_malloc(n));
}

void *__wrap_calloc(size_t n, size_t size)
{
    return should_fail() ? NULL : counted(__real_calloc(n, size));
}

void *__wrap_realloc(void *p, size_t n)
{
    if (should_fail())
        return NULL;
    void *q = __real_realloc(p, n);
    if (p == NULL)
        return counted(q);
    if (q == NULL && n == 0)
        __atomic_sub_fetch(&live, 1, __ATOMIC_SEQ_CST);
    return q;
}

char *__wrap_strdup(const char *s)
{
    return should_fail() ? NULL : counted(__real_strdup(s));
}

char *__wrap_strndup(const char *s, size_t n)
{
    return should_fail() ? NULL : counted(__real_strndup(s, n));
}

void __wrap_free(void *p)
{
    if (p != NULL)
        __atomic_sub_fetch(&live, 1, __ATOMIC_SEQ_CST);
    __real_free(p);
}

static char armed_path[4096]; /* PDR_FAIL_ALLOC_REPORT ".armed", made when SIGUSR2 has armed */

static void on_sigusr2(int sig)
{
    (void)sig;
    int saved = errno;
    pdr_failalloc_arm(__atomic_load_n(&env_at, __ATOMIC_SEQ_CST));
    if (armed_path[0] != '\0') {
        int fd = open(armed_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd >= 0)
            close(fd);
    }
    errno = saved;
}

static void report(void)
{
    const char *path = getenv("PDR_FAIL_ALLOC_REPORT");
    if (path == NULL)
        return;
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return;
    fprintf(f, "%ld %ld %d\n", pdr_failalloc_count(), pdr_failalloc_live(), pdr_failalloc_failed());
    fclose(f);
}

__attribute__((constructor)) static void failalloc_init(void)
{
    const char *at = getenv("PDR_FAIL_ALLOC_AT");
    if (at == NULL)
        return;
    char *end = NULL;
    long v = strtol(at, &end, 10);
    if (end == at || *end != '\0' || v < 0)
        return;
    env_at = v;
    const char *rep = getenv("PDR_FAIL_ALLOC_REPORT");
    if (rep != NULL)
        snprintf(armed_path, sizeof(armed_path), "%s.armed", rep);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_sigusr2;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR2, &sa, NULL);
    atexit(report);
}
