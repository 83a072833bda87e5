/*
 * tokenizer.json to the encoder's tables. The file is parsed strictly by tjson.c (malformed JSON reported
 * with line:column, duplicate keys refused; a vocabulary's duplicates by the vocabulary), then walked once:
 * every field that changes the ids of Tokenizer.encode() is either implemented or refused with its JSON path,
 * so that a file this encoder cannot reproduce fails at load and never encodes differently. Fields that only
 * change offsets or decoding (trim_offsets, decoder) are not looked at.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "err.h"
#include "tokenizer_load_internal.h"

/* GPT-2's pre-tokenizer pattern, as `tokenizers`' ByteLevel builds it in (use_regex true). */
static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* Unicode's White_Space, which the Rust regex crate and Oniguruma take for \s; PCRE2 10.42's \s with
 * PCRE2_UCP also matches U+180E (a space before Unicode 6.3), so patterns get this class instead. */
#define WS_CLASS                                                                                             \
    "\\t-\\r\\x20\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"

int fail(ld_t *L, const char *fmt, ...)
{
    if (L->errlen == 0)
        return PDR_ECONFIG;
    int k = snprintf(L->err, L->errlen, "%s: ", L->file);
    if (k < 0 || (size_t)k >= L->errlen)
        return PDR_ECONFIG;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(L->err + k, L->errlen - (size_t)k, fmt, ap);
    va_end(ap);
    return PDR_ECONFIG;
}

/* Whether v is the string lit. */
int str_is(json_t *v, const char *lit)
{
    return IS(v, STR) && v->n == strlen(lit) && memcmp(v->v.s, lit, v->n) == 0;
}

int nomem(ld_t *L)
{
    fail(L, "out of memory");
    return PDR_ENOMEM;
}

/* A member that must be absent/null or a bool; *out keeps its default when absent or null. */
int get_bool(ld_t *L, json_t *obj, const char *key, const char *path, int *out)
{
    json_t *v = json_object_get(obj, key);
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return fail(L, "%s.%s: expected a boolean", path, key);
    *out = json_is_true(v);
    return 0;
}

/* The "type" member, copied into buf as a C string. */
const char *get_type(ld_t *L, json_t *obj, const char *path, char buf[64])
{
    json_t *v = json_object_get(obj, "type");
    if (!json_is_string(v) || v->n >= 64 || memchr(v->v.s, '\0', v->n) != NULL) {
        fail(L, "%s.type: expected a type name", path);
        return NULL;
    }
    memcpy(buf, v->v.s, v->n);
    buf[v->n] = '\0';
    return buf;
}

/* Rewrites \s and \S to Unicode White_Space (see WS_CLASS). Returns a malloc'ed pattern, or NULL with
 * the error set. */
static char *rewrite_ws(ld_t *L, const char *pat, size_t len, const char *path, size_t *outlen)
{
    size_t cap = len * 2 + 64, n = 0;
    char *o = malloc(cap);
    if (o == NULL) {
        nomem(L);
        return NULL;
    }
    int in_class = 0;
    for (size_t i = 0; i < len; i++) {
        const char *add = NULL;
        char tmp[3] = {pat[i], 0, 0};
        if (pat[i] == '\\' && i + 1 < len) {
            char c = pat[++i];
            if (c == 's')
                add = in_class ? WS_CLASS : "[" WS_CLASS "]";
            else if (c == 'S' && !in_class)
                add = "[^" WS_CLASS "]";
            else if (c == 'S' || c == 'Q') {
                free(o);
                fail(L, "%s: \\%c %s is not supported", path, c,
                     c == 'Q' ? "quoting" : "in a character class");
                return NULL;
            } else {
                tmp[0] = '\\';
                tmp[1] = c;
            }
        } else if (!in_class && pat[i] == '[') {
            in_class = 1;
            /* A ']' right after '[' or '[^' is a literal. */
            size_t k = 0;
            tmp[k++] = '[';
            if (i + 1 < len && pat[i + 1] == '^')
                tmp[k++] = pat[++i];
            if (i + 1 < len && pat[i + 1] == ']') {
                free(o);
                fail(L, "%s: a ']' first in a character class is not supported", path);
                return NULL;
            }
        } else if (in_class && pat[i] == '[' && i + 1 < len && pat[i + 1] == ':') {
            free(o);
            fail(L, "%s: POSIX classes ([:name:]) are not supported", path);
            return NULL;
        } else if (in_class && pat[i] == ']') {
            in_class = 0;
        }
        if (add == NULL)
            add = tmp;
        size_t al = strlen(add);
        if (n + al + 1 > cap) {
            cap = (n + al + 1) * 2;
            char *q = realloc(o, cap);
            if (q == NULL) {
                free(o);
                nomem(L);
                return NULL;
            }
            o = q;
        }
        memcpy(o + n, add, al);
        n += al;
    }
    o[n] = '\0';
    *outlen = n;
    return o;
}

