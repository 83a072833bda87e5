/*
 * Fuzz target for the YAML configuration loader. Built with libFuzzer when PDR_LIBFUZZER is defined;
 * otherwise a main() replays every file named on the command line (ctest's config_fuzz_corpus), so
 * the seeds run in every build, sanitizers included. Whatever the input: no crash, no leak, and an
 * error message that is NUL-terminated and in "name:..." form.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    memset(err, 'x', sizeof(err));
    pdr_config_t *c = pdr_config_load_string((const char *)data, size, "fuzz.yaml", err, sizeof(err));
    if (c == NULL) {
        if (memchr(err, '\0', sizeof(err)) == NULL || strncmp(err, "fuzz.yaml:", 10) != 0)
            abort();
        return 0;
    }
    /* A loaded snapshot is runnable: each role of each pool has workers or (the one-pool form) a discovery
     * source, every pool of pools: serves a model, and it passes the whole-snapshot check. */
    for (size_t i = 0; i < pdr_config_pool_count(c); i++) {
        pdr_pool_conf_t pc;
        pdr_config_pool(c, i, &pc);
        if (c->n_pools > 0 && (pc.n_models == 0 || pc.n_prefill == 0 || pc.n_decode == 0))
            abort();
        for (int r = 0; r < 2; r++)
            if ((r == 0 ? pc.n_prefill : pc.n_decode) == 0 && c->discovery.dns.role[r].name == NULL &&
                c->discovery.kubernetes.role[r].selector == NULL)
                abort();
    }
    if (pdr_config_validate(c, err, sizeof(err)) != 0)
        abort();
    pdr_config_unref(pdr_config_ref(c));
    pdr_config_unref(c);
    return 0;
}

#ifndef PDR_LIBFUZZER
#include "replay_main.h"
#endif
