/*
 * Integration test of the Kubernetes discovery source against k8s_replay.py, a scripted API server on
 * loopback (argv[1]: python3, argv[2]: the script). The test pushes pod changes through the server's
 * /control endpoints and asserts, step by step, the sets the source emits (each awaited on a condition
 * variable with a deadline) and the requests that crossed the wire: label selectors, bearer tokens
 * (rotated mid-test), a re-list without resourceVersion after an ERROR 410 event and after an HTTP 410,
 * a re-watch from a BOOKMARK's resourceVersion, a back-off after a 500, and a stop within 200 ms while
 * both watches are open. Two cases, each with its own server: "start_errors", and "watch" (steps 1 to 9,
 * one server and one source: each step starts from the state the step before left). Case names may follow
 * the two arguments.
 */
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "../unit/check.h"
#include "../unit/runner.h"
#include "discovery.h"
#include "script_server.h"
#include "util.h"

#define PREFILL_SEL "app=sglang,role=prefill"
#define DECODE_SEL "app=sglang,role=decode"
#define WAIT_MS 5000
#define MAX_EMITS 64

/* ---- what the source emitted ---- */

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    char q[2][MAX_EMITS][1024]; /* per role, "name=url/bootstrap,..." or "(empty)" */
    int head[2], tail[2];
    int stopped, after_stop;
    int concurrent, inside;
} emits = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void on_emit(void *ud, const char *source, pdr_role_t role, const pdr_discovered_t *list, size_t n)
{
    (void)ud;
    char s[1024];
    size_t at = 0;
    s[0] = '\0';
    for (size_t i = 0; i < n && at < sizeof(s); i++)
        at += (size_t)snprintf(s + at, sizeof(s) - at, "%s%s=%s/%d", i ? "," : "", list[i].name, list[i].url,
                               list[i].bootstrap_port);
    if (n == 0)
        snprintf(s, sizeof(s), "(empty)");
    pthread_mutex_lock(&emits.lock);
    if (emits.inside++)
        emits.concurrent = 1;
    if (emits.stopped)
        emits.after_stop = 1;
    if (strcmp(source, "kubernetes") == 0 && emits.tail[role] - emits.head[role] < MAX_EMITS) {
        memcpy(emits.q[role][emits.tail[role] % MAX_EMITS], s, sizeof(s));
        emits.tail[role]++;
    }
    pthread_cond_broadcast(&emits.cond);
    emits.inside--;
    pthread_mutex_unlock(&emits.lock);
}

/* Waits for the role's next emit and checks it equals want. */
static int expect_emit_at(int line, pdr_role_t role, const char *want)
{
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += WAIT_MS / 1000;
    char got[1024] = "(no emit before the deadline)";
    pthread_mutex_lock(&emits.lock);
    while (emits.head[role] == emits.tail[role])
        if (pthread_cond_timedwait(&emits.cond, &emits.lock, &dl) == ETIMEDOUT)
            break;
    if (emits.head[role] != emits.tail[role])
        memcpy(got, emits.q[role][emits.head[role]++ % MAX_EMITS], sizeof(got));
    pthread_mutex_unlock(&emits.lock);
    if (strcmp(got, want) != 0) {
        fprintf(stderr, "line %d: %s emit:\n  want %s\n  got  %s\n", line,
                role == PDR_ROLE_PREFILL ? "prefill" : "decode", want, got);
        check_failures++;
        return 0;
    }
    printf("%s -> %s\n", role == PDR_ROLE_PREFILL ? "prefill" : "decode", got);
    return 1;
}
#define EXPECT_EMIT(role, want) expect_emit_at(__LINE__, role, want)

/* ---- the replay server ---- */

static script_server_t server;
static char server_url[64];

