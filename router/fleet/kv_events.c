/*
 * The KV event subscriber of precise_prefix (docs/internals/routing.md, "Precise prefix index"): one
 * ZMQ SUB socket per worker that names a publisher (a worker entry's kv_events, or the Kubernetes pod
 * annotation pdrouter.io/kv-events-endpoint), whose messages feed the index that the pick reads.
 *
 * Threads: everything here runs on loop 0, except pdr_kv_events_metrics (any loop; it takes the lock
 * that guards the list of subscribers) and the index itself (its own mutex, read by every loop's picks).
 * libzmq adds one I/O thread of its own (the context's); the sockets are used from loop 0 only.
 *
 * Loop integration: each socket's ZMQ_FD is polled with uv_poll for readability. That fd is
 * edge-triggered and only says "ZMQ_EVENTS may have changed": after each wake the socket is read with
 * ZMQ_DONTWAIT until EAGAIN, and ZMQ_EVENTS is re-checked before going back to the loop. Each publisher
 * has a budget per loop turn (KV_TURN_MESSAGES messages or KV_TURN_BYTES bytes): past it the rest waits
 * for the next turn (an idle handle keeps the loop turning while any publisher has messages left), so
 * that health checks, the admin API and loop 0's requests never wait behind a flood of events.
 *
 * Bounds: kv_events.max_message_bytes (ZMQ_MAXMSGSIZE: libzmq drops the connection of a publisher that
 * sends a bigger frame, before reading it; the socket reconnects) and kv_events.queue_messages
 * (ZMQ_RCVHWM: past it libzmq drops messages, seen here as a sequence gap). A monitor socket per
 * subscriber counts the connections that end.
 *
 * Membership: a once-a-second tick on loop 0 compares the subscribers with the pool's workers and
 * opens or closes sockets (so added, discovered, reloaded and removed workers need no hook of their
 * own); a closed worker's blocks leave the index.
 */
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "buf.h"
#include "err.h"
#include "fallback.h"
#include "kv_events.h"
#include "kv_events_internal.h"
#include "kv_replay.h"
#include "kv_snapshot.h"
#include "kvevents.h"
#include "router.h"
#include "util.h"

#define KV_TICK_MS 1000

static int config_uses_precise(const pdr_config_t *c)
{
    size_t n = c->n_pools > 0 ? c->n_pools : 1;
    for (size_t i = 0; i < n; i++) {
        pdr_pool_conf_t pc;
        pdr_config_pool(c, i, &pc);
        const pdr_policy_ops_t *pre = pdr_policy_get(pc.policy_prefill),
                               *dec = pdr_policy_get(pc.policy_decode);
        if ((pre != NULL && (pre->flags & PDR_POLICY_F_KV_INDEX)) ||
            (dec != NULL && (dec->flags & PDR_POLICY_F_KV_INDEX)))
            return 1;
    }
    return 0;
}

static void handle_message(kv_sub_t *s, zmq_msg_t *f, int nframes)
{
    pdr_kvindex_t *ix = s->ke->ix;
    uint64_t seq = 0;
    int have_seq = nframes >= 2 && pdr_kv_seq_decode(zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), &seq) == 0;
    if (nframes == 3 && have_seq) {
        /* A gap is asked of the replay socket first (kv_replay.c); what it does not take is applied now. */
        if (!pdr__kv_replay_offer(s, seq, zmq_msg_data(&f[2]), zmq_msg_size(&f[2])))
            pdr__kv_apply(s, seq, zmq_msg_data(&f[2]), zmq_msg_size(&f[2]));
        return;
    }
    /* During a replay a malformed message with its number waits its turn like the others (its empty payload
     * is malformed when applied), so that the numbers stay in order. */
    if (have_seq && s->replay != NULL && pdr__kv_replay_offer(s, seq, "", 0))
        return;
    char err[128];
    if (nframes != 3)
        snprintf(err, sizeof(err), "%d frames, expected 3 (topic, sequence number, payload)", nframes);
    else
        snprintf(err, sizeof(err), "the sequence number frame has %zu bytes, expected 8",
                 zmq_msg_size(&f[1]));
    /* Something was lost: the message's events. Its number still counts, so the next one is no gap. */
    if (have_seq) {
        pdr_kv_batch_t empty = {0};
        (void)pdr_kvindex_apply(ix, s->uid, seq, &empty, NULL);
    }
    pdr_kvindex_desync(ix, s->uid);
    __atomic_add_fetch(&s->malformed, 1, __ATOMIC_RELAXED);
    if (pdr__kv_may_log(s))
        pdr_warn("kv events from %s (%s): malformed message%s%s: %s; the worker's blocks were dropped",
                 s->endpoint, s->url, have_seq ? " " : "", have_seq ? "(sequence number known)" : "", err);
}

