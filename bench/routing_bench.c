/*
 * routing_bench: the cost of one cache_aware decision (longest match, choice, insert under one lock) on a
 * prefix tree filled with realistic prompts, and the tree's memory before and after eviction to a cap.
 *
 * Prompts: TEMPLATES shared prefixes (system prompts, few-shot blocks) of 512-6144 random bytes, each
 * prompt one of them plus a unique tail of 256-2048 bytes (1-8 KB in all), generated on the fly from a
 * seed (not timed). Phases: fill (N decisions into an empty tree), steady (N more at N entries),
 * eviction to --cap bytes per worker, then the same steady load from --threads threads at once. With
 * --seed consistent_hash the decisions seed unseen prefixes on the hash ring; either way the last line
 * is the ring's own cost (pdr_chash_pick over W workers, ns per pick).
 *
 * With --kv-blocks B, then the precise prefix index (routing/kvindex.c): B blocks of 16 tokens stored
 * through events, as chains of 256 blocks (4096-token prompts) spread over the workers, then the cost
 * of one lookup of a 4096-token prompt against every worker (a whole-prompt hit for one of them), and
 * the index's bytes when it is filled to twice what --kv-cap holds, and the cost of a snapshot of that full
 * index (routing/kvindex_snapshot.c): its copy (and the longest another thread waited for the index's
 * lock meanwhile, as a pick would), encoding, verified decoding and the import into an empty index of the
 * same cap.
 *
 *   routing_bench [--entries N] [--workers W] [--cap BYTES] [--threads T]
 *                 [--seed smallest_tree|consistent_hash] [--kv-blocks B] [--kv-cap BYTES]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "kvevents.h"
#include "kvsnap.h"
#include "routing.h"
#include "util.h"

#define TEMPLATES 200
#define MAX_PROMPT 8192

static char *templates[TEMPLATES];
static size_t template_len[TEMPLATES];
static size_t workers = 8;
static pdr_cache_aware_seed_t seed_mode = PDR_CACHE_AWARE_SEED_SMALLEST_TREE;

static void fill_random(uint64_t *rng, char *buf, size_t n)
{
    /* Printable bytes, as prompt text is. */
    for (size_t i = 0; i < n; i++)
        buf[i] = (char)(' ' + pdr_routing_rng_next(rng) % 95);
}

/* Prompt number i (the same bytes every time it is asked for). */
static size_t make_prompt(uint64_t i, char *buf)
{
    uint64_t rng = i * 0x2545f4914f6cdd1dULL + 1;
    size_t t = (size_t)(pdr_routing_rng_next(&rng) % TEMPLATES);
    size_t tail = 256 + (size_t)(pdr_routing_rng_next(&rng) % 1793);
    memcpy(buf, templates[t], template_len[t]);
    fill_random(&rng, buf + template_len[t], tail);
    return template_len[t] + tail;
}

typedef struct run {
    pdr_ptree_t *tree;
    uint64_t first, count;
    uint64_t ns;
    uint64_t decisions[4];
} run_t;

static void *run_decisions(void *arg)
{
    run_t *r = arg;
    pdr_cache_aware_params_t p = PDR_CACHE_AWARE_PARAMS_DEFAULT;
    p.seed = seed_mode;
    uint64_t ids[64], loads[64] = {0};
    for (size_t i = 0; i < workers; i++)
        ids[i] = i + 1;
    char *buf = malloc(MAX_PROMPT);
    for (uint64_t i = r->first; i < r->first + r->count; i++) {
        size_t len = make_prompt(i, buf);
        pdr_cache_aware_decision_t d;
        uint64_t t0 = pdr_now_ns();
        int k = pdr_cache_aware_pick(r->tree, &p, ids, loads, workers, buf, len, &d);
        r->ns += pdr_now_ns() - t0;
        if (k >= 0)
            r->decisions[d]++;
    }
    free(buf);
    return NULL;
}

static uint64_t total_chars(pdr_ptree_t *t)
{
    uint64_t c = 0;
    for (size_t i = 0; i < workers; i++)
        c += pdr_ptree_tenant_chars(t, i + 1);
    return c;
}

static void report(const char *phase, run_t *r, size_t nruns, uint64_t wall_ns, pdr_ptree_t *t)
{
    uint64_t n = 0, ns = 0, d[4] = {0};
    for (size_t i = 0; i < nruns; i++) {
        n += r[i].count;
        ns += r[i].ns;
        for (int k = 0; k < 4; k++)
            d[k] += r[i].decisions[k];
    }
    printf("%-8s %zu thread(s): %8.0f ns/decision (per call), %9.0f decisions/s (wall); match %llu, "
           "smallest_tree %llu, balance %llu, hash %llu; tree %.1f MiB for %.1f MiB of text (%.2f B/char)\n",
           phase, nruns, (double)ns / (double)n, (double)n * 1e9 / (double)wall_ns, (unsigned long long)d[0],
           (unsigned long long)d[1], (unsigned long long)d[2], (unsigned long long)d[3],
           (double)pdr_ptree_bytes(t) / 1048576.0, (double)total_chars(t) / 1048576.0,
           (double)pdr_ptree_bytes(t) / (double)total_chars(t));
}

