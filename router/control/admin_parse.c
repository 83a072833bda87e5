/*
 * The admin API's request bodies (see admin.c): the optional drain body and the body of POST
 * /admin/v1/workers, parsed into values or refused with a message. Pure: any thread, fuzzed by
 * tests/fuzz/fuzz_admin.c.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "control.h"
#include "err.h"
#include "router.h"
#include "util.h"

int pdr__admin_parse_drain(const char *body, size_t n, uint64_t *timeout_ms, char *msg, size_t cap)
{
    *timeout_ms = 0;
    size_t k = 0;
    while (k < n && (body[k] == ' ' || body[k] == '\n' || body[k] == '\r' || body[k] == '\t'))
        k++;
    if (k == n)
        return 0;
    json_error_t jerr;
    json_t *o = json_loadb(body, n, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(o)) {
        snprintf(msg, cap, "malformed JSON body: expected an object like {\"timeout_ms\": 30000}%s%.60s",
                 o == NULL ? ": " : "", o == NULL ? jerr.text : "");
        json_decref(o);
        return PDR_EINVAL;
    }
    const char *key;
    json_t *v;
    int rc = 0;
    json_object_foreach(o, key, v)
    {
        if (strcmp(key, "timeout_ms") != 0) {
            snprintf(msg, cap, "unknown field \"%.40s\" in the drain body (only timeout_ms)", key);
            rc = PDR_EINVAL;
        } else if (json_is_null(v)) {
            *timeout_ms = 0;
        } else if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                   (uint64_t)json_integer_value(v) > PDR_ADMIN_MAX_DRAIN_TIMEOUT_MS) {
            snprintf(msg, cap, "timeout_ms must be an integer from 0 (no timeout) to %llu",
                     (unsigned long long)PDR_ADMIN_MAX_DRAIN_TIMEOUT_MS);
            rc = PDR_EINVAL;
        } else {
            *timeout_ms = (uint64_t)json_integer_value(v);
        }
    }
    json_decref(o);
    return rc;
}

int pdr__admin_parse_worker(const char *body, size_t n, int *role, pdr_worker_conf_t *conf,
                            char **labels_json, char pool[64], char *msg, size_t cap)
{
    *role = -1;
    pool[0] = '\0';
    *labels_json = NULL;
    memset(conf, 0, sizeof(*conf));
    conf->bootstrap_port = -1;
    json_error_t jerr;
    json_t *o = json_loadb(body, n, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(o)) {
        snprintf(msg, cap,
                 "malformed JSON body: expected an object like "
                 "{\"role\":\"prefill\",\"url\":\"http://10.0.0.5:30000\","
                 "\"bootstrap_port\":8998}%s%.60s",
                 o == NULL ? ": " : "", o == NULL ? jerr.text : "");
        json_decref(o);
        return PDR_EINVAL;
    }
    int rc = 0;
    const char *key;
    json_t *v;
    const char *url = NULL;
    int bport = -1;
    json_t *labels = NULL;
    json_object_foreach(o, key, v)
    {
        if (rc != 0)
            break;
        if (strcmp(key, "role") == 0) {
            const char *s = json_string_value(v);
            if (s == NULL || (*role = pdr_role_parse(s, strlen(s))) < 0) {
                snprintf(msg, cap, "role must be \"prefill\" or \"decode\"");
                rc = PDR_EINVAL;
            }
        } else if (strcmp(key, "pool") == 0) {
            const char *s = json_string_value(v);
            size_t len = s != NULL ? strlen(s) : 0;
            int ok = len >= 1 && len < 64;
            for (size_t i = 0; ok && i < len; i++)
                ok = (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-' ||
                     s[i] == '_';
            if (!ok) {
                snprintf(msg, cap, "pool must be a pool name (1..63 characters of a-z, 0-9, '-' and '_')");
                rc = PDR_EINVAL;
            } else {
                memcpy(pool, s, len + 1);
            }
        } else if (strcmp(key, "url") == 0) {
            if ((url = json_string_value(v)) == NULL) {
                snprintf(msg, cap, "url must be a string like \"http://10.0.0.5:30000\"");
                rc = PDR_EINVAL;
            }
        } else if (strcmp(key, "bootstrap_port") == 0) {
            if (json_is_null(v)) {
                bport = -1;
            } else if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 65535) {
                snprintf(msg, cap, "bootstrap_port must be an integer from 1 to 65535, or null");
                rc = PDR_EINVAL;
            } else {
                bport = (int)json_integer_value(v);
            }
        } else if (strcmp(key, "labels") == 0) {
            const char *lk;
            json_t *lv;
            if (!json_is_object(v)) {
                snprintf(msg, cap, "labels must be an object of strings");
                rc = PDR_EINVAL;
            } else {
                json_object_foreach(v, lk, lv) if (!json_is_string(lv) || strlen(lk) > 63 ||
                                                   strlen(json_string_value(lv)) > 253)
                {
                    snprintf(msg, cap,
                             "labels must be an object of strings (keys up to 63 bytes, values up to 253)");
                    rc = PDR_EINVAL;
                    break;
                }
                if (rc == 0 && json_object_size(v) > 32) {
                    snprintf(msg, cap, "at most 32 labels");
                    rc = PDR_EINVAL;
                }
                labels = v;
            }
        } else {
            snprintf(msg, cap, "unknown field \"%.40s\" (expected role, url, bootstrap_port, pool, labels)",
                     key);
            rc = PDR_EINVAL;
        }
    }
    if (rc == 0 && (*role < 0 || url == NULL)) {
        snprintf(msg, cap, "role and url are required");
        rc = PDR_EINVAL;
    }
    if (rc == 0 && *role == PDR_ROLE_DECODE && bport >= 0) {
        snprintf(msg, cap, "bootstrap_port is only valid for prefill workers");
        rc = PDR_EINVAL;
    }
    if (rc == 0) {
        char err[200];
        int e = pdr_worker_conf_parse_url(url, conf, err, sizeof(err));
        if (e != 0) {
            snprintf(msg, cap, "url: %s", err);
            rc = e == PDR_ENOMEM ? PDR_ENOMEM : PDR_EINVAL;
        } else {
            conf->bootstrap_port = bport;
        }
    }
    if (rc == 0) {
        json_t *empty = labels == NULL ? json_object() : NULL;
        *labels_json = json_dumps(labels != NULL ? labels : empty, JSON_COMPACT | JSON_SORT_KEYS);
        json_decref(empty);
        if (*labels_json == NULL) {
            snprintf(msg, cap, "out of memory");
            rc = PDR_ENOMEM;
        }
    }
    if (rc != 0) {
        pdr_worker_conf_clear(conf);
        *role = -1;
    }
    json_decref(o);
    return rc;
}
