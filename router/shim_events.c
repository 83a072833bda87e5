/*
 * The shims' event and load reports, and decode admission by reported free KV (shim_events.h;
 * docs/internals/shim-events.md describes the wire format).
 *
 * A batch is one HTTP/1.1 POST of JSON lines with the header
 *   Pdr-Signature: v1 kid=<key id> ts=<unix ms> inst=<32 hex> seq=<decimal> sig=<base64url HMAC-SHA256>
 * whose MAC covers "pdr-events-v1\n<ts>\n<inst>\n<seq>\n" followed by the body. The key is the one derived
 * for the worker the body's first line names (shim_events.h: per-worker keys), so a batch can speak only
 * for the worker whose key signed it. It is refused (counted by cause) unsigned, naming no worker, under a
 * key id that is not that worker's (the master key itself included), wrongly signed, with a timestamp
 * outside max_skew_ms, with a sequence number not above the last one accepted from that worker's
 * instance, or as a worker's instance past PDR_SHIM_MAX_INSTANCES live ones. The replay table forgets an
 * instance only once its last batch is older than max_skew_ms, so a forgotten instance's old batches are
 * stale.
 *
 * Threads: the handler runs on loop 0. `lock` guards the replay table, the room table and the recent
 * ring; request loops take it briefly to open and take rooms. Counters are atomics.
 */
#include "shim_events.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "err.h"
#include "keyring.h"
#include "kvdeadline.h"
#include "links.h"
#include "router.h"
#include "util.h"

#define SE_MAX_BODY (1u << 20)     /* bytes of one batch */
#define SE_MAX_LINES 4096          /* lines of one batch */
#define SE_INSTANCES 4096          /* senders remembered for replay protection */
#define SE_ROOMS 8192              /* rooms in flight tracked (a power of two) */
#define SE_PROBE 64                /* slots probed per room lookup */
#define SE_RECENT 128              /* room events kept for GET /admin/v1/shim */
#define SE_MAX_REPORT_AGE_MS 10000 /* a load report older than this does not limit admission */
#define SE_INBOX 1024              /* done/failed events on their way to their requests' loops */

const char *const pdr_shim_refusal_names[PDR_SE__COUNT] = {"unsigned", "wrong_worker", "bad_signature",
                                                           "stale",    "replayed",     "malformed",
                                                           "too_big",  "shared_key",   "too_many_instances"};

#define SE_MAX_FIRST_LINE 4096 /* bytes of a batch's first line, read before its signature is checked */
#define SE_LABEL "pdr-shim-events-key-v1\n"

enum { EV_ACCEPTED = 0, EV_STARTED, EV_PROGRESS, EV_DONE, EV_FAILED, EV_REFUSED, EV__COUNT };
static const char *const ev_names[EV__COUNT] = {"accepted", "started", "progress",
                                                "done",     "failed",  "refused"};

typedef struct sender {
    uint64_t who; /* the worker identity's hash: an instance is one worker's (another cannot take its id) */
    uint64_t hi, lo, seq, last_ms;
} sender_t;

typedef struct room_rec {
    int state; /* 0 free, 1 used, 2 deleted */
    uint64_t room;
    uint32_t seen; /* bit per EV_* */
    uint64_t bytes, total, usec;
    char backend[12];
    int code;
    char reason[96];
    pdr_thread_t *t;     /* the loop of the request that owns the room (NULL: none to tell) */
    void *owner;         /* that request, touched only on t's loop */
    pdr_shim_room_cb cb; /* what its done and failed events are handed to */
} room_rec_t;

/* A done or failed event for a room whose request lives on loop t: queued here by loop 0, taken by t in
 * pdr_shim_events_deliver (woken by its async handle). */
typedef struct inbox_msg {
    pdr_thread_t *t;
    void *owner;
    pdr_shim_room_cb cb;
    uint64_t room, bytes, usec, wall_us;
    int failed, code;
    char backend[12], reason[96];
} inbox_msg_t;

typedef struct recent {
    uint64_t time_ms, room, bytes, usec;
    int ev, code, matched;
    char worker[32], backend[12], reason[96];
} recent_t;

static struct {
    pthread_mutex_t lock;
    pdr_keyring_t kr;
    int on;
    sender_t senders[SE_INSTANCES];
    room_rec_t rooms[SE_ROOMS];
    recent_t recent[SE_RECENT];
    uint64_t recent_n;
    inbox_msg_t inbox[SE_INBOX];
    size_t inbox_n;
    uint64_t refused[PDR_SE__COUNT]; /* atomic */
    uint64_t batches, events[EV__COUNT], loads, unmatched, unknown_worker, shim_dropped, untracked,
        inbox_full;        /* atomic */
    uint64_t kv_failed[2]; /* atomic */
    uint64_t admission[4]; /* atomic */
} S = {.lock = PTHREAD_MUTEX_INITIALIZER};

#define ADD(x, n) __atomic_add_fetch(&(x), (n), __ATOMIC_RELAXED)
#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

int pdr_shim_events_init(pdr_router_t *r)
{
    const char *kf = r->config->shim_events.key_file;
    if (kf == NULL)
        return 0;
    char err[256];
    if (pdr_keyring_load(&S.kr, &kf, 1, err, sizeof(err)) != 0) {
        pdr_error("shim_events.key_file: %s", err);
        return PDR_ECONFIG;
    }
    S.on = 1;
    pdr_info("shim events: POST /shim/v1/events on the admin listener (key %s)", S.kr.keys[0].id);
    return 0;
}

void pdr_shim_events_free(pdr_router_t *r)
{
    (void)r;
    pdr_keyring_wipe(&S.kr);
    S.on = 0;
}

/* ---- verification ---- */

typedef struct sig {
    const char *kid, *ts, *inst, *seq, *mac;
    size_t kid_n, ts_n, inst_n, seq_n, mac_n;
} sighdr_t;