static int add_split(ld_t *L, const char *pat, size_t len, int literal, const char *path)
{
    pdr_tokenizer_t *t = L->t;
    char *rw = NULL;
    size_t rwlen = 0;
    if (!literal && (rw = rewrite_ws(L, pat, len, path, &rwlen)) == NULL)
        return PDR_ECONFIG;
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)(literal ? pat : rw), literal ? len : rwlen,
                                   PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0), &ec, &eo, NULL);
    free(rw);
    if (re == NULL) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof(msg));
        return fail(L, "%s: the pattern does not compile with PCRE2: %s", path, (const char *)msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* without JIT (not built in) pcre2_match interprets */
    size_t sz = 0;
    pcre2_pattern_info(re, PCRE2_INFO_SIZE, &sz);
    t->bytes += sz;
    pdr__tok_step_t *s = realloc(t->steps, (t->n_steps + 1) * sizeof(*s));
    if (s == NULL) {
        pcre2_code_free(re);
        return nomem(L);
    }
    t->steps = s;
    t->steps[t->n_steps++] = (pdr__tok_step_t){PDR__TOK_SPLIT, re};
    return 0;
}

static int add_step(ld_t *L, pdr__tok_step_kind_t kind)
{
    pdr__tok_step_t *s = realloc(L->t->steps, (L->t->n_steps + 1) * sizeof(*s));
    if (s == NULL)
        return nomem(L);
    L->t->steps = s;
    L->t->steps[L->t->n_steps++] = (pdr__tok_step_t){kind, NULL};
    return 0;
}

/* One pre-tokenizer; *bytelevel is set once a ByteLevel was seen (it must be the last step). */
static int load_pre(ld_t *L, json_t *pt, const char *path, int *bytelevel)
{
    if (!json_is_object(pt))
        return fail(L, "%s: expected an object", path);
    char tbuf[64];
    const char *type = get_type(L, pt, path, tbuf);
    if (type == NULL)
        return PDR_ECONFIG;
    if (*bytelevel)
        return fail(L, "%s: a pre-tokenizer after ByteLevel is not supported", path);
    if (strcmp(type, "Sequence") == 0) {
        json_t *arr = json_object_get(pt, "pretokenizers");
        if (!json_is_array(arr))
            return fail(L, "%s.pretokenizers: expected an array", path);
        for (size_t i = 0; i < json_array_size(arr); i++) {
            char sub[256];
            snprintf(sub, sizeof(sub), "%s.pretokenizers[%zu]", path, i);
            int r = load_pre(L, json_array_get(arr, i), sub, bytelevel);
            if (r != 0)
                return r;
        }
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        int aps = 1, use_regex = 1; /* `tokenizers`' defaults */
        int r;
        if ((r = get_bool(L, pt, "add_prefix_space", path, &aps)) != 0 ||
            (r = get_bool(L, pt, "use_regex", path, &use_regex)) != 0)
            return r;
        if (aps && (r = add_step(L, PDR__TOK_PREFIX_SPACE)) != 0)
            return r;
        if (use_regex) {
            char sub[256];
            snprintf(sub, sizeof(sub), "%s (GPT-2 pattern)", path);
            if ((r = add_split(L, gpt2_pattern, strlen(gpt2_pattern), 0, sub)) != 0)
                return r;
        }
        *bytelevel = 1;
        return 0;
    }
    if (strcmp(type, "Split") == 0) {
        json_t *beh = json_object_get(pt, "behavior");
        if (!json_is_string(beh) || !str_is(beh, "Isolated"))
            return fail(L, "%s.behavior: only \"Isolated\" is supported", path);
        int invert = 0, r;
        if ((r = get_bool(L, pt, "invert", path, &invert)) != 0)
            return r;
        if (invert)
            return fail(L, "%s.invert: true is not supported", path);
        json_t *pat = json_object_get(pt, "pattern");
        json_t *re = json_object_get(pat, "Regex"), *lit = json_object_get(pat, "String");
        char sub[256];
        snprintf(sub, sizeof(sub), "%s.pattern", path);
        if (json_is_string(re))
            return add_split(L, re->v.s, re->n, 0, sub);
        if (json_is_string(lit) && json_string_length(lit) > 0)
            return add_split(L, lit->v.s, lit->n, 1, sub);
        return fail(L, "%s: expected {\"Regex\": string} or {\"String\": non-empty string}", sub);
    }
    return fail(L, "%s.type: \"%s\" is not supported (Sequence, Split, ByteLevel are; and Metaspace alone)",
                path, type);
}

