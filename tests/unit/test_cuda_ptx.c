/*
 * The pattern kernels' hand-written PTX (transport/cuda.c) assembles with ptxas for Turing (sm_75, the
 * oldest CUDA 13 compiles for) and Hopper (sm_90), as the driver's JIT compiler does for each device.
 * Exits 77 where no ptxas is installed (PTXAS names one; else the PATH, then /usr/local/cuda/bin). No GPU
 * needed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu_cuda.h"
#include "runner.h"

static int executable(const char *path)
{
    return access(path, X_OK) == 0;
}

/* The first ptxas found into buf; 0 if none. */
static int find_ptxas(char *buf, size_t len)
{
    const char *env = getenv("PTXAS");
    if (env != NULL && executable(env))
        return snprintf(buf, len, "%s", env) < (int)len;
    const char *path = getenv("PATH");
    while (path != NULL && *path != '\0') {
        const char *colon = strchr(path, ':');
        size_t n = colon != NULL ? (size_t)(colon - path) : strlen(path);
        if (n > 0 && (size_t)snprintf(buf, len, "%.*s/ptxas", (int)n, path) < len && executable(buf))
            return 1;
        path = colon != NULL ? colon + 1 : NULL;
    }
    return executable("/usr/local/cuda/bin/ptxas") &&
           snprintf(buf, len, "/usr/local/cuda/bin/ptxas") < (int)len;
}

static int assemble(const char *ptxas, const char *file, const char *arch)
{
    pid_t pid = fork();
    if (pid == 0) {
        execl(ptxas, ptxas, "-arch", arch, "-v", file, "-o", "/dev/null", (char *)NULL);
        _exit(127);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* One case: both architectures assemble the same temporary file, and a skip is the whole test's. */
static void test_assemble(void)
{
    char ptxas[4096];
    if (!find_ptxas(ptxas, sizeof(ptxas))) {
        printf("skip: no ptxas\n");
        exit(77);
    }
    const char *ptx = pdr__cuda_pattern_ptx();
    char file[] = "/tmp/pdr-pattern-XXXXXX";
    int fd = mkstemp(file);
    if (fd < 0 || write(fd, ptx, strlen(ptx)) != (ssize_t)strlen(ptx)) {
        perror("temporary PTX file");
        exit(1);
    }
    close(fd);
    int fails = 0;
    const char *archs[] = {"sm_75", "sm_90"};
    for (size_t i = 0; i < sizeof(archs) / sizeof(archs[0]); i++) {
        int rc = assemble(ptxas, file, archs[i]);
        printf("%s -arch %s: exit %d\n", ptxas, archs[i], rc);
        fails += rc != 0;
    }
    unlink(file);
    if (strstr(ptx, ".entry pdr_pattern_fill") == NULL || strstr(ptx, ".entry pdr_pattern_check") == NULL)
        fails++;
    printf(fails ? "FAILED\n" : "all ok\n");
    exit(fails ? 1 : 0);
}

static const pdr_test_case_t cases[] = {
    {"assemble", test_assemble, 50},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
