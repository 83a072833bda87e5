/*
 * The C tests' case runner, as libuv's and curl's test runners do it: each case runs in a child process
 * of its own with a deadline. A case that crashes, aborts (a failed CHECK), exits non-zero or outlives its
 * deadline (killed with SIGKILL) fails with its name; the cases after it still run. The parent prints one
 * TAP-style line per case and exits 0 (all passed), 1 (any failed) or 77 (every case skipped: each exited
 * 77, the tests' "no GPU / no device" status).
 *
 *   static const pdr_test_case_t cases[] = {{"striping", test_striping, 60}, ...};
 *   int main(int argc, char **argv) { return PDR_TEST_RUN(cases, argc, argv); }
 *
 * `prog NAME...` runs only the named cases; PDR_TEST_NOFORK=1 runs them in this process (for a debugger);
 * PDR_TEST_TIMEOUT=S overrides every case's deadline; PDR_TEST_TIMEOUT_SCALE=K multiplies each (a sanitizer
 * tree). A case's own child processes are its business.
 * With tests/unit/check.h (CHECK counts and goes on), a case whose checks failed exits 1.
 */
#ifndef PDR_TEST_RUNNER_H
#define PDR_TEST_RUNNER_H

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct pdr_test_case {
    const char *name;
    void (*fn)(void);
    int timeout_s; /* 0: 60 s */
} pdr_test_case_t;

#define PDR_TEST_RUN(cases, argc, argv)                                                                      \
    pdr_test_run(cases, sizeof(cases) / sizeof(cases[0]), NULL, NULL, argc, argv)

/* What a case ends with, in the child: check.h's failure count, if the test uses it. */
static inline int pdr_test__status(void)
{
#ifdef PDR_TEST_CHECK_H
    return check_failures ? 1 : 0;
#else
    return 0;
#endif
}

static inline int pdr_test__selected(const char *name, int argc, char **argv)
{
    if (argc < 2)
        return 1;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return 1;
    return 0;
}

/* Waits for the child until its deadline; kills it past the deadline. Returns its wait status, and sets
 * *timed_out. SIGCHLD is blocked by the caller, so its arrival is awaited, never polled. */
static inline int pdr_test__wait(pid_t pid, int timeout_s, int *timed_out)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    struct timespec end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += timeout_s;
    int st = 0;
    *timed_out = 0;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return st;
        if (r < 0 && errno != EINTR)
            return -1;
        struct timespec now, left;
        clock_gettime(CLOCK_MONOTONIC, &now);
        left.tv_sec = end.tv_sec - now.tv_sec;
        left.tv_nsec = end.tv_nsec - now.tv_nsec;
        if (left.tv_nsec < 0) {
            left.tv_nsec += 1000000000L;
            left.tv_sec--;
        }
        if (left.tv_sec < 0) {
            *timed_out = 1;
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return st;
        }
        (void)sigtimedwait(&set, NULL, &left);
    }
}

/* setup and teardown, if not NULL, run in each child before and after its case (threads do not survive
 * fork: state with threads is made and freed per case, so the leak checker sees each case clean). */
static inline int pdr_test_run(const pdr_test_case_t *cases, size_t n, void (*setup)(void),
                               void (*teardown)(void), int argc, char **argv)
{
    const char *nofork = getenv("PDR_TEST_NOFORK");
    const char *tenv = getenv("PDR_TEST_TIMEOUT");
    const char *senv = getenv("PDR_TEST_TIMEOUT_SCALE");
    long scale = senv ? strtol(senv, NULL, 10) : 1;
    if (scale < 1 || scale > 100)
        scale = 1;
    int failed = 0, skipped = 0, ran = 0;
    setvbuf(stdout, NULL, _IONBF, 0);
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    for (size_t i = 0; i < n; i++) {
        const pdr_test_case_t *c = &cases[i];
        if (!pdr_test__selected(c->name, argc, argv))
            continue;
        ran++;
        int timeout_s = c->timeout_s > 0 ? c->timeout_s : 60;
        if (scale > 1)
            timeout_s *= scale;
        if (tenv) {
            char *end = NULL;
            long t = strtol(tenv, &end, 10);
            if (end != tenv && *end == '\0' && t > 0 && t < 86400)
                timeout_s = (int)t;
        }
        if (nofork && nofork[0] == '1') {
            if (setup)
                setup();
            c->fn();
            if (teardown)
                teardown();
            printf("ok %d - %s\n", ran, c->name);
            continue;
        }
        fflush(stdout);
        fflush(stderr);
        sigprocmask(SIG_BLOCK, &set, &old);
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            sigprocmask(SIG_SETMASK, &old, NULL);
            if (setup)
                setup();
            c->fn();
            if (teardown)
                teardown();
            fflush(stdout);
            fflush(stderr);
            exit(pdr_test__status());
        }
        int timed_out = 0;
        int st = pdr_test__wait(pid, timeout_s, &timed_out);
        sigprocmask(SIG_SETMASK, &old, NULL);
        if (timed_out) {
            printf("not ok %d - %s (timed out after %d s, killed)\n", ran, c->name, timeout_s);
            failed++;
        } else if (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0) {
            printf("ok %d - %s\n", ran, c->name);
        } else if (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 77) {
            printf("ok %d - %s # SKIP\n", ran, c->name);
            skipped++;
        } else if (st != -1 && WIFSIGNALED(st)) {
            printf("not ok %d - %s (killed by signal %d: %s)\n", ran, c->name, WTERMSIG(st),
                   strsignal(WTERMSIG(st)));
            failed++;
        } else {
            printf("not ok %d - %s (exit status %d)\n", ran, c->name, st == -1 ? -1 : WEXITSTATUS(st));
            failed++;
        }
    }
    if (ran == 0) {
        fprintf(stderr, "no test case matches\n");
        return 1;
    }
    printf("1..%d (%d failed, %d skipped)\n", ran, failed, skipped);
    if (failed)
        return 1;
    return skipped == ran ? 77 : 0;
}

#endif
