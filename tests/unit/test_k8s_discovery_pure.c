/*
 * Unit tests of the pure parts of the Kubernetes source (router/discovery/discovery_k8s_pods.h): a pod's JSON
 * to a worker, the watch stream's line splitting at every chunk boundary, and list and event application with
 * the "emit only what changed" rule.
 */
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "runner.h"
#include "discovery_k8s_pods.h"
#include "err.h"

typedef struct pod_spec {
    const char *name, *phase, *ip, *ready, *ann;
    int port; /* containerPort; 0 = none */
    int deleting;
} pod_spec_t;

/* A Pod object shaped like the API's. */
static json_t *pod_json(const pod_spec_t *s)
{
    json_t *meta = json_pack("{s:s, s:s, s:s, s:s, s:{s:s, s:s}}", "name", s->name, "namespace", "sglang",
                             "uid", "0b6a4f4e-1d1c-4c37-9d59-2b8a4d0f7a11", "resourceVersion", "100",
                             "labels", "app", "sglang", "role", "prefill");
    if (s->ann != NULL)
        json_object_set_new(meta, "annotations", json_pack("{s:s}", PDR_K8S_ANN_BOOTSTRAP, s->ann));
    if (s->deleting)
        json_object_set_new(meta, "deletionTimestamp", json_string("2024-05-01T10:00:00Z"));
    json_t *container = json_pack("{s:s, s:s}", "name", "sglang", "image", "lmsysorg/sglang:latest");
    if (s->port > 0)
        json_object_set_new(
            container, "ports",
            json_pack("[{s:s, s:i, s:s}]", "name", "http", "containerPort", s->port, "protocol", "TCP"));
    json_t *status = json_pack("{s:s}", "phase", s->phase);
    if (s->ip != NULL) {
        json_object_set_new(status, "podIP", json_string(s->ip));
        json_object_set_new(status, "podIPs", json_pack("[{s:s}]", "ip", s->ip));
    }
    if (s->ready != NULL)
        json_object_set_new(status, "conditions",
                            json_pack("[{s:s, s:s}, {s:s, s:s}]", "type", "Initialized", "status", "True",
                                      "type", "Ready", "status", s->ready));
    return json_pack("{s:s, s:s, s:o, s:{s:[o]}, s:o}", "apiVersion", "v1", "kind", "Pod", "metadata", meta,
                     "spec", "containers", container, "status", status);
}

static pdr_k8s_pod_state_t parse(const pod_spec_t *s, const pdr_k8s_role_conf_t *rc, pdr_discovered_t *w,
                                 int *bad)
{
    json_t *pod = pod_json(s);
    pdr_k8s_pod_state_t st = pdr__k8s_pod_parse(pod, rc, w, bad);
    json_decref(pod);
    return st;
}

