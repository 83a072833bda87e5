/*
 * A KV event gap repaired through the publisher's replay socket (vLLM's ZmqEventPublisher replay_endpoint,
 * docs/internals/kv-events.md "Transport"). Loop 0 only, like the subscriber (kv_events.c).
 *
 * When a live message shows numbers missing (a gap; a first message that is not number 0; a restarted
 * publisher whose first message seen is not 0), a DEALER socket asks the worker's replay socket for the
 * batches from the first number missing: one request [empty, 8-byte big-endian number]; the answer is one
 * message [empty, seq, payload] per batch the publisher still keeps from there, then [empty, -1, empty].
 * Meanwhile the live messages are held (at most kv_events.replay_hold_messages, copied); the replayed
 * batches are applied in order as they come, then the held ones not applied already. Only the replay's
 * first number past the one needed (too_old), no end by kv_events.replay_timeout_ms (timeout), a hole in
 * the replay, a malformed answer, a full hold or a socket error (failed) leave the gap: the held messages
 * are then applied as they came, and the index does what it does on a gap (the worker's blocks dropped,
 * unsynced until kv_events.resync_messages messages). Each outcome is counted and the ones that are not a
 * repair are logged.
 *
 * Handles: a replay owns its socket's uv_poll and two timers (its deadline; the next turn's share of a
 * long answer, KV_TURN_MESSAGES a turn); it is freed with the last one's close callback, its socket closed
 * there (the fd is libzmq's). The sub points to its replay while it runs; a sub that goes drops it.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "err.h"
#include "kv_replay.h"
#include "kvevents.h"
#include "router.h"
#include "util.h"

typedef struct held {
    uint64_t seq;
    void *data;
    size_t len;
} held_t;

typedef struct kv_replay {
    kv_sub_t *s; /* NULL once dropped */
    void *sock;  /* DEALER */
    uv_poll_t poll;
    uv_timer_t deadline, more;
    int handles;
    uint64_t from; /* the first number asked for */
    uint64_t next; /* the next number to apply */
    int got_any;   /* a batch of the replay was applied */
    held_t *held;
    size_t n_held, cap_held;
} kv_replay_t;

static const char *const outcome_name[KV_REPLAY_OUTCOMES] = {"repaired", "too_old", "timeout", "failed",
                                                             "unavailable"};

int pdr__kv_may_log(kv_sub_t *s)
{
    uint64_t now = pdr_now_ms();
    if (s->log_ms != 0 && now - s->log_ms < KV_LOG_EVERY_MS)
        return 0;
    s->log_ms = now;
    return 1;
}

void pdr__kv_apply(kv_sub_t *s, uint64_t seq, const void *payload, size_t len)
{
    pdr_kvindex_t *ix = s->ke->ix;
    char err[256] = "";
    pdr_kv_batch_t b;
    if (pdr_kv_batch_decode(payload, len, &b, err, sizeof(err)) == 0) {
        pdr_kvindex_seq_t what = PDR_KVINDEX_SEQ_OK;
        if (pdr_kvindex_apply(ix, s->uid, seq, &b, &what) == PDR_ENOMEM && pdr__kv_may_log(s))
            pdr_warn("kv events from %s (%s): out of memory applying message %" PRIu64 "", s->endpoint,
                     s->url, seq);
        __atomic_add_fetch(&s->applied, 1, __ATOMIC_RELAXED);
        if (b.n_unknown > 0)
            __atomic_add_fetch(&s->unknown_events, b.n_unknown, __ATOMIC_RELAXED);
        if (what != PDR_KVINDEX_SEQ_OK && pdr__kv_may_log(s))
            pdr_warn(
                "kv events from %s (%s): %s at message %" PRIu64 "; the worker's blocks were dropped, it "
                "is routed by the prefix tree until it is in sync again",
                s->endpoint, s->url, what == PDR_KVINDEX_SEQ_GAP ? "sequence gap" : "publisher restart", seq);
        pdr_kv_batch_free(&b);
        return;
    }
    /* Something was lost: the message's events. Its number still counts, so the next one is no gap. */
    pdr_kv_batch_t empty = {0};
    (void)pdr_kvindex_apply(ix, s->uid, seq, &empty, NULL);
    pdr_kvindex_desync(ix, s->uid);
    __atomic_add_fetch(&s->malformed, 1, __ATOMIC_RELAXED);
    if (pdr__kv_may_log(s))
        pdr_warn("kv events from %s (%s): malformed message (sequence number known): %s; the worker's blocks "
                 "were dropped",
                 s->endpoint, s->url, err);
}

