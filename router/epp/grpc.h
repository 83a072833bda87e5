/*
 * A gRPC server on libnghttp2 over a libuv loop: its own TCP listener, HTTP/2 with prior knowledge (h2c),
 * requests of content-type application/grpc, messages in gRPC's length-prefixed framing both ways, the
 * status in the trailers (grpc-status, grpc-message). Each method is a row of the caller's table; a call
 * receives its messages as they arrive and sends its answers when it has them, so one table serves unary
 * and bidirectional streaming methods alike. Everything runs on the loop's thread; nothing here is
 * thread-safe.
 */
#ifndef PDR_EPP_GRPC_H
#define PDR_EPP_GRPC_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* gRPC status codes used here (the protocol's numbers). */
#define PDR_GRPC_OK 0
#define PDR_GRPC_INVALID_ARGUMENT 3
#define PDR_GRPC_RESOURCE_EXHAUSTED 8
#define PDR_GRPC_UNIMPLEMENTED 12
#define PDR_GRPC_INTERNAL 13
#define PDR_GRPC_UNAVAILABLE 14

typedef struct pdr_grpc_server pdr_grpc_server_t;
typedef struct pdr_grpc_call pdr_grpc_call_t;

/* One method: its path ("/package.Service/Method") and what its calls do. on_message gets each whole
 * request message (valid during the callback only); on_half_close the client's end of its stream;
 * on_close says the call is gone (after it, the call must not be used). Each may answer at once or later
 * (pdr_grpc_send, pdr_grpc_finish). Any callback may be NULL. */
typedef struct pdr_grpc_method {
    const char *path;
    void (*on_open)(void *data, pdr_grpc_call_t *call);
    void (*on_message)(void *data, pdr_grpc_call_t *call, const uint8_t *msg, size_t len);
    void (*on_half_close)(void *data, pdr_grpc_call_t *call);
    void (*on_close)(void *data, pdr_grpc_call_t *call);
    void *data;
} pdr_grpc_method_t;

typedef struct pdr_grpc_limits {
    size_t max_message;       /* a request message's ceiling; past it RESOURCE_EXHAUSTED */
    size_t max_send_queue;    /* bytes a call may have queued and unsent; past it pdr_grpc_send fails */
    uint32_t max_connections; /* past it a new connection is closed at once */
    uint32_t max_streams;     /* SETTINGS_MAX_CONCURRENT_STREAMS of each connection */
    uint64_t idle_timeout_ms; /* a connection with no open stream for this long is closed (GOAWAY) */
} pdr_grpc_limits_t;

/* Counters, read with pdr_grpc_server_stats. */
typedef struct pdr_grpc_stats {
    uint64_t connections, refused_connections, idle_closed;
    uint64_t calls, unimplemented, invalid, too_big, protocol_errors;
} pdr_grpc_stats_t;

/* Starts listening on host:port (port 0: any free port) with the methods (the table, its strings and its
 * data must outlive the server). NULL on failure with *err a PDR_E* code and a reason in msg. */
pdr_grpc_server_t *pdr_grpc_server_new(uv_loop_t *loop, const char *host, int port,
                                       const pdr_grpc_limits_t *lim, const pdr_grpc_method_t *methods,
                                       size_t nmethods, int *err, char *msg, size_t cap);
/* The port the listener is bound to. */
int pdr_grpc_server_port(const pdr_grpc_server_t *s);
void pdr_grpc_server_stats(const pdr_grpc_server_t *s, pdr_grpc_stats_t *out);
/* Stops listening, ends every open call with UNAVAILABLE, says GOAWAY on each connection and closes it
 * once what was queued is written; cb(data) runs on the loop once every handle is closed and the server's
 * memory is freed. */
void pdr_grpc_server_close(pdr_grpc_server_t *s, void (*cb)(void *data), void *data);

/* Queues one response message (framed here). PDR_ETOOBIG past max_send_queue, PDR_ECLOSED once the call
 * was finished or reset. */
int pdr_grpc_send(pdr_grpc_call_t *call, const uint8_t *msg, size_t len);
/* Ends the call with a status (its trailers follow whatever was queued); message may be NULL. A second
 * finish is a no-op returning PDR_ECLOSED. */
int pdr_grpc_finish(pdr_grpc_call_t *call, int status, const char *message);
void pdr_grpc_call_set_data(pdr_grpc_call_t *call, void *data);
void *pdr_grpc_call_data(const pdr_grpc_call_t *call);

#endif