/* Receives one whole message (all its frames) without blocking. Returns its bytes plus one (0: none was
 * waiting). */
static size_t recv_one(kv_sub_t *s)
{
    zmq_msg_t f[3];
    int n = 0, more = 1;
    size_t bytes = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, s->sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            if (n == 0)
                break;
            /* Frames of one message arrive together; an error inside one ends it. */
            more = 0;
            continue;
        }
        more = zmq_msg_more(&m);
        bytes += zmq_msg_size(&m);
        if (n < 3)
            f[n] = m;
        else
            zmq_msg_close(&m);
        n++;
    }
    if (n == 0)
        return 0;
    handle_message(s, f, n);
    for (int i = 0; i < n && i < 3; i++)
        zmq_msg_close(&f[i]);
    return bytes;
}

static void on_idle(uv_idle_t *h);

/* Reads the publisher's messages within one turn's budget; with messages left, s->pending is set and the
 * idle handle brings the next turn's share. */
static void drain(kv_sub_t *s)
{
    size_t msgs = 0, bytes = 0, got;
    s->pending = 0;
    for (;;) {
        int ev = 0;
        size_t sz = sizeof(ev);
        if (zmq_getsockopt(s->sock, ZMQ_EVENTS, &ev, &sz) != 0 || !(ev & ZMQ_POLLIN))
            return;
        while (msgs < KV_TURN_MESSAGES && bytes < KV_TURN_BYTES && (got = recv_one(s)) > 0) {
            msgs++;
            bytes += got;
        }
        if (msgs >= KV_TURN_MESSAGES || bytes >= KV_TURN_BYTES)
            break;
    }
    s->pending = 1;
    __atomic_add_fetch(&s->yields, 1, __ATOMIC_RELAXED);
    if (!uv_is_active((uv_handle_t *)&s->ke->idle))
        uv_idle_start(&s->ke->idle, on_idle);
}

static void on_readable(uv_poll_t *h, int status, int events)
{
    (void)status;
    (void)events;
    drain(h->data);
}

/* Loop 0, once a turn while some publisher has messages left: each such publisher's next share. */
static void on_idle(uv_idle_t *h)
{
    struct pdr_kv_events *ke = h->data;
    int left = 0;
    for (pdr_dlink_t *l = ke->subs; l != NULL; l = l->next) {
        kv_sub_t *s = SUB_OF(l);
        if (s->pending)
            drain(s);
        left |= s->pending;
    }
    if (!left)
        uv_idle_stop(h);
}

/* The monitor's events (ZMQ_EVENT_DISCONNECTED): each is two frames, the event (16-bit id, 32-bit
 * value) and the endpoint. */