static int parse_sig(const char *p, size_t n, sighdr_t *s)
{
    memset(s, 0, sizeof(*s));
    if (n < 3 || memcmp(p, "v1 ", 3) != 0)
        return -1;
    size_t i = 3;
    while (i < n) {
        while (i < n && p[i] == ' ')
            i++;
        size_t k = i;
        while (i < n && p[i] != '=' && p[i] != ' ')
            i++;
        if (i >= n || p[i] != '=')
            return -1;
        size_t klen = i - k, v = ++i;
        while (i < n && p[i] != ' ')
            i++;
        const char **dst = NULL;
        size_t *dn = NULL;
        if (klen == 3 && memcmp(p + k, "kid", 3) == 0)
            dst = &s->kid, dn = &s->kid_n;
        else if (klen == 2 && memcmp(p + k, "ts", 2) == 0)
            dst = &s->ts, dn = &s->ts_n;
        else if (klen == 4 && memcmp(p + k, "inst", 4) == 0)
            dst = &s->inst, dn = &s->inst_n;
        else if (klen == 3 && memcmp(p + k, "seq", 3) == 0)
            dst = &s->seq, dn = &s->seq_n;
        else if (klen == 3 && memcmp(p + k, "sig", 3) == 0)
            dst = &s->mac, dn = &s->mac_n;
        else
            return -1;
        if (*dst != NULL || i == v)
            return -1;
        *dst = p + v;
        *dn = i - v;
    }
    return s->kid && s->ts && s->inst && s->seq && s->mac ? 0 : -1;
}

static int parse_hex64(const char *p, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        int d = pdr_hex_digit(p[i]);
        if (d < 0)
            return -1;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return 0;
}

/* ---- per-worker keys ---- */

/* "host:port" as the router names a bootstrap listener: a host (an IPv6 one in brackets) and a port. */
static int bootstrap_ok(const char *s, size_t n)
{
    pdr_hostport_t hp;
    int64_t port;
    if (n == 0 || pdr_split_hostport(s, n, &hp) != 0 || hp.hlen == 0 || hp.port == NULL ||
        pdr_parse_int64(hp.port, hp.plen, 1, 65535, &port) != 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] <= ' ' || s[i] == 0x7f)
            return 0;
    return 1;
}

/* The identity of a worker URL (normalized) or, with url NULL or empty, of a bootstrap host:port. */
static int identity(const char *url, const char *boot, char *out, size_t cap, char *err, size_t errlen)
{
    if (url != NULL && url[0] != '\0') {
        pdr_worker_conf_t conf;
        if (pdr_worker_conf_parse_url(url, &conf, err, errlen) != 0)
            return -1;
        int n = snprintf(out, cap, "worker %s", conf.url);
        pdr_worker_conf_clear(&conf);
        if (n < 0 || (size_t)n >= cap) {
            snprintf(err, errlen, "the worker URL is too long");
            return -1;
        }
        return 0;
    }
    if (boot != NULL && bootstrap_ok(boot, strlen(boot))) {
        int n = snprintf(out, cap, "bootstrap %s", boot);
        if (n < 0 || (size_t)n >= cap) {
            snprintf(err, errlen, "the bootstrap address is too long");
            return -1;
        }
        return 0;
    }
    snprintf(err, errlen, "expected a worker URL (http://HOST:PORT) or a bootstrap HOST:PORT");
    return -1;
}

int pdr_shim_identity_of(const char *worker, char *out, size_t cap, char *err, size_t errlen)
{
    int url = strncmp(worker, "http://", 7) == 0 || strncmp(worker, "https://", 8) == 0;
    return identity(url ? worker : NULL, url ? NULL : worker, out, cap, err, errlen);
}

int pdr_shim_batch_identity(const char *body, size_t len, char *out, size_t cap)
{
    const char *nl = memchr(body, '\n', len < SE_MAX_FIRST_LINE ? len : SE_MAX_FIRST_LINE);
    size_t ln = nl != NULL ? (size_t)(nl - body) : len;
    if (ln == 0 || ln > SE_MAX_FIRST_LINE)
        return -1;
    json_t *o = json_loadb(body, ln, 0, NULL);
    const char *type = json_string_value(json_object_get(o, "type"));
    char err[128];
    int rc = type != NULL && strcmp(type, "batch") == 0
                 ? identity(json_string_value(json_object_get(o, "worker")),
                            json_string_value(json_object_get(o, "bootstrap")), out, cap, err, sizeof(err))
                 : -1;
    json_decref(o);
    return rc;
}

void pdr_shim_worker_key(const pdr_key_t *master, const char *id, pdr_key_t *out)
{
    char label[sizeof(SE_LABEL) + PDR_SHIM_IDENTITY_MAX];
    int n = snprintf(label, sizeof(label), SE_LABEL "%s", id);
    pdr_key_derive(master, label, n > 0 && (size_t)n < sizeof(label) ? (size_t)n : 0, out);
}

int pdr_shim_derive_cli(const char *key_file, const char *worker, FILE *out, FILE *errf)
{
    char id[PDR_SHIM_IDENTITY_MAX], err[256];
    if (pdr_shim_identity_of(worker, id, sizeof(id), err, sizeof(err)) != 0) {
        fprintf(errf, "pdrouter: --derive-shim-key: %s: %s\n", worker, err);
        return 2;
    }
    pdr_keyring_t kr;
    if (pdr_keyring_load(&kr, &key_file, 1, err, sizeof(err)) != 0) {
        fprintf(errf, "pdrouter: --derive-shim-key: %s\n", err);
        return 2;
    }
    pdr_key_t k;
    pdr_shim_worker_key(&kr.keys[0], id, &k);
    fprintf(out, "%.*s\n", (int)k.len, (const char *)k.secret);
    fprintf(errf, "pdrouter: the shim events key of %s (key id %s, from master key %s)\n", id, k.id,
            kr.keys[0].id);
    OPENSSL_cleanse(&k, sizeof(k));
    pdr_keyring_wipe(&kr);
    return 0;
}

/* A 64-bit FNV-1a hash of a worker identity (which only its key holder can claim). */
static uint64_t who_hash(const char *id)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *id; id++)
        h = (h ^ (unsigned char)*id) * 0x100000001b3ull;
    return h | 1; /* never 0 */
}

