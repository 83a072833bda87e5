/*
 * Protocol vllm (pd_vllm.h) on the request: the prefill runs alone; its answer's kv_transfer_params go to
 * the decode with the client's body; KV the prefill still holds for a decode that never answered is
 * released by a leg of its own. Loop thread of the request.
 */
#include "pd_internal.h"
#include "pd_vllm.h"

static const char *const route_paths[] = {"/generate", "/v1/completions", "/v1/chat/completions"};

/* The attempt's first leg: the prefill, with the body that asks it to keep its KV for a remote decode. */
static void vllm_start_prefill(pd_req_t *x)
{
    free(x->body);
    free(x->dbody);
    x->dbody = NULL;
    memset(&x->dleg, 0, sizeof(x->dleg)); /* no decode leg in this attempt yet */
    x->body = pdr_pdreq_build_vllm(&x->pr, PDR_VLLM_PREFILL, NULL, 0, &x->body_len);
    if (x->body == NULL) {
        pdr__pd_fail_response(x, 503, "service_unavailable", "out of memory", 1);
        return;
    }
    char url[512];
    pdr_join2(url, sizeof(url), x->at.pw->conf.url, route_paths[x->route]);
    if (pdr_leg_start(&x->pleg, x->t->multi, url, x->body, x->body_len, pdr__pd_leg_headers(x, x->at.pw),
                      x->to.connect_ms, 0, &pdr__pd_prefill_cbs, x) != 0) {
        pdr__pd_fail_response(x, 503, "service_unavailable", "cannot start upstream requests", 1);
        return;
    }
    memcpy(x->at.p_span, x->fwd.last_span, 8);
    x->at.p_running = 1;
    pdr_worker_track(x->at.pw, 1);
    pdr__pd_arm_timer(x);
}

/* The prefill answered 2xx: its kv_transfer_params go to the decode with the client's body. An answer
 * without them fails the attempt as a prefill failure (pdr__pd_advance() retries or answers 502). */
static void vllm_start_decode(pd_req_t *x)
{
    pdr_vllm_next_t next;
    if (x->req == NULL || x->at.p_truncated ||
        pdr__vllm_next(&x->pr, x->pbody.p ? x->pbody.p : "", x->pbody.len, &next, x->vl.err,
                       sizeof(x->vl.err)) != 0) {
        if (x->at.p_truncated)
            snprintf(x->vl.err, sizeof(x->vl.err), "the prefill's answer exceeds 64 MiB");
        x->vl.bad = 1;
        return;
    }
    x->dbody = next.decode;
    x->dbody_len = next.decode_len;
    x->vl.release = next.release; /* the prefill holds KV for this request from now on */
    x->vl.release_len = next.release_len;
    char url[512];
    pdr_join2(url, sizeof(url), x->at.dw->conf.url, route_paths[x->route]);
    if (pdr_leg_start(&x->dleg, x->t->multi, url, x->dbody, x->dbody_len, pdr__pd_leg_headers(x, x->at.dw),
                      x->to.connect_ms, 0, &pdr__pd_decode_cbs, x) != 0) {
        x->dleg.got_headers = 0;
        pdr__pd_fail_response(x, 503, "service_unavailable", "cannot start upstream requests", 1);
        return;
    }
    memcpy(x->at.d_span, x->fwd.last_span, 8);
    x->at.d_running = 1;
    pdr_worker_track(x->at.dw, 1);
    /* The decode pulls the KV now: the KV deadline runs from here. */
    x->at.kv_open = 1;
    memset(&x->kv.sse, 0, sizeof(x->kv.sse));
    x->at.kv_deadline_ns = pdr_now_ns() + x->kv.ms * 1000000u;
}

/* The request lets go of the decode (client gone, attempt failed, response over). KV the prefill holds for
 * a decode that has not answered a byte yet would stay there until vLLM's abort timeout: a release leg
 * has a decode read it, the same one unless this request just blamed it (any decode can read the KV).
 * A decode that has begun a successful answer has read it already. */
static void vllm_release_kv(pd_req_t *x)
{
    if (x->vl.release == NULL)
        return; /* no KV held for this request */
    char *body = x->vl.release;
    x->vl.release = NULL;
    if ((x->dleg.bytes_in > 0 && x->dleg.status < 400) || x->at.dw == NULL) {
        free(body);
        return;
    }
    pdr_worker_t *w = x->at.dw, *other = NULL;
    for (size_t i = 0; i < x->n_tried[PDR_ROLE_DECODE]; i++)
        if (x->tried[PDR_ROLE_DECODE][i] == x->at.dw->uid) {
            pdr_pick_filter_t df; /* a decode that can read the prefill's KV (compat.enabled) */
            other = pdr_pool_pick_filtered(&x->r->pool, x->pool, PDR_ROLE_DECODE, x->tried[PDR_ROLE_DECODE],
                                           x->n_tried[PDR_ROLE_DECODE], NULL, 0, NULL,
                                           x->at.pw != NULL ? pdr__pd_pick_filter(x, x->at.pw, &df) : NULL);
            if (other != NULL)
                w = other;
            break;
        }
    char url[512];
    pdr_join2(url, sizeof(url), w->conf.url, route_paths[x->route]);
    const char *const *hdrs = pdr__pd_leg_headers(x, w);
    pdr_worker_unref(other);
    pdr__vllm_release(x->t, url, body, x->vl.release_len, hdrs, x->fwd.request_id, x->to.connect_ms,
                      x->to.kv_transfer_ms);
}

/* The decode starts only once the prefill has answered; then either may hold up the KV. */
static int vllm_deadline_culprit(const pd_req_t *x)
{
    return x->at.p_done ? -1 : PDR_ROLE_PREFILL;
}

static const char *vllm_prefill_unusable(const pd_req_t *x)
{
    return x->vl.bad ? x->vl.err : NULL;
}

/* The decode runs a request alone. */
static int vllm_can_run_alone(const pd_req_t *x)
{
    (void)x;
    return 1;
}

/* A solo attempt runs on a decode, the data-parallel rank in a header. Its hooks are the protocol's; it has
 * no prefill answer, so vl.bad (cleared as every attempt starts) stays 0 in it. */
static const pd_proto_ops_t vllm_solo_ops = {
    .name = "vllm solo",
    .start = pdr__pd_solo_start,
    .prefill_unusable = vllm_prefill_unusable,
    .release = vllm_release_kv,
    .abort = pdr__pd_abort_by_close,
    .deadline_culprit = vllm_deadline_culprit,
    .answer_role = PDR_ROLE_DECODE,
    .answer_name = "solo",
    .keep_prefill_answer = 1,
    .rank_header = 1,
};

const pd_proto_ops_t pdr__pd_vllm_ops = {
    .name = "vllm",
    .start = vllm_start_prefill,
    .prefill_ok = vllm_start_decode,
    .prefill_unusable = vllm_prefill_unusable,
    .release = vllm_release_kv,
    .abort = pdr__pd_abort_by_close,
    .deadline_culprit = vllm_deadline_culprit,
    .can_run_alone = vllm_can_run_alone,
    .solo = &vllm_solo_ops,
    .answer_role = PDR_ROLE_DECODE,
    .answer_name = "decode",
    .pair = 1,
    .keep_prefill_answer = 1,
    .rank_header = 1,
};
