/*
 * vLLM mode's KV leases, as vLLM's NIXL connector keeps a prefill's KV for a remote decode
 * (docs/design/nixl_kv_cache_lease.md in vLLM): the prefill pins each request's KV under a short
 * lease (kv_lease_duration, 30 s by default); a decode that holds the request, from its arrival until
 * its pull completes or the request ends, sends the prefill a heartbeat every lease / 6, and each
 * heartbeat sets the lease's expiry to max(expiry, now + lease * 2 / 3); KV whose lease runs out is
 * freed. pdsim's --kv-lease-ms is kv_lease_duration, the same on both sides, as vLLM configures it.
 *
 * vLLM carries heartbeats in NIXL notifications beside the transfer; pdsim sends them as UDP datagrams
 * to the prefill's bootstrap port (its shim listens on the TCP port of that number): "HB:" and the
 * rooms in decimal, separated by commas, at most PDSIM_HB_MAX_ROOMS a datagram. A prefill counts what
 * it could not use (malformed datagrams, rooms it does not hold); a decode counts the sends that failed.
 *
 * Loop thread only. The prefill keeps its leases in a list swept by one timer (every lease / 10, 5 ms
 * to 1 s); an expired lease is handed to the server's callback, which cancels the offer.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "pdsim.h"
#include "util.h"

#define HB_PREFIX "HB:"
#define HB_DATAGRAM_MAX 1400  /* below a 1500-byte MTU with the IP and UDP headers */
#define PDSIM_HB_MAX_ROOMS 64 /* "HB:" and 64 rooms of up to 19 digits and a comma fit in 1400 bytes */

static struct {
    uv_loop_t *loop;
    int role;
    uint64_t lease_ms, extension_ms, interval_ms;
    int udp_open, udp6_open, timer_open;
    uv_udp_t udp;  /* prefill: bound to the bootstrap port; decode: IPv4 sends */
    uv_udp_t udp6; /* decode: IPv6 sends */
    uv_timer_t timer;
    pdr_dlink_t *leases; /* prefill: the leases held now */
    pdsim_lease_expired_cb expired;
    void (*tick)(void);
    uint64_t granted, renewed, unknown, malformed, received, sent, send_failed, expired_n;
    uint64_t last_fail_log_ms;
    char buf[HB_DATAGRAM_MAX + 1];
} L;

static void sweep(uv_timer_t *t)
{
    (void)t;
    uint64_t now = uv_now(L.loop);
    /* Every lease is looked at: renewals move expiries, so the list is not in expiry order. */
    for (pdr_dlink_t *l = L.leases, *next; l != NULL; l = next) {
        next = l->next;
        pdsim_lease_t *ls = PDR_DLINK_ITEM(l, pdsim_lease_t, link);
        if (now < ls->expires_ms)
            continue;
        pdr_dlink_unlink(&ls->link);
        ls->expired = 1;
        L.expired_n++;
        L.expired(ls);
    }
}

static void on_tick(uv_timer_t *t)
{
    (void)t;
    L.tick();
}

static void renew(uint64_t room, uint64_t now)
{
    for (pdr_dlink_t *l = L.leases; l != NULL; l = l->next) {
        pdsim_lease_t *ls = PDR_DLINK_ITEM(l, pdsim_lease_t, link);
        if (ls->room != room)
            continue;
        if (now + L.extension_ms > ls->expires_ms)
            ls->expires_ms = now + L.extension_ms;
        L.renewed++;
        return;
    }
    L.unknown++; /* pulled or expired already, or another prefill's */
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)h;
    (void)suggested;
    *buf = uv_buf_init(L.buf, HB_DATAGRAM_MAX);
}

