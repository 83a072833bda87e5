/*
 * TLS for the upstream client (upstream.c): one OpenSSL client session per worker connection, pumped
 * through memory BIOs. upstream.c reads ciphertext from the socket into pdr_utls_feed(), takes what the
 * session wants sent with pdr_utls_take_output() and writes it with uv_write; plaintext goes in with
 * pdr_utls_write() and comes out with pdr_utls_read(). No socket is touched here, so the libuv stream and
 * its deadlines stay upstream.c's. Loop thread only (a session belongs to its connection's loop).
 */
#ifndef PDR_UPSTREAM_TLS_H
#define PDR_UPSTREAM_TLS_H

#include <stddef.h>
#include <sys/types.h>

struct ssl_ctx_st;
struct ssl_session_st;
typedef struct pdr_utls pdr_utls_t;

#define PDR_UTLS_EOF (-1) /* pdr_utls_read: the worker closed the session (close_notify) */

/* A client session for a connection to host (as in the URL; IPv6 without brackets). server_name, when
 * not NULL, replaces host as the name sent in SNI and verified. verify: check the worker's certificate
 * chain and that it names the host (DNS name or IP address). NULL on allocation failure. */
pdr_utls_t *pdr_utls_new(struct ssl_ctx_st *ctx, const char *host, const char *server_name, int verify);
void pdr_utls_free(pdr_utls_t *u);

/* Ciphertext that arrived from the worker. 0 or PDR_ENOMEM. */
int pdr_utls_feed(pdr_utls_t *u, const char *p, size_t n);
/* Drives the handshake: 1 done, 0 more bytes needed, PDR_ECONNREFUSED failed (why says what: the
 * certificate check's verdict, or the TLS alert). */
int pdr_utls_handshake(pdr_utls_t *u, char *why, size_t cap);
/* Encrypts n bytes for the worker (always taken whole: the output BIO grows). 0 or PDR_EIO. */
int pdr_utls_write(pdr_utls_t *u, const void *p, size_t n);
/* Decrypts into out: bytes (> 0), 0 when more ciphertext is needed, PDR_UTLS_EOF, or PDR_EIO. */
ssize_t pdr_utls_read(pdr_utls_t *u, char *out, size_t cap);
/* Ciphertext waiting to be sent: its length, then moved into buf (at most cap bytes). */
size_t pdr_utls_output_len(const pdr_utls_t *u);
size_t pdr_utls_take_output(pdr_utls_t *u, char *buf, size_t cap);
/* Why the last pdr_utls_read failed with PDR_EIO (OpenSSL's reason, such as a TLS alert), or "". */
const char *pdr_utls_error(const pdr_utls_t *u);
/* 1 when received bytes wait in the session (a response that ran past its end: not reusable). */
int pdr_utls_has_input(const pdr_utls_t *u);
/* Session resumption: offers s (from pdr_utls_session of an earlier connection to the same worker, not
 * taken over) in the handshake, before its first pdr_utls_handshake. */
void pdr_utls_offer(pdr_utls_t *u, struct ssl_session_st *s);
/* A new reference to the session the worker's tickets (or session id) make resumable, or NULL. */
struct ssl_session_st *pdr_utls_session(pdr_utls_t *u);
/* After the handshake: 1 when it resumed an earlier session. */
int pdr_utls_resumed(const pdr_utls_t *u);

#endif
