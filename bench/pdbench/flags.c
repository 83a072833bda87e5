/*
 * pdbench's command line: --help, every flag with its range, and the checks between flags. Fills
 * pdb_opts_t; a bad flag is a usage error (exit status 2) that names it.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdbench_internal.h"
#include "util.h"

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
    "  --session-header NAME  multi-turn: each request carries 'NAME: pdbench-CONV', its conversation's\n"
    "                         number (for a router's session affinity)\n"
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

int pdb__usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "pdbench: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(pdbench --help lists every flag)\n");
    return 2;
}

int pdb__parse_args(int argc, char **argv, pdb_opts_t *o)
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
            return pdb__usage_error("%s needs a value%s", a, "");                                            \
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
                return pdb__usage_error("--api %s: expected generate, completions or chat%s", v, "");
        } else if (strcmp(a, "--path") == 0) {
            NEEDV();
            if (v[0] != '/')
                return pdb__usage_error("--path %s: must start with /%s", v, "");
            o->path = v;
        } else if (strcmp(a, "--model") == 0) {
            NEEDV();
            o->model = v;
        } else if (strcmp(a, "--header") == 0) {
            NEEDV();
            const char *colon = strchr(v, ':');
            if (colon == NULL || colon == v || strpbrk(v, "\r\n") != NULL)
                return pdb__usage_error("--header %s: expected 'Name: value' on one line%s", v, "");
            o->headers[o->n_headers++] = v;
        } else if (strcmp(a, "--input-ids") == 0) {
            o->input_ids = 1;
        } else if (strcmp(a, "--no-ignore-eos") == 0) {
            o->ignore_eos = 0;
        } else if (strcmp(a, "--temperature") == 0) {
            NEEDV();
            if (parse_double(v, 0, 100, &o->temperature) != 0)
                return pdb__usage_error("--temperature %s: expected a number in [0, 100]%s", v, "");
        } else if (strcmp(a, "--profiles") == 0) {
            NEEDV();
            o->profiles_arg = v;
        } else if (strcmp(a, "--matrix") == 0) {
            NEEDV();
            if (strcmp(v, "study") != 0)
                return pdb__usage_error("--matrix %s: the only named matrix is \"study\"%s", v, "");
            matrix = v;
        } else if (strcmp(a, "--concurrency") == 0) {
            NEEDV();
            conc = v;
        } else if (strcmp(a, "--requests") == 0) {
            NEEDV();
            if (parse_long(v, 1, (long)REQS_MAX, &o->requests) != 0)
                return pdb__usage_error("--requests %s: expected an integer in [1, 16777216]%s", v, "");
        } else if (strcmp(a, "--duration") == 0) {
            NEEDV();
            if (parse_double(v, 0.001, 1e7, &o->duration) != 0)
                return pdb__usage_error("--duration %s: expected seconds > 0%s", v, "");
        } else if (strcmp(a, "--repeats") == 0) {
            NEEDV();
            if (parse_long(v, 1, 1000, &l) != 0)
                return pdb__usage_error("--repeats %s: expected an integer in [1, 1000]%s", v, "");
            o->repeats = (int)l;
        } else if (strcmp(a, "--seed") == 0) {
            NEEDV();
            int64_t s;
            if (pdr_parse_int64(v, strlen(v), 0, INT64_MAX, &s) != 0)
                return pdb__usage_error("--seed %s: expected a non-negative integer%s", v, "");
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
                return pdb__usage_error("--workload %s: expected random, shared-prefix or multi-turn%s", v,
                                        "");
        } else if (strcmp(a, "--prefixes") == 0) {
            NEEDV();
            if (parse_long(v, 1, 1000000, &l) != 0)
                return pdb__usage_error("--prefixes %s: expected an integer in [1, 1000000]%s", v, "");
            o->prefixes = (int)l;
        } else if (strcmp(a, "--prefix-tokens") == 0) {
            NEEDV();
            if (parse_long(v, 1, 16777216, &l) != 0)
                return pdb__usage_error("--prefix-tokens %s: expected an integer in [1, 16777216]%s", v, "");
            o->prefix_tokens = (int)l;
        } else if (strcmp(a, "--turns") == 0) {
            NEEDV();
            if (parse_long(v, 1, 1000, &l) != 0)
                return pdb__usage_error("--turns %s: expected an integer in [1, 1000]%s", v, "");
            o->turns = (int)l;
        } else if (strcmp(a, "--session-header") == 0) {
            NEEDV();
            if (v[0] == '\0' || strlen(v) > 64 || strpbrk(v, ": \r\n") != NULL)
                return pdb__usage_error("--session-header %s: expected a header name (1..64 bytes)%s", v, "");
            o->session_header = v;
        } else if (strcmp(a, "--warmup") == 0) {
            NEEDV();
            if (parse_long(v, 0, 1, &l) != 0)
                return pdb__usage_error("--warmup %s: expected 0 or 1%s", v, "");
            o->warmup = (int)l;
        } else if (strcmp(a, "--health-url") == 0) {
            NEEDV();
            o->health_url = v;
        } else if (strcmp(a, "--health-timeout") == 0) {
            NEEDV();
            if (parse_double(v, 0, 1e6, &o->health_timeout_s) != 0)
                return pdb__usage_error("--health-timeout %s: expected seconds >= 0%s", v, "");
        } else if (strcmp(a, "--no-health") == 0) {
            o->no_health = 1;
        } else if (strcmp(a, "--timeout") == 0) {
            NEEDV();
            if (parse_double(v, 0.001, 1e6, &o->timeout_s) != 0)
                return pdb__usage_error("--timeout %s: expected seconds > 0%s", v, "");
        } else if (strcmp(a, "--connect-timeout-ms") == 0) {
            NEEDV();
            if (parse_long(v, 1, 3600000, &o->connect_timeout_ms) != 0)
                return pdb__usage_error("--connect-timeout-ms %s: expected an integer in [1, 3600000]%s", v,
                                        "");
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
            return pdb__usage_error("unknown argument %s%s", a, "");
        }
#undef NEEDV
    }
    if (o->url == NULL)
        return pdb__usage_error("--url is required (e.g. --url http://127.0.0.1:8000)%s%s", "", "");
    if (strncmp(o->url, "http://", 7) != 0)
        return pdb__usage_error("--url %s: only http:// URLs are supported%s", o->url, "");
    if (o->input_ids && o->api != PDB_API_GENERATE)
        return pdb__usage_error("--input-ids needs --api generate (OpenAI prompts are sent as text)%s%s", "",
                                "");
    if (o->profiles_arg != NULL && matrix != NULL)
        return pdb__usage_error("--profiles and --matrix exclude each other%s%s", "", "");
    if (o->profiles_arg == NULL)
        o->profiles_arg = STUDY_PROFILES;
    if (parse_profiles(o->profiles_arg, o) != 0)
        return pdb__usage_error(
            "--profiles %s: expected ISL/OSL pairs separated by commas, e.g. 128/128,2048/256 "
            "(each in [1, 16777216])%s",
            o->profiles_arg, "");
    if (parse_list(conc, &o->conc, &o->n_conc, 1, 100000) != 0)
        return pdb__usage_error("--concurrency %s: expected integers in [1, 100000] separated by commas%s",
                                conc, "");
    if (o->workload == PDB_WL_SHARED_PREFIX) {
        if (o->prefix_tokens == 0)
            return pdb__usage_error("--workload shared-prefix needs --prefix-tokens P (the system prompts' "
                                    "length)%s%s",
                                    "", "");
        for (size_t k = 0; k < o->n_profiles; k++)
            if (o->prefix_tokens > o->isl[k])
                return pdb__usage_error("--prefix-tokens %d is longer than a profile's ISL (%s)",
                                        o->prefix_tokens, o->profiles_arg);
    } else if (o->prefix_tokens != 0 || o->prefixes != 4) {
        return pdb__usage_error("--prefixes and --prefix-tokens need --workload shared-prefix%s%s", "", "");
    }
    if (o->workload != PDB_WL_MULTI_TURN && o->session_header != NULL)
        return pdb__usage_error("--session-header needs --workload multi-turn%s%s", "", "");
    if (o->workload != PDB_WL_MULTI_TURN && o->turns != 4)
        return pdb__usage_error("--turns needs --workload multi-turn%s%s", "", "");
    if (o->path == NULL)
        o->path = o->api == PDB_API_GENERATE      ? "/generate"
                  : o->api == PDB_API_COMPLETIONS ? "/v1/completions"
                                                  : "/v1/chat/completions";
    return 0;
}