static void on_recv(uv_udp_t *h, ssize_t n, const uv_buf_t *buf, const struct sockaddr *from, unsigned flags)
{
    (void)h;
    if (n == 0 && from == NULL)
        return; /* nothing more to read */
    if (n < 0 || (flags & UV_UDP_PARTIAL) || (size_t)n <= sizeof(HB_PREFIX) - 1 ||
        memcmp(buf->base, HB_PREFIX, sizeof(HB_PREFIX) - 1) != 0) {
        L.malformed++;
        return;
    }
    L.received++;
    uint64_t now = uv_now(L.loop);
    const char *p = buf->base + sizeof(HB_PREFIX) - 1, *end = buf->base + n;
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *e = comma != NULL ? comma : end;
        int64_t room;
        if (pdr_parse_int64(p, (size_t)(e - p), 0, INT64_MAX, &room) != 0) {
            L.malformed++;
            return;
        }
        renew((uint64_t)room, now);
        p = comma != NULL ? comma + 1 : end;
    }
}

/* "127.0.0.1", "::1" or "[::1]" with a port. */
static int addr_of(const char *host, int port, struct sockaddr_storage *out)
{
    char name[64];
    size_t len = strlen(host);
    if (len >= 2 && host[0] == '[' && host[len - 1] == ']') {
        host++;
        len -= 2;
    }
    if (len >= sizeof(name))
        return UV_EINVAL;
    memcpy(name, host, len);
    name[len] = '\0';
    if (uv_ip4_addr(name, port, (struct sockaddr_in *)out) == 0)
        return 0;
    return uv_ip6_addr(name, port, (struct sockaddr_in6 *)out);
}

int pdsim_lease_start(uv_loop_t *loop, const pdsim_opts_t *opts, pdsim_lease_expired_cb expired,
                      void (*tick)(void))
{
    memset(&L, 0, sizeof(L));
    L.loop = loop;
    L.role = opts->role;
    L.lease_ms = (uint64_t)opts->kv_lease_ms;
    L.extension_ms = L.lease_ms * 2 / 3; /* vLLM: kv_lease_duration * 2 // 3 */
    L.interval_ms = L.lease_ms / 6;      /* vLLM: kv_lease_duration // 6 */
    L.expired = expired;
    L.tick = tick;
    if (opts->role == PDSIM_ROLE_BOTH)
        return 0;
    int r = uv_udp_init(loop, &L.udp);
    if (r != 0)
        return PDR_EIO;
    L.udp_open = 1;
    uv_timer_init(loop, &L.timer);
    L.timer_open = 1;
    if (opts->role == PDSIM_ROLE_PREFILL) {
        struct sockaddr_storage sa;
        if ((r = addr_of(opts->host, opts->bootstrap_port, &sa)) != 0 ||
            (r = uv_udp_bind(&L.udp, (const struct sockaddr *)&sa, 0)) != 0 ||
            (r = uv_udp_recv_start(&L.udp, on_alloc, on_recv)) != 0) {
            pdr_error("pdsim: cannot receive KV lease heartbeats on UDP %s:%d: %s", opts->host,
                      opts->bootstrap_port, uv_strerror(r));
            return PDR_EIO;
        }
        uint64_t every = L.lease_ms / 10;
        every = every < 5 ? 5 : every > 1000 ? 1000 : every;
        uv_timer_start(&L.timer, sweep, every, every);
        return 0;
    }
    if (uv_udp_init(loop, &L.udp6) == 0)
        L.udp6_open = 1;
    uv_timer_start(&L.timer, on_tick, L.interval_ms, L.interval_ms);
    return 0;
}

void pdsim_lease_grant(pdsim_lease_t *ls, uint64_t room)
{
    ls->room = room;
    ls->expired = 0;
    ls->expires_ms = uv_now(L.loop) + L.lease_ms;
    pdr_dlink_push(&L.leases, &ls->link);
    L.granted++;
}

void pdsim_lease_drop(pdsim_lease_t *ls)
{
    if (pdr_dlink_linked(&ls->link))
        pdr_dlink_unlink(&ls->link);
}

