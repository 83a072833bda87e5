/*
 * The tokenizer.json loader's errors (malformed JSON with line:column, each unsupported feature named by
 * its JSON path), encoding of a small hand-made tokenizer (BPE ranks, added tokens, the template, the
 * prefix space), invalid UTF-8, and concurrent encoding of one tokenizer (argv[1]: a fixture file).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "runner.h"
#include "err.h"
#include "tokenizer.h"
#include "tokenizer_internal.h"

static char path[] = "/tmp/pdr_test_tokXXXXXX";
static int fd = -1;

static void write_file(const char *s)
{
    CHECK(ftruncate(fd, 0) == 0);
    CHECK(pwrite(fd, s, strlen(s), 0) == (ssize_t)strlen(s));
}

/* When set, make() uses these instead of its own extra tokens and merges. */
static const char *vocab_extra, *merges_json;

/* A file with the 256 byte characters (ids 0-255), "ab" 256, "Ġab" 257, "<s>" 258, "</s>" 259. */
static char *make(const char *normalizer, const char *pre, const char *post, const char *added,
                  const char *model_extra)
{
    size_t cap = 65536, n = 0;
    char *b = malloc(cap);
    n +=
        (size_t)snprintf(b + n, cap - n, "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null,\n");
    n += (size_t)snprintf(b + n, cap - n, "\"added_tokens\": %s,\n\"normalizer\": %s,\n", added, normalizer);
    n += (size_t)snprintf(b + n, cap - n, "\"pre_tokenizer\": %s,\n\"post_processor\": %s,\n", pre, post);
    n += (size_t)snprintf(b + n, cap - n, "\"decoder\": null,\n\"model\": {\"type\": \"BPE\"%s, \"vocab\": {",
                          model_extra);
    for (unsigned c = 0; c < 256; c++) {
        char u[2];
        size_t k = pdr__tok_byte_char((uint8_t)c, u);
        unsigned cp = k == 1 ? (uint8_t)u[0] : (((uint8_t)u[0] & 0x1Fu) << 6 | ((uint8_t)u[1] & 0x3Fu));
        n += (size_t)snprintf(b + n, cap - n, "\"\\u%04x\": %u, ", cp, c);
    }
    n += (size_t)snprintf(b + n, cap - n, "%s},\n",
                          vocab_extra ? vocab_extra
                                      : "\"ab\": 256, \"\\u0120ab\": 257, \"<s>\": 258, \"</s>\": 259");
    snprintf(b + n, cap - n, "\"merges\": %s}}\n",
             merges_json ? merges_json : "[\"a b\", [\"\\u0120\", \"ab\"]]");
    return b;
}

static const char *BL = "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}";
static const char *ADDED = "[{\"id\": 258, \"content\": \"<s>\", \"single_word\": false, \"lstrip\": false, "
                           "\"rstrip\": false, \"normalized\": false, \"special\": true}]";

/* Loads s; expects failure with a message containing want. */
static void expect_error(const char *s, const char *want)
{
    char err[512];
    write_file(s);
    pdr_tokenizer_t *t = pdr_tokenizer_load(path, err, sizeof(err));
    CHECK(t == NULL);
    if (t != NULL) {
        pdr_tokenizer_free(t);
        return;
    }
    if (strstr(err, want) == NULL || strstr(err, path) == NULL) {
        fprintf(stderr, "error \"%s\" lacks \"%s\" or the path\n", err, want);
        check_failures++;
    }
}

static void expect_error_free(char *s, const char *want)
{
    expect_error(s, want);
    free(s);
}

static pdr_tokenizer_t *load(char *s)
{
    char err[512];
    write_file(s);
    free(s);
    pdr_tokenizer_t *t = pdr_tokenizer_load(path, err, sizeof(err));
    if (t == NULL)
        fprintf(stderr, "load: %s\n", err);
    CHECK(t != NULL);
    return t;
}

/* Encodes text and compares with want (terminated by UINT32_MAX). */
static void expect_ids(const pdr_tokenizer_t *t, const char *text, const uint32_t *want)
{
    uint32_t *ids;
    size_t n, nw = 0;
    while (want[nw] != UINT32_MAX)
        nw++;
    int r = pdr_tokenizer_encode(t, text, strlen(text), &ids, &n);
    CHECK(r == 0);
    int same = r == 0 && n == nw && (n == 0 || memcmp(ids, want, n * sizeof(*ids)) == 0);
    if (!same) {
        fprintf(stderr, "encode(\"%s\"):", text);
        for (size_t i = 0; r == 0 && i < n; i++)
            fprintf(stderr, " %u", ids[i]);
        fprintf(stderr, "\n");
        check_failures++;
    }
    free(ids);
}