static void on_replay_closed(uv_handle_t *h)
{
    kv_replay_t *rp = h->data;
    if (--rp->handles > 0)
        return;
    zmq_close(rp->sock);
    for (size_t i = 0; i < rp->n_held; i++)
        free(rp->held[i].data);
    free(rp->held);
    free(rp);
}

static void replay_close(kv_replay_t *rp)
{
    if (rp->s != NULL)
        __atomic_store_n(&rp->s->replay, NULL, __ATOMIC_RELAXED);
    rp->s = NULL;
    uv_poll_stop(&rp->poll);
    uv_timer_stop(&rp->deadline);
    uv_timer_stop(&rp->more);
    uv_close((uv_handle_t *)&rp->poll, on_replay_closed);
    uv_close((uv_handle_t *)&rp->deadline, on_replay_closed);
    uv_close((uv_handle_t *)&rp->more, on_replay_closed);
}

/* Ends a replay: counts its outcome, applies the held messages it did not cover, closes it. */
static void replay_finish(kv_replay_t *rp, kv_replay_outcome_t outcome, const char *why)
{
    kv_sub_t *s = rp->s;
    if (outcome == KV_REPLAY_REPAIRED)
        pdr_info("kv events from %s (%s): messages %" PRIu64 "..%" PRIu64 " replayed from %s", s->endpoint,
                 s->url, rp->from, rp->next - 1, s->replay_endpoint);
    else
        pdr_warn("kv events from %s (%s): the replay from message %" PRIu64 " %s (%s); the gap stands: the "
                 "worker's blocks are dropped and it is routed by the prefix tree until it is in sync again",
                 s->endpoint, s->url, rp->from, outcome_name[outcome], why);
    for (size_t i = 0; i < rp->n_held; i++)
        if (rp->held[i].seq >= rp->next)
            pdr__kv_apply(s, rp->held[i].seq, rp->held[i].data, rp->held[i].len);
    /* The replay sends every batch its buffer has from the first number asked, so it may have gone past the
     * last live message read: those still queued on the live socket are not a restart but copies. */
    uint64_t last = rp->n_held > 0 ? rp->held[rp->n_held - 1].seq : 0;
    s->dup_next = last + 1;
    s->dup_end = rp->next > last + 1 ? rp->next : 0;
    /* Counted once the held messages are applied: whoever sees the count sees the index they made. */
    __atomic_add_fetch(&s->replays[outcome], 1, __ATOMIC_RELEASE);
    replay_close(rp);
}

static void on_deadline(uv_timer_t *t)
{
    kv_replay_t *rp = t->data;
    char why[64];
    snprintf(why, sizeof(why), "no end within %d ms", rp->s->ke->r->config->kv_events.replay_timeout_ms);
    replay_finish(rp, KV_REPLAY_TIMEOUT, why);
}

/* One message of the answer. Returns 1 when the replay ended (rp is closing). */
static int replay_message(kv_replay_t *rp, zmq_msg_t *f, int n)
{
    if (n != 3 || zmq_msg_size(&f[0]) != 0 || zmq_msg_size(&f[1]) != 8) {
        replay_finish(rp, KV_REPLAY_FAILED, "a reply that is not [empty, 8-byte number, payload]");
        return 1;
    }
    uint64_t seq = 0;
    (void)pdr_kv_seq_decode(zmq_msg_data(&f[1]), 8, &seq);
    if (seq == UINT64_MAX) { /* the end marker, -1 */
        if (rp->got_any && rp->n_held > 0 && rp->next > rp->held[0].seq)
            replay_finish(rp, KV_REPLAY_REPAIRED, "");
        else
            replay_finish(rp, rp->got_any ? KV_REPLAY_FAILED : KV_REPLAY_TOO_OLD,
                          rp->got_any ? "it ended before the message that showed the gap"
                                      : "the publisher keeps none of the numbers missing");
        return 1;
    }
    if (seq < rp->next)
        return 0; /* applied already */
    if (seq > rp->next) {
        char why[96];
        snprintf(why, sizeof(why), "%s %" PRIu64 ", expected %" PRIu64,
                 rp->got_any ? "a hole in the replay: got" : "its first number is", seq, rp->next);
        replay_finish(rp, rp->got_any ? KV_REPLAY_FAILED : KV_REPLAY_TOO_OLD, why);
        return 1;
    }
    pdr__kv_apply(rp->s, seq, zmq_msg_data(&f[2]), zmq_msg_size(&f[2]));
    __atomic_add_fetch(&rp->s->replayed, 1, __ATOMIC_RELAXED);
    rp->got_any = 1;
    rp->next = seq + 1;
    return 0;
}

