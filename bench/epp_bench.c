/*
 * epp_bench: a closed-loop load generator for the endpoint picker (pdrouter's `epp` listener): Envoy's
 * ext_proc exchange played as a gateway plays it, without the gateway.
 *
 * N connections (HTTP/2 with prior knowledge, libnghttp2's client session over plain non-blocking
 * sockets and poll), C streams in flight in all (spread over the connections; a stream that ends is
 * replaced at once on its connection). Each stream is one `envoy.service.ext_proc.v3.ExternalProcessor/
 * Process` call in FULL_DUPLEX_STREAMED mode: a ProcessingRequest with the request headers (:method
 * POST, :path /v1/completions, content-type application/json; protocol_config request_body_mode
 * FULL_DUPLEX_STREAMED), one with the whole JSON body (end_of_stream), then the half-close (END_STREAM on
 * that DATA frame). The picker answers the headers (the pick) and the body, then ends with OK trailers.
 *
 * Every answer is checked: the first ProcessingResponse answers the request headers and its header
 * mutation sets x-gateway-destination-endpoint to a non-empty value, the second gives the body back
 * whole (a streamed_response with end_of_stream), the response is :status 200 and the trailers carry
 * grpc-status 0, and the stream closes without a reset. Any failure ends the program with status 1.
 *
 * A stream's latency runs from its HEADERS frame leaving (the first byte sent) to its trailers read.
 * Printed: p50, p90, p99 and max in microseconds, streams per second, and with --pid the picker's CPU
 * time (utime + stime of /proc/PID/stat) per exchange over the measured part. --warmup W exchanges run
 * first and are not counted.
 *
 *   epp_bench --port P [--host 127.0.0.1] [--connections N] [--concurrency C]
 *             (--requests R | --seconds S) [--warmup W] [--pid PID] [--prompt-bytes B]
 */
#define _GNU_SOURCE /* memmem */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ext_proc.pb-c.h"
#include "util.h"

#define DEST_HEADER "x-gateway-destination-endpoint"
#define MAX_CONNS 1024
#define MAX_CONCURRENCY 65536
#define MAX_ANSWER_BYTES (256 * 1024) /* the answers of one exchange: the pick and the body given back */
#define MAX_PROMPT_BYTES (1024 * 1024)

typedef struct bench_conn bench_conn_t;

typedef struct bench_stream bench_stream_t;
struct bench_stream {
    bench_stream_t *next_free;
    bench_conn_t *conn;
    int32_t id;
    uint8_t *req; /* this exchange's payload: the shared one with its own request number */
    size_t sent;  /* bytes of it given to nghttp2 */
    uint64_t t0;  /* ns: the HEADERS frame sent */
    uint64_t t1;  /* ns: the trailers read */
    int status;   /* :status */
    int grpc_status;
    int trailers;
    size_t len; /* answer bytes read */
    uint8_t ans[MAX_ANSWER_BYTES];
};

struct bench_conn {
    int fd;
    nghttp2_session *session;
    int inflight; /* streams open */
    int target;   /* streams this connection keeps open */
    int want_write;
};

static struct {
    const char *host;
    int port;
    int conns;
    int concurrency;
    long requests;
    double seconds;
    long warmup;
    int pid;
    size_t prompt_bytes;
} opt = {"127.0.0.1", 0, 4, 1, 0, 0, 1000, 0, 512};

static uint8_t *payload; /* both framed ProcessingRequests, sent as the stream's only DATA */
static size_t payload_len;
static uint8_t *body_json;
static size_t body_json_len;
static size_t body_off; /* where the JSON body starts in the payload */
static size_t seq_off;  /* where the request number's digits start in the payload */
#define SEQ_DIGITS 12

