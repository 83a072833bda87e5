/*
 * The router's configuration: YAML (libyaml) or sglang-compatible command-line flags, validated into
 * an immutable, reference-counted snapshot. Readers take a reference (pdr_config_ref) and never
 * modify a snapshot; a reload builds a new one. Every error message is "file:line:col: message"
 * (1-based line and column) or "argv: message" for flags.
 */
#ifndef PDR_CONFIG_H
#define PDR_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "policies.h" /* pdr_policy_kind_t: an index into routing/'s list of policies */

typedef enum { PDR_PROTO_SGLANG = 0, PDR_PROTO_VLLM, PDR_PROTO_PDSHIM } pdr_protocol_t;
/* PDR_ROLE_REGULAR: a non-disaggregated worker that runs whole requests (workers.regular), used only when
 * conditional disaggregation skips the prefill with protocol sglang. Arrays "by role" of prefill and
 * decode have 2 entries; those that hold regular workers too have PDR_ROLES. */
typedef enum { PDR_ROLE_PREFILL = 0, PDR_ROLE_DECODE = 1, PDR_ROLE_REGULAR = 2 } pdr_role_t;
#define PDR_ROLES 3
/* pd.relay: when the decode's answer is relayed to the client (sglang protocol). */
typedef enum { PDR_RELAY_FIRST_BYTE = 0, PDR_RELAY_AFTER_PREFILL } pdr_relay_t;
/* outlier: passive health (router/workers/outlier.h, docs/operations.md "Passive health"). */
typedef struct pdr_outlier_conf {
    int enabled;                 /* default 1 (true); false: request failures count against health.fall */
    int consecutive_failures;    /* default 5: consecutive failed requests that eject a worker */
    int base_ejection_ms;        /* default 30000: the first ejection; the n-th lasts n times as long ... */
    int max_ejection_ms;         /* default 300000: ... up to this (or base_ejection_ms when larger) */
    int max_ejection_percent;    /* default 10: of a role's workers in a pool ejected at once (at least 1) */
    int panic_threshold_percent; /* default 50: below this share serving, picks ignore health; 0 = never */
    int slow_start_ms;           /* default 0 (off): a returning worker's weight ramps up over this */
    int probation_successes; /* default 0 (off): after a return, one failure among this many requests ejects
                                again (the sglang router's half-open state) */
    int failure_window_ms;   /* default 0 (none): a failure this long after the previous one starts the
                                count afresh (the sglang router's window) */
} pdr_outlier_conf_t;

typedef struct pdr_worker_conf {
    char *url;          /* normalized (see pdr_worker_conf_parse_url): "http://127.0.0.1:30001" */
    char *host;         /* host part as in the normalized URL; IPv6 without brackets */
    int port;           /* explicit or the scheme's default */
    int is_ipv6;        /* host is an IPv6 literal (bracketed in bootstrap_host) */
    int bootstrap_port; /* prefill only; -1 = none (sent as JSON null) */
    int dp_size;        /* data-parallel attention ranks: 0 or 1 = one target; N > 1 = N routing targets */
    int dp_rank;        /* with dp_size > 1, in the pool's per-rank copies: the rank, 0..dp_size-1 (else
                           unused: config lists hold one entry per worker) */
    char *kv_events;    /* the worker's KV event publisher (ZMQ endpoint tcp://HOST:PORT); NULL = none */
    char *kv_events_replay; /* its replay socket (vLLM's replay_endpoint, a ROUTER); NULL = none */
} pdr_worker_conf_t;
#define PDR_MAX_DP_SIZE 1024 /* dp_size of one worker */

/* An IP network (admin.deny_worker_networks). */
typedef struct pdr_ipnet {
    int family;       /* AF_INET or AF_INET6 */
    int prefix;       /* 0..32 or 0..128 */
    uint8_t addr[16]; /* the network address; IPv4 in the first 4 bytes */
    char text[52];    /* canonical "address/prefix", for messages */
} pdr_ipnet_t;

/* Dynamic workers (router/discovery/discovery.h): the top-level discovery: of the one-pool form, or a pool's
 * own. A role's target is in use when its name (dns) or selector (kubernetes) is non-NULL, or (both roles)
 * when kubernetes.inference_pool is. */
