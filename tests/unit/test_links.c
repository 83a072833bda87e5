/* Unit tests for the prefill -> decode link state (router/workers/links.c) and the KV deadline's arithmetic,
 * prompt length and failure counters (router/workers/kvdeadline.c): a failure marks a link suspect and a
 * success clears it, forgetting a worker drops its links both ways, the table stays within PDR_LINKS_MAX (a
 * cleared link goes before a suspect one), concurrent updates lose nothing; the deadline grows by
 * kv_transfer_ms_per_1k_tokens per 1024 tokens (rounded up, capped); the prompt's length is counted from
 * ids or estimated from the text; causes and backends map to bounded label sets. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "breaker.h"
#include "check.h"
#include "runner.h"
#include "defaults.h"
#include "kvdeadline.h"
#include "fake_worker.h"
#include "links.h"
#include "rewrite.h"

static void test_suspect_and_clear(void)
{
    pdr_links__reset();
    pdr_worker_t p = mk(1, "http://p:1"), p2 = mk(2, "http://p:2"), d = mk(3, "http://d:1");
    CHECK(!pdr_links_is_suspect(&p, &d) && pdr_links_count() == 0);
    pdr_links_success(&p, &d); /* no entry: nothing is created */
    CHECK(pdr_links_count() == 0);
    pdr_links_failure(&p, &d, "deadline");
    pdr_links_failure(&p, &d, "shim_failed");
    CHECK(pdr_links_is_suspect(&p, &d));
    CHECK(!pdr_links_is_suspect(&p2, &d) && !pdr_links_is_suspect(&d, &p)); /* direction matters */
    pdr_link_info_t out[4];
    size_t suspect = 0;
    CHECK(pdr_links_snapshot(out, 4, &suspect) == 1 && suspect == 1);
    CHECK(out[0].consecutive_failures == 2 && out[0].failures_total == 2);
    CHECK(strcmp(out[0].last_cause, "shim_failed") == 0 && strcmp(out[0].prefill, "http://p:1") == 0 &&
          strcmp(out[0].decode, "http://d:1") == 0 && strcmp(out[0].prefill_id, "w-1") == 0);
    CHECK(out[0].last_failure_ms > 1600000000000ULL);
    pdr_links_success(&p, &d);
    CHECK(!pdr_links_is_suspect(&p, &d));
    CHECK(pdr_links_snapshot(out, 4, &suspect) == 1 && suspect == 0);
    CHECK(out[0].consecutive_failures == 0 && out[0].failures_total == 2 && out[0].successes_total == 1);
    pdr_links_failure(NULL, &d, "deadline"); /* no pair: ignored */
    CHECK(pdr_links_count() == 1);
}

static void test_forget(void)
{
    pdr_links__reset();
    pdr_worker_t p = mk(1, "p1"), p2 = mk(2, "p2"), d = mk(3, "d1"), d2 = mk(4, "d2");
    pdr_links_failure(&p, &d, "deadline");
    pdr_links_failure(&p, &d2, "deadline");
    pdr_links_failure(&p2, &d, "deadline");
    CHECK(pdr_links_count() == 3);
    pdr_links_forget_worker(&d); /* as decode: two links */
    CHECK(pdr_links_count() == 1 && pdr_links_is_suspect(&p, &d2) && !pdr_links_is_suspect(&p, &d));
    pdr_links_forget_worker(&p); /* as prefill */
    CHECK(pdr_links_count() == 0);
    /* A new worker with the same URL (a new uid) starts clean. */
    pdr_worker_t p_again = mk(9, "p1");
    CHECK(!pdr_links_is_suspect(&p_again, &d2));
}