int pdr__shim_verify(const pdr_config_t *c, const char *hdr, size_t hdr_len, const char *body, size_t len,
                     uint64_t *hi, uint64_t *lo)
{
    if (hdr == NULL)
        return PDR_SE_UNSIGNED;
    h2o_iovec_t hv = h2o_iovec_init(hdr, hdr_len);
    sighdr_t s;
    int64_t ts, seq;
    if (parse_sig(hv.base, hv.len, &s) != 0 || s.inst_n != 32 || parse_hex64(s.inst, 16, hi) != 0 ||
        parse_hex64(s.inst + 16, 16, lo) != 0 || pdr_parse_int64(s.ts, s.ts_n, 0, INT64_MAX, &ts) != 0 ||
        pdr_parse_int64(s.seq, s.seq_n, 1, INT64_MAX, &seq) != 0)
        return PDR_SE_UNSIGNED;
    /* The worker the batch names, and the key derived for it from each master key of the ring (rotation):
     * the key id must be one of those, so a key of another worker (or the master) cannot sign for it. */
    char id[PDR_SHIM_IDENTITY_MAX];
    if (pdr_shim_batch_identity(body, len, id, sizeof(id)) != 0)
        return PDR_SE_MALFORMED;
    pdr_key_t key;
    int found = 0, shared = 0;
    for (size_t i = 0; i < S.kr.n && !found; i++) {
        shared |= s.kid_n == PDR_KEY_ID_LEN && memcmp(s.kid, S.kr.keys[i].id, PDR_KEY_ID_LEN) == 0;
        pdr_shim_worker_key(&S.kr.keys[i], id, &key);
        found = s.kid_n == PDR_KEY_ID_LEN && memcmp(s.kid, key.id, PDR_KEY_ID_LEN) == 0;
    }
    if (!found) {
        OPENSSL_cleanse(&key, sizeof(key));
        return shared ? PDR_SE_SHARED_KEY : PDR_SE_WRONG_WORKER;
    }
    const pdr_key_t *k = &key;
    uint8_t want[PDR_HMAC_LEN], got[PDR_HMAC_LEN + 2];
    if (pdr_b64url_decode(s.mac, s.mac_n, got, sizeof(got)) != PDR_HMAC_LEN) {
        OPENSSL_cleanse(&key, sizeof(key));
        return PDR_SE_BAD_SIGNATURE;
    }
    size_t pre_n = 14 + s.ts_n + 1 + 32 + 1 + s.seq_n + 1;
    char *msg = malloc(pre_n + len + 1);
    if (msg == NULL) {
        OPENSSL_cleanse(&key, sizeof(key));
        return PDR_SE_TOO_BIG;
    }
    int w = snprintf(msg, pre_n + 1, "pdr-events-v1\n%.*s\n%.*s\n%.*s\n", (int)s.ts_n, s.ts, 32, s.inst,
                     (int)s.seq_n, s.seq);
    if (w < 0 || (size_t)w != pre_n) {
        free(msg);
        OPENSSL_cleanse(&key, sizeof(key));
        return PDR_SE_UNSIGNED;
    }
    if (len > 0)
        memcpy(msg + pre_n, body, len);
    pdr_hmac_sha256(k, msg, pre_n + len, want);
    free(msg);
    OPENSSL_cleanse(&key, sizeof(key));
    if (!pdr_ct_equal(want, got, PDR_HMAC_LEN))
        return PDR_SE_BAD_SIGNATURE;
    uint64_t now = pdr_wall_us() / 1000, skew = (uint64_t)c->shim_events.max_skew_ms;
    if ((uint64_t)ts + skew < now || (uint64_t)ts > now + skew)
        return PDR_SE_STALE;
    /* Replay: the highest sequence number per instance of a worker. */
    uint64_t who = who_hash(id);
    int cause = -1;
    size_t live = 0; /* the worker's other instances within the skew window */
    pthread_mutex_lock(&S.lock);
    sender_t *hit = NULL, *free_slot = NULL;
    for (size_t i = 0; i < SE_INSTANCES; i++) {
        sender_t *e = &S.senders[i];
        if (e->last_ms != 0 && e->who == who && e->hi == *hi && e->lo == *lo) {
            hit = e;
            break;
        }
        int old = e->last_ms == 0 || e->last_ms + skew < now;
        live += !old && e->who == who;
        if (free_slot == NULL && old)
            free_slot = e;
    }
    if (hit != NULL && (uint64_t)seq <= hit->seq) {
        cause = PDR_SE_REPLAYED;
    } else if (hit == NULL && live >= PDR_SHIM_MAX_INSTANCES) {
        cause = PDR_SE_TOO_MANY_INST;
    } else if (hit == NULL && free_slot == NULL) {
        cause = PDR_SE_TOO_BIG; /* more live senders than the table holds */
    } else {
        if (hit == NULL) {
            hit = free_slot;
            hit->who = who;
            hit->hi = *hi;
            hit->lo = *lo;
        }
        hit->seq = (uint64_t)seq;
        hit->last_ms = now;
    }
    pthread_mutex_unlock(&S.lock);
    return cause;
}

/* ---- rooms ---- */

static size_t room_slot(uint64_t room)
{
    return (size_t)((room * 0x9E3779B97F4A7C15ull) >> 51) & (SE_ROOMS - 1);
}

/* Under S.lock: the record of room, or NULL. */
static room_rec_t *room_find(uint64_t room)
{
    size_t i = room_slot(room);
    for (size_t k = 0; k < SE_PROBE; k++, i = (i + 1) & (SE_ROOMS - 1)) {
        room_rec_t *e = &S.rooms[i];
        if (e->state == 0)
            return NULL;
        if (e->state == 1 && e->room == room)
            return e;
    }
    return NULL;
}

void pdr_shim_room_open(pdr_router_t *r, uint64_t room)
{
    pdr_shim_room_own(r, room, NULL, NULL, NULL);
}

