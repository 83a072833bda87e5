/*
 * pdbench entry point: the run matrix (profile x concurrency x repeat), the loop, the outputs and the
 * exit status.
 *
 * One libuv loop on the main thread drives every request through the router's own HTTP/1.1 client
 * (router/upstream/upstream.h: keep-alive pool per origin, de-chunked body bytes straight from the read
 * buffer, a total deadline per call), so the load generator costs little CPU next to the server it measures
 * and shares its HTTP code with pdrouter. A run is: the health gate (GET until 200), one warm-up
 * request, then `concurrency` closed-loop slots that each send the next request as soon as their last
 * one ended, until the run's request count (or duration) is reached (run.c; each request: request.c,
 * its body: workload.c; the flags: flags.c). Times are CLOCK_MONOTONIC. Results are written after the
 * loop ends (report.c).
 */
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>
#include "buf.h"
#include "pdbench_internal.h"
#include "upstream.h"

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
    int rc = pdb__parse_args(argc, argv, &b->o);
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
        return pdb__usage_error("--url: %zu URLs, at most %d%s", n_urls, PDB_MAX_URLS, "");
    if ((b->urls = calloc(n_urls, sizeof(*b->urls))) == NULL)
        return pdb__usage_error("out of memory%s%s", "", "");
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
            return pdb__usage_error("--url %s: %s", o->url, bad);
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
    uv_signal_start(&b->sigint, pdb__on_sigint, SIGINT);
    if (b->tty && !o->quiet)
        uv_timer_start(&b->progress_timer, pdb__on_progress, PROGRESS_TTY_MS, PROGRESS_TTY_MS);
    if (!o->quiet)
        fprintf(stderr, "pdbench: %zu runs against %s (%s), seed %llu\n", b->n_runs, b->url,
                pdb_api_name(o->api), (unsigned long long)o->seed);
    pdb__next_run(b);
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
