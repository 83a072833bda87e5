/*
 * What the files of the Kubernetes source share (discovery.h has the interface): the source, its
 * watchers (one thread each: a role's pods, or the InferencePool the pods come from), and the one GET
 * they all run (discovery_k8s_req.c). discovery_k8s.c owns the source and the pod watchers,
 * discovery_k8s_pool.c the InferencePool's watcher; neither calls the other's statics, and
 * discovery_k8s_req.c calls neither (a watcher's lines go through its line_cb).
 */
#ifndef PDR_DISCOVERY_K8S_INTERNAL_H
#define PDR_DISCOVERY_K8S_INTERNAL_H

#include <curl/curl.h>
#include <uv.h>
#include "discovery_k8s_pods.h"

#define PDR_K8S_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"
#define PDR_K8S_MAX_ERROR_BODY (64u << 10)
#define PDR_K8S_MAX_TOKEN (64u << 10)
#define PDR_K8S_BACKOFF_MIN_MS 200
#define PDR_K8S_BACKOFF_MAX_MS 10000

typedef struct pdr_k8s_source pdr_k8s_source_t;

/* Why a request ended. PDR_K8S_REQ_RESTART: the InferencePool changed under a pod watcher (list again). */
enum {
    PDR_K8S_REQ_DONE,
    PDR_K8S_REQ_STOPPED,
    PDR_K8S_REQ_FAILED,
    PDR_K8S_REQ_GONE,
    PDR_K8S_REQ_BROKEN,
    PDR_K8S_REQ_RESTART
};

/* One watcher: a thread that lists then watches one kind of object, one request at a time. */
typedef struct pdr_k8s_watcher {
    pdr_k8s_source_t *src;
    pdr_role_t role;
    const char *selector; /* the pods' label selector (NULL: none yet) */
    char *pool_selector;  /* inference_pool: the pool's selector this watcher lists with (malloc'd) */
    unsigned pool_gen;    /* inference_pool: the generation of the pool it was taken from */
    const char *resource; /* for the RBAC hint: "pods", "inferencepools" */
    char label[192];
    CURLM *multi;
    uv_thread_t thread;
    int thread_started;
    pdr_k8s_set_t set;
    pdr_k8s_lines_t lines;
    pdr_k8s_line_cb line_cb; /* each line of a watch stream */
    CURL *easy;
    int watching;
    long status;
    pdr_buf_t body; /* a list body, or the start of an error answer */
    int verdict;    /* PDR_K8S_REQ_GONE or _BROKEN when the watch stream asked to end the transfer */
    int events;     /* events received in this watch */
    char why[512];  /* what went wrong */
} pdr_k8s_watcher_t;

/* The InferencePool the pods come from (discovery.kubernetes.inference_pool): what its watcher read last,
 * under lock; gen grows with each change of its selector or target ports, and a pod watcher whose
 * pool_gen differs lists again. gen 0: not read yet (the pod watchers wait). */
typedef struct pdr_k8s_pool_state {
    const char *name;
    uv_mutex_t lock;
    unsigned gen; /* atomic (read without the lock by a pod watcher's request loop) */
    pdr_k8s_infpool_t spec;
    char rv[128];
    int missing_warned; /* the pool was absent, logged once until it appears */
    char refused[160];  /* the last spec refused (its resourceVersion and reason), logged once */
    pdr_k8s_watcher_t w;
} pdr_k8s_pool_state_t;

struct pdr_k8s_source {
    pdr_discovery_t base; /* first member (discovery.h) */
    pdr_discovery_emit_cb cb;
    void *ud;
    char *api_server, *ns, *token_file, *ca_file;
    int token_required; /* token_file came from the config: failing to read it is an error */
    int watch_timeout_s;
    char pool[64]; /* the pool of the router it feeds, for the log */
    int stopping;  /* atomic */
    uv_mutex_t emit_lock;
    pdr_k8s_watcher_t roles[2];
    pdr_k8s_pool_state_t *infpool; /* NULL unless discovery.kubernetes.inference_pool */
};

int pdr__k8s_stopping(const pdr_k8s_source_t *src);
/* Reads a whole small file, trimmed of surrounding whitespace. Returns a malloc'd string or NULL. */
char *pdr__k8s_read_small_file(const char *path, size_t limit, char *err, size_t errlen);
/* Runs one GET until it ends or the source stops. PDR_K8S_REQ_DONE: an HTTP answer ended cleanly
 * (w->status holds its code); _GONE and _BROKEN come from the watch stream; _FAILED is a transport error;
 * _RESTART: the InferencePool's generation moved past w->pool_gen. */
int pdr__k8s_get(pdr_k8s_watcher_t *w, const char *url, int watching);
/* Waits ms or until the source stops; returns nonzero when it stops. */
int pdr__k8s_wait(pdr_k8s_watcher_t *w, int ms);
/* Logs an HTTP error answer (what: "the pod list"), with the RBAC hint for 401 and 403. */
void pdr__k8s_http_error(pdr_k8s_watcher_t *w, const char *what);
/* The "message" of a Status object in an error answer, for the log. */
void pdr__k8s_status_message(const pdr_buf_t *b, char *out, size_t outlen);
/* The next back-off after backoff ms (0: the first). */
int pdr__k8s_backoff(int backoff);

/* discovery_k8s_pool.c: starts the InferencePool's watcher (its thread). 0 or -1 with err. */
int pdr__k8s_pool_start(pdr_k8s_source_t *src, const char *name, char *err, size_t errlen);
/* Joins its thread (after stopping is set and its multi woken) and frees it. NULL is a no-op. */
void pdr__k8s_pool_free(pdr_k8s_pool_state_t *p);

#endif
