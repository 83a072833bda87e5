/*
 * The upstream client's types (upstream.h includes this header): a leg, the callbacks its owner gives
 * it, and the multi's name. No .c file goes with it: upstream.c (legs, origins, the multi) and the
 * connection's files below it (upstream_conn.c, upstream_conn_tls.c, through upstream_internal.h) all
 * build on it.
 */
#ifndef PDR_UPSTREAM_TYPES_H
#define PDR_UPSTREAM_TYPES_H

#include <stddef.h>
#include <stdint.h>
#include "dlist.h"

typedef struct pdr_multi pdr_multi_t;
typedef struct pdr_leg pdr_leg_t;

#define PDR_LEG_PAUSE ((size_t)-1)

typedef struct pdr_leg_cbs {
    /* Response bytes. The first call follows the status line and headers (see leg->status). */
    size_t (*on_data)(pdr_leg_t *leg, const char *p, size_t n);
    /* The transfer ended: err is 0 or a PDR_E* code (PDR_ECONNREFUSED, PDR_ETIMEDOUT, PDR_EPEERGONE,
     * PDR_EIO, PDR_ECANCELED when on_data aborted it). */
    void (*on_done)(pdr_leg_t *leg, int err);
} pdr_leg_cbs_t;

struct pdr_leg {
    pdr_multi_t *multi;
    struct pdr_conn *conn; /* the connection carrying it (or being made for it), NULL when none */
    struct pdr_origin *origin;
    char *head; /* the request's status line and headers */
    size_t head_len;
    unsigned head_spare : 1; /* head is one of the loop's HEAD_SPARE buffers */
    const char *body;        /* the owner's, not copied */
    size_t body_len;
    long connect_timeout_ms, total_timeout_ms;
    const pdr_leg_cbs_t *cbs;
    void *data;             /* owner's pointer */
    long status;            /* HTTP status once known, else 0 */
    int64_t content_length; /* -1 when unknown */
    unsigned active : 1, paused : 1, got_headers : 1, abort_requested : 1, retried : 1, waiting : 1,
        uncapped : 1;      /* not held back by the per-worker connection limit (health checks) */
    pdr_dlink_t wait_link; /* on its origin's queue of legs waiting for a connection */
    uint64_t started_ns, first_byte_ns;
    uint64_t bytes_in;
    pdr_dlink_t active_link; /* on the multi's list of active legs */
    /* The strings last: a new leg clears the fields above and their first bytes only. */
    char content_type[96];
    char error_detail[192]; /* why the leg failed when its code says too little (TLS); "" otherwise */
};

#endif
