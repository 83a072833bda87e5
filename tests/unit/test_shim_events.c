/*
 * Unit tests of decode admission (router/fleet/shim_events.c: the KV need of a request, holds against a
 * worker's reported free KV, a restart voiding holds), of the per-worker event keys (identities, a batch
 * verified only under the key of the worker it names, instances per worker) and of libpdshim's reporter
 * queue (a full queue drops and counts, never blocks; the instance id is the engine's or random).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "config.h"
#include "err.h"
#include "keyring.h"
#include "pdshim.h"
#include "pool.h"
#include "rewrite.h"
#include "runner.h"
#include "shim_events.h"
#include "util.h"

static void report(pdr_worker_t *w, uint64_t free_b, uint64_t total, uint64_t bpt)
{
    w->load.kv_free_bytes = free_b;
    w->load.kv_total_bytes = total;
    w->load.kv_bytes_per_token = bpt;
    w->load.reserved_rep = w->load.reserved;
    w->load.report_ms = pdr_now_ms();
}

static void test_need(void)
{
    pdr_config_t *c = pdr_config_new_default();
    static const char gen[] = "{\"input_ids\":[1,2,3],\"sampling_params\":{\"max_new_tokens\":7}}";
    static const char oai[] = "{\"model\":\"m\",\"prompt\":\"abcdefgh\",\"max_tokens\":5}";
    static const char none[] = "{\"model\":\"m\",\"prompt\":\"abcdefgh\"}";
    pdr_pdreq_t pr;
    char err[128];
    CHECK(pdr_pdreq_parse(PDR_ROUTE_GENERATE, gen, sizeof(gen) - 1, &pr, err, sizeof(err)) == 0);
    CHECK(pdr_kv_need_tokens(c, &pr, 3, 0) == 10);
    pdr_pdreq_clear(&pr);
    CHECK(pdr_pdreq_parse(PDR_ROUTE_COMPLETIONS, oai, sizeof(oai) - 1, &pr, err, sizeof(err)) == 0);
    CHECK(pdr_kv_need_tokens(c, &pr, 0, 8) == 2 + 5); /* 8 bytes / 4 bytes per token */
    pdr_pdreq_clear(&pr);
    CHECK(pdr_pdreq_parse(PDR_ROUTE_COMPLETIONS, none, sizeof(none) - 1, &pr, err, sizeof(err)) == 0);
    CHECK(pdr_kv_need_tokens(c, &pr, 0, 8) == 2 + 128); /* kv_admission.max_new_tokens */
    pdr_pdreq_clear(&pr);
    pdr_config_unref(c);
}

