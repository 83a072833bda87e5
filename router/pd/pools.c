/*
 * Which pool serves a request (config `pools:`): the JSON body's "model" names it; without a model the
 * request goes to the only pool, and with several pools it is refused. The one-pool shorthand takes any
 * model, or none, as before. Also the merged model list that GET /v1/models answers with several pools.
 * Pure functions of a config snapshot and a parsed body; any loop thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "jsonscan.h"
#include "pd.h"
#include "pd_internal.h"

/* "a, b, c" of every pool's models into out (cut with ", ..." past cap). */
static void served_list(const pdr_config_t *c, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    for (size_t i = 0; i < c->n_pools; i++)
        for (size_t k = 0; k < c->pools[i].n_models; k++) {
            const char *m = c->pools[i].models[k];
            if (n + strlen(m) + 8 >= cap) {
                snprintf(out + n, cap - n, "%s...", n ? ", " : "");
                return;
            }
            n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? ", " : "", m);
        }
}

int pdr__request_pool(const pdr_config_t *c, const pdr_pdreq_t *pr, long *pool, char *msg, size_t cap)
{
    char served[320];
    *pool = 0;
    if (c->n_pools == 0)
        return 0;
    const pdr_jmember_t *m = pdr_jfind(pr->m, pr->n, "model");
    if (m == NULL || m->v.type == PDR_JT_NULL) {
        if (c->n_pools == 1)
            return 0;
        served_list(c, served, sizeof(served));
        snprintf(msg, cap, "model: required, the router serves several pools (models: %s)", served);
        return 400;
    }
    if (m->v.type != PDR_JT_STRING) {
        snprintf(msg, cap, "model: expected a string, got %s", pdr_jt_name(m->v.type));
        return 400;
    }
    /* The raw value is "...": without escapes its bytes are the name; with them, decode (rare). */
    const char *name = m->v.p + 1;
    size_t len = m->v.len - 2;
    json_t *decoded = NULL;
    if (memchr(name, '\\', len) != NULL) {
        decoded = json_loadb(m->v.p, m->v.len, JSON_DECODE_ANY, NULL);
        if (decoded == NULL || !json_is_string(decoded)) {
            json_decref(decoded);
            snprintf(msg, cap, "model: not a valid string");
            return 400;
        }
        name = json_string_value(decoded);
        len = json_string_length(decoded);
    }
    *pool = pdr_config_pool_for_model(c, name, len);
    if (*pool >= 0) {
        json_decref(decoded);
        return 0;
    }
    char shown[80];
    size_t k = 0;
    for (; k < len && k < 64; k++)
        shown[k] = (unsigned char)name[k] >= 0x20 && name[k] != 0x7f ? name[k] : '?';
    if (k < len)
        memcpy(shown + k, "...", 3), k += 3;
    shown[k] = '\0';
    json_decref(decoded);
    served_list(c, served, sizeof(served));
    snprintf(msg, cap, "The model `%s` does not exist. Served: %s", shown, served);
    return 404;
}

int pdr_pd_request_pool(const pdr_config_t *c, const pdr_pdreq_t *pr, long *pool, char *msg, size_t cap)
{
    return pdr__request_pool(c, pr, pool, msg, cap);
}

const char *pdr_pd_routing_text(const pdr_pdreq_t *pr, size_t *len)
{
    return pdr__pd_routing_text(pr, len);
}

char *pdr__models_list_json(const pdr_config_t *c, uint64_t created, size_t *len)
{
    json_t *data = json_array();
    for (size_t i = 0; data != NULL && i < c->n_pools; i++)
        for (size_t k = 0; k < c->pools[i].n_models; k++)
            json_array_append_new(data, json_pack("{s:s,s:s,s:I,s:s,s:s}", "id", c->pools[i].models[k],
                                                  "object", "model", "created", (json_int_t)created,
                                                  "owned_by", "pdrouter", "pool", c->pools[i].name));
    json_t *o = data != NULL ? json_pack("{s:s,s:o}", "object", "list", "data", data) : NULL;
    char *s = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    *len = s != NULL ? strlen(s) : 0;
    return s;
}