static void test_pod_parse(void)
{
    pdr_k8s_role_conf_t prefill = {.port = 0, .bootstrap_port = 8998, .use_annotation = 1};
    pdr_k8s_role_conf_t decode = {.port = 31000, .bootstrap_port = -1, .use_annotation = 0};
    pdr_discovered_t w;
    int bad;

    pod_spec_t ready = {"p-0", "Running", "10.1.2.3", "True", "9001", 30000, 0};
    CHECK(parse(&ready, &prefill, &w, &bad) == PDR_K8S_POD_READY);
    CHECK(strcmp(w.url, "http://10.1.2.3:30000") == 0);
    CHECK(strcmp(w.name, "p-0") == 0);
    CHECK(w.bootstrap_port == 9001 && bad == 0);

    /* The config's port wins over the containerPort; decode ignores the annotation. */
    CHECK(parse(&ready, &decode, &w, &bad) == PDR_K8S_POD_READY);
    CHECK(strcmp(w.url, "http://10.1.2.3:31000") == 0 && w.bootstrap_port == -1 && bad == 0);
    decode.https = 1; /* scheme: https */
    CHECK(parse(&ready, &decode, &w, &bad) == PDR_K8S_POD_READY);
    CHECK(strcmp(w.url, "https://10.1.2.3:31000") == 0);
    decode.https = 0;

    pod_spec_t no_ann = {"p-1", "Running", "10.1.2.4", "True", NULL, 30000, 0};
    CHECK(parse(&no_ann, &prefill, &w, &bad) == PDR_K8S_POD_READY);
    CHECK(w.bootstrap_port == 8998 && bad == 0);

    static const char *invalid[] = {"abc", "0", "65536", "12x", "", "-5", " 9000"};
    for (size_t i = 0; i < sizeof(invalid) / sizeof(invalid[0]); i++) {
        pod_spec_t s = {"p-2", "Running", "10.1.2.5", "True", invalid[i], 30000, 0};
        CHECK(parse(&s, &prefill, &w, &bad) == PDR_K8S_POD_READY);
        CHECK(w.bootstrap_port == 8998 && bad == 1);
    }
    pod_spec_t ann_max = {"p-3", "Running", "10.1.2.5", "True", "65535", 30000, 0};
    CHECK(parse(&ann_max, &prefill, &w, &bad) == PDR_K8S_POD_READY && w.bootstrap_port == 65535 && bad == 0);

    pod_spec_t v6 = {"p-4", "Running", "fd00::5", "True", NULL, 30000, 0};
    CHECK(parse(&v6, &prefill, &w, &bad) == PDR_K8S_POD_READY);
    CHECK(strcmp(w.url, "http://[fd00::5]:30000") == 0);

    pod_spec_t not_ready = {"p-5", "Running", "10.1.2.6", "False", NULL, 30000, 0};
    CHECK(parse(&not_ready, &prefill, &w, &bad) == PDR_K8S_POD_NOT_READY);
    CHECK(strcmp(w.name, "p-5") == 0 && w.url[0] == '\0');
    pod_spec_t no_cond = {"p-5", "Running", "10.1.2.6", NULL, NULL, 30000, 0};
    CHECK(parse(&no_cond, &prefill, &w, &bad) == PDR_K8S_POD_NOT_READY);
    pod_spec_t pending = {"p-6", "Pending", NULL, "False", NULL, 30000, 0};
    CHECK(parse(&pending, &prefill, &w, &bad) == PDR_K8S_POD_NOT_RUNNING);
    pod_spec_t no_ip = {"p-7", "Running", NULL, "True", NULL, 30000, 0};
    CHECK(parse(&no_ip, &prefill, &w, &bad) == PDR_K8S_POD_NO_IP);
    pod_spec_t bad_ip = {"p-7", "Running", "10.1.2.3:80/x", "True", NULL, 30000, 0};
    CHECK(parse(&bad_ip, &prefill, &w, &bad) == PDR_K8S_POD_NO_IP);
    pod_spec_t terminating = {"p-8", "Running", "10.1.2.8", "True", NULL, 30000, 1};
    CHECK(parse(&terminating, &prefill, &w, &bad) == PDR_K8S_POD_TERMINATING);
    pod_spec_t no_port = {"p-9", "Running", "10.1.2.9", "True", NULL, 0, 0};
    CHECK(parse(&no_port, &prefill, &w, &bad) == PDR_K8S_POD_NO_PORT);
    CHECK(parse(&no_port, &decode, &w, &bad) == PDR_K8S_POD_READY); /* the config gives the port */

    json_t *nameless = json_pack("{s:{}, s:{s:s}}", "metadata", "status", "phase", "Running");
    CHECK(pdr__k8s_pod_parse(nameless, &prefill, &w, &bad) == PDR_K8S_POD_MALFORMED);
    json_decref(nameless);
    json_t *arr = json_array();
    CHECK(pdr__k8s_pod_parse(arr, &prefill, &w, &bad) == PDR_K8S_POD_MALFORMED);
    json_decref(arr);
    /* Kubernetes names go up to 253 bytes: they fit; anything longer is not a pod name. */
    char longname[300];
    memset(longname, 'a', sizeof(longname) - 1);
    longname[253] = '\0';
    pod_spec_t long_ok = {longname, "Running", "10.1.2.3", "True", NULL, 30000, 0};
    CHECK(parse(&long_ok, &prefill, &w, &bad) == PDR_K8S_POD_READY && strlen(w.name) == 253);
    longname[253] = 'a';
    longname[sizeof(longname) - 1] = '\0';
    pod_spec_t too_long = {longname, "Running", "10.1.2.3", "True", NULL, 30000, 0};
    CHECK(parse(&too_long, &prefill, &w, &bad) == PDR_K8S_POD_MALFORMED);
}

typedef struct lines_seen {
    char text[512];
    int count, stop_at;
} lines_seen_t;

static int collect_line(void *ud, const char *line, size_t len)
{
    lines_seen_t *s = ud;
    size_t at = strlen(s->text);
    if (at + len + 2 < sizeof(s->text)) {
        memcpy(s->text + at, line, len);
        s->text[at + len] = '|';
        s->text[at + len + 1] = '\0';
    }
    s->count++;
    return s->count == s->stop_at ? 7 : 0;
}

