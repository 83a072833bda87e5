/*
 * The JSON scanner declared in jsonscan.h, its public side: the top-level object, pdr_json_scan_object (one
 * record per top-level member, duplicate keys refused after decoding escapes), decoded keys
 * (pdr__jmember_key_is_escaped; the lookup pdr_jfind is inline in jsonscan.h) and the walkers over nested
 * arrays and objects (pdr_jarray_next, pdr_jobject_next), which read again on demand what the scan validated
 * but did not record, and pdr_jval_int and pdr_jt_name. The grammar below it is jsonscan_value.c's
 * (jsonscan_internal.h); the value types are jsonscan_types.h's.
 *
 * Invariants: the input is never written and never read past p + len; a call allocates at most once (the
 * duplicate-key table of a document with more than SMALL_MEMBERS members) and frees it before returning.
 * Reentrant, any thread.
 */
#include "jsonscan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "jsonscan_internal.h"

/* ---- Decoded keys: iteration, hashing, comparison. Keys have been validated before any of this. ---- */

typedef struct {
    const unsigned char *p, *end;
    unsigned char buf[4];
    unsigned nbuf, ibuf;
} key_iter_t;

static void key_iter_init(key_iter_t *it, const pdr_jmember_t *m)
{
    it->p = (const unsigned char *)m->key;
    it->end = it->p + m->key_len;
    it->nbuf = it->ibuf = 0;
}

