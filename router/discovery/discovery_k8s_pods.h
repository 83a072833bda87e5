/*
 * The pure parts of the Kubernetes source, defined in discovery_k8s_pods.c and used by discovery_k8s.c (the
 * I/O) and the tests. A pod's JSON becomes a worker (or a reason it is not one), the watch stream is cut into
 * lines, and list and watch events are applied to a role's pod set, which says when its ready workers
 * changed. Nothing here does I/O besides logging; one set and one line splitter belong to one thread.
 */
#ifndef PDR_DISCOVERY_K8S_PODS_H
#define PDR_DISCOVERY_K8S_PODS_H

#include <jansson.h>
#include <stddef.h>
#include "buf.h"
#include "discovery.h"

/* One watch event is one Pod (a few KiB, rarely above 100 KiB); 4 MiB leaves room for huge annotations. */
#define PDR_K8S_MAX_LINE (4u << 20)
/* A PodList of the largest sets we accept: 16384 pods of a few KiB each. */
#define PDR_K8S_MAX_LIST (256u << 20)
#define PDR_K8S_MAX_PODS 16384
#define PDR_K8S_ANN_BOOTSTRAP "sglang.ai/bootstrap-port"
/* A pod's KV event publisher for precise_prefix (docs/internals/routing.md), any role. */
#define PDR_K8S_ANN_KV_EVENTS "pdrouter.io/kv-events-endpoint"
#define PDR_K8S_ANN_KV_EVENTS_REPLAY "pdrouter.io/kv-events-replay-endpoint"
/* InferencePool v1 (inference.networking.k8s.io): spec.targetPorts has 1..8 items, spec.selector.matchLabels
 * at most 64 entries of a key (a qualified name, up to 253 bytes) and a value (up to 63). */
#define PDR_K8S_MAX_PORTS 8
#define PDR_K8S_MAX_POOL_LABELS 64
#define PDR_K8S_MAX_SELECTOR (PDR_K8S_MAX_POOL_LABELS * (253 + 63 + 2))

/* What the config says about one role. */
typedef struct pdr_k8s_role_conf {
    int port;               /* > 0: every worker's HTTP port; 0: the pod's first containerPort */
    int bootstrap_port;     /* used when the pod has no valid annotation; -1 = none */
    int use_annotation;     /* prefill: 1 (the annotation overrides); decode: 0 (always -1) */
    const char *annotation; /* its key; NULL: PDR_K8S_ANN_BOOTSTRAP */
    int https;              /* scheme: https */
    /* An InferencePool's pods: role_label names the label that says a pod's role (NULL: every pod the
     * selector matches is of this set's role); a pod is of role when the label says so, "both" and
     * "prefill-decode" being both roles and a pod without the label a decode. */
    const char *role_label;
    pdr_role_t role;
    int ports[PDR_K8S_MAX_PORTS]; /* the pool's targetPorts: nports > 0 overrides port, and a ready pod */
    int nports;                   /* is one worker per port, named NAME:PORT */
} pdr_k8s_role_conf_t;

typedef enum {
    PDR_K8S_POD_READY = 0,   /* a worker */
    PDR_K8S_POD_NOT_RUNNING, /* status.phase is not Running (Pending, Succeeded, Failed, Unknown) */
    PDR_K8S_POD_NOT_READY,   /* no condition Ready=True */
    PDR_K8S_POD_NO_IP,       /* status.podIP missing or not an IP address */
    PDR_K8S_POD_TERMINATING, /* metadata.deletionTimestamp is set */
    PDR_K8S_POD_NO_PORT,     /* no port in the config and no containerPort on the pod */
    PDR_K8S_POD_MALFORMED,   /* not an object, or no usable metadata.name */
    PDR_K8S_POD_OTHER_ROLE   /* with role_label: the pod is not of this set's role */
} pdr_k8s_pod_state_t;

const char *pdr__k8s_pod_state_name(pdr_k8s_pod_state_t s);

/* The string value of obj's member key, or NULL (the source reads error bodies with it too). */
const char *pdr__k8s_jstr(const json_t *obj, const char *key);

/* Reads one Pod object. out is zeroed, then out->name is filled whenever the state is not MALFORMED and
 * out->url, out->bootstrap_port and out->kv_events when the state is READY. *bad_annotation receives bit 1
 * when the pod has a bootstrap-port annotation that is not a decimal in 1..65535 (the config's default
 * is used), bit 2 when its PDR_K8S_ANN_KV_EVENTS annotation is not a ZMQ endpoint (ignored), bit 4 when
 * its PDR_K8S_ANN_KV_EVENTS_REPLAY annotation is not one (ignored), bit 8 when its role label has a value
 * that names no role (OTHER_ROLE in every set), bit 16 when it has no role label (a decode). */
