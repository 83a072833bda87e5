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
    case PDR_K8S_POD_OTHER_ROLE:
        return "of the other role";
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

/* With rc->role_label: whether the pod is of rc->role (bits of *bad: 8 a value naming no role, 16 no
 * label). "both" and llm-d's "prefill-decode" are both roles; a pod without the label is a decode, as
 * llm-d's decode filter takes pods without it. */
static int pod_has_role(const json_t *meta, const pdr_k8s_role_conf_t *rc, int *bad)
{
    const char *v = pdr__k8s_jstr(json_object_get(meta, "labels"), rc->role_label);
    if (v == NULL) {
        *bad |= 16;
        return rc->role == PDR_ROLE_DECODE;
    }
    if (strcmp(v, "both") == 0 || strcmp(v, "prefill-decode") == 0)
        return 1;
    if (strcmp(v, "prefill") == 0)
        return rc->role == PDR_ROLE_PREFILL;
    if (strcmp(v, "decode") == 0)
        return rc->role == PDR_ROLE_DECODE;
    *bad |= 8;
    return 0;
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
    /* Room for ":PORT" after the name of an InferencePool's pod. */
    size_t room = rc->nports > 0 ? sizeof(out->name) - 6 : sizeof(out->name);
    if (name == NULL || name[0] == '\0' || strlen(name) >= room)
        return PDR_K8S_POD_MALFORMED;
    memcpy(out->name, name, strlen(name) + 1);
    if (rc->role_label != NULL && !pod_has_role(meta, rc, bad_annotation))
        return PDR_K8S_POD_OTHER_ROLE;

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
    int port = rc->nports > 0 ? rc->ports[0] : rc->port > 0 ? rc->port : pod_container_port(pod);
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
                *bad_annotation |= 1;
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
    } else if (bad_annotation & 8) {
        const char *v =
            pdr__k8s_jstr(json_object_get(json_object_get(pod, "metadata"), "labels"), s->rc.role_label);
        pdr_warn("kubernetes discovery: %s: pod %s: label %s=\"%.64s\" is not prefill, decode, both or "
                 "prefill-decode; the pod is not used",
                 s->label, p->w.name, s->rc.role_label, v != NULL ? v : "");
        p->warned = 1;
    } else if ((bad_annotation & 16) && s->rc.role == PDR_ROLE_DECODE) {
        pdr_warn("kubernetes discovery: %s: pod %s has no label %s; it is a decode worker only", s->label,
                 p->w.name, s->rc.role_label);
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
    } else if (bad_annotation & 1) {
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

/* Worker k of a ready pod: the pod's own without target ports; with an InferencePool's, its URL at the k-th
 * port and its name NAME:PORT (pdr__k8s_pod_parse left room for it). */
static void pod_worker(const pdr_k8s_set_t *s, const pdr_discovered_t *w, int k, pdr_discovered_t *out)
{
    *out = *w;
    if (s->rc.nports == 0)
        return;
    char *colon = strrchr(out->url, ':');
    if (colon != NULL)
        snprintf(colon + 1, sizeof(out->url) - (size_t)(colon + 1 - out->url), "%d", s->rc.ports[k]);
    size_t nl = strlen(out->name);
    snprintf(out->name + nl, sizeof(out->name) - nl, ":%d", s->rc.ports[k]);
}

int pdr__k8s_set_take_changed(pdr_k8s_set_t *s, const pdr_discovered_t **list, size_t *n)
{
    int per = s->rc.nports > 0 ? s->rc.nports : 1;
    size_t ready = 0, k = 0;
    for (size_t i = 0; i < s->n; i++)
        ready += s->pods[i].state == PDR_K8S_POD_READY;
    ready *= (size_t)per;
    int changed = !s->emitted || ready != s->n_last;
    pdr_discovered_t w;
    for (size_t i = 0; i < s->n && !changed; i++) {
        if (s->pods[i].state != PDR_K8S_POD_READY)
            continue;
        for (int j = 0; j < per && !changed; j++) {
            pod_worker(s, &s->pods[i].w, j, &w);
            changed = !same_worker(&w, &s->last[k++]);
        }
    }
    if (!changed)
        return 0;
    pdr_discovered_t *cur = malloc((ready > 0 ? ready : 1) * sizeof(*cur));
    if (cur == NULL)
        return PDR_ENOMEM;
    k = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->pods[i].state == PDR_K8S_POD_READY)
            for (int j = 0; j < per; j++)
                pod_worker(s, &s->pods[i].w, j, &cur[k++]);
    free(s->last);
    s->last = cur;
    s->n_last = ready;
    s->emitted = 1;
    *list = cur;
    *n = ready;
    return 1;
}