static void test_lines(void)
{
    static const char in[] =
        "{\"type\":\"ADDED\"}\n{\"type\":\"MODIFIED\"}\r\n\n\r\n{\"type\":\"DELETED\"}\nabc\n";
    static const char want[] = "{\"type\":\"ADDED\"}|{\"type\":\"MODIFIED\"}|{\"type\":\"DELETED\"}|abc|";
    size_t n = sizeof(in) - 1;
    /* Every split into two and three chunks gives the same lines. */
    for (size_t a = 0; a <= n; a++) {
        for (size_t b = a; b <= n; b++) {
            pdr_k8s_lines_t l = {.limit = 64};
            lines_seen_t seen = {.text = "", .count = 0, .stop_at = -1};
            int rc = pdr__k8s_lines_feed(&l, in, a, collect_line, &seen);
            rc |= pdr__k8s_lines_feed(&l, in + a, b - a, collect_line, &seen);
            rc |= pdr__k8s_lines_feed(&l, in + b, n - b, collect_line, &seen);
            if (rc != 0 || strcmp(seen.text, want) != 0) {
                CHECK(rc == 0 && strcmp(seen.text, want) == 0);
                fprintf(stderr, "split at %zu,%zu gave \"%s\"\n", a, b, seen.text);
                pdr__k8s_lines_free(&l);
                return;
            }
            pdr__k8s_lines_free(&l);
        }
    }
    /* Byte by byte. */
    pdr_k8s_lines_t l = {.limit = 64};
    lines_seen_t seen = {.text = "", .count = 0, .stop_at = -1};
    for (size_t i = 0; i < n; i++)
        CHECK(pdr__k8s_lines_feed(&l, in + i, 1, collect_line, &seen) == 0);
    CHECK(strcmp(seen.text, want) == 0);
    /* A partial line stays until reset. */
    CHECK(pdr__k8s_lines_feed(&l, "partial", 7, collect_line, &seen) == 0 && seen.count == 4);
    pdr__k8s_lines_reset(&l);
    CHECK(pdr__k8s_lines_feed(&l, "x\n", 2, collect_line, &seen) == 0);
    CHECK(strstr(seen.text, "abc|x|") != NULL);

    /* A callback's nonzero answer stops the feed. */
    lines_seen_t stop = {.text = "", .count = 0, .stop_at = 2};
    pdr__k8s_lines_reset(&l);
    CHECK(pdr__k8s_lines_feed(&l, "a\nb\nc\n", 6, collect_line, &stop) == 7);
    CHECK(strcmp(stop.text, "a|b|") == 0);

    /* The line limit holds whether the long line comes whole or in pieces. */
    char big[100];
    memset(big, 'x', sizeof(big));
    big[99] = '\n';
    pdr__k8s_lines_reset(&l);
    CHECK(pdr__k8s_lines_feed(&l, big, sizeof(big), collect_line, &seen) == PDR_ETOOBIG);
    pdr__k8s_lines_reset(&l);
    CHECK(pdr__k8s_lines_feed(&l, big, 40, collect_line, &seen) == 0);
    CHECK(pdr__k8s_lines_feed(&l, big, 40, collect_line, &seen) == PDR_ETOOBIG);
    pdr__k8s_lines_reset(&l);
    CHECK(pdr__k8s_lines_feed(&l, big, 64, collect_line, &seen) == 0); /* exactly the limit, unfinished */
    CHECK(pdr__k8s_lines_feed(&l, "\n", 1, collect_line, &seen) == 0);
    pdr__k8s_lines_free(&l);
}

static char *event(const char *type, json_t *obj)
{
    json_t *ev = json_pack("{s:s, s:o}", "type", type, "object", obj);
    char *s = json_dumps(ev, JSON_COMPACT);
    json_decref(ev);
    return s;
}

static pdr_k8s_event_t apply(pdr_k8s_set_t *set, const char *type, json_t *obj)
{
    char err[256];
    char *line = event(type, obj);
    pdr_k8s_event_t e = pdr__k8s_set_apply_event(set, line, strlen(line), err, sizeof(err));
    free(line);
    return e;
}