static void test_holds(void)
{
    pdr_config_t *c = pdr_config_new_default();
    pdr_worker_t *w = calloc(1, sizeof(*w));
    pdr_kv_hold_t a, b, d;
    CHECK(pdr_kv_admit(c, w, 1000, &a) == 1 && a.w == NULL); /* never reported: not limited */
    report(w, 1000, 1000, 10);
    CHECK(pdr_kv_admit(c, w, 60, &a) == 1 && a.bytes == 600);
    CHECK(pdr_kv_admit(c, w, 60, &b) == 0); /* 400 left */
    CHECK(pdr_kv_admit(c, w, 40, &b) == 1);
    CHECK(w->load.reserved == 1000);
    pdr_kv_release(&a);
    CHECK(w->load.reserved == 400 && a.w == NULL);
    pdr_kv_release(&a); /* twice: nothing */
    CHECK(w->load.reserved == 400);
    /* A report that counts b as used already: free 600, total 1000, b still held. */
    report(w, 600, 1000, 10);
    CHECK(pdr_kv_admit(c, w, 60, &d) == 1 && w->load.reserved == 1000);
    pdr_kv_release(&d);
    /* A restart (new epoch) voids the holds: releasing an old one takes nothing from the new count. */
    w->load.epoch++;
    w->load.reserved = 0;
    pdr_kv_release(&b);
    CHECK(w->load.reserved == 0);
    /* A need past 2^64 bytes saturates: refused for good, not wrapped to a small number and admitted.
     * (2^60 - 4 + 4 prompt tokens) * 16 bytes a token is 2^64. */
    report(w, 1000, 1000, 16);
    static const char huge[] =
        "{\"input_ids\":[1,2,3,4],\"sampling_params\":{\"max_new_tokens\":1152921504606846972}}";
    pdr_pdreq_t pr;
    char err[128];
    CHECK(pdr_pdreq_parse(PDR_ROUTE_GENERATE, huge, sizeof(huge) - 1, &pr, err, sizeof(err)) == 0);
    uint64_t need = pdr_kv_need_tokens(c, &pr, 4, 0);
    CHECK(need == ((uint64_t)1 << 60));
    CHECK(pdr_kv_admit(c, w, need, &a) == -1 && a.w == NULL && w->load.reserved == 0);
    pdr_pdreq_clear(&pr);
    /* Tokens past 2^64 saturate too. */
    static const char huger[] =
        "{\"input_ids\":[1,2],\"sampling_params\":{\"max_new_tokens\":9223372036854775807}}";
    CHECK(pdr_pdreq_parse(PDR_ROUTE_GENERATE, huger, sizeof(huger) - 1, &pr, err, sizeof(err)) == 0);
    CHECK(pdr_kv_need_tokens(c, &pr, SIZE_MAX - 5, 0) == UINT64_MAX);
    pdr_pdreq_clear(&pr);
    /* More than the worker's whole KV (1000 bytes): never; within it but more than is free: not now. */
    CHECK(pdr_kv_admit(c, w, 63, &a) == -1);
    report(w, 100, 1000, 16);
    CHECK(pdr_kv_admit(c, w, 62, &a) == 0);
    /* Off: never limited. */
    c->kv_admission.enabled = 0;
    report(w, 0, 0, 10);
    CHECK(pdr_kv_admit(c, w, 1u << 30, &a) == 1 && a.w == NULL);
    free(w);
    pdr_config_unref(c);
}

static void test_reporter_queue(void)
{
    char key[] = "/tmp/pdr-shim-events-key-XXXXXX";
    int fd = mkstemp(key);
    CHECK(fd >= 0);
    CHECK(write(fd, "0123456789abcdef0123456789abcdef", 32) == 32);
    close(fd);
    uint8_t inst[16];
    memset(inst, 0xab, sizeof(inst));
    pdshim_opts_t o = {0};
    o.events_url = "http://127.0.0.1:1"; /* nothing listens: every batch fails, nothing blocks */
    o.events_key_file = key;
    o.worker_url = "http://127.0.0.1:2";
    o.events_queue = 4;
    o.events_flush_ms = 60000;
    o.instance_id = inst;
    int err = 0;
    pdshim_t *s = pdshim_create(&o, &err);
    CHECK(s != NULL);
    uint8_t got[16];
    CHECK(pdshim_instance_id(s, got) == 0 && memcmp(got, inst, 16) == 0);
    int ok = 0, dropped = 0;
    for (int i = 0; i < 10; i++) {
        int rc = pdshim_report_room(s, (uint64_t)i, PDSHIM_EV_ACCEPTED, 0, 0, 0, NULL);
        ok += rc == 0;
        dropped += rc == PDR_EAGAIN;
    }
    CHECK(ok == 4 && dropped == 6);
    CHECK(pdshim_report_room(s, 1, 99, 0, 0, 0, NULL) == PDR_EINVAL);
    uint64_t sent, failed, drops;
    pdshim_events_stats(s, &sent, &failed, &drops);
    CHECK(drops == 6);
    pdshim_destroy(s); /* one last attempt (refused at once), then joined */
    /* Without events_url: a random id per shim, and no reporting. */
    pdshim_opts_t plain = {0};
    pdshim_t *s1 = pdshim_create(&plain, &err), *s2 = pdshim_create(&plain, &err);
    uint8_t i1[16], i2[16];
    CHECK(s1 && s2 && pdshim_instance_id(s1, i1) == 0 && pdshim_instance_id(s2, i2) == 0);
    CHECK(memcmp(i1, i2, 16) != 0);
    pdshim_load_t ld = {0};
    CHECK(pdshim_report_load(s1, &ld) == PDR_ENOTSUP);
    pdshim_destroy(s1);
    pdshim_destroy(s2);
    /* A bad key file or URL fails the create with a code, no thread left behind. */
    o.events_key_file = "/nonexistent/key";
    CHECK(pdshim_create(&o, &err) == NULL && err == PDR_ECONFIG);
    o.events_key_file = key;
    o.events_url = "ftp://x";
    CHECK(pdshim_create(&o, &err) == NULL && err == PDR_EINVAL);
    unlink(key);
}