static int get_id(ld_t *L, json_t *v, const char *path, uint32_t *id)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= (int64_t)UINT32_MAX)
        return fail(L, "%s: expected a token id (an integer from 0 to 2^32-2)", path);
    *id = (uint32_t)json_integer_value(v);
    return 0;
}

static int load_added(ld_t *L, json_t *arr)
{
    pdr_tokenizer_t *t = L->t;
    if (arr == NULL || json_is_null(arr))
        return 0;
    if (!json_is_array(arr))
        return fail(L, "added_tokens: expected an array");
    size_t n = json_array_size(arr);
    t->added_raw.tok = calloc(n + 1, sizeof(pdr__tok_added_t));
    t->added_norm.tok = calloc(n + 1, sizeof(pdr__tok_added_t));
    if (t->added_raw.tok == NULL || t->added_norm.tok == NULL)
        return nomem(L);
    size_t i = 0;
    for (json_t *a = pdr__tj_first(arr); a != NULL; a = pdr__tj_next(L->doc, arr, a), i++) {
        char path[64];
        snprintf(path, sizeof(path), "added_tokens[%zu]", i);
        if (!json_is_object(a))
            return fail(L, "%s: expected an object", path);
        uint32_t id = 0;
        char sub[96];
        snprintf(sub, sizeof(sub), "%s.id", path);
        int r = get_id(L, json_object_get(a, "id"), sub, &id);
        if (r != 0)
            return r;
        json_t *c = json_object_get(a, "content");
        if (!json_is_string(c) || json_string_length(c) == 0)
            return fail(L, "%s.content: expected a non-empty string", path);
        static const char *const unsupported[] = {"single_word", "lstrip", "rstrip"};
        for (size_t k = 0; k < 3; k++) {
            int b = 0;
            if ((r = get_bool(L, a, unsupported[k], path, &b)) != 0)
                return r;
            if (b)
                return fail(L, "%s.%s: true is not supported", path, unsupported[k]);
        }
        int normalized = 0;
        if ((r = get_bool(L, a, "normalized", path, &normalized)) != 0)
            return r;
        if (normalized && (t->nfc || t->n_norms > 0))
            return fail(L, "%s.normalized: true is not supported with a normalizer", path);
        pdr__tok_addset_t *set = normalized ? &t->added_norm : &t->added_raw;
        size_t len = json_string_length(c);
        char *s = malloc(len);
        if (s == NULL)
            return nomem(L);
        memcpy(s, c->v.s, len);
        set->tok[set->n++] = (pdr__tok_added_t){s, (uint32_t)len, id};
        t->bytes += len + sizeof(pdr__tok_added_t) * 2;
    }
    pdr__tok_addset_index(&t->added_raw);
    pdr__tok_addset_index(&t->added_norm);
    return 0;
}

static uint32_t vocab_id(ld_t *L, const char *s, size_t len)
{
    return pdr__tok_vocab_get(&L->t->vocab, s, len);
}