static int start_server(const char *python, const char *script, const char *token)
{
    char *const argv[] = {(char *)python,
                          (char *)script,
                          (char *)"--token",
                          (char *)token,
                          (char *)"--namespace",
                          (char *)"sglang",
                          NULL};
    if (script_server_start(&server, argv) != 0)
        return -1;
    snprintf(server_url, sizeof(server_url), "http://127.0.0.1:%d", server.port);
    return 0;
}

static void stop_server(void)
{
    script_server_stop(&server);
}

static size_t collect(char *p, size_t size, size_t nmemb, void *ud)
{
    json_t **acc = ud;
    json_t *s = *acc;
    size_t n = size * nmemb;
    char *joined = malloc(json_string_length(s) + n + 1);
    memcpy(joined, json_string_value(s), json_string_length(s));
    memcpy(joined + json_string_length(s), p, n);
    json_string_setn(s, joined, json_string_length(s) + n);
    free(joined);
    return n;
}

/* A control request; returns the parsed JSON answer (NULL on failure). body NULL = GET. */
static json_t *ctl(const char *path, const char *fmt, ...)
{
    char url[512];
    snprintf(url, sizeof(url), "%s%s", server_url, path);
    char *body = NULL;
    if (fmt != NULL) {
        va_list ap;
        va_start(ap, fmt);
        json_t *j = json_vpack_ex(NULL, 0, fmt, ap);
        va_end(ap);
        body = json_dumps(j, JSON_COMPACT);
        json_decref(j);
    }
    json_t *acc = json_string("");
    CURL *e = curl_easy_init();
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &acc);
    curl_easy_setopt(e, CURLOPT_TIMEOUT, 20L);
    if (body != NULL)
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
    CURLcode cc = curl_easy_perform(e);
    long code = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(e);
    free(body);
    json_t *res = cc == CURLE_OK && code == 200 ? json_loads(json_string_value(acc), 0, NULL) : NULL;
    json_decref(acc);
    if (res == NULL)
        fprintf(stderr, "control %s failed (curl %d, HTTP %ld)\n", path, cc, code);
    return res;
}

/* ---- the test ---- */

static json_t *pod(const char *name, const char *role, const char *ip, int ready, const char *ann)
{
    json_t *p = json_pack("{s:s, s:s, s:s*, s:b}", "name", name, "role", role, "ip", ip, "ready", ready);
    if (ann != NULL)
        json_object_set_new(p, "ann", json_string(ann));
    return p;
}

static json_t *log_entries(void)
{
    return ctl("/control/log", NULL);
}

/* Checks every API request: auth, namespace, selector by role, watch parameters. */
static void check_requests(json_t *log)
{
    size_t i;
    json_t *e;
    CHECK(json_array_size(log) >= 8);
    json_array_foreach(log, i, e)
    {
        const char *role = json_string_value(json_object_get(e, "role"));
        const char *sel = json_string_value(json_object_get(e, "selector"));
        CHECK(json_is_true(json_object_get(e, "auth_ok")));
        CHECK(strcmp(json_string_value(json_object_get(e, "namespace")), "sglang") == 0);
        CHECK(role != NULL && sel != NULL);
        if (role != NULL && sel != NULL)
            CHECK(strcmp(sel, strcmp(role, "prefill") == 0 ? PREFILL_SEL : DECODE_SEL) == 0);
        if (json_is_true(json_object_get(e, "watch"))) {
            CHECK(json_is_string(json_object_get(e, "rv")));
            CHECK(strcmp(json_string_value(json_object_get(e, "timeoutSeconds")), "30") == 0);
            CHECK(strcmp(json_string_value(json_object_get(e, "bookmarks")), "true") == 0);
        } else {
            CHECK(json_is_null(json_object_get(e, "rv")));
        }
    }
}

/* Index of the first entry at or after from for role with the given watch flag and status; -1 if none. */
static long find_entry(json_t *log, size_t from, const char *role, int watch, int status)
{
    for (size_t i = from; i < json_array_size(log); i++) {
        json_t *e = json_array_get(log, i);
        if (strcmp(json_string_value(json_object_get(e, "role")), role) == 0 &&
            json_is_true(json_object_get(e, "watch")) == watch &&
            json_integer_value(json_object_get(e, "status")) == status)
            return (long)i;
    }
    return -1;
}

