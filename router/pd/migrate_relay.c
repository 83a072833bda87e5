/*
 * The relay's side of stream migration (migrate.c): once a stream may be moved, it is relayed in whole
 * events, each one noted (resume.h: what the client has), and a migration's events are rewritten on their
 * way to the client. Called by relay.c; calls nothing of router/pd/ above it. Loop thread of the request.
 */
#include "pd_internal.h"

/* The ceiling of one send of a migrated stream: events are rewritten until the send holds HIGH_WATER, the
 * last one at most its own size plus what the client has (a /generate event carries the whole text). */
static size_t take_cap(const pd_req_t *x)
{
    return HIGH_WATER + PENDING_CAP + 2 * (size_t)x->conf->migration.max_bytes;
}

void pdr__pd_migration_arm(pd_req_t *x)
{
    if (!x->mig_possible || x->at.merge || !x->rl.is_sse || x->status < 200 || x->status >= 300 ||
        x->mig_armed)
        return;
    pdr_resume_init(&x->mig, x->route, (size_t)x->conf->migration.max_bytes);
    x->mig_armed = 1;
}

int pdr__pd_migration_take(pd_req_t *x, int *final)
{
    pdr_buf_t *in = &x->rl.pending, out = x->rl.sending;
    out.len = 0;
    size_t end = *final ? in->len : pdr_resume_events_end(in->p ? in->p : "", in->len);
    if (end == 0 && in->len >= HIGH_WATER) {
        /* One event larger than a send: the stream cannot be relayed in whole events; it goes as it comes,
         * and can no longer be moved. */
        x->mig.bad = 1;
        end = in->len;
    }
    size_t used = 0;
    int rc = 0;
    if (!x->mig.resumed && end == in->len) {
        /* Whole events only, as a stream mostly comes: the buffers are swapped, as without migration. */
        x->rl.sending = *in;
        *in = out;
        pdr_resume_note(&x->mig, x->rl.sending.p, x->rl.sending.len);
        return 0;
    }
    if (!x->mig.resumed) {
        rc = pdr_buf_append(&out, in->p, end, take_cap(x));
        used = end;
    } else {
        while (rc == 0 && used < end && out.len < HIGH_WATER) {
            /* the first whole event of what is left; at the stream's end, its unended tail as it is */
            size_t k = pdr_resume_first_event_end(in->p + used, end - used);
            if (k == 0)
                k = end - used;
            rc = pdr_resume_rewrite(&x->mig, in->p + used, k, &out, take_cap(x));
            used += k;
        }
    }
    x->rl.sending = out;
    if (rc != 0)
        return rc;
    pdr_resume_note(&x->mig, out.p, out.len);
    if (used > 0) {
        memmove(in->p, in->p + used, in->len - used);
        in->len -= used;
    }
    if (in->len > 0)
        *final = 0;
    return 0;
}
