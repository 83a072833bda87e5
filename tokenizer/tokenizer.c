/*
 * The tokenizer's tables (vocabulary, merges, added tokens) and encoding, in the order `tokenizers`
 * applies its steps to one sequence: added tokens are split out of the raw text (leftmost-longest exact
 * match), each remaining segment is normalized (NFC through utf8proc when the file asks for it), split
 * by the pre-tokenizer's steps (PCRE2 patterns, behaviour Isolated; ByteLevel's prefix space), each piece
 * mapped byte by byte to GPT-2's printable characters and merged by BPE (lowest merge rank first, the
 * leftmost on a tie, with a heap as `tokenizers` does), and the post-processor's ids put around.
 *
 * Threads: the tokenizer is read-only after load; every encode call has its own scratch (struct enc).
 */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "err.h"
#include "tokenizer_enc.h"

uint32_t pdr__tok_hash(const char *s, size_t len)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

/* GPT-2's bytes_to_unicode: '!'..'~', 0xA1..0xAC and 0xAE..0xFF map to themselves, the other 68 bytes
 * to U+0100 onward in byte order. */
static uint32_t byte_cp(uint8_t b)
{
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)
        return b;
    uint32_t n = 0;
    for (uint32_t c = 0; c < b; c++)
        if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE))
            n++;
    return 256 + n;
}

size_t pdr__tok_byte_char(uint8_t b, char out[2])
{
    uint32_t cp = byte_cp(b);
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

uint32_t pdr__tok_vocab_get(const pdr__tok_vocab_t *v, const char *s, size_t len)
{
    if (v->cap == 0)
        return PDR_TOK_NONE;
    uint32_t h = pdr__tok_hash(s, len);
    for (size_t i = h & (v->cap - 1);; i = (i + 1) & (v->cap - 1)) {
        const struct pdr__tok_vslot *e = &v->slots[i];
        if (e->id == PDR_TOK_NONE)
            return PDR_TOK_NONE;
        if (e->hash == h && e->len == len && memcmp(v->pool + e->off, s, len) == 0)
            return e->id;
    }
}

static int vocab_grow(pdr__tok_vocab_t *v, size_t cap)
{
    struct pdr__tok_vslot *slots = malloc(cap * sizeof(*slots));
    if (slots == NULL)
        return PDR_ENOMEM;
    for (size_t i = 0; i < cap; i++)
        slots[i].id = PDR_TOK_NONE;
    for (size_t k = 0; k < v->cap; k++) {
        if (v->slots[k].id == PDR_TOK_NONE)
            continue;
        size_t i = v->slots[k].hash & (cap - 1);
        while (slots[i].id != PDR_TOK_NONE)
            i = (i + 1) & (cap - 1);
        slots[i] = v->slots[k];
    }
    free(v->slots);
    v->slots = slots;
    v->cap = cap;
    return 0;
}

int pdr__tok_vocab_put(pdr__tok_vocab_t *v, const char *s, size_t len, uint32_t id)
{
    if (id == PDR_TOK_NONE || len > UINT32_MAX / 2 || v->pool_len + len > UINT32_MAX)
        return PDR_ETOOBIG;
    if ((v->n + 1) * 2 > v->cap && vocab_grow(v, v->cap ? v->cap * 2 : 1024) != 0)
        return PDR_ENOMEM;
    uint32_t h = pdr__tok_hash(s, len);
    size_t i = h & (v->cap - 1);
    for (; v->slots[i].id != PDR_TOK_NONE; i = (i + 1) & (v->cap - 1)) {
        struct pdr__tok_vslot *e = &v->slots[i];
        if (e->hash == h && e->len == len && memcmp(v->pool + e->off, s, len) == 0) {
            e->id = id;
            return 0;
        }
    }
    if (v->pool_len + len > v->pool_cap) {
        size_t cap = v->pool_cap ? v->pool_cap * 2 : 65536;
        while (cap < v->pool_len + len)
            cap *= 2;
        char *p = realloc(v->pool, cap);
        if (p == NULL)
            return PDR_ENOMEM;
        v->pool = p;
        v->pool_cap = cap;
    }
    memcpy(v->pool + v->pool_len, s, len);
    v->slots[i] = (struct pdr__tok_vslot){h, id, (uint32_t)v->pool_len, (uint32_t)len};
    v->pool_len += len;
    v->n++;
    return 0;
}

int pdr__tok_vocab_reserve(pdr__tok_vocab_t *v, size_t n, size_t bytes)
{
    size_t cap = 1024;
    while (cap < 2 * (n + 1))
        cap *= 2;
    if (cap > v->cap && vocab_grow(v, cap) != 0)
        return PDR_ENOMEM;
    if (bytes > v->pool_cap) {
        char *p = realloc(v->pool, bytes);
        if (p == NULL)
            return PDR_ENOMEM;
        v->pool = p;
        v->pool_cap = bytes;
    }
    return 0;
}

void pdr__tok_vocab_free(pdr__tok_vocab_t *v)
{
    free(v->pool);
    free(v->slots);
    memset(v, 0, sizeof(*v));
}

static size_t merge_slot(uint64_t key, size_t cap)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL; /* murmur3's finalizer */
    key ^= key >> 33;
    return (size_t)key & (cap - 1);
}

