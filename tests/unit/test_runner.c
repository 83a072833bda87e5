/*
 * The case runner (runner.h) itself: run as `test_runner inner`, it runs cases that pass, crash, abort,
 * hang past their deadline, exit non-zero and skip; the outer run reads what the inner one printed and
 * checks each case is reported with its name and its cause, that the cases after a crash and a hang
 * still ran, and the exit status.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "runner.h"

static void case_pass(void)
{
}

static void case_crash(void)
{
    raise(SIGSEGV);
}

static void case_hang(void)
{
    for (;;)
        pause();
}

static void case_check_fails(void)
{
    CHECK(1 == 2);
}

static void case_skip(void)
{
    exit(77);
}

static const pdr_test_case_t inner_cases[] = {
    {"first_passes", case_pass, 5}, {"crashes", case_crash, 5},          {"after_crash_passes", case_pass, 5},
    {"hangs", case_hang, 1},        {"after_hang_passes", case_pass, 5}, {"check_fails", case_check_fails, 5},
    {"skips", case_skip, 5},
};

static const pdr_test_case_t skip_cases[] = {{"skips", case_skip, 5}};

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "inner") == 0)
        return pdr_test_run(inner_cases, sizeof(inner_cases) / sizeof(inner_cases[0]), NULL, NULL, argc - 1,
                            argv + 1);
    if (argc > 1 && strcmp(argv[1], "inner-skip") == 0)
        return PDR_TEST_RUN(skip_cases, 1, argv);

    char cmd[4200], out[8192];
    snprintf(cmd, sizeof(cmd), "'%s' inner", argv[0]);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    size_t n = p ? fread(out, 1, sizeof(out) - 1, p) : 0;
    out[n] = '\0';
    int st = p ? pclose(p) : -1;
    fputs(out, stdout);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    CHECK(strstr(out, "ok 1 - first_passes\n") != NULL);
    /* Killed by SIGSEGV, or under a sanitizer that catches it, its report's exit status. */
    CHECK(strstr(out, "not ok 2 - crashes (") != NULL);
    CHECK(strstr(out, "ok 3 - after_crash_passes\n") != NULL);
    CHECK(strstr(out, "not ok 4 - hangs (timed out after 1 s, killed)") != NULL);
    CHECK(strstr(out, "ok 5 - after_hang_passes\n") != NULL);
    CHECK(strstr(out, "not ok 6 - check_fails (exit status 1)") != NULL);
    CHECK(strstr(out, "ok 7 - skips # SKIP\n") != NULL);
    CHECK(strstr(out, "1..7 (3 failed, 1 skipped)") != NULL);

    snprintf(cmd, sizeof(cmd), "'%s' inner-skip >/dev/null", argv[0]);
    st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 77);
    snprintf(cmd, sizeof(cmd), "'%s' inner after_hang_passes >/dev/null", argv[0]);
    st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK_DONE();
}
