/*
 * pdbench entry point: flags, the run matrix (profile x concurrency x repeat), and the requests.
 *
 * One libuv loop on the main thread drives every request through the router's own HTTP/1.1 client
 * (router/upstream/upstream.h: keep-alive pool per origin, de-chunked body bytes straight from the read
 * buffer, a total deadline per call), so the load generator costs little CPU next to the server it measures
 * and shares its HTTP code with pdrouter. A run is: the health gate (GET until 200), one warm-up
 * request, then `concurrency` closed-loop slots that each send the next request as soon as their last
 * one ended, until the run's request count (or duration) is reached. Times are CLOCK_MONOTONIC.
 * Results are written after the loop ends (report.c).
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>
#include "buf.h"
#include "err.h"
#include "pdbench.h"
#include "upstream.h"
#include "util.h"

#define BODY_LIMIT (256u << 20) /* a request body (a 1M-token prompt fits) */
#define EVENT_LIMIT (64u << 20) /* one SSE event: /generate repeats the whole text in every event */
#define ERRBODY_MAX 4096        /* bytes of an error answer kept for its message */
#define ITL_MAX (1u << 24)      /* inter-token gaps kept per request */
#define REQS_MAX (16u << 20)    /* requests recorded per run */
#define HEALTH_RETRY_MS 200
#define PROGRESS_TTY_MS 250

enum { PH_IDLE = 0, PH_HEALTH, PH_WARMUP, PH_MEASURE, PH_DONE };

typedef struct bench bench_t;

typedef struct slot {
    bench_t *b;
    pdr_leg_t leg;
    int active, warmup;
    pdr_buf_t body;
    pdb_sse_t sse;
    pdr_buf_t errbody;
    uint64_t t0_us, first_us, last_us, now_us;
    int64_t events_tokens; /* tokens counted from events */
    int64_t cum_reported;  /* /generate: the last meta_info.completion_tokens */
    int64_t usage_tokens;  /* OpenAI: usage.completion_tokens when a usage chunk came */
    int64_t prompt_tokens, cached_tokens;
    uint64_t seq; /* requests this slot started in the run (multi-turn: its conversations' turns) */
    int got_done, error_event, checked_type;
    char stream_cause[32];
    char detail[160];
    double overhead_us;
    double *itl;
    size_t n_itl, cap_itl;
} slot_t;

struct bench {
    uv_loop_t *loop;
    pdr_multi_t *multi;
    pdb_opts_t o;
    char url[2048], health_url[2048]; /* url: the first (or only) target */
    char (*urls)[2048];               /* --url A,B,C: every target; requests go to them in turn */
    size_t n_urls, next_url;
    const char **hdrs; /* NULL-terminated */
    pdb_run_t *runs;
    size_t n_runs, cur;
    int phase;
    slot_t *slots;
    size_t n_slots;
    size_t started, finished, active;
    uint64_t measure_t0_us, deadline_us, last_end_us;
    uv_timer_t health_timer, progress_timer;
    uv_signal_t sigint;
    pdr_leg_t probe;
    int probe_active;
    uint64_t health_deadline_us;
    char health_last[160];
    int tty, interrupted, fatal, health_failed_pending;
    uint64_t last_progress_us;
};

/* ------------------------------------------------------------------ prompts */

/* 256 short, common English words: each is one token (with its leading space) in the BPE
 * vocabularies of GPT-2/3/4, Llama and Qwen, and exactly one token on pdsim (which splits on
 * whitespace). */
static const char *const WORDS[256] = {
    "the",       "of",        "and",      "to",      "in",       "is",      "you",     "that",    "it",
    "he",        "was",       "for",      "on",      "are",      "as",      "with",    "his",     "they",
    "at",        "be",        "this",     "have",    "from",     "or",      "one",     "had",     "by",
    "word",      "but",       "not",      "what",    "all",      "were",    "we",      "when",    "your",
    "can",       "said",      "there",    "use",     "an",       "each",    "which",   "she",     "do",
    "how",       "their",     "if",       "will",    "up",       "other",   "about",   "out",     "many",
    "then",      "them",      "these",    "so",      "some",     "her",     "would",   "make",    "like",
    "him",       "into",      "time",     "has",     "look",     "two",     "more",    "write",   "go",
    "see",       "number",    "no",       "way",     "could",    "people",  "my",      "than",    "first",
    "water",     "been",      "call",     "who",     "oil",      "its",     "now",     "find",    "long",
    "down",      "day",       "did",      "get",     "come",     "made",    "may",     "part",    "over",
    "new",       "sound",     "take",     "only",    "little",   "work",    "know",    "place",   "year",
    "live",      "me",        "back",     "give",    "most",     "very",    "after",   "thing",   "our",
    "just",      "name",      "good",     "man",     "think",    "say",     "great",   "where",   "help",
    "through",   "much",      "before",   "line",    "right",    "too",     "mean",    "old",     "any",
    "same",      "tell",      "boy",      "follow",  "came",     "want",    "show",    "also",    "around",
    "form",      "three",     "small",    "set",     "put",      "end",     "does",    "another", "well",
    "large",     "must",      "big",      "even",    "such",     "because", "turn",    "here",    "why",
    "ask",       "went",      "men",      "read",    "need",     "land",    "home",    "us",      "move",
    "try",       "kind",      "hand",     "picture", "again",    "change",  "off",     "play",    "spell",
    "air",       "away",      "animal",   "house",   "point",    "page",    "letter",  "mother",  "answer",
    "found",     "study",     "still",    "learn",   "should",   "world",   "high",    "every",   "near",
    "add",       "food",      "between",  "own",     "below",    "country", "plant",   "last",    "school",
    "father",    "keep",      "tree",     "never",   "start",    "city",    "earth",   "eye",     "light",
    "head",      "under",     "story",    "saw",     "left",     "few",     "while",   "along",   "might",
    "close",     "something", "seem",     "next",    "hard",     "open",    "example", "begin",   "life",
    "always",    "those",     "both",     "paper",   "together", "got",     "group",   "often",   "run",
    "important", "until",     "children", "side",    "feet",     "car",     "mile",    "night",   "walk",
    "white",     "sea",       "began",    "river",
};

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The PRNG state of one request: a function of --seed, the run and the request's index only. */
static uint64_t request_seed(const pdb_opts_t *o, const pdb_run_t *r, uint64_t index)
{
    uint64_t s = o->seed;
    uint64_t parts[6] = {
        (uint64_t)r->isl, (uint64_t)r->osl, (uint64_t)r->concurrency, (uint64_t)r->repeat, index,
        0x70646265ull};
    for (size_t i = 0; i < 6; i++) {
        s ^= parts[i];
        s = splitmix64(&s);
    }
    return s;
}

static int put(pdr_buf_t *b, const char *s)
{
    return pdr_buf_append(b, s, strlen(s), BODY_LIMIT);
}

