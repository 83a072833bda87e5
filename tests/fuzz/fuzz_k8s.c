/*
 * Fuzz target for the Kubernetes source's parsers (router/discovery/discovery_k8s_pods.h). The first input
 * byte picks the path: < 0x80, the rest is a watch stream cut into chunks of 1 + (first byte % 61) bytes, fed
 * to the line splitter whose lines are applied as events to a pod set (with bit 0x40, the set of an
 * InferencePool's pods: role label, two target ports, the role from bit 0x01); 0x80..0xbf, the rest is a
 * PodList body; 0xc0 and above, an InferencePool object.
 * Invariants: the set stays sorted by name with unique names, a ready pod has an http:// URL and a
 * bootstrap port of -1 or 1..65535, and what take_changed gives has unique names (sorted without target
 * ports); an InferencePool read has a selector and 1..8 distinct ports in 1..65535.
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
        for (size_t i = 1; i < n; i++) {
            if (s->rc.nports == 0 && strcmp(list[i - 1].name, list[i].name) >= 0)
                abort();
            for (size_t j = 0; s->rc.nports > 0 && j < i; j++)
                if (strcmp(list[j].name, list[i].name) == 0)
                    abort();
        }
}

static void check_infpool(const char *in, size_t n)
{
    static pdr_k8s_infpool_t p;
    char err[256];
    json_t *obj = json_loadb(in, n, 0, NULL);
    if (pdr__k8s_infpool_parse(obj, &p, err, sizeof(err)) == 0) {
        if (p.selector[0] == '\0' || p.nports < 1 || p.nports > PDR_K8S_MAX_PORTS)
            abort();
        for (int i = 0; i < p.nports; i++)
            for (int j = 0; j <= i; j++)
                if (p.ports[i] < 1 || p.ports[i] > 65535 || (j < i && p.ports[j] == p.ports[i]))
                    abort();
    } else if (strlen(err) >= sizeof(err) || err[0] == '\0') {
        abort();
    }
    json_decref(obj);
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
    if (data[0] < 0x80 && (data[0] & 0x40)) {
        rc.role_label = "llm-d.ai/role";
        rc.role = (data[0] & 1) ? PDR_ROLE_DECODE : PDR_ROLE_PREFILL;
        rc.ports[0] = 8000;
        rc.ports[1] = 8001;
        rc.nports = 2;
    }
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
    } else if (data[0] >= 0xc0) {
        check_infpool(in, n);
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
