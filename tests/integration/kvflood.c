/*
 * A KV event publisher that misbehaves, for the router's KV event tests (test_kv_events.py): it binds a
 * ZMQ XPUB socket, waits until a subscriber has subscribed (so that nothing is published into the void)
 * and a line has come on stdin (the test's go), then sends vLLM-format messages ([topic, 8-byte big-endian
 * sequence number, msgpack KVEventBatch], docs/internals/kv-events.md) as fast as it can:
 *
 *   kvflood ENDPOINT store N          N blocks of one token each, chained, in messages of 20 000 blocks
 *   kvflood ENDPOINT big BYTES COUNT  COUNT messages whose payload is BYTES bytes long
 *   kvflood ENDPOINT clear SECONDS [BLOCKS]
 *                                     for SECONDS: messages of one BlockStored (BLOCKS new blocks, 1 by
 *                                     default) and an AllBlocksCleared
 *
 * and stays bound until stdin closes (a subscriber keeps its connection), after printing one JSON line:
 * {"messages": sent, "dropped": refused by zmq_send}. Like any PUB socket (and vLLM's), it never waits
 * for a slow subscriber: past the high-water mark libzmq drops messages silently (counted as sent here),
 * which the subscriber sees as sequence gaps. Sequence numbers run from 0.
 */
#include <msgpack.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

static void *pub;
static uint64_t seq, sent, dropped;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void send_payload(const void *p, size_t len)
{
    uint8_t be[8];
    for (int i = 0; i < 8; i++)
        be[i] = (uint8_t)(seq >> (56 - 8 * i));
    seq++;
    if (zmq_send(pub, "kv", 2, ZMQ_SNDMORE) < 0 || zmq_send(pub, be, 8, ZMQ_SNDMORE) < 0 ||
        zmq_send(pub, p, len, 0) < 0)
        dropped++;
    else
        sent++;
}

static void pack_str(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str(pk, strlen(s));
    msgpack_pack_str_body(pk, s, strlen(s));
}

/* [tag, block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium]: n blocks of one token,
 * hashes first, first + 1, ..., the first one's parent `parent` (0: none). */
static void pack_stored(msgpack_packer *pk, uint64_t first, size_t n, uint64_t parent)
{
    msgpack_pack_array(pk, 7);
    pack_str(pk, "BlockStored");
    msgpack_pack_array(pk, n);
    for (size_t i = 0; i < n; i++)
        msgpack_pack_uint64(pk, first + i);
    if (parent != 0)
        msgpack_pack_uint64(pk, parent);
    else
        msgpack_pack_nil(pk);
    msgpack_pack_array(pk, n);
    for (size_t i = 0; i < n; i++)
        msgpack_pack_uint64(pk, (first + i) & 0xffff);
    msgpack_pack_uint64(pk, 1);
    msgpack_pack_nil(pk);
    pack_str(pk, "GPU");
}

static void send_batch(const msgpack_sbuffer *events, size_t n_events)
{
    msgpack_sbuffer out;
    msgpack_packer pk;
    msgpack_sbuffer_init(&out);
    msgpack_packer_init(&pk, &out, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 2);
    msgpack_pack_double(&pk, 0.0);
    msgpack_pack_array(&pk, n_events);
    msgpack_sbuffer_write(&out, events->data, events->size);
    send_payload(out.data, out.size);
    msgpack_sbuffer_destroy(&out);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: kvflood ENDPOINT store N | big BYTES COUNT | clear SECONDS [BLOCKS]\n");
        return 2;
    }
    void *ctx = zmq_ctx_new();
    pub = zmq_socket(ctx, ZMQ_XPUB);
    int hwm = 100000, linger = 0;
    zmq_setsockopt(pub, ZMQ_SNDHWM, &hwm, sizeof(hwm));
    zmq_setsockopt(pub, ZMQ_LINGER, &linger, sizeof(linger));
    if (zmq_bind(pub, argv[1]) != 0) {
        fprintf(stderr, "kvflood: bind %s: %s\n", argv[1], zmq_strerror(zmq_errno()));
        return 1;
    }
    /* The first subscription message: a subscriber is connected and listening. */
    char sub[64];
    if (zmq_recv(pub, sub, sizeof(sub), 0) < 0) {
        fprintf(stderr, "kvflood: recv: %s\n", zmq_strerror(zmq_errno()));
        return 1;
    }
    char go[16];
    if (fgets(go, sizeof(go), stdin) == NULL)
        return 0;
    msgpack_sbuffer ev;
    msgpack_packer pk;
    msgpack_sbuffer_init(&ev);
    msgpack_packer_init(&pk, &ev, msgpack_sbuffer_write);
    if (strcmp(argv[2], "store") == 0) {
        size_t n = strtoul(argv[3], NULL, 10), per = 20000;
        for (size_t at = 0; at < n; at += per) {
            size_t k = n - at < per ? n - at : per;
            msgpack_sbuffer_clear(&ev);
            pack_stored(&pk, 1000 + at, k, at == 0 ? 0 : 1000 + at - 1);
            send_batch(&ev, 1);
        }
    } else if (strcmp(argv[2], "big") == 0 && argc >= 5) {
        size_t bytes = strtoul(argv[3], NULL, 10), count = strtoul(argv[4], NULL, 10);
        char *p = calloc(1, bytes);
        if (p == NULL)
            return 1;
        for (size_t i = 0; i < count; i++)
            send_payload(p, bytes);
        free(p);
    } else if (strcmp(argv[2], "clear") == 0) {
        double end = now_s() + strtod(argv[3], NULL);
        size_t blocks = argc >= 5 ? strtoul(argv[4], NULL, 10) : 1;
        uint64_t h = 1u << 30;
        while (now_s() < end) {
            for (int i = 0; i < 100; i++) {
                msgpack_sbuffer_clear(&ev);
                pack_stored(&pk, h, blocks, 0);
                h += blocks;
                msgpack_pack_array(&pk, 1);
                pack_str(&pk, "AllBlocksCleared");
                send_batch(&ev, 2);
            }
        }
    } else {
        fprintf(stderr, "kvflood: unknown mode %s\n", argv[2]);
        return 2;
    }
    msgpack_sbuffer_destroy(&ev);
    printf("{\"messages\": %llu, \"dropped\": %llu}\n", (unsigned long long)sent,
           (unsigned long long)dropped);
    fflush(stdout);
    while (fgets(go, sizeof(go), stdin) != NULL)
        ;
    zmq_close(pub);
    zmq_ctx_term(ctx);
    return 0;
}