static void write_token(const char *path, const char *token)
{
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.new", path);
    FILE *f = fopen(tmp, "w");
    fprintf(f, "%s\n", token);
    fclose(f);
    rename(tmp, path); /* projected tokens are swapped in whole, like this */
}

static void test_start_errors(const char *token_path)
{
    char err[512];
    pdr_config_t *c = pdr_config_new_default();
    /* Nothing to watch: NULL and no error. */
    err[0] = 'x';
    CHECK(pdr_k8s_discovery_start(&c->discovery, NULL, on_emit, NULL, err, sizeof(err)) == NULL &&
          err[0] == '\0');
    c->discovery.kubernetes.role[PDR_ROLE_PREFILL].selector = strdup(PREFILL_SEL);
    /* No api_server and no in-cluster environment. */
    unsetenv("KUBERNETES_SERVICE_HOST");
    CHECK(pdr_k8s_discovery_start(&c->discovery, NULL, on_emit, NULL, err, sizeof(err)) == NULL);
    CHECK(strstr(err, "KUBERNETES_SERVICE_HOST") != NULL);
    /* An explicit token file that does not exist. */
    c->discovery.kubernetes.api_server = strdup(server_url);
    char missing[4200];
    snprintf(missing, sizeof(missing), "%s.missing", token_path);
    c->discovery.kubernetes.token_file = strdup(missing);
    CHECK(pdr_k8s_discovery_start(&c->discovery, NULL, on_emit, NULL, err, sizeof(err)) == NULL);
    CHECK(strstr(err, "token_file") != NULL && strstr(err, ".missing") != NULL);
    pdr_config_unref(c);
}

/* argv[1] and argv[2], read by main before the cases run. */
static const char *py_path, *script_path;

/* A case's server, started with token tok-1 written into dir/token. */
static void case_server(char *dir, char *token_path, size_t len)
{
    if (mkdtemp(dir) == NULL)
        exit(1);
    snprintf(token_path, len, "%s/token", dir);
    write_token(token_path, "tok-1");
    if (start_server(py_path, script_path, "tok-1") != 0)
        exit(1);
}

static void setup(void)
{
    signal(SIGPIPE, SIG_IGN);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&emits.cond, &ca);
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void teardown(void)
{
    curl_global_cleanup();
}

static void test_start_errors_case(void)
{
    char dir[] = "/tmp/pdr-k8s-XXXXXX";
    char token_path[4096];
    case_server(dir, token_path, sizeof(token_path));
    test_start_errors(token_path);
    stop_server();
    unlink(token_path);
    rmdir(dir);
}

