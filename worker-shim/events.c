/*
 * The shim's reporter: room events and load to the router, in signed batches over one kept-alive
 * HTTP/1.1 connection (docs/internals/shim-events.md has the format; router/fleet/shim_events.c the
 * receiver).
 *
 * Threads: any thread queues (pdr__shim_ev_room, _load, _active) under `lock` into a bounded ring and
 * never waits for the network; a full ring drops the event and counts it, and the count goes with the
 * next batch. One reporter thread of its own takes what is queued, at most events_flush_ms after the
 * first event (or at load_interval_ms for the load alone), signs it and sends it with blocking socket
 * calls bounded by IO_TIMEOUT_MS. A batch that cannot be delivered is counted as failed and dropped:
 * the router learns of the gap from the drop count, the shim never retries a stale batch.
 */
#include "reporter.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "err.h"
#include "keyring.h"
#include "util.h"

#define IO_TIMEOUT_MS 2000
#define BATCH_MAX_EVENTS 1024
#define BATCH_MAX_BYTES (256u << 10) /* the router takes up to 1 MiB */

typedef struct ev {
    uint64_t room, bytes, total, usec;
    int event, status;
    char role[8], backend[12], reason[64];
} ev_t;

struct pdr_shim_ev {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t thread;
    int stop;
    ev_t *ring;
    size_t cap, head, n; /* under lock */
    uint64_t first_ms;   /* when the oldest queued event arrived */
    uint64_t dropped;    /* under lock: since the last batch */
    pdshim_load_t load;  /* under lock */
    int have_load, load_changed;
    uint64_t next_load_ms, last_ms;       /* the next periodic load; the last batch */
    int active;                           /* atomic */
    uint64_t sent, failed, dropped_total; /* atomic */

    /* The reporter thread's own. */
    pdr_keyring_t kr;
    char host[256], port[8], hosthdr[300];
    char worker[300], boot[300];
    uint8_t inst[16];
    char inst_hex[33];
    uint64_t seq;
    uint32_t flush_ms, load_ms;
    int fd;

    /* The progress sampler (pdr__shim_ev_set_sampler): called by the reporter thread under sample_lock,
     * which the setter takes too, so a cleared sampler is never running. next_sample_ms under lock. */
    pthread_mutex_t sample_lock;
    void (*sample_fn)(void *arg);
    void *sample_arg;
    uint64_t next_sample_ms;
};

static uint64_t mono_ms(void)
{
    return pdr_now_ns() / 1000000u;
}

static void copy_safe(char *dst, size_t cap, const char *src)
{
    size_t n = 0;
    for (; src != NULL && *src && n + 1 < cap; src++) {
        char c = *src;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                 c == ' ' || c == '.' || c == ':' || c == '-' || c == '/';
        dst[n++] = ok ? c : '_';
    }
    dst[n] = '\0';
}

/* "http://HOST:PORT" (IPv6 in brackets), nothing after but an optional "/". */
static int parse_url(pdr_shim_ev_t *e, const char *url)
{
    if (strncmp(url, "http://", 7) != 0)
        return PDR_EINVAL;
    const char *p = url + 7, *end = p + strlen(p);
    if (end > p && end[-1] == '/')
        end--;
    pdr_hostport_t hp;
    if (pdr_split_hostport(p, (size_t)(end - p), &hp) != 0 || hp.port == NULL)
        return PDR_EINVAL;
    if (pdr_host_copy(p, (size_t)(end - p), e->host, sizeof(e->host)) != 0 || hp.plen >= sizeof(e->port))
        return PDR_EINVAL;
    memcpy(e->port, hp.port, hp.plen);
    e->port[hp.plen] = '\0';
    snprintf(e->hosthdr, sizeof(e->hosthdr), "%.*s", (int)(end - p), p);
    return 0;
}

static void close_conn(pdr_shim_ev_t *e)
{
    if (e->fd >= 0)
        close(e->fd);
    e->fd = -1;
}