static void test_errors(void)
{
    char err[512];
    CHECK(pdr_tokenizer_load("/nonexistent/tokenizer.json", err, sizeof(err)) == NULL);
    CHECK(strstr(err, "/nonexistent/tokenizer.json") != NULL);
    expect_error("{\"model\": {\n  \"type\": \"BPE\",\n  \"vocab\": {\"a\" 1}}}", ":3:");
    expect_error("{\"model\": {}, \"model\": {}}", "duplicate");
    expect_error("[1, 2]", "the top level is not an object");
    expect_error("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}, \"pre_tokenizer\": null}",
                 "model.type: \"WordPiece\" is not supported");
    expect_error("{\"truncation\": {\"max_length\": 8}, \"model\": {\"type\": \"BPE\"}}", "truncation:");
    expect_error_free(make("{\"type\": \"Lowercase\"}", BL, "null", "[]", ""),
                      "normalizer.type: \"Lowercase\" is not supported");
    expect_error_free(make("null", "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Metaspace\"}]}",
                           "null", "[]", ""),
                      "pre_tokenizer.pretokenizers[0].type: \"Metaspace\" is not supported");
    expect_error_free(
        make("null",
             "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Removed\", "
             "\"invert\": false}",
             "null", "[]", ""),
        "pre_tokenizer.behavior");
    expect_error_free(
        make("null",
             "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(a\"}, \"behavior\": \"Isolated\", "
             "\"invert\": false}",
             "null", "[]", ""),
        "pre_tokenizer.pattern: the pattern does not compile");
    expect_error_free(make("null", "{\"type\": \"Whitespace\"}", "null", "[]", ""),
                      "pre_tokenizer.type: \"Whitespace\" is not supported");
    expect_error_free(make("{\"type\": \"Replace\", \"pattern\": {\"Regex\": \" \"}, \"content\": \"_\"}",
                           "null", "null", "[]", ""),
                      "normalizer.pattern: only {\"String\"");
    expect_error_free(make("{\"type\": \"Prepend\", \"prepend\": \"_\"}", BL, "null", "[]", ""),
                      "only null or NFC is supported with a ByteLevel pre-tokenizer");
    expect_error_free(
        make("null", "{\"type\": \"Metaspace\", \"replacement\": \"_\", \"prepend_scheme\": \"sometimes\"}",
             "null", "[]", ""),
        "pre_tokenizer.prepend_scheme");
    expect_error_free(make("null", BL, "{\"type\": \"BertProcessing\"}", "[]", ""),
                      "post_processor.type: \"BertProcessing\" is not supported");
    expect_error_free(make("null", BL, "null",
                           "[{\"id\": 258, \"content\": \"<s>\", \"lstrip\": true, \"normalized\": false}]",
                           ""),
                      "added_tokens[0].lstrip: true is not supported");
    expect_error_free(make("{\"type\": \"NFC\"}", BL, "null",
                           "[{\"id\": 258, \"content\": \"<s>\", \"normalized\": true}]", ""),
                      "added_tokens[0].normalized");
    expect_error_free(make("null", BL, "null", "[]", ", \"byte_fallback\": true"),
                      "model.byte_fallback: true is not supported with a ByteLevel");
    expect_error_free(make("null", BL, "null", "[]", ", \"dropout\": 0.1"), "model.dropout");
    expect_error_free(make("null", BL, "null", "[]", ", \"continuing_subword_prefix\": \"##\""),
                      "model.continuing_subword_prefix");
    expect_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}, "
                 "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
                 "model.merges[0]: \"b\" is not in the vocabulary");
    expect_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}, "
                 "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
                 "model.merges[0]: the merged token \"ab\" is not in the vocabulary");
    expect_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}}}", "model.vocab");
}

