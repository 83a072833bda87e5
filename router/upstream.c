/*
 * libcurl multi-socket on libuv (the pattern of curl's multi-uv example, with the fixes recorded in
 * notes/stack.md: 0 ms timers run on the next loop turn, "Expect:" removed, no signals, a large
 * connection cache). Owns the multi handle, one uv_poll_t per curl socket and one uv_timer_t.
 *
 * Invariant: no curl easy handle is removed from the multi while curl is inside one of our
 * callbacks; pdr_leg_cancel() during a callback only marks the leg, and the multi removes it right
 * after curl returns (deferred list). Loop thread only.
 */
#include <stdlib.h>
#include <string.h>
#include "err.h"
#include "upstream.h"
#include "util.h"

#define IDLE_EASY_MAX 256

typedef struct pdr_sock {
    uv_poll_t poll;
    pdr_multi_t *multi;
    curl_socket_t fd;
} pdr_sock_t;

struct pdr_multi {
    uv_loop_t *loop;
    CURLM *multi;
    uv_timer_t timer;
    int in_curl;          /* > 0 while curl runs our callbacks */
    pdr_leg_t **deferred; /* legs cancelled from inside curl */
    pdr_leg_t *active;    /* every leg between start and detach */
    size_t n_deferred, cap_deferred;
    CURL *idle[IDLE_EASY_MAX]; /* reset easy handles kept for reuse: curl_easy_init is costly */
    size_t n_idle;
    void (*close_cb)(void *);
    void *close_arg;
};

static void check_done(pdr_multi_t *m);

static void leg_detach(pdr_leg_t *leg)
{
    pdr_multi_t *m = leg->multi;
    curl_multi_remove_handle(m->multi, leg->easy);
    if (m->n_idle < IDLE_EASY_MAX) {
        curl_easy_reset(leg->easy);
        m->idle[m->n_idle++] = leg->easy;
    } else {
        curl_easy_cleanup(leg->easy);
    }
    curl_slist_free_all(leg->headers);
    leg->easy = NULL;
    leg->headers = NULL;
    leg->active = 0;
    if (leg->next_active != NULL)
        leg->next_active->prev_active = leg->prev_active;
    *leg->prev_active = leg->next_active;
    leg->next_active = NULL;
    leg->prev_active = NULL;
}

static void run_deferred(pdr_multi_t *m)
{
    while (m->n_deferred > 0) {
        pdr_leg_t *leg = m->deferred[--m->n_deferred];
        if (leg->active && leg->abort_requested)
            leg_detach(leg);
    }
}

static void socket_action(pdr_multi_t *m, curl_socket_t fd, int flags)
{
    int running;
    m->in_curl++;
    curl_multi_socket_action(m->multi, fd, flags, &running);
    m->in_curl--;
    run_deferred(m);
    check_done(m);
}

static void on_poll(uv_poll_t *h, int status, int events)
{
    pdr_sock_t *s = h->data;
    int flags = 0;
    if (status < 0)
        flags = CURL_CSELECT_ERR;
    else {
        if (events & UV_READABLE)
            flags |= CURL_CSELECT_IN;
        if (events & UV_WRITABLE)
            flags |= CURL_CSELECT_OUT;
    }
    socket_action(s->multi, s->fd, flags);
}

static void on_timer(uv_timer_t *t)
{
    socket_action(t->data, CURL_SOCKET_TIMEOUT, 0);
}

static void free_sock(uv_handle_t *h)
{
    free(h->data);
}

static int socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    pdr_multi_t *m = userp;
    pdr_sock_t *s = socketp;
    (void)easy;
    if (what == CURL_POLL_REMOVE) {
        if (s != NULL) {
            uv_poll_stop(&s->poll);
            uv_close((uv_handle_t *)&s->poll, free_sock);
            curl_multi_assign(m->multi, fd, NULL);
        }
        return 0;
    }
    if (s == NULL) {
        s = calloc(1, sizeof(*s));
        if (s == NULL)
            return -1;
        s->multi = m;
        s->fd = fd;
        if (uv_poll_init_socket(m->loop, &s->poll, fd) != 0) {
            free(s);
            return -1;
        }
        s->poll.data = s;
        curl_multi_assign(m->multi, fd, s);
    }
    int events = 0;
    if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
        events |= UV_READABLE;
    if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
        events |= UV_WRITABLE;
    uv_poll_start(&s->poll, events, on_poll);
    return 0;
}