static long started, finished; /* exchanges, warm-up included */
static long measured_cap;      /* latencies kept (the measured part's ceiling) */
static uint64_t *lat;          /* ns, one per measured exchange */
static long nlat;
static int stop_starting;
static bench_stream_t *free_streams;
static uint64_t t_measure0;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("epp_bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* utime + stime of a process, in clock ticks; -1 when it cannot be read. */
static long long proc_cpu_ticks(int pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    if (p == NULL)
        return -1;
    unsigned long long ut = 0, st = 0;
    /* after ")": state(3) ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime(14) stime(15)
     */
    if (sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (long long)(ut + st);
}

static void frame_message(uint8_t *out, const ProtobufCMessage *m, size_t len)
{
    out[0] = 0;
    out[1] = (uint8_t)(len >> 24);
    out[2] = (uint8_t)(len >> 16);
    out[3] = (uint8_t)(len >> 8);
    out[4] = (uint8_t)len;
    protobuf_c_message_pack(m, out + 5);
}

/* The two ProcessingRequests of one exchange, each with gRPC's 5-byte prefix, encoded once. */
static void build_payload(void)
{
    body_json = malloc(opt.prompt_bytes + 256);
    if (body_json == NULL)
        fail("out of memory");
    int n = snprintf((char *)body_json, 128, "{\"model\":\"pdsim\",\"max_tokens\":8,\"prompt\":\"");
    static const char words[] = "the endpoint picker names a decode and a prefill for every request ";
    for (size_t i = 0; i < opt.prompt_bytes; i++)
        body_json[n + i] = (uint8_t)words[i % (sizeof words - 1)];
    body_json_len = (size_t)n + opt.prompt_bytes;
    size_t seq_in_body = body_json_len - SEQ_DIGITS; /* the prompt's last digits: each request's own */
    memset(body_json + seq_in_body, '0', SEQ_DIGITS);
    body_json_len += (size_t)snprintf((char *)body_json + body_json_len, 8, "\"}");

    Envoy__Config__Core__V3__HeaderValue hv[3];
    Envoy__Config__Core__V3__HeaderValue *hvp[3];
    static const char *const kv[3][2] = {
        {":method", "POST"}, {":path", "/v1/completions"}, {"content-type", "application/json"}};
    for (int i = 0; i < 3; i++) {
        envoy__config__core__v3__header_value__init(&hv[i]);
        hv[i].key = (char *)kv[i][0];
        hv[i].raw_value.data = (uint8_t *)kv[i][1];
        hv[i].raw_value.len = strlen(kv[i][1]);
        hvp[i] = &hv[i];
    }
    Envoy__Config__Core__V3__HeaderMap map = ENVOY__CONFIG__CORE__V3__HEADER_MAP__INIT;
    map.n_headers = 3;
    map.headers = hvp;
    Envoy__Service__ExtProc__V3__HttpHeaders hh = ENVOY__SERVICE__EXT_PROC__V3__HTTP_HEADERS__INIT;
    hh.headers = &map;
    hh.end_of_stream = 0;
    Envoy__Service__ExtProc__V3__ProtocolConfiguration pc =
        ENVOY__SERVICE__EXT_PROC__V3__PROTOCOL_CONFIGURATION__INIT;
    pc.request_body_mode = ENVOY__SERVICE__EXT_PROC__V3__BODY_SEND_MODE__FULL_DUPLEX_STREAMED;
    pc.response_body_mode = ENVOY__SERVICE__EXT_PROC__V3__BODY_SEND_MODE__FULL_DUPLEX_STREAMED;
    Envoy__Service__ExtProc__V3__ProcessingRequest rh =
        ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__INIT;
    rh.request_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_HEADERS;
    rh.request_headers = &hh;
    rh.protocol_config = &pc;

    Envoy__Service__ExtProc__V3__HttpBody hb = ENVOY__SERVICE__EXT_PROC__V3__HTTP_BODY__INIT;
    hb.body.data = body_json;
    hb.body.len = body_json_len;
    hb.end_of_stream = 1;
    Envoy__Service__ExtProc__V3__ProcessingRequest rb =
        ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__INIT;
    rb.request_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_BODY;
    rb.request_body = &hb;

    size_t a = protobuf_c_message_get_packed_size(&rh.base);
    size_t b = protobuf_c_message_get_packed_size(&rb.base);
    payload_len = 5 + a + 5 + b;
    payload = malloc(payload_len);
    if (payload == NULL)
        fail("out of memory");
    frame_message(payload, &rh.base, a);
    frame_message(payload + 5 + a, &rb.base, b);
    /* protobuf-c copies the body as is (a length-delimited field): find it to stamp each request's number */
    const uint8_t *at = memmem(payload + 5 + a, payload_len - 5 - a, body_json, body_json_len);
    if (at == NULL)
        fail("the body is not in the encoded message");
    body_off = (size_t)(at - payload);
    seq_off = body_off + seq_in_body;
}

/* The answers of one exchange, checked; returns NULL or what is wrong. */
static const char *check_answers(const bench_stream_t *s, char *why, size_t whylen)
{
    if (s->status != 200)
        return snprintf(why, whylen, ":status %d", s->status), why;
    if (!s->trailers || s->grpc_status != 0)
        return snprintf(why, whylen, "grpc-status %d (trailers %s)", s->grpc_status,
                        s->trailers ? "read" : "missing"),
               why;
    size_t off = 0;
    int idx = 0;
    int picked = 0, body_back = 0;
    while (off < s->len) {
        if (s->len - off < 5)
            return "a truncated gRPC message prefix";
        if (s->ans[off] != 0)
            return "a compressed or flagged gRPC message";
        size_t len = ((size_t)s->ans[off + 1] << 24) | ((size_t)s->ans[off + 2] << 16) |
                     ((size_t)s->ans[off + 3] << 8) | s->ans[off + 4];
        if (len > s->len - off - 5)
            return "a truncated gRPC message";
        Envoy__Service__ExtProc__V3__ProcessingResponse *r =
            envoy__service__ext_proc__v3__processing_response__unpack(NULL, len, s->ans + off + 5);
        if (r == NULL)
            return "a ProcessingResponse that does not decode";
        if (idx == 0) {
            if (r->response_case !=
                ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_HEADERS) {
                snprintf(why, whylen, "the first answer is not the request headers' (case %d)",
                         (int)r->response_case);
                envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);
                return why;
            }
            const Envoy__Service__ExtProc__V3__CommonResponse *c = r->request_headers->response;
            const Envoy__Service__ExtProc__V3__HeaderMutation *hm = c != NULL ? c->header_mutation : NULL;
            for (size_t i = 0; hm != NULL && i < hm->n_set_headers; i++) {
                const Envoy__Config__Core__V3__HeaderValue *h = hm->set_headers[i]->header;
                if (h != NULL && strcmp(h->key, DEST_HEADER) == 0 &&
                    (h->raw_value.len > 0 || h->value[0] != '\0'))
                    picked = 1;
            }
        } else if (idx == 1 && r->response_case ==
                                   ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_BODY) {
            const Envoy__Service__ExtProc__V3__CommonResponse *c = r->request_body->response;
            const Envoy__Service__ExtProc__V3__BodyMutation *bm = c != NULL ? c->body_mutation : NULL;
            if (bm != NULL &&
                bm->mutation_case ==
                    ENVOY__SERVICE__EXT_PROC__V3__BODY_MUTATION__MUTATION_STREAMED_RESPONSE &&
                bm->streamed_response->end_of_stream && bm->streamed_response->body.len == body_json_len &&
                memcmp(bm->streamed_response->body.data, s->req + body_off, body_json_len) == 0)
                body_back = 1;
        }
        envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);
        off += 5 + len;
        idx++;
    }
    if (!picked)
        return idx == 0 ? "no answer before the trailers" : "the first answer sets no " DEST_HEADER;
    if (!body_back)
        return "the second answer does not give the body back whole";
    return NULL;
}

