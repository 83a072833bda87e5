/*
 * The Jinja engine's public face: compiling a template (its text normalised as jinja2 does: every \r\n
 * and \r become \n, one trailing newline dropped), rendering it (a fresh arena and scope chain per call,
 * so renders of one template run concurrently), the arena, the limits and the error exit.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "err.h"
#include "jinja_internal.h"

struct jj_chunk {
    jj_chunk_t *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

#define JJ_CHUNK 65536

void *pdr__jj_alloc(jj_arena_t *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    jj_chunk_t *c = a->head;
    if (c == NULL || c->cap - c->used < n) {
        size_t cap = n > JJ_CHUNK / 4 ? n : JJ_CHUNK;
        if (cap > a->limit || a->used > a->limit - cap)
            return NULL;
        jj_chunk_t *nc = malloc(sizeof(*nc) + cap);
        if (nc == NULL)
            return NULL;
        nc->used = 0;
        nc->cap = cap;
        a->used += cap;
        /* A big block goes behind the current chunk, which keeps its free room for small ones. */
        if (c != NULL && cap != JJ_CHUNK) {
            nc->next = c->next;
            c->next = nc;
        } else {
            nc->next = c;
            a->head = nc;
        }
        c = nc;
    }
    void *p = c->data + c->used;
    c->used += n;
    return p;
}

void pdr__jj_arena_free(jj_arena_t *a)
{
    for (jj_chunk_t *c = a->head, *n; c != NULL; c = n) {
        n = c->next;
        free(c);
    }
    a->head = NULL;
    a->used = 0;
}

void pdr_jinja_limits_default(pdr_jinja_limits_t *l)
{
    l->max_template_bytes = (size_t)1 << 20;
    l->max_output_bytes = (size_t)16 << 20;
    l->max_memory_bytes = (size_t)256 << 20;
    l->max_loop_iterations = 1000000;
    l->max_depth = 64;
}

/* Writes "line:col: " for a byte offset of src. */
static int where(const char *src, size_t len, uint32_t pos, char *buf, size_t buflen)
{
    unsigned line = 1, col = 1;
    for (size_t i = 0; i < pos && i < len; i++) {
        if (src[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    return buflen ? snprintf(buf, buflen, "%u:%u: ", line, col) : 0;
}

void pdr__jj_verr(char *buf, size_t buflen, const char *src, size_t len, uint32_t pos, const char *fmt,
                  va_list ap)
{
    if (buflen == 0)
        return;
    int n = where(src, len, pos, buf, buflen);
    if (n < 0 || (size_t)n >= buflen)
        n = 0; /* no room for the position: the message alone */
    vsnprintf(buf + n, buflen - (size_t)n, fmt, ap);
}

/* The offset of the first byte that is not well-formed UTF-8 (RFC 3629), or len. */
static size_t utf8_invalid_at(const unsigned char *s, size_t len)
{
    for (size_t i = 0; i < len;) {
        unsigned c = s[i];
        size_t k = c < 0x80                ? 1
                   : c >= 0xc2 && c < 0xe0 ? 2
                   : c >= 0xe0 && c < 0xf0 ? 3
                   : c >= 0xf0 && c < 0xf5 ? 4
                                           : 0;
        if (k == 0 || k > len - i)
            return i;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xc0) != 0x80)
                return i;
        if ((c == 0xe0 && s[i + 1] < 0xa0) || (c == 0xed && s[i + 1] >= 0xa0) ||
            (c == 0xf0 && s[i + 1] < 0x90) || (c == 0xf4 && s[i + 1] >= 0x90))
            return i;
        i += k;
    }
    return len;
}

int pdr_jinja_compile(const char *text, size_t len, const pdr_jinja_limits_t *limits, pdr_jinja_tmpl_t **out,
                      char *err, size_t errlen)
{
    *out = NULL;
    if (errlen)
        err[0] = '\0';
    pdr_jinja_limits_t l;
    if (limits == NULL)
        pdr_jinja_limits_default(&l);
    else
        l = *limits;
    if (len > l.max_template_bytes) {
        snprintf(err, errlen, "1:1: the template's %zu bytes pass the limit of %zu", len,
                 l.max_template_bytes);
        return PDR_ETOOBIG;
    }
    pdr_jinja_tmpl_t *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        snprintf(err, errlen, "1:1: out of memory");
        return PDR_ENOMEM;
    }
    t->limits = l;
    /* The tree of a template is bounded by its text: a generous multiple of it, and never below 1 MiB. */
    t->arena.limit = len * 64 + ((size_t)1 << 20);
    t->src = malloc(len + 1);
    if (t->src == NULL) {
        free(t);
        snprintf(err, errlen, "1:1: out of memory");
        return PDR_ENOMEM;
    }
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '\r') {
            t->src[k++] = '\n';
            if (i + 1 < len && text[i + 1] == '\n')
                i++;
        } else {
            t->src[k++] = text[i];
        }
    }
    if (k > 0 && t->src[k - 1] == '\n')
        k--;
    t->src[k] = '\0';
    t->src_len = k;
    size_t bad = utf8_invalid_at((const unsigned char *)t->src, k);
    if (bad < k) {
        int n = where(t->src, k, (uint32_t)bad, err, errlen);
        if (n >= 0 && (size_t)n < errlen)
            snprintf(err + n, errlen - (size_t)n, "the template is not valid UTF-8");
        pdr_jinja_free(t);
        return PDR_EINVAL;
    }
    int r = pdr__jj_parse(t, err, errlen);
    if (r != 0) {
        pdr_jinja_free(t);
        return r;
    }
    *out = t;
    return 0;
}