void pdr_shim_room_own(pdr_router_t *r, uint64_t room, pdr_thread_t *t, void *owner, pdr_shim_room_cb cb)
{
    (void)r;
    if (!S.on)
        return;
    pthread_mutex_lock(&S.lock);
    room_rec_t *e = room_find(room);
    if (e == NULL) {
        size_t i = room_slot(room);
        for (size_t k = 0; k < SE_PROBE; k++, i = (i + 1) & (SE_ROOMS - 1))
            if (S.rooms[i].state != 1) {
                e = &S.rooms[i];
                break;
            }
    }
    if (e != NULL) {
        memset(e, 0, sizeof(*e));
        e->state = 1;
        e->room = room;
        e->t = t;
        e->owner = owner;
        e->cb = cb;
    } else {
        ADD(S.untracked, 1);
    }
    pthread_mutex_unlock(&S.lock);
}

void pdr_shim_room_take(pdr_router_t *r, uint64_t room, char *out, size_t cap)
{
    (void)r;
    out[0] = '\0';
    if (!S.on)
        return;
    room_rec_t rec;
    pthread_mutex_lock(&S.lock);
    room_rec_t *e = room_find(room);
    if (e != NULL) {
        rec = *e;
        e->state = 2;
    }
    pthread_mutex_unlock(&S.lock);
    if (e == NULL || rec.seen == 0)
        return;
    char evs[80] = "";
    size_t n = 0;
    for (int k = 0; k < EV__COUNT; k++)
        if (rec.seen & (1u << k)) {
            int w = snprintf(evs + n, sizeof(evs) - n, "%s\"%s\"", n ? "," : "", ev_names[k]);
            if (w > 0 && (size_t)w < sizeof(evs) - n)
                n += (size_t)w;
        }
    /* backend and reason come from shims: only [A-Za-z0-9_ .:-] is kept (see record_room). */
    snprintf(out, cap,
             ",\"kv_events\":{\"events\":[%s],\"bytes\":%" PRIu64 ",\"total\":%" PRIu64 ",\"usec\":%" PRIu64
             ",\"backend\":%s%s%s,\"failed\":%s%s%s}",
             evs, rec.bytes, rec.total, rec.usec, rec.backend[0] ? "\"" : "",
             rec.backend[0] ? rec.backend : "null", rec.backend[0] ? "\"" : "",
             rec.seen & (1u << EV_FAILED) ? "\"" : "", rec.seen & (1u << EV_FAILED) ? rec.reason : "null",
             rec.seen & (1u << EV_FAILED) ? "\"" : "");
}

static void copy_safe(char *dst, size_t cap, const char *src)
{
    size_t n = 0;
    for (; src != NULL && *src && n + 1 < cap; src++) {
        char ch = *src;
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '_' || ch == ' ' || ch == '.' || ch == ':' || ch == '-';
        dst[n++] = ok ? ch : '_';
    }
    dst[n] = '\0';
}

static uint64_t jint(const json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) && json_integer_value(v) >= 0 ? (uint64_t)json_integer_value(v) : 0;
}

/* A room line: 0, or -1 when malformed. */
static int record_room(const json_t *o, const char *worker_id)
{
    json_t *jr = json_object_get(o, "room");
    const char *ev = json_string_value(json_object_get(o, "event"));
    if (!json_is_integer(jr) || json_integer_value(jr) < 0 || ev == NULL)
        return -1;
    int k = 0;
    while (k < EV__COUNT && strcmp(ev_names[k], ev) != 0)
        k++;
    if (k == EV__COUNT)
        return -1;
    uint64_t room = (uint64_t)json_integer_value(jr);
    const char *role = json_string_value(json_object_get(o, "role"));
    ADD(S.events[k], 1);
    if (k == EV_FAILED) /* reacting is the KV failure path's; until then, counted by the reporting side */
        ADD(S.kv_failed[role != NULL && strcmp(role, "decode") == 0], 1);
    json_t *code = json_object_get(o, "code");
    recent_t rc = {.time_ms = pdr_wall_us() / 1000, .room = room, .ev = k};
    rc.bytes = jint(o, "bytes");
    rc.usec = jint(o, "usec");
    rc.code = json_is_integer(code) ? (int)json_integer_value(code) : 0;
    copy_safe(rc.backend, sizeof(rc.backend), json_string_value(json_object_get(o, "backend")));
    copy_safe(rc.reason, sizeof(rc.reason), json_string_value(json_object_get(o, "reason")));
    copy_safe(rc.worker, sizeof(rc.worker), worker_id);
    pdr_thread_t *wake = NULL;
    pthread_mutex_lock(&S.lock);
    room_rec_t *e = room_find(room);
    rc.matched = e != NULL;
    if (e != NULL) {
        e->seen |= 1u << k;
        if (rc.bytes > e->bytes)
            e->bytes = rc.bytes;
        uint64_t total = jint(o, "total");
        if (total > e->total)
            e->total = total;
        if (rc.usec > e->usec)
            e->usec = rc.usec;
        if (rc.backend[0])
            memcpy(e->backend, rc.backend, sizeof(e->backend));
        if (k == EV_FAILED || k == EV_REFUSED) {
            e->code = rc.code;
            snprintf(e->reason, sizeof(e->reason), "%s", rc.reason[0] ? rc.reason : ev);
        }
        if (e->owner != NULL && e->cb != NULL && (k == EV_DONE || k == EV_FAILED)) {
            wake = e->t;
            if (S.inbox_n < SE_INBOX) {
                inbox_msg_t *m = &S.inbox[S.inbox_n++];
                memset(m, 0, sizeof(*m));
                m->t = e->t;
                m->owner = e->owner;
                m->cb = e->cb;
                m->room = room;
                m->bytes = rc.bytes;
                m->usec = rc.usec;
                m->wall_us = pdr_wall_us();
                m->failed = k == EV_FAILED;
                m->code = rc.code;
                memcpy(m->backend, rc.backend, sizeof(m->backend));
                snprintf(m->reason, sizeof(m->reason), "%s", rc.reason[0] ? rc.reason : "shim_failed");
            } else {
                wake = NULL;
                ADD(S.inbox_full, 1); /* the request falls back on its KV deadline */
            }
        }
    }
    S.recent[S.recent_n++ % SE_RECENT] = rc;
    pthread_mutex_unlock(&S.lock);
    if (e == NULL)
        ADD(S.unmatched, 1);
    if (wake != NULL)
        uv_async_send(&wake->wakeup);
    return 0;
}

