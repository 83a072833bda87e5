/*
 * Decoding of one KV event payload (a msgpack KVEventBatch, docs/internals/kv-events.md) into plain C
 * arrays. Strict: anything that does not fit the schema is an error with a message naming the field and
 * its index; nothing is applied from a malformed payload. Any thread; no shared state.
 *
 * Memory: before msgpack-c sees the bytes, a pre-scan checks that every container's element count fits
 * in the bytes that are left (each element needs at least one byte), so msgpack-c's allocations stay
 * within a small multiple of the payload's length whatever its headers claim; the payload itself is
 * capped at PDR_KV_MAX_PAYLOAD. msgpack-c's own nesting limit (32 levels) turns deeper input into an
 * error.
 */
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "kvevents.h"

typedef struct dec {
    char *err;
    size_t errlen;
} dec_t;

static int fail(dec_t *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(dec_t *d, const char *fmt, ...)
{
    if (d->err != NULL && d->errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(d->err, d->errlen, fmt, ap);
        va_end(ap);
    }
    return PDR_EPROTO;
}

static const char *type_name(const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_NIL:
        return "nil";
    case MSGPACK_OBJECT_BOOLEAN:
        return "bool";
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        return "int";
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        return "float";
    case MSGPACK_OBJECT_STR:
        return "str";
    case MSGPACK_OBJECT_ARRAY:
        return "array";
    case MSGPACK_OBJECT_MAP:
        return "map";
    case MSGPACK_OBJECT_BIN:
        return "bin";
    default:
        return "ext";
    }
}

static uint64_t be(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/*
 * Walks the msgpack encoding of buf[0..len) without building anything: one value, well formed, each
 * container's count at most the bytes left. Returns 0 or PDR_EPROTO.
 */
static int prescan(dec_t *d, const uint8_t *buf, size_t len)
{
    size_t pos = 0;
    uint64_t pending = 1; /* values still to read */
    while (pending > 0) {
        if (pos >= len)
            return fail(d, "payload truncated at byte %zu of %zu", pos, len);
        uint8_t b = buf[pos++];
        pending--;
        uint64_t skip = 0, add = 0;
        size_t hdr = 0; /* bytes of length that follow the first byte */
        int kind = 0;   /* 0 scalar, 1 raw (skip the length read), 2 array, 3 map, 4 ext (length + type) */
        if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
            /* fixint, nil, bool */
        } else if (b >= 0x80 && b <= 0x8f) {
            add = 2u * (b & 0x0f);
        } else if (b >= 0x90 && b <= 0x9f) {
            add = b & 0x0f;
        } else if (b >= 0xa0 && b <= 0xbf) {
            skip = b & 0x1f;
        } else {
            switch (b) {
            case 0xc4:
            case 0xc5:
            case 0xc6: /* bin 8/16/32 */
                hdr = (size_t)1 << (b - 0xc4), kind = 1;
                break;
            case 0xc7:
            case 0xc8:
            case 0xc9: /* ext 8/16/32 */
                hdr = (size_t)1 << (b - 0xc7), kind = 4;
                break;
            case 0xca:
                skip = 4;
                break;
            case 0xcb:
                skip = 8;
                break;
            case 0xcc:
            case 0xcd:
            case 0xce:
            case 0xcf:
                skip = (uint64_t)1 << (b - 0xcc);
                break;
            case 0xd0:
            case 0xd1:
            case 0xd2:
            case 0xd3:
                skip = (uint64_t)1 << (b - 0xd0);
                break;
            case 0xd4:
            case 0xd5:
            case 0xd6:
            case 0xd7:
            case 0xd8: /* fixext 1..16 + type */
                skip = 1 + ((uint64_t)1 << (b - 0xd4));
                break;
            case 0xd9:
            case 0xda:
            case 0xdb: /* str 8/16/32 */
                hdr = (size_t)1 << (b - 0xd9), kind = 1;
                break;
            case 0xdc:
            case 0xdd:
                hdr = b == 0xdc ? 2 : 4, kind = 2;
                break;
            case 0xde:
            case 0xdf:
                hdr = b == 0xde ? 2 : 4, kind = 3;
                break;
            default:
                return fail(d, "invalid msgpack byte 0x%02x at byte %zu", b, pos - 1);
            }
        }
        if (hdr > 0) {
            if (len - pos < hdr)
                return fail(d, "payload truncated at byte %zu of %zu", pos, len);
            uint64_t n = be(buf + pos, hdr);
            pos += hdr;
            if (kind == 1)
                skip = n;
            else if (kind == 4)
                skip = n + 1;
            else if (kind == 2)
                add = n;
            else
                add = 2 * n;
        }
        if (skip > len - pos)
            return fail(d, "payload truncated at byte %zu of %zu", pos, len);
        pos += (size_t)skip;
        pending += add;
        if (pending > len - pos)
            return fail(d, "payload truncated: %llu values announced, %zu bytes left",
                        (unsigned long long)pending, len - pos);
    }
    if (pos != len)
        return fail(d, "%zu bytes after the batch", len - pos);
    return 0;
}

