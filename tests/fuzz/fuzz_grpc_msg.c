/*
 * Fuzz target for the endpoint picker's reading side (router/epp/): the input is a gRPC request stream
 * as it arrives in DATA frames, fed to the framing reader (grpc_frame.c) in pieces whose sizes come from
 * the input's own bytes, and each whole message is decoded as a ProcessingRequest the way extproc.c
 * hands it to the embedder (its static message_of and metadata_part, reached by including the file), then as
 * a HealthCheckRequest. The reader is checked against a reference walk of the prefixes over the whole input:
 * the same messages, byte for byte, the same verdict where it stops (over the ceiling, compressed, bad flags)
 * and a partial message exactly when the input ends inside one. Every header slice handed to the embedder
 * must lie inside the decoded message's strings. Built with -DPDR_LIBFUZZER for libFuzzer; otherwise main()
 * replays the corpus (tests/fuzz/corpus/grpc/) with deterministic mutations.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../router/epp/extproc.c"
#include "grpc_frame.h"
#include "health.pb-c.h"

#define MAX_MESSAGE 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void decode(const uint8_t *msg, size_t len)
{
    proc_req_t *r = envoy__service__ext_proc__v3__processing_request__unpack(NULL, len, msg);
    if (r != NULL) {
        pdr_epp_msg_t m = {.request_body_mode = PDR_EPP_MODE_UNKNOWN};
        pdr_epp_header_t *owned = NULL;
        const char **subset = NULL;
        int rc = message_of(r, &m, &owned);
        if (rc != 0 && rc != PDR_EPROTO)
            abort();
        if (metadata_part(r->metadata_context, &m, &subset) != 0)
            abort();
        if (m.nsubset > 0 && (!m.has_subset || m.subset == NULL))
            abort();
        for (size_t i = 0; i < m.nsubset; i++)
            (void)strlen(m.subset[i]);
        if (m.served != NULL)
            (void)strlen(m.served);
        free(subset);
        for (size_t i = 0; rc == 0 && i < m.nheaders; i++) {
            if (strlen(m.headers[i].name) != m.headers[i].name_len)
                abort();
            volatile char sink = 0;
            for (size_t k = 0; k < m.headers[i].value_len; k++)
                sink ^= m.headers[i].value[k]; /* ASan sees a slice that runs past its string */
            (void)sink;
        }
        volatile uint8_t bsink = 0;
        for (size_t k = 0; k < m.body_len; k++)
            bsink ^= m.body[k]; /* likewise the body chunk */
        (void)bsink;
        free(owned);
        envoy__service__ext_proc__v3__processing_request__free_unpacked(r, NULL);
    }
    Grpc__Health__V1__HealthCheckRequest *h = grpc__health__v1__health_check_request__unpack(NULL, len, msg);
    if (h != NULL)
        grpc__health__v1__health_check_request__free_unpacked(h, NULL);
}

/* The reference: the messages of the whole input, walked by their prefixes. Returns the verdict at the
 * end (NEED_MORE when it ends between or inside messages) and fills offs/lens. */
static pdr_grpc_read_t reference(const uint8_t *d, size_t n, size_t *offs, size_t *lens, size_t *count,
                                 int *partial)
{
    size_t o = 0;
    *count = 0;
    *partial = 0;
    while (o < n) {
        if (n - o < PDR_GRPC_PREFIX_LEN) {
            *partial = 1;
            return PDR_GRPC_NEED_MORE;
        }
        if (d[o] & ~1u)
            return PDR_GRPC_BAD_FLAGS;
        if (d[o] & 1u)
            return PDR_GRPC_COMPRESSED;
        size_t len = (size_t)d[o + 1] << 24 | (size_t)d[o + 2] << 16 | (size_t)d[o + 3] << 8 | d[o + 4];
        if (len > MAX_MESSAGE)
            return PDR_GRPC_TOO_BIG;
        if (n - o - PDR_GRPC_PREFIX_LEN < len) {
            *partial = 1;
            return PDR_GRPC_NEED_MORE;
        }
        offs[*count] = o + PDR_GRPC_PREFIX_LEN;
        lens[*count] = len;
        (*count)++;
        o += PDR_GRPC_PREFIX_LEN + len;
    }
    return PDR_GRPC_NEED_MORE;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    /* The first byte chooses the piece sizes; the rest is the stream. */
    unsigned seed = data[0];
    const uint8_t *d = data + 1;
    size_t n = size - 1;
    size_t cap = n / PDR_GRPC_PREFIX_LEN + 1;
    size_t *offs = malloc(cap * sizeof(size_t)), *lens = malloc(cap * sizeof(size_t));
    if (offs == NULL || lens == NULL)
        abort();
    size_t count;
    int partial;
    pdr_grpc_read_t want = reference(d, n, offs, lens, &count, &partial);

    pdr_grpc_reader_t r;
    pdr_grpc_reader_init(&r, MAX_MESSAGE);
    size_t got = 0, o = 0;
    pdr_grpc_read_t verdict = PDR_GRPC_NEED_MORE;
    while (o < n && verdict == PDR_GRPC_NEED_MORE) {
        seed = seed * 1103515245u + 12345u;
        size_t piece = 1 + (seed >> 16) % 97;
        if (piece > n - o)
            piece = n - o;
        const uint8_t *p = d + o;
        size_t left = piece;
        o += piece;
        while (left > 0 || verdict == PDR_GRPC_MESSAGE) {
            const uint8_t *msg = NULL;
            size_t used = 0, mlen = 0;
            verdict = pdr_grpc_reader_feed(&r, p, left, &used, &msg, &mlen);
            if (used > left)
                abort();
            p += used;
            left -= used;
            if (verdict == PDR_GRPC_MESSAGE) {
                if (got >= count || mlen != lens[got] || memcmp(msg, d + offs[got], mlen) != 0)
                    abort(); /* not the reference's next message */
                if (pdr_grpc_reader_partial(&r))
                    abort();
                decode(msg, mlen);
                got++;
                verdict = PDR_GRPC_NEED_MORE;
                continue;
            }
            if (verdict != PDR_GRPC_NEED_MORE || used == 0)
                break;
        }
    }
    if (verdict == PDR_GRPC_NEED_MORE) {
        if (got != count || want != PDR_GRPC_NEED_MORE || pdr_grpc_reader_partial(&r) != partial)
            abort();
    } else if (verdict != want || got != count) {
        abort();
    }
    pdr_grpc_reader_free(&r);
    free(offs);
    free(lens);
    return 0;
}

#ifndef PDR_LIBFUZZER
#define PDR_REPLAY_MUTATIONS 2000
#include "replay_main.h"
#endif