void pdr_shim_events_deliver(pdr_thread_t *t)
{
    for (;;) {
        inbox_msg_t mine[32];
        size_t n = 0;
        pthread_mutex_lock(&S.lock);
        for (size_t i = 0; i < S.inbox_n && n < 32;) {
            if (S.inbox[i].t == t) {
                mine[n++] = S.inbox[i];
                S.inbox[i] = S.inbox[--S.inbox_n];
            } else {
                i++;
            }
        }
        pthread_mutex_unlock(&S.lock);
        if (n == 0)
            return;
        for (size_t i = 0; i < n; i++) {
            /* The request is alive while it owns the room: it takes its rooms on this loop before it
             * ends, so a room still owned here means the pointer is good. */
            pthread_mutex_lock(&S.lock);
            room_rec_t *e = room_find(mine[i].room);
            int alive = e != NULL && e->owner == mine[i].owner && e->cb == mine[i].cb && e->t == t;
            pthread_mutex_unlock(&S.lock);
            if (alive)
                mine[i].cb(mine[i].owner, mine[i].room, mine[i].failed, mine[i].code, mine[i].bytes,
                           mine[i].usec, mine[i].wall_us, mine[i].backend, mine[i].reason);
        }
    }
}

/* ---- load and incarnations ---- */

static void new_incarnation(pdr_router_t *r, pdr_worker_t *w, uint64_t hi, uint64_t lo)
{
    uint64_t ohi = LOAD(w->load.inst_hi), olo = LOAD(w->load.inst_lo);
    STORE(w->load.inst_hi, hi);
    STORE(w->load.inst_lo, lo);
    if (ohi == 0 && olo == 0)
        return; /* the first report */
    ADD(w->load.epoch, 1);
    pdr_links_forget_worker(w); /* the old process's link state says nothing about the new one */
    ADD(w->load.restarts_total, 1);
    STORE(w->load.reserved, 0);
    STORE(w->load.reserved_rep, 0);
    /* Health back to its initial state: the checks of the old process say nothing about the new one. */
    pthread_mutex_lock(&r->pool.lock);
    w->health.consec_ok = w->health.consec_fail = 0;
    __atomic_store_n(&w->ejected, 0, __ATOMIC_RELAXED);
    pdr_outlier_reset(&w->outlier);
    __atomic_store_n(&w->health.healthy, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&r->pool.lock);
    pdr_info("worker %s (%s): new instance %016" PRIx64 "%016" PRIx64 " (was %016" PRIx64 "%016" PRIx64
             "): health, load and KV holds reset",
             w->id, w->target, hi, lo, ohi, olo);
    pdr_pool_record(&r->pool, w, "restarted: new shim instance %016" PRIx64 "%016" PRIx64, hi, lo);
}

static void apply_load(pdr_router_t *r, pdr_worker_t *w, const json_t *o, uint64_t hi, uint64_t lo)
{
    if (LOAD(w->load.inst_hi) != hi || LOAD(w->load.inst_lo) != lo)
        new_incarnation(r, w, hi, lo);
    STORE(w->load.kv_free_bytes, jint(o, "kv_free_bytes"));
    STORE(w->load.kv_total_bytes, jint(o, "kv_total_bytes"));
    STORE(w->load.kv_free_blocks, jint(o, "kv_free_blocks"));
    STORE(w->load.block_size, jint(o, "block_size"));
    STORE(w->load.kv_bytes_per_token, jint(o, "kv_bytes_per_token"));
    STORE(w->load.queue_depth, jint(o, "queue_depth"));
    STORE(w->load.active_rooms, jint(o, "active_rooms"));
    STORE(w->load.reserved_rep, LOAD(w->load.reserved));
    __atomic_store_n(&w->load.report_ms, pdr_now_ms(), __ATOMIC_RELEASE);
    ADD(S.loads, 1);
}

/* The workers the batch speaks for: the URL the router knows (normalized), or, when the batch names no URL,
 * the bootstrap host:port. */
static size_t match_workers(pdr_router_t *r, const char *url, const char *boot, pdr_worker_t **ws, size_t n,
                            pdr_worker_t **out, size_t cap)
{
    (void)r;
    pdr_worker_conf_t conf;
    char err[128];
    int have_url = url != NULL && pdr_worker_conf_parse_url(url, &conf, err, sizeof(err)) == 0;
    size_t k = 0;
    /* Only by the identity the batch's key was derived for: its URL when it names one, else its bootstrap. */
    int by_url = url != NULL && url[0] != '\0';
    for (size_t i = 0; i < n && k < cap; i++) {
        const pdr_worker_t *w = ws[i];
        int hit = have_url && strcmp(w->conf.url, conf.url) == 0;
        if (!by_url && boot != NULL && w->conf.bootstrap_port > 0) {
            char hp[320];
            snprintf(hp, sizeof(hp), "%s:%d", w->bootstrap_host, w->conf.bootstrap_port);
            hit = strcmp(hp, boot) == 0;
        }
        if (hit)
            out[k++] = ws[i];
    }
    if (have_url)
        pdr_worker_conf_clear(&conf);
    return k;
}

