/*
 * Fuzz target for the shims' event batches (router/fleet/shim_events.c): the first input byte picks the part.
 * Below 0x80 the rest is a Pdr-Signature header value, verified against a fixed body: it must be refused
 * (nothing here can forge the key), never crash. Otherwise the rest is a batch body, signed here as a shim
 * signs it, with the key derived for the worker its first line names: it must verify (or, when that line
 * names no worker, be refused as malformed), and its lines are then applied to a small pool (load, rooms,
 * incarnations). The same body signed with the master key is refused as shared_key.
 * Built with libFuzzer when PDR_LIBFUZZER is defined; otherwise a main() replays the seed files with
 * deterministic mutations (ctest's router_shim_fuzz_corpus).
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "keyring.h"
#include "pool.h"
#include "router.h"
#include "shim_events.h"
#include "util.h"

static const char secret[] = "fuzz-key-0123456789abcdef0123456789";

static pdr_router_t *fuzz_router(void)
{
    static pdr_router_t r;
    static int ready;
    if (!ready) {
        static const char yaml[] =
            "workers:\n  prefill:\n    - { url: http://127.0.0.1:30000, bootstrap_port: 9000 }\n"
            "  decode:\n    - { url: http://127.0.0.1:31000 }\n";
        char err[256];
        r.config = pdr_config_load_string(yaml, sizeof(yaml) - 1, "fuzz.yaml", err, sizeof(err));
        if (r.config == NULL || pdr_pool_init(&r.pool, r.config) != 0 ||
            pdr__shim_events_set_key(secret, sizeof(secret) - 1) != 0) {
            fprintf(stderr, "fuzz_shim: setup failed: %s\n", err);
            abort();
        }
        ready = 1;
    }
    return &r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    pdr_router_t *r = fuzz_router();
    const char *in = (const char *)data + 1;
    size_t n = size - 1;
    uint64_t hi, lo;
    if (data[0] < 0x80) {
        static const char body[] = "{\"type\":\"batch\",\"worker\":\"http://127.0.0.1:31000\"}\n";
        int cause = pdr__shim_verify(r->config, in, n, body, sizeof(body) - 1, &hi, &lo);
        if (cause < 0 || cause >= PDR_SE__COUNT)
            abort();
        return 0;
    }
    static uint64_t seq;
    pdr_keyring_t kr = {0};
    pdr_keyring_add(&kr, secret, sizeof(secret) - 1);
    char id[PDR_SHIM_IDENTITY_MAX];
    int named = pdr_shim_batch_identity(in, n, id, sizeof(id)) == 0;
    pdr_key_t wk;
    if (named)
        pdr_shim_worker_key(&kr.keys[0], id, &wk);
    const pdr_key_t *k = named ? &wk : &kr.keys[0];
    const char *inst = "00112233445566778899aabbccddeeff";
    uint64_t ts = pdr_wall_us() / 1000;
    char pre[128];
    int pn = snprintf(pre, sizeof(pre), "pdr-events-v1\n%" PRIu64 "\n%s\n%" PRIu64 "\n", ts, inst, ++seq);
    char *msg = malloc((size_t)pn + n + 1);
    memcpy(msg, pre, (size_t)pn);
    if (n > 0)
        memcpy(msg + pn, in, n);
    uint8_t mac[PDR_HMAC_LEN];
    pdr_hmac_sha256(k, msg, (size_t)pn + n, mac);
    free(msg);
    char sig[64], hdr[256];
    pdr_b64url_encode(mac, sizeof(mac), sig, sizeof(sig));
    int hn = snprintf(hdr, sizeof(hdr), "v1 kid=%s ts=%" PRIu64 " inst=%s seq=%" PRIu64 " sig=%s", k->id, ts,
                      inst, seq, sig);
    int cause = pdr__shim_verify(r->config, hdr, (size_t)hn, in, n, &hi, &lo);
    if (!named) {
        if (cause != PDR_SE_MALFORMED)
            abort(); /* a batch naming no worker has no key to check */
        pdr_keyring_wipe(&kr);
        return 0;
    }
    /* A correctly signed, fresh batch is authentic (unless the replay table is full of fuzzed workers). */
    if (cause != -1 && cause != PDR_SE_TOO_BIG)
        abort();
    if (cause != -1) {
        pdr_keyring_wipe(&kr);
        return 0;
    }
    /* The same batch under the master key's id speaks for no worker (refused before any MAC is computed). */
    hn = snprintf(hdr, sizeof(hdr), "v1 kid=%s ts=%" PRIu64 " inst=%s seq=%" PRIu64 " sig=%s", kr.keys[0].id,
                  ts, inst, seq + 1, sig);
    uint64_t h2, l2;
    if (pdr__shim_verify(r->config, hdr, (size_t)hn, in, n, &h2, &l2) != PDR_SE_SHARED_KEY)
        abort();
    size_t lines = 0;
    int known = 0;
    int rc = pdr__shim_apply(r, in, n, hi, lo, &lines, &known);
    if (rc != -1 && rc != PDR_SE_MALFORMED)
        abort();
    pdr_keyring_wipe(&kr);
    return 0;
}

#ifndef PDR_LIBFUZZER
#define PDR_REPLAY_MUTATIONS 200
#include "replay_main.h"
#endif