static void send_failed(const char *host, int port, int err)
{
    L.send_failed++;
    uint64_t now = uv_now(L.loop);
    if (L.last_fail_log_ms == 0 || now - L.last_fail_log_ms >= 60000) {
        L.last_fail_log_ms = now;
        pdr_warn("pdsim: KV lease heartbeat to %s:%d not sent: %s (%" PRIu64 " failed sends so far; logged "
                 "once a minute)",
                 host, port, uv_strerror(err), L.send_failed);
    }
}

static void send_one(const char *host, int port, const struct sockaddr_storage *sa, const char *msg,
                     size_t len)
{
    uv_udp_t *h = sa->ss_family == AF_INET6 ? &L.udp6 : &L.udp;
    if (sa->ss_family == AF_INET6 && !L.udp6_open) {
        send_failed(host, port, UV_EAFNOSUPPORT);
        return;
    }
    uv_buf_t b = uv_buf_init((char *)msg, (unsigned)len);
    int r = uv_udp_try_send(h, &b, 1, (const struct sockaddr *)sa);
    if (r < 0)
        send_failed(host, port, r);
    else
        L.sent++;
}

void pdsim_lease_heartbeat(const char *host, int port, const uint64_t *rooms, size_t n)
{
    struct sockaddr_storage sa;
    int r = addr_of(host, port, &sa);
    if (r != 0) {
        send_failed(host, port, r);
        return;
    }
    char msg[HB_DATAGRAM_MAX];
    size_t len = 0, in_msg = 0;
    for (size_t i = 0; i < n; i++) {
        if (in_msg == PDSIM_HB_MAX_ROOMS) {
            send_one(host, port, &sa, msg, len);
            in_msg = 0;
        }
        if (in_msg == 0)
            len = (size_t)snprintf(msg, sizeof(msg), "%s", HB_PREFIX);
        len += (size_t)snprintf(msg + len, sizeof(msg) - len, "%s%" PRIu64, in_msg ? "," : "", rooms[i]);
        in_msg++;
    }
    if (in_msg > 0)
        send_one(host, port, &sa, msg, len);
}

void pdsim_lease_stats(json_t *o)
{
    json_t *s = json_pack("{s:I,s:I,s:I}", "lease_ms", (json_int_t)L.lease_ms, "extension_ms",
                          (json_int_t)L.extension_ms, "heartbeat_ms", (json_int_t)L.interval_ms);
    if (s == NULL)
        return;
    if (L.role == PDSIM_ROLE_PREFILL) {
        size_t held = 0;
        for (pdr_dlink_t *l = L.leases; l != NULL; l = l->next)
            held++;
        json_object_set_new(s, "leases", json_integer((json_int_t)held));
        json_object_set_new(s, "granted", json_integer((json_int_t)L.granted));
        json_object_set_new(s, "expired", json_integer((json_int_t)L.expired_n));
        json_object_set_new(s, "heartbeats_received", json_integer((json_int_t)L.received));
        json_object_set_new(s, "renewed", json_integer((json_int_t)L.renewed));
        json_object_set_new(s, "unknown_rooms", json_integer((json_int_t)L.unknown));
        json_object_set_new(s, "malformed", json_integer((json_int_t)L.malformed));
    } else {
        json_object_set_new(s, "heartbeats_sent", json_integer((json_int_t)L.sent));
        json_object_set_new(s, "send_failed", json_integer((json_int_t)L.send_failed));
    }
    json_object_set_new(o, "kv_lease", s);
}

void pdsim_lease_stop(void)
{
    if (L.timer_open && !uv_is_closing((uv_handle_t *)&L.timer))
        uv_close((uv_handle_t *)&L.timer, NULL);
    if (L.udp_open && !uv_is_closing((uv_handle_t *)&L.udp))
        uv_close((uv_handle_t *)&L.udp, NULL);
    if (L.udp6_open && !uv_is_closing((uv_handle_t *)&L.udp6))
        uv_close((uv_handle_t *)&L.udp6, NULL);
    L.timer_open = L.udp_open = L.udp6_open = 0;
}
