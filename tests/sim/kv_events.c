/*
 * pdsim's KV event publisher (--kv-events-endpoint): what its prefix cache stores and evicts, in vLLM's
 * format (docs/internals/kv-events.md): a ZMQ PUB socket, bound; each message is [topic, 8-byte
 * big-endian sequence number, msgpack KVEventBatch]; the batch is array_like [ts, events], the events
 * tagged arrays (BlockStored with its block's hash, its parent's, its token ids and the block size;
 * BlockRemoved on LRU eviction; AllBlocksCleared first, as sequence 0). The block hashes are the
 * cache's own chained keys, as an engine's are its own.
 *
 * Loop thread only: the cache calls the listener during an insert, and the caller flushes afterwards,
 * so one insert is one message. PUB never blocks (past its high-water mark it drops, as vLLM's does).
 * Fault knobs: with --kv-events-drop-every N (or POST /pdsim/fault kv_events_drop_every), every Nth
 * message is not sent but its number is used, so a subscriber sees a gap; kv_events_malformed N sends
 * the next N messages with a truncated payload.
 *
 * Replay (--kv-events-replay-endpoint, vLLM's replay_endpoint): a ROUTER socket, bound, served by a thread
 * of its own as vLLM's publisher thread serves it, and a ring of the last --kv-events-replay-buffer
 * payloads (vLLM's buffer_steps), each as it was sent or dropped (a dropped message is lost in transit,
 * not at the source). A request is [identity, empty, 8-byte big-endian first number]; the answer, one
 * message per buffered batch from that number on, [identity, empty, seq, payload], then [identity, empty,
 * -1 as 8 signed bytes, empty] (vLLM's END_SEQ). The ring is shared with the loop thread under R.mu.
 */
#include <msgpack.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "err.h"
#include "pdsim.h"
#include "util.h"

static struct {
    void *ctx, *pub;
    const char *topic;
    const char *lora_name; /* NULL: the base model's blocks */
    int64_t drop_every, malformed;
    msgpack_sbuffer events; /* the current batch's events, packed */
    msgpack_packer pk;
    size_t n_events;
    uint64_t seq, messages, dropped, malformed_sent, total_events;
} K;

/* The replay: its socket (the thread's alone), its ring of payloads (under mu) and its counters. */
typedef struct {
    uint64_t seq;
    void *data;
    size_t len;
} kept_t;
static struct {
    void *router;
    pthread_t thread;
    int running; /* atomic */
    pthread_mutex_t mu;
    kept_t *ring;
    size_t cap, head, n;        /* the oldest at head */
    uint64_t replays, replayed; /* atomic */
} R;

static void be64(uint8_t *be, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        be[i] = (uint8_t)(v >> (56 - 8 * i));
}

/* Loop thread: keeps one sent (or dropped) payload, evicting the oldest when the ring is full. */
static void replay_keep(uint64_t seq, const void *payload, size_t len)
{
    void *copy = malloc(len ? len : 1);
    if (R.ring == NULL || copy == NULL) {
        free(copy);
        return;
    }
    memcpy(copy, payload, len);
    pthread_mutex_lock(&R.mu);
    if (R.n == R.cap) {
        free(R.ring[R.head].data);
        R.head = (R.head + 1) % R.cap;
        R.n--;
    }
    R.ring[(R.head + R.n) % R.cap] = (kept_t){seq, copy, len};
    R.n++;
    pthread_mutex_unlock(&R.mu);
}