static int str_is(const msgpack_object *o, const char *s)
{
    size_t n = strlen(s);
    return o->type == MSGPACK_OBJECT_STR && o->via.str.size == n && memcmp(o->via.str.ptr, s, n) == 0;
}

/*
 * The fields of a struct in either encoding: an array of its fields in order after `skip` leading
 * elements (the tag), or a map from name to value. out[i] is NULL where the field is absent.
 */
static int fields(dec_t *d, const char *where, const msgpack_object *o, size_t skip, const char *const *names,
                  size_t nn, const msgpack_object **out)
{
    for (size_t i = 0; i < nn; i++)
        out[i] = NULL;
    if (o->type == MSGPACK_OBJECT_ARRAY) {
        for (size_t i = 0; i < nn && skip + i < o->via.array.size; i++)
            out[i] = &o->via.array.ptr[skip + i];
        return 0;
    }
    if (o->type != MSGPACK_OBJECT_MAP)
        return fail(d, "%s: expected an array or a map, got %s", where, type_name(o));
    for (uint32_t k = 0; k < o->via.map.size; k++) {
        const msgpack_object *key = &o->via.map.ptr[k].key;
        if (key->type != MSGPACK_OBJECT_STR)
            return fail(d, "%s: a map key is %s, expected str", where, type_name(key));
        for (size_t i = 0; i < nn; i++)
            if (str_is(key, names[i])) {
                if (out[i] != NULL)
                    return fail(d, "%s: duplicate key '%s'", where, names[i]);
                out[i] = &o->via.map.ptr[k].val;
            }
    }
    return 0;
}

/* An event's tag: the first element of an array, the "type" key of a map. */
static int event_tag(dec_t *d, const char *where, const msgpack_object *o, const msgpack_object **tag)
{
    static const char *const type_key[] = {"type"};
    *tag = NULL;
    if (o->type == MSGPACK_OBJECT_ARRAY) {
        if (o->via.array.size == 0)
            return fail(d, "%s: empty array, expected a tagged event", where);
        *tag = &o->via.array.ptr[0];
    } else {
        int rc = fields(d, where, o, 0, type_key, 1, tag);
        if (rc != 0)
            return rc;
        if (*tag == NULL)
            return fail(d, "%s: map without a 'type' key", where);
    }
    if ((*tag)->type != MSGPACK_OBJECT_STR)
        return fail(d, "%s: the tag is %s, expected str", where, type_name(*tag));
    return 0;
}

static uint64_t fold_bytes(const char *p, uint32_t n)
{
    /* FNV-1a, then a finalizer: a bytes hash (SHA-256 in vLLM) is already uniform; this only folds it. */
    uint64_t h = 0xcbf29ce484222325ULL;
    for (uint32_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)p[i]) * 0x100000001b3ULL;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h;
}

static int block_hash(dec_t *d, const char *where, size_t i, const msgpack_object *o, uint64_t *out)
{
    switch (o->type) {
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        *out = o->via.u64;
        return 0;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        *out = (uint64_t)o->via.i64;
        return 0;
    case MSGPACK_OBJECT_BIN:
        if (o->via.bin.size == 0)
            return fail(d, "%s[%zu]: empty bytes hash", where, i);
        *out = fold_bytes(o->via.bin.ptr, o->via.bin.size);
        return 0;
    default:
        return fail(d, "%s[%zu]: expected an int or bytes block hash, got %s", where, i, type_name(o));
    }
}

