/*
 * The router's TLS contexts (docs/security.md): the server context of the data-plane listener
 * (listen.tls, handed to h2o_accept through each loop's accept context) and the client context of
 * https:// workers (workers.tls, handed to each loop's upstream client).
 *
 * Both are built from the files at start and again at every reload (so a SIGHUP picks up renewed
 * certificates); a reload whose files do not load is refused as a whole and the running contexts stay.
 * The current contexts live in the router under config_lock; each loop holds its own reference and
 * takes the new ones when it takes the new snapshot (pdr_thread_sync_config). OpenSSL keeps a context
 * alive while sessions made from it exist: connections accepted before a reload finish with the
 * certificate they began with, new ones get the new certificate.
 */
#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "err.h"
#include "front.h"
#include "router.h"
#include "util.h"

/* h2o keeps the pointer it is given: the lists are static. Its accept path serves HTTP/2 when ALPN
 * chose h2 and HTTP/1.1 otherwise (a client that offers nothing is served HTTP/1.1). */
#define ALPN(s)                                                                                              \
    {                                                                                                        \
        (char *)(uintptr_t)(s), sizeof(s) - 1                                                                \
    }
static const h2o_iovec_t alpn_h2_h1[] = {ALPN("h2"), ALPN("http/1.1"), {NULL, 0}};
static const h2o_iovec_t alpn_h1_h2[] = {ALPN("http/1.1"), ALPN("h2"), {NULL, 0}};
static const h2o_iovec_t alpn_h2[] = {ALPN("h2"), {NULL, 0}};
static const h2o_iovec_t alpn_h1[] = {ALPN("http/1.1"), {NULL, 0}};

/* "KEY FILE: reason", from errno when the file cannot be read, else from OpenSSL's queue. */
static int file_error(char *err, size_t cap, const char *key, const char *file, const char *what)
{
    unsigned long e = ERR_peek_error(); /* the first: the cause (later ones say where it surfaced) */
    const char *r = e != 0 ? ERR_reason_error_string(e) : NULL;
    snprintf(err, cap, "%s %s: %s%s%s", key, file, what, r != NULL ? ": " : "", r != NULL ? r : "");
    ERR_clear_error();
    return PDR_ECONFIG;
}

static int readable(char *err, size_t cap, const char *key, const char *file)
{
    if (access(file, R_OK) == 0)
        return 0;
    snprintf(err, cap, "%s %s: cannot read it: %s", key, file, strerror(errno));
    return PDR_ECONFIG;
}

/* The certificate chain and its key into ctx; keys name the config keys for the messages. */
static int load_pair(SSL_CTX *ctx, const char *cert, const char *key, const char *cert_key,
                     const char *key_key, char *err, size_t cap)
{
    if (readable(err, cap, cert_key, cert) != 0 || readable(err, cap, key_key, key) != 0)
        return PDR_ECONFIG;
    if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1)
        return file_error(err, cap, cert_key, cert, "not a PEM certificate chain");
    if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
        if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH) {
            ERR_clear_error();
            snprintf(err, cap, "%s %s: does not match the certificate in %s", key_key, key, cert);
            return PDR_ECONFIG;
        }
        return file_error(err, cap, key_key, key, "not a PEM private key");
    }
    if (SSL_CTX_check_private_key(ctx) != 1)
        return file_error(err, cap, key_key, key, "does not match the certificate");
    return 0;
}

static SSL_CTX *front_ctx(const pdr_config_t *c, char *err, size_t cap)
{
    ERR_clear_error();
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL) {
        snprintf(err, cap, "listen.tls: out of memory");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx,
                                  c->listen_tls.min_version == PDR_TLS_1_3 ? TLS1_3_VERSION : TLS1_2_VERSION);
    SSL_CTX_set_options(ctx,
                        SSL_OP_NO_COMPRESSION | SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_RENEGOTIATION);
    if (c->listen_tls.ciphers != NULL && SSL_CTX_set_cipher_list(ctx, c->listen_tls.ciphers) != 1) {
        ERR_clear_error();
        snprintf(err, cap,
                 "listen.tls.ciphers '%s': no cipher OpenSSL knows (an OpenSSL cipher list, e.g. "
                 "ECDHE+AESGCM)",
                 c->listen_tls.ciphers);
        SSL_CTX_free(ctx);
        return NULL;
    }
    if (load_pair(ctx, c->listen_tls.cert_file, c->listen_tls.key_file, "listen.tls.cert_file",
                  "listen.tls.key_file", err, cap) != 0) {
        SSL_CTX_free(ctx);
        return NULL;
    }
    /* Sessions are resumed only by the listener that made them (OpenSSL refuses resumption with client
     * verification and no id context). */
    static const unsigned char sid_ctx[] = "pdrouter";
    SSL_CTX_set_session_id_context(ctx, sid_ctx, sizeof(sid_ctx) - 1);
    const char *cca = c->listen_tls.client_ca_file;
    if (cca != NULL) {
        /* Mutual TLS: a client without a certificate this CA signed fails the handshake. */
        STACK_OF(X509_NAME) *names = NULL;
        if (readable(err, cap, "listen.tls.client_ca_file", cca) != 0 ||
            ((SSL_CTX_load_verify_locations(ctx, cca, NULL) != 1 ||
              (names = SSL_load_client_CA_file(cca)) == NULL) &&
             file_error(err, cap, "listen.tls.client_ca_file", cca, "no PEM certificate in it") != 0)) {
            SSL_CTX_free(ctx);
            return NULL;
        }
        SSL_CTX_set_client_CA_list(ctx, names);
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    }
    const h2o_iovec_t *alpn = alpn_h2_h1;
    if (c->listen_tls.n_alpn == 1)
        alpn = c->listen_tls.alpn[0] == PDR_ALPN_H2 ? alpn_h2 : alpn_h1;
    else if (c->listen_tls.n_alpn == 2 && c->listen_tls.alpn[0] == PDR_ALPN_HTTP11)
        alpn = alpn_h1_h2;
    h2o_ssl_register_alpn_protocols(ctx, alpn);
    SSL_CTX_set_info_callback(ctx, pdr__conn_tls_info); /* each connection learns its SSL object */
    return ctx;
}

