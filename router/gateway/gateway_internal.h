/*
 * The endpoint picker's request state, shared by epp_pick.c (the exchange) and epp_workers.c (the
 * picks, what they hold, the counters). Loop 0.
 */
#ifndef PDR_GATEWAY_INTERNAL_H
#define PDR_GATEWAY_INTERNAL_H

#include <stdint.h>
#include <uv.h>

#include "admission.h"
#include "epp.h"
#include "gateway.h"
#include "pool.h"
#include "rewrite.h"

typedef struct gw {
    struct pdr_router *r;
    pdr_epp_t *epp;
    pdr_epp_t *health_epp; /* epp.health_port's server, or NULL */
    int open;              /* servers still closing (stop) */
    pdr_gateway_ready_cb ready;
    uv_timer_t health;
    int was_ready;
} gw_t;

/* Outcomes of a stream's request (pdr_epp_requests_total{outcome}). */
enum {
    GW_PICKED = 0,  /* endpoints named */
    GW_NO_DECODE,   /* 503: no serving decode (in the subset) */
    GW_NO_PREFILL,  /* 503: the pool has prefills and none serves */
    GW_SHED,        /* 429: admission's queue full, rate limit, shed class */
    GW_BUSY,        /* 503: no room without a queue, queue timeout, out of memory */
    GW_BAD_REQUEST, /* 400: the body is not a valid request */
    GW_NOT_FOUND,   /* 404: no pool serves the model */
    GW_TOO_LARGE,   /* 413: past limits.max_body_bytes */
    GW__OUTCOMES
};

typedef struct gw_req {
    gw_t *g;
    pdr_epp_stream_t *s;
    pdr_epp_body_mode_t mode;
    char *hdrs; /* one block: the header array, then the names and values */
    const pdr_epp_header_t *h;
    size_t nh;
    int route; /* pdr_route_t of :path, or -1 (not a PD route: picked from the load alone) */
    char *body;
    size_t len, cap;
    int body_sent; /* body chunks came (the exchange gives the body back) */
    int too_big;
    int parsed;
    pdr_pdreq_t pr;
    const char *pool; /* the pool's name (lives as long as the loop's config) */
    int precise;      /* the pool's policies read the KV index: the prompt's token ids are wanted */
    int unknown_model;
    pdr_admit_waiter_t admit;
    int admit_entered;
    uint64_t queue_deadline_ns;
    uv_timer_t *timer; /* while queued */
    int has_subset;
    char **subset; /* the gateway's endpoint subset (copied), nsubset of them */
    size_t nsubset;
    pdr_worker_t *dw, *pw; /* picked, tracked in flight until released */
    char dep[80], pep[80]; /* their endpoints (host:port) */
    int answered;
    int served_seen;
    uint64_t t0_ns;
} gw_req_t;

/* epp_answer.c */
const char *pdr__gw_header(const gw_req_t *q, const char *name, size_t *len);
/* Answers with an ImmediateResponse (an OpenAI-style error body), counted under outcome (GW_*). */
void pdr__gw_refuse(gw_req_t *q, int status, const char *type, const char *msg, int outcome);
void pdr__gw_admit_refused(gw_req_t *q, pdr_admit_result_t adm);
void pdr__gw_answer(gw_req_t *q, const char *const *eps, size_t n, const char *prefill);

/* epp_metrics.c */
void pdr__gw_count(int outcome);
void pdr__gw_count_served(int k); /* 0 first, 1 a listed fall-back, 2 another, 3 not said */
void pdr__gw_streams(int delta);
void pdr__gw_observe(uint64_t t0_ns); /* a pick's latency, from t0_ns to now */
/* Loop 0: copies the gRPC servers' counters (a, b: NULL for none) for /metrics, summed. */
void pdr__gw_stats_copy(const pdr_epp_t *a, const pdr_epp_t *b);

/* epp_workers.c */
void pdr__gw_pick(gw_req_t *q);
/* The response ended (or the stream did): the picked workers are no longer in flight for it. */
void pdr__gw_release(gw_req_t *q);
/* The gateway says which endpoint served the request (NULL: it did not say). */
void pdr__gw_served(gw_req_t *q, const char *served);
void pdr__gw_keep_subset(gw_req_t *q, const pdr_epp_msg_t *m);
void pdr__gw_admit_tag(gw_req_t *q, const pdr_config_t *c, pdr_admit_tag_t *tag);

#endif
