/*
 * The shim events seen from outside (see shim_events.c): a worker's and the router's admin views, the
 * metrics, and decode admission by the free KV the shims report.
 */
#include "rewrite.h"
#include "shim_events_views.h"

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
#include "pool_load.h"
#include "router.h"
#include "shim_events_internal.h"
#include "util.h"

/* ---- views ---- */

const char *const pdr_shim_refusal_names[PDR_SE__COUNT] = {"unsigned", "wrong_worker", "bad_signature",
                                                           "stale",    "replayed",     "malformed",
                                                           "too_big",  "shared_key",   "too_many_instances"};

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
        json_object_set_new(ref, pdr_shim_refusal_names[k],
                            json_integer((json_int_t)LOAD(pdr__shim.refused[k])));
    for (int k = 0; k < EV__COUNT; k++)
        json_object_set_new(evs, pdr__shim_ev_names[k], json_integer((json_int_t)LOAD(pdr__shim.events[k])));
    pthread_mutex_lock(&pdr__shim.lock);
    uint64_t n = pdr__shim.recent_n < SE_RECENT ? pdr__shim.recent_n : SE_RECENT;
    for (uint64_t i = pdr__shim.recent_n - n; i < pdr__shim.recent_n; i++) {
        const recent_t *e = &pdr__shim.recent[i % SE_RECENT];
        json_array_append_new(recent,
                              json_pack("{s:I,s:s,s:s,s:I,s:I,s:s,s:i,s:s,s:b,s:I}", "room",
                                        (json_int_t)e->room, "worker", e->worker, "event",
                                        pdr__shim_ev_names[e->ev], "bytes", (json_int_t)e->bytes, "usec",
                                        (json_int_t)e->usec, "backend", e->backend, "code", e->code, "reason",
                                        e->reason, "matched", e->matched, "time_ms", (json_int_t)e->time_ms));
    }
    pthread_mutex_unlock(&pdr__shim.lock);
    return json_pack("{s:b,s:I,s:I,s:o,s:o,s:I,s:I,s:I,s:o}", "enabled", pdr__shim.on, "batches",
                     (json_int_t)LOAD(pdr__shim.batches), "load_reports", (json_int_t)LOAD(pdr__shim.loads),
                     "refused", ref, "events", evs, "unmatched_events", (json_int_t)LOAD(pdr__shim.unmatched),
                     "unknown_worker_batches", (json_int_t)LOAD(pdr__shim.unknown_worker),
                     "shim_dropped_events", (json_int_t)LOAD(pdr__shim.shim_dropped), "recent", recent);
}

void pdr_shim_events_metrics(pdr_router_t *r, pdr_shim_put_cb put, void *o)
{
    put(o,
        "# HELP pdr_shim_batches_total Signed shim event batches accepted.\n"
        "# TYPE pdr_shim_batches_total counter\npdr_shim_batches_total %" PRIu64 "\n",
        LOAD(pdr__shim.batches));
    put(o, "# HELP pdr_shim_batches_refused_total Shim event batches refused, by cause.\n"
           "# TYPE pdr_shim_batches_refused_total counter\n");
    for (int k = 0; k < PDR_SE__COUNT; k++)
        put(o, "pdr_shim_batches_refused_total{cause=\"%s\"} %" PRIu64 "\n", pdr_shim_refusal_names[k],
            LOAD(pdr__shim.refused[k]));
    put(o, "# HELP pdr_shim_room_events_total Room events reported by shims, by event.\n"
           "# TYPE pdr_shim_room_events_total counter\n");
    for (int k = 0; k < EV__COUNT; k++)
        put(o, "pdr_shim_room_events_total{event=\"%s\"} %" PRIu64 "\n", pdr__shim_ev_names[k],
            LOAD(pdr__shim.events[k]));
    put(o,
        "# HELP pdr_shim_room_events_unmatched_total Room events for no request in flight.\n"
        "# TYPE pdr_shim_room_events_unmatched_total counter\npdr_shim_room_events_unmatched_total %" PRIu64
        "\n",
        LOAD(pdr__shim.unmatched));
    put(o,
        "# HELP pdr_shim_events_dropped_total Events shims dropped (their queue was full), as reported.\n"
        "# TYPE pdr_shim_events_dropped_total counter\npdr_shim_events_dropped_total %" PRIu64 "\n",
        LOAD(pdr__shim.shim_dropped));
    put(o,
        "# HELP pdr_shim_kv_failures_total Rooms a shim reported failed, by the reporting role.\n"
        "# TYPE pdr_shim_kv_failures_total counter\npdr_shim_kv_failures_total{role=\"prefill\"} %" PRIu64
        "\npdr_shim_kv_failures_total{role=\"decode\"} %" PRIu64 "\n",
        LOAD(pdr__shim.kv_failed[0]), LOAD(pdr__shim.kv_failed[1]));
    static const char *const adm[4] = {"admitted", "other_decode", "waited", "refused"};
    put(o, "# HELP pdr_kv_admission_total Decode admission decisions by reported free KV.\n"
           "# TYPE pdr_kv_admission_total counter\n");
    for (int k = 0; k < 4; k++)
        put(o, "pdr_kv_admission_total{decision=\"%s\"} %" PRIu64 "\n", adm[k], LOAD(pdr__shim.admission[k]));
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

/* A shim's recent report with kv_bytes_per_token: admission counts bytes. */
static int shim_limited(const pdr_config_t *c, const pdr_worker_t *w)
{
    uint64_t rep = __atomic_load_n(&w->load.report_ms, __ATOMIC_ACQUIRE);
    return c->kv_admission.enabled && rep != 0 && LOAD(w->load.kv_bytes_per_token) != 0 &&
           pdr_now_ms() <= rep + SE_MAX_REPORT_AGE_MS;
}

/* No shim report, but the engine's fresh answer to the load poll says its KV usage (load.kv_usage_max_percent
 * on): admission compares that usage with the key. */
static int engine_limited(const pdr_config_t *c, const pdr_worker_t *w)
{
    return c->kv_admission.enabled && c->load.kv_usage_max_percent > 0 && LOAD(w->engine.kv_usage_ppm) >= 0 &&
           pdr_worker_engine_fresh(w, c->load.poll_ms, c->load.timeout_ms, pdr_now_ms());
}

int pdr_kv_limited(const pdr_config_t *c, const pdr_worker_t *w)
{
    return shim_limited(c, w) || engine_limited(c, w);
}

int pdr_kv_admit(const pdr_config_t *c, pdr_worker_t *w, uint64_t need_tokens, pdr_kv_hold_t *h)
{
    memset(h, 0, sizeof(*h));
    uint64_t bpt = LOAD(w->load.kv_bytes_per_token);
    if (!shim_limited(c, w)) {
        /* The engine's usage, where it is known, is a yes or no: no bytes to hold (the shim's report, the
         * precise source, decides where there is one). Else not limited: nothing to count in. */
        if (engine_limited(c, w))
            return LOAD(w->engine.kv_usage_ppm) < (int64_t)c->load.kv_usage_max_percent * 10000 ? 1 : 0;
        return 1;
    }
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
        ADD(pdr__shim.admission[outcome], 1);
}