/* "name=url/bootstrap,..." of what take_changed gives, or "-" when it says nothing changed. */
static const char *take(pdr_k8s_set_t *set, char *out, size_t outlen)
{
    const pdr_discovered_t *list;
    size_t n;
    int rc = pdr__k8s_set_take_changed(set, &list, &n);
    if (rc <= 0) {
        snprintf(out, outlen, rc == 0 ? "-" : "error");
        return out;
    }
    size_t at = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n && at < outlen; i++)
        at += (size_t)snprintf(out + at, outlen - at, "%s%s=%s/%d", i ? "," : "", list[i].name, list[i].url,
                               list[i].bootstrap_port);
    if (n == 0)
        snprintf(out, outlen, "(empty)");
    return out;
}

static void test_set(void)
{
    pdr_k8s_role_conf_t rc = {.port = 0, .bootstrap_port = 8998, .use_annotation = 1};
    pdr_k8s_set_t set;
    char buf[1024], err[256];
    pdr__k8s_set_init(&set, &rc, "prefill app=sglang");

    /* The first list emits even when empty. */
    static const char empty[] =
        "{\"apiVersion\":\"v1\",\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"5\"},"
        "\"items\":[]}";
    CHECK(pdr__k8s_set_apply_list(&set, empty, sizeof(empty) - 1, err, sizeof(err)) == 0);
    CHECK(strcmp(take(&set, buf, sizeof(buf)), "(empty)") == 0);
    CHECK(strcmp(take(&set, buf, sizeof(buf)), "-") == 0);
    CHECK(strcmp(set.rv, "5") == 0);

    pod_spec_t p0 = {"p-0", "Running", "10.0.0.1", "True", "9001", 30000, 0};
    pod_spec_t p1 = {"p-1", "Running", "10.0.0.2", "True", NULL, 30000, 0};
    pod_spec_t p2 = {"p-2", "Running", "10.0.0.3", "False", NULL, 30000, 0};
    json_t *list =
        json_pack("{s:s, s:s, s:{s:s}, s:[o,o,o]}", "apiVersion", "v1", "kind", "PodList", "metadata",
                  "resourceVersion", "10", "items", pod_json(&p2), pod_json(&p1), pod_json(&p0));
    char *body = json_dumps(list, JSON_COMPACT);
    json_decref(list);
    CHECK(pdr__k8s_set_apply_list(&set, body, strlen(body), err, sizeof(err)) == 0);
    CHECK(strcmp(take(&set, buf, sizeof(buf)),
                 "p-0=http://10.0.0.1:30000/9001,p-1=http://10.0.0.2:30000/8998") == 0);
    CHECK(strcmp(set.rv, "10") == 0 && set.n == 3);
    /* The same list again changes nothing. */
    CHECK(pdr__k8s_set_apply_list(&set, body, strlen(body), err, sizeof(err)) == 0);
    CHECK(strcmp(take(&set, buf, sizeof(buf)), "-") == 0);
    free(body);

    pod_spec_t p3 = {"p-3", "Running", "10.0.0.4", "True", NULL, 30000, 0};
    CHECK(apply(&set, "ADDED", pod_json(&p3)) == PDR_K8S_EV_APPLIED);
    CHECK(strstr(take(&set, buf, sizeof(buf)), "p-3=http://10.0.0.4:30000/8998") != NULL);
    CHECK(apply(&set, "MODIFIED", pod_json(&p3)) == PDR_K8S_EV_APPLIED);
    CHECK(strcmp(take(&set, buf, sizeof(buf)), "-") == 0);
    p1.ready = "False";
    CHECK(apply(&set, "MODIFIED", pod_json(&p1)) == PDR_K8S_EV_APPLIED);
    CHECK(strcmp(take(&set, buf, sizeof(buf)),
                 "p-0=http://10.0.0.1:30000/9001,p-3=http://10.0.0.4:30000/8998") == 0);
    p2.ready = "True";
    CHECK(apply(&set, "MODIFIED", pod_json(&p2)) == PDR_K8S_EV_APPLIED);
    CHECK(
        strcmp(
            take(&set, buf, sizeof(buf)),
            "p-0=http://10.0.0.1:30000/9001,p-2=http://10.0.0.3:30000/8998,p-3=http://10.0.0.4:30000/8998") ==
        0);
    /* A new annotation is a change. */
    p2.ann = "9100";
    CHECK(apply(&set, "MODIFIED", pod_json(&p2)) == PDR_K8S_EV_APPLIED);
    CHECK(strstr(take(&set, buf, sizeof(buf)), "p-2=http://10.0.0.3:30000/9100") != NULL);
    CHECK(apply(&set, "DELETED", pod_json(&p0)) == PDR_K8S_EV_APPLIED);
    CHECK(strcmp(take(&set, buf, sizeof(buf)),
                 "p-2=http://10.0.0.3:30000/9100,p-3=http://10.0.0.4:30000/8998") == 0);
    CHECK(apply(&set, "DELETED", pod_json(&p0)) == PDR_K8S_EV_APPLIED); /* unknown: nothing happens */
    CHECK(strcmp(take(&set, buf, sizeof(buf)), "-") == 0);
    p3.deleting = 1;
    CHECK(apply(&set, "MODIFIED", pod_json(&p3)) == PDR_K8S_EV_APPLIED);
    CHECK(strcmp(take(&set, buf, sizeof(buf)), "p-2=http://10.0.0.3:30000/9100") == 0);

    CHECK(apply(&set, "BOOKMARK",
                json_pack("{s:s, s:s, s:{s:s}}", "kind", "Pod", "apiVersion", "v1", "metadata",
                          "resourceVersion", "77")) == PDR_K8S_EV_BOOKMARK);
    CHECK(strcmp(set.rv, "77") == 0);
    CHECK(strcmp(take(&set, buf, sizeof(buf)), "-") == 0);
    CHECK(apply(&set, "ERROR",
                json_pack("{s:s, s:s, s:s, s:s, s:i}", "kind", "Status", "status", "Failure", "message",
                          "too old resource version: 5 (77)", "reason", "Expired", "code", 410)) ==
          PDR_K8S_EV_GONE);
    CHECK(apply(&set, "ERROR",
                json_pack("{s:s, s:s, s:i}", "kind", "Status", "message", "internal error", "code", 500)) ==
          PDR_K8S_EV_ERROR);
    CHECK(apply(&set, "SOMETHING_NEW", json_object()) == PDR_K8S_EV_IGNORED);
    CHECK(apply(&set, "ADDED", json_pack("{s:{}}", "metadata")) == PDR_K8S_EV_MALFORMED);
    CHECK(pdr__k8s_set_apply_event(&set, "{not json", 9, err, sizeof(err)) == PDR_K8S_EV_MALFORMED);
    CHECK(pdr__k8s_set_apply_event(&set, "{\"type\":\"ADDED\"}", 16, err, sizeof(err)) ==
          PDR_K8S_EV_MALFORMED);
    CHECK(strcmp(take(&set, buf, sizeof(buf)), "-") == 0);

    /* What is not a PodList leaves the set alone. */
    static const char status[] = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"code\":403}";
    CHECK(pdr__k8s_set_apply_list(&set, status, sizeof(status) - 1, err, sizeof(err)) == PDR_EPROTO);
    CHECK(pdr__k8s_set_apply_list(&set, "[]", 2, err, sizeof(err)) == PDR_EPROTO);
    CHECK(set.n == 3 && strcmp(set.rv, "77") == 0);
    /* A re-list replaces everything; the empty set is emitted. */
    CHECK(pdr__k8s_set_apply_list(&set, empty, sizeof(empty) - 1, err, sizeof(err)) == 0);
    CHECK(strcmp(take(&set, buf, sizeof(buf)), "(empty)") == 0 && set.n == 0);
    pdr__k8s_set_free(&set);
}

