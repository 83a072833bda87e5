/*
 * Unit tests of router/util/jsonscan.c and jsonscan_object.c: valid and invalid documents of every class,
 * top-level records (types, array shapes, raw spans), integer limits, the heap key table, and a differential
 * check against jansson over every input here plus 20000 seeded mutations of request bodies. The oracle and
 * the known jansson differences live in tests/fuzz/fuzz_jsonscan.c, included below, so the fuzz target and
 * this test judge inputs the same way. Exit 0 when everything passed.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runner.h"
#include "err.h"
#include "jsonscan.h"

#define PDR_JSONSCAN_NO_MAIN
#include "../fuzz/fuzz_jsonscan.c"

typedef struct {
    const char *s;
    size_t len;
} doc_t;

typedef struct {
    const char *s;
    size_t len;
    const char *msg; /* a substring the error message must contain */
} bad_doc_t;

#define D(lit)                                                                                               \
    {                                                                                                        \
        lit, sizeof(lit) - 1                                                                                 \
    }
#define B(lit, msg)                                                                                          \
    {                                                                                                        \
        lit, sizeof(lit) - 1, msg                                                                            \
    }

static jdiff_stats_t stats;
static pdr_jmember_t mem[256];

static void hexdump(const uint8_t *b, size_t len)
{
    size_t shown = len > 512 ? 512 : len;
    for (size_t i = 0; i < shown; i++)
        fprintf(stderr, "%02x%s", b[i], (i % 32 == 31 || i + 1 == shown) ? "\n" : " ");
    if (shown < len)
        fprintf(stderr, "... (%zu bytes in all)\n", len);
}

/* Runs the differential on an exact-size heap copy; prints the input on disagreement. */
static void differential(const char *s, size_t len)
{
    char why[512];
    uint8_t *copy = malloc(len ? len : 1);
    if (copy == NULL)
        abort();
    memcpy(copy, s, len);
    if (jsonscan_differential(copy, len, &stats, why, sizeof(why)) != 0) {
        fprintf(stderr, "differential mismatch: %s\ninput (%zu bytes):\n", why, len);
        hexdump(copy, len);
        check_failures++;
    }
    free(copy);
}

/* Scans an exact-size heap copy into mem[]; the copy is kept in *keep for span checks. */
static int scan(const char *s, size_t len, size_t max, size_t *n, char *err, size_t errlen, char **keep)
{
    char *copy = malloc(len ? len : 1);
    if (copy == NULL)
        abort();
    memcpy(copy, s, len);
    int rc = pdr_json_scan_object(copy, len, mem, max, n, err, errlen);
    if (keep != NULL)
        *keep = copy;
    else
        free(copy);
    return rc;
}

static const doc_t valid_docs[] = {
    D("{}"),
    D(" \t\n\r{ \t\n\r}\r\n\t "),
    D("{\"a\":{}}"),
    D("{\"a\":[]}"),
    D("{\"\":\"\"}"),
    D("{\"a\":{\"b\":{\"c\":[1,[2,[3,{\"d\":null}]]]}},\"e\":[{},[],\"\",0]}"),
    D("{\"a\":1,\"b\":{\"a\":1,\"a\":2}}"), /* nested duplicates are not checked */
    D("{\"\xe5\x90\x8d\xe5\x89\x8d\":\"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xf0\x9f\x98\x80\"}"),
    D("{\"e\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0041\\u00e9\\u4E2D\\ud83d\\ude00\\uDBFF\\uDFFF\"}"),
    D("{\"n\":-9223372036854775808,\"m\":9223372036854775807,\"r\":1.5e308,\"s\":-0.0e-0,\"t\":1E+2,\"u\":"
      "0}"),
    D("{\"f\":-0,\"g\":0.5,\"h\":1e-400,\"i\":123.456e-7,\"j\":9e9}"),
    /* The edge of a double's range, and exponents that only underflow. */
    D("{\"a\":1.7976931348623157e308,\"b\":-1.7976931348623158e308,\"c\":10e307,\"d\":0.1e309}"),
    D("{\"a\":1e-99999999999999999999999,\"b\":0e99999,\"c\":-0.0e400,\"d\":0.00000e310}"),
    D("{\"u\":"
      "\"\xc2\x80\xdf\xbf\xe0\xa0\x80\xed\x9f\xbf\xee\x80\x80\xef\xbf\xbf\xf0\x90\x80\x80\xf4\x8f\xbf\xbf\""
      "}"),
    D("{\"del\":\"\x7f\",\"nul\":\"a\\u0000b\"}"),
    D("{\"t\":true,\"f\":false,\"n\":null}"),
    D("{\"a\\u0062\":1,\"ab2\":2}"),
    D("{\"long\":\"0123456789abcdef0123456789abcdef0123456789abcdef\\n0123456789abcdef\xc3\xa9z\"}"),
    D("{\"text\":\"The capital of France "
      "is\",\"sampling_params\":{\"temperature\":0.7,\"max_new_tokens\":16}}"),
};