static void on_more(uv_timer_t *t);

/* Reads the answer within one turn's budget; the rest in the next turn (the more timer, 0 ms). */
static void replay_read(kv_replay_t *rp)
{
    for (int msgs = 0; msgs < KV_TURN_MESSAGES; msgs++) {
        int ev = 0;
        size_t sz = sizeof(ev);
        if (zmq_getsockopt(rp->sock, ZMQ_EVENTS, &ev, &sz) != 0 || !(ev & ZMQ_POLLIN))
            return;
        zmq_msg_t f[3];
        int n = 0, more = 1;
        while (more) {
            zmq_msg_t m;
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, rp->sock, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&m);
                break;
            }
            more = zmq_msg_more(&m);
            if (n < 3)
                f[n] = m;
            else
                zmq_msg_close(&m);
            n++;
        }
        int ended = n > 0 && replay_message(rp, f, n);
        for (int i = 0; i < n && i < 3; i++)
            zmq_msg_close(&f[i]);
        if (ended || n == 0)
            return;
    }
    uv_timer_start(&rp->more, on_more, 0, 0);
}

static void on_more(uv_timer_t *t)
{
    replay_read(t->data);
}

static void on_replay_readable(uv_poll_t *h, int status, int events)
{
    (void)status;
    (void)events;
    replay_read(h->data);
}

/* Copies a live message into the hold. 0, or PDR_ETOOBIG (full) or PDR_ENOMEM. */
static int hold(kv_replay_t *rp, uint64_t seq, const void *payload, size_t len, size_t cap)
{
    if (rp->n_held == cap)
        return PDR_ETOOBIG;
    if (rp->n_held == rp->cap_held) {
        size_t c = rp->cap_held ? 2 * rp->cap_held : 16;
        if (c > cap)
            c = cap;
        held_t *nh = realloc(rp->held, c * sizeof(*nh));
        if (nh == NULL)
            return PDR_ENOMEM;
        rp->held = nh;
        rp->cap_held = c;
    }
    void *copy = malloc(len ? len : 1);
    if (copy == NULL)
        return PDR_ENOMEM;
    memcpy(copy, payload, len);
    rp->held[rp->n_held++] = (held_t){seq, copy, len};
    return 0;
}

/* The first number missing when seq arrives, or -1 when none is. */
static int64_t first_missing(kv_sub_t *s, uint64_t seq)
{
    pdr_kvindex_worker_stats_t st;
    /* A worker loaded warm from a snapshot has a number but no message yet: its gap starts there. */
    if (pdr_kvindex_worker_stats(s->ke->ix, s->uid, &st) != 0 || (st.messages == 0 && !st.warm))
        return seq == 0 ? -1 : 0; /* a late join: the publisher numbers from 0 */
    if (seq == st.last_seq + 1)
        return -1;
    if (seq > st.last_seq + 1)
        return (int64_t)(st.last_seq + 1);
    return seq == 0 ? -1 : 0; /* a new publisher whose first messages were missed */
}

