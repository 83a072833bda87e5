/*
 * pdbench: the end-to-end load generator (see docs/pdbench.md). Shared types of its parts: the
 * requests on one libuv loop through the router's HTTP/1.1 client (main.c, flags.c, workload.c,
 * request.c, run.c, sharing pdbench_internal.h), stream.c (the SSE framing and the few JSON fields read
 * from each event; pure) and report.c (percentiles, --json, the Markdown report and its gnuplot plots).
 * Single-threaded.
 */
#ifndef PDBENCH_H
#define PDBENCH_H

#include <stddef.h>
#include <stdint.h>

enum { PDB_API_GENERATE = 0, PDB_API_COMPLETIONS, PDB_API_CHAT };
/* --workload: independent random prompts, K shared system prompts + a unique suffix, or conversations
 * that grow by one answer and one user turn per request. */
enum { PDB_WL_RANDOM = 0, PDB_WL_SHARED_PREFIX, PDB_WL_MULTI_TURN };

/* ------------------------------------------------------------------ stream.c: SSE and event fields */

/* What one "data:" event of a streamed answer says, read without building a DOM. */
typedef struct pdb_event {
    int done;              /* the payload is [DONE] */
    int error;             /* a top-level "error" member, or "object":"error" */
    int has_content;       /* OpenAI: choices[0].text or delta.content is a non-empty string */
    int64_t completion;    /* meta_info.completion_tokens or usage.completion_tokens, else -1 */
    int64_t prompt;        /* meta_info.prompt_tokens or usage.prompt_tokens, else -1 */
    int64_t cached;        /* meta_info.cached_tokens or usage.prompt_tokens_details.cached_tokens, else -1 */
    int64_t pdsim_mono_us; /* top-level "pdsim_mono_us" integer, else -1 */
    int bad_json;          /* the payload is not a JSON object */
} pdb_event_t;

/* Reads the fields above from one event's payload (the data lines joined). */
void pdb_event_parse(const char *p, size_t n, pdb_event_t *ev);

/* An incremental text/event-stream splitter: feed bytes in any split; each complete event's data
 * (multi-line data fields joined with "\n", as the SSE spec says) is handed to on_event. Lines other
 * than "data:" (comments, event:, id:) are ignored. The pending event is bounded by `limit` bytes. */
typedef struct pdb_sse {
    char *line; /* the current, incomplete line */
    size_t line_len, line_cap;
    char *data; /* the current event's data */
    size_t data_len, data_cap;
    int have_data;
    size_t limit;
} pdb_sse_t;

void pdb_sse_init(pdb_sse_t *s, size_t limit);
void pdb_sse_free(pdb_sse_t *s);
/* Returns 0, PDR_ETOOBIG (an event or line past the limit), PDR_ENOMEM, or on_event's non-zero
 * return (which stops the feed). */
int pdb_sse_feed(pdb_sse_t *s, const char *p, size_t n, int (*on_event)(void *arg, const char *d, size_t n),
                 void *arg);

/* ------------------------------------------------------------------ results */

/* One measured request. Times in microseconds on CLOCK_MONOTONIC. */
typedef struct pdb_req {
    int ok;
    char cause[32];   /* failure cause when !ok: "http_500", "connect", "timeout", ... */
    char detail[160]; /* the first words of an error body or event, when any */
    long status;
    int64_t tokens;                  /* output tokens counted from the stream */
    int64_t prompt_tokens;           /* as the server reported it, else -1 */
    int64_t cached_tokens;           /* prompt tokens the server found in its prefix cache, else -1 */
    double ttft_ms, tpot_ms, e2e_ms; /* < 0: not measured (no token, one token, interrupted) */
    double overhead_us; /* arrival of the first token event minus its pdsim_mono_us; NAN: absent */
    double *itl_ms;     /* every inter-token gap */
    size_t n_itl;
} pdb_req_t;

typedef struct pdb_dist {
    size_t n;
    double p50, p90, p99, mean, max;
} pdb_dist_t;

typedef struct pdb_cause {
    char name[32];
    size_t count;
    char example[160];
} pdb_cause_t;

#define PDB_MAX_CAUSES 16
#define PDB_MAX_URLS 64 /* --url A,B,...: router replicas */

/* One run: a profile at a concurrency, one repeat. */
typedef struct pdb_run {
    int isl, osl, concurrency, repeat;
    size_t planned; /* requests to send (requests mode) or 0 (duration mode) */
    int health_ok;
    char health_error[512];
    int warmup_ok; /* 1 ok, 0 failed, -1 not run */
    char warmup_error[200];
    pdb_req_t *reqs;
    size_t n_reqs, cap_reqs;
    double wall_s;
    /* Filled by pdb_run_summarize(). */
    size_t ok, failed;
    int64_t output_tokens;
    double prompt_tokens_mean; /* < 0 when the server reported none */
    /* Sum of cached over sum of prompt tokens, over the requests that reported both; < 0: none did. */
    double cache_hit_ratio;
    int64_t cached_tokens, cache_prompt_tokens; /* the two sums */
    double out_tok_s, req_s;
    pdb_dist_t ttft, tpot, itl, e2e, overhead;
    pdb_cause_t causes[PDB_MAX_CAUSES];
    size_t n_causes;
} pdb_run_t;

typedef struct pdb_opts {
    const char *url; /* base URL, http://host:port */
    int api;
    const char *path; /* derived from api unless given */
    const char *model;
    const char *profiles_arg;
    int *isl, *osl;
    size_t n_profiles;
    int *conc;
    size_t n_conc;
    long requests;   /* per run; 0 = auto (max(8, 4 x concurrency)) */
    double duration; /* seconds per run; > 0 replaces requests */
    int repeats;
    uint64_t seed;
    int warmup;
    const char *health_url;
    double health_timeout_s;
    int no_health;
    double timeout_s;
    long connect_timeout_ms;
    int input_ids;
    int ignore_eos;
    const char *json_path;
    int per_request;
    const char *report_dir;
    int no_plots;
    const char *gnuplot;
    int allow_failures;
    int quiet;
    const char **headers;
    size_t n_headers;
    double temperature;
    int workload;               /* PDB_WL_* */
    int prefixes;               /* shared-prefix: K system prompts */
    int prefix_tokens;          /* shared-prefix: P tokens each */
    int turns;                  /* multi-turn: T requests per conversation */
    const char *session_header; /* multi-turn: the header naming each request's conversation; NULL: none */
} pdb_opts_t;

/* The name of a PDB_WL_* value. */
const char *pdb_workload_name(int wl);

/* ------------------------------------------------------------------ report.c */

const char *pdb_api_name(int api);
/* Percentiles by linear interpolation between closest ranks (sorts v in place). */
pdb_dist_t pdb_dist_of(double *v, size_t n);
void pdb_run_summarize(pdb_run_t *r);
void pdb_run_add_failure(pdb_run_t *r, const char *cause, const char *example);
/* Writes --json FILE. Returns 0 or -1 (message on stderr). */
int pdb_write_json(const pdb_opts_t *o, const pdb_run_t *runs, size_t n_runs, const char *path);
/* Writes DIR/report.md, the plot data DIR/NAME.dat, DIR/plots.gp and, unless no_plots, the PNGs through
 * gnuplot. Returns 0, -1 (cannot write: message on stderr) or 1 (plots could not be made: gnuplot missing or
 * failed; the report says so). */
int pdb_write_report(const pdb_opts_t *o, const pdb_run_t *runs, size_t n_runs, const char *dir);

#endif