static void on_monitor(uv_poll_t *h, int status, int events)
{
    kv_sub_t *s = h->data;
    (void)status;
    (void)events;
    for (;;) {
        int ev = 0;
        size_t sz = sizeof(ev);
        if (zmq_getsockopt(s->mon, ZMQ_EVENTS, &ev, &sz) != 0 || !(ev & ZMQ_POLLIN))
            return;
        zmq_msg_t m;
        zmq_msg_init(&m);
        while (zmq_msg_recv(&m, s->mon, ZMQ_DONTWAIT) >= 0) {
            uint16_t id = 0;
            if (!zmq_msg_more(&m) || zmq_msg_size(&m) != 6) /* the endpoint frame */
                continue;
            memcpy(&id, zmq_msg_data(&m), sizeof(id));
            if (id != ZMQ_EVENT_DISCONNECTED)
                continue;
            __atomic_add_fetch(&s->disconnects, 1, __ATOMIC_RELAXED);
            uint64_t now = pdr_now_ms();
            if (s->disc_log_ms == 0 || now - s->disc_log_ms >= KV_LOG_EVERY_MS) {
                s->disc_log_ms = now;
                pdr_warn("kv events from %s (%s): the connection to the publisher ended (it closed it, or "
                         "sent a message over kv_events.max_message_bytes, %lld bytes); reconnecting, "
                         "messages lost meanwhile show as a sequence gap",
                         s->endpoint, s->url, (long long)s->ke->r->config->kv_events.max_message_bytes);
            }
        }
        zmq_msg_close(&m);
    }
}

static void on_sub_closed(uv_handle_t *h)
{
    kv_sub_t *s = h->data;
    if (--s->handles > 0)
        return;
    zmq_close(s->mon);
    zmq_close(s->sock);
    free(s->url);
    free(s->endpoint);
    free(s->replay_endpoint);
    free(s);
}

static void sub_close(kv_sub_t *s)
{
    pdr__kv_replay_abort(s);
    pdr_kvindex_remove_worker(s->ke->ix, s->uid);
    s->pending = 0;
    uv_poll_stop(&s->poll);
    uv_close((uv_handle_t *)&s->poll, on_sub_closed);
    uv_poll_stop(&s->mon_poll);
    uv_close((uv_handle_t *)&s->mon_poll, on_sub_closed);
}

/*
 * The endpoint of the target's publisher: the worker's own, or for data-parallel rank R of a tcp://
 * endpoint its port + R, as vLLM and sglang offset each rank's publisher (offset_endpoint_port). NULL
 * when there is none: a rank above 0 of an ipc:// endpoint (the engines have no rule for it).
 */
static char *rank_endpoint(const char *e, int dp_rank)
{
    if (dp_rank <= 0)
        return strdup(e);
    const char *colon = strrchr(e, ':');
    if (strncmp(e, "tcp://", 6) != 0 || colon == NULL)
        return NULL;
    long port = strtol(colon + 1, NULL, 10) + dp_rank;
    if (port > 65535)
        return NULL;
    size_t n = (size_t)(colon - e) + 8;
    char *out = malloc(n);
    if (out != NULL)
        snprintf(out, n, "%.*s:%ld", (int)(colon - e), e, port);
    return out;
}