/* precise_prefix: the pod's KV event publisher, from its annotation, for either role. */
static void test_kv_events_annotation(void)
{
    pdr_k8s_role_conf_t decode = {.port = 31000, .bootstrap_port = -1, .use_annotation = 0};
    pod_spec_t s = {"d-1", "Running", "10.1.2.9", "True", NULL, 30000, 0};
    const char *const vals[] = {"tcp://10.1.2.9:5557", "http://10.1.2.9:5557", "tcp://10.1.2.9"};
    for (int i = 0; i < 3; i++) {
        json_t *pod = pod_json(&s);
        json_object_set_new(json_object_get(pod, "metadata"), "annotations",
                            json_pack("{s:s}", PDR_K8S_ANN_KV_EVENTS, vals[i]));
        pdr_discovered_t w;
        int bad = 0;
        CHECK(pdr__k8s_pod_parse(pod, &decode, &w, &bad) == PDR_K8S_POD_READY);
        if (i == 0)
            CHECK(strcmp(w.kv_events, "tcp://10.1.2.9:5557") == 0 && bad == 0);
        else
            CHECK(w.kv_events[0] == '\0' && bad == 2);
        json_decref(pod);
    }
    pdr_discovered_t w;
    int bad = 0;
    CHECK(parse(&s, &decode, &w, &bad) == PDR_K8S_POD_READY && w.kv_events[0] == '\0' && bad == 0);
    CHECK(w.kv_events_replay[0] == '\0');
    /* Its replay socket: a good one beside the publisher, a bad one ignored (bit 4), the publisher kept. */
    for (int i = 0; i < 2; i++) {
        json_t *pod = pod_json(&s);
        json_object_set_new(json_object_get(pod, "metadata"), "annotations",
                            json_pack("{s:s,s:s}", PDR_K8S_ANN_KV_EVENTS, vals[0],
                                      PDR_K8S_ANN_KV_EVENTS_REPLAY,
                                      i == 0 ? "tcp://10.1.2.9:5558" : "tcp://10.1.2.9"));
        CHECK(pdr__k8s_pod_parse(pod, &decode, &w, &bad) == PDR_K8S_POD_READY);
        CHECK(strcmp(w.kv_events, "tcp://10.1.2.9:5557") == 0);
        if (i == 0)
            CHECK(strcmp(w.kv_events_replay, "tcp://10.1.2.9:5558") == 0 && bad == 0);
        else
            CHECK(w.kv_events_replay[0] == '\0' && bad == 4);
        json_decref(pod);
    }
}

