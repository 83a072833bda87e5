/*
 * The state the gRPC server's files share: the server, its connections, their calls. grpc_call.c (the
 * calls: headers, dispatch, messages both ways, trailers) is below grpc_conn.c (the listener, the sockets,
 * the nghttp2 session, the timers); the call's side reaches its connection's writer through the function
 * the connection side sets in the server (flush), which only schedules the write: a call's answer never
 * runs the session's sending (which may close streams, the call's own included) inside the caller.
 * Loop thread only.
 */
#ifndef PDR_EPP_GRPC_INTERNAL_H
#define PDR_EPP_GRPC_INTERNAL_H

#include <nghttp2/nghttp2.h>
#include "buf.h"
#include "dlist.h"
#include "grpc.h"
#include "grpc_frame.h"

#define GRPC_READ_BUF 16384
/* What one write gathers from the session before it goes to the socket (one frame may pass it). */
#define GRPC_WRITE_BATCH 65536
#define GRPC_PATH_MAX 256
#define GRPC_MESSAGE_MAX 512 /* a grpc-message's text before percent-encoding */
/* A closing server's connections get this long to write their last trailers before they are cut. */
#define GRPC_DRAIN_MS 2000

typedef struct grpc_conn grpc_conn_t;

struct pdr_grpc_server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    pdr_grpc_limits_t lim;
    const pdr_grpc_method_t *methods;
    size_t nmethods;
    pdr_dlink_t *conns;
    uint32_t nconns;
    pdr_grpc_stats_t stats;
    int port;
    int closing;
    unsigned handles; /* libuv handles not closed yet: the listener and three per connection */
    void (*close_cb)(void *data);
    void *close_data;
    void (*flush)(grpc_conn_t *c); /* set by grpc_conn.c: have what the session has written, soon */
};

struct grpc_conn {
    pdr_grpc_server_t *srv;
    uv_tcp_t tcp;
    uv_timer_t timer; /* idle (no open call), or the drain's deadline */
    uv_timer_t kick;  /* a zero timer: a call's answer is written from the loop, not from inside the call */
    nghttp2_session *ng;
    pdr_dlink_t link;
    pdr_dlink_t *calls;
    uint32_t ncalls;
    uv_write_t wreq;
    pdr_buf_t wbuf;
    unsigned handles;
    int writing, busy, want_close, closed, draining;
    uint8_t rbuf[GRPC_READ_BUF];
};

struct pdr_grpc_call {
    grpc_conn_t *conn;
    int32_t id;
    pdr_dlink_t link;
    const pdr_grpc_method_t *method;
    char path[GRPC_PATH_MAX];
    int path_len; /* -1: too long */
    int is_post, is_grpc;
    pdr_grpc_reader_t reader;
    pdr_buf_t out;  /* framed messages queued */
    size_t out_off; /* bytes of out already handed to the session */
    int opened;     /* on_open ran: on_close is owed */
    int responded;  /* the response's headers were submitted */
    int finished;   /* the status is set: nothing more is queued */
    int remote_done;
    int status;
    char message[GRPC_MESSAGE_MAX * 3 + 1]; /* percent-encoded */
    void *data;
};

/* grpc_call.c: the session's callbacks about streams, and a connection's calls ended when it closes. */
void pdr__grpc_session_callbacks(nghttp2_session_callbacks *cbs);
void pdr__grpc_calls_drop(grpc_conn_t *c);
void pdr__grpc_calls_shutdown(grpc_conn_t *c);

#endif