static int timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
    pdr_multi_t *m = userp;
    (void)multi;
    if (timeout_ms < 0)
        uv_timer_stop(&m->timer);
    else
        uv_timer_start(&m->timer, on_timer, (uint64_t)timeout_ms, 0); /* 0: next loop turn, see stack.md #6 */
    return 0;
}

pdr_multi_t *pdr_multi_new(uv_loop_t *loop, int max_connects)
{
    pdr_multi_t *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return NULL;
    m->loop = loop;
    m->multi = curl_multi_init();
    if (m->multi == NULL) {
        free(m);
        return NULL;
    }
    uv_timer_init(loop, &m->timer);
    m->timer.data = m;
    curl_multi_setopt(m->multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
    curl_multi_setopt(m->multi, CURLMOPT_SOCKETDATA, m);
    curl_multi_setopt(m->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
    curl_multi_setopt(m->multi, CURLMOPT_TIMERDATA, m);
    curl_multi_setopt(m->multi, CURLMOPT_MAXCONNECTS, (long)max_connects);
    return m;
}

static void multi_timer_closed(uv_handle_t *h)
{
    pdr_multi_t *m = h->data;
    if (m->close_cb)
        m->close_cb(m->close_arg);
    free(m->deferred);
    free(m);
}

void pdr_multi_close(pdr_multi_t *m, void (*close_cb)(void *), void *arg)
{
    m->close_cb = close_cb;
    m->close_arg = arg;
    while (m->n_idle > 0)
        curl_easy_cleanup(m->idle[--m->n_idle]);
    /* Cleaning up the multi closes cached connections; curl reports their sockets as removed. */
    curl_multi_cleanup(m->multi);
    m->multi = NULL;
    uv_timer_stop(&m->timer);
    uv_close((uv_handle_t *)&m->timer, multi_timer_closed);
}

static int translate(CURLcode rc)
{
    switch (rc) {
    case CURLE_OK:
        return 0;
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
        return PDR_ECONNREFUSED;
    case CURLE_OPERATION_TIMEDOUT:
        return PDR_ETIMEDOUT;
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
        return PDR_EPEERGONE;
    case CURLE_WRITE_ERROR:
        return PDR_ECANCELED;
    case CURLE_OUT_OF_MEMORY:
        return PDR_ENOMEM;
    default:
        return PDR_EIO;
    }
}

const char *pdr_leg_cause(int err)
{
    switch (err) {
    case PDR_ECONNREFUSED:
        return "connect";
    case PDR_ETIMEDOUT:
        return "timeout";
    case PDR_EPEERGONE:
        return "reset";
    default:
        return "other";
    }
}

static void check_done(pdr_multi_t *m)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(m->multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        pdr_leg_t *leg = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&leg);
        CURLcode rc = msg->data.result;
        if (leg->status == 0)
            curl_easy_getinfo(leg->easy, CURLINFO_RESPONSE_CODE, &leg->status);
        int aborted = leg->abort_requested;
        leg_detach(leg);
        if (aborted)
            continue; /* cancelled: the owner has moved on */
        int err = translate(rc);
        if (err != 0 && err != PDR_ECANCELED)
            pdr_debug("upstream: %s (%s)", curl_easy_strerror(rc), leg->errbuf);
        leg->cbs->on_done(leg, err);
    }
}