/* The replay thread: answers each request with the kept batches from its number on, then the end marker. */
static void *replay_main(void *arg)
{
    (void)arg;
    while (__atomic_load_n(&R.running, __ATOMIC_ACQUIRE)) {
        zmq_pollitem_t it = {R.router, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 100) <= 0)
            continue;
        zmq_msg_t f[3];
        int n = 0, more = 1;
        while (more) {
            zmq_msg_t m;
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, R.router, 0) < 0) {
                zmq_msg_close(&m);
                break;
            }
            more = zmq_msg_more(&m);
            if (n < 3)
                f[n] = m;
            else
                zmq_msg_close(&m);
            n++;
        }
        if (n == 3 && zmq_msg_size(&f[2]) == 8) {
            const uint8_t *p = zmq_msg_data(&f[2]);
            uint64_t from = 0;
            for (int i = 0; i < 8; i++)
                from = from << 8 | p[i];
            uint8_t be[8];
            pthread_mutex_lock(&R.mu);
            for (size_t i = 0; i < R.n; i++) {
                const kept_t *k = &R.ring[(R.head + i) % R.cap];
                if (k->seq < from)
                    continue;
                be64(be, k->seq);
                zmq_send(R.router, zmq_msg_data(&f[0]), zmq_msg_size(&f[0]), ZMQ_SNDMORE);
                zmq_send(R.router, "", 0, ZMQ_SNDMORE);
                zmq_send(R.router, be, 8, ZMQ_SNDMORE);
                zmq_send(R.router, k->data, k->len, 0);
                __atomic_add_fetch(&R.replayed, 1, __ATOMIC_RELAXED);
            }
            pthread_mutex_unlock(&R.mu);
            be64(be, UINT64_MAX); /* -1 as 8 signed bytes */
            zmq_send(R.router, zmq_msg_data(&f[0]), zmq_msg_size(&f[0]), ZMQ_SNDMORE);
            zmq_send(R.router, "", 0, ZMQ_SNDMORE);
            zmq_send(R.router, be, 8, ZMQ_SNDMORE);
            zmq_send(R.router, "", 0, 0);
            __atomic_add_fetch(&R.replays, 1, __ATOMIC_RELAXED);
        } else {
            pdr_warn("pdsim: an invalid KV event replay request (%d frames)", n);
        }
        for (int i = 0; i < n && i < 3; i++)
            zmq_msg_close(&f[i]);
    }
    return NULL;
}

static int replay_start(const pdsim_opts_t *opts)
{
    R.cap = opts->kv_events_replay_buffer > 0 ? (size_t)opts->kv_events_replay_buffer : 10000;
    pthread_mutex_init(&R.mu, NULL);
    int linger = 0;
    if ((R.ring = calloc(R.cap, sizeof(*R.ring))) == NULL ||
        (R.router = zmq_socket(K.ctx, ZMQ_ROUTER)) == NULL ||
        zmq_setsockopt(R.router, ZMQ_LINGER, &linger, sizeof(linger)) != 0 ||
        zmq_bind(R.router, opts->kv_events_replay_endpoint) != 0) {
        pdr_error("pdsim: --kv-events-replay-endpoint %s: cannot bind: %s", opts->kv_events_replay_endpoint,
                  zmq_strerror(zmq_errno()));
        return PDR_EIO;
    }
    R.running = 1;
    if (pthread_create(&R.thread, NULL, replay_main, NULL) != 0) {
        R.running = 0;
        return PDR_EIO;
    }
    pdr_info("pdsim: KV event replay on %s (%zu batches)", opts->kv_events_replay_endpoint, R.cap);
    return 0;
}

static void replay_stop(void)
{
    if (__atomic_load_n(&R.running, __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&R.running, 0, __ATOMIC_RELEASE);
        pthread_join(R.thread, NULL);
    }
    if (R.router != NULL)
        zmq_close(R.router);
    for (size_t i = 0; R.ring != NULL && i < R.n; i++)
        free(R.ring[(R.head + i) % R.cap].data);
    free(R.ring);
    if (R.cap > 0)
        pthread_mutex_destroy(&R.mu);
    memset(&R, 0, sizeof(R));
}

static void pack_str(const char *s)
{
    msgpack_pack_str(&K.pk, strlen(s));
    msgpack_pack_str_body(&K.pk, s, strlen(s));
}

static void on_cache_event(void *arg, pdsim_pcache_event_t ev, uint64_t key, int has_parent, uint64_t parent,
                           const int64_t *ids, size_t n)
{
    (void)arg;
    if (ev == PDSIM_PCACHE_STORED) {
        /* [tag, block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium(, lora_name)] */
        msgpack_pack_array(&K.pk, K.lora_name != NULL ? 8 : 7);
        pack_str("BlockStored");
        msgpack_pack_array(&K.pk, 1);
        msgpack_pack_uint64(&K.pk, key);
        if (has_parent)
            msgpack_pack_uint64(&K.pk, parent);
        else
            msgpack_pack_nil(&K.pk);
        msgpack_pack_array(&K.pk, n);
        for (size_t i = 0; i < n; i++)
            msgpack_pack_int64(&K.pk, ids[i]);
        msgpack_pack_uint64(&K.pk, n);
        msgpack_pack_nil(&K.pk);
        pack_str("GPU");
        if (K.lora_name != NULL)
            pack_str(K.lora_name);
    } else {
        msgpack_pack_array(&K.pk, 3);
        pack_str("BlockRemoved");
        msgpack_pack_array(&K.pk, 1);
        msgpack_pack_uint64(&K.pk, key);
        pack_str("GPU");
    }
    K.n_events++;
}

