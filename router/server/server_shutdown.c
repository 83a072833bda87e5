/*
 * The server's shutdown sequence (see server.c): stop accepting, let in-flight requests finish, then
 * close every loop.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "admission.h"
#include "control.h"
#include "gateway.h"
#include "err.h"
#include "front.h"
#include "health.h"
#include "kv_events.h"
#include "phases.h"
#include "shim_events.h"
#include "router.h"
#include "routes.h"
#include "server_internal.h"
#include "server_shutdown.h"
#include "trace.h"
#include "util.h"

/* ---- shutdown: stop accepting, let in-flight requests finish, then close every loop ---- */

static void on_multi_closed(void *arg)
{
    (void)arg;
}

static void on_stop_timer(uv_timer_t *h)
{
    /* Clients that keep connections open after shutdown must not keep the process alive. */
    uv_stop(h->loop);
}

/* No request left (or the deadline): idle HTTP/1 connections close, HTTP/2 ones get GOAWAY (h2o re-sends
 * it each second until they are gone). The multi stays until the connections are gone, so that a
 * request still arriving on one of them is served. */
static void finish_loop(pdr_thread_t *t)
{
    pdr_router_t *r = t->r;
    t->finishing = 1;
    t->finish_ms = pdr_now_ms();
    if (t->id == 0) {
        pdr_router_discovery_stop(r);
        pdr_health_stop(r);
        pdr_kv_events_stop(r);
        pdr_gateway_stop(r);
        uv_close((uv_handle_t *)&r->sig_term, NULL);
        uv_close((uv_handle_t *)&r->sig_int, NULL);
        uv_close((uv_handle_t *)&r->sig_hup, NULL);
        if (r->grace_timer_live) {
            r->grace_timer_live = 0;
            uv_close((uv_handle_t *)&r->grace_timer, NULL);
        }
        if (r->startup_timer_live) {
            r->startup_timer_live = 0;
            uv_close((uv_handle_t *)&r->startup_timer, NULL);
        }
    }
    pdr_admit_loop_closing(t); /* no admission slot is handed over to this loop from here on */
    uv_close((uv_handle_t *)&t->wakeup, NULL);
    if (t->conns > 0) {
        pdr__conn_ng2_shutdown(t);
        h2o_context_request_shutdown(&t->h2o_ctx);
        if (t->id == 0 && r->admin_ctx_live)
            h2o_context_request_shutdown(&r->admin_ctx);
        if (t->id == 0 && r->metrics_ctx_live)
            h2o_context_request_shutdown(&r->metrics_ctx);
    }
}

#define FINISH_LINGER_MS 1000

static void close_multi(pdr_thread_t *t)
{
    uv_timer_init(t->loop, &t->stop_timer);
    uv_timer_start(&t->stop_timer, on_stop_timer, 500, 0);
    uv_unref((uv_handle_t *)&t->stop_timer);
    pdr__access_log_close(t);
    pdr_multi_close(t->multi, on_multi_closed, t);
    t->multi = NULL;
}

static void on_shutdown_tick(uv_timer_t *h)
{
    pdr_thread_t *t = h->data;
    pdr_router_t *r = t->r;
    int deadline = pdr_now_ms() - r->shutdown_started_ms >= (uint64_t)r->drain_timeout_ms;
    if (deadline && t->multi != NULL) {
        /* From here on no new request and no retry. */
        __atomic_store_n(&r->shutting_down, 1, __ATOMIC_RELAXED);
        if (!t->finishing)
            finish_loop(t); /* first: on loop 0 it stops the health probes, whose legs must not fail */
        if (t->live > 0) {
            /* End both legs of every request still running; each ends the way a broken decode stream
             * does (SSE: an error event; otherwise the response is cut). */
            /* Lingering ones were answered already; engine aborts are no requests. */
            int64_t n = (int64_t)(t->live - t->lingering - t->aborts);
            __atomic_add_fetch(&r->drain_cancelled, n, __ATOMIC_RELAXED);
            pdr_multi_fail_all(t->multi, PDR_ECANCELED);
            pdr_warn("shutdown: loop %d: %lld requests cancelled at drain_timeout", t->id, (long long)n);
        }
    }
    if (!t->finishing && t->live == 0)
        finish_loop(t);
    /* HTTP/1 keep-alive connections that stay idle get FINISH_LINGER_MS, then they no longer keep
     * the loop alive (on_stop_timer). */
    if (t->finishing && t->multi != NULL &&
        ((t->live == 0 && (t->conns == 0 || pdr_now_ms() - t->finish_ms >= FINISH_LINGER_MS)) || deadline)) {
        if (t->conns > 0) /* a request still arriving on them is refused: the multi is going away */
            __atomic_store_n(&r->shutting_down, 1, __ATOMIC_RELAXED);
        close_multi(t);
    }
    pdr__maybe_dispose_h2o(t);
}