static void refuse(h2o_req_t *req, int cause)
{
    ADD(S.refused[cause], 1);
    const char *hint = "";
    if (cause == PDR_SE_WRONG_WORKER || cause == PDR_SE_SHARED_KEY)
        hint = ": a shim signs with its own worker's key, which `pdrouter --derive-shim-key KEY_FILE WORKER` "
               "derives from shim_events.key_file";
    else if (cause == PDR_SE_TOO_MANY_INST)
        hint = ": the worker has too many live instances; a new one is taken once an old one has been silent "
               "for shim_events.max_skew_ms";
    char msg[320];
    snprintf(msg, sizeof(msg), "shim event batch refused: %s%s", pdr_shim_refusal_names[cause], hint);
    /* Refusals that say a shim is misconfigured, or a worker misbehaves, are logged (at most one line per
     * cause every 10 s, with the count of those left out). Loop 0 only. */
    static uint64_t last_ms[PDR_SE__COUNT], quiet[PDR_SE__COUNT];
    if (cause == PDR_SE_WRONG_WORKER || cause == PDR_SE_SHARED_KEY || cause == PDR_SE_TOO_MANY_INST) {
        uint64_t now = pdr_now_ms();
        if (last_ms[cause] == 0 || now >= last_ms[cause] + 10000) {
            pdr_warn("%s (%" PRIu64 " more since the last such line)", msg, quiet[cause]);
            last_ms[cause] = now;
            quiet[cause] = 0;
        } else {
            quiet[cause]++;
        }
    }
    pdr_send_error(req,
                   cause == PDR_SE_MALFORMED       ? 400
                   : cause == PDR_SE_TOO_BIG       ? 413
                   : cause == PDR_SE_TOO_MANY_INST ? 429
                                                   : 401,
                   cause == PDR_SE_MALFORMED || cause == PDR_SE_TOO_BIG ? "invalid_request_error"
                   : cause == PDR_SE_TOO_MANY_INST                      ? "rate_limit_error"
                                                                        : "authentication_error",
                   msg, 0);
}

int pdr__shim_apply(pdr_router_t *r, const char *body, size_t len, uint64_t hi, uint64_t lo, size_t *n_lines,
                    int *known)
{
    /* Line 1: {"type":"batch","worker":URL,"bootstrap":"host:port","dropped":N}; then room and load lines. */
    const char *p = body, *end = body + len;
    pdr_worker_t **ws = NULL, *mine[16];
    size_t nw = pdr_pool_snapshot(&r->pool, -1, &ws), nmine = 0;
    size_t lines = 0, bad = 0;
    char wid[32] = "";
    while (p < end && lines < SE_MAX_LINES) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t ln = nl ? (size_t)(nl - p) : (size_t)(end - p);
        json_t *o = ln > 0 ? json_loadb(p, ln, 0, NULL) : NULL;
        p += ln + (nl != NULL);
        if (ln == 0)
            continue;
        const char *type = json_string_value(json_object_get(o, "type"));
        if (type == NULL) {
            bad++;
        } else if (lines == 0) {
            if (strcmp(type, "batch") != 0) {
                bad++;
            } else {
                nmine = match_workers(r, json_string_value(json_object_get(o, "worker")),
                                      json_string_value(json_object_get(o, "bootstrap")), ws, nw, mine, 16);
                if (nmine > 0)
                    snprintf(wid, sizeof(wid), "%s", mine[0]->id);
                else
                    ADD(S.unknown_worker, 1);
                ADD(S.shim_dropped, jint(o, "dropped"));
                for (size_t i = 0; i < nmine; i++)
                    ADD(mine[i]->load.dropped_total, jint(o, "dropped"));
            }
        } else if (strcmp(type, "room") == 0) {
            bad += record_room(o, wid) != 0;
        } else if (strcmp(type, "load") == 0) {
            for (size_t i = 0; i < nmine; i++)
                apply_load(r, mine[i], o, hi, lo);
        } else {
            bad++;
        }
        json_decref(o);
        if (bad > 0)
            break;
        lines++;
    }
    pdr_pool_release(ws, nw);
    *n_lines = lines;
    *known = nmine > 0;
    return bad > 0 || lines == 0 || p < end ? PDR_SE_MALFORMED : -1;
}

void pdr_shim_events_handle(pdr_router_t *r, h2o_req_t *req)
{
    if (!h2o_memis(req->method.base, req->method.len, H2O_STRLIT("POST"))) {
        pdr_send_error(req, 405, "invalid_request_error", "use POST", 0);
        return;
    }
    if (!S.on) {
        pdr_send_error(req, 403, "permission_error",
                       "shim events are off: set shim_events.key_file to accept signed batches", 0);
        return;
    }
    if (req->entity.len > SE_MAX_BODY) {
        refuse(req, PDR_SE_TOO_BIG);
        return;
    }
    uint64_t hi = 0, lo = 0;
    ssize_t hx = h2o_find_header_by_str(&req->headers, H2O_STRLIT("pdr-signature"), -1);
    int cause = pdr__shim_verify(r->config, hx >= 0 ? req->headers.entries[hx].value.base : NULL,
                                 hx >= 0 ? req->headers.entries[hx].value.len : 0, req->entity.base,
                                 req->entity.len, &hi, &lo);
    size_t lines = 0;
    int known = 0;
    if (cause < 0)
        cause = pdr__shim_apply(r, req->entity.base, req->entity.len, hi, lo, &lines, &known);
    if (cause >= 0) {
        refuse(req, cause);
        return;
    }
    ADD(S.batches, 1);
    pdr_send_json(req, 200, json_pack("{s:I,s:b}", "lines", (json_int_t)lines, "worker_known", known));
}

int pdr__shim_events_set_key(const void *secret, size_t len)
{
    int rc = pdr_keyring_add(&S.kr, secret, len);
    if (rc == 0)
        S.on = 1;
    return rc;
}

/* ---- views ---- */

json_t *pdr_shim_worker_json(const pdr_worker_t *w)
{
    uint64_t rep = __atomic_load_n(&w->load.report_ms, __ATOMIC_ACQUIRE);
    if (rep == 0)
        return NULL;
    char inst[33];
    snprintf(inst, sizeof(inst), "%016" PRIx64 "%016" PRIx64, LOAD(w->load.inst_hi), LOAD(w->load.inst_lo));
    uint64_t now = pdr_now_ms();
    return json_pack(
        "{s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "instance_id", inst, "last_report_ms_ago",
        (json_int_t)(now > rep ? now - rep : 0), "kv_free_bytes", (json_int_t)LOAD(w->load.kv_free_bytes),
        "kv_total_bytes", (json_int_t)LOAD(w->load.kv_total_bytes), "kv_free_blocks",
        (json_int_t)LOAD(w->load.kv_free_blocks), "block_size", (json_int_t)LOAD(w->load.block_size),
        "kv_bytes_per_token", (json_int_t)LOAD(w->load.kv_bytes_per_token), "queue_depth",
        (json_int_t)LOAD(w->load.queue_depth), "active_rooms", (json_int_t)LOAD(w->load.active_rooms),
        "kv_reserved_bytes", (json_int_t)LOAD(w->load.reserved), "restarts_total",
        (json_int_t)LOAD(w->load.restarts_total), "dropped_events_total",
        (json_int_t)LOAD(w->load.dropped_total));
}