static void test_bounded(void)
{
    pdr_links__reset();
    pdr_worker_t d = mk(1000000, "d");
    /* One cleared link among full-table suspects: it is the one replaced. */
    for (uint64_t i = 0; i < PDR_LINKS_MAX; i++) {
        pdr_worker_t p = mk(i + 1, "p");
        pdr_links_failure(&p, &d, "deadline");
    }
    pdr_worker_t p7 = mk(7, "p");
    pdr_links_success(&p7, &d);
    CHECK(pdr_links_count() == PDR_LINKS_MAX);
    pdr_worker_t fresh = mk(5000000, "p");
    pdr_links_failure(&fresh, &d, "deadline");
    CHECK(pdr_links_count() == PDR_LINKS_MAX);
    CHECK(pdr_links_is_suspect(&fresh, &d));
    size_t suspect = 0;
    pdr_link_info_t *all = malloc(sizeof(*all) * PDR_LINKS_MAX);
    CHECK(pdr_links_snapshot(all, PDR_LINKS_MAX, &suspect) == PDR_LINKS_MAX && suspect == PDR_LINKS_MAX);
    int has7 = 0;
    for (size_t i = 0; i < PDR_LINKS_MAX; i++)
        has7 |= all[i].prefill_uid == 7;
    CHECK(!has7);
    free(all);
    /* Many more: still within the bound. */
    for (uint64_t i = 0; i < 3 * PDR_LINKS_MAX; i++) {
        pdr_worker_t p = mk(10000000 + i, "p");
        pdr_links_failure(&p, &d, "peer_gone");
    }
    CHECK(pdr_links_count() == PDR_LINKS_MAX);
    pdr_links_forget_worker(&d);
    CHECK(pdr_links_count() == 0);
}

static void *hammer(void *arg)
{
    uint64_t base = (uint64_t)(uintptr_t)arg;
    pdr_worker_t d = mk(1, "d");
    for (int i = 0; i < 20000; i++) {
        pdr_worker_t p = mk(base + (uint64_t)(i % 8), "p");
        pdr_links_failure(&p, &d, "deadline");
        pdr_kv_count_failure(PDR_KVC_PEER_GONE, PDR_KVF_RDMA);
        if (i % 3 == 0)
            pdr_links_success(&p, &d);
        (void)pdr_links_is_suspect(&p, &d);
    }
    return NULL;
}

static void test_threads(void)
{
    pdr_links__reset();
    uint64_t before = pdr_kv_failures(PDR_KVC_PEER_GONE, PDR_KVF_RDMA);
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, hammer, (void *)(uintptr_t)(100 + i * 100));
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    CHECK(pdr_links_count() == 32);
    pdr_link_info_t out[32];
    CHECK(pdr_links_snapshot(out, 32, NULL) == 32);
    uint64_t total = 0;
    for (int i = 0; i < 32; i++)
        total += out[i].failures_total;
    CHECK(total == 4 * 20000);
    CHECK(pdr_kv_failures(PDR_KVC_PEER_GONE, PDR_KVF_RDMA) - before == 4 * 20000);
}

static void test_deadline(void)
{
    CHECK(pdr_kv_deadline_ms(30000, 0, 100000) == 30000);
    CHECK(pdr_kv_deadline_ms(1000, 500, 0) == 1000);
    CHECK(pdr_kv_deadline_ms(1000, 500, 1024) == 1500);
    CHECK(pdr_kv_deadline_ms(1000, 500, 4096) == 3000);
    CHECK(pdr_kv_deadline_ms(1000, 500, 1) == 1001); /* rounded up */
    CHECK(pdr_kv_deadline_ms(1000, PDR_MAX_MS, (uint64_t)1 << 30) == PDR_MAX_MS);
}

static uint64_t tokens_of(pdr_route_t route, const char *body, pdr_kv_tokens_how_t *how)
{
    pdr_pdreq_t pr;
    char err[256];
    if (pdr_pdreq_parse(route, body, strlen(body), &pr, err, sizeof(err)) != 0) {
        fprintf(stderr, "parse: %s\n", err);
        return (uint64_t)-1;
    }
    uint64_t n = pdr_kv_prompt_tokens(&pr, NULL, how, NULL);
    pdr_pdreq_clear(&pr);
    return n;
}

static void test_prompt_tokens(void)
{
    pdr_kv_tokens_how_t how;
    CHECK(tokens_of(PDR_ROUTE_GENERATE, "{\"input_ids\":[1,2,3,40000]}", &how) == 4 && how == PDR_KVT_IDS);
    CHECK(tokens_of(PDR_ROUTE_GENERATE, "{\"input_ids\":[[1,2],[3,4,5]]}", &how) == 5 && how == PDR_KVT_IDS);
    CHECK(tokens_of(PDR_ROUTE_COMPLETIONS, "{\"prompt\":[7,8,9]}", &how) == 3 && how == PDR_KVT_IDS);
    /* Text: its JSON bytes (quotes included) / 4, rounded up. */
    CHECK(tokens_of(PDR_ROUTE_GENERATE, "{\"text\":\"abcdefghij\"}", &how) == 3 && how == PDR_KVT_ESTIMATE);
    CHECK(tokens_of(PDR_ROUTE_COMPLETIONS, "{\"prompt\":\"ab\"}", &how) == 1 && how == PDR_KVT_ESTIMATE);
    CHECK(tokens_of(PDR_ROUTE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &how) == 8 &&
          how == PDR_KVT_ESTIMATE);
}

