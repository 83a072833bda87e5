/*
 * pdsim's KV: the simulated compute (the KV built and hashed inline, or on the uv thread pool above
 * SIM_INLINE_KV), the offers and fetches through libpdshim (whole, or in parts with --kv-parts), the
 * completions brought back to the loop, the prefix cache after a prefill. on_shim_done() runs on a shim
 * thread: it only queues the item under sim__state.qlock and wakes the loop (sim__on_async()).
 */
#include "server_internal.h"

static void kv_compute(sim_req_t *ctx, int fill)
{
    size_t bpt = (size_t)sim__state.opts.kv_bytes_per_token;
    for (size_t i = 0; i < ctx->n_items; i++) {
        sim_item_t *it = &ctx->items[i];
        if (fill)
            pdsim_kv_fill(it->toks.ids, it->toks.n, bpt, sim__state.layout, it->kv);
        pdsim_gen_init(&it->gen, pdsim_kv_digest(it->kv, it->toks.n, bpt) ^ sim__state.layout, it->toks.ids,
                       it->toks.n, bpt, sim__state.layout);
    }
}

static void kv_work_cb(uv_work_t *w)
{
    sim_req_t *ctx = w->data;
    kv_compute(ctx, ctx->role != PDSIM_ROLE_DECODE);
}

static void after_compute(sim_req_t *ctx);

static void kv_after_work_cb(uv_work_t *w, int status)
{
    sim_req_t *ctx = w->data;
    (void)status;
    if (sim__req_is_live(ctx)) {
        if (sim__state.shutting_down)
            sim__req_fail(ctx, 503, "pdsim is shutting down");
        else
            after_compute(ctx);
    }
    sim__req_unref(ctx);
}

void sim__compute_then_continue(sim_req_t *ctx)
{
    size_t total = 0;
    for (size_t i = 0; i < ctx->n_items; i++)
        total += ctx->items[i].kv_len;
    if (total <= SIM_INLINE_KV) {
        kv_compute(ctx, ctx->role != PDSIM_ROLE_DECODE);
        after_compute(ctx);
        return;
    }
    ctx->work.data = ctx;
    ctx->refs++;
    if (uv_queue_work(sim__state.loop, &ctx->work, kv_work_cb, kv_after_work_cb) != 0) {
        ctx->refs--;
        sim__req_fail(ctx, 500, "pdsim: cannot queue the KV computation");
    }
}

static void on_shim_done(void *arg, uint64_t room, int status, uint64_t bytes)
{
    sim_item_t *it = arg;
    (void)room;
    it->status = status;
    it->bytes = bytes;
    pthread_mutex_lock(&sim__state.qlock);
    pdr_dqueue_append(&sim__state.done_items, &it->qlink);
    pthread_mutex_unlock(&sim__state.qlock);
    uv_async_send(&sim__state.async);
}

/* The prefill's KV has left: its answer (after --prefill-answer-lag-ms). */
static void prefill_answer(sim_req_t *ctx)
{
    if (!sim__req_is_live(ctx))
        return;
    if (sim__state.faults.fail_after_kv != 0) {
        sim__req_fail(ctx, sim__state.faults.fail_after_kv, "pdsim: fault knob fail_after_kv");
        return;
    }
    sim__send_final(ctx, 0);
}

static void on_prefill_answer(uv_timer_t *t)
{
    prefill_answer(t->data);
}

