/*
 * JSON for the Jinja engine: the tojson filter as transformers defines it (Python's json.dumps with
 * ensure_ascii=False: only '"', '\\' and the control characters escaped; ", " and ": " between items, or
 * "," and newlines with indent; keys in their order unless sort_keys), and the context's jansson values
 * turned into Jinja values. Runs within one render.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "jinja_internal.h"

static void put_s(jj_render_t *r, jj_out_t *o, const char *s)
{
    pdr__jj_out_put(r, o, s, strlen(s));
}

static void put_json_str(jj_render_t *r, jj_out_t *o, const char *p, size_t n)
{
    put_s(r, o, "\"");
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        char esc[8] = {0};
        switch (c) {
        case '"':
            memcpy(esc, "\\\"", 3);
            break;
        case '\\':
            memcpy(esc, "\\\\", 3);
            break;
        case '\n':
            memcpy(esc, "\\n", 3);
            break;
        case '\r':
            memcpy(esc, "\\r", 3);
            break;
        case '\t':
            memcpy(esc, "\\t", 3);
            break;
        case '\b':
            memcpy(esc, "\\b", 3);
            break;
        case '\f':
            memcpy(esc, "\\f", 3);
            break;
        default:
            if (c < 0x20)
                snprintf(esc, sizeof(esc), "\\u%04x", c);
        }
        if (esc[0] == '\0')
            continue;
        pdr__jj_out_put(r, o, p + run, i - run);
        put_s(r, o, esc);
        run = i + 1;
    }
    pdr__jj_out_put(r, o, p + run, n - run);
    put_s(r, o, "\"");
}

static void put_indent(jj_render_t *r, jj_out_t *o, int indent, int level)
{
    put_s(r, o, "\n");
    for (long i = 0; i < (long)indent * level; i++)
        put_s(r, o, " ");
}

static int key_cmp(const void *a, const void *b)
{
    const jj_str_t *x = ((const jj_val_t *)a)->u.s, *y = ((const jj_val_t *)b)->u.s;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, n);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

void pdr__jj_out_json(jj_render_t *r, jj_out_t *o, jj_val_t v, int indent, int sort, int level)
{
    char buf[64];
    if (level > JJ_VALUE_DEPTH)
        pdr__jj_fail(r, PDR_ETOOBIG, "tojson: nesting deeper than %d (or a circular reference)",
                     JJ_VALUE_DEPTH);
    switch (v.type) {
    case JV_NONE:
        put_s(r, o, "null");
        return;
    case JV_BOOL:
        put_s(r, o, v.u.i ? "true" : "false");
        return;
    case JV_INT:
    case JV_FLOAT:
        if (v.type == JV_FLOAT && isnan(v.u.f))
            put_s(r, o, "NaN");
        else if (v.type == JV_FLOAT && isinf(v.u.f))
            put_s(r, o, v.u.f < 0 ? "-Infinity" : "Infinity");
        else
            pdr__jj_out_str(r, o, v);
        return;
    case JV_STR:
        put_json_str(r, o, v.u.s->p, v.u.s->len);
        return;
    case JV_LIST:
        if (v.u.l->n == 0) {
            put_s(r, o, "[]");
            return;
        }
        put_s(r, o, "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i)
                put_s(r, o, indent >= 0 ? "," : ", ");
            if (indent >= 0)
                put_indent(r, o, indent, level + 1);
            pdr__jj_out_json(r, o, v.u.l->v[i], indent, sort, level + 1);
        }
        if (indent >= 0)
            put_indent(r, o, indent, level);
        put_s(r, o, "]");
        return;
    case JV_DICT: {
        if (v.flags & JF_NS)
            break;
        if (v.u.d->n == 0) {
            put_s(r, o, "{}");
            return;
        }
        /* Keys as json.dumps writes them: strings as they are, numbers, booleans and None spelled. */
        jj_val_t *keys = pdr__jj_ralloc(r, v.u.d->n * 2 * sizeof(*keys));
        for (size_t i = 0; i < v.u.d->n; i++) {
            jj_val_t k = v.u.d->k[i];
            if (k.type == JV_BOOL || k.type == JV_NONE)
                k = pdr__jj_cstr(r,
                                 k.type == JV_NONE ? "null"
                                 : k.u.i           ? "true"
                                                   : "false",
                                 k.type == JV_NONE ? 4
                                 : k.u.i           ? 4
                                                   : 5);
            else if (k.type == JV_INT || k.type == JV_FLOAT)
                k = pdr__jj_tostr(r, k);
            else if (k.type != JV_STR)
                pdr__jj_fail(r, PDR_EINVAL, "tojson: keys must be str, int, float, bool or None, not %s",
                             pdr__jj_type_name(k));
            keys[2 * i] = k;
            keys[2 * i + 1] = v.u.d->v[i];
        }
        if (sort)
            qsort(keys, v.u.d->n, 2 * sizeof(*keys), key_cmp);
        put_s(r, o, "{");
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i)
                put_s(r, o, indent >= 0 ? "," : ", ");
            if (indent >= 0)
                put_indent(r, o, indent, level + 1);
            put_json_str(r, o, keys[2 * i].u.s->p, keys[2 * i].u.s->len);
            put_s(r, o, ": ");
            pdr__jj_out_json(r, o, keys[2 * i + 1], indent, sort, level + 1);
        }
        if (indent >= 0)
            put_indent(r, o, indent, level);
        put_s(r, o, "}");
        return;
    }
    default:
        break;
    }
    (void)buf;
    pdr__jj_fail(r, PDR_EINVAL, "tojson: object of type %s is not JSON serializable", pdr__jj_type_name(v));
}

jj_val_t pdr__jj_from_json(jj_render_t *r, const json_t *j, unsigned depth)
{
    if (depth > JJ_VALUE_DEPTH)
        pdr__jj_fail(r, PDR_ETOOBIG, "the context nests deeper than %d", JJ_VALUE_DEPTH);
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        jj_dict_t *d = pdr__jj_dict_new(r, json_object_size(j));
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v)
        {
            size_t i = d->n++;
            d->k[i] = pdr__jj_cstr(r, k, strlen(k));
            d->v[i] = pdr__jj_from_json(r, v, depth + 1);
        }
        return pdr__jj_dictv(d);
    }
    case JSON_ARRAY: {
        jj_list_t *l = pdr__jj_list_new(r, json_array_size(j));
        for (size_t i = 0; i < l->n; i++)
            l->v[i] = pdr__jj_from_json(r, json_array_get(j, i), depth + 1);
        return pdr__jj_listv(l, 0);
    }
    case JSON_STRING:
        return pdr__jj_cstr(r, json_string_value(j), json_string_length(j));
    case JSON_INTEGER:
        return pdr__jj_int((int64_t)json_integer_value(j));
    case JSON_REAL:
        return pdr__jj_float(json_real_value(j));
    case JSON_TRUE:
        return pdr__jj_bool(1);
    case JSON_FALSE:
        return pdr__jj_bool(0);
    default:
        return pdr__jj_none();
    }
}