static kv_sub_t *sub_open(struct pdr_kv_events *ke, const pdr_worker_t *w)
{
    kv_sub_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->ke = ke;
    s->uid = w->uid;
    s->url = strdup(w->target[0] != '\0' ? w->target : w->conf.url);
    s->endpoint = rank_endpoint(w->conf.kv_events, w->dp_rank);
    /* vLLM offsets a rank's replay endpoint as it does its publisher's. */
    if (w->conf.kv_events_replay != NULL)
        s->replay_endpoint = rank_endpoint(w->conf.kv_events_replay, w->dp_rank);
    static uint64_t warned_ms; /* loop 0; the tick retries every second: say it once a minute */
    if (s->endpoint == NULL && s->url != NULL) {
        if (warned_ms == 0 || pdr_now_ms() - warned_ms > 60000)
            pdr_warn(
                "kv events: %s: no publisher endpoint for data-parallel rank %d of %s (a rank's endpoint is "
                "tcp://HOST:PORT+RANK); its KV events are not used",
                s->url, w->dp_rank, w->conf.kv_events);
        warned_ms = pdr_now_ms();
        free(s->url);
        free(s->replay_endpoint);
        free(s);
        return NULL;
    }
    s->sock = zmq_socket(ke->zctx, ZMQ_SUB);
    s->mon = zmq_socket(ke->zctx, ZMQ_PAIR);
    int fd = -1, mfd = -1;
    size_t fdlen = sizeof(fd);
    const pdr_config_t *c = ke->r->config;
    int hwm = c->kv_events.queue_messages, linger = 0, ivl_max = 5000;
    int64_t maxmsg = c->kv_events.max_message_bytes;
    char mon_addr[64];
    snprintf(mon_addr, sizeof(mon_addr), "inproc://pdr-kv-monitor-%" PRIu64, s->uid);
    if (s->url == NULL || s->endpoint == NULL || s->sock == NULL || s->mon == NULL ||
        zmq_setsockopt(s->sock, ZMQ_SUBSCRIBE, "", 0) != 0 ||
        zmq_setsockopt(s->sock, ZMQ_RCVHWM, &hwm, sizeof(hwm)) != 0 ||
        zmq_setsockopt(s->sock, ZMQ_LINGER, &linger, sizeof(linger)) != 0 ||
        zmq_setsockopt(s->sock, ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof(ivl_max)) != 0 ||
        zmq_setsockopt(s->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg)) != 0 ||
        zmq_setsockopt(s->mon, ZMQ_LINGER, &linger, sizeof(linger)) != 0 ||
        zmq_socket_monitor(s->sock, mon_addr, ZMQ_EVENT_DISCONNECTED) != 0 ||
        zmq_connect(s->mon, mon_addr) != 0 || zmq_connect(s->sock, s->endpoint) != 0 ||
        zmq_getsockopt(s->sock, ZMQ_FD, &fd, &fdlen) != 0 ||
        zmq_getsockopt(s->mon, ZMQ_FD, &mfd, &fdlen) != 0 ||
        uv_poll_init(ke->r->threads[0].loop, &s->poll, fd) != 0) {
        pdr_warn("kv events: cannot subscribe to %s for %s %s: %s", w->conf.kv_events, pdr_role_name(w->role),
                 w->conf.url, zmq_strerror(zmq_errno()));
        if (s->mon != NULL)
            zmq_close(s->mon);
        if (s->sock != NULL)
            zmq_close(s->sock);
        free(s->url);
        free(s->endpoint);
        free(s->replay_endpoint);
        free(s);
        return NULL;
    }
    s->poll.data = s;
    s->mon_poll.data = s;
    int rc = uv_poll_init(ke->r->threads[0].loop, &s->mon_poll, mfd);
    if (rc != 0) {
        pdr_warn("kv events: cannot subscribe to %s for %s %s: %s", w->conf.kv_events, pdr_role_name(w->role),
                 w->conf.url, uv_strerror(rc));
        s->handles = 1;
        uv_close((uv_handle_t *)&s->poll, on_sub_closed); /* frees s */
        return NULL;
    }
    s->handles = 2;
    uv_poll_start(&s->poll, UV_READABLE, on_readable);
    uv_poll_start(&s->mon_poll, UV_READABLE, on_monitor);
    /* libzmq signals the descriptor for a pipe only after a read found it empty: read it once now. */
    on_monitor(&s->mon_poll, 0, 0);
    pdr_info("kv events: subscribed to %s for %s %s%s%s", s->endpoint, pdr_role_name(w->role), s->url,
             s->replay_endpoint != NULL ? ", gaps replayed from " : "",
             s->replay_endpoint != NULL ? s->replay_endpoint : "");
    return s;
}

/* Loop 0 (or start): creates the index and the ZMQ context once a pool uses precise_prefix. 0: created. */
static int index_create(struct pdr_kv_events *ke)
{
    pdr_router_t *r = ke->r;
    if (!config_uses_precise(r->config))
        return PDR_ENOTSUP;
    pdr_kvindex_params_t p = {(uint64_t)r->config->kv_events.max_index_bytes,
                              (uint32_t)r->config->kv_events.resync_messages};
    int err;
    ke->unhashed_seen = ke->cold_seen = 0;
    if ((ke->ix = pdr_kvindex_new(&p, &err)) == NULL) {
        pdr_warn("kv events: cannot create the index (%s); precise_prefix routes by the prefix tree",
                 pdr_strerror(err));
        return PDR_ENOMEM;
    }
    if ((ke->zctx = zmq_ctx_new()) == NULL) {
        pdr_warn("kv events: cannot create a ZMQ context (%s); precise_prefix routes by the prefix tree",
                 zmq_strerror(zmq_errno()));
        pdr_kvindex_free(ke->ix);
        ke->ix = NULL;
        return PDR_ENOMEM;
    }
    __atomic_store_n(&r->pool.kvindex, ke->ix, __ATOMIC_RELEASE);
    return 0;
}