static int load_merge(ld_t *L, const char *a, size_t al, const char *b, size_t bl, size_t rank)
{
    pdr_tokenizer_t *t = L->t;
    uint32_t ia = vocab_id(L, a, al), ib = vocab_id(L, b, bl);
    if (ia == PDR_TOK_NONE || ib == PDR_TOK_NONE)
        return fail(L, "model.merges[%zu]: \"%.*s\" is not in the vocabulary", rank,
                    (int)(ia == PDR_TOK_NONE ? al : bl), ia == PDR_TOK_NONE ? a : b);
    char stack[256], *m = al + bl <= sizeof(stack) ? stack : malloc(al + bl);
    if (m == NULL)
        return nomem(L);
    memcpy(m, a, al);
    memcpy(m + al, b, bl);
    uint32_t im = vocab_id(L, m, al + bl);
    if (m != stack)
        free(m);
    if (im == PDR_TOK_NONE)
        return fail(L, "model.merges[%zu]: the merged token \"%.*s%.*s\" is not in the vocabulary", rank,
                    (int)al, a, (int)bl, b);
    if (pdr__tok_merge_put(t, ia, ib, (uint32_t)rank, im) != 0)
        return nomem(L);
    return 0;
}

static int load_model(ld_t *L, json_t *m)
{
    pdr_tokenizer_t *t = L->t;
    if (!json_is_object(m))
        return fail(L, "model: expected an object");
    char tbuf[64];
    const char *type = get_type(L, m, "model", tbuf);
    if (type == NULL)
        return PDR_ECONFIG;
    if (strcmp(type, "BPE") != 0)
        return fail(L, "model.type: \"%s\" is not supported (BPE is)", type);
    json_t *v = json_object_get(m, "dropout");
    if (v != NULL && !json_is_null(v))
        return fail(L, "model.dropout: only null is supported");
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (size_t k = 0; k < 2; k++) {
        v = json_object_get(m, affixes[k]);
        if (v != NULL && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0))
            return fail(L, "model.%s: only null is supported", affixes[k]);
    }
    int bf = 0, r;
    if ((r = get_bool(L, m, "byte_fallback", "model", &bf)) != 0 ||
        (r = get_bool(L, m, "fuse_unk", "model", &t->fuse_unk)) != 0 ||
        (r = get_bool(L, m, "ignore_merges", "model", &t->ignore_merges)) != 0)
        return r;
    t->byte_fallback = bf;

    json_t *vocab = json_object_get(m, "vocab");
    if (!json_is_object(vocab))
        return fail(L, "model.vocab: expected an object");
    size_t bytes = 0;
    for (json_t *key = pdr__tj_first(vocab); key != NULL; key = pdr__tj_next(L->doc, vocab, key))
        bytes += key->n;
    if (pdr__tok_vocab_reserve(&t->vocab, vocab->n, bytes) != 0)
        return nomem(L);
    /* A token given twice keeps its last id, as `tokenizers` (a map) does. */
    for (json_t *key = pdr__tj_first(vocab); key != NULL; key = pdr__tj_next(L->doc, vocab, key)) {
        uint32_t id = 0;
        char path[128];
        if (!json_is_integer(key + 1)) {
            snprintf(path, sizeof(path), "model.vocab[\"%.*s\"]", SHOW(key));
            return get_id(L, key + 1, path, &id);
        }
        if ((r = get_id(L, key + 1, "model.vocab", &id)) != 0)
            return r;
        if ((r = pdr__tok_vocab_put(&t->vocab, key->v.s, key->n, id)) != 0)
            return r == PDR_ENOMEM ? nomem(L) : fail(L, "model.vocab: too large");
    }
    v = json_object_get(m, "unk_token");
    t->unk_id = PDR_TOK_NONE;
    if (v != NULL && !json_is_null(v)) {
        if (!json_is_string(v))
            return fail(L, "model.unk_token: expected a string or null");
        if ((t->unk_id = vocab_id(L, v->v.s, v->n)) == PDR_TOK_NONE)
            return fail(L, "model.unk_token: \"%.*s\" is not in the vocabulary", SHOW(v));
    }
    for (unsigned b = 0; b < 256; b++) {
        char c[2] = {0, 0};
        size_t n = pdr__tok_byte_char((uint8_t)b, c);
        t->byte_id[b] = vocab_id(L, c, n);
        memcpy(t->byte_chr[b], c, 2);
        t->byte_len[b] = (uint8_t)n;
        char fb[8];
        snprintf(fb, sizeof(fb), "<0x%02X>", b); /* `tokenizers`' byte fallback token */
        t->fb_id[b] = vocab_id(L, fb, 6);
    }

    json_t *merges = json_object_get(m, "merges");
    if (merges == NULL || json_is_null(merges))
        return 0;
    if (!json_is_array(merges))
        return fail(L, "model.merges: expected an array");
    if (pdr__tok_merge_reserve(t, merges->n) != 0)
        return nomem(L);
    size_t i = 0;
    for (json_t *e = pdr__tj_first(merges); e != NULL; e = pdr__tj_next(L->doc, merges, e), i++) {
        if (json_is_string(e)) { /* "a b" */
            const char *s = e->v.s;
            size_t len = json_string_length(e);
            const char *sp = memchr(s, ' ', len);
            if (sp == NULL || sp == s || sp + 1 == s + len || memchr(sp + 1, ' ', (size_t)(s + len - sp - 1)))
                return fail(L, "model.merges[%zu]: expected \"left right\" (two tokens, one space)", i);
            r = load_merge(L, s, (size_t)(sp - s), sp + 1, (size_t)(s + len - sp - 1), i);
        } else if (json_is_array(e) && e->n == 2 && json_is_string(e + 1) && json_is_string(e + 2)) {
            r = load_merge(L, e[1].v.s, e[1].n, e[2].v.s, e[2].n, i);
        } else {
            return fail(L, "model.merges[%zu]: expected \"left right\" or [left, right]", i);
        }
        if (r != 0)
            return r;
    }
    return 0;
}

