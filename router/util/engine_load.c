/*
 * The engines' load answers parsed (engine_load.h). sglang's list is read with jansson; vLLM's Prometheus
 * text line by line, without a copy: a line is a comment ('#'), blank, or a sample `name{labels} value
 * [timestamp]`, the labels' quoted values may hold escaped quotes and braces. Only the gauges of
 * engine_load.h are read; every other sample is still checked for its shape, so that an answer that is not
 * Prometheus text (an HTML error page, a JSON document) is refused rather than read as "no load".
 */
#include "engine_load.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "err.h"

static void reset(pdr_engine_load_t *out)
{
    memset(out, 0, sizeof(*out));
    out->kv_usage_ppm = -1;
}

/* Adds one rank's object; -1 when a count it names is not an integer >= 0. */
static int add_rank(pdr_engine_load_t *out, json_t *e)
{
    static const char *const keys[3] = {"num_reqs", "num_waiting_reqs", "num_tokens"};
    uint64_t *dst[3] = {&out->reqs, &out->waiting, &out->tokens};
    int seen_reqs = 0;
    for (int k = 0; k < 3; k++) {
        json_t *v = json_object_get(e, keys[k]);
        if (v == NULL)
            continue;
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return -1;
        *dst[k] += (uint64_t)json_integer_value(v);
        if (k == 0)
            seen_reqs = 1;
        if (k == 2)
            out->tokens_seen++;
    }
    out->reqs_seen += (unsigned)seen_reqs;
    return 0;
}

int pdr_engine_load_parse_sglang(const char *buf, size_t len, int rank, pdr_engine_load_t *out)
{
    reset(out);
    if (len > PDR_ENGINE_LOAD_MAX_BODY)
        return PDR_ETOOBIG;
    json_t *a = json_loadb(buf, len, 0, NULL);
    int rc = 0, json_list = json_is_array(a);
    if (json_is_array(a)) {
        size_t i;
        json_t *e;
        json_array_foreach(a, i, e)
        {
            if (!json_is_object(e))
                continue;
            json_t *r = json_object_get(e, "dp_rank");
            if (rank >= 0 && (!json_is_integer(r) || json_integer_value(r) != rank))
                continue; /* another rank's */
            if (add_rank(out, e) != 0) {
                rc = PDR_EPROTO;
                break;
            }
        }
    } else if (json_is_object(a)) {
        rc = add_rank(out, a) != 0 ? PDR_EPROTO : 0;
    } else {
        rc = PDR_EPROTO;
    }
    json_decref(a);
    if (rc != 0)
        reset(out);
    else
        out->list = json_list;
    return rc;
}

/* ---- Prometheus text ---- */

static int name_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
static int name_char(char c)
{
    return name_start(c) || (c >= '0' && c <= '9');
}

/* The end of the label set that starts at p ('{'), past its '}', or NULL when it is not one. */
static const char *skip_labels(const char *p, const char *end)
{
    p++;
    for (;;) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == ','))
            p++;
        if (p < end && *p == '}')
            return p + 1;
        if (p >= end || !name_start(*p))
            return NULL;
        while (p < end && name_char(*p))
            p++;
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        if (p >= end || *p != '=')
            return NULL;
        p++;
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        if (p >= end || *p != '"')
            return NULL;
        for (p++; p < end && *p != '"'; p++)
            if (*p == '\\' && ++p == end)
                return NULL;
            else if (*p == '\n')
                return NULL;
        if (p >= end)
            return NULL;
        p++; /* the closing quote */
    }
}

/* The value that starts at p (up to the line's end), in *v; -1 when it is no number. Prometheus writes
 * floats as Go does ("1", "0.25", "1e+06", "NaN", "+Inf"): strtod reads them all; a bounded copy keeps it
 * inside the line. */
static int read_value(const char *p, const char *end, double *v, const char **after)
{
    char tmp[64];
    size_t n = 0;
    while (p + n < end && p[n] != ' ' && p[n] != '\t')
        n++;
    if (n == 0 || n >= sizeof(tmp))
        return -1;
    memcpy(tmp, p, n);
    tmp[n] = '\0';
    char *e;
    *v = strtod(tmp, &e);
    if (*e != '\0')
        return -1;
    *after = p + n;
    return 0;
}

enum { G_RUNNING = 0, G_WAITING, G_KV, G_OTHER };

static int gauge_of(const char *name, size_t n)
{
    static const struct {
        const char *name;
        int g;
    } known[] = {
        {"vllm:num_requests_running", G_RUNNING},
        {"vllm:num_requests_waiting", G_WAITING},
        {"vllm:kv_cache_usage_perc", G_KV},
        {"vllm:gpu_cache_usage_perc", G_KV}, /* its name before vLLM 0.10 */
    };
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (strlen(known[i].name) == n && memcmp(known[i].name, name, n) == 0)
            return known[i].g;
    return G_OTHER;
}

int pdr_engine_load_parse_prometheus(const char *buf, size_t len, pdr_engine_load_t *out)
{
    reset(out);
    if (len > PDR_ENGINE_LOAD_MAX_BODY)
        return PDR_ETOOBIG;
    const char *p = buf, *end = buf + len;
    double running = 0, waiting = 0, kv = -1;
    unsigned n_running = 0, n_waiting = 0;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (eol == NULL)
            eol = end;
        const char *q = p, *lend = eol > p && eol[-1] == '\r' ? eol - 1 : eol;
        p = eol < end ? eol + 1 : end;
        while (q < lend && (*q == ' ' || *q == '\t'))
            q++;
        if (q == lend || *q == '#')
            continue;
        if (!name_start(*q))
            goto bad;
        const char *name = q;
        while (q < lend && name_char(*q))
            q++;
        size_t nlen = (size_t)(q - name);
        if (q < lend && *q == '{' && (q = skip_labels(q, lend)) == NULL)
            goto bad;
        if (q >= lend || (*q != ' ' && *q != '\t'))
            goto bad;
        while (q < lend && (*q == ' ' || *q == '\t'))
            q++;
        double v;
        const char *after;
        if (read_value(q, lend, &v, &after) != 0)
            goto bad;
        /* An optional timestamp (integer milliseconds), then nothing. */
        while (after < lend && (*after == ' ' || *after == '\t'))
            after++;
        if (after < lend && *after == '-')
            after++;
        while (after < lend && *after >= '0' && *after <= '9')
            after++;
        while (after < lend && (*after == ' ' || *after == '\t'))
            after++;
        if (after != lend)
            goto bad;
        int g = gauge_of(name, nlen);
        if (g == G_OTHER)
            continue;
        if (!isfinite(v) || v < 0 || v > 1e15 || (g == G_KV && v > 1))
            goto bad;
        if (g == G_RUNNING) {
            running += v;
            n_running++;
        } else if (g == G_WAITING) {
            waiting += v;
            n_waiting++;
        } else if (v > kv) {
            kv = v;
        }
        if (running + waiting > 1e15) /* many series of huge counts: no engine runs that many */
            goto bad;
    }
    out->reqs = (uint64_t)llround(running) + (uint64_t)llround(waiting);
    out->waiting = (uint64_t)llround(waiting);
    out->reqs_seen = n_running > n_waiting ? n_running : n_waiting;
    out->kv_usage_ppm = kv >= 0 ? (int64_t)llround(kv * 1e6) : -1;
    return 0;
bad:
    reset(out);
    return PDR_EPROTO;
}
