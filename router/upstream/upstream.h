/*
 * Upstream HTTP/1.1 calls on the router's libuv loop: prefill and decode legs, health checks, the model
 * list. One pdr_multi_t per loop owns the connections: a keep-alive pool per origin (host:port), each
 * idle connection kept reading so that a close by the worker is seen before the connection is reused.
 * A pdr_leg_t is one request; it owns no handle, so its memory may go as soon as it is done or
 * cancelled.
 *
 * Callbacks never run synchronously inside pdr_leg_start(). on_data may return PDR_LEG_PAUSE to leave
 * the bytes unconsumed (they are delivered again after pdr_leg_resume(); nothing more is read from the
 * worker meanwhile, so TCP flow control pushes back on it); returning anything other than n or
 * PDR_LEG_PAUSE aborts the leg (on_done receives PDR_ECANCELED). on_done runs once per started leg unless
 * the leg was cancelled with pdr_leg_cancel(); from any callback the owner may start or cancel legs.
 * Loop thread only. The leg's type is upstream_types.h's, which this header includes.
 */
#ifndef PDR_UPSTREAM_H
#define PDR_UPSTREAM_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>
#include "upstream_types.h"

pdr_multi_t *pdr_multi_new(uv_loop_t *loop, int max_connects);
/* Closes the multi; every leg must be finished or cancelled. close_cb runs once its handles closed.
 * max_connects: idle connections kept per origin. */
void pdr_multi_close(pdr_multi_t *m, void (*close_cb)(void *), void *arg);

/* Ends every active leg at once with `err` (connections closed, so workers see the abort): on_done
 * runs for each, from this call (never from within another leg's callback; call it from a timer). Returns how
 * many legs were ended. Used at the shutdown deadline. */
size_t pdr_multi_fail_all(pdr_multi_t *m, int err);

/* Starts a request to url ("http://host[:port][/path]", or https:// over TLS: see pdr_multi_set_tls). body
 * may be NULL (GET); a body is sent as application/json with a Content-Length. The body is not copied: keep
 * it alive until on_done or cancel. extra_headers: NULL-terminated "Name: value" strings (copied).
 * connect_timeout_ms bounds the connection set-up; total_timeout_ms > 0 bounds the whole call
 * (PDR_ETIMEDOUT). A request that fails on a reused connection before any response byte (the worker closed it
 * while idle) is sent once more on a new connection. Returns 0 or a PDR_E* code (PDR_EINVAL for a URL it
 * cannot use). */
int pdr_leg_start(pdr_leg_t *leg, pdr_multi_t *m, const char *url, const char *body, size_t body_len,
                  const char *const *extra_headers, long connect_timeout_ms, long total_timeout_ms,
                  const pdr_leg_cbs_t *cbs, void *data);
/* As pdr_leg_start, for a health check: the per-worker connection limit does not hold it back (a
 * probe queued behind the requests of a busy worker would time out and eject a healthy worker), so
 * a worker may see one connection beyond the limit while it is checked. */
int pdr_leg_start_probe(pdr_leg_t *leg, pdr_multi_t *m, const char *url, const char *const *extra_headers,
                        long timeout_ms, const pdr_leg_cbs_t *cbs, void *data);
/* Stops a started leg at once and closes its connection (the worker sees the abort). on_done is not
 * called. Safe from any callback, including the leg's own. */
void pdr_leg_cancel(pdr_leg_t *leg);
/* 1 while a started leg has no established connection yet (waiting for one, resolving or connecting). */
int pdr_leg_connecting(const pdr_leg_t *leg);
/* Resumes a leg whose on_data returned PDR_LEG_PAUSE. */
void pdr_leg_resume(pdr_leg_t *leg);

/* limits.max_connections_per_worker, this loop's share: at most per_origin connections to each worker
 * (connecting, busy or pooled); requests beyond it wait for one. 0: no limit. */
void pdr_multi_set_conn_limit(pdr_multi_t *m, size_t per_origin);
/* Tests: the most connections ever open at once to one origin. */
size_t pdr__multi_open_peak(const pdr_multi_t *m);
/* Tests: how many read buffers the multi has allocated (legs on pooled connections reuse them). */
uint64_t pdr__multi_buf_allocs(const pdr_multi_t *m);

/* Tests: the most connects that were ever in progress at once to one origin (at most 64: a burst of
 * requests waits for connect slots or pooled connections instead of flooding the worker with SYNs). */
size_t pdr__multi_connecting_peak(const pdr_multi_t *m);

/* TLS for https:// origins (router/upstream/upstream_tls.c): the client context (a reference is taken; NULL:
 * https legs fail), the name checked instead of each URL's host (NULL: the host), and whether the worker's
 * certificate is verified. Connections made before keep their sessions. 0 or PDR_ENOMEM. */
struct ssl_ctx_st;
int pdr_multi_set_tls(pdr_multi_t *m, struct ssl_ctx_st *ctx, const char *server_name, int verify);
/* Where the completed TLS handshakes to workers are counted: full ones and resumed ones (or NULL). */
void pdr_multi_count_tls(pdr_multi_t *m, uint64_t *full, uint64_t *resumed, uint64_t *resume_failed);
/* A failed leg's reason: its error_detail when set (a TLS failure names its cause), else pdr_strerror. */
const char *pdr_leg_strerror(const pdr_leg_t *leg, int err);

/* Names the cause of an error, for metrics: "connect", "timeout", "reset", "other". */
const char *pdr_leg_cause(int err);

#endif