static void test_encode(void)
{
    pdr_tokenizer_t *t = load(make("null", BL, "null", ADDED, ""));
    if (t == NULL)
        return;
    CHECK(pdr_tokenizer_vocab_size(t) == 260);
    CHECK(pdr_tokenizer_merges(t) == 2);
    CHECK(pdr_tokenizer_bytes(t) > 0);
    /* 'a'=97 'b'=98; "ab" merges first (rank 0), then "Ġ ab" (rank 1). */
    expect_ids(t, "ab", (const uint32_t[]){256, UINT32_MAX});
    expect_ids(t, "ab ab", (const uint32_t[]){256, 257, UINT32_MAX});
    expect_ids(t, "aab", (const uint32_t[]){97, 256, UINT32_MAX});
    expect_ids(t, "<s>ab<s>", (const uint32_t[]){258, 256, 258, UINT32_MAX});
    expect_ids(t, "<s", (const uint32_t[]){60, 115, UINT32_MAX});
    expect_ids(t, "", (const uint32_t[]){UINT32_MAX});
    /* Invalid UTF-8: a stray continuation, an overlong NUL, a surrogate, a truncated sequence, > U+10FFFF. */
    static const char *const bad[] = {"a\x80",      "\xc0\x80",         "\xed\xa0\x80",
                                      "ab\xe2\x82", "\xf4\x90\x80\x80", "\xff"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint32_t *ids = (uint32_t *)1;
        size_t n = 1;
        CHECK(pdr_tokenizer_encode(t, bad[i], strlen(bad[i]), &ids, &n) == PDR_EINVAL);
        CHECK(ids == NULL && n == 0);
    }
    uint32_t *ids;
    size_t n;
    CHECK(pdr_tokenizer_encode(t, "a\0b", 3, &ids, &n) == 0 && n == 3); /* NUL is a byte like another */
    free(ids);
    pdr_tokenizer_free(t);

    /* ByteLevel's prefix space, and a Sequence of templates: the later one wraps the earlier one. */
    const char *post =
        "{\"type\": \"Sequence\", \"processors\": [{\"type\": \"ByteLevel\"}, "
        "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}}, "
        "{\"Sequence\": {\"id\": \"A\"}}, {\"SpecialToken\": {\"id\": \"</s>\"}}], "
        "\"special_tokens\": {\"<s>\": {\"ids\": [258]}, \"</s>\": {\"ids\": [259]}}}, "
        "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"</s>\"}}, "
        "{\"Sequence\": {\"id\": \"A\"}}], \"special_tokens\": {\"</s>\": {\"ids\": [259]}}}]}";
    t = load(make("{\"type\": \"NFC\"}", "{\"type\": \"ByteLevel\", \"add_prefix_space\": true}", post, ADDED,
                  ""));
    if (t == NULL)
        return;
    expect_ids(t, "ab", (const uint32_t[]){259, 258, 257, 259, UINT32_MAX});
    expect_ids(t, "", (const uint32_t[]){259, 258, 259, UINT32_MAX});
    expect_ids(t, "ab<s>ab", (const uint32_t[]){259, 258, 257, 258, 257, 259, UINT32_MAX});
    /* NFC: e + U+0301 is U+00E9, bytes C3 A9 -> their ids (after the prefix space). */
    expect_ids(t, "e\xcc\x81", (const uint32_t[]){259, 258, 32, 0xC3, 0xA9, 259, UINT32_MAX});
    pdr_tokenizer_free(t);
}

/* \s is Unicode White_Space (as in Oniguruma and Rust's regex), not PCRE2's: U+180E (E1 A0 8E) is not a
 * space, so GPT-2's pattern keeps "U+180E!" one piece (` ?[^\s\p{L}\p{N}]+`) and the merge of byte 8E
 * with '!' applies; with PCRE2's own \s the pieces would be "U+180E" and "!" and it could not. */
/* A SentencePiece-style file: characters, "\u2581" for spaces, byte fallback, the unknown token. */
static pdr_tokenizer_t *spm(const char *normalizer, const char *pre, const char *model_extra)
{
    char b[4096];
    snprintf(
        b, sizeof(b),
        "{\"added_tokens\": [{\"id\": 1, \"content\": \"<s>\", \"normalized\": false, \"special\": true}],"
        "\"normalizer\": %s, \"pre_tokenizer\": %s, \"post_processor\": null, \"decoder\": null,"
        "\"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\"%s, \"vocab\": {\"<unk>\": 0, \"<s>\": 1,"
        "\"\u2581\": 2, \"a\": 3, \"b\": 4, \"\u2581a\": 5, \"\u2581ab\": 6, \"<0xC3>\": 7, \"<0xA9>\": 8},"
        "\"merges\": [\"\u2581 a\", \"\u2581a b\"]}}",
        normalizer, pre, model_extra);
    char *s = strdup(b);
    return load(s);
}