static int put_json_string(pdr_buf_t *b, const char *s)
{
    int r = put(b, "\"");
    for (; r == 0 && *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            r = pdr_buf_append(b, esc, 2, BODY_LIMIT);
        } else if (c < 0x20) {
            snprintf(esc, sizeof(esc), "\\u%04x", c);
            r = put(b, esc);
        } else {
            r = pdr_buf_append(b, s, 1, BODY_LIMIT);
        }
    }
    return r == 0 ? put(b, "\"") : r;
}

/* Appends n words drawn uniformly from WORDS (or token ids in [1000, 31000) for --input-ids) from the
 * PRNG state seed; *count is the number of words already in the prompt (for the separators). */
static int put_words(pdr_buf_t *b, int n, int ids, uint64_t seed, int *count)
{
    int r = 0;
    char num[24];
    for (int i = 0; r == 0 && i < n; i++, (*count)++) {
        uint64_t x = splitmix64(&seed);
        if (ids) {
            int k = snprintf(num, sizeof(num), "%s%llu", *count ? "," : "",
                             (unsigned long long)(1000 + x % 30000));
            r = pdr_buf_append(b, num, (size_t)k, BODY_LIMIT);
        } else {
            if (*count > 0)
                r = pdr_buf_append(b, " ", 1, BODY_LIMIT);
            if (r == 0)
                r = put(b, WORDS[x & 255]);
        }
    }
    return r;
}

/* A PRNG state for one part of a workload: a function of --seed, a tag and two numbers only. */
static uint64_t part_seed(const pdb_opts_t *o, uint64_t tag, uint64_t a, uint64_t c)
{
    uint64_t s = o->seed ^ tag;
    s = splitmix64(&s) ^ a;
    s = splitmix64(&s) ^ c;
    return splitmix64(&s);
}

/* The prompt of a request whose PRNG state is seed, by --workload:
 *  random:        isl words from seed;
 *  shared-prefix: system prompt k (prefix_tokens words from part_seed("sys", k), k drawn from seed
 *                 modulo prefixes), then isl - prefix_tokens words from seed;
 *  multi-turn:    conversation `conv` at turn `turn`: user turn 0, answer 0, user turn 1, ... user turn
 *                 `turn`, each user turn isl words and each answer osl words, all from part_seed(conv, j).
 *                 The answers are synthesized, not the server's: the prompts do not depend on what the
 *                 server said, so a seed gives the same prompts against any server. */
static int put_prompt(const pdb_opts_t *o, const pdb_run_t *run, pdr_buf_t *b, uint64_t seed, uint64_t conv,
                      int turn)
{
    int count = 0, r = 0;
    if (o->workload == PDB_WL_SHARED_PREFIX) {
        uint64_t k = splitmix64(&seed) % (uint64_t)o->prefixes;
        r = put_words(b, o->prefix_tokens, o->input_ids, part_seed(o, 0x73797370ull, k, 0), &count);
        return r == 0 ? put_words(b, run->isl - o->prefix_tokens, o->input_ids, seed, &count) : r;
    }
    if (o->workload == PDB_WL_MULTI_TURN) {
        for (int j = 0; r == 0 && j <= turn; j++) {
            r = put_words(b, run->isl, o->input_ids, part_seed(o, 0x75736572ull, conv, (uint64_t)j), &count);
            if (r == 0 && j < turn)
                r = put_words(b, run->osl, o->input_ids, part_seed(o, 0x616e7377ull, conv, (uint64_t)j),
                              &count);
        }
        return r;
    }
    return put_words(b, run->isl, o->input_ids, seed, &count);
}

static int build_body(const bench_t *b, const pdb_run_t *run, uint64_t seed, uint64_t conv, int turn,
                      pdr_buf_t *out)
{
    const pdb_opts_t *o = &b->o;
    char tail[256];
    out->len = 0;
    int r;
    if (o->api == PDB_API_GENERATE) {
        r = put(out, o->input_ids ? "{\"input_ids\":[" : "{\"text\":\"");
        if (r == 0)
            r = put_prompt(o, run, out, seed, conv, turn);
        snprintf(tail, sizeof(tail),
                 "%s,\"sampling_params\":{\"max_new_tokens\":%d,%s\"temperature\":%g},\"stream\":true}",
                 o->input_ids ? "]" : "\"", run->osl, o->ignore_eos ? "\"ignore_eos\":true," : "",
                 o->temperature);
    } else {
        r = put(out, "{\"model\":");
        if (r == 0)
            r = put_json_string(out, o->model);
        if (r == 0)
            r = put(out, o->api == PDB_API_COMPLETIONS ? ",\"prompt\":\""
                                                       : ",\"messages\":[{\"role\":\"user\",\"content\":\"");
        if (r == 0)
            r = put_prompt(o, run, out, seed, conv, turn);
        snprintf(tail, sizeof(tail),
                 "\"%s,\"max_tokens\":%d,%s\"temperature\":%g,\"stream\":true,"
                 "\"stream_options\":{\"include_usage\":true}}",
                 o->api == PDB_API_CHAT ? "}]" : "", run->osl, o->ignore_eos ? "\"ignore_eos\":true," : "",
                 o->temperature);
    }
    return r == 0 ? put(out, tail) : r;
}

/* ------------------------------------------------------------------ one request */

static void start_more(bench_t *b);
static void next_run(bench_t *b);
static void begin_measure(bench_t *b);

static void set_cause(slot_t *s, const char *cause, const char *detail)
{
    if (s->stream_cause[0] == '\0') {
        snprintf(s->stream_cause, sizeof(s->stream_cause), "%s", cause);
        if (detail != NULL)
            snprintf(s->detail, sizeof(s->detail), "%s", detail);
    }
}

static int itl_push(slot_t *s, double v)
{
    if (s->n_itl == s->cap_itl) {
        size_t c = s->cap_itl ? s->cap_itl * 2 : 256;
        if (c > ITL_MAX)
            return PDR_ETOOBIG;
        double *n = realloc(s->itl, c * sizeof(*n));
        if (n == NULL)
            return PDR_ENOMEM;
        s->itl = n;
        s->cap_itl = c;
    }
    s->itl[s->n_itl++] = v;
    return 0;
}

/* Copies the printable start of an event or error body into detail. */
static void snip(char *dst, size_t cap, const char *p, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < cap; i++)
        dst[k++] = (p[i] >= 0x20 && p[i] < 0x7f) ? p[i] : ' ';
    dst[k] = '\0';
}

