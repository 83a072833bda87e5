/*
 * The pure parts of the Kubernetes discovery source (declared in discovery_k8s_pods.h; discovery_k8s.c
 * calls them, never the other way): a pod's JSON read into a worker or the reason it is not one, the watch
 * stream cut into lines, and list and watch events applied to a role's pod set.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "discovery_k8s_pods.h"
#include "err.h"
#include "util.h"

#define ANN_KEY(rc) ((rc)->annotation != NULL ? (rc)->annotation : PDR_K8S_ANN_BOOTSTRAP)

/* ---- pure parts: pods, lines, sets ---- */

const char *pdr__k8s_pod_state_name(pdr_k8s_pod_state_t s)
{
    switch (s) {
    case PDR_K8S_POD_READY:
        return "ready";
    case PDR_K8S_POD_NOT_RUNNING:
        return "not running";
    case PDR_K8S_POD_NOT_READY:
        return "not ready";
    case PDR_K8S_POD_NO_IP:
        return "no pod IP";
    case PDR_K8S_POD_TERMINATING:
        return "terminating";
    case PDR_K8S_POD_NO_PORT:
        return "no port";
    case PDR_K8S_POD_MALFORMED:
        return "malformed";
    }
    return "?";
}

const char *pdr__k8s_jstr(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

static int pod_is_ready(const json_t *status)
{
    const json_t *conds = json_object_get(status, "conditions");
    size_t i;
    const json_t *c;
    json_array_foreach(conds, i, c)
    {
        const char *type = pdr__k8s_jstr(c, "type");
        if (type != NULL && strcmp(type, "Ready") == 0) {
            const char *st = pdr__k8s_jstr(c, "status");
            return st != NULL && strcmp(st, "True") == 0;
        }
    }
    return 0;
}

/* The first containerPort of the first container, or 0. */
static int pod_container_port(const json_t *pod)
{
    const json_t *containers = json_object_get(json_object_get(pod, "spec"), "containers");
    const json_t *ports = json_object_get(json_array_get(containers, 0), "ports");
    const json_t *port = json_object_get(json_array_get(ports, 0), "containerPort");
    if (!json_is_integer(port))
        return 0;
    json_int_t v = json_integer_value(port);
    return v >= 1 && v <= 65535 ? (int)v : 0;
}

pdr_k8s_pod_state_t pdr__k8s_pod_parse(const json_t *pod, const pdr_k8s_role_conf_t *rc,
                                       pdr_discovered_t *out, int *bad_annotation)
{
    memset(out, 0, sizeof(*out));
    out->bootstrap_port = -1;
    *bad_annotation = 0;
    if (!json_is_object(pod))
        return PDR_K8S_POD_MALFORMED;
    const json_t *meta = json_object_get(pod, "metadata");
    const char *name = pdr__k8s_jstr(meta, "name");
    if (name == NULL || name[0] == '\0' || strlen(name) >= sizeof(out->name))
        return PDR_K8S_POD_MALFORMED;
    memcpy(out->name, name, strlen(name) + 1);

    if (json_object_get(meta, "deletionTimestamp") != NULL &&
        !json_is_null(json_object_get(meta, "deletionTimestamp")))
        return PDR_K8S_POD_TERMINATING;
    const json_t *status = json_object_get(pod, "status");
    const char *phase = pdr__k8s_jstr(status, "phase");
    if (phase == NULL || strcmp(phase, "Running") != 0)
        return PDR_K8S_POD_NOT_RUNNING;
    const char *ip = pdr__k8s_jstr(status, "podIP");
    unsigned char addr[16];
    int v6 = 0;
    if (ip == NULL)
        return PDR_K8S_POD_NO_IP;
    if (inet_pton(AF_INET6, ip, addr) == 1)
        v6 = 1;
    else if (inet_pton(AF_INET, ip, addr) != 1)
        return PDR_K8S_POD_NO_IP;
    if (!pod_is_ready(status))
        return PDR_K8S_POD_NOT_READY;
    int port = rc->port > 0 ? rc->port : pod_container_port(pod);
    if (port <= 0)
        return PDR_K8S_POD_NO_PORT;

    snprintf(out->url, sizeof(out->url), v6 ? "%s://[%s]:%d" : "%s://%s:%d", rc->https ? "https" : "http", ip,
             port);
    out->bootstrap_port = rc->bootstrap_port;
    if (rc->use_annotation) {
        const char *ann = pdr__k8s_jstr(json_object_get(meta, "annotations"), ANN_KEY(rc));
        int64_t bp;
        if (ann != NULL) {
            size_t digits = strspn(ann, "0123456789");
            if (digits > 0 && ann[digits] == '\0' && pdr_parse_int64(ann, digits, 1, 65535, &bp) == 0)
                out->bootstrap_port = (int)bp;
            else
                *bad_annotation = 1;
        }
    }
    /* precise_prefix: the pod's KV event publisher, any role (a bad one is ignored, as the router cannot
     * subscribe to it). */
    const char *kv = pdr__k8s_jstr(json_object_get(meta, "annotations"), PDR_K8S_ANN_KV_EVENTS);
    char msg[160];
    if (kv != NULL && strlen(kv) < sizeof(out->kv_events) &&
        pdr_kv_endpoint_check(kv, strlen(kv), msg, sizeof(msg)) == 0)
        memcpy(out->kv_events, kv, strlen(kv) + 1);
    else if (kv != NULL)
        *bad_annotation |= 2;
    const char *rp = pdr__k8s_jstr(json_object_get(meta, "annotations"), PDR_K8S_ANN_KV_EVENTS_REPLAY);
    if (rp != NULL && strlen(rp) < sizeof(out->kv_events_replay) &&
        pdr_kv_endpoint_check(rp, strlen(rp), msg, sizeof(msg)) == 0)
        memcpy(out->kv_events_replay, rp, strlen(rp) + 1);
    else if (rp != NULL)
        *bad_annotation |= 4;
    return PDR_K8S_POD_READY;
}

int pdr__k8s_lines_feed(pdr_k8s_lines_t *l, const char *p, size_t n, pdr_k8s_line_cb cb, void *ud)
{
    while (n > 0) {
        const char *nl = memchr(p, '\n', n);
        size_t take = nl != NULL ? (size_t)(nl - p) : n;
        const char *line = p;
        size_t len = take;
        if (l->partial.len > 0 || nl == NULL) {
            /* The line continues a previous chunk, or goes on in the next one: gather it. */
            int rc = pdr_buf_append(&l->partial, p, take, l->limit);
            if (rc != 0)
                return rc;
            line = l->partial.p;
            len = l->partial.len;
        } else if (take > l->limit) {
            return PDR_ETOOBIG;
        }
        if (nl == NULL)
            return 0;
        p += take + 1;
        n -= take + 1;
        if (len > 0 && line[len - 1] == '\r')
            len--;
        int rc = len > 0 ? cb(ud, line, len) : 0;
        l->partial.len = 0;
        if (rc != 0)
            return rc;
    }
    return 0;
}

void pdr__k8s_lines_reset(pdr_k8s_lines_t *l)
{
    l->partial.len = 0;
}

void pdr__k8s_lines_free(pdr_k8s_lines_t *l)
{
    pdr_buf_free(&l->partial);
}

void pdr__k8s_set_init(pdr_k8s_set_t *s, const pdr_k8s_role_conf_t *rc, const char *label)
{
    memset(s, 0, sizeof(*s));
    s->rc = *rc;
    s->label = label;
}

void pdr__k8s_set_free(pdr_k8s_set_t *s)
{
    free(s->pods);
    free(s->last);
    s->pods = NULL;
    s->last = NULL;
    s->n = s->cap = s->n_last = 0;
}

/* Index of name in the sorted pods, or where it would go (*found = 0). */
static size_t set_find(const pdr_k8s_pod_t *pods, size_t n, const char *name, int *found)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(pods[mid].w.name, name);
        if (c == 0) {
            *found = 1;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = 0;
    return lo;
}

/* Logs once per pod what makes it unusable beyond the ordinary states (not ready, pending...). */
static void pod_warn_once(const pdr_k8s_set_t *s, pdr_k8s_pod_t *p, int bad_annotation, const json_t *pod)
{
    if (p->warned)
        return;
    if (p->state == PDR_K8S_POD_NO_PORT) {
        pdr_warn("kubernetes discovery: %s: pod %s has no containerPort and the config gives no port; "
                 "it is not used (set discovery.kubernetes port for this role)",
                 s->label, p->w.name);
        p->warned = 1;
    } else if (bad_annotation & 6) {
        const char *key = (bad_annotation & 2) ? PDR_K8S_ANN_KV_EVENTS : PDR_K8S_ANN_KV_EVENTS_REPLAY;
        const char *ann =
            pdr__k8s_jstr(json_object_get(json_object_get(pod, "metadata"), "annotations"), key);
        pdr_warn("kubernetes discovery: %s: pod %s: annotation %s=\"%.64s\" is not a ZMQ endpoint "
                 "tcp://HOST:PORT or ipc://PATH; %s",
                 s->label, p->w.name, key, ann != NULL ? ann : "",
                 (bad_annotation & 2) ? "its KV events are not used" : "its KV event gaps are not replayed");
        p->warned = 1;
    } else if (bad_annotation) {
        const char *ann =
            pdr__k8s_jstr(json_object_get(json_object_get(pod, "metadata"), "annotations"), ANN_KEY(&s->rc));
        pdr_warn("kubernetes discovery: %s: pod %s: annotation %s=\"%.32s\" is not a port in 1..65535; "
                 "using the configured bootstrap port %d",
                 s->label, p->w.name, ANN_KEY(&s->rc), ann != NULL ? ann : "", s->rc.bootstrap_port);
        p->warned = 1;
    }
}

static int set_reserve(pdr_k8s_pod_t **pods, size_t *cap, size_t want)
{
    if (want <= *cap)
        return 0;
    if (want > PDR_K8S_MAX_PODS)
        return PDR_ETOOBIG;
    size_t nc = *cap ? *cap * 2 : 16;
    while (nc < want)
        nc *= 2;
    if (nc > PDR_K8S_MAX_PODS)
        nc = PDR_K8S_MAX_PODS;
    pdr_k8s_pod_t *np = realloc(*pods, nc * sizeof(*np));
    if (np == NULL)
        return PDR_ENOMEM;
    *pods = np;
    *cap = nc;
    return 0;
}

static int pod_cmp(const void *a, const void *b)
{
    return strcmp(((const pdr_k8s_pod_t *)a)->w.name, ((const pdr_k8s_pod_t *)b)->w.name);
}

static int set_rv(pdr_k8s_set_t *s, const char *rv)
{
    if (rv == NULL || rv[0] == '\0' || strlen(rv) >= sizeof(s->rv))
        return PDR_EPROTO;
    memcpy(s->rv, rv, strlen(rv) + 1);
    return 0;
}

int pdr__k8s_set_apply_list(pdr_k8s_set_t *s, const char *body, size_t len, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr);
    if (root == NULL) {
        snprintf(err, errlen, "the pod list is not JSON: %s (offset %d)", jerr.text, jerr.position);
        return PDR_EPROTO;
    }
    const char *kind = pdr__k8s_jstr(root, "kind");
    const json_t *items = json_object_get(root, "items");
    const char *rv = pdr__k8s_jstr(json_object_get(root, "metadata"), "resourceVersion");
    if ((kind != NULL && strcmp(kind, "PodList") != 0) || !(json_is_array(items) || json_is_null(items)) ||
        rv == NULL || rv[0] == '\0' || strlen(rv) >= sizeof(s->rv)) {
        snprintf(err, errlen, "the answer is not a PodList with items and metadata.resourceVersion (kind %s)",
                 kind != NULL ? kind : "absent");
        json_decref(root);
        return PDR_EPROTO;
    }
    size_t count = json_array_size(items);
    if (count > PDR_K8S_MAX_PODS) {
        snprintf(err, errlen, "the pod list has %zu pods, more than the %u this source keeps", count,
                 PDR_K8S_MAX_PODS);
        json_decref(root);
        return PDR_ETOOBIG;
    }
    pdr_k8s_pod_t *pods = NULL;
    size_t cap = 0, n = 0;
    int rc = set_reserve(&pods, &cap, count > 0 ? count : 1);
    if (rc != 0) {
        snprintf(err, errlen, "out of memory");
        json_decref(root);
        return rc;
    }
    size_t i;
    const json_t *item;
    json_array_foreach(items, i, item)
    {
        int bad_annotation;
        pdr_k8s_pod_t *p = &pods[n];
        memset(p, 0, sizeof(*p));
        p->state = pdr__k8s_pod_parse(item, &s->rc, &p->w, &bad_annotation);
        if (p->state == PDR_K8S_POD_MALFORMED)
            continue;
        int found;
        size_t at = set_find(s->pods, s->n, p->w.name, &found);
        if (found)
            p->warned = s->pods[at].warned;
        pod_warn_once(s, p, bad_annotation, item);
        n++;
    }
    qsort(pods, n, sizeof(*pods), pod_cmp);
    /* Two items with one name cannot come from the API; keep the last one's place deterministic. */
    size_t w = 0;
    for (size_t k = 0; k < n; k++) {
        if (w > 0 && strcmp(pods[w - 1].w.name, pods[k].w.name) == 0)
            pods[w - 1] = pods[k];
        else
            pods[w++] = pods[k];
    }
    free(s->pods);
    s->pods = pods;
    s->n = w;
    s->cap = cap;
    set_rv(s, rv);
    json_decref(root);
    return 0;
}