static const bad_doc_t invalid_docs[] = {
    B("", "empty"),
    B(" \n\t\r ", "empty"),
    B("[]", "must be a JSON object"),
    B("[{}]", "must be a JSON object"),
    B("\"x\"", "must be a JSON object"),
    B("1", "must be a JSON object"),
    B("null", "must be a JSON object"),
    B("true", "must be a JSON object"),
    B("x", "must be a JSON object"),
    B("\xef\xbb\xbf{}", "must be a JSON object"),
    B("/*c*/{}", "must be a JSON object"),
    B("{", "byte 1: unexpected end of input"),
    B("{\"a\"", "expected ':'"),
    B("{\"a\":", "expected a value"),
    B("{\"a\":1", "expected ',' or '}'"),
    B("{\"a\":\"abc", "end of input in a string"),
    B("{\"a\":[1,2", "expected ',' or ']'"),
    B("{\"a\":1,}", "trailing comma"),
    B("{\"a\":[1,]}", "trailing comma"),
    B("{\"a\":{\"b\":1,}}", "trailing comma"),
    B("{,}", "expected a string key"),
    B("{\"a\":1,,\"b\":2}", "expected a string key"),
    B("{\"a\":[,1]}", "expected a value"),
    B("{\"a\":1 \"b\":2}", "byte 7: expected ',' or '}'"),
    B("{\"a\":[1 2]}", "expected ',' or ']'"),
    B("{\"a\"1}", "expected ':'"),
    B("{\"a\":{\"b\"}}", "expected ':'"),
    B("{a:1}", "expected a string key"),
    B("{'a':1}", "expected a string key"),
    B("{\"a\":1}//c", "unexpected data after"),
    B("{} {}", "byte 3: unexpected data after"),
    B("{}x", "unexpected data after"),
    B("{\"a\":01}", "leading zeros"),
    B("{\"a\":-01}", "leading zeros"),
    B("{\"a\":00}", "leading zeros"),
    B("{\"a\":+1}", "expected a value"),
    B("{\"a\":1.}", "after '.'"),
    B("{\"a\":1.e5}", "after '.'"),
    B("{\"a\":.5}", "expected a value"),
    B("{\"a\":1e}", "exponent"),
    B("{\"a\":1e+}", "exponent"),
    B("{\"a\":-}", "expected a digit"),
    B("{\"a\":-a}", "expected a digit"),
    B("{\"a\":0x10}", "expected ',' or '}'"),
    B("{\"a\":NaN}", "expected a value"),
    B("{\"a\":Infinity}", "expected a value"),
    B("{\"a\":-Infinity}", "expected a digit"),
    B("{\"a\":tru}", "invalid literal"),
    B("{\"a\":True}", "expected a value"),
    B("{\"a\":nul}", "invalid literal"),
    B("{\"a\":truex}", "expected ',' or '}'"),
    B("{\"a\":\"\\x\"}", "invalid escape"),
    B("{\"a\":\"\\U0041\"}", "invalid escape"),
    B("{\"a\":\"\\'\"}", "invalid escape"),
    B("{\"a\":\"\\u12\"}", "4 hex digits"),
    B("{\"a\":\"\\u12g4\"}", "4 hex digits"),
    B("{\"a\":\"\\ud800\"}", "high surrogate"),
    B("{\"a\":\"\\ud800x\"}", "high surrogate"),
    B("{\"a\":\"\\ud800\\u0041\"}", "high surrogate"),
    B("{\"a\":\"\\ud800\\ud800\"}", "high surrogate"),
    B("{\"a\":\"\\udc00\"}", "lone low surrogate"),
    B("{\"a\":\"\\ude00\\ud83d\"}", "lone low surrogate"),
    B("{\"a\":\"\xc0\x80\"}", "invalid UTF-8"),
    B("{\"a\":\"\xc1\xbf\"}", "invalid UTF-8"),
    B("{\"a\":\"\xe0\x80\x80\"}", "invalid UTF-8"),
    B("{\"a\":\"\xe0\x9f\xbf\"}", "invalid UTF-8"),
    B("{\"a\":\"\xed\xa0\x80\"}", "invalid UTF-8"),
    B("{\"a\":\"\xed\xbf\xbf\"}", "invalid UTF-8"),
    B("{\"a\":\"\xf0\x80\x80\x80\"}", "invalid UTF-8"),
    B("{\"a\":\"\xf0\x8f\xbf\xbf\"}", "invalid UTF-8"),
    B("{\"a\":\"\xf4\x90\x80\x80\"}", "invalid UTF-8"),
    B("{\"a\":\"\xf5\x80\x80\x80\"}", "invalid UTF-8"),
    B("{\"a\":\"\xf8\x88\x80\x80\x80\"}", "invalid UTF-8"),
    B("{\"a\":\"\xff\"}", "invalid UTF-8"),
    B("{\"a\":\"\x80\"}", "invalid UTF-8"),
    B("{\"a\":\"\xc3\"}", "invalid UTF-8"),
    B("{\"a\":\"\xe4\xb8\"}", "invalid UTF-8"),
    B("{\"a\":\"\xc3\x28\"}", "invalid UTF-8"),
    B("{\"a\":\"\xc3", "invalid UTF-8"),
    B("{\"a\":1}\xff", "unexpected data after"),
    B("{\"a\":\"x\x01\"}", "control character"),
    B("{\"a\":\"\t\"}", "control character"),
    B("{\"a\":\"\n\"}", "control character"),
    B("{\"a\":\"\x00\"}", "control character"),
    B("{\"a\x1f\":1}", "control character"),
    B("{\"r\":1e400}", "number out of range at byte 5"),
    B("{\"a\":[1,2,1e309]}", "number out of range at byte 10"),
    B("{\"a\":-1.8e308}", "number out of range"),
    B("{\"a\":1.7976931348623159e308}", "number out of range"),
    B("{\"a\":0.1e310}", "number out of range"),
    B("{\"a\":1000e306}", "number out of range"),
    B("{\"a\":0.000001e315}", "number out of range"),
    B("{\"a\":1e99999999999999999999999999}", "number out of range"),
    B("{\"a\":{\"b\":[{\"c\":2E+999}]}}", "number out of range"),
    B("{\"a\":1,\"a\":2}", "duplicate key 'a'"),
    B("{\"text\":\"x\",\"b\":1,\"text\":\"y\"}", "duplicate key 'text'"),
    B("{\"a\":1,\"\\u0061\":2}", "duplicate key '\\u0061'"),
    B("{\"\\u00e9\":1,\"\xc3\xa9\":2}", "duplicate key"),
    B("{\"\\ud83d\\ude00\":1,\"\xf0\x9f\x98\x80\":2}", "duplicate key"),
    B("{\"\\n\":1,\"\\u000a\":2}", "duplicate key"),
    B("{\"\\/\":1,\"/\":2}", "duplicate key"),
    B("{\"a\":\x00}", "expected a value"),
};