static int on_event(void *arg, const char *d, size_t n)
{
    slot_t *s = arg;
    pdb_event_t ev;
    pdb_event_parse(d, n, &ev);
    if (ev.done) {
        s->got_done = 1;
        return 0;
    }
    if (ev.bad_json) {
        char sn[120];
        snip(sn, sizeof(sn), d, n);
        set_cause(s, "bad_event", sn);
        return 0;
    }
    if (ev.error) {
        if (!s->error_event)
            snip(s->detail, sizeof(s->detail), d, n);
        s->error_event = 1;
        return 0;
    }
    if (ev.prompt >= 0)
        s->prompt_tokens = ev.prompt;
    if (ev.cached >= 0)
        s->cached_tokens = ev.cached;
    int64_t delta = 0;
    if (s->b->o.api == PDB_API_GENERATE) {
        if (ev.completion >= 0) {
            delta = ev.completion - s->cum_reported;
            if (delta > 0)
                s->cum_reported = ev.completion;
        } else {
            delta = 1;
        }
    } else {
        if (ev.has_content)
            delta = 1;
        if (ev.completion >= 0) /* the usage chunk (include_usage), or usage on every chunk */
            s->usage_tokens = ev.completion;
    }
    if (delta <= 0)
        return 0;
    if (s->events_tokens == 0) {
        s->first_us = s->now_us;
        if (ev.pdsim_mono_us >= 0)
            s->overhead_us = (double)s->now_us - (double)ev.pdsim_mono_us;
    } else if (itl_push(s, (double)(s->now_us - s->last_us) / 1000.0) != 0) {
        set_cause(s, "too_many_tokens", NULL);
    }
    s->last_us = s->now_us;
    s->events_tokens += delta;
    return 0;
}

static size_t on_req_data(pdr_leg_t *leg, const char *p, size_t n)
{
    slot_t *s = leg->data;
    s->now_us = pdr_now_us();
    if (leg->status != 200) {
        size_t room = ERRBODY_MAX - s->errbody.len;
        if (room > 0)
            pdr_buf_append(&s->errbody, p, n < room ? n : room, ERRBODY_MAX);
        return n;
    }
    if (!s->checked_type) {
        s->checked_type = 1;
        if (strncmp(leg->content_type, "text/event-stream", 17) != 0) {
            char d[160];
            snprintf(d, sizeof(d), "Content-Type \"%s\", not text/event-stream", leg->content_type);
            set_cause(s, "not_stream", d);
        }
    }
    if (strcmp(s->stream_cause, "not_stream") == 0) {
        size_t room = ERRBODY_MAX - s->errbody.len;
        if (room > 0)
            pdr_buf_append(&s->errbody, p, n < room ? n : room, ERRBODY_MAX);
        return n;
    }
    int r = pdb_sse_feed(&s->sse, p, n, on_event, s);
    if (r != 0) {
        set_cause(s, "bad_event",
                  r == PDR_ETOOBIG ? "an SSE event or line larger than 64 MiB" : "out of memory");
        return 0; /* aborts the leg */
    }
    return n;
}

static const char *err_cause(int err)
{
    switch (err) {
    case PDR_ECONNREFUSED:
        return "connect";
    case PDR_ETIMEDOUT:
        return "timeout";
    case PDR_EPEERGONE:
        return "reset"; /* the connection closed or was reset before the response ended */
    case PDR_EIO:
        return "bad_response"; /* malformed HTTP framing (a stream cut inside a chunk looks like this) */
    default:
        return "io";
    }
}

static void slot_reset(slot_t *s)
{
    s->errbody.len = 0;
    pdb_sse_free(&s->sse);
    pdb_sse_init(&s->sse, EVENT_LIMIT);
    s->events_tokens = s->cum_reported = 0;
    s->usage_tokens = s->prompt_tokens = s->cached_tokens = -1;
    s->got_done = s->error_event = s->checked_type = 0;
    s->stream_cause[0] = s->detail[0] = '\0';
    s->overhead_us = NAN;
    free(s->itl);
    s->itl = NULL;
    s->n_itl = s->cap_itl = 0;
    s->first_us = s->last_us = 0;
}

/* Judges a finished request: 1 ok, else 0 with cause and detail filled. */
static int judge(slot_t *s, int err, pdb_req_t *q)
{
    const pdb_run_t *run = &s->b->runs[s->b->cur];
    int64_t tokens =
        s->b->o.api != PDB_API_GENERATE && s->usage_tokens >= 0 ? s->usage_tokens : s->events_tokens;
    q->tokens = tokens;
    q->status = s->leg.status;
    if (err == PDR_ECANCELED && s->stream_cause[0] != '\0') {
        snprintf(q->cause, sizeof(q->cause), "%s", s->stream_cause);
        snprintf(q->detail, sizeof(q->detail), "%s", s->detail);
        return 0;
    }
    if (err != 0) {
        snprintf(q->cause, sizeof(q->cause), "%s", err_cause(err));
        snprintf(q->detail, sizeof(q->detail), "%s%s (%s)", s->leg.status ? "after the headers: " : "",
                 pdr_strerror(err), pdr_errname(err));
        return 0;
    }
    if (s->leg.status != 200) {
        snprintf(q->cause, sizeof(q->cause), "http_%ld", s->leg.status);
        snip(q->detail, sizeof(q->detail), s->errbody.p ? s->errbody.p : "", s->errbody.len);
        return 0;
    }
    if (s->stream_cause[0] != '\0') {
        snprintf(q->cause, sizeof(q->cause), "%s", s->stream_cause);
        if (strcmp(s->stream_cause, "not_stream") == 0 && s->errbody.len > 0) {
            char b[120];
            snip(b, sizeof(b), s->errbody.p, s->errbody.len);
            snprintf(q->detail, sizeof(q->detail), "%.40s: %.110s", s->detail, b);
        } else {
            snprintf(q->detail, sizeof(q->detail), "%s", s->detail);
        }
        return 0;
    }
    if (s->error_event) {
        snprintf(q->cause, sizeof(q->cause), "stream_error");
        snprintf(q->detail, sizeof(q->detail), "%s", s->detail);
        return 0;
    }
    if (!s->got_done) {
        snprintf(q->cause, sizeof(q->cause), "no_done");
        snprintf(q->detail, sizeof(q->detail), "the stream ended after %lld tokens without data: [DONE]",
                 (long long)tokens);
        return 0;
    }
    if (s->b->o.ignore_eos ? tokens != run->osl : tokens == 0) {
        snprintf(q->cause, sizeof(q->cause), "%s", tokens < run->osl ? "short_output" : "long_output");
        snprintf(q->detail, sizeof(q->detail), "%lld output tokens, asked for %d", (long long)tokens,
                 run->osl);
        return 0;
    }
    return 1;
}

static void on_req_done(pdr_leg_t *leg, int err)
{
    slot_t *s = leg->data;
    bench_t *b = s->b;
    pdb_run_t *run = &b->runs[b->cur];
    uint64_t end = pdr_now_us();
    s->active = 0;
    b->active--;
    pdb_req_t q;
    memset(&q, 0, sizeof(q));
    q.overhead_us = NAN;
    q.ok = judge(s, err, &q);
    q.prompt_tokens = s->prompt_tokens;
    q.cached_tokens = s->cached_tokens;
    q.e2e_ms = (double)(end - s->t0_us) / 1000.0;
    q.ttft_ms = s->events_tokens > 0 ? (double)(s->first_us - s->t0_us) / 1000.0 : -1;
    q.tpot_ms = q.tokens > 1 && s->events_tokens > 0 ? (q.e2e_ms - q.ttft_ms) / (double)(q.tokens - 1) : -1;
    q.overhead_us = s->overhead_us;
    if (s->warmup) {
        run->warmup_ok = q.ok;
        if (!q.ok)
            snprintf(run->warmup_error, sizeof(run->warmup_error), "%.31s: %.159s", q.cause, q.detail);
        begin_measure(b);
        return;
    }
    b->finished++;
    b->last_end_us = end;
    if (run->n_reqs == run->cap_reqs && run->n_reqs < REQS_MAX) {
        size_t c = run->cap_reqs ? run->cap_reqs * 2 : 64;
        pdb_req_t *n = realloc(run->reqs, c * sizeof(*n));
        if (n != NULL) {
            run->reqs = n;
            run->cap_reqs = c;
        }
    }
    if (run->n_reqs < run->cap_reqs) {
        q.itl_ms = s->itl;
        q.n_itl = s->n_itl;
        s->itl = NULL;
        s->n_itl = s->cap_itl = 0;
        run->reqs[run->n_reqs++] = q;
    }
    start_more(b);
}