static int connect_router(pdr_shim_ev_t *e)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(e->host, e->port, &hints, &ai) != 0)
        return -1;
    int fd = -1;
    for (struct addrinfo *a = ai; a != NULL && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0)
            continue;
        struct timeval tv = {IO_TIMEOUT_MS / 1000, (IO_TIMEOUT_MS % 1000) * 1000};
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    e->fd = fd;
    return fd >= 0 ? 0 : -1;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads one response: its status, or -1 (the connection is then unusable). *keep: keep-alive. */
static int read_response(int fd, int *keep)
{
    char buf[4096];
    size_t n = 0;
    char *eoh = NULL;
    while (eoh == NULL) {
        if (n == sizeof(buf) - 1)
            return -1;
        ssize_t r = recv(fd, buf + n, sizeof(buf) - 1 - n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        n += (size_t)r;
        buf[n] = '\0';
        eoh = strstr(buf, "\r\n\r\n");
    }
    int64_t status, clen = 0;
    if (n < 12 || memcmp(buf, "HTTP/1.", 7) != 0 || pdr_parse_int64(buf + 9, 3, 100, 599, &status) != 0)
        return -1;
    *keep = buf[7] == '1';
    for (char *line = strstr(buf, "\r\n") + 2; line < eoh; line = strstr(line, "\r\n") + 2) {
        char *le = strstr(line, "\r\n");
        if (strncasecmp(line, "content-length:", 15) == 0) {
            char *v = line + 15;
            while (*v == ' ')
                v++;
            if (pdr_parse_int64(v, (size_t)(le - v), 0, 1 << 20, &clen) != 0)
                return -1;
        } else if (strncasecmp(line, "connection:", 11) == 0 && strstr(line, "close") != NULL &&
                   strstr(line, "close") < le) {
            *keep = 0;
        }
    }
    size_t have = n - (size_t)(eoh + 4 - buf);
    while ((int64_t)have < clen) {
        ssize_t r = recv(fd, buf, sizeof(buf), 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        have += (size_t)r;
    }
    return (int)status;
}

/* One POST: 0 when the router answered 2xx. Reconnects once when a kept-alive connection was closed. */
static int post(pdr_shim_ev_t *e, const char *body, size_t len)
{
    e->seq++;
    uint64_t ts = pdr_wall_us() / 1000;
    char pre[128];
    int pn =
        snprintf(pre, sizeof(pre), "pdr-events-v1\n%" PRIu64 "\n%s\n%" PRIu64 "\n", ts, e->inst_hex, e->seq);
    char *msg = malloc((size_t)pn + len);
    if (msg == NULL)
        return -1;
    memcpy(msg, pre, (size_t)pn);
    memcpy(msg + pn, body, len);
    uint8_t mac[PDR_HMAC_LEN];
    pdr_hmac_sha256(&e->kr.keys[0], msg, (size_t)pn + len, mac);
    free(msg);
    char sig[64];
    pdr_b64url_encode(mac, sizeof(mac), sig, sizeof(sig));
    char head[1024];
    int hn = snprintf(head, sizeof(head),
                      "POST /shim/v1/events HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-ndjson\r\n"
                      "Content-Length: %zu\r\nPdr-Signature: v1 kid=%s ts=%" PRIu64 " inst=%s seq=%" PRIu64
                      " sig=%s\r\n\r\n",
                      e->hosthdr, len, e->kr.keys[0].id, ts, e->inst_hex, e->seq, sig);
    if (hn <= 0 || (size_t)hn >= sizeof(head))
        return -1;
    for (int attempt = 0; attempt < 2; attempt++) {
        int fresh = e->fd < 0;
        if (fresh && connect_router(e) != 0)
            return -1;
        int keep = 0, st = -1;
        if (write_all(e->fd, head, (size_t)hn) == 0 && write_all(e->fd, body, len) == 0)
            st = read_response(e->fd, &keep);
        if (st < 0 || !keep)
            close_conn(e);
        if (st >= 0)
            return st >= 200 && st < 300 ? 0 : -1;
        if (fresh)
            return -1;
    }
    return -1;
}

static const char *const ev_names[] = {"accepted", "started", "progress", "done", "failed", "refused"};

static int append(pdr_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int append(pdr_buf_t *b, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n <= 0 || (size_t)n >= sizeof(line))
        return -1;
    return pdr_buf_append(b, line, (size_t)n, BATCH_MAX_BYTES + 4096);
}

static void *reporter(void *arg)
{
    pdr_shim_ev_t *e = arg;
    ev_t *batch = malloc(BATCH_MAX_EVENTS * sizeof(ev_t));
    pdr_buf_t b = {0};
    pthread_mutex_lock(&e->lock);
    for (;;) {
        uint64_t now = mono_ms();
        int sampling = !e->stop && __atomic_load_n(&e->sample_fn, __ATOMIC_RELAXED) != NULL &&
                       __atomic_load_n(&e->active, __ATOMIC_RELAXED) > 0;
        if (sampling && now >= e->next_sample_ms) {
            /* The shim's rooms in progress: their started / progress events join the queue. */
            e->next_sample_ms = now + e->flush_ms;
            pthread_mutex_unlock(&e->lock);
            pthread_mutex_lock(&e->sample_lock);
            if (e->sample_fn != NULL)
                e->sample_fn(e->sample_arg);
            pthread_mutex_unlock(&e->sample_lock);
            pthread_mutex_lock(&e->lock);
            continue;
        }
        int due_ev = e->n > 0 && (now >= e->first_ms + e->flush_ms || e->n >= BATCH_MAX_EVENTS || e->stop);
        int due_load = e->have_load && ((e->load_changed && now >= e->last_ms + e->flush_ms) ||
                                        now >= e->next_load_ms || (e->stop && e->load_changed));
        if (!due_ev && !due_load && !(e->stop && e->dropped)) {
            if (e->stop)
                break;
            uint64_t wake = e->have_load ? e->next_load_ms : now + 60000;
            if (e->n > 0 && e->first_ms + e->flush_ms < wake)
                wake = e->first_ms + e->flush_ms;
            if (e->load_changed && e->last_ms + e->flush_ms < wake)
                wake = e->last_ms + e->flush_ms;
            if (sampling && e->next_sample_ms < wake)
                wake = e->next_sample_ms;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            uint64_t wait = wake > now ? wake - now : 0;
            ts.tv_sec += (time_t)(wait / 1000);
            ts.tv_nsec += (long)(wait % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&e->cond, &e->lock, &ts);
            continue;
        }
        size_t k = 0;
        while (batch != NULL && e->n > 0 && k < BATCH_MAX_EVENTS) {
            batch[k++] = e->ring[e->head];
            e->head = (e->head + 1) % e->cap;
            e->n--;
        }
        uint64_t dropped = e->dropped;
        e->dropped = 0;
        pdshim_load_t ld = e->load;
        int with_load = e->have_load;
        e->load_changed = 0;
        e->next_load_ms = now + e->load_ms;
        e->first_ms = now;
        e->last_ms = now;
        int stopping = e->stop;
        pthread_mutex_unlock(&e->lock);

        b.len = 0;
        int bad = append(
            &b, "{\"type\":\"batch\",\"worker\":\"%s\",\"bootstrap\":\"%s\",\"dropped\":%" PRIu64 "}\n",
            e->worker, e->boot, dropped);
        if (with_load)
            bad |= append(
                &b,
                "{\"type\":\"load\",\"kv_free_bytes\":%" PRIu64 ",\"kv_total_bytes\":%" PRIu64
                ",\"kv_free_blocks\":%" PRIu64 ",\"block_size\":%" PRIu64 ",\"kv_bytes_per_token\":%" PRIu64
                ",\"queue_depth\":%" PRIu64 ",\"active_rooms\":%d}\n",
                ld.kv_free_bytes, ld.kv_total_bytes, ld.kv_free_blocks, ld.block_size, ld.kv_bytes_per_token,
                ld.queue_depth, __atomic_load_n(&e->active, __ATOMIC_RELAXED));
        for (size_t i = 0; i < k && !bad; i++) {
            const ev_t *v = &batch[i];
            bad |= append(&b,
                          "{\"type\":\"room\",\"room\":%" PRIu64
                          ",\"event\":\"%s\",\"role\":\"%s\",\"bytes\":%" PRIu64 ",\"total\":%" PRIu64
                          ",\"usec\":%" PRIu64 ",\"backend\":\"%s\",\"code\":%d,"
                          "\"reason\":\"%s\"}\n",
                          v->room, ev_names[v->event], v->role, v->bytes, v->total, v->usec, v->backend,
                          v->status, v->reason);
        }
        if (bad != 0 || post(e, b.p, b.len) != 0) {
            __atomic_add_fetch(&e->failed, 1, __ATOMIC_RELAXED);
            __atomic_add_fetch(&e->dropped_total, k, __ATOMIC_RELAXED);
            pthread_mutex_lock(&e->lock);
            e->dropped += k; /* said in the next batch */
            pthread_mutex_unlock(&e->lock);
        } else {
            __atomic_add_fetch(&e->sent, 1, __ATOMIC_RELAXED);
        }
        pthread_mutex_lock(&e->lock);
        if (stopping && e->n == 0)
            break;
    }
    pthread_mutex_unlock(&e->lock);
    pdr_buf_free(&b);
    free(batch);
    close_conn(e);
    return NULL;
}

pdr_shim_ev_t *pdr__shim_ev_create(const pdshim_opts_t *o, int *err)
{
    if (o->events_key_file == NULL || (o->worker_url == NULL && o->bootstrap_addr == NULL)) {
        *err = PDR_EINVAL;
        return NULL;
    }
    pdr_shim_ev_t *e = calloc(1, sizeof(*e));
    if (e == NULL) {
        *err = PDR_ENOMEM;
        return NULL;
    }
    e->fd = -1;
    e->cap = o->events_queue ? o->events_queue : 4096;
    e->flush_ms = o->events_flush_ms ? o->events_flush_ms : 10;
    e->load_ms = o->load_interval_ms ? o->load_interval_ms : 1000;
    copy_safe(e->worker, sizeof(e->worker), o->worker_url);
    copy_safe(e->boot, sizeof(e->boot), o->bootstrap_addr);
    char msg[256];
    const char *kf = o->events_key_file;
    if (parse_url(e, o->events_url) != 0) {
        *err = PDR_EINVAL;
    } else if (pdr_keyring_load(&e->kr, &kf, 1, msg, sizeof(msg)) != 0) {
        fprintf(stderr, "pdshim: events_key_file: %s\n", msg);
        *err = PDR_ECONFIG;
    } else if ((e->ring = calloc(e->cap, sizeof(ev_t))) == NULL) {
        *err = PDR_ENOMEM;
    } else {
        *err = 0;
    }
    if (*err == 0) {
        if (o->instance_id != NULL)
            memcpy(e->inst, o->instance_id, 16);
        else if (pdr_random_bytes(e->inst, 16) != 0)
            *err = PDR_EIO;
        for (int i = 0; i < 16; i++)
            snprintf(e->inst_hex + 2 * i, 3, "%02x", e->inst[i]);
    }
    if (*err == 0) {
        pthread_mutex_init(&e->lock, NULL);
        pthread_mutex_init(&e->sample_lock, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_cond_init(&e->cond, &ca);
        pthread_condattr_destroy(&ca);
        if (pthread_create(&e->thread, NULL, reporter, e) != 0) {
            pthread_cond_destroy(&e->cond);
            pthread_mutex_destroy(&e->sample_lock);
            pthread_mutex_destroy(&e->lock);
            *err = PDR_ENOMEM;
        }
    }
    if (*err != 0) {
        pdr_keyring_wipe(&e->kr);
        free(e->ring);
        free(e);
        return NULL;
    }
    return e;
}

void pdr__shim_ev_destroy(pdr_shim_ev_t *e)
{
    if (e == NULL)
        return;
    pthread_mutex_lock(&e->lock);
    e->stop = 1;
    pthread_cond_signal(&e->cond);
    pthread_mutex_unlock(&e->lock);
    pthread_join(e->thread, NULL);
    pthread_cond_destroy(&e->cond);
    pthread_mutex_destroy(&e->sample_lock);
    pthread_mutex_destroy(&e->lock);
    pdr_keyring_wipe(&e->kr);
    free(e->ring);
    free(e);
}

int pdr__shim_ev_room(pdr_shim_ev_t *e, uint64_t room, int event, const char *role, uint64_t bytes,
                      uint64_t total, uint64_t usec, const char *backend, int status, const char *reason)
{
    if (event < 0 || event > PDSHIM_EV_REFUSED)
        return PDR_EINVAL;
    int rc = 0;
    pthread_mutex_lock(&e->lock);
    if (e->n == e->cap || e->stop) {
        e->dropped++;
        __atomic_add_fetch(&e->dropped_total, 1, __ATOMIC_RELAXED);
        rc = PDR_EAGAIN;
    } else {
        ev_t *v = &e->ring[(e->head + e->n) % e->cap];
        *v = (ev_t){
            .room = room, .bytes = bytes, .total = total, .usec = usec, .event = event, .status = status};
        copy_safe(v->role, sizeof(v->role), role);
        copy_safe(v->backend, sizeof(v->backend), backend);
        copy_safe(v->reason, sizeof(v->reason), reason);
        if (e->n++ == 0)
            e->first_ms = mono_ms();
        if (e->n == 1 || e->n >= BATCH_MAX_EVENTS)
            pthread_cond_signal(&e->cond);
    }
    pthread_mutex_unlock(&e->lock);
    return rc;
}

void pdr__shim_ev_load(pdr_shim_ev_t *e, const pdshim_load_t *load)
{
    pthread_mutex_lock(&e->lock);
    int changed = !e->have_load || memcmp(&e->load, load, sizeof(*load)) != 0;
    e->load = *load;
    e->have_load = 1;
    if (changed) {
        e->load_changed = 1;
        pthread_cond_signal(&e->cond);
    }
    pthread_mutex_unlock(&e->lock);
}

void pdr__shim_ev_active(pdr_shim_ev_t *e, int delta)
{
    if (__atomic_add_fetch(&e->active, delta, __ATOMIC_RELAXED) == delta && delta > 0) {
        /* The first room in progress: the sampler starts one flush interval from now. */
        pthread_mutex_lock(&e->lock);
        e->next_sample_ms = mono_ms() + e->flush_ms;
        pthread_cond_signal(&e->cond);
        pthread_mutex_unlock(&e->lock);
    }
}

void pdr__shim_ev_set_sampler(pdr_shim_ev_t *e, void (*fn)(void *arg), void *arg)
{
    pthread_mutex_lock(&e->sample_lock);
    e->sample_arg = arg;
    __atomic_store_n(&e->sample_fn, fn, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&e->sample_lock);
}

void pdr__shim_ev_instance(const pdr_shim_ev_t *e, uint8_t out[16])
{
    memcpy(out, e->inst, 16);
}

void pdr__shim_ev_stats(const pdr_shim_ev_t *e, uint64_t *sent, uint64_t *failed, uint64_t *dropped)
{
    if (sent)
        *sent = __atomic_load_n(&e->sent, __ATOMIC_RELAXED);
    if (failed)
        *failed = __atomic_load_n(&e->failed, __ATOMIC_RELAXED);
    if (dropped)
        *dropped = __atomic_load_n(&e->dropped_total, __ATOMIC_RELAXED);
}