static void test_valid(void)
{
    char err[256];
    size_t n;
    for (size_t i = 0; i < sizeof(valid_docs) / sizeof(valid_docs[0]); i++) {
        const doc_t *d = &valid_docs[i];
        int rc = scan(d->s, d->len, 256, &n, err, sizeof(err), NULL);
        if (rc != 0)
            fprintf(stderr, "valid doc %zu rejected: %s\n", i, err);
        CHECK(rc == 0);
        differential(d->s, d->len);
    }
}

static void test_invalid(void)
{
    char err[256];
    size_t n;
    for (size_t i = 0; i < sizeof(invalid_docs) / sizeof(invalid_docs[0]); i++) {
        const bad_doc_t *d = &invalid_docs[i];
        int rc = scan(d->s, d->len, 256, &n, err, sizeof(err), NULL);
        if (rc != PDR_EINVAL || strstr(err, d->msg) == NULL)
            fprintf(stderr, "invalid doc %zu: rc=%d err='%s', wanted '%s'\n", i, rc, err, d->msg);
        CHECK(rc == PDR_EINVAL);
        CHECK(n == 0);
        CHECK(strstr(err, d->msg) != NULL);
        differential(d->s, d->len);
    }
    /* A NULL buffer of length 0 is an empty body. */
    CHECK(pdr_json_scan_object(NULL, 0, mem, 4, &n, err, sizeof(err)) == PDR_EINVAL && strstr(err, "empty"));
    /* Messages are cut and NUL-terminated in small buffers; errlen 0 writes nothing. */
    memset(err, 'x', sizeof(err));
    CHECK(pdr_json_scan_object("{\"a\":01}", 8, mem, 4, &n, err, 8) == PDR_EINVAL && strlen(err) == 7);
    CHECK(pdr_json_scan_object("{\"a\":01}", 8, mem, 4, &n, NULL, 0) == PDR_EINVAL);
}

/* Integers: 309 digits are the first that can exceed a double (DBL_MAX is about 1.8e308). */
static void test_big_numbers(void)
{
    char doc[400], err[256];
    size_t n, len = (size_t)snprintf(doc, sizeof(doc), "{\"a\":1");
    memset(doc + len, '0', 308); /* 1e308: fits */
    len += 308;
    doc[len++] = '}';
    CHECK(scan(doc, len, 4, &n, err, sizeof(err), NULL) == 0 && mem[0].v.type == PDR_JT_INT);
    doc[5] = '2'; /* 2e308: does not */
    CHECK(scan(doc, len, 4, &n, err, sizeof(err), NULL) == PDR_EINVAL && strstr(err, "number out of range"));
    differential(doc, len);
    memmove(doc + 6, doc + 7, len - 7); /* 2e307, 308 digits */
    CHECK(scan(doc, len - 1, 4, &n, err, sizeof(err), NULL) == 0);
}