static const pdr_leg_cbs_t req_cbs = {on_req_data, on_req_done};

static int slot_start(bench_t *b, slot_t *s, uint64_t index, int warmup)
{
    pdb_run_t *run = &b->runs[b->cur];
    slot_reset(s);
    s->warmup = warmup;
    /* Multi-turn: slot k runs conversations k, k + c, k + 2c, ... (c = concurrency), each for --turns
     * requests in order, so a turn is sent only after the previous one was answered. */
    uint64_t c = (uint64_t)run->concurrency, k = (uint64_t)(s - b->slots), T = (uint64_t)b->o.turns;
    uint64_t conv = k + c * (s->seq / T) + c * 1000003ull * (uint64_t)run->repeat;
    int turn = (int)(s->seq % T);
    int r = build_body(b, run, request_seed(&b->o, run, index), conv, turn, &s->body);
    if (r != 0) {
        fprintf(stderr, "pdbench: cannot build a %d-token request body: %s\n", run->isl, pdr_strerror(r));
        return r;
    }
    s->t0_us = pdr_now_us();
    const char *url = b->urls[b->next_url++ % b->n_urls];
    r = pdr_leg_start(&s->leg, b->multi, url, s->body.p, s->body.len, b->hdrs, b->o.connect_timeout_ms,
                      (long)(b->o.timeout_s * 1000.0), &req_cbs, s);
    if (r != 0) {
        fprintf(stderr, "pdbench: cannot send to %s: %s\n", url, pdr_strerror(r));
        return r;
    }
    s->active = 1;
    b->active++;
    if (!warmup)
        s->seq++;
    return 0;
}

/* ------------------------------------------------------------------ progress */

static void progress(bench_t *b, int final)
{
    if (b->o.quiet || b->cur >= b->n_runs)
        return;
    const pdb_run_t *r = &b->runs[b->cur];
    size_t failed = 0;
    int64_t toks = 0, cached = 0, prompt = 0;
    for (size_t i = 0; i < r->n_reqs; i++) {
        const pdb_req_t *q = &r->reqs[i];
        failed += !q->ok;
        toks += q->ok ? q->tokens : 0;
        if (q->ok && q->cached_tokens >= 0 && q->prompt_tokens >= 0) {
            cached += q->cached_tokens;
            prompt += q->prompt_tokens;
        }
    }
    char hit[32] = "";
    if (prompt > 0)
        snprintf(hit, sizeof(hit), ", cache hit %.1f%%", 100.0 * (double)cached / (double)prompt);
    uint64_t now = final && b->last_end_us ? b->last_end_us : pdr_now_us();
    double el = b->measure_t0_us && now > b->measure_t0_us ? (double)(now - b->measure_t0_us) / 1e6 : 0;
    char plan[32];
    if (r->planned)
        snprintf(plan, sizeof(plan), "/%zu", r->planned);
    else
        plan[0] = '\0';
    const char *ph = b->phase == PH_HEALTH ? "health gate" : b->phase == PH_WARMUP ? "warm-up" : "";
    char line[256];
    int n = snprintf(line, sizeof(line),
                     "[%zu/%zu] %d/%d c=%d r%d: %s%s%zu%s done, %zu failed, %.0f tok/s%s, %.1fs", b->cur + 1,
                     b->n_runs, r->isl, r->osl, r->concurrency, r->repeat + 1, ph, ph[0] ? ", " : "",
                     r->n_reqs, plan, failed, el > 0 ? (double)toks / el : 0.0, hit, el);
    if (n < 0)
        return;
    if (b->tty)
        fprintf(stderr, "\r%s\033[K%s", line, final ? "\n" : "");
    else if (final)
        fprintf(stderr, "%s\n", line);
}

static void on_progress(uv_timer_t *t)
{
    progress(t->data, 0);
}

/* ------------------------------------------------------------------ the run sequence */

static void end_run(bench_t *b)
{
    pdb_run_t *run = &b->runs[b->cur];
    run->wall_s = b->last_end_us > b->measure_t0_us ? (double)(b->last_end_us - b->measure_t0_us) / 1e6 : 0;
    progress(b, 1);
    b->cur++;
    next_run(b);
}

static int more_to_start(const bench_t *b)
{
    const pdb_run_t *run = &b->runs[b->cur];
    if (b->interrupted)
        return 0;
    if (run->planned)
        return b->started < run->planned;
    return pdr_now_us() < b->deadline_us;
}

static void start_more(bench_t *b)
{
    const pdb_run_t *run = &b->runs[b->cur];
    for (size_t i = 0; i < b->n_slots && more_to_start(b); i++) {
        slot_t *s = &b->slots[i];
        if (s->active)
            continue;
        if (b->o.workload == PDB_WL_MULTI_TURN && run->planned != 0 &&
            s->seq >= run->planned / b->n_slots + (i < run->planned % b->n_slots))
            continue; /* this slot's share is sent: which requests run depends on --seed only */
        if (slot_start(b, s, b->started, 0) != 0) {
            b->interrupted = b->fatal = 1;
            break;
        }
        b->started++;
    }
    if (b->active == 0 && b->phase == PH_MEASURE)
        end_run(b);
}

static void begin_measure(bench_t *b)
{
    pdb_run_t *run = &b->runs[b->cur];
    b->phase = PH_MEASURE;
    b->started = b->finished = 0;
    b->measure_t0_us = b->last_end_us = pdr_now_us();
    b->deadline_us = b->measure_t0_us + (uint64_t)(b->o.duration * 1e6);
    b->n_slots = (size_t)run->concurrency;
    for (size_t i = 0; i < b->n_slots; i++)
        b->slots[i].seq = 0;
    start_more(b);
}

static void begin_warmup(bench_t *b)
{
    pdb_run_t *run = &b->runs[b->cur];
    run->health_ok = 1;
    if (b->o.warmup == 0 || b->interrupted) {
        run->warmup_ok = -1;
        begin_measure(b);
        return;
    }
    b->phase = PH_WARMUP;
    if (slot_start(b, &b->slots[0], UINT64_MAX, 1) != 0) {
        run->warmup_ok = 0;
        snprintf(run->warmup_error, sizeof(run->warmup_error), "could not be sent");
        begin_measure(b);
    }
}

static void probe_health(bench_t *b);

static size_t on_probe_data(pdr_leg_t *leg, const char *p, size_t n)
{
    (void)leg;
    (void)p;
    return n;
}