typedef struct pdr_discovery_conf {
    struct {
        struct {
            char *name;         /* A/AAAA name, e.g. a headless Service; NULL = role unused */
            int port;           /* worker HTTP port, required with a name */
            int bootstrap_port; /* prefill: default 8998; -1 = none ("none" in YAML); decode: -1 */
            int https;          /* scheme: https (workers reached over TLS, workers.tls) */
        } role[2];              /* [PDR_ROLE_PREFILL], [PDR_ROLE_DECODE] */
        int interval_ms;        /* default 5000: re-resolve period */
        char *resolver;         /* "IP[:PORT]" of the DNS server to ask; NULL = /etc/resolv.conf */
    } dns;
    struct {
        struct {
            char *selector;     /* label selector "k=v,k2=v2"; NULL = role unused */
            int port;           /* worker HTTP port; 0 (default) = the pod's first containerPort */
            int bootstrap_port; /* prefill default 8998 unless the pod has the annotation
                                   sglang.ai/bootstrap-port; -1 = none; decode: -1 */
            int https;          /* scheme: https */
        } role[2];
        char *api_server;    /* default https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT */
        char *namespace_;    /* YAML "namespace"; default: the service account's namespace file,
                                else "default" */
        char *token_file;    /* default /var/run/secrets/kubernetes.io/serviceaccount/token */
        char *ca_file;       /* default /var/run/secrets/kubernetes.io/serviceaccount/ca.crt */
        int watch_timeout_s; /* default 300: timeoutSeconds of each watch request */
        char *bootstrap_port_annotation; /* default sglang.ai/bootstrap-port */
        char *inference_pool; /* an InferencePool's name: both roles' pods come from it (no selector) */
        char *role_label;     /* the pod label naming a pool pod's role; default llm-d.ai/role */
    } kubernetes;
} pdr_discovery_conf_t;

/* cache_aware's seed for prompts no worker holds far enough (routing/routing.h). */
typedef enum { PDR_CA_SEED_SMALLEST_TREE = 0, PDR_CA_SEED_CONSISTENT_HASH = 1 } pdr_ca_seed_t;
/* affinity.mode: whether a request's session key keeps it on the workers its session used
 * (router/workers/affinity.h). */
typedef enum { PDR_AFFINITY_OFF = 0, PDR_AFFINITY_SOFT = 1, PDR_AFFINITY_HARD = 2 } pdr_affinity_mode_t;
/* affinity.headers: at most this many names, each at most PDR_AFFINITY_HEADER_MAX bytes. */
#define PDR_AFFINITY_HEADERS_MAX 8
#define PDR_AFFINITY_HEADER_MAX 64

/* compat.unknown: what a pick does with a worker whose identity is not known yet. */
typedef enum { PDR_COMPAT_UNKNOWN_ALLOW = 0, PDR_COMPAT_UNKNOWN_REFUSE = 1 } pdr_compat_unknown_t;

/* The cache_aware settings a pool, or one role of it, may set for itself (`pools[i].cache_aware`, with
 * `prefill:` and `decode:` inside). In a pool a negative value is "not set": the role's own, else the
 * pool's, else the top-level cache_aware: applies (pdr_config_pool_cache_aware). */
typedef struct pdr_cache_aware_conf {
    double cache_threshold;
    int balance_abs_threshold;
    double balance_rel_threshold;
    int seed; /* pdr_ca_seed_t */
    int hash_prefix_chars;
    double hash_load_factor;
} pdr_cache_aware_conf_t;

/* One pool of `pools:`: the workers that serve a set of models, with their own protocol and policies. */
typedef struct pdr_pool_conf {
    char *name;      /* unique, [a-z0-9_-], at most PDR_CONFIG_MAX_POOL_NAME bytes */
    char **models;   /* the model names it serves (at least one; each in one pool only) */
    size_t n_models; /* 0 only in the shorthand's view (pdr_config_pool): any model */
    pdr_protocol_t protocol;
    pdr_policy_kind_t policy_prefill, policy_decode;
    pdr_worker_conf_t *prefill;
    size_t n_prefill;
    pdr_worker_conf_t *decode;
    size_t n_decode;
    pdr_worker_conf_t *regular; /* workers.regular: non-disaggregated workers (conditional disaggregation) */
    size_t n_regular;
    struct {
        int connect_ms, first_byte_ms, kv_transfer_ms, stream_idle_ms; /* 0: the top-level timeouts' */
        int kv_transfer_ms_per_1k_tokens;                              /* 0: the top-level one */
    } timeouts;
    pdr_discovery_conf_t discovery;     /* the pool's discovery: (the shorthand's view: the top-level one) */
    pdr_cache_aware_conf_t cache_aware; /* the pool's own (negative: not set) */
    pdr_cache_aware_conf_t cache_aware_role[2]; /* [PDR_ROLE_PREFILL], [PDR_ROLE_DECODE]: the roles' own */
    /* The pool's tokenizer: a tokenizer.json or a model directory (NULL: the top-level tokenizer), and
     * where the key stands in the file (1-based; 0 when not read from YAML), for the loader's errors. */
    char *tokenizer;
    size_t tokenizer_line, tokenizer_col;
} pdr_pool_conf_t;

