/*
 * --dp-aware (config dp_aware): the static workers' dp_size learned from the workers themselves, as the
 * sglang router does: GET URL/get_server_info and its integer "dp_size". Runs in main before the loops
 * start (a blocking libcurl call per worker, bounded by health.timeout_ms), on a snapshot nobody else holds
 * yet. A reload does not ask again (it runs on loop 0, which must not block): it carries each URL's learned
 * dp_size over from the running snapshot. A worker that does not answer is one target (warned).
 */
#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "buf.h"
#include "dpaware.h"
#include "util.h"

#define INFO_CAP (1u << 20) /* a server info document is a few KiB */

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    pdr_buf_t *b = ud;
    return pdr_buf_append(b, p, size * n, INFO_CAP) == 0 ? size * n : 0;
}

/* The worker's dp_size, or 0 when it cannot be read (why in err). */
static int ask(const pdr_config_t *c, const char *url, char *err, size_t errlen)
{
    CURL *e = curl_easy_init();
    if (e == NULL) {
        snprintf(err, errlen, "out of memory");
        return 0;
    }
    char u[600], auth[4200];
    snprintf(u, sizeof(u), "%s/get_server_info", url);
    struct curl_slist *h = NULL;
    if (c->worker_api_key != NULL) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", c->worker_api_key);
        h = curl_slist_append(h, auth);
    }
    pdr_buf_t body = {0};
    curl_easy_setopt(e, CURLOPT_URL, u);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)c->health.timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)c->timeouts.connect_ms);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &body);
    CURLcode rc = curl_easy_perform(e);
    long status = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    curl_easy_cleanup(e);
    int dp = 0;
    if (rc != CURLE_OK) {
        snprintf(err, errlen, "%s", curl_easy_strerror(rc));
    } else if (status != 200) {
        snprintf(err, errlen, "status %ld", status);
    } else {
        json_t *j = json_loadb(body.p ? body.p : "", body.len, 0, NULL);
        json_t *v = j != NULL ? json_object_get(j, "dp_size") : NULL;
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > PDR_MAX_DP_SIZE)
            snprintf(err, errlen, "no integer dp_size in 1..%d in its answer", PDR_MAX_DP_SIZE);
        else
            dp = (int)json_integer_value(v);
        json_decref(j);
    }
    pdr_buf_free(&body);
    return dp;
}

/* The dp_size prev's static workers have for url (0: none known). */
static int known(const pdr_config_t *prev, const char *url)
{
    for (size_t g = 0; g < pdr_config_pool_count(prev); g++) {
        pdr_pool_conf_t pc;
        pdr_config_pool(prev, g, &pc);
        const pdr_worker_conf_t *ls[3] = {pc.prefill, pc.decode, pc.regular};
        size_t ns[3] = {pc.n_prefill, pc.n_decode, pc.n_regular};
        for (int r = 0; r < 3; r++)
            for (size_t i = 0; i < ns[r]; i++)
                if (ls[r][i].dp_size > 0 && strcmp(ls[r][i].url, url) == 0)
                    return ls[r][i].dp_size;
    }
    return 0;
}

static void resolve_list(pdr_config_t *c, const pdr_config_t *prev, pdr_worker_conf_t *ws, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        pdr_worker_conf_t *w = &ws[i];
        if (w->dp_size > 0)
            continue; /* configured: the file wins */
        if (prev != NULL) {
            w->dp_size = known(prev, w->url);
            continue;
        }
        char err[256];
        int dp = ask(c, w->url, err, sizeof(err));
        if (dp == 0) {
            pdr_warn("--dp-aware: cannot read the dp_size of %s from /get_server_info (%s): one target",
                     w->url, err);
            continue;
        }
        w->dp_size = dp;
        pdr_info("--dp-aware: %s has dp_size %d: %d routing targets", w->url, dp, dp);
    }
}

void pdr_dp_aware_resolve(pdr_config_t *c, const pdr_config_t *prev)
{
    if (!c->dp_aware)
        return;
    resolve_list(c, prev, c->prefill, c->n_prefill);
    resolve_list(c, prev, c->decode, c->n_decode);
    resolve_list(c, prev, c->regular, c->n_regular);
    for (size_t g = 0; g < c->n_pools; g++) {
        resolve_list(c, prev, c->pools[g].prefill, c->pools[g].n_prefill);
        resolve_list(c, prev, c->pools[g].decode, c->pools[g].n_decode);
        resolve_list(c, prev, c->pools[g].regular, c->pools[g].n_regular);
    }
}