/* A batch's Pdr-Signature as a shim writes it, signed with key k. */
static void sign(const pdr_key_t *k, const char *inst, uint64_t seq, const char *body, char *hdr, size_t cap)
{
    uint64_t ts = pdr_wall_us() / 1000;
    char msg[2048];
    int pn =
        snprintf(msg, sizeof(msg), "pdr-events-v1\n%" PRIu64 "\n%s\n%" PRIu64 "\n%s", ts, inst, seq, body);
    CHECK(pn > 0 && (size_t)pn < sizeof(msg));
    uint8_t mac[PDR_HMAC_LEN];
    pdr_hmac_sha256(k, msg, (size_t)pn, mac);
    char sig[64];
    pdr_b64url_encode(mac, sizeof(mac), sig, sizeof(sig));
    snprintf(hdr, cap, "v1 kid=%s ts=%" PRIu64 " inst=%s seq=%" PRIu64 " sig=%s", k->id, ts, inst, seq, sig);
}

static int verify(const pdr_config_t *c, const pdr_key_t *k, const char *inst, uint64_t seq, const char *body)
{
    char hdr[256];
    uint64_t hi, lo;
    sign(k, inst, seq, body, hdr, sizeof(hdr));
    return pdr__shim_verify(c, hdr, strlen(hdr), body, strlen(body), &hi, &lo);
}

