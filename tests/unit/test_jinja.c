/*
 * The Jinja engine (tokenizer/jinja.h) on its own: every limit is a clean PDR_ETOOBIG with line:col, syntax
 * and render errors name their place, undefined values behave as jinja2's default Undefined, a table of
 * filters and tests gives the outputs jinja2 gives (tests/tok/jinja_diff.py checks the same against
 * jinja2 itself), and renders of one compiled template from several threads agree.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runner.h"
#include "err.h"
#include "jinja.h"

#define NOW 1700000000 /* 2023-11-14 22:13:20 UTC */

/* Renders text with the JSON context (NULL: none) under limits (NULL: the defaults); returns the PDR_E*
 * code, the output in out (when 0) and the message in err (when not). */
static int render_lim(const char *text, const char *ctx_json, const pdr_jinja_limits_t *lim, char **out,
                      char *err, size_t errlen)
{
    pdr_jinja_tmpl_t *t;
    *out = NULL;
    int r = pdr_jinja_compile(text, strlen(text), lim, &t, err, errlen);
    if (r != 0)
        return r;
    json_t *ctx = NULL;
    if (ctx_json != NULL) {
        json_error_t je;
        ctx = json_loads(ctx_json, 0, &je);
        CHECK(ctx != NULL);
    }
    size_t len;
    r = pdr_jinja_render(t, ctx, NOW, out, &len, err, errlen);
    if (r == 0)
        CHECK(strlen(*out) == len);
    json_decref(ctx);
    pdr_jinja_free(t);
    return r;
}

/* Expects text to render to want. */
static void expect(const char *text, const char *ctx_json, const char *want)
{
    char *out, err[256];
    int r = render_lim(text, ctx_json, NULL, &out, err, sizeof(err));
    if (r != 0 || strcmp(out, want) != 0) {
        fprintf(stderr, "template %s\n  want [%s]\n  got  [%s] (%s)\n", text, want, r == 0 ? out : "",
                r == 0 ? "" : err);
        CHECK(0);
    }
    free(out);
}

/* Expects text to fail with code and an error that starts with prefix ("line:col: ..."). */
static void expect_err(const char *text, const char *ctx_json, const pdr_jinja_limits_t *lim, int code,
                       const char *prefix)
{
    char *out, err[256];
    int r = render_lim(text, ctx_json, lim, &out, err, sizeof(err));
    if (r != code || strncmp(err, prefix, strlen(prefix)) != 0) {
        fprintf(stderr, "template %s\n  want %s [%s...]\n  got  %s [%s]\n", text, pdr_errname(code), prefix,
                pdr_errname(r), r ? err : out);
        CHECK(0);
    }
    CHECK(out == NULL);
    free(out);
}

static void test_limits(void)
{
    pdr_jinja_limits_t lim;
    pdr_jinja_limits_default(&lim);
    CHECK(lim.max_depth == 64 && lim.max_loop_iterations == 1000000);

    lim.max_template_bytes = 16;
    expect_err("0123456789abcdefXYZ", NULL, &lim, PDR_ETOOBIG, "1:1: the template's 19 bytes");
    pdr_jinja_limits_default(&lim);

    lim.max_output_bytes = 100;
    expect_err("{% for i in range(20) %}0123456789{% endfor %}", NULL, &lim, PDR_ETOOBIG,
               "1:25: output passes");
    expect_err("{{ 'x' * 1000 }}", NULL, &lim, PDR_ETOOBIG, "1:4: a repeated string passes");
    pdr_jinja_limits_default(&lim);

    lim.max_loop_iterations = 1000;
    expect_err("{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}", NULL, &lim,
               PDR_ETOOBIG, "1:29: loop iterations pass the limit of 1000");
    expect_err("{{ range(100001)|list }}", NULL, NULL, PDR_ETOOBIG, "1:4: range too big");
    pdr_jinja_limits_default(&lim);

    /* Nesting in the text is refused at compile time, recursion at render time. */
    char deep[1024];
    size_t k = 0;
    k += (size_t)snprintf(deep + k, sizeof(deep) - k, "{{ ");
    for (int i = 0; i < 100; i++)
        deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 100; i++)
        deep[k++] = ')';
    snprintf(deep + k, sizeof(deep) - k, " }}");
    expect_err(deep, NULL, NULL, PDR_ETOOBIG, "1:");
    expect_err("{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}", NULL, NULL, PDR_ETOOBIG, "1:");
    expect_err("{% set ns = namespace(x=1) %}{% set ns.x = ns %}{{ ns }}", NULL, NULL, PDR_ETOOBIG, "1:");

    /* A long chain of operators is no deep nesting in the text but is in the tree: refused at render. */
    char *chain = malloc(40000);
    k = (size_t)snprintf(chain, 40000, "{{ 1");
    for (int i = 0; i < 5000; i++)
        k += (size_t)snprintf(chain + k, 40000 - k, "+1");
    snprintf(chain + k, 40000 - k, " }}");
    expect_err(chain, NULL, NULL, PDR_ETOOBIG, "1:");
    free(chain);

    lim.max_memory_bytes = 1 << 20;
    expect_err(
        "{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s "
        "%}{% endfor %}",
        NULL, &lim, PDR_ETOOBIG, "1:");
}

