/*
 * pdtok: the tokenizer encoder from the command line.
 *
 *   pdtok TOKENIZER.json TEXT...      prints the ids of each TEXT, one line each
 *   pdtok --check TOKENIZER.json      reads JSON lines {"text": ..., "ids": [...]} (the references that
 *                                     tests/fixtures/tokenizer/make_fixtures.py writes) on stdin and
 *                                     compares; prints counts and the first mismatch (text, position,
 *                                     expected, got); exits 1 when one differs
 *
 * --max-refused N (with --check): texts the encoder refuses (PDR_ENOTSUP, PDR_EINVAL) are counted; more
 * than N of them is a failure too (default 0).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "tokenizer.h"

static void print_text(const char *s, size_t len)
{
    json_t *j = json_stringn(s, len);
    char *d = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    if (d != NULL && strlen(d) > 400)
        fprintf(stderr, "  text: %.400s... (%zu bytes)\n", d, len);
    else
        fprintf(stderr, "  text: %s\n", d ? d : "?");
    free(d);
    json_decref(j);
}

static void print_ids(const char *what, const uint32_t *ids, size_t n, size_t from)
{
    fprintf(stderr, "  %s:", what);
    for (size_t i = from; i < n && i < from + 12; i++)
        fprintf(stderr, " %u", ids[i]);
    fprintf(stderr, "%s (%zu ids)\n", n > from + 12 ? " ..." : "", n);
}

static int check(const pdr_tokenizer_t *tok, const char *name, long max_refused)
{
    size_t cap = 1 << 16, lineno = 0, equal = 0, refused = 0, differ = 0, total_ids = 0;
    char *line = malloc(cap);
    if (line == NULL)
        return 2;
    ssize_t got;
    while ((got = getline(&line, &cap, stdin)) > 0) {
        lineno++;
        json_error_t je;
        json_t *o = json_loadb(line, (size_t)got, JSON_ALLOW_NUL, &je);
        json_t *text = json_object_get(o, "text"), *ids = json_object_get(o, "ids");
        if (!json_is_string(text) || !json_is_array(ids)) {
            fprintf(stderr, "%s: stdin line %zu: not {\"text\": string, \"ids\": array}\n", name, lineno);
            json_decref(o);
            free(line);
            return 2;
        }
        uint32_t *out;
        size_t n;
        int r = pdr_tokenizer_encode(tok, json_string_value(text), json_string_length(text), &out, &n);
        if (r != 0) {
            if (refused++ == 0) {
                fprintf(stderr, "%s: line %zu refused: %s\n", name, lineno, pdr_errname(r));
                print_text(json_string_value(text), json_string_length(text));
            }
            json_decref(o);
            continue;
        }
        size_t ne = json_array_size(ids), pos = 0;
        while (pos < n && pos < ne && (uint32_t)json_integer_value(json_array_get(ids, pos)) == out[pos])
            pos++;
        if (pos == n && pos == ne) {
            equal++;
            total_ids += n;
        } else if (differ++ == 0) {
            fprintf(stderr, "%s: line %zu differs at position %zu\n", name, lineno, pos);
            print_text(json_string_value(text), json_string_length(text));
            uint32_t *exp = malloc((ne + 1) * sizeof(*exp));
            for (size_t i = 0; exp && i < ne; i++)
                exp[i] = (uint32_t)json_integer_value(json_array_get(ids, i));
            if (exp)
                print_ids("expected", exp, ne, pos);
            print_ids("got     ", out, n, pos);
            free(exp);
        }
        free(out);
        json_decref(o);
    }
    free(line);
    printf("%s: %zu texts, %zu equal (%zu ids), %zu refused, %zu differ\n", name, lineno, equal, total_ids,
           refused, differ);
    return differ > 0 || (long)refused > max_refused || lineno == 0;
}

int main(int argc, char **argv)
{
    char err[512];
    if (argc >= 3 && strcmp(argv[1], "--check") == 0) {
        long max_refused = 0;
        if (argc == 5 && strcmp(argv[3], "--max-refused") == 0)
            max_refused = strtol(argv[4], NULL, 10);
        pdr_tokenizer_t *tok = pdr_tokenizer_load(argv[2], err, sizeof(err));
        if (tok == NULL) {
            fprintf(stderr, "pdtok: %s\n", err);
            return 2;
        }
        const char *base = strrchr(argv[2], '/');
        int r = check(tok, base ? base + 1 : argv[2], max_refused);
        pdr_tokenizer_free(tok);
        return r;
    }
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr,
                "usage: pdtok TOKENIZER.json TEXT... | pdtok --check TOKENIZER.json [--max-refused N]\n");
        return 2;
    }
    pdr_tokenizer_t *tok = pdr_tokenizer_load(argv[1], err, sizeof(err));
    if (tok == NULL) {
        fprintf(stderr, "pdtok: %s\n", err);
        return 2;
    }
    int rc = 0;
    for (int i = 2; i < argc; i++) {
        uint32_t *ids;
        size_t n;
        int r = pdr_tokenizer_encode(tok, argv[i], strlen(argv[i]), &ids, &n);
        if (r != 0) {
            fprintf(stderr, "pdtok: %s\n", pdr_strerror(r));
            rc = 1;
            continue;
        }
        for (size_t k = 0; k < n; k++)
            printf(k ? " %u" : "%u", ids[k]);
        printf("\n");
        free(ids);
    }
    pdr_tokenizer_free(tok);
    return rc;
}
