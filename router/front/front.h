/*
 * The client side of the data port (front/): the batched access log (accesslog.c), client connections
 * and their guards (conn.c, conn_h1.c, conn_h2.c), the client limits h2o enforces (limits.c), and the TLS
 * contexts of the listener and the workers (tls.c). The server (server/) and the handlers (pd/, control/)
 * call these; front/ calls none of them.
 */
#ifndef PDR_FRONT_H
#define PDR_FRONT_H

#include <h2o.h>
#include <openssl/ssl.h>
#include "config.h"
#include "router.h"

/* accesslog.c: the loop's batched access log (log.access) */
void pdr_access_log(pdr_thread_t *t, const char *line, size_t len);
/* The line of a request its client aborted: written at most ALOG_ABORT_PER_S a second per loop (a burst of
 * as many); the rest are counted and summed up in one line per flush, so that a client that opens and
 * resets streams in a loop cannot turn the access log into a disk-filling amplifier. */
void pdr_access_log_aborted(pdr_thread_t *t, const char *line, size_t len);
/* As pdr_access_log_aborted, for requests refused before any worker was chosen (admission, a flooding
 * connection's streams, malformed requests): an attacker that reconnects as fast as it is refused
 * cannot fill the disk either. A bucket of its own, so that neither kind hides the other. */
void pdr_access_log_refused(pdr_thread_t *t, const char *line, size_t len);
/* The loop's buffer (when log.access is on) and rate limit; t->alog_timer is initialized already. 0 or
 * PDR_ENOMEM. */
int pdr__access_log_init(pdr_thread_t *t);
/* At the loop's shutdown: the summary line, what is buffered, and the timer closed; later lines are
 * written at once. */
void pdr__access_log_close(pdr_thread_t *t);

/* conn.c: client connections and their guards */
/* HTTP/1 requests whose head another parser could frame differently (reqguard.h): answers 400, closes the
 * connection and returns 1; else 0. Both listeners call it first. */
int pdr__refuse_ambiguous_head(pdr_thread_t *t, h2o_req_t *req);
/* HTTP/2: the client reset (or abandoned) a stream before its answer ended. Takes a token of the
 * connection's limits.h2_max_resets bucket; when none is left the connection is closed. Returns 1 when
 * the connection is (now or already) closed for that. */
int pdr__note_client_reset(pdr_thread_t *t, h2o_req_t *req);
/* The request's connection was closed for a reset flood (its buffer may still hold requests). */
int pdr__conn_condemned(h2o_req_t *req);
/* The request's body is above limits.max_body_bytes (HTTP/2: or its stream was ended early for that by the
 * router's reader): the handler answers 413. Counts it. */
int pdr__body_too_large(pdr_thread_t *t, h2o_req_t *req);
/* Once, before any loop accepts: the descriptor -> connection map, sized to the open files limit. */
void pdr__conn_map_init(void);
void pdr__conn_evict_init(pdr_thread_t *t);
/* limits.max_client_connections: 1 when that many data-port connections are open (accepting pauses). */
int pdr__client_conns_full(pdr_thread_t *t);
/* Hands an accepted connection on listener l to h2o, with the guards in front of h2o's reads. */
void pdr__serve_conn(pdr_thread_t *t, pdr_listener_t *l, int fd);
/* A handler takes an HTTP/2 request's body (conn.c): held until the request ends. 1 when the body was
 * refused for the connection's or the router's body budget and the request answered 503. */
int pdr__conn_take_body(pdr_thread_t *t, h2o_req_t *req);
/* SSL_CTX info callback of the listener's context (conn.c): ties a connection to its SSL object. */
void pdr__conn_tls_info(const SSL *ssl, int where, int ret);
/* Once shutting down and the loop's last connection closed: disposes of its h2o contexts and handles. */
void pdr__maybe_dispose_h2o(pdr_thread_t *t);
/* Shutdown (conn_ng2.c): the libnghttp2 connections get a GOAWAY, the idle ones close. */
void pdr__conn_ng2_shutdown(pdr_thread_t *t);

/* limits.c: client-side limits that are h2o settings or h2o answers */
/* Before the contexts are made: h2o's request and idle timeouts and its HTTP/2 concurrency. */
void pdr__limits_h2o_config(h2o_globalconf_t *g, const pdr_config_t *c);
/* The data port's host: h2o's own plain-text 413 answers go out in the OpenAI error shape. */
void pdr__limits_register(h2o_hostconf_t *host);

/* tls.c (loop 0 builds and commits; each loop syncs): the listener's and the workers' TLS contexts. */
typedef struct pdr_tls_next {
    SSL_CTX *front, *workers;
} pdr_tls_next_t;
/* Builds the contexts of c from its files. 0, or PDR_ECONFIG with "key file: reason" in err. */
int pdr_router_tls_prepare(const pdr_config_t *c, pdr_tls_next_t *next, char *err, size_t cap);
void pdr_router_tls_abandon(pdr_tls_next_t *next);
/* Makes them current (every loop takes them at its next pdr_thread_sync_config). */
void pdr_router_tls_commit(pdr_router_t *r, pdr_tls_next_t *next);
void pdr_router_tls_free(pdr_router_t *r);
/* The loop takes the current contexts: its accept context and its upstream client. */
void pdr__tls_sync(pdr_thread_t *t);
/* The loop drops its reference (its end). */
void pdr__tls_thread_done(pdr_thread_t *t);

#endif