static void test_errors(void)
{
    expect_err("line one\n{% if x %}\n  {{ x + }}\n{% endif %}", NULL, NULL, PDR_EINVAL, "3:10: unexpected");
    expect_err("{% if x %}never closed", NULL, NULL, PDR_EINVAL,
               "1:23: unexpected end of template, expected 'elif'");
    expect_err("ab\n{% endfor %}", NULL, NULL, PDR_EINVAL, "2:4: unexpected 'endfor'");
    expect_err("{{ x|nosuch }}", NULL, NULL, PDR_EINVAL, "1:6: no filter named 'nosuch'");
    expect_err("{{ x is nosuch }}", NULL, NULL, PDR_EINVAL, "1:9: no test named 'nosuch'");
    expect_err("{% include 'x' %}", NULL, NULL, PDR_EINVAL, "1:4: unknown or unsupported tag 'include'");
    expect_err("{{ 'abc }}", NULL, NULL, PDR_EINVAL, "1:4: unterminated string");
    expect_err("{# open", NULL, NULL, PDR_EINVAL, "1:1: unterminated comment");
    expect_err("\xff", NULL, NULL, PDR_EINVAL, "1:1: the template is not valid UTF-8");
    expect_err("a\n  {{ raise_exception('bad ' ~ n) }}", "{\"n\": 3}", NULL, PDR_EINVAL,
               "2:6: raise_exception: bad 3");
    expect_err("{{ 1 / 0 }}", NULL, NULL, PDR_EINVAL, "1:4: division by zero");
    expect_err("{{ 'a' + 1 }}", NULL, NULL, PDR_EINVAL,
               "1:4: unsupported operand type(s) for +: 'str' and 'int'");
    expect_err("{{ x }}", "[1]", NULL, PDR_EINVAL, "1:1: the context is not a JSON object");
    expect_err("{% for a, b in [[1]] %}{% endfor %}", NULL, NULL, PDR_EINVAL, "1:");
    /* A message longer than the buffer is cut, never overrun. */
    char *out, small[8];
    CHECK(render_lim("{{ raise_exception('a long message') }}", NULL, NULL, &out, small, sizeof(small)) ==
          PDR_EINVAL);
    CHECK(strlen(small) == 7);
}

static void test_undefined(void)
{
    expect("[{{ missing }}][{{ d.nope }}][{{ d['nope'] }}][{{ missing ~ 'x' }}][{{ missing|length }}]",
           "{\"d\": {}}", "[][][][x][0]");
    expect("{{ missing is defined }} {{ missing is undefined }} {{ missing == missing }} {{ not missing }}",
           NULL, "False True True True");
    expect("{% for x in missing %}x{% else %}empty{% endfor %}{{ missing|default('d') }}", NULL, "emptyd");
    expect("{{ 'yes' if missing else 'no' }}{{ missing or 'or' }}{{ 'a' if false }}", NULL, "noor");
    expect_err("{{ missing.attr }}", NULL, NULL, PDR_EINVAL, "1:12: 'missing' is undefined");
    expect_err("{{ d.a.b }}", "{\"d\": {}}", NULL, PDR_EINVAL, "1:8: 'a' is undefined");
    expect_err("{{ missing + 1 }}", NULL, NULL, PDR_EINVAL, "1:4: 'missing' is undefined");
    expect_err("{{ missing() }}", NULL, NULL, PDR_EINVAL, "1:4: 'missing' is undefined");
    expect_err("{{ missing|tojson }}", NULL, NULL, PDR_EINVAL, "1:12: tojson: object of type Undefined");
}