/* The walkers: elements and members of nested values, whitespace and escapes included. */
static void test_walk(void)
{
    static const char doc[] = "{\"m\": [ {\"role\" : \"user\", \"c\\u006fntent\":[{\"t\":1}] } ,\n 2.5,[], "
                              "\"s\" ], \"e\":[], \"o\":{}, \"s\":\"x\"}";
    char err[256], *keep;
    size_t n, pos = 0;
    CHECK(scan(doc, sizeof(doc) - 1, 8, &n, err, sizeof(err), &keep) == 0 && n == 4);
    pdr_jval_t v;
    CHECK(pdr_jarray_next(&mem[0].v, &pos, &v) == 1 && v.type == PDR_JT_OBJECT && v.count == 2);
    pdr_jval_t obj = v;
    CHECK(pdr_jarray_next(&mem[0].v, &pos, &v) == 1 && v.type == PDR_JT_NUMBER && v.len == 3);
    CHECK(pdr_jarray_next(&mem[0].v, &pos, &v) == 1 && v.type == PDR_JT_ARRAY && v.count == 0);
    CHECK(pdr_jarray_next(&mem[0].v, &pos, &v) == 1 && v.type == PDR_JT_STRING && v.len == 3);
    CHECK(pdr_jarray_next(&mem[0].v, &pos, &v) == 0);
    CHECK(pdr_jarray_next(&mem[0].v, &pos, &v) == 0); /* stays at the end */
    pdr_jmember_t f;
    pos = 0;
    CHECK(pdr_jobject_next(&obj, &pos, &f) == 1 && pdr_jmember_key_is(&f, "role") &&
          f.v.type == PDR_JT_STRING && f.v.len == 6 && memcmp(f.raw, "\"role\" : \"user\"", f.raw_len) == 0);
    CHECK(pdr_jobject_next(&obj, &pos, &f) == 1 && f.key_escaped && pdr_jmember_key_is(&f, "content") &&
          f.v.type == PDR_JT_ARRAY && f.v.elem == PDR_JT_OBJECT);
    CHECK(pdr_jobject_next(&obj, &pos, &f) == 0);
    /* Empty containers, and values of the other kind or no container at all. */
    pos = 0;
    CHECK(pdr_jarray_next(&mem[1].v, &pos, &v) == 0);
    pos = 0;
    CHECK(pdr_jobject_next(&mem[2].v, &pos, &f) == 0);
    pos = 0;
    CHECK(pdr_jobject_next(&mem[0].v, &pos, &f) == 0 && pdr_jarray_next(&mem[2].v, &pos, &v) == 0);
    CHECK(pdr_jarray_next(&mem[3].v, &pos, &v) == 0 && pdr_jobject_next(&mem[3].v, &pos, &f) == 0);
    free(keep);
    differential(doc, sizeof(doc) - 1);
}

/* Depth: the top-level object is depth 1; 128 levels pass, 129 fail (arrays and objects alike). */
static void test_depth(void)
{
    char err[256], buf[1024];
    size_t n, len;
    for (int levels = 127; levels <= 129; levels++) {
        for (int objects = 0; objects <= 1; objects++) {
            len = 0;
            for (int i = 0; i < levels; i++)
                len +=
                    (size_t)snprintf(buf + len, sizeof(buf) - len, "%s", objects || i == 0 ? "{\"k\":" : "[");
            len += (size_t)snprintf(buf + len, sizeof(buf) - len, "1");
            for (int i = levels - 1; i >= 0; i--)
                buf[len++] = objects || i == 0 ? '}' : ']';
            int rc = scan(buf, len, 4, &n, err, sizeof(err), NULL);
            CHECK((rc == 0) == (levels <= 128));
            if (levels > 128)
                CHECK(strstr(err, "nesting deeper than 128") != NULL);
            differential(buf, len);
        }
    }
    /* Deep but invalid, and very deep: errors, not stack overflows. */
    char *deep = malloc(100000);
    if (deep == NULL)
        abort();
    deep[0] = '{';
    deep[1] = '"';
    deep[2] = '"';
    deep[3] = ':';
    memset(deep + 4, '[', 100000 - 4);
    CHECK(scan(deep, 100000, 4, &n, err, sizeof(err), NULL) == PDR_EINVAL);
    free(deep);
}