static void transfers_done(sim_req_t *ctx)
{
    ctx->lease_hb = 0; /* the pull ended: vLLM's decode stops heartbeating when its transfer completes */
    if (!sim__req_is_live(ctx))
        return;
    if (ctx->op_error != 0 && ctx->started) {
        /* stream_head_before_kv: the answer has begun; it can only be broken off. */
        ctx->abort_pending = 1;
        sim__pump(ctx);
        return;
    }
    if (ctx->op_error != 0) {
        char msg[256];
        int why = sim__ticket_reason(ctx->op_error);
        if (why >= 0) {
            /* The shim refused the ticket before anything moved (replay, mostly: the rest was checked
             * when the request arrived). */
            sim__state.ticket_refused[why]++;
            snprintf(msg, sizeof(msg), "pdsim: pd_ticket refused (%s) for room %" PRIu64 ": %s",
                     sim__ticket_reasons[why], ctx->op_error_room, pdshim_strerror(ctx->op_error));
            sim__req_fail(ctx, 403, msg);
            return;
        }
        snprintf(msg, sizeof(msg), "KV transfer failed for room %" PRIu64 ": PDR_%s (%s)", ctx->op_error_room,
                 pdr_errname(ctx->op_error), pdr_strerror(ctx->op_error));
        sim__req_fail(ctx, 500, msg);
        return;
    }
    if (ctx->role == PDSIM_ROLE_PREFILL) {
        if (sim__state.opts.prefill_answer_lag_ms > 0) {
            uv_timer_start(&ctx->timer, on_prefill_answer, (uint64_t)sim__state.opts.prefill_answer_lag_ms,
                           0);
            return;
        }
        prefill_answer(ctx);
        return;
    }
    sim__compute_then_continue(ctx); /* decode: hash what arrived */
}

static void item_done(sim_item_t *it)
{
    sim_req_t *ctx = it->ctx;
    it->op_pending = 0;
    ctx->ops_pending--;
    if (it->status == 0) {
        if (ctx->role == PDSIM_ROLE_PREFILL && ctx->compute_end_us > 0) {
            uint64_t now = uv_hrtime() / 1000;
            sim__state.kv_tail_us_last = now > ctx->compute_end_us ? now - ctx->compute_end_us : 0;
        }
        if (ctx->role == PDSIM_ROLE_PREFILL)
            sim__state.kv_tx += it->bytes;
        else
            sim__state.kv_rx += it->bytes;
    } else if (ctx->op_error == 0) {
        ctx->op_error = it->status;
        ctx->op_error_room = it->room;
        /* Fail the whole request at once: cancel the other rooms. */
        for (size_t i = 0; i < ctx->n_items; i++)
            if (ctx->items[i].op_pending && sim__state.shim != NULL)
                pdshim_cancel(sim__state.shim, ctx->items[i].room);
    }
    if (ctx->ops_pending == 0)
        transfers_done(ctx);
    sim__req_unref(ctx);
}

void sim__drain_queue(void)
{
    sim__vllm_drain_holds();
    for (;;) {
        pdr_dqueue_t q;
        pthread_mutex_lock(&sim__state.qlock);
        pdr_dqueue_move(&q, &sim__state.done_items);
        pthread_mutex_unlock(&sim__state.qlock);
        if (q.head == NULL)
            return;
        pdr_dlink_t *l;
        while ((l = pdr_dqueue_pop(&q)) != NULL)
            item_done(PDR_DLINK_ITEM(l, sim_item_t, qlink));
    }
}

void sim__on_async(uv_async_t *a)
{
    (void)a;
    sim__drain_queue();
}

static void pcache_insert(sim_req_t *ctx);

static void on_shim_result(void *arg, const pdshim_result_t *res)
{
    on_shim_done(arg, res->room, res->status, res->bytes);
}

/* Publishes part k of every item of ctx (k = ctx->parts_next); with k the last part, the compute ends. */
static void parts_publish(sim_req_t *ctx)
{
    int64_t n = sim__state.opts.kv_parts, k = ctx->parts_next++;
    if (k == n - 1) {
        ctx->compute_end_us = uv_hrtime() / 1000;
        for (size_t i = 0; i < ctx->n_items; i++) {
            uint64_t moved = 0;
            if (ctx->items[i].op_pending &&
                pdshim_room_progress(sim__state.shim, ctx->items[i].room, &moved, NULL) == 0)
                sim__state.parts_moved_at_end += moved;
        }
    }
    for (size_t i = 0; i < ctx->n_items; i++) {
        sim_item_t *it = &ctx->items[i];
        size_t lo = it->kv_len * (size_t)k / (size_t)n, hi = it->kv_len * (size_t)(k + 1) / (size_t)n;
        if (!it->op_pending || hi == lo)
            continue;
        pdshim_seg_t seg = {it->kv + lo, hi - lo};
        int r = pdshim_offer_part(sim__state.shim, it->room, lo, &seg, 1);
        if (r == 0)
            sim__state.parts_published++;
        else if (r != PDR_ENOROOM) /* ENOROOM: the room already failed, its callback says why */
            pdr_warn("pdsim: part %lld of room %" PRIu64 " refused: %s", (long long)k, it->room,
                     pdr_strerror(r));
    }
}