/* The gate did not pass: the run is recorded as failed and the next one starts. */
static void health_failed(bench_t *b)
{
    pdb_run_t *run = &b->runs[b->cur];
    run->health_ok = 0;
    snprintf(run->health_error, sizeof(run->health_error),
             "health gate: GET %.200s did not answer 200 within %.1f s (last: %.150s)", b->health_url,
             b->o.health_timeout_s, b->health_last);
    if (!b->o.quiet)
        fprintf(stderr, "%spdbench: run %zu (%d/%d c=%d): %s; run skipped\n", b->tty ? "\r\033[K" : "",
                b->cur + 1, run->isl, run->osl, run->concurrency, run->health_error);
    b->cur++;
    next_run(b);
}

static void on_health_timer(uv_timer_t *t)
{
    bench_t *b = t->data;
    if (b->health_failed_pending) {
        b->health_failed_pending = 0;
        health_failed(b);
        return;
    }
    probe_health(b);
}

static void on_probe_done(pdr_leg_t *leg, int err)
{
    bench_t *b = leg->data;
    b->probe_active = 0;
    if (err == 0 && leg->status == 200) {
        begin_warmup(b);
        return;
    }
    if (err != 0)
        snprintf(b->health_last, sizeof(b->health_last), "%s (%s)", pdr_strerror(err), pdr_errname(err));
    else
        snprintf(b->health_last, sizeof(b->health_last), "HTTP %ld", leg->status);
    if (pdr_now_us() >= b->health_deadline_us) {
        health_failed(b);
        return;
    }
    uv_timer_start(&b->health_timer, on_health_timer, HEALTH_RETRY_MS, 0);
}

static const pdr_leg_cbs_t probe_cbs = {on_probe_data, on_probe_done};

static void probe_health(bench_t *b)
{
    uint64_t now = pdr_now_us();
    long left_ms = b->health_deadline_us > now ? (long)((b->health_deadline_us - now) / 1000) : 0;
    long t = left_ms < 2000 ? (left_ms < 100 ? 100 : left_ms) : 2000;
    int r = pdr_leg_start_probe(&b->probe, b->multi, b->health_url, NULL, t, &probe_cbs, b);
    if (r != 0) {
        /* A URL the client cannot use: reported as a failed gate on the next turn of the loop. */
        snprintf(b->health_last, sizeof(b->health_last), "cannot send: %s", pdr_strerror(r));
        b->health_failed_pending = 1;
        uv_timer_start(&b->health_timer, on_health_timer, 0, 0);
        return;
    }
    b->probe_active = 1;
}

static void on_closed(uv_handle_t *h)
{
    (void)h;
}

static void on_multi_closed(void *arg)
{
    (void)arg;
}

static void finish(bench_t *b)
{
    b->phase = PH_DONE;
    uv_timer_stop(&b->progress_timer);
    uv_close((uv_handle_t *)&b->progress_timer, on_closed);
    uv_close((uv_handle_t *)&b->health_timer, on_closed);
    uv_close((uv_handle_t *)&b->sigint, on_closed);
    pdr_multi_close(b->multi, on_multi_closed, b);
}

static void next_run(bench_t *b)
{
    if (b->interrupted && b->cur < b->n_runs)
        b->n_runs = b->cur; /* the runs not begun, or not measured, are left out */
    if (b->cur >= b->n_runs) {
        finish(b);
        return;
    }
    b->phase = PH_HEALTH;
    b->measure_t0_us = b->last_end_us = 0;
    pdb_run_t *run = &b->runs[b->cur];
    run->warmup_ok = -1;
    if (b->o.no_health) {
        begin_warmup(b);
        return;
    }
    b->health_deadline_us = pdr_now_us() + (uint64_t)(b->o.health_timeout_s * 1e6);
    b->health_last[0] = '\0';
    probe_health(b);
}

/* SIGINT: no new requests; those in flight are cancelled and recorded as "interrupted". */
static void on_sigint(uv_signal_t *sg, int signum)
{
    (void)signum;
    bench_t *b = sg->data;
    if (b->interrupted || b->phase == PH_DONE)
        return;
    b->interrupted = 1;
    fprintf(stderr, "%spdbench: interrupted; writing what was measured\n", b->tty ? "\r\033[K" : "");
    if (b->probe_active) {
        pdr_leg_cancel(&b->probe);
        b->probe_active = 0;
    }
    uv_timer_stop(&b->health_timer);
    pdb_run_t *run = &b->runs[b->cur];
    for (size_t i = 0; i < b->n_slots || (b->phase == PH_WARMUP && i == 0); i++) {
        slot_t *s = &b->slots[i];
        if (!s->active)
            continue;
        pdr_leg_cancel(&s->leg);
        s->active = 0;
        b->active--;
        if (!s->warmup && run->n_reqs < run->cap_reqs) {
            pdb_req_t q;
            memset(&q, 0, sizeof(q));
            q.overhead_us = NAN;
            q.ttft_ms = q.tpot_ms = q.e2e_ms = -1;
            q.prompt_tokens = -1;
            snprintf(q.cause, sizeof(q.cause), "interrupted");
            run->reqs[run->n_reqs++] = q;
        }
    }
    if (b->phase == PH_MEASURE) {
        b->last_end_us = pdr_now_us();
        end_run(b);
        return;
    }
    next_run(b);
}

/* ------------------------------------------------------------------ flags */

