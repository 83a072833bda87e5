/*
 * Default values and accepted ranges of the configuration keys, named once for the schema table
 * (schema.c: each key's row takes its default and range from here) and for what else needs the number
 * (the flags, the ceilings on lists). Keep docs/config.md in sync when a value here changes.
 */
#ifndef PDR_CONFIG_DEFAULTS_H
#define PDR_CONFIG_DEFAULTS_H

#define PDR_DEF_LISTEN_HOST "0.0.0.0"
#define PDR_DEF_LISTEN_PORT 8000 /* sglang router's default port */
#define PDR_DEF_ADMIN_HOST "127.0.0.1"
#define PDR_DEF_ADMIN_PORT 8001
/* The metrics-only listener: off unless metrics.port is set. 0.0.0.0 and 29000 are the sglang router's
 * --prometheus-host and --prometheus-port defaults (29000 is used when only --prometheus-host is given). */
#define PDR_DEF_METRICS_HOST "0.0.0.0"
/* The session headers: x-session-id, the first name the vLLM router's consistent hashing reads, and
 * x-dynamo-session-id, what NVIDIA Dynamo's agent clients send for its session affinity. */
#define PDR_DEF_AFFINITY_HEADERS "x-session-id x-dynamo-session-id"
/* epp.prefill_header: the header llm-d's endpoint picker names the chosen prefill in, which its decode
 * sidecar reads. */
#define PDR_DEF_EPP_PREFILL_HEADER "x-prefiller-host-port"
/* sidecar.prefill_header: the header llm-d's endpoint picker names the chosen prefill in. */
#define PDR_DEF_SIDECAR_HEADER "x-prefiller-host-port"
#define PDR_DEF_METRICS_PORT 0
#define PDR_SGLANG_PROMETHEUS_PORT 29000
#define PDR_CONFIG_MAX_ORIGINS 256 /* entries of cors.allowed_origins */
#define PDR_CONFIG_MAX_ORIGIN 2048 /* bytes of one origin */
/* Networks the admin API adds no worker in: link-local (169.254.0.0/16, RFC 3927; fe80::/10, RFC 4291),
 * which holds the cloud instance-metadata address 169.254.169.254, and fd00:ec2::254, AWS's IPv6
 * instance-metadata address. */
#define PDR_DEF_ADMIN_DENY_NETWORKS                                                                          \
    {                                                                                                        \
        "169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128"                                                   \
    }
#define PDR_CONFIG_MAX_NETWORKS 1024 /* entries of admin.deny_worker_networks */

#define PDR_DEF_HEALTH_PATH "/health"
#define PDR_DEF_HEALTH_INTERVAL_MS 2000
#define PDR_DEF_HEALTH_TIMEOUT_MS 1000
#define PDR_DEF_HEALTH_RISE 2
#define PDR_DEF_HEALTH_DRAIN_STATUS 410
#define PDR_DEF_HEALTH_FALL 3

#define PDR_DEF_CONNECT_MS 1000
#define PDR_DEF_FIRST_BYTE_MS 60000
#define PDR_DEF_KV_TRANSFER_MS 30000 /* well below the engines' own 300 s KV timeouts (sglang, mooncake) */
#define PDR_DEF_STREAM_IDLE_MS 300000

#define PDR_DEF_DRAIN_GRACE_MS 5000 /* load balancers and endpoints stop sending */
#define PDR_DEF_DRAIN_TIMEOUT_MS 30000

#define PDR_DEF_MAX_BODY_BYTES 33554432 /* 32 MiB */
#define PDR_DEF_MAX_INFLIGHT 4096
/* Client-side limits (router/front/limits.c, router/front/conn.c). A request head must arrive within 10 s
 * (h2o's own request timeout, HAProxy's usual `timeout http-request`; nginx allows 60 s); a body may pause 60
 * s between reads (nginx's client_body_timeout); an idle keep-alive connection is kept 75 s (nginx's
 * keepalive_timeout: longer than the idle expiry of common client pools, 5 s in httpx, 15 s in aiohttp,
 * so that the client, not the router, closes first). 100 concurrent HTTP/2 streams is what h2o 2.2.5
 * advertises and enforces (a constant of the library; RFC 9113 recommends no fewer than 100): the limit
 * caps the streams of a connection processed at once, the others wait in h2o's queue. 1000 control frames
 * (SETTINGS, PING, PRIORITY, CONTINUATION) per connection in any 10 s is far above what an ordinary client
 * sends (one SETTINGS at the start, a PING now and then, a few PRIORITY frames). */
