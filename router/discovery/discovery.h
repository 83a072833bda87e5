/*
 * Worker discovery: sources that find workers at run time, beside the static lists of the config.
 *
 * Each source runs on its own thread with blocking I/O (DNS queries, the Kubernetes API over libcurl)
 * and never touches a loop. Whenever it learns the complete set of workers of one role, it calls the
 * emit callback with that whole set (not a delta); the receiver (the pool, pdr_pool_reconcile) adds what
 * is new, removes what is gone and leaves the rest, with its health state, alone. A source emits only
 * what it knows: on a failure it may not tell apart from "no workers" (a DNS timeout, an API server
 * that does not answer) it emits nothing and keeps trying, so a flaky resolver never empties the pool.
 *
 * Sources run per pool: the one-pool form's top-level discovery: feeds the pool "default", and with pools:
 * each pool's discovery: section feeds that pool (its own dns and kubernetes sources).
 *
 *   dns         re-resolves discovery.dns.role[r].name every interval_ms (A and AAAA records, through the
 *               system's resolver or discovery.dns.resolver); one worker per address, at the role's
 *               port: what a headless Service gives. NXDOMAIN or an empty answer is an empty set.
 *   kubernetes  lists pods matching the role's label selector in the namespace, then watches them
 *               (resourceVersion from the list; a 410 Gone or an ERROR event re-lists). A worker per
 *               pod that is Running with condition Ready=True, has a podIP and no deletionTimestamp;
 *               port from the config or the pod's first containerPort; bootstrap port from the pod
 *               annotation sglang.ai/bootstrap-port, else the config. Bearer token from token_file
 *               (re-read on each request, as projected tokens rotate), TLS verified against ca_file.
 *               With inference_pool, the selector and ports come from that InferencePool (watched too;
 *               a change re-lists), a worker per pod and target port, its role from the pod label
 *               role_label (docs/internals/k8s-discovery.md).
 */
#ifndef PDR_DISCOVERY_H
#define PDR_DISCOVERY_H

#include <stddef.h>
#include "config.h"

typedef struct pdr_discovered {
    char url[256];       /* "http://10.1.2.3:30000", "http://[fd00::5]:30000" */
    int bootstrap_port;  /* -1 = none */
    char kv_events[256]; /* the worker's KV event publisher (kubernetes: a pod annotation); "" = none */
    char kv_events_replay[256]; /* its replay socket (kubernetes: a pod annotation); "" = none */
    char name[256]; /* what the source calls it: the pod name (up to 253), or the address for dns */
} pdr_discovered_t;

/* source: "dns" or "kubernetes". Called on the source's thread; list is valid during the call only. */
typedef void (*pdr_discovery_emit_cb)(void *ud, const char *source, pdr_role_t role,
                                      const pdr_discovered_t *list, size_t n);

/* A running source. Each source embeds this as its first member. */
typedef struct pdr_discovery {
    void (*stop)(struct pdr_discovery *d); /* joins the thread, frees everything */
} pdr_discovery_t;

/* Start a source for the roles the discovery section d names: the top-level discovery: of the one-pool
 * form or one pool's (pool: its name, for the log; NULL: "default"). NULL with nothing to do: *err empty;
 * NULL on an error: err says why. d must outlive the source (the caller holds a reference to its config
 * snapshot). */
pdr_discovery_t *pdr_dns_discovery_start(const pdr_discovery_conf_t *d, const char *pool,
                                         pdr_discovery_emit_cb cb, void *ud, char *err, size_t errlen);
pdr_discovery_t *pdr_k8s_discovery_start(const pdr_discovery_conf_t *d, const char *pool,
                                         pdr_discovery_emit_cb cb, void *ud, char *err, size_t errlen);
/* Stops the source's thread (promptly: within ~100 ms even in the middle of a watch) and frees it.
 * No callback runs after it returns. NULL is a no-op. */
static inline void pdr_discovery_stop(pdr_discovery_t *d)
{
    if (d != NULL)
        d->stop(d);
}

#endif
