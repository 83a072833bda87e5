/*
 * What admission needs of a request (admission.h, pdr_admit_tag_of), read the same way wherever the
 * request comes from: the front door's h2o request (router/pd/queue.c) or a gateway's ext_proc stream
 * (router/gateway/). Any thread; no state.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "admission.h"
#include "util.h"

/* The body's top-level integer "priority", when it has one. */
static int body_priority(const pdr_pdreq_t *pr, int64_t *out)
{
    for (size_t i = 0; pr != NULL && i < pr->n; i++) {
        const pdr_jmember_t *m = &pr->m[i];
        if (pdr_jmember_key_is(m, "priority") && m->v.type == PDR_JT_INT)
            return pdr_parse_int64(m->v.p, m->v.len, INT32_MIN, INT32_MAX, out) == 0;
    }
    return 0;
}

/* The value of header `name` (any case; config/validate.c checks the names fit), or NULL. */
static const char *header(pdr_admit_header_fn hdr, void *ctx, const char *name, size_t *len)
{
    char low[PDR_CONFIG_HEADER_NAME_MAX];
    size_t n = name != NULL ? strlen(name) : 0;
    if (n == 0 || n >= sizeof(low))
        return NULL;
    for (size_t i = 0; i <= n; i++)
        low[i] = (char)tolower((unsigned char)name[i]);
    return hdr(ctx, low, n, len);
}

void pdr_admit_tag_of(const pdr_config_t *c, pdr_admit_header_fn hdr, void *ctx, const pdr_pdreq_t *body,
                      uint64_t t0_ns, pdr_admit_tag_t *tag)
{
    const char *v;
    size_t len = 0;
    const char *cl = c->admission.classes, *def = c->admission.default_class;
    tag->cls = def != NULL ? pdr_config_class_index(cl, def, strlen(def)) : 0;
    int named = 0;
    if (cl != NULL && (v = header(hdr, ctx, c->admission.class_header, &len)) != NULL) {
        int k = pdr_config_class_index(cl, v, len);
        if (k >= 0) {
            tag->cls = k;
            named = 1;
        }
    }
    int64_t prio;
    if (!named && cl != NULL && c->admission.priority_field && body_priority(body, &prio)) {
        /* vLLM's and sglang's field: the lower, the more important; the classes in that order. */
        int n = pdr_config_class_count(cl);
        tag->cls = prio <= 0 ? 0 : prio >= n ? n - 1 : (int)prio;
    }
    if (tag->cls < 0)
        tag->cls = 0;
    tag->key = 0;
    if (c->admission.fairness_header != NULL &&
        (v = header(hdr, ctx, c->admission.fairness_header, &len)) != NULL)
        tag->key = pdr_fairq_key(v, len);
    uint64_t ms = (uint64_t)c->limits.queue_timeout_ms;
    if (c->admission.timeout_header != NULL &&
        (v = header(hdr, ctx, c->admission.timeout_header, &len)) != NULL && len > 0 && len < 12) {
        char num[12], *end;
        memcpy(num, v, len);
        num[len] = '\0';
        long long t = strtoll(num, &end, 10);
        if (*end == '\0' && t >= 0 && (uint64_t)t < ms)
            ms = (uint64_t)t;
    }
    tag->deadline_ns = t0_ns + ms * 1000000ull;
}