/* A label key (a qualified name: [DNS-subdomain/]name) or, with value, a label value, as far as the
 * selector's syntax needs: only the characters the API allows, so that no ',', '=', '!', '(' or space
 * changes what the selector means. */
static int label_ok(const char *s, int value)
{
    size_t len = strlen(s);
    if (len > (value ? 63u : 253u) || (!value && len == 0))
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                 c == '_' || c == '.' || (!value && c == '/');
        if (!ok)
            return 0;
    }
    return 1;
}

static int key_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int pdr__k8s_infpool_parse(const json_t *pool, pdr_k8s_infpool_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    const json_t *spec = json_object_get(pool, "spec");
    const char *proto = pdr__k8s_jstr(spec, "appProtocol");
    if (proto != NULL && strcmp(proto, "http") != 0) {
        snprintf(err, errlen,
                 "spec.appProtocol \"%.64s\" is not one pdrouter speaks to its workers (only \"http\", "
                 "HTTP/1.1)",
                 proto);
        return PDR_ENOTSUP;
    }
    const json_t *labels = json_object_get(json_object_get(spec, "selector"), "matchLabels");
    size_t nl = json_object_size(labels);
    if (!json_is_object(labels) || nl == 0 || nl > PDR_K8S_MAX_POOL_LABELS) {
        snprintf(err, errlen, "spec.selector.matchLabels is %s (1..%d labels expected)",
                 json_is_object(labels) ? (nl == 0 ? "empty" : "too long") : "absent",
                 PDR_K8S_MAX_POOL_LABELS);
        return PDR_EPROTO;
    }
    const char *keys[PDR_K8S_MAX_POOL_LABELS];
    size_t k = 0;
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)labels, key, val)
    {
        if (!label_ok(key, 0) || !json_is_string(val) || !label_ok(json_string_value(val), 1)) {
            snprintf(err, errlen,
                     "spec.selector.matchLabels: \"%.64s\" is not a label key with a label value", key);
            return PDR_EPROTO;
        }
        keys[k++] = key;
    }
    qsort(keys, k, sizeof(keys[0]), key_cmp);
    size_t used = 0;
    for (size_t i = 0; i < k; i++) {
        const char *v = json_string_value(json_object_get(labels, keys[i]));
        int w =
            snprintf(out->selector + used, sizeof(out->selector) - used, "%s%s=%s", i ? "," : "", keys[i], v);
        if (w < 0 || (size_t)w >= sizeof(out->selector) - used) {
            snprintf(err, errlen, "spec.selector.matchLabels is longer than %u bytes", PDR_K8S_MAX_SELECTOR);
            return PDR_EPROTO;
        }
        used += (size_t)w;
    }
    const json_t *ports = json_object_get(spec, "targetPorts");
    size_t np = json_array_size(ports);
    if (!json_is_array(ports) || np == 0 || np > PDR_K8S_MAX_PORTS) {
        snprintf(err, errlen, "spec.targetPorts has %zu items (1..%d expected)", np, PDR_K8S_MAX_PORTS);
        return PDR_EPROTO;
    }
    size_t i;
    const json_t *p;
    json_array_foreach(ports, i, p)
    {
        const json_t *num = json_object_get(p, "number");
        json_int_t v = json_is_integer(num) ? json_integer_value(num) : 0;
        if (v < 1 || v > 65535) {
            snprintf(err, errlen, "spec.targetPorts[%zu].number is not a port in 1..65535", i);
            return PDR_EPROTO;
        }
        for (int j = 0; j < out->nports; j++)
            if (out->ports[j] == (int)v) {
                snprintf(err, errlen, "spec.targetPorts: port %d appears twice", (int)v);
                return PDR_EPROTO;
            }
        out->ports[out->nports++] = (int)v;
    }
    return 0;
}