/* The deadlines a request of pool pc runs with: the pool's own where it sets them, else c's. */
typedef struct pdr_timeouts {
    int connect_ms, first_byte_ms, kv_transfer_ms, stream_idle_ms;
    int kv_transfer_ms_per_1k_tokens; /* added to kv_transfer_ms per 1024 prompt tokens
                                       * (router/workers/kvdeadline.h)
                                       */
} pdr_timeouts_t;

/* listen.tls.min_version and listen.tls.alpn values. */
enum { PDR_TLS_1_2 = 12, PDR_TLS_1_3 = 13 };
enum { PDR_ALPN_H2 = 1, PDR_ALPN_HTTP11 = 2 };

typedef struct pdr_config {
    char *source; /* file name, or "<command line>" */

    char *listen_host;      /* default 0.0.0.0 */
    int listen_port;        /* default 8000 */
    char *admin_host;       /* default 127.0.0.1 */
    int admin_port;         /* default 8001; 0 disables the admin listener */
    char *admin_token_file; /* NULL: no token (development) */
    char *metrics_host;     /* default 0.0.0.0: the metrics-only listener (sglang's --prometheus-host) */
    int metrics_port;       /* default 0: no metrics-only listener (GET /metrics stays on both ports) */
    struct {
        char **origins; /* allowed Origin values; "*" allows any; n == 0: no CORS headers at all */
        size_t n;
    } cors;
    struct {
        pdr_ipnet_t *nets; /* workers the admin API refuses to add; default PDR_DEF_ADMIN_DENY_NETWORKS */
        size_t n;
    } admin_deny_networks;

    pdr_protocol_t protocol;          /* default sglang */
    pdr_policy_kind_t policy_prefill; /* default round_robin */
    pdr_policy_kind_t policy_decode;  /* default least_load */

    pdr_worker_conf_t *prefill;
    size_t n_prefill;
    pdr_worker_conf_t *decode;
    size_t n_decode;
    pdr_worker_conf_t *regular; /* workers.regular: non-disaggregated workers (conditional disaggregation) */
    size_t n_regular;
    /* The key every worker request carries as "Authorization: Bearer KEY" (legs, health checks, the
     * model list): read from workers.api_key_file when the config is loaded, or given with --api-key.
     * NULL: none (the client's Authorization is forwarded instead). Never logged. */
    char *worker_api_key_file;
    char *worker_api_key;
    /* ticket: (protocol pdshim, docs/internals/tickets.md): the key files, read into keys when the config
     * is loaded (a reload reads them again); the first signs, the shims verify with any. keys NULL: none. */
    struct {
        char *key_files[4]; /* PDR_KEYRING_MAX */
        size_t n_key_files;
        struct pdr_keyring *keys;
        int ttl_ms; /* default 30000: a ticket's validity, from signing */
    } ticket;

    /* Client headers that may carry the request id, in order of preference, lower case (YAML
     * request_id_headers, --request-id-headers). Default PDR_DEF_REQUEST_ID_HEADERS; empty: the router
     * always makes the id. */
    char **request_id_headers;
    size_t n_request_id_headers;

    /* `pools:` (n_pools > 0): then protocol, policy_* and the static lists above are unused (defaults and
     * empty), and the router reads each pool's. n_pools == 0: the one-pool shorthand, a pool named
     * "default" of the top-level keys serving every model. Read both forms through pdr_config_pool. */
    pdr_pool_conf_t *pools;
    size_t n_pools;

    struct {
        char *path;       /* default /health */
        int interval_ms;  /* default 2000 */
        int timeout_ms;   /* default 1000 */
        int rise;         /* default 2 */
        int fall;         /* default 3 */
        int drain_status; /* default 410: a check answered with it drains the worker; 0 = off */
    } health;
    struct {
        int connect_ms;                   /* default 1000 */
        int first_byte_ms;                /* default 60000 */
        int kv_transfer_ms;               /* default 30000 */
        int stream_idle_ms;               /* default 300000 */
        int kv_transfer_ms_per_1k_tokens; /* default 0: the KV deadline does not grow with the prompt */
        /* Client side (router/front/limits.c, conn.c): */
        int client_header_ms;  /* default 10000: a request head must arrive within it (408) */
        int client_body_ms;    /* default 60000: longest pause inside a request body (408) */
        int keepalive_idle_ms; /* default 75000: an idle keep-alive connection is closed after it */
        int lingering_ms; /* default 30000: after an early answer, the rest is read and dropped so long */
        int lingering_idle_ms; /* default 5000: ... or until the client pauses so long */
    } timeouts;
    struct {
        int drain_grace_ms;            /* default 5000: readiness off, still serving */
        int drain_timeout_ms;          /* default 30000: listeners closed, waiting for requests in flight */
        int worker_startup_timeout_ms; /* default 0: none; else exit 1 when no healthy pair by then */
    } lifecycle;
    struct {
        int64_t max_body_bytes;         /* default 33554432 */
        int max_inflight;               /* default 4096 */
        int max_connections_per_worker; /* default 0: no limit; else shared out across the loops */
        int h2_max_resets; /* default 200: streams an HTTP/2 client may abandon per connection in 10 s */
        int64_t max_merge_bytes; /* default 64 MiB: a non-streaming answer held whole for the logprob merge */
        int max_header_bytes;    /* default 32 KiB: the request's header fields (431 above) */
        int max_headers;         /* default 100: header fields per request (431 above; h2o's own cap) */
        int max_batch_items;     /* default 1024: items of one batched PD request (400 above) */
        /* Client side (router/front/limits.c, conn.c): */
        int max_client_connections;      /* default 0: no limit; else accepting pauses at it */
        int max_idle_client_connections; /* default 0: no limit; else the oldest idle ones are closed */
        int64_t max_lingering_bytes;     /* default 128 MiB: dropped after an early answer; past it, cut */
        int64_t
            h2_max_connection_body_bytes; /* default 64 MiB: HTTP/2 bodies one connection holds (0: no cap) */
        int64_t max_body_memory_bytes;    /* default 1 GiB: HTTP/2 bodies all connections hold (0: no cap) */
        int h2_max_concurrent_streams;    /* default 100: streams of a connection processed at once */
        int h2_max_control_frames;        /* default 1000: SETTINGS/PING/PRIORITY/CONTINUATION per 10 s */
        /* Admission (router/fleet/admission.c, docs/internals/admission.md). */
        int max_inflight_per_pool;   /* default 0: none; else the PD requests in flight per pool */
        int max_inflight_per_worker; /* default 0: none; else a worker with as many legs is not picked */
        int queue;                   /* default 100 (sglang's --queue-size): requests waiting for room */
        int queue_timeout_ms;        /* default 60000 (sglang's --queue-timeout-secs 60): then 503 */
        double rate_limit_rps;       /* default 0: off; else new requests per second (a token bucket) */
        int rate_limit_burst;        /* default 0: the bucket holds max(1, rate_limit_rps) tokens */
    } limits;
    struct {
        int max;                   /* default 2 */
        int budget_percent;        /* default 20: retries in flight at most this share of the requests ... */
        int min_concurrent;        /* default 3: ... or this many, whichever is more (Envoy's retry budget) */
        int initial_backoff_ms;    /* default 50: the wait before the first retry (0: none) */
        int max_backoff_ms;        /* default 30000: the wait's cap */
        double backoff_multiplier; /* default 1.5: each further retry waits this times longer */
        double jitter_factor;      /* default 0.2: each wait is drawn in [1 - j, 1 + j] times its value */
    } retries;
    pdr_outlier_conf_t outlier;
    /* The pair-aware breaker (router/workers/breaker.h): a prefill -> decode link with consecutive_failures
     * KV failures in a row is avoided for open_ms (doubling per re-open up to max_open_ms), then probed. */
    struct {
        int enabled;              /* default 1 */
        int consecutive_failures; /* default 3 */
        int open_ms;              /* default 10000 */
        int max_open_ms;          /* default 300000 */
    } breaker;
    /* Compatible pairs (router/workers/identity.h): a prefill and a decode are paired only when the
     * identities their engines report (model, revision, KV layout) agree. */
    struct {
        int enabled; /* default 1 */
        int unknown; /* pdr_compat_unknown_t, default allow: a worker not identified yet pairs with any */
    } compat;
    /* Session affinity (router/workers/affinity.h): a request that names its session in one of the headers
     * goes to the rendezvous choice of its session key among the eligible workers of each role. */
    struct {
        int mode;              /* pdr_affinity_mode_t, default off */
        char *headers;         /* lower-case header names separated by spaces or commas, by preference */
        double max_load_ratio; /* default 1.5: soft mode's bound on the choice's in-flight count */
    } affinity;
    /* The Gateway API endpoint picker (router/gateway/epp_pick.c): an Envoy ext_proc gRPC server that picks
     * the decode endpoint (and names the prefill in a header) for a gateway, with the router's policies. */
    struct {
        int enabled;     /* default 0; --epp */
        char *host;      /* default 0.0.0.0 */
        int port;        /* default 9002, the extension's conventional port */
        int health_port; /* default 9003: gRPC health (and ext_proc) on a second listener; 0: none */
        int fallbacks;   /* default 2: decode endpoints listed after the pick, for the gateway's retries */
        char *prefill_header; /* lower-case header name, default x-prefiller-host-port */
        int max_connections;  /* default 64 */
        int max_streams;      /* default 1024, per connection */
    } epp;
    /* Sidecar mode (router/pd/sidecar.c): one router beside one decode engine, the pool's prefills its
     * allowlist; a request's prefill_header names the prefill (host:port of a prefill worker's URL). */
    struct {
        int enabled;          /* default 0; --sidecar */
        char *prefill_header; /* lower-case header name, default x-prefiller-host-port */
    } sidecar;
    /* Stream migration (router/pd/migrate.c): a decode that fails mid-stream hands the stream to a new pair,
     * the prompt extended by what the client already has, and the client sees one unbroken stream. */
    struct {
        int enabled;      /* default 1 */
        int max_attempts; /* default 2: migrations of one request */
        int64_t
            max_bytes; /* default 1 MiB: the relayed events a migration reads back; past it, no migration */
    } migration;
    struct {
        double cache_threshold;       /* default 0.3: a match longer than this share of the prompt wins */
        int balance_abs_threshold;    /* default 64: loads are imbalanced when max - min exceeds it ... */
        double balance_rel_threshold; /* default 1.5: ... and max exceeds min times it */
        int eviction_interval_secs;   /* default 120: the trees are trimmed this often */
        int64_t max_tree_size;        /* default 2^26: bytes of prompt text kept per worker */
        int seed;                     /* pdr_ca_seed_t, default consistent_hash (docs/config.md says why) */
        int hash_prefix_chars;        /* default 256: the consistent-hash key is this many leading bytes */
        double hash_load_factor;      /* default 1.5: no worker seeded above this times the mean load */
    } cache_aware;
    struct {
        int64_t max_index_bytes;   /* default 64 MiB: the precise prefix index's hard cap, all workers */
        int resync_messages;       /* default 32: consecutive messages after a gap before a worker counts */
        int64_t max_message_bytes; /* default 1 MiB: a frame's cap (ZMQ_MAXMSGSIZE) */
        int queue_messages;        /* default 256: messages queued per publisher (ZMQ_RCVHWM) */
        int replay_timeout_ms;     /* default 2000: a replay that has not ended by then is given up */
        int replay_hold_messages;  /* default 1024: live messages held while a replay runs */
        char *snapshot_path;       /* NULL: the index is neither saved nor loaded */
        int snapshot_interval_ms;  /* default 30000; 0: saved only at shutdown */
        char *snapshot_from;       /* NULL, or a sibling router's admin URL (the index fetched at start) */
        char *snapshot_from_token_file; /* the sibling's admin bearer token; NULL: none sent */
        int snapshot_fetch_timeout_ms;  /* default 5000 */
    } kv_events;
    struct {
        pdr_relay_t relay; /* default first_byte: from the decode's first body byte */
        /* Engine aborts (router/pd/abort.c): what the router tells an engine still running a leg it let go.
         */
        int abort; /* default 1 (true): POST /abort_request to an sglang worker that still runs it */
        int abort_timeout_ms; /* default 300: one abort's deadline, connect included; it is never retried */
    } pd;
    /* The shims' event and load reports (docs/internals/shim-events.md): POST /shim/v1/events on the admin
     * listener, signed with HMAC-SHA256 under the key file. key_file NULL (default): the route is off. */
    struct {
        char *key_file;
        int max_skew_ms; /* default 30000: a batch whose timestamp is further from the router's clock is stale
                          */
    } shim_events;
    /* Decode admission by reported free KV (docs/internals/shim-events.md, "Admission"). */
    struct {
        int enabled; /* default 1 (true): a decode that reported load is sent no more than it holds */
        int wait_ms; /* default 2000: how long a request waits for room before a 503 */
        int prompt_bytes_per_token; /* default 4: prompt bytes per token when no token ids are known */
        int max_new_tokens;         /* default 128: output tokens assumed when the body names none */
    } kv_admission;
    /* Priority classes and tenant fairness of the admission queue (docs/internals/admission.md, "Priority and
     * fairness"). classes NULL and fairness_header NULL (default): one FIFO, as without this section. */
    struct {
        char *classes;       /* default NULL: one class; else "a,b,c", the most important first (at most 8) */
        char *default_class; /* default NULL: the first class; a request naming no known class gets this */
        char *class_header;  /* default x-gateway-inference-objective: the header naming a request's class */
        char *fairness_header; /* default NULL: no fairness; else the header whose value keys the tenant */
        int max_tenants;       /* default 64: tenants tracked per class; the others share one sub-queue */
        int shed_queue_depth;  /* default 0: off; else the last class gets 429 at this queue depth */
        char *timeout_header;  /* default NULL: none; else a header of ms that shortens the queue timeout */
        int refuse_late;       /* default 0: off; else a request whose wait cannot end in time gets 503 */
        int priority_field; /* default 1: a body's integer "priority" picks the class (lower: more important)
                             */
    } admission;
    /* Load read from the engines (router/fleet/load_poll.c): GET /get_load (sglang) or /metrics (vLLM). */
    struct {
        int poll_ms;              /* default 0: off; else each worker's load is read this often */
        int timeout_ms;           /* default 1000: deadline of one read */
        int kv_usage_max_percent; /* default 0: off; decode admission skips a decode at or above it */
    } load;
    /* Conditional disaggregation (router/workers/disagg.h): a request whose uncached prompt is short, or that
     * arrives while every prefill is saturated, skips the prefill. Every field 0: off (the default). */
    struct {
        int min_prefill_tokens; /* default 0: a token prompt (input_ids) whose uncached part is shorter
                                   is not disaggregated */
        int min_prefill_chars;  /* default 0: the same for a text prompt, in bytes of its JSON text */
        int skip_when_prefill_saturated; /* default 0 (false) */
        int prefill_saturated_inflight;  /* default 0; >= 1 with skip_when_prefill_saturated: a prefill is
                                            saturated at this many requests in flight */
    } disaggregation;
    struct {
        char *access_log; /* default "-" (stdout); "off" disables */
        char *level;      /* debug|info|warn|error, default info */
        char *dir;        /* NULL (default): the router's log on stderr only; else also DIR/pdrouter.log */
    } log;

    /* Trace export (router/obs/trace.h): spans of each PD request under its W3C trace context. Exporting is
     * on when otlp_endpoint or file is set; read at start (a reload keeps the running exporter). */
    struct {
        char *otlp_endpoint; /* NULL (default): none; else an OTLP/HTTP traces URL (JSON encoding) */
        char *file;          /* NULL (default): none; else a file with one OTLP JSON object per line */
        double sample_ratio; /* default 1: the share of new traces recorded (a client's sampled bit rules) */
        char *service_name;  /* default "pdrouter": the resource's service.name */
        int batch_max;       /* default 512: spans per export request */
        int flush_ms;        /* default 1000: a partial batch waits at most this long */
        int queue_max;       /* default 8192: spans waiting for export; more are dropped and counted */
        int timeout_ms;      /* default 2000: one export request's deadline */
    } tracing;

    /* TLS (router/front/tls.c, router/upstream/upstream_tls.c; docs/security.md). Files are read when a
     * listener or a worker connection needs them: at start and at every reload, not while the config is
     * parsed. */
    struct {
        char *cert_file; /* listen.tls.cert_file, NULL (default): the data-plane port speaks plain HTTP */
        char *key_file;  /* listen.tls.key_file: required with cert_file */
        int min_version; /* listen.tls.min_version: PDR_TLS_1_2 (default) or PDR_TLS_1_3 */
        char *ciphers;   /* listen.tls.ciphers: OpenSSL's TLS 1.2 cipher list; NULL: OpenSSL's default */
        char
            *client_ca_file; /* listen.tls.client_ca_file: clients need a certificate it signed; NULL: none */
        int alpn[2];         /* listen.tls.alpn, in the server's order of preference (PDR_ALPN_*) */
        size_t n_alpn;       /* default 2: h2, http/1.1 */
    } listen_tls;
    struct {
        char *ca_file;     /* workers.tls.ca_file: NULL (default): the system's trust store */
        char *cert_file;   /* workers.tls.cert_file: the router's client certificate, NULL: none */
        char *key_file;    /* workers.tls.key_file: required with cert_file */
        char *server_name; /* workers.tls.server_name: SNI and the name verified; NULL: each URL's host */
        int verify;        /* workers.tls.verify: default 1 (true) */
    } workers_tls;

    int threads; /* event-loop threads; 0 (default) = one per CPU core */
    /* dp_aware (--dp-aware, the sglang router's flag): at start, each static worker without a dp_size is
     * asked its dp_size (GET /get_server_info); router/workers/dpaware.c. Default 0. */
    int dp_aware;
    /* h2_nghttp2: HTTP/2 connections that open with the preface or choose h2 by ALPN are served by
     * libnghttp2 (router/conn_ng2.c) instead of h2o's HTTP/2; read at each accept. */
    int h2_nghttp2;
    char *tokenizer; /* NULL (default): none; else a tokenizer.json the router loads (--tokenizer-path) */

    /* Dynamic workers of the one-pool form, beside the static lists above (which may then be empty).
     * With pools:, each pool has its own (pdr_pool_conf_t.discovery) and this one is unused. */
    pdr_discovery_conf_t discovery;

    int refcnt; /* atomic */
} pdr_config_t;

