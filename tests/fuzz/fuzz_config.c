/*
 * Fuzz target for the configuration: the YAML loader (config/yaml.c, config.c, validate.c) and the
 * command line (config/cli.c). An input that starts with "--" is a command line, one argument per line
 * (argv[0] is "pdrouter"; --config, --check-config and the file-reading flags are left out, so that no
 * input names a file to read); any other input is a YAML file. Built with libFuzzer when PDR_LIBFUZZER is
 * defined; otherwise a main() replays every file named on the command line (ctest's config_fuzz_corpus),
 * so the seeds run in every build, sanitizers included. Whatever the input: no crash, no leak, and an
 * error message that is NUL-terminated and in "name:..." form ("argv: ..." for a command line); a
 * snapshot either form gives passes the whole-snapshot check.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "config.h"

/* At most this many arguments: more only repeat what a fuzzer can say with these. */
#define FUZZ_MAX_ARGS 64

/* Flags whose value is a file the parser would read. */
static int reads_a_file(const char *a)
{
    static const char *const flags[] = {"--config", "--check-config"};
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
        if (strncmp(a, flags[i], strlen(flags[i])) == 0)
            return 1;
    return 0;
}

static void fuzz_argv(const uint8_t *data, size_t size)
{
    char *copy = malloc(size + 1);
    char *argv[FUZZ_MAX_ARGS + 2];
    int argc = 0;
    if (copy == NULL)
        return;
    memcpy(copy, data, size);
    copy[size] = '\0';
    argv[argc++] = (char *)"pdrouter";
    for (char *p = copy; p != NULL && argc <= FUZZ_MAX_ARGS;) {
        char *nl = memchr(p, '\n', (size_t)(copy + size - p));
        if (nl != NULL)
            *nl = '\0';
        if (reads_a_file(p))
            goto out;
        argv[argc++] = p;
        p = nl != NULL ? nl + 1 : NULL;
    }
    argv[argc] = NULL;
    char err[512];
    memset(err, 'x', sizeof(err));
    pdr_cli_t cli;
    int rc = pdr_config_parse_args(argc, argv, &cli, err, sizeof(err));
    if (rc != 0) {
        if (memchr(err, '\0', sizeof(err)) == NULL || strncmp(err, "argv: ", 6) != 0 || cli.config != NULL)
            abort();
        goto out;
    }
    if (cli.config != NULL) {
        if (pdr_config_validate(cli.config, err, sizeof(err)) != 0)
            abort();
        pdr_config_unref(cli.config);
    }
out:
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size >= 2 && data[0] == '-' && data[1] == '-') {
        fuzz_argv(data, size);
        return 0;
    }
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