static void test_shapes(void)
{
    static const char doc[] =
        " {\"text\": [\"a\", \"b\\n\", \"c\"], \"input_ids\" : [[1,2],[3]], \"mix\":[1, 2.5], "
        "\"m2\":[1,\"a\"],"
        "\"empty\":[], \"sp\":{\"a\":1,\"b\":[2]}, \"s\":\"str\", \"i\":-12, \"r\":1e3, \"t\":true,"
        "\"f\":false, \"z\":null, \"aa_mixed\":[[1],[\"x\"]], \"aa_num\":[[1],[],[2.5]],\"aa_empty\":[[],[]],"
        "\"aa_partly\":[[1],2], \"aaa\":[[[1]],[[2,3]]], \"bools\":[true,false], \"objs\":[{},{\"a\":1}],"
        "\"aa_mixed_inner\":[[1,\"a\"],[2]]\n}\n";
    char err[256], *keep;
    size_t n;
    int rc = scan(doc, sizeof(doc) - 1, 256, &n, err, sizeof(err), &keep);
    CHECK(rc == 0);
    CHECK(n == 20);
    if (rc != 0 || n != 20) {
        fprintf(stderr, "shapes: %s\n", err);
        free(keep);
        return;
    }
    const pdr_jmember_t *m;
    m = pdr_jfind(mem, n, "text");
    CHECK(m == &mem[0] && m->v.type == PDR_JT_ARRAY && m->v.elem == PDR_JT_STRING && m->v.count == 3 &&
          m->v.elem_elem == PDR_JT_NONE);
    m = pdr_jfind(mem, n, "input_ids");
    CHECK(m != NULL && m->v.type == PDR_JT_ARRAY && m->v.elem == PDR_JT_ARRAY &&
          m->v.elem_elem == PDR_JT_INT && m->v.count == 2);
    m = pdr_jfind(mem, n, "mix");
    CHECK(m != NULL && m->v.elem == PDR_JT_NUMBER && m->v.count == 2);
    m = pdr_jfind(mem, n, "m2");
    CHECK(m != NULL && m->v.elem == PDR_JT_MIXED);
    m = pdr_jfind(mem, n, "empty");
    CHECK(m != NULL && m->v.type == PDR_JT_ARRAY && m->v.elem == PDR_JT_NONE && m->v.count == 0);
    m = pdr_jfind(mem, n, "sp");
    CHECK(m != NULL && m->v.type == PDR_JT_OBJECT && m->v.count == 2);
    m = pdr_jfind(mem, n, "s");
    CHECK(m != NULL && m->v.type == PDR_JT_STRING && m->v.count == 0 && m->v.len == 5);
    m = pdr_jfind(mem, n, "i");
    CHECK(m != NULL && m->v.type == PDR_JT_INT);
    m = pdr_jfind(mem, n, "r");
    CHECK(m != NULL && m->v.type == PDR_JT_NUMBER);
    CHECK(pdr_jfind(mem, n, "t")->v.type == PDR_JT_TRUE);
    CHECK(pdr_jfind(mem, n, "f")->v.type == PDR_JT_FALSE);
    CHECK(pdr_jfind(mem, n, "z")->v.type == PDR_JT_NULL);
    m = pdr_jfind(mem, n, "aa_mixed");
    CHECK(m != NULL && m->v.elem == PDR_JT_ARRAY && m->v.elem_elem == PDR_JT_MIXED);
    m = pdr_jfind(mem, n, "aa_num");
    CHECK(m != NULL && m->v.elem == PDR_JT_ARRAY && m->v.elem_elem == PDR_JT_NUMBER && m->v.count == 3 &&
          m->v.empty_inner);
    m = pdr_jfind(mem, n, "aa_empty");
    CHECK(m != NULL && m->v.elem == PDR_JT_ARRAY && m->v.elem_elem == PDR_JT_NONE && m->v.empty_inner);
    CHECK(!pdr_jfind(mem, n, "input_ids")->v.empty_inner && !pdr_jfind(mem, n, "empty")->v.empty_inner &&
          !pdr_jfind(mem, n, "aaa")->v.empty_inner);
    m = pdr_jfind(mem, n, "aa_partly");
    CHECK(m != NULL && m->v.elem == PDR_JT_MIXED && m->v.elem_elem == PDR_JT_NONE);
    m = pdr_jfind(mem, n, "aaa");
    CHECK(m != NULL && m->v.elem == PDR_JT_ARRAY && m->v.elem_elem == PDR_JT_ARRAY);
    m = pdr_jfind(mem, n, "bools");
    CHECK(m != NULL && m->v.elem == PDR_JT_MIXED); /* TRUE and FALSE are distinct types */
    m = pdr_jfind(mem, n, "objs");
    CHECK(m != NULL && m->v.elem == PDR_JT_OBJECT && m->v.count == 2);
    m = pdr_jfind(mem, n, "aa_mixed_inner");
    CHECK(m != NULL && m->v.elem_elem == PDR_JT_MIXED);
    CHECK(pdr_jfind(mem, n, "nope") == NULL);
    CHECK(pdr_jfind(mem, n, "tex") == NULL);
    CHECK(pdr_jfind(mem, n, "textx") == NULL);

    /* Raw spans reproduce the member bytes exactly; rebuilding from them gives a valid document. */
    CHECK(mem[0].raw_len == strlen("\"text\": [\"a\", \"b\\n\", \"c\"]") &&
          memcmp(mem[0].raw, "\"text\": [\"a\", \"b\\n\", \"c\"]", mem[0].raw_len) == 0);
    CHECK(mem[0].key_len == 4 && memcmp(mem[0].key, "text", 4) == 0 && !mem[0].key_escaped);
    CHECK(memcmp(mem[1].raw, "\"input_ids\" : [[1,2],[3]]", mem[1].raw_len) == 0);
    CHECK(mem[1].v.len == 11 && memcmp(mem[1].v.p, "[[1,2],[3]]", 11) == 0);
    char rebuilt[1024];
    size_t rl = 0;
    rebuilt[rl++] = '{';
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            rebuilt[rl++] = ',';
        CHECK(rl + mem[i].raw_len + 64 < sizeof(rebuilt));
        memcpy(rebuilt + rl, mem[i].raw, mem[i].raw_len);
        rl += mem[i].raw_len;
    }
    rl += (size_t)snprintf(rebuilt + rl, sizeof(rebuilt) - rl, ",\"bootstrap_room\":12}");
    free(keep);
    rc = scan(rebuilt, rl, 256, &n, err, sizeof(err), NULL);
    CHECK(rc == 0 && n == 21);
    differential(rebuilt, rl);
    differential(doc, sizeof(doc) - 1);
}

