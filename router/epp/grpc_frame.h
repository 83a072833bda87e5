/*
 * gRPC's message framing over HTTP/2 DATA: each message is one byte of flags (bit 0: compressed), four
 * bytes of length (big-endian), then that many bytes. The reader takes DATA in whatever pieces the
 * transport hands it and gives back whole messages; the writer puts the prefix before a message. Pure: no
 * I/O, no allocation beyond the reader's one buffer, whose ceiling is chosen at init.
 */
#ifndef PDR_EPP_GRPC_FRAME_H
#define PDR_EPP_GRPC_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define PDR_GRPC_PREFIX_LEN 5

typedef struct pdr_grpc_reader {
    uint8_t prefix[PDR_GRPC_PREFIX_LEN];
    size_t have_prefix; /* bytes of the prefix read so far */
    uint8_t *msg;       /* the message being read: malloc'd, max_message bytes at most */
    size_t msg_len, have_msg;
    size_t max_message;
    int compressed; /* the flags of the message being read */
} pdr_grpc_reader_t;

/* What pdr_grpc_reader_feed found: a whole message, or why it stopped. */
typedef enum {
    PDR_GRPC_NEED_MORE = 0,   /* every byte was taken; no whole message yet */
    PDR_GRPC_MESSAGE = 1,     /* *msg, *len: a whole message (valid until the next feed); *used bytes taken */
    PDR_GRPC_TOO_BIG = -1,    /* a prefix declared more than max_message bytes (*len: the declared size) */
    PDR_GRPC_COMPRESSED = -2, /* the compressed flag is set: no message encoding was negotiated */
    PDR_GRPC_BAD_FLAGS = -3,  /* flag bits other than bit 0 */
    PDR_GRPC_NOMEM = -4,
} pdr_grpc_read_t;

void pdr_grpc_reader_init(pdr_grpc_reader_t *r, size_t max_message);
/* Takes bytes from p[0..n) up to the end of the next whole message and says what it found; *used is how
 * many bytes it took (call again with the rest). An error leaves the reader unusable but for _free. */
pdr_grpc_read_t pdr_grpc_reader_feed(pdr_grpc_reader_t *r, const uint8_t *p, size_t n, size_t *used,
                                     const uint8_t **msg, size_t *len);
/* Whether the reader holds part of a message (a stream ending now ended mid-message). */
int pdr_grpc_reader_partial(const pdr_grpc_reader_t *r);
void pdr_grpc_reader_free(pdr_grpc_reader_t *r);

/* Writes the prefix of an uncompressed message of len bytes into out[0..5). */
void pdr_grpc_prefix(uint8_t out[PDR_GRPC_PREFIX_LEN], uint32_t len);

#endif