static void send_batch(void)
{
    msgpack_sbuffer out;
    msgpack_packer pk;
    msgpack_sbuffer_init(&out);
    msgpack_packer_init(&pk, &out, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 2);
    msgpack_pack_double(&pk, (double)pdr_wall_us() / 1e6);
    msgpack_pack_array(&pk, K.n_events);
    msgpack_sbuffer_write(&out, K.events.data, K.events.size);
    uint64_t seq = K.seq++;
    uint8_t be[8];
    for (int i = 0; i < 8; i++)
        be[i] = (uint8_t)(seq >> (56 - 8 * i));
    K.total_events += K.n_events;
    const void *payload = out.data;
    size_t len = out.size;
    if (K.malformed > 0) {
        /* A batch array whose ts float ends after its first byte. */
        static const uint8_t truncated[] = {0x92, 0xcb};
        payload = truncated;
        len = sizeof(truncated);
        K.malformed--;
        K.malformed_sent++;
    }
    replay_keep(seq, payload, len);
    if (K.drop_every > 0 && (seq + 1) % (uint64_t)K.drop_every == 0) {
        K.dropped++;
    } else if (zmq_send(K.pub, K.topic, strlen(K.topic), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
               zmq_send(K.pub, be, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
               zmq_send(K.pub, payload, len, ZMQ_DONTWAIT) < 0) {
        pdr_warn("pdsim: KV event message %llu not sent: %s", (unsigned long long)seq,
                 zmq_strerror(zmq_errno()));
    } else {
        K.messages++;
    }
    msgpack_sbuffer_destroy(&out);
    msgpack_sbuffer_clear(&K.events);
    K.n_events = 0;
}

int pdsim_kvev_start(const pdsim_opts_t *opts, pdsim_pcache_t *cache)
{
    K.topic = opts->kv_events_topic != NULL ? opts->kv_events_topic : "";
    K.drop_every = opts->kv_events_drop_every;
    K.lora_name = opts->kv_events_lora_name;
    if ((K.ctx = zmq_ctx_new()) == NULL || (K.pub = zmq_socket(K.ctx, ZMQ_PUB)) == NULL) {
        pdr_error("pdsim: --kv-events-endpoint: cannot create a ZMQ PUB socket: %s",
                  zmq_strerror(zmq_errno()));
        pdsim_kvev_stop();
        return PDR_EIO;
    }
    int linger = 0, hwm = 100000; /* 100000: vLLM's default high-water mark */
    zmq_setsockopt(K.pub, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(K.pub, ZMQ_SNDHWM, &hwm, sizeof(hwm));
    if (zmq_bind(K.pub, opts->kv_events_endpoint) != 0) {
        pdr_error("pdsim: --kv-events-endpoint %s: cannot bind: %s", opts->kv_events_endpoint,
                  zmq_strerror(zmq_errno()));
        pdsim_kvev_stop();
        return PDR_EIO;
    }
    if (opts->kv_events_replay_endpoint != NULL && replay_start(opts) != 0) {
        pdsim_kvev_stop();
        return PDR_EIO;
    }
    msgpack_sbuffer_init(&K.events);
    msgpack_packer_init(&K.pk, &K.events, msgpack_sbuffer_write);
    pdsim_pcache_set_listener(cache, on_cache_event, NULL);
    /* The cache starts empty: say so (a subscriber connected by now learns it is in sync). */
    msgpack_pack_array(&K.pk, 1);
    pack_str("AllBlocksCleared");
    K.n_events = 1;
    send_batch();
    pdr_info("pdsim: KV events on %s (topic '%s')", opts->kv_events_endpoint, K.topic);
    return 0;
}

void pdsim_kvev_flush(void)
{
    if (K.pub != NULL && K.n_events > 0)
        send_batch();
}

void pdsim_kvev_stats(pdsim_kvev_stats_t *out)
{
    out->enabled = K.pub != NULL;
    out->messages = K.messages;
    out->dropped = K.dropped;
    out->events = K.total_events;
    out->next_seq = K.seq;
    out->malformed = K.malformed_sent;
    out->replays = __atomic_load_n(&R.replays, __ATOMIC_RELAXED);
    out->replayed = __atomic_load_n(&R.replayed, __ATOMIC_RELAXED);
}

void pdsim_kvev_fault(int64_t drop_every, int64_t malformed)
{
    if (drop_every >= 0)
        K.drop_every = drop_every;
    if (malformed >= 0)
        K.malformed = malformed;
}

void pdsim_kvev_stop(void)
{
    replay_stop();
    if (K.pub != NULL)
        zmq_close(K.pub);
    if (K.ctx != NULL)
        zmq_ctx_term(K.ctx);
    if (K.events.data != NULL)
        msgpack_sbuffer_destroy(&K.events);
    memset(&K, 0, sizeof(K));
}