/* Loop 0: creates the index once a pool uses precise_prefix, then matches subscribers to workers. */
static void reconcile(struct pdr_kv_events *ke)
{
    pdr_router_t *r = ke->r;
    if (ke->ix == NULL && index_create(ke) != 0)
        return;
    pdr_worker_t **ws;
    size_t n = pdr_pool_snapshot(&r->pool, -1, &ws);
    pthread_mutex_lock(&ke->lock);
    for (pdr_dlink_t *l = ke->subs; l != NULL; l = l->next)
        SUB_OF(l)->mark = 0;
    for (size_t i = 0; i < n; i++) {
        if (ws[i]->conf.kv_events == NULL)
            continue;
        kv_sub_t *s = NULL;
        for (pdr_dlink_t *l = ke->subs; l != NULL && s == NULL; l = l->next)
            if (SUB_OF(l)->uid == ws[i]->uid)
                s = SUB_OF(l);
        uint64_t epoch = __atomic_load_n(&ws[i]->load.epoch, __ATOMIC_ACQUIRE);
        if (s == NULL && (s = sub_open(ke, ws[i])) != NULL) {
            s->epoch = epoch;
            pdr_dlink_push(&ke->subs, &s->link);
            pdr_kv_snapshot_adopt(ke->snap, ws[i]); /* before its first message: this loop reads it */
        }
        if (s != NULL && s->epoch != epoch) {
            /* A new incarnation of the worker (shim-events.md): the old process's blocks are gone with it.
             * Forgotten, so that the new publisher's first message is a late join (replayed from 0). */
            s->epoch = epoch;
            pdr__kv_replay_abort(s);
            pdr_kvindex_remove_worker(ke->ix, s->uid);
            __atomic_add_fetch(&s->incarnations, 1, __ATOMIC_RELAXED);
            pdr_info("kv events from %s (%s): a new instance of the worker; its blocks were dropped",
                     s->endpoint, s->url);
        }
        if (s != NULL)
            s->mark = 1;
    }
    for (pdr_dlink_t *l = ke->subs, *nx; l != NULL; l = nx) {
        kv_sub_t *s = SUB_OF(l);
        nx = l->next;
        if (s->mark)
            continue;
        pdr_dlink_unlink(&s->link);
        pdr_info("kv events: unsubscribed from %s (%s left the pool)", s->endpoint, s->url);
        sub_close(s);
    }
    pthread_mutex_unlock(&ke->lock);
    pdr_pool_release(ws, n);
}

/* Loop 0: lookups the index could not hash for every candidate, and cold candidates, since the last tick, as
 * fall-backs. */
static void count_unhashed(struct pdr_kv_events *ke)
{
    if (ke->ix == NULL)
        return;
    pdr_kvindex_stats_t st = {0};
    pdr_kvindex_stats(ke->ix, &st);
    if (st.unhashed > ke->unhashed_seen)
        pdr_fallback_n(PDR_FB_KV_INDEX_UNHASHED, st.unhashed - ke->unhashed_seen,
                       "a candidate's KV block size had no hashes of the prompt (the index hashes at most 4 "
                       "sizes a lookup)");
    ke->unhashed_seen = st.unhashed;
    if (st.cold > ke->cold_seen)
        pdr_fallback_n(
            PDR_FB_KV_INDEX_COLD, st.cold - ke->cold_seen,
            "a candidate's KV events were not in sync (it joined late, a gap was not repaired, or it "
            "restarted)");
    ke->cold_seen = st.cold;
}

