/*
 * The schema table (schema.c) as text: a key's default as the docs show it, and the whole table for
 * `pdrouter --print-schema`. Pure functions, any thread.
 */
#include <stdlib.h>
#include <string.h>
#include "err.h"
#include "ticket.h"
#include "config_internal.h"
#include "defaults.h"
#include "schema.h"
#include <stdio.h>

const char *pdr_conf_default_text(const pdr_conf_key_t *k, char *out, size_t outlen)
{
    static const char *const relays[] = {"first_byte", "after_prefill"};
    static const char *const seeds[] = {"smallest_tree", "consistent_hash"};
    out[0] = '\0';
    if (k->flags & PDR_KEY_REQUIRED)
        return out;
    switch (k->type) {
    case PDR_CT_INT:
    case PDR_CT_INT64:
    case PDR_CT_BPORT:
        snprintf(out, outlen, "%lld", (long long)k->def_i);
        break;
    case PDR_CT_DOUBLE:
        snprintf(out, outlen, "%g", k->def_d);
        break;
    case PDR_CT_BOOL:
        snprintf(out, outlen, "%s", k->def_i ? "true" : "false");
        break;
    case PDR_CT_PROTOCOL:
        snprintf(out, outlen, "%s", pdr_protocol_name((pdr_protocol_t)k->def_i));
        break;
    case PDR_CT_POLICY:
        snprintf(out, outlen, "%s", pdr_policy_name((pdr_policy_kind_t)k->def_i));
        break;
    case PDR_CT_RELAY:
        snprintf(out, outlen, "%s", relays[k->def_i != 0]);
        break;
    case PDR_CT_SEED:
        snprintf(out, outlen, "%s", seeds[k->def_i != 0]);
        break;
    case PDR_CT_UNKNOWN:
        snprintf(out, outlen, "%s", k->def_i ? "refuse" : "allow");
        break;
    case PDR_CT_AFFINITY:
        snprintf(out, outlen, "%s", pdr_affinity_mode_name((int)k->def_i));
        break;
    case PDR_CT_TLS_VER:
        snprintf(out, outlen, "%s", k->def_i == PDR_TLS_1_3 ? "TLS1.3" : "TLS1.2");
        break;
    case PDR_CT_SCHEME:
        snprintf(out, outlen, "%s", k->def_i ? "https" : "http");
        break;
    default:
        snprintf(out, outlen, "%s", k->def_s != NULL ? k->def_s : k->def_doc != NULL ? k->def_doc : "");
        break;
    }
    return out;
}

void pdr_conf_schema_print(FILE *out)
{
    static const char *const types[] = {
        "integer",   "integer",  "number",         "boolean",  "string",   "string or null",
        "path",      "protocol", "policy",         "level",    "relay",    "seed",
        "tls",       "scheme",   "bootstrap_port", "hostname", "resolver", "selector",
        "namespace", "url",      "annotation",     "unknown",  "affinity",
    };
    /* One name per type: PDR_CT_AFFINITY is the last of pdr_ctype_t (a type added after it goes here too). */
    _Static_assert(sizeof(types) / sizeof(types[0]) == PDR_CT_AFFINITY + 1, "a schema type without a name");
    static const char *const reloads[] = {"live", "restart", "restart_raise", "restart_unset", "start"};
    for (size_t i = 0; i < pdr_conf_nkeys; i++) {
        const pdr_conf_key_t *k = &pdr_conf_keys[i];
        char def[128];
        int numeric = k->type == PDR_CT_INT || k->type == PDR_CT_INT64 || k->type == PDR_CT_DOUBLE ||
                      k->type == PDR_CT_BPORT;
        fprintf(out, "%s\t%s\t%s\t", k->path, types[k->type], pdr_conf_default_text(k, def, sizeof(def)));
        if (numeric)
            fprintf(out, "%lld\t%lld\t", (long long)k->min, (long long)k->max);
        else
            fputs("\t\t", out);
        fprintf(out, "%s\t%s\t%s\t%s\n", reloads[k->reload], k->flag != NULL ? k->flag : "",
                k->flag_sec != NULL ? k->flag_sec : "", k->doc);
    }
}