static int append_ids(ld_t *L, uint32_t **arr, size_t *n, const uint32_t *ids, size_t k, int front)
{
    uint32_t *a = realloc(*arr, (*n + k + 1) * sizeof(*a));
    if (a == NULL)
        return nomem(L);
    if (front) {
        memmove(a + k, a, *n * sizeof(*a));
        memcpy(a, ids, k * sizeof(*a));
    } else {
        memcpy(a + *n, ids, k * sizeof(*a));
    }
    *arr = a;
    *n += k;
    return 0;
}

/* TemplateProcessing's single template: the special tokens before and after $A. */
static int load_template(ld_t *L, json_t *pp, const char *path)
{
    pdr_tokenizer_t *t = L->t;
    json_t *single = json_object_get(pp, "single"), *specials = json_object_get(pp, "special_tokens");
    if (!json_is_array(single))
        return fail(L, "%s.single: expected an array", path);
    uint32_t *pre = NULL, *suf = NULL;
    size_t npre = 0, nsuf = 0;
    int seen_a = 0, r = 0;
    for (size_t i = 0; i < json_array_size(single) && r == 0; i++) {
        json_t *it = json_array_get(single, i);
        json_t *seq = json_object_get(it, "Sequence"), *sp = json_object_get(it, "SpecialToken");
        if (seq != NULL) {
            json_t *id = json_object_get(seq, "id");
            if (seen_a || !str_is(id, "A"))
                r = fail(L, "%s.single[%zu]: only one sequence, $A, is supported", path, i);
            seen_a = 1;
            continue;
        }
        json_t *name = json_object_get(sp, "id");
        if (!json_is_string(name)) {
            r = fail(L, "%s.single[%zu]: expected {\"Sequence\": ...} or {\"SpecialToken\": {\"id\": ...}}",
                     path, i);
            break;
        }
        json_t *def = pdr__tj_getn(L->doc, specials, name->v.s, name->n);
        json_t *ids = json_object_get(def, "ids");
        if (!json_is_array(ids)) {
            r = fail(L, "%s.special_tokens[\"%.*s\"].ids: expected an array", path, SHOW(name));
            break;
        }
        for (size_t k = 0; k < json_array_size(ids) && r == 0; k++) {
            uint32_t id = 0;
            char sub[320];
            snprintf(sub, sizeof(sub), "%s.special_tokens[\"%.*s\"].ids[%zu]", path, SHOW(name), k);
            if ((r = get_id(L, json_array_get(ids, k), sub, &id)) == 0)
                r = seen_a ? append_ids(L, &suf, &nsuf, &id, 1, 0) : append_ids(L, &pre, &npre, &id, 1, 0);
        }
    }
    if (r == 0 && !seen_a)
        r = fail(L, "%s.single: no $A sequence", path);
    /* A later processor wraps what the earlier ones produced. */
    if (r == 0 && npre > 0)
        r = append_ids(L, &t->prefix, &t->n_prefix, pre, npre, 1);
    if (r == 0 && nsuf > 0)
        r = append_ids(L, &t->suffix, &t->n_suffix, suf, nsuf, 0);
    free(pre);
    free(suf);
    return r;
}