#define KV_BS 16
#define KV_CHAIN 256

/* The token ids of chain c (4096 of them, the same every time). */
static void kv_chain_tokens(uint64_t c, uint32_t *ids)
{
    uint64_t rng = c * 0x9e3779b97f4a7c15ULL + 7;
    for (size_t i = 0; i < KV_CHAIN * KV_BS; i++)
        ids[i] = (uint32_t)(pdr_routing_rng_next(&rng) % 150000);
}

/* Stores chains [0, n) into ix as one BlockStored message each (worker c % workers, its next number). */
static void kv_fill(pdr_kvindex_t *ix, uint64_t n, uint64_t *seq)
{
    uint32_t ids[KV_CHAIN * KV_BS];
    uint64_t hashes[KV_CHAIN];
    pdr_kv_event_t ev = {.kind = PDR_KV_BLOCK_STORED,
                         .hashes = hashes,
                         .n_hashes = KV_CHAIN,
                         .tokens = ids,
                         .n_tokens = KV_CHAIN * KV_BS,
                         .block_size = KV_BS,
                         .gpu = 1};
    pdr_kv_batch_t b = {.events = &ev, .n_events = 1};
    for (uint64_t c = 0; c < n; c++) {
        kv_chain_tokens(c, ids);
        for (size_t i = 0; i < KV_CHAIN; i++)
            hashes[i] = c * KV_CHAIN + i + 1;
        size_t w = (size_t)(c % workers);
        (void)pdr_kvindex_apply(ix, w + 1, seq[w]++, &b, NULL);
    }
}

/* While the export runs: the longest a reader of the index (a pick) waited for its lock. */
typedef struct {
    pdr_kvindex_t *ix;
    int stop; /* atomic */
    uint64_t max_wait_ns;
} lock_probe_t;

static void *probe_lock(void *arg)
{
    lock_probe_t *pr = arg;
    while (!__atomic_load_n(&pr->stop, __ATOMIC_ACQUIRE)) {
        pdr_kvindex_stats_t st;
        uint64_t t = pdr_now_ns();
        pdr_kvindex_stats(pr->ix, &st);
        t = pdr_now_ns() - t;
        if (t > pr->max_wait_ns)
            pr->max_wait_ns = t;
    }
    return NULL;
}

/* A snapshot of ix round trip, timed: export (and the longest wait for the index's lock meanwhile),
 * encode, decode, import. */
static int kv_snapshot_bench(pdr_kvindex_t *ix, const pdr_kvindex_params_t *p)
{
    static char names[64][48];
    char *buf = NULL, msg[256] = "";
    size_t len = 0;
    pdr_kvsnap_t s, d;
    lock_probe_t pr = {ix, 0, 0};
    pthread_t probe;
    int probing = pthread_create(&probe, NULL, probe_lock, &pr) == 0;
    uint64_t t0 = pdr_now_ns();
    int rc = pdr_kvindex_export(ix, &s);
    uint64_t t1 = pdr_now_ns();
    __atomic_store_n(&pr.stop, 1, __ATOMIC_RELEASE);
    if (probing)
        pthread_join(probe, NULL);
    for (size_t i = 0; rc == 0 && i < s.n_workers; i++) {
        snprintf(names[i % 64], sizeof(names[0]), "http://10.0.0.%zu:8000", i);
        s.workers[i].name = names[i % 64];
        s.workers[i].name_len = strlen(names[i % 64]);
    }
    if (rc == 0)
        rc = pdr_kvsnap_encode(&s, p->max_bytes, &buf, &len, msg, sizeof(msg));
    uint64_t t2 = pdr_now_ns();
    if (rc == 0)
        rc = pdr_kvsnap_decode(buf, len, p->max_bytes, &d, msg, sizeof(msg));
    uint64_t t3 = pdr_now_ns(), loaded = 0;
    pdr_kvindex_t *ix2 = NULL;
    int err = 0;
    if (rc == 0 && (ix2 = pdr_kvindex_new(p, &err)) == NULL)
        rc = err;
    if (rc == 0) {
        for (size_t i = 0; i < d.n_workers; i++)
            d.workers[i].id = i + 1;
        rc = pdr_kvindex_import(ix2, &d, &loaded);
        pdr_kvsnap_free(&d);
    }
    uint64_t t4 = pdr_now_ns();
    if (rc != 0) {
        fprintf(stderr, "routing_bench: snapshot: %s %s\n", pdr_strerror(rc), msg);
    } else {
        printf("kv snap  %zu entries, %zu bytes: export %.1f ms (a lock reader waited %.1f ms at most), "
               "encode %.1f ms, decode %.1f ms, import %.1f ms (%llu entries)\n",
               s.n_entries, len, (double)(t1 - t0) / 1e6, (double)pr.max_wait_ns / 1e6,
               (double)(t2 - t1) / 1e6, (double)(t3 - t2) / 1e6, (double)(t4 - t3) / 1e6,
               (unsigned long long)loaded);
    }
    pdr_kvsnap_free(&s); /* zeroed by a failed export */
    free(buf);
    pdr_kvindex_free(ix2);
    return rc != 0;
}