static void test_worker_keys(void)
{
    pdr_config_t *c = pdr_config_new_default();
    static const char master_secret[] = "unit-master-key-0123456789abcdef0123456789";
    CHECK(pdr__shim_events_set_key(master_secret, sizeof(master_secret) - 1) == 0);
    pdr_keyring_t kr = {0};
    CHECK(pdr_keyring_add(&kr, master_secret, sizeof(master_secret) - 1) == 0);
    char id[PDR_SHIM_IDENTITY_MAX], id2[PDR_SHIM_IDENTITY_MAX], err[128];

    /* Identities: URLs normalized as configured ones; a bootstrap host:port as given; nothing else. */
    CHECK(pdr_shim_identity_of("http://127.0.0.1:30000/", id, sizeof(id), err, sizeof(err)) == 0);
    CHECK(strcmp(id, "worker http://127.0.0.1:30000") == 0);
    CHECK(pdr_shim_identity_of("127.0.0.1:9000", id2, sizeof(id2), err, sizeof(err)) == 0);
    CHECK(strcmp(id2, "bootstrap 127.0.0.1:9000") == 0);
    CHECK(pdr_shim_identity_of("127.0.0.1", id2, sizeof(id2), err, sizeof(err)) != 0);
    CHECK(pdr_shim_identity_of("ftp://x:1", id2, sizeof(id2), err, sizeof(err)) != 0);
    static const char a_body[] = "{\"type\":\"batch\",\"worker\":\"http://127.0.0.1:30000\",\"bootstrap\":"
                                 "\"127.0.0.1:9001\"}\n{\"type\":\"load\",\"queue_depth\":1}\n";
    static const char b_body[] = "{\"type\":\"batch\",\"worker\":\"http://127.0.0.1:31000\"}\n";
    static const char boot_body[] = "{\"type\":\"batch\",\"worker\":\"\",\"bootstrap\":\"127.0.0.1:9001\"}\n";
    CHECK(pdr_shim_batch_identity(a_body, strlen(a_body), id, sizeof(id)) == 0);
    CHECK(strcmp(id, "worker http://127.0.0.1:30000") == 0); /* the URL wins over the bootstrap */
    CHECK(pdr_shim_batch_identity(boot_body, strlen(boot_body), id2, sizeof(id2)) == 0);
    CHECK(strcmp(id2, "bootstrap 127.0.0.1:9001") == 0);
    CHECK(pdr_shim_batch_identity("{\"type\":\"batch\"}\n", 17, id2, sizeof(id2)) != 0);
    CHECK(pdr_shim_batch_identity("{\"type\":\"load\",\"worker\":\"http://a:1\"}", 38, id2, sizeof(id2)) !=
          0);
    char big[5000];
    int bn = snprintf(big, sizeof(big),
                      "{\"type\":\"batch\",\"worker\":\"http://127.0.0.1:30000\",\"x\":\"%4100d\"}", 1);
    CHECK(pdr_shim_batch_identity(big, (size_t)bn, id2, sizeof(id2)) != 0); /* a first line over 4 KiB */

    pdr_key_t ka, kb, kboot;
    pdr_shim_worker_key(&kr.keys[0], "worker http://127.0.0.1:30000", &ka);
    pdr_shim_worker_key(&kr.keys[0], "worker http://127.0.0.1:31000", &kb);
    pdr_shim_worker_key(&kr.keys[0], "bootstrap 127.0.0.1:9001", &kboot);
    CHECK(strcmp(ka.id, kb.id) != 0 && strcmp(ka.id, kboot.id) != 0);
    const char *ia = "0000000000000000000000000000000a";
    /* A's own batch verifies; A's key claiming B (or the bootstrap identity), and the master key, do not. */
    CHECK(verify(c, &ka, ia, 1, a_body) == -1);
    CHECK(verify(c, &ka, ia, 2, b_body) == PDR_SE_WRONG_WORKER);
    CHECK(verify(c, &ka, ia, 3, boot_body) == PDR_SE_WRONG_WORKER);
    CHECK(verify(c, &kr.keys[0], ia, 4, a_body) == PDR_SE_SHARED_KEY);
    CHECK(verify(c, &kb, "0000000000000000000000000000000b", 1, b_body) == -1);
    CHECK(verify(c, &kboot, "000000000000000000000000000000bb", 1, boot_body) == -1);
    /* An instance id belongs to one worker: B taking A's id with a large seq does not shut A out. */
    CHECK(verify(c, &kb, ia, 1000, b_body) == -1);
    CHECK(verify(c, &ka, ia, 5, a_body) == -1);
    CHECK(verify(c, &ka, ia, 5, a_body) == PDR_SE_REPLAYED);
    /* At most PDR_SHIM_MAX_INSTANCES live instances per worker (A has one): then A's new ones are refused,
     * while B still gets a new one. */
    char inst[40];
    for (int i = 1; i < PDR_SHIM_MAX_INSTANCES; i++) {
        snprintf(inst, sizeof(inst), "%032x", 0x100 + i);
        CHECK(verify(c, &ka, inst, 1, a_body) == -1);
    }
    snprintf(inst, sizeof(inst), "%032x", 0x200);
    CHECK(verify(c, &ka, inst, 1, a_body) == PDR_SE_TOO_MANY_INST);
    CHECK(verify(c, &ka, ia, 6, a_body) == -1); /* a known instance goes on */
    CHECK(verify(c, &kb, inst, 1, b_body) == -1);
    pdr_keyring_wipe(&kr);
    pdr_config_unref(c);
}

static const pdr_test_case_t cases[] = {
    {"need", test_need, 30},
    {"worker_keys", test_worker_keys, 30},
    {"holds", test_holds, 30},
    {"reporter_queue", test_reporter_queue, 30},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
