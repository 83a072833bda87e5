/*
 * The PD request's pure decisions (decide.h). No state, no clock: every input is an argument. Any thread.
 */
#include "decide.h"
#include "err.h"
#include "metrics.h"
#include "pool.h"

int pdr__pd_cause_of(int err)
{
    switch (err) {
    case PDR_ECONNREFUSED:
        return PDR_CAUSE_CONNECT;
    case PDR_ETIMEDOUT:
        return PDR_CAUSE_TIMEOUT;
    case PDR_EPEERGONE:
        return PDR_CAUSE_RESET;
    default:
        return PDR_CAUSE_OTHER;
    }
}

int pdr__pd_leg_failure_status(long status, int err)
{
    int unreachable =
        status == 0 && (err == PDR_ECONNREFUSED || err == PDR_ETIMEDOUT || err == PDR_EPEERGONE);
    return unreachable ? 503 : 502;
}

int pdr__pd_cause_ejects(int cause)
{
    return cause == PDR_CAUSE_CONNECT || cause == PDR_CAUSE_FIRST_BYTE_DEADLINE ||
           cause == PDR_CAUSE_KV_DEADLINE || cause == PDR_CAUSE_TIMEOUT;
}

int pdr__pd_kv_cause_of(int cause, int role)
{
    if (cause == PDR_CAUSE_KV_DEADLINE)
        return PDR_KVC_DEADLINE;
    if (cause == PDR_CAUSE_RESET)
        return PDR_KVC_PEER_GONE;
    if (cause == PDR_CAUSE_STATUS_5XX || cause == PDR_CAUSE_OTHER)
        return role == PDR_ROLE_PREFILL ? PDR_KVC_PREFILL_ERROR : PDR_KVC_DECODE_ERROR;
    return -1;
}

int pdr__pd_pair_culprit(int decode_answered, int prefill_alive, int decode_alive)
{
    if (decode_answered)
        return PDR_ROLE_PREFILL;
    if (prefill_alive && !decode_alive)
        return PDR_ROLE_DECODE;
    if (decode_alive && !prefill_alive)
        return PDR_ROLE_PREFILL;
    return -1;
}

int pdr__pd_may_retry(int attempt, int max_retries, int shutting_down)
{
    return attempt < max_retries && !shutting_down;
}

const char *pdr__pd_failure_type(int status)
{
    return status == 504 ? "timeout_error" : status == 503 ? "service_unavailable" : "upstream_error";
}

int pdr__pd_failure_retry_after(int status)
{
    return status == 503 ? 1 : 0;
}

uint64_t pdr__pd_next_deadline(const pdr_pd_timeline_t *tl, uint64_t now)
{
    const uint64_t peek = now + PDR_PD_PEEK_INTERVAL_MS * 1000000ull;
    uint64_t next = 0;
    if (!tl->started && tl->backoff_ns != 0) {
        /* The next attempt; meanwhile an HTTP/1 client's close and a shutdown are looked for. */
        next = tl->backoff_ns;
        if (peek < next)
            next = peek;
        return next;
    }
    if (!tl->started) {
        next = tl->first_byte_deadline_ns;
        if (tl->kv_awaited && tl->kv_deadline_ns < next)
            next = tl->kv_deadline_ns;
        if (tl->peek_client && peek < next)
            next = peek;
        if (tl->recheck && now + 1000000ull < next)
            next = now + 1000000ull;
        if (tl->watch_restarts && peek < next)
            next = peek; /* a restart of a worker is looked for as often */
        return next;
    }
    /* The client's side: a send it has taken nothing of for stream_idle_ms (it stopped reading); an
     * HTTP/1 client's progress sampled meanwhile. */
    if (tl->send_inflight)
        next = tl->client_idle_since_ns + tl->idle_ns;
    if (tl->sample_progress && tl->sample_due_ns < next)
        next = tl->sample_due_ns;
    /* The prefill's answer, still to come after the decode's first byte (pd.relay first_byte); or the KV,
     * not known to have arrived yet though the client's answer began. */
    if (tl->kv_after_start && (next == 0 || tl->kv_deadline_ns < next))
        next = tl->kv_deadline_ns;
    /* The decode's side: silence while the router is ready for its bytes (not paused by the client). */
    if (tl->decode_reading) {
        uint64_t d = tl->last_data_ns + tl->idle_ns;
        if (next == 0 || d < next)
            next = d;
    }
    if (tl->probe_client && (next == 0 || peek < next))
        next = peek;
    return next;
}