json_t *pdr_shim_events_json(pdr_router_t *r)
{
    (void)r;
    json_t *ref = json_object(), *evs = json_object(), *recent = json_array();
    for (int k = 0; k < PDR_SE__COUNT; k++)
        json_object_set_new(ref, pdr_shim_refusal_names[k], json_integer((json_int_t)LOAD(S.refused[k])));
    for (int k = 0; k < EV__COUNT; k++)
        json_object_set_new(evs, ev_names[k], json_integer((json_int_t)LOAD(S.events[k])));
    pthread_mutex_lock(&S.lock);
    uint64_t n = S.recent_n < SE_RECENT ? S.recent_n : SE_RECENT;
    for (uint64_t i = S.recent_n - n; i < S.recent_n; i++) {
        const recent_t *e = &S.recent[i % SE_RECENT];
        json_array_append_new(
            recent, json_pack("{s:I,s:s,s:s,s:I,s:I,s:s,s:i,s:s,s:b,s:I}", "room", (json_int_t)e->room,
                              "worker", e->worker, "event", ev_names[e->ev], "bytes", (json_int_t)e->bytes,
                              "usec", (json_int_t)e->usec, "backend", e->backend, "code", e->code, "reason",
                              e->reason, "matched", e->matched, "time_ms", (json_int_t)e->time_ms));
    }
    pthread_mutex_unlock(&S.lock);
    return json_pack("{s:b,s:I,s:I,s:o,s:o,s:I,s:I,s:I,s:o}", "enabled", S.on, "batches",
                     (json_int_t)LOAD(S.batches), "load_reports", (json_int_t)LOAD(S.loads), "refused", ref,
                     "events", evs, "unmatched_events", (json_int_t)LOAD(S.unmatched),
                     "unknown_worker_batches", (json_int_t)LOAD(S.unknown_worker), "shim_dropped_events",
                     (json_int_t)LOAD(S.shim_dropped), "recent", recent);
}

void pdr_shim_events_metrics(pdr_router_t *r, pdr_shim_put_cb put, void *o)
{
    put(o,
        "# HELP pdr_shim_batches_total Signed shim event batches accepted.\n"
        "# TYPE pdr_shim_batches_total counter\npdr_shim_batches_total %" PRIu64 "\n",
        LOAD(S.batches));
    put(o, "# HELP pdr_shim_batches_refused_total Shim event batches refused, by cause.\n"
           "# TYPE pdr_shim_batches_refused_total counter\n");
    for (int k = 0; k < PDR_SE__COUNT; k++)
        put(o, "pdr_shim_batches_refused_total{cause=\"%s\"} %" PRIu64 "\n", pdr_shim_refusal_names[k],
            LOAD(S.refused[k]));
    put(o, "# HELP pdr_shim_room_events_total Room events reported by shims, by event.\n"
           "# TYPE pdr_shim_room_events_total counter\n");
    for (int k = 0; k < EV__COUNT; k++)
        put(o, "pdr_shim_room_events_total{event=\"%s\"} %" PRIu64 "\n", ev_names[k], LOAD(S.events[k]));
    put(o,
        "# HELP pdr_shim_room_events_unmatched_total Room events for no request in flight.\n"
        "# TYPE pdr_shim_room_events_unmatched_total counter\npdr_shim_room_events_unmatched_total %" PRIu64
        "\n",
        LOAD(S.unmatched));
    put(o,
        "# HELP pdr_shim_events_dropped_total Events shims dropped (their queue was full), as reported.\n"
        "# TYPE pdr_shim_events_dropped_total counter\npdr_shim_events_dropped_total %" PRIu64 "\n",
        LOAD(S.shim_dropped));
    put(o,
        "# HELP pdr_shim_kv_failures_total Rooms a shim reported failed, by the reporting role.\n"
        "# TYPE pdr_shim_kv_failures_total counter\npdr_shim_kv_failures_total{role=\"prefill\"} %" PRIu64
        "\npdr_shim_kv_failures_total{role=\"decode\"} %" PRIu64 "\n",
        LOAD(S.kv_failed[0]), LOAD(S.kv_failed[1]));
    static const char *const adm[4] = {"admitted", "other_decode", "waited", "refused"};
    put(o, "# HELP pdr_kv_admission_total Decode admission decisions by reported free KV.\n"
           "# TYPE pdr_kv_admission_total counter\n");
    for (int k = 0; k < 4; k++)
        put(o, "pdr_kv_admission_total{decision=\"%s\"} %" PRIu64 "\n", adm[k], LOAD(S.admission[k]));
    pdr_worker_t **ws;
    size_t nw = pdr_pool_snapshot(&r->pool, -1, &ws);
    static const char *const fam[][2] = {
        {"pdr_worker_kv_free_bytes", "KV bytes free, as the worker's shim last reported."},
        {"pdr_worker_kv_reserved_bytes", "KV bytes held by requests the router admitted to the worker."},
        {"pdr_worker_queue_depth", "Requests queued, as the worker's shim last reported."},
        {"pdr_worker_active_rooms", "KV rooms in progress, as the worker's shim last reported."},
        {"pdr_worker_load_report_age_seconds", "Seconds since the worker's shim last reported load."},
        {"pdr_worker_restarts_total", "New shim instances seen behind the worker (restarts)."},
    };
    uint64_t now = pdr_now_ms();
    for (size_t k = 0; k < sizeof(fam) / sizeof(fam[0]); k++) {
        put(o, "# HELP %s %s\n# TYPE %s %s\n", fam[k][0], fam[k][1], fam[k][0], k == 5 ? "counter" : "gauge");
        for (size_t i = 0; i < nw; i++) {
            const pdr_worker_t *w = ws[i];
            uint64_t rep = __atomic_load_n(&w->load.report_ms, __ATOMIC_ACQUIRE);
            if (rep == 0)
                continue;
            uint64_t v = k == 0   ? LOAD(w->load.kv_free_bytes)
                         : k == 1 ? LOAD(w->load.reserved)
                         : k == 2 ? LOAD(w->load.queue_depth)
                         : k == 3 ? LOAD(w->load.active_rooms)
                         : k == 4 ? (now > rep ? now - rep : 0)
                                  : LOAD(w->load.restarts_total);
            if (k == 4)
                put(o, "%s{worker=\"%s\",role=\"%s\"} %.3f\n", fam[k][0], w->target, pdr_role_name(w->role),
                    (double)v / 1e3);
            else
                put(o, "%s{worker=\"%s\",role=\"%s\"} %" PRIu64 "\n", fam[k][0], w->target,
                    pdr_role_name(w->role), v);
        }
    }
    pdr_pool_release(ws, nw);
}