#define PDR_DEF_CLIENT_HEADER_MS 10000
#define PDR_DEF_CLIENT_BODY_MS 60000
#define PDR_DEF_KEEPALIVE_IDLE_MS 75000
/* Lingering close after an early answer: nginx's lingering_time (30 s) and lingering_timeout (5 s); the
 * bytes discarded at most, 4 times the default body limit. */
#define PDR_DEF_LINGERING_MS 30000
#define PDR_DEF_LINGERING_IDLE_MS 5000
#define PDR_DEF_MAX_LINGERING_BYTES ((int64_t)128 << 20)
/* HTTP/2 request bodies: what one connection may hold (two default bodies), and all of them together. */
#define PDR_DEF_H2_MAX_CONNECTION_BODY_BYTES ((int64_t)64 << 20)
#define PDR_DEF_MAX_BODY_MEMORY_BYTES ((int64_t)1 << 30)
#define PDR_DEF_H2_MAX_CONCURRENT_STREAMS 100
#define PDR_MAX_H2_MAX_CONCURRENT_STREAMS 100 /* h2o 2.2.5 refuses streams past 100 open itself */
#define PDR_DEF_H2_MAX_CONTROL_FRAMES 1000
/* Items of one batched request (a prompt array, input_ids lists, chat n): each costs the router a room,
 * a ticket and bytes in both legs' bodies, and the loop builds them in one go. 1024 items make legs of a
 * few hundred KiB; a client with more sends several requests. */
#define PDR_DEF_MAX_BATCH_ITEMS 1024
/* A KV event publisher (router/fleet/kv_events.c): one message is one engine step's events, and a step stores
 * at most the engine's tokens per step (its chunked-prefill size, thousands of tokens by default: tens
 * of KiB of BlockStored); 1 MiB holds about 190 000 tokens. Past it libzmq drops the publisher's connection
 * (ZMQ_MAXMSGSIZE). 256 messages queued per publisher (ZMQ_RCVHWM; past it libzmq drops messages, seen
 * as a gap) bound what one publisher can make the router hold to 256 times the message cap. */
#define PDR_DEF_KV_MAX_MESSAGE_BYTES ((int64_t)1 << 20)
#define PDR_MIN_KV_MAX_MESSAGE_BYTES 4096
#define PDR_MAX_KV_MAX_MESSAGE_BYTES ((int64_t)16 << 20) /* PDR_KV_MAX_PAYLOAD: the decoder's ceiling */
#define PDR_DEF_KV_QUEUE_MESSAGES 256
#define PDR_MAX_KV_QUEUE_MESSAGES 1000000
#define PDR_MAX_MAX_BATCH_ITEMS 1000000
#define PDR_MAX_H2_MAX_CONTROL_FRAMES 10000000
#define PDR_MAX_CLIENT_CONNECTIONS 10000000
/* Admission: sglang's router defaults (--queue-size 100, --queue-timeout-secs 60). */
#define PDR_DEF_QUEUE 100
#define PDR_MAX_QUEUE 1000000
#define PDR_MAX_ADMIT_TENANTS 1024 /* admission.max_tenants (PDR_FAIRQ_MAX_TENANTS) */
#define PDR_DEF_QUEUE_TIMEOUT_MS 60000
#define PDR_MAX_RATE_LIMIT_RPS 10000000
/* Streams an HTTP/2 client may reset or abandon before their answer ends, per connection in any 10 s
 * (a token bucket of this size refilled over 10 s); past it the connection is closed (the rapid-reset
 * attack, CVE-2023-44487). 0: no limit. */
#define PDR_DEF_H2_MAX_RESETS 200
#define PDR_MAX_H2_RESETS 1000000
/* A non-streaming answer with logprobs is held whole (the prefill's input logprobs go in front of the
 * decode's): past this the request is answered 502 before any byte is sent. */
#define PDR_DEF_MAX_MERGE_BYTES (64LL << 20)
#define PDR_MIN_MERGE_BYTES 4096LL
#define PDR_MAX_MERGE_BYTES (1LL << 30)
#define PDR_DEF_RETRIES 2
/* Request head limits (431 above them). A field counts as name + value + 4 (": " and CRLF, as HTTP/1
 * writes it). h2o 2.2.5 parses at most H2O_MAX_HEADERS = 100 fields of an HTTP/1 request (it answers a
 * plain 400 to more) and closes a connection whose head passes H2O_MAX_REQLEN = 8192 + 4096 * 100
 * bytes, so both maxima stay below what h2o accepts and the router answers first. */