static void test_keys(void)
{
    static const char doc[] =
        "{\"a\\u0062c\":1,\"\\u00e9t\\u00e9\":2,\"q\\\"\\\\\\/\\n\":3,\"\\ud83d\\ude00\":4,"
        "\"n\\u0000ul\":5,\"plain\":6}";
    char err[256], *keep;
    size_t n;
    CHECK(scan(doc, sizeof(doc) - 1, 16, &n, err, sizeof(err), &keep) == 0 && n == 6);
    CHECK(mem[0].key_escaped && pdr_jmember_key_is(&mem[0], "abc") && !pdr_jmember_key_is(&mem[0], "ab") &&
          !pdr_jmember_key_is(&mem[0], "abcd"));
    CHECK(pdr_jmember_key_is(&mem[1], "\xc3\xa9t\xc3\xa9"));
    CHECK(pdr_jmember_key_is(&mem[2], "q\"\\/\n"));
    CHECK(pdr_jmember_key_is(&mem[3], "\xf0\x9f\x98\x80"));
    CHECK(!pdr_jmember_key_is(&mem[4], "n") && !pdr_jmember_key_is(&mem[4], "nul"));
    CHECK(!mem[5].key_escaped && pdr_jmember_key_is(&mem[5], "plain"));
    CHECK(pdr_jfind(mem, n, "abc") == &mem[0] && pdr_jfind(mem, n, "plain") == &mem[5]);
    free(keep);
}

static void test_int(void)
{
    static const struct {
        const char *s;
        int ok;
        int64_t v;
    } cases[] = {
        {"0", 1, 0},
        {"-0", 1, 0},
        {"7", 1, 7},
        {"-12", 1, -12},
        {"9223372036854775807", 1, INT64_MAX},
        {"-9223372036854775808", 1, INT64_MIN},
        {"9223372036854775808", 0, 0},
        {"-9223372036854775809", 0, 0},
        {"18446744073709551616", 0, 0},
        {"99999999999999999999999", 0, 0},
    };
    char err[256], doc[128];
    size_t n;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int len = snprintf(doc, sizeof(doc), "{\"n\":%s}", cases[i].s);
        int64_t v = 42;
        char *keep;
        CHECK(scan(doc, (size_t)len, 4, &n, err, sizeof(err), &keep) == 0 && n == 1);
        CHECK(mem[0].v.type == PDR_JT_INT);
        int rc = pdr_jval_int(&mem[0].v, &v);
        CHECK(cases[i].ok ? (rc == 0 && v == cases[i].v) : rc == PDR_EINVAL);
        free(keep);
    }
    pdr_jval_t real = {.type = PDR_JT_NUMBER, .p = "1.5", .len = 3};
    int64_t v;
    CHECK(pdr_jval_int(&real, &v) == PDR_EINVAL);
}

/* More than 32 members moves the duplicate check to a heap table; max bounds the member count. */
static void test_many_members(void)
{
    char doc[8192], err[256];
    size_t len, n;
    for (int members = 1; members <= 200; members += 13) {
        len = 0;
        doc[len++] = '{';
        for (int i = 0; i < members; i++)
            len += (size_t)snprintf(doc + len, sizeof(doc) - len, "%s\"k%d\":%d", i ? "," : "", i, i);
        doc[len++] = '}';
        char *keep;
        CHECK(scan(doc, len, 256, &n, err, sizeof(err), &keep) == 0 && n == (size_t)members);
        CHECK(pdr_jfind(mem, n, "k0") == &mem[0] &&
              pdr_jfind(mem, n, "k12") == (members > 12 ? &mem[12] : NULL));
        free(keep);
        if (members > 1)
            CHECK(scan(doc, len, (size_t)members - 1, &n, err, sizeof(err), NULL) == PDR_EINVAL &&
                  strstr(err, "too many top-level fields") != NULL);
        CHECK(scan(doc, len, (size_t)members, &n, err, sizeof(err), NULL) == 0);
        differential(doc, len);
        /* The same document with an escaped duplicate of k0 appended. */
        len--;
        len += (size_t)snprintf(doc + len, sizeof(doc) - len, ",\"\\u006b0\":1}");
        CHECK(scan(doc, len, 256, &n, err, sizeof(err), NULL) == PDR_EINVAL &&
              strstr(err, "duplicate key '\\u006b0'") != NULL);
        differential(doc, len);
    }
    CHECK(scan("{\"a\":1}", 7, 0, &n, err, sizeof(err), NULL) == PDR_EINVAL && strstr(err, "too many"));
    CHECK(pdr_json_scan_object("{}", 2, NULL, 0, &n, err, sizeof(err)) == 0 && n == 0);
    /* A long duplicate key is shown cut to 64 bytes. */
    char key[200];
    memset(key, 'x', sizeof(key) - 1);
    key[sizeof(key) - 1] = '\0';
    len = (size_t)snprintf(doc, sizeof(doc), "{\"%s\":1,\"%s\":2}", key, key);
    CHECK(scan(doc, len, 4, &n, err, sizeof(err), NULL) == PDR_EINVAL && strstr(err, "xxx...'") != NULL);
}