pdr_k8s_event_t pdr__k8s_set_apply_event(pdr_k8s_set_t *s, const char *line, size_t len, char *err,
                                         size_t errlen)
{
    json_error_t jerr;
    json_t *ev = json_loadb(line, len, 0, &jerr);
    if (ev == NULL) {
        snprintf(err, errlen, "a watch event is not JSON: %s", jerr.text);
        return PDR_K8S_EV_MALFORMED;
    }
    pdr_k8s_event_t res = PDR_K8S_EV_MALFORMED;
    const char *type = pdr__k8s_jstr(ev, "type");
    const json_t *obj = json_object_get(ev, "object");
    if (type == NULL || !json_is_object(obj)) {
        snprintf(err, errlen, "a watch event has no type or no object");
        goto out;
    }
    if (strcmp(type, "ERROR") == 0) {
        const json_t *code = json_object_get(obj, "code");
        const char *msg = pdr__k8s_jstr(obj, "message");
        snprintf(err, errlen, "%s", msg != NULL ? msg : "(no message)");
        res = json_is_integer(code) && json_integer_value(code) == 410 ? PDR_K8S_EV_GONE : PDR_K8S_EV_ERROR;
        goto out;
    }
    const char *rv = pdr__k8s_jstr(json_object_get(obj, "metadata"), "resourceVersion");
    if (strcmp(type, "BOOKMARK") == 0) {
        if (set_rv(s, rv) != 0) {
            snprintf(err, errlen, "a BOOKMARK event has no usable metadata.resourceVersion");
            goto out;
        }
        res = PDR_K8S_EV_BOOKMARK;
        goto out;
    }
    int deleted = strcmp(type, "DELETED") == 0;
    if (!deleted && strcmp(type, "ADDED") != 0 && strcmp(type, "MODIFIED") != 0) {
        res = PDR_K8S_EV_IGNORED;
        goto out;
    }
    pdr_k8s_pod_t p;
    int bad_annotation;
    memset(&p, 0, sizeof(p));
    p.state = pdr__k8s_pod_parse(obj, &s->rc, &p.w, &bad_annotation);
    if (p.state == PDR_K8S_POD_MALFORMED) {
        snprintf(err, errlen, "a %s event's object has no usable metadata.name", type);
        goto out;
    }
    if (rv != NULL)
        set_rv(s, rv);
    int found;
    size_t at = set_find(s->pods, s->n, p.w.name, &found);
    if (deleted) {
        if (found) {
            memmove(&s->pods[at], &s->pods[at + 1], (s->n - at - 1) * sizeof(*s->pods));
            s->n--;
        }
    } else if (found) {
        p.warned = s->pods[at].warned;
        pod_warn_once(s, &p, bad_annotation, obj);
        s->pods[at] = p;
    } else {
        int rc = set_reserve(&s->pods, &s->cap, s->n + 1);
        if (rc != 0) {
            snprintf(err, errlen, "%s: pod %s not kept (%s)", type, p.w.name, pdr_strerror(rc));
            res = PDR_K8S_EV_ERROR;
            goto out;
        }
        memmove(&s->pods[at + 1], &s->pods[at], (s->n - at) * sizeof(*s->pods));
        pod_warn_once(s, &p, bad_annotation, obj);
        s->pods[at] = p;
        s->n++;
    }
    res = PDR_K8S_EV_APPLIED;
out:
    json_decref(ev);
    return res;
}