static void test_names(void)
{
    CHECK(pdr_kv_cause_parse("deadline") == PDR_KVC_DEADLINE);
    CHECK(pdr_kv_cause_parse("incarnation") == PDR_KVC_INCARNATION);
    CHECK(pdr_kv_cause_parse("cuda out of memory") == PDR_KVC_SHIM_FAILED);
    CHECK(pdr_kv_cause_parse(NULL) == PDR_KVC_SHIM_FAILED);
    CHECK(pdr_kvf_backend_parse("tcp") == PDR_KVF_TCP &&
          pdr_kvf_backend_parse("cuda_ipc") == PDR_KVF_CUDA_IPC);
    CHECK(pdr_kvf_backend_parse(NULL) == PDR_KVF_UNKNOWN && pdr_kvf_backend_parse("") == PDR_KVF_UNKNOWN);
    CHECK(pdr_kvf_backend_parse("carrier-pigeon") == PDR_KVF_OTHER);
    /* Rendered: every cause with backend "unknown" (the series exist before the first failure), and the
     * links with their labels. */
    pdr_links__reset();
    pdr_worker_t p = mk(1, "http://127.0.0.1:1"), d = mk(2, "http://127.0.0.1:2");
    pdr_links_failure(&p, &d, "deadline");
    pdr_kv_count_failure(PDR_KVC_DEADLINE, PDR_KVF_TCP);
    size_t len = 0;
    char *m = pdr_kv_render_metrics(&len);
    CHECK(m != NULL && strlen(m) == len);
    CHECK(strstr(m, "pdr_kv_transfer_failures_total{cause=\"incarnation\",backend=\"unknown\"} 0\n") != NULL);
    CHECK(strstr(m, "pdr_kv_transfer_failures_total{cause=\"deadline\",backend=\"tcp\"} 1\n") != NULL);
    CHECK(strstr(m, "pdr_link_suspect{prefill=\"http://127.0.0.1:1\",decode=\"http://127.0.0.1:2\"} 1\n") !=
          NULL);
    CHECK(strstr(m, "pdr_links_suspect 1\n") != NULL);
    free(m);
}

/* The link families at their fullest (PDR_LINKS_MAX links, both targets as long as a worker's may be) stay
 * within the ceilings their renderers derive from PDR_LINKS_MAX: every series is rendered. */
static void test_render_full(void)
{
    pdr_links__reset();
    char tp[PDR_LINKS_TARGET], td[PDR_LINKS_TARGET];
    memset(tp, 'p', sizeof(tp) - 1);
    memset(td, 'd', sizeof(td) - 1);
    tp[sizeof(tp) - 1] = td[sizeof(td) - 1] = '\0';
    pdr_worker_t d = mk(1000000, td);
    for (uint64_t i = 0; i < PDR_LINKS_MAX; i++) {
        pdr_worker_t p = mk(i + 1, tp);
        pdr_links_failure(&p, &d, "deadline");
    }
    CHECK(pdr_links_count() == PDR_LINKS_MAX);
    char *(*const render[])(size_t *) = {pdr_kv_render_metrics, pdr_links_render_metrics};
    const char *series[] = {"pdr_link_consecutive_failures{", "pdr_link_state{"};
    for (size_t k = 0; k < 2; k++) {
        size_t len = 0, n = 0;
        char *m = render[k](&len);
        CHECK(m != NULL && len > (size_t)PDR_LINKS_MAX * 2 * (PDR_LINKS_TARGET - 1));
        if (m == NULL)
            continue;
        for (const char *q = m; (q = strstr(q, series[k])) != NULL; q++)
            n++;
        CHECK(n == PDR_LINKS_MAX);
        free(m);
    }
    pdr_links__reset();
}

static const pdr_test_case_t cases[] = {
    {"suspect_and_clear", test_suspect_and_clear, 30},
    {"forget", test_forget, 30},
    {"bounded", test_bounded, 30},
    {"render_full", test_render_full, 30},
    {"threads", test_threads, 60},
    {"deadline", test_deadline, 30},
    {"prompt_tokens", test_prompt_tokens, 30},
    {"names", test_names, 30},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