static ssize_t read_payload(nghttp2_session *session, int32_t id, uint8_t *buf, size_t length,
                            uint32_t *flags, nghttp2_data_source *source, void *user)
{
    (void)session, (void)id, (void)user;
    bench_stream_t *s = source->ptr;
    size_t n = payload_len - s->sent;
    if (n > length)
        n = length;
    memcpy(buf, s->req + s->sent, n);
    s->sent += n;
    if (s->sent == payload_len)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static void start_stream(bench_conn_t *c)
{
    bench_stream_t *s = free_streams;
    if (s != NULL) {
        free_streams = s->next_free;
    } else {
        s = malloc(sizeof *s);
        if (s == NULL || (s->req = malloc(payload_len)) == NULL)
            fail("out of memory");
    }
    uint8_t *req = s->req;
    memset(s, 0, offsetof(bench_stream_t, ans));
    s->req = req;
    /* a prompt of its own: the shared prefix, then this request's number */
    memcpy(req, payload, payload_len);
    char digits[32];
    snprintf(digits, sizeof digits, "%0*ld", SEQ_DIGITS, started % 1000000000000L);
    memcpy(req + seq_off, digits, SEQ_DIGITS);
    s->conn = c;
    s->status = -1;
    s->grpc_status = -1;
#define NV(n, v)                                                                                             \
    {                                                                                                        \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, sizeof(v) - 1, NGHTTP2_NV_FLAG_NONE                   \
    }
    const nghttp2_nv nva[] = {
        NV(":method", "POST"),
        NV(":scheme", "http"),
        NV(":authority", "epp"),
        NV(":path", "/envoy.service.ext_proc.v3.ExternalProcessor/Process"),
        NV("content-type", "application/grpc"),
        NV("te", "trailers"),
    };
#undef NV
    nghttp2_data_provider dp = {.source.ptr = s, .read_callback = read_payload};
    int32_t id = nghttp2_submit_request(c->session, NULL, nva, sizeof nva / sizeof nva[0], &dp, s);
    if (id < 0)
        fail("nghttp2_submit_request: %s", nghttp2_strerror(id));
    s->id = id;
    c->inflight++;
    started++;
}

static int on_frame_send(nghttp2_session *session, const nghttp2_frame *frame, void *user)
{
    (void)user;
    if (frame->hd.type == NGHTTP2_HEADERS) {
        bench_stream_t *s = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
        if (s != NULL && s->t0 == 0)
            s->t0 = now_ns();
    }
    return 0;
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user)
{
    (void)user;
    if (frame->hd.type == NGHTTP2_HEADERS && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
        bench_stream_t *s = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
        if (s != NULL) {
            s->t1 = now_ns();
            s->trailers = 1;
        }
    }
    return 0;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *user)
{
    (void)flags, (void)user;
    if (frame->hd.type != NGHTTP2_HEADERS)
        return 0;
    bench_stream_t *s = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (s == NULL)
        return 0;
    int64_t v; /* a value that is not a number is -1: no status the checks accept */
    if (pdr_parse_int64((const char *)value, valuelen, 0, 999, &v) != 0)
        v = -1;
    if (namelen == 7 && memcmp(name, ":status", 7) == 0)
        s->status = (int)v;
    else if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0)
        s->grpc_status = (int)v;
    return 0;
}

