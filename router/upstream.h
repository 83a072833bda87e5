/*
 * Upstream HTTP calls: libcurl's multi-socket API driven by the router's libuv loop. One pdr_multi_t
 * per loop; a pdr_leg_t is one upstream request (prefill leg, decode leg, health check, model list).
 *
 * Callbacks never run synchronously inside pdr_leg_start(). on_data may return PDR_LEG_PAUSE to
 * leave the bytes unconsumed (curl delivers them again after pdr_leg_resume()). on_done runs once per
 * started leg unless the leg was cancelled with pdr_leg_cancel(); it runs outside curl's own
 * callbacks, so it may start or cancel other legs. Loop thread only.
 */
#ifndef PDR_UPSTREAM_H
#define PDR_UPSTREAM_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>
#include <curl/curl.h>

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
    CURL *easy;
    struct curl_slist *headers;
    const pdr_leg_cbs_t *cbs;
    void *data;             /* owner's pointer */
    long status;            /* HTTP status once known, else 0 */
    int64_t content_length; /* -1 when unknown */
    char content_type[96];
    unsigned active : 1, paused : 1, got_headers : 1, abort_requested : 1;
    uint64_t started_ns, first_byte_ns;
    uint64_t bytes_in;
    char errbuf[CURL_ERROR_SIZE];
    pdr_leg_t *next_active, **prev_active; /* the multi's list of active legs */
};

pdr_multi_t *pdr_multi_new(uv_loop_t *loop, int max_connects);
/* Closes the multi; every leg must be finished or cancelled. close_cb runs once its handles closed. */
void pdr_multi_close(pdr_multi_t *m, void (*close_cb)(void *), void *arg);

/* Ends every active leg at once with `err` (connections closed, so workers see the abort): on_done
 * runs for each, from this call (never from curl's callbacks; call it from a timer). Returns how
 * many legs were ended. Used at the shutdown deadline. */
size_t pdr_multi_fail_all(pdr_multi_t *m, int err);

/* Starts a request. body may be NULL (GET). The body is not copied: keep it alive until on_done or
 * cancel. extra_headers: NULL-terminated "Name: value" strings (copied). Returns 0 or a PDR_E* code. */
int pdr_leg_start(pdr_leg_t *leg, pdr_multi_t *m, const char *url, const char *body, size_t body_len,
                  const char *const *extra_headers, long connect_timeout_ms, long total_timeout_ms,
                  const pdr_leg_cbs_t *cbs, void *data);
/* Stops a started leg at once and closes its connection (the worker sees the abort). on_done is not
 * called. Safe from any router callback, including curl's. */
void pdr_leg_cancel(pdr_leg_t *leg);
/* Resumes a leg whose on_data returned PDR_LEG_PAUSE. */
void pdr_leg_resume(pdr_leg_t *leg);

/* Seconds spent in curl to name the cause of an error, for metrics: "connect", "timeout", "reset", "other".
 */
const char *pdr_leg_cause(int err);

#endif