static int same_worker(const pdr_discovered_t *a, const pdr_discovered_t *b)
{
    return strcmp(a->name, b->name) == 0 && strcmp(a->url, b->url) == 0 &&
           a->bootstrap_port == b->bootstrap_port && strcmp(a->kv_events, b->kv_events) == 0 &&
           strcmp(a->kv_events_replay, b->kv_events_replay) == 0;
}

int pdr__k8s_set_take_changed(pdr_k8s_set_t *s, const pdr_discovered_t **list, size_t *n)
{
    size_t ready = 0, k = 0;
    for (size_t i = 0; i < s->n; i++)
        ready += s->pods[i].state == PDR_K8S_POD_READY;
    int changed = !s->emitted || ready != s->n_last;
    for (size_t i = 0; i < s->n && !changed; i++) {
        if (s->pods[i].state != PDR_K8S_POD_READY)
            continue;
        changed = !same_worker(&s->pods[i].w, &s->last[k++]);
    }
    if (!changed)
        return 0;
    pdr_discovered_t *cur = malloc((ready > 0 ? ready : 1) * sizeof(*cur));
    if (cur == NULL)
        return PDR_ENOMEM;
    k = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->pods[i].state == PDR_K8S_POD_READY)
            cur[k++] = s->pods[i].w;
    free(s->last);
    s->last = cur;
    s->n_last = ready;
    s->emitted = 1;
    *list = cur;
    *n = ready;
    return 1;
}