/* A KV event endpoint the router can connect a ZMQ SUB socket to: tcp://HOST:PORT (HOST a DNS name, an
 * IPv4 address or a bracketed IPv6 one; PORT 1..65535) or ipc://PATH, under 256 bytes. 0, or PDR_EINVAL
 * with the reason in msg. */
int pdr_kv_endpoint_check(const char *s, size_t len, char *msg, size_t msglen);

/* Builds a snapshot with every default and no workers. */
pdr_config_t *pdr_config_new_default(void);

/* Parses and validates a YAML document. On failure returns NULL and writes "name:line:col: message"
 * into err (always NUL-terminated). */
pdr_config_t *pdr_config_load_file(const char *path, char *err, size_t errlen);
pdr_config_t *pdr_config_load_string(const char *text, size_t len, const char *name, char *err,
                                     size_t errlen);

/* Parses the sglang-router-compatible flags (--pd-disaggregation --prefill URL [PORT|none] --decode URL
 * --host H --port P --policy P ...; docs/migrating-from-sglang-router.md lists every one) plus
 * --config FILE and pdrouter's own overrides. argv[0] is the program name. Options it does not know are
 * an error, and so are the sglang router's flags pdrouter has no equivalent for (the message names what
 * exists instead). */
typedef struct pdr_cli {
    int show_help, show_version;
    const char *check_config;                    /* --check-config FILE */
    const char *derive_key_file, *derive_worker; /* --derive-shim-key KEY_FILE WORKER */
    pdr_config_t *config; /* the resulting snapshot when neither help/version/check was asked */
} pdr_cli_t;
/* Returns 0 or a negative PDR_E*. On error *cli is zeroed and err holds "argv: message" (or, when the
 * --config file is invalid, that file's "name:line:col: message"). The caller owns cli->config. */
