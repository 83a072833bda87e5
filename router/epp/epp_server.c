/*
 * The endpoint picker's server (epp.h): the gRPC server (grpc.h) with its two methods, Health/Check
 * (health.c) and ExternalProcessor/Process (extproc.c), its options' defaults and its counters. The
 * loop is the embedder's; the server owns its listener and connections on it. Loop thread only.
 */
#include <stdlib.h>
#include <string.h>
#include "epp_internal.h"
#include "err.h"

void pdr_epp_options_default(pdr_epp_options_t *o)
{
    memset(o, 0, sizeof(*o));
    o->host = "127.0.0.1";
    o->port = 9002;                /* the inference extension's conventional EPP port */
    o->max_message = 4u << 20;     /* gRPC's default receive ceiling */
    o->max_send_queue = 16u << 20; /* room for a request body given back whole, and more */
    o->max_connections = 64;
    o->max_streams = 1024;
    o->idle_timeout_ms = 5 * 60 * 1000;
}

pdr_epp_t *pdr_epp_new(uv_loop_t *loop, const pdr_epp_options_t *o, const pdr_epp_handler_t *h, int *err,
                       char *msg, size_t cap)
{
    pdr_epp_t *e = calloc(1, sizeof(*e));
    if (e == NULL) {
        *err = PDR_ENOMEM;
        return NULL;
    }
    e->handler = *h;
    pdr__epp_health_method(e, &e->methods[0]);
    pdr__epp_extproc_method(e, &e->methods[1]);
    pdr_grpc_limits_t lim = {
        .max_message = o->max_message,
        .max_send_queue = o->max_send_queue,
        .max_connections = o->max_connections,
        .max_streams = o->max_streams,
        .idle_timeout_ms = o->idle_timeout_ms,
    };
    /* The protocol's three services exist from the start, not serving until the embedder says so. */
    static const char *const services[] = {"liveness", "readiness", PDR_EPP_SERVICE_EXT_PROC};
    for (size_t i = 0; i < sizeof(services) / sizeof(services[0]); i++)
        pdr_epp_set_health(e, services[i], PDR_EPP_HEALTH_NOT_SERVING);
    e->grpc = pdr_grpc_server_new(loop, o->host, o->port, &lim, e->methods, 2, err, msg, cap);
    if (e->grpc == NULL) {
        free(e);
        return NULL;
    }
    return e;
}

int pdr_epp_port(const pdr_epp_t *e)
{
    return pdr_grpc_server_port(e->grpc);
}

void pdr_epp_stats(const pdr_epp_t *e, pdr_epp_stats_t *out)
{
    pdr_grpc_stats_t g;
    pdr_grpc_server_stats(e->grpc, &g);
    out->connections = g.connections;
    out->refused_connections = g.refused_connections;
    out->idle_closed = g.idle_closed;
    out->calls = g.calls;
    out->unimplemented = g.unimplemented;
    out->invalid = g.invalid;
    out->too_big = g.too_big;
    out->protocol_errors = g.protocol_errors;
    out->streams = e->streams;
    out->messages = e->messages;
    out->malformed = e->malformed;
}

static void grpc_closed(void *data)
{
    pdr_epp_t *e = data;
    void (*cb)(void *) = e->close_cb;
    void *cb_data = e->close_data;
    free(e);
    if (cb != NULL)
        cb(cb_data);
}

void pdr_epp_close(pdr_epp_t *e, void (*cb)(void *data), void *data)
{
    e->close_cb = cb;
    e->close_data = data;
    pdr_grpc_server_close(e->grpc, grpc_closed, e);
}