static void test_sentencepiece(void)
{
    static const char *meta_first = "{\"type\": \"Metaspace\", \"replacement\": \"\u2581\", "
                                    "\"prepend_scheme\": \"first\", \"split\": false}";
    pdr_tokenizer_t *t = spm("null", meta_first, ", \"byte_fallback\": true, \"fuse_unk\": true");
    if (t == NULL)
        return;
    /* " ab a": spaces as U+2581, one in front (the text's first segment): "\u2581ab" "\u2581a". */
    expect_ids(t, "ab a", (const uint32_t[]){6, 5, UINT32_MAX});
    /* é is not in the vocabulary: its two bytes' tokens; z is not either, and has no byte tokens: unknown
     * (two of them fused into one). */
    expect_ids(t, "a\xc3\xa9zz", (const uint32_t[]){5, 7, 8, 0, UINT32_MAX});
    /* After an added token the segment is not the text's first: nothing in front ("first"). */
    expect_ids(t, "<s>ab", (const uint32_t[]){1, 3, 4, UINT32_MAX});
    pdr_tokenizer_free(t);
    /* The legacy form: the normalizer prepends and replaces, no pre-tokenizer: every segment gets the
     * prefix, an added token's neighbour included. */
    t = spm("{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"\u2581\"},"
            "{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\u2581\"}]}",
            "null", ", \"byte_fallback\": false");
    if (t == NULL)
        return;
    expect_ids(t, "<s>ab a", (const uint32_t[]){1, 6, 5, UINT32_MAX});
    expect_ids(t, "\xc3\xa9", (const uint32_t[]){2, 0, UINT32_MAX}); /* no byte fallback: unknown */
    pdr_tokenizer_free(t);
}

static void test_white_space(void)
{
    char c8e[2];
    size_t k = pdr__tok_byte_char(0x8E, c8e);
    unsigned cp = k == 1 ? (uint8_t)c8e[0] : (((uint8_t)c8e[0] & 0x1Fu) << 6 | ((uint8_t)c8e[1] & 0x3Fu));
    char ve[96], mj[96];
    snprintf(ve, sizeof(ve), "\"\\u%04x!\": 256", cp);
    snprintf(mj, sizeof(mj), "[[\"\\u%04x\", \"!\"]]", cp);
    vocab_extra = ve;
    merges_json = mj;
    pdr_tokenizer_t *t = load(make("null", BL, "null", "[]", ""));
    vocab_extra = merges_json = NULL;
    if (t == NULL)
        return;
    expect_ids(t, "\xe1\xa0\x8e!", (const uint32_t[]){0xE1, 0xA0, 256, UINT32_MAX});
    /* NEL (U+0085, C2 85) is White_Space: "x NEL" ends in a space run, its bytes stay apart. */
    expect_ids(t, "x\xc2\x85", (const uint32_t[]){'x', 0xC2, 0x85, UINT32_MAX});
    pdr_tokenizer_free(t);
}

struct job {
    const pdr_tokenizer_t *t;
    const char *const *texts;
    size_t n;
    uint64_t sum; /* a hash of every id of every text */
};

static void *encode_all(void *arg)
{
    struct job *j = arg;
    uint64_t h = 1469598103934665603ULL;
    for (int round = 0; round < 3; round++)
        for (size_t i = 0; i < j->n; i++) {
            uint32_t *ids;
            size_t n;
            if (pdr_tokenizer_encode(j->t, j->texts[i], strlen(j->texts[i]), &ids, &n) != 0)
                return NULL;
            for (size_t k = 0; k < n; k++)
                h = (h ^ ids[k]) * 1099511628211ULL;
            free(ids);
        }
    j->sum = h;
    return NULL;
}