static int replay_start(kv_sub_t *s, uint64_t from, uint64_t seq, const void *payload, size_t len)
{
    const pdr_config_t *c = s->ke->r->config;
    kv_replay_t *rp = calloc(1, sizeof(*rp));
    if (rp == NULL)
        return PDR_ENOMEM;
    rp->from = rp->next = from;
    int linger = 0, hwm = c->kv_events.replay_hold_messages, fd = -1;
    size_t fdlen = sizeof(fd);
    int64_t maxmsg = c->kv_events.max_message_bytes;
    uint8_t be[8];
    for (int i = 0; i < 8; i++)
        be[i] = (uint8_t)(from >> (56 - 8 * i));
    uv_loop_t *loop = s->ke->r->threads[0].loop;
    if ((rp->sock = zmq_socket(s->ke->zctx, ZMQ_DEALER)) == NULL ||
        zmq_setsockopt(rp->sock, ZMQ_LINGER, &linger, sizeof(linger)) != 0 ||
        zmq_setsockopt(rp->sock, ZMQ_RCVHWM, &hwm, sizeof(hwm)) != 0 ||
        zmq_setsockopt(rp->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg)) != 0 ||
        zmq_connect(rp->sock, s->replay_endpoint) != 0 ||
        zmq_getsockopt(rp->sock, ZMQ_FD, &fd, &fdlen) != 0 ||
        hold(rp, seq, payload, len, (size_t)c->kv_events.replay_hold_messages) != 0 ||
        zmq_send(rp->sock, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) != 0 ||
        zmq_send(rp->sock, be, 8, ZMQ_DONTWAIT) != 8 || uv_poll_init(loop, &rp->poll, fd) != 0) {
        if (rp->sock != NULL)
            zmq_close(rp->sock);
        for (size_t i = 0; i < rp->n_held; i++)
            free(rp->held[i].data);
        free(rp->held);
        free(rp);
        return PDR_EIO;
    }
    uv_timer_init(loop, &rp->deadline);
    uv_timer_init(loop, &rp->more);
    rp->poll.data = rp->deadline.data = rp->more.data = rp;
    rp->handles = 3;
    rp->s = s;
    __atomic_store_n(&s->replay, rp, __ATOMIC_RELAXED);
    uv_poll_start(&rp->poll, UV_READABLE, on_replay_readable);
    uv_timer_start(&rp->deadline, on_deadline, (uint64_t)c->kv_events.replay_timeout_ms, 0);
    /* The descriptor signals only after a read found the socket empty (and a send may have consumed it). */
    uv_timer_start(&rp->more, on_more, 0, 0);
    return 0;
}

int pdr__kv_replay_offer(kv_sub_t *s, uint64_t seq, const void *payload, size_t len)
{
    if (s->dup_end != 0) {
        if (seq == s->dup_next) { /* a copy of a batch the replay applied: the next one expected */
            if (++s->dup_next == s->dup_end)
                s->dup_end = 0;
            return 1;
        }
        s->dup_end = 0; /* anything else ends the copies: a gap, a restart */
    }
    kv_replay_t *rp = s->replay;
    if (rp != NULL) {
        int rc = hold(rp, seq, payload, len, (size_t)s->ke->r->config->kv_events.replay_hold_messages);
        if (rc == 0)
            return 1;
        replay_finish(rp, KV_REPLAY_FAILED,
                      rc == PDR_ETOOBIG ? "kv_events.replay_hold_messages live messages held"
                                        : "out of memory");
        return 0;
    }
    int64_t from = first_missing(s, seq);
    if (from < 0)
        return 0;
    if (s->replay_endpoint == NULL) {
        __atomic_add_fetch(&s->replays[KV_REPLAY_UNAVAILABLE], 1, __ATOMIC_RELAXED);
        return 0;
    }
    if (replay_start(s, (uint64_t)from, seq, payload, len) == 0)
        return 1;
    __atomic_add_fetch(&s->replays[KV_REPLAY_FAILED], 1, __ATOMIC_RELAXED);
    if (pdr__kv_may_log(s))
        pdr_warn("kv events from %s (%s): cannot ask %s for a replay from message %" PRId64 " (%s); the gap "
                 "stands",
                 s->endpoint, s->url, s->replay_endpoint, from, zmq_strerror(zmq_errno()));
    return 0;
}

void pdr__kv_replay_abort(kv_sub_t *s)
{
    if (s->replay != NULL)
        replay_close(s->replay);
}