pdr_k8s_pod_state_t pdr__k8s_pod_parse(const json_t *pod, const pdr_k8s_role_conf_t *rc,
                                       pdr_discovered_t *out, int *bad_annotation);

/* What pdrouter reads of an InferencePool (inference.networking.k8s.io/v1): spec.selector.matchLabels as a
 * label selector "k1=v1,k2=v2" (keys sorted), spec.targetPorts[].number. */
typedef struct pdr_k8s_infpool {
    char selector[PDR_K8S_MAX_SELECTOR];
    int ports[PDR_K8S_MAX_PORTS];
    int nports;
} pdr_k8s_infpool_t;

/* Reads an InferencePool object into out. Returns 0, PDR_EPROTO when its spec is not one pdrouter can
 * follow (no matchLabels, no or bad targetPorts, a label that is not a label) or PDR_ENOTSUP when its
 * spec.appProtocol is one pdrouter does not speak (only "http", HTTP/1.1, the default); err says why. */
int pdr__k8s_infpool_parse(const json_t *pool, pdr_k8s_infpool_t *out, char *err, size_t errlen);

/* Cuts a byte stream into lines ('\n', an optional '\r' before it is dropped; empty lines are skipped).
 * A line may span any number of feeds; a line longer than limit is PDR_ETOOBIG. */
typedef int (*pdr_k8s_line_cb)(void *ud, const char *line, size_t len);
typedef struct pdr_k8s_lines {
    pdr_buf_t partial; /* the start of a line whose end has not arrived */
    size_t limit;
} pdr_k8s_lines_t;

/* Calls cb for each complete line in order. Returns 0, PDR_ETOOBIG, PDR_ENOMEM or the first nonzero
 * value cb returned (the rest of the chunk is then dropped). After an error, reset before reuse. */
int pdr__k8s_lines_feed(pdr_k8s_lines_t *l, const char *p, size_t n, pdr_k8s_line_cb cb, void *ud);
/* Drops a partial line (a new stream starts). */
void pdr__k8s_lines_reset(pdr_k8s_lines_t *l);
void pdr__k8s_lines_free(pdr_k8s_lines_t *l);

typedef struct pdr_k8s_pod {
    pdr_discovered_t w;
    pdr_k8s_pod_state_t state;
    int warned; /* a warning about this pod (no port, bad annotation) was logged */
} pdr_k8s_pod_t;

/* The pods of one role, sorted by name, with the last resourceVersion seen and the last emitted set. */
typedef struct pdr_k8s_set {
    pdr_k8s_role_conf_t rc;
    const char *label; /* for logs: "prefill app=x" */
    pdr_k8s_pod_t *pods;
    size_t n, cap;
    char rv[128];
    pdr_discovered_t *last; /* what was emitted last; NULL with emitted == 0 */
    size_t n_last;
    int emitted;
} pdr_k8s_set_t;

void pdr__k8s_set_init(pdr_k8s_set_t *s, const pdr_k8s_role_conf_t *rc, const char *label);
void pdr__k8s_set_free(pdr_k8s_set_t *s);

/* Replaces every pod with the items of a PodList and takes its metadata.resourceVersion. Returns 0,
 * PDR_EPROTO (not a PodList; err says why, the set is unchanged), PDR_ETOOBIG or PDR_ENOMEM. */
int pdr__k8s_set_apply_list(pdr_k8s_set_t *s, const char *body, size_t len, char *err, size_t errlen);

typedef enum {
    PDR_K8S_EV_APPLIED = 0, /* ADDED, MODIFIED or DELETED of a pod (the set may not have changed) */
    PDR_K8S_EV_BOOKMARK,    /* only the resourceVersion moved */
    PDR_K8S_EV_IGNORED,     /* an event type this version does not know */
    PDR_K8S_EV_GONE,        /* ERROR with code 410: the resourceVersion is too old, re-list */
    PDR_K8S_EV_ERROR,       /* another ERROR event (err holds its message) */
    PDR_K8S_EV_MALFORMED    /* not a watch event (err says why) */
} pdr_k8s_event_t;

/* Applies one line of a watch stream. */
pdr_k8s_event_t pdr__k8s_set_apply_event(pdr_k8s_set_t *s, const char *line, size_t len, char *err,
                                         size_t errlen);

/* Returns 1 when the ready workers (sorted by name) differ from the last emitted set, or when nothing was
 * emitted yet, after making them the last emitted set: *list and *n then point at them until the next
 * call. Returns 0 when nothing changed, PDR_ENOMEM on allocation failure. */
int pdr__k8s_set_take_changed(pdr_k8s_set_t *s, const pdr_discovered_t **list, size_t *n);

#endif