static int on_data(nghttp2_session *session, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                   void *user)
{
    (void)flags, (void)user;
    bench_stream_t *s = nghttp2_session_get_stream_user_data(session, id);
    if (s == NULL)
        return 0;
    if (len > sizeof s->ans - s->len)
        fail("stream %d: answers over %d bytes", id, MAX_ANSWER_BYTES);
    memcpy(s->ans + s->len, data, len);
    s->len += len;
    return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t id, uint32_t error_code, void *user)
{
    (void)user;
    bench_stream_t *s = nghttp2_session_get_stream_user_data(session, id);
    if (s == NULL)
        return 0;
    if (error_code != NGHTTP2_NO_ERROR)
        fail("stream %d reset: %s", id, nghttp2_http2_strerror(error_code));
    char why[160];
    const char *bad = check_answers(s, why, sizeof why);
    if (bad != NULL)
        fail("stream %d: %s", id, bad);
    finished++;
    if (finished > opt.warmup && nlat < measured_cap)
        lat[nlat++] = s->t1 - s->t0;
    s->conn->inflight--;
    s->next_free = free_streams; /* kept for the next exchange: no allocation per stream */
    free_streams = s;
    return 0;
}

static void conn_open(bench_conn_t *c)
{
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (c->fd < 0)
        fail("socket: %s", strerror(errno));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)opt.port)};
    if (inet_pton(AF_INET, opt.host, &sa.sin_addr) != 1)
        fail("--host %s: not an IPv4 address", opt.host);
    if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) != 0)
        fail("connect %s:%d: %s", opt.host, opt.port, strerror(errno));
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);

    nghttp2_session_callbacks *cb;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    if (nghttp2_session_client_new(&c->session, cb, c) != 0)
        fail("nghttp2_session_client_new");
    nghttp2_session_callbacks_del(cb);
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 1024},
                                   {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20}};
    nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE, iv, 2);
}