void pdr__server_start_loop_shutdown(pdr_thread_t *t)
{
    /* Stop accepting; idle connections are closed once the loop's own requests are done (finish_loop). */
    t->closing = 1;
    if (t->listening) {
        pdr__server_accept_backlog(t, &t->listener);
        pdr__server_close_listener(&t->listener);
        t->listening = 0;
    }
    if (t->id == 0 && t->r->admin_listening) {
        pdr__server_close_listener(&t->r->admin_listener);
        t->r->admin_listening = 0;
    }
    if (t->id == 0 && t->r->metrics_listening) {
        pdr__server_close_listener(&t->r->metrics_listener);
        t->r->metrics_listening = 0;
    }
    /* The first tick comes after a poll, so that the connections just taken from the backlog have
     * their requests read before idle connections are closed. */
    uv_timer_init(t->loop, &t->shutdown_timer);
    t->shutdown_timer.data = t;
    uv_timer_start(&t->shutdown_timer, on_shutdown_tick, 20, 20);
}

/* The grace is over (or a second signal cut it short): every loop stops accepting. */
void pdr__server_begin_drain(pdr_router_t *r)
{
    if (r->draining)
        return;
    r->shutdown_started_ms = pdr_now_ms();
    r->drain_timeout_ms = r->config->lifecycle.drain_timeout_ms;
    __atomic_store_n(&r->draining, 1, __ATOMIC_RELEASE);
    pdr_info("shutdown: listeners closed, %lld requests in flight (drain_timeout %d ms)",
             (long long)__atomic_load_n(&r->inflight, __ATOMIC_RELAXED),
             r->config->lifecycle.drain_timeout_ms);
    for (int i = 0; i < r->n_threads; i++)
        uv_async_send(&r->threads[i].wakeup);
}

static void on_grace_over(uv_timer_t *h)
{
    pdr__server_begin_drain(h->data);
}

void pdr_router_begin_shutdown(pdr_router_t *r)
{
    if (r->draining)
        return;
    if (pdr_router_stopping(r)) {
        pdr_info("shutdown: second signal, ending the grace period now");
        uv_timer_stop(&r->grace_timer);
        pdr__server_begin_drain(r);
        return;
    }
    __atomic_store_n(&r->stopping, 1, __ATOMIC_RELAXED);
    int grace = r->config->lifecycle.drain_grace_ms;
    pdr_info("shutdown: readiness off, serving for %d ms", grace);
    if (grace == 0) {
        pdr__server_begin_drain(r);
        return;
    }
    uv_timer_init(r->threads[0].loop, &r->grace_timer);
    r->grace_timer.data = r;
    r->grace_timer_live = 1;
    uv_timer_start(&r->grace_timer, on_grace_over, (uint64_t)grace, 0);
}

void pdr_router_join(pdr_router_t *r)
{
    for (int i = 1; i < r->n_threads; i++) {
        uv_thread_join(&r->threads[i].tid);
        if (r->threads[i].h2o_disposed && uv_loop_close(r->threads[i].loop) == 0)
            free(r->threads[i].loop);
    }
    int clean = 1;
    for (int i = 0; i < r->n_threads; i++) {
        clean &= r->threads[i].h2o_disposed;
        free(r->threads[i].alog);
        free(r->threads[i].m.phases);
        r->threads[i].m.phases = NULL;
        pdr_config_unref(r->threads[i].config);
        r->threads[i].config = NULL;
        pdr__tls_thread_done(&r->threads[i]);
    }
    if (clean) {
        /* Every loop ended by itself: release the shared state too (no leak reports at exit). */
        h2o_config_dispose(&r->h2o_config);
        pdr_admin_dispose(r);
        if (r->metrics_on)
            h2o_config_dispose(&r->metrics_config);
        r->metrics_on = 0;
        free(r->threads);
        r->threads = NULL;
        pdr_kv_events_free(r);
        pdr_shim_events_free(r);
        pdr_pool_dispose(&r->pool);
        pdr_config_unref(r->config);
        r->config = NULL;
        pdr_router_tokenizer_dispose(r);
        pdr_router_tls_free(r);
        pthread_mutex_destroy(&r->config_lock);
        free(r->config_path);
    }
    pdr_trace_stop(); /* what the loops submitted is exported (one try) before the process ends */
    if (r->access_fd > STDERR_FILENO)
        close(r->access_fd);
}
