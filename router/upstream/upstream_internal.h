/*
 * The upstream HTTP/1.1 client's insides, shared by its files, bottom up: upstream_conn.c (a connection:
 * connect, DNS, deadlines, the request written, the response read), upstream_conn_tls.c (the TLS side of a
 * connection to an https:// origin: handshake, session kept for resumption, encrypted reads and writes)
 * and upstream.c (legs, origins, the multi). Each calls only the files before it; where a connection must
 * act on what is above it (end its leg, hand a freed slot to the waiting legs, go through TLS), it calls
 * the multi's handlers (pdr_up_handlers_t), which upstream.c sets once, in the manner of nginx's upstream
 * handlers. Nothing outside these three files includes it.
 */
#ifndef PDR_UPSTREAM_INTERNAL_H
#define PDR_UPSTREAM_INTERNAL_H
#include <stddef.h>
#include <stdint.h>
#include <uv.h>
#include "dlist.h"
#include "h1parse.h"
#include "upstream_types.h"
#include "upstream_tls.h"

#define READ_BUF_MIN 1024        /* per connection carrying a leg (idle ones share IDLE_BUF)... */
#define READ_BUF_MAX (64 * 1024) /* ...doubled up to this while reads fill it (large answers) */
#define IDLE_BUF 512
#define SPARE_BUFS 64 /* READ_BUF_MIN buffers a loop keeps for its next legs: 64 KiB at most */
#define DNS_TTL_MS 10000
#define HEAD_MAX (512 * 1024) /* a request head to a worker: forwarded client headers are at most 256 KiB */
#define IDLE_MAX_MS 60000     /* a pooled connection unused this long is closed */
#define CONNECTING_MAX 64     /* connects in progress per origin and loop; more requests wait for one */
#define URL_CACHE 16          /* worker URLs a loop keeps parsed (their origin and path) */
#define URL_CACHE_LEN 128     /* a longer URL is parsed at each leg */
#define HEAD_SPARE 2048       /* request heads up to this size come from the loop's spare buffers... */
#define SPARE_HEADS 64        /* ...of which it keeps this many: 128 KiB at most */

enum { C_RESOLVING = 0, C_CONNECTING, C_BUSY, C_IDLE, C_CLOSING };

typedef struct pdr_conn {
    uv_tcp_t tcp;
    /* The connection's deadline (conn_deadline in upstream_conn.c): the connect's, the leg's total, or the
     * pooled connection's idle time. The timer is re-armed only for an earlier one: armed later than
     * needed it fires early, and its callback arms it again for what is left. */
    uv_timer_t timer;
    uint64_t deadline_ms, timer_due_ms; /* loop time (uv_now); 0: none, not armed */
    int deadline_idle;                  /* the deadline closes an idle connection (else: conn_due) */
    uv_connect_t creq;
    uv_write_t wreq;
    uv_getaddrinfo_t *gai; /* while resolving */
    pdr_multi_t *m;
    struct pdr_origin *o;
    pdr_leg_t *leg;
    int state;
    int tcp_open, timer_open, gai_pending;
    int counted;  /* counted in its origin's `connecting` */
    int reused;   /* the current leg went out on a connection that had served before */
    int got_byte; /* a response byte came for the current leg */
    int writing;  /* the request is being written */
    int reading;
    pdr_h1resp_t resp;
    char *buf;
    size_t cap;
    size_t start, len; /* unparsed bytes: buf[start, start + len) */
    int filled;        /* the last read filled the buffer */
    const char *pend;  /* a body span the owner paused on */
    size_t pend_len;
    pdr_dlink_t idle_link; /* on its origin's idle list */
    pdr_dlink_t due;       /* on the multi's list of deadlines to act on after a poll */
    pdr_utls_t *tls;       /* https:// origins: the session (upstream_tls.c), from the TCP connect on */
    int tls_ready;         /* its handshake completed */
    int tls_writes;        /* ciphertext writes in flight */
    int tls_saved;         /* its session was kept for resumption (origin tls_session) */
    int tls_offered;       /* its handshake offered the origin's kept session */
} pdr_conn_t;

typedef struct pdr_origin {
    pdr_dlink_t link; /* on the multi's origins */
    pdr_multi_t *m;
    char host[256];      /* as in the URL, IPv6 without brackets */
    char authority[272]; /* the Host header */
    size_t authority_len;
    int port;
    int tls; /* https:// */
    struct sockaddr_storage addr;
    int have_addr;
    uint64_t addr_ms;  /* when a host name was resolved (0 for a literal address) */
    pdr_dlink_t *idle; /* pooled connections, the last one pooled first */
    size_t n_idle;
    size_t connecting; /* connections resolving or connecting */
    size_t open;       /* every connection of this origin: connecting, busy or idle */
    pdr_dqueue_t wait; /* legs waiting for a connect slot or a pooled connection, oldest first */
    /* https://: the last resumable session a connection got, offered by the next ones (made with
     * tls_session_ctx: one from before a workers.tls reload is not offered) */
    struct ssl_session_st *tls_session;
    struct ssl_ctx_st *tls_session_ctx;
    int tls_no_resume; /* a resumed handshake failed: sessions are no longer kept for this worker */
} pdr_origin_t;

#define IDLE_FIRST(o) PDR_DLINK_ITEM((o)->idle, pdr_conn_t, idle_link)

/* What a connection calls above it. upstream.c's table (pdr_multi_new sets m->up), so that the
 * connection's files, below upstream.c, call none of its functions by name. */