static size_t write_cb(char *p, size_t size, size_t nmemb, void *userp)
{
    pdr_leg_t *leg = userp;
    size_t n = size * nmemb;
    if (leg->abort_requested)
        return 0; /* curl ends the transfer with CURLE_WRITE_ERROR */
    if (!leg->got_headers) {
        leg->got_headers = 1;
        leg->first_byte_ns = pdr_now_ns();
        curl_easy_getinfo(leg->easy, CURLINFO_RESPONSE_CODE, &leg->status);
        curl_off_t cl = -1;
        curl_easy_getinfo(leg->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
        leg->content_length = cl;
        char *ct = NULL;
        curl_easy_getinfo(leg->easy, CURLINFO_CONTENT_TYPE, &ct);
        if (ct != NULL)
            snprintf(leg->content_type, sizeof(leg->content_type), "%s", ct);
    }
    size_t r = leg->cbs->on_data(leg, p, n);
    if (r == PDR_LEG_PAUSE) {
        leg->paused = 1;
        return CURL_WRITEFUNC_PAUSE;
    }
    leg->bytes_in += n;
    return r;
}

int pdr_leg_start(pdr_leg_t *leg, pdr_multi_t *m, const char *url, const char *body, size_t body_len,
                  const char *const *extra_headers, long connect_timeout_ms, long total_timeout_ms,
                  const pdr_leg_cbs_t *cbs, void *data)
{
    memset(leg, 0, sizeof(*leg));
    leg->multi = m;
    leg->cbs = cbs;
    leg->data = data;
    leg->content_length = -1;
    leg->easy = m->n_idle > 0 ? m->idle[--m->n_idle] : curl_easy_init();
    if (leg->easy == NULL)
        return PDR_ENOMEM;
    CURL *e = leg->easy;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_PRIVATE, leg);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, leg);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_PROXY, ""); /* workers are reached directly, whatever http_proxy says */
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, leg->errbuf);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, connect_timeout_ms);
    if (total_timeout_ms > 0)
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, total_timeout_ms);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
    /* Decoded bytes are relayed as they are: no content decoding, no redirects. */
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    struct curl_slist *h = NULL;
    if (body != NULL) {
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
        h = curl_slist_append(h, "Content-Type: application/json");
        h = curl_slist_append(h, "Expect:"); /* stack.md #7: no 100-continue round trip */
    }
    for (const char *const *x = extra_headers; x != NULL && *x != NULL; x++)
        h = curl_slist_append(h, *x);
    leg->headers = h;
    if (h != NULL)
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    leg->started_ns = pdr_now_ns();
    if (curl_multi_add_handle(m->multi, e) != CURLM_OK) {
        curl_slist_free_all(h);
        curl_easy_cleanup(e);
        leg->easy = NULL;
        leg->headers = NULL;
        return PDR_ENOMEM;
    }
    leg->active = 1;
    leg->next_active = m->active;
    leg->prev_active = &m->active;
    if (m->active != NULL)
        m->active->prev_active = &leg->next_active;
    m->active = leg;
    return 0;
}

size_t pdr_multi_fail_all(pdr_multi_t *m, int err)
{
    /* on_done may cancel other legs (the request's other leg): take the head again after each. */
    size_t n = 0;
    pdr_leg_t *leg;
    while ((leg = m->active) != NULL) {
        int aborted = leg->abort_requested;
        curl_easy_setopt(leg->easy, CURLOPT_FORBID_REUSE, 1L);
        leg_detach(leg);
        if (aborted)
            continue; /* cancelled already: its owner has moved on */
        n++;
        leg->cbs->on_done(leg, err);
    }
    return n;
}

void pdr_leg_cancel(pdr_leg_t *leg)
{
    if (!leg->active || leg->abort_requested)
        return;
    leg->abort_requested = 1;
    pdr_multi_t *m = leg->multi;
    /* Removing a handle drops a connection in use, so the worker sees the close at once. */
    curl_easy_setopt(leg->easy, CURLOPT_FORBID_REUSE, 1L);
    if (m->in_curl == 0) {
        leg_detach(leg);
        return;
    }
    if (m->n_deferred == m->cap_deferred) {
        size_t cap = m->cap_deferred ? m->cap_deferred * 2 : 16;
        pdr_leg_t **d = realloc(m->deferred, cap * sizeof(*d));
        if (d == NULL)
            return; /* the write callback still aborts the transfer (abort_requested) */
        m->deferred = d;
        m->cap_deferred = cap;
    }
    m->deferred[m->n_deferred++] = leg;
}

void pdr_leg_resume(pdr_leg_t *leg)
{
    if (!leg->active || !leg->paused)
        return;
    leg->paused = 0;
    pdr_multi_t *m = leg->multi;
    m->in_curl++;
    curl_easy_pause(leg->easy, CURLPAUSE_CONT);
    m->in_curl--;
    run_deferred(m);
    check_done(m);
}