static int hashes(dec_t *d, const char *where, const msgpack_object *o, pdr_kv_event_t *ev)
{
    if (o == NULL)
        return fail(d, "%s: missing", where);
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return fail(d, "%s: expected an array, got %s", where, type_name(o));
    ev->n_hashes = o->via.array.size;
    ev->hashes = malloc((ev->n_hashes ? ev->n_hashes : 1) * sizeof(uint64_t));
    if (ev->hashes == NULL)
        return PDR_ENOMEM;
    for (size_t i = 0; i < ev->n_hashes; i++) {
        int rc = block_hash(d, where, i, &o->via.array.ptr[i], &ev->hashes[i]);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int medium_of(dec_t *d, const char *where, const msgpack_object *o, int *gpu)
{
    *gpu = 1;
    if (o == NULL || o->type == MSGPACK_OBJECT_NIL)
        return 0;
    if (o->type != MSGPACK_OBJECT_STR)
        return fail(d, "%s.medium: expected str or nil, got %s", where, type_name(o));
    *gpu = str_is(o, "GPU");
    return 0;
}

/* An optional int field (nil or absent: *has stays 0). */
static int opt_int(dec_t *d, const char *where, const char *name, const msgpack_object *o, int *has,
                   int64_t *out)
{
    if (o == NULL || o->type == MSGPACK_OBJECT_NIL)
        return 0;
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX)
        *out = (int64_t)o->via.u64;
    else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        *out = o->via.i64;
    else
        return fail(d, "%s.%s: expected int or nil, got %s", where, name, type_name(o));
    *has = 1;
    return 0;
}

/* An optional str field folded to 64 bits (nil or absent: 0; a name never folds to 0). */
static int opt_str(dec_t *d, const char *where, const char *name, const msgpack_object *o, uint64_t *out)
{
    *out = 0;
    if (o == NULL || o->type == MSGPACK_OBJECT_NIL)
        return 0;
    if (o->type != MSGPACK_OBJECT_STR)
        return fail(d, "%s.%s: expected str or nil, got %s", where, name, type_name(o));
    *out = pdr_kvindex_name_hash(o->via.str.ptr, o->via.str.size);
    return 0;
}

/* vLLM's hybrid-model fields: the KV cache group and, on stores, its kind and sliding window. */
static int group_of(dec_t *d, const char *where, const msgpack_object *g, const msgpack_object *kind,
                    const msgpack_object *window, pdr_kv_event_t *ev)
{
    int has_group = 0, has_window = 0;
    int64_t window_v = 0;
    int rc = opt_int(d, where, "group_idx", g, &has_group, &ev->group);
    if (rc == 0 && has_group && ev->group < 0)
        rc = fail(d, "%s.group_idx: expected a non-negative int, got %lld", where, (long long)ev->group);
    if (rc == 0)
        rc = opt_str(d, where, "kv_cache_spec_kind", kind, &ev->kind_hash);
    if (rc == 0)
        rc = opt_int(d, where, "kv_cache_spec_sliding_window", window, &has_window, &window_v);
    if (rc == 0 && has_window)
        ev->kind_hash = pdr_mix64(ev->kind_hash ^ (uint64_t)window_v ^ 0x5bd1e9955bd1e995ULL);
    return rc;
}

static int stored(dec_t *d, const char *where, const msgpack_object *o, pdr_kv_event_t *ev)
{
    static const char *const names[] = {"block_hashes",
                                        "parent_block_hash",
                                        "token_ids",
                                        "block_size",
                                        "lora_id",
                                        "medium",
                                        "lora_name",
                                        "extra_keys",
                                        "group_idx",
                                        "kv_cache_spec_kind",
                                        "kv_cache_spec_sliding_window"};
    const msgpack_object *f[11];
    char w[96];
    int rc = fields(d, where, o, 1, names, 11, f);
    if (rc != 0)
        return rc;
    snprintf(w, sizeof(w), "%s.block_hashes", where);
    if ((rc = hashes(d, w, f[0], ev)) != 0)
        return rc;
    if (f[1] == NULL)
        return fail(d, "%s.parent_block_hash: missing", where);
    if (f[1]->type != MSGPACK_OBJECT_NIL) {
        snprintf(w, sizeof(w), "%s.parent_block_hash", where);
        if ((rc = block_hash(d, w, 0, f[1], &ev->parent)) != 0)
            return rc;
        ev->has_parent = 1;
    }
    if (f[3] == NULL)
        return fail(d, "%s.block_size: missing", where);
    if (f[3]->type != MSGPACK_OBJECT_POSITIVE_INTEGER || f[3]->via.u64 == 0 ||
        f[3]->via.u64 > PDR_KV_MAX_BLOCK_SIZE)
        return fail(d, "%s.block_size: expected an integer in 1..%u, got %s", where, PDR_KV_MAX_BLOCK_SIZE,
                    type_name(f[3]));
    ev->block_size = (uint32_t)f[3]->via.u64;
    if (f[2] == NULL)
        return fail(d, "%s.token_ids: missing", where);
    if (f[2]->type != MSGPACK_OBJECT_ARRAY)
        return fail(d, "%s.token_ids: expected an array, got %s", where, type_name(f[2]));
    ev->n_tokens = f[2]->via.array.size;
    if (ev->n_tokens != ev->n_hashes * ev->block_size)
        return fail(d, "%s.token_ids: %zu ids for %zu blocks of %u tokens", where, ev->n_tokens, ev->n_hashes,
                    ev->block_size);
    ev->tokens = malloc((ev->n_tokens ? ev->n_tokens : 1) * sizeof(uint32_t));
    if (ev->tokens == NULL)
        return PDR_ENOMEM;
    for (size_t i = 0; i < ev->n_tokens; i++) {
        const msgpack_object *t = &f[2]->via.array.ptr[i];
        if (t->type != MSGPACK_OBJECT_POSITIVE_INTEGER || t->via.u64 > UINT32_MAX)
            return fail(d, "%s.token_ids[%zu]: expected an integer in 0..2^32-1, got %s", where, i,
                        type_name(t));
        ev->tokens[i] = (uint32_t)t->via.u64;
    }
    if (f[4] != NULL && f[4]->type != MSGPACK_OBJECT_NIL) {
        if (f[4]->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
            ev->lora_id = (int64_t)f[4]->via.u64;
        else if (f[4]->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
            ev->lora_id = f[4]->via.i64;
        else
            return fail(d, "%s.lora_id: expected int or nil, got %s", where, type_name(f[4]));
        ev->has_lora = 1;
    }
    if ((rc = opt_str(d, where, "lora_name", f[6], &ev->lora_name)) != 0)
        return rc;
    if ((rc = group_of(d, where, f[8], f[9], f[10], ev)) != 0)
        return rc;
    return medium_of(d, where, f[5], &ev->gpu);
}

static int removed(dec_t *d, const char *where, const msgpack_object *o, pdr_kv_event_t *ev)
{
    static const char *const names[] = {"block_hashes", "medium", "group_idx"};
    const msgpack_object *f[3];
    char w[96];
    int rc = fields(d, where, o, 1, names, 3, f);
    if (rc != 0)
        return rc;
    snprintf(w, sizeof(w), "%s.block_hashes", where);
    if ((rc = hashes(d, w, f[0], ev)) != 0)
        return rc;
    if ((rc = group_of(d, where, f[2], NULL, NULL, ev)) != 0)
        return rc;
    return medium_of(d, where, f[1], &ev->gpu);
}

static void event_free(pdr_kv_event_t *ev)
{
    free(ev->hashes);
    free(ev->tokens);
    memset(ev, 0, sizeof(*ev));
}

void pdr_kv_batch_free(pdr_kv_batch_t *b)
{
    if (b == NULL)
        return;
    for (size_t i = 0; i < b->n_events; i++)
        event_free(&b->events[i]);
    free(b->events);
    memset(b, 0, sizeof(*b));
}

static int batch(dec_t *d, const msgpack_object *root, pdr_kv_batch_t *out)
{
    static const char *const names[] = {"ts", "events", "data_parallel_rank"};
    const msgpack_object *f[3];
    int rc = fields(d, "batch", root, 0, names, 3, f);
    if (rc != 0)
        return rc;
    if (f[0] == NULL)
        return fail(d, "batch.ts: missing");
    if (f[0]->type == MSGPACK_OBJECT_FLOAT64 || f[0]->type == MSGPACK_OBJECT_FLOAT32)
        out->ts = f[0]->via.f64;
    else if (f[0]->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        out->ts = (double)f[0]->via.u64;
    else
        return fail(d, "batch.ts: expected a float, got %s", type_name(f[0]));
    if (f[1] == NULL)
        return fail(d, "batch.events: missing");
    if (f[1]->type != MSGPACK_OBJECT_ARRAY)
        return fail(d, "batch.events: expected an array, got %s", type_name(f[1]));
    if (f[2] != NULL && f[2]->type != MSGPACK_OBJECT_NIL) {
        if (f[2]->type != MSGPACK_OBJECT_POSITIVE_INTEGER || f[2]->via.u64 > INT64_MAX)
            return fail(d, "batch.data_parallel_rank: expected a non-negative int or nil, got %s",
                        type_name(f[2]));
        out->has_dp_rank = 1;
        out->dp_rank = (int64_t)f[2]->via.u64;
    }
    uint32_t n = f[1]->via.array.size;
    out->events = calloc(n ? n : 1, sizeof(pdr_kv_event_t));
    if (out->events == NULL)
        return PDR_ENOMEM;
    for (uint32_t i = 0; i < n; i++) {
        const msgpack_object *e = &f[1]->via.array.ptr[i], *tag;
        char where[48];
        snprintf(where, sizeof(where), "events[%u]", i);
        if ((rc = event_tag(d, where, e, &tag)) != 0)
            return rc;
        pdr_kv_event_t *ev = &out->events[out->n_events];
        if (str_is(tag, "BlockStored")) {
            snprintf(where, sizeof(where), "events[%u] BlockStored", i);
            ev->kind = PDR_KV_BLOCK_STORED;
            out->n_events++;
            rc = stored(d, where, e, ev);
        } else if (str_is(tag, "BlockRemoved")) {
            snprintf(where, sizeof(where), "events[%u] BlockRemoved", i);
            ev->kind = PDR_KV_BLOCK_REMOVED;
            out->n_events++;
            rc = removed(d, where, e, ev);
        } else if (str_is(tag, "AllBlocksCleared")) {
            ev->kind = PDR_KV_ALL_CLEARED;
            out->n_events++;
        } else {
            out->n_unknown++;
        }
        if (rc != 0)
            return rc;
    }
    return 0;
}

int pdr_kv_batch_decode(const void *payload, size_t len, pdr_kv_batch_t *out, char *err, size_t errlen)
{
    dec_t d = {err, errlen};
    memset(out, 0, sizeof(*out));
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (len > PDR_KV_MAX_PAYLOAD) {
        fail(&d, "payload of %zu bytes is over the %u-byte ceiling", len, PDR_KV_MAX_PAYLOAD);
        return PDR_ETOOBIG;
    }
    if (len == 0)
        return fail(&d, "empty payload");
    int rc = prescan(&d, payload, len);
    if (rc != 0)
        return rc;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    msgpack_unpack_return r = msgpack_unpack_next(&u, payload, len, &off);
    /* msgpack-c answers NOMEM_ERROR both when its zone cannot grow and when the nesting is deeper than
     * its stack (32 levels); the pre-scan bounds the zone, so the second is by far the likelier. */
    if (r == MSGPACK_UNPACK_NOMEM_ERROR)
        rc = fail(&d, "msgpack: nested deeper than 32 levels, or out of memory");
    else if (r != MSGPACK_UNPACK_SUCCESS)
        rc = fail(&d, "msgpack: %s", r == MSGPACK_UNPACK_CONTINUE ? "truncated" : "parse error");
    else
        rc = batch(&d, &u.data, out);
    msgpack_unpacked_destroy(&u);
    if (rc == PDR_ENOMEM)
        fail(&d, "out of memory decoding a %zu-byte payload", len);
    if (rc != 0)
        pdr_kv_batch_free(out);
    return rc;
}

int pdr_kv_seq_decode(const void *frame, size_t len, uint64_t *seq)
{
    if (len != 8)
        return PDR_EPROTO;
    *seq = be(frame, 8);
    return 0;
}