static int kv_bench(uint64_t blocks, uint64_t kv_cap)
{
    uint64_t chains = (blocks + KV_CHAIN - 1) / KV_CHAIN, seq[64] = {0};
    pdr_kvindex_params_t p = {blocks * 256 + (1 << 20), 1}; /* room for all of them */
    int err;
    pdr_kvindex_t *ix = pdr_kvindex_new(&p, &err);
    if (ix == NULL) {
        fprintf(stderr, "routing_bench: %s\n", pdr_strerror(err));
        return 1;
    }
    uint64_t t0 = pdr_now_ns();
    kv_fill(ix, chains, seq);
    uint64_t fill_ns = pdr_now_ns() - t0;
    pdr_kvindex_stats_t st;
    pdr_kvindex_stats(ix, &st);
    printf("kv fill  %llu blocks (%llu chains of %d x %d tokens, %zu workers): %.0f ns/block stored; "
           "%.1f MiB, %.1f B/block\n",
           (unsigned long long)st.entries, (unsigned long long)chains, KV_CHAIN, KV_BS, workers,
           (double)fill_ns / (double)st.entries, (double)st.bytes / 1048576.0,
           (double)st.bytes / (double)st.entries);
    uint64_t ids[64];
    for (size_t i = 0; i < workers; i++)
        ids[i] = i + 1;
    uint32_t prompt[KV_CHAIN * KV_BS];
    pdr_kvindex_match_t m[64];
    uint64_t lookups = 20000, ns = 0, hit = 0, rng = 99;
    for (uint64_t i = 0; i < lookups; i++) {
        uint64_t c = pdr_routing_rng_next(&rng) % chains;
        kv_chain_tokens(c, prompt);
        t0 = pdr_now_ns();
        pdr_kvindex_match(ix, prompt, KV_CHAIN * KV_BS, ids, workers, m);
        ns += pdr_now_ns() - t0;
        hit += m[c % workers].blocks == KV_CHAIN;
    }
    printf("kv match 4096-token prompt x %zu workers: %.0f ns/lookup (%llu/%llu whole hits)\n", workers,
           (double)ns / (double)lookups, (unsigned long long)hit, (unsigned long long)lookups);
    pdr_kvindex_free(ix);

    p.max_bytes = kv_cap;
    if ((ix = pdr_kvindex_new(&p, &err)) == NULL) {
        fprintf(stderr, "routing_bench: --kv-cap: %s\n", pdr_strerror(err));
        return 1;
    }
    memset(seq, 0, sizeof(seq));
    uint64_t fit = kv_cap / 80 / KV_CHAIN + 1; /* about 80 bytes an entry: fill twice that */
    kv_fill(ix, 2 * fit, seq);
    pdr_kvindex_stats(ix, &st);
    printf("kv cap   %llu B: %llu B held (%.1f%%), %llu blocks, %llu evicted, %.1f B/block at cap\n",
           (unsigned long long)kv_cap, (unsigned long long)st.bytes,
           100.0 * (double)st.bytes / (double)kv_cap, (unsigned long long)st.entries,
           (unsigned long long)st.evicted, (double)st.bytes / (double)st.entries);
    int rc = kv_snapshot_bench(ix, &p);
    pdr_kvindex_free(ix);
    return rc;
}