static int load_post(ld_t *L, json_t *pp, const char *path)
{
    if (pp == NULL || json_is_null(pp))
        return 0;
    if (!json_is_object(pp))
        return fail(L, "%s: expected an object or null", path);
    char tbuf[64];
    const char *type = get_type(L, pp, path, tbuf);
    if (type == NULL)
        return PDR_ECONFIG;
    if (strcmp(type, "ByteLevel") == 0) /* offsets only */
        return 0;
    if (strcmp(type, "TemplateProcessing") == 0)
        return load_template(L, pp, path);
    if (strcmp(type, "Sequence") == 0) {
        json_t *arr = json_object_get(pp, "processors");
        if (!json_is_array(arr))
            return fail(L, "%s.processors: expected an array", path);
        for (size_t i = 0; i < json_array_size(arr); i++) {
            char sub[256];
            snprintf(sub, sizeof(sub), "%s.processors[%zu]", path, i);
            int r = load_post(L, json_array_get(arr, i), sub);
            if (r != 0)
                return r;
        }
        return 0;
    }
    return fail(L, "%s.type: \"%s\" is not supported (ByteLevel, TemplateProcessing, Sequence are)", path,
                type);
}

static int load_root(ld_t *L, json_t *root)
{
    if (!json_is_object(root))
        return fail(L, "the top level is not an object");
    static const char *const nulls[] = {"truncation", "padding"};
    for (size_t k = 0; k < 2; k++) {
        json_t *v = json_object_get(root, nulls[k]);
        if (v != NULL && !json_is_null(v))
            return fail(L, "%s: only null is supported", nulls[k]);
    }
    int r;
    if ((r = pdr__tok_load_normalizer(L, json_object_get(root, "normalizer"))) != 0 ||
        (r = load_model(L, json_object_get(root, "model"))) != 0 ||
        (r = load_added(L, json_object_get(root, "added_tokens"))) != 0)
        return r;
    json_t *pt = json_object_get(root, "pre_tokenizer");
    int bytelevel = 0;
    char tbuf[64];
    const char *ptype = json_is_object(pt) ? get_type(L, pt, "pre_tokenizer", tbuf) : NULL;
    if (json_is_object(pt) && ptype == NULL)
        return PDR_ECONFIG;
    if (pt == NULL || json_is_null(pt) || (ptype != NULL && strcmp(ptype, "Metaspace") == 0)) {
        /* SentencePiece-style: BPE over characters (spaces as Metaspace's replacement, or as the
         * normalizer makes them), unknown characters as their bytes (byte_fallback) or the unknown token. */
        L->t->char_level = 1;
        if (ptype != NULL && (r = pdr__tok_load_metaspace(L, pt, "pre_tokenizer")) != 0)
            return r;
    } else {
        if (L->t->n_norms > 0)
            return fail(L, "normalizer: only null or NFC is supported with a ByteLevel pre-tokenizer");
        if (L->t->byte_fallback)
            return fail(L, "model.byte_fallback: true is not supported with a ByteLevel pre-tokenizer");
        if ((r = load_pre(L, pt, "pre_tokenizer", &bytelevel)) != 0)
            return r;
        if (!bytelevel)
            return fail(L,
                        "pre_tokenizer: no ByteLevel step (byte-level BPE needs one; a SentencePiece-style "
                        "file has a Metaspace pre-tokenizer or none)");
    }
    return load_post(L, json_object_get(root, "post_processor"), "post_processor");
}

