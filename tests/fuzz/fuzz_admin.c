/*
 * Fuzz target for the admin API's parsers: the drain body (pdr__admin_parse_drain, router/control/admin.c)
 * and the worker id in the path (pdr_pool_find, router/workers/pool.c) and the add-worker body
 * (pdr__admin_parse_worker). The first input byte picks the parser (< 0x80: drain body, 0x80..0xbf: worker
 * id, else add body); the rest is the input. Invariants: a parsed timeout is within
 * range, a rejection comes with a message, a found worker's canonical id equals the input, and an id
 * that is a canonical "<role>-<index>" of an existing worker is always found.
 * Built with libFuzzer when PDR_LIBFUZZER is defined; otherwise a main() replays the files named on the
 * command line with deterministic mutations (ctest's router_admin_fuzz_corpus).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "control.h"
#include "pool.h"
#include "router.h"

static pdr_pool_t *fuzz_pool(void)
{
    static pdr_pool_t p;
    static int ready;
    if (!ready) {
        static const char yaml[] =
            "workers:\n  prefill:\n    - { url: http://127.0.0.1:30000, bootstrap_port: 9000 }\n"
            "    - { url: http://127.0.0.1:30001 }\n  decode:\n"
            "    - { url: http://127.0.0.1:31000 }\n    - { url: http://127.0.0.1:31001 }\n"
            "    - { url: http://127.0.0.1:31002 }\n";
        char err[256];
        pdr_config_t *c = pdr_config_load_string(yaml, sizeof(yaml) - 1, "fuzz.yaml", err, sizeof(err));
        if (c == NULL || pdr_pool_init(&p, c) != 0) {
            fprintf(stderr, "fuzz_admin: %s\n", c == NULL ? err : "pool init failed");
            abort();
        }
        pdr_config_unref(c);
        ready = 1;
    }
    return &p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const char *in = (const char *)data + 1;
    size_t n = size - 1;
    if (data[0] < 0x80) {
        uint64_t t = 12345;
        char msg[256];
        msg[0] = '\0';
        if (pdr__admin_parse_drain(in, n, &t, msg, sizeof(msg)) == 0) {
            if (t > PDR_ADMIN_MAX_DRAIN_TIMEOUT_MS)
                abort();
        } else if (msg[0] == '\0' || strlen(msg) >= sizeof(msg)) {
            abort();
        }
        return 0;
    }
    pdr_pool_t *p = fuzz_pool();
    if (data[0] >= 0xc0) {
        /* The POST /admin/v1/workers body. */
        int role;
        pdr_worker_conf_t conf;
        char *labels = NULL;
        char msg[300], pool[64];
        msg[0] = '\0';
        if (pdr__admin_parse_worker(in, n, &role, &conf, &labels, pool, msg, sizeof(msg)) == 0) {
            if ((role != 0 && role != 1) || conf.url == NULL || labels == NULL || labels[0] != '{' ||
                (role == 1 && conf.bootstrap_port != -1))
                abort();
            pdr_worker_conf_clear(&conf);
            free(labels);
        } else if (msg[0] == '\0' || labels != NULL) {
            abort();
        }
        return 0;
    }
    pdr_worker_t *w = pdr_pool_find(p, in, n);
    if (w != NULL) {
        if (strlen(w->id) != n || memcmp(w->id, in, n) != 0)
            abort();
        pdr_worker_unref(w);
    }
    for (int role = 0; role < 2; role++)
        for (size_t i = 0; pdr_pool__at(p, (pdr_role_t)role, i) != NULL; i++) {
            char id[48];
            int k = snprintf(id, sizeof(id), "%s-%zu", pdr_role_name((pdr_role_t)role), i);
            if ((size_t)k == n && memcmp(id, in, n) == 0 && w != pdr_pool__at(p, (pdr_role_t)role, i))
                abort();
        }
    return 0;
}

#ifndef PDR_LIBFUZZER
#define PDR_REPLAY_MUTATIONS 200
#include "replay_main.h"
#endif
