/*
 * The parts of a tokenizer.json that SentencePiece-style files use (docs/internals/tokenizer.md): the
 * normalizer (NFC alone, or Prepend, Replace and Sequence) and the Metaspace pre-tokenizer. Called by
 * tokenizer_load.c; any thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "tokenizer_load_internal.h"

static int add_norm(ld_t *L, pdr__tok_norm_kind_t kind, const char *a, size_t alen, const char *b,
                    size_t blen)
{
    pdr_tokenizer_t *t = L->t;
    pdr__tok_norm_t *n = realloc(t->norms, (t->n_norms + 1) * sizeof(*n));
    if (n == NULL)
        return nomem(L);
    t->norms = n;
    pdr__tok_norm_t *s = &t->norms[t->n_norms];
    *s = (pdr__tok_norm_t){kind, NULL, NULL, alen, blen};
    if ((alen > 0 && (s->a = malloc(alen)) == NULL) || (blen > 0 && (s->b = malloc(blen)) == NULL)) {
        free(s->a);
        return nomem(L);
    }
    if (alen > 0)
        memcpy(s->a, a, alen);
    if (blen > 0)
        memcpy(s->b, b, blen);
    t->n_norms++;
    t->bytes += sizeof(*s) + alen + blen;
    return 0;
}

/* One normalizer (path names it): NFC, Prepend, Replace with a String pattern, or a Sequence of them. */
static int load_norm(ld_t *L, json_t *n, const char *path)
{
    char tbuf[64];
    const char *type = get_type(L, n, path, tbuf);
    if (type == NULL)
        return PDR_ECONFIG;
    if (strcmp(type, "NFC") == 0)
        return add_norm(L, PDR__NORM_NFC, NULL, 0, NULL, 0);
    if (strcmp(type, "Prepend") == 0) {
        json_t *p = json_object_get(n, "prepend");
        if (!json_is_string(p))
            return fail(L, "%s.prepend: expected a string", path);
        return add_norm(L, PDR__NORM_PREPEND, p->v.s, p->n, NULL, 0);
    }
    if (strcmp(type, "Replace") == 0) {
        json_t *lit = json_object_get(json_object_get(n, "pattern"), "String");
        json_t *c = json_object_get(n, "content");
        if (!json_is_string(lit) || lit->n == 0)
            return fail(L, "%s.pattern: only {\"String\": non-empty string} is supported", path);
        if (!json_is_string(c))
            return fail(L, "%s.content: expected a string", path);
        return add_norm(L, PDR__NORM_REPLACE, lit->v.s, lit->n, c->v.s, c->n);
    }
    if (strcmp(type, "Sequence") == 0) {
        json_t *arr = json_object_get(n, "normalizers");
        if (!json_is_array(arr))
            return fail(L, "%s.normalizers: expected an array", path);
        for (size_t i = 0; i < json_array_size(arr); i++) {
            char sub[128];
            snprintf(sub, sizeof(sub), "%s.normalizers[%zu]", path, i);
            json_t *e = json_array_get(arr, i);
            if (!json_is_object(e))
                return fail(L, "%s: expected an object", sub);
            int r = load_norm(L, e, sub);
            if (r != 0)
                return r;
        }
        return 0;
    }
    return fail(L, "%s.type: \"%s\" is not supported (null, NFC, Prepend, Replace and Sequence are)", path,
                type);
}

int pdr__tok_load_normalizer(ld_t *L, json_t *n)
{
    if (n == NULL || json_is_null(n))
        return 0;
    if (!json_is_object(n))
        return fail(L, "normalizer: expected an object or null");
    int r = load_norm(L, n, "normalizer");
    if (r != 0)
        return r;
    if (L->t->n_norms == 1 && L->t->norms[0].kind == PDR__NORM_NFC) { /* NFC alone: the fast path */
        L->t->nfc = 1;
        L->t->n_norms = 0;
        free(L->t->norms);
        L->t->norms = NULL;
    }
    return 0;
}

/* A Metaspace pre-tokenizer (SentencePiece-style files): spaces become `replacement`, which is put in front
 * of a segment by prepend_scheme (or the older add_prefix_space), and splits it when split is true. */
int pdr__tok_load_metaspace(ld_t *L, json_t *pt, const char *path)
{
    pdr_tokenizer_t *t = L->t;
    json_t *rep = json_object_get(pt, "replacement"), *ps = json_object_get(pt, "prepend_scheme");
    if (!json_is_string(rep) || rep->n == 0 || rep->n >= sizeof(t->meta_rep))
        return fail(L, "%s.replacement: expected one character", path);
    memcpy(t->meta_rep, rep->v.s, rep->n);
    t->meta_rep_len = rep->n;
    int split = 1, aps = 1, r;
    if ((r = get_bool(L, pt, "split", path, &split)) != 0)
        return r;
    if (ps != NULL && !json_is_null(ps)) {
        if (str_is(ps, "always"))
            t->meta_prepend = PDR__META_ALWAYS;
        else if (str_is(ps, "first"))
            t->meta_prepend = PDR__META_FIRST;
        else if (str_is(ps, "never"))
            t->meta_prepend = PDR__META_NEVER;
        else
            return fail(L, "%s.prepend_scheme: expected \"always\", \"first\" or \"never\"", path);
    } else {
        if ((r = get_bool(L, pt, "add_prefix_space", path, &aps)) != 0)
            return r;
        t->meta_prepend = aps ? PDR__META_ALWAYS : PDR__META_NEVER;
    }
    t->meta = 1;
    t->meta_split = split;
    return 0;
}