static pdr_tokenizer_t *load_doc(pdr__tj_t *doc, const char *path, char *err, size_t errlen)
{
    ld_t L = {doc, path, err, errlen, NULL};
    json_t *root = doc->nodes;
    L.t = calloc(1, sizeof(*L.t));
    if (L.t == NULL) {
        nomem(&L);
        pdr__tj_free(doc);
        return NULL;
    }
    L.t->refcnt = 1;
    int r = load_root(&L, root);
    pdr__tj_free(doc);
    if (r != 0) {
        pdr_tokenizer_free(L.t);
        return NULL;
    }
    pdr_tokenizer_t *t = L.t;
    t->bytes += sizeof(*t) + t->vocab.pool_cap + t->vocab.cap * sizeof(*t->vocab.slots) +
                t->merge_cap * sizeof(*t->merges) + t->n_steps * sizeof(*t->steps) +
                (t->n_prefix + t->n_suffix) * sizeof(uint32_t);
    return t;
}

#define EXPECTED "expected a Hugging Face tokenizer.json file, or a directory holding one"

/* "org/name" or "name" with no such file: what a hub model id looks like (sglang's --tokenizer-path and
 * --model-path take one and download it). */
static int looks_like_hub_name(const char *path)
{
    const char *slash = strchr(path, '/');
    return path[0] != '/' && path[0] != '.' && path[0] != '\0' &&
           (slash == NULL || strchr(slash + 1, '/') == NULL);
}

int pdr_tokenizer_file(const char *path, char *out, size_t cap, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        if ((errno == ENOENT || errno == ENOTDIR) && looks_like_hub_name(path))
            snprintf(err, errlen,
                     "%s: no such file: " EXPECTED " (a Hugging Face model name is not downloaded: give the "
                     "path of the model's tokenizer.json)",
                     path);
        else
            snprintf(err, errlen, "%s: %s: " EXPECTED, path, strerror(errno));
        return PDR_ECONFIG;
    }
    size_t len = strlen(path);
    int n;
    if (S_ISDIR(st.st_mode)) {
        while (len > 1 && path[len - 1] == '/')
            len--;
        n = snprintf(out, cap, "%.*s/tokenizer.json", (int)len, path);
        if (n >= 0 && (size_t)n < cap && (stat(out, &st) != 0 || !S_ISREG(st.st_mode))) {
            snprintf(err, errlen, "%s: a directory without a tokenizer.json: " EXPECTED, path);
            return PDR_ECONFIG;
        }
    } else if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file: " EXPECTED, path);
        return PDR_ECONFIG;
    } else {
        n = snprintf(out, cap, "%s", path);
    }
    if (n < 0 || (size_t)n >= cap) {
        snprintf(err, errlen, "%s: path too long (%zu bytes at most)", path, cap - 1);
        return PDR_ETOOBIG;
    }
    return 0;
}

pdr_tokenizer_t *pdr_tokenizer_load(const char *path, char *err, size_t errlen)
{
    if (errlen > 0)
        err[0] = '\0';
    char file[PDR_TOKENIZER_PATH_MAX];
    if (pdr_tokenizer_file(path, file, sizeof(file), err, errlen) != 0)
        return NULL;
    pdr__tj_t doc;
    if (pdr__tj_parse_file(&doc, file, err, errlen) != 0)
        return NULL;
    return load_doc(&doc, file, err, errlen);
}

pdr_tokenizer_t *pdr__tokenizer_load_buffer(char *buf, size_t len, const char *name, char *err, size_t errlen)
{
    if (errlen > 0)
        err[0] = '\0';
    pdr__tj_t doc;
    if (pdr__tj_parse(&doc, buf, len, name, err, errlen) != 0)
        return NULL;
    return load_doc(&doc, name, err, errlen);
}