#define PDR_DEF_MAX_HEADER_BYTES 32768
#define PDR_MIN_MAX_HEADER_BYTES 1024
#define PDR_MAX_MAX_HEADER_BYTES 262144
#define PDR_DEF_MAX_HEADERS 100
#define PDR_MAX_MAX_HEADERS 100
/* sglang router's default --request-id-headers. */
#define PDR_DEF_REQUEST_ID_HEADERS                                                                           \
    {                                                                                                        \
        "x-request-id", "x-correlation-id", "x-trace-id", "request-id"                                       \
    }
#define PDR_CONFIG_MAX_REQUEST_ID_HEADERS 16
#define PDR_CONFIG_MAX_HEADER_NAME 64
#define PDR_CONFIG_MAX_API_KEY 4096

#define PDR_DEF_ACCESS_LOG "-"
#define PDR_DEF_LOG_LEVEL "info"

/* Discovery (router/discovery/discovery.h). */
#define PDR_DEF_BOOTSTRAP_PORT 8998 /* sglang's default --disaggregation-bootstrap-port */
#define PDR_DEF_DNS_INTERVAL_MS 5000
#define PDR_DEF_DNS_PORT 53 /* of discovery.dns.resolver when it names none (RFC 1035) */
#define PDR_DEF_K8S_WATCH_TIMEOUT_S 300
#define PDR_DEF_K8S_BOOTSTRAP_ANNOTATION "sglang.ai/bootstrap-port" /* sglang router's default */
/* llm-d's label of a pod's prefill/decode role */
#define PDR_DEF_K8S_ROLE_LABEL "llm-d.ai/role"
#define PDR_SGLANG_DISCOVERY_PORT 80 /* sglang router's --service-discovery-port default */
#define PDR_MIN_DNS_INTERVAL_MS 100
#define PDR_MAX_DNS_INTERVAL_MS 3600000 /* one hour */
#define PDR_MAX_K8S_WATCH_TIMEOUT_S 3600

/* Ranges. Durations are positive and at most one day, so that "ms * 1000000" fits any int64. */
#define PDR_MAX_MS 86400000
#define PDR_MAX_RISE_FALL 1000
#define PDR_MAX_RETRIES 10
/* outlier: defaults (Envoy's outlier detection: 5 consecutive 5xx, 30 s base, 300 s max, 10%; panic 50%). */
#define PDR_DEF_OUTLIER_CONSECUTIVE 5
#define PDR_DEF_OUTLIER_BASE_MS 30000
#define PDR_DEF_OUTLIER_MAX_MS 300000
#define PDR_DEF_OUTLIER_MAX_PERCENT 10
#define PDR_DEF_OUTLIER_PANIC_PERCENT 50
#define PDR_MAX_OUTLIER_CONSECUTIVE 1000
#define PDR_MAX_HASH_PREFIX_CHARS (1 << 20) /* cache_aware.hash_prefix_chars: 1 MiB of prompt */
#define PDR_MAX_THREADS 256
#define PDR_MAX_TRACE_BATCH 65536   /* tracing.batch_max */
#define PDR_MAX_TRACE_QUEUE 1048576 /* tracing.queue_max: spans of about 1 KiB each */
#define PDR_MAX_TRACE_MS 600000     /* tracing.flush_ms, tracing.timeout_ms: 10 min */
#define PDR_MIN_BODY_BYTES 1024
#define PDR_MAX_BODY_BYTES ((int64_t)1 << 40) /* 1 TiB: a sanity ceiling, not a recommendation */
#define PDR_MAX_INFLIGHT 10000000
#define PDR_MAX_DISAGG_MIN (1 << 30) /* disaggregation.min_prefill_{tokens,chars} */
#define PDR_MAX_CONNS_PER_WORKER 1000000

/* Ceilings on what a configuration may hold; more is refused rather than allocated. */
#define PDR_CONFIG_MAX_WORKERS 4096     /* per role */
#define PDR_CONFIG_MAX_FILE (16u << 20) /* bytes of YAML */
#define PDR_CONFIG_MAX_URL 2048         /* bytes of one worker URL */
#define PDR_CONFIG_MAX_POOL_NAME 63     /* bytes of a pool's name */
#define PDR_CONFIG_MAX_MODELS 1024      /* models of one pool */
#define PDR_CONFIG_MAX_MODEL_NAME 256   /* bytes of a model name */

/* ticket.ttl_ms: a ticket is valid this long after signing. 30 s: the default kv_transfer_ms, so a
 * ticket outlives every transfer the router still waits for, and a replay cache keeps a room no longer. */
#define PDR_DEF_TICKET_TTL_MS 30000

#endif