/* Four threads encode the same texts with one tokenizer; each must get what one thread alone receives. */
static void test_threads(const char *file)
{
    char err[512];
    pdr_tokenizer_t *t = pdr_tokenizer_load(file, err, sizeof(err));
    if (t == NULL)
        fprintf(stderr, "%s\n", err);
    CHECK(t != NULL);
    if (t == NULL)
        return;
    static const char *const texts[] = {
        "Hello, world! It's 2026.",  "    def f(x):\n        return x ** 2\n",
        "Привет, мир! 你好，世界。", "<|begin_of_text|>hello<|eot_id|>",
        "a  b   c    d\t\t\n\n",     "emoji 😀👍🏽 I'LL DON'T",
    };
    struct job one = {t, texts, sizeof(texts) / sizeof(texts[0]), 0};
    encode_all(&one);
    CHECK(one.sum != 0);
    struct job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = one;
        jobs[i].sum = 0;
        CHECK(pthread_create(&th[i], NULL, encode_all, &jobs[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(jobs[i].sum == one.sum);
    }
    pdr_tokenizer_free(t);
}

static const char *tokenizer_json; /* argv[1]: a tokenizer.json for the threads case */

/* Each case, in its child, has a scratch file of its own. */
/* What a path that is not a tokenizer.json gets: a message saying what is expected; a directory holding a
 * tokenizer.json (a model directory) loads it. */
static void test_paths(void)
{
    char err[512], dir[] = "/tmp/pdr_test_tokdirXXXXXX", file[600];
    CHECK(mkdtemp(dir) != NULL);
    static const char *const expected =
        "expected a Hugging Face tokenizer.json file, or a directory holding one";
    CHECK(pdr_tokenizer_load(dir, err, sizeof(err)) == NULL);
    CHECK(strstr(err, dir) != NULL && strstr(err, "a directory without a tokenizer.json") != NULL &&
          strstr(err, expected) != NULL);
    CHECK(pdr_tokenizer_load("meta-llama/Llama-3.1-8B-Instruct", err, sizeof(err)) == NULL);
    CHECK(strstr(err, "no such file") != NULL && strstr(err, expected) != NULL &&
          strstr(err, "a Hugging Face model name is not downloaded") != NULL);
    CHECK(pdr_tokenizer_load("/nonexistent/tokenizer.json", err, sizeof(err)) == NULL);
    CHECK(strstr(err, expected) != NULL && strstr(err, "not downloaded") == NULL);
    CHECK(pdr_tokenizer_load("/dev/null", err, sizeof(err)) == NULL);
    CHECK(strstr(err, "/dev/null: not a regular file") != NULL && strstr(err, expected) != NULL);

    snprintf(file, sizeof(file), "%s/tokenizer.json", dir);
    FILE *f = fopen(file, "w");
    CHECK(f != NULL);
    char *json = make("null", BL, "null", ADDED, "");
    if (f != NULL) {
        fputs(json, f);
        fclose(f);
    }
    free(json);
    char slash[600];
    snprintf(slash, sizeof(slash), "%s/", dir);
    for (int i = 0; i < 2; i++) {
        pdr_tokenizer_t *t = pdr_tokenizer_load(i == 0 ? dir : slash, err, sizeof(err));
        if (t == NULL)
            fprintf(stderr, "a directory holding tokenizer.json: %s\n", err);
        CHECK(t != NULL);
        pdr_tokenizer_free(t);
    }
    char out[PDR_TOKENIZER_PATH_MAX];
    CHECK(pdr_tokenizer_file(slash, out, sizeof(out), err, sizeof(err)) == 0 && strcmp(out, file) == 0);
    unlink(file);
    rmdir(dir);
}

static void make_scratch(void)
{
    fd = mkstemp(path);
    CHECK(fd >= 0);
}

static void drop_scratch(void)
{
    close(fd);
    unlink(path);
}

static void test_threads_json(void)
{
    test_threads(tokenizer_json);
}

static const pdr_test_case_t cases[] = {
    {"errors", test_errors, 60},
    {"paths", test_paths, 60},
    {"encode", test_encode, 60},
    {"white_space", test_white_space, 60},
    {"sentencepiece", test_sentencepiece, 60},
    {"threads", test_threads_json, 60}, /* last: only with a tokenizer.json */
};

/* test_tokenizer [TOKENIZER_JSON [CASE...]] */
int main(int argc, char **argv)
{
    size_t n = sizeof(cases) / sizeof(cases[0]);
    if (argc > 1)
        tokenizer_json = argv[1];
    else
        n--;
    return pdr_test_run(cases, n, make_scratch, drop_scratch, argc > 1 ? argc - 1 : argc,
                        argc > 1 ? argv + 1 : argv);
}
