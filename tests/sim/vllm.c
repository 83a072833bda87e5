/*
 * pdsim in vLLM mode: the prefill that holds its KV for a remote decode under a lease, and the decode that
 * pulls it (the protocol is described below). The hold callback runs on a shim thread and only queues the
 * hold for the loop.
 */
#include "server_internal.h"

/*
 * A request that carries kv_transfer_params speaks vLLM's PD protocol (the fields of vLLM's NIXL
 * connector); one without them, the sglang one. The transfer itself is libpdshim's, as in sglang mode.
 *  - prefill, given {"do_remote_decode": true}: builds the KV, answers one token with kv_transfer_params
 *    {"do_remote_prefill": true, "do_remote_decode": false, "remote_engine_id", "remote_block_ids" (one
 *    shim room per item: the name of its held KV), "remote_host", "remote_port" (the shim's listener),
 *    "tp_size": 1}, and holds each item's KV (offered on the shim, owned by a vllm_hold_t, not by the HTTP
 *    request) until a decode pulls it or its lease runs out (kv_lease.c: --kv-lease-ms, renewed by the
 *    decode's heartbeats, as vLLM's NIXL connector leases KV to a remote decode). /pdsim/stats counts
 *    kv_held, kv_released (pulled), kv_expired (the lease ran out) and kv_hold_failed.
 *  - decode, given {"do_remote_prefill": true, "remote_host", "remote_port", "remote_block_ids"}: from its
 *    arrival until its pull ends (or the request does), heartbeats the prefill's leases every lease / 6;
 *    pulls each item's KV (after --kv-fetch-delay-ms), then generates from its digest, so the output
 *    equals --role both's.
 */

typedef struct vllm_hold {
    uint8_t *kv;
    size_t len;
    uint64_t room;
    int status;
    uint64_t bytes;
    pdr_dlink_t link;    /* sim__state.holds_done (under sim__state.qlock) */
    pdsim_lease_t lease; /* loop thread */
} vllm_hold_t;

#define VLLM_FAIL(...)                                                                                       \
    do {                                                                                                     \
        snprintf(err, errlen, __VA_ARGS__);                                                                  \
        return PDR_EINVAL;                                                                                   \
    } while (0)

int sim__vllm_parse(sim_req_t *ctx, const json_t *body, char *err, size_t errlen)
{
    json_t *kv = json_object_get(body, "kv_transfer_params");
    if (kv == NULL || json_is_null(kv) || ctx->role == PDSIM_ROLE_BOTH)
        return 0;
    if (!json_is_object(kv))
        VLLM_FAIL("kv_transfer_params must be an object");
    int remote_decode = json_is_true(json_object_get(kv, "do_remote_decode"));
    int remote_prefill = json_is_true(json_object_get(kv, "do_remote_prefill"));
    if (ctx->role == PDSIM_ROLE_PREFILL) {
        if (!remote_decode || remote_prefill)
            VLLM_FAIL("this pdsim is a prefill: kv_transfer_params needs do_remote_decode true and "
                      "do_remote_prefill not true");
        ctx->vllm = VLLM_PREFILL;
        for (size_t i = 0; i < ctx->n_items; i++) {
            uint64_t room = 0;
            if (pdr_random_bytes(&room, sizeof(room)) != 0)
                room = pdsim_mix64(uv_hrtime() + i);
            ctx->items[i].room = room & (uint64_t)INT64_MAX;
        }
        return 0;
    }
    if (!remote_prefill || remote_decode)
        VLLM_FAIL("this pdsim is a decode: kv_transfer_params needs do_remote_prefill true and "
                  "do_remote_decode not true");
    json_t *host = json_object_get(kv, "remote_host"), *port = json_object_get(kv, "remote_port");
    json_t *ids = json_object_get(kv, "remote_block_ids");
    if (!json_is_string(host) || !json_is_integer(port) || json_integer_value(port) < 1 ||
        json_integer_value(port) > 65535)
        VLLM_FAIL("kv_transfer_params.remote_host (a string) and remote_port (an integer) are required");
    if (!json_is_array(ids) || json_array_size(ids) != ctx->n_items)
        VLLM_FAIL("kv_transfer_params.remote_block_ids must be a list of %zu ids (one per item)",
                  ctx->n_items);
    for (size_t i = 0; i < ctx->n_items; i++) {
        json_t *id = json_array_get(ids, i);
        if (!json_is_integer(id) || json_integer_value(id) < 0)
            VLLM_FAIL("kv_transfer_params.remote_block_ids[%zu] must be a non-negative integer", i);
        ctx->items[i].room = (uint64_t)json_integer_value(id);
        ctx->items[i].host = json_string_value(host);
        ctx->items[i].port = (int)json_integer_value(port);
    }
    ctx->vllm = VLLM_DECODE;
    return 0;
}

