/*
 * The upstream client's TLS sessions (see upstream_tls.h): an OpenSSL SSL object between two memory
 * BIOs. The input BIO answers "retry" when empty (BIO_set_mem_eof_return -1), so SSL_read and the
 * handshake report SSL_ERROR_WANT_READ until upstream.c feeds more; the output BIO only accumulates.
 * Hostname checks are OpenSSL's own (X509_VERIFY_PARAM_set1_host, or set1_ip_asc for an address
 * literal, which is also sent no SNI: RFC 6066 allows only DNS names there). Loop thread only.
 */
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>
#include "err.h"
#include "upstream_tls.h"

struct pdr_utls {
    SSL *ssl;
    BIO *in, *out; /* owned by ssl */
    char why[128]; /* the last read error */
};

static int is_ip_literal(const char *s)
{
    struct sockaddr_in6 a6;
    struct sockaddr_in a4;
    return uv_ip4_addr(s, 0, &a4) == 0 || uv_ip6_addr(s, 0, &a6) == 0;
}

pdr_utls_t *pdr_utls_new(struct ssl_ctx_st *ctx, const char *host, const char *server_name, int verify)
{
    pdr_utls_t *u = calloc(1, sizeof(*u));
    if (u == NULL)
        return NULL;
    u->ssl = SSL_new(ctx);
    u->in = BIO_new(BIO_s_mem());
    u->out = BIO_new(BIO_s_mem());
    if (u->ssl == NULL || u->in == NULL || u->out == NULL) {
        BIO_free(u->in);
        BIO_free(u->out);
        SSL_free(u->ssl);
        free(u);
        return NULL;
    }
    BIO_set_mem_eof_return(u->in, -1);
    SSL_set_bio(u->ssl, u->in, u->out);
    SSL_set_connect_state(u->ssl);
    const char *name = server_name != NULL ? server_name : host;
    int ip = is_ip_literal(name);
    if (!ip)
        SSL_set_tlsext_host_name(u->ssl, name);
    if (verify) {
        X509_VERIFY_PARAM *vp = SSL_get0_param(u->ssl);
        X509_VERIFY_PARAM_set_hostflags(vp, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        if (ip)
            X509_VERIFY_PARAM_set1_ip_asc(vp, name);
        else
            X509_VERIFY_PARAM_set1_host(vp, name, 0);
        SSL_set_verify(u->ssl, SSL_VERIFY_PEER, NULL);
    } else {
        SSL_set_verify(u->ssl, SSL_VERIFY_NONE, NULL);
    }
    return u;
}

void pdr_utls_free(pdr_utls_t *u)
{
    if (u == NULL)
        return;
    SSL_free(u->ssl); /* frees both BIOs */
    free(u);
}

int pdr_utls_feed(pdr_utls_t *u, const char *p, size_t n)
{
    size_t done = 0;
    while (done < n) {
        size_t w = 0;
        if (BIO_write_ex(u->in, p + done, n - done, &w) != 1 || w == 0)
            return PDR_ENOMEM;
        done += w;
    }
    return 0;
}

/* The first error of the thread's OpenSSL queue as text, the queue emptied. */
static void last_error(char *out, size_t cap)
{
    unsigned long e = ERR_get_error();
    const char *r = e != 0 ? ERR_reason_error_string(e) : NULL;
    snprintf(out, cap, "%s", r != NULL ? r : "connection closed");
    ERR_clear_error();
}

int pdr_utls_handshake(pdr_utls_t *u, char *why, size_t cap)
{
    ERR_clear_error();
    int rc = SSL_do_handshake(u->ssl);
    if (rc == 1)
        return 1;
    int e = SSL_get_error(u->ssl, rc);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
        return 0;
    long v = SSL_get_verify_result(u->ssl);
    if (v != X509_V_OK) {
        snprintf(why, cap, "TLS: the worker's certificate was refused: %s (workers.tls.ca_file, server_name)",
                 X509_verify_cert_error_string(v));
        ERR_clear_error();
    } else {
        char r[160];
        last_error(r, sizeof(r));
        snprintf(why, cap, "TLS handshake with the worker failed: %s", r);
    }
    return PDR_ECONNREFUSED;
}

int pdr_utls_write(pdr_utls_t *u, const void *p, size_t n)
{
    if (n == 0)
        return 0;
    ERR_clear_error();
    size_t w = 0;
    if (SSL_write_ex(u->ssl, p, n, &w) != 1 || w != n) {
        ERR_clear_error();
        return PDR_EIO;
    }
    return 0;
}

ssize_t pdr_utls_read(pdr_utls_t *u, char *out, size_t cap)
{
    if (cap == 0)
        return 0;
    ERR_clear_error();
    size_t n = 0;
    if (SSL_read_ex(u->ssl, out, cap, &n) == 1)
        return (ssize_t)n;
    int e = SSL_get_error(u->ssl, 0);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        ERR_clear_error();
        return 0;
    }
    if (e == SSL_ERROR_ZERO_RETURN) {
        ERR_clear_error();
        return PDR_UTLS_EOF;
    }
    last_error(u->why, sizeof(u->why));
    return PDR_EIO;
}

const char *pdr_utls_error(const pdr_utls_t *u)
{
    return u->why;
}

size_t pdr_utls_output_len(const pdr_utls_t *u)
{
    return BIO_ctrl_pending(u->out);
}

size_t pdr_utls_take_output(pdr_utls_t *u, char *buf, size_t cap)
{
    size_t n = 0;
    if (cap == 0 || BIO_read_ex(u->out, buf, cap, &n) != 1)
        return 0;
    return n;
}

int pdr_utls_has_input(const pdr_utls_t *u)
{
    return BIO_ctrl_pending(u->in) > 0 || SSL_pending(u->ssl) > 0;
}

void pdr_utls_offer(pdr_utls_t *u, struct ssl_session_st *s)
{
    if (s != NULL && SSL_set_session(u->ssl, s) != 1)
        ERR_clear_error(); /* a full handshake then */
}

struct ssl_session_st *pdr_utls_session(pdr_utls_t *u)
{
    SSL_SESSION *s = SSL_get1_session(u->ssl);
    if (s != NULL && !SSL_SESSION_is_resumable(s)) {
        SSL_SESSION_free(s);
        return NULL;
    }
    return s;
}

int pdr_utls_resumed(const pdr_utls_t *u)
{
    return SSL_session_reused(u->ssl) == 1;
}