void pdr_jinja_free(pdr_jinja_tmpl_t *t)
{
    if (t == NULL)
        return;
    pdr__jj_arena_free(&t->arena);
    free(t->src);
    free(t);
}

_Noreturn void pdr__jj_fail(jj_render_t *r, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pdr__jj_verr(r->err, r->errlen, r->t->src, r->t->src_len, r->pos, fmt, ap);
    va_end(ap);
    r->code = code;
    longjmp(r->jmp, 1);
}

void *pdr__jj_ralloc(jj_render_t *r, size_t n)
{
    void *p = pdr__jj_alloc(&r->arena, n);
    if (p == NULL)
        pdr__jj_fail(r, r->arena.used + n > r->arena.limit ? PDR_ETOOBIG : PDR_ENOMEM,
                     "the render's memory passes the limit of %zu bytes", r->arena.limit);
    return p;
}

void pdr__jj_count_iter(jj_render_t *r, uint64_t n)
{
    r->iters += n;
    if (r->iters > r->t->limits.max_loop_iterations)
        pdr__jj_fail(r, PDR_ETOOBIG, "loop iterations pass the limit of %llu",
                     (unsigned long long)r->t->limits.max_loop_iterations);
}

void pdr__jj_charge(jj_render_t *r, size_t bytes)
{
    r->bytes += bytes;
    if (r->bytes >= 4096) {
        uint64_t n = r->bytes >> 12;
        r->bytes &= 4095;
        pdr__jj_count_iter(r, n);
    }
}

static void render_guarded(jj_render_t *r, const json_t *context, jj_out_t *out)
{
    if (setjmp(r->jmp) != 0)
        return;
    jj_scope_t *ctx = pdr__jj_ralloc(r, sizeof(*ctx)), *top = pdr__jj_ralloc(r, sizeof(*top));
    memset(ctx, 0, sizeof(*ctx));
    memset(top, 0, sizeof(*top));
    static const struct {
        const char *name;
        int fn;
    } globals[] = {{"raise_exception", JJ_FN_RAISE},
                   {"strftime_now", JJ_FN_STRFTIME},
                   {"namespace", JJ_FN_NAMESPACE},
                   {"range", JJ_FN_RANGE},
                   {"dict", JJ_FN_DICT}};
    for (size_t i = 0; i < sizeof(globals) / sizeof(globals[0]); i++) {
        jj_val_t f = {.type = JV_FUNC};
        f.u.i = globals[i].fn;
        pdr__jj_dict_set(r, &ctx->vars, pdr__jj_cstr(r, globals[i].name, strlen(globals[i].name)), f);
    }
    if (context != NULL) {
        if (!json_is_object(context))
            pdr__jj_fail(r, PDR_EINVAL, "the context is not a JSON object");
        jj_val_t c = pdr__jj_from_json(r, context, 0);
        for (size_t i = 0; i < c.u.d->n; i++)
            pdr__jj_dict_set(r, &ctx->vars, c.u.d->k[i], c.u.d->v[i]);
    }
    top->parent = ctx;
    r->globals = top;
    r->out = out;
    pdr__jj_exec(r, r->t->root, top);
}

int pdr_jinja_render(const pdr_jinja_tmpl_t *t, const json_t *context, int64_t now, char **out,
                     size_t *outlen, char *err, size_t errlen)
{
    *out = NULL;
    *outlen = 0;
    if (errlen)
        err[0] = '\0';
    jj_render_t r = {.t = t, .err = err, .errlen = errlen, .now = now < 0 ? (int64_t)time(NULL) : now};
    r.arena.limit = t->limits.max_memory_bytes;
    jj_out_t o = {0};
    render_guarded(&r, context, &o);
    if (r.code == 0) {
        *out = malloc(o.len + 1);
        if (*out == NULL) {
            r.code = PDR_ENOMEM;
            snprintf(err, errlen, "1:1: out of memory");
        } else {
            if (o.len)
                memcpy(*out, o.p, o.len);
            (*out)[o.len] = '\0';
            *outlen = o.len;
        }
    }
    pdr__jj_arena_free(&r.arena);
    return r.code;
}