/* The next byte of the decoded (UTF-8) key, or -1 at its end. */
static int key_iter_next(key_iter_t *it)
{
    if (it->ibuf < it->nbuf)
        return it->buf[it->ibuf++];
    if (it->p == it->end)
        return -1;
    unsigned c = *it->p;
    if (c != '\\') {
        it->p++;
        return (int)c;
    }
    c = it->p[1];
    it->p += 2;
    switch (c) {
    case 'b':
        return '\b';
    case 'f':
        return '\f';
    case 'n':
        return '\n';
    case 'r':
        return '\r';
    case 't':
        return '\t';
    case 'u':
        break;
    default:
        return (int)c; /* '"', '\\' or '/' */
    }
    uint32_t cp = (uint32_t)hex4((const char *)it->p);
    it->p += 4;
    if (cp >= 0xd800 && cp <= 0xdbff) {
        cp = 0x10000 + ((cp - 0xd800) << 10) + ((uint32_t)hex4((const char *)it->p + 2) - 0xdc00);
        it->p += 6;
    }
    if (cp < 0x80)
        return (int)cp;
    it->ibuf = 1;
    if (cp < 0x800) {
        it->buf[1] = (unsigned char)(0x80 | (cp & 0x3f));
        it->nbuf = 2;
        return (int)(0xc0 | (cp >> 6));
    }
    if (cp < 0x10000) {
        it->buf[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        it->buf[2] = (unsigned char)(0x80 | (cp & 0x3f));
        it->nbuf = 3;
        return (int)(0xe0 | (cp >> 12));
    }
    it->buf[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
    it->buf[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
    it->buf[3] = (unsigned char)(0x80 | (cp & 0x3f));
    it->nbuf = 4;
    return (int)(0xf0 | (cp >> 18));
}

/* FNV-1a (64-bit) of the decoded key. */
static uint64_t key_hash(const pdr_jmember_t *m)
{
    uint64_t h = 0xcbf29ce484222325ull;
    if (!m->key_escaped) {
        const unsigned char *p = (const unsigned char *)m->key, *end = p + m->key_len;
        while (p < end)
            h = (h ^ *p++) * 0x100000001b3ull;
        return h;
    }
    key_iter_t it;
    int c;
    key_iter_init(&it, m);
    while ((c = key_iter_next(&it)) >= 0)
        h = (h ^ (unsigned)c) * 0x100000001b3ull;
    return h;
}

static int keys_equal(const pdr_jmember_t *a, const pdr_jmember_t *b)
{
    if (!a->key_escaped && !b->key_escaped)
        return a->key_len == b->key_len && memcmp(a->key, b->key, a->key_len) == 0;
    key_iter_t ia, ib;
    int ca, cb;
    key_iter_init(&ia, a);
    key_iter_init(&ib, b);
    do {
        ca = key_iter_next(&ia);
        cb = key_iter_next(&ib);
        if (ca != cb)
            return 0;
    } while (ca >= 0);
    return 1;
}

int pdr__jmember_key_is_escaped(const pdr_jmember_t *m, const char *name)
{
    key_iter_t it;
    int c;
    key_iter_init(&it, m);
    while ((c = key_iter_next(&it)) >= 0) {
        if (*name == '\0' || (unsigned char)*name != (unsigned)c)
            return 0;
        name++;
    }
    return *name == '\0';
}

/*
 * ---- Duplicate detection for top-level keys. Up to SMALL_MEMBERS members: a linear scan of their hashes
 * on the stack (nothing to clear per call); past that, one heap table with open addressing. ----
 */

enum { SMALL_MEMBERS = 32 };

typedef struct {
    uint64_t hash;
    uint32_t idx1; /* member index + 1; 0 marks an empty slot */
} key_slot_t;

typedef struct {
    key_slot_t *slots; /* NULL while small[] is in use */
    size_t mask;
    uint64_t small[SMALL_MEMBERS];
} key_table_t;

/* Returns 1 when an earlier member has the same key as member i, else records member i and returns 0. */
static int key_table_insert(key_table_t *t, const pdr_jmember_t *members, size_t i, uint64_t h)
{
    if (t->slots == NULL) {
        for (size_t j = 0; j < i; j++)
            if (t->small[j] == h && keys_equal(&members[j], &members[i]))
                return 1;
        t->small[i] = h;
        return 0;
    }
    size_t pos = (size_t)h & t->mask;
    while (t->slots[pos].idx1 != 0) {
        const key_slot_t *e = &t->slots[pos];
        if (e->hash == h && keys_equal(&members[e->idx1 - 1], &members[i]))
            return 1;
        pos = (pos + 1) & t->mask;
    }
    t->slots[pos].hash = h;
    t->slots[pos].idx1 = (uint32_t)i + 1;
    return 0;
}

/*
 * Moves to a heap table when member SMALL_MEMBERS + 1 arrives. Sized once for the most members the
 * document can hold (each takes at least 4 bytes: "":0,) or max, whichever is less, at load factor
 * <= 1/2, so it never grows again.
 */
static int key_table_grow(key_table_t *t, size_t n, size_t max, size_t len)
{
    size_t bound = len / 4 + 1, cap = 4 * SMALL_MEMBERS;
    if (max < bound)
        bound = max;
    while (cap < 2 * bound)
        cap *= 2;
    key_slot_t *slots = calloc(cap, sizeof(*slots));
    if (slots == NULL)
        return PDR_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        size_t pos = (size_t)t->small[i] & (cap - 1);
        while (slots[pos].idx1 != 0)
            pos = (pos + 1) & (cap - 1);
        slots[pos].hash = t->small[i];
        slots[pos].idx1 = (uint32_t)i + 1;
    }
    t->slots = slots;
    t->mask = cap - 1;
    return 0;
}

/* Writes "duplicate key '...' at byte N" with at most 64 bytes of the raw key, cut on a UTF-8 boundary. */
static void report_duplicate(scan_t *s, const pdr_jmember_t *m)
{
    size_t shown = m->key_len, off = (size_t)(m->raw - s->start);
    const char *more = "";
    if (shown > 64) {
        shown = 64;
        while (shown > 0 && ((unsigned char)m->key[shown] & 0xc0) == 0x80)
            shown--;
        more = "...";
    }
    if (s->errlen > 0)
        snprintf(s->err, s->errlen, "duplicate key '%.*s%s' at byte %zu", (int)shown, m->key, more, off);
}

static const char *type_of_first_byte(char c)
{
    switch (c) {
    case '[':
        return "an array";
    case '"':
        return "a string";
    case 't':
    case 'f':
        return "a boolean";
    case 'n':
        return "null";
    default:
        return is_digit(c) || c == '-' ? "a number" : "not JSON";
    }
}

int pdr__json_scan_object(const char *p, size_t len, pdr_jmember_t *out, size_t max, size_t *n, char *err,
                          size_t errlen, int full_rc)
{
    scan_t s;
    key_table_t t;
    size_t count = 0;
    int rc = PDR_EINVAL;

    *n = 0;
    if (errlen > 0)
        err[0] = '\0';
    if (len == 0) {
        if (errlen > 0)
            snprintf(err, errlen, "empty request body: expected a JSON object");
        return PDR_EINVAL;
    }
    s.start = p;
    s.end = p + len;
    s.err = err;
    s.errlen = errlen;
    const char *q = skip_ws(p, s.end);
    if (q == s.end) {
        if (errlen > 0)
            snprintf(err, errlen, "empty request body (only whitespace): expected a JSON object");
        return PDR_EINVAL;
    }
    if (*q != '{') {
        if (errlen > 0)
            snprintf(err, errlen,
                     "malformed JSON at byte %zu: the request body must be a JSON object (found %s)",
                     (size_t)(q - p), type_of_first_byte(*q));
        return PDR_EINVAL;
    }

    t.slots = NULL;
    t.mask = 0;
    q = skip_ws(q + 1, s.end);
    if (q < s.end && *q == '}') {
        q++;
    } else {
        for (;;) {
            int escaped = 0;
            if (q == s.end) {
                pdr__json_fail(&s, q, "unexpected end of input: expected a string key");
                goto done;
            }
            if (*q != '"') {
                pdr__json_fail(&s, q, "expected a string key");
                goto done;
            }
            if (count == max) {
                snprintf(err, errlen, "too many top-level fields (at most %zu) at byte %zu", max,
                         (size_t)(q - p));
                rc = full_rc;
                goto done;
            }
            pdr_jmember_t *m = &out[count];
            m->raw = q;
            m->key = q + 1;
            if ((q = pdr__json_scan_string(&s, q + 1, &escaped)) == NULL)
                goto done;
            m->key_len = (size_t)(q - 1 - m->key);
            m->key_escaped = escaped;
            q = skip_ws(q, s.end);
            if (q == s.end || *q != ':') {
                pdr__json_fail(&s, q, "expected ':' after the key");
                goto done;
            }
            q = skip_ws(q + 1, s.end);
            if ((q = pdr__json_scan_value(&s, q, 1, &m->v)) == NULL)
                goto done;
            m->raw_len = (size_t)(q - m->raw);
            if (count == SMALL_MEMBERS && key_table_grow(&t, count, max, len) != 0) {
                if (errlen > 0)
                    snprintf(err, errlen, "out of memory checking %zu top-level keys", count + 1);
                rc = PDR_ENOMEM;
                goto done;
            }
            if (key_table_insert(&t, out, count, key_hash(m))) {
                report_duplicate(&s, m);
                goto done;
            }
            count++;
            q = skip_ws(q, s.end);
            if (q == s.end) {
                pdr__json_fail(&s, q, "unexpected end of input: expected ',' or '}'");
                goto done;
            }
            if (*q == '}') {
                q++;
                break;
            }
            if (*q != ',') {
                pdr__json_fail(&s, q, "expected ',' or '}'");
                goto done;
            }
            q = skip_ws(q + 1, s.end);
            if (q < s.end && *q == '}') {
                pdr__json_fail(&s, q, "trailing comma before '}'");
                goto done;
            }
        }
    }
    q = skip_ws(q, s.end);
    if (q != s.end) {
        pdr__json_fail(&s, q, "unexpected data after the top-level object");
        goto done;
    }
    *n = count;
    rc = 0;
done:
    free(t.slots);
    return rc;
}

/* The first byte of the next element or member of a container being walked, or NULL at its end. */
static const char *walk_next(const pdr_jval_t *c, size_t *pos, char close)
{
    const char *end = c->p + c->len;
    const char *p = skip_ws(c->p + (*pos == 0 ? 1 : *pos), end);
    if (p < end && *p == ',')
        p = skip_ws(p + 1, end);
    return p < end && *p != close ? p : NULL;
}

int pdr_jarray_next(const pdr_jval_t *arr, size_t *pos, pdr_jval_t *elem)
{
    scan_t s = {arr->p, arr->p + arr->len, NULL, 0};
    const char *p = arr->type == PDR_JT_ARRAY ? walk_next(arr, pos, ']') : NULL;
    if (p == NULL || (p = pdr__json_scan_value(&s, p, 1, elem)) == NULL)
        return 0;
    *pos = (size_t)(p - arr->p);
    return 1;
}

int pdr_jobject_next(const pdr_jval_t *obj, size_t *pos, pdr_jmember_t *m)
{
    scan_t s = {obj->p, obj->p + obj->len, NULL, 0};
    const char *p = obj->type == PDR_JT_OBJECT ? walk_next(obj, pos, '}') : NULL;
    int escaped = 0;
    if (p == NULL || *p != '"')
        return 0;
    m->raw = p;
    m->key = p + 1;
    if ((p = pdr__json_scan_string(&s, p + 1, &escaped)) == NULL)
        return 0;
    m->key_len = (size_t)(p - 1 - m->key);
    m->key_escaped = escaped;
    p = skip_ws(p, s.end);
    if (p == s.end || *p != ':')
        return 0;
    if ((p = pdr__json_scan_value(&s, skip_ws(p + 1, s.end), 1, &m->v)) == NULL)
        return 0;
    m->raw_len = (size_t)(p - m->raw);
    *pos = (size_t)(p - obj->p);
    return 1;
}

int pdr_jval_int(const pdr_jval_t *v, int64_t *out)
{
    const char *p = v->p, *end = v->p + v->len;
    int neg = 0;
    uint64_t acc = 0, limit;
    if (v->type != PDR_JT_INT || v->len == 0)
        return PDR_EINVAL;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    if (p == end)
        return PDR_EINVAL;
    for (; p < end; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (d > 9 || acc > (limit - d) / 10)
            return PDR_EINVAL;
        acc = acc * 10 + d;
    }
    if (neg)
        *out = acc == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)acc;
    else
        *out = (int64_t)acc;
    return 0;
}

const char *pdr_jt_name(int type)
{
    static const char *const names[] = {"none",   "null",   "true",  "false",  "integer",
                                        "number", "string", "array", "object", "mixed"};
    if (type < 0 || type >= (int)(sizeof(names) / sizeof(names[0])))
        return "unknown";
    return names[type];
}