static SSL_CTX *workers_ctx(const pdr_config_t *c, char *err, size_t cap)
{
    ERR_clear_error();
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL) {
        snprintf(err, cap, "workers.tls: out of memory");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
    static const unsigned char alpn[] = "\x08http/1.1";
    SSL_CTX_set_alpn_protos(ctx, alpn, sizeof(alpn) - 1);
    const char *ca = c->workers_tls.ca_file;
    if (ca != NULL) {
        if (readable(err, cap, "workers.tls.ca_file", ca) != 0 ||
            (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1 &&
             file_error(err, cap, "workers.tls.ca_file", ca, "no PEM certificate in it") != 0)) {
            SSL_CTX_free(ctx);
            return NULL;
        }
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        ERR_clear_error(); /* no system store: only a verify: false worker can be reached */
    }
    if (c->workers_tls.cert_file != NULL &&
        load_pair(ctx, c->workers_tls.cert_file, c->workers_tls.key_file, "workers.tls.cert_file",
                  "workers.tls.key_file", err, cap) != 0) {
        SSL_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

int pdr_router_tls_prepare(const pdr_config_t *c, pdr_tls_next_t *next, char *err, size_t cap)
{
    memset(next, 0, sizeof(*next));
    if (c->listen_tls.cert_file != NULL && (next->front = front_ctx(c, err, cap)) == NULL)
        return PDR_ECONFIG;
    if ((next->workers = workers_ctx(c, err, cap)) == NULL) {
        pdr_router_tls_abandon(next);
        return PDR_ECONFIG;
    }
    return 0;
}

void pdr_router_tls_abandon(pdr_tls_next_t *next)
{
    if (next->front != NULL)
        SSL_CTX_free(next->front);
    if (next->workers != NULL)
        SSL_CTX_free(next->workers);
    memset(next, 0, sizeof(*next));
}

void pdr_router_tls_commit(pdr_router_t *r, pdr_tls_next_t *next)
{
    pthread_mutex_lock(&r->config_lock);
    SSL_CTX *of = r->tls_front, *ow = r->tls_workers;
    r->tls_front = next->front;
    r->tls_workers = next->workers;
    pthread_mutex_unlock(&r->config_lock);
    memset(next, 0, sizeof(*next));
    if (of != NULL)
        SSL_CTX_free(of);
    if (ow != NULL)
        SSL_CTX_free(ow);
}

void pdr__tls_sync(pdr_thread_t *t)
{
    pdr_router_t *r = t->r;
    SSL_CTX *old_front = NULL, *workers = NULL;
    pthread_mutex_lock(&r->config_lock);
    if (t->accept_ctx.ssl_ctx != r->tls_front) {
        old_front = t->accept_ctx.ssl_ctx;
        if (r->tls_front != NULL)
            SSL_CTX_up_ref(r->tls_front);
        t->accept_ctx.ssl_ctx = r->tls_front;
    }
    if (t->tls_workers != r->tls_workers) {
        workers = r->tls_workers;
        if (workers != NULL)
            SSL_CTX_up_ref(workers);
    }
    pthread_mutex_unlock(&r->config_lock);
    if (old_front != NULL)
        SSL_CTX_free(old_front);
    if (workers != NULL && t->multi != NULL) {
        const pdr_config_t *c = t->config;
        if (pdr_multi_set_tls(t->multi, workers, c->workers_tls.server_name, c->workers_tls.verify) == 0)
            t->tls_workers = workers; /* compared only: the multi holds its own reference */
        SSL_CTX_free(workers);
    }
}

void pdr__tls_thread_done(pdr_thread_t *t)
{
    if (t->accept_ctx.ssl_ctx != NULL)
        SSL_CTX_free(t->accept_ctx.ssl_ctx);
    t->accept_ctx.ssl_ctx = NULL;
}

void pdr_router_tls_free(pdr_router_t *r)
{
    pdr_tls_next_t none = {NULL, NULL};
    pdr_router_tls_commit(r, &none);
}
