/*
 * The shims' reports to the router (docs/internals/shim-events.md): signed batches of room events and
 * load, received on the admin listener (POST /shim/v1/events), and decode admission by the free KV the
 * decodes report. shim_events.c owns the verification, the replay table, the per-worker keys and the
 * handler; it includes the headers of the parts below it, so that users include this one:
 * shim_events_types.h (the causes, the room callback), shim_events_rooms.h (the room table: room -> the
 * events seen for it while its request is in flight) and shim_events_views.h (admin views, metrics,
 * decode admission).
 *
 * Threads: the handler runs on loop 0 (the admin listener); the room table, the replay table and the
 * recent-events ring are guarded by one mutex, so request loops register and take rooms from any loop.
 * A worker's load fields are atomics written by loop 0 and read by every loop's picks.
 */
#ifndef PDR_SHIM_EVENTS_H
#define PDR_SHIM_EVENTS_H

#include <h2o.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <jansson.h>
#include "shim_events_rooms.h"
#include "shim_events_types.h"
#include "shim_events_views.h"

struct pdr_router;
struct pdr_worker;
struct pdr_config;

/* ---- per-worker keys (docs/security.md "Shim event keys") ----
 * Each worker's shim signs with its own key, derived from the master key (shim_events.key_file) and the
 * worker's identity: the key file's text is the lower-case hex of
 *   HMAC-SHA256(master, "pdr-shim-events-key-v1\n" IDENTITY)
 * where IDENTITY is "worker " and the worker's URL normalized as configured URLs are
 * ("http://10.0.0.7:30002"), or "bootstrap " and the host:port of its bootstrap listener as the router
 * names it. A batch speaks for the workers of the identity its first line names, and only for them. */
#define PDR_SHIM_IDENTITY_MAX 340

/* The identity of a worker as an operator names it: a URL (http:// or https://) or a bootstrap host:port.
 * 0, or -1 with a message in err. */
int pdr_shim_identity_of(const char *worker, char *out, size_t cap, char *err, size_t errlen);
/* The identity a batch speaks for, from its first line: its "worker" URL when not empty, else its
 * "bootstrap". 0, or -1 when the first line is not a batch line naming one (or is over 4 KiB). */
int pdr_shim_batch_identity(const char *body, size_t len, char *out, size_t cap);
/* The key the shim of identity signs with, derived from master (keyring.h). */
struct pdr_key;
void pdr_shim_worker_key(const struct pdr_key *master, const char *identity, struct pdr_key *out);
/* pdrouter --derive-shim-key KEY_FILE WORKER: writes the worker's key file text (and a newline) to out.
 * 0, or 2 with the error written to errf. */
int pdr_shim_derive_cli(const char *key_file, const char *worker, FILE *out, FILE *errf);

/* Loop 0, at start: loads shim_events.key_file (when set). 0, or PDR_ECONFIG with the reason logged. */
int pdr_shim_events_init(struct pdr_router *r);
void pdr_shim_events_free(struct pdr_router *r);
/* Loop 0: POST /shim/v1/events (answers the request). */
void pdr_shim_events_handle(struct pdr_router *r, h2o_req_t *req);
/* The parts of the handler (pure but for the counters and the tables; fuzzed by tests/fuzz/fuzz_shim.c).
 * _verify: the refusal cause of a batch (hdr: the Pdr-Signature value, NULL when absent), or -1 when it
 * is authentic and fresh (its instance id in *hi, *lo and its sequence number recorded). _apply: the
 * lines of a verified batch applied; -1, or PDR_SE_MALFORMED (lines before the bad one stay applied). */
int pdr__shim_verify(const struct pdr_config *c, const char *hdr, size_t hdr_len, const char *body,
                     size_t len, uint64_t *hi, uint64_t *lo);
int pdr__shim_apply(struct pdr_router *r, const char *body, size_t len, uint64_t hi, uint64_t lo,
                    size_t *n_lines, int *known);
/* Tests: adds a key to the ring and turns the route on. 0 or a PDR_E* code. */
int pdr__shim_events_set_key(const void *secret, size_t len);

#endif