static void test_watch(void)
{
    char dir[] = "/tmp/pdr-k8s-XXXXXX";
    char token_path[4096];
    case_server(dir, token_path, sizeof(token_path));

    /* The cluster before the router starts: 2 ready prefill pods and one not ready; a pending decode pod. */
    json_decref(ctl(
        "/control/put", "{s:[o,o,o,o]}", "pods", pod("p-0", "prefill", "10.0.0.1", 1, "9001"),
        pod("p-1", "prefill", "10.0.0.2", 1, NULL), pod("p-2", "prefill", "10.0.0.3", 0, NULL),
        json_pack("{s:s, s:s, s:s, s:b}", "name", "d-9", "role", "decode", "phase", "Pending", "ready", 0)));

    pdr_config_t *c = pdr_config_new_default();
    c->discovery.kubernetes.role[PDR_ROLE_PREFILL].selector = strdup(PREFILL_SEL);
    c->discovery.kubernetes.role[PDR_ROLE_PREFILL].port = 0; /* from containerPort */
    c->discovery.kubernetes.role[PDR_ROLE_PREFILL].bootstrap_port = 8998;
    c->discovery.kubernetes.role[PDR_ROLE_DECODE].selector = strdup(DECODE_SEL);
    c->discovery.kubernetes.role[PDR_ROLE_DECODE].port = 31000;
    c->discovery.kubernetes.role[PDR_ROLE_DECODE].bootstrap_port = -1;
    c->discovery.kubernetes.api_server = strdup(server_url);
    c->discovery.kubernetes.namespace_ = strdup("sglang");
    c->discovery.kubernetes.token_file = strdup(token_path);
    c->discovery.kubernetes.watch_timeout_s = 30;
    char err[512];
    pdr_discovery_t *d = pdr_k8s_discovery_start(&c->discovery, NULL, on_emit, NULL, err, sizeof(err));
    CHECK(d != NULL);
    if (d == NULL) {
        fprintf(stderr, "start: %s\n", err);
        stop_server();
        exit(1);
    }

    /* 1. The initial lists. */
    EXPECT_EMIT(PDR_ROLE_PREFILL, "p-0=http://10.0.0.1:30000/9001,p-1=http://10.0.0.2:30000/8998");
    EXPECT_EMIT(PDR_ROLE_DECODE, "(empty)");

    /* 2. A ready decode pod is ADDED; the config's decode port wins over its containerPort. */
    json_decref(ctl("/control/put", "{s:[o]}", "pods", pod("d-0", "decode", "10.0.1.1", 1, NULL)));
    EXPECT_EMIT(PDR_ROLE_DECODE, "d-0=http://10.0.1.1:31000/-1");

    /* 3. A MODIFIED that changes nothing the router uses emits nothing (the next decode emit below must be
     * the HTTP 410 step's); p-1 becoming NotReady is removed. */
    json_decref(ctl("/control/put", "{s:[o]}", "pods", pod("d-0", "decode", "10.0.1.1", 1, "1234")));
    json_decref(ctl("/control/put", "{s:[o]}", "pods", pod("p-1", "prefill", "10.0.0.2", 0, NULL)));
    EXPECT_EMIT(PDR_ROLE_PREFILL, "p-0=http://10.0.0.1:30000/9001");

    /* 4. DELETED. */
    json_decref(ctl("/control/delete", "{s:[s]}", "names", "p-0"));
    EXPECT_EMIT(PDR_ROLE_PREFILL, "(empty)");

    /* 5. A BOOKMARK moves the resourceVersion: after the watch ends cleanly, the next one starts there. */
    json_t *bm = ctl("/control/bookmark", "{}");
    char bm_rv[64] = "";
    snprintf(bm_rv, sizeof(bm_rv), "%s", bm ? json_string_value(json_object_get(bm, "rv")) : "");
    json_decref(bm);
    json_decref(ctl("/control/close", "{s:s}", "role", "prefill"));
    char path[256];
    snprintf(path, sizeof(path), "/control/wait_request?role=prefill&watch=1&rv=%s&timeout=5", bm_rv);
    json_t *w = ctl(path, NULL);
    CHECK(w != NULL && json_is_true(json_object_get(w, "ok")));
    json_decref(w);

    /* 6. The token rotates; then an ERROR event (Status 410) while the pods changed unseen: a re-list
     * with the new token gives the new set (annotation 9100 honoured). */
    json_t *log = log_entries();
    size_t mark = json_array_size(log);
    json_decref(log);
    write_token(token_path, "tok-2");
    json_decref(ctl("/control/token", "{s:s}", "token", "tok-2"));
    json_decref(ctl("/control/expire", "{s:s, s:[o,o], s:[s]}", "role", "prefill", "put",
                    pod("p-5", "prefill", "10.0.0.5", 1, NULL), pod("p-6", "prefill", "10.0.0.6", 1, "9100"),
                    "delete", "p-2"));
    EXPECT_EMIT(PDR_ROLE_PREFILL, "p-5=http://10.0.0.5:30000/8998,p-6=http://10.0.0.6:30000/9100");
    log = log_entries();
    CHECK(find_entry(log, mark, "prefill", 0, 200) >= 0);
    CHECK(find_entry(log, mark, "prefill", 1, 410) <
          0); /* the ERROR event itself, not a later 410, re-listed */
    json_decref(log);

    /* 7. An HTTP 410 on the decode watch (history compacted past its resourceVersion), then a 500 on the
     * re-list: the source backs off, lists again and finds the IPv6 pod added meanwhile. */
    log = log_entries();
    mark = json_array_size(log);
    json_decref(log);
    json_decref(ctl("/control/fail", "{s:s, s:i, s:i}", "role", "decode", "status", 500, "count", 1));
    json_decref(ctl("/control/compact", "{s:s, s:[o]}", "role", "decode", "put",
                    pod("d-1", "decode", "fd00::5", 1, NULL)));
    EXPECT_EMIT(PDR_ROLE_DECODE, "d-0=http://10.0.1.1:31000/-1,d-1=http://[fd00::5]:31000/-1");
    log = log_entries();
    long gone = find_entry(log, mark, "decode", 1, 410);
    long failed = gone >= 0 ? find_entry(log, (size_t)gone, "decode", 0, 500) : -1;
    long relisted = failed >= 0 ? find_entry(log, (size_t)failed, "decode", 0, 200) : -1;
    CHECK(gone >= 0 && failed > gone && relisted > failed);
    json_decref(log);

    /* 8. An invalid bootstrap-port annotation falls back to the config's port. */
    json_decref(ctl("/control/put", "{s:[o]}", "pods", pod("p-7", "prefill", "10.0.0.7", 1, "notaport")));
    EXPECT_EMIT(
        PDR_ROLE_PREFILL,
        "p-5=http://10.0.0.5:30000/8998,p-6=http://10.0.0.6:30000/9100,p-7=http://10.0.0.7:30000/8998");

    /* 9. Stop while both watches are open: prompt, and no emit afterwards. */
    w = ctl("/control/wait_watchers?role=prefill&n=1&timeout=5", NULL);
    CHECK(w != NULL && json_is_true(json_object_get(w, "ok")));
    json_decref(w);
    w = ctl("/control/wait_watchers?role=decode&n=1&timeout=5", NULL);
    CHECK(w != NULL && json_is_true(json_object_get(w, "ok")));
    json_decref(w);
    uint64_t t0 = pdr_now_ms();
    pdr_discovery_stop(d);
    uint64_t took = pdr_now_ms() - t0;
    printf("stop took %llu ms\n", (unsigned long long)took);
    CHECK(took < 200);
    pthread_mutex_lock(&emits.lock);
    emits.stopped = 1;
    CHECK(emits.head[0] == emits.tail[0] && emits.head[1] == emits.tail[1]); /* no unexpected emit */
    CHECK(!emits.concurrent);
    pthread_mutex_unlock(&emits.lock);
    /* A change after stop reaches no callback (on_emit would set after_stop). */
    json_decref(ctl("/control/put", "{s:[o]}", "pods", pod("p-8", "prefill", "10.0.0.8", 1, NULL)));
    CHECK(!emits.after_stop);

    log = log_entries();
    check_requests(log);
    json_decref(log);

    pdr_config_unref(c);
    stop_server();
    unlink(token_path);
    rmdir(dir);
}

static const pdr_test_case_t cases[] = {
    {"start_errors", test_start_errors_case, 20},
    {"watch", test_watch, 50},
};

/* argv[1] is python3 and argv[2] the script; the names after them pick cases. */
int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s PYTHON3 k8s_replay.py [CASE...]\n", argv[0]);
        return 2;
    }
    py_path = argv[1];
    script_path = argv[2];
    int rc = pdr_test_run(cases, sizeof(cases) / sizeof(cases[0]), setup, teardown, argc - 2, argv + 2);
    if (rc == 0)
        printf("all checks passed\n");
    return rc;
}
