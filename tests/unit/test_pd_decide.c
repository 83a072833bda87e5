/* Unit tests for the PD request's pure decisions (router/pd/decide.c): a leg's error to its cause and to
 * the status that answers it (503 only for a worker never reached), which causes eject the blamed worker
 * and which KV failure each means, whom a pair's deadline blames, when a failed attempt is retried and how
 * the last failure is answered, and the request's next deadline before and after its response begins. */
#include <stdio.h>
#include <string.h>
#include "check.h"
#include "err.h"
#include "metrics.h"
#include "decide.h"
#include "pool.h"
#include "runner.h"

#define MS 1000000ull

static void test_causes(void)
{
    CHECK(pdr__pd_cause_of(PDR_ECONNREFUSED) == PDR_CAUSE_CONNECT);
    CHECK(pdr__pd_cause_of(PDR_ETIMEDOUT) == PDR_CAUSE_TIMEOUT);
    CHECK(pdr__pd_cause_of(PDR_EPEERGONE) == PDR_CAUSE_RESET);
    CHECK(pdr__pd_cause_of(PDR_EIO) == PDR_CAUSE_OTHER);
    CHECK(pdr__pd_cause_of(PDR_ECANCELED) == PDR_CAUSE_OTHER);
    /* Never reached: refused, timed out or reset before any status line. */
    CHECK(pdr__pd_leg_failure_status(0, PDR_ECONNREFUSED) == 503);
    CHECK(pdr__pd_leg_failure_status(0, PDR_ETIMEDOUT) == 503);
    CHECK(pdr__pd_leg_failure_status(0, PDR_EPEERGONE) == 503);
    /* Reached, then failed: the worker answered badly. */
    CHECK(pdr__pd_leg_failure_status(200, PDR_EPEERGONE) == 502);
    CHECK(pdr__pd_leg_failure_status(0, PDR_EIO) == 502);
    CHECK(pdr__pd_leg_failure_status(500, 0) == 502);
    /* Unreachable or silent past a deadline: ejected at once; anything else counts towards ejection. */
    CHECK(pdr__pd_cause_ejects(PDR_CAUSE_CONNECT));
    CHECK(pdr__pd_cause_ejects(PDR_CAUSE_TIMEOUT));
    CHECK(pdr__pd_cause_ejects(PDR_CAUSE_FIRST_BYTE_DEADLINE));
    CHECK(pdr__pd_cause_ejects(PDR_CAUSE_KV_DEADLINE));
    CHECK(!pdr__pd_cause_ejects(PDR_CAUSE_RESET));
    CHECK(!pdr__pd_cause_ejects(PDR_CAUSE_STATUS_5XX));
    CHECK(!pdr__pd_cause_ejects(PDR_CAUSE_OTHER));
}

static void test_kv_causes(void)
{
    CHECK(pdr__pd_kv_cause_of(PDR_CAUSE_KV_DEADLINE, PDR_ROLE_PREFILL) == PDR_KVC_DEADLINE);
    CHECK(pdr__pd_kv_cause_of(PDR_CAUSE_KV_DEADLINE, -1) == PDR_KVC_DEADLINE);
    CHECK(pdr__pd_kv_cause_of(PDR_CAUSE_RESET, PDR_ROLE_DECODE) == PDR_KVC_PEER_GONE);
    CHECK(pdr__pd_kv_cause_of(PDR_CAUSE_STATUS_5XX, PDR_ROLE_PREFILL) == PDR_KVC_PREFILL_ERROR);
    CHECK(pdr__pd_kv_cause_of(PDR_CAUSE_STATUS_5XX, PDR_ROLE_DECODE) == PDR_KVC_DECODE_ERROR);
    CHECK(pdr__pd_kv_cause_of(PDR_CAUSE_OTHER, PDR_ROLE_PREFILL) == PDR_KVC_PREFILL_ERROR);
    CHECK(pdr__pd_kv_cause_of(PDR_CAUSE_OTHER, PDR_ROLE_DECODE) == PDR_KVC_DECODE_ERROR);
    /* A worker that could not be reached took no part in a transfer. */
    CHECK(pdr__pd_kv_cause_of(PDR_CAUSE_CONNECT, PDR_ROLE_PREFILL) == -1);
    CHECK(pdr__pd_kv_cause_of(PDR_CAUSE_TIMEOUT, PDR_ROLE_DECODE) == -1);
    CHECK(pdr__pd_kv_cause_of(PDR_CAUSE_FIRST_BYTE_DEADLINE, PDR_ROLE_DECODE) == -1);
}

static void test_pair_culprit(void)
{
    /* A decode that began its answer holds the KV: the prefill went silent. */
    CHECK(pdr__pd_pair_culprit(1, 0, 0) == PDR_ROLE_PREFILL);
    CHECK(pdr__pd_pair_culprit(1, 1, 0) == PDR_ROLE_PREFILL);
    CHECK(pdr__pd_pair_culprit(1, 1, 1) == PDR_ROLE_PREFILL);
    /* One side answered other requests since the attempt began, the other none. */
    CHECK(pdr__pd_pair_culprit(0, 1, 0) == PDR_ROLE_DECODE);
    CHECK(pdr__pd_pair_culprit(0, 0, 1) == PDR_ROLE_PREFILL);
    /* Both or neither: not pinned on either. */
    CHECK(pdr__pd_pair_culprit(0, 1, 1) == -1);
    CHECK(pdr__pd_pair_culprit(0, 0, 0) == -1);
}

