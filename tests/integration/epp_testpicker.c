/*
 * A test endpoint picker on router/epp/: the gRPC server with a picker that answers every request with the
 * fixed endpoint list given on the command line, or with an ImmediateResponse of a fixed status. It plays
 * the EPP's side of the FULL_DUPLEX_STREAMED exchange as the protocol's reference picker does: a request
 * with a body is read whole (each chunk as it arrives, up to a ceiling), then the request headers are
 * answered with the pick and the body is given back in one streamed body mutation ending the stream; a
 * request without a body is picked at its headers; the response's headers are continued and its body
 * chunks given back as they come. In the BUFFERED exchange (announced in protocol_config) the headers
 * are continued, and the whole body's answer carries the pick. A subset hint from the gateway narrows the
 * list (503 when nothing of it is left); the served endpoint the gateway reports in the response phase is
 * printed ("served IP:PORT"). tests/integration/test_epp.py plays the gateway.
 *
 *   epp_testpicker --port N --endpoints IP:PORT[,IP:PORT...] [--status 503|429] [--max-message BYTES]
 *                  [--idle-ms MS] [--max-connections N] [--max-streams N]
 *                  [--not-ready] [--no-health]
 *
 * Prints "listening on PORT" once it listens; SIGTERM closes the server and exits 0 once every handle is
 * closed (uv_loop_close succeeds), printing the server's counters as one JSON line first.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>
#include "buf.h"
#include "epp.h"

#define MAX_ENDPOINTS 16
#define BODY_MAX (1u << 20) /* the request body the picker holds to give it back */

static const char *endpoints[MAX_ENDPOINTS];
static size_t nendpoints;
static int fail_status; /* 0: pick; else the ImmediateResponse's status */
static pdr_epp_t *epp;
static uv_signal_t sigterm, sigint;

typedef struct stream_state {
    pdr_buf_t body;
    unsigned allowed; /* bit i: endpoints[i] may be picked (the gateway's subset hint, else all) */
    int buffered;     /* the gateway announced BUFFERED: the pick is the body's answer */
} stream_state_t;

/* Which of the endpoints the message's subset hint allows (all without a hint). */
static unsigned allowed_by(const pdr_epp_msg_t *m)
{
    unsigned all = (1u << nendpoints) - 1;
    if (!m->has_subset)
        return all;
    unsigned mask = 0;
    for (size_t i = 0; i < nendpoints; i++)
        for (size_t k = 0; k < m->nsubset; k++)
            if (strcmp(endpoints[i], m->subset[k]) == 0)
                mask |= 1u << i;
    return mask;
}

/* The pick at the end of the request: in the streamed exchange the headers' answer, then the body given
 * back; in the buffered one (buffered set) the body's answer itself, the body left as it is. */
static void pick(pdr_epp_stream_t *s, unsigned allowed, const pdr_buf_t *body, int buffered)
{
    const char *chosen[MAX_ENDPOINTS];
    size_t n = 0;
    for (size_t i = 0; i < nendpoints; i++)
        if (allowed & (1u << i))
            chosen[n++] = endpoints[i];
    if (fail_status != 0 || n == 0) {
        int st = fail_status != 0 ? fail_status : 503;
        pdr_epp_answer_immediate(s, st, st == 429 ? "shed" : "no endpoint is ready");
        return;
    }
    char len[32];
    pdr_epp_header_t extra = {"content-length", 14, len, 0};
    extra.value_len = (size_t)snprintf(len, sizeof(len), "%zu", body != NULL ? body->len : 0);
    if (buffered) {
        if (pdr_epp_answer_pick(s, PDR_EPP_REQUEST_BODY, chosen, n, NULL, 0) != 0)
            pdr_epp_finish(s, 13, "the test picker could not queue its answer");
        return;
    }
    int rc = pdr_epp_answer_pick(s, PDR_EPP_REQUEST_HEADERS, chosen, n, &extra, body != NULL ? 1 : 0);
    if (rc == 0 && body != NULL)
        rc = pdr_epp_answer_body(s, PDR_EPP_REQUEST_BODY, (const uint8_t *)body->p, body->len, 1);
    if (rc != 0)
        pdr_epp_finish(s, 13, "the test picker could not queue its answer");
}

static stream_state_t *state_of(pdr_epp_stream_t *s)
{
    stream_state_t *st = pdr_epp_stream_data(s);
    if (st == NULL) {
        st = calloc(1, sizeof(*st));
        if (st == NULL)
            return NULL;
        st->allowed = (1u << nendpoints) - 1;
        pdr_epp_stream_set_data(s, st);
    }
    return st;
}

static void on_message(void *data, pdr_epp_stream_t *s, const pdr_epp_msg_t *m)
{
    (void)data;
    if (m->observability)
        return;
    stream_state_t *st = state_of(s);
    if (st == NULL) {
        pdr_epp_finish(s, 8, "out of memory");
        return;
    }
    switch (m->phase) {
    case PDR_EPP_REQUEST_HEADERS:
        st->allowed = allowed_by(m);
        st->buffered = m->request_body_mode == PDR_EPP_MODE_BUFFERED;
        if (m->end_of_stream)
            pick(s, st->allowed, NULL, 0);
        else if (st->buffered)
            pdr_epp_answer_continue(s, m->phase); /* Envoy sends the body only after this answer */
        /* else: answered once the body is read */
        break;
    case PDR_EPP_REQUEST_BODY:
        if (pdr_buf_append(&st->body, m->body, m->body_len, BODY_MAX) != 0) {
            pdr_epp_answer_immediate(s, 413, "request body over the test picker's ceiling");
            return;
        }
        if (m->end_of_stream)
            pick(s, st->allowed, &st->body, st->buffered);
        break;
    case PDR_EPP_RESPONSE_HEADERS:
        /* The endpoint that served the request, as the gateway reports it: printed for the test to read. */
        if (m->served != NULL) {
            printf("served %s\n", m->served);
            fflush(stdout);
        }
        pdr_epp_answer_continue(s, m->phase);
        break;
    case PDR_EPP_RESPONSE_BODY:
        pdr_epp_answer_body(s, m->phase, m->body, m->body_len, m->end_of_stream);
        break;
    default:
        pdr_epp_answer_continue(s, m->phase);
        break;
    }
}