static void parts_arm(sim_req_t *ctx);

static void on_parts_timer(uv_timer_t *t)
{
    sim_req_t *ctx = t->data;
    if (!sim__req_is_live(ctx) || ctx->op_error != 0 || ctx->ops_pending == 0)
        return; /* failed or canceled: the rooms' callbacks end the request */
    parts_publish(ctx);
    if (ctx->parts_next < sim__state.opts.kv_parts)
        parts_arm(ctx);
    else if (sim__state.pcache != NULL)
        pcache_insert(ctx);
}

/* Arms the timer for the next part, or publishes it now when it is due. */
static void parts_arm(sim_req_t *ctx)
{
    for (;;) {
        uint64_t due = ctx->parts_t0_us +
                       ctx->parts_us * (uint64_t)(ctx->parts_next + 1) / (uint64_t)sim__state.opts.kv_parts;
        uint64_t now = uv_hrtime() / 1000;
        if (due > now) {
            uv_timer_start(&ctx->timer, on_parts_timer, (due - now + 999) / 1000, 0);
            return;
        }
        parts_publish(ctx);
        if (ctx->parts_next == sim__state.opts.kv_parts) {
            if (sim__state.pcache != NULL)
                pcache_insert(ctx);
            return;
        }
    }
}

/* A prefill with --kv-parts: opens every item's room now, at the start of its compute, and publishes it
 * in parts over the compute time (us), so the KV moves while the rest is computed. */
static void start_parts(sim_req_t *ctx, uint64_t us)
{
    for (size_t i = 0; i < ctx->n_items; i++) {
        sim_item_t *it = &ctx->items[i];
        /* By ticket (protocol pdshim) the parts and progress still name it->room, the ticket's room. */
        int r = it->ticket != NULL
                    ? pdshim_offer_open_ticket(sim__state.shim, it->ticket, it->kv_len,
                                               (uint32_t)sim__state.opts.kv_timeout_ms, on_shim_result, it)
                    : pdshim_offer_open(sim__state.shim, it->room, it->kv_len,
                                        (uint32_t)sim__state.opts.kv_timeout_ms, on_shim_result, it);
        if (r != 0) {
            if (ctx->op_error == 0) {
                ctx->op_error = r;
                ctx->op_error_room = it->room;
            }
            break;
        }
        sim__state.parts_rooms++;
        sim__state.parts_bytes += it->kv_len;
        it->op_pending = 1;
        ctx->ops_pending++;
        ctx->refs++;
    }
    if (ctx->op_error != 0) {
        for (size_t i = 0; i < ctx->n_items; i++)
            if (ctx->items[i].op_pending)
                pdshim_cancel(sim__state.shim, ctx->items[i].room);
        if (ctx->ops_pending == 0)
            transfers_done(ctx);
        return;
    }
    ctx->parts_next = 0;
    ctx->parts_t0_us = uv_hrtime() / 1000;
    ctx->parts_us = us;
    parts_arm(ctx);
}

