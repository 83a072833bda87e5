/*
 * Encoding of SentencePiece-style files (docs/internals/tokenizer.md): a segment's normalizer steps, the
 * Metaspace pre-tokenizer, and BPE over characters with byte fallback, as `tokenizers` does them. The merges
 * and the ids' buffer are tokenizer.c's. Any thread (the tokenizer is read-only; scratch is per call).
 */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "err.h"
#include "tokenizer_enc.h"

/* The length of the UTF-8 character that starts with byte c (the text is valid UTF-8). */
static size_t utf8_len(uint8_t c)
{
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

/* BPE of one piece of a SentencePiece-style file: one symbol per character of the vocabulary; another
 * character becomes its bytes' <0xNN> tokens (byte_fallback, when all of them exist) or the unknown token
 * (consecutive ones fused when asked). As `tokenizers` does, an unknown token waiting to be fused is written
 * when the next known character comes, after any byte tokens between. */
static int bpe_chars(struct enc *e, const char *p, size_t len)
{
    const pdr_tokenizer_t *t = e->t;
    if (t->ignore_merges) {
        uint32_t id = pdr__tok_vocab_get(&t->vocab, p, len);
        if (id != PDR_TOK_NONE)
            return emit(e, id);
    }
    if (grow((void **)&e->sym, &e->sym_cap, len + 1, sizeof(*e->sym)) != 0 ||
        grow((void **)&e->heap, &e->heap_cap, 3 * len, sizeof(*e->heap)) != 0)
        return PDR_ENOMEM;
    int32_t ns = 0;
    uint32_t unk_len = 0; /* an unknown token waiting (0: none) */
#define SYM(id_, len_)                                                                                       \
    (e->sym[ns] = (struct sym){(id_), ns - 1, ns + 1, (len_), PDR_TOK_NONE, PDR_TOK_NONE}, ns++)
    for (size_t i = 0; i < len;) {
        size_t cl = utf8_len((uint8_t)p[i]);
        if (cl > len - i)
            cl = len - i;
        uint32_t id = pdr__tok_vocab_get(&t->vocab, p + i, cl);
        if (id != PDR_TOK_NONE) {
            if (unk_len > 0) {
                SYM(t->unk_id, unk_len);
                unk_len = 0;
            }
            SYM(id, (uint32_t)cl);
            i += cl;
            continue;
        }
        int fell_back = 0;
        if (t->byte_fallback) {
            size_t k = 0;
            while (k < cl && t->fb_id[(uint8_t)p[i + k]] != PDR_TOK_NONE)
                k++;
            if (k == cl) {
                for (k = 0; k < cl; k++)
                    SYM(t->fb_id[(uint8_t)p[i + k]], 1);
                fell_back = 1;
            }
        }
        if (!fell_back && t->unk_id != PDR_TOK_NONE) {
            if (unk_len > 0 && !t->fuse_unk)
                SYM(t->unk_id, unk_len), unk_len = 0;
            unk_len += (uint32_t)cl;
        }
        i += cl;
    }
    if (unk_len > 0)
        SYM(t->unk_id, unk_len);
#undef SYM
    return merge_syms(e, ns);
}

/* Metaspace, then BPE: spaces become the replacement, which goes in front by prepend_scheme ("first": only
 * for the segment that starts the text), and each replacement starts a piece when split is on. */
static int metaspace(struct enc *e, const char *p, size_t len, int first)
{
    const pdr_tokenizer_t *t = e->t;
    const char *rep = t->meta_rep;
    size_t rl = t->meta_rep_len, spaces = 0;
    for (size_t i = 0; i < len; i++)
        spaces += p[i] == ' ';
    int pre = (t->meta_prepend == PDR__META_ALWAYS || (t->meta_prepend == PDR__META_FIRST && first)) &&
              !(len >= rl && memcmp(p, rep, rl) == 0) && !(len > 0 && p[0] == ' ');
    char *q = malloc(len + spaces * rl + rl + 1);
    if (q == NULL)
        return PDR_ENOMEM;
    size_t m = 0;
    if (pre) {
        memcpy(q, rep, rl);
        m = rl;
    }
    for (size_t i = 0; i < len; i++) {
        if (p[i] == ' ') {
            memcpy(q + m, rep, rl);
            m += rl;
        } else {
            q[m++] = p[i];
        }
    }
    int r = 0;
    if (!t->meta_split) {
        r = bpe_chars(e, q, m);
    } else { /* each replacement starts a piece (merged with what follows it) */
        size_t start = 0;
        for (size_t i = 1; i + rl <= m && r == 0; i++)
            if (memcmp(q + i, rep, rl) == 0) {
                r = bpe_chars(e, q + start, i - start);
                start = i;
            }
        if (r == 0 && m > start)
            r = bpe_chars(e, q + start, m - start);
    }
    free(q);
    return r;
}

/* The normalizer steps of a SentencePiece-style file over p[0..len): a malloc'd result in *out. */
static int normalize(const pdr_tokenizer_t *t, const char *p, size_t len, char **out, size_t *out_len)
{
    char *cur = malloc(len + 1);
    if (cur == NULL)
        return PDR_ENOMEM;
    memcpy(cur, p, len);
    size_t n = len;
    for (size_t k = 0; k < t->n_norms; k++) {
        const pdr__tok_norm_t *s = &t->norms[k];
        char *next = NULL;
        size_t nn = 0;
        if (s->kind == PDR__NORM_NFC) {
            utf8proc_uint8_t *o = NULL;
            utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)cur, (utf8proc_ssize_t)n, &o,
                                              UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            if (r < 0) {
                free(cur);
                return r == UTF8PROC_ERROR_NOMEM ? PDR_ENOMEM : PDR_EINVAL;
            }
            next = (char *)o;
            nn = (size_t)r;
        } else if (s->kind == PDR__NORM_PREPEND) {
            if (n == 0)
                continue; /* an empty segment gets nothing */
            if ((next = malloc(n + s->alen + 1)) == NULL) {
                free(cur);
                return PDR_ENOMEM;
            }
            memcpy(next, s->a, s->alen);
            memcpy(next + s->alen, cur, n);
            nn = n + s->alen;
        } else {
            size_t hits = 0;
            for (size_t i = 0; i + s->alen <= n;)
                if (memcmp(cur + i, s->a, s->alen) == 0) {
                    hits++;
                    i += s->alen;
                } else {
                    i++;
                }
            if (hits == 0)
                continue;
            if ((next = malloc(n + hits * s->blen + 1)) == NULL) {
                free(cur);
                return PDR_ENOMEM;
            }
            for (size_t i = 0; i < n;)
                if (i + s->alen <= n && memcmp(cur + i, s->a, s->alen) == 0) {
                    memcpy(next + nn, s->b, s->blen);
                    nn += s->blen;
                    i += s->alen;
                } else {
                    next[nn++] = cur[i++];
                }
        }
        free(cur);
        cur = next;
        n = nn;
    }
    *out = cur;
    *out_len = n;
    return 0;
}

/* A segment of a SentencePiece-style file: its normalizer steps, then Metaspace or one piece. */
int pdr__tok_segment_chars(struct enc *e, const char *p, size_t len)
{
    int first = p == e->text;
    char *q = NULL, *c = NULL;
    size_t n = len;
    if (e->t->nfc) { /* NFC alone */
        utf8proc_uint8_t *o = NULL;
        utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)p, (utf8proc_ssize_t)len, &o,
                                          UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (m < 0)
            return m == UTF8PROC_ERROR_NOMEM ? PDR_ENOMEM : PDR_EINVAL;
        c = (char *)o;
        p = c;
        n = (size_t)m;
    }
    if (e->t->n_norms > 0) {
        int r = normalize(e->t, p, n, &q, &n);
        free(c);
        c = NULL;
        if (r != 0)
            return r;
        p = q;
    }
    int r = n == 0 ? 0 : e->t->meta ? metaspace(e, p, n, first) : bpe_chars(e, p, n);
    free(q);
    free(c);
    return r;
}