typedef struct pdr_up_handlers {
    /* upstream.c: the connection's leg failed (sent again on a fresh connection when it may be, else
     * ended); the leg ended (its connection closed, on_done); the leg taken off the multi's lists; a
     * pooled connection or a connect slot of the origin freed (the waiting legs take it); the multi's
     * last handle closed (uv_close callback). */
    void (*leg_fail)(pdr_conn_t *c, int err);
    void (*leg_finish)(pdr_leg_t *leg, int err);
    void (*leg_unlink)(pdr_leg_t *leg);
    void (*origin_kick)(pdr_origin_t *o);
    uv_close_cb multi_closed;
    /* upstream_conn_tls.c, for a connection with a TLS session (c->tls): the handshake started after the
     * TCP connect; ciphertext read fed to the session; the request sent through it; plaintext the session
     * holds decrypted into the buffer; the session kept for resumption; a resumed handshake failed. */
    void (*tls_start)(pdr_conn_t *c);
    void (*tls_input)(pdr_conn_t *c, const char *p, size_t n);
    void (*tls_send)(pdr_conn_t *c);
    int (*tls_fill)(pdr_conn_t *c);
    void (*tls_keep_session)(pdr_conn_t *c);
    void (*tls_resume_failed)(pdr_conn_t *c, const char *why);
} pdr_up_handlers_t;

struct pdr_multi {
    uv_loop_t *loop;
    const pdr_up_handlers_t *up; /* upstream.c's handlers */
    pdr_dlink_t *origins;
    pdr_dlink_t *active; /* every leg between start and its end */
    size_t max_idle;
    size_t connecting_peak; /* the most connects ever in progress to one origin (tests) */
    size_t conn_limit;      /* connections per origin (limits.max_connections_per_worker share); 0: none */
    size_t open_peak;       /* the most connections ever open to one origin (tests) */
    size_t open_conns;      /* allocated connections */
    uv_timer_t kick;        /* 0 ms: reports failures that happened inside pdr_leg_start */
    pdr_leg_t **failq;
    int *failq_err;
    size_t n_failq, cap_failq;
    char scratch[IDLE_BUF]; /* reads of idle connections */
    uv_check_t due_check;   /* runs after the loop's poll: deadlines that passed (conn_due) */
    uv_idle_t due_idle;     /* active with due_check: makes that poll return at once */
    pdr_dlink_t *due;       /* connections whose deadline passed (conn_due) */
    int due_closed;
    int closing;
    int in_start; /* inside pdr_leg_start: failures are reported from the kick timer */
    void (*close_cb)(void *);
    void *close_arg;
    struct ssl_ctx_st *tls_ctx; /* for https:// origins (pdr_multi_set_tls); NULL: they fail */
    char *tls_server_name;
    int tls_verify;
    uint64_t *tls_full, *tls_resumed; /* handshakes, counted in the loop's metrics */
    uint64_t *tls_resume_failed;      /* workers that failed a resumed handshake */
    char tls_in[16 * 1024 + 512];     /* ciphertext reads of TLS connections (one TLS record and a header) */
    /* Read buffers of READ_BUF_MIN bytes that pooled connections gave back, for the next legs: a leg takes
     * one instead of a malloc, and memory still follows the legs in flight, not the pool. */
    char *spare[SPARE_BUFS];
    size_t n_spare;
    /* Request heads of HEAD_SPARE bytes that ended legs gave back, for the next legs (one malloc and one
     * free less per leg). */
    char *spare_head[SPARE_HEADS];
    size_t n_spare_head;
    /* The worker URLs legs went to, parsed: a leg to one of them skips parse_url and origin_get. A URL
     * is matched by its bytes (the worker's string may be freed and another one put at its address). */
    struct up_url {
        char url[URL_CACHE_LEN];
        pdr_origin_t *o;
        /* What follows the method in every request head to this URL, preformatted:
         * "<path> HTTP/1.1\r\nHost: <authority>\r\n" (the path up to any space or line end). */
        char line[URL_CACHE_LEN + 19 + sizeof(((pdr_origin_t *)0)->authority)];
        size_t line_len;
    } urls[URL_CACHE];
    size_t n_urls, next_url, last_url; /* last_url: the entry the last leg used, looked at first */
    uint64_t buf_allocs;               /* read buffers allocated (tests) */
};

/* upstream_conn.c */
void pdr__up_maybe_close_kick(pdr_multi_t *m);
void pdr__up_idle_remove(pdr_conn_t *c);
void pdr__up_conn_close(pdr_conn_t *c);
pdr_conn_t *pdr__up_conn_new(pdr_multi_t *m, pdr_origin_t *o);
void pdr__up_arm_total(pdr_conn_t *c);
void pdr__up_conn_complete(pdr_conn_t *c);
void pdr__up_conn_dispatch(pdr_conn_t *c);
int pdr__up_send_begin(pdr_conn_t *c);
void pdr__up_conn_read(pdr_conn_t *c);
void pdr__up_conn_send(pdr_conn_t *c);
void pdr__up_conn_connect(pdr_conn_t *c);
void pdr__up_dns_failed(pdr_leg_t *leg, const char *host, const char *why);
void pdr__up_on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res);

/* upstream_conn_tls.c */
int pdr__up_tls_fill(pdr_conn_t *c);
void pdr__up_keep_session(pdr_conn_t *c);
void pdr__up_tls_resume_failed(pdr_conn_t *c, const char *why);
void pdr__up_tls_start(pdr_conn_t *c);
void pdr__up_tls_input(pdr_conn_t *c, const char *p, size_t n);
void pdr__up_tls_send(pdr_conn_t *c);

#endif