/*
 * The documented jansson differences (see fuzz_jsonscan.c): the scanner follows RFC 8259 where jansson
 * refuses, and the oracle excludes these inputs instead of mis-judging them.
 */
static void test_jansson_differences(void)
{
    static const doc_t ours_only[] = {
        D("{\"n\":123456789012345678901234567890}"),
        D("{\"n\":-9223372036854775809}"),
        D("{\"a\\u0000b\":1}"),
    };
    char err[256];
    size_t n;
    json_error_t e;
    for (size_t i = 0; i < sizeof(ours_only) / sizeof(ours_only[0]); i++) {
        CHECK(scan(ours_only[i].s, ours_only[i].len, 4, &n, err, sizeof(err), NULL) == 0);
        json_t *j = json_loadb(ours_only[i].s, ours_only[i].len, JSON_ALLOW_NUL, &e);
        CHECK(j == NULL);
        json_decref(j);
        CHECK(jdiff_expect((const uint8_t *)ours_only[i].s, ours_only[i].len, NULL) >= SKIP_NESTED_DUP);
    }
    /* Depth 200: jansson accepts (its limit is 2048), the scanner and the oracle reject. */
    char buf[512];
    size_t len = (size_t)snprintf(buf, sizeof(buf), "{\"a\":");
    memset(buf + len, '[', 199);
    memset(buf + len + 199, ']', 199);
    len += 398;
    buf[len++] = '}';
    json_t *j = json_loadb(buf, len, 0, &e);
    CHECK(j != NULL);
    json_decref(j);
    CHECK(scan(buf, len, 4, &n, err, sizeof(err), NULL) == PDR_EINVAL);
    CHECK(jdiff_expect((const uint8_t *)buf, len, NULL) == EXPECT_REJECT);
    /* Nested duplicates: jansson with JSON_REJECT_DUPLICATES refuses, the scanner accepts; excluded. */
    CHECK(jdiff_expect((const uint8_t *)"{\"o\":{\"a\":1,\"a\":2}}", 19, NULL) == SKIP_NESTED_DUP);
    CHECK(jdiff_expect((const uint8_t *)"{\"a\":1,\"a\":2}", 13, NULL) == EXPECT_REJECT);
    /* A raw NUL after a number or literal: jansson drops it and accepts; it is not JSON. */
    static const doc_t raw_nul[] = {D("{\"a\":31\0}"), D("{\"a\":[1\0,2]}"), D("{\"a\":true\0}")};
    for (size_t i = 0; i < sizeof(raw_nul) / sizeof(raw_nul[0]); i++) {
        json_t *jn = json_loadb(raw_nul[i].s, raw_nul[i].len, 0, &e);
        CHECK(jn != NULL); /* the jansson 2.14 behaviour being documented */
        json_decref(jn);
        CHECK(scan(raw_nul[i].s, raw_nul[i].len, 4, &n, err, sizeof(err), NULL) == PDR_EINVAL);
        differential(raw_nul[i].s, raw_nul[i].len);
    }
}

