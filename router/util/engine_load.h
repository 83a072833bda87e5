/*
 * The load an engine reports about itself, read from its own answers: sglang's GET /get_load (a JSON list,
 * one object per data-parallel rank: dp_rank, num_reqs, num_waiting_reqs, num_tokens, num_pending_tokens,
 * ts_tic; older versions answered one such object) and vLLM's GET /metrics (Prometheus text, the gauges
 * vllm:num_requests_running, vllm:num_requests_waiting and vllm:kv_cache_usage_perc, one series per engine
 * with labels such as model_name and engine). Pure functions over a buffer the caller bounds; any thread.
 */
#ifndef PDR_ENGINE_LOAD_H
#define PDR_ENGINE_LOAD_H

#include <stddef.h>
#include <stdint.h>

/* 1 MiB: vLLM's /metrics with a few engines and its histograms is some tens of KiB; sglang's /get_load is
 * one short object per rank. An answer past it is refused (PDR_ETOOBIG), never cut. */
#define PDR_ENGINE_LOAD_MAX_BODY (1u << 20)

typedef struct pdr_engine_load {
    uint64_t reqs;        /* requests on the engine, running and waiting, over its ranks or engines */
    uint64_t waiting;     /* of which waiting */
    uint64_t tokens;      /* sglang: num_tokens over the ranks; vLLM: 0 */
    int64_t kv_usage_ppm; /* KV cache usage in millionths (vLLM: the fullest engine); -1: not reported */
    unsigned reqs_seen;   /* how many ranks or series gave the request counts (0: the answer had none) */
    unsigned tokens_seen; /* how many ranks gave num_tokens */
    int list;             /* sglang: the answer was a list (1) or one object (0) */
} pdr_engine_load_t;

/* sglang's /get_load answer: the sum over its ranks (rank < 0), or the object of one data-parallel rank
 * (dp_rank == rank; the older one-object form stands for every rank). 0 with *out filled (reqs_seen may be
 * 0: no object names the counts, or none is the rank's), PDR_EPROTO when it is not JSON, neither a list nor
 * an object, or a count read is negative or not an integer. */
int pdr_engine_load_parse_sglang(const char *buf, size_t len, int rank, pdr_engine_load_t *out);

/* vLLM's /metrics answer (Prometheus text exposition). 0 with *out filled (reqs_seen 0 when neither request
 * gauge is there), PDR_EPROTO when a line is not a sample or a comment, or one of the gauges read is not a
 * finite number >= 0 (the KV usage also at most 1); PDR_ETOOBIG past PDR_ENGINE_LOAD_MAX_BODY. */
int pdr_engine_load_parse_prometheus(const char *buf, size_t len, pdr_engine_load_t *out);

#endif