static void on_close(void *data, pdr_epp_stream_t *s)
{
    (void)data;
    stream_state_t *st = pdr_epp_stream_data(s);
    if (st != NULL) {
        pdr_buf_free(&st->body);
        free(st);
    }
}

static void closed(void *data)
{
    (void)data;
    uv_close((uv_handle_t *)&sigterm, NULL);
    uv_close((uv_handle_t *)&sigint, NULL);
}

static void on_signal(uv_signal_t *h, int signum)
{
    (void)h, (void)signum;
    if (epp == NULL)
        return;
    pdr_epp_stats_t st;
    pdr_epp_stats(epp, &st);
    printf("{\"connections\": %llu, \"refused_connections\": %llu, \"idle_closed\": %llu, \"calls\": %llu, "
           "\"unimplemented\": %llu, \"invalid\": %llu, \"too_big\": %llu, \"streams\": %llu, "
           "\"messages\": %llu, \"malformed\": %llu, \"protocol_errors\": %llu}\n",
           (unsigned long long)st.connections, (unsigned long long)st.refused_connections,
           (unsigned long long)st.idle_closed, (unsigned long long)st.calls,
           (unsigned long long)st.unimplemented, (unsigned long long)st.invalid,
           (unsigned long long)st.too_big, (unsigned long long)st.streams, (unsigned long long)st.messages,
           (unsigned long long)st.malformed, (unsigned long long)st.protocol_errors);
    fflush(stdout);
    pdr_epp_close(epp, closed, NULL);
    epp = NULL;
}

static int usage(void)
{
    fprintf(stderr,
            "usage: epp_testpicker --port N --endpoints IP:PORT[,...] [--status 503|429] "
            "[--max-message BYTES] [--idle-ms MS] [--max-connections N] [--max-streams N] [--not-ready] "
            "[--no-health]\n");
    return 2;
}

static long num(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    return *end == '\0' && v >= 0 ? v : -1;
}

int main(int argc, char **argv)
{
    pdr_epp_options_t o;
    pdr_epp_options_default(&o);
    o.port = -1;
    int ready = 1, health = 1;
    static char list[4096];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--not-ready") == 0) {
            ready = 0;
            continue;
        }
        if (strcmp(a, "--no-health") == 0) {
            health = 0;
            continue;
        }
        if (v == NULL)
            return usage();
        i++;
        if (strcmp(a, "--port") == 0) {
            o.port = (int)num(v);
        } else if (strcmp(a, "--endpoints") == 0) {
            snprintf(list, sizeof(list), "%s", v);
            for (char *p = list; p != NULL && *p != '\0' && nendpoints < MAX_ENDPOINTS;) {
                endpoints[nendpoints++] = p;
                p = strchr(p, ',');
                if (p != NULL)
                    *p++ = '\0';
            }
        } else if (strcmp(a, "--status") == 0) {
            fail_status = (int)num(v);
        } else if (strcmp(a, "--max-message") == 0) {
            o.max_message = (size_t)num(v);
        } else if (strcmp(a, "--idle-ms") == 0) {
            o.idle_timeout_ms = (uint64_t)num(v);
        } else if (strcmp(a, "--max-connections") == 0) {
            o.max_connections = (uint32_t)num(v);
        } else if (strcmp(a, "--max-streams") == 0) {
            o.max_streams = (uint32_t)num(v);
        } else {
            return usage();
        }
    }
    if (o.port < 0 || o.port > 65535 || nendpoints == 0)
        return usage();
    signal(SIGPIPE, SIG_IGN); /* a write to a gateway that left is an error, not the end (as pdrouter) */
    uv_loop_t loop;
    uv_loop_init(&loop);
    pdr_epp_handler_t h = {.on_message = on_message, .on_close = on_close};
    char msg[256];
    int err = 0;
    epp = pdr_epp_new(&loop, &o, &h, &err, msg, sizeof(msg));
    if (epp == NULL) {
        fprintf(stderr, "%s\n", msg);
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
        return 1;
    }
    /* --not-ready: the process is alive, its view of the pool not synced yet; --no-health: nothing set,
     * the server's own start. */
    if (health) {
        pdr_epp_set_health(epp, "liveness", PDR_EPP_HEALTH_SERVING);
        pdr_epp_set_health(epp, "readiness", ready ? PDR_EPP_HEALTH_SERVING : PDR_EPP_HEALTH_NOT_SERVING);
        pdr_epp_set_health(epp, PDR_EPP_SERVICE_EXT_PROC,
                           ready ? PDR_EPP_HEALTH_SERVING : PDR_EPP_HEALTH_NOT_SERVING);
    }
    uv_signal_init(&loop, &sigterm);
    uv_signal_init(&loop, &sigint);
    uv_signal_start(&sigterm, on_signal, SIGTERM);
    uv_signal_start(&sigint, on_signal, SIGINT);
    printf("listening on %d\n", pdr_epp_port(epp));
    fflush(stdout);
    uv_run(&loop, UV_RUN_DEFAULT);
    int rc = uv_loop_close(&loop);
    if (rc != 0) {
        fprintf(stderr, "epp_testpicker: the loop still has handles at exit: %s\n", uv_strerror(rc));
        return 1;
    }
    return 0;
}
