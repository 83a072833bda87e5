/*
 * tokenizer_bench: the tokenizer.json encoder's cost. Loads TOKENIZER.json --loads times (each load
 * timed; the minimum and median reported) and measures the loaded tokenizer's memory (its own count of
 * its tables, and the process's resident growth across one load); then encodes every text of a JSON-lines
 * corpus on stdin ({"text": ...} per line, as the references in tests/fixtures/tokenizer/) --rounds times
 * on one thread, and the same from --threads threads at once on one shared tokenizer. Prints MB/s of text
 * and tokens/s.
 *
 *   gzip -dc tests/fixtures/tokenizer/llama3.reference.jsonl.gz |
 *       tokenizer_bench TOKENIZER.json [--loads N] [--rounds N] [--threads T]
 */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "tokenizer.h"
#include "util.h"

typedef struct text {
    char *s;
    size_t len;
} text_t;

static text_t *texts;
static size_t n_texts, text_bytes;

typedef struct run {
    const pdr_tokenizer_t *tok;
    int rounds;
    uint64_t ids, ns;
    int failed;
} run_t;

static void *encode_all(void *arg)
{
    run_t *r = arg;
    uint64_t t0 = pdr_now_ns();
    for (int k = 0; k < r->rounds; k++)
        for (size_t i = 0; i < n_texts; i++) {
            uint32_t *ids;
            size_t n;
            if (pdr_tokenizer_encode(r->tok, texts[i].s, texts[i].len, &ids, &n) != 0) {
                r->failed++;
                continue;
            }
            r->ids += n;
            free(ids);
        }
    r->ns = pdr_now_ns() - t0;
    return NULL;
}

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, rss = 0;
    if (f == NULL)
        return 0;
    if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
        rss = 0;
    fclose(f);
    return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

/* This thread's CPU time: on a shared machine it moves less than the wall clock. */
static uint64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int read_corpus(void)
{
    size_t cap = 1 << 16, tcap = 0;
    char *line = malloc(cap);
    ssize_t got;
    while (line != NULL && (got = getline(&line, &cap, stdin)) > 0) {
        json_error_t je;
        json_t *o = json_loadb(line, (size_t)got, JSON_ALLOW_NUL, &je);
        json_t *t = json_object_get(o, "text");
        if (!json_is_string(t)) {
            fprintf(stderr, "tokenizer_bench: stdin line %zu: no \"text\" string\n", n_texts + 1);
            json_decref(o);
            free(line);
            return -1;
        }
        if (n_texts == tcap) {
            tcap = tcap ? tcap * 2 : 1024;
            texts = realloc(texts, tcap * sizeof(*texts));
        }
        size_t len = json_string_length(t);
        texts[n_texts].s = malloc(len + 1);
        memcpy(texts[n_texts].s, json_string_value(t), len);
        texts[n_texts++].len = len;
        text_bytes += len;
        json_decref(o);
    }
    free(line);
    return n_texts > 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    int loads = 5, rounds = 5, threads = 2;
    const char *file = NULL;
    for (int i = 1; i < argc; i++) {
        int *count = NULL;
        if (i + 1 < argc && strcmp(argv[i], "--loads") == 0)
            count = &loads;
        else if (i + 1 < argc && strcmp(argv[i], "--rounds") == 0)
            count = &rounds;
        else if (i + 1 < argc && strcmp(argv[i], "--threads") == 0)
            count = &threads;
        else
            file = argv[i];
        if (count != NULL) {
            int64_t v;
            if (pdr_parse_int64(argv[i + 1], strlen(argv[i + 1]), 1, 1000000, &v) != 0) {
                fprintf(stderr, "tokenizer_bench: %s %s: expected an integer in [1, 1000000]\n", argv[i],
                        argv[i + 1]);
                return 2;
            }
            *count = (int)v;
            i++;
        }
    }
    if (file == NULL || threads > 64) {
        fprintf(
            stderr,
            "usage: tokenizer_bench TOKENIZER.json [--loads N] [--rounds N] [--threads T] < corpus.jsonl\n");
        return 2;
    }
    char err[512];
    uint64_t ns[64], cpu[64];
    if (loads > 64)
        loads = 64;
    long rss0 = rss_kib(), rss1 = 0;
    pdr_tokenizer_t *tok = NULL;
    for (int k = 0; k < loads; k++) {
        pdr_tokenizer_free(tok);
        uint64_t t0 = pdr_now_ns(), c0 = cpu_ns();
        tok = pdr_tokenizer_load(file, err, sizeof(err));
        ns[k] = pdr_now_ns() - t0;
        cpu[k] = cpu_ns() - c0;
        if (tok == NULL) {
            fprintf(stderr, "tokenizer_bench: %s\n", err);
            return 1;
        }
        if (k == 0)
            rss1 = rss_kib();
    }
    qsort(ns, (size_t)loads, sizeof(ns[0]), cmp_u64);
    qsort(cpu, (size_t)loads, sizeof(cpu[0]), cmp_u64);
    FILE *f = fopen(file, "r");
    long fsize = 0;
    if (f != NULL && fseek(f, 0, SEEK_END) == 0)
        fsize = ftell(f);
    if (f != NULL)
        fclose(f);
    printf("load: %s, %.1f MB, %zu tokens, %zu merges: wall min %.1f ms, median %.1f ms; CPU min %.1f ms "
           "(%d loads)\n",
           file, (double)fsize / 1e6, pdr_tokenizer_vocab_size(tok), pdr_tokenizer_merges(tok),
           (double)ns[0] / 1e6, (double)ns[loads / 2] / 1e6, (double)cpu[0] / 1e6, loads);
    printf("memory: %.1f MiB in the tokenizer's tables, resident growth across the first load %.1f MiB\n",
           (double)pdr_tokenizer_bytes(tok) / 1048576.0, (double)(rss1 - rss0) / 1024.0);
    if (read_corpus() != 0) {
        fprintf(stderr, "tokenizer_bench: no corpus on stdin\n");
        pdr_tokenizer_free(tok);
        return 1;
    }
    run_t one = {tok, rounds, 0, 0, 0};
    uint64_t c0 = cpu_ns();
    encode_all(&one);
    double cpu_s = (double)(cpu_ns() - c0) / 1e9;
    double mb = (double)text_bytes * rounds / 1e6, s = (double)one.ns / 1e9;
    printf("encode, 1 thread: %zu texts, %.2f MB x %d: %.1f MB/s, %.2f M tokens/s (per CPU second %.1f MB/s, "
           "%.2f M tokens/s; %.1f bytes/token)%s\n",
           n_texts, (double)text_bytes / 1e6, rounds, mb / s, (double)one.ids / s / 1e6, mb / cpu_s,
           (double)one.ids / cpu_s / 1e6, (double)text_bytes * rounds / (double)(one.ids ? one.ids : 1),
           one.failed ? " (some refused)" : "");
    run_t runs[64];
    pthread_t th[64];
    uint64_t t0 = pdr_now_ns();
    for (int i = 0; i < threads; i++) {
        runs[i] = (run_t){tok, rounds, 0, 0, 0};
        pthread_create(&th[i], NULL, encode_all, &runs[i]);
    }
    uint64_t ids = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        ids += runs[i].ids;
    }
    s = (double)(pdr_now_ns() - t0) / 1e9;
    printf("encode, %d threads on one tokenizer: %.1f MB/s, %.2f M tokens/s in all\n", threads,
           mb * threads / s, (double)ids / s / 1e6);
    for (size_t i = 0; i < n_texts; i++)
        free(texts[i].s);
    free(texts);
    pdr_tokenizer_free(tok);
    return 0;
}