static int merge_grow(pdr_tokenizer_t *t, size_t cap)
{
    pdr__tok_merge_t *m = malloc(cap * sizeof(*m));
    if (m == NULL)
        return PDR_ENOMEM;
    for (size_t i = 0; i < cap; i++)
        m[i].key = UINT64_MAX;
    for (size_t k = 0; k < t->merge_cap; k++) {
        if (t->merges[k].key == UINT64_MAX)
            continue;
        size_t i = merge_slot(t->merges[k].key, cap);
        while (m[i].key != UINT64_MAX)
            i = (i + 1) & (cap - 1);
        m[i] = t->merges[k];
    }
    free(t->merges);
    t->merges = m;
    t->merge_cap = cap;
    return 0;
}

int pdr__tok_merge_reserve(pdr_tokenizer_t *t, size_t n)
{
    size_t cap = 4096;
    while (cap < 2 * (n + 1))
        cap *= 2;
    return cap > t->merge_cap ? merge_grow(t, cap) : 0;
}

int pdr__tok_merge_put(pdr_tokenizer_t *t, uint32_t left, uint32_t right, uint32_t rank, uint32_t id)
{
    if ((t->n_merges + 1) * 2 > t->merge_cap && merge_grow(t, t->merge_cap ? t->merge_cap * 2 : 4096) != 0)
        return PDR_ENOMEM;
    uint64_t key = (uint64_t)left << 32 | right;
    size_t i = merge_slot(key, t->merge_cap);
    while (t->merges[i].key != UINT64_MAX && t->merges[i].key != key)
        i = (i + 1) & (t->merge_cap - 1);
    if (t->merges[i].key == UINT64_MAX)
        t->n_merges++;
    t->merges[i] = (pdr__tok_merge_t){key, rank, id};
    return 0;
}

const pdr__tok_merge_t *pdr__tok_merge_get(const pdr_tokenizer_t *t, uint32_t left, uint32_t right)
{
    if (t->merge_cap == 0)
        return NULL;
    uint64_t key = (uint64_t)left << 32 | right;
    for (size_t i = merge_slot(key, t->merge_cap);; i = (i + 1) & (t->merge_cap - 1)) {
        if (t->merges[i].key == key)
            return &t->merges[i];
        if (t->merges[i].key == UINT64_MAX)
            return NULL;
    }
}

static int added_cmp(const void *a, const void *b)
{
    const pdr__tok_added_t *x = a, *y = b;
    uint8_t fx = (uint8_t)x->s[0], fy = (uint8_t)y->s[0];
    if (fx != fy)
        return fx < fy ? -1 : 1;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return memcmp(x->s, y->s, x->len);
}

void pdr__tok_addset_index(pdr__tok_addset_t *a)
{
    if (a->n > 0)
        qsort(a->tok, a->n, sizeof(*a->tok), added_cmp);
    size_t k = 0;
    for (unsigned b = 0; b < 256; b++) {
        a->first[b] = (uint32_t)k;
        while (k < a->n && (uint8_t)a->tok[k].s[0] == b)
            k++;
    }
    a->first[256] = (uint32_t)k;
}

pdr_tokenizer_t *pdr_tokenizer_ref(pdr_tokenizer_t *t)
{
    __atomic_add_fetch(&t->refcnt, 1, __ATOMIC_RELAXED);
    return t;
}

