/*
 * The pair of shims that the libpdshim C ABI tests run against: a prefill shim listening on an
 * ephemeral loopback port and a decode shim that does not listen, both in the test's process.
 * Header-only, on top of test_shim_util.h.
 */
#ifndef TEST_SHIM_PAIR_H
#define TEST_SHIM_PAIR_H

#include <stdint.h>

#include "pdshim.h"
#include "test_shim_util.h"

/* Creates the pair; the prefill shim's timeout for calls that pass 0 is default_timeout_ms. */
static inline void shim_pair_open(pdshim_t **pre, pdshim_t **dec, int *port, uint32_t default_timeout_ms)
{
    int err = 0;
    pdshim_opts_t po = {
        .listen_host = "127.0.0.1", .listen_port = 0, .default_timeout_ms = default_timeout_ms};
    *pre = pdshim_create(&po, &err);
    CHECK(*pre != NULL);
    *port = pdshim_listen_port(*pre);
    CHECK(*port > 0);
    pdshim_opts_t d = {0};
    *dec = pdshim_create(&d, &err);
    CHECK(*dec != NULL);
    CHECK(pdshim_listen_port(*dec) == -1);
}

static inline void shim_pair_close(pdshim_t **pre, pdshim_t **dec)
{
    if (*dec)
        pdshim_destroy(*dec);
    if (*pre)
        pdshim_destroy(*pre);
    *dec = *pre = NULL;
}

#endif
