/*
 * Fuzz target for the Jinja engine (tokenizer/jinja*.c): the input is a template, then optionally a NUL
 * and a JSON object of variables (without one, a fixed context with messages, tools and assorted values).
 * A template compiles or fails with "line:col: ..."; a compiled one renders, under small limits, to the
 * same output twice or fails with PDR_EINVAL or PDR_ETOOBIG and "line:col: ...". Built with libFuzzer
 * when PDR_LIBFUZZER is defined; otherwise a main() replays every file named on the command line, each
 * also as deterministic mutations (ctest's jinja_fuzz_corpus). Seeds: tests/fuzz/make_jinja_seeds.py.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "jinja.h"

static const char fixed_context[] =
    "{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"add_generation_prompt\": true,"
    " \"messages\": [{\"role\": \"system\", \"content\": \" sys \"}, {\"role\": \"user\", \"content\": "
    "\"hi\"},"
    " {\"role\": \"assistant\", \"content\": \"<think>r</think>a\", \"tool_calls\": [{\"function\":"
    " {\"name\": \"f\", \"arguments\": {\"x\": [1, 2.5, null]}}}]}, {\"role\": \"tool\", \"content\": "
    "\"ok\"},"
    " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"t\"}, {\"type\": \"image\"}]}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": "
    "\"object\","
    " \"properties\": {\"x\": {\"type\": \"array\", \"items\": {\"type\": \"number\"}}}}}}],"
    " \"s\": \"h\\u00e9llo \\u4f60\", \"n\": 3, \"f\": 1.5, \"l\": [3, 1, 2], \"d\": {\"a\": 1, \"b\": "
    "\"x\"}}";

static int well_formed_error(const char *err)
{
    /* "line:col: message" */
    const char *p = err;
    if (*p < '1' || *p > '9')
        return 0;
    while (*p >= '0' && *p <= '9')
        p++;
    if (*p++ != ':' || *p < '1' || *p > '9')
        return 0;
    while (*p >= '0' && *p <= '9')
        p++;
    return p[0] == ':' && p[1] == ' ';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    const uint8_t *nul = memchr(data, 0, size);
    size_t tlen = nul ? (size_t)(nul - data) : size;
    json_t *ctx;
    if (nul != NULL)
        ctx = json_loadb((const char *)nul + 1, size - tlen - 1, 0, NULL);
    else
        ctx = json_loads(fixed_context, 0, NULL);
    if (ctx == NULL)
        ctx = json_object();
    pdr_jinja_limits_t lim;
    pdr_jinja_limits_default(&lim);
    lim.max_output_bytes = 1 << 16;
    lim.max_memory_bytes = 16 << 20;
    lim.max_loop_iterations = 20000;
    lim.max_depth = 32;
    char err[256];
    pdr_jinja_tmpl_t *t;
    int r = pdr_jinja_compile(text, tlen, &lim, &t, err, sizeof(err));
    if (r != 0) {
        if ((r != PDR_EINVAL && r != PDR_ETOOBIG) || t != NULL || !well_formed_error(err))
            abort();
        json_decref(ctx);
        return 0;
    }
    char *out1, *out2;
    size_t len1, len2;
    int r1 = pdr_jinja_render(t, ctx, 1700000000, &out1, &len1, err, sizeof(err));
    if (r1 != 0 && ((r1 != PDR_EINVAL && r1 != PDR_ETOOBIG) || out1 != NULL || !well_formed_error(err)))
        abort();
    int r2 = pdr_jinja_render(t, ctx, 1700000000, &out2, &len2, err, sizeof(err));
    if (r2 != r1 ||
        (r1 == 0 && (len1 != len2 || memcmp(out1, out2, len1) != 0 || len1 > lim.max_output_bytes)))
        abort();
    free(out1);
    free(out2);
    pdr_jinja_free(t);
    json_decref(ctx);
    return 0;
}

#ifndef PDR_LIBFUZZER
#define PDR_REPLAY_MUTATIONS 100
#include "replay_main.h"
#endif
