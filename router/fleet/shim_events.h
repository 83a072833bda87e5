/*
 * The shims' reports to the router (docs/internals/shim-events.md): signed batches of room events and
 * load, received on the admin listener (POST /shim/v1/events), and decode admission by the free KV the
 * decodes report. shim_events.c owns the verification, the replay table, the room table (room -> the
 * events seen for it while its request is in flight) and the counters.
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

struct pdr_router;
struct pdr_thread;
struct pdr_worker;
struct pdr_config;
struct pdr_pdreq;

#define PDR_SHIM_MAX_BATCH (1u << 20) /* bytes of one batch */

/* Refusal causes of a batch. Checked in this order: unsigned, then the first line (malformed when it names
 * no worker), wrong_worker / shared_key, bad_signature, stale, replayed / too_many_instances / too_big
 * (the replay table), then the lines (malformed). */
enum {
    PDR_SE_UNSIGNED = 0,  /* no or malformed signature header */
    PDR_SE_WRONG_WORKER,  /* the key id is not the one of the key derived for the worker the batch names */
    PDR_SE_BAD_SIGNATURE, /* the worker's key, but the MAC does not match */
    PDR_SE_STALE,         /* timestamp further than shim_events.max_skew_ms from the router's clock */
    PDR_SE_REPLAYED,
    PDR_SE_MALFORMED, /* not the JSON lines of the format (the first one naming no worker included) */
    PDR_SE_TOO_BIG,
    PDR_SE_SHARED_KEY,    /* signed with the master key itself: a shim not given its own derived key */
    PDR_SE_TOO_MANY_INST, /* the worker already has PDR_SHIM_MAX_INSTANCES live instances */
    PDR_SE__COUNT
};

/* Live instances (batches within max_skew_ms) one worker may have in the replay table: a restarting worker
 * needs a few; a compromised one cannot fill the table and lock the other shims out. */
#define PDR_SHIM_MAX_INSTANCES 8

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
extern const char *const pdr_shim_refusal_names[PDR_SE__COUNT];

/* Loop 0, at start: loads shim_events.key_file (when set). 0, or PDR_ECONFIG with the reason logged. */
int pdr_shim_events_init(struct pdr_router *r);
void pdr_shim_events_free(struct pdr_router *r);
/* Loop 0: POST /shim/v1/events (answers the request). */
void pdr_shim_events_handle(struct pdr_router *r, h2o_req_t *req);
/* Loop 0: GET /admin/v1/shim, the counters and the most recent room events. */
json_t *pdr_shim_events_json(struct pdr_router *r);
/* The worker's load fields for admin status (NULL when it never reported). */
json_t *pdr_shim_worker_json(const struct pdr_worker *w);

typedef void (*pdr_shim_put_cb)(void *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Any loop: the pdr_shim_* and per-worker load metric families. */
void pdr_shim_events_metrics(struct pdr_router *r, pdr_shim_put_cb put, void *out);

/* Any loop: the request in flight now owns room (its events are recorded until pdr_shim_room_take). */
void pdr_shim_room_open(struct pdr_router *r, uint64_t room);
/* A room's done (failed 0) or failed event for the request that owns it, on that request's loop: the
 * shim's code, the KV's bytes, the transfer's time in usec ending at wall_us (the event's arrival, wall
 * clock), the backend's name ("" when none was said) and the shim's reason. */
typedef void (*pdr_shim_room_cb)(void *owner, uint64_t room, int failed, int code, uint64_t bytes,
                                 uint64_t usec, uint64_t wall_us, const char *backend, const char *reason);
/* The same, for a request that wants the room's done and failed events: they are handed to cb(owner, ...)
 * on t's loop (t's wakeup handle, then pdr_shim_events_deliver), while the room is still open. owner must
 * take the room (pdr_shim_room_take) on t's loop before it is freed. */
void pdr_shim_room_own(struct pdr_router *r, uint64_t room, struct pdr_thread *t, void *owner,
                       pdr_shim_room_cb cb);
/* Loop t (its wakeup handle): hands the events queued for t's requests to them. */
void pdr_shim_events_deliver(struct pdr_thread *t);
/* Any loop: what the shims reported for room, as an access-log fragment `,"kv":{...}` written into out
 * (empty when nothing was reported), and the room forgotten. */
void pdr_shim_room_take(struct pdr_router *r, uint64_t room, char *out, size_t cap);

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

/* ---- decode admission (kv_admission) ---- */

/* A request's hold on a decode's KV. */
typedef struct pdr_kv_hold {
    struct pdr_worker *w; /* borrowed: the request holds its own reference on the worker */
    uint64_t bytes;
    uint64_t epoch; /* the worker's incarnation when reserved (a restart drops every hold) */
} pdr_kv_hold_t;

/* The request's KV need in tokens: prompt tokens (ids known: n_ids; else the prompt text's bytes over
 * kv_admission.prompt_bytes_per_token) plus its output tokens (max_new_tokens / max_tokens /
 * max_completion_tokens, else kv_admission.max_new_tokens); batches sum their items' text as one.
 * UINT64_MAX when the sum does not fit in 64 bits. */
uint64_t pdr_kv_need_tokens(const struct pdr_config *c, const struct pdr_pdreq *pr, size_t n_ids,
                            size_t text_len);
/* Reserves need_tokens of w's KV: 1 when reserved (or w is not limited: never reported, or admission
 * off), 0 when it does not fit now, -1 when it never can (more bytes than the worker's reported total,
 * or more than 2^64-1). Without a shim report, a fresh engine answer (load.kv_usage_max_percent) says 1
 * below the key's usage and 0 at or above it, holding nothing. */
int pdr_kv_admit(const struct pdr_config *c, struct pdr_worker *w, uint64_t need_tokens, pdr_kv_hold_t *h);
void pdr_kv_release(pdr_kv_hold_t *h);
/* Whether admission limits w now (admission on, and a recent report with kv_bytes_per_token, or a fresh
 * engine answer with its KV usage and load.kv_usage_max_percent on). */
int pdr_kv_limited(const struct pdr_config *c, const struct pdr_worker *w);
/* Counts an admission outcome: 0 admitted, 1 another decode taken, 2 waited, 3 refused (503). */
void pdr_kv_count(int outcome);

#endif
