/*
 * pdjinja: the Jinja engine (tokenizer/jinja.h) from the command line.
 *
 *   pdjinja TEMPLATE [CONTEXT.json [NOW]]   renders TEMPLATE with the variables of CONTEXT.json to stdout;
 *                                           NOW (seconds since the epoch) is what strftime_now() formats
 *   pdjinja --bench N TEMPLATE CONTEXT.json compiles once, renders N times; prints the time per compile
 *                                           and per render
 *   pdjinja --batch                         reads JSON lines {"template": ..., "context": {...}, "now": N}
 *                                           on stdin and writes one JSON line per case: {"ok": true,
 *                                           "out": ...} or {"ok": false, "stage": "compile"|"render",
 *                                           "error": "line:col: ..."} (tests/tok/jinja_diff.py reads them)
 *
 * Exits 0 when every render succeeded or the batch ran, 1 on a compile or render error, 2 on usage.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "err.h"
#include "jinja.h"

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
        if (n == cap) {
            if (cap >= (size_t)64 << 20) {
                free(buf);
                buf = NULL;
                break;
            }
            char *nb = realloc(buf, cap * 2);
            if (nb == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    *len = n;
    return buf;
}

static json_t *run_case(const char *text, size_t len, const json_t *ctx, int64_t now)
{
    char err[512];
    pdr_jinja_tmpl_t *t;
    int r = pdr_jinja_compile(text, len, NULL, &t, err, sizeof(err));
    if (r != 0)
        return json_pack("{s:b,s:s,s:s,s:s}", "ok", 0, "stage", "compile", "error", err, "code",
                         pdr_errname(r));
    char *out;
    size_t outlen;
    r = pdr_jinja_render(t, ctx, now, &out, &outlen, err, sizeof(err));
    pdr_jinja_free(t);
    if (r != 0)
        return json_pack("{s:b,s:s,s:s,s:s}", "ok", 0, "stage", "render", "error", err, "code",
                         pdr_errname(r));
    json_t *s = json_stringn(out, outlen);
    free(out);
    if (s == NULL)
        return json_pack("{s:b,s:s,s:s}", "ok", 0, "stage", "render", "error", "output is not valid UTF-8");
    return json_pack("{s:b,s:o}", "ok", 1, "out", s);
}

static int batch(void)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, stdin)) > 0) {
        json_error_t e;
        json_t *c = json_loadb(line, (size_t)n, 0, &e);
        json_t *tmpl = c ? json_object_get(c, "template") : NULL;
        if (!json_is_string(tmpl)) {
            fprintf(stderr, "pdjinja: bad input line: %s\n", c ? "no template" : e.text);
            json_decref(c);
            free(line);
            return 2;
        }
        json_t *now = json_object_get(c, "now");
        json_t *res =
            run_case(json_string_value(tmpl), json_string_length(tmpl), json_object_get(c, "context"),
                     json_is_integer(now) ? (int64_t)json_integer_value(now) : -1);
        char *d = res ? json_dumps(res, JSON_COMPACT) : NULL;
        printf("%s\n", d ? d : "{\"ok\":false,\"stage\":\"render\",\"error\":\"out of memory\"}");
        fflush(stdout);
        free(d);
        json_decref(res);
        json_decref(c);
    }
    free(line);
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int bench(long n, const char *tpath, const char *cpath)
{
    size_t len;
    char *text = read_file(tpath, &len), err[512];
    json_error_t je;
    json_t *ctx = json_load_file(cpath, 0, &je);
    if (text == NULL || ctx == NULL || n < 1) {
        fprintf(stderr, "pdjinja: cannot read %s or %s\n", tpath, cpath);
        free(text);
        json_decref(ctx);
        return 2;
    }
    pdr_jinja_tmpl_t *t = NULL;
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        pdr_jinja_free(t);
        if (pdr_jinja_compile(text, len, NULL, &t, err, sizeof(err)) != 0) {
            fprintf(stderr, "pdjinja: compile error: %s\n", err);
            free(text);
            json_decref(ctx);
            return 1;
        }
    }
    double t1 = now_s();
    size_t outlen = 0;
    int rc = 0;
    for (long i = 0; i < n && rc == 0; i++) {
        char *out;
        rc = pdr_jinja_render(t, ctx, 1700000000, &out, &outlen, err, sizeof(err));
        free(out);
    }
    double t2 = now_s();
    if (rc != 0)
        fprintf(stderr, "pdjinja: render error: %s\n", err);
    else
        printf("template %zu bytes, output %zu bytes: compile %.1f us, render %.1f us (%ld rounds)\n", len,
               outlen, (t1 - t0) / (double)n * 1e6, (t2 - t1) / (double)n * 1e6, n);
    pdr_jinja_free(t);
    free(text);
    json_decref(ctx);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--batch") == 0)
        return batch();
    if (argc == 5 && strcmp(argv[1], "--bench") == 0)
        return bench(strtol(argv[2], NULL, 10), argv[3], argv[4]);
    if (argc < 2 || argc > 4) {
        fprintf(stderr,
                "usage: pdjinja TEMPLATE [CONTEXT.json [NOW]] | pdjinja --batch | pdjinja --bench N TEMPLATE "
                "CONTEXT.json\n");
        return 2;
    }
    size_t len;
    char *text = read_file(argv[1], &len);
    if (text == NULL) {
        fprintf(stderr, "pdjinja: cannot read %s\n", argv[1]);
        return 2;
    }
    json_t *ctx = NULL;
    if (argc >= 3) {
        json_error_t e;
        ctx = json_load_file(argv[2], 0, &e);
        if (ctx == NULL) {
            fprintf(stderr, "pdjinja: %s:%d: %s\n", argv[2], e.line, e.text);
            free(text);
            return 2;
        }
    }
    int64_t now = argc == 4 ? strtoll(argv[3], NULL, 10) : -1;
    json_t *res = run_case(text, len, ctx, now);
    free(text);
    json_decref(ctx);
    int rc = 1;
    if (res != NULL && json_is_true(json_object_get(res, "ok"))) {
        json_t *out = json_object_get(res, "out");
        fwrite(json_string_value(out), 1, json_string_length(out), stdout);
        rc = 0;
    } else {
        fprintf(stderr, "pdjinja: %s error: %s\n",
                res ? json_string_value(json_object_get(res, "stage")) : "?",
                res ? json_string_value(json_object_get(res, "error")) : "out of memory");
    }
    json_decref(res);
    return rc;
}