void sim__start_transfers(sim_req_t *ctx)
{
    ctx->compute_end_us = uv_hrtime() / 1000;
    for (size_t i = 0; i < ctx->n_items; i++) {
        sim_item_t *it = &ctx->items[i];
        pdshim_seg_t seg = {it->kv, it->kv_len};
        int r;
        if (it->ticket != NULL && ctx->role == PDSIM_ROLE_PREFILL)
            r = pdshim_offer_ticket(sim__state.shim, it->ticket, &seg, 1,
                                    (uint32_t)sim__state.opts.kv_timeout_ms, on_shim_result, it);
        else if (it->ticket != NULL)
            r = pdshim_fetch_ticket(sim__state.shim, it->ticket, &seg, 1,
                                    (uint32_t)sim__state.opts.kv_timeout_ms, on_shim_result, it);
        else if (ctx->role == PDSIM_ROLE_PREFILL)
            r = pdshim_offer(sim__state.shim, it->room, &seg, 1, (uint32_t)sim__state.opts.kv_timeout_ms,
                             on_shim_done, it);
        else
            r = pdshim_fetch(sim__state.shim, it->host, it->port, it->room, &seg, 1,
                             (uint32_t)sim__state.opts.kv_timeout_ms, on_shim_done, it);
        if (r != 0) {
            if (ctx->op_error == 0) {
                ctx->op_error = r;
                ctx->op_error_room = it->room;
            }
            break;
        }
        it->op_pending = 1;
        ctx->ops_pending++;
        ctx->refs++;
    }
    if (ctx->op_error != 0) {
        for (size_t i = 0; i < ctx->n_items; i++)
            if (ctx->items[i].op_pending)
                pdshim_cancel(sim__state.shim, ctx->items[i].room);
    }
    if (ctx->ops_pending == 0)
        transfers_done(ctx);
}

void sim__on_stall_timeout(uv_timer_t *t)
{
    sim_req_t *ctx = t->data;
    char msg[160];
    snprintf(msg, sizeof(msg),
             "KV transfer failed for room %" PRIu64 ": PDR_ETIMEDOUT (--stall-kv: never offered)",
             ctx->items[0].room);
    if (ctx->started && sim__req_is_live(ctx)) { /* stream_head_before_kv: only an abort can end it */
        ctx->kv_wait = 0;
        ctx->abort_pending = 1;
        sim__pump(ctx);
        return;
    }
    sim__req_fail(ctx, 500, msg);
}

/* After a prefill: its whole blocks join the prefix cache (an engine caches a prompt's KV once it is
 * computed). Short of memory the cache just holds less. */
static void pcache_insert(sim_req_t *ctx)
{
    for (size_t i = 0; i < ctx->n_items; i++)
        if (pdsim_pcache_insert(sim__state.pcache, ctx->items[i].toks.ids, ctx->items[i].toks.n) != 0) {
            pdr_warn("pdsim: out of memory inserting into the prefix cache");
            break;
        }
    pdsim_kvev_flush();
}

static void after_prefill_delay(sim_req_t *ctx)
{
    if (!sim__req_is_live(ctx))
        return;
    if (sim__state.pcache != NULL)
        pcache_insert(ctx);
    if (ctx->role == PDSIM_ROLE_BOTH) {
        sim__begin_output(ctx);
    } else if (ctx->vllm == VLLM_PREFILL) {
        sim__vllm_answer_prefill(ctx);
    } else if (sim__state.faults.stall_kv) {
        uv_timer_start(&ctx->timer, sim__on_stall_timeout, (uint64_t)sim__state.opts.kv_timeout_ms, 0);
    } else {
        sim__start_transfers(ctx);
    }
}

static void on_prefill_delay(uv_timer_t *t)
{
    after_prefill_delay(t->data);
}

static void after_compute(sim_req_t *ctx)
{
    if (!sim__req_is_live(ctx))
        return;
    if (ctx->role == PDSIM_ROLE_DECODE) {
        sim__begin_output(ctx);
        return;
    }
    /* With the prefix cache on, only the tokens after the cached prefix are computed. */
    uint64_t computed = 0;
    for (size_t i = 0; i < ctx->n_items; i++) {
        sim_item_t *it = &ctx->items[i];
        if (sim__state.pcache != NULL)
            it->cached = pdsim_pcache_lookup(sim__state.pcache, it->toks.ids, it->toks.n);
        computed += it->toks.n - it->cached;
    }
    if (sim__state.opts.kv_parts > 0 && ctx->role == PDSIM_ROLE_PREFILL && ctx->vllm != VLLM_PREFILL &&
        !sim__state.faults.stall_kv) {
        start_parts(ctx, computed * (uint64_t)sim__state.opts.prefill_us_per_token);
        return;
    }
    uint64_t ms = (computed * (uint64_t)sim__state.opts.prefill_us_per_token + 999) / 1000;
    if (ms == 0) {
        after_prefill_delay(ctx);
        return;
    }
    uv_timer_start(&ctx->timer, on_prefill_delay, ms, 0);
}