int pdr_config_parse_args(int argc, char **argv, pdr_cli_t *cli, char *err, size_t errlen);

pdr_config_t *pdr_config_ref(pdr_config_t *c);
void pdr_config_unref(pdr_config_t *c);

const char *pdr_policy_name(pdr_policy_kind_t p);
const char *pdr_protocol_name(pdr_protocol_t p);
/* "off" | "soft" | "hard" (pdr_affinity_mode_t), and back: -1 for another name. */
const char *pdr_affinity_mode_name(int m);
int pdr_affinity_mode_parse(const char *s, size_t len);

/* Parses "http://host[:port][/]" into a worker. Returns 0 or PDR_EINVAL with a message in err. */
/* It overwrites *w entirely (url, host, port, is_ipv6; bootstrap_port = -1) without freeing what *w held;
 * on failure *w owns nothing. PDR_ENOMEM when out of memory.
 * The URL is normalized so that two spellings of one worker are equal strings: scheme and host names in
 * lower case; a numeric host in any IPv4 spelling (127.1, 0x7f000001, 2130706433, 0177.0.0.1) as a
 * dotted quad; IPv6 in its canonical text form (RFC 5952), an IPv4-mapped one (::ffff:127.0.0.1) as
 * plain IPv4; port 80 left out, no trailing slash. Addresses no worker can have are refused: the
 * unspecified 0.0.0.0 and ::, the broadcast 255.255.255.255, multicast 224.0.0.0/4 and ff00::/8. */