static void test_retry_and_answer(void)
{
    CHECK(pdr__pd_may_retry(0, 2, 0));
    CHECK(pdr__pd_may_retry(1, 2, 0));
    CHECK(!pdr__pd_may_retry(2, 2, 0)); /* retries.max retries, then the answer */
    CHECK(!pdr__pd_may_retry(0, 0, 0));
    CHECK(!pdr__pd_may_retry(0, 2, 1)); /* shutting down: no new attempt */
    CHECK(strcmp(pdr__pd_failure_type(504), "timeout_error") == 0);
    CHECK(strcmp(pdr__pd_failure_type(503), "service_unavailable") == 0);
    CHECK(strcmp(pdr__pd_failure_type(502), "upstream_error") == 0);
    CHECK(pdr__pd_failure_retry_after(503) == 1);
    CHECK(pdr__pd_failure_retry_after(502) == 0);
    CHECK(pdr__pd_failure_retry_after(504) == 0);
}

static void test_deadline_before_response(void)
{
    const uint64_t now = 1000 * MS;
    /* A retry's back-off: its end, cut to the next probe of the client and of a shutdown. */
    pdr_pd_timeline_t tl = {.backoff_ns = now + 30 * MS, .first_byte_deadline_ns = now + 5 * MS};
    CHECK(pdr__pd_next_deadline(&tl, now) == now + 30 * MS);
    tl.backoff_ns = now + 500 * MS;
    CHECK(pdr__pd_next_deadline(&tl, now) == now + PDR_PD_PEEK_INTERVAL_MS * MS);
    /* The first-byte deadline, or the KV's when it comes first and the KV is awaited. */
    tl = (pdr_pd_timeline_t){.first_byte_deadline_ns = now + 60 * MS, .kv_deadline_ns = now + 40 * MS};
    CHECK(pdr__pd_next_deadline(&tl, now) == now + 60 * MS);
    tl.kv_awaited = 1;
    CHECK(pdr__pd_next_deadline(&tl, now) == now + 40 * MS);
    tl.kv_deadline_ns = now + 80 * MS;
    CHECK(pdr__pd_next_deadline(&tl, now) == now + 60 * MS);
    /* An HTTP/1 client probed for a close, a worker's restart looked for: every peek interval. */
    tl.first_byte_deadline_ns = now + 5000 * MS;
    tl.kv_deadline_ns = now + 3000 * MS;
    CHECK(pdr__pd_next_deadline(&tl, now) == now + 3000 * MS);
    tl.peek_client = 1;
    CHECK(pdr__pd_next_deadline(&tl, now) == now + PDR_PD_PEEK_INTERVAL_MS * MS);
    tl.peek_client = 0;
    tl.watch_restarts = 1;
    CHECK(pdr__pd_next_deadline(&tl, now) == now + PDR_PD_PEEK_INTERVAL_MS * MS);
    /* A decision that waits for the prefill leg's connect: 1 ms. */
    tl.recheck = 1;
    CHECK(pdr__pd_next_deadline(&tl, now) == now + 1 * MS);
    /* A deadline already passed is returned as it is (the timer acts on it at once). */
    tl = (pdr_pd_timeline_t){.first_byte_deadline_ns = now - 1};
    CHECK(pdr__pd_next_deadline(&tl, now) == now - 1);
}

static void test_deadline_after_response(void)
{
    const uint64_t now = 1000 * MS;
    /* Nothing in flight, nothing awaited: no deadline. */
    pdr_pd_timeline_t tl = {.started = 1, .idle_ns = 500 * MS, .kv_deadline_ns = now + 10 * MS};
    CHECK(pdr__pd_next_deadline(&tl, now) == 0);
    /* A send the client takes nothing of for stream_idle_ms. */
    tl.send_inflight = 1;
    tl.client_idle_since_ns = now - 100 * MS;
    CHECK(pdr__pd_next_deadline(&tl, now) == now + 400 * MS);
    /* Its progress sampled first. */
    tl.sample_progress = 1;
    tl.sample_due_ns = now + 60 * MS;
    CHECK(pdr__pd_next_deadline(&tl, now) == now + 60 * MS);
    /* The prefill's answer or the KV still to come. */
    tl.kv_after_start = 1;
    CHECK(pdr__pd_next_deadline(&tl, now) == now + 10 * MS);
    /* A decode silent for stream_idle_ms, alone. */
    tl = (pdr_pd_timeline_t){.started = 1, .idle_ns = 500 * MS, .decode_reading = 1, .last_data_ns = now};
    CHECK(pdr__pd_next_deadline(&tl, now) == now + 500 * MS);
    /* A started HTTP/1 response with nothing being written: its client probed for a close. */
    tl.probe_client = 1;
    CHECK(pdr__pd_next_deadline(&tl, now) == now + PDR_PD_PEEK_INTERVAL_MS * MS);
    tl = (pdr_pd_timeline_t){.started = 1, .probe_client = 1};
    CHECK(pdr__pd_next_deadline(&tl, now) == now + PDR_PD_PEEK_INTERVAL_MS * MS);
    /* Before-response fields do not count once it began. */
    tl = (pdr_pd_timeline_t){.started = 1,
                             .backoff_ns = now + MS,
                             .first_byte_deadline_ns = now + MS,
                             .recheck = 1,
                             .peek_client = 1,
                             .watch_restarts = 1,
                             .kv_awaited = 1};
    CHECK(pdr__pd_next_deadline(&tl, now) == 0);
}

static const pdr_test_case_t cases[] = {
    {"causes", test_causes, 30},
    {"kv_causes", test_kv_causes, 30},
    {"pair_culprit", test_pair_culprit, 30},
    {"retry_and_answer", test_retry_and_answer, 30},
    {"deadline_before_response", test_deadline_before_response, 30},
    {"deadline_after_response", test_deadline_after_response, 30},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
