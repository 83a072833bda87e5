/*
 * pdbench results: per-run statistics, --json (jansson), and --report DIR: report.md (a table of
 * runs), the plot data (*.dat), the gnuplot script (plots.gp) and the PNGs gnuplot makes from them.
 * Runs after the event loop ended, on the main thread; blocking I/O is fine here.
 */
#include <errno.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>
#include <jansson.h>
#include "pdbench.h"

extern char **environ;

const char *pdb_workload_name(int wl)
{
    return wl == PDB_WL_SHARED_PREFIX ? "shared-prefix" : wl == PDB_WL_MULTI_TURN ? "multi-turn" : "random";
}

const char *pdb_api_name(int api)
{
    return api == PDB_API_GENERATE ? "generate" : api == PDB_API_COMPLETIONS ? "completions" : "chat";
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* q in [0, 1]: the value at rank q * (n - 1), interpolated linearly between its neighbours. */
static double quantile(const double *v, size_t n, double q)
{
    double pos = q * (double)(n - 1);
    size_t lo = (size_t)floor(pos), hi = lo + 1 < n ? lo + 1 : lo;
    return v[lo] + (v[hi] - v[lo]) * (pos - (double)lo);
}

pdb_dist_t pdb_dist_of(double *v, size_t n)
{
    pdb_dist_t d;
    memset(&d, 0, sizeof(d));
    d.n = n;
    if (n == 0)
        return d;
    qsort(v, n, sizeof(*v), cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    d.p50 = quantile(v, n, 0.50);
    d.p90 = quantile(v, n, 0.90);
    d.p99 = quantile(v, n, 0.99);
    d.mean = sum / (double)n;
    d.max = v[n - 1];
    return d;
}

void pdb_run_add_failure(pdb_run_t *r, const char *cause, const char *example)
{
    for (size_t i = 0; i < r->n_causes; i++)
        if (strcmp(r->causes[i].name, cause) == 0) {
            r->causes[i].count++;
            return;
        }
    if (r->n_causes == PDB_MAX_CAUSES) { /* the last slot becomes "other" */
        pdb_cause_t *c = &r->causes[PDB_MAX_CAUSES - 1];
        if (strcmp(c->name, "other") != 0)
            snprintf(c->name, sizeof(c->name), "other");
        c->count++;
        return;
    }
    pdb_cause_t *c = &r->causes[r->n_causes++];
    snprintf(c->name, sizeof(c->name), "%s", cause);
    snprintf(c->example, sizeof(c->example), "%s", example);
    c->count = 1;
}

void pdb_run_summarize(pdb_run_t *r)
{
    size_t n = r->n_reqs, n_itl = 0;
    for (size_t i = 0; i < n; i++)
        n_itl += r->reqs[i].ok ? r->reqs[i].n_itl : 0;
    double *a = calloc(n ? n : 1, sizeof(double)), *b = calloc(n ? n : 1, sizeof(double)),
           *c = calloc(n ? n : 1, sizeof(double)), *d = calloc(n ? n : 1, sizeof(double)),
           *e = calloc(n_itl ? n_itl : 1, sizeof(double));
    size_t na = 0, nb = 0, nc = 0, nd = 0, ne = 0, np = 0;
    double psum = 0;
    r->ok = r->failed = 0;
    r->output_tokens = 0;
    r->n_causes = 0;
    r->cached_tokens = r->cache_prompt_tokens = 0;
    for (size_t i = 0; i < n; i++) {
        const pdb_req_t *q = &r->reqs[i];
        if (!q->ok) {
            r->failed++;
            pdb_run_add_failure(r, q->cause, q->detail);
            continue;
        }
        r->ok++;
        r->output_tokens += q->tokens;
        if (q->prompt_tokens >= 0) {
            psum += (double)q->prompt_tokens;
            np++;
        }
        if (q->prompt_tokens >= 0 && q->cached_tokens >= 0) {
            r->cached_tokens += q->cached_tokens;
            r->cache_prompt_tokens += q->prompt_tokens;
        }
        if (a == NULL || b == NULL || c == NULL || d == NULL || e == NULL)
            continue;
        if (q->ttft_ms >= 0)
            a[na++] = q->ttft_ms;
        if (q->tpot_ms >= 0)
            b[nb++] = q->tpot_ms;
        c[nc++] = q->e2e_ms;
        if (!isnan(q->overhead_us))
            d[nd++] = q->overhead_us;
        for (size_t k = 0; k < q->n_itl; k++)
            e[ne++] = q->itl_ms[k];
    }
    r->prompt_tokens_mean = np ? psum / (double)np : -1;
    r->cache_hit_ratio =
        r->cache_prompt_tokens > 0 ? (double)r->cached_tokens / (double)r->cache_prompt_tokens : -1;
    r->out_tok_s = r->wall_s > 0 ? (double)r->output_tokens / r->wall_s : 0;
    r->req_s = r->wall_s > 0 ? (double)r->ok / r->wall_s : 0;
    r->ttft = pdb_dist_of(a, na);
    r->tpot = pdb_dist_of(b, nb);
    r->e2e = pdb_dist_of(c, nc);
    r->overhead = pdb_dist_of(d, nd);
    r->itl = pdb_dist_of(e, ne);
    free(a);
    free(b);
    free(c);
    free(d);
    free(e);
}

/* ------------------------------------------------------------------ --json */

static json_t *dist_json(const pdb_dist_t *d)
{
    if (d->n == 0)
        return json_null();
    return json_pack("{s:I,s:f,s:f,s:f,s:f,s:f}", "n", (json_int_t)d->n, "p50", d->p50, "p90", d->p90, "p99",
                     d->p99, "mean", d->mean, "max", d->max);
}

static json_t *num_or_null(double v)
{
    return v >= 0 ? json_real(v) : json_null();
}

static json_t *req_json(const pdb_req_t *q)
{
    json_t *o = json_pack("{s:b,s:I,s:I,s:o,s:o,s:o,s:o}", "ok", q->ok, "status", (json_int_t)q->status,
                          "tokens", (json_int_t)q->tokens, "prompt_tokens",
                          q->prompt_tokens >= 0 ? json_integer(q->prompt_tokens) : json_null(), "ttft_ms",
                          num_or_null(q->ttft_ms), "tpot_ms", num_or_null(q->tpot_ms), "e2e_ms",
                          num_or_null(q->e2e_ms));
    if (o == NULL)
        return NULL;
    json_object_set_new(o, "cached_tokens",
                        q->cached_tokens >= 0 ? json_integer(q->cached_tokens) : json_null());
    if (!q->ok) {
        json_object_set_new(o, "cause", json_string(q->cause));
        json_object_set_new(o, "detail", json_string(q->detail));
    }
    if (!isnan(q->overhead_us))
        json_object_set_new(o, "router_overhead_us", json_real(q->overhead_us));
    json_t *itl = json_array();
    for (size_t k = 0; k < q->n_itl; k++)
        json_array_append_new(itl, json_real(q->itl_ms[k]));
    json_object_set_new(o, "itl_ms", itl);
    return o;
}

static json_t *run_json(const pdb_opts_t *o, const pdb_run_t *r)
{
    char prof[48];
    snprintf(prof, sizeof(prof), "%d/%d", r->isl, r->osl);
    json_t *causes = json_object(), *examples = json_object();
    for (size_t i = 0; i < r->n_causes; i++) {
        json_object_set_new(causes, r->causes[i].name, json_integer((json_int_t)r->causes[i].count));
        json_object_set_new(examples, r->causes[i].name, json_string(r->causes[i].example));
    }
    json_t *j = json_pack(
        "{s:s,s:i,s:i,s:i,s:i,s:I,s:I,s:I,s:I,s:o,s:f,s:I,s:o,s:f,s:f,s:o,s:o,s:o,s:o,s:o,s:o}", "profile",
        prof, "isl", r->isl, "osl", r->osl, "concurrency", r->concurrency, "repeat", r->repeat, "planned",
        (json_int_t)r->planned, "requests", (json_int_t)r->n_reqs, "ok", (json_int_t)r->ok, "failed",
        (json_int_t)r->failed, "failures", causes, "wall_s", r->wall_s, "output_tokens",
        (json_int_t)r->output_tokens, "prompt_tokens_mean", num_or_null(r->prompt_tokens_mean),
        "output_tokens_per_s", r->out_tok_s, "requests_per_s", r->req_s, "failure_examples", examples,
        "ttft_ms", dist_json(&r->ttft), "tpot_ms", dist_json(&r->tpot), "itl_ms", dist_json(&r->itl),
        "e2e_ms", dist_json(&r->e2e), "health_ok", json_boolean(r->health_ok));
    if (j == NULL)
        return NULL;
    if (!r->health_ok)
        json_object_set_new(j, "health_error", json_string(r->health_error));
    json_object_set_new(j, "warmup", r->warmup_ok < 0 ? json_null() : json_boolean(r->warmup_ok));
    if (r->warmup_ok == 0)
        json_object_set_new(j, "warmup_error", json_string(r->warmup_error));
    if (r->overhead.n > 0)
        json_object_set_new(j, "router_overhead_us", dist_json(&r->overhead));
    json_object_set_new(j, "cache_hit_ratio", num_or_null(r->cache_hit_ratio));
    json_object_set_new(j, "cached_tokens", json_integer((json_int_t)r->cached_tokens));
    if (o->per_request) {
        json_t *a = json_array();
        for (size_t i = 0; i < r->n_reqs; i++)
            json_array_append_new(a, req_json(&r->reqs[i]));
        json_object_set_new(j, "per_request", a);
    }
    return j;
}

int pdb_write_json(const pdb_opts_t *o, const pdb_run_t *runs, size_t n_runs, const char *path)
{
    json_t *prof = json_array(), *conc = json_array();
    for (size_t i = 0; i < o->n_profiles; i++) {
        char p[48];
        snprintf(p, sizeof(p), "%d/%d", o->isl[i], o->osl[i]);
        json_array_append_new(prof, json_string(p));
    }
    for (size_t i = 0; i < o->n_conc; i++)
        json_array_append_new(conc, json_integer(o->conc[i]));
    json_t *root = json_pack(
        "{s:s,s:{s:s,s:s,s:s,s:s,s:o,s:o,s:I,s:f,s:i,s:I,s:i,s:b,s:b,s:f,s:f}}", "tool", "pdbench", "config",
        "url", o->url, "api", pdb_api_name(o->api), "path", o->path, "model", o->model, "profiles", prof,
        "concurrency", conc, "requests", (json_int_t)o->requests, "duration_s", o->duration, "repeats",
        o->repeats, "seed", (json_int_t)o->seed, "warmup", o->warmup, "input_ids", o->input_ids, "ignore_eos",
        o->ignore_eos, "timeout_s", o->timeout_s, "temperature", o->temperature);
    if (root == NULL) {
        fprintf(stderr, "pdbench: cannot build the JSON results\n");
        return -1;
    }
    json_t *cfg = json_object_get(root, "config");
    json_object_set_new(cfg, "workload", json_string(pdb_workload_name(o->workload)));
    if (o->workload == PDB_WL_SHARED_PREFIX) {
        json_object_set_new(cfg, "prefixes", json_integer(o->prefixes));
        json_object_set_new(cfg, "prefix_tokens", json_integer(o->prefix_tokens));
    } else if (o->workload == PDB_WL_MULTI_TURN) {
        json_object_set_new(cfg, "turns", json_integer(o->turns));
    }
    json_t *a = json_array();
    for (size_t i = 0; i < n_runs; i++)
        json_array_append_new(a, run_json(o, &runs[i]));
    json_object_set_new(root, "runs", a);
    int r = json_dump_file(root, path, JSON_INDENT(1) | JSON_REAL_PRECISION(8));
    json_decref(root);
    if (r != 0) {
        fprintf(stderr, "pdbench: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ --report */

static int mkdirs(const char *dir)
{
    char p[4096];
    if (snprintf(p, sizeof(p), "%s", dir) >= (int)sizeof(p))
        return -1;
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST)
            return -1;
        *s = '/';
    }
    return mkdir(p, 0777) != 0 && errno != EEXIST ? -1 : 0;
}

static FILE *open_in(const char *dir, const char *name)
{
    char p[4096];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (f == NULL)
        fprintf(stderr, "pdbench: cannot write %s: %s\n", p, strerror(errno));
    return f;
}

/* The runs of one profile and concurrency, pooled over repeats. */
typedef struct cell {
    double ttft_p50, out_tok_s, fail_share;
    int have_ttft, n;
} cell_t;

static cell_t cell_of(const pdb_run_t *runs, size_t n_runs, int isl, int osl, int conc)
{
    cell_t c;
    memset(&c, 0, sizeof(c));
    size_t sent = 0, failed = 0, nt = 0;
    double tsum = 0, thr = 0;
    for (size_t i = 0; i < n_runs; i++) {
        const pdb_run_t *r = &runs[i];
        if (r->isl != isl || r->osl != osl || r->concurrency != conc)
            continue;
        c.n++;
        if (!r->health_ok) { /* the whole run failed */
            sent += r->planned ? r->planned : 1;
            failed += r->planned ? r->planned : 1;
            continue;
        }
        sent += r->n_reqs;
        failed += r->failed;
        thr += r->out_tok_s;
        if (r->ttft.n > 0) {
            tsum += r->ttft.p50;
            nt++;
        }
    }
    c.fail_share = sent ? (double)failed / (double)sent : 0;
    c.out_tok_s = c.n ? thr / c.n : 0;
    c.have_ttft = nt > 0;
    c.ttft_p50 = nt ? tsum / (double)nt : 0;
    return c;
}

static int cmp_profile_isl(const void *a, const void *b)
{
    const int *x = a, *y = b;
    return x[0] != y[0] ? (x[0] < y[0] ? -1 : 1) : (x[1] < y[1] ? -1 : x[1] > y[1]);
}

/* gnuplot single-quoted string: a quote is written twice. */
static void gp_quote(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'')
            fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

/*
 * The TTFT plot's lines. One line per concurrency joins the profiles in ISL order; when two profiles
 * share an input length (the study's 2048/256 and 2048/2048) such a line would draw two points at one x
 * that nothing tells apart, so the lines are then one per concurrency and output length, each titled
 * with both. Line k is gnuplot's "index k" in ttft_vs_isl.dat.
 */
typedef struct ttft_lines {
    int (*sorted)[2]; /* the profiles as {ISL, OSL}, by ISL then OSL */
    int *osls;        /* split: the distinct output lengths, ascending */
    size_t n_osls;    /* split: their count; otherwise 1 (one line per concurrency, any OSL) */
    int split;
} ttft_lines_t;

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return x < y ? -1 : x > y;
}

static int ttft_lines_init(ttft_lines_t *l, const pdb_opts_t *o)
{
    size_t n = o->n_profiles ? o->n_profiles : 1;
    memset(l, 0, sizeof(*l));
    l->sorted = calloc(n, sizeof(*l->sorted));
    l->osls = calloc(n, sizeof(*l->osls));
    if (l->sorted == NULL || l->osls == NULL) {
        free(l->sorted);
        free(l->osls);
        return -1;
    }
    for (size_t p = 0; p < o->n_profiles; p++) {
        l->sorted[p][0] = o->isl[p];
        l->sorted[p][1] = o->osl[p];
        l->osls[p] = o->osl[p];
    }
    qsort(l->sorted, o->n_profiles, sizeof(*l->sorted), cmp_profile_isl);
    for (size_t p = 1; p < o->n_profiles; p++)
        l->split |= l->sorted[p][0] == l->sorted[p - 1][0];
    l->n_osls = 1;
    if (l->split) {
        qsort(l->osls, o->n_profiles, sizeof(*l->osls), cmp_int);
        for (size_t p = 1; p < o->n_profiles; p++)
            if (l->osls[p] != l->osls[l->n_osls - 1])
                l->osls[l->n_osls++] = l->osls[p];
    }
    return 0;
}

static void ttft_lines_free(ttft_lines_t *l)
{
    free(l->sorted);
    free(l->osls);
}

/* Whether sorted profile p belongs on the lines of output length j (every line when not split). */
static int ttft_on_line(const ttft_lines_t *l, size_t p, size_t j)
{
    return !l->split || l->sorted[p][1] == l->osls[j];
}

static int write_plot_data(const pdb_opts_t *o, const pdb_run_t *runs, size_t n_runs, const char *dir)
{
    ttft_lines_t l;
    if (ttft_lines_init(&l, o) != 0)
        return -1;
    FILE *f = open_in(dir, "ttft_vs_isl.dat");
    if (f == NULL) {
        ttft_lines_free(&l);
        return -1;
    }
    /* One block per line (gnuplot index k): ISL, TTFT p50 in ms (mean over repeats), ISL/OSL. */
    for (size_t c = 0; c < o->n_conc; c++) {
        for (size_t j = 0; j < l.n_osls; j++) {
            if (l.split)
                fprintf(f, "# concurrency %d, OSL %d\n", o->conc[c], l.osls[j]);
            else
                fprintf(f, "# concurrency %d\n", o->conc[c]);
            for (size_t p = 0; p < o->n_profiles; p++) {
                if (!ttft_on_line(&l, p, j))
                    continue;
                cell_t x = cell_of(runs, n_runs, l.sorted[p][0], l.sorted[p][1], o->conc[c]);
                if (x.have_ttft)
                    fprintf(f, "%d %.6f %d/%d\n", l.sorted[p][0], x.ttft_p50, l.sorted[p][0], l.sorted[p][1]);
            }
            fprintf(f, "\n\n");
        }
    }
    fclose(f);
    ttft_lines_free(&l);
    f = open_in(dir, "throughput_vs_concurrency.dat");
    if (f == NULL)
        return -1;
    /* One block per profile: concurrency, output tokens/s (mean over repeats). */
    for (size_t p = 0; p < o->n_profiles; p++) {
        fprintf(f, "# profile %d/%d\n", o->isl[p], o->osl[p]);
        for (size_t c = 0; c < o->n_conc; c++) {
            cell_t x = cell_of(runs, n_runs, o->isl[p], o->osl[p], o->conc[c]);
            fprintf(f, "%d %.3f\n", o->conc[c], x.out_tok_s);
        }
        fprintf(f, "\n\n");
    }
    fclose(f);
    f = open_in(dir, "failures.dat");
    if (f == NULL)
        return -1;
    /* Concurrency index, profile index, failure share in [0, 1]. */
    for (size_t p = 0; p < o->n_profiles; p++) {
        for (size_t c = 0; c < o->n_conc; c++) {
            cell_t x = cell_of(runs, n_runs, o->isl[p], o->osl[p], o->conc[c]);
            fprintf(f, "%zu %zu %.4f\n", c, p, x.fail_share);
        }
        fprintf(f, "\n");
    }
    fclose(f);
    return 0;
}

static int write_gp(const pdb_opts_t *o, const pdb_run_t *runs, size_t n_runs, const char *dir)
{
    FILE *f = open_in(dir, "plots.gp");
    if (f == NULL)
        return -1;
    fprintf(f, "# Made by pdbench: gnuplot plots.gp (from this directory) remakes the PNGs.\n");
    fprintf(f, "set terminal pngcairo size 900,560 font ',10'\nset grid\nset key outside right\n");
    fprintf(f, "\nset output 'ttft_vs_isl.png'\nset title 'TTFT p50 against input length'\n");
    fprintf(
        f,
        "set xlabel 'input tokens (ISL)'\nset ylabel 'TTFT p50 (ms)'\nset logscale x 2\nset logscale y 10\n");
    ttft_lines_t l;
    if (ttft_lines_init(&l, o) != 0) {
        fclose(f);
        return -1;
    }
    size_t shown = 0;
    for (size_t c = 0; c < o->n_conc; c++) {
        for (size_t j = 0; j < l.n_osls; j++) {
            int have = 0; /* a block without points would stop gnuplot */
            for (size_t p = 0; p < o->n_profiles; p++)
                have |= ttft_on_line(&l, p, j) &&
                        cell_of(runs, n_runs, l.sorted[p][0], l.sorted[p][1], o->conc[c]).have_ttft;
            if (!have)
                continue;
            fprintf(f, "%s'ttft_vs_isl.dat' index %zu using 1:2 with linespoints pt 7 title 'c=%d",
                    shown++ ? ", \\\n     " : "plot ", c * l.n_osls + j, o->conc[c]);
            if (l.split)
                fprintf(f, ", OSL %d", l.osls[j]);
            fputc('\'', f);
        }
    }
    ttft_lines_free(&l);
    if (shown == 0)
        fprintf(f, "set label 1 'no successful request' at graph 0.5,0.5 center\nunset logscale xy\n"
                   "set xrange [1:2]\nset yrange [0:1]\nplot -1 notitle\nunset label 1\nset autoscale xy");
    fprintf(f, "\nunset logscale xy\n");
    fprintf(
        f,
        "\nset output 'throughput_vs_concurrency.png'\nset title 'Output throughput against concurrency'\n");
    fprintf(f, "set xlabel 'concurrency'\nset ylabel 'output tokens/s'\nset logscale x 2\n");
    fprintf(f, "plot ");
    for (size_t p = 0; p < o->n_profiles; p++)
        fprintf(f,
                "%s'throughput_vs_concurrency.dat' index %zu using 1:2 with linespoints pt 7 title '%d/%d'",
                p ? ", \\\n     " : "", p, o->isl[p], o->osl[p]);
    fprintf(f, "\nunset logscale x\n");
    fprintf(f, "\nset output 'failures_heatmap.png'\nset title 'Failed share of requests (profile x "
               "concurrency)'\n");
    fprintf(
        f, "set xlabel 'concurrency'\nset ylabel 'ISL/OSL'\nset cbrange [0:1]\nset cblabel 'failed share'\n");
    fprintf(f, "set palette defined (0 '#f7fbff', 0.01 '#fee08b', 0.5 '#f46d43', 1 '#a50026')\nunset grid\n");
    fprintf(f, "set xrange [-0.5:%zu.5]\nset yrange [-0.5:%zu.5]\nset xtics (", o->n_conc - 1,
            o->n_profiles - 1);
    for (size_t c = 0; c < o->n_conc; c++)
        fprintf(f, "%s\"%d\" %zu", c ? ", " : "", o->conc[c], c);
    fprintf(f, ")\nset ytics (");
    for (size_t p = 0; p < o->n_profiles; p++)
        fprintf(f, "%s\"%d/%d\" %zu", p ? ", " : "", o->isl[p], o->osl[p], p);
    fprintf(f,
            ")\nplot 'failures.dat' using 1:2:($1-0.5):($1+0.5):($2-0.5):($2+0.5):3 with boxxy fs solid 1.0 "
            "lc palette notitle, \\\n");
    fprintf(f, "     'failures.dat' using 1:2:(gprintf('%%.0f', $3*100).'%%') with labels notitle\n");
    if (fclose(f) != 0)
        return -1;
    return 0;
}

/* Runs gnuplot on DIR/plots.gp; its output goes to DIR/gnuplot.log. 0, or 1 with why filled. */
static int run_gnuplot(const pdb_opts_t *o, const char *dir, char *why, size_t whylen)
{
    char logp[4096];
    snprintf(logp, sizeof(logp), "%s/gnuplot.log", dir);
    /* gnuplot reads its input from stdin: a cd into DIR, then plots.gp with its short file names. */
    FILE *f = open_in(dir, "gnuplot.in");
    if (f == NULL) {
        snprintf(why, whylen, "cannot write the gnuplot input");
        return 1;
    }
    fprintf(f, "cd ");
    gp_quote(f, dir);
    fprintf(f, "\nload 'plots.gp'\n");
    fclose(f);
    char inp[4096];
    snprintf(inp, sizeof(inp), "%s/gnuplot.in", dir);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, inp, O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, logp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    char *argv[] = {(char *)o->gnuplot, NULL};
    pid_t pid;
    int r = posix_spawnp(&pid, o->gnuplot, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (r != 0) {
        snprintf(why, whylen, "cannot run %s: %s (install gnuplot-nox, or pass --no-plots)", o->gnuplot,
                 strerror(r));
        return 1;
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) {
            snprintf(why, whylen, "waitpid: %s", strerror(errno));
            return 1;
        }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        snprintf(why, whylen, "%.200s failed (status %d); see gnuplot.log in the report directory",
                 o->gnuplot, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        return 1;
    }
    return 0;
}

/* " p50 / p99 |" with prec decimals. */
static void md_dist(FILE *f, const pdb_dist_t *d, int prec)
{
    if (d->n == 0)
        fprintf(f, " – |");
    else
        fprintf(f, " %.*f / %.*f |", prec, d->p50, prec, d->p99);
}

int pdb_write_report(const pdb_opts_t *o, const pdb_run_t *runs, size_t n_runs, const char *dir)
{
    if (mkdirs(dir) != 0) {
        fprintf(stderr, "pdbench: cannot create %s: %s\n", dir, strerror(errno));
        return -1;
    }
    if (write_plot_data(o, runs, n_runs, dir) != 0 || write_gp(o, runs, n_runs, dir) != 0)
        return -1;
    char why[512] = "";
    int plots = 0; /* 1 made, 0 skipped by --no-plots, -1 failed */
    if (!o->no_plots)
        plots = run_gnuplot(o, dir, why, sizeof(why)) == 0 ? 1 : -1;
    if (plots < 0)
        fprintf(stderr, "pdbench: plots skipped: %s\n", why);

    FILE *f = open_in(dir, "report.md");
    if (f == NULL)
        return -1;
    int any_overhead = 0, any_cache = 0;
    for (size_t i = 0; i < n_runs; i++) {
        any_overhead |= runs[i].overhead.n > 0;
        any_cache |= runs[i].cache_hit_ratio >= 0;
    }
    time_t now = time(NULL);
    struct tm tm;
    char date[64];
    gmtime_r(&now, &tm);
    strftime(date, sizeof(date), "%Y-%m-%d %H:%M UTC", &tm);
    fprintf(f, "# pdbench report\n\n");
    fprintf(f, "Target `%s%s` (%s API), %s; seed %llu, %s, warm-up %s, %s.\n\n", o->url, o->path,
            pdb_api_name(o->api), date, (unsigned long long)o->seed,
            o->input_ids ? "input_ids prompts" : "text prompts", o->warmup ? "1 request per run" : "off",
            o->ignore_eos ? "ignore_eos" : "no ignore_eos");
    fprintf(f,
            "Latencies are p50 / p99 over the run's successful requests; ITL over every inter-token gap of "
            "those requests. Definitions: docs/pdbench.md.\n\n");
    if (o->workload == PDB_WL_SHARED_PREFIX)
        fprintf(f, "Workload shared-prefix: %d system prompts of %d tokens, then a unique suffix.\n\n",
                o->prefixes, o->prefix_tokens);
    else if (o->workload == PDB_WL_MULTI_TURN)
        fprintf(f, "Workload multi-turn: conversations of %d turns.\n\n", o->turns);
    if (any_cache)
        fprintf(
            f,
            "Cache hit = the server's cached prompt tokens over its prompt tokens, summed over the run.\n\n");
    fprintf(f,
            "| run | ISL/OSL | conc | rep | ok / sent | failures | TTFT ms | TPOT ms | ITL ms | E2E ms | "
            "out tok/s | req/s |%s%s\n",
            any_overhead ? " router overhead µs |" : "", any_cache ? " cache hit |" : "");
    fprintf(f, "|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|%s%s\n",
            any_overhead ? "---:|" : "", any_cache ? "---:|" : "");
    for (size_t i = 0; i < n_runs; i++) {
        const pdb_run_t *r = &runs[i];
        fprintf(f, "| %zu | %d/%d | %d | %d | %zu / %zu | ", i + 1, r->isl, r->osl, r->concurrency,
                r->repeat + 1, r->ok, r->n_reqs);
        if (!r->health_ok)
            fprintf(f, "health gate failed");
        else if (r->n_causes == 0 && r->warmup_ok != 0)
            fprintf(f, "0");
        for (size_t c = 0; c < r->n_causes; c++)
            fprintf(f, "%s%s ×%zu", c ? ", " : "", r->causes[c].name, r->causes[c].count);
        if (r->warmup_ok == 0)
            fprintf(f, "%swarm-up failed", r->n_causes ? ", " : "");
        fprintf(f, " |");
        md_dist(f, &r->ttft, 2);
        md_dist(f, &r->tpot, 3);
        md_dist(f, &r->itl, 3);
        md_dist(f, &r->e2e, 1);
        fprintf(f, " %.0f | %.2f |", r->out_tok_s, r->req_s);
        if (any_overhead)
            md_dist(f, &r->overhead, 0);
        if (any_cache) {
            if (r->cache_hit_ratio >= 0)
                fprintf(f, " %.1f%% |", 100.0 * r->cache_hit_ratio);
            else
                fprintf(f, " – |");
        }
        fprintf(f, "\n");
    }
    int any_fail_detail = 0;
    for (size_t i = 0; i < n_runs; i++)
        any_fail_detail |= runs[i].n_causes > 0 || !runs[i].health_ok || runs[i].warmup_ok == 0;
    if (any_fail_detail) {
        fprintf(f, "\n## Failures\n\n");
        for (size_t i = 0; i < n_runs; i++) {
            const pdb_run_t *r = &runs[i];
            if (!r->health_ok)
                fprintf(f, "- run %zu: %s\n", i + 1, r->health_error);
            if (r->warmup_ok == 0)
                fprintf(f, "- run %zu: warm-up: %s\n", i + 1, r->warmup_error);
            for (size_t c = 0; c < r->n_causes; c++)
                fprintf(f, "- run %zu: `%s` ×%zu, e.g. %s\n", i + 1, r->causes[c].name, r->causes[c].count,
                        r->causes[c].example);
        }
    }
    fprintf(f, "\n## Plots\n\n");
    if (plots > 0)
        fprintf(f, "![TTFT against input length](ttft_vs_isl.png)\n\n"
                   "![Output throughput against concurrency](throughput_vs_concurrency.png)\n\n"
                   "![Failure share, profile x concurrency](failures_heatmap.png)\n");
    else if (plots == 0)
        fprintf(f, "Plots skipped (--no-plots). The data and the script are here: `gnuplot plots.gp` in this "
                   "directory makes them.\n");
    else
        fprintf(f,
                "Plots skipped: %s. The data and the script are here: `gnuplot plots.gp` in this directory "
                "makes them.\n",
                why);
    if (fclose(f) != 0)
        return -1;
    return plots < 0 ? 1 : 0;
}