int pdr_worker_conf_parse_url(const char *url, pdr_worker_conf_t *w, char *err, size_t errlen);

/* Parses "ADDRESS" (one address) or "ADDRESS/PREFIX" (IPv4 a.b.c.d or IPv6), refusing bits set past the
 * prefix. An IPv4-mapped IPv6 network (::ffff:0:0/96 and longer) becomes the IPv4 one. Returns 0, or
 * PDR_EINVAL with a message in err. */
int pdr_ipnet_parse(const char *s, size_t len, pdr_ipnet_t *net, char *err, size_t errlen);
/* Index of the first of nets[0..n) that holds the worker's address, or -1 (also for host names, which
 * are resolved only when connecting). */
long pdr_ipnet_find(const pdr_ipnet_t *nets, size_t n, const pdr_worker_conf_t *w);
void pdr_worker_conf_clear(pdr_worker_conf_t *w);

/* Additions beyond the original contract. */

/* Prints the command-line help (what --help shows) to out. */
void pdr_config_usage(FILE *out);

/* Checks a whole snapshot (ranges, at least one prefill and one decode worker, no duplicate workers,
 * no bootstrap_port on a decode worker). For snapshots built in code; the loaders already run it.
 * Returns 0 or PDR_ECONFIG with "key: message" in err. */