/* A shim thread: a held KV's offer ended (pulled, expired, cancelled at shutdown). */
static void vllm_on_hold_done(void *arg, uint64_t room, int status, uint64_t bytes)
{
    vllm_hold_t *h = arg;
    (void)room;
    h->status = status;
    h->bytes = bytes;
    pthread_mutex_lock(&sim__state.qlock);
    pdr_dlink_push(&sim__state.holds_done, &h->link);
    pthread_mutex_unlock(&sim__state.qlock);
    uv_async_send(&sim__state.async);
}

void sim__vllm_drain_holds(void)
{
    pdr_dlink_t *done, *l;
    pthread_mutex_lock(&sim__state.qlock);
    pdr_dlink_move(&done, &sim__state.holds_done);
    pthread_mutex_unlock(&sim__state.qlock);
    while ((l = pdr_dlink_pop(&done)) != NULL) {
        vllm_hold_t *h = PDR_DLINK_ITEM(l, vllm_hold_t, link);
        pdsim_lease_drop(&h->lease);
        sim__state.kv_held--;
        if (h->status == 0) {
            sim__state.kv_released++;
            sim__state.kv_tx += h->bytes;
        } else if (h->lease.expired) {
            sim__state.kv_expired++;
            pdr_info("pdsim: KV of room %" PRIu64 " freed: its lease ran out (--kv-lease-ms %" PRId64
                     ", not renewed by a decode's heartbeat)",
                     h->room, sim__state.opts.kv_lease_ms);
        } else {
            sim__state.kv_hold_failed++;
        }
        free(h->kv);
        free(h);
    }
}

/* The prefill's KV is ready: hand each item's buffer to a hold, offer it, answer with kv_transfer_params.
 * With --stall-kv nothing is offered (a decode's pull times out). */
void sim__vllm_answer_prefill(sim_req_t *ctx)
{
    json_t *ids = json_array();
    for (size_t i = 0; i < ctx->n_items; i++) {
        sim_item_t *it = &ctx->items[i];
        json_array_append_new(ids, json_integer((json_int_t)it->room));
        if (sim__state.faults.stall_kv)
            continue;
        vllm_hold_t *h = calloc(1, sizeof(*h));
        if (h == NULL) {
            json_decref(ids);
            sim__req_fail(ctx, 503, "pdsim: out of memory");
            return;
        }
        h->kv = it->kv;
        h->len = it->kv_len;
        h->room = it->room;
        pdshim_seg_t seg = {h->kv, h->len};
        /* The lease, not the offer's deadline, bounds the hold: the offer waits as long as the shim can. */
        int r = pdshim_offer(sim__state.shim, h->room, &seg, 1, UINT32_MAX, vllm_on_hold_done, h);
        if (r != 0) {
            free(h);
            sim__state.kv_hold_failed++;
            json_decref(ids);
            char msg[160];
            snprintf(msg, sizeof(msg), "pdsim: cannot hold the KV of room %" PRIu64 ": PDR_%s", it->room,
                     pdr_errname(r));
            sim__req_fail(ctx, 500, msg);
            return;
        }
        it->kv = NULL; /* the hold owns it now */
        pdsim_lease_grant(&h->lease, h->room);
        sim__state.kv_held++;
    }
    ctx->vllm_kv =
        json_pack("{s:b,s:b,s:s,s:o,s:s,s:i,s:i}", "do_remote_prefill", 1, "do_remote_decode", 0,
                  "remote_engine_id", sim__state.engine_id, "remote_block_ids", ids, "remote_host",
                  sim__state.opts.host, "remote_port", sim__state.opts.bootstrap_port, "tp_size", 1);
    sim__send_final(ctx, ctx->max_tokens);
}

/* kv_lease.c: a held KV's lease ran out; cancelling the offer frees the KV (sim__vllm_drain_holds counts it).
 */
void sim__vllm_lease_expired(pdsim_lease_t *ls)
{
    if (sim__state.shim != NULL)
        pdshim_cancel(sim__state.shim, ls->room);
}

/* A vLLM decode's heartbeat for the rooms it will pull (all from one prefill). */
static void vllm_heartbeat(const sim_req_t *ctx)
{
    uint64_t rooms[64];
    size_t n = 0;
    for (size_t i = 0; i < ctx->n_items; i++) {
        rooms[n++] = ctx->items[i].room;
        if (n == sizeof(rooms) / sizeof(rooms[0]) || i + 1 == ctx->n_items) {
            pdsim_lease_heartbeat(ctx->items[0].host, ctx->items[0].port, rooms, n);
            n = 0;
        }
    }
}

