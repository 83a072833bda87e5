/*
 * What conn_ng2.c (the libnghttp2 front end: the session, its streams as h2o requests, the socket) and
 * conn_ng2_limits.c (nghttp2's options and the router's limits added to them) share. Nothing else
 * includes it.
 */
#ifndef PDR_CONN_NG2_INTERNAL_H
#define PDR_CONN_NG2_INTERNAL_H
#include <nghttp2/nghttp2.h>
#include "conn_internal.h"

/* What a connection may hold unwritten before nghttp2 is asked for no more frames: one write at a time,
 * each of at most this many bytes (the rest waits in nghttp2's queues and the handlers' buffers). */
#define NG2_WRITE_MAX 65536
/* The first response headers the handler's table can give, plus :status, server and date. */
#define NG2_MAX_RES_HEADERS 100
/* Streams open at once, as h2o 2.2.5 advertises (a constant there): past it a stream is refused; of the
 * open ones, limits.h2_max_concurrent_streams are processed at a time and the others wait, in order. */
#define NG2_MAX_OPEN_STREAMS 100
/* Frames that carry no request take a token of limits.h2_max_control_frames, refilled over it. */
#define CONTROL_WINDOW_MS 10000
/* CONTINUATION frames after one HEADERS frame: nghttp2's default; a header block of up to
 * limits.max_header_bytes fits in far fewer 16 KiB frames. */
#define NG2_MAX_CONTINUATIONS 8

typedef struct ng2_stream ng2_stream_t;

typedef struct ng2_conn {
    h2o_conn_t super;
    client_conn_t *cc;
    h2o_socket_t *sock;
    nghttp2_session *ng;
    pdr_dlink_t *streams; /* every stream with an h2o_req_t (ng2_stream_t.link) */
    pdr_dlink_t *proceed; /* streams whose handler waits for h2o_proceed_response (ng2_stream_t.plink) */
    pdr_dqueue_t waiting; /* streams read whole, waiting for a place among max_running (ng2_stream_t.wlink) */
    uint32_t running, max_running; /* streams handed to h2o_process_request and not yet ended; the limit */
    int dying;                     /* ng2_close is disposing of the streams: none is started */
    h2o_buffer_t *out;             /* the frames being written (one h2o_socket_write at a time) */
    int writing;                   /* h2o_socket_write in flight */
    int closing;                   /* the session ended: close once the last frames are written */
    int flood_error;               /* the nghttp2 error that ended it */
    int flood_control;             /* ended by limits.h2_max_control_frames (control_flood) */
    int32_t proc_before_block;     /* the last stream processed before the header block of last_headers */
    double ctl_tokens;             /* limits.h2_max_control_frames' bucket (control_flood) */
    uint64_t ctl_ms;
    int flooded;          /* nghttp2 refused a flood: one GOAWAY of the router's own, then the close */
    uint64_t max_body;    /* limits.max_body_bytes at the accept */
    int32_t last_headers; /* the highest stream id a HEADERS frame came on */
    h2o_timeout_entry_t flush_entry; /* a write of the frames nghttp2 has queued, on the next loop turn */
    h2o_timeout_entry_t idle_entry;  /* no stream open: closed after http2.idle_timeout */
    pdr_dlink_t link;                /* on t->ng2_conns */
} ng2_conn_t;

struct ng2_stream {
    h2o_req_t req;
    h2o_ostream_t ostr;
    ng2_conn_t *conn;
    int32_t id;
    h2o_buffer_t *body; /* the request body so far (NULL: none yet) */
    int processed;      /* handed to h2o_process_request */
    int too_big;        /* the body passed max_body: the rest of its DATA is dropped */
    int submitted;      /* the response headers went to nghttp2 */
    int deferred;       /* the data provider waits for do_send (NGHTTP2_ERR_DEFERRED) */
    h2o_iovec_t *bufs;  /* what do_send handed over, alive until h2o_proceed_response */
    size_t nbufs, bi, boff;
    h2o_send_state_t state;
    int running; /* counted in conn->running */
    pdr_dlink_t link, plink, wlink;
};

/* conn_ng2_limits.c */
/* The session's options for a connection accepted under cfg (nghttp2_option_del), or NULL. */
nghttp2_option *pdr__ng2_options(const pdr_config_t *cfg);
/* nghttp2 callbacks: the control-frame bucket and the check of stream ids (on_begin_frame), and the
 * frames of unknown types, declared as extensions only to be counted and dropped. */
int pdr__ng2_on_begin_frame(nghttp2_session *ng, const nghttp2_frame_hd *hd, void *user);
int pdr__ng2_on_extension_chunk(nghttp2_session *ng, const nghttp2_frame_hd *hd, const uint8_t *data,
                                size_t len, void *user);
int pdr__ng2_ignore_extension(nghttp2_session *ng, void **payload, const nghttp2_frame_hd *hd, void *user);
/* The GOAWAY ENHANCE_YOUR_CALM of a connection nghttp2 or the bucket ended for a flood, written into
 * out; its length, or 0 when it does not fit. */
size_t pdr__ng2_flood_goaway(const ng2_conn_t *c, char *out, size_t cap);

#endif