static const char USAGE[] =
    "usage: pdbench --url http://HOST:PORT [options]\n"
    "\n"
    "End-to-end load generator for sglang (/generate) and OpenAI (/v1/completions, /v1/chat/completions)\n"
    "endpoints: pdrouter, another router, or a worker. Every request streams (SSE) and asks for exactly\n"
    "OSL output tokens (ignore_eos). See docs/pdbench.md.\n"
    "\n"
    "Target\n"
    "  --url URL              base URL of the endpoint (http only), e.g. http://127.0.0.1:8000; a\n"
    "                         comma-separated list (router replicas): requests go to each in turn\n"
    "  --api API              generate (default, sglang native), completions or chat (OpenAI)\n"
    "  --path PATH            request path (default /generate, /v1/completions or /v1/chat/completions)\n"
    "  --model NAME           \"model\" of OpenAI requests (default: default)\n"
    "  --header 'K: V'        extra request header, repeatable (e.g. 'Authorization: Bearer ...')\n"
    "  --input-ids            /generate only: send input_ids (token ids) instead of text\n"
    "  --no-ignore-eos        do not send ignore_eos; then any non-empty output counts as complete\n"
    "  --temperature T        sampling temperature sent with every request (default 0)\n"
    "\n"
    "Matrix\n"
    "  --profiles LIST        ISL/OSL pairs, e.g. 128/128,2048/256 (input/output tokens)\n"
    "  --matrix study         the study's profiles: 128/128,2048/256,8192/256,32768/256,2048/2048\n"
    "                         (default when --profiles is not given)\n"
    "  --concurrency LIST     concurrency levels, e.g. 1,8,64 (default 1): requests in flight at once\n"
    "  --requests N           requests per run (default max(8, 4 x concurrency))\n"
    "  --duration S           run for S seconds instead (no new request starts after S)\n"
    "  --repeats N            runs per profile and concurrency (default 1)\n"
    "  --seed N               prompt seed (default 1): the same seed sends the same prompts\n"
    "  --warmup N             warm-up requests per run, not measured: 0 or 1 (default 1)\n"
    "  --workload W           random (default): independent prompts of ISL words;\n"
    "                         shared-prefix: one of --prefixes K system prompts of --prefix-tokens P\n"
    "                         words (picked by the seeded PRNG), then a unique suffix of ISL - P words;\n"
    "                         multi-turn: conversations of --turns T requests, each prompt the previous\n"
    "                         one + a synthesized answer of OSL words + a new user turn of ISL words\n"
    "                         (turn t sends (t+1) x ISL + t x OSL tokens; conversations interleave over\n"
    "                         the concurrency slots, each slot sends its turns in order)\n"
    "  --prefixes K           shared-prefix: system prompts (default 4)\n"
    "  --prefix-tokens P      shared-prefix: tokens of each (required; at most every profile's ISL)\n"
    "  --turns T              multi-turn: requests per conversation (default 4)\n"
    "\n"
    "Health and time limits\n"
    "  --health-url URL       GET before every run until it answers 200 (default URL/health)\n"
    "  --health-timeout S     give the gate S seconds (default 60), then fail that run\n"
    "  --no-health            no health gate\n"
    "  --timeout S            per-request deadline, seconds (default 600)\n"
    "  --connect-timeout-ms N connect deadline (default 5000)\n"
    "\n"
    "Output\n"
    "  --json FILE            machine-readable results of every run\n"
    "  --per-request          include every request's record (and its inter-token gaps) in --json\n"
    "  --report DIR           DIR/report.md (a table of runs) and PNG plots made with gnuplot\n"
    "  --no-plots             write the report without plots (no gnuplot needed)\n"
    "  --gnuplot PATH         the gnuplot program (default gnuplot, found on PATH)\n"
    "  --quiet                no progress line on stderr\n"
    "  --allow-failures       exit 0 even when requests failed (they are still reported)\n"
    "  -h, --help             this text\n"
    "\n"
    "Exit status: 0 all requests of all runs succeeded; 1 a request failed, a health gate or warm-up\n"
    "failed, or an output could not be written; 2 bad usage; 3 the plots could not be made (gnuplot\n"
    "missing or failing; use --no-plots); 130 interrupted (SIGINT; what was measured is written).\n";

static int parse_double(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

static int parse_long(const char *s, long lo, long hi, long *out)
{
    int64_t v;
    if (pdr_parse_int64(s, strlen(s), lo, hi, &v) != 0)
        return -1;
    *out = (long)v;
    return 0;
}

static int parse_list(const char *s, int **out, size_t *n, long lo, long hi)
{
    size_t cap = 1;
    for (const char *p = s; *p; p++)
        cap += *p == ',';
    int *v = calloc(cap, sizeof(*v));
    if (v == NULL)
        return -1;
    size_t k = 0;
    const char *p = s;
    while (1) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        int64_t x;
        if (pdr_parse_int64(p, len, lo, hi, &x) != 0) {
            free(v);
            return -1;
        }
        v[k++] = (int)x;
        if (c == NULL)
            break;
        p = c + 1;
    }
    *out = v;
    *n = k;
    return 0;
}

static int parse_profiles(const char *s, pdb_opts_t *o)
{
    size_t cap = 1;
    for (const char *p = s; *p; p++)
        cap += *p == ',';
    o->isl = calloc(cap, sizeof(int));
    o->osl = calloc(cap, sizeof(int));
    if (o->isl == NULL || o->osl == NULL)
        return -1;
    size_t k = 0;
    const char *p = s;
    while (1) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        const char *slash = memchr(p, '/', len);
        int64_t a, b;
        if (slash == NULL || pdr_parse_int64(p, (size_t)(slash - p), 1, 1 << 24, &a) != 0 ||
            pdr_parse_int64(slash + 1, len - (size_t)(slash - p) - 1, 1, 1 << 24, &b) != 0)
            return -1;
        o->isl[k] = (int)a;
        o->osl[k] = (int)b;
        k++;
        if (c == NULL)
            break;
        p = c + 1;
    }
    o->n_profiles = k;
    return 0;
}

#define STUDY_PROFILES "128/128,2048/256,8192/256,32768/256,2048/2048"

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "pdbench: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(pdbench --help lists every flag)\n");
    return 2;
}

