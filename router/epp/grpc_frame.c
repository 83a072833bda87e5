/*
 * gRPC's length-prefixed messages read from and written to a byte stream (grpc_frame.h). The reader
 * allocates a message's buffer once its prefix is read, of exactly the declared length, and only when that
 * length is within the ceiling; a message that fits in one piece of input is handed out in place, without
 * a copy. Runs on whatever thread owns the reader.
 */
#include "grpc_frame.h"
#include <stdlib.h>
#include <string.h>

void pdr_grpc_reader_init(pdr_grpc_reader_t *r, size_t max_message)
{
    memset(r, 0, sizeof(*r));
    r->max_message = max_message;
}

void pdr_grpc_reader_free(pdr_grpc_reader_t *r)
{
    free(r->msg);
    r->msg = NULL;
}

int pdr_grpc_reader_partial(const pdr_grpc_reader_t *r)
{
    /* A message handed out (its last byte read) is not partial, though the state is reset on the next feed.
     */
    return r->have_prefix > 0 && !(r->have_prefix == PDR_GRPC_PREFIX_LEN && r->have_msg == r->msg_len);
}

void pdr_grpc_prefix(uint8_t out[PDR_GRPC_PREFIX_LEN], uint32_t len)
{
    out[0] = 0;
    out[1] = (uint8_t)(len >> 24);
    out[2] = (uint8_t)(len >> 16);
    out[3] = (uint8_t)(len >> 8);
    out[4] = (uint8_t)len;
}

static void reset(pdr_grpc_reader_t *r)
{
    free(r->msg);
    r->msg = NULL;
    r->have_prefix = 0;
    r->msg_len = r->have_msg = 0;
}

pdr_grpc_read_t pdr_grpc_reader_feed(pdr_grpc_reader_t *r, const uint8_t *p, size_t n, size_t *used,
                                     const uint8_t **msg, size_t *len)
{
    size_t i = 0;
    *used = 0;
    /* The message handed out by the previous call is gone now. */
    if (r->have_prefix == PDR_GRPC_PREFIX_LEN && r->have_msg == r->msg_len)
        reset(r);
    while (r->have_prefix < PDR_GRPC_PREFIX_LEN && i < n)
        r->prefix[r->have_prefix++] = p[i++];
    if (r->have_prefix < PDR_GRPC_PREFIX_LEN) {
        *used = i;
        return PDR_GRPC_NEED_MORE;
    }
    if (r->have_msg == 0 && r->msg == NULL) {
        /* The prefix just completed (or completed on an earlier call with an empty rest). */
        if (r->prefix[0] & ~1u)
            return PDR_GRPC_BAD_FLAGS;
        if (r->prefix[0] & 1u)
            return PDR_GRPC_COMPRESSED;
        r->msg_len = (size_t)r->prefix[1] << 24 | (size_t)r->prefix[2] << 16 | (size_t)r->prefix[3] << 8 |
                     (size_t)r->prefix[4];
        if (r->msg_len > r->max_message) {
            *len = r->msg_len;
            return PDR_GRPC_TOO_BIG;
        }
        if (n - i >= r->msg_len) {
            /* The whole message is in this piece: handed out in place. */
            *msg = r->msg_len > 0 ? p + i : (const uint8_t *)"";
            *len = r->msg_len;
            r->have_msg = r->msg_len;
            *used = i + r->msg_len;
            return PDR_GRPC_MESSAGE;
        }
        r->msg = malloc(r->msg_len);
        if (r->msg == NULL)
            return PDR_GRPC_NOMEM;
    }
    size_t take = r->msg_len - r->have_msg;
    if (take > n - i)
        take = n - i;
    memcpy(r->msg + r->have_msg, p + i, take);
    r->have_msg += take;
    i += take;
    *used = i;
    if (r->have_msg < r->msg_len)
        return PDR_GRPC_NEED_MORE;
    *msg = r->msg;
    *len = r->msg_len;
    return PDR_GRPC_MESSAGE;
}