/* kv_lease.c's tick on a decode: every request that still waits for its KV renews its leases. */
void sim__vllm_heartbeat_tick(void)
{
    for (pdr_dlink_t *l = sim__state.reqs.head; l != NULL; l = l->next) {
        sim_req_t *ctx = PDR_DLINK_ITEM(l, sim_req_t, link);
        if (ctx->lease_hb && sim__req_is_live(ctx))
            vllm_heartbeat(ctx);
    }
}

/* stall_kv_from_port: one link's transfers stall (the prefill on that port serves other decodes, this
 * decode pulls from other prefills). The request fails as a stalled pull would, at --kv-timeout-ms. */
static int stalled_link(const sim_req_t *ctx)
{
    for (size_t i = 0; sim__state.faults.stall_kv_from_port > 0 && i < ctx->n_items; i++)
        if (ctx->items[i].port == sim__state.faults.stall_kv_from_port)
            return 1;
    return 0;
}

/* fail_kv_from_port: one link's KV fetches fail at once (the decode answers 500 before its first token);
 * the prefill on that port serves other decodes, this decode pulls from other prefills. */
static int failed_link(const sim_req_t *ctx)
{
    for (size_t i = 0; sim__state.faults.fail_kv_from_port > 0 && i < ctx->n_items; i++)
        if (ctx->items[i].port == sim__state.faults.fail_kv_from_port)
            return 1;
    return 0;
}

static void on_fetch_delay(uv_timer_t *t)
{
    sim_req_t *ctx = t->data;
    if (!sim__req_is_live(ctx))
        return;
    if (failed_link(ctx) && !ctx->started) {
        char msg[160];
        snprintf(msg, sizeof(msg),
                 "KV transfer failed for room %" PRIu64 ": PDR_EIO (--fail-kv-from-port %lld: injected)",
                 ctx->items[0].room, (long long)sim__state.faults.fail_kv_from_port);
        sim__state.kv_link_failures++;
        sim__req_fail(ctx, 500, msg);
        return;
    }
    if (stalled_link(ctx))
        uv_timer_start(&ctx->timer, sim__on_stall_timeout, (uint64_t)sim__state.opts.kv_timeout_ms, 0);
    else
        sim__start_transfers(ctx);
}

/* A decode pulls the KV, after --kv-fetch-delay-ms (a decode whose scheduler is busy). */
void sim__decode_fetch(sim_req_t *ctx)
{
    if (ctx->vllm == VLLM_DECODE) {
        /* vLLM's decode heartbeats a request's leases from its arrival (not its scheduling) on. */
        ctx->lease_hb = 1;
        vllm_heartbeat(ctx);
    }
    if (ctx->stream && ctx->role == PDSIM_ROLE_DECODE && sim__state.faults.stream_head_before_kv) {
        /* An engine whose stream begins before its first token: headers and an SSE comment now. */
        ctx->kv_wait = 1;
        sim__start_stream_response(ctx);
        uv_timer_start(&ctx->peek, sim__on_peek, SIM_PEEK_MS,
                       SIM_PEEK_MS); /* a client close, while no byte goes */
        static const char head[] = ": pdsim: waiting for the KV\n\n";
        ctx->send.len = 0;
        if (sim__sendbuf_append(ctx, head, sizeof(head) - 1) == 0) {
            h2o_iovec_t buf = h2o_iovec_init(ctx->send.p, ctx->send.len);
            ctx->sending = 1;
            h2o_send(ctx->req, &buf, 1, H2O_SEND_STATE_IN_PROGRESS);
        }
    }
    if (sim__state.opts.kv_fetch_delay_ms > 0)
        uv_timer_start(&ctx->timer, on_fetch_delay, (uint64_t)sim__state.opts.kv_fetch_delay_ms, 0);
    else
        on_fetch_delay(&ctx->timer);
}

void sim__vllm_stats(json_t *o)
{
    if (sim__state.opts.role != PDSIM_ROLE_BOTH)
        pdsim_lease_stats(o);
    json_object_set_new(o, "kv_held", json_integer((json_int_t)sim__state.kv_held));
    json_object_set_new(o, "kv_released", json_integer((json_int_t)sim__state.kv_released));
    json_object_set_new(o, "kv_expired", json_integer((json_int_t)sim__state.kv_expired));
    json_object_set_new(o, "kv_hold_failed", json_integer((json_int_t)sim__state.kv_hold_failed));
}