int main(int argc, char **argv)
{
    uint64_t kv_blocks = 0, kv_cap = 64ULL << 20;
    uint64_t entries = 100000, cap = 1ULL << 24;
    size_t threads = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--seed") == 0) {
            if (strcmp(argv[i + 1], "consistent_hash") == 0)
                seed_mode = PDR_CACHE_AWARE_SEED_CONSISTENT_HASH;
            else if (strcmp(argv[i + 1], "smallest_tree") != 0) {
                fprintf(stderr, "routing_bench: --seed smallest_tree or consistent_hash, not '%s'\n",
                        argv[i + 1]);
                return 2;
            }
            continue;
        }
        char *end;
        unsigned long long v = strtoull(argv[i + 1], &end, 10);
        if (*end != 0 || v == 0) {
            fprintf(stderr, "routing_bench: %s needs a positive integer, not '%s'\n", argv[i], argv[i + 1]);
            return 2;
        }
        if (strcmp(argv[i], "--entries") == 0)
            entries = v;
        else if (strcmp(argv[i], "--workers") == 0 && v <= 64)
            workers = (size_t)v;
        else if (strcmp(argv[i], "--cap") == 0)
            cap = v;
        else if (strcmp(argv[i], "--threads") == 0 && v <= 16)
            threads = (size_t)v;
        else if (strcmp(argv[i], "--kv-blocks") == 0)
            kv_blocks = v;
        else if (strcmp(argv[i], "--kv-cap") == 0)
            kv_cap = v;
        else {
            fprintf(stderr,
                    "usage: routing_bench [--entries N] [--workers W<=64] [--cap BYTES] [--threads T<=16] "
                    "[--seed smallest_tree|consistent_hash] [--kv-blocks B] [--kv-cap BYTES]\n");
            return 2;
        }
    }
    uint64_t rng = 12345;
    for (size_t i = 0; i < TEMPLATES; i++) {
        template_len[i] = 512 + (size_t)(pdr_routing_rng_next(&rng) % 5633);
        templates[i] = malloc(template_len[i]);
        fill_random(&rng, templates[i], template_len[i]);
    }
    int err;
    /* The periodic eviction is explicit here, so the insert-time trim (past 2 * cap) is what runs alone. */
    pdr_ptree_t *t = pdr_ptree_new(1ULL << 40, &err);
    if (t == NULL) {
        fprintf(stderr, "routing_bench: %s\n", pdr_strerror(err));
        return 1;
    }
    printf("routing_bench: %llu prompts of 1-8 KB over %d shared prefixes, %zu workers, cap %llu B/worker\n",
           (unsigned long long)entries, TEMPLATES, workers, (unsigned long long)cap);
    run_t fill = {t, 0, entries, 0, {0}};
    uint64_t t0 = pdr_now_ns();
    run_decisions(&fill);
    report("fill", &fill, 1, pdr_now_ns() - t0, t);
    run_t steady = {t, entries, entries, 0, {0}};
    t0 = pdr_now_ns();
    run_decisions(&steady);
    report("steady", &steady, 1, pdr_now_ns() - t0, t);

    uint64_t before = pdr_ptree_bytes(t);
    t0 = pdr_now_ns();
    int rc = pdr_ptree_evict(t, cap);
    uint64_t evict_ns = pdr_now_ns() - t0;
    printf(
        "evict    to %llu B/worker: %.1f ms (rc %d), %.1f MiB -> %.1f MiB, text %.1f MiB, bound %.1f MiB\n",
        (unsigned long long)cap, (double)evict_ns / 1e6, rc, (double)before / 1048576.0,
        (double)pdr_ptree_bytes(t) / 1048576.0, (double)total_chars(t) / 1048576.0,
        (double)pdr_ptree_bytes_bound(workers, cap) / 1048576.0);

    run_t par[16];
    pthread_t th[16];
    for (size_t i = 0; i < threads; i++)
        par[i] = (run_t){t, 2 * entries + i * (entries / threads), entries / threads, 0, {0}};
    t0 = pdr_now_ns();
    for (size_t i = 0; i < threads; i++)
        pthread_create(&th[i], NULL, run_decisions, &par[i]);
    for (size_t i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    report("threads", par, threads, pdr_now_ns() - t0, t);

    /* The ring alone: one pick among W workers (W * PDR_CHASH_VNODES points), keys hashed beforehand. */
    uint64_t keys[64], loads[64] = {0}, sink = 0, picks = 1000000;
    for (size_t i = 0; i < workers; i++) {
        char url[64];
        int l = snprintf(url, sizeof(url), "http://10.0.0.%zu:30000", i + 1);
        keys[i] = pdr_routing_hash(url, (size_t)l);
    }
    t0 = pdr_now_ns();
    for (uint64_t i = 0; i < picks; i++) {
        int k = pdr_chash_pick(keys, loads, workers, pdr_routing_rng_next(&rng), 1.5);
        sink += (uint64_t)k;
        loads[k] = (loads[k] + 1) % 8; /* loads that move, so the bound is exercised */
    }
    printf("chash    %zu workers x %d points: %.0f ns/pick (bounded load 1.5; checksum %llu)\n", workers,
           PDR_CHASH_VNODES, (double)(pdr_now_ns() - t0) / (double)picks, (unsigned long long)sink);

    pdr_ptree_free(t);
    for (size_t i = 0; i < TEMPLATES; i++)
        free(templates[i]);
    return kv_blocks > 0 ? kv_bench(kv_blocks, kv_cap) : 0;
}