void pdr_tokenizer_free(pdr_tokenizer_t *t)
{
    if (t == NULL || __atomic_sub_fetch(&t->refcnt, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    pdr__tok_vocab_free(&t->vocab);
    free(t->merges);
    for (size_t i = 0; i < t->added_raw.n; i++)
        free(t->added_raw.tok[i].s);
    free(t->added_raw.tok);
    for (size_t i = 0; i < t->added_norm.n; i++)
        free(t->added_norm.tok[i].s);
    free(t->added_norm.tok);
    for (size_t i = 0; i < t->n_steps; i++)
        pcre2_code_free(t->steps[i].re);
    free(t->steps);
    for (size_t i = 0; i < t->n_norms; i++) {
        free(t->norms[i].a);
        free(t->norms[i].b);
    }
    free(t->norms);
    free(t->prefix);
    free(t->suffix);
    if (t->free_extra != NULL)
        t->free_extra(t->extra);
    free(t);
}

void pdr_tokenizer_set_extra(pdr_tokenizer_t *t, void *extra, void (*free_extra)(void *))
{
    t->extra = extra;
    t->free_extra = free_extra;
}

const void *pdr_tokenizer_extra(const pdr_tokenizer_t *t)
{
    return t != NULL ? t->extra : NULL;
}

size_t pdr_tokenizer_bytes(const pdr_tokenizer_t *t)
{
    return t->bytes;
}

size_t pdr_tokenizer_vocab_size(const pdr_tokenizer_t *t)
{
    return t->vocab.n;
}

size_t pdr_tokenizer_merges(const pdr_tokenizer_t *t)
{
    return t->n_merges;
}

/* ---- encoding ---- */

int pdr__tok_grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * size);
    if (q == NULL)
        return PDR_ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

int pdr__tok_emit(struct enc *e, uint32_t id)
{
    if (e->n == e->cap && grow((void **)&e->ids, &e->cap, e->n + 1, sizeof(*e->ids)) != 0)
        return PDR_ENOMEM;
    e->ids[e->n++] = id;
    return 0;
}

static int cand_less(const struct cand *a, const struct cand *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(struct enc *e, size_t *hn, struct cand c)
{
    size_t i = (*hn)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &e->heap[p]))
            break;
        e->heap[i] = e->heap[p];
        i = p;
    }
    e->heap[i] = c;
}

static struct cand heap_pop(struct enc *e, size_t *hn)
{
    struct cand top = e->heap[0], last = e->heap[--*hn];
    size_t i = 0, n = *hn;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        const struct cand *best = &last;
        if (l < n && cand_less(&e->heap[l], best)) {
            m = l;
            best = &e->heap[l];
        }
        if (l + 1 < n && cand_less(&e->heap[l + 1], best))
            m = l + 1;
        if (m == i)
            break;
        e->heap[i] = e->heap[m];
        i = m;
    }
    if (n > 0)
        e->heap[i] = last;
    return top;
}

static void push_pair(struct enc *e, size_t *hn, int32_t pos)
{
    int32_t nx = e->sym[pos].next;
    if (nx < 0)
        return;
    const pdr__tok_merge_t *m = pdr__tok_merge_get(e->t, e->sym[pos].id, e->sym[nx].id);
    if (m != NULL)
        heap_push(e, hn, (struct cand){m->rank, (uint32_t)pos, m->id});
}

static void pair_rank(struct enc *e, int32_t pos)
{
    struct sym *s = &e->sym[pos];
    const pdr__tok_merge_t *m = s->next >= 0 ? pdr__tok_merge_get(e->t, s->id, e->sym[s->next].id) : NULL;
    s->rank = m ? m->rank : PDR_TOK_NONE;
    s->mid = m ? m->id : PDR_TOK_NONE;
}

/* The merges of a short word (symbols 0..ns-1 linked), then its ids. */
static int merge_scan(struct enc *e, int32_t ns)
{
    for (int32_t i = 0; i < ns; i++)
        pair_rank(e, i);
    for (;;) {
        int32_t best = -1;
        uint32_t rank = PDR_TOK_NONE;
        for (int32_t i = 0; i >= 0; i = e->sym[i].next)
            if (e->sym[i].rank < rank) {
                rank = e->sym[i].rank;
                best = i;
            }
        if (best < 0)
            break;
        struct sym *s = &e->sym[best], *r = &e->sym[s->next];
        s->id = s->mid;
        s->len += r->len;
        r->len = 0;
        s->next = r->next;
        if (s->next >= 0)
            e->sym[s->next].prev = best;
        pair_rank(e, best);
        if (s->prev >= 0)
            pair_rank(e, s->prev);
    }
    for (int32_t i = 0; i >= 0; i = e->sym[i].next)
        if (emit(e, e->sym[i].id) != 0)
            return PDR_ENOMEM;
    return 0;
}