static void on_tick(uv_timer_t *t)
{
    struct pdr_kv_events *ke = t->data;
    pdr_kv_snapshot_tick(ke->snap);
    reconcile(t->data);
    count_unhashed(t->data);
}

int pdr_kv_events_start(pdr_router_t *r)
{
    struct pdr_kv_events *ke = calloc(1, sizeof(*ke));
    if (ke == NULL)
        return PDR_ENOMEM;
    ke->r = r;
    pthread_mutex_init(&ke->lock, NULL);
    uv_timer_init(r->threads[0].loop, &ke->timer);
    ke->timer.data = ke;
    uv_idle_init(r->threads[0].loop, &ke->idle);
    ke->idle.data = ke;
    ke->timer_live = 1;
    uv_timer_start(&ke->timer, on_tick, 0, KV_TICK_MS);
    r->kv_events = ke;
    /* A snapshot is loaded now, before any loop runs: before the first subscription (the tick's) and
     * before the router takes traffic. */
    if (pdr_kv_snapshot_wanted(r)) {
        if (index_create(ke) == 0)
            ke->snap = pdr_kv_snapshot_start(r, ke->ix);
        else if (!config_uses_precise(r->config))
            pdr_warn(
                "kv_events.snapshot_path/snapshot_from are set but no pool uses precise_prefix at start: "
                "the index is neither loaded nor saved");
    }
    return 0;
}

void pdr_kv_events_stop(pdr_router_t *r)
{
    struct pdr_kv_events *ke = r->kv_events;
    if (ke == NULL || !ke->timer_live)
        return;
    ke->timer_live = 0;
    uv_timer_stop(&ke->timer);
    uv_close((uv_handle_t *)&ke->timer, NULL);
    uv_idle_stop(&ke->idle);
    uv_close((uv_handle_t *)&ke->idle, NULL);
    pdr_kv_snapshot_stop(ke->snap); /* while the index still holds every subscribed worker */
    pthread_mutex_lock(&ke->lock);
    while (ke->subs != NULL) {
        kv_sub_t *s = SUB_OF(ke->subs);
        pdr_dlink_unlink(&s->link);
        sub_close(s);
    }
    pthread_mutex_unlock(&ke->lock);
}

void pdr_kv_events_free(pdr_router_t *r)
{
    struct pdr_kv_events *ke = r->kv_events;
    if (ke == NULL)
        return;
    r->pool.kvindex = NULL;
    if (ke->zctx != NULL)
        zmq_ctx_term(ke->zctx); /* every socket was closed by its handle's close callback */
    pdr_kv_snapshot_free(ke->snap);
    pdr_kvindex_free(ke->ix);
    pthread_mutex_destroy(&ke->lock);
    free(ke);
    r->kv_events = NULL;
}

typedef struct {
    const char *name, *help, *type;
} family_t;

