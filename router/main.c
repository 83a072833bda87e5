/*
 * pdrouter entry point: parse flags or the YAML file, validate, run the loop until SIGTERM/SIGINT
 * (then readiness off for lifecycle.drain_grace_ms, stop accepting, let in-flight requests finish
 * within lifecycle.drain_timeout_ms, exit 0; see pdr_router_begin_shutdown).
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <curl/curl.h>
#include "control.h"
#include "dpaware.h"
#include "err.h"
#include "router.h"
#include "server.h"
#include "shim_events.h"
#include "util.h"

static pdr_router_t router;

static void on_signal(uv_signal_t *s, int signum)
{
    pdr_info("signal %d received", signum);
    pdr_router_begin_shutdown(s->data);
}

static void on_reload_signal(uv_signal_t *s, int signum)
{
    (void)signum;
    char msg[1024];
    pdr_info("SIGHUP: reloading the configuration");
    if (pdr_router_reload(s->data, msg, sizeof(msg)) != 0)
        pdr_error("reload failed, the running configuration stays: %s", msg);
}

/* Every client and worker connection is a file descriptor, and the default soft limit (1024) is far below
 * what a front door holds: the soft limit is raised to the hard limit at start, as nginx's
 * worker_rlimit_nofile and most servers do, and the result logged once. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rlim_t was = rl.rlim_cur;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
            pdr_warn("cannot raise the open files limit from %llu to %llu: %s", (unsigned long long)was,
                     (unsigned long long)rl.rlim_max, strerror(errno));
            return;
        }
        pdr_info("open files limit raised from %llu to %llu", (unsigned long long)was,
                 (unsigned long long)rl.rlim_cur);
    } else {
        pdr_info("open files limit %llu", (unsigned long long)rl.rlim_cur);
    }
}

/* log.dir (--log-dir): the router's log goes to DIR/pdrouter.log as well as stderr; the directory is
 * created if missing (as the sglang router does). Returns the descriptor or -1 (logged). */
static int open_log_dir(const char *dir)
{
    char path[4096];
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        pdr_error("log.dir %s: cannot create it: %s", dir, strerror(errno));
        return -1;
    }
    if (snprintf(path, sizeof(path), "%s/pdrouter.log", dir) >= (int)sizeof(path)) {
        pdr_error("log.dir %s: path too long", dir);
        return -1;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        pdr_error("log.dir: cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    pdr_log_also_to(fd);
    return fd;
}

int main(int argc, char **argv)
{
    pdr_cli_t cli;
    char err[1024];
    memset(&cli, 0, sizeof(cli));
    if (pdr_config_parse_args(argc, argv, &cli, err, sizeof(err)) != 0) {
        fprintf(stderr, "pdrouter: %s\nTry 'pdrouter --help'.\n", err);
        return 2;
    }
    if (cli.show_help) {
        pdr_config_usage(stdout);
        return 0;
    }
    if (cli.show_version) {
        printf("pdrouter %s\n", PDR_VERSION);
        return 0;
    }
    if (cli.derive_worker != NULL)
        return pdr_shim_derive_cli(cli.derive_key_file, cli.derive_worker, stdout, stderr);
    if (cli.check_config != NULL) {
        pdr_config_t *c = pdr_config_load_file(cli.check_config, err, sizeof(err));
        if (c == NULL) {
            fprintf(stderr, "%s\n", err);
            return 2;
        }
        /* The tokenizers (top-level and the pools') loaded as the router would: a broken file fails here too.
         */
        if (pdr_router_tokenizer_check(c, err, sizeof(err)) != 0) {
            fprintf(stderr, "%s\n", err);
            pdr_config_unref(c);
            return 2;
        }
        printf("%s: ok (%zu prefill, %zu decode workers)\n", cli.check_config, c->n_prefill, c->n_decode);
        pdr_config_unref(c);
        return 0;
    }
    pdr_config_t *c = cli.config;
    if (c == NULL) {
        fprintf(stderr, "pdrouter: nothing to do: give --config FILE or --pd-disaggregation --prefill URL "
                        "--decode URL\n");
        return 2;
    }
    pdr_set_log_level_name(c->log.level);
    int log_fd = -1;
    if (c->log.dir != NULL && (log_fd = open_log_dir(c->log.dir)) < 0) {
        pdr_config_unref(c);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    raise_fd_limit();
    /* The other loops answer requests (readiness included) as soon as pdr_router_start spawns them,
     * before the watchers below exist: block SIGTERM and SIGINT until then, so that one arriving early
     * stays pending instead of killing the process. The spawned threads inherit the mask and never
     * take these signals. */
    sigset_t stop_sigs, old_mask;
    sigemptyset(&stop_sigs);
    sigaddset(&stop_sigs, SIGTERM);
    sigaddset(&stop_sigs, SIGINT);
    sigaddset(&stop_sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stop_sigs, &old_mask);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    pdr_dp_aware_resolve(c, NULL); /* --dp-aware: before any loop shares the snapshot */
    uv_loop_t *loop = uv_default_loop();
    router.argc = argc;
    router.argv = argv;
    if (pdr_router_start(&router, c, loop) != 0) {
        pdr_config_unref(c);
        return 1;
    }
    pdr_config_unref(c); /* the router holds its own reference */
    uv_signal_init(loop, &router.sig_term);
    router.sig_term.data = &router;
    uv_signal_start(&router.sig_term, on_signal, SIGTERM);
    uv_signal_init(loop, &router.sig_int);
    router.sig_int.data = &router;
    uv_signal_start(&router.sig_int, on_signal, SIGINT);
    uv_signal_init(loop, &router.sig_hup);
    router.sig_hup.data = &router;
    uv_signal_start(&router.sig_hup, on_reload_signal, SIGHUP);
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    pdr_router_join(&router);
    curl_global_cleanup();
    if (router.exit_code != 0)
        return router.exit_code;
    if (!pdr_router_stopping(&router))
        return 1;
    pdr_info("shutdown: %lld requests cancelled at drain_timeout",
             (long long)__atomic_load_n(&router.drain_cancelled, __ATOMIC_RELAXED));
    pdr_info("bye");
    if (log_fd >= 0) {
        pdr_log_also_to(-1);
        close(log_fd);
    }
    return 0;
}