int pdr_config_validate(const pdr_config_t *c, char *err, size_t errlen);
#define PDR_CONFIG_MAX_CLASSES 8       /* names of admission.classes */
#define PDR_CONFIG_CLASS_NAME_MAX 32   /* bytes of one class name */
#define PDR_CONFIG_HEADER_NAME_MAX 128 /* bytes of admission.*_header, its NUL included */
/* The index of the class named name[0..len) in admission.classes ("a,b,c"), or -1; classes NULL has one
 * class, index 0, whatever the name. */
int pdr_config_class_index(const char *classes, const char *name, size_t len);
/* How many classes admission.classes names (1 when NULL). */
int pdr_config_class_count(const char *classes);
/* Class i's name into out (cap bytes, NUL-terminated): "default" when classes is NULL. */
void pdr_config_class_name(const char *classes, int i, char *out, size_t cap);

/* Pools (both forms). pdr_config_pool_count: n_pools, or 1 for the shorthand. pdr_config_pool: a shallow
 * copy of the i-th pool into *out (its pointers borrowed from the snapshot); for the shorthand a view
 * named "default" (n_models 0: any model) of the top-level keys. */
size_t pdr_config_pool_count(const pdr_config_t *c);
void pdr_config_pool(const pdr_config_t *c, size_t i, pdr_pool_conf_t *out);
/* The cache_aware settings of role (a pdr_role_t) in pool pc (NULL: the top-level ones): the role's own
 * where set, else the pool's, else the top-level cache_aware's. */
void pdr_config_pool_cache_aware(const pdr_config_t *c, const pdr_pool_conf_t *pc, int role,
                                 pdr_cache_aware_conf_t *out);
/* The deadlines of a request served by pool pc (NULL: the top-level timeouts). */
void pdr_config_pool_timeouts(const pdr_config_t *c, const pdr_pool_conf_t *pc, pdr_timeouts_t *out);
/* The pool that serves the model model[0..len): its index, or -1 when none does. The shorthand serves
 * every model (0, whatever the name). */
long pdr_config_pool_for_model(const pdr_config_t *c, const char *model, size_t len);
/* The pool named name[0..len): its index, or -1. */
long pdr_config_pool_find(const pdr_config_t *c, const char *name, size_t len);
#define PDR_DEFAULT_POOL "default"
#define PDR_CONFIG_MAX_POOLS 64 /* entries of pools: */

/* Name → enum ("round_robin", "sglang", ...), the inverse of pdr_policy_name/pdr_protocol_name.
 * Return 0 or PDR_EINVAL. */
int pdr_policy_parse(const char *name, pdr_policy_kind_t *out);
int pdr_protocol_parse(const char *name, pdr_protocol_t *out);

#endif