void pdr_kv_events_metrics(pdr_router_t *r, pdr_kv_events_put_cb put, void *o)
{
    struct pdr_kv_events *ke = r->kv_events;
    pdr_kvindex_stats_t st = {0};
    if (ke != NULL && __atomic_load_n(&r->pool.kvindex, __ATOMIC_ACQUIRE) != NULL)
        pdr_kvindex_stats(ke->ix, &st);
    put(o,
        "# HELP pdr_kv_index_bytes Bytes the precise prefix index holds (all its allocations counted).\n"
        "# TYPE pdr_kv_index_bytes gauge\npdr_kv_index_bytes %llu\n"
        "# HELP pdr_kv_index_max_bytes kv_events.max_index_bytes: the index's hard cap.\n"
        "# TYPE pdr_kv_index_max_bytes gauge\npdr_kv_index_max_bytes %llu\n"
        "# HELP pdr_kv_index_blocks Distinct blocks in the precise prefix index.\n"
        "# TYPE pdr_kv_index_blocks gauge\npdr_kv_index_blocks %llu\n"
        "# HELP pdr_kv_index_evicted_total (worker, block) entries the index dropped to stay under its cap.\n"
        "# TYPE pdr_kv_index_evicted_total counter\npdr_kv_index_evicted_total %llu\n",
        (unsigned long long)st.bytes, (unsigned long long)st.max_bytes, (unsigned long long)st.blocks,
        (unsigned long long)st.evicted);
    static const char *const dnames[4] = {"match", "smallest_tree", "balance", "consistent_hash"};
    put(o, "# HELP pdr_precise_prefix_decisions_total Picks of the precise_prefix policy by the rule that "
           "chose and where the chosen worker's match came from (index: its KV events; tree: the "
           "approximate prefix tree, for a worker not in sync or a request without token ids).\n"
           "# TYPE pdr_precise_prefix_decisions_total counter\n");
    for (int src = 0; src < 2; src++)
        for (int d = 0; d < 4; d++)
            put(o, "pdr_precise_prefix_decisions_total{source=\"%s\",decision=\"%s\"} %llu\n",
                src ? "index" : "tree", dnames[d],
                (unsigned long long)__atomic_load_n(&r->pool.pp_decisions[src][d], __ATOMIC_RELAXED));
    pdr_kv_snapshot_metrics(r, put, o);
    if (ke == NULL)
        return;
    static const family_t fam[] = {
        {"pdr_kv_events_total", "KV event messages from a worker's publisher by result (applied, malformed).",
         "counter"},
        {"pdr_kv_events_gaps_total", "Sequence gaps in a worker's KV events (its blocks dropped, unsynced).",
         "counter"},
        {"pdr_kv_events_restarts_total", "Sequence numbers that went backwards: a new publisher.", "counter"},
        {"pdr_kv_events_resyncs_total", "Times a worker's index came back in sync.", "counter"},
        {"pdr_kv_events_synced", "1 while the index is in sync with the worker (its matches are used).",
         "gauge"},
        {"pdr_kv_events_blocks", "Blocks the index holds for the worker.", "gauge"},
        {"pdr_kv_events_orphan_blocks_total",
         "Stored blocks whose parent the index did not know (not indexed).", "counter"},
        {"pdr_kv_events_unknown_total", "Events with a tag the router does not know (skipped).", "counter"},
        {"pdr_kv_events_budget_yields_total",
         "Loop turns that left the publisher's messages for the next turn (its budget per turn was spent).",
         "counter"},
        {"pdr_kv_events_disconnects_total",
         "Connections to the publisher that ended: it closed them, or sent a message over "
         "kv_events.max_message_bytes.",
         "counter"},
    };
    pthread_mutex_lock(&ke->lock);
    for (size_t k = 0; k < sizeof(fam) / sizeof(fam[0]); k++) {
        put(o, "# HELP %s %s\n# TYPE %s %s\n", fam[k].name, fam[k].help, fam[k].name, fam[k].type);
        for (pdr_dlink_t *l = ke->subs; l != NULL; l = l->next) {
            const kv_sub_t *s = SUB_OF(l);
            pdr_kvindex_worker_stats_t ws = {0};
            (void)pdr_kvindex_worker_stats(ke->ix, s->uid, &ws);
            if (k == 0) {
                put(o, "pdr_kv_events_total{worker=\"%s\",result=\"applied\"} %llu\n", s->url,
                    (unsigned long long)__atomic_load_n(&s->applied, __ATOMIC_RELAXED));
                put(o, "pdr_kv_events_total{worker=\"%s\",result=\"malformed\"} %llu\n", s->url,
                    (unsigned long long)__atomic_load_n(&s->malformed, __ATOMIC_RELAXED));
                continue;
            }
            uint64_t v = k == 1   ? ws.gaps
                         : k == 2 ? ws.restarts
                         : k == 3 ? ws.resyncs
                         : k == 4 ? (uint64_t)ws.synced
                         : k == 5 ? ws.blocks
                         : k == 6 ? ws.orphans
                         : k == 7 ? __atomic_load_n(&s->unknown_events, __ATOMIC_RELAXED)
                         : k == 8 ? __atomic_load_n(&s->yields, __ATOMIC_RELAXED)
                                  : __atomic_load_n(&s->disconnects, __ATOMIC_RELAXED);
            put(o, "%s{worker=\"%s\"} %llu\n", fam[k].name, s->url, (unsigned long long)v);
        }
    }
    static const char *const outcomes[KV_REPLAY_OUTCOMES] = {"repaired", "too_old", "timeout", "failed",
                                                             "unavailable"};
    put(o,
        "# HELP pdr_kv_events_replays_total Numbers missing from a worker's KV events (a gap, a late join) "
        "by what the replay did: repaired, too_old (its buffer no longer had them), timeout, failed, or "
        "unavailable (no replay endpoint); every outcome but repaired drops the worker's blocks.\n"
        "# TYPE pdr_kv_events_replays_total counter\n");
    for (pdr_dlink_t *l = ke->subs; l != NULL; l = l->next)
        for (int k = 0; k < KV_REPLAY_OUTCOMES; k++)
            put(o, "pdr_kv_events_replays_total{worker=\"%s\",outcome=\"%s\"} %llu\n", SUB_OF(l)->url,
                outcomes[k], (unsigned long long)__atomic_load_n(&SUB_OF(l)->replays[k], __ATOMIC_RELAXED));
    put(o,
        "# HELP pdr_kv_events_replayed_total KV event batches applied from the publisher's replay socket.\n"
        "# TYPE pdr_kv_events_replayed_total counter\n");
    unsigned long long cold = 0;
    for (pdr_dlink_t *l = ke->subs; l != NULL; l = l->next) {
        pdr_kvindex_worker_stats_t ws = {0};
        cold += pdr_kvindex_worker_stats(ke->ix, SUB_OF(l)->uid, &ws) != 0 || (!ws.synced && !ws.warm);
        put(o, "pdr_kv_events_replayed_total{worker=\"%s\"} %llu\n", SUB_OF(l)->url,
            (unsigned long long)__atomic_load_n(&SUB_OF(l)->replayed, __ATOMIC_RELAXED));
    }
    put(o,
        "# HELP pdr_kv_events_cold_workers Workers with a KV event publisher that the index is not in sync "
        "with and that are not warm from a snapshot (cold: routed by the prefix tree).\n"
        "# TYPE pdr_kv_events_cold_workers gauge\npdr_kv_events_cold_workers %llu\n",
        cold);
    pthread_mutex_unlock(&ke->lock);
}