static int parse_args(int argc, char **argv, pdb_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->model = "default";
    o->repeats = 1;
    o->seed = 1;
    o->warmup = 1;
    o->prefixes = 4;
    o->turns = 4;
    o->health_timeout_s = 60;
    o->timeout_s = 600;
    o->connect_timeout_ms = 5000;
    o->ignore_eos = 1;
    o->gnuplot = "gnuplot";
    const char *matrix = NULL, *conc = "1";
    o->headers = calloc((size_t)argc + 1, sizeof(char *));
    if (o->headers == NULL)
        return 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long l;
#define NEEDV()                                                                                              \
    do {                                                                                                     \
        if (v == NULL)                                                                                       \
            return usage_error("%s needs a value%s", a, "");                                                 \
        i++;                                                                                                 \
    } while (0)
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(USAGE, stdout);
            exit(0);
        } else if (strcmp(a, "--url") == 0) {
            NEEDV();
            o->url = v;
        } else if (strcmp(a, "--api") == 0) {
            NEEDV();
            if (strcmp(v, "generate") == 0)
                o->api = PDB_API_GENERATE;
            else if (strcmp(v, "completions") == 0)
                o->api = PDB_API_COMPLETIONS;
            else if (strcmp(v, "chat") == 0)
                o->api = PDB_API_CHAT;
            else
                return usage_error("--api %s: expected generate, completions or chat%s", v, "");
        } else if (strcmp(a, "--path") == 0) {
            NEEDV();
            if (v[0] != '/')
                return usage_error("--path %s: must start with /%s", v, "");
            o->path = v;
        } else if (strcmp(a, "--model") == 0) {
            NEEDV();
            o->model = v;
        } else if (strcmp(a, "--header") == 0) {
            NEEDV();
            const char *colon = strchr(v, ':');
            if (colon == NULL || colon == v || strpbrk(v, "\r\n") != NULL)
                return usage_error("--header %s: expected 'Name: value' on one line%s", v, "");
            o->headers[o->n_headers++] = v;
        } else if (strcmp(a, "--input-ids") == 0) {
            o->input_ids = 1;
        } else if (strcmp(a, "--no-ignore-eos") == 0) {
            o->ignore_eos = 0;
        } else if (strcmp(a, "--temperature") == 0) {
            NEEDV();
            if (parse_double(v, 0, 100, &o->temperature) != 0)
                return usage_error("--temperature %s: expected a number in [0, 100]%s", v, "");
        } else if (strcmp(a, "--profiles") == 0) {
            NEEDV();
            o->profiles_arg = v;
        } else if (strcmp(a, "--matrix") == 0) {
            NEEDV();
            if (strcmp(v, "study") != 0)
                return usage_error("--matrix %s: the only named matrix is \"study\"%s", v, "");
            matrix = v;
        } else if (strcmp(a, "--concurrency") == 0) {
            NEEDV();
            conc = v;
        } else if (strcmp(a, "--requests") == 0) {
            NEEDV();
            if (parse_long(v, 1, (long)REQS_MAX, &o->requests) != 0)
                return usage_error("--requests %s: expected an integer in [1, 16777216]%s", v, "");
        } else if (strcmp(a, "--duration") == 0) {
            NEEDV();
            if (parse_double(v, 0.001, 1e7, &o->duration) != 0)
                return usage_error("--duration %s: expected seconds > 0%s", v, "");
        } else if (strcmp(a, "--repeats") == 0) {
            NEEDV();
            if (parse_long(v, 1, 1000, &l) != 0)
                return usage_error("--repeats %s: expected an integer in [1, 1000]%s", v, "");
            o->repeats = (int)l;
        } else if (strcmp(a, "--seed") == 0) {
            NEEDV();
            int64_t s;
            if (pdr_parse_int64(v, strlen(v), 0, INT64_MAX, &s) != 0)
                return usage_error("--seed %s: expected a non-negative integer%s", v, "");
            o->seed = (uint64_t)s;
        } else if (strcmp(a, "--workload") == 0) {
            NEEDV();
            if (strcmp(v, "random") == 0)
                o->workload = PDB_WL_RANDOM;
            else if (strcmp(v, "shared-prefix") == 0)
                o->workload = PDB_WL_SHARED_PREFIX;
            else if (strcmp(v, "multi-turn") == 0)
                o->workload = PDB_WL_MULTI_TURN;
            else
                return usage_error("--workload %s: expected random, shared-prefix or multi-turn%s", v, "");
        } else if (strcmp(a, "--prefixes") == 0) {
            NEEDV();
            if (parse_long(v, 1, 1000000, &l) != 0)
                return usage_error("--prefixes %s: expected an integer in [1, 1000000]%s", v, "");
            o->prefixes = (int)l;
        } else if (strcmp(a, "--prefix-tokens") == 0) {
            NEEDV();
            if (parse_long(v, 1, 16777216, &l) != 0)
                return usage_error("--prefix-tokens %s: expected an integer in [1, 16777216]%s", v, "");
            o->prefix_tokens = (int)l;
        } else if (strcmp(a, "--turns") == 0) {
            NEEDV();
            if (parse_long(v, 1, 1000, &l) != 0)
                return usage_error("--turns %s: expected an integer in [1, 1000]%s", v, "");
            o->turns = (int)l;
        } else if (strcmp(a, "--warmup") == 0) {
            NEEDV();
            if (parse_long(v, 0, 1, &l) != 0)
                return usage_error("--warmup %s: expected 0 or 1%s", v, "");
            o->warmup = (int)l;
        } else if (strcmp(a, "--health-url") == 0) {
            NEEDV();
            o->health_url = v;
        } else if (strcmp(a, "--health-timeout") == 0) {
            NEEDV();
            if (parse_double(v, 0, 1e6, &o->health_timeout_s) != 0)
                return usage_error("--health-timeout %s: expected seconds >= 0%s", v, "");
        } else if (strcmp(a, "--no-health") == 0) {
            o->no_health = 1;
        } else if (strcmp(a, "--timeout") == 0) {
            NEEDV();
            if (parse_double(v, 0.001, 1e6, &o->timeout_s) != 0)
                return usage_error("--timeout %s: expected seconds > 0%s", v, "");
        } else if (strcmp(a, "--connect-timeout-ms") == 0) {
            NEEDV();
            if (parse_long(v, 1, 3600000, &o->connect_timeout_ms) != 0)
                return usage_error("--connect-timeout-ms %s: expected an integer in [1, 3600000]%s", v, "");
        } else if (strcmp(a, "--json") == 0) {
            NEEDV();
            o->json_path = v;
        } else if (strcmp(a, "--per-request") == 0) {
            o->per_request = 1;
        } else if (strcmp(a, "--report") == 0) {
            NEEDV();
            o->report_dir = v;
        } else if (strcmp(a, "--no-plots") == 0) {
            o->no_plots = 1;
        } else if (strcmp(a, "--gnuplot") == 0) {
            NEEDV();
            o->gnuplot = v;
        } else if (strcmp(a, "--quiet") == 0) {
            o->quiet = 1;
        } else if (strcmp(a, "--allow-failures") == 0) {
            o->allow_failures = 1;
        } else {
            return usage_error("unknown argument %s%s", a, "");
        }
#undef NEEDV
    }
    if (o->url == NULL)
        return usage_error("--url is required (e.g. --url http://127.0.0.1:8000)%s%s", "", "");
    if (strncmp(o->url, "http://", 7) != 0)
        return usage_error("--url %s: only http:// URLs are supported%s", o->url, "");
    if (o->input_ids && o->api != PDB_API_GENERATE)
        return usage_error("--input-ids needs --api generate (OpenAI prompts are sent as text)%s%s", "", "");
    if (o->profiles_arg != NULL && matrix != NULL)
        return usage_error("--profiles and --matrix exclude each other%s%s", "", "");
    if (o->profiles_arg == NULL)
        o->profiles_arg = STUDY_PROFILES;
    if (parse_profiles(o->profiles_arg, o) != 0)
        return usage_error("--profiles %s: expected ISL/OSL pairs separated by commas, e.g. 128/128,2048/256 "
                           "(each in [1, 16777216])%s",
                           o->profiles_arg, "");
    if (parse_list(conc, &o->conc, &o->n_conc, 1, 100000) != 0)
        return usage_error("--concurrency %s: expected integers in [1, 100000] separated by commas%s", conc,
                           "");
    if (o->workload == PDB_WL_SHARED_PREFIX) {
        if (o->prefix_tokens == 0)
            return usage_error("--workload shared-prefix needs --prefix-tokens P (the system prompts' "
                               "length)%s%s",
                               "", "");
        for (size_t k = 0; k < o->n_profiles; k++)
            if (o->prefix_tokens > o->isl[k])
                return usage_error("--prefix-tokens %d is longer than a profile's ISL (%s)", o->prefix_tokens,
                                   o->profiles_arg);
    } else if (o->prefix_tokens != 0 || o->prefixes != 4) {
        return usage_error("--prefixes and --prefix-tokens need --workload shared-prefix%s%s", "", "");
    }
    if (o->workload != PDB_WL_MULTI_TURN && o->turns != 4)
        return usage_error("--turns needs --workload multi-turn%s%s", "", "");
    if (o->path == NULL)
        o->path = o->api == PDB_API_GENERATE      ? "/generate"
                  : o->api == PDB_API_COMPLETIONS ? "/v1/completions"
                                                  : "/v1/chat/completions";
    return 0;
}

/* ------------------------------------------------------------------ main */

