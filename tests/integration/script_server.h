/*
 * Test helper: runs a scripted server (argv, e.g. python3 some_server.py ...) that prints "PORT N" on
 * its stdout once listening and exits when its stdin closes. Header-only, for the C integration tests.
 */
#ifndef PDR_TEST_SCRIPT_SERVER_H
#define PDR_TEST_SCRIPT_SERVER_H

#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct script_server {
    pid_t pid;
    int stdin_fd;
    int port;
} script_server_t;

/* Starts argv (NULL-terminated) and reads its port. 0, or -1 with a message on stderr. */
static inline int script_server_start(script_server_t *s, char *const argv[])
{
    int in[2], out[2];
    s->pid = -1;
    s->stdin_fd = -1;
    s->port = 0;
    if (pipe(in) != 0 || pipe(out) != 0)
        return -1;
    s->pid = fork();
    if (s->pid < 0)
        return -1;
    if (s->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    s->stdin_fd = in[1];
    FILE *f = fdopen(out[0], "r");
    if (f == NULL || fscanf(f, "PORT %d", &s->port) != 1 || s->port <= 0) {
        fprintf(stderr, "%s %s did not start\n", argv[0], argv[1] != NULL ? argv[1] : "");
        if (f != NULL)
            fclose(f);
        return -1;
    }
    fclose(f);
    return 0;
}

/* Closes its stdin, terminates and reaps it. */
static inline void script_server_stop(script_server_t *s)
{
    if (s->stdin_fd >= 0)
        close(s->stdin_fd);
    s->stdin_fd = -1;
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        waitpid(s->pid, NULL, 0);
    }
    s->pid = -1;
}

#endif
