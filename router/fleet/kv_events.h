/* The KV event subscriber of precise_prefix (kv_events.c): loop 0 owns it. */
#ifndef PDR_KV_EVENTS_H
#define PDR_KV_EVENTS_H

struct pdr_router;

/* Loop 0, at start: the membership tick (the index and the sockets follow the config and the pool). */
int pdr_kv_events_start(struct pdr_router *r);
/* Loop 0, at shutdown: closes every socket's handle and the tick. */
void pdr_kv_events_stop(struct pdr_router *r);
/* After every loop has ended: the ZMQ context and the index. */
void pdr_kv_events_free(struct pdr_router *r);

typedef void (*pdr_kv_events_put_cb)(void *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Any loop: the pdr_kv_* and pdr_precise_prefix_* metric families, through put. */
void pdr_kv_events_metrics(struct pdr_router *r, pdr_kv_events_put_cb put, void *out);
/* Any loop: the admin API's view of the worker's KV events ({"synced", "cold", "blocks", "last_seq",
 * "replay", "replaying"}), or NULL when no subscriber follows it (no publisher, or no precise_prefix).
 * The caller owns the reference. */
struct json_t;
struct pdr_worker;
struct json_t *pdr_kv_events_worker_json(struct pdr_router *r, const struct pdr_worker *w);

#endif