static int count_failures(const pdb_run_t *runs, size_t n)
{
    size_t f = 0;
    for (size_t i = 0; i < n; i++)
        f += runs[i].failed + !runs[i].health_ok + (runs[i].warmup_ok == 0);
    return f > 0;
}

int main(int argc, char **argv)
{
    static bench_t B;
    bench_t *b = &B;
    int rc = parse_args(argc, argv, &b->o);
    if (rc != 0)
        return rc;
    signal(SIGPIPE, SIG_IGN);
    pdb_opts_t *o = &b->o;
    /* One connection per request in flight: the soft open-files limit goes up to the hard one. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    /* --url A[,B...]: each a base URL; the path goes after each. The health gate asks the first. */
    size_t n_urls = 1;
    for (const char *q = o->url; *q; q++)
        n_urls += *q == ',';
    if (n_urls > PDB_MAX_URLS)
        return usage_error("--url: %zu URLs, at most %d%s", n_urls, PDB_MAX_URLS, "");
    if ((b->urls = calloc(n_urls, sizeof(*b->urls))) == NULL)
        return usage_error("out of memory%s%s", "", "");
    size_t ulen0 = 0;
    for (const char *q = o->url; b->n_urls < n_urls; b->n_urls++) {
        const char *e = strchr(q, ',');
        size_t ulen = e != NULL ? (size_t)(e - q) : strlen(q);
        const char *bad =
            ulen < 8 || strncmp(q, "http://", 7) != 0 ? "every URL must be http://HOST:PORT" : NULL;
        while (ulen > 7 && q[ulen - 1] == '/')
            ulen--;
        if (bad == NULL && (ulen + strlen(o->path) + 1 > sizeof(b->url) || ulen + 8 > sizeof(b->health_url)))
            bad = "too long";
        if (bad != NULL) {
            free(b->urls);
            b->urls = NULL;
            return usage_error("--url %s: %s", o->url, bad);
        }
        memcpy(b->urls[b->n_urls], q, ulen);
        memcpy(b->urls[b->n_urls] + ulen, o->path, strlen(o->path) + 1);
        if (b->n_urls == 0)
            ulen0 = ulen;
        q = e != NULL ? e + 1 : q + ulen;
    }
    memcpy(b->url, b->urls[0], sizeof(b->url));
    if (o->health_url != NULL)
        snprintf(b->health_url, sizeof(b->health_url), "%.2000s", o->health_url);
    else
        snprintf(b->health_url, sizeof(b->health_url), "%.*s/health", (int)ulen0, o->url);
    b->hdrs = o->headers;
    b->tty = isatty(2);

    int max_conc = 1;
    for (size_t i = 0; i < o->n_conc; i++)
        max_conc = o->conc[i] > max_conc ? o->conc[i] : max_conc;
    b->n_runs = o->n_profiles * o->n_conc * (size_t)o->repeats;
    b->runs = calloc(b->n_runs, sizeof(*b->runs));
    b->slots = calloc((size_t)max_conc, sizeof(*b->slots));
    if (b->runs == NULL || b->slots == NULL) {
        fprintf(stderr, "pdbench: out of memory\n");
        return 1;
    }
    size_t k = 0;
    for (size_t p = 0; p < o->n_profiles; p++)
        for (size_t c = 0; c < o->n_conc; c++)
            for (int r = 0; r < o->repeats; r++) {
                pdb_run_t *run = &b->runs[k++];
                run->isl = o->isl[p];
                run->osl = o->osl[p];
                run->concurrency = o->conc[c];
                run->repeat = r;
                long n = o->requests ? o->requests : (4L * o->conc[c] > 8 ? 4L * o->conc[c] : 8);
                run->planned = o->duration > 0 ? 0 : (size_t)n;
                run->warmup_ok = -1;
            }
    for (int i = 0; i < max_conc; i++) {
        b->slots[i].b = b;
        pdb_sse_init(&b->slots[i].sse, EVENT_LIMIT);
    }

    b->loop = uv_default_loop();
    b->multi = pdr_multi_new(b->loop, max_conc + 4);
    if (b->multi == NULL) {
        fprintf(stderr, "pdbench: cannot set up the HTTP client\n");
        return 1;
    }
    uv_timer_init(b->loop, &b->health_timer);
    b->health_timer.data = b;
    uv_timer_init(b->loop, &b->progress_timer);
    b->progress_timer.data = b;
    uv_signal_init(b->loop, &b->sigint);
    b->sigint.data = b;
    uv_signal_start(&b->sigint, on_sigint, SIGINT);
    if (b->tty && !o->quiet)
        uv_timer_start(&b->progress_timer, on_progress, PROGRESS_TTY_MS, PROGRESS_TTY_MS);
    if (!o->quiet)
        fprintf(stderr, "pdbench: %zu runs against %s (%s), seed %llu\n", b->n_runs, b->url,
                pdb_api_name(o->api), (unsigned long long)o->seed);
    next_run(b);
    uv_run(b->loop, UV_RUN_DEFAULT);
    if (uv_loop_close(b->loop) != 0)
        fprintf(stderr, "pdbench: warning: handles left open at exit\n");

    for (size_t i = 0; i < b->n_runs; i++)
        pdb_run_summarize(&b->runs[i]);
    int failed = count_failures(b->runs, b->n_runs);
    int out_err = 0, plots_err = 0;
    if (o->json_path != NULL && pdb_write_json(o, b->runs, b->n_runs, o->json_path) != 0)
        out_err = 1;
    if (o->report_dir != NULL) {
        int r = pdb_write_report(o, b->runs, b->n_runs, o->report_dir);
        out_err |= r < 0;
        plots_err = r > 0;
    }
    if (!o->quiet) {
        for (size_t i = 0; i < b->n_runs; i++) {
            const pdb_run_t *r = &b->runs[i];
            for (size_t c = 0; c < r->n_causes; c++)
                fprintf(stderr, "pdbench: run %zu (%d/%d c=%d): %zu failed: %s (%s)\n", i + 1, r->isl, r->osl,
                        r->concurrency, r->causes[c].count, r->causes[c].name, r->causes[c].example);
            if (r->warmup_ok == 0)
                fprintf(stderr, "pdbench: run %zu: warm-up failed: %s\n", i + 1, r->warmup_error);
        }
    }

    for (size_t i = 0; i < b->n_runs; i++) {
        for (size_t j = 0; j < b->runs[i].n_reqs; j++)
            free(b->runs[i].reqs[j].itl_ms);
        free(b->runs[i].reqs);
    }
    for (int i = 0; i < max_conc; i++) {
        pdb_sse_free(&b->slots[i].sse);
        pdr_buf_free(&b->slots[i].body);
        pdr_buf_free(&b->slots[i].errbody);
        free(b->slots[i].itl);
    }
    free(b->slots);
    free(b->runs);
    free(b->urls);
    free(o->isl);
    free(o->osl);
    free(o->conc);
    free(o->headers);
    if (b->fatal)
        return 1;
    if (b->interrupted)
        return 130;
    if (out_err)
        return 1;
    if (failed && !o->allow_failures)
        return 1;
    if (plots_err)
        return 3;
    return 0;
}