static const char *const fctx =
    "{\"s\": \" Hi There \", \"l\": [3, 1, 2], \"d\": {\"b\": 1, \"a\": [true, null]},"
    " \"p\": [{\"n\": \"x\", \"k\": 2}, {\"n\": \"y\", \"k\": 1}], \"f\": 2.5}";

static void test_filters(void)
{
    static const char *const cases[][2] = {
        {"{{ s|trim }}", "Hi There"},
        {"{{ s|upper }}|{{ s|lower }}|{{ 'a-b c'|title }}|{{ 'aB'|capitalize }}",
         " HI THERE | hi there |A-B C|Ab"},
        {"{{ l|length }}{{ s|count }}{{ d|length }}", "3102"},
        {"{{ d|tojson }}", "{\"b\": 1, \"a\": [true, null]}"},
        {"{{ d|tojson(indent=2) }}", "{\n  \"b\": 1,\n  \"a\": [\n    true,\n    null\n  ]\n}"},
        {"{{ d|tojson(sort_keys=true) }}", "{\"a\": [true, null], \"b\": 1}"},
        {"{{ 'é\"\\n'|tojson }}", "\"é\\\"\\n\""},
        {"{{ x|default('dv') }}{{ ''|d('e', true) }}", "dve"},
        {"{{ l|join('-') }}|{{ p|join(',', attribute='n') }}", "3-1-2|x,y"},
        {"{{ s|replace(' ', '_') }}", "_Hi_There_"},
        {"{{ l|first }}{{ l|last }}{{ 'ab'|list }}{{ d|items|list }}",
         "32['a', 'b'][('b', 1), ('a', [True, None])]"},
        {"{{ l|string }}{{ '7'|int + 1 }}{{ '2.5'|float }}{{ -3|abs }}{{ f|round }}{{ 2.675|round(2) }}{{ "
         "f|int }}",
         "[3, 1, 2]82.532.02.672"},
        {"{{ p|map(attribute='n')|list }}{{ l|map('string')|join }}", "['x', 'y']312"},
        {"{{ l|select('odd')|list }}{{ l|reject('odd')|list }}{{ p|selectattr('k', 'gt', 1)|list|length }}",
         "[3, 1][2]1"},
        {"{{ p|rejectattr('n', 'equalto', 'x')|map(attribute='k')|first }}", "1"},
        {"{{ [1, 2, 1]|unique|list }}{{ l|sort }}{{ l|sort(reverse=true) }}{{ p|sort(attribute='k')|first }}",
         "[1, 2][1, 2, 3][3, 2, 1]{'n': 'y', 'k': 1}"},
        {"{{ l|reverse|list }}{{ 'abc'|reverse }}{{ 'a\nb'|indent(2) }}{{ 'one two'|wordcount }}",
         "[2, 1, 3]cbaa\n  b2"},
        {"{{ l|min }}{{ l|max }}{{ l|sum }}{{ '<b>'|safe }}", "136<b>"},
        {"{% filter upper %}up{% endfilter %}{% set b | trim %} x {% endset %}[{{ b }}]", "UP[x]"},
        {"{{ 'a,b'.split(',') }}{{ ' x '.strip() }}{{ 'ab'.startswith('a') }}{{ '{}-{}'.format(1, 2) }}",
         "['a', 'b']xTrue1-2"},
        {"{{ d.get('b') }}{{ d.get('z', 0) }}{{ d.keys()|list }}", "10['b', 'a']"},
        {"{{ strftime_now('%Y-%m-%d %H:%M') }}", "2023-11-14 22:13"},
        {"{{ p|first|attr('n') }}|{{ 'ab'|center(6) }}|{{ {'b': 1, 'a': 2}|dictsort }}|{{ "
         "p|map(attribute='z', default=0)|list }}",
         "|  ab  |[('a', 2), ('b', 1)]|[0, 0]"},
        {"{{ 'a'|safe + '<' }}{{ 'x'|safe ~ '<' }}{{ [1, 2]|tojson(indent=1) }}", "a&lt;x<[\n 1,\n 2\n]"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        expect(cases[i][0], fctx, cases[i][1]);
}

static void test_tests(void)
{
    expect("{{ 1 is number }}{{ true is number }}{{ true is integer }}{{ 1.0 is float }}{{ 's' is string }}",
           NULL, "TrueTrueFalseTrueTrue");
    expect("{{ {} is mapping }}{{ [] is sequence }}{{ 's' is iterable }}{{ none is none }}{{ 3 is odd }}",
           NULL, "TrueTrueTrueTrueTrue");
    expect("{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 1 is eq 1 }}{{ 1 is equalto 2 }}{{ 2 is gt 1 }}", NULL,
           "TrueTrueTrueFalseTrue");
    expect("{{ 'a' is in 'cat' }}{{ 'ab' is lower }}{{ true is true }}{{ false is false }}{{ 1 is boolean }}",
           NULL, "TrueTrueTrueTrueFalse");
    expect("{{ x is not defined }}{{ 1 is not string }}", NULL, "TrueTrue");
    expect(
        "{{ range is callable }}{{ none is sameas none }}{{ 'AB' is upper }}{{ 1 is lt 2 }}{{ 2 is ge 3 }}",
        NULL, "TrueTrueTrueTrueFalse");
    expect("{% if false %}{{ x|no_such }}{% endif %}ok", NULL, "ok");
    expect_err("{{ x|no_such if true }}", NULL, NULL, PDR_EINVAL, "1:6: no filter named 'no_such'");
}

static void test_statements(void)
{
    expect("{% for x in ['a', 'b'] %}{{ loop.index }}{{ x }}{{ '|' if not loop.last }}{% endfor %}", NULL,
           "1a|2b");
    expect("{% for k, v in {'a': 1}.items() %}{{ k }}={{ v }}{% endfor %}", NULL, "a=1");
    expect(
        "{% for i in range(9) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% endif %}"
        "{{ i }}{% endfor %}",
        NULL, "013");
    expect(
        "{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}",
        NULL, "3");
    expect("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}", NULL, "1");
    expect("{% macro m(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ m('A') }}{{ m('a', b='c') }}", NULL,
           "ABac");
    expect("  {% if true %}\n  x\n  {% endif %}\n", NULL, "  x\n");
    expect("a {{- ' b ' -}} c\n{%- if true %} d{% endif %}", NULL, "a b c d");
    expect("{% raw %}{{ x }}{% endraw %}", NULL, "{{ x }}");
    expect("{{ messages[::-1]|map(attribute='role')|join(',') }}",
           "{\"messages\": [{\"role\": \"user\"}, {\"role\": \"assistant\"}]}", "assistant,user");
    expect("{{ 'héllo'[1] }}{{ 'héllo'[1:3] }}{{ 'héllo'|length }}", NULL, "éél5");
    expect("line\r\nnext\n", NULL, "line\nnext");
}

typedef struct {
    const pdr_jinja_tmpl_t *t;
    json_t *ctx;
    const char *want;
    int bad;
} thread_arg_t;

static void *render_many(void *p)
{
    thread_arg_t *a = p;
    for (int i = 0; i < 300; i++) {
        char *out, err[128];
        size_t len;
        if (pdr_jinja_render(a->t, a->ctx, NOW, &out, &len, err, sizeof(err)) != 0 ||
            strcmp(out, a->want) != 0)
            a->bad++;
        free(out);
    }
    return NULL;
}

static void test_threads(void)
{
    const char *text =
        "{% set ns = namespace(acc='') %}{% for m in messages %}{% set ns.acc = ns.acc ~ m.role[0] "
        "%}<{{ m.role }}>{{ m.content|trim }}{% endfor %}{{ ns.acc }}";
    pdr_jinja_tmpl_t *t;
    char err[128];
    CHECK(pdr_jinja_compile(text, strlen(text), NULL, &t, err, sizeof(err)) == 0);
    json_t *ctx = json_loads("{\"messages\": [{\"role\": \"user\", \"content\": \" hi \"}, "
                             "{\"role\": \"assistant\", \"content\": \"yo\"}]}",
                             0, NULL);
    thread_arg_t args[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thread_arg_t){t, ctx, "<user>hi<assistant>youa", 0};
        CHECK(pthread_create(&th[i], NULL, render_many, &args[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(args[i].bad == 0);
    }
    json_decref(ctx);
    pdr_jinja_free(t);
}

static void set_tz(void)
{
    setenv("TZ", "UTC", 1);
}

static const pdr_test_case_t cases[] = {
    {"limits", test_limits, 60},   {"errors", test_errors, 60}, {"undefined", test_undefined, 60},
    {"filters", test_filters, 60}, {"tests", test_tests, 60},   {"statements", test_statements, 60},
    {"threads", test_threads, 60},
};

int main(int argc, char **argv)
{
    return pdr_test_run(cases, sizeof(cases) / sizeof(cases[0]), set_tz, NULL, argc, argv);
}