json_t *pdr_kv_events_worker_json(pdr_router_t *r, const pdr_worker_t *w)
{
    struct pdr_kv_events *ke = r->kv_events;
    if (ke == NULL || __atomic_load_n(&r->pool.kvindex, __ATOMIC_ACQUIRE) == NULL)
        return NULL;
    json_t *o = NULL;
    pthread_mutex_lock(&ke->lock);
    for (pdr_dlink_t *l = ke->subs; l != NULL && o == NULL; l = l->next) {
        const kv_sub_t *s = SUB_OF(l);
        if (s->uid != w->uid)
            continue;
        pdr_kvindex_worker_stats_t ws = {0};
        int known = pdr_kvindex_worker_stats(ke->ix, s->uid, &ws) == 0;
        /* warm: loaded from a snapshot, its matches used until its next message confirms them. */
        o = json_pack("{s:b,s:b,s:b,s:I,s:o,s:b,s:b}", "synced", known && ws.synced, "warm", known && ws.warm,
                      "cold", !known || (!ws.synced && !ws.warm), "blocks", (json_int_t)ws.blocks, "last_seq",
                      known && (ws.messages > 0 || ws.warm) ? json_integer((json_int_t)ws.last_seq)
                                                            : json_null(),
                      "replay", s->replay_endpoint != NULL, "replaying",
                      __atomic_load_n(&s->replay, __ATOMIC_RELAXED) != NULL);
    }
    pthread_mutex_unlock(&ke->lock);
    return o;
}