/* Everything nghttp2 has to send, written until the socket would block. */
static void conn_flush(bench_conn_t *c)
{
    c->want_write = 0;
    for (;;) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(c->session, &data);
        if (n < 0)
            fail("nghttp2_session_mem_send: %s", nghttp2_strerror((int)n));
        if (n == 0)
            return;
        ssize_t off = 0;
        while (off < n) {
            ssize_t w = send(c->fd, data + off, (size_t)(n - off), MSG_NOSIGNAL);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0 && errno == EAGAIN) {
                /* nghttp2 gave these bytes away: wait until the socket takes them (rare on loopback) */
                struct pollfd p = {.fd = c->fd, .events = POLLOUT};
                poll(&p, 1, 1000);
                continue;
            }
            if (w < 0)
                fail("send: %s", strerror(errno));
            off += w;
        }
    }
}

static void conn_read(bench_conn_t *c)
{
    uint8_t buf[65536];
    for (;;) {
        ssize_t n = recv(c->fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n < 0)
            fail("recv: %s", strerror(errno));
        if (n == 0)
            fail("the picker closed a connection (%ld exchanges done)", finished);
        ssize_t r = nghttp2_session_mem_recv(c->session, buf, (size_t)n);
        if (r < 0)
            fail("nghttp2_session_mem_recv: %s", nghttp2_strerror((int)r));
        c->want_write = 1;
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct_us(double p)
{
    long i = (long)(p * (double)(nlat - 1) + 0.5);
    return (double)lat[i] / 1000.0;
}

static long parse_long(const char *flag, const char *v, long lo, long hi)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno != 0 || *end != '\0' || x < lo || x > hi)
        fail("%s %s: an integer from %ld to %ld", flag, v, lo, hi);
    return x;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc)
            fail("%s: needs a value (usage at the top of bench/epp_bench.c)", a);
        const char *v = argv[++i];
        if (strcmp(a, "--host") == 0)
            opt.host = v;
        else if (strcmp(a, "--port") == 0)
            opt.port = (int)parse_long(a, v, 1, 65535);
        else if (strcmp(a, "--connections") == 0)
            opt.conns = (int)parse_long(a, v, 1, MAX_CONNS);
        else if (strcmp(a, "--concurrency") == 0)
            opt.concurrency = (int)parse_long(a, v, 1, MAX_CONCURRENCY);
        else if (strcmp(a, "--requests") == 0)
            opt.requests = parse_long(a, v, 1, 1000000000L);
        else if (strcmp(a, "--seconds") == 0)
            opt.seconds = (double)parse_long(a, v, 1, 86400);
        else if (strcmp(a, "--warmup") == 0)
            opt.warmup = parse_long(a, v, 0, 1000000000L);
        else if (strcmp(a, "--pid") == 0)
            opt.pid = (int)parse_long(a, v, 1, 1 << 30);
        else if (strcmp(a, "--prompt-bytes") == 0)
            opt.prompt_bytes = (size_t)parse_long(a, v, SEQ_DIGITS, MAX_PROMPT_BYTES);
        else
            fail("unknown flag %s", a);
    }
    if (opt.port == 0)
        fail("--port is required");
    if ((opt.requests == 0) == (opt.seconds == 0))
        opt.requests = opt.seconds == 0 ? 10000 : 0;
    if (opt.conns > opt.concurrency)
        opt.conns = opt.concurrency;
    measured_cap = opt.requests > 0 ? opt.requests : 50000000L; /* --seconds: up to 400 MB of latencies */
    lat = malloc((size_t)(opt.requests > 0 ? opt.requests : 1 << 20) * sizeof *lat);
    if (lat == NULL)
        fail("out of memory");
    long lat_alloc = opt.requests > 0 ? opt.requests : 1 << 20;
    build_payload();

    bench_conn_t *conns = calloc((size_t)opt.conns, sizeof *conns);
    struct pollfd *pfd = calloc((size_t)opt.conns, sizeof *pfd);
    if (conns == NULL || pfd == NULL)
        fail("out of memory");
    for (int i = 0; i < opt.conns; i++) {
        conns[i].target = opt.concurrency / opt.conns + (i < opt.concurrency % opt.conns);
        conn_open(&conns[i]);
    }
    long total = opt.requests > 0 ? opt.warmup + opt.requests : -1;
    long long cpu0 = -1;
    uint64_t t_end = 0, deadline = 0;
    t_measure0 = opt.warmup == 0 ? now_ns() : 0;
    if (opt.warmup == 0 && opt.pid != 0)
        cpu0 = proc_cpu_ticks(opt.pid);
    if (opt.warmup == 0 && opt.seconds > 0)
        deadline = t_measure0 + (uint64_t)(opt.seconds * 1e9);
    for (;;) {
        if (t_measure0 == 0 && finished >= opt.warmup) {
            t_measure0 = now_ns();
            if (opt.pid != 0)
                cpu0 = proc_cpu_ticks(opt.pid);
            if (opt.seconds > 0)
                deadline = t_measure0 + (uint64_t)(opt.seconds * 1e9);
        }
        if (deadline != 0 && !stop_starting && now_ns() >= deadline)
            stop_starting = 1;
        if (total > 0 && started >= total)
            stop_starting = 1;
        int open = 0;
        for (int i = 0; i < opt.conns; i++) {
            bench_conn_t *c = &conns[i];
            while (!stop_starting && c->inflight < c->target && (total < 0 || started < total)) {
                start_stream(c);
                c->want_write = 1;
            }
            if (c->want_write || nghttp2_session_want_write(c->session))
                conn_flush(c);
            open += c->inflight;
            pfd[i].fd = c->fd;
            pfd[i].events = POLLIN;
        }
        if (stop_starting && open == 0)
            break;
        int n = poll(pfd, (nfds_t)opt.conns, 10000);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            fail("poll: %s", strerror(errno));
        if (n == 0)
            fail("no answer in 10 s (%d streams open, %ld exchanges done)", open, finished);
        for (int i = 0; i < opt.conns; i++) {
            if (pfd[i].revents & (POLLIN | POLLERR | POLLHUP))
                conn_read(&conns[i]);
        }
        /* --seconds: the latency array grows (up to measured_cap) */
        if (opt.requests == 0 && nlat + 65536 > lat_alloc && lat_alloc < measured_cap) {
            lat_alloc *= 2;
            uint64_t *l = realloc(lat, (size_t)lat_alloc * sizeof *lat);
            if (l == NULL)
                fail("out of memory");
            lat = l;
        }
    }
    t_end = now_ns();
    long long cpu1 = opt.pid != 0 ? proc_cpu_ticks(opt.pid) : -1;
    for (int i = 0; i < opt.conns; i++) {
        nghttp2_session_terminate_session(conns[i].session, NGHTTP2_NO_ERROR);
        conn_flush(&conns[i]);
        nghttp2_session_del(conns[i].session);
        close(conns[i].fd);
    }
    if (nlat == 0)
        fail("no exchange measured");
    qsort(lat, (size_t)nlat, sizeof *lat, cmp_u64);
    double secs = (double)(t_end - t_measure0) / 1e9;
    printf("exchanges: %ld (after %ld warm-up), connections %d, concurrency %d, request payload %zu bytes\n",
           nlat, opt.warmup, opt.conns, opt.concurrency, payload_len);
    printf("latency us: p50 %.1f p90 %.1f p99 %.1f max %.1f\n", pct_us(0.50), pct_us(0.90), pct_us(0.99),
           pct_us(1.0));
    printf("streams/s: %.0f\n", (double)nlat / secs);
    if (opt.pid != 0) {
        if (cpu0 < 0 || cpu1 < 0)
            fail("--pid %d: /proc/%d/stat unreadable", opt.pid, opt.pid);
        double cpu_s = (double)(cpu1 - cpu0) / (double)sysconf(_SC_CLK_TCK);
        printf("picker cpu: %.2f s over %.2f s (%.0f%% of a core), %.1f us per exchange\n", cpu_s, secs,
               100.0 * cpu_s / secs, 1e6 * cpu_s / (double)nlat);
    }
    free(lat);
    free(payload);
    free(body_json);
    free(conns);
    free(pfd);
    return 0;
}
