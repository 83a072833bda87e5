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
 *
 * This file holds the state, verification, per-worker keys, load reports and the handler; rooms are
 * shim_events_rooms.c's, the views and decode admission shim_events_views.c's.
 */
#include "reply.h"
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
#include "shim_events_internal.h"
#include "util.h"

struct pdr__shim_state pdr__shim = {.lock = PTHREAD_MUTEX_INITIALIZER};

int pdr_shim_events_init(pdr_router_t *r)
{
    const char *kf = r->config->shim_events.key_file;
    if (kf == NULL)
        return 0;
    char err[256];
    if (pdr_keyring_load(&pdr__shim.kr, &kf, 1, err, sizeof(err)) != 0) {
        pdr_error("shim_events.key_file: %s", err);
        return PDR_ECONFIG;
    }
    pdr__shim.on = 1;
    pdr_info("shim events: POST /shim/v1/events on the admin listener (key %s)", pdr__shim.kr.keys[0].id);
    return 0;
}

void pdr_shim_events_free(pdr_router_t *r)
{
    (void)r;
    pdr_keyring_wipe(&pdr__shim.kr);
    pdr__shim.on = 0;
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
    for (size_t i = 0; i < pdr__shim.kr.n && !found; i++) {
        shared |= s.kid_n == PDR_KEY_ID_LEN && memcmp(s.kid, pdr__shim.kr.keys[i].id, PDR_KEY_ID_LEN) == 0;
        pdr_shim_worker_key(&pdr__shim.kr.keys[i], id, &key);
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
    pthread_mutex_lock(&pdr__shim.lock);
    sender_t *hit = NULL, *free_slot = NULL;
    for (size_t i = 0; i < SE_INSTANCES; i++) {
        sender_t *e = &pdr__shim.senders[i];
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
    pthread_mutex_unlock(&pdr__shim.lock);
    return cause;
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
    STORE(w->load.kv_free_bytes, pdr__shim_jint(o, "kv_free_bytes"));
    STORE(w->load.kv_total_bytes, pdr__shim_jint(o, "kv_total_bytes"));
    STORE(w->load.kv_free_blocks, pdr__shim_jint(o, "kv_free_blocks"));
    STORE(w->load.block_size, pdr__shim_jint(o, "block_size"));
    STORE(w->load.kv_bytes_per_token, pdr__shim_jint(o, "kv_bytes_per_token"));
    STORE(w->load.queue_depth, pdr__shim_jint(o, "queue_depth"));
    STORE(w->load.active_rooms, pdr__shim_jint(o, "active_rooms"));
    STORE(w->load.reserved_rep, LOAD(w->load.reserved));
    STORE(w->load.inflight_rep, (int64_t)pdr_worker_inflight(w));
    __atomic_store_n(&w->load.report_ms, pdr_now_ms(), __ATOMIC_RELEASE);
    ADD(pdr__shim.loads, 1);
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
    ADD(pdr__shim.refused[cause], 1);
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
                    ADD(pdr__shim.unknown_worker, 1);
                ADD(pdr__shim.shim_dropped, pdr__shim_jint(o, "dropped"));
                for (size_t i = 0; i < nmine; i++)
                    ADD(mine[i]->load.dropped_total, pdr__shim_jint(o, "dropped"));
            }
        } else if (strcmp(type, "room") == 0) {
            bad += pdr__shim_record_room(o, wid) != 0;
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
    if (!pdr__shim.on) {
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
    ADD(pdr__shim.batches, 1);
    pdr_send_json(req, 200, json_pack("{s:I,s:b}", "lines", (json_int_t)lines, "worker_known", known));
}

int pdr__shim_events_set_key(const void *secret, size_t len)
{
    int rc = pdr_keyring_add(&pdr__shim.kr, secret, len);
    if (rc == 0)
        pdr__shim.on = 1;
    return rc;
}
