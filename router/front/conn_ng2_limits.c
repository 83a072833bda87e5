/*
 * The limits of the libnghttp2 front end (conn_ng2.c; the connection's own loop): the session's options,
 * set from limits.*, and what the router adds to nghttp2's own limits: the control-frame bucket of
 * limits.h2_max_control_frames (nghttp2 bounds only the ACKs it has not written), the connection error
 * for HEADERS on a stream id below an earlier one (nghttp2 1.52 ignores the block), frames of unknown
 * types counted and dropped, and the GOAWAY that names the limit a flood ran into (nghttp2 ends the
 * session on a flood without one).
 */
#include <inttypes.h>
#include <stdio.h>
#include "conn_ng2_internal.h"
#include "reqguard.h"
#include "router.h"
#include "util.h"

/* A HEADERS frame on a stream id below an earlier one, on a stream that is not open, is a connection
 * error (RFC 9113 section 5.1.1); nghttp2 1.52 ignores its header block instead. */
/* Frames that carry no request (SETTINGS and PING that are not ACKs, PRIORITY, CONTINUATION, empty DATA
 * without END_STREAM, frames of unknown types) take a token of limits.h2_max_control_frames, refilled
 * over CONTROL_WINDOW_MS, as on h2o's connections: nghttp2 only bounds the ACKs it has not written yet,
 * so a flood it can answer as fast as it comes would go on. */

static int control_frame(const nghttp2_frame_hd *hd)
{
    switch (hd->type) {
    case NGHTTP2_SETTINGS:
    case NGHTTP2_PING:
        return !(hd->flags & NGHTTP2_FLAG_ACK);
    case NGHTTP2_PRIORITY:
    case NGHTTP2_CONTINUATION:
        return 1;
    case NGHTTP2_DATA:
        return hd->length == 0 && !(hd->flags & NGHTTP2_FLAG_END_STREAM);
    case NGHTTP2_HEADERS:
    case NGHTTP2_RST_STREAM:
    case NGHTTP2_PUSH_PROMISE:
    case NGHTTP2_GOAWAY:
    case NGHTTP2_WINDOW_UPDATE:
        return 0;
    default:
        return 1;
    }
}

static int control_flood(ng2_conn_t *c)
{
    int limit = c->cc->t->config->limits.h2_max_control_frames;
    if (limit == 0)
        return 0;
    uint64_t now = pdr_now_ms();
    c->ctl_tokens += (double)(now - c->ctl_ms) * limit / CONTROL_WINDOW_MS;
    if (c->ctl_tokens > limit)
        c->ctl_tokens = limit;
    c->ctl_ms = now;
    c->ctl_tokens -= 1;
    return c->ctl_tokens < 0;
}

int pdr__ng2_on_begin_frame(nghttp2_session *ng, const nghttp2_frame_hd *hd, void *user)
{
    ng2_conn_t *c = user;
    if (control_frame(hd) && control_flood(c)) {
        c->flooded = 1;
        c->flood_error = NGHTTP2_ERR_FLOODED;
        c->flood_control = 1;
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    if (hd->type != NGHTTP2_HEADERS)
        return 0;
    if (hd->stream_id > c->last_headers) {
        c->last_headers = hd->stream_id;
        c->proc_before_block = nghttp2_session_get_last_proc_stream_id(ng);
        return 0;
    }
    if (nghttp2_session_find_stream(ng, hd->stream_id) != NULL)
        return 0;
    nghttp2_session_terminate_session(ng, NGHTTP2_PROTOCOL_ERROR);
    return NGHTTP2_ERR_CALLBACK_FAILURE;
}

int pdr__ng2_on_extension_chunk(nghttp2_session *ng, const nghttp2_frame_hd *hd, const uint8_t *data,
                                size_t len, void *user)
{
    (void)ng, (void)hd, (void)data, (void)len, (void)user;
    return 0;
}

int pdr__ng2_ignore_extension(nghttp2_session *ng, void **payload, const nghttp2_frame_hd *hd, void *user)
{
    (void)ng, (void)payload, (void)hd, (void)user;
    return NGHTTP2_ERR_CANCEL;
}

nghttp2_option *pdr__ng2_options(const pdr_config_t *cfg)
{
    nghttp2_option *o;
    if (nghttp2_option_new(&o) != 0)
        return NULL;
    /* A SETTINGS flood: nghttp2 counts the ACKs it owes (default 1000 outstanding are allowed). */
    nghttp2_option_set_max_settings(o, 32); /* entries in one SETTINGS frame */
    nghttp2_option_set_max_outbound_ack(
        o, cfg->limits.h2_max_control_frames > 0 ? (size_t)cfg->limits.h2_max_control_frames : 1000);
    /* Rapid reset: a token bucket of limits.h2_max_resets streams per 10 s (burst, rate per second). */
    if (cfg->limits.h2_max_resets > 0)
        nghttp2_option_set_stream_reset_rate_limit(o, (uint64_t)cfg->limits.h2_max_resets,
                                                   (uint64_t)(cfg->limits.h2_max_resets + 9) / 10);
    nghttp2_option_set_max_send_header_block_length(o, 65536);
    nghttp2_option_set_max_continuations(o, NG2_MAX_CONTINUATIONS);
    /* Frames of unknown types are declared as extensions, so that on_begin_frame counts them; their
     * payload is dropped (ignore_extension). */
    for (int type = NGHTTP2_CONTINUATION + 1; type <= 0xff; type++)
        nghttp2_option_set_user_recv_extension_type(o, (uint8_t)type);
    return o;
}

size_t pdr__ng2_flood_goaway(const ng2_conn_t *c, char *out, size_t cap)
{
    char debug[160];
    int32_t last = nghttp2_session_get_last_proc_stream_id(c->ng);
    int limit = c->cc->t->config->limits.h2_max_control_frames;
    if (c->flood_error == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS) {
        snprintf(debug, sizeof(debug), "header block of stream %" PRId32 " exceeds %d CONTINUATION frames",
                 c->last_headers, NG2_MAX_CONTINUATIONS);
        last = c->proc_before_block; /* the stream of the block was not processed */
    } else if (c->flood_control) {
        snprintf(debug, sizeof(debug),
                 "more than %d SETTINGS, PING, PRIORITY, CONTINUATION or unknown-type frames in %d s "
                 "(limits.h2_max_control_frames)",
                 limit, CONTROL_WINDOW_MS / 1000);
    } else {
        snprintf(debug, sizeof(debug),
                 "more than %d SETTINGS or PING frames unanswered "
                 "(limits.h2_max_control_frames)",
                 limit);
    }
    return pdr_h2_goaway_frame(out, cap, (uint32_t)last, NGHTTP2_ENHANCE_YOUR_CALM, debug);
}