/* A pod of an InferencePool: the pod_spec_t pod with the role label set to role (NULL: none). */
static json_t *pool_pod_json(const pod_spec_t *s, const char *role)
{
    json_t *pod = pod_json(s);
    json_t *labels = json_object_get(json_object_get(pod, "metadata"), "labels");
    if (role != NULL)
        json_object_set_new(labels, "llm-d.ai/role", json_string(role));
    return pod;
}

static void test_pool_roles(void)
{
    pdr_k8s_role_conf_t pre = {.bootstrap_port = 8998,
                               .use_annotation = 1,
                               .role_label = "llm-d.ai/role",
                               .role = PDR_ROLE_PREFILL,
                               .ports = {8000},
                               .nports = 1};
    pdr_k8s_role_conf_t dec = pre;
    dec.role = PDR_ROLE_DECODE;
    dec.bootstrap_port = -1;
    dec.use_annotation = 0;
    static const struct {
        const char *label;
        int prefill, decode, bad;
    } cases[] = {
        {"prefill", 1, 0, 0}, {"decode", 0, 1, 0}, {"both", 1, 1, 0},    {"prefill-decode", 1, 1, 0},
        {NULL, 0, 1, 16},     {"router", 0, 0, 8}, {"Prefill", 0, 0, 8},
    };
    pod_spec_t ps = {"w-0", "Running", "10.0.0.9", "True", "9001", 30000, 0};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *pod = pool_pod_json(&ps, cases[i].label);
        pdr_discovered_t w;
        int bad;
        pdr_k8s_pod_state_t st = pdr__k8s_pod_parse(pod, &pre, &w, &bad);
        CHECK(st == (cases[i].prefill ? PDR_K8S_POD_READY : PDR_K8S_POD_OTHER_ROLE));
        CHECK((bad & 24) == (cases[i].bad & 24));
        if (cases[i].prefill) /* the target port, not the containerPort; the annotation's bootstrap port */
            CHECK(strcmp(w.url, "http://10.0.0.9:8000") == 0 && w.bootstrap_port == 9001);
        st = pdr__k8s_pod_parse(pod, &dec, &w, &bad);
        CHECK(st == (cases[i].decode ? PDR_K8S_POD_READY : PDR_K8S_POD_OTHER_ROLE));
        if (cases[i].decode)
            CHECK(strcmp(w.url, "http://10.0.0.9:8000") == 0 && w.bootstrap_port == -1);
        json_decref(pod);
    }
    /* The role is read before the state: a not-ready pod of the other role is of the other role. */
    pod_spec_t nr = {"w-1", "Pending", NULL, NULL, NULL, 0, 0};
    json_t *pod = pool_pod_json(&nr, "decode");
    pdr_discovered_t w;
    int bad;
    CHECK(pdr__k8s_pod_parse(pod, &pre, &w, &bad) == PDR_K8S_POD_OTHER_ROLE);
    CHECK(pdr__k8s_pod_parse(pod, &dec, &w, &bad) == PDR_K8S_POD_NOT_RUNNING);
    json_decref(pod);
    /* Without role_label every pod is of the set's role, labelled or not. */
    pdr_k8s_role_conf_t plain = {.port = 0, .bootstrap_port = -1};
    pod = pool_pod_json(&ps, "prefill");
    CHECK(pdr__k8s_pod_parse(pod, &plain, &w, &bad) == PDR_K8S_POD_READY && strcmp(w.name, "w-0") == 0 &&
          strcmp(w.url, "http://10.0.0.9:30000") == 0);
    json_decref(pod);
}