/* BPE of one pre-token (raw bytes p[0..len)). */
static int bpe(struct enc *e, const char *p, size_t len)
{
    const pdr_tokenizer_t *t = e->t;
    if (t->ignore_merges) {
        if (grow((void **)&e->map, &e->map_cap, 2 * len, 1) != 0)
            return PDR_ENOMEM;
        size_t m = 0;
        for (size_t i = 0; i < len; i++) {
            uint8_t b = (uint8_t)p[i];
            memcpy(e->map + m, t->byte_chr[b], 2); /* map has room for 2 * len */
            m += t->byte_len[b];
        }
        uint32_t id = pdr__tok_vocab_get(&t->vocab, e->map, m);
        if (id != PDR_TOK_NONE)
            return emit(e, id);
    }
    if (grow((void **)&e->sym, &e->sym_cap, len, sizeof(*e->sym)) != 0 ||
        grow((void **)&e->heap, &e->heap_cap, 3 * len, sizeof(*e->heap)) != 0)
        return PDR_ENOMEM;
    /* The initial symbols: one per byte; unknown bytes become the unknown token (fused when asked) or
     * are dropped. */
    int32_t ns = 0;
    int unk_open = 0;
    for (size_t i = 0; i < len; i++) {
        uint32_t id = t->byte_id[(uint8_t)p[i]];
        if (id == PDR_TOK_NONE) {
            if (t->unk_id == PDR_TOK_NONE)
                continue;
            if (unk_open && t->fuse_unk) {
                e->sym[ns - 1].len++;
                continue;
            }
            id = t->unk_id;
            unk_open = 1;
        } else {
            unk_open = 0;
        }
        e->sym[ns] = (struct sym){id, ns - 1, ns + 1, 1, PDR_TOK_NONE, PDR_TOK_NONE};
        ns++;
    }
    return merge_syms(e, ns);
}

/* The merges of symbols 0..ns-1 (linked), then their ids. */
int pdr__tok_merge_syms(struct enc *e, int32_t ns)
{
    const pdr_tokenizer_t *t = e->t;
    if (ns == 0)
        return 0;
    e->sym[ns - 1].next = -1;
    if (ns <= SCAN_MAX)
        return merge_scan(e, ns);
    size_t hn = 0;
    for (int32_t i = 0; i + 1 < ns; i++)
        push_pair(e, &hn, i);
    while (hn > 0) {
        struct cand c = heap_pop(e, &hn);
        struct sym *s = &e->sym[c.pos];
        if (s->len == 0 || s->next < 0)
            continue;
        struct sym *r = &e->sym[s->next];
        const pdr__tok_merge_t *m = pdr__tok_merge_get(t, s->id, r->id);
        if (m == NULL || m->id != c.id)
            continue;
        s->id = c.id;
        s->len += r->len;
        r->len = 0;
        s->next = r->next;
        if (s->next >= 0)
            e->sym[s->next].prev = (int32_t)c.pos;
        if (s->prev >= 0)
            push_pair(e, &hn, s->prev);
        push_pair(e, &hn, (int32_t)c.pos);
    }
    for (int32_t i = 0; i >= 0; i = e->sym[i].next)
        if (emit(e, e->sym[i].id) != 0)
            return PDR_ENOMEM;
    return 0;
}

static int run_steps(struct enc *e, size_t step, const char *p, size_t len);

/* One Isolated split: every match and every gap between matches is a piece (empty ones dropped). */
static int split_step(struct enc *e, size_t step, const char *p, size_t len)
{
    const pcre2_code *re = e->t->steps[step].re;
    size_t last = 0, pos = 0;
    while (pos <= len) {
        int rc = pcre2_match(re, (PCRE2_SPTR)p, len, pos, PCRE2_NO_UTF_CHECK, e->md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(re, (PCRE2_SPTR)p, len, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, e->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0)
            return PDR_ENOTSUP;
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
        size_t s = ov[0], f = ov[1];
        int r;
        if (s > last && (r = run_steps(e, step + 1, p + last, s - last)) != 0)
            return r;
        if (f > s && (r = run_steps(e, step + 1, p + s, f - s)) != 0)
            return r;
        last = f;
        if (f > s) {
            pos = f;
        } else { /* an empty match: step over one character */
            if (f >= len)
                break;
            pos = f + 1;
            while (pos < len && ((uint8_t)p[pos] & 0xC0) == 0x80)
                pos++;
        }
    }
    if (len > last)
        return run_steps(e, step + 1, p + last, len - last);
    return 0;
}

static int run_steps(struct enc *e, size_t step, const char *p, size_t len)
{
    if (len == 0)
        return 0;
    if (step == e->t->n_steps)
        return bpe(e, p, len);
    if (e->t->steps[step].kind == PDR__TOK_SPLIT)
        return split_step(e, step, p, len);
    /* ByteLevel's add_prefix_space: a piece that does not start with a space receives one. */
    if (p[0] == ' ')
        return run_steps(e, step + 1, p, len);
    char *q = malloc(len + 1);
    if (q == NULL)
        return PDR_ENOMEM;
    q[0] = ' ';
    memcpy(q + 1, p, len);
    int r = run_steps(e, step + 1, q, len + 1);
    free(q);
    return r;
}

/* A segment without added tokens: the normalizer, then the pre-tokenizer and BPE. */
static int segment(struct enc *e, const char *p, size_t len)
{
    if (e->t->char_level)
        return pdr__tok_segment_chars(e, p, len);
    if (!e->t->nfc)
        return run_steps(e, 0, p, len);
    size_t i = 0;
    while (i < len && (uint8_t)p[i] < 0x80)
        i++;
    if (i == len) /* ASCII is NFC */
        return run_steps(e, 0, p, len);
    utf8proc_uint8_t *out = NULL;
    utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)p, (utf8proc_ssize_t)len, &out,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (m < 0)
        return m == UTF8PROC_ERROR_NOMEM ? PDR_ENOMEM : PDR_EINVAL;
    int r = run_steps(e, 0, (const char *)out, (size_t)m);
    free(out);
    return r;
}