/* ---- Seeded mutations of request bodies. ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static size_t rnd(size_t n)
{
    return n ? (size_t)(rng() % n) : 0;
}

static const char *const seeds[] = {
    "{\"text\": \"The capital of France is\", \"sampling_params\": {\"temperature\": 0.7, "
    "\"max_new_tokens\": "
    "128, \"stop\": [\"\\n\", \"</s>\"]}, \"stream\": true, \"rid\": \"abc-123\"}",
    "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"You are "
    "\\\"helpful\\\".\\n\"},{\"role\":"
    "\"user\",\"content\":\"h\xc3\xa9llo \xf0\x9f\x98\x80 \\u4e2d\\ud83d\\ude00\"}],\"max_tokens\":64,"
    "\"temperature\":0,\"top_p\":1.0,\"stream\":false,\"logprobs\":null}",
    "{\"input_ids\":[[1,2,3],[4,5],[]],\"sampling_params\":[{\"max_new_tokens\":8},{\"max_new_tokens\":16}],"
    "\"return_logprob\":[true,false]}",
    "{\"model\":\"x\",\"prompt\":[\"a\",\"b\"],\"n\":2,\"stop\":null,\"seed\":-42,\"logit_bias\":{\"50256\":-"
    "100},"
    "\"echo\":false,\"suffix\":\"\",\"user\":\"u\\u0000\"}",
    "{\"a\":[[[[{\"b\":[1,2e3,-0.5,{\"c\":\"d\"}]}]]]],\"\\u0061b\":\"x\", \"e\" : { } ,\"f\":[ ]}",
};

static const char *const snippets[] = {
    "\\u",
    "\\ud800",
    "\\udc00",
    "\\ud83d\\ude00",
    "\xed\xa0\x80",
    "\xf0\x9f\x98\x80",
    "1e999",
    "-0",
    "01",
    "1.",
    ",",
    "[",
    "]]",
    "{}",
    "\"a\":1,",
    "\"b\":[],",
    "\"\\u0061\":2,",
    "99999999999999999999",
    "\\u0000",
    "\xc3\xa9",
    "\"text\":0,",
    "true",
    "nul",
    "\t\r\n ",
    "\"",
    "\\",
    "\xc0\x80",
    "0.5e-3",
};

static const char structural[] = "{}[]\":,\\ 0123456789-+.eEtfnul\t\n";
static const uint8_t odd_bytes[] = {0x00, 0x01, 0x1f, 0x7f, 0x80, 0xbf, 0xc0, 0xc2,
                                    0xe0, 0xed, 0xef, 0xf0, 0xf4, 0xf5, 0xff};

/* Applies one random mutation to buf[0..*len) (capacity cap). */
static void mutate(uint8_t *buf, size_t *len, size_t cap)
{
    size_t n = *len, at = rnd(n + 1);
    switch (rnd(8)) {
    case 0: /* flip a bit */
        if (n)
            buf[at % n] ^= (uint8_t)(1u << rnd(8));
        break;
    case 1: /* replace a byte with a structural character or an odd byte */
        if (n)
            buf[at % n] =
                rnd(2) ? (uint8_t)structural[rnd(sizeof(structural) - 1)] : odd_bytes[rnd(sizeof(odd_bytes))];
        break;
    case 2: /* truncate */
        *len = at;
        break;
    case 3: /* insert a structural character */
        if (n + 1 <= cap) {
            memmove(buf + at + 1, buf + at, n - at);
            buf[at] = (uint8_t)structural[rnd(sizeof(structural) - 1)];
            *len = n + 1;
        }
        break;
    case 4: { /* delete a short range */
        size_t k = 1 + rnd(4);
        if (at + k <= n) {
            memmove(buf + at, buf + at + k, n - at - k);
            *len = n - k;
        }
        break;
    }
    case 5: { /* insert a snippet */
        const char *s = snippets[rnd(sizeof(snippets) / sizeof(snippets[0]))];
        size_t k = strlen(s);
        if (n + k <= cap) {
            memmove(buf + at + k, buf + at, n - at);
            memcpy(buf + at, s, k);
            *len = n + k;
        }
        break;
    }
    case 6: { /* copy a slice elsewhere */
        size_t from = rnd(n), k = 1 + rnd(16);
        if (from + k <= n && n + k <= cap) {
            uint8_t tmp[16];
            memcpy(tmp, buf + from, k);
            memmove(buf + at + k, buf + at, n - at);
            memcpy(buf + at, tmp, k);
            *len = n + k;
        }
        break;
    }
    default: /* random byte */
        if (n)
            buf[at % n] = (uint8_t)rng();
        break;
    }
}

static void test_mutations(void)
{
    enum { MUTANTS = 20000, CAP = 1024 };
    uint8_t work[CAP];
    jdiff_stats_t before = stats;
    for (int i = 0; i < MUTANTS; i++) {
        const char *seed = seeds[rnd(sizeof(seeds) / sizeof(seeds[0]))];
        size_t len = strlen(seed);
        memcpy(work, seed, len);
        int ops = 1 + (int)rnd(3);
        for (int k = 0; k < ops; k++)
            mutate(work, &len, CAP);
        differential((const char *)work, len);
    }
    printf("mutations: %d inputs: %lu accepted, %lu rejected (both agree), excluded: %lu nested duplicate, "
           "%lu NUL in key, %lu number out of jansson's range; jansson accepted %lu with a raw NUL byte; "
           "%lu mismatches\n",
           MUTANTS, stats.accept - before.accept, stats.reject - before.reject,
           stats.skip_nested_dup - before.skip_nested_dup, stats.skip_nul_key - before.skip_nul_key,
           stats.skip_range - before.skip_range, stats.jansson_raw_nul - before.jansson_raw_nul,
           stats.mismatch - before.mismatch);
    /* The mutation set must exercise both verdicts, or it proves little. */
    CHECK(stats.accept - before.accept > 1000);
    CHECK(stats.reject - before.reject > 1000);
}

/* After each case, in its child: the differential checks it made (its own inputs) and no mismatch. */
static void after_case(void)
{
    printf("inputs: %lu accepted, %lu rejected, %lu excluded, %lu mismatches\n", stats.accept, stats.reject,
           stats.skip_nested_dup + stats.skip_nul_key + stats.skip_range, stats.mismatch);
    CHECK(stats.mismatch == 0);
}

static const pdr_test_case_t runner_cases[] = {
    {"valid", test_valid, 60},
    {"invalid", test_invalid, 60},
    {"depth", test_depth, 60},
    {"shapes", test_shapes, 60},
    {"big_numbers", test_big_numbers, 60},
    {"walk", test_walk, 60},
    {"keys", test_keys, 60},
    {"int", test_int, 60},
    {"many_members", test_many_members, 60},
    {"jansson_differences", test_jansson_differences, 60},
    {"mutations", test_mutations, 60},
};

int main(int argc, char **argv)
{
    return pdr_test_run(runner_cases, sizeof(runner_cases) / sizeof(runner_cases[0]), NULL, after_case, argc,
                        argv);
}