/* ---- admission ---- */

static const pdr_jmember_t *member(const pdr_pdreq_t *pr, const char *key)
{
    size_t kl = strlen(key);
    for (size_t i = 0; i < pr->n; i++)
        if (!pr->m[i].key_escaped && pr->m[i].key_len == kl && memcmp(pr->m[i].key, key, kl) == 0)
            return &pr->m[i];
    return NULL;
}

/* The integer value of a member's raw text ("key": value), or -1. */
static int64_t member_int(const pdr_jmember_t *m, const char *sub)
{
    if (m == NULL)
        return -1;
    const char *colon = memchr(m->raw, ':', m->raw_len);
    if (colon == NULL)
        return -1;
    size_t off = (size_t)(colon + 1 - m->raw);
    json_t *v = json_loadb(colon + 1, m->raw_len - off, JSON_DECODE_ANY, NULL);
    json_t *x = sub != NULL ? json_object_get(v, sub) : v;
    int64_t out = json_is_integer(x) && json_integer_value(x) >= 0 ? (int64_t)json_integer_value(x) : -1;
    json_decref(v);
    return out;
}

uint64_t pdr_kv_need_tokens(const pdr_config_t *c, const pdr_pdreq_t *pr, size_t n_ids, size_t text_len)
{
    uint64_t prompt = n_ids > 0 ? n_ids
                                : (text_len + (size_t)c->kv_admission.prompt_bytes_per_token - 1) /
                                      (size_t)c->kv_admission.prompt_bytes_per_token;
    int64_t out = member_int(member(pr, "sampling_params"), "max_new_tokens");
    if (out < 0)
        out = member_int(member(pr, "max_completion_tokens"), NULL);
    if (out < 0)
        out = member_int(member(pr, "max_tokens"), NULL);
    if (out < 0)
        out = c->kv_admission.max_new_tokens;
    uint64_t items = pr->batch ? pr->batch : 1, gen;
    /* Saturated: a body may name up to 2^63-1 output tokens, and a wrapped sum would look small. */
    if (__builtin_mul_overflow((uint64_t)out, items, &gen) || __builtin_add_overflow(prompt, gen, &gen))
        return UINT64_MAX;
    return gen;
}

int pdr_kv_limited(const pdr_config_t *c, const pdr_worker_t *w)
{
    uint64_t rep = __atomic_load_n(&w->load.report_ms, __ATOMIC_ACQUIRE);
    return c->kv_admission.enabled && rep != 0 && LOAD(w->load.kv_bytes_per_token) != 0 &&
           pdr_now_ms() <= rep + SE_MAX_REPORT_AGE_MS;
}

int pdr_kv_admit(const pdr_config_t *c, pdr_worker_t *w, uint64_t need_tokens, pdr_kv_hold_t *h)
{
    memset(h, 0, sizeof(*h));
    uint64_t bpt = LOAD(w->load.kv_bytes_per_token);
    if (!pdr_kv_limited(c, w))
        return 1; /* not limited: no report (or a stale one), nothing to count in */
    uint64_t need;
    if (__builtin_mul_overflow(need_tokens, bpt, &need))
        need = UINT64_MAX;
    uint64_t total0 = LOAD(w->load.kv_total_bytes);
    if (need == UINT64_MAX || (total0 > 0 && need > total0))
        return -1; /* more than the worker's whole KV: waiting cannot help */
    uint64_t epoch = LOAD(w->load.epoch);
    for (;;) {
        uint64_t reserved = LOAD(w->load.reserved), at_rep = LOAD(w->load.reserved_rep);
        uint64_t free_b = LOAD(w->load.kv_free_bytes), total = LOAD(w->load.kv_total_bytes);
        /* The report's free KV less what was admitted since it; and, with a total, never more than the
         * total less every hold (the report may not count requests still on their way). */
        uint64_t since = reserved > at_rep ? reserved - at_rep : 0;
        uint64_t avail = free_b > since ? free_b - since : 0;
        if (total > 0) {
            uint64_t t2 = total > reserved ? total - reserved : 0;
            if (t2 < avail)
                avail = t2;
        }
        if (need > avail)
            return 0;
        if (__atomic_compare_exchange_n(&w->load.reserved, &reserved, reserved + need, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED))
            break;
    }
    h->w = w;
    h->bytes = need;
    h->epoch = epoch;
    return 1;
}

void pdr_kv_release(pdr_kv_hold_t *h)
{
    if (h->w == NULL || h->bytes == 0)
        return;
    if (LOAD(h->w->load.epoch) == h->epoch) {
        uint64_t cur = LOAD(h->w->load.reserved);
        while (!__atomic_compare_exchange_n(&h->w->load.reserved, &cur, cur > h->bytes ? cur - h->bytes : 0,
                                            0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            ;
    }
    h->w = NULL;
    h->bytes = 0;
}

void pdr_kv_count(int outcome)
{
    if (outcome >= 0 && outcome < 4)
        ADD(S.admission[outcome], 1);
}
