/*
 * Stream migration: a decode that fails after the client's stream began (its connection broken, its stream
 * idle past timeouts.stream_idle_ms, its KV lost) no longer ends the stream. The request goes on on a new
 * pair with the prompt extended by what the client already has (resume.h), and the new decode's events are
 * rewritten so that the client sees one stream: the first stream's id, the text and token counts as if
 * nothing happened. Until a stream may need it, nothing of this runs; once armed, the relay sends whole
 * events only and notes each (the state is read back from them only when the log grows or a decode fails).
 * The request's own retries (retries.max) cover the new pair's attempt before its first byte; a migration
 * that finds no pair, or a new decode that refuses the request, ends the stream with an error event as
 * before. Loop thread of the request.
 */
#include "pd_internal.h"
#include "reply.h"

/* The migration of a request whose body (client, parsed) can be moved: 0, 1 or 2 as pdr__pd_migrate. */
static int migrate_movable(pd_req_t *x, const char *why, int blame, json_t *client)
{
    uint64_t *m = x->t->m.migrations;
    if (x->migrations >= x->conf->migration.max_attempts) {
        m[PDR_MIG_BUDGET]++;
        pdr_warn(
            "request %s: the decode's stream broke (%s); no migration: migration.max_attempts (%d) spent",
            x->request_id, why, x->conf->migration.max_attempts);
        return 0;
    }
    if (x->mig.bad) {
        m[PDR_MIG_UNREADABLE]++;
        pdr_warn(
            "request %s: the decode's stream broke (%s); no migration: the stream relayed so far cannot be "
            "read back (an event larger than a send, or text past migration.max_bytes)",
            x->request_id, why);
        return 0;
    }
    /* What the decode sent and the client has not had is dropped: the new pair makes those tokens again. */
    x->rl.pending.len = 0;
    char err[256];
    size_t len = 0;
    int nothing_left = 0;
    char *body = pdr_resume_body(&x->mig, client, &len, &nothing_left, err, sizeof(err));
    if (body == NULL && nothing_left) {
        /* Every token went: the stream only lacked its end. */
        m[PDR_MIG_COMPLETED]++;
        size_t tl;
        const char *tail = pdr_resume_tail(&x->mig, &tl);
        x->at.d_done = 1;
        x->at.d_err = pdr_buf_append(&x->rl.pending, tail, tl, PENDING_CAP) == 0 ? 0 : PDR_ENOMEM;
        pdr_info("request %s: the decode's stream broke (%s) after its last token; the stream is ended",
                 x->request_id, why);
        return 2;
    }
    if (body == NULL) {
        m[x->mig.bad ? PDR_MIG_UNREADABLE : PDR_MIG_REFUSED]++;
        pdr_warn("request %s: the decode's stream broke (%s); no migration: %s", x->request_id, why, err);
        return 0;
    }
    pdr_pdreq_t pr;
    if (pdr_pdreq_parse(x->route, body, len, &pr, err, sizeof(err)) != 0) {
        free(body);
        m[PDR_MIG_FAILED]++;
        pdr_warn("request %s: the decode's stream broke (%s); no migration: the resumed body: %s",
                 x->request_id, why, err);
        return 0;
    }
    m[PDR_MIG_MOVED]++;
    pdr_info("request %s: the decode %s broke the stream (%s) after %" PRIu64
             " tokens; migration %d goes on on a new pair",
             x->request_id, x->at.dw ? x->at.dw->target : "-", why, x->mig.tokens, x->migrations + 1);
    if (x->at.dw != NULL &&
        blame) { /* a KV failure is the link's: the breaker has it, the decode is not avoided */
        pdr_pool_report_failure(&x->r->pool, x->at.dw, why);
        if (x->n_tried[PDR_ROLE_DECODE] < PDR_MAX_TRIED)
            x->tried[PDR_ROLE_DECODE][x->n_tried[PDR_ROLE_DECODE]++] = x->at.dw->uid;
    }
    /* The access log's retry_error names the failure the stream was moved from. */
    pdr_json_escape(x->retry_error, sizeof(x->retry_error), why);
    pdr__pd_cancel_legs(x);
    pdr_pdreq_clear(&x->pr);
    free(x->mig_body);
    x->mig_body = body;
    x->pr = pr;
    x->resuming = 1;
    x->migrations++;
    x->attempt++;
    x->sm->start_attempt(x);
    return 1;
}

int pdr__pd_migrate(pd_req_t *x, const char *why, int blame)
{
    if (!x->mig_possible || x->req == NULL || x->stopped || pd_final_sent(x) || x->state != PD_RESPONDING ||
        pdr_router_shutting_down(x->r))
        return 0;
    /* The client's body is parsed once: for its refusal, then for the body that goes on. */
    json_t *client = NULL;
    const char *refusal = NULL;
    if (!x->mig_armed)
        refusal = x->at.merge ? "logprobs" : "not_event_stream";
    else
        client = pdr_resume_parse(x->route, x->req->entity.base, x->req->entity.len, &refusal);
    int rc = 0;
    if (refusal != NULL) {
        x->t->m.migrations[PDR_MIG_REFUSED]++;
        pdr_warn("request %s: the decode's stream broke (%s); no migration: the request cannot be moved (%s)",
                 x->request_id, why, refusal);
    } else {
        rc = migrate_movable(x, why, blame, client);
    }
    json_decref(client);
    return rc;
}

void pdr__pd_resume_response(pd_req_t *x)
{
    const char *ct = x->dleg.content_type;
    if (x->dleg.status < 200 || x->dleg.status >= 300 || strncmp(ct, "text/event-stream", 17) != 0) {
        char msg[400];
        snprintf(msg, sizeof(msg), "the stream could not go on: the new decode %s answered %d%s",
                 x->at.dw ? x->at.dw->target : "-", (int)x->dleg.status,
                 x->dleg.status < 300 ? " without an event stream" : "");
        pdr__pd_resume_failed(x, 502, msg);
        return;
    }
    pdr__pd_mark_started(x, 0);
    x->resuming = 0;
    pdr__pd_send_final_or_more(x);
}