/* Splits p[0..len) on the added tokens of set a (leftmost, longest at a position); the gaps go to the
 * next set, or to segment() after the last. */
static int split_added(struct enc *e, int set, const char *p, size_t len)
{
    const pdr__tok_addset_t *a = set == 0 ? &e->t->added_raw : &e->t->added_norm;
    if (a->n == 0)
        return set == 0 ? split_added(e, 1, p, len) : segment(e, p, len);
    size_t last = 0;
    for (size_t i = 0; i < len; i++) {
        uint8_t b = (uint8_t)p[i];
        const pdr__tok_added_t *hit = NULL;
        for (uint32_t k = a->first[b]; k < a->first[b + 1]; k++)
            if (a->tok[k].len <= len - i && memcmp(a->tok[k].s, p + i, a->tok[k].len) == 0) {
                hit = &a->tok[k];
                break;
            }
        if (hit == NULL)
            continue;
        int r;
        if (i > last) {
            r = set == 0 ? split_added(e, 1, p + last, i - last) : segment(e, p + last, i - last);
            if (r != 0)
                return r;
        }
        if ((r = emit(e, hit->id)) != 0)
            return r;
        i += hit->len - 1;
        last = i + 1;
    }
    if (len > last)
        return set == 0 ? split_added(e, 1, p + last, len - last) : segment(e, p + last, len - last);
    return 0;
}

/* Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF), as Rust's str is. */
static int utf8_valid(const uint8_t *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        uint32_t cp, min;
        if (c >= 0xC2 && c <= 0xDF) {
            n = 1;
            cp = c & 0x1F;
            min = 0x80;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 2;
            cp = c & 0x0F;
            min = 0x800;
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 3;
            cp = c & 0x07;
            min = 0x10000;
        } else {
            return 0;
        }
        if (len - i <= n)
            return 0;
        for (size_t k = 1; k <= n; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += n + 1;
    }
    return 1;
}

int pdr_tokenizer_encode(const pdr_tokenizer_t *t, const char *text, size_t len, uint32_t **ids, size_t *n)
{
    return pdr_tokenizer_encode_special(t, text, len, 1, ids, n);
}

int pdr_tokenizer_encode_special(const pdr_tokenizer_t *t, const char *text, size_t len, int add_special,
                                 uint32_t **ids, size_t *n)
{
    *ids = NULL;
    *n = 0;
    if (t == NULL || (text == NULL && len > 0))
        return PDR_EINVAL;
    if (!utf8_valid((const uint8_t *)text, len))
        return PDR_EINVAL;
    struct enc e = {.t = t, .text = text};
    int r = 0;
    if (t->n_steps > 0 && (e.md = pcre2_match_data_create(1, NULL)) == NULL)
        return PDR_ENOMEM;
    for (size_t i = 0; add_special && i < t->n_prefix && r == 0; i++)
        r = emit(&e, t->prefix[i]);
    if (r == 0 && len > 0)
        r = split_added(&e, 0, text, len);
    for (size_t i = 0; add_special && i < t->n_suffix && r == 0; i++)
        r = emit(&e, t->suffix[i]);
    pcre2_match_data_free(e.md);
    free(e.map);
    free(e.sym);
    free(e.heap);
    if (r != 0) {
        free(e.ids);
        return r;
    }
    *ids = e.ids;
    *n = e.n;
    return 0;
}