static void test_pool_ports(void)
{
    pdr_k8s_role_conf_t rc = {.bootstrap_port = -1,
                              .role_label = "llm-d.ai/role",
                              .role = PDR_ROLE_DECODE,
                              .ports = {8000},
                              .nports = 1};
    pdr_k8s_set_t set;
    char buf[1024];
    pdr__k8s_set_init(&set, &rc, "decode of InferencePool p");
    pod_spec_t d0 = {"d-0", "Running", "10.0.0.1", "True", NULL, 0, 0};
    pod_spec_t d1 = {"d-1", "Running", "fd00::5", "True", NULL, 0, 0};
    CHECK(apply(&set, "ADDED", pool_pod_json(&d0, "decode")) == PDR_K8S_EV_APPLIED);
    CHECK(apply(&set, "ADDED", pool_pod_json(&d1, NULL)) == PDR_K8S_EV_APPLIED);
    CHECK(strcmp(take(&set, buf, sizeof(buf)),
                 "d-0:8000=http://10.0.0.1:8000/-1,d-1:8000=http://[fd00::5]:8000/-1") == 0);
    pdr__k8s_set_free(&set);

    /* Two target ports: two workers per ready pod (a data-parallel engine's ranks), in port order. */
    rc.ports[1] = 8001;
    rc.nports = 2;
    pdr__k8s_set_init(&set, &rc, "decode of InferencePool p");
    CHECK(apply(&set, "ADDED", pool_pod_json(&d0, "decode")) == PDR_K8S_EV_APPLIED);
    CHECK(apply(&set, "ADDED", pool_pod_json(&d1, "both")) == PDR_K8S_EV_APPLIED);
    CHECK(strcmp(take(&set, buf, sizeof(buf)),
                 "d-0:8000=http://10.0.0.1:8000/-1,d-0:8001=http://10.0.0.1:8001/-1,"
                 "d-1:8000=http://[fd00::5]:8000/-1,d-1:8001=http://[fd00::5]:8001/-1") == 0);
    CHECK(apply(&set, "MODIFIED", pool_pod_json(&d1, "both")) == PDR_K8S_EV_APPLIED);
    CHECK(strcmp(take(&set, buf, sizeof(buf)), "-") == 0);
    /* Its role label changes to prefill: the decode set loses both its workers. */
    CHECK(apply(&set, "MODIFIED", pool_pod_json(&d1, "prefill")) == PDR_K8S_EV_APPLIED);
    CHECK(strcmp(take(&set, buf, sizeof(buf)),
                 "d-0:8000=http://10.0.0.1:8000/-1,d-0:8001=http://10.0.0.1:8001/-1") == 0);
    pdr__k8s_set_free(&set);
}

/* pdr__k8s_infpool_parse of the InferencePool whose spec is the JSON text spec. */
static int infpool(const char *spec, pdr_k8s_infpool_t *out, char *err, size_t errlen)
{
    char text[2048];
    snprintf(text, sizeof(text),
             "{\"apiVersion\":\"inference.networking.k8s.io/v1\",\"kind\":\"InferencePool\","
             "\"metadata\":{\"name\":\"p\",\"namespace\":\"llm\",\"resourceVersion\":\"7\"},\"spec\":%s}",
             spec);
    json_t *pool = json_loads(text, 0, NULL);
    CHECK(pool != NULL);
    int rc = pdr__k8s_infpool_parse(pool, out, err, errlen);
    json_decref(pool);
    return rc;
}

