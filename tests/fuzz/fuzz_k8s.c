/*
 * Fuzz target for the Kubernetes source's parsers (router/discovery/discovery_k8s_pods.h). The first input
 * byte picks the path: < 0x80, the rest is a watch stream cut into chunks of 1 + (first byte % 61) bytes, fed
 * to the line splitter whose lines are applied as events to a pod set; otherwise the rest is a PodList body.
 * Invariants: the set stays sorted by name with unique names, a ready pod has an http:// URL and a
 * bootstrap port of -1 or 1..65535, and what take_changed gives is sorted and only ready pods.
 * Built with libFuzzer when PDR_LIBFUZZER is defined; otherwise a main() replays the files named on the
 * command line with deterministic mutations (ctest's discovery_k8s_fuzz_corpus).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "discovery_k8s_pods.h"
#include "util.h"

static void check_set(const pdr_k8s_set_t *s)
{
    if (s->n > PDR_K8S_MAX_PODS)
        abort();
    for (size_t i = 0; i < s->n; i++) {
        const pdr_k8s_pod_t *p = &s->pods[i];
        if (i > 0 && strcmp(s->pods[i - 1].w.name, p->w.name) >= 0)
            abort();
        if (p->state == PDR_K8S_POD_READY &&
            (strncmp(p->w.url, "http://", 7) != 0 || p->w.bootstrap_port == 0 ||
             p->w.bootstrap_port > 65535 || p->w.bootstrap_port < -1))
            abort();
    }
    const pdr_discovered_t *list;
    size_t n;
    if (pdr__k8s_set_take_changed((pdr_k8s_set_t *)s, &list, &n) == 1)
        for (size_t i = 1; i < n; i++)
            if (strcmp(list[i - 1].name, list[i].name) >= 0)
                abort();
}

static int fuzz_line(void *ud, const char *line, size_t len)
{
    pdr_k8s_set_t *s = ud;
    char err[256];
    pdr_k8s_event_t e = pdr__k8s_set_apply_event(s, line, len, err, sizeof(err));
    if ((e == PDR_K8S_EV_MALFORMED || e == PDR_K8S_EV_ERROR || e == PDR_K8S_EV_GONE) &&
        strlen(err) >= sizeof(err))
        abort();
    check_set(s);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    pdr_log_level = PDR_LOG_ERROR; /* pods without a port or with a bad annotation warn */
    pdr_k8s_role_conf_t rc = {.port = 0, .bootstrap_port = 8998, .use_annotation = 1};
    pdr_k8s_set_t set;
    pdr__k8s_set_init(&set, &rc, "prefill fuzz");
    const char *in = (const char *)data + 1;
    size_t n = size - 1;
    char err[256];
    if (data[0] < 0x80) {
        pdr_k8s_lines_t l = {.limit = 4096};
        size_t chunk = 1 + data[0] % 61;
        for (size_t at = 0; at < n; at += chunk) {
            size_t len = n - at < chunk ? n - at : chunk;
            if (pdr__k8s_lines_feed(&l, in + at, len, fuzz_line, &set) != 0)
                pdr__k8s_lines_reset(&l);
        }
        pdr__k8s_lines_free(&l);
    } else if (pdr__k8s_set_apply_list(&set, in, n, err, sizeof(err)) == 0) {
        check_set(&set);
    }
    pdr__k8s_set_free(&set);
    return 0;
}

#ifndef PDR_LIBFUZZER
#define PDR_REPLAY_MUTATIONS 64
#include "replay_main.h"
#endif
