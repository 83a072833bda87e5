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
 */
#include <msgpack.h>
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
    int64_t drop_every, malformed;
    msgpack_sbuffer events; /* the current batch's events, packed */
    msgpack_packer pk;
    size_t n_events;
    uint64_t seq, messages, dropped, malformed_sent, total_events;
} K;

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
        /* [tag, block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium] */
        msgpack_pack_array(&K.pk, 7);
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
    if (K.pub != NULL)
        zmq_close(K.pub);
    if (K.ctx != NULL)
        zmq_ctx_term(K.ctx);
    if (K.events.data != NULL)
        msgpack_sbuffer_destroy(&K.events);
    memset(&K, 0, sizeof(K));
}