static void test_infpool_parse(void)
{
    static pdr_k8s_infpool_t p;
    char err[256];
    CHECK(infpool("{\"selector\":{\"matchLabels\":{\"model\":\"llama\",\"app\":\"vllm\",\"llm-d.ai/"
                  "inference-serving\":"
                  "\"true\"}},\"targetPorts\":[{\"number\":8000},{\"number\":8001}],\"appProtocol\":\"http\","
                  "\"endpointPickerRef\":{\"name\":\"epp\",\"port\":{\"number\":9002}}}",
                  &p, err, sizeof(err)) == 0);
    CHECK(strcmp(p.selector, "app=vllm,llm-d.ai/inference-serving=true,model=llama") == 0);
    CHECK(p.nports == 2 && p.ports[0] == 8000 && p.ports[1] == 8001);
    /* appProtocol absent is http; endpointPickerRef is optional (and not read). */
    CHECK(infpool("{\"selector\":{\"matchLabels\":{\"app\":\"x\"}},\"targetPorts\":[{\"number\":1}]}", &p,
                  err, sizeof(err)) == 0);
    CHECK(strcmp(p.selector, "app=x") == 0 && p.nports == 1 && p.ports[0] == 1);
    CHECK(infpool("{\"selector\":{\"matchLabels\":{\"app\":\"\"}},\"targetPorts\":[{\"number\":65535}]}", &p,
                  err, sizeof(err)) == 0);
    CHECK(strcmp(p.selector, "app=") == 0);
    static const struct {
        const char *spec;
        int rc;
        const char *why;
    } bad[] = {
        {"{\"selector\":{\"matchLabels\":{\"a\":\"b\"}},\"targetPorts\":[{\"number\":80}],\"appProtocol\":"
         "\"kubernetes.io/h2c\"}",
         PDR_ENOTSUP, "appProtocol \"kubernetes.io/h2c\""},
        {"{\"selector\":{\"matchLabels\":{}},\"targetPorts\":[{\"number\":80}]}", PDR_EPROTO, "empty"},
        {"{\"selector\":{},\"targetPorts\":[{\"number\":80}]}", PDR_EPROTO, "absent"},
        {"{\"targetPorts\":[{\"number\":80}]}", PDR_EPROTO, "absent"},
        {"{\"selector\":{\"matchLabels\":{\"a\":\"b\"}}}", PDR_EPROTO, "targetPorts has 0"},
        {"{\"selector\":{\"matchLabels\":{\"a\":\"b\"}},\"targetPorts\":[]}", PDR_EPROTO,
         "targetPorts has 0"},
        {"{\"selector\":{\"matchLabels\":{\"a\":\"b\"}},\"targetPorts\":[{\"number\":0}]}", PDR_EPROTO,
         "1..65535"},
        {"{\"selector\":{\"matchLabels\":{\"a\":\"b\"}},\"targetPorts\":[{\"number\":65536}]}", PDR_EPROTO,
         "1..65535"},
        {"{\"selector\":{\"matchLabels\":{\"a\":\"b\"}},\"targetPorts\":[{\"number\":\"80\"}]}", PDR_EPROTO,
         "1..65535"},
        {"{\"selector\":{\"matchLabels\":{\"a\":\"b\"}},\"targetPorts\":[{\"number\":80},{\"number\":80}]}",
         PDR_EPROTO, "twice"},
        {"{\"selector\":{\"matchLabels\":{\"a\":\"b\"}},\"targetPorts\":[{\"number\":1},{\"number\":2},{"
         "\"number\":3},"
         "{\"number\":4},{\"number\":5},{\"number\":6},{\"number\":7},{\"number\":8},{\"number\":9}]}",
         PDR_EPROTO, "targetPorts has 9"},
        {"{\"selector\":{\"matchLabels\":{\"a,b\":\"c\"}},\"targetPorts\":[{\"number\":80}]}", PDR_EPROTO,
         "label"},
        {"{\"selector\":{\"matchLabels\":{\"a\":\"b c\"}},\"targetPorts\":[{\"number\":80}]}", PDR_EPROTO,
         "label"},
        {"{\"selector\":{\"matchLabels\":{\"a\":\"x/y\"}},\"targetPorts\":[{\"number\":80}]}", PDR_EPROTO,
         "label"},
        {"{\"selector\":{\"matchLabels\":{\"a\":1}},\"targetPorts\":[{\"number\":80}]}", PDR_EPROTO, "label"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        CHECK(infpool(bad[i].spec, &p, err, sizeof(err)) == bad[i].rc);
        CHECK(strstr(err, bad[i].why) != NULL);
    }
}

static const pdr_test_case_t cases[] = {
    {"pod_parse", test_pod_parse, 60},
    {"lines", test_lines, 60},
    {"set", test_set, 60},
    {"kv_events_annotation", test_kv_events_annotation, 60},
    {"pool_roles", test_pool_roles, 60},
    {"pool_ports", test_pool_ports, 60},
    {"infpool_parse", test_infpool_parse, 60},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
